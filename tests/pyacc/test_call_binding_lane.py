"""Calls that give arguments by name, leave some to their defaults, or give
``async_=acc.async_sync``, in the express lane (``bound_call`` in
``pyacc/_call_binding.c.h``, ``FastCall._binding``; ``ComputeRegion._call_slow``).

API.md §6: "keyword arguments by parameter name are accepted too"; the lane binds them as
Python binds them (``inspect.Signature.bind``) and refuses, through the Python launcher, what
Python refuses (its ``TypeError``). API.md §5, OpenACC 3.3 §2.16.1: ``acc.async_sync`` is
synchronous, the default: a call given it returns its value, whatever the region's
``async`` clause says.
"""
from __future__ import annotations

import numpy as np
import pytest

import pyacc as acc
from pyacc._call_inputs import call_binding
from pyacc._outcome import AsyncResult
from tests.launcher_calls import slow_calls

# the fixtures ``device`` (host, emulated) and ``lane`` (the express lane on, or off)
from test_async_at_once import device, lane  # noqa: F401

N = 64
CALLS = 30
needs_lane = pytest.mark.skipif(not acc._express.express_lane(), reason="needs the C express lane")


@acc.parallel_loop
def axpy(x, y, alpha=2.0):
    for i in range(x.shape[0]):
        y[i] = y[i] + alpha * x[i]


