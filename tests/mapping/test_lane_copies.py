"""The data lane's copies (``DataLane.upload``/``download``, mapping/_lane_copies.c.h):
``acc.update_device``/``acc.update_self`` of present data on a device that copies in place
(``emulated``), in one C call. The lane copies only in the plain case and answers None,
having done nothing, otherwise; these tests hold it to the Python verb's rules (OpenACC 3.3
§2.14.4, API.md §4): the elements that move, the statistics, events, errors, fault
injection, patched devices, oversubscription."""


import numpy as np
import pytest

import pyacc as acc
from pyacc import _devices
from pyacc.mapping import BUS, EventKind, NotPresentError
from pyacc.mapping.devices.emulated import EmulatedDevice
from pyacc.testing import inject_faults

_cprobe = pytest.importorskip("pyacc.mapping._cprobe", reason="built without a C compiler")


def _lane():
    return _devices.current_runtime().lane


def _lane_state() -> str:
    """What decides whether the lane copies (for a failure's message): a lane that
    declined on an H100 machine's run, and passes here, is explained by it."""
    from pyacc.mapping import _cprobe

    runtime = _devices.current_runtime()
    lane, device = runtime.lane, runtime.device
    hooks = sorted(set(vars(device)) & {"_faults", "_copy", "upload", "download", "_transfer",
                                        "_transfer_operation", "launch"})
    from pyacc.mapping.devices.base import Device  # (admit_lane_copies reads the class's)
    moved = [f"{klass.__qualname__}.{hook}" for hook in ("upload", "download", "_transfer",
                                                         "_transfer_operation", "_copy")
             for klass in (type(device),) if getattr(klass, hook, None) is not getattr(Device, hook, None)]
    return (f"device {device!r} (copies in place: {getattr(device, 'copies_in_place', '?')}, "
            f"instance attributes {hooks}, _faults {getattr(device, '_faults', '?')!r}, "
            f"class methods other than Device's {moved}, class {type(device).__module__}."
            f"{type(device).__qualname__}), lock try "
            f"{_cprobe.lock_try()}, tracks_use {runtime.tracks_use}, "
            f"lane tracks_use {lane.tracks_use}, BUS tally_alone {BUS.tally_alone[0]}, silent "
            f"{BUS.silent[0]}, active {[k.name for k in EventKind if BUS.active[k]]}, "
            f"stats {acc.stats()}")


def _moved() -> tuple:
    stats = acc.stats()
    return stats["h2d_count"], stats["h2d_bytes"], stats["d2h_count"], stats["d2h_bytes"]


def test_update_of_present_data_copies_in_the_lane_and_counts_like_the_python_verb(emulated, python_frames):
    a = np.arange(12.0).reshape(3, 4)
    device = acc.copyin(a)
    acc.reset_stats()
    a[:] = -1.0
    assert python_frames(acc.update_device, a) == []
    np.testing.assert_array_equal(device, -1.0)
    device[1] = 9.0
    assert python_frames(acc.update_self, a) == []
    np.testing.assert_array_equal(a[1], 9.0)
    assert _moved() == (1, 96, 1, 96)
    acc.reset_stats()
    acc.update_device(a[2])  # a row: 32 bytes
    a[2] = 5.0
    a.flags.writeable = False  # update_self of a read-only host array: the Python verb's error
    with pytest.raises(acc.AccError):
        acc.update_self(a)
    a.flags.writeable = True
    assert _moved()[:2] == (1, 32)
    acc.delete(a)


def test_a_view_inside_a_mapping_moves_only_its_elements(emulated):
    a = np.arange(10.0)
    device = acc.copyin(a)
    a[:] = 0.0
    acc.update_device(a[3:6])
    np.testing.assert_array_equal(device, [0, 1, 2, 0, 0, 0, 6, 7, 8, 9])
    device[:] = 42.0
    acc.update_self(a[8:])
    np.testing.assert_array_equal(a, [0, 0, 0, 0, 0, 0, 0, 0, 42, 42])
    acc.update_self(a[::3])  # strided: the Python verb
    np.testing.assert_array_equal(a, [42, 0, 0, 42, 0, 0, 42, 0, 42, 42])
    acc.delete(a)


