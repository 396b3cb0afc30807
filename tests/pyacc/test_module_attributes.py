"""Attributes of modules read by a kernel (``gmod.G``, ``pkg.sub.S``): read at each call,
as module-level names are (API.md §6.1; ``compiler/free_names.py``).

A Fortran module variable, or a C global kept in another file, is spelled in Python as an
attribute of the module that holds it. Numba freezes the module attributes it is given
at the first compile (an array's writes land in a frozen copy), so the compiler makes each
one a free parameter of the kernel, as a global name is: its value read at each call (in
C by the express lane), an array mapped by the implicit rule (present-or-copy; copied
back when written), a scalar firstprivate.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

import pyacc as acc
from tests.launcher_calls import slow_calls

# the fixtures ``device`` (host, emulated) and ``lane`` (the express lane on, or off)
from test_async_at_once import device, lane  # noqa: F401

N = 8
physics = types.ModuleType("physics")  # a module of the program's (not a numeric library)
physics.G = np.arange(N, dtype=np.float64)
physics.S = 1.0
pkg = types.ModuleType("pkg")
pkg.sub = types.ModuleType("pkg.sub")
pkg.sub.S = 3.0


@acc.parallel_loop
def scaled(y):
    for i in range(y.shape[0]):
        y[i] = physics.G[i] * physics.S + 0.0 * np.pi


@acc.parallel_loop
def fill_module_array(value):
    for i in range(physics.G.shape[0]):
        physics.G[i] = value


@acc.parallel_loop
def nested(y):
    for i in range(y.shape[0]):
        y[i] = pkg.sub.S


@pytest.fixture(autouse=True)
def module_values():
    yield
    physics.G, physics.S, pkg.sub.S = np.arange(N, dtype=np.float64), 1.0, 3.0


def test_a_module_attribute_is_read_at_each_call(device, lane):
    y = np.zeros(N)
    for _ in range(3):
        scaled(y)
    np.testing.assert_array_equal(y, np.arange(N))
    physics.G[:] = 7.0
    physics.S = 2.0
    for _ in range(3):
        scaled(y)
    np.testing.assert_array_equal(y, 14.0)
    physics.G = np.ones(N)  # rebound: the new array
    scaled(y)
    np.testing.assert_array_equal(y, 2.0)
    nested(y)
    pkg.sub.S = 5.0
    nested(y)
    np.testing.assert_array_equal(y, 5.0)


def test_a_module_array_a_kernel_writes_is_copied_back(device, lane):
    for value in (4.0, 5.0, 6.0):
        fill_module_array(value)
        np.testing.assert_array_equal(physics.G, value)


def test_a_present_module_array_is_used_in_place(device):
    y = np.zeros(N)
    with acc.data(copyin=[physics.G], copy=[y]):
        acc.deviceptr(physics.G)[:] = 9.0  # the device copy (the host array itself on host)
        for _ in range(3):
            scaled(y)
    np.testing.assert_array_equal(y, 9.0)


def test_a_module_array_absent_under_default_present_is_named_as_written(device):
    if device == "host":
        pytest.skip("on host every array is present")

    @acc.parallel_loop(default="present")
    def reads(y):
        for i in range(y.shape[0]):
            y[i] = physics.G[i]

    y = np.zeros(N)
    with acc.data(copy=[y]):
        with pytest.raises(acc.NotPresentError, match=r"physics\.G"):
            reads(y)


def test_numeric_library_constants_are_left_to_numba():
    assert scaled.info.free_params == ("physics__G", "physics__S")
    assert scaled.info.labels == {"physics__G": "physics.G", "physics__S": "physics.S"}
    assert nested.info.free_params == ("pkg__sub__S",)


def test_a_deleted_module_attribute_raises_name_error_naming_it(lane):
    y = np.zeros(N)
    scaled(y)
    del physics.S
    with pytest.raises(NameError, match=r"physics\.S"):
        scaled(y)


def test_explain_names_module_attributes_as_written():
    scaled(np.zeros(N))
    text = acc.explain(scaled)
    assert "physics.G (module-level): copyin" in text
    assert "physics.S (module-level): firstprivate" in text


@pytest.mark.skipif(not acc._express.express_lane(), reason="needs the C express lane")
def test_calls_reading_module_attributes_take_the_lane(device, monkeypatch, python_frames):
    y = np.zeros(N)
    slow = slow_calls(scaled, monkeypatch)
    with acc.data(copyin=[physics.G], copy=[y]):
        for k in range(20):
            physics.S = float(k)
            scaled(y)
        assert not set(python_frames(scaled, y)) & {"_call_slow", "read"}
        acc.update_self(y)
    np.testing.assert_array_equal(y, 19.0 * np.arange(N))
    assert len(slow) <= 3


def test_a_routine_reading_a_module_array_is_a_compile_error():
    """As for a global array (``check_free_names``): a routine's module array would be
    frozen at its compile; it must be passed as an argument."""
    @acc.routine
    def first(i):
        return physics.G[i]

    @acc.parallel_loop
    def uses(y):
        for i in range(y.shape[0]):
            y[i] = first(i)

    with pytest.raises(acc.CompileError, match=r"module array 'physics\.G'.*pass it as an argument"):
        uses(np.zeros(N))
