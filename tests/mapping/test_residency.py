"""Oversubscription at the mapping level (mapping/residency.py, mapping/oversubscribe.py):
eviction order, restore before use, ``note_use`` (the compute path's contract), queued and
synchronous uses that keep data resident, the table version, fault injection during
eviction and restore, and the cuda device on its fake backend."""

import threading

import numpy as np
import pytest

from pyacc.mapping import (BUS, Counter, DeviceRuntime, EventKind, ExecutionError, MapKind, MapRequest,
                     OutOfMemoryError, UpdateDirection, UpdateItem)
from pyacc.mapping.devices.cuda import CudaDevice
from pyacc.mapping.devices.cuda_fake import FakeCudaBackend
from pyacc.mapping.devices.emulated import EmulatedDevice
from pyacc.mapping.devices.faults import FaultPlan
from tests.mapping.fakes import close_streams

BLOCK = 2048  # one float64 array of 256 elements: one allocator block (no gap below 4 KiB)
_DYNAMIC, _STRUCTURED = Counter.DYNAMIC, Counter.STRUCTURED


def _array(seed: int) -> np.ndarray:
    return np.arange(BLOCK // 8, dtype=np.float64) + 1000.0 * seed


@pytest.fixture
def runtime():
    """An emulated device that holds four arrays, oversubscribing."""
    runtime = DeviceRuntime(EmulatedDevice(0, capacity=4 * BLOCK))
    runtime.set_oversubscribe(True)
    yield runtime
    runtime.shutdown()


@pytest.fixture
def events():
    seen = []
    kinds = (EventKind.EVICT, EventKind.RESTORE)
    BUS.subscribe(seen.append, kinds)
    yield seen
    BUS.unsubscribe(seen.append, kinds)


def _copyin(runtime, *arrays, queue=None):
    for array in arrays:
        runtime.enter([MapRequest(MapKind.COPYIN, array)], _DYNAMIC, queue or runtime.device.sync_queue)


def _entry(runtime, array):
    return runtime.table.containing(array)


def _device_values(runtime, array):
    entry = _entry(runtime, array)
    assert not entry.evicted
    return runtime.device.view(entry.device_address, array).copy()


def test_the_least_recently_used_entry_is_evicted_when_an_allocation_would_fail(runtime, events):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays[:4])
    runtime.note_use([_entry(runtime, arrays[0])], None)  # a0 used last: a1 is the LRU
    _copyin(runtime, arrays[4])
    assert [e.info.host_array is arrays[1] for e in events] == [True]
    assert [_entry(runtime, a).evicted for a in arrays] == [False, True, False, False, False]
    assert runtime.refcounts(arrays[1]) == (0, 1) and runtime.is_present(arrays[1])


def test_wont_use_data_is_evicted_before_the_least_recently_used(runtime, events):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays[:4])
    runtime.wont_use(arrays[3])
    _copyin(runtime, arrays[4])
    assert _entry(runtime, arrays[3]).evicted and not _entry(runtime, arrays[0]).evicted


def test_note_use_restores_an_evicted_entry_with_its_bytes_and_changes_the_table_version(runtime, events):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays)
    evicted = _entry(runtime, arrays[0])
    assert evicted.evicted
    version = runtime.table.version
    assert runtime.note_use([evicted], None) is True
    assert runtime.table.version != version
    assert not evicted.evicted
    np.testing.assert_array_equal(_device_values(runtime, arrays[0]), arrays[0])
    assert [e.kind for e in events] == [EventKind.EVICT, EventKind.EVICT, EventKind.RESTORE]
    assert runtime.note_use([evicted], None) is False  # resident: nothing to restore


def test_the_host_array_keeps_its_own_values_through_eviction_and_restore(runtime):
    """Evicted bytes go to runtime-owned memory, never into the user's array."""
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays[:4])
    arrays[0][:] = -1.0  # a host change never sent: the device copy keeps the old values
    arrays[0].flags.writeable = False  # any write by eviction or restore would raise
    _copyin(runtime, arrays[4])
    assert _entry(runtime, arrays[0]).evicted
    runtime.note_use([_entry(runtime, arrays[0])], None)
    np.testing.assert_array_equal(_device_values(runtime, arrays[0]), _array(0))
    assert (arrays[0] == -1.0).all()


