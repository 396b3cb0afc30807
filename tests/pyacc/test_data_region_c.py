"""``acc.data`` entered and left in C (``DataRegion``, pyacc/_data_region.c.h): a region of
data clauses only whose arrays are all present is entered (structured counts +1) and left
(−1) without a Python frame; every other region — absent data, ``default``, ``deviceptr``,
``if_``, ``async_``, ``wait``, a subscriber to REGION_ENTER, a lifetime that ends at the
exit — takes the Python methods with the same outcome (OpenACC 3.3 §2.6.5, §2.7). These
tests hold the C base to the Python region: counts, copies back, errors at construction
and their reports, second entries, the region stack, events, threads."""

import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc import _devices
from pyacc.mapping import ClauseError, EventKind, InvalidArgumentError, InvalidDataSectionError

_fastcall = pytest.importorskip("pyacc._fastcall", reason="built without a C compiler")
pytestmark = pytest.mark.skipif(not acc.express_lane(), reason="PYACC_EXPRESS=0: no C base")


def _region_and_exit(**clauses):
    with acc.data(**clauses):
        pass


def test_data_region_c_present_data_is_entered_and_left_without_a_python_frame(emulated, python_frames):
    a, b = np.ones(8), np.zeros((3, 4))
    acc.copyin(a)
    acc.copyin(b)
    assert python_frames(_region_and_exit, copyin=[a], copy=b, present=(a, b[1:])) == ["_region_and_exit"]
    assert acc.refcounts(a) == (0, 1) and acc.refcounts(b) == (0, 1)
    with acc.data(copyin=[a], create=[b]) as region:
        assert isinstance(region, acc.data) and isinstance(region, _fastcall.DataRegion)
        assert acc.refcounts(a) == (1, 1) and acc.refcounts(b) == (1, 1)
        assert region in _devices.ICVS.region_stack
        assert region.device(a) is acc.deviceptr(a)
    assert acc.refcounts(a) == (0, 1) and region not in _devices.ICVS.region_stack
    acc.delete(a)
    acc.delete(b)


def test_data_region_c_absent_data_takes_the_python_region_with_its_copies(emulated, python_frames):
    a, present = np.arange(6.0), np.ones(3)
    acc.copyin(present)
    with acc.data(copy=[a], copyin=[present]):
        assert acc.refcounts(a) == (1, 0) and acc.refcounts(present) == (1, 1)
        acc.deviceptr(a)[...] = 7.0
    assert np.all(a == 7.0) and not acc.is_present(a) and acc.refcounts(present) == (0, 1)
    assert "_enter" in python_frames(_region_and_exit, copyin=[a])  # absent: the Python entry
    acc.delete(present)


def test_data_region_c_a_lifetime_ending_at_the_exit_copies_back_and_frees(emulated):
    """Present at the entry, its dynamic count gone inside: the exit ends the lifetime
    (the lane's part declines), so the Python exit copies back (copy) and frees."""
    a = np.zeros(5)
    acc.copyin(a)
    with acc.data(copy=[a]):
        acc.deviceptr(a)[...] = 3.0
        acc.delete(a)  # dynamic 1 → 0: structured 1 keeps it
        assert acc.refcounts(a) == (1, 0)
    assert np.all(a == 3.0) and not acc.is_present(a)
    assert _devices.ICVS.region_stack == []


@pytest.mark.parametrize("clauses, error", [
    ({"copyin": [[1.0, 2.0]]}, InvalidArgumentError),
    ({"copyin": np.empty(3, dtype=object)}, InvalidArgumentError),
    ({"copy": [np.ones((4, 4))[:, 1]]}, InvalidDataSectionError),
    ({"copyin": [np.ones(3)], "copyinn": [np.ones(3)]}, ClauseError),
    ({}, ClauseError),
])
def test_data_region_c_bad_clauses_raise_at_construction_and_are_reported(emulated, clauses, error):
    reported = []
    acc.register_error_callback(reported.append)
    try:
        with pytest.raises(error):
            acc.data(**clauses)
    finally:
        acc.unregister_error_callback(reported.append)
    assert len(reported) == 1 and isinstance(reported[0], error)


