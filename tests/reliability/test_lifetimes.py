"""Lifetimes of queued work and device blocks: program end completes the queues
(OpenACC 3.3 §2.16), a freed block is never reused while queued work may still touch it,
and ``os.fork`` after async use leaves the child working queues."""

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import pyacc as acc
from pyacc.testing import hold_queue

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script: str, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=timeout, cwd=_ROOT)


# == program end (OpenACC 3.3 §2.16: the end of the program completes the queues) =========
_SLOW_QUEUE = textwrap.dedent("""
    import atexit, time
    import numpy as np
    A = np.zeros(1000)
    atexit.register(lambda: print("A at exit:", A[0], A[-1], flush=True))  # runs after pyacc's
    import pyacc as acc
    from pyacc._devices import current_runtime
    acc.set_device_type("emulated")
    acc.copyin(A)
    acc.deviceptr(A)[:] = 1.0
    current_runtime().device.queue(1).submit(lambda: time.sleep(0.5), "a slow operation")
""")


def test_async_copyout_as_the_last_statement_reaches_the_host_array():
    """The issue: ``exit_data(copyout=[A], async_=1)`` as a script's last statement
    never reached A (queue workers are daemon threads)."""
    result = _run(_SLOW_QUEUE + "acc.exit_data(copyout=[A], async_=1)\n")
    assert result.returncode == 0, result.stderr
    assert "A at exit: 1.0 1.0" in result.stdout


def test_async_copyout_routine_at_program_end_reaches_the_host_array():
    result = _run(_SLOW_QUEUE + "acc.copyout(A, async_=1)\n")
    assert result.returncode == 0, result.stderr
    assert "A at exit: 1.0 1.0" in result.stdout


def test_an_unwaited_queued_error_is_printed_at_program_end_naming_queue_and_operation():
    result = _run("""
        import numpy as np
        import pyacc as acc
        import pyacc.testing
        acc.set_device_type("emulated")
        A = np.zeros(100)
        acc.copyin(A)
        faults = acc.testing.inject_faults(copy=1)
        faults.__enter__()                      # still installed when the copy runs
        acc.exit_data(copyout=[A], async_=2)
    """)
    assert "at program exit" in result.stderr
    assert "queue 2" in result.stderr
    assert "download of 'A'" in result.stderr or "download" in result.stderr
    assert "injected fault" in result.stderr


# == a freed block is not reused under queued work =========================================
def _writer(device_array, value, async_):
    """A queued operation that writes ``device_array`` (a device-to-device copy from a
    block filled with ``value``): the stand-in for a slow kernel."""
    source = acc.malloc(device_array.shape, device_array.dtype)
    acc.memcpy_to_device(source, np.full(device_array.shape, value, device_array.dtype))
    acc.memcpy_device(device_array, source, async_=async_)
    return source


def test_delete_under_queued_work_does_not_hand_the_block_to_the_next_mapping(emulated):
    """``copyin(a); slow_kernel(a, async_=1); delete(a); copyin(b); wait(1)`` must leave
    b's device copy as b: a's block is freed only once queue 1 has passed the work."""
    a = np.ones(100)
    acc.copyin(a)
    with hold_queue(1):
        source = _writer(acc.deviceptr(a), 7.0, 1)
        acc.delete(a)
        assert not acc.is_present(a)  # absent at once (API.md §5)
        b = np.zeros(100)
        acc.copyin(b)
    acc.wait(1)
    assert np.array_equal(acc.deviceptr(b), b)
    acc.delete(b)
    acc.free(source)
    acc.wait()
    assert acc.stats()["memory_in_use"] == 0


def test_free_under_queued_work_does_not_hand_the_block_to_the_next_allocation(emulated):
    d = acc.malloc(100, np.float64)
    with hold_queue(1):
        source = _writer(d, 7.0, 1)
        acc.free(d)
        b = np.zeros(100)
        acc.copyin(b)
    acc.wait(1)
    assert np.array_equal(acc.deviceptr(b), b)
    acc.delete(b)
    acc.free(source)
    acc.wait()
    assert acc.stats()["memory_in_use"] == 0