def test_the_lane_answers_none_and_changes_nothing_outside_the_plain_case(emulated):
    a, absent = np.arange(10.0), np.ones(4)
    acc.copyin(a)
    lane = _lane()
    assert lane.upload(absent) is None and lane.download(absent) is None
    assert lane.upload(a[::2]) is None  # strided
    assert lane.upload(np.arange(20.0)) is None  # partly present (a bigger range)
    class Subclass(np.ndarray):
        pass

    assert lane.upload(a.view(Subclass)) is None
    assert lane.upload(a[:0]) is None and lane.upload([1.0]) is None
    with pytest.raises(NotPresentError):
        acc.update_device(absent)
    acc.update_device(absent, if_present=True)  # a keyword: the Python verb, nothing to do
    acc.delete(a)


def test_big_copies_release_the_gil_and_copy_every_byte(emulated):
    a = np.random.default_rng(1).random(100_000)  # 800 KB: the GIL released for the copy
    device = acc.copyin(a)
    device[:] = 0.0
    acc.update_device(a)
    np.testing.assert_array_equal(device, a)
    device *= 2.0
    acc.update_self(a)
    np.testing.assert_array_equal(a, device)
    acc.delete(a)


def test_listeners_of_the_transfer_or_its_end_see_the_python_verb(emulated):
    a = np.arange(8.0)
    acc.copyin(a)
    for kinds in ((EventKind.UPLOAD,), (EventKind.DONE,), (EventKind.DIRECTIVE_END,)):
        seen = []
        BUS.subscribe(seen.append, kinds)
        try:
            acc.update_device(a)
        finally:
            BUS.unsubscribe(seen.append, kinds)
        assert [event.kind for event in seen] == list(kinds)
    tallied = []
    tally = lambda kind, device, nbytes: tallied.append((kind, nbytes))  # noqa: E731
    BUS.subscribe_tally(tally)
    try:
        acc.update_self(a)  # a second tally subscriber: BUS.count reaches both
    finally:
        BUS.unsubscribe_tally(tally)
    assert (int(EventKind.DOWNLOAD), 64) in tallied
    acc.delete(a)


def test_an_injected_copy_fault_hits_the_update(emulated):
    a = np.arange(8.0)
    device = acc.copyin(a)
    acc.update_device(a)  # the lane has found the device plain
    a[:] = 3.0
    with inject_faults(copy=1):
        with pytest.raises(acc.ExecutionError):
            acc.update_device(a)
    np.testing.assert_array_equal(device, np.arange(8.0))  # the destination was not written
    acc.update_device(a)  # the plan is gone: the lane again
    np.testing.assert_array_equal(device, 3.0)
    acc.delete(a)


def test_a_device_patched_or_subclassed_to_copy_otherwise_keeps_its_copy(emulated, monkeypatch):
    a = np.arange(8.0)
    acc.copyin(a)
    acc.update_device(a)
    device = _devices.current_runtime().device
    copies = []
    original = device._copy
    monkeypatch.setattr(device, "_copy", lambda to, source: (copies.append(source.nbytes), original(to, source)))
    acc.update_device(a)
    acc.update_self(a)
    assert copies == [64, 64]
    monkeypatch.undo()

    class Counting(EmulatedDevice):
        def _copy(self, destination, source):
            copies.append("subclass")
            super()._copy(destination, source)

    assert Counting(7).copies_in_place is False
    assert EmulatedDevice(7).copies_in_place is True
    acc.delete(a)