def test_a_clean_entry_is_evicted_again_without_a_copy(runtime, events):
    """Restored and only read since: its saved copy is still valid (StarPU's clean replicate)."""
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays)  # a0 evicted: written back
    entries = [_entry(runtime, a) for a in arrays]
    runtime.note_use([entries[0]], None, written=[False])  # restored (a1 out), then read
    runtime.note_use(entries[2:], None, written=[False] * 3)  # a0 is now the LRU
    runtime.note_use([entries[1]], None)  # needs room: a0 goes, clean
    evictions = [(e.info.host_array is arrays[0], e.nbytes) for e in events if e.kind is EventKind.EVICT]
    assert evictions == [(True, BLOCK), (False, BLOCK), (True, 0)]


def test_note_use_raises_out_of_memory_only_when_the_entries_do_not_fit_together(runtime):
    arrays = [_array(k) for k in range(6)]
    _copyin(runtime, *arrays)
    entries = [_entry(runtime, a) for a in arrays]
    before = [(e.counters, e.evicted) for e in entries]
    with pytest.raises(OutOfMemoryError, match="needed by this operation at once"):
        runtime.note_use(entries, None)
    assert [e.counters for e in entries] == [c for c, _ in before]
    runtime.note_use(entries[:4], None)  # four fit
    for array in arrays[:4]:
        np.testing.assert_array_equal(_device_values(runtime, array), array)


def test_an_enter_that_needs_more_than_the_capacity_at_once_maps_nothing(runtime):
    arrays = [_array(k) for k in range(5)]
    with pytest.raises(OutOfMemoryError):
        runtime.enter([MapRequest(MapKind.COPYIN, a) for a in arrays], _STRUCTURED, runtime.device.sync_queue)
    assert all(runtime.refcounts(a) == (0, 0) for a in arrays)
    assert runtime.device.memory_in_use == 0


def test_join_falls_back_to_enter_while_oversubscribing_and_memos_are_dropped(runtime):
    arrays = [_array(k) for k in range(5)]
    runtime.set_oversubscribe(False)
    _copyin(runtime, *arrays[:2])
    memos = []
    entries = runtime.join_structured(arrays[:2], memos)
    assert entries is not None
    runtime.leave_structured(entries)
    runtime.set_oversubscribe(True)
    assert memos[0].version != runtime.table.version  # a replayed plan is not reused
    assert runtime.join_structured(arrays[:2]) is None  # evicted or not: through enter
    mapped = runtime.enter([MapRequest(MapKind.PRESENT, a) for a in arrays[:2]], _STRUCTURED,
                           runtime.device.sync_queue)
    assert [m.entry.structured for m in mapped] == [1, 1]


def test_an_evicted_entry_enters_a_region_restored(runtime):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays)
    assert _entry(runtime, arrays[0]).evicted
    mapped = runtime.enter([MapRequest(MapKind.PRESENT, arrays[0])], _STRUCTURED, runtime.device.sync_queue)
    np.testing.assert_array_equal(runtime.device_array(mapped[0]), arrays[0])
    assert runtime.refcounts(arrays[0]) == (1, 1)


def test_a_queued_use_keeps_its_entries_resident_until_the_queue_passes_it(runtime):
    """An allocation that needs their room waits for the queue (a queue's work and an
    eviction never race), then evicts."""
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays[:4])
    queue = runtime.device.queue(1)
    entries = [_entry(runtime, a) for a in arrays[:4]]
    waiter = threading.Thread(target=_copyin, args=(runtime, arrays[4]))
    seen = []
    with queue.hold():
        runtime.note_use(entries, queue)
        views = [runtime.device_array_of(entry, entry.host_array) for entry in entries]
        queue.submit(lambda: seen.extend(view.copy() for view in views), "the kernel")
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive() and not any(e.evicted for e in entries)
    waiter.join(10)
    assert not waiter.is_alive() and runtime.is_present(arrays[4])
    assert sum(e.evicted for e in entries) == 1
    for array, values in zip(arrays, seen):  # the kernel ran on the data, not on freed blocks
        np.testing.assert_array_equal(values, array)


def test_the_kernel_queued_after_note_use_keeps_its_entries_until_it_has_run(runtime):
    """``note_use`` comes before the launch: the entries stay resident until the queue has
    passed what was queued after the note too (not only up to the note)."""
    import time

    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays[:4])
    queue = runtime.device.queue(3)
    entries = [_entry(runtime, a) for a in arrays[:4]]
    runtime.note_use(entries, queue)
    views = [runtime.device_array_of(entry, entry.host_array) for entry in entries]
    seen = []

    def kernel():
        time.sleep(0.2)
        seen.extend(view.copy() for view in views)

    queue.submit(kernel, "a slow kernel")
    _copyin(runtime, arrays[4])  # needs a block: waits for the kernel, then evicts
    assert len(seen) == 4 and sum(e.evicted for e in entries) == 1
    for array, values in zip(arrays, seen):
        np.testing.assert_array_equal(values, array)


