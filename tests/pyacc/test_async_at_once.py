"""Async work run at once on the calling thread (API.md §5, last point; OpenACC 3.3 §2.16).

An operation on an idle asynchronous queue predicted shorter than a worker handoff runs
at once on the calling thread; it must be observably the same as queued work that
finished at once. Checked on ``host`` and ``emulated``, through the express lane (C) and
the Python launcher:

* it runs on the calling thread, and ``async_test`` is true right after the call;
* work behind queued (held) work is queued, not run at once, and runs in order;
* ``PYACC_ASYNC_INLINE_BELOW=0`` never runs work at once; a bad value is refused by name;
* a kernel that fails at once: its error is raised by the covering wait (once), the
  handle's ``result()`` raises, later work on the queue is skipped until reported;
* ``wait_async`` orders another queue after work run at once; an async exit's free;
* a kernel that became long goes back to the worker (overlap is kept);
* a forked child and a program that ends without a wait.

The crossover is set through the environment (``PYACC_ASYNC_INLINE_BELOW``, read when a
queue is made and at ``acc.shutdown``: each test shuts the device down first), so nothing
depends on this machine's measured handoff.
"""

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import pyacc as acc
from pyacc import _compute
from pyacc.mapping import inline, queues
from pyacc.testing import hold_queue

N = 64
ALWAYS = "1000000"  # µs: every predicted operation runs at once on an idle queue