def test_oversubscribed_data_is_updated_by_the_python_verb(emulated):
    a = np.arange(8.0)
    device = acc.copyin(a)
    lane = _lane()
    lane.tracks_use = True  # (what the runtime sets while oversubscribing)
    try:
        assert lane.upload(a) is None and lane.download(a) is None
    finally:
        lane.tracks_use = False
    a[:] = 1.0
    assert lane.upload(a) is True, _lane_state()
    np.testing.assert_array_equal(device, 1.0)
    acc.delete(a)


def test_shared_memory_updates_take_no_action(host_device, python_frames, listening):
    """On host an update has nothing to copy (OpenACC 3.3 §2.7.4): the lane answers it, as
    the Python verb's no-op, without a Python frame; an object dtype, or someone listening
    to the directive's end, is the Python verb's (which refuses it, or publishes it)."""
    a = np.arange(8.0)
    acc.update_device(a)
    acc.update_self(a)
    assert _lane().upload(a) is True and _lane().download(a) is True
    assert python_frames(acc.update_device, a) == [] and a.tolist() == list(np.arange(8.0))
    assert _lane().upload(np.ndarray((1,), dtype=object)) is None
    from pyacc.mapping import EventKind
    events = listening(EventKind.DIRECTIVE_END)
    acc.update_self(a)
    assert [event.kind for event in events] == [EventKind.DIRECTIVE_END]


def test_arrays_of_object_references_are_left_to_the_python_verbs(emulated):
    """An object-dtype view of mapped memory: the Python verbs refuse it (``check_array``);
    the lane must not copy or count raw bytes as object references."""
    a = np.zeros(4)
    acc.copyin(a)
    objects = np.ndarray((4,), dtype=object, buffer=a)
    lane = _lane()
    assert lane.enter(objects) is None and lane.leave(objects) is None
    assert lane.upload(objects) is None and lane.download(objects) is None
    assert lane.join([objects]) is None
    for routine in (acc.copyin, acc.update_device, acc.update_self, acc.delete):
        with pytest.raises(acc.InvalidArgumentError):
            routine(objects)
    with pytest.raises(acc.InvalidArgumentError):
        with acc.data(present=[objects]):
            pass
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)


def test_a_listener_that_subscribes_while_an_update_waits_for_the_lock_sees_it(emulated, listening):
    import threading

    a = np.arange(8.0)
    acc.copyin(a)
    runtime = _devices.current_runtime()
    done = threading.Event()

    def update():
        acc.set_device_type("emulated")
        acc.update_device(a)
        done.set()

    with runtime.table.locked():
        worker = threading.Thread(target=update)
        worker.start()
        assert not done.wait(0.2)  # waiting for the lock, past the lane's first checks
        seen = listening(EventKind.UPLOAD)
    worker.join(5)
    assert done.is_set() and [event.kind for event in seen] == [EventKind.UPLOAD]
    acc.delete(a)


def test_the_lanes_count_in_place_in_the_devices_int64_statistics_row(emulated):
    """``Stats.counter_row`` is an ``array('q')`` the C lanes add to through its buffer
    (pyacc/_counter_row.h): held by them, it cannot be resized; a row of another kind is
    refused with an error naming the call."""
    from pyacc.mapping.events import STATS
    row = STATS.counter_row(_devices.current_runtime().device.identity)
    assert row.typecode == "q"
    a = np.ones(4)
    acc.copyin(a)
    before = list(row)
    acc.update_device(a)
    assert sum(after - first for after, first in zip(row, before)) == 1 + 32, \
        f"one upload and its 32 bytes, counted in the row itself: {_lane_state()}"
    with pytest.raises(BufferError):
        row.append(0)  # held by the lane: its counts stay where C adds to them
    lane = _lane()
    for bad in ([0] * len(row), np.zeros(len(row), dtype=np.int32), row[:1]):
        with pytest.raises(TypeError, match=r"allow_copies: the statistics row must be a writable array\(.q.\) with a count at index 3"):
            lane.allow_copies(object(), [True], bad, (0, 1, 2, 3), (0, 1, 2))
    acc.delete(a)
