"""``acc.wait``'s C entry (``pyacc/_routine_lane.c.h``, kind SETTLES; ``wait_settled`` in
``pyacc/_queue_settled.c.h``). OpenACC 3.3 §3.2.10 and API.md §5: a host wait for queues with
nothing pending and no error to report costs a check. Such a wait returns without
entering any of pyacc's Python; every other wait is the Python function's, with its
semantics exactly: work still queued is waited for, a queued error is raised once, a
listener sees the WAIT event, odd arguments are refused as before."""

import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc.mapping import EventKind, inline

from test_async_at_once import add_one, shifted

N = 64

pytestmark = pytest.mark.skipif(not acc._express.express_lane(), reason="needs the C express lane")


@pytest.fixture(params=["host", "emulated"])
def device(request, monkeypatch):
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", "1000000")  # µs: short work runs at once
    inline.RUNS.clear()
    acc.shutdown(request.param)
    acc.set_device_type(request.param)
    yield request.param
    acc.wait()
    acc.shutdown(request.param)


def on_the_worker(monkeypatch, device):
    """From now on every async operation goes to its queue's worker thread."""
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", "0")
    acc.shutdown(device)
    acc.set_device_type(device)


def test_a_wait_of_settled_queues_enters_no_python(device, python_frames):
    x = np.zeros(N)
    with acc.data(copy=[x]):
        for _ in range(3):
            add_one(x, async_=1)
            acc.wait(1)
        assert python_frames(acc.wait, 1) == []
        assert python_frames(acc.wait, 1, 7) == []  # queue 7 was never made
        assert python_frames(acc.wait) == []  # every queue
    np.testing.assert_array_equal(x, 3.0)


def test_a_wait_for_work_on_the_worker_waits_for_it(device, monkeypatch, python_frames):
    on_the_worker(monkeypatch, device)
    x = np.zeros(N)
    with acc.data(copy=[x]):
        for _ in range(20):
            add_one(x, async_=2)
        assert python_frames(acc.wait, 2) != []  # work was handed to the worker
        acc.update_self(x)
        np.testing.assert_array_equal(x, 20.0)
        assert python_frames(acc.wait, 2) == []  # now settled


def test_a_queued_error_is_raised_by_the_wait_once(device, monkeypatch):
    on_the_worker(monkeypatch, device)
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copyout=[y]):
        shifted(x, y, 1, async_=3)  # reads x[N]: fails on the worker
        while not acc.async_test(3):
            pass
        with pytest.raises(acc.ExecutionError, match=r"shifted.*queue 3"):
            acc.wait(3)
        acc.wait(3)  # raised once
        shifted(x, y, 0, async_=3)
        acc.wait(3)
    np.testing.assert_array_equal(y, x)


def test_a_listener_sees_the_wait_event(device, listening):
    x = np.zeros(N)
    with acc.data(copy=[x]):
        add_one(x, async_=1)
        acc.wait(1)
        seen = listening(EventKind.WAIT)
        acc.wait(1)
        assert [event.kind for event in seen] == [EventKind.WAIT]


@pytest.mark.parametrize("call", [
    lambda: acc.wait(True),
    lambda: acc.wait(1.0),
    lambda: acc.wait("1"),
    lambda: acc.wait(acc.async_noval),
    lambda: acc.wait(-7),
    lambda: acc.wait(1, async_=2),
    lambda: acc.wait(2**80),
], ids=["bool", "float", "str", "async_noval", "negative", "async_", "huge"])
def test_waits_the_c_entry_cannot_decide_are_the_python_functions(device, call):
    """The same outcome with the C entry as with the Python function alone."""
    def outcome(wait):
        acc.wait = wait
        try:
            call()
            return None
        except Exception as error:  # the documented error, with its message
            return type(error), str(error)
        finally:
            acc.wait = entry

    entry = acc.wait
    x = np.zeros(N)
    with acc.data(copy=[x]):
        add_one(x, async_=1)
        acc.wait(1)
        assert outcome(entry) == outcome(entry.__wrapped__)


def test_a_thread_with_no_runtime_yet_waits_through_python(device):
    done = []

    def run():
        acc.wait(1)
        done.append(acc.get_device_type())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert len(done) == 1
