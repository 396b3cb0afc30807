"""The runtime verbs with an injected fake device: plan-then-commit, rollback, exits.

These check the planner's decisions through the device's log (what was allocated, copied
and freed), independently of any real device.
"""

import numpy as np
import pytest

from pyacc.mapping import (
    Counter,
    DeviceRuntime,
    ExecutionError,
    MapKind,
    MapRequest,
    NotPresentError,
    OutOfMemoryError,
    PartlyPresentError,
    UpdateDirection,
)

from .fakes import RecordingDevice


def _runtime(**device_options):
    device = RecordingDevice(**device_options)
    return DeviceRuntime(device), device


def _requests(kind, *arrays):
    return [MapRequest(kind, array) for array in arrays]


def _kinds(log):
    return [record[0] for record in log]


def _snapshot(runtime):
    return [(r.host_begin, r.nbytes, r.structured, r.dynamic) for r in runtime.records()]


def test_enter_allocates_then_copies_only_copyin_kinds():
    runtime, device = _runtime()
    a, b, c = np.ones(4), np.ones(4), np.ones(4)
    requests = _requests(MapKind.COPYIN, a) + _requests(MapKind.CREATE, b) + _requests(MapKind.COPY, c)
    runtime.enter(requests, Counter.STRUCTURED, device.sync_queue)
    assert _kinds(device.log) == ["alloc", "alloc", "alloc", "upload", "upload"]
    assert [runtime.refcounts(x) for x in (a, b, c)] == [(1, 0)] * 3


def test_out_of_memory_on_third_of_five_rolls_back_everything():
    runtime, device = _runtime(fail_alloc_at=4)  # the 3rd allocation of the 2nd directive
    present = np.zeros(4)
    runtime.enter(_requests(MapKind.COPYIN, present), Counter.DYNAMIC, device.sync_queue)
    before, in_use = _snapshot(runtime), device.memory_in_use
    arrays = [np.full(4, float(i)) for i in range(5)]
    with pytest.raises(OutOfMemoryError, match="nothing of this directive was mapped"):
        runtime.enter(_requests(MapKind.COPYIN, present, *arrays), Counter.DYNAMIC, device.sync_queue)
    assert _snapshot(runtime) == before
    assert device.memory_in_use == in_use
    assert runtime.refcounts(present) == (0, 1)  # the present increment was not committed
    assert _kinds(device.log[2:]) == ["alloc", "alloc", "free", "free"]  # nothing was copied for the failed directive


def test_transfer_failure_during_commit_restores_counters_and_frees():
    runtime, device = _runtime(fail_copy_at=3)
    a = np.zeros(4)
    runtime.enter(_requests(MapKind.COPYIN, a), Counter.DYNAMIC, device.sync_queue)  # copy 1
    before, in_use = _snapshot(runtime), device.memory_in_use
    b, c = np.ones(4), np.ones(4)
    with pytest.raises(ExecutionError):
        runtime.enter(_requests(MapKind.COPYIN, a, b, c), Counter.STRUCTURED, device.sync_queue)
    assert _snapshot(runtime) == before
    assert device.memory_in_use == in_use
    assert not runtime.is_present(b) and not runtime.is_present(c)


def test_same_array_twice_in_one_directive_counts_twice():
    runtime, device = _runtime()
    a = np.zeros(8)
    runtime.enter(_requests(MapKind.COPYIN, a, a[2:4]), Counter.DYNAMIC, device.sync_queue)
    assert runtime.refcounts(a) == (0, 2)
    assert _kinds(device.log) == ["alloc", "upload"]


def test_overlap_with_a_mapping_planned_by_the_same_directive_is_partly_present():
    runtime, device = _runtime()
    buf = np.zeros(8)
    with pytest.raises(PartlyPresentError, match="same directive"):
        runtime.enter(_requests(MapKind.COPYIN, buf[:4], buf[2:6]), Counter.DYNAMIC, device.sync_queue)
    assert runtime.records() == [] and device.memory_in_use == 0


