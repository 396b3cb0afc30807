"""A compute call of the express lane on a device with separate memory holds the present
table for its kernel's whole run (a *held* replay: ``pyacc/_express_plan.c.h``,
``hold_table``), also when it goes through its prepared call's words with no argument
tuple (``plan_words``) and keeps the GIL around the kernel (a short call repeated,
``pyacc/_prepared_call.c.h``): a parallel loop gives the GIL back inside the kernel
(Numba's parallel launch), so the GIL never stands for the lock. These tests hold the
lane to that, sync and async (run at once), and to the results and errors of the calls
made through the words.
"""

import threading
import time

import numpy as np
import pytest

import pyacc as acc
from pyacc import _devices

from test_async_at_once_in_c import device  # noqa: F401 - host and emulated, async at once

pytestmark = pytest.mark.skipif(not acc._express.express_lane(), reason="needs the C express lane")


def prepared_calls() -> int:
    from pyacc import _fastcall

    return _fastcall.prepared_calls()


def held_calls() -> int:
    from pyacc import _fastcall

    return _fastcall.held_calls()


@acc.parallel_loop
def axpy(y, x, a, n):  # a scalar among the arrays: no tuple of them is made per call
    for i in range(n):
        y[i] = y[i] + a * x[i]


@acc.routine
def quotient(a, b):
    if b == 0:  # (a // 0 itself is 0: NumPy's error model)
        raise ZeroDivisionError("integer division by zero")
    return a // b


@acc.parallel_loop
def divide(y, a, b):
    for i in range(y.shape[0]):
        y[i] = quotient(a, b)


@acc.parallel_loop
def slow(y, x, n):  # its run grows with x's values, its words stay the same
    for i in range(n):
        s = 0.0
        for _ in range(int(x[i])):
            s = s * 0.999 + 1.0
        y[i] = s


def call(kernel, *args, async_):
    return kernel(*args, async_=1) if async_ else kernel(*args)


def armed(kernel, *args, async_) -> int:
    """The kernel called until the lane keeps the GIL for it (the same words as a short
    last call, through its prepared call): how many calls that took."""
    for calls in range(1, 51):
        before = held_calls()
        call(kernel, *args, async_=async_)
        acc.wait(1)
        if held_calls() > before:
            return calls
    pytest.fail("the call never kept the GIL (a loaded machine stretched every run past 10 µs?)")


@pytest.mark.parametrize("async_", [False, True], ids=["sync", "async"])
def test_a_repeated_call_through_its_words_gives_the_dispatchers_results(device, async_):
    y, x = np.zeros(100), np.arange(100.0)
    with acc.data(copy=[y], copyin=[x]):
        calls = armed(axpy, y, x, 1.0, 100, async_=async_) + 20
        before = prepared_calls()
        for _ in range(20):
            call(axpy, y, x, 1.0, 100, async_=async_)
        acc.wait(1)
        assert prepared_calls() - before == 20 and acc.async_test(1)
    np.testing.assert_array_equal(y, calls * x)  # every call ran, once


@pytest.mark.parametrize("async_", [False, True], ids=["sync", "async"])
def test_the_table_stays_held_for_the_whole_run_of_a_kernel_that_keeps_the_gil(async_):
    """A held call whose kernel keeps the GIL around it, but whose parallel loop gives it
    back for its run: another thread's directive waits for the kernel's end."""
    acc.set_device_type("emulated")
    n = 16
    y, x = np.zeros(n), np.ones(n)
    try:
        with acc.data(copy=[y], copyin=[x]):
            armed(slow, y, x, n, async_=async_)
            x[:] = 3e6  # the same words, a long run (~0.1 s): the GIL kept around it
            acc.update_device(x)
            table, stamps, stop = _devices.current_runtime().table, [], threading.Event()

            def directive():  # another thread's directives, back to back
                while not stop.is_set():
                    with table.locked():
                        stamps.append(time.perf_counter())
                    time.sleep(0)

            other = threading.Thread(target=directive)
            other.start()
            time.sleep(0.02)
            held, start = held_calls(), time.perf_counter()
            call(slow, y, x, n, async_=async_)
            end = time.perf_counter()
            acc.wait(1)
            stop.set()
            other.join()
            assert held_calls() == held + 1, "the long run kept the GIL around it"
            inside = [s for s in stamps if start + 0.005 < s < end - 0.005]
            assert end - start > 0.03 and not inside, "no directive ran during the kernel"
    finally:
        acc.set_device_type("host")


@pytest.mark.parametrize("async_", [False, True], ids=["sync", "async"])
def test_a_call_waits_for_a_table_lock_another_thread_holds(device, async_):
    y, x = np.zeros(100), np.ones(100)
    armed_there, go, ran = threading.Event(), threading.Event(), []

    def caller():  # armed on its own thread (the lane's context memo is per thread)
        acc.set_device_type(device)
        ran.append(armed(axpy, y, x, 1.0, 100, async_=async_))
        armed_there.set()
        go.wait(5)
        call(axpy, y, x, 1.0, 100, async_=async_)
        acc.wait(1)
        ran.append(True)

    with acc.data(copy=[y], copyin=[x]):
        worker = threading.Thread(target=caller)
        worker.start()
        assert armed_there.wait(10)
        with _devices.current_runtime().table.locked():
            go.set()
            worker.join(0.2 if device == "emulated" else 2.0)
            assert worker.is_alive() == (device == "emulated"), \
                "emulated waits for the holder; host holds no table"
        worker.join(5)
        assert not worker.is_alive() and len(ran) == 2 and acc.async_test(1)
    np.testing.assert_array_equal(y, float(ran[0] + 1))


def test_a_table_changed_since_the_plan_sends_the_call_to_python(device):
    y, x, other = np.zeros(100), np.ones(100), np.zeros(3)
    with acc.data(copy=[y], copyin=[x]):
        calls = armed(axpy, y, x, 1.0, 100, async_=False) + 1
        acc.copyin(other)  # a new version of the table
        axpy(y, x, 1.0, 100)
        acc.delete(other)
        calls += armed(axpy, y, x, 1.0, 100, async_=False)  # and the lane arms again
    np.testing.assert_array_equal(y, float(calls))


@pytest.mark.parametrize("async_", [False, True], ids=["sync", "async"])
def test_a_kernel_error_through_its_words_is_the_dispatchers(device, async_):
    y = np.zeros(4)
    with acc.data(copy=[y]):
        with pytest.raises(Exception) as first:  # the Python launcher, the dispatcher
            divide(y, 1, 0)
        armed(divide, y, 1, 1, async_=async_)
        before = prepared_calls()
        for _ in range(4):  # the same words failing again and again: kept, through the words
            if async_:
                divide(y, 1, 0, async_=1)
                with pytest.raises(acc.ExecutionError, match="ZeroDivisionError: integer division by zero"):
                    acc.wait(1)
                assert acc.async_test(1)
            else:
                with pytest.raises(type(first.value)) as again:
                    divide(y, 1, 0)
                assert str(again.value) == str(first.value)
        assert prepared_calls() - before >= 3, "the failing calls went through the words"
        divide(y, 8, 2)  # the lane goes on after an error
    np.testing.assert_array_equal(y, 4.0)
