"""Soak (issue 8, item 3): 100,000 cycles of a data region with a kernel inside, on the
emulated device, in one process.

Each cycle maps three small arrays (``copy``, ``copyin``, ``create``), runs a kernel on
them (present), and leaves the region: three allocations, two copies in, one copy out,
three frees. Every 10,000 cycles the test checks that nothing accumulates (empty present
table, device memory at zero, allocator invariants intact) and samples the process's
resident memory. At the end the result is exact (the kernel added 1 per cycle), the
device statistics balance (as many frees as allocations, one launch per cycle), and the
resident set has grown by less than 10 MB since the warm-up.

The kernels run on one thread here (``numba.set_num_threads(1)``): the soak is about the
runtime's bookkeeping, and waking Numba's thread pool after each region's entry costs
milliseconds per cycle on a loaded machine (measured: 0.2 ms per cycle with one thread,
up to 0.8 ms with the pool, on a 2-core machine shared with other jobs; 0.12 ms idle).
"""

from __future__ import annotations

import os
import time

import numba
import numpy as np
import pytest

import pyacc as acc

from .support import assert_baseline, check_allocator, memory_in_use

CYCLES = 100_000
WARM_UP = 2_000
RSS_LIMIT = 10 * 1024 * 1024


@acc.parallel_loop(present="a b scratch")
def step(a, b, scratch):
    for i in range(a.shape[0]):
        scratch[i] = b[i] * 0.5
        a[i] += scratch[i] + 0.5


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def one_kernel_thread():
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc to read the RSS")
def test_soak_100000_data_region_and_kernel_cycles(emulated, one_kernel_thread):
    a = np.zeros(16)
    b = np.ones(16)
    scratch = np.zeros(16)
    for _ in range(WARM_UP):
        with acc.data(copy=[a], copyin=[b], create=[scratch]):
            step(a, b, scratch)
    acc.reset_stats()
    rss_start = resident_bytes()
    samples = []
    started = time.monotonic()
    for cycle in range(1, CYCLES + 1):
        with acc.data(copy=[a], copyin=[b], create=[scratch]):
            step(a, b, scratch)
        if cycle % 10_000 == 0:
            assert acc.present_table() == [] and memory_in_use() == 0, f"cycle {cycle}"
            check_allocator()
            samples.append(resident_bytes() - rss_start)
    elapsed = time.monotonic() - started
    np.testing.assert_array_equal(a, float(WARM_UP + CYCLES))
    np.testing.assert_array_equal(scratch, 0.0)  # create: never copied back
    stats = acc.stats()
    assert stats["alloc_count"] == stats["free_count"] == 3 * CYCLES
    assert stats["h2d_count"] == 2 * CYCLES and stats["d2h_count"] == CYCLES
    assert stats["launch_count"] == CYCLES
    assert_baseline()
    growth = resident_bytes() - rss_start
    print(f"\nsoak: {CYCLES} cycles in {elapsed:.1f} s ({elapsed / CYCLES * 1e6:.0f} µs/cycle); "
          f"RSS growth {growth / 1e6:.2f} MB; samples (MB) {[round(s / 1e6, 2) for s in samples]}")
    assert growth < RSS_LIMIT, f"RSS grew by {growth / 1e6:.1f} MB over {CYCLES} cycles: {samples}"