def test_async_exit_on_one_queue_waits_for_work_on_another(emulated):
    """An exit on queue 2 frees only after queue 1, busy with the block, has passed too."""
    a = np.ones(100)
    acc.copyin(a)
    with hold_queue(1):
        source = _writer(acc.deviceptr(a), 7.0, 1)
        acc.exit_data(delete=[a], async_=2)
        acc.wait(2)
        b = np.zeros(100)
        acc.copyin(b)
    acc.wait()
    assert np.array_equal(acc.deviceptr(b), b)
    acc.delete(b)
    acc.free(source)
    acc.wait()
    assert acc.stats()["memory_in_use"] == 0


def test_deferred_frees_pass_the_consistency_checker(emulated, checked):
    a = np.ones(100)
    acc.copyin(a)
    with hold_queue(1):
        source = _writer(acc.deviceptr(a), 7.0, 1)
        acc.delete(a)
    acc.wait()
    acc.free(source)
    acc.testing.check_consistency()
    assert acc.stats()["memory_in_use"] == 0


def test_synchronous_free_path_costs_nothing_extra(emulated):
    """With no queue busy the free happens at once (no deferral): memory is back
    before the call returns, with or without idle queues."""
    a = np.ones(100)
    acc.copyin(a)
    acc.delete(a)
    assert acc.stats()["memory_in_use"] == 0
    acc.copyin(a, async_=1)
    acc.wait(1)
    acc.delete(a)
    assert acc.stats()["memory_in_use"] == 0


