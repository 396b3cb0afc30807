"""Calls of a region with a constant ``wait`` clause, in the express lane (``pyacc/_fastcall.c``:
``_clause_wait``; ``waits_settled``, ``pyacc/_call_queue.c.h``; ``ComputeRegion._call_slow``).

OpenACC 3.3 §2.16.2: a construct's ``wait`` clause makes its work start only after
everything already queued on the listed queues (none listed: every queue) has run; on an
asynchronous queue the join is the device's (the host goes on), on the synchronous queue
the host waits. A pipelined program's regions are declared so
(``#pragma acc parallel loop async(2) wait(1)``). When every queue waited for was never
made or has run everything and has no error to report, the join holds already: such a
call takes the lane as a call without the clause does. Any other call makes the join
first, exactly: work still queued is waited for, a queued failure becomes the waiting
queue's, a call's own ``wait`` replaces the clause.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc._call_inputs import constant_queues
from pyacc._devices import current_runtime
from tests.launcher_calls import slow_calls

# the fixtures ``device`` (host, emulated: an idle queue runs a kernel at once) and ``lane``
# (the express lane on, or off: every call through the Python launcher)
from test_async_at_once import device, lane, shifted  # noqa: F401

pytestmark = pytest.mark.skipif(not acc._express.express_lane(), reason="needs the C express lane")

N = 64
CALLS = 40


@acc.parallel_loop(async_=2, wait=1)
def add_on_two_after_one(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


@acc.parallel_loop(wait=1)
def add_after_one(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


@acc.parallel_loop(async_=2, wait=True)
def add_on_two_after_all(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


@acc.parallel_loop(async_=2, wait=[1, 3])
def add_on_two_after_one_and_three(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


@acc.parallel_loop(async_=2, wait=[1, acc.async_noval])
def add_on_two_after_one_and_default(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


@acc.parallel_loop
def fill(x, value):
    for i in range(x.shape[0]):
        x[i] = value


REGIONS = [add_on_two_after_one, add_after_one, add_on_two_after_all, add_on_two_after_one_and_three]


def _warm(region, x, y, times=3):
    """The calls that arm the region's plan, each waited for (the queue's worker records
    the kernel's run time, which the lane's take predicts from)."""
    for _ in range(times):
        region(x, y)
        acc.wait()


@pytest.mark.parametrize("region", REGIONS, ids=lambda region: region.__name__)
def test_a_wait_clause_on_settled_queues_takes_the_lane_rule_2_16_2(device, region, monkeypatch,
                                                                     python_frames):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(region, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        acc.update_device(x, async_=1)  # queue 1 made, and settled
        acc.wait(1)
        _warm(region, x, y)
        for _ in range(CALLS):
            region(x, y)
        entered = set(python_frames(region, x, y))  # (on host, the kernel's own frame)
        assert not entered & {"_call_slow", "wait_for", "join", "wait"}
        acc.wait()
    assert len(slow) <= 3
    np.testing.assert_array_equal(y, (3 + CALLS + 1) * x)


def test_the_clauses_queues_are_what_the_lane_reads(device):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for region in REGIONS + [add_on_two_after_one_and_default]:
            region(x, y)
        acc.wait()
    assert [region._clause_wait for region in REGIONS] == [(1,), (1,), (), (1, 3)]
    assert add_on_two_after_one_and_default._clause_wait is None  # (resolved at each call)
    assert not add_on_two_after_one_and_default._direct


def test_an_async_call_waits_for_work_still_queued_on_the_queues_it_names(device, lane):
    """Queue 1 holds a kernel not yet run: the call (whose queue would run it at once)
    is held back behind it on queue 2, and reads what that kernel wrote."""
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        _warm(add_on_two_after_one, x, y)
        one = current_runtime().device.queue(1)
        with one.hold():
            fill(x, 10.0, async_=1)
            add_on_two_after_one(x, y)
            assert not acc.async_test(2)  # held back behind queue 1's copy
        acc.wait(2)
    np.testing.assert_array_equal(y, 3 * np.arange(N) + 10.0)


def test_a_synchronous_call_waits_on_the_host_for_the_queues_it_names(device, lane):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        _warm(add_after_one, x, y)
        one = current_runtime().device.queue(1)
        held = one.hold()
        held.__enter__()
        fill(x, 10.0, async_=1)
        released = threading.Timer(0.05, held.__exit__, (None, None, None))
        released.start()
        add_after_one(x, y)  # returns once queue 1 has made the copy
        released.join()
        assert acc.async_test(1)
    np.testing.assert_array_equal(y, 3 * np.arange(N) + 10.0)


def test_a_queued_failure_becomes_the_waiting_queues(device, lane, monkeypatch):
    """Queue 1 failed and has not reported it: the join carries the failure to queue 2,
    whose call is skipped and whose wait raises it (§2.16.2); the lane and the Python
    launcher agree."""
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x, y, z = np.arange(N, dtype=np.float64), np.zeros(N), np.zeros(N)
    with acc.data(copyin=[x], copy=[y, z]):
        _warm(add_on_two_after_one, x, y)
        shifted(x, z, 1, async_=1)  # reads x[N]: fails on queue 1
        add_on_two_after_one(x, y)
        with pytest.raises(acc.ExecutionError, match="shifted"):
            acc.wait(2)
        with pytest.raises(acc.ExecutionError, match="shifted"):
            acc.wait(1)
        acc.update_self(y)
        np.testing.assert_array_equal(y, 3 * x)  # the call behind the failure skipped


def test_a_wait_given_at_the_call_replaces_the_clause(device):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        _warm(add_on_two_after_one, x, y)
        one = current_runtime().device.queue(1)
        with one.hold():
            fill(y, 0.0, async_=1)
            add_on_two_after_one(x, y, wait=3)  # not behind queue 1
            acc.wait(2)
        acc.wait(1)
    np.testing.assert_array_equal(y, 0.0)  # (queue 1's fill ran after it)


def test_the_lane_and_the_python_launcher_agree(device, lane):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for region in REGIONS:
            _warm(region, x, y, times=1)
            handles = [region(x, y) for _ in range(CALLS)]
            acc.update_device(x, async_=1)
            acc.wait()
            assert {getattr(handle, "_queue", None) is not None for handle in handles} == \
                {region is not add_after_one}
    np.testing.assert_array_equal(y, len(REGIONS) * (CALLS + 1) * x)


def test_which_constant_clauses_let_a_call_be_direct():
    assert constant_queues(None, None) == (None, None)
    assert constant_queues(2, 1) == (2, (1,))
    assert constant_queues(None, []) == (None, ())  # every queue
    assert constant_queues(acc.async_noval, [1, 3]) == (acc.async_noval, (1, 3))
    assert constant_queues(acc.async_sync, None) == (None, None)  # synchronous (§2.16.1)
    assert constant_queues(acc.async_sync, 1) == (None, (1,))
    assert constant_queues(2, [1, acc.async_noval]) is None  # resolved at each call
    assert constant_queues(2, -5) is None  # refused at each call
    assert constant_queues(2, np.int64(1)) is None


@pytest.mark.parametrize("value", [[1], (1, -1), ("1",), (2**70,)])
def test_a_regions_clause_wait_is_a_tuple_of_queues(value):
    with pytest.raises(TypeError, match="_clause_wait"):
        add_after_one._clause_wait = value


def test_a_wait_for_a_queue_beyond_a_c_long_takes_the_full_path(device):
    @acc.parallel_loop(async_=2, wait=2**63)
    def after_a_big_queue(x):
        for i in range(x.shape[0]):
            x[i] = x[i] + 1.0

    x = np.zeros(N)
    for _ in range(3):
        after_a_big_queue(x)
    acc.wait()
    assert not after_a_big_queue._direct and after_a_big_queue._clause_wait is None
    np.testing.assert_array_equal(x, 3.0)


def test_an_invalid_wait_clause_is_refused_at_the_call(device):
    @acc.parallel_loop(async_=2, wait=-5)
    def bad(x):
        for i in range(x.shape[0]):
            x[i] = 0.0

    with pytest.raises(acc.InvalidAsyncError, match="-5"):
        bad(np.zeros(N))


def test_a_synchronous_call_raises_the_failure_of_a_queue_it_waits_for(device, lane, monkeypatch):
    """The host waits for queue 1 before the call's kernel (§2.16.2): queue 1's failure,
    not reported yet, is raised by that wait, at the call, once; the kernel does not run."""
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x, y, z = np.arange(N, dtype=np.float64), np.zeros(N), np.zeros(N)
    with acc.data(copyin=[x], copy=[y, z]):
        _warm(add_after_one, x, y)
        shifted(x, z, 1, async_=1)  # reads x[N]: fails on queue 1
        with pytest.raises(acc.ExecutionError, match="shifted"):
            add_after_one(x, y)
        acc.wait(1)  # reported once
        acc.update_self(y)
        np.testing.assert_array_equal(y, 3 * x)
        add_after_one(x, y)
    np.testing.assert_array_equal(y, 4 * x)
