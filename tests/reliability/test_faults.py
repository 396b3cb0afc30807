"""Fault injection on the emulated device (issue 8, item 1).

Every scenario below is one "call": a multi-array ``enter_data`` or ``exit_data``, a whole
``with acc.data(...)`` region with a kernel and an update inside, a compute call with
implicit copies, or a sequence of asynchronous operations ending in a wait. Each is run
once under a counting ``FaultPlan`` (``acc.testing.inject_faults()``) to learn how many
allocations, copies and launches it performs, and checked to complete correctly; then it
is run again from a fresh, identical setup once for every k and every kind, with the k-th
operation of that kind failing.

For every such case the test checks that

* the fault really fired (no vacuous case), and the call raised the documented error —
  ``OutOfMemoryError`` for an allocation, ``ExecutionError`` for a copy or a launch
  (for asynchronous work: at the wait, naming the queue);
* afterwards the present table (host range, counters, kind, device address of every
  mapping), the ``refcounts`` of every array involved, the device memory in use, the
  number of live device blocks, the device contents of every mapping and the bytes of
  every host array are exactly what they were before the call;
* after the setup's own mappings are released, nothing is left: empty table, device
  memory back to zero, allocator invariants intact (and ``acc.testing.check_consistency``
  when the runtime provides it).

A scenario whose exit copies several arrays back may legitimately have copied back the
arrays whose copies succeeded before the failing one was reached (OpenACC leaves this
open; pyacc's structured exits copy back everything they can, so that no result is lost).
Such scenarios declare ``partial_copy_back``: each host array must then be either exactly
as before or exactly its correct final value (never torn), and the array whose copy
failed must be as before. Everything else is still checked exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import pyacc as acc
from pyacc.testing import inject_faults

from .support import assert_baseline, differences, filled, scribble_device_memory, snapshot

N = 16
KINDS = ("alloc", "copy", "launch")
EXPECTED_ERROR = {"alloc": acc.OutOfMemoryError, "copy": acc.ExecutionError, "launch": acc.ExecutionError}


# =========================================================================== kernels


@acc.parallel_loop(present="a b c w p")
def combine(a, b, c, w, p):
    for i in range(a.shape[0]):
        w[i] = a[i] + b[i]
        c[i] = 2.0 * w[i] + p[i]
        a[i] += 1.0


@acc.parallel_loop(copyout="z", reduction="+:total")
def axpy_and_sum(x, y, z, p, s):
    total = 0.0
    for i in range(x.shape[0]):
        y[i] += s * x[i]
        z[i] = y[i] + p[i]
        total += z[i]
    return total


@acc.parallel_loop
def add_one(v):
    for i in range(v.shape[0]):
        v[i] += 1.0


# =========================================================================== scenarios


@dataclass
class Scenario:
    """One call under test. ``setup()`` returns a dict of arrays (``arrays`` lists the
    ones to snapshot) after making the setup's own mappings; ``action(s)`` is the call;
    ``check(s)`` checks the result of a call that completed; ``cleanup(s)`` releases the
    setup's mappings; ``final(s)`` gives the correct final host arrays (for the
    partial-copy-back rule)."""

    name: str
    setup: Callable
    action: Callable
    check: Callable
    cleanup: Callable
    copy_backs: int = 0
    async_queues: tuple = ()
    expected_counts: dict = field(default_factory=dict)


def _arrays(s):
    return [s[key] for key in sorted(s) if isinstance(s[key], np.ndarray) and not key.startswith("_")]


# -- enter_data: five requests, an increment of present data, a view joining a new mapping --


def enter_setup():
    scribble_device_memory()
    s = {"p": filled(32, 100.0), "a": filled(N, 0.0), "b": filled(2 * N, 50.0),
         "c": np.zeros(8, dtype=np.int32)}
    acc.enter_data(copyin=[s["p"]])
    return s


def enter_action(s):
    acc.enter_data(copyin=[s["a"], s["p"][4:12], s["b"], s["b"][8:16]], create=[s["c"]])


def enter_check(s):
    assert acc.refcounts(s["a"]) == (0, 1)
    assert acc.refcounts(s["p"]) == (0, 2)
    assert acc.refcounts(s["b"]) == (0, 2)
    assert acc.refcounts(s["c"]) == (0, 1)
    np.testing.assert_array_equal(acc.deviceptr(s["a"]), s["a"])
    np.testing.assert_array_equal(acc.deviceptr(s["b"]), s["b"])


def enter_cleanup(s):
    acc.exit_data(delete=[s["a"], s["b"], s["c"], s["p"]], finalize=True)


# -- exit_data: copy-outs that end lifetimes (one through a view), one that does not -----


def exit_setup():
    scribble_device_memory()
    s = {"a": filled(N, 0.0), "b": filled(N, 20.0), "c": filled(N, 40.0), "d": filled(N, 60.0)}
    acc.enter_data(copyin=[s["a"], s["b"], s["c"], s["d"]])
    acc.enter_data(copyin=[s["b"]])  # b is held twice: the exit does not end it
    for key in "abcd":  # device data differs from the host's: a copy-out is visible
        acc.deviceptr(s[key])[:] *= -1.0
    return s


def exit_action(s):
    acc.exit_data(copyout=[s["a"], s["b"], s["c"][2:6]], delete=[s["d"]])


def exit_check(s):
    np.testing.assert_array_equal(s["a"], -filled(N, 0.0))
    np.testing.assert_array_equal(s["b"], filled(N, 20.0))  # still mapped: not copied out
    expected_c = filled(N, 40.0)
    expected_c[2:6] *= -1.0  # only the named view's elements come back
    np.testing.assert_array_equal(s["c"], expected_c)
    np.testing.assert_array_equal(s["d"], filled(N, 60.0))
    assert acc.refcounts(s["b"]) == (0, 1)
    assert [r.nbytes for r in acc.present_table()] == [s["b"].nbytes]


def exit_cleanup(s):
    acc.exit_data(delete=[s["a"], s["b"], s["c"], s["d"]], finalize=True)


def exit_finalize_action(s):
    acc.exit_data(copyout=[s["a"], s["b"]], delete=[s["c"]], finalize=True)


def exit_finalize_check(s):
    np.testing.assert_array_equal(s["a"], -filled(N, 0.0))
    np.testing.assert_array_equal(s["b"], -filled(N, 20.0))  # finalize ends it
    np.testing.assert_array_equal(s["c"], filled(N, 40.0))
    assert acc.refcounts(s["d"]) == (0, 1)
    assert len(acc.present_table()) == 1


# -- update: two views copied to the host, one array to the device -------------------------


def update_setup():
    s = {"a": filled(N, 0.0), "b": filled(N, 20.0), "c": filled(N, 40.0)}
    acc.enter_data(copyin=[s["a"], s["b"], s["c"]])
    for key in "abc":
        acc.deviceptr(s[key])[:] *= -1.0
    s["c"][:] += 1000.0
    return s


def update_action(s):
    acc.update(self=[s["a"], s["b"][2:6]], device=[s["c"]])


def update_check(s):
    np.testing.assert_array_equal(s["a"], -filled(N, 0.0))
    b = filled(N, 20.0)
    b[2:6] *= -1.0
    np.testing.assert_array_equal(s["b"], b)
    np.testing.assert_array_equal(acc.deviceptr(s["c"]), filled(N, 1040.0))


def update_cleanup(s):
    acc.exit_data(delete=[s["a"], s["b"], s["c"]])


# -- a data region with every entry clause, a kernel and an update inside ------------------


def region_setup():
    scribble_device_memory()
    s = {"p_base": filled(N + 8, 300.0), "a": filled(N, 0.0), "b": filled(N, 10.0),
         "c": np.full(N, -7.0), "w": np.full(N, -9.0)}
    acc.enter_data(copyin=[s["p_base"]])
    return s


def region_action(s, async_=None):
    p = s["p_base"][4:4 + N]
    with acc.data(copy=[s["a"]], copyin=[s["b"]], copyout=[s["c"]], create=[s["w"]], present=[p],
                  async_=async_):
        combine(s["a"], s["b"], s["c"], s["w"], p, async_=async_)
        acc.update(device=[s["b"]], async_=async_)
    if async_ is not None:
        acc.wait(async_)


def region_check(s):
    a0, b0, p = filled(N, 0.0), filled(N, 10.0), filled(N + 8, 300.0)[4:4 + N]
    np.testing.assert_array_equal(s["a"], a0 + 1.0)
    np.testing.assert_array_equal(s["c"], 2.0 * (a0 + b0) + p)
    np.testing.assert_array_equal(s["b"], b0)
    np.testing.assert_array_equal(s["w"], -9.0)  # create: never copied back
    assert acc.refcounts(s["p_base"]) == (0, 1)
    assert len(acc.present_table()) == 1


def region_final(s):
    a0, b0, p = filled(N, 0.0), filled(N, 10.0), filled(N + 8, 300.0)[4:4 + N]
    return {"a": a0 + 1.0, "c": 2.0 * (a0 + b0) + p}


def region_cleanup(s):
    acc.exit_data(delete=[s["p_base"]], finalize=True)


# -- a compute call with implicit copies (copyin, copy), an explicit copyout, present data --


def compute_setup():
    scribble_device_memory()
    s = {"p_base": filled(2 * N, 500.0), "x": filled(N, 1.0), "y": filled(N, 2.0),
         "z": np.full(N, -3.0)}
    acc.enter_data(copyin=[s["p_base"]])
    return s


def compute_action(s, async_=None):
    result = axpy_and_sum(s["x"], s["y"], s["z"], s["p_base"][N:], 2.0, async_=async_)
    if async_ is not None:
        result = result.result()
    s["_result"] = result


def compute_final(s):
    x, y, p = filled(N, 1.0), filled(N, 2.0), filled(2 * N, 500.0)[N:]
    y = y + 2.0 * x
    return {"y": y, "z": y + p}


def compute_check(s):
    final = compute_final(s)
    np.testing.assert_array_equal(s["x"], filled(N, 1.0))
    np.testing.assert_array_equal(s["y"], final["y"])
    np.testing.assert_array_equal(s["z"], final["z"])
    assert s["_result"] == pytest.approx(float(final["z"].sum()))
    assert acc.refcounts(s["p_base"]) == (0, 1)


def compute_cleanup(s):
    acc.exit_data(delete=[s["p_base"]], finalize=True)


# -- asynchronous sequences ------------------------------------------------------------------


def async_setup():
    scribble_device_memory()
    return {"a": filled(N, 0.0), "b": filled(N, 10.0), "c": np.full(N, -7.0), "w": np.full(N, -9.0),
            "p": filled(N, 300.0)}


def async_one_queue_action(s):
    q = 1
    acc.enter_data(copyin=[s["a"], s["b"], s["p"]], create=[s["c"], s["w"]], async_=q)
    combine(s["a"], s["b"], s["c"], s["w"], s["p"], async_=q)
    add_one(s["a"], async_=q)
    acc.update(self=[s["w"]], async_=q)
    acc.exit_data(copyout=[s["a"], s["c"]], delete=[s["b"], s["w"], s["p"]], async_=q)
    acc.wait(q)


def async_check(s):
    a0, b0 = filled(N, 0.0), filled(N, 10.0)
    np.testing.assert_array_equal(s["a"], a0 + 2.0)
    np.testing.assert_array_equal(s["w"], a0 + b0)
    np.testing.assert_array_equal(s["c"], 2.0 * (a0 + b0) + filled(N, 300.0))
    assert acc.present_table() == []


def async_final(s):
    a0, b0 = filled(N, 0.0), filled(N, 10.0)
    return {"a": a0 + 2.0, "w": a0 + b0, "c": 2.0 * (a0 + b0) + filled(N, 300.0)}


def async_two_queues_action(s):
    """Copy-in on queue 1, kernels on queue 2 after it (wait_async), copy-out on queue 3
    after queue 2 (a wait clause), then one host wait on every queue."""
    acc.enter_data(copyin=[s["a"], s["b"], s["p"]], create=[s["c"], s["w"]], async_=1)
    acc.wait_async(1, 2)
    combine(s["a"], s["b"], s["c"], s["w"], s["p"], async_=2)
    add_one(s["a"], async_=2)
    acc.update(self=[s["w"]], async_=2)
    acc.exit_data(copyout=[s["a"], s["c"]], delete=[s["b"], s["w"], s["p"]], async_=3, wait=[2])
    acc.wait(1, 2, 3)


def nothing(s):
    pass


SCENARIOS = {
    "enter_data_multi_array": Scenario("enter_data", enter_setup, enter_action, enter_check,
                                       enter_cleanup, expected_counts={"alloc": 3, "copy": 2}),
    "exit_data_multi_array": Scenario("exit_data", exit_setup, exit_action, exit_check, exit_cleanup,
                                      expected_counts={"copy": 2}),
    "exit_data_finalize": Scenario("exit_data finalize", exit_setup, exit_finalize_action,
                                   exit_finalize_check, exit_cleanup,
                                   expected_counts={"copy": 2}),
    "update_three_arrays": Scenario("update", update_setup, update_action, update_check,
                                    update_cleanup, expected_counts={"copy": 3}),
    "data_region_with_kernel_and_update": Scenario(
        "data region", region_setup, region_action, region_check, region_cleanup, copy_backs=2,
        expected_counts={"alloc": 4, "copy": 5, "launch": 1}),
    "async_data_region": Scenario(
        "async data region", region_setup, lambda s: region_action(s, async_=2), region_check,
        region_cleanup, copy_backs=2, async_queues=(2,),
        expected_counts={"alloc": 4, "copy": 5, "launch": 1}),
    "compute_call_implicit_copies": Scenario(
        "compute call", compute_setup, compute_action, compute_check, compute_cleanup, copy_backs=2,
        expected_counts={"alloc": 3, "copy": 4, "launch": 1}),
    "async_compute_call": Scenario(
        "async compute call", compute_setup, lambda s: compute_action(s, async_=3), compute_check,
        compute_cleanup, copy_backs=2, async_queues=(3,),
        expected_counts={"alloc": 3, "copy": 4, "launch": 1}),
    "async_sequence_one_queue": Scenario(
        "async sequence", async_setup, async_one_queue_action, async_check, nothing,
        copy_backs=3, async_queues=(1,),
        expected_counts={"alloc": 5, "copy": 6, "launch": 2}),
    "async_sequence_three_queues": Scenario(
        "async sequence on three queues", async_setup, async_two_queues_action, async_check, nothing,
        copy_backs=3, async_queues=(1, 2, 3),
        expected_counts={"alloc": 5, "copy": 6, "launch": 2}),
}



FINAL = {"data_region_with_kernel_and_update": region_final, "async_data_region": region_final,
         "compute_call_implicit_copies": compute_final, "async_compute_call": compute_final,
         "async_sequence_one_queue": async_final, "async_sequence_three_queues": async_final}


# =========================================================================== the driver


class HostArrayChanged(AssertionError):
    """A failed call changed a host array it must have left alone."""


def _run_counting(scenario):
    """The scenario without faults: it completes, gives the right result, and tells how
    many operations of each kind it performs."""
    s = scenario.setup()
    with inject_faults() as plan:
        scenario.action(s)
    scenario.check(s)
    scenario.cleanup(s)
    assert_baseline()
    return dict(plan.counts)


def _check_host_arrays(key, scenario, s, before_host, partial_allowed):
    """Host arrays after a failed call: exactly as before; or, where a copy-back failed
    and the scenario allows partial copy-back, each one either as before or exactly its
    correct final value (never torn, never garbage)."""
    names = [k for k in sorted(s) if isinstance(s[k], np.ndarray) and not k.startswith("_")]
    final = FINAL[key](s) if partial_allowed else {}
    for name, old in zip(names, before_host):
        array = s[name]
        if array.tobytes() == old:
            continue
        if name not in final:
            raise HostArrayChanged(f"host array {name!r} changed although the call failed: {array}")
        if not np.array_equal(array, final[name]):
            raise HostArrayChanged(f"host array {name!r} is neither as before nor its final value "
                                   f"(torn or garbage): {array}")


def _run_with_fault(key, scenario, kind, k, total, interrupt=None):
    s = scenario.setup()
    arrays = _arrays(s)
    before = snapshot(arrays)
    raised = None
    with inject_faults(error=interrupt, **{kind: k}) as plan:
        try:
            scenario.action(s)
        except acc.ConsistencyError:
            raise  # the checker's verdict, not the injected failure
        except (acc.AccError, KeyboardInterrupt) as error:
            raised = error
        finally:
            if scenario.async_queues:  # nothing may stay queued past the plan
                try:
                    acc.wait_all()
                except acc.ExecutionError as error:
                    raised = raised or error
    where = f"{key}: {kind} #{k} of {total}"
    assert plan.fired, f"{where} never happened: the case is vacuous ({plan})"
    assert raised is not None, f"{where} failed but the call completed without raising"
    expected = EXPECTED_ERROR[kind] if interrupt is None else interrupt
    assert isinstance(raised, expected), f"{where}: unexpected {type(raised).__name__}: {raised}"
    if scenario.async_queues and not isinstance(raised, acc.OutOfMemoryError):
        assert re.search(r"queue \d", str(raised)), f"{where}: the error does not name the queue: {raised}"
    after = snapshot(arrays)
    before_host, after_host = before.pop("host"), after.pop("host")
    changes = differences(before, after)
    assert changes == [], f"{where} left changes: {changes}"
    # the last ``copy_backs`` copies of the scenario are its copy-backs
    partial_allowed = kind == "copy" and k > total - scenario.copy_backs
    try:
        _check_host_arrays(key, scenario, s, before_host, partial_allowed)
    finally:
        scenario.cleanup(s)
        assert_baseline()


def _cases(keys=tuple(SCENARIOS)):
    cases = []
    for key in keys:
        scenario = SCENARIOS[key]
        for kind in KINDS:
            if not scenario.expected_counts.get(kind):
                continue
            marks = []
            if (key, kind) in _KNOWN_BUGS:
                marks.append(pytest.mark.xfail(strict=True, raises=HostArrayChanged,
                                               reason=_KNOWN_BUGS[key, kind]))
            cases.append(pytest.param(key, kind, id=f"{key}-{kind}", marks=marks))
    return cases


_KNOWN_BUGS: dict = {}  # (scenario, kind) -> reason, for a strict xfail while a finding is open


@pytest.mark.parametrize("key, kind", _cases())
def test_every_single_fault_leaves_the_runtime_exactly_as_before(emulated, key, kind):
    """For every allocation (copy, launch) of the scenario: make it fail; the call raises
    the documented error and leaves everything as it was; nothing leaks."""
    scenario = SCENARIOS[key]
    counts = _run_counting(scenario)
    expected = {name: scenario.expected_counts.get(name, 0) for name in KINDS}
    assert counts == expected, f"the scenario did {counts}, expected {expected}"
    for k in range(1, counts[kind] + 1):
        _run_with_fault(key, scenario, kind, k, counts[kind])


SYNCHRONOUS = ("enter_data_multi_array", "exit_data_multi_array", "exit_data_finalize",
               "update_three_arrays", "compute_call_implicit_copies")


@pytest.mark.parametrize("key, kind", _cases(SYNCHRONOUS))
def test_an_interrupt_during_any_device_operation_rolls_back_like_a_fault(emulated, key, kind):
    """A KeyboardInterrupt arriving during the k-th allocation (copy, launch) of a
    synchronous call: it propagates as it is, and the call leaves everything as it was
    (the rollback paths catch BaseException, not only errors)."""
    scenario = SCENARIOS[key]
    counts = _run_counting(scenario)
    for k in range(1, counts[kind] + 1):
        _run_with_fault(key, scenario, kind, k, counts[kind], interrupt=KeyboardInterrupt)


def test_the_consistency_checker_agrees_with_the_runtime_after_every_fault(emulated, checked):
    """Every scenario and every single fault again, with ``PYACC_CHECK=1``: the checker
    follows each directive, including the rollbacks, and finds nothing wrong (its own
    bookkeeping and the runtime's agree after every failed call and at the end)."""
    for key, scenario in SCENARIOS.items():
        counts = _run_counting(scenario)
        for kind in KINDS:
            for k in range(1, counts[kind] + 1):
                try:
                    _run_with_fault(key, scenario, kind, k, counts[kind])
                except HostArrayChanged:
                    pass  # the known host-buffer findings are checked above
                acc.testing.check_consistency()
