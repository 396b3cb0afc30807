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
