"""The data routines' C entry (``LaneRoutine``, pyacc/_routine_lane.c.h): ``acc.copyin``,
``acc.create``, ``acc.copyout``, ``acc.delete``, ``acc.is_present``, ``acc.update_device``
and ``acc.update_self`` called with one array go to the current runtime's data lane before any Python frame, and to their Python
functions for everything the lane does not finish. These tests hold the entry to the
Python functions' behaviour: which runtime a call uses (after device changes, on other
threads), keywords, errors and their reports, events, and the functions' metadata."""

import inspect
import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc import _devices, _routines
from pyacc.mapping import EventKind, InvalidArgumentError

_fastcall = pytest.importorskip("pyacc._fastcall", reason="built without a C compiler")
ROUTINES = ("copyin", "create", "copyout", "delete", "is_present", "update_device", "update_self")


@pytest.mark.parametrize("name", ROUTINES)
def test_the_routines_keep_their_names_docstrings_and_signatures(name):
    routine = getattr(acc, name)
    assert isinstance(routine, _fastcall.LaneRoutine)
    assert routine.__name__ == name and routine.__doc__ == routine.__wrapped__.__doc__
    assert inspect.signature(routine) == inspect.signature(routine.__wrapped__)
    assert routine.__module__ == "pyacc._routines"


def test_present_data_is_entered_and_left_without_a_python_frame(emulated, python_frames):
    a = np.arange(10.0)
    acc.copyin(a)
    assert python_frames(acc.copyin, a) == []
    assert python_frames(acc.create, a) == []
    assert python_frames(acc.is_present, a) == []
    assert python_frames(acc.delete, a) == []
    assert python_frames(acc.copyout, a) == []
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)
    assert not acc.is_present(a)


def test_what_the_lane_does_not_finish_runs_the_python_function(emulated, python_frames):
    a = np.arange(10.0)
    assert "enter" in python_frames(acc.copyin, a)  # absent: allocated by the Python verb
    assert "leave" in python_frames(acc.delete, a)  # the lifetime ends: the Python verb
    assert not acc.is_present(a)
    acc.copyin(a)
    assert "enter" in python_frames(acc.copyin, a, async_=None)  # a keyword
    assert "leave" in python_frames(acc.delete, a, finalize=True)
    assert not acc.is_present(a)


def test_a_device_change_on_the_thread_is_seen_by_the_next_call(emulated):
    a = np.arange(10.0)
    d = acc.copyin(a)
    assert d is not a and acc.is_present(a)
    acc.set_device_type("host")  # shared memory: every array is present, copyin returns it
    assert acc.copyin(a) is a and acc.is_present(np.ones(3))
    acc.set_device_type("emulated")
    assert acc.copyin(a) is d and not acc.is_present(np.ones(3))
    assert acc.refcounts(a) == (0, 2)
    acc.delete(a, finalize=True)


def test_each_thread_uses_its_own_current_device(emulated):
    a = np.arange(10.0)
    acc.copyin(a)
    seen = {}

    def other():  # this thread's device: the default one (host here), not the caller's
        acc.set_device_type("host")
        seen["present"] = acc.is_present(np.ones(3))
        seen["copyin"] = acc.copyin(a) is a

    for _ in range(3):  # alternate threads: the remembered lane is per thread
        worker = threading.Thread(target=other)
        worker.start()
        worker.join(10)
        assert seen == {"present": True, "copyin": True}
        assert not acc.is_present(np.ones(3))
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)


def test_a_thread_without_a_current_device_selects_one_on_its_first_call(emulated):
    result = []
    worker = threading.Thread(target=lambda: result.append(
        (_devices.ICVS.runtime is None, acc.is_present(np.ones(3)), _devices.ICVS.runtime is not None)))
    worker.start()
    worker.join(10)
    assert result[0][0] and result[0][2]


def test_bad_input_is_reported_and_raised_as_by_the_python_function(emulated):
    reported = []
    acc.register_error_callback(reported.append)
    try:
        for name in ROUTINES:
            with pytest.raises(InvalidArgumentError, match="numpy array") as raised:
                getattr(acc, name)([1.0, 2.0])
            assert reported[-1] is raised.value  # the error callbacks ran once for it
    finally:
        acc.unregister_error_callback(reported.append)
    assert len(reported) == len(ROUTINES)
    with pytest.raises(TypeError):
        acc.copyin()
    with pytest.raises(TypeError):
        acc.copyin(np.ones(3), np.ones(3))


def test_observed_calls_publish_their_events(emulated, listening):
    a = np.arange(10.0)
    acc.copyin(a)
    seen = listening(EventKind.ENTER_DATA, EventKind.EXIT_DATA)
    acc.copyin(a)
    acc.delete(a)
    assert [event.kind for event in seen] == [EventKind.ENTER_DATA, EventKind.EXIT_DATA]
    acc.delete(a)


def test_the_routines_without_the_c_entry_behave_the_same(emulated):
    """The Python functions themselves (what a build without the extension uses)."""
    a = np.arange(10.0)
    copyin, delete, is_present = (getattr(_routines, name).__wrapped__ for name in ("copyin", "delete", "is_present"))
    d = copyin(a)
    assert copyin(a) is d and is_present(a) and acc.refcounts(a) == (0, 2)
    delete(a)
    delete(a)
    assert not is_present(a)


@pytest.mark.parametrize("name", ROUTINES)
def test_the_routines_pickle_copy_and_take_weak_references_as_functions_do(name):
    import copy
    import pickle
    import weakref

    routine = getattr(acc, name)
    assert pickle.loads(pickle.dumps(routine)) is routine
    assert copy.copy(routine) is routine and copy.deepcopy(routine) is routine
    assert weakref.ref(routine)() is routine


def test_an_error_inside_the_lane_is_raised_and_reported_by_the_python_function(emulated, monkeypatch):
    a = np.arange(10.0)
    acc.copyin(a)
    runtime = _devices.current_runtime()

    def failing(entry, x):
        raise InvalidArgumentError("no device view today")

    monkeypatch.setattr(runtime, "device_array_of", failing)
    reported = []
    acc.register_error_callback(reported.append)
    try:
        with pytest.raises(InvalidArgumentError, match="no device view today") as raised:
            acc.copyin(a[2:5])  # a view: the lane asks runtime.device_array_of
    finally:
        acc.unregister_error_callback(reported.append)
    assert reported == [raised.value]
    monkeypatch.undo()
    assert acc.refcounts(a) == (0, 1)
    acc.delete(a)
