"""Calls that give ``wait=`` or ``if_=True``, in the express lane (``lane_keywords`` and
``call_waits`` in ``pyacc/_call_queue.c.h``; ``ComputeRegion._call_slow``'s direct paths).

API.md §6: a call may give ``async_``, ``wait`` and ``if_``; given at the call they replace
the construct's clauses. OpenACC 3.3 §2.16.2: the call's work starts after everything
already queued on the queues its ``wait`` names; §2.5.6: ``if_`` true runs it on the
device, false on the host. A pipelined program whose queues change from call to call
(``f(..., async_=k % 2, wait=(k + 1) % 2)``) gives them at each call: such calls take the
lane as calls with only ``async_`` do, when the queues they wait for have nothing pending;
any other is the Python launcher's, exactly.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc._devices import current_runtime
from tests.launcher_calls import slow_calls

# the fixtures ``device`` (host, emulated: an idle queue runs a kernel at once) and ``lane``
# (the express lane on, or off: every call through the Python launcher)
from test_async_at_once import device, lane, shifted  # noqa: F401
from test_wait_clause_lane import fill

pytestmark = pytest.mark.skipif(not acc._express.express_lane(), reason="needs the C express lane")

N = 64
CALLS = 30


@acc.parallel_loop
def add(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


@acc.parallel_loop(if_="x.shape[0] > 1000")
def add_if_large(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


KEYWORDS = [dict(wait=1), dict(async_=2, wait=1), dict(wait=(1, 3)), dict(async_=2, wait=()),
            dict(if_=True), dict(async_=2, if_=True, wait=1)]


@pytest.mark.parametrize("keywords", KEYWORDS, ids=lambda keywords: ",".join(keywords))
def test_calls_with_wait_or_if_true_take_the_lane(device, keywords, monkeypatch, python_frames):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(add, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        acc.update_device(x, async_=1)  # queue 1 made, and settled
        acc.wait()
        for _ in range(CALLS):
            add(x, y, **keywords)
            acc.wait()
        entered = set(python_frames(add, x, y, **keywords))  # (on host, the kernel's own frame)
        assert not entered & {"_call_slow", "wait_for", "join"}
        acc.wait()
    assert len(slow) <= 3
    np.testing.assert_array_equal(y, (CALLS + 1) * x)


def test_an_async_call_waits_for_work_queued_on_the_queue_it_names(device, lane):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(3):
            add(x, y, async_=2, wait=1)
            acc.wait()
        with current_runtime().device.queue(1).hold():
            fill(x, 10.0, async_=1)
            add(x, y, async_=2, wait=1)
            assert not acc.async_test(2)  # held back behind queue 1's kernel
        acc.wait(2)
    np.testing.assert_array_equal(y, 3 * np.arange(N) + 10.0)


def test_a_synchronous_call_waits_on_the_host_for_the_queue_it_names(device, lane):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(3):
            add(x, y, wait=1)
        held = current_runtime().device.queue(1).hold()
        held.__enter__()
        fill(x, 10.0, async_=1)
        released = threading.Timer(0.05, held.__exit__, (None, None, None))
        released.start()
        add(x, y, wait=1)  # returns once queue 1 has run the kernel
        released.join()
    np.testing.assert_array_equal(y, 3 * np.arange(N) + 10.0)


def test_a_failure_of_the_queue_a_call_waits_for_is_raised(device, lane, monkeypatch):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x, y, z = np.arange(N, dtype=np.float64), np.zeros(N), np.zeros(N)
    with acc.data(copyin=[x], copy=[y, z]):
        for _ in range(3):
            add(x, y, wait=1)
        shifted(x, z, 1, async_=1)  # reads x[N]: fails on queue 1
        with pytest.raises(acc.ExecutionError, match="shifted"):
            add(x, y, wait=1)
        add(x, y, wait=1)  # reported once
    np.testing.assert_array_equal(y, 4 * x)


def test_if_given_at_the_call_replaces_the_if_expression(device, lane):
    """``if_=True`` runs the call on the device whatever the region's expression says;
    ``if_=False`` on the host (on emulated: the host's copy of the data)."""
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x, y]):
        for _ in range(CALLS):
            add_if_large(x, y, if_=True)  # (the expression says false: N ≤ 1000)
        add_if_large(x, y, if_=False)
        add_if_large(x, y)
        host_writes = np.array(y)
        acc.update_self(y)
    if device == "emulated":
        np.testing.assert_array_equal(host_writes, 2 * x)
        np.testing.assert_array_equal(y, CALLS * x)
    else:
        np.testing.assert_array_equal(y, (CALLS + 2) * x)


@pytest.mark.parametrize("keywords, error", [(dict(wait=-3), acc.InvalidAsyncError),
                                             (dict(wait="1"), acc.InvalidAsyncError),
                                             (dict(async_=2, wait=[1, -3]), acc.InvalidAsyncError),
                                             (dict(speed=2), TypeError)])
