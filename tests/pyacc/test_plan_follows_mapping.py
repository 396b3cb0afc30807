"""A call's plan follows its arrays to a new mapping, and to other host arrays of its
layout (``ComputeMemo.followed``, ``CallPlan.follow``; the express lane's
``follow_table``, ``pyacc/_plan_follow.c.h``).

On a device with separate memory a data region that maps the same arrays anew (a time
step's ``acc.data``, ``enter_data`` after ``exit_data``) changes the present table, so a
plan made before it no longer holds: its device arrays were another mapping's. When every
array of the call lies wholly inside a mapping again, the plan takes the device arrays of
the mappings as they are now — what the Python launcher's join would find (OpenACC 3.3
§2.6.2: data already present is used where it is) — instead of a first call's full path.
So does the newest plan of a region for a call with other host arrays of its type, dtype
and layout (a program whose arrays are made anew), once no plan matches as it is, and when
they are sorted as the plan's were (host data, not device memory: API.md §6.2). Anything
else (an array absent, partly present, a present clause failing, device memory) goes to
the launcher and gets its answer: the copy, the error, exactly as a first call.
"""

import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc._devices import current_runtime
from pyacc._replay import CallPlan
from tests.launcher_calls import slow_calls

from test_express import add_one, add_one_present, axpy, relax  # the same kernels

LANE = acc.express_lane()
ALWAYS = "1000000"  # µs: every async call on an idle queue runs at once


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


def address(array) -> int:
    return acc.deviceptr(array).__array_interface__["data"][0]


def test_a_plan_follows_its_arrays_to_a_new_mapping(form, monkeypatch):
    x, y = np.zeros(16), np.ones(16)
    calls, more = slow_calls(add_one, monkeypatch), slow_calls(axpy, monkeypatch)
    with acc.data(copy=[x]):
        armed(add_one, x, **form)
        seen = {address(x)}
    with acc.data(copy=[y], copyin=[x]):
        armed(axpy, y, x, 2.0, **form)
    calls.clear(), more.clear()
    acc.reset_stats()
    spacers = []
    for step in range(3):  # each step maps x and y anew, at device addresses not seen before
        spacers.append(np.zeros(64 * (step + 1)))
        acc.enter_data(create=[spacers[-1]])
        x[:] = step
        with acc.data(copy=[x, y]):
            assert address(x) not in seen
            seen.add(address(x))
            add_one(x, **form)  # a plan of arrays only (its fixed arguments made again)
            axpy(y, x, 0.5, **form)  # with a scalar
            acc.wait()
            assert acc.refcounts(x) == (1, 0)
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
        runtime = current_runtime()
        join = type(runtime).join_structured

        def counted(self, *args, **kwargs):
            joins.append(1)
            return join(self, *args, **kwargs)

        monkeypatch.setattr(type(runtime), "join_structured", counted)
        spacer = np.zeros(64)
        acc.enter_data(create=[spacer])  # x's next mapping is at another address
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


def test_a_view_follows_into_its_parents_new_mapping(form, monkeypatch):
    x = np.zeros(12)
    inner = x[2:10]
    calls = slow_calls(add_one, monkeypatch)
    with acc.data(copy=[x]):
        armed(add_one, inner, **form)
    calls.clear()
    x[:] = 5.0
    spacer = np.zeros(64)
    acc.enter_data(create=[spacer])
    with acc.data(copy=[x]):
        add_one(inner, **form)
        acc.wait()
        assert acc.refcounts(inner) == (1, 0)
    np.testing.assert_array_equal(x, [5, 5] + [6] * 8 + [5, 5])
    assert len(calls) == (0 if LANE else 1)


def test_while_oversubscribing_a_plan_does_not_follow(form, monkeypatch):
    x = np.zeros(8)
    with acc.data(copy=[x]):
        armed(add_one, x, **form)
    calls = slow_calls(add_one, monkeypatch)  # (drops the plans: armed again below)
    with acc.data(copy=[x]):
        armed(add_one, x, **form)
    calls.clear()
    acc.set_oversubscribe(True)
    try:
        with acc.data(copy=[x]):  # every use goes through the full entry, which records it
            add_one(x, **form)
            acc.wait()
    finally:
        acc.set_oversubscribe(False)
    assert len(calls) == 1
    np.testing.assert_array_equal(x, 5.0)


def test_an_error_while_following_leaves_the_table_free(form, monkeypatch):
    def broken(self, runtime, args):
        raise RuntimeError("follow failed")

    slow_calls(add_one, monkeypatch)  # (drops the plans earlier tests armed)
    monkeypatch.setattr(CallPlan, "follow", broken)  # before the plan is armed
    x = np.zeros(4)
    with acc.data(copy=[x]):
        armed(add_one, x, **form)
    with acc.data(copy=[x]):
        if LANE:  # (the Python launcher's replay follows its memo itself, and runs)
            with pytest.raises(RuntimeError, match="follow failed"):
                add_one(x, **form)
        else:
            add_one(x, **form)
        acc.wait()
        assert acc.refcounts(x) == (1, 0), "nothing counted by the failed call"
        taken = []

        def take():  # another thread takes the table's lock (is_present would not)
            lock = current_runtime().table.locked()
            taken.append(lock.acquire(timeout=2))
            if taken[-1]:
                lock.release()

        acc.set_device_type("emulated")
        other = threading.Thread(target=lambda: (acc.set_device_type("emulated"), take()))
        other.start()
        other.join(5)
        assert taken == [True], "the failed follow let go of the table's lock"
    np.testing.assert_array_equal(x, 2.0 if LANE else 3.0)