# == os.fork after async use ================================================================
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_after_async_use_gives_the_child_working_queues():
    result = _run("""
        import os, signal
        import numpy as np
        import pyacc as acc
        acc.set_device_type("emulated")
        a = np.arange(100.0)
        acc.copyin(a, async_=1)
        acc.wait(1)
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)                    # a hang fails the test instead of blocking
            acc.deviceptr(a)[:] = 5.0
            acc.update_self(a, async_=1)
            acc.wait(1)
            acc.wait()
            os._exit(0 if a[0] == 5.0 else 3)
        _, status = os.waitpid(pid, 0)
        acc.update_self(a, async_=1)            # the parent's queues still work
        acc.wait(1)
        print("child", os.waitstatus_to_exitcode(status), "parent", a[0], flush=True)
    """, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "child 0 parent 0.0" in result.stdout, result.stdout + result.stderr


def test_fork_after_a_parallel_kernel_the_child_runs_kernels(tmp_path):
    """A child forked after a parallel kernel ran on host can run kernels itself (os.fork
    and a multiprocessing fork pool): the threading layer is oneTBB, which survives fork
    (GNU OpenMP kills such a child: compiler/threading_layer.py). The program selects host
    (ACC_DEVICE_TYPE, so every thread and pool worker has it): on a GPU machine the default
    is cuda, which a forked child cannot use (API.md §12, tests/pyacc/test_cuda_fork.py)."""
    script = tmp_path / "fork_after_kernel.py"  # kernels must live in a file
    script.write_text(textwrap.dedent("""
        import multiprocessing, os, signal
        os.environ["ACC_DEVICE_TYPE"] = "host"  # CPU kernels, GPU or not (read at first use)
        import numpy as np
        import pyacc as acc

        @acc.parallel_loop
        def bump(x):
            for i in range(x.shape[0]):
                x[i] += 1.0

        def work(n):
            z = np.zeros(n)
            bump(z)
            return float(z.sum())

        bump(np.zeros(50_000))
        pid = os.fork()
        if pid == 0:
            signal.alarm(60)
            os._exit(0 if work(50_000) == 50_000.0 else 3)
        _, status = os.waitpid(pid, 0)
        with multiprocessing.get_context("fork").Pool(2) as pool:
            sums = pool.map(work, [50_000, 50_000])
        print("child", os.waitstatus_to_exitcode(status), "pool", sums, "parent", work(10),
              acc.get_device_type(), flush=True)
    """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=180, cwd=_ROOT)
    assert result.returncode == 0, result.stderr
    assert "child 0 pool [50000.0, 50000.0] parent 10.0 host" in result.stdout, result.stdout + result.stderr


# == callbacks that raise never corrupt the bookkeeping ======================================
class _Boom(Exception):
    pass


def _boom(info):
    raise _Boom(info.event)


@pytest.fixture
def raising():
    """``raising(event)``: register a profiling callback that raises on ``event`` for the
    rest of the test."""
    registered = []

    def register(event):
        acc.profiling.register(event, _boom)
        registered.append(event)

    yield register
    for event in registered:
        acc.profiling.unregister(event, _boom)


def test_raising_on_data_construct_start_leaves_no_structured_count(emulated, checked, raising):
    """profiling.py / events.py: the exception propagates after the region has been
    entered and, since its block never runs, left again: refcounts are (0, 0)."""
    a = np.ones(4)
    raising("data_construct_start")
    with pytest.raises(_Boom):
        with acc.data(copy=[a]):
            pytest.fail("the block must not run")
    assert acc.refcounts(a) == (0, 0)
    acc.testing.check_consistency()


def test_raising_on_enter_data_inside_a_data_region_entry_releases_it(emulated, checked, raising):
    a, b = np.ones(4), np.ones(4)
    acc.copyin(b)
    raising("enter_data")
    with pytest.raises(_Boom):
        with acc.data(copy=[a, b]):
            pytest.fail("the block must not run")
    assert acc.refcounts(a) == (0, 0) and acc.refcounts(b) == (0, 1)
    acc.testing.check_consistency()


@pytest.mark.parametrize("event", ["data_construct_start", "enter_data"])
def test_raising_on_an_omp_target_data_entry_releases_its_maps(emulated, checked, raising, event):
    """The same rule for ``omp.target_data``: the maps are entered, the callback's
    exception comes after, and the block that will not run leaves them again."""
    from pyacc import omp

    a, b = np.ones(4), np.ones(4)
    acc.copyin(b)
    raising(event)
    with pytest.raises(_Boom):
        with omp.target_data(map_tofrom=[a, b]):
            pytest.fail("the block must not run")
    assert acc.refcounts(a) == (0, 0) and acc.refcounts(b) == (0, 1)
    acc.testing.check_consistency()


@pytest.mark.parametrize("mode", ["r", "w", "rw"])
def test_raising_on_an_acquire_entry_releases_its_hold(emulated, checked, raising, mode):
    """``acc.acquire`` holds the structured count for its block: a callback raising on
    the entry's enter_data leaves that hold released, and nothing is written back."""
    a = np.ones(4)
    acc.copyin(a)
    acc.deviceptr(a)[:] = 2.0
    raising("enter_data")
    with pytest.raises(_Boom):
        with acc.acquire(a, mode):
            pytest.fail("the block must not run")
    assert acc.refcounts(a) == (0, 1)
    np.testing.assert_array_equal(acc.deviceptr(a), 2.0)
    acc.testing.check_consistency()


def test_raising_on_exit_data_still_copies_back_and_removes_the_entry(emulated, checked, raising):
    """The issue: raising on an exit_data event left a (0, 0) entry in the table and
    skipped the copy-back."""
    a = np.ones(4)
    acc.copyin(a)
    acc.deviceptr(a)[:] = 5.0
    raising("exit_data")
    with pytest.raises(_Boom):
        acc.exit_data(copyout=[a])
    assert a.tolist() == [5.0] * 4
    assert acc.present_table() == []
    acc.testing.check_consistency()


def test_raising_on_enter_data_completes_every_increment(emulated, checked, raising):
    a, b = np.ones(4), np.ones(4)
    raising("enter_data")
    with pytest.raises(_Boom):
        acc.enter_data(copyin=[a, b])
    assert acc.refcounts(a) == (0, 1) and acc.refcounts(b) == (0, 1)
    acc.testing.check_consistency()


def test_raising_on_free_is_no_false_consistency_error(emulated, checked, raising):
    """The issue: raising on ``free`` made PYACC_CHECK=1 raise a false ConsistencyError
    (the ledger, subscribed after the callback, never saw the FREE)."""
    a, b = np.ones(4), np.ones(4)
    acc.enter_data(copyin=[a, b])
    raising("free")
    with pytest.raises(_Boom):
        acc.exit_data(delete=[a, b])
    assert acc.present_table() == []
    assert acc.stats()["memory_in_use"] == 0
    acc.testing.check_consistency()


@pytest.mark.parametrize("event", ["alloc", "enqueue_upload", "enqueue_download", "operation_end"])
def test_raising_on_transfer_and_memory_events_completes_the_directive(emulated, checked, raising, event):
    """Each directive that fires the event completes (its copy queued and run, its
    block kept) before the callback's exception propagates."""
    a, b = np.ones(4), np.full(4, 2.0)
    acc.copyin(a)
    acc.deviceptr(a)[:] = 3.0
    raising(event)
    for directive in (lambda: acc.copyin(b), lambda: acc.update_self(a), lambda: acc.copyout(b)):
        try:
            directive()
        except _Boom:
            pass
        acc.testing.check_consistency()
    assert a.tolist() == [3.0] * 4
    assert acc.refcounts(a) == (0, 1) and acc.refcounts(b) == (0, 0)


# == read-only host arrays as copy destinations ===============================================
def _read_only(n=4):
    array = np.zeros(n)
    array.flags.writeable = False
    return array


@pytest.mark.parametrize("form", ["copyout", "exit_data", "copyout_async"])
def test_copyout_to_a_read_only_array_is_an_invalid_argument_before_anything_changes(emulated, form):
    """API.md §4 / §7: InvalidArgumentError naming the array (shape, dtype, range),
    as ``acc.data(copy=)`` already does; counters and memory are as before."""
    a = _read_only()
    acc.copyin(a)
    with pytest.raises(acc.InvalidArgumentError, match=r"'a' \(shape \(4,\), dtype float64\) at \[0x[0-9a-f]+,\+32\] is read-only"):
        if form == "copyout":
            acc.copyout(a)
        elif form == "exit_data":
            acc.exit_data(copyout=[a])
        else:
            acc.copyout(a, async_=1)
    acc.wait()
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)
    assert acc.stats()["memory_in_use"] == 0


@pytest.mark.parametrize("form", ["update", "update_self", "update_self_async"])
def test_update_self_into_a_read_only_array_is_an_invalid_argument(emulated, form):
    a = _read_only()
    acc.copyin(a)
    with pytest.raises(acc.InvalidArgumentError, match="'a'.*read-only"):
        if form == "update":
            acc.update(self=[a])
        elif form == "update_self":
            acc.update_self(a)
        else:
            acc.update_self(a, async_=1)
    acc.wait()  # nothing was queued, nothing fails
    acc.update_device(a)  # the other direction is fine


EXITS_OF = {
    "copyout": lambda a: acc.copyout(a),
    "copyout async": lambda a: acc.copyout(a, async_=1),
    "exit_data": lambda a: acc.exit_data(copyout=[a]),
    "exit_data finalize": lambda a: acc.exit_data(copyout=[a], finalize=True),
    "update_self if_present": lambda a: acc.update_self(a, if_present=True),
    "update if_present": lambda a: acc.update(self=[a], if_present=True),
}


@pytest.mark.parametrize("form", EXITS_OF)
@pytest.mark.parametrize("n", [4, 0], ids=["absent", "empty"])
def test_an_exit_or_update_of_absent_or_empty_read_only_data_does_nothing(emulated, form, n):
    """API.md §8: an exit of absent data does nothing; §2: nothing happens for a
    zero-size array; OpenACC 3.3 §2.14.4: ``if_present`` skips absent data. Nothing is
    copied, so a read-only array is no error (it was refused before the table was read)."""
    a = _read_only(n)
    EXITS_OF[form](a)
    acc.wait()
    assert acc.refcounts(a) == (0, 0)


def test_an_exit_that_copies_nothing_back_accepts_a_read_only_array(emulated):
    """``exit data copyout`` is ``acc_copyout`` (OpenACC 3.3 §2.7.8): both decrement, and
    copy back only when both counts reach 0; while they do not, a read-only array is no
    error in either spelling."""
    a = _read_only()
    acc.copyin(a)
    acc.copyin(a)
    acc.exit_data(copyout=[a])
    assert acc.refcounts(a) == (0, 1)
    with acc.data(copyin=[a]):
        acc.copyout(a)
        acc.copyin(a)
        acc.exit_data(copyout=[a])
        assert acc.refcounts(a) == (1, 0)
    assert acc.refcounts(a) == (0, 0)


def test_an_exit_data_that_would_copy_into_a_read_only_array_changes_nothing(emulated):
    """All or nothing (API.md §4): ``exit_data(copyout=[b, a])`` where ``a`` is read-only and
    its copy-back due: ``InvalidArgumentError`` naming ``a``; ``b``'s counts and host data as
    before."""
    a, b = _read_only(), np.zeros(4)
    acc.copyin(b)
    acc.copyin(a)
    acc.deviceptr(b)[:] = 7.0
    with pytest.raises(acc.InvalidArgumentError, match="'a'.*read-only"):
        acc.exit_data(copyout=[b, a])
    assert acc.refcounts(a) == (0, 1) and acc.refcounts(b) == (0, 1)
    assert b.tolist() == [0.0] * 4
    acc.exit_data(copyout=[b], delete=[a])
    assert b.tolist() == [7.0] * 4


def test_a_region_exit_into_an_array_made_read_only_is_an_invalid_argument(emulated):
    """A ``copy`` array made read-only inside ``acc.data``: the exit copies the others back,
    ends every mapping, and raises ``InvalidArgumentError`` naming it (not NumPy's bare
    ``ValueError``), chained to the exception that left the block."""
    a, b = np.zeros(4), np.zeros(4)
    with pytest.raises(acc.InvalidArgumentError, match="'b'.*read-only") as raised:
        with acc.data(copy=[a, b]):
            acc.deviceptr(a)[:] = 1.0
            b.flags.writeable = False
            raise KeyError("the program's")
    assert isinstance(raised.value.__context__, KeyError)
    assert acc.refcounts(a) == acc.refcounts(b) == (0, 0)
    assert a.tolist() == [1.0] * 4
    assert acc.stats()["memory_in_use"] == 0


@pytest.mark.parametrize("device_type", ["emulated", "host"])
def test_memcpy_from_device_into_a_read_only_array_is_an_invalid_argument(device_type):
    acc.set_device_type(device_type)
    a = _read_only()
    d = acc.malloc(4, np.float64)
    try:
        with pytest.raises(acc.InvalidArgumentError, match="destination 'a'.*read-only"):
            acc.memcpy_from_device(a, d)
    finally:
        acc.free(d)
        acc.shutdown(device_type)


# == PYACC_CHECK: one array for two parameters ================================================
def test_checker_has_no_false_alarm_when_one_array_is_passed_for_two_parameters(emulated, checked):
    """API.md §11: ``with acc.data(copy=[x]): f(x, x)`` raised "This is a bug in pyacc":
    the fast exit published each duplicate's decrement from the final counters."""

    @acc.parallel_loop
    def add_one(a, b):
        for i in range(a.shape[0]):
            b[i] = a[i] + 1.0

    x = np.ones(10)
    with acc.data(copy=[x]):
        add_one(x, x)
        add_one(x, x)  # the replayed call
        add_one(x[2:5], x[2:5])  # two views of one mapping
    acc.testing.check_consistency()
    assert x[0] == 3.0 and x[3] == 4.0