@acc.parallel_loop
def add_one(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1.0


@acc.parallel_loop
def double(x):
    for i in range(x.shape[0]):
        x[i] = 2.0 * x[i]


@acc.parallel_loop
def shifted(x, y, k):
    for i in range(x.shape[0]):
        y[i] = x[i + k]


def poll(condition, timeout=10.0) -> bool:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(1e-4)
    return True


@pytest.fixture(params=["host", "emulated"])
def device(request, monkeypatch):
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", ALWAYS)
    inline.RUNS.clear()  # every kernel unmeasured: its first async run is the worker's
    acc.shutdown(request.param)
    acc.set_device_type(request.param)
    yield request.param
    acc.wait()
    acc.shutdown(request.param)
    acc.set_device_type("host")


@pytest.fixture(params=["express lane", "python launcher"])
def lane(request):
    previous = acc._express.set_lane(request.param == "express lane")
    yield request.param
    acc._express.set_lane(previous)


@pytest.fixture
def threads(monkeypatch):
    """The threads each kernel of ``add_one``/``double`` ran on (through ``inline``)."""
    seen = []
    record = inline.record_kernel

    def recording(kernel, seconds, nbytes, at_once, *below):
        seen.append(threading.get_ident())
        record(kernel, seconds, nbytes, at_once, *below)

    monkeypatch.setattr(inline, "record_kernel", recording)
    monkeypatch.setattr(queues, "record_kernel", recording)
    return seen


def test_short_work_on_an_idle_queue_runs_at_once_on_the_calling_thread(device, lane, threads):
    x = np.zeros(N)
    with acc.data(copy=[x]):
        add_one(x, async_=1)  # never measured: the worker runs and measures it
        acc.wait(1)
        for _ in range(3):
            handle = add_one(x, async_=1)
            assert acc.async_test(1), "work run at once must be complete when the call returns"
            assert handle.done()
            assert handle.result() is None
    assert threads[0] != threading.get_ident()
    assert threads[1:] == [threading.get_ident()] * 3
    np.testing.assert_array_equal(x, 4.0)


def test_a_short_copy_on_an_idle_queue_runs_at_once(device):
    x = np.ones(N)
    acc.copyin(x)
    x[:] = 7.0
    acc.update_device(x, async_=2)
    assert acc.async_test(2)
    np.testing.assert_array_equal(np.asarray(acc.deviceptr(x)), 7.0)  # (host: x itself)
    acc.delete(x)


def test_work_behind_queued_work_is_queued_and_keeps_the_order(device, lane, threads):
    x = np.ones(N)
    with acc.data(copy=[x]):
        for kernel in (add_one, double):  # both measured, both short
            kernel(x, async_=1)
            acc.wait(1)
        x_before = threads[:]
        with hold_queue(1):
            add_one(x, async_=1)  # queued: the queue is held
            double(x, async_=1)  # behind queued work: queued too, never at once
            assert not acc.async_test(1)
            assert threads == x_before, "no kernel may run while its queue is held"
        acc.wait(1)
        assert acc.async_test(1)
    np.testing.assert_array_equal(x, ((1.0 + 1.0) * 2.0 + 1.0) * 2.0)


def test_the_environment_setting_0_never_runs_work_at_once(device, lane, monkeypatch):
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", "0")
    acc.shutdown(device)
    acc.set_device_type(device)
    at_once = []
    for owner, name in ((_compute.ComputeRegion, "_ran_at_once"), (queues.WorkerQueue, "run_inline")):
        monkeypatch.setattr(owner, name, lambda *args, _name=name: at_once.append(_name))
    x = np.zeros(N)
    with acc.data(copy=[x]):
        for _ in range(4):
            add_one(x, async_=1)
            acc.update_self(x, async_=1)
            acc.wait(1)
    assert at_once == []
    np.testing.assert_array_equal(x, 4.0)
    assert "never" in acc.explain(add_one)


@pytest.mark.parametrize("value", ["fast", "-1", "nan", "inf"])
def test_a_bad_crossover_setting_is_refused_by_name(device, monkeypatch, value):
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", value)
    acc.shutdown(device)
    acc.set_device_type(device)
    with pytest.raises(ValueError, match="PYACC_ASYNC_INLINE_BELOW.*microseconds"):
        add_one(np.zeros(N), async_=1)


def test_the_crossover_is_shown_by_explain(device):
    add_one(np.zeros(N))
    assert f"PYACC_ASYNC_INLINE_BELOW={ALWAYS}" in acc.explain(add_one)


def test_an_error_at_once_is_raised_by_the_covering_wait_once(device, lane, monkeypatch):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x = np.arange(N, dtype=np.float64)
    y = np.zeros(N)
    with acc.data(copyin=[x], copyout=[y]):
        shifted(x, y, 0, async_=3)  # measured on the worker, then at once
        acc.wait(3)
        shifted(x, y, 0, async_=3)
        handle = shifted(x, y, 1, async_=3)  # reads x[N]: fails, at once
        assert acc.async_test(3)
        z = np.zeros(N)
        add_one(z, async_=3)  # behind an unreported error: skipped, as behind queued work
        with pytest.raises(acc.ExecutionError, match=r"shifted.*queue 3") as info:
            acc.wait(3)
        assert info.value.code == "execution"
        acc.wait(3)  # raised once
        with pytest.raises(acc.ExecutionError, match="kernel of this handle failed"):
            handle.result()
        np.testing.assert_array_equal(z, 0.0)
        shifted(x, y, 0, async_=3)  # the queue works again
        acc.wait(3)
    np.testing.assert_array_equal(y, x)


def test_wait_async_orders_another_queue_after_work_run_at_once(device, lane):
    x = np.ones(N)
    with acc.data(copy=[x]):
        for kernel in (add_one, double):
            kernel(x, async_=1)
            acc.wait(1)
        x_device_before = 4.0
        add_one(x, async_=1)  # at once
        acc.wait_async(1, 2)
        double(x, async_=2)
        acc.wait(2)
        acc.update_self(x)
        np.testing.assert_array_equal(x, (x_device_before + 1.0) * 2.0)


def test_an_async_exit_at_once_frees_its_memory(device):
    x = np.ones(N)
    before = acc.stats()["memory_in_use"]
    acc.enter_data(copyin=[x], async_=1)
    acc.exit_data(copyout=[x], async_=1)
    assert acc.present_table() == []  # absent at once (API.md §5)
    acc.wait(1)
    assert acc.stats()["memory_in_use"] == before and acc.present_table() == []
    np.testing.assert_array_equal(x, 1.0)


def test_a_kernel_that_became_long_goes_back_to_the_worker(device, threads, monkeypatch):
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", "50")  # µs
    acc.shutdown(device)
    acc.set_device_type(device)
    record = inline.record_kernel  # (the fixture's, which notes the thread)
    runs = []

    def first_short_then_long(kernel, seconds, nbytes, at_once, *below):
        runs.append(at_once)  # 1 µs at its first run, then 1 ms each
        record(kernel, 1e-6 if len(runs) == 1 else 1e-3, nbytes, at_once, *below)

    monkeypatch.setattr(queues, "record_kernel", first_short_then_long)
    x = np.zeros(N)
    with acc.data(copy=[x]):
        for _ in range(11):
            add_one(x, async_=1)
            assert poll(lambda: acc.async_test(1))  # (not a wait: no adapting crossover)
        acc.wait(1)
    # predicted 1, 2, 4, 8, 16, 32 µs: six runs at once, then 64 µs: the worker's
    assert runs == [False] + [True] * 6 + [False] * 4, runs
    np.testing.assert_array_equal(x, 11.0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_work_at_once_in_a_forked_child(device):
    x = np.zeros(N)
    with acc.data(copy=[x]):
        add_one(x, async_=1)
        acc.wait(1)
        add_one(x, async_=1)
        pid = os.fork()
        if pid == 0:  # the child: its own queues, work at once there too
            code = 1
            try:
                add_one(x, async_=1)
                code = 0 if acc.async_test(1) else 3
                acc.wait(1)
                acc.update_self(x)
                code = code or (0 if x[0] == 3.0 else 2)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        acc.wait(1)
    np.testing.assert_array_equal(x, 2.0)


def test_a_program_that_ends_without_a_wait_finishes_its_work(tmp_path):
    script = tmp_path / "ends.py"
    script.write_text(textwrap.dedent("""
        import atexit
        import numpy as np
        import pyacc as acc

        # registered before pyacc's handler (made with the first device): runs after it
        atexit.register(lambda: print("SUM", x.sum()))

        @acc.parallel_loop
        def add_one(x):
            for i in range(x.shape[0]):
                x[i] = x[i] + 1.0

        acc.set_device_type("emulated")
        x = np.zeros(8)
        acc.enter_data(copyin=[x])
        for _ in range(50):
            add_one(x, async_=1)
        acc.exit_data(copyout=[x], async_=1)
    """))
    env = dict(os.environ, PYACC_ASYNC_INLINE_BELOW=ALWAYS)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "SUM 400.0" in result.stdout


def test_the_python_launcher_and_the_lane_take_the_same_queue_when_busy(device, lane):
    """Work queued by another thread while a call runs at once waits behind it."""
    x = np.zeros(N)
    with acc.data(copy=[x]):
        add_one(x, async_=1)
        acc.wait(1)
        def calls():
            acc.set_device_type(device)  # (a new thread starts on the default device)
            for _ in range(50):
                add_one(x, async_=1)

        workers = [threading.Thread(target=calls) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        acc.wait(1)
    np.testing.assert_array_equal(x, 201.0)


def test_the_async_suite_passes_with_every_predicted_operation_at_once():
    """``test_async.py`` (ordering, joins, deferred frees, errors, threads) again, with
    every operation that has a prediction run at once when its queue is idle."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYACC_ASYNC_INLINE_BELOW=ALWAYS)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         os.path.join(root, "tests", "pyacc", "test_async.py")],
        capture_output=True, text=True, timeout=600, env=env, cwd=root)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