def test_data_region_c_positional_arguments_are_refused(emulated):
    """One positional argument is a clause string (``_directive_text``); an array there,
    or two arguments, is a TypeError naming both spellings."""
    with pytest.raises(TypeError, match=r"its one positional argument is a clause string"):
        acc.data(np.ones(3))
    with pytest.raises(TypeError, match=r"takes one clause string or keywords .* got 2"):
        acc.data("copyin(a)", "copy(b)")


def test_data_region_c_a_second_entry_is_refused_and_reported(emulated):
    a = np.ones(4)
    acc.copyin(a)
    region = acc.data(copyin=[a])
    with region:
        with pytest.raises(InvalidArgumentError, match="already entered"):
            region.__enter__()
    with pytest.raises(InvalidArgumentError, match="already entered"):
        with region:
            pass
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)


def test_data_region_c_an_exception_in_the_block_releases_the_counts(emulated):
    a = np.ones(4)
    acc.copyin(a)
    with pytest.raises(ZeroDivisionError):
        with acc.data(copy=[a]):
            1 / 0
    assert acc.refcounts(a) == (0, 1) and _devices.ICVS.region_stack == []
    acc.delete(a)


def test_data_region_c_regions_leave_the_stack_in_any_order(emulated):
    a, b = np.ones(4), np.ones(4)
    acc.copyin(a)
    acc.copyin(b)
    outer, inner = acc.data(copyin=[a]), acc.data(copyin=[b])
    outer.__enter__()
    inner.__enter__()
    assert list(_devices.ICVS.region_stack) == [outer, inner]
    outer.__exit__(None, None, None)  # not LIFO
    assert list(_devices.ICVS.region_stack) == [inner]
    inner.__exit__(None, None, None)
    assert _devices.ICVS.region_stack == [] and acc.refcounts(a) == acc.refcounts(b) == (0, 1)
    acc.delete(a)
    acc.delete(b)


def test_data_region_c_an_enclosing_default_reaches_compute_calls_inside(emulated):
    """A C region lends no default, so the enclosing Python region's default(present)
    still holds inside it."""
    a, absent = np.ones(4), np.ones(4)
    acc.copyin(a)

    @acc.parallel_loop
    def touch(x):
        for i in range(x.shape[0]):
            x[i] += 1.0

    with acc.data(default="present", present=[a]):
        with acc.data(copyin=[a]) as region:
            assert isinstance(region, _fastcall.DataRegion)
            assert _devices.ICVS.region_stack.innermost_default == "present"
            with pytest.raises(acc.NotPresentError):
                touch(absent)
    acc.delete(a)


@pytest.mark.parametrize("clauses", [{"default": "present"}, {"if_": True}, {"async_": 1}, {"wait": [1]}])
def test_data_region_c_other_clauses_take_the_python_region(emulated, python_frames, clauses):
    a = np.ones(4)
    acc.copyin(a)
    frames = python_frames(_region_and_exit, present=[a], **clauses)
    assert "_setup" in frames and "_enter" in frames
    acc.wait()
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)


def test_data_region_c_region_events_are_published_as_by_the_python_region(emulated, listening):
    a = np.ones(4)
    acc.copyin(a)
    seen = listening(EventKind.REGION_ENTER, EventKind.REGION_EXIT)
    with acc.data(copyin=[a]):
        pass
    assert [event.kind for event in seen] == [EventKind.REGION_ENTER, EventKind.REGION_EXIT]
    acc.delete(a)


def test_data_region_c_a_subscriber_that_comes_inside_sees_the_exit(emulated, listening):
    a = np.ones(4)
    acc.copyin(a)
    with acc.data(copyin=[a]) as region:
        assert isinstance(region, _fastcall.DataRegion)
        seen = listening(EventKind.REGION_EXIT)
    assert [event.kind for event in seen] == [EventKind.REGION_EXIT]
    acc.delete(a)


def test_data_region_c_each_thread_uses_its_own_device_and_stack(emulated):
    a = np.ones(4)
    acc.copyin(a)
    results = {}

    def other():  # this thread's current device is the host: nothing to join there
        acc.set_device_type("host")
        with acc.data(copyin=[a]):
            results["stack"] = list(_devices.ICVS.region_stack)
            results["present"] = acc.is_present(a)
        results["after"] = list(_devices.ICVS.region_stack)

    with acc.data(copyin=[a]) as region:
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(30)
        assert list(_devices.ICVS.region_stack) == [region]
    assert len(results["stack"]) == 1 and results["stack"][0] is not region and results["after"] == []
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)


