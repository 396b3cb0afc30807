"""Calls of a region whose ``if`` clause is an expression, in the express lane
(``FastCall._condition``; ``condition_holds`` in ``pyacc/_call_queue.c.h``;
``_call_inputs.condition_of``).

OpenACC 3.3 §2.5.6: when the ``if`` clause is false the region runs on the local thread,
on host data. A region declared with an expression (``if_="n > 1000"``, how
``#pragma acc parallel loop if(n > 1000)`` is ported) evaluates it at each call (API.md
§6.1: the parameters by name, then the function's globals). Such a region's calls are
direct when the expression is its only one: the lane asks the expression first and runs
the plan when it is true; a false one, or one that raises, is the Python launcher's, which
runs the region on the host or raises what the expression raised. Both paths share one
kernel (on cuda, where a launch shape evaluated at a call is part of the kernel:
``tests/cuda/test_simulated_runtime.py``).
"""
from __future__ import annotations

import numpy as np
import pytest

import pyacc as acc
from tests.launcher_calls import slow_calls

# the fixtures ``device`` (host, emulated: an idle queue runs a kernel at once) and ``lane``
# (the express lane on, or off: every call through the Python launcher)
from test_async_at_once import device, lane  # noqa: F401

pytestmark = pytest.mark.skipif(not acc._express.express_lane(), reason="needs the C express lane")

N = 64
CALLS = 30
THRESHOLD = 10


@acc.parallel_loop(if_="n > 10")
def add_if_long(x, y, n):
    for i in range(n):
        y[i] = y[i] + x[i]


@acc.parallel_loop(if_="n > THRESHOLD")
def add_if_above(x, y, n):
    for i in range(n):
        y[i] = y[i] + x[i]


@acc.parallel_loop("num_gangs(n // 8)", if_="n > 10")
def add_if_long_gangs(x, y, n):
    for i in range(n):
        y[i] = y[i] + x[i]


@pytest.fixture(autouse=True)
def threshold():
    global THRESHOLD
    THRESHOLD = 10
    yield
    THRESHOLD = 10


def test_a_true_if_expression_takes_the_lane_rule_2_5_6(device, monkeypatch):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(add_if_long, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(CALLS):
            add_if_long(x, y, N)
    assert len(slow) <= 2
    np.testing.assert_array_equal(y, CALLS * x)


def test_a_false_one_runs_on_the_host_on_host_data(device):
    """On emulated (separate memory) the host copy is what an ``if(false)`` call writes,
    and the device copy what a true one writes."""
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x, y]):
        for _ in range(3):
            add_if_long(x, y, N)  # the device's y
        add_if_long(x, y, 8)  # the host's y, its first 8 elements
        separate = device == "emulated"
        np.testing.assert_array_equal(y[:8], x[:8] if separate else 4 * x[:8])
        np.testing.assert_array_equal(y[8:], 0.0 if separate else 3 * x[8:])
        add_if_long(x, y, N)
        acc.update_self(y)
    np.testing.assert_array_equal(y, 4 * x + (0 if separate else x * (np.arange(N) < 8)))


def test_the_expression_reads_module_level_names_at_each_call(device, monkeypatch):
    global THRESHOLD
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(add_if_above, monkeypatch)
    with acc.data(copyin=[x, y]):
        for _ in range(CALLS):
            add_if_above(x, y, N)
        THRESHOLD = N  # false from now on: the host's y
        add_if_above(x, y, N)
        if device == "emulated":
            np.testing.assert_array_equal(y, x)
        acc.update_self(y)
    assert len(slow) <= 3
    np.testing.assert_array_equal(y, (CALLS if device == "emulated" else CALLS + 1) * x)


def test_an_expression_that_raises_is_reported_by_the_python_launcher(device):
    global THRESHOLD
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    for _ in range(3):
        add_if_above(x, y, N)
    THRESHOLD = "ten"  # str > int: TypeError
    with pytest.raises(acc.InvalidArgumentError, match=r"if_\(n > THRESHOLD\).*TypeError"):
        add_if_above(x, y, N)
    del THRESHOLD
    with pytest.raises(acc.InvalidArgumentError, match="NameError"):
        add_if_above(x, y, N)


