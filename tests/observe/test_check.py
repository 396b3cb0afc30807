"""PYACC_CHECK: the consistency checker passes on correct runs and names the entry when
the runtime's bookkeeping is wrong."""

import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc._devices import current_runtime
from pyacc.observe import verify_all
from pyacc.testing import hold_queue

from .conftest import run_program


def test_checked_program_runs_clean_in_a_subprocess():
    _, stderr, stats = run_program(PYACC_CHECK=1)
    assert "ConsistencyError" not in stderr and stats["launch_count"] == 2


def test_checker_is_clean_after_a_mix_of_directives(emulated, observe):
    observe(PYACC_CHECK=1)
    a, b = np.arange(8.0), np.zeros(8)
    acc.copyin(a)
    with acc.data(copy=[b], present=[a]):
        acc.update_device(a[2:5])
        with acc.data(copyin=[a[1:3]]):
            pass
    acc.create(b, async_=2)
    acc.delete(b, async_=2)
    acc.copyout(a, finalize=True)
    device_array = acc.malloc(16, np.float64)
    mapped = np.ones(16)
    acc.map_data(mapped, device_array)
    with acc.data(present=[mapped]):
        pass
    acc.unmap_data(mapped)
    acc.free(device_array)
    acc.wait_all()
    verify_all()


def test_checker_catches_a_corrupted_structured_counter(emulated, observe):
    observe(PYACC_CHECK=1)
    a = np.ones(8)
    acc.copyin(a)
    entry = current_runtime().table.containing(a)
    entry.structured = 1  # corrupted behind the runtime's back
    with pytest.raises(acc.ConsistencyError) as raised:
        acc.copyin(a)
    message = str(raised.value)
    assert "'a'" in message and "structured=0, dynamic=1" in message
    assert "without going through the runtime's verbs" in message
    acc.shutdown("emulated")  # ends every mapping; the checker starts afresh


def test_checker_catches_an_entry_lost_from_the_table(emulated, observe):
    observe(PYACC_CHECK=1)
    a = np.ones(8)
    acc.copyin(a)
    runtime = current_runtime()
    runtime.table.remove(runtime.table.containing(a))  # lost, and its memory with it
    with pytest.raises(acc.ConsistencyError) as raised:
        verify_all()
    message = str(raised.value)
    assert "missing from the present table" in message and "leaked" in message and "'a'" in message


def test_checker_catches_a_block_freed_behind_its_back(emulated, observe):
    observe(PYACC_CHECK=1)
    device_array = acc.malloc(32, np.uint8)
    runtime = current_runtime()
    runtime.device._arena.free(device_array.ctypes.data - runtime.device._base)
    with pytest.raises(acc.ConsistencyError, match="no longer holds it"):
        verify_all()
    runtime.shutdown()


def test_checker_waits_for_deferred_frees_before_calling_them_leaks(emulated, observe):
    """Memory in use = live allocations + pending deferred frees: with a queue held, the
    ended mapping's block is pending, not leaked."""
    observe(PYACC_CHECK=1)
    a = np.ones(8)
    with hold_queue(3):
        acc.copyin(a, async_=3)
        acc.delete(a, async_=3)
        verify_all()  # the free is queued behind the held copy: not a leak
    acc.wait(3)
    verify_all()
    assert acc.stats()["memory_in_use"] == 0


def test_checker_follows_failed_directives_rolling_back(emulated, observe, monkeypatch):
    observe(PYACC_CHECK=1)
    monkeypatch.setenv("PYACC_EMULATED_MEMORY", "4096")
    acc.shutdown("emulated")
    small, huge = np.ones(8), np.ones(1000)
    acc.copyin(small)
    with pytest.raises(acc.OutOfMemoryError):
        acc.enter_data(copyin=[small, huge])  # small joined, then rolled back
    assert acc.refcounts(small) == (0, 1)
    verify_all()
    acc.delete(small)


def test_checker_is_clean_under_threads(emulated, observe):
    observe(PYACC_CHECK=1)
    shared = np.ones(64)
    acc.copyin(shared)
    failures = []

    def work(seed):
        try:
            acc.set_device_type("emulated")
            own = np.full(32, float(seed))
            for step in range(200):
                with acc.data(copy=[own], present=[shared]):
                    acc.update_self(shared[:4])
                acc.copyin(own, async_=seed % 2)
                acc.delete(own, async_=seed % 2)
            acc.wait_all()
        except Exception as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    acc.delete(shared)
    acc.wait_all()
    verify_all()


def test_check_consistency_without_the_checker_says_how_to_turn_it_on(emulated, observe):
    with pytest.raises(RuntimeError, match="PYACC_CHECK=1"):
        verify_all()