def test_data_region_c_the_region_on_the_host_device_is_entered_in_c(host_device, python_frames):
    a = np.ones(4)
    assert python_frames(_region_and_exit, copy=[a]) == ["_region_and_exit"]
    with acc.data(copy=[a]):
        pass


def test_data_region_c_a_device_switched_between_regions_is_used_by_the_next(emulated):
    """The C base remembers the thread's runtime, lane and stack per context epoch: a
    device change on this thread is seen by the next region."""
    a = np.ones(4)
    acc.copyin(a)
    with acc.data(copyin=[a]):
        assert acc.refcounts(a) == (1, 1)
    acc.set_device_type("host")
    with acc.data(copyin=[a]):  # the host: no counts anywhere
        assert acc.refcounts(a) == (0, 0)
    acc.set_device_type("emulated")
    with acc.data(copyin=[a]):
        assert acc.refcounts(a) == (1, 1)
    acc.delete(a)


def test_data_region_c_arrays_are_fixed_when_the_region_is_made(emulated):
    """OpenACC 3.3 §2.7.1: the region keeps its clauses' arrays, not the lists they were
    given in; a list changed afterwards changes nothing, at the entry (absent data: the
    Python entry) nor at an exit that ends a lifetime (the Python exit)."""
    a, b = np.zeros(5), np.zeros(5)
    given = [a]
    region = acc.data(copy=given)
    given[0] = b
    with region:  # absent: the Python entry, with the arrays of the region's making
        assert acc.is_present(a) and not acc.is_present(b)
    acc.copyin(a)
    given = [a]
    with acc.data(copy=given):
        acc.deviceptr(a)[...] = 3.0
        acc.delete(a)  # the exit ends the lifetime: copied back by the Python exit
        given[0] = b
        given.append("not an array")
    assert np.all(a == 3.0) and not acc.is_present(a) and not b.any()
    assert _devices.ICVS.region_stack == []


class _FailingLane:
    """A data lane whose ``verb`` raises (the others are the real lane's)."""

    def __init__(self, lane, verb):
        self.lane, self.verb = lane, verb

    def __getattr__(self, name):
        if name == self.verb:
            def fail(*args):
                raise RuntimeError(f"{name} failed")
            return fail
        return getattr(self.lane, name)


def test_data_region_c_a_failed_exit_still_leaves_the_stack(emulated, listening):
    a = np.ones(4)
    acc.copyin(a)
    runtime = _devices.current_runtime()
    lane = runtime.lane
    region = acc.data(copyin=[a])
    region.__enter__()
    seen = listening(EventKind.REGION_EXIT)
    runtime.lane = _FailingLane(lane, "part")
    _fastcall.context_changed()  # the C base remembers the lane per context epoch
    try:
        with pytest.raises(RuntimeError, match="part failed"):
            region.__exit__(None, None, None)
    finally:
        runtime.lane = lane
        _fastcall.context_changed()
    assert _devices.ICVS.region_stack == [] and len(seen) == 1  # off the stack, and its exit event
    assert acc.refcounts(a) == (1, 1)  # the failed part changed nothing (the fixture's shutdown ends it)


def test_data_region_c_a_failed_entry_leaves_the_region_done(emulated):
    a = np.ones(4)
    acc.copyin(a)
    runtime = _devices.current_runtime()
    lane = runtime.lane
    runtime.lane = _FailingLane(lane, "join")
    _fastcall.context_changed()  # the C base remembers the lane per context epoch
    region = acc.data(copyin=[a])
    try:
        with pytest.raises(RuntimeError, match="join failed"):
            region.__enter__()
    finally:
        runtime.lane = lane
        _fastcall.context_changed()
    with pytest.raises(InvalidArgumentError, match="already entered"):
        region.__enter__()
    assert acc.refcounts(a) == (0, 1) and _devices.ICVS.region_stack == []
    acc.delete(a)