@acc.parallel_loop(reduction="+:s")
def dot(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


@acc.parallel_loop(async_=1)
def add_on_one(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


@acc.parallel_loop(async_=acc.async_sync)
def add_sync_clause(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + x[i]


# (arguments, keywords) of calls that add ``alpha * x`` to ``y``, and that alpha
FORMS = {
    "by name": (lambda x, y: ((), dict(x=x, y=y, alpha=3.0)), 3.0),
    "by name, another order": (lambda x, y: ((), dict(alpha=3.0, y=y, x=x)), 3.0),
    "positional then by name": (lambda x, y: ((x,), dict(y=y)), 2.0),
    "a default": (lambda x, y: ((x, y), {}), 2.0),
    "a default, by name": (lambda x, y: ((), dict(y=y, x=x)), 2.0),
    "by name with async_ and wait": (lambda x, y: ((x,), dict(y=y, alpha=3.0, async_=2, wait=1)), 3.0),
    "by name with if_=True": (lambda x, y: ((x,), dict(if_=True, y=y)), 2.0),
}


@needs_lane
@pytest.mark.parametrize("form", FORMS, ids=str)
def test_arguments_by_name_and_defaults_take_the_lane(device, form, monkeypatch, python_frames):
    make, alpha = FORMS[form]
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    slow = slow_calls(axpy, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        acc.update_device(x, async_=1)  # queue 1 made, and settled
        acc.wait()
        args, keywords = make(x, y)
        for _ in range(CALLS):
            axpy(*args, **keywords)
            acc.wait()
        entered = set(python_frames(axpy, *args, **keywords))
        assert not entered & {"_call_slow", "_bind", "bind"}
        acc.wait()
    assert len(slow) <= 3
    np.testing.assert_array_equal(y, (CALLS + 1) * alpha * x)


REFUSED = {
    "a missing argument": (lambda x, y: ((x,), {}), "missing a required argument: 'y'"),
    "an unknown name": (lambda x, y: ((x, y), dict(beta=1.0)), "unexpected keyword argument 'beta'"),
    "given twice": (lambda x, y: ((x, y), dict(x=x)), "multiple values for argument 'x'"),
    "too many": (lambda x, y: ((x, y, 1.0, 2.0), {}), "too many positional arguments"),
}


@pytest.mark.parametrize("refused", REFUSED, ids=str)
def test_a_call_python_would_refuse_raises_its_type_error(device, lane, refused):
    make, message = REFUSED[refused]
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(5):  # armed
            axpy(x, y)
        args, keywords = make(x, y)
        counts = acc.refcounts(x), acc.refcounts(y)
        with pytest.raises(TypeError, match=message):
            axpy(*args, **keywords)
        assert (acc.refcounts(x), acc.refcounts(y)) == counts
    np.testing.assert_array_equal(y, 5 * 2.0 * x)  # nothing ran for the refused call


def test_defaults_are_those_of_the_signature(device, lane):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for alpha in (None, 1.0, None, 5.0, None):  # the lane's plans: one per scalar type
            axpy(x, y) if alpha is None else axpy(x, y, alpha)
    np.testing.assert_array_equal(y, (3 * 2.0 + 1.0 + 5.0) * x)


def test_the_binding_is_the_parameters_and_their_defaults():
    assert axpy._binding == (("x", "y", "alpha"), (2.0,)) or not acc._express.express_lane()
    assert call_binding(axpy._signature) == (("x", "y", "alpha"), (2.0,))

    def positional_only(a, /, b):
        pass

    def keyword_only(a, *, b):
        pass

    import inspect
    assert call_binding(inspect.signature(positional_only)) is None
    assert call_binding(inspect.signature(keyword_only)) is None


@needs_lane
@pytest.mark.parametrize("value", [("x",), (("x", 1), ()), (("x",), (1, 2)), [("x",), ()]])
def test_a_regions_binding_is_checked_when_set(value):
    @acc.parallel_loop
    def copy(x, y):
        for i in range(x.shape[0]):
            y[i] = x[i]

    with pytest.raises(TypeError, match="_binding"):
        copy._binding = value


# -- acc.async_sync: synchronous (OpenACC 3.3 §2.16.1) ------------------------------------

def test_async_sync_at_the_call_returns_the_value(device, lane):
    x = np.arange(N, dtype=np.float64)
    with acc.data(copyin=[x]):
        values = [dot(x, x, async_=acc.async_sync) for _ in range(CALLS)]
        assert values == [float(x @ x)] * CALLS
        assert not any(isinstance(value, AsyncResult) for value in values)


def test_async_sync_at_the_call_replaces_the_regions_async_clause(device, lane):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for k in range(CALLS):
            assert add_on_one(x, y, async_=acc.async_sync) is None  # not a handle
            acc.update_self(y)  # (no wait: the call has completed)
            np.testing.assert_array_equal(y, (k + 1) * x)


def test_an_async_sync_clause_is_synchronous(device, lane):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with acc.data(copyin=[x], copy=[y]):
        for k in range(CALLS):
            assert add_sync_clause(x, y) is None
            acc.update_self(y)
            np.testing.assert_array_equal(y, (k + 1) * x)
    assert add_sync_clause._direct


@needs_lane
@pytest.mark.parametrize("region", [dot, add_on_one, add_sync_clause], ids=lambda r: r.__name__)
def test_async_sync_calls_take_the_lane(device, region, monkeypatch, python_frames):
    x, y = np.arange(N, dtype=np.float64), np.ones(N)
    slow = slow_calls(region, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(CALLS):
            region(x, y, async_=acc.async_sync)
        entered = set(python_frames(region, x, y, async_=acc.async_sync))
        assert not entered & {"_call_slow", "_call", "wait_for"}
    assert len(slow) <= 3


SCALE = 2.0


def test_a_default_that_names_a_global_or_a_closure_value_is_its_value_at_definition(device, lane):
    """Python evaluates a parameter's default once, when the function is made: the kernel
    uses that value (the generated kernel module has no such name; it raised NameError or
    CompileError), whatever the name is bound to later."""
    global SCALE

    @acc.parallel_loop
    def fill(x, a=SCALE):
        for i in range(x.shape[0]):
            x[i] = a

    def made(v):
        twice = v * 2

        @acc.parallel_loop
        def fill_twice(x, a=twice):
            for i in range(x.shape[0]):
                x[i] = a
        return fill_twice

    x, y = np.zeros(4), np.zeros(4)
    previous, SCALE = SCALE, 5.0
    try:
        for _ in range(3):
            fill(x)
            made(3.0)(y)
    finally:
        SCALE = previous
    assert x.tolist() == [2.0] * 4 and y.tolist() == [6.0] * 4


@acc.parallel_loop
def scaled_by(self, y):  # (a parameter may be named self: the launcher's own is positional-only)
    for i in range(y.shape[0]):
        y[i] = 2.0 * self[i]


def test_a_parameter_named_self_may_be_given_by_name(device, lane):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    for _ in range(3):
        scaled_by(self=x, y=y)  # (the first call: _call_slow(self, /, ...) binds it)
    np.testing.assert_array_equal(y, 2.0 * x)
