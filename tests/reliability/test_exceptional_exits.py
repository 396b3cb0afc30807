"""Exceptional exits (issue 8, item 5): leaving pyacc's constructs by an exception, an
interrupt, a suspended generator, a dropped reference or the end of the interpreter.

What is checked, on the emulated device (separate memory, so a copy-back that did or did
not happen is visible):

* an exception inside ``with acc.data``: exit actions run (data copied back, since the
  device data is valid after a host-side exception), the exception propagates unchanged,
  counts of enclosing regions and dynamic mappings are back to what they were; an
  ``ExecutionError`` inside the block skips the copy-back; a ``KeyboardInterrupt`` is a
  host-side exception like any other;
* an exception inside ``host_data`` (alone and inside a data region) propagates unchanged
  and changes nothing;
* an exception inside an asynchronous region: the exit is queued, the counts drop at once,
  the memory is freed when the queue gets there, the copy-back arrives after the wait;
* ``KeyboardInterrupt`` while the host waits on a queue (``acc.wait``, ``acc.wait_all``,
  a handle's ``result()``): it interrupts the wait, the queued work still runs, a later
  wait completes it, no queued error is lost and the queue keeps working;
* a generator suspended inside a data region: closing it (or dropping it) runs the
  region's exit; regions of interleaved generators end in any order;
* the user dropping the last reference to a mapped array: the runtime keeps it alive
  (its address cannot be reused by a new array), it can be reached again through
  ``acc.hostptr``, and its data is still right;
* the interpreter exiting with live mappings and pending asynchronous work: exit status 0,
  nothing printed — and under ``PYACC_DEBUG=1`` one line per live mapping on stderr
  (name, range, counters).
* a kernel that fails to compile at its first call does not copy device data back.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

import pyacc as acc
from pyacc.testing import hold_queue

from .support import add_one, add_one_present, assert_baseline, memory_in_use, scribble_device_memory

N = 32


@acc.parallel_loop(reduction="+:s")
def total(v):
    s = 0.0
    for i in range(v.shape[0]):
        s += v[i]
    return s


class Boom(Exception):
    """The exception the tests raise inside constructs."""


# =========================================================================== acc.data


def test_exception_inside_data_region_copies_back_releases_and_propagates(emulated):
    a, b, c = np.zeros(N), np.arange(N, dtype=np.float64), np.zeros(N)
    held = np.ones(N)
    acc.enter_data(copyin=[held])
    error = Boom("inside the region")
    with pytest.raises(Boom) as info:
        with acc.data(copy=[a], copyin=[b], create=[c], present=[held]):
            add_one_present(a)
            add_one_present(held)
            assert acc.refcounts(held) == (1, 1)
            raise error
    assert info.value is error, "the region replaced the user's exception"
    np.testing.assert_array_equal(a, 1.0)  # host-side exception: device data copied back
    np.testing.assert_array_equal(b, np.arange(N))
    assert acc.refcounts(held) == (0, 1)
    assert [r.nbytes for r in acc.present_table()] == [held.nbytes]
    acc.exit_data(delete=[held])
    assert_baseline()


def test_exception_in_nested_regions_unwinds_every_level(emulated):
    a = np.zeros(N)
    with pytest.raises(Boom):
        with acc.data(copy=[a]):
            with acc.data(present=[a]):
                with acc.data(copy=[a[: N // 2]]):
                    assert acc.refcounts(a) == (3, 0)
                    add_one_present(a)
                    raise Boom
    np.testing.assert_array_equal(a, 1.0)
    assert_baseline()


def test_execution_error_inside_data_region_skips_the_copy_back(emulated):
    a = np.zeros(N)
    with pytest.raises(acc.ExecutionError):
        with acc.data(copy=[a]):
            add_one_present(a)
            raise acc.ExecutionError("a device failure inside the region")
    np.testing.assert_array_equal(a, 0.0)  # device data may be garbage: not copied back
    assert_baseline()


def test_keyboard_interrupt_inside_data_region_copies_back_and_propagates(emulated):
    a = np.zeros(N)
    with pytest.raises(KeyboardInterrupt):
        with acc.data(copy=[a]):
            add_one_present(a)
            raise KeyboardInterrupt
    np.testing.assert_array_equal(a, 1.0)
    assert_baseline()


# =========================================================================== host_data


def test_exception_inside_host_data_propagates_and_changes_nothing(emulated):
    a = np.arange(N, dtype=np.float64)
    acc.copyin(a)
    before = acc.present_table()
    error = Boom("inside host_data")
    with pytest.raises(Boom) as info:
        with acc.host_data(use_device=[a]) as (device_a,):
            device_a[:] = -1.0  # "device code" through the device array
            raise error
    assert info.value is error
    assert acc.present_table() == before
    np.testing.assert_array_equal(acc.deviceptr(a), -1.0)
    np.testing.assert_array_equal(a, np.arange(N))
    acc.copyout(a)
    np.testing.assert_array_equal(a, -1.0)
    assert_baseline()


def test_exception_inside_host_data_inside_a_data_region(emulated):
    a = np.zeros(N)
    with pytest.raises(Boom):
        with acc.data(copy=[a]):
            with acc.host_data(use_device=a) as device_a:
                device_a[:] = 5.0
                raise Boom
    np.testing.assert_array_equal(a, 5.0)
    assert_baseline()


# =========================================================================== async regions


def test_exception_inside_an_async_region_queues_the_exit(emulated):
    a = np.zeros(N)
    with hold_queue(1):
        with pytest.raises(Boom):
            with acc.data(copy=[a], async_=1):
                add_one_present(a, async_=1)
                raise Boom
        assert acc.present_table() == []  # counts dropped at once
        assert memory_in_use() > 0  # the free waits for the queue
        np.testing.assert_array_equal(a, 0.0)  # the copy-back has not run yet
    acc.wait(1)
    np.testing.assert_array_equal(a, 1.0)
    assert_baseline()


# =========================================================================== interrupts


def _interrupt_main_thread_once_it_waits(function_names, delay=0.05):
    """From a helper thread: as soon as the main thread is blocked inside one of
    ``function_names``, send SIGINT to the process (the main thread then raises
    KeyboardInterrupt). Returns the thread."""
    main = threading.main_thread().ident

    def run():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            frame = sys._current_frames().get(main)
            names = set()
            while frame is not None:
                names.add(frame.f_code.co_name)
                frame = frame.f_back
            if names & set(function_names) and "wait" in names:
                time.sleep(delay)  # let it settle into the blocking call
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.002)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def sigint_raises_keyboard_interrupt():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("how", ["wait_q", "wait_all", "handle_result"])
def test_keyboard_interrupt_during_a_wait_leaves_the_queue_working(emulated, sigint_raises_keyboard_interrupt, how):
    a = np.zeros(N)
    with hold_queue(1):
        acc.enter_data(copyin=a, async_=1)
        add_one_present(a, async_=1)
        handle = total(a, async_=1)
        acc.exit_data(copyout=a, async_=1)
        helper = _interrupt_main_thread_once_it_waits(["synchronize"])
        with pytest.raises(KeyboardInterrupt):
            if how == "wait_q":
                acc.wait(1)
            elif how == "wait_all":
                acc.wait_all()
            else:
                handle.result()
        helper.join(10)
        assert not acc.async_test(1), "the held work ran although the queue is held"
    acc.wait(1)  # the interrupted wait did not break the queue
    np.testing.assert_array_equal(a, 1.0)
    assert handle.result() == float(N)
    b = np.zeros(N)
    add_one(b, async_=1)  # the queue keeps working
    acc.wait(1)
    np.testing.assert_array_equal(b, 1.0)
    assert_baseline()


def test_keyboard_interrupt_during_a_wait_loses_no_queued_error(emulated, sigint_raises_keyboard_interrupt):
    a, b = np.zeros(N), np.zeros(N)
    with acc.testing.inject_faults(launch=1) as plan:
        add_one(a, async_=2)  # fails on the queue's worker
        deadline = time.monotonic() + 5
        while not acc.async_test(2):  # the failure is recorded, not yet reported
            assert time.monotonic() < deadline
            time.sleep(0.001)
        with hold_queue(2):
            acc.update_device(b, if_present=True, async_=2)
            add_one(b, async_=2)  # skipped: queued behind the unreported failure
            helper = _interrupt_main_thread_once_it_waits(["synchronize"])
            with pytest.raises(KeyboardInterrupt):
                acc.wait(2)
            helper.join(10)
        with pytest.raises(acc.ExecutionError, match="queue 2"):
            acc.wait(2)  # the interrupted wait did not swallow the error
    assert plan.fired
    acc.wait(2)  # reported once
    np.testing.assert_array_equal(a, 0.0)
    np.testing.assert_array_equal(b, 0.0)
    assert_baseline()


# =========================================================================== generators


def _region_generator(a, events):
    with acc.data(copy=[a]):
        events.append("entered")
        yield acc.deviceptr(a)
        events.append("resumed")  # never reached when the generator is closed
    events.append("after")


def test_closing_a_generator_suspended_inside_a_region_runs_the_exit(emulated):
    a = np.zeros(N)
    events = []
    generator = _region_generator(a, events)
    device_a = next(generator)
    device_a[:] = 7.0
    assert acc.refcounts(a) == (1, 0)
    generator.close()
    assert events == ["entered"]
    np.testing.assert_array_equal(a, 7.0)  # GeneratorExit is host-side: copied back
    assert_baseline()


def test_dropping_a_suspended_generator_runs_the_exit(emulated):
    a = np.zeros(N)
    events = []
    generator = _region_generator(a, events)
    next(generator)[:] = 3.0
    del generator
    gc.collect()
    np.testing.assert_array_equal(a, 3.0)
    assert_baseline()


def test_interleaved_generators_end_their_regions_in_any_order(emulated):
    a = np.zeros(N)
    first, second = _region_generator(a, []), _region_generator(a, [])
    next(first)
    next(second)[:] = 2.0  # the same mapping: structured count 2
    assert acc.refcounts(a) == (2, 0)
    first.close()  # not LIFO
    assert acc.refcounts(a) == (1, 0)
    np.testing.assert_array_equal(a, 0.0)  # still mapped: nothing copied back yet
    with pytest.raises(StopIteration):
        next(second)
    np.testing.assert_array_equal(a, 2.0)
    assert_baseline()


def test_generator_closed_on_another_thread_ends_its_region(emulated):
    a = np.zeros(N)
    generator = _region_generator(a, [])
    next(generator)[:] = 4.0
    errors = []

    def close():
        try:
            acc.set_device_num(0, "emulated")
            generator.close()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    thread = threading.Thread(target=close)
    thread.start()
    thread.join(10)
    assert not errors, errors
    np.testing.assert_array_equal(a, 4.0)
    assert_baseline()


# =========================================================================== dropped references


def test_a_mapped_array_whose_last_reference_is_dropped_stays_alive_and_correct(emulated):
    a = np.arange(N, dtype=np.float64)
    device_a = acc.copyin(a)
    reference = weakref.ref(a)
    begin = a.__array_interface__["data"][0]
    del a
    gc.collect()
    assert reference() is not None, "the runtime let a mapped host array die"
    # new arrays never get its address, so they are never mistaken for present data
    others = [np.empty(N) for _ in range(200)]
    for other in others:
        start = other.__array_interface__["data"][0]
        assert not (begin <= start < begin + N * 8), "a new array reuses a mapped range"
        assert not acc.is_present(other)
    device_a[:] *= 2.0  # device code keeps using it
    again = acc.hostptr(device_a)
    assert again is not None and again.__array_interface__["data"][0] == begin
    acc.copyout(again)
    np.testing.assert_array_equal(again, 2.0 * np.arange(N))
    del again, device_a, others
    gc.collect()
    assert reference() is None, "the host array was kept alive after its mapping ended"
    assert_baseline()


def test_a_view_of_a_dropped_buffer_keeps_the_buffer_alive(emulated):
    base = np.arange(4 * N, dtype=np.float64)
    acc.copyin(base[N:2 * N])
    reference = weakref.ref(base)
    del base
    gc.collect()
    assert reference() is not None
    record, = acc.present_table()
    assert record.nbytes == N * 8
    acc.exit_data(delete=[reference()[N:2 * N]])
    gc.collect()
    assert reference() is None
    assert_baseline()


def test_an_array_dropped_while_its_async_copy_out_is_pending_is_still_written(emulated):
    a = np.zeros(N)
    acc.copyin(a)
    acc.deviceptr(a)[:] = 9.0
    reference = weakref.ref(a)
    seen = []
    with hold_queue(1):
        acc.copyout(a, async_=1)
        view = a[:4]  # a view that survives, to see the result through
        del a
        gc.collect()
        assert reference() is not None, "a host array with a pending copy-out died"
        seen.append(view.copy())
    acc.wait(1)
    np.testing.assert_array_equal(seen[0], 0.0)
    np.testing.assert_array_equal(view, 9.0)
    assert_baseline()


# =========================================================================== compile failure


@acc.parallel_loop(copyout="y")
def _fails_to_compile(x, y):
    for i in range(y.shape[0]):
        y[i] = x[i].no_such_attribute


def test_a_kernel_that_fails_to_compile_at_its_first_call_copies_nothing_back(emulated):
    scribble_device_memory()
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with pytest.raises(acc.CompileError):
        _fails_to_compile(x, y)
    assert_baseline()
    np.testing.assert_array_equal(y, 0.0)


# =========================================================================== interpreter exit


_EXIT_SCRIPT = textwrap.dedent("""
    import numpy as np
    import pyacc as acc

    acc.set_device_type("emulated")
    kept_alive = np.arange(64, dtype=np.float64)
    acc.copyin(kept_alive)
    acc.copyin(kept_alive)
    with_region = np.zeros(32)
    region = acc.data(copy=[with_region])
    region.__enter__()                  # never left
    pending = [np.ones(100_000) for _ in range(8)]
    for q, array in enumerate(pending):  # work still queued at exit
        acc.copyin(array, async_=q % 3)
        acc.copyout(array, async_=q % 3)
    print("done", flush=True)