def test_data_region_c_a_new_region_copies_and_pickles(emulated):
    import copy
    import pickle

    a = np.arange(4.0)
    acc.copyin(a)
    made = acc.data(copyin=[a])
    for twin in (copy.copy(made), copy.deepcopy(made)):
        with twin:
            pass
    revived = pickle.loads(pickle.dumps(made))
    with revived:  # its own copy of a: absent, mapped for the region
        assert acc.refcounts(a) == (0, 1)
    with made:
        assert acc.refcounts(a) == (1, 1)
    python_region = acc.data(copyin=[a], default="present")
    with copy.copy(python_region):
        pass
    acc.delete(a)


def test_data_region_c_a_subclass_runs_its_own_hooks(emulated):
    calls = []

    class Logged(acc.data):
        def _enter(self):
            calls.append("enter")
            return super()._enter()

        def _left(self):
            calls.append("left")
            super()._left()

    a = np.ones(4)
    acc.copyin(a)
    with Logged(copyin=[a]) as region:
        assert isinstance(region, Logged) and acc.refcounts(a) == (1, 1)
    assert calls == ["enter", "left"] and acc.refcounts(a) == (0, 1)
    acc.delete(a)


def test_data_region_c_the_class_keeps_its_signature_and_docstring():
    import inspect

    assert str(inspect.signature(acc.data)) == "(clause_string=None, /, **clauses) -> 'None'"
    assert acc.data.__doc__.startswith("A structured data region")


def test_data_region_c_the_snapshot_of_the_clauses_is_the_same_however_the_region_is_made(emulated):
    """``acc.data(...)`` is made by the type's vectorcall (no keyword dict, the snapshot
    built when asked); ``acc.data.__call__``-free paths (``type.__call__``, a subclass)
    make it with ``__init__``: the same clauses, a list's arrays as a tuple fixed at the
    making (OpenACC 3.3 §2.7.1)."""
    a, b, c = np.ones(3), np.zeros(2), np.zeros(4)
    given = [a, b]
    made = [acc.data(copyin=given, copy=c), type.__call__(acc.data, copyin=given, copy=c)]
    given.append(np.ones(1))
    import gc  # (the vectorcall's region holds the clause names until its snapshot is asked for)
    assert [dict in map(type, gc.get_referents(region)) for region in made] == [False, True]
    for region in made:
        assert list(region._clauses) == ["copyin", "copy"]
        assert region._clauses["copyin"] == (a, b) and region._clauses["copy"] is c
        with region:
            assert [acc.refcounts(x) for x in (a, b, c)] == [(1, 0)] * 3
    assert not any(acc.is_present(x) for x in (a, b, c))


def test_data_region_c_long_lists_and_list_subclasses_are_taken_too(emulated, python_frames):
    class Arrays(list):
        pass

    many = [np.ones(2) for _ in range(70)]
    for array in many:
        acc.copyin(array)
    for given in (many, Arrays(many[:3])):
        with acc.data(present=given) as region:
            assert acc.refcounts(given[0]) == (1, 1) and region._clauses["present"] == tuple(given)
        assert acc.refcounts(given[0]) == (0, 1)
    for array in many:
        acc.delete(array)


def test_data_region_c_a_replaced_init_is_honoured(emulated, monkeypatch):
    """The vectorcall stands for ``type.__call__`` only while ``data.__init__`` is the C
    base's: a replaced one (a test's spy) runs."""
    seen = []
    init = acc.data.__init__
    monkeypatch.setattr(acc.data, "__init__", lambda self, **clauses: seen.append(clauses) or init(self, **clauses))
    a = np.ones(2)
    acc.copyin(a)
    with acc.data(present=[a]):
        assert acc.refcounts(a) == (1, 1)
    assert seen == [{"present": [a]}]
    acc.delete(a)


def test_data_region_c_clauses_asked_for_while_they_are_built_are_built_once(emulated):
    """The snapshot of a region made by the vectorcall is built when first asked for;
    a keyword whose hashing asks for it again (any Python code may run there) gets the
    same clauses, and the outer build keeps them."""
    class Key(str):
        region = None

        def __hash__(self):
            region, Key.region = Key.region, None
            if region is not None:
                assert list(region._clauses) == ["copyin", "copy"]
            return str.__hash__(self)

        __eq__ = str.__eq__

    a, b = np.zeros(4), np.zeros(4)
    region = acc.data(**{Key("copyin"): a, "copy": [b]})
    Key.region = region
    clauses = region._clauses
    assert clauses["copyin"] is a and clauses["copy"] == (b,) and region._clauses is clauses
    with region:
        assert acc.refcounts(a) == (1, 0)