def test_present_kind_of_absent_data_raises_before_any_allocation():
    runtime, device = _runtime()
    a, b = np.zeros(4), np.zeros(4)
    requests = _requests(MapKind.COPYIN, a) + _requests(MapKind.PRESENT, b)
    with pytest.raises(NotPresentError):
        runtime.enter(requests, Counter.STRUCTURED, device.sync_queue)
    assert device.log == []


def test_no_create_of_absent_data_maps_nothing_and_uses_the_host_array():
    runtime, device = _runtime()
    a = np.zeros(4)
    (mapped,) = runtime.enter(_requests(MapKind.NO_CREATE, a), Counter.STRUCTURED, device.sync_queue)
    assert mapped.entry is None and runtime.device_array(mapped) is a
    assert device.log == []


def test_structured_exit_copies_back_only_views_named_in_copy_clauses():
    runtime, device = _runtime()
    a = np.zeros(8)
    mapped = runtime.enter(_requests(MapKind.COPYIN, a) + _requests(MapKind.COPYOUT, a[2:4]),
                           Counter.STRUCTURED, device.sync_queue)
    runtime.deviceptr(a)[:] = 5.0
    runtime.exit_structured(mapped, device.sync_queue)
    assert list(a) == [0, 0, 5, 5, 0, 0, 0, 0]
    assert _kinds(device.log)[-2:] == ["download", "free"]


def test_structured_exit_without_copy_back_after_device_failure():
    runtime, device = _runtime()
    a = np.zeros(4)
    mapped = runtime.enter(_requests(MapKind.COPY, a), Counter.STRUCTURED, device.sync_queue)
    runtime.deviceptr(a)[:] = 9.0
    runtime.exit_structured(mapped, device.sync_queue, copy_back=False)
    assert not a.any() and runtime.records() == []


def test_exit_dynamic_validates_every_request_before_changing_anything():
    runtime, device = _runtime()
    buf = np.zeros(8)
    a = np.zeros(4)
    runtime.enter(_requests(MapKind.COPYIN, a, buf[:4]), Counter.DYNAMIC, device.sync_queue)
    before = _snapshot(runtime)
    with pytest.raises(PartlyPresentError):
        runtime.exit_dynamic(_requests(MapKind.COPYOUT, a, buf[2:6]), device.sync_queue)
    assert _snapshot(runtime) == before


def test_exit_dynamic_failing_copy_out_leaves_the_table_intact():
    runtime, device = _runtime(fail_copy_at=2)
    a = np.zeros(4)
    runtime.enter(_requests(MapKind.COPYIN, a), Counter.DYNAMIC, device.sync_queue)
    before, in_use = _snapshot(runtime), device.memory_in_use
    with pytest.raises(ExecutionError):
        runtime.exit_dynamic(_requests(MapKind.COPYOUT, a), device.sync_queue)
    assert _snapshot(runtime) == before and device.memory_in_use == in_use


def test_exit_copyout_then_delete_of_same_array_ends_by_delete_without_copy():
    runtime, device = _runtime()
    a = np.zeros(4)
    runtime.enter(_requests(MapKind.COPYIN, a, a), Counter.DYNAMIC, device.sync_queue)
    runtime.deviceptr(a)[:] = 1.0
    runtime.exit_dynamic(_requests(MapKind.COPYOUT, a) + _requests(MapKind.DELETE, a), device.sync_queue)
    assert not a.any() and runtime.records() == []


def test_update_moves_only_the_strided_elements():
    runtime, device = _runtime()
    grid = np.arange(12.0).reshape(3, 4)
    runtime.enter(_requests(MapKind.COPYIN, grid), Counter.DYNAMIC, device.sync_queue)
    runtime.deviceptr(grid)[:] = -1.0
    runtime.update([(UpdateDirection.SELF, grid[:, 1], None)], device.sync_queue)
    assert list(grid[:, 1]) == [-1, -1, -1]
    assert grid[0, 0] == 0 and grid[2, 3] == 11