""")


def _run_exit_script(**environment):
    env = dict(os.environ)
    env.pop("PYACC_DEBUG", None)
    env.update(environment)
    return subprocess.run([sys.executable, "-c", _EXIT_SCRIPT], capture_output=True, text=True,
                          timeout=120, env=env, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__)))))


@pytest.mark.slow
def test_interpreter_exit_with_live_mappings_and_pending_work_is_clean():
    result = _run_exit_script()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr


@pytest.mark.slow
def test_pyacc_debug_lists_the_live_mappings_at_exit():
    result = _run_exit_script(PYACC_DEBUG="1")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    # the listing of live mappings (lines with a host range), not the per-event debug
    # log PYACC_DEBUG also writes
    lines = [line for line in result.stderr.splitlines()
             if not line.startswith("pyacc debug:") and re.search(r"\[0x[0-9a-f]+,\+\d+\]", line)]
    kept = [line for line in lines if "kept_alive" in line]
    region = [line for line in lines if "with_region" in line]
    assert len(kept) == 1 and len(region) == 1, f"expected one line per live mapping:\n{result.stderr}"
    assert re.search(r"\[0x[0-9a-f]+,\+512\]", kept[0]), kept[0]
    assert re.search(r"structured=0\b.*dynamic=2\b", kept[0]), kept[0]
    assert re.search(r"\[0x[0-9a-f]+,\+256\]", region[0]), region[0]
    assert re.search(r"structured=1\b.*dynamic=0\b", region[0]), region[0]
