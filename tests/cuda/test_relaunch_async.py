"""Calls made again from C on an asynchronous queue, and relaunches that give up, without a
GPU (``compiler/_relaunch.c.h``: ``again``, a ``Relaunch`` with no wait, ``RELAUNCH_MISSES``;
``mapping/devices/cuda_queues.py``: ``CudaQueue.submit_relaunch``; ``cuda.py``:
``CudaDevice.relaunch``).

The ``Relaunch`` runs against numba-cuda's launch path with the driver's leaves standing
in (``numba_cuda_leaves.fill_machine``). The queue runs over a backend that keeps what it
is asked in order (``QueueBackend``): what ``submit`` enqueues, and what a relaunch
enqueues beside it, must keep the queue's order and its failure rules (OpenACC 3.3
§2.16.1: the queue's operations run in order; a failure is reported by the next wait).
"""
from __future__ import annotations


import pytest

from pyacc._outcome import AsyncResult
from pyacc.compiler import cuda_compilers, cuda_plans, cuda_relaunch, cuda_runtime
from pyacc.mapping import BUS, EventKind
from pyacc.mapping.devices.cuda import CudaDevice
from pyacc.mapping.devices.cuda_queues import RELAUNCHED, CudaQueue
from pyacc.mapping.errors import ExecutionError
from pyacc.mapping.events import STATS
from pyacc.mapping.queues import Pending

if cuda_runtime.SIMULATED:  # pragma: no cover - conftest keeps this file out
    pytest.skip("numba-cuda's launch path, not the simulator's", allow_module_level=True)
_launch = pytest.importorskip("pyacc.compiler._launch", reason="the C launch is not built")
if not cuda_plans.enabled(cuda_compilers.COMPILERS["numba-cuda"]):
    pytest.skip("plans reproduce numba-cuda 0.30's launch", allow_module_level=True)

from numba_cuda_leaves import DeviceArray, EnqueuingDevice, QueueBackend, fill_machine  # noqa: E402

MISSES = 16  # RELAUNCH_MISSES


@pytest.fixture
def machine(monkeypatch):
    """``fill_machine``, with ``machine.sync`` (a synchronous launcher's ``Relaunch``) and
    ``machine.queued`` (an asynchronous queue's: no wait)."""
    machine = fill_machine(monkeypatch)
    machine.sync = cuda_relaunch.relaunching(machine.launcher, lambda: None)
    machine.queued = cuda_relaunch.relaunching(machine.launcher)
    return machine


def _kept(relaunch, *args):
    """Calls until ``args``' launches are kept (numba-cuda's dispatcher twice, then a plan)."""
    for _ in range(3):
        relaunch(*args)
    assert relaunch.kept >= 1


# == again ========================================================================================
def test_again_makes_only_launches_already_kept(machine):
    a = DeviceArray((100, 3))
    relaunch = machine.sync
    assert relaunch.again(a, 100, 1.5) is False and machine.calls == 0  # nothing kept: nothing ran
    _kept(relaunch, a, 100, 1.5)
    launches, waits = len(machine.driver.launches), len(machine.waits.streams)
    assert relaunch.again(a, 100, 1.5) is True
    assert len(machine.driver.launches) == launches + 1 and len(machine.waits.streams) == waits + 1
    assert relaunch.again(a, 100, 2.5) is False  # other facts: not the launcher either
    assert relaunch.again(a, 100, (1.5,)) is False  # another kind
    assert machine.calls == 3 and relaunch.relaunched == 1 and len(machine.driver.launches) == launches + 1


def test_an_asynchronous_queues_relaunch_does_not_wait(machine):
    """The queue's waits wait (OpenACC 3.3 §2.16.1): the relaunch only launches."""
    a = DeviceArray((100, 3))
    relaunch = machine.queued
    assert isinstance(relaunch, _launch.Relaunch)
    _kept(relaunch, a, 100, 1.5)
    assert relaunch(a, 100, 1.5) is None and relaunch.again(a, 100, 1.5) is True
    assert relaunch.relaunched == 2 and machine.calls == 3
    assert len({bytes(b"".join(launch[5])) for launch in machine.driver.launches}) == 1
    assert machine.waits.streams == []


# == giving up ==================================================================================
def test_a_relaunch_gives_up_after_calls_in_a_row_not_made_again(machine):
    """A time step passed as a scalar: every call's facts are new. After RELAUNCH_MISSES
    calls the relaunch reads and records nothing: each call goes to the launcher as it is."""
    a = DeviceArray((100, 3))
    relaunch = machine.sync
    _kept(relaunch, a, 100, 0.0)
    for t in range(1, MISSES - 3 + 1):
        relaunch(a, 100, float(t))
        assert relaunch.gave_up is (t == MISSES - 3)
    recorded = cuda_plans.RECORDING[0]
    calls, relaunched = machine.calls, relaunch.relaunched
    relaunch(a, 100, 0.0)  # kept facts: still the launcher
    assert relaunch.again(a, 100, 0.0) is False
    assert (machine.calls, relaunch.relaunched) == (calls + 1, relaunched)
    assert cuda_plans.RECORDING[0] == recorded


