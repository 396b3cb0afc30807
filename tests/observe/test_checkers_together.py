"""Every checker at once: ``PYACC_CHECK=counters,memory,stale:error`` with
``PYACC_AUTOCOMPARE=1`` (what tests/test_benchmarks_checked.py runs the benchmarks under).

The autocompare host twin of a kernel writes the program's host arrays; the stale checker
must not take those writes for host changes never sent to the device (it did: a plain
``copy`` region around a kernel raised a "lost host update" at the copy back), and must
still report the program's own host changes, also on arrays the twin writes.
"""

import numpy as np
import pytest

import pyacc as acc
from pyacc.mapping import StaleDataError
from pyacc.observe import active


@acc.parallel_loop
def double(a, b):
    for i in range(a.shape[0]):
        b[i] = 2.0 * a[i]


@acc.parallel_loop(collapse=2, reduction="max:err")
def stencil(u, unew):
    n, m = u.shape
    err = 0.0
    for i in range(1, n - 1):
        for j in range(1, m - 1):
            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
            err = max(err, abs(unew[i, j] - u[i, j]))
    return err


@pytest.fixture
def everything(emulated, observe):
    installed = observe(PYACC_CHECK="counters,memory,stale:error", PYACC_AUTOCOMPARE=1)
    assert installed["autocompare"].stale is installed["stale"]
    return installed


def test_a_kernel_in_a_copy_region_is_silent(everything):
    u = np.zeros((64, 64))
    u[0] = 1.0
    unew = u.copy()
    stencil(u, unew)  # implicit copy of both: the twin writes unew's host copy first
    with acc.data(copy=[u, unew]):
        for _ in range(3):
            stencil(u, unew)
            stencil(unew, u)
    a, b = np.arange(10.0), np.zeros(10)
    with acc.data(copyin=[a], copyout=[b]):
        double(a, b)
        double(a, b, async_=1)
        acc.wait(1)
    assert (b == 2 * a).all()
    compare, stale = everything["autocompare"], everything["stale"]
    assert compare.differences == [] and compare.compared >= 3
    assert stale.findings == []


def test_a_lost_host_update_on_an_array_the_twin_writes_is_still_reported(everything):
    a, b = np.arange(10.0), np.zeros(10)
    with pytest.raises(StaleDataError, match="copying 'b' back .* overwrites 1 of 10"):
        with acc.data(copyin=[a], copy=[b]):
            b[3] = 7.0  # the program's change, never sent; the device's b[3] wins
            double(a, b)
    assert len(everything["stale"].findings) == 1


def test_a_missing_update_device_is_still_reported(everything):
    a, b = np.arange(10.0), np.zeros(10)
    with pytest.raises(StaleDataError, match="reads 'a' on the device"):
        with acc.data(copyin=[a], copyout=[b]):
            a[5] = 1.0
            double(a, b)


def test_the_checkers_are_wired_only_while_both_are_on(emulated, observe):
    assert observe(PYACC_AUTOCOMPARE=1)["autocompare"].stale is None
    installed = observe(PYACC_CHECK="stale")
    assert installed["autocompare"].stale is installed["stale"] is active("stale")