def test_update_validates_all_items_before_moving_any():
    runtime, device = _runtime()
    a, absent = np.zeros(4), np.zeros(4)
    runtime.enter(_requests(MapKind.COPYIN, a), Counter.DYNAMIC, device.sync_queue)
    runtime.deviceptr(a)[:] = 3.0
    with pytest.raises(NotPresentError):
        runtime.update([(UpdateDirection.SELF, a, None), (UpdateDirection.SELF, absent, None)],
                       device.sync_queue)
    assert not a.any()


def test_namer_hook_names_new_entries():
    runtime, device = _runtime()
    runtime.namer = lambda array: "field"
    a = np.zeros(4)
    runtime.enter(_requests(MapKind.CREATE, a), Counter.DYNAMIC, device.sync_queue)
    assert runtime.records()[0].name == "field"


def test_structured_exit_whose_copy_back_fails_still_ends_the_region():
    """A region is over whatever happens at its exit: no zero-count entry stays behind."""
    runtime, device = _runtime(fail_copy_at=2)
    a = np.zeros(4)
    mapped = runtime.enter(_requests(MapKind.COPY, a), Counter.STRUCTURED, device.sync_queue)
    with pytest.raises(ExecutionError):
        runtime.exit_structured(mapped, device.sync_queue)
    assert runtime.records() == [] and device.memory_in_use == 0


def test_absent_copyin_probes_the_table_once_and_builds_one_view(monkeypatch):
    runtime, device = _runtime()
    a = np.arange(6.0)
    lookups, views = [], []
    monkeypatch.setattr(type(runtime.table), "lookup", lambda table, array: lookups.append(array))
    real_view = device.view
    monkeypatch.setattr(device, "view", lambda address, like: views.append(address) or real_view(address, like))
    device_array = runtime.enter_one(MapKind.COPYIN, a, Counter.DYNAMIC)
    assert lookups == [] and len(views) == 1
    assert runtime.refcounts(a) == (0, 1) and np.array_equal(device_array, a)
    assert _kinds(device.log) == ["alloc", "upload"]
    assert runtime.enter_one(MapKind.COPYIN, a, Counter.DYNAMIC) is device_array  # present: cached view
    assert runtime.refcounts(a) == (0, 2) and len(views) == 1


def test_copyin_of_partly_present_data_is_planned_in_full():
    runtime, device = _runtime()
    a = np.arange(8.0)
    runtime.enter_one(MapKind.COPYIN, a[:4], Counter.DYNAMIC)
    with pytest.raises(PartlyPresentError):
        runtime.enter_one(MapKind.COPYIN, a[2:6], Counter.DYNAMIC)
    assert _snapshot(runtime) == [(a.ctypes.data, 32, 0, 1)]


def test_host_and_separate_memory_runtimes_implement_the_protocol_side_by_side():
    import inspect

    from pyacc.mapping import HostDevice, MappingRuntime, SharedMemoryRuntime

    assert not issubclass(SharedMemoryRuntime, DeviceRuntime)
    assert not issubclass(DeviceRuntime, SharedMemoryRuntime)
    verbs = {name for name, member in inspect.getmembers(MappingRuntime)
             if getattr(member, "__isabstractmethod__", False)}
    for runtime_class in (DeviceRuntime, SharedMemoryRuntime):
        # defined by the class or its mixins (DeviceRuntime's LifetimeVerbs), not abstract
        implemented = {name for klass in runtime_class.__mro__
                       if klass not in (MappingRuntime, object) for name in vars(klass)}
        assert verbs <= implemented, runtime_class
    host = SharedMemoryRuntime(HostDevice(0))
    a = np.ones(3)
    assert host.enter_one(MapKind.COPYIN, a, Counter.DYNAMIC) is a and host.records() == []