def test_a_region_with_other_expressions_keeps_the_full_path(device, monkeypatch):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(add_if_long_gangs, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(5):
            add_if_long_gangs(x, y, N)
    assert add_if_long_gangs._condition is None and len(slow) == 5
    np.testing.assert_array_equal(y, 5 * x)


def test_the_lane_and_the_python_launcher_agree(device, lane):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for k in range(CALLS):
            add_if_long(x, y, N if k % 3 else 5)
    expected = np.zeros(N)
    if device == "host":
        expected += CALLS * x * (np.arange(N) < 5)  # (host data is the device's)
        expected += (CALLS - (CALLS + 2) // 3) * x * (np.arange(N) >= 5)
    else:
        expected += (CALLS - (CALLS + 2) // 3) * x  # the host's writes overwritten at the exit
    np.testing.assert_array_equal(y, expected)


def test_the_condition_is_checked_when_set():
    with pytest.raises(TypeError, match="_condition"):
        add_if_long._condition = 1


@acc.parallel_loop(if_="n > 10  # long ones on the device")
def add_if_long_commented(x, y, n):
    for i in range(n):
        y[i] = y[i] + x[i]


def test_an_expression_ending_in_a_comment_takes_the_lane(device, monkeypatch):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(add_if_long_commented, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(CALLS):
            add_if_long_commented(x, y, N)
    assert len(slow) <= 2 and add_if_long_commented._condition is not None
    np.testing.assert_array_equal(y, CALLS * x)


@acc.parallel_loop(if_="x.dtype != complex")
def add_if_real(x, y, n):
    for i in range(n):
        y[i] = y[i] + x[i]


def test_a_builtin_a_clause_may_not_read_is_refused_at_every_call(device):
    """A clause expression sees only ``EXPR_BUILTINS`` (``complex`` is not one of them):
    every call raises the full path's error, none runs through a condition that would
    find the builtin."""
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    for _ in range(3):
        with pytest.raises(acc.InvalidArgumentError, match="NameError.*complex"):
            add_if_real(x, y, N)
    assert add_if_real._condition is None


class _Disarming:
    """A value whose comparison disarms ``add_if_above``'s plans: the lane's condition
    runs Python code, which may change the region meanwhile."""

    def __lt__(self, other):
        add_if_above._disarm()
        return True


def test_plans_disarmed_while_the_condition_runs(device):
    global THRESHOLD
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(3):
            add_if_above(x, y, N)
        THRESHOLD = _Disarming()  # (n > THRESHOLD: THRESHOLD < n)
        for _ in range(3):
            add_if_above(x, y, N)
    np.testing.assert_array_equal(y, 6 * x)


@acc.parallel_loop(async_=2, wait=1, if_="n > 10")
def add_if_long_on_two_after_one(x, y, n):
    for i in range(n):
        y[i] = y[i] + x[i]


def test_an_if_expression_with_async_and_wait_clauses_takes_the_lane(device, monkeypatch):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(add_if_long_on_two_after_one, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        acc.update_device(x, async_=1)
        acc.wait()
        handles = []
        for _ in range(CALLS):
            handles.append(add_if_long_on_two_after_one(x, y, N))
            acc.wait(2)
    assert len(slow) <= 3 and {handle._queue.async_value for handle in handles} == {2}
    np.testing.assert_array_equal(y, CALLS * x)


def test_a_region_in_a_function_with_an_if_expression_and_closure_values(device, monkeypatch):
    factor = 1.0

    @acc.parallel_loop(if_="n > 10")
    def scaled_if_long(x, y, n):
        for i in range(n):
            y[i] = factor * x[i]

    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(scaled_if_long, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        for k in range(CALLS):
            factor = float(k)
            scaled_if_long(x, y, N)
            acc.update_self(y)
            np.testing.assert_array_equal(y, k * x)
    assert len(slow) <= 2


def test_an_openmp_target_region_with_an_if_clause(device):
    from pyacc import omp

    @omp.target_teams_distribute_parallel_for("map(to: x) map(tofrom: y) if(n > 10)")
    def add_if_long_omp(x, y, n):
        for i in range(n):
            y[i] = y[i] + x[i]

    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    for _ in range(5):
        add_if_long_omp(x, y, N)
    add_if_long_omp(x, y, 8)  # on the host, on host data
    np.testing.assert_array_equal(y, 5 * x + x * (np.arange(N) < 8))
