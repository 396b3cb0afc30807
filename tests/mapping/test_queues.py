"""Asynchronous worker queues alone (mapping/queues.py), and a skipped kernel's handle."""

import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc.mapping import ExecutionError
from pyacc.mapping.queues import WorkerQueue


def test_operations_run_in_order_on_the_worker_thread():
    queue = WorkerQueue(1, "test device")
    seen = []
    for index in range(100):
        queue.submit(lambda index=index: seen.append((index, threading.current_thread().name)))
    queue.synchronize()
    assert [index for index, _ in seen] == list(range(100))
    assert all("queue 1" in name for _, name in seen)
    queue.close()


def test_hold_keeps_work_pending_until_released():
    queue = WorkerQueue(2, "test device")
    done = threading.Event()
    with queue.hold():
        queue.submit(done.set)
        assert not done.wait(0.05) and not queue.is_idle()
    queue.synchronize()
    assert done.is_set() and queue.is_idle()
    queue.close()


def test_an_error_is_raised_once_and_skips_what_follows_except_releases():
    queue = WorkerQueue(3, "test device")
    ran = []
    queue.submit(lambda: 1 / 0, "a division")
    queue.submit(lambda: ran.append("copy"), "a copy")
    queue.defer(lambda: ran.append("free"))
    with pytest.raises(ExecutionError, match="a division on queue 3 of test device failed: ZeroDivisionError"):
        queue.synchronize()
    queue.synchronize()  # reported once
    assert ran == ["free"]
    queue.submit(lambda: ran.append("after"))
    queue.synchronize()
    assert ran == ["free", "after"]  # the queue works again once the error was reported
    queue.close()


def test_events_join_queues_without_blocking_the_host():
    first, second = WorkerQueue(4, "test device"), WorkerQueue(5, "test device")
    order = []
    with first.hold():
        first.submit(lambda: order.append("first"))
        second.wait_event(first.record_event())
        second.submit(lambda: order.append("second"))
        assert not second.is_idle()
    second.synchronize()
    assert order == ["first", "second"]
    first.close()
    second.close()


def test_a_kernel_skipped_after_a_failure_on_its_queue_has_no_value(emulated, monkeypatch):
    """Work queued behind a failed operation is skipped; its handle raises, not None."""
    from pyacc.testing import hold_queue

    @acc.parallel_loop(reduction="+:total")
    def shifted_sum(x):
        total = 0.0
        for i in range(x.shape[0]):
            total += x[i + 1]
        return total

    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x = np.ones(8)
    with hold_queue(4):
        first = shifted_sum(x, async_=4)
        second = shifted_sum(x, async_=4)
    with pytest.raises(acc.ExecutionError, match="queue 4"):
        acc.wait(4)
    with pytest.raises(acc.ExecutionError):
        first.result()
    with pytest.raises(acc.ExecutionError, match="skipped"):
        second.result()
    assert acc.present_table() == [] and acc.stats()["memory_in_use"] == 0


# == QueueSet: the queues of one device ===========================================================
def _queue_set():
    from pyacc.mapping.queues import QueueSet, SyncQueue

    made = []

    def new_queue(async_value):
        made.append(async_value)
        return WorkerQueue(async_value, "test device")

    return QueueSet(new_queue, ("test", 0), SyncQueue()), made


def test_queue_set_creates_each_queue_once_and_none_is_the_synchronous_queue():
    queues, made = _queue_set()
    assert queues.queue(None) is queues.sync and queues.existing() == []
    first = queues.queue(1)
    assert queues.queue(1) is first and made == [1] and queues.existing() == [first]
    first.close()


def test_queue_set_wait_drains_every_queue_before_raising_all_errors():
    queues, _ = _queue_set()
    ran = []
    queues.queue(1).submit(lambda: 1 / 0, "a division")
    queues.queue(2).submit(lambda: [][1], "an index")
    queues.queue(3).submit(lambda: ran.append("done"))
    with pytest.raises(ExecutionError, match="2 queued operations failed") as caught:
        queues.wait(queues.existing())
    assert len(caught.value.failures) == 2 and ran == ["done"]
    queues.synchronize()  # reported once
    for queue in queues.existing():
        queue.close()


def test_queue_set_release_waits_for_every_busy_queue():
    queues, _ = _queue_set()
    freed = []
    queues.release(freed.append, 1)  # no queue yet: at once
    assert freed == [1]
    busy = queues.queue(1)
    with busy.hold():
        busy.submit(lambda: None)
        queues.release(freed.append, 2)
        assert freed == [1]
    queues.synchronize()
    assert freed == [1, 2]
    busy.close()


