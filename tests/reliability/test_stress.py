"""Stress (issue 8, item 2): 8 host threads × at least 20,000 mixed operations each, for
at least 30 s, on one emulated device, with the consistency checker (``PYACC_CHECK=1``)
checking every directive as it ends.

Each thread draws its operations at random (seeded per thread) from:

* private arrays — synchronous data regions with a kernel inside, compute calls with
  implicit copies, update round trips, asynchronous chains (enter data, kernels, exit
  data on one of four queues, ordered after the previous chain by ``wait=``,
  ``wait_async`` or a host wait), and overlapping views of a private buffer mapped once
  (kernels, updates and presence checks on views ``buf[i:j]``);
* shared arrays mapped by the main thread for the whole test — present increments and
  decrements of the arrays and of overlapping views of them (routines, directives,
  ``acc.data(present=...)`` regions), synchronous and asynchronous reductions whose value
  is known, update_device of unchanged data;
* a shared buffer nobody holds — every thread maps and unmaps it and views of it
  concurrently, so mappings are created and destroyed under contention and
  ``PartlyPresentError`` is raised whenever a thread asks for the whole buffer while
  another holds only a view (the only error any operation may raise; it must change
  nothing).

At the end: no thread hangs (a watchdog dumps every thread's stack and fails the test
after 240 s), no thread raised anything unexpected, every private array and every
reduction has its exact expected value, the table holds only the shared mappings with
the main thread's dynamic count, the consistency checker agrees, and after the shared
mappings are released the table is empty and device memory is back to its baseline.
"""

from __future__ import annotations

import faulthandler
import random
import sys
import threading
import time

import numpy as np
import pytest

import pyacc as acc

from .support import add_one, add_one_present, assert_baseline, check_consistency, memory_in_use

THREADS = 8
MIN_OPS = 20_000
MIN_SECONDS = 30.0
WATCHDOG_S = 240
QUEUES = 4