def test_bad_keywords_are_refused_as_the_python_launcher_refuses_them(device, keywords, error):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    for _ in range(3):
        add(x, y)
    with pytest.raises(error):
        add(x, y, **keywords)
    acc.wait()
    np.testing.assert_array_equal(y, 3 * x)


def test_the_lane_and_the_python_launcher_agree(device, lane):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    queues = []
    with acc.data(copyin=[x], copy=[y]):
        for k in range(CALLS):
            handle = add(x, y, async_=k % 2 + 1, wait=[(k + 1) % 2 + 1])  # (a list: the launcher's)
            queues.append(handle._queue.async_value)
            handle = add(x, y, async_=k % 2 + 1, wait=(k + 1) % 2 + 1)
            queues.append(handle._queue.async_value)
        acc.wait()
    assert queues == [k % 2 + 1 for k in range(CALLS) for _ in range(2)]
    np.testing.assert_array_equal(y, 2 * CALLS * x)


LIMIT = None


@acc.parallel_loop(if_="x.shape[0] > LIMIT")
def add_if_beyond_limit(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


def test_if_given_at_the_call_leaves_the_if_expression_unevaluated(device, lane):
    """``if_=True`` replaces the region's ``if`` clause: an expression that would raise
    (``int > None``) is not evaluated, at the first call as at the later ones, whichever
    path takes them; without ``if_`` the call raises the full path's error."""
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(5):
            add_if_beyond_limit(x, y, if_=True)
        with pytest.raises(acc.InvalidArgumentError, match="TypeError"):
            add_if_beyond_limit(x, y)
    np.testing.assert_array_equal(y, 5 * x)


OTHER_WAITS = [True, False, np.int64(1), 2**63, acc.async_noval, acc.async_sync, (True,), [], (),
               [1], (1, 2**63)]


@pytest.mark.parametrize("wait", OTHER_WAITS, ids=repr)
@pytest.mark.parametrize("if_", [True, 1, np.bool_(True)], ids=repr)
def test_other_wait_and_if_values_run_as_the_full_path_runs_them(device, wait, if_):
    """The lane, the Python launcher's direct path and its full path (a region with a
    clause evaluated per call: ``num_gangs``) give the same outcome for each value."""
    outcomes = []
    for region in (add, add_full_path):
        previous = acc._express.set_lane(region is add)
        try:
            outcomes.append(_outcome(region, wait, if_))
        finally:
            acc._express.set_lane(previous)
    assert outcomes[0] == outcomes[1]


@acc.parallel_loop("num_gangs(x.shape[0] // 8)")
def add_full_path(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


def _outcome(region, wait, if_):
    """What three calls of ``region`` with ``wait`` and ``if_`` give after two plain ones:
    the error's type, or the queue each ran on and the result."""
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    try:
        with acc.data(copyin=[x], copy=[y]):
            for _ in range(2):
                region(x, y)
            queues = [getattr(getattr(region(x, y, async_=2, wait=wait, if_=if_), "_queue", None),
                              "async_value", None) for _ in range(3)]
            acc.wait()
    except Exception as error:  # noqa: BLE001 - the outcome compared
        acc.wait()
        return type(error).__name__
    return queues, y.tolist()


def test_a_wait_before_an_if_expression_that_is_false(device, lane):
    """``wait=`` with a region whose ``if`` expression is false: the region runs on the
    local thread, on host data (§2.5.6), once the queue it waits for has run what was
    queued on it (§2.16.2: a host wait, even with ``async_``)."""
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x, y]):
        for _ in range(3):
            add_if_large(x, y, if_=True)
        held = current_runtime().device.queue(1).hold()
        held.__enter__()
        fill(x, 10.0, async_=1)  # (on emulated: the device's x)
        released = threading.Timer(0.05, held.__exit__, (None, None, None))
        released.start()
        add_if_large(x, y, async_=2, wait=1)  # false: the host's, after queue 1's fill
        released.join()
        host = np.array(y)
        acc.update_self(y)
    if device == "emulated":
        np.testing.assert_array_equal(host, np.arange(N))
        np.testing.assert_array_equal(y, 3 * np.arange(N))
    else:
        np.testing.assert_array_equal(host, 3 * np.arange(N) + 10.0)


def test_a_call_that_waits_for_its_own_busy_queue(device, lane):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(3):
            add(x, y, async_=1, wait=1)
            acc.wait()
        with current_runtime().device.queue(1).hold():
            fill(x, 10.0, async_=1)
            add(x, y, async_=1, wait=1)  # behind the fill, in the queue's order
            assert not acc.async_test(1)
        acc.wait()
    np.testing.assert_array_equal(y, 3 * np.arange(N) + 10.0)
