"""The data lane's structured counts (``DataLane.join``/``part``, mapping/_lane_regions.c.h):
a data region's entry and exit of present data in one C call each. The lane changes counts
only in the plain case, all or nothing, and answers None otherwise; these tests hold it to
``runtime.enter``/``exit_structured`` (OpenACC 3.3 §2.6.5, §2.7): counts, duplicates, a
lifetime ending at the exit (copied back by the Python exit), events, oversubscription."""

import sys
import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc import _devices
from pyacc.mapping import EventKind, MapKind, MapRequest, Mapped

_cprobe = pytest.importorskip("pyacc.mapping._cprobe", reason="built without a C compiler")


def _lane():
    return _devices.current_runtime().lane


def _runtime_verbs(function) -> list[str]:
    """The methods of the mapping runtime that ``function()`` entered."""
    entered = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith("mapping/runtime.py"):
            entered.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
    return entered


class _Arrays(list):
    """A list subclass: not a sequence the lane reads in place."""


@pytest.mark.parametrize("sequence", [list, tuple])
def test_join_and_part_change_every_structured_count_by_one(emulated, sequence):
    a, b = np.arange(10.0), np.ones(4)
    acc.copyin(a)
    acc.copyin(b)
    entries = _lane().join(sequence([a, b[1:3], a[2:5]]))
    assert type(entries) is tuple, "the entries a C region keeps until its exit"
    assert len(entries) == 3 and entries[0] is entries[2]
    assert acc.refcounts(a) == (2, 1) and acc.refcounts(b) == (1, 1)
    assert _lane().part(sequence(entries)) is True
    assert acc.refcounts(a) == (0, 1) and acc.refcounts(b) == (0, 1)
    acc.delete(a)
    acc.delete(b)


def test_join_is_all_or_nothing(emulated):
    a, absent = np.arange(10.0), np.ones(4)
    acc.copyin(a)
    assert _lane().join([a, absent]) is None
    assert _lane().join([a, np.arange(20.0)]) is None  # partly present
    assert _lane().join([a, a[::2]]) is None  # strided: the Python verb
    assert _lane().join([a, a[:0]]) is None  # zero-size: the Python verb
    assert _lane().join([]) is None and _lane().join(()) is None  # (not empty)
    assert _lane().join(iter([a])) is None and _lane().join(_Arrays([a])) is None  # (exact)
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)


def test_part_declines_when_a_lifetime_would_end(emulated):
    a = np.arange(10.0)
    acc.copyin(a)
    entries = _lane().join([a, a])
    acc.delete(a)  # the dynamic count goes: the two structured counts hold the data
    assert acc.refcounts(a) == (2, 0)
    assert _lane().part(entries) is None  # both −1 would end it: the full exit
    assert acc.refcounts(a) == (2, 0)
    assert _lane().part(entries[:1]) is True  # one −1 leaves (1, 0)
    assert acc.refcounts(a) == (1, 0)
    runtime = _devices.current_runtime()  # the last structured exit, the Python verb's
    runtime.exit_structured([Mapped(MapRequest(MapKind.PRESENT, a), entries[0])], runtime.device.sync_queue)
    assert not acc.is_present(a)


def test_a_region_of_present_data_takes_the_lane_and_the_python_exit_when_data_leaves(emulated):
    a = np.arange(10.0)
    acc.copyin(a)
    run = lambda: acc.data(present=[a]).__enter__().__exit__(None, None, None)  # noqa: E731
    assert "enter" not in _runtime_verbs(run) and "exit_structured" not in _runtime_verbs(run)
    assert acc.refcounts(a) == (0, 1)
    with acc.data(copy=[a]):  # the copy's lifetime ends at the exit: copied back by Python
        np.asarray(acc.deviceptr(a))[:] = 7.0
        acc.delete(a)
        assert acc.refcounts(a) == (1, 0)
    np.testing.assert_array_equal(a, 7.0)
    assert not acc.is_present(a)