@acc.parallel_loop(present="x", reduction="+:s")
def total_present(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return s


def _stderr_fd(config):
    try:
        from _pytest.faulthandler import fault_handler_stderr_fd_key

        return config.stash[fault_handler_stderr_fd_key]
    except Exception:  # noqa: BLE001 - another pytest: the stderr we have
        return sys.__stderr__.fileno()


class Worker:
    """One host thread's operations and the values it expects."""

    def __init__(self, tid, seed, shared, shared_sums, contended):
        self.tid = tid
        self.rng = random.Random(seed * 1000 + tid)
        self.shared = shared
        self.shared_sums = shared_sums
        self.contended = contended
        self.private = [np.full(48 + 8 * j + tid, float(100 * tid + j)) for j in range(3)]
        self.expected = [p.copy() for p in self.private]
        self.last_queue = [None] * len(self.private)  # queue of the last chain on each
        self.buffer = np.arange(256, dtype=np.float64) + 1000 * tid  # mapped views
        self.buffer_expected = self.buffer.copy()
        self.handles = []  # (async reduction handle, expected value)
        self.partly_present = 0
        self.ops = 0

    # -- private arrays ----------------------------------------------------------------
    def _settle(self, j):
        """Make sure no queued chain is still using private array j."""
        if self.last_queue[j] is not None:
            acc.wait(self.last_queue[j])
            self.last_queue[j] = None
            self.ops += 1

    def private_region(self):
        j = self.rng.randrange(3)
        self._settle(j)
        with acc.data(copy=[self.private[j]]):
            add_one_present(self.private[j])
        self.expected[j] += 1.0
        self.ops += 2

    def private_compute(self):
        j = self.rng.randrange(3)
        self._settle(j)
        add_one(self.private[j])
        self.expected[j] += 1.0
        self.ops += 1

    def private_async_chain(self):
        j = self.rng.randrange(3)
        a, previous, q = self.private[j], self.last_queue[j], self.rng.randrange(QUEUES)
        wait = None
        if previous is not None and previous != q:
            how = self.rng.randrange(3)
            if how == 0:
                wait = previous
            elif how == 1:
                acc.wait_async(previous, q)
            else:
                acc.wait(previous)
            self.ops += 1
        acc.enter_data(copyin=a, async_=q, wait=wait)
        k = self.rng.randrange(1, 3)
        for _ in range(k):
            add_one_present(a, async_=q)
        if self.rng.random() < 0.3:
            acc.update_self(a, async_=q)
            acc.update_device(a, async_=q)
            self.ops += 2
        acc.exit_data(copyout=a, async_=q)
        self.expected[j] += k
        self.last_queue[j] = q
        self.ops += 2 + k

    def buffer_views(self):
        """Map the private buffer once, work on overlapping views of it, unmap."""
        buffer = self.buffer
        acc.enter_data(copyin=buffer)
        for _ in range(self.rng.randrange(1, 4)):
            i = self.rng.randrange(0, 200)
            j = self.rng.randrange(i + 1, 256)
            view = buffer[i:j]
            assert acc.is_present(view) and acc.is_present(buffer[i:j:3])
            if self.rng.random() < 0.5:
                add_one_present(view)
                acc.update_self(view)
                self.buffer_expected[i:j] += 1.0
            else:
                with acc.data(present=[view], copyin=[buffer[j - 1:j]]):
                    acc.copyin(view)
                    acc.delete(view)
            self.ops += 3
        acc.exit_data(copyout=buffer)
        self.ops += 2

    # -- shared arrays -----------------------------------------------------------------
    def shared_counts(self):
        s = self.rng.randrange(len(self.shared))
        array = self.shared[s]
        i = self.rng.randrange(0, 100)
        view = array[i:i + self.rng.randrange(1, 100)]
        if self.rng.random() < 0.5:
            acc.copyin(view)
            with acc.data(present=[array], copy=[view]):
                assert acc.refcounts(array)[0] >= 1
            acc.delete(view)
        else:
            acc.enter_data(copyin=[array, view], create=[array[:4]])
            acc.exit_data(delete=[view, array[:4], array])
        self.ops += 3

    def shared_reduction(self):
        s = self.rng.randrange(len(self.shared))
        array = self.shared[s]
        if self.rng.random() < 0.5:
            assert total_present(array) == self.shared_sums[s]
            self.ops += 1
        else:
            q = self.rng.randrange(QUEUES)
            acc.copyin(array, async_=q)
            if self.rng.random() < 0.5:
                acc.update_device(array, async_=q)  # the same data: harmless to others
                self.ops += 1
            self.handles.append((total_present(array, async_=q), self.shared_sums[s]))
            acc.delete(array, async_=q)
            self.ops += 3

    def contended_mapping(self):
        """Map the unheld shared buffer or a view of it; another thread may hold the
        other, and then the whole buffer is partly present: nothing may change."""
        buffer = self.contended
        target = buffer if self.rng.random() < 0.5 else buffer[16:48]
        try:
            acc.enter_data(copyin=target)
        except acc.PartlyPresentError:
            self.partly_present += 1
            self.ops += 1
            return
        assert acc.is_present(target)
        assert total_present(target) == float(target.sum())
        acc.exit_data(delete=target)
        self.ops += 3

    def run(self, min_ops, min_seconds):
        operations = [self.private_region, self.private_compute, self.private_async_chain,
                      self.private_async_chain, self.buffer_views, self.shared_counts,
                      self.shared_reduction, self.contended_mapping]
        started = time.monotonic()
        while self.ops < min_ops or time.monotonic() - started < min_seconds:
            self.rng.choice(operations)()
        for j in range(len(self.private)):
            self._settle(j)


def _stress(request, *, min_ops, min_seconds, check_every=None, seed=8):
    """Run the workers; with ``check_every`` (seconds) the main thread runs the full
    consistency check that often while they run. Returns a summary line."""
    baseline = memory_in_use()
    shared = [np.arange(512, dtype=np.float64) * (k + 1) for k in range(3)]
    shared_sums = [float(s.sum()) for s in shared]
    contended = np.arange(64, dtype=np.float64)
    acc.enter_data(copyin=shared)
    workers = [Worker(tid, seed, shared, shared_sums, contended) for tid in range(THREADS)]
    errors = []
    barrier = threading.Barrier(THREADS)

    def run(worker):
        try:
            acc.set_device_num(0, "emulated")
            barrier.wait(30)
            worker.run(min_ops, min_seconds)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append((worker.tid, error))

    checks = 0
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=_stderr_fd(request.config))
    try:
        started = time.monotonic()
        threads = [threading.Thread(target=run, args=(worker,), daemon=True) for worker in workers]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            assert time.monotonic() - started < WATCHDOG_S, "a worker thread hangs (deadlock?)"
            if check_every is not None and not errors:
                check_consistency()  # while the workers run
                checks += 1
            time.sleep(check_every or 0.05)
        elapsed = time.monotonic() - started
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert not errors, f"{len(errors)} thread(s) failed; first: thread {errors[0][0]}: {errors[0][1]!r}"
    acc.wait_all()
    assert elapsed >= min_seconds
    total_ops = sum(worker.ops for worker in workers)
    assert all(worker.ops >= min_ops for worker in workers)
    for worker in workers:
        for array, expected in zip(worker.private, worker.expected):
            np.testing.assert_array_equal(array, expected)
        np.testing.assert_array_equal(worker.buffer, worker.buffer_expected)
        for handle, value in worker.handles:
            assert handle.result() == value
    records = acc.present_table()
    assert sorted(r.nbytes for r in records) == sorted(s.nbytes for s in shared), records
    assert all((r.structured, r.dynamic) == (0, 1) for r in records), records
    check_consistency()
    acc.exit_data(delete=shared)
    assert_baseline(baseline)
    return (f"{THREADS} threads, {total_ops} operations in {elapsed:.1f} s "
            f"({total_ops / elapsed:.0f}/s), {checks} consistency checks while running, "
            f"{sum(w.partly_present for w in workers)} partly-present refusals, "
            f"{sum(len(w.handles) for w in workers)} async reductions")


@pytest.fixture
def ledger():
    """The consistency checker's bookkeeping follows the runtime (so that
    ``acc.testing.check_consistency()`` can be called at any time) without checking
    every directive, which would slow the stress test down fivefold."""
    from pyacc.mapping.check import LEDGER

    if acc.observe.active("check") is not None:  # PYACC_CHECK=1 for the whole run
        yield
        return
    LEDGER.attach()
    try:
        yield
    finally:
        LEDGER.detach()


@pytest.mark.slow
def test_stress_8_threads_20000_mixed_operations_each_for_30_seconds(emulated, ledger, request):
    """The long run: no deadlock, nothing lost, the checker clean every half second."""
    summary = _stress(request, min_ops=MIN_OPS, min_seconds=MIN_SECONDS, check_every=0.5)
    print("\nstress:", summary)


def test_stress_with_every_directive_checked(emulated, checked, request):
    """A shorter run with ``PYACC_CHECK=1``: every directive of every thread is checked
    as it ends."""
    summary = _stress(request, min_ops=2_000, min_seconds=0.0, seed=9)
    print("\nchecked stress:", summary)
