"""The async crossover and the run-time predictions (``mapping/inline.py``; API.md §5).

Rules checked: an unmeasured kernel is predicted unknown; a shorter run lowers the
prediction; a longer run at once at most doubles it; a run on a worker never raises it;
the prediction scales up (never down) with the bytes of the arguments; the setting is
µs ≥ 0, ``0`` meaning never, and anything else is refused by name; the measurement is
read through the recorder once; ``WorkerQueue.submit`` runs a predicted operation at
once only on an idle, unheld queue, and keeps its error for the covering wait.
"""

import threading

import pytest

from pyacc.mapping import inline, queues
from pyacc.mapping.errors import ExecutionError


@pytest.fixture(autouse=True)
def _fresh_runs():
    inline.RUNS.clear()
    yield
    inline.RUNS.clear()


def kernel():
    pass


def test_an_unmeasured_kernel_is_predicted_unknown():
    assert inline.predict_kernel(kernel, 100) is None


def test_a_shorter_run_lowers_the_prediction_at_once():
    inline.record_kernel(kernel, 1e-3, 100, True)
    inline.record_kernel(kernel, 1e-6, 100, False)
    assert inline.predict_kernel(kernel, 100) == 1e-6


def test_a_longer_run_at_once_at_most_doubles_the_prediction():
    inline.record_kernel(kernel, 1e-6, 100, True)
    inline.record_kernel(kernel, 1.0, 100, True)  # one slow run: a neighbour, a page fault
    assert inline.predict_kernel(kernel, 100) == 2e-6


def test_a_run_on_a_worker_never_raises_the_prediction():
    inline.record_kernel(kernel, 1e-6, 100, True)
    inline.record_kernel(kernel, 5e-3, 100, False)  # the wait for the GIL counted
    assert inline.predict_kernel(kernel, 100) == 1e-6


def test_the_prediction_scales_up_with_bytes_and_never_down():
    inline.record_kernel(kernel, 1e-6, 100, True)
    assert inline.predict_kernel(kernel, 400) == pytest.approx(4e-6)
    assert inline.predict_kernel(kernel, 10) == 1e-6


@pytest.mark.parametrize("value, seconds", [("0", 0.0), ("2.5", 2.5e-6), (" 40 ", 40e-6)])
def test_the_setting_is_microseconds(monkeypatch, value, seconds):
    monkeypatch.setenv(inline.ENVIRONMENT, value)
    crossover = inline.Crossover(lambda: pytest.fail("a set crossover is not measured"))
    assert crossover.below() == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf", "1e400"])
def test_a_bad_setting_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv(inline.ENVIRONMENT, value)
    with pytest.raises(ValueError, match=r"PYACC_ASYNC_INLINE_BELOW=.*microseconds ≥ 0"):
        inline.Crossover(lambda: (1e-5, 1e9)).below()


def test_the_measurement_goes_through_the_recorder_once(monkeypatch):
    monkeypatch.delenv(inline.ENVIRONMENT, raising=False)
    asked = []
    crossover = inline.Crossover(lambda: (2e-5, 1e10))
    crossover.recorder = lambda measure: asked.append(1) or measure()
    told = []
    crossover.announce = told.append
    assert crossover.below() == 2e-5 and crossover.bandwidth() == 1e10 and crossover.below() == 2e-5
    assert asked == [1]
    assert len(told) == 1 and "20.0 µs" in told[0] and "measured" in told[0]


def test_the_measurement_is_a_handoff_and_a_bandwidth():
    handoff, bandwidth = inline.measure(lambda n, label: queues.WorkerQueue(n, label, 0.0))
    assert 0.0 < handoff < 0.05 and bandwidth > 1e7


def test_an_operation_at_once_runs_on_the_calling_thread_only_when_the_queue_is_idle():
    queue = queues.WorkerQueue(1, "a test", inline_below=1.0)
    try:
        ran = []
        queue.submit(lambda: ran.append(threading.get_ident()), "at once", predicted=1e-6)
        assert ran == [threading.get_ident()] and queue.is_idle()
        with queue.hold():
            queue.submit(lambda: ran.append("held"), "held", predicted=1e-6)
            assert ran == [threading.get_ident()]  # held: not even at once
            queue.submit(lambda: ran.append("behind"), "behind", predicted=1e-6)
        queue.synchronize()
        assert ran[1:] == ["held", "behind"]
        queue.submit(lambda: ran.append("long"), "long", predicted=2.0)  # to the worker
        queue.synchronize()
        assert ran[-1] == "long"
    finally:
        queue.close()


def test_an_error_at_once_is_kept_for_the_covering_wait_and_skips_later_work():
    queue = queues.WorkerQueue(4, "a test", inline_below=1.0)
    try:
        queue.submit(lambda: 1 / 0, "a division", predicted=1e-6)
        ran = []
        queue.submit(lambda: ran.append(1), "behind the error", predicted=1e-6)  # to the worker
        with pytest.raises(ExecutionError, match="a division on queue 4.*ZeroDivisionError"):
            queue.synchronize()
        queue.synchronize()  # once
        assert ran == []
    finally:
        queue.close()


def test_an_interrupt_at_once_propagates_and_leaves_the_queue_usable():
    queue = queues.WorkerQueue(5, "a test", inline_below=1.0)
    try:
        def interrupted():
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            queue.submit(interrupted, "an interrupt", predicted=1e-6)
        queue.synchronize()
        assert queue.is_idle() and queue.settled()
    finally:
        queue.close()


def test_a_run_on_a_worker_over_more_bytes_replaces_a_prediction_scaled_too_far():
    inline.record_kernel(kernel, 1e-6, 100, True)  # tiny arrays: the call's fixed cost
    assert inline.predict_kernel(kernel, 100_000) == pytest.approx(1e-3)  # scaled up
    inline.record_kernel(kernel, 3e-6, 100_000, False)  # what it took there
    assert inline.predict_kernel(kernel, 100_000) == 3e-6


def test_a_queue_whose_waits_block_raises_its_crossover_and_lowers_it_back():
    queue = queues.WorkerQueue(6, "a test", inline_below=1e-4)
    try:
        release = threading.Event()
        queue.submit(lambda: release.wait(10), "a long one", predicted=5e-3)  # the worker's
        threading.Timer(0.05, release.set).start()
        queue.synchronize()  # blocks: the host had nothing else to do
        assert queue._inline_below == 2e-4
        ran = []
        queue.submit(lambda: ran.append(threading.get_ident()), "now short", predicted=1.5e-4)
        assert ran == [threading.get_ident()]  # at once under the raised crossover
        queue.submit(lambda: None, "handed", predicted=5e-3)
        while not queue.is_idle():  # the host works meanwhile: the work is done when it waits
            pass
        queue.synchronize()
        assert queue._inline_below == 1e-4  # back towards the measured one
        for _ in range(20):  # never above the most
            release.clear()
            queue.submit(lambda: release.wait(10), "long", predicted=1.0)
            threading.Timer(0.001, release.set).start()
            queue.synchronize()
        assert queue._inline_below == inline.MOST
    finally:
        queue.close()