_REPLACED_NEW = """
import numpy as np, pyacc as acc
seen = []
new = acc.data.__new__
acc.data.__new__ = lambda cls, **clauses: seen.append(clauses) or new(cls)
acc.set_device_type("emulated")
a = np.ones(2)
acc.copyin(a)
with acc.data(present=[a]):
    assert acc.refcounts(a) == (1, 1)
assert seen == [{"present": [a]}], seen
"""


def test_data_region_c_a_replaced_new_is_honoured():
    """In a child: a ``__new__`` set on the class (CPython keeps its slot after the
    attribute is deleted again, so no test process should see it) runs."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _REPLACED_NEW], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_data_region_c_with_binds_its_hooks_without_method_objects(emulated):
    """``__enter__``/``__exit__`` are DataRegion's own descriptors (pyacc/_region_hooks.c.h):
    bound, called, unbound and refused as a method's would be."""
    a = np.ones(4)
    acc.copyin(a)
    region = acc.data(present=[a])
    enter, leave = region.__enter__, region.__exit__
    assert type(enter).__name__ == "RegionHook" and enter.__self__ is region
    assert (enter.__name__, leave.__name__) == ("__enter__", "__exit__")
    assert acc.data.__enter__.__qualname__ == "DataRegion.__enter__" and acc.data.__exit__.__doc__
    assert enter() is region and acc.refcounts(a) == (1, 1)
    assert leave(None, None, None) is False and acc.refcounts(a) == (0, 1)
    other = acc.data(present=[a])
    assert acc.data.__enter__(other) is other and acc.refcounts(a) == (1, 1)  # unbound
    assert acc.data.__exit__(other, None, None, None) is False and acc.refcounts(a) == (0, 1)
    fresh = acc.data(present=[a])
    with pytest.raises(TypeError, match="no arguments"):
        fresh.__enter__(1)
    with pytest.raises(TypeError, match="keyword"):
        fresh.__enter__(now=True)
    with pytest.raises(TypeError, match="at most 3"):
        fresh.__exit__(None, None, None, None)
    with pytest.raises(TypeError, match="DataRegion"):
        acc.data.__enter__(a)
    with pytest.raises(TypeError, match="does not apply"):
        _fastcall.DataRegion.__dict__["__enter__"].__get__(a, type(a))
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)


def test_data_region_c_a_hook_keeps_its_region_and_hooks_are_reused(emulated):
    import contextlib
    import gc
    import weakref

    a = np.ones(4)
    acc.copyin(a)
    leave = acc.data(present=[a]).__exit__  # the only reference to its region
    region = weakref.ref(leave.__self__)
    gc.collect()
    assert region() is not None
    region().__enter__()
    assert acc.refcounts(a) == (1, 1)
    leave(None, None, None)
    del leave
    assert region() is None and acc.refcounts(a) == (0, 1)
    with contextlib.ExitStack() as stack:  # 40 regions open: more hooks than the free list keeps
        for depth in range(40):
            stack.enter_context(acc.data(present=[a]))
        assert acc.refcounts(a) == (40, 1)
    assert acc.refcounts(a) == (0, 1)
    for _ in range(100):
        with acc.data(present=[a]) as inner:
            assert acc.refcounts(a) == (1, 1) and inner in _devices.ICVS.region_stack
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)


def test_data_region_c_a_region_keeping_its_own_hook_is_collected(emulated):
    import gc
    import weakref

    a = np.ones(4)
    acc.copyin(a)
    region = acc.data(present=[a])
    region.done = region.__exit__  # a cycle through the bound hook: the collector sees it
    assert region.__exit__ == region.done and hash(region.__exit__) == hash(region.done)
    assert region.__exit__ != region.__enter__ and region.__exit__ != acc.data(present=[a]).__exit__
    assert acc.data.__enter__.__objclass__ is _fastcall.DataRegion
    collected = weakref.ref(region)
    del region
    gc.collect()
    assert collected() is None, "a region that keeps its own bound hook must be collected"
    acc.delete(a)