def _submits(queue) -> list:
    """The descriptions of what is submitted to ``queue`` from now on."""
    seen, submit = [], queue.submit

    def counted(operation, description="an operation", **keywords):
        seen.append(description)
        return submit(operation, description, **keywords)

    queue.submit = counted
    return seen


def test_a_join_on_a_settled_queue_needs_no_event_rule_2_16_2():
    """OpenACC 3.3 §2.16.2: the waiting queue's next work starts after everything queued
    on the waited queue has run. A waited queue with nothing pending and no error to
    report has run it all: no event is recorded on it, no wait is queued."""
    queues, _ = _queue_set()
    waiting, waited = queues.queue(1), queues.queue(2)
    waited.submit(lambda: None)
    waited.synchronize()
    recorded, waits = _submits(waited), _submits(waiting)
    queues.join(waiting, [waited])
    assert recorded == [] and waits == [] and waiting.is_idle()
    for queue in queues.existing():
        queue.close()


def test_a_join_on_a_busy_queue_holds_the_waiting_queue_back():
    queues, _ = _queue_set()
    waiting, waited = queues.queue(1), queues.queue(2)
    order = []
    with waited.hold():
        waited.submit(lambda: order.append("waited"))
        queues.join(waiting, [waited])
        waiting.submit(lambda: order.append("waiting"))
        assert not waiting.is_idle()
    waiting.synchronize()
    assert order == ["waited", "waiting"]
    for queue in queues.existing():
        queue.close()


def test_a_join_on_a_failed_queue_passes_its_failure_on():
    """A waited queue with an error not yet reported is not settled: the join records an
    event that carries the failure, which becomes the waiting queue's (§2.16.2)."""
    queues, _ = _queue_set()
    waiting, waited = queues.queue(1), queues.queue(2)
    waited.submit(lambda: 1 / 0, "a division")
    while not waited.is_idle():
        pass
    ran = []
    queues.join(waiting, [waited])
    waiting.submit(lambda: ran.append("after"), "a kernel")
    with pytest.raises(ExecutionError, match="a division"):
        waiting.synchronize()
    assert ran == []
    with pytest.raises(ExecutionError, match="a division"):
        waited.synchronize()
    for queue in queues.existing():
        queue.close()


def test_a_join_on_a_settled_queue_is_still_published():
    from pyacc.mapping import BUS, EventKind

    queues, _ = _queue_set()
    waiting, waited = queues.queue(1), queues.queue(2)
    seen = []
    BUS.subscribe(seen.append, (EventKind.JOIN,))
    try:
        queues.join(waiting, [waited])
    finally:
        BUS.unsubscribe(seen.append, (EventKind.JOIN,))
    assert [(event.queue, event.info) for event in seen] == [(1, (2,))]
    for queue in queues.existing():
        queue.close()


def test_the_synchronous_queue_declares_the_whole_protocol():
    from pyacc.mapping.queues import SyncQueue

    queue = SyncQueue()
    event = queue.record_event()
    assert event.is_set() and event.failure is None
    queue.wait_event(event)
    with pytest.raises(ExecutionError, match="cannot be held"):
        queue.hold()


def test_close_while_the_caller_runs_work_at_once_finishes_when_that_work_ends():
    """``end_inline`` wakes the worker for a close that came meanwhile (the worker waits
    while the caller runs an operation), so ``close`` returns."""
    queue = WorkerQueue(3, "test device", inline_below=1.0)
    assert queue.begin_inline()
    closer = threading.Thread(target=queue.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # the worker waits for the work run at once
    queue.end_inline()
    closer.join(5)
    assert not closer.is_alive()


def test_ran_at_once_gives_the_queue_back_when_recording_the_run_fails(monkeypatch):
    from pyacc.mapping import queues

    queue = WorkerQueue(4, "test device", inline_below=1.0)
    try:
        assert queue.begin_inline()

        def broken(*args):
            raise RuntimeError("the run could not be recorded")

        monkeypatch.setattr(queues, "record_kernel", broken)
        with pytest.raises(RuntimeError, match="recorded"):
            queue.ran_at_once(object(), 1e-6, 8, None, None)
        assert not queue._inline and queue.is_idle(), "the queue must be given back"
        queue.synchronize()  # nothing pending, no error: returns at once
    finally:
        queue.close()
