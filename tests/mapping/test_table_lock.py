"""The present table's lock (``_cprobe.TableLock``, mapping/_reentrant_lock.c.h): a
re-entrant lock with ``threading.RLock``'s semantics that pyacc's C lanes take in place.
Held to the RLock's rules one by one, against an RLock where a behaviour is compared, and
through the lanes that take it from C."""

import signal
import sys
import threading
import time

import numpy as np
import pytest

import pyacc as acc
from pyacc import _devices
from pyacc.mapping.table import PresentTable

_cprobe = pytest.importorskip("pyacc.mapping._cprobe", reason="built without a C compiler")
TableLock = _cprobe.TableLock


def _in_thread(function):
    """``function()``'s result, run on another thread."""
    result = []
    worker = threading.Thread(target=lambda: result.append(function()))
    worker.start()
    worker.join(10)
    return result[0]


def test_the_present_table_uses_the_lock_the_lanes_take_in_place():
    table = PresentTable()
    assert type(table.locked()) is TableLock
    old = table.locked()
    table.after_fork_in_child()
    assert type(table.locked()) is TableLock and table.locked() is not old


@pytest.mark.parametrize("make", [TableLock, threading.RLock], ids=["TableLock", "RLock"])
def test_reentrance_counts_levels_like_an_rlock(make):
    lock = make()
    with lock:
        with lock:
            assert lock._is_owned()
            assert _in_thread(lambda: lock.acquire(blocking=False)) is False
        assert _in_thread(lambda: lock.acquire(blocking=False)) is False  # one level still held
    assert not lock._is_owned()
    assert _in_thread(lambda: lock.acquire(blocking=False)) is True  # (that thread ended holding it)


@pytest.mark.parametrize("make", [TableLock, threading.RLock], ids=["TableLock", "RLock"])
def test_release_by_a_thread_that_does_not_hold_it_raises_runtime_error(make):
    lock = make()
    with pytest.raises(RuntimeError):
        lock.release()
    lock.acquire()
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()  # one release too many


def test_release_error_propagates_from_another_thread():
    lock = TableLock()
    lock.acquire()
    errors = []

    def release():
        try:
            lock.release()
        except RuntimeError as error:
            errors.append(error)

    worker = threading.Thread(target=release)
    worker.start()
    worker.join(5)
    assert errors and "un-acquired" in str(errors[0])
    assert lock._is_owned()
    lock.release()


def test_acquire_arguments_follow_rlock():
    lock = TableLock()
    with pytest.raises(ValueError):
        lock.acquire(False, 1.0)  # no timeout with a non-blocking call
    with pytest.raises(ValueError):
        lock.acquire(timeout=-5)
    with pytest.raises(TypeError):
        TableLock(1)
    assert lock.acquire(timeout=0.5) is True
    lock.release()


def test_a_timed_acquire_gives_up_after_its_timeout_and_a_waiter_gets_the_lock_once_released():
    lock = TableLock()
    lock.acquire()
    start = time.monotonic()
    assert _in_thread(lambda: lock.acquire(timeout=0.1)) is False
    assert 0.09 <= time.monotonic() - start < 5
    waited = []

    def wait():
        begin = time.monotonic()
        with lock:
            waited.append(time.monotonic() - begin)

    worker = threading.Thread(target=wait)
    worker.start()
    time.sleep(0.2)
    assert not waited
    lock.release()
    worker.join(5)
    assert waited and waited[0] >= 0.15


