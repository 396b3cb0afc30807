"""Calls that run on a queue without naming one, in the express lane (``pyacc/_fastcall.c``:
``_clause_async``, ``resolve_queue``; ``ComputeRegion._call_slow``).

OpenACC 3.3 §2.16.1: a construct's ``async`` clause puts its work on that queue, and
``async`` without a value (``acc.async_noval``) on the thread's default queue
(``acc.set_default_async``, §3.2.16 ``acc_set_default_async``). A region declared with a
constant async clause (``@acc.parallel_loop(async_=1)``, the usual spelling of
``#pragma acc parallel loop async(1)``) and a call ``async_=acc.async_noval`` take the
express lane as a call ``async_=<queue>`` does: their repeats never reach the Python
launcher, and they run on the queue the rules name at each call.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import pyacc as acc
from tests.launcher_calls import slow_calls

pytestmark = pytest.mark.skipif(not acc._express.express_lane(), reason="needs the C express lane")

N = 64
CALLS = 40


@acc.parallel_loop(async_=2)
def add_on_two(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


@acc.parallel_loop(async_=acc.async_noval)
def add_on_default(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


@acc.parallel_loop
def add(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


@pytest.fixture(params=["host", "emulated"])
def device(request, monkeypatch):
    """The device, its queues running every predicted kernel at once when idle (the CPU
    devices' async calls take the lane then: ``test_async_at_once_in_c.py``)."""
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", "1000000")
    acc.shutdown(request.param)
    acc.set_device_type(request.param)
    acc.set_default_async(acc.async_noval)
    yield request.param
    acc.wait()
    acc.set_default_async(acc.async_noval)
    acc.shutdown(request.param)
    acc.set_device_type("host")


def _queues(handles) -> set:
    return {handle._queue.async_value for handle in handles}


def _calls(region, x, y, **keywords) -> list:
    """``CALLS`` calls, the first waited for: its queue's worker records the kernel's run
    time, which the lane's take predicts from (``mapping/inline.py``)."""
    first = region(x, y, **keywords)
    acc.wait(first._queue.async_value)
    return [first] + [region(x, y, **keywords) for _ in range(CALLS - 1)]


def test_a_constant_async_clause_runs_its_calls_on_its_queue_in_the_lane(device, monkeypatch):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(add_on_two, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        handles = _calls(add_on_two, x, y)
        acc.wait(2)
    assert _queues(handles) == {2} and len(slow) <= 3
    np.testing.assert_array_equal(y, CALLS * x)


def test_async_noval_runs_on_the_threads_default_queue_read_at_each_call(device, monkeypatch):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(add, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        acc.set_default_async(3)
        handles = _calls(add, x, y, async_=acc.async_noval)
        acc.set_default_async(4)
        later = _calls(add, x, y, async_=acc.async_noval)
        acc.wait(3, 4)
    assert _queues(handles) == {3} and _queues(later) == {4}
    assert len(slow) <= 6  # (per queue: the first call, the replay that arms a plan, one more)
    np.testing.assert_array_equal(y, 2 * CALLS * x)


def test_a_noval_clause_follows_each_threads_default_queue(device, monkeypatch):
    x = np.arange(N, dtype=np.float64)
    ys = [np.zeros(N), np.zeros(N)]
    slow = slow_calls(add_on_default, monkeypatch)
    found = {}

    def run(k):
        acc.set_device_type(device)  # (each thread its own ICVs)
        acc.set_default_async(5 + k)
        found[k] = _calls(add_on_default, x, ys[k])
        acc.wait(5 + k)

    with acc.data(copyin=[x], copy=ys):
        threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        handles = _calls(add_on_default, x, ys[0])  # this thread's default: queue 0
        acc.wait(0)
    assert _queues(found[0]) == {5} and _queues(found[1]) == {6} and _queues(handles) == {0}
    assert len(slow) <= 9
    np.testing.assert_array_equal(ys[0], 2 * CALLS * x)
    np.testing.assert_array_equal(ys[1], CALLS * x)


def test_an_async_given_at_the_call_overrides_the_clause(device, monkeypatch):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(add_on_two, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        handles = _calls(add_on_two, x, y, async_=7)
        acc.wait(7)
        assert acc.async_test(2)  # nothing went to the clause's queue
    assert _queues(handles) == {7} and len(slow) <= 3
    np.testing.assert_array_equal(y, CALLS * x)


@pytest.mark.parametrize("lane", [True, False])
def test_the_lane_and_the_python_launcher_agree(device, lane):
    """The same calls with the lane off (every call through the Python launcher): the
    same queues, the same results."""
    previous = acc._express.set_lane(lane)
    try:
        x, y = np.arange(N, dtype=np.float64), np.zeros(N)
        with acc.data(copyin=[x], copy=[y]):
            acc.set_default_async(8)
            handles = _calls(add_on_two, x, y) + _calls(add_on_default, x, y) + \
                _calls(add, x, y, async_=acc.async_noval)
            acc.wait()
        assert [handle._queue.async_value for handle in handles] == [2] * CALLS + [8] * 2 * CALLS
        np.testing.assert_array_equal(y, 3 * CALLS * x)
    finally:
        acc._express.set_lane(previous)


def test_the_python_launcher_runs_a_clause_region_on_its_queue(device):
    """``ComputeRegion._call_slow`` (every call where the C lane is not built, and the
    calls the lane sends back) runs a call without ``async_`` on the clause's queue, and
    resolves ``acc.async_noval`` to the thread's default queue."""
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        acc.set_default_async(9)
        handles = [add_on_two._call_slow(x, y) for _ in range(3)]
        handles += [add_on_default._call_slow(x, y) for _ in range(3)]
        handles += [add._call_slow(x, y, async_=acc.async_noval) for _ in range(3)]
        acc.wait()
    assert [handle._queue.async_value for handle in handles] == [2] * 3 + [9] * 6
    np.testing.assert_array_equal(y, 9 * x)
