"""The data API's lane (``_cprobe.DataLane``, mapping/_cprobe.c): ``acc.copyin``,
``acc.create``, ``acc.delete`` and ``acc.copyout`` of present data, and ``acc.is_present``,
in one C call each. The lane repeats only the plain case of each verb and answers None,
changing nothing, for every other one; these tests hold it to the Python verbs' rules
(OpenACC 3.3 §3.2.18–3.2.23, API.md §8) case by case and for random programs."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pyacc as acc
from pyacc import _devices
from pyacc.mapping import EventKind
from pyacc.mapping.table import PresentTable

_cprobe = pytest.importorskip("pyacc.mapping._cprobe", reason="built without a C compiler")


def _lane():
    return _devices.current_runtime().lane


def _counts(a):
    return acc.refcounts(a)


# -- enter: copyin / create of present data ---------------------------------------------
def test_lane_enter_increments_the_dynamic_count_and_returns_the_cached_device_array(emulated):
    a = np.arange(10.0)
    device = acc.copyin(a)
    assert _lane().enter(a) is device
    assert _counts(a) == (0, 2)
    assert acc.create(a) is device and _counts(a) == (0, 3)


def test_lane_enter_of_a_view_inside_a_mapping_returns_its_device_view(emulated):
    a = np.arange(10.0)
    device = acc.copyin(a)
    view = _lane().enter(a[2:6])
    assert view.shape == (4,) and np.shares_memory(view, device)
    assert _counts(a) == (0, 2)


def test_lane_enter_answers_none_for_absent_partly_present_strided_or_subclassed_data(emulated):
    a = np.arange(10.0)
    lane = _lane()
    assert lane.enter(a) is None and _counts(a) == (0, 0)  # absent: Python allocates
    acc.copyin(a[:5])
    assert lane.enter(a) is None  # partly present: Python raises PartlyPresentError
    assert lane.enter(a[::2][:2]) is None  # not one block: Python validates
    assert lane.enter(a[:5].view(np.matrix)) is None  # a subclass: Python validates
    assert lane.enter(np.empty(0)) is None  # zero-size: Python's rule
    assert lane.enter([1.0, 2.0]) is None
    assert _counts(a[:5]) == (0, 1)


@pytest.mark.parametrize("kind", [EventKind.ENTER_DATA, EventKind.DIRECTIVE_END])
def test_lane_enter_leaves_observed_calls_to_the_python_verb(emulated, listening, kind):
    a = np.arange(10.0)
    acc.copyin(a)
    seen = listening(kind)
    assert _lane().enter(a) is None
    assert seen == []
    acc.copyin(a)  # the Python verb publishes
    assert [event.kind for event in seen] == [kind] and _counts(a) == (0, 2)


def test_lane_enter_and_leave_leave_oversubscribed_data_to_the_python_verbs(emulated):
    a = np.arange(10.0)
    acc.copyin(a)
    acc.copyin(a)
    acc.set_oversubscribe(True)
    try:
        assert _lane().tracks_use
        assert _lane().enter(a) is None and _lane().leave(a) is None
        assert _counts(a) == (0, 2)
    finally:
        acc.set_oversubscribe(False)
    assert not _lane().tracks_use and _lane().leave(a) is True


def test_lane_enter_is_all_or_nothing_when_the_device_view_fails(emulated, monkeypatch):
    a = np.arange(10.0)
    acc.copyin(a)
    runtime = _devices.current_runtime()

    def broken(entry, array):
        raise MemoryError("no view")

    monkeypatch.setattr(runtime, "device_array_of", broken)
    with pytest.raises(MemoryError):
        runtime.lane.enter(a[1:3])
    assert _counts(a) == (0, 1)


# -- leave: delete / copyout of data that stays present ---------------------------------
def test_lane_leave_decrements_a_dynamic_count_that_stays_above_zero(emulated):
    a = np.arange(10.0)
    acc.copyin(a)
    acc.copyin(a)
    assert _lane().leave(a) is True and _counts(a) == (0, 1)


def test_lane_leave_answers_none_where_the_lifetime_would_end(emulated):
    a = np.arange(10.0)
    acc.copyin(a)
    assert _lane().leave(a) is None and _counts(a) == (0, 1)  # Python copies out, frees


def test_lane_leave_decrements_the_last_dynamic_count_under_a_structured_one(emulated):
    a = np.arange(10.0)
    acc.copyin(a)
    with acc.data(present=[a]):
        assert _lane().leave(a) is True and _counts(a) == (1, 0)
        assert _lane().leave(a) is None  # dynamic already 0: Python's rule
        assert _counts(a) == (1, 0)


def test_lane_leave_answers_none_for_pinned_lifetimes(emulated):
    a, b = np.arange(10.0), np.arange(4.0)
    acc.map_data(a, acc.malloc(a.shape, a.dtype))
    acc.copyin(a)
    assert _lane().leave(a) is None and _counts(a) == (0, 2)
    acc.declare(copyin=[b])
    acc.copyin(b)
    assert _lane().leave(b) is None and _counts(b)[1] == 2


def test_acc_delete_and_copyout_with_finalize_take_the_python_verb(emulated):
    a = np.arange(10.0)
    for _ in range(3):
        acc.copyin(a)
    acc.copyout(a, finalize=True)
    assert not acc.is_present(a)


# -- present: is_present -----------------------------------------------------------------
def test_lane_present_answers_as_the_table(emulated):
    a = np.arange(10.0)
    lane, table = _lane(), _devices.current_runtime().table
    acc.copyin(a[2:8])
    for x in (a, a[2:8], a[3:5], a[2:8:2], a[:3], np.empty(0), a[8:], a[::-1][2:8]):
        assert lane.present(x) == table.contains(x)
    assert lane.present(np.empty(0)) is True


def test_lane_present_asks_the_table_while_a_mutation_is_in_progress(emulated, monkeypatch):
    a = np.arange(10.0)
    acc.copyin(a)
    runtime = _devices.current_runtime()
    asked = []
    monkeypatch.setattr(PresentTable, "contains", lambda self, x: asked.append(x) or "asked")
    ranges = runtime.table.version_holder
    ranges.version += 1  # odd: a writer stopped mid-mutation
    try:
        assert runtime.lane.present(a) == "asked" and asked == [a]
    finally:
        ranges.version -= 1
    assert runtime.lane.present(a) is True and len(asked) == 1


# -- the table lock ----------------------------------------------------------------------
def test_lane_waits_for_a_directive_that_holds_the_table_lock(emulated):
    a = np.arange(10.0)
    acc.copyin(a)
    runtime = _devices.current_runtime()
    done = threading.Event()
    with runtime.table.locked():
        worker = threading.Thread(target=lambda: (runtime.lane.enter(a), done.set()))
        worker.start()
        assert not done.wait(0.2)  # the increment waits for the holder
        assert runtime.table.containing(a).dynamic == 1
    worker.join(5)
    assert done.is_set() and _counts(a) == (0, 2)


def test_lane_takes_the_new_table_lock_after_a_fork(emulated, held_by_another_thread):
    a = np.arange(10.0)
    acc.copyin(a)
    runtime = _devices.current_runtime()
    runtime.lane.enter(a)  # binds the current lock
    with held_by_another_thread(runtime.table.locked()):  # a thread of the "parent"
        runtime.table.after_fork_in_child()  # what the fork child does: a new lock
        assert runtime.lane.enter(a) is not None  # would block on the old lock
        assert runtime.lane.leave(a) is True
    assert _counts(a) == (0, 2)


# -- the shared-memory lane --------------------------------------------------------------
def test_shared_memory_lane_takes_no_action(host_device):
    a = np.arange(10.0)
    lane = _lane()
    assert lane.enter(a) is a and lane.leave(a) is True and lane.present(a) is True
    assert lane.enter(a[::2]) is None  # validated by Python
    assert acc.copyin(a) is a and _counts(a) == (0, 0)


# -- random programs: the lane changes no outcome ----------------------------------------
VERBS = st.lists(st.tuples(st.sampled_from(["copyin", "create", "delete", "copyout", "is_present",
                                            "region", "update_device", "update_self", "bump"]),
                           st.sampled_from([(0, 16), (0, 8), (4, 12), (8, 16), (2, 3), (0, 0)])),
                 max_size=25)


def _run(program, lane_on: bool):
    """Run ``program`` on fresh emulated data with the lane or without it; the outcomes,
    the counts after each step and the final data on the host."""
    acc.shutdown("emulated")
    acc.set_device_type("emulated")
    runtime = _devices.current_runtime()
    lane, is_present = runtime.lane, runtime.is_present
    if not lane_on:
        runtime.lane = _NoLane(runtime.table)
        runtime.is_present = runtime.table.contains
    _devices._context_changed()  # the routines' C entry remembers a runtime's lane
    try:
        return _trace(program)
    finally:
        runtime.lane, runtime.is_present = lane, is_present  # (shutdown keeps the runtime)
        _devices._context_changed()


def _trace(program):
    a = np.arange(16.0)
    trace = []
    for verb, (low, high) in program:
        x = a[low:high]
        try:
            if verb == "region":
                with acc.data(copy=[x]):
                    outcome = acc.is_present(x)
            elif verb == "bump":  # the host data changes: updates and copy-outs show it
                x += 1.0
                outcome = None
            else:
                outcome = getattr(acc, verb)(x)
            outcome = "array" if isinstance(outcome, np.ndarray) else outcome
        except acc.AccError as error:
            outcome = type(error).__name__
        trace.append((verb, low, high, outcome, acc.refcounts(a[0:8]), acc.refcounts(a[8:16]),
                      acc.refcounts(a)))
    acc.shutdown("emulated")
    return trace, a.tolist()


class _NoLane:
    """A lane that always sends the caller to the Python verbs."""

    tracks_use = False

    def __init__(self, table):
        self.present = table.contains

    enter = leave = upload = download = join = part = staticmethod(lambda x: None)


@settings(max_examples=60, deadline=None)
@given(VERBS)
def test_the_lane_changes_no_outcome_of_any_program(program):
    assert _run(program, lane_on=True) == _run(program, lane_on=False)
