"""A compute call of the express lane run with the present table's lock not taken
(``pyacc/_express_plan.c.h``'s ``table_free_for``; the rule: ``table_lock_free_here`` in
``pyacc/_table_lock.h``).

On ``emulated`` a call through a plan holds the table so that no other thread unmaps an
array the kernel reads. A kernel that keeps the GIL to its end (a short call repeated with
the same words, or a kernel that is not nogil) cannot interleave with another thread's
section of the table, so its call skips the lock — when the lock is free here and the
table unchanged, both read right before the kernel's run, with nothing after them that
lets another thread in. The call's arguments go to the kernel as words, with no tuple.
These tests hold the rule to its edges: a lock another thread holds is waited for (sync
and async), a kernel that gives the GIL back takes the lock, a changed table sends the call
back to Python, and the results, errors and queue states are the locked path's.
"""

import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc import _devices
from pyacc.compiler import cpu_plans
from pyacc.mapping import inline

pytestmark = pytest.mark.skipif(not acc._express.express_lane(), reason="needs the C express lane")


def unlocked_calls() -> int:
    from pyacc import _fastcall

    return _fastcall.unlocked_calls()


@pytest.fixture(params=["host", "emulated"])
def device(request, monkeypatch):
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", "1000000")  # every async call at once
    inline.RUNS.clear()
    acc.shutdown(request.param)
    acc.set_device_type(request.param)
    previous = acc._express.set_lane(True)
    yield request.param
    acc._express.set_lane(previous)
    acc.wait()
    acc.shutdown(request.param)
    acc.set_device_type("host")


@pytest.fixture
def gil_given_back():
    """Every kernel's run gives the GIL back (``PYACC_GIL_HOLD_BELOW=0``)."""
    from pyacc import _fastcall

    _fastcall.configure_prepared(cpu_plans.prepare, 0.0)
    yield
    _fastcall.configure_prepared(cpu_plans.prepare, acc._express.gil_hold_below())


@acc.parallel_loop
def axpy(y, x, a, n):  # a scalar among the arrays: its call's tuple was made per call
    for i in range(n):
        y[i] = y[i] + a * x[i]


@acc.parallel_loop
def divide(y, a, b):
    for i in range(y.shape[0]):
        y[i] = a // b


def call(kernel, *args, async_):
    return kernel(*args, async_=1) if async_ else kernel(*args)


def armed(kernel, *args, async_) -> int:
    """The kernel called until the lane runs it unlocked: how many calls that took."""
    for calls in range(1, 51):
        before = unlocked_calls()
        call(kernel, *args, async_=async_)
        acc.wait(1)
        if unlocked_calls() > before:
            return calls
    pytest.fail("the call never ran unlocked (a loaded machine stretched every run past 10 µs?)")


@pytest.mark.parametrize("async_", [False, True], ids=["sync", "async"])
def test_a_short_repeated_call_runs_without_the_table_lock(device, async_):
    y, x = np.zeros(100), np.arange(100.0)
    with acc.data(copy=[y], copyin=[x]):
        calls = armed(axpy, y, x, 1.0, 100, async_=async_) + 20
        before = unlocked_calls()
        for _ in range(20):
            call(axpy, y, x, 1.0, 100, async_=async_)
        acc.wait(1)
        assert unlocked_calls() - before >= 10, "most of 20 kept calls run unlocked"
        assert acc.async_test(1)
    np.testing.assert_array_equal(y, calls * x)  # every call ran, once


@pytest.mark.parametrize("async_", [False, True], ids=["sync", "async"])
def test_a_call_waits_for_a_table_lock_another_thread_holds(device, async_):
    """The lock is skipped only when nobody else holds it: a directive in another thread
    (here: the lock held by this test) is waited for, and the call then runs."""
    y, x = np.zeros(100), np.ones(100)
    armed_there, go, ran = threading.Event(), threading.Event(), []

    def caller():  # armed on its own thread (the lane's context memo is per thread)
        acc.set_device_type(device)
        ran.append(armed(axpy, y, x, 1.0, 100, async_=async_))
        armed_there.set()
        go.wait(5)
        ran.append(unlocked_calls())
        call(axpy, y, x, 1.0, 100, async_=async_)
        acc.wait(1)
        ran.append(unlocked_calls())

    with acc.data(copy=[y], copyin=[x]):
        worker = threading.Thread(target=caller)
        worker.start()
        assert armed_there.wait(10)
        with _devices.current_runtime().table.locked():
            go.set()
            worker.join(0.2)
            assert worker.is_alive() == (device == "emulated"), \
                "emulated waits for the holder; host holds no table"
        worker.join(5)
        assert not worker.is_alive() and len(ran) == 3
        assert ran[2] - ran[1] == (1 if device == "host" else 0), "the lock was taken (emulated)"
        assert acc.async_test(1)
    np.testing.assert_array_equal(y, float(ran[0] + 1))


@pytest.mark.parametrize("async_", [False, True], ids=["sync", "async"])
def test_a_kernel_that_gives_the_gil_back_takes_the_table_lock(device, gil_given_back, async_):
    y, x = np.zeros(100), np.ones(100)
    with acc.data(copy=[y], copyin=[x]):
        for _ in range(5):
            call(axpy, y, x, 1.0, 100, async_=async_)
            acc.wait(1)
        before = unlocked_calls()
        for _ in range(5):
            call(axpy, y, x, 1.0, 100, async_=async_)
        acc.wait(1)
        # host holds no table: nothing to take; emulated takes the lock for each call
        assert unlocked_calls() - before == (5 if device == "host" else 0)
    np.testing.assert_array_equal(y, 10.0)


def test_a_table_changed_since_the_plan_sends_the_call_to_python(device):
    y, x, other = np.zeros(100), np.ones(100), np.zeros(3)
    with acc.data(copy=[y], copyin=[x]):
        calls = armed(axpy, y, x, 1.0, 100, async_=False) + 1
        acc.copyin(other)  # a new version of the table
        before = unlocked_calls()
        axpy(y, x, 1.0, 100)
        if device == "emulated":
            assert unlocked_calls() == before, "the changed table is seen before the kernel runs"
        acc.delete(other)
        calls += armed(axpy, y, x, 1.0, 100, async_=False)  # and the lane arms again
    np.testing.assert_array_equal(y, float(calls))


@pytest.mark.parametrize("async_", [False, True], ids=["sync", "async"])
def test_a_kernel_error_unlocked_is_the_locked_calls(device, async_):
    y = np.zeros(4)
    with acc.data(copy=[y]):
        with pytest.raises(Exception) as first:  # the Python launcher, the dispatcher
            divide(y, 1, 0)
        armed(divide, y, 1, 1, async_=async_)
        before = unlocked_calls()
        for _ in range(4):  # the same words failing again and again: kept, unlocked
            if async_:
                divide(y, 1, 0, async_=1)
                with pytest.raises(acc.ExecutionError, match="ZeroDivisionError: integer division by zero"):
                    acc.wait(1)
                assert acc.async_test(1)
            else:
                with pytest.raises(type(first.value)) as again:
                    divide(y, 1, 0)
                assert str(again.value) == str(first.value)
        assert unlocked_calls() - before >= 2, "a failing call repeated is kept too"
        divide(y, 8, 2)  # the lane goes on after an error
    np.testing.assert_array_equal(y, 4.0)