def test_the_lock_excludes_other_threads():
    lock, total = TableLock(), [0]

    def add():
        for _ in range(20000):
            with lock:
                with lock:
                    value = total[0]
                    total[0] = value + 1

    workers = [threading.Thread(target=add) for _ in range(4)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
    finally:
        sys.setswitchinterval(old)
    assert total[0] == 80000


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM")
def test_a_signal_handler_that_raises_ends_a_wait_for_the_lock(held_by_another_thread):
    lock = TableLock()

    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted

    with held_by_another_thread(lock):
        previous = signal.signal(signal.SIGALRM, handler)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            with pytest.raises(Interrupted):
                lock.acquire()  # waits with the GIL released; the handler's exception ends it
            assert not lock._is_owned()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    assert lock.acquire(blocking=False)
    lock.release()


def test_the_express_lane_and_the_data_lane_share_the_lock_a_directive_holds(emulated, held_by_another_thread):
    """Both C lanes take the table lock in place; a directive holding it on another
    thread keeps a data routine of present data waiting, and it proceeds on release."""
    a = np.arange(10.0)
    acc.copyin(a)
    runtime = _devices.current_runtime()
    done = threading.Event()

    def copyin():
        acc.set_device_type("emulated")  # (a new thread starts on the default device)
        assert _devices.current_runtime() is runtime
        acc.copyin(a)
        done.set()

    with held_by_another_thread(runtime.table.locked()):
        worker = threading.Thread(target=copyin)
        worker.start()
        assert not done.wait(0.2)
        assert runtime.table.containing(a).dynamic == 1  # (a lock-free read)
    worker.join(5)
    assert done.is_set() and acc.refcounts(a) == (0, 2)
    acc.delete(a, finalize=True)


def test_after_a_fork_the_routines_take_the_new_table_lock(emulated, held_by_another_thread):
    """In a fork's child the table gets a new lock (``after_fork_in_child``): the routines'
    C entry reads the lock at each call, never one it remembered."""
    a = np.arange(10.0)
    acc.copyin(a)
    acc.copyin(a)  # the lanes have met the current lock
    runtime = _devices.current_runtime()
    with held_by_another_thread(runtime.table.locked()):  # a thread of the "parent"
        runtime.table.after_fork_in_child()
        assert acc.copyin(a) is not None  # would wait for the old lock
        acc.delete(a)
        assert acc.is_present(a)
    assert acc.refcounts(a) == (0, 2)
    done = threading.Event()

    def copyin():
        acc.set_device_type("emulated")
        acc.copyin(a)
        done.set()

    with held_by_another_thread(runtime.table.locked()):  # the new lock, read in place
        worker = threading.Thread(target=copyin)
        worker.start()
        assert not done.wait(0.2)
    worker.join(5)
    assert done.is_set() and acc.refcounts(a) == (0, 3)
    acc.delete(a, finalize=True)


@pytest.mark.parametrize("make", [TableLock, threading.RLock], ids=["TableLock", "RLock"])
def test_timeouts_that_are_not_a_duration_are_refused_like_an_rlock(make):
    lock = make()
    with pytest.raises(ValueError):
        lock.acquire(timeout=float("nan"))
    with pytest.raises(OverflowError):
        lock.acquire(timeout=1e300)
    assert lock.acquire(timeout=1e-7)  # a tiny timeout still takes a free lock
    lock.release()


@pytest.mark.parametrize("make", [TableLock, threading.RLock], ids=["TableLock", "RLock"])
def test_a_condition_on_the_lock_gives_back_every_level_while_it_waits(make):
    lock = make()
    condition = threading.Condition(lock)
    taken = []

    def other():
        with condition:  # possible only while the waiter has given back both levels
            taken.append(True)
            condition.notify()

    with lock:
        with condition:
            worker = threading.Thread(target=other)
            worker.start()
            assert condition.wait(5)
            assert lock._is_owned()
        assert lock._is_owned()  # one level still held after the inner block
    worker.join(5)
    assert taken == [True] and not lock._is_owned()


def test_a_try_without_waiting_is_a_sem_trywait_where_cpython_locks_are_semaphores(held_by_another_thread):
    """``pyacc/_table_lock.h``: CPython's own try reads the clock for a deadline it never
    uses; where its locks are POSIX semaphores (``sys.thread_info.lock``) the lock is
    tried with ``sem_trywait``, and a lock held elsewhere is still refused."""
    expected = "sem_trywait" if sys.platform == "linux" and sys.thread_info.lock == "semaphore" \
        else "PyThread_acquire_lock_timed"
    assert _cprobe.lock_try() == expected
    lock = TableLock()
    with held_by_another_thread(lock):
        assert lock.acquire(blocking=False) is False, "a lock another thread holds is not taken"
    assert lock.acquire(blocking=False) is True, "a free lock is taken by one try"
    assert lock.acquire(blocking=False) is True, "and again by its owner (re-entrant)"
    lock.release()
    lock.release()