# -- other host arrays of the plan's layout -------------------------------------------------

def test_a_plan_takes_new_arrays_of_its_layout(form, monkeypatch):
    calls = slow_calls(axpy, monkeypatch)
    y, x = np.zeros(32), np.ones(32)
    with acc.data(copy=[y], copyin=[x]):
        armed(axpy, y, x, 1.0, **form)
    calls.clear()
    for step in range(3):  # arrays made anew each time, as a program run again makes them
        y, x = np.zeros(32), np.full(32, step + 1.0)
        with acc.data(copy=[y], copyin=[x]):
            axpy(y, x, 2.0, **form)
            axpy(y, x, 2.0, **form)
            acc.wait()
        np.testing.assert_array_equal(y, 4.0 * (step + 1))
        assert acc.refcounts(x) == (0, 0)
    assert len(calls) == (0 if LANE else 6)


@pytest.fixture
def answers(monkeypatch):
    """What each ``CallPlan.follow`` answered (patched before the plans are armed)."""
    seen = []
    follow = CallPlan.follow

    def counted(self, runtime, args):
        seen.append(follow(self, runtime, args))
        return seen[-1]

    monkeypatch.setattr(CallPlan, "follow", counted)
    return seen


def arm_and_drop(region, *shapes, **form):
    """A plan of ``region`` armed on host arrays of ``shapes`` mapped in a region, the
    arrays dropped since (their slots' weak references dead)."""
    arrays = [np.zeros(shape) for shape in shapes]
    scalars = () if len(arrays) == 1 else (1.0,)  # (add_one's one array; axpy's two and a)
    with acc.data(copy=arrays):
        armed(region, *arrays, *scalars, **form)


def test_new_arrays_not_present_are_copied_by_the_call(form, answers, monkeypatch):
    calls = slow_calls(axpy, monkeypatch)
    arm_and_drop(axpy, 8, 8, **form)
    calls.clear()
    y, x = np.zeros(8), np.full(8, 3.0)  # of the plan's layout, not mapped
    axpy(y, x, 1.0, **form)
    acc.wait()
    assert answers == [], "not asked: the lane saw in C that they are not mapped"
    assert len(calls) == 1, "the launcher's full entry copied them"
    assert not acc.is_present(y) and acc.refcounts(x) == (0, 0)
    np.testing.assert_array_equal(y, 3.0)


def test_device_memory_of_the_plans_layout_is_passed_as_it_is(form, answers):
    arm_and_drop(add_one, 8, **form)
    memory = acc.malloc(8, np.float64)  # device memory (API.md §6.2), not host data
    memory[:] = 10.0
    add_one(memory, **form)
    acc.wait()
    assert answers == [], "device memory lies in no mapping: not followed"
    assert not acc.is_present(memory)
    np.testing.assert_array_equal(memory, 11.0)
    acc.free(memory)


def test_a_plan_asks_no_follow_for_arrays_that_left_the_table(form, answers, monkeypatch):
    """A plan armed in a data region, then called on the same arrays outside any: each
    call maps them for itself (the full entry), and the lane, which sees in C that they
    are not mapped, does not ask Python to follow them first."""
    calls = slow_calls(add_one, monkeypatch)
    x = np.zeros(8)
    with acc.data(copy=[x]):
        armed(add_one, x, **form)
    calls.clear()
    for _ in range(3):
        add_one(x, **form)
    acc.wait()
    assert answers == [] and len(calls) == 3
    np.testing.assert_array_equal(x, 5.0)


def test_a_plan_refuses_to_follow_into_device_memory(form, monkeypatch):
    """``CallPlan.follow`` refuses device memory in a slot of host data before any lookup
    (the launcher's sort passes it to the kernel as it is, API.md §6.2), whatever the
    table would say (here: a lookup that would find it mapped)."""
    slow_calls(add_one, monkeypatch)
    arm_and_drop(add_one, 8, **form)
    memory = acc.malloc(8, np.float64)
    memory[:] = 1.0
    monkeypatch.setattr(type(current_runtime()), "containing_all", lambda self, arrays: [None])
    plan = add_one._call_plans[0]
    assert plan.follow(current_runtime(), (memory,)) is None  # refused before any lookup
    acc.free(memory)


def test_an_array_of_the_plan_still_alive_is_not_replaced(form, answers):
    y, x = np.zeros(8), np.ones(8)
    with acc.data(copy=[y], copyin=[x]):
        armed(axpy, y, x, 1.0, **form)
        other = np.zeros(8)
        with acc.data(copy=[other]):
            axpy(other, x, 1.0, **form)  # y is alive: a plan of its own, made by the launcher
            axpy(other, x, 1.0, **form)
            acc.wait()
    assert answers == []
    np.testing.assert_array_equal(other, 2.0)
    np.testing.assert_array_equal(y, 2.0)


def test_a_solvers_argument_orders_keep_a_plan_each(form, answers, monkeypatch):
    follows = answers
    calls = slow_calls(relax, monkeypatch)
    u, unew = np.linspace(0.0, 1.0, 16), np.zeros(16)
    with acc.data(copy=[u, unew]):
        for _ in range(2):
            armed(relax, u, unew, **form)
            armed(relax, unew, u, **form)
        calls.clear(), follows.clear()
        for _ in range(5):
            relax(u, unew, **form)
            relax(unew, u, **form)
        acc.wait()
    assert follows == [] and len(calls) == (0 if LANE else 10), "each order its own plan"
