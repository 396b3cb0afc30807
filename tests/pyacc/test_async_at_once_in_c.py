"""The express lane's queue take and give-back in C (``pyacc/_queue_take.c.h``; API.md §5,
last point; OpenACC 3.3 §2.16).

An ``async_=<int>`` call the lane runs at once holds its idle queue (its lock) for the
kernel's run and gives it back without pyacc's Python (what ``QueueSet.take_at_once``,
``WorkerQueue.begin_inline``/``end_inline`` and ``inline.record_kernel`` do, done in
C). Each test checks, by the Python frames the calling thread enters
(``sys.setprofile``), that the C path ran — or that Python did, where it must — and that
the result is the queue semantics' own:

* the queue's counts and the kernel's run record afterwards, ``async_test`` true, the
  ``AsyncResult`` made in C;
* while the kernel runs, the queue is held: another thread's queue calls wait for it;
* work another thread queued first (the queue's lock held meanwhile) runs first;
* an error at once is kept for the covering wait (once), work behind it skipped;
* ``wait_async`` orders another queue after work run at once in C;
* with an event subscriber, or a take/give-back method rebound (a spy, a patch), the
  Python methods run instead, and the subscriber sees the launch.

The crossover is set through the environment, as in ``test_async_at_once.py``.
"""

import sys
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

import pyacc as acc
from pyacc import _compute
from pyacc._devices import current_runtime
from pyacc._outcome import AsyncResult
from pyacc.mapping import BUS, EventKind, inline
from pyacc.mapping.queues import QueueSet, WorkerQueue

from test_async_at_once import add_one, double, shifted  # the same three kernels
from test_fast_paths import total_of  # a sum: one region for the modules that use it

N = 64
ALWAYS = "1000000"  # µs: every predicted operation runs at once on an idle queue

pytestmark = pytest.mark.skipif(not acc._express.express_lane(), reason="needs the C express lane")

#: the Python code of the take and give-back, which the C path stands for
TAKE_AND_GIVE_BACK = {function.__code__ for function in (
    QueueSet.take_at_once, WorkerQueue.take_kernel, WorkerQueue.begin_inline,
    WorkerQueue.ran_at_once, WorkerQueue.end_inline, inline.predict_kernel,
    inline.record_kernel, _compute.ComputeRegion._ran_at_once, AsyncResult.__init__)}


@pytest.fixture(params=["host", "emulated"])
def device(request, monkeypatch):
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", ALWAYS)
    inline.RUNS.clear()
    acc.shutdown(request.param)
    acc.set_device_type(request.param)
    previous = acc._express.set_lane(True)
    yield request.param
    acc._express.set_lane(previous)
    acc.wait()
    acc.shutdown(request.param)
    acc.set_device_type("host")


@contextmanager
def python_code():
    """The code objects of the Python functions this thread enters meanwhile."""
    entered = []

    def profile(frame, event, arg):
        if event == "call":
            entered.append(frame.f_code)

    sys.setprofile(profile)
    try:
        yield entered
    finally:
        sys.setprofile(None)


def took_in_c(entered) -> bool:
    return not TAKE_AND_GIVE_BACK.intersection(entered)


def queue(number):
    return current_runtime().device.queue(number)


def warm(*kernels, x, number=1):
    """Each kernel measured on the worker, then once at once (the lane armed)."""
    for kernel in kernels:
        kernel(x, async_=number)
        acc.wait(number)
        kernel(x, async_=number)
        acc.wait(number)


def records(nbytes):
    return [run for run in inline.RUNS.values() if run[1] == nbytes]


@acc.parallel_loop
def spin(x, rounds):
    for i in range(x.shape[0]):
        for _ in range(rounds):
            x[i] = 0.5 * x[i] + 1.0


def test_the_queue_held_in_c_is_left_idle_and_uncounted(device):
    x = np.zeros(N)
    with acc.data(copy=[x]):
        warm(add_one, x=x)
        q = queue(1)
        counts = (q._submitted, q._completed)
        with python_code() as entered:
            handle = add_one(x, async_=1)
        assert took_in_c(entered), "the lane must take and give back the queue in C"
        assert acc.async_test(1)
        assert (q._submitted, q._completed, q._inline) == (*counts, False), \
            "a queue held for a run needs no count: nobody else can use it meanwhile"
        assert q._lock.acquire(blocking=False), "the queue's lock is given back"
        q._lock.release()
        assert type(handle) is AsyncResult and handle._queue is q and handle._value is None
        assert handle.done() and handle.result() is None
        acc.wait(1)
    np.testing.assert_array_equal(x, 3.0)