def test_observed_regions_publish_every_count(emulated, listening):
    a = np.arange(10.0)
    acc.copyin(a)
    seen = listening(EventKind.ENTER_DATA, EventKind.EXIT_DATA)
    with acc.data(present=[a]):
        pass
    assert [event.kind for event in seen] == [EventKind.ENTER_DATA, EventKind.EXIT_DATA]
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)


def test_oversubscription_takes_the_python_verbs_and_shared_memory_counts_nothing(emulated):
    a = np.arange(10.0)
    acc.copyin(a)
    lane = _lane()
    lane.tracks_use = True
    try:
        assert lane.join([a]) is None
    finally:
        lane.tracks_use = False
    acc.delete(a)
    acc.set_device_type("host")
    entries = _lane().join([a, a[2:4]])  # shared memory: present, no action (§2.7.4)
    assert entries == (None, None) and acc.refcounts(a) == (0, 0)
    assert _lane().part(entries) is True and acc.refcounts(a) == (0, 0)
    assert _lane().join([a, a[::2]]) is None  # a strided view: the Python verb validates it
    with acc.data(copy=[a]):
        assert acc.is_present(a)


# -- a section without the table lock (pyacc/_table_lock.h's table_lock_free_here) -------
@pytest.mark.parametrize("dtypes", ["one dtype", "two dtypes"])
def test_a_join_waits_for_a_table_lock_another_thread_holds(emulated, dtypes):
    """The lane skips the lock only when nobody else holds it: a held compute call or
    another thread's directive is waited for, whether or not the section could skip it
    (arrays of two dtypes always take the lock)."""
    a, n = np.arange(10.0), np.arange(6)
    acc.copyin(a)
    acc.copyin(n)
    given = [a, a[2:4]] if dtypes == "one dtype" else [a, n]
    runtime = _devices.current_runtime()
    joined = []
    with runtime.table.locked():
        worker = threading.Thread(target=lambda: joined.append(runtime.lane.join(given)))
        worker.start()
        worker.join(0.2)
        assert worker.is_alive() and acc.refcounts(a) == (0, 1)  # waits for the holder
    worker.join(5)
    assert not worker.is_alive() and acc.refcounts(a)[0] == (2 if dtypes == "one dtype" else 1)
    assert _lane().part(joined[0]) is True and acc.refcounts(a) == (0, 1) and acc.refcounts(n) == (0, 1)
    acc.delete(a)
    acc.delete(n)


def test_a_region_entered_by_the_thread_holding_the_table_lock_re_enters_it(emulated):
    a = np.arange(10.0)
    acc.copyin(a)
    runtime = _devices.current_runtime()
    with runtime.table.locked():  # as a region entered from a callback of a held call
        with acc.data(present=[a]):
            assert acc.refcounts(a) == (1, 1)
        assert acc.refcounts(a) == (0, 1)
    done = threading.Event()  # and the lock is free again, once
    threading.Thread(target=lambda: (runtime.lane.enter(a), done.set())).start()
    assert done.wait(5) and acc.refcounts(a) == (0, 2)
    acc.delete(a)
    acc.delete(a)


def test_counts_beyond_one_digit_are_read_and_written_exactly(emulated):
    """The sections read a count in place when it is a small int; any other is read
    through the int API (a count of 2**40 is one no program reaches, but is exact)."""
    a = np.arange(10.0)
    acc.copyin(a)
    entry = _devices.current_runtime().table.containing(a)
    entry.structured = 2**40
    entries = _lane().join([a])
    assert entry.structured == 2**40 + 1 and _lane().part(entries) is True and entry.structured == 2**40
    entry.structured = 0
    acc.delete(a)


def test_lane_api_is_published_for_the_c_region():
    """``LANE_API`` (mapping/_lane_api.h): the capsule the C base of ``acc.data`` imports."""
    assert type(_cprobe.LANE_API).__name__ == "PyCapsule"
    assert "pyacc.mapping._cprobe.LANE_API" in repr(_cprobe.LANE_API)