def test_a_call_made_again_starts_the_count_again(machine):
    a = DeviceArray((100, 3))
    relaunch = machine.sync
    _kept(relaunch, a, 100, 0.0)  # (3 calls not made again)
    for round in range(MISSES):  # more calls not made again than RELAUNCH_MISSES, not in a row
        for t in range(1, 4):
            relaunch(a, 100, float(round * 100 + t))
        relaunch(a, 100, 0.0)  # made again
        assert not relaunch.gave_up
    assert relaunch.relaunched == MISSES


def test_the_set_least_recently_used_is_replaced_first(machine):
    """Four sets are kept; a new one replaces the one least recently kept or made again,
    so that a set made again often stays while new facts come and go."""
    a = DeviceArray((100, 3))
    relaunch = machine.sync
    _kept(relaunch, a, 100, 0.0)
    for t in range(1, 40):
        relaunch(a, 100, float(t))  # kept, never made again
        relaunch(a, 100, 0.0)
    assert relaunch.relaunched == 39 and relaunch.kept == 4


def test_calls_of_arguments_no_fact_covers_are_not_recorded(machine):
    calls = []

    def recorder(call, args):
        calls.append(args)
        return cuda_plans.recorded(call, args)
    relaunch = _launch.Relaunch(machine.launcher, recorder, DeviceArray, cuda_plans.NUMBERS, None,
                                cuda_plans.driver_error, 0)
    a = DeviceArray((100, 3))
    relaunch(a, 100, 1.5)
    with pytest.raises(Exception):
        relaunch(a, 100, [1.5])  # a list: the launcher's, and numba-cuda refuses it
    assert len(calls) == 1 and machine.calls == 2


# == the queue's bookkeeping ==================================================================
class Again:
    """A relaunch's ``again`` standing in: ``answer`` (or raises ``error``), logged."""

    def __init__(self, backend, answer=True, error=None):
        self.backend, self.answer, self.error, self.args = backend, answer, error, []

    def __call__(self, *args):
        self.args.append(args)
        self.backend.log.append("again")
        if self.error is not None:
            raise self.error
        return self.answer


@pytest.fixture
def queue():
    return CudaQueue(1, QueueBackend(), "the test device")


def test_a_relaunch_on_a_quiet_queue_takes_its_place_in_the_queues_order(queue):
    again = Again(queue._backend)
    sequence = queue._sequence
    queue.submit(Pending(lambda: None, (), "k", 1), ("kernel", "k"))
    assert queue.submit_relaunch(again, (1, 2.0), "fill") is RELAUNCHED
    assert again.args == [(1, 2.0)] and queue._backend.log == ["launch", "again"]
    assert queue._sequence == sequence + 2
    queue.synchronize()


def test_nothing_kept_leaves_the_call_to_submit(queue):
    again = Again(queue._backend, answer=False)
    sequence = queue._sequence
    assert queue.submit_relaunch(again, (1,), "fill") is None
    assert queue._sequence == sequence and len(again.args) == 1


def test_a_queue_with_a_failure_not_reported_leaves_the_call_to_submit(queue):
    """``submit`` skips what follows a failure until a wait reports it (its ``Pending``
    learns why): a relaunch must not run there."""
    def broken():
        raise RuntimeError("the copy failed")
    queue.submit(broken, "a copy")
    again = Again(queue._backend)
    assert queue.submit_relaunch(again, (), "fill") is None and again.args == []
    with pytest.raises(ExecutionError, match="the copy failed"):
        queue.synchronize()
    assert queue.submit_relaunch(again, (), "fill") is RELAUNCHED  # reported: runs again


def test_a_relaunch_polls_the_queue_as_submit_does(queue):
    """What the stream has passed runs first (a deferred release); what it has not stays
    deferred, the relaunch enqueued behind it."""
    backend, ran = queue._backend, []
    queue.defer(lambda: ran.append("passed"))
    backend.done = False
    queue.defer(lambda: ran.append("not passed"))
    again = Again(backend)
    assert queue.submit_relaunch(again, (), "fill") is RELAUNCHED
    assert ran == ["passed"] and len(queue._deferred) == 1 and len(again.args) == 1
    queue._deferred[0][0].done = True
    assert queue.submit_relaunch(again, (), "fill") is RELAUNCHED
    assert ran == ["passed", "not passed"] and not queue._deferred and len(again.args) == 2