def test_a_handle_someone_holds_is_never_given_to_another_call(device):
    x = np.zeros(N)
    with acc.data(copy=[x]):
        warm(add_one, x=x)
        warm(add_one, x=x, number=2)
        held = [add_one(x, async_=1) for _ in range(3)]
        assert len({id(handle) for handle in held}) == 3, "each held handle is its own"
        dropped_then_other_queue = add_one(x, async_=2)  # (the kept handle may serve here)
        assert dropped_then_other_queue not in held
        assert dropped_then_other_queue._queue is queue(2), "a handle names its own call's queue"
        assert [handle._queue for handle in held] == [queue(1)] * 3
        assert all(handle._value is None and handle.result() is None for handle in held)
        acc.wait()
    np.testing.assert_array_equal(x, 4 + 3 + 1)


def test_a_dropped_handle_served_again_names_the_new_call_s_queue(device):
    x = np.zeros(N)
    with acc.data(copy=[x]):
        warm(add_one, x=x)
        warm(add_one, x=x, number=2)
        for number in (1, 2, 1, 2):
            with python_code() as entered:
                handle = add_one(x, async_=number)
            assert took_in_c(entered)
            assert handle._queue is queue(number) and handle._value is None
            assert handle.done() and handle.result() is None
            del handle
        acc.wait()
    np.testing.assert_array_equal(x, 4 + 4)


def test_a_handle_with_a_value_is_its_own_and_keeps_it(device):
    x = np.ones(N)
    with acc.data(copyin=[x]):
        for _ in range(3):  # measured, then at once
            total_of(x, async_=1).result()
        first, second = total_of(x, async_=1), total_of(x, async_=1)
        assert first is not second
        assert first.result() == second.result() == N
        assert add_one(x, async_=1).result() is None and first.result() == N
        acc.wait(1)


def test_the_queue_is_held_while_the_kernel_runs_other_threads_wait(device):
    x = np.zeros(N)
    with acc.data(copy=[x]):
        for rounds in (1, 1, 1):  # measured on the worker, then armed at once
            spin(x, rounds, async_=1)
            acc.wait(1)
        for key, run in list(inline.RUNS.items()):
            inline.RUNS[key] = (1e-9, run[1])  # predicted short: the long run below is at once
        q = queue(1)
        seen = {"held": 0, "free": 0}
        done = threading.Event()

        def probe():  # another thread: the queue's lock, tried while the call runs
            while not done.is_set():
                if q._lock.acquire(blocking=False):
                    q._lock.release()
                    seen["free"] += 1
                else:
                    seen["held"] += 1
                time.sleep(0.0005)

        prober = threading.Thread(target=probe)
        with python_code() as entered:
            prober.start()
            time.sleep(0.01)
            spin(x, 3_000_000, async_=1)  # ~0.1 s at once, the GIL released
            done.set()
        prober.join()
        assert took_in_c(entered)
        assert seen["held"] > 0, "the queue's lock is held for the kernel's run"
        assert acc.async_test(1) and q._lock.acquire(blocking=False)
        q._lock.release()
    np.testing.assert_allclose(x, 2.0)


@pytest.fixture
def every_run_timed():
    """Calls never keep the GIL (``PYACC_GIL_HOLD_BELOW=0``), so each run at once is timed."""
    from pyacc import _fastcall
    from pyacc.compiler import cpu_plans
    _fastcall.configure_prepared(cpu_plans.prepare, 0.0)
    yield
    _fastcall.configure_prepared(cpu_plans.prepare, acc._express.gil_hold_below())