def test_a_restore_on_a_queue_runs_in_order_before_the_work_behind_it(runtime):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays)
    queue = runtime.device.queue(2)
    entry = _entry(runtime, arrays[0])
    seen = []
    with queue.hold():
        runtime.note_use([entry], queue)
        device_array = runtime.device_array_of(entry, arrays[0])
        queue.submit(lambda: seen.append(device_array.copy()), "a reader")
    runtime.device.wait(queue)
    np.testing.assert_array_equal(seen[0], arrays[0])


def test_a_synchronous_use_keeps_its_entries_resident_from_other_threads(runtime):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays[:4])
    runtime.note_use([_entry(runtime, a) for a in arrays[:4]], None)  # this thread's kernel
    failures = []

    def other_thread():
        try:
            _copyin(runtime, arrays[4])
        except OutOfMemoryError as error:
            failures.append(error)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(failures) == 1
    runtime.end_use()  # the kernel is over
    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(failures) == 1 and runtime.is_present(arrays[4])


def test_a_device_array_the_program_holds_keeps_its_entry_resident(runtime):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays[:4])
    held = runtime.deviceptr(arrays[0])
    runtime.note_use([_entry(runtime, a) for a in arrays[1:4]], None)  # a0 is now the LRU
    _copyin(runtime, arrays[4])
    assert not _entry(runtime, arrays[0]).evicted
    np.testing.assert_array_equal(held, arrays[0])
    del held


def test_an_update_restores_evicted_data_before_it_moves(runtime):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays)
    arrays[0][:] = 0.0
    runtime.update([UpdateItem(UpdateDirection.SELF, arrays[0], None)], runtime.device.sync_queue)
    np.testing.assert_array_equal(arrays[0], _array(0))


def test_a_copy_back_of_evicted_data_returns_its_device_values(runtime):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays)
    arrays[0][:] = 0.0
    runtime.exit_dynamic([MapRequest(MapKind.COPYOUT, arrays[0])], runtime.device.sync_queue)
    np.testing.assert_array_equal(arrays[0], _array(0))
    assert not runtime.is_present(arrays[0])


def test_an_evicted_entry_that_ends_without_a_copy_frees_nothing_twice(runtime):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays)
    in_use = runtime.device.memory_in_use
    runtime.exit_dynamic([MapRequest(MapKind.DELETE, arrays[0])], runtime.device.sync_queue)
    assert runtime.device.memory_in_use == in_use and runtime.device.check_memory() == []


# -- fault injection: all or nothing -----------------------------------------------------
def test_a_copy_that_fails_during_eviction_leaves_everything_as_it_was(runtime):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays[:4])
    runtime.device.inject_faults(FaultPlan(copy=1))  # the eviction's save
    try:
        with pytest.raises(ExecutionError):
            _copyin(runtime, arrays[4])
    finally:
        runtime.device.inject_faults(None)
    assert not runtime.is_present(arrays[4])
    assert [_entry(runtime, a).evicted for a in arrays[:4]] == [False] * 4
    for array in arrays[:4]:
        np.testing.assert_array_equal(_device_values(runtime, array), array)
    assert runtime.device.check_memory() == []


@pytest.mark.parametrize("fault", [{"copy": 1}, {"alloc": 1}])
def test_a_restore_that_fails_leaves_the_counters_and_the_saved_bytes(runtime, fault):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays)
    entry = _entry(runtime, arrays[0])
    counters = entry.counters
    in_use = runtime.device.memory_in_use
    runtime.device.inject_faults(FaultPlan(**fault))
    try:
        with pytest.raises((ExecutionError, OutOfMemoryError)):
            runtime.enter([MapRequest(MapKind.PRESENT, arrays[0])], _STRUCTURED, runtime.device.sync_queue)
    finally:
        runtime.device.inject_faults(None)
    assert entry.counters == counters and entry.evicted
    assert runtime.device.memory_in_use <= in_use and runtime.device.check_memory() == []
    runtime.note_use([entry], None)
    np.testing.assert_array_equal(_device_values(runtime, arrays[0]), arrays[0])


def test_a_failed_restore_for_a_copy_back_leaves_exit_data_undone(runtime):
    arrays = [_array(k) for k in range(5)]
    _copyin(runtime, *arrays)
    runtime.device.inject_faults(FaultPlan(copy=1))
    try:
        with pytest.raises(ExecutionError):
            runtime.exit_dynamic([MapRequest(MapKind.COPYOUT, arrays[0])], runtime.device.sync_queue)
    finally:
        runtime.device.inject_faults(None)
    assert runtime.refcounts(arrays[0]) == (0, 1)