def test_a_relaunch_after_a_wait_for_a_failed_queue_is_left_to_submit(queue):
    """A queue that waited for another (OpenACC 3.3 §3.2.11) fails with it: what follows
    the wait is skipped until the failure is reported."""
    other = CudaQueue(2, queue._backend, "the test device")

    def broken():
        raise RuntimeError("the copy failed")
    other.submit(broken, "a copy")
    queue.wait_event(other.record_event())
    again = Again(queue._backend)
    assert queue.submit_relaunch(again, (), "fill") is None and again.args == []
    with pytest.raises(ExecutionError, match="which this queue waited for"):
        queue.synchronize()
    clean = CudaQueue(3, queue._backend, "the test device")
    queue.wait_event(clean.record_event())
    assert queue.submit_relaunch(again, (), "fill") is RELAUNCHED


def test_a_subscriber_in_order_leaves_the_call_to_submit(queue, monkeypatch):
    from pyacc.mapping.devices import cuda_queues

    monkeypatch.setattr(cuda_queues, "_IN_ORDER", [True])
    again = Again(queue._backend)
    assert queue.submit_relaunch(again, (), "fill") is None and again.args == []


def test_a_refused_relaunch_is_the_queues_failure_raised_by_the_next_wait(queue):
    """As for a queued kernel whose launch failed: the next wait raises the failure (once),
    and the call's handle keeps it (``AsyncResult.result`` raises it again)."""
    again = Again(queue._backend, error=RuntimeError("CUDA_ERROR_LAUNCH_FAILED"))
    outcome = queue.submit_relaunch(again, (), "fill")
    assert isinstance(outcome, Pending) and outcome is not RELAUNCHED
    with pytest.raises(ExecutionError, match="kernel fill on queue 1 of the test device failed: "
                                             "RuntimeError: CUDA_ERROR_LAUNCH_FAILED"):
        queue.synchronize()
    queue.synchronize()  # reported once
    with pytest.raises(ExecutionError, match="the kernel of this handle failed: RuntimeError"):
        AsyncResult(queue, outcome).result()
    assert AsyncResult(queue, queue.submit_relaunch(Again(queue._backend), (), "fill")).result() is None


# == the device ===================================================================================
class _Device:
    identity = ("cuda", 0)
    relaunch = CudaDevice.relaunch


def test_the_device_counts_a_relaunch_as_a_launch(queue):
    STATS.reset(_Device.identity)
    again = Again(queue._backend)
    assert _Device().relaunch(again, (), queue, "fill") is RELAUNCHED
    assert STATS.snapshot(_Device.identity)["launch_count"] == 1


def test_a_launch_observed_goes_through_launch(queue):
    """LAUNCH and DONE events are ``Device.launch``'s: with a subscriber, no relaunch."""
    again = Again(queue._backend)
    for kind in (EventKind.LAUNCH, EventKind.DONE):
        events = []
        BUS.subscribe(events.append, (kind,))
        try:
            assert _Device().relaunch(again, (), queue, "fill") is None
        finally:
            BUS.unsubscribe(events.append, (kind,))
    assert again.args == []


# == the lane's enqueue, a C Relaunch and a CudaQueue together ==================================
class _Lane(EnqueuingDevice):
    """The device an enqueue reads, counting its relaunches asked for (``asked``)."""

    asked = 0

    def relaunch(self, again, args, queue, name=None):
        self.asked += 1
        return super().relaunch(again, args, queue, name)


def test_the_lanes_enqueue_makes_a_queued_call_again_and_stops_asking_once_given_up(machine):
    from pyacc._express import enqueuer

    machine.launcher.relaunchable = True
    lane, a = _Lane(), DeviceArray((100, 3))
    enqueue = enqueuer(lane, machine.launcher, "fill", None, None)
    handles = [enqueue(1, (a, 100, 1.5)) for _ in range(6)]
    relaunch = lane.queue.relaunches[machine.launcher]
    assert isinstance(relaunch, _launch.Relaunch) and relaunch.relaunched == 3
    assert machine.calls == 3 and machine.waits.streams == []  # queued: no wait
    assert len({bytes(b"".join(launch[5])) for launch in machine.driver.launches}) == 1
    assert [type(h._value) is Pending for h in handles] == [True] * 6
    assert [h.result() for h in handles] == [None] * 6
    for t in range(MISSES):  # a time step: never made again
        enqueue(1, (a, 100, float(t)))
    assert relaunch.gave_up
    asked = lane.asked
    enqueue(1, (a, 100, 1.5))
    assert lane.asked == asked and machine.calls == 3 + MISSES + 1  # the queue's Pending ran it
