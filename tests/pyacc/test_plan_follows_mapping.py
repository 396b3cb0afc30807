"""A call's plan follows its arrays to a new mapping (``ComputeMemo.follow``; the express
lane's ``follow_table``, ``pyacc/_express_plan.c.h``).

On a device with separate memory a data region that maps the same arrays anew (a time
step's ``acc.data``, ``enter_data`` after ``exit_data``) changes the present table, so a
plan made before it no longer holds: its device arrays were another mapping's. When every
array of the call lies wholly inside a mapping again, the plan takes the device arrays of
the mappings as they are now — what the Python launcher's join would find (OpenACC 3.3
§2.6.2: data already present is used where it is) — instead of a first call's full path.
Anything else (an array absent, partly present, a present clause failing) goes to the
launcher and gets its answer: the copy, the error, exactly as a first call.
"""

import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc.mapping import compute
from pyacc.mapping.runtime import DeviceRuntime
from tests.launcher_calls import slow_calls

LANE = acc.express_lane()
ALWAYS = "1000000"  # µs: every async call on an idle queue runs at once


@acc.parallel_loop
def add_one(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1.0


@acc.parallel_loop
def axpy(y, x, a):
    for i in range(y.shape[0]):
        y[i] = y[i] + a * x[i]


@acc.parallel_loop(present=["x"])
def add_one_present(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1.0


@pytest.fixture(params=["sync", "async"])
def form(request, monkeypatch):
    """A call synchronous, or ``async_=1`` run at once (its queue idle, the crossover high)."""
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", ALWAYS)
    acc.shutdown("emulated")
    acc.set_device_type("emulated")
    yield {} if request.param == "sync" else {"async_": 1}
    acc.wait()
    acc.shutdown("emulated")
    acc.set_device_type("host")


def armed(region, *args, **form):
    """``region`` called twice on ``args`` (a first call, then a replay that arms the lane)."""
    region(*args, **form)
    region(*args, **form)
    acc.wait()


def test_a_plan_follows_its_arrays_to_a_new_mapping(form, monkeypatch):
    x, y = np.zeros(16), np.ones(16)
    calls, more = slow_calls(add_one, monkeypatch), slow_calls(axpy, monkeypatch)
    with acc.data(copy=[x]):
        armed(add_one, x, **form)
    with acc.data(copy=[y], copyin=[x]):
        armed(axpy, y, x, 2.0, **form)
    calls.clear(), more.clear()
    acc.reset_stats()
    for step in range(3):  # each step maps x and y anew: new device memory every time
        x[:] = step
        with acc.data(copy=[x, y]):
            add_one(x, **form)  # a plan of arrays only (its fixed arguments made again)
            axpy(y, x, 0.5, **form)  # with a scalar
            acc.wait()
            assert acc.is_present(x) and acc.refcounts(x) == (1, 0)
        np.testing.assert_array_equal(x, step + 1.0)
    np.testing.assert_array_equal(y, 1.0 + 2 * 2.0 * 2.0 + 0.5 * (1 + 2 + 3))
    assert len(calls) + len(more) == (0 if LANE else 6), "followed, not a first call's path"
    assert acc.stats()["launch_count"] == 6
    assert acc.refcounts(x) == (0, 0) and acc.refcounts(y) == (0, 0)


def test_the_python_replay_follows_too(form, monkeypatch):
    previous = acc._express.set_lane(False)
    try:
        x = np.zeros(8)
        with acc.data(copy=[x]):
            armed(add_one, x, **form)
        joins = []
        join = DeviceRuntime.join_structured
        monkeypatch.setattr(DeviceRuntime, "join_structured",
                            lambda self, *args, **kwargs: joins.append(1) or join(self, *args, **kwargs))
        for _ in range(2):
            with acc.data(copy=[x]):
                add_one(x, **form)
                acc.wait()
        assert joins == [], "the memo followed x to its new mapping and replayed"
        np.testing.assert_array_equal(x, 4.0)
    finally:
        acc._express.set_lane(previous)


def test_an_array_left_out_of_the_new_mapping_is_mapped_by_the_call(form):
    y, x = np.zeros(8), np.ones(8)
    with acc.data(copy=[y], copyin=[x]):
        armed(axpy, y, x, 1.0, **form)
    with acc.data(copy=[y]):  # x not mapped: the call's implicit copy (OpenACC 3.3 §2.6.2)
        axpy(y, x, 1.0, **form)
        acc.wait()
        assert not acc.is_present(x)
    np.testing.assert_array_equal(y, 3.0)
    assert acc.refcounts(x) == (0, 0) and acc.refcounts(y) == (0, 0)


def test_a_partly_present_array_gets_the_first_calls_error(form):
    x = np.zeros(8)
    with acc.data(copy=[x]):
        armed(add_one, x, **form)
    with acc.data(copyin=[x[:4]]):
        with pytest.raises(acc.PartlyPresentError, match="'x'"):
            add_one(x, **form)
        acc.wait()
        assert acc.refcounts(x[:4]) == (1, 0)
    np.testing.assert_array_equal(x, 2.0)


def test_a_present_clause_still_fails_on_data_that_left(form):
    x, other = np.zeros(4), np.zeros(4)
    with acc.data(copy=[x]):
        armed(add_one_present, x, **form)
    with acc.data(copy=[other]):  # the table changed, and x is not in it
        with pytest.raises(acc.NotPresentError, match="'x'"):
            add_one_present(x, **form)
    assert acc.refcounts(x) == (0, 0)
    np.testing.assert_array_equal(x, 2.0)


def test_a_view_follows_into_its_parents_new_mapping(form):
    x = np.zeros(12)
    inner = x[2:10]
    with acc.data(copy=[x]):
        armed(add_one, inner, **form)
    x[:] = 5.0
    with acc.data(copy=[x]):
        add_one(inner, **form)
        acc.wait()
        assert acc.refcounts(inner) == (1, 0)
    np.testing.assert_array_equal(x, [5, 5] + [6] * 8 + [5, 5])


def test_an_error_while_following_leaves_the_table_free(form, monkeypatch):
    def broken(self, runtime, args):
        raise RuntimeError("follow failed")

    monkeypatch.setattr(compute.ComputeMemo, "follow", broken)  # before the plan is armed
    x = np.zeros(4)
    with acc.data(copy=[x]):
        armed(add_one, x, **form)
    with acc.data(copy=[x]):
        with pytest.raises(RuntimeError, match="follow failed"):
            add_one(x, **form)
        acc.wait()
        assert acc.refcounts(x) == (1, 0), "nothing counted by the failed call"
    took = []

    def look():  # (a thread's current device is its own: emulated here too)
        acc.set_device_type("emulated")
        took.append(acc.is_present(x))

    other = threading.Thread(target=look)
    other.start()
    other.join(5)
    assert took == [False], "another thread gets at the table"
    np.testing.assert_array_equal(x, 2.0)