def test_switching_oversubscription_off_restores_everything(runtime):
    arrays = [_array(k) for k in range(4)]
    _copyin(runtime, *arrays)
    runtime.residency.evict_all()
    assert all(_entry(runtime, a).evicted for a in arrays)
    runtime.set_oversubscribe(False)
    assert not runtime.tracks_use
    for array in arrays:
        np.testing.assert_array_equal(_device_values(runtime, array), array)


# -- cuda, on the fake backend (no GPU) ----------------------------------------------------
@pytest.fixture
def cuda_runtime():
    device = CudaDevice(0, backend=FakeCudaBackend(capacity=4 * BLOCK))
    runtime = DeviceRuntime(device)
    runtime.set_oversubscribe(True)
    yield runtime
    runtime.shutdown()
    close_streams(device)


def test_cuda_evicts_to_pinned_host_memory_and_restores_on_the_using_stream(cuda_runtime):
    runtime = cuda_runtime
    arrays = [_array(k) for k in range(6)]
    _copyin(runtime, *arrays)
    evicted = [a for a in arrays if _entry(runtime, a).evicted]
    assert len(evicted) == 2
    queue = runtime.device.queue(1)
    entry = _entry(runtime, evicted[0])
    pinned_before = len(runtime.device.backend.memcpys)
    runtime.note_use([entry], queue)  # restored on queue 1's stream
    runtime.update([UpdateItem(UpdateDirection.SELF, evicted[0], None)], queue)
    runtime.device.wait(queue)
    np.testing.assert_array_equal(evicted[0], _array(arrays.index(evicted[0])))
    assert len(runtime.device.backend.memcpys) > pinned_before
    for array in arrays:
        runtime.exit_dynamic([MapRequest(MapKind.COPYOUT, array)], runtime.device.sync_queue)
    for index, array in enumerate(arrays):
        np.testing.assert_array_equal(array, _array(index))
    assert runtime.device.memory_in_use == 0


def _program(runtime, arrays):
    """Directives that evict and restore on a device of four arrays, one at a time."""
    sync = runtime.device.sync_queue
    steps = [lambda a=a: _copyin(runtime, a) for a in arrays]
    steps += [lambda: runtime.update([UpdateItem(UpdateDirection.SELF, arrays[0], None)], sync),
              lambda: runtime.enter([MapRequest(MapKind.PRESENT, a) for a in arrays[1:4]], _STRUCTURED, sync),
              lambda: runtime.exit_dynamic([MapRequest(MapKind.COPYOUT, arrays[4])], sync),
              lambda: runtime.update([UpdateItem(UpdateDirection.DEVICE, arrays[5], None)], sync),
              lambda: runtime.exit_dynamic([MapRequest(MapKind.COPYOUT, arrays[0])], sync)]
    return steps


def test_every_injected_fault_during_eviction_or_restore_leaves_its_directive_undone():
    """Each copy and allocation of the program fails in turn: the directive that meets it
    raises with every counter and host array as before, the device copies keep their
    values, and the program then finishes with the right data."""
    with_faults = 0
    for kind in ("copy", "alloc"):
        for index in range(1, 40):
            runtime = DeviceRuntime(EmulatedDevice(0, capacity=4 * BLOCK))
            runtime.set_oversubscribe(True)
            arrays = [_array(k) for k in range(6)]
            plan = FaultPlan(**{kind: index})
            runtime.device.inject_faults(plan)
            failed = False
            for step in _program(runtime, arrays):
                before = [(runtime.refcounts(a), a.copy()) for a in arrays]
                try:
                    step()
                except (ExecutionError, OutOfMemoryError):
                    failed = True
                    for array, (counts, values) in zip(arrays, before):
                        assert runtime.refcounts(array) == counts, (kind, index, step)
                        np.testing.assert_array_equal(array, values)
                    runtime.device.inject_faults(None)
                    step()  # the same directive, without the fault, now succeeds
            runtime.device.inject_faults(None)
            for k, array in enumerate(arrays):  # every device copy still holds its values
                if runtime.is_present(array):
                    runtime.note_use([_entry(runtime, array)], None)
                    np.testing.assert_array_equal(_device_values(runtime, array), _array(k))
                else:
                    np.testing.assert_array_equal(array, _array(k))
            assert runtime.device.check_memory() == []
            runtime.shutdown()
            if not plan.fired:
                break
            with_faults += failed
    assert with_faults > 10  # the sweep reached evictions and restores, not only copy-ins