def test_a_run_within_a_quarter_of_the_record_keeps_it(device, every_run_timed):
    x = np.zeros(N)
    with acc.data(copy=[x]):
        warm(add_one, x=x)
        (key,) = [k for k, run in inline.RUNS.items() if run[1] == x.nbytes]
        runs = []
        for _ in range(200):  # (no profiler: the prepared call, the run's own time)
            add_one(x, async_=1)
            runs.append(inline.RUNS[key])
        kept = sum(later is earlier for earlier, later in zip(runs, runs[1:]))
        assert kept >= 20, f"runs within a quarter of the record leave it as it was ({kept})"
        q = queue(1)
        # A record just below a run's time, the crossover between them: the run crosses.
        # The record follows the runs (a busy machine's runs drift), so that some land in
        # the window (1.03, 1.25] x the record whatever this machine's speed meanwhile.
        aim = inline.RUNS[key][0] / 1.1
        crossed = 0  # records moved by a run within a quarter that crossed the crossover
        for _ in range(400):
            below = q._inline_below = aim * 1.03
            inline.RUNS[key] = record = (aim, x.nbytes)
            add_one(x, async_=1)
            if inline.RUNS[key] is record:  # within a quarter, on the record's side: quicker
                aim *= 0.9
                continue
            moved = inline.RUNS[key][0]
            if abs(moved - aim) <= 0.25 * aim:
                assert (moved < below) != (aim < below), "kept unless it crossed"
                crossed += 1
                if crossed == 5:
                    break
            aim = moved / 1.1
        assert crossed > 0, "a run past the crossover moves the record, within a quarter too"
        q._inline_below = 1e-3
        for earlier, later in zip(runs, runs[1:]):
            if later is not earlier:  # replaced: a run beyond a quarter of the record
                assert abs(later[0] - earlier[0]) > 0.25 * earlier[0] * 0.999
        inline.RUNS[key] = (1.0, x.nbytes)  # the Python rule is the same
        inline.record_kernel(key, 1.2, x.nbytes, True)
        assert inline.RUNS[key] == (1.0, x.nbytes)
        inline.record_kernel(key, 0.8, x.nbytes, True)
        assert inline.RUNS[key] == (1.0, x.nbytes)
        inline.record_kernel(key, 1.3, x.nbytes, True)
        assert inline.RUNS[key] == (1.3, x.nbytes)
        inline.record_kernel(key, 1.1, x.nbytes, False)  # a worker's shorter run: always
        assert inline.RUNS[key] == (1.1, x.nbytes)
        inline.record_kernel(key, 1.2, x.nbytes, True, 1.15)  # across the crossover: follows
        assert inline.RUNS[key] == (1.2, x.nbytes)
        inline.record_kernel(key, 1.1, x.nbytes, True, 1.15)  # and back
        assert inline.RUNS[key] == (1.1, x.nbytes)
        inline.record_kernel(key, 1.0, x.nbytes, True, 1.15)  # on its side: kept
        assert inline.RUNS[key] == (1.1, x.nbytes)
        inline.record_kernel(key, 1.3, 2 * x.nbytes, True)  # other bytes: replaced
        assert inline.RUNS[key] == (1.3, 2 * x.nbytes)
        acc.wait(1)
    assert x[0] > 202.0 and np.all(x == x[0])


@pytest.mark.usefixtures("prepared_calls_on")
def test_a_kept_call_at_once_is_timed_one_in_eight_its_record_kept_meanwhile(device):
    """A call repeated with the same words after a short run (it keeps the GIL) is timed
    one call in 8 (``TIME_SAMPLED``, pyacc/_prepared_call.c.h): the others leave the
    kernel's run record as it is, so a record that no longer fits is mended within 8
    calls, and the clock is read for an eighth of them."""
    x = np.zeros(N)
    with acc.data(copy=[x]):
        warm(add_one, x=x)
        (key,) = [k for k, run in inline.RUNS.items() if run[1] == x.nbytes]
        mended = 0
        for _ in range(16):  # (no profiler: one sends the kernel to its dispatcher, timed)
            inline.RUNS[key] = (1e-12, x.nbytes)  # a run at once would at most double it
            add_one(x, async_=1)
            assert acc.async_test(1) and not queue(1)._handed, "run at once"
            mended += inline.RUNS[key] != (1e-12, x.nbytes)
        assert 2 <= mended <= 8, f"{mended} of 16 kept calls timed: one in 8 expected"
        acc.wait(1)
    np.testing.assert_array_equal(x, 2 + 16)


def test_the_run_record_follows_record_kernel_at_once(device, every_run_timed):
    x = np.zeros(N)
    with acc.data(copy=[x]):
        warm(add_one, x=x)
        (key,) = [k for k, run in inline.RUNS.items() if run[1] == x.nbytes]
        inline.RUNS[key] = (1e-12, 10 ** 9)  # predicted 1e-12 s: a longer run at most doubles it
        with python_code() as entered:
            add_one(x, async_=1)
        assert took_in_c(entered)
        assert inline.RUNS[key] == (2e-12, x.nbytes)
        inline.RUNS[key] = (0.0, 8)  # scaled by the bytes: still 0.0; at most doubled: 0.0
        add_one(x, async_=1)
        assert inline.RUNS[key] == (0.0, x.nbytes)
        inline.RUNS[key] = (10.0, x.nbytes)  # predicted above the crossover: to the worker
        with python_code() as entered:
            add_one(x, async_=1)
        assert WorkerQueue.begin_inline.__code__ not in entered
        assert queue(1)._handed, "work predicted long goes to the queue's worker"
        acc.wait(1)
        inline.RUNS.clear()  # never measured: to the worker, which measures it
        add_one(x, async_=1)
        assert queue(1)._handed
        acc.wait(1)
        assert records(x.nbytes)
    np.testing.assert_array_equal(x, 6.0)