def test_data_region_c_a_malformed_state_is_refused_not_entered(emulated):
    a = np.ones(4)
    acc.copyin(a)
    region = acc.data(present=[a])
    region.__enter__()
    values, fields = region.__getstate__()
    clauses, arrays, runtime, entries, stack, state, mode = fields
    for broken in ((clauses, arrays, runtime, entries, None, state, mode),  # entered, no stack
                   (clauses, arrays, None, entries, stack, state, mode),  # entered, no runtime
                   (clauses, arrays, runtime, None, stack, state, mode)):  # entered, no entries
        with pytest.raises(ValueError, match="malformed"):
            acc.data.__new__(acc.data).__setstate__((values, broken))
    earlier = acc.data.__new__(acc.data)  # an earlier version's state: its arrays in a list
    earlier.__setstate__((values, (clauses, list(arrays), runtime, entries, stack, 0, mode)))
    with earlier:
        assert acc.refcounts(a) == (2, 1)
    region.__exit__(None, None, None)
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)


@pytest.mark.parametrize("count", [8, 9])
def test_data_region_c_regions_hold_their_arrays_in_themselves_or_in_a_buffer(emulated, python_frames, count):
    """Up to 8 arrays and their entries are kept in the region itself, more in a buffer
    of its own: the same counts, clauses, copies and pickles either way, of two dtypes."""
    import copy
    import pickle

    arrays = [np.ones(3) if i % 2 else np.arange(4) for i in range(count)]
    for array in arrays:
        acc.copyin(array)
    assert python_frames(_region_and_exit, present=arrays[:-1], copyin=arrays[-1]) == ["_region_and_exit"]
    with acc.data(present=arrays[:-1], copyin=arrays[-1]) as region:
        assert [acc.refcounts(array) for array in arrays] == [(1, 1)] * count
        assert region._clauses == {"present": tuple(arrays[:-1]), "copyin": arrays[-1]}
        twin = copy.copy(region)  # entered: its state carries the entries
        assert twin._clauses == region._clauses
    assert [acc.refcounts(array) for array in arrays] == [(0, 1)] * count
    made = acc.data(copyin=arrays)
    with pickle.loads(pickle.dumps(made)) as revived:  # copies of the arrays: absent, so Python's
        assert revived._clauses["copyin"][0] is not arrays[0] and acc.refcounts(arrays[0]) == (0, 1)
    with made:
        assert acc.refcounts(arrays[0]) == (1, 1)
    for array in arrays:
        acc.delete(array)


def test_data_region_c_a_keyword_whose_comparison_changes_a_list_reads_the_list_once(emulated):
    """A keyword that is a ``str`` subclass is compared by its own ``__eq__`` (Python code)
    while the clauses are checked: the lists are counted and copied after every such
    comparison, so a list it empties is read as empty, never past its end."""
    a, b = np.ones(4), np.ones(3)
    acc.copyin(a)
    acc.copyin(b)
    given = [a, a[1:], a[2:]]

    class Clause(str):
        __hash__ = str.__hash__

        def __eq__(self, other):
            given.clear()
            return str.__eq__(self, other)

    with acc.data(**{"present": given, Clause("copyin"): b}) as region:
        assert acc.refcounts(a) == (0, 1) and acc.refcounts(b) == (1, 1)
        assert region._clauses["present"] == ()
    assert acc.refcounts(b) == (0, 1)
    acc.delete(a)
    acc.delete(b)


@pytest.mark.parametrize("again", ["__init__", "__setstate__"])
def test_data_region_c_an_entered_region_refuses_to_be_made_again(emulated, again):
    """What an entered region holds is its entry's: ``__init__`` or ``__setstate__`` of it
    raise, and its exit still parts what its entry joined."""
    a = np.ones(4)
    acc.copyin(a)
    region = acc.data(present=[a])
    state = region.__getstate__()
    with region:
        with pytest.raises(RuntimeError, match="already entered; make a new region"):
            region.__init__(present=[a, a]) if again == "__init__" else region.__setstate__(state)
        assert acc.refcounts(a) == (1, 1)
    assert acc.refcounts(a) == (0, 1)
    with pytest.raises(RuntimeError, match="already entered"):
        region.__init__(present=[a])
    acc.delete(a)
