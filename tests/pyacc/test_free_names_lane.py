"""Calls of a region whose kernel reads module-level or closure names, in the express lane
(``pyacc/_free_values.c.h``: ``with_free``; ``FastCall._free``, ``_call_inputs.free_sources``).

API.md §6.1: a kernel may read module-level names (and closure variables) that are arrays
or numeric scalars; their values are read at each call, after the arguments, and names
defined after the decorator count. Such regions take the express lane as others do: the
lane reads the names' values in C at each call and checks them as it checks arguments, so
a changed value is seen at once, a value of another type or layout goes to the Python
launcher, and a name deleted since raises the Python launcher's NameError.
"""
from __future__ import annotations

import gc

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
SCALE = 2.0
TABLE = np.arange(N, dtype=np.float64)


@acc.parallel_loop
def scaled(x, y):
    for i in range(x.shape[0]):
        y[i] = SCALE * x[i]


@acc.parallel_loop
def plus_table(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] + TABLE[i]


@acc.parallel_loop
def plus_later(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] + DEFINED_LATER


DEFINED_LATER = 5.0


@pytest.fixture(autouse=True)
def constants():
    """The module-level names as the module defines them, before and after each test."""
    global SCALE, TABLE, DEFINED_LATER
    SCALE, TABLE, DEFINED_LATER = 2.0, np.arange(N, dtype=np.float64), 5.0
    yield
    SCALE, TABLE, DEFINED_LATER = 2.0, np.arange(N, dtype=np.float64), 5.0


def test_a_region_reading_module_level_names_takes_the_lane_rule_6_1(device, monkeypatch):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = [slow_calls(region, monkeypatch) for region in (scaled, plus_later)]
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(CALLS):
            scaled(x, y)
        acc.update_self(y)
        np.testing.assert_array_equal(y, 2.0 * x)
        for _ in range(CALLS):
            plus_later(x, y)
    assert [len(calls) <= 2 for calls in slow] == [True, True]  # a join, a replay: then the lane's
    np.testing.assert_array_equal(y, x + 5.0)


def _each_value_is_read(region, set_value, monkeypatch):
    """Calls of ``region`` (``y = value · x``), each after ``set_value(k)``: each reads the
    value just set, and the calls take the lane."""
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(region, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        for k in range(CALLS):
            set_value(float(k))
            region(x, y)
            acc.update_self(y)
            np.testing.assert_array_equal(y, k * x)
    assert len(slow) <= 2


def test_a_changed_value_is_read_at_the_next_call(device, monkeypatch):
    _each_value_is_read(scaled, lambda value: globals().__setitem__("SCALE", value), monkeypatch)


def test_a_value_of_another_type_goes_to_the_python_launcher_and_is_exact(device, monkeypatch):
    global SCALE
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(scaled, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(3):
            scaled(x, y)
        SCALE = 3  # an int now: another kernel
        for _ in range(3):
            scaled(x, y)
        acc.update_self(y)
        np.testing.assert_array_equal(y, 3 * x)
        SCALE = 0.5
        scaled(x, y)
    assert len(slow) <= 5  # (each type: a join, a replay; the float's plan kept)
    np.testing.assert_array_equal(y, 0.5 * x)


def test_a_module_level_array_replaced_is_the_one_the_kernel_reads(device):
    global TABLE
    x, y = np.zeros(N), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for k in range(CALLS):
            if k % 10 == 0:
                TABLE = np.full(N, float(k))
            plus_table(x, y)
            acc.update_self(y)
            np.testing.assert_array_equal(y, TABLE)


def test_a_deleted_name_raises_the_launchers_name_error(device):
    global DEFINED_LATER
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    for _ in range(3):
        plus_later(x, y)
    del DEFINED_LATER
    with pytest.raises(NameError, match="plus_later.*DEFINED_LATER"):
        plus_later(x, y)


def test_closure_values_are_read_at_each_call(device, monkeypatch):
    factor = 1.0

    @acc.parallel_loop
    def times_factor(x, y):
        for i in range(x.shape[0]):
            y[i] = factor * x[i]

    def set_factor(value):
        nonlocal factor
        factor = value

    _each_value_is_read(times_factor, set_factor, monkeypatch)


def test_async_calls_read_them_too(device, monkeypatch):
    global SCALE
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(scaled, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        for k in range(CALLS):
            SCALE = float(k)
            scaled(x, y, async_=1)
            acc.wait(1)
        acc.update_self(y)
    assert len(slow) <= 3
    np.testing.assert_array_equal(y, (CALLS - 1) * x)


def test_the_lane_and_the_python_launcher_agree(device, lane):
    global SCALE
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    results = []
    with acc.data(copyin=[x], copy=[y]):
        for k in range(CALLS):
            SCALE = k / 2 if k % 3 else k
            scaled(x, y)
            plus_table(y, y)
            acc.update_self(y)
            results.append(y.copy())
    expected = [(k / 2 if k % 3 else k) * x + TABLE for k in range(CALLS)]
    np.testing.assert_array_equal(results, expected)


def test_the_region_shows_the_collector_the_names_it_reads(device):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    scaled(x, y)
    assert scaled._free == ((globals(), "SCALE"),)
    assert any(referent is scaled._free for referent in gc.get_referents(scaled))


@pytest.mark.parametrize("value", [[], ((1, None),), ((None, "SCALE"),), (({}, 1),), ((globals(),),)])
def test_a_regions_free_sources_are_checked(value):
    with pytest.raises(TypeError, match="_free"):
        scaled._free = value