def test_work_another_thread_queued_first_runs_before_the_call(device):
    x = np.zeros(N)
    with acc.data(copy=[x]):
        warm(add_one, x=x)
        q = queue(1)
        runtime = current_runtime()
        before = []
        view = x if device == "host" else np.asarray(acc.deviceptr(x))

        def earlier():  # queued by "another thread" while the call waits for the lock
            before.append(float(view[0]))

        def call():  # (a thread's device is its own ICV)
            acc.set_device_type(device)
            assert current_runtime() is runtime
            add_one(x, async_=1)

        with q._lock:
            caller = threading.Thread(target=call)
            caller.start()
            time.sleep(0.2)  # (the caller now waits for the queue's lock in C, or has run)
            q._operations.append((earlier, "an earlier operation", False))
            q._submitted += 1
            q._handed = True
            q._notify()  # (what submit does: wake the worker)
        caller.join()
        acc.wait(1)
        assert before == [2.0], "work queued before the call must run before its kernel"
        with python_code() as entered:
            add_one(x, async_=1)
        assert took_in_c(entered)
        assert current_runtime() is runtime
    np.testing.assert_array_equal(x, 4.0)


def test_an_error_at_once_after_a_c_take_is_raised_by_the_covering_wait_once(device, monkeypatch):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x = np.arange(N, dtype=np.float64)
    y = np.zeros(N)
    with acc.data(copyin=[x], copyout=[y]):
        for k in (0, 0, 0):
            shifted(x, y, k, async_=3)
            acc.wait(3)
        shifted(x, y, 1, async_=3)  # arms the lane for k = 1 (fails: on the worker)
        with pytest.raises(acc.ExecutionError):
            acc.wait(3)
        with python_code() as entered:
            handle = shifted(x, y, 1, async_=3)  # reads x[N]: fails, at once
        assert WorkerQueue.begin_inline.__code__ not in entered, "taken in C"
        assert _compute.ComputeRegion._ran_at_once.__code__ in entered, "the error kept by Python"
        assert acc.async_test(3)
        z = np.zeros(N)
        add_one(z, async_=3)  # behind an unreported error: skipped
        with pytest.raises(acc.ExecutionError, match=r"shifted.*queue 3"):
            acc.wait(3)
        acc.wait(3)  # raised once
        with pytest.raises(acc.ExecutionError, match="kernel of this handle failed"):
            handle.result()
        np.testing.assert_array_equal(z, 0.0)
        shifted(x, y, 0, async_=3)
        acc.wait(3)
    np.testing.assert_array_equal(y, x)


def test_wait_async_orders_another_queue_after_work_taken_in_c(device):
    x = np.ones(N)
    with acc.data(copy=[x]):
        warm(add_one, double, x=x)  # 1 → 2 → 3 → 6 → 12
        with python_code() as entered:
            add_one(x, async_=1)  # 13, at once
        assert took_in_c(entered)
        acc.wait_async(1, 2)
        double(x, async_=2)
        acc.wait(2)
        acc.update_self(x)
        np.testing.assert_array_equal(x, 26.0)


def test_an_event_subscriber_sends_the_call_to_the_python_path(device):
    x = np.zeros(N)
    launches = []

    def subscriber(event):
        launches.append(event)

    with acc.data(copy=[x]):
        warm(add_one, x=x)
        BUS.subscribe(subscriber, (EventKind.LAUNCH,))
        try:
            with python_code() as entered:
                add_one(x, async_=1)
        finally:
            BUS.unsubscribe(subscriber, (EventKind.LAUNCH,))
        assert not took_in_c(entered)
        assert len(launches) == 1
        assert acc.async_test(1)
        with python_code() as entered:
            add_one(x, async_=1)
        assert took_in_c(entered)
    np.testing.assert_array_equal(x, 4.0)


def test_a_rebound_take_or_give_back_method_runs_instead_of_the_c_path(device, monkeypatch):
    x = np.zeros(N)
    calls = []
    begin, end = WorkerQueue.begin_inline, WorkerQueue.end_inline

    def spied_begin(self):
        calls.append("begin")
        return begin(self)

    def spied_end(self, description=None, cause=None):
        calls.append("end")
        return end(self, description, cause)

    with acc.data(copy=[x]):
        warm(add_one, x=x)
        monkeypatch.setattr(WorkerQueue, "begin_inline", spied_begin)
        monkeypatch.setattr(WorkerQueue, "end_inline", spied_end)
        add_one(x, async_=1)
        assert calls == ["begin", "end"]
        monkeypatch.undo()
        with python_code() as entered:
            add_one(x, async_=1)
        assert took_in_c(entered)
        assert calls == ["begin", "end"]
    np.testing.assert_array_equal(x, 4.0)
