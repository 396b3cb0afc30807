"""A kernel defined inside a function or method is decorated again at each call of it
(a C++ class ported literally): that costs a lookup, not an analysis and a kernel build
(issue 29 item 7), and each decoration still reads its own closure at each call
(API.md §6.1)."""
from __future__ import annotations

import numpy as np
import pytest

import pyacc as acc
from pyacc.compiler import kernel as kernel_module


@pytest.fixture
def builds(monkeypatch):
    """How many kernels were built (generated and compiled or loaded) meanwhile."""
    count = [0]
    original = kernel_module._build

    def counting(*args, **kwargs):
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(kernel_module, "_build", counting)
    return count


def scaled_by(factor):
    @acc.parallel_loop
    def scale(x, y):
        for i in range(x.shape[0]):
            y[i] = factor * x[i]
    return scale


def test_decorating_the_same_code_again_shares_analysis_and_kernels(device, builds):
    x, y = np.arange(8.0), np.zeros(8)
    first = scaled_by(2.0)
    first(x, y)
    built = builds[0]
    again = scaled_by(3.0)  # the same code, another closure value (a scalar: read at the call)
    again(x, y)
    assert builds[0] == built  # no new kernel
    assert again.info is not first.info and again.info.kernels is first.info.kernels
    np.testing.assert_array_equal(y, 3.0 * x)  # its own closure value


def offset_by(table):
    @acc.parallel_loop
    def add(x):
        for i in range(x.shape[0]):
            x[i] += table[i]
    return add


def test_each_decoration_reads_its_own_closure_array(device):
    x = np.zeros(4)
    offset_by(np.ones(4))(x)
    offset_by(np.full(4, 10.0))(x)
    np.testing.assert_array_equal(x, np.full(4, 11.0))


def double(v):
    return 2.0 * v


def triple(v):
    return 3.0 * v


def applying(routine):
    @acc.parallel_loop
    def apply(x):
        for i in range(x.shape[0]):
            x[i] = routine(x[i])
    return apply


def test_a_closure_function_bound_at_compile_gets_its_own_analysis(host_device, builds):
    """A function in the closure is compiled into the kernel (a routine): another one
    is another kernel."""
    x = np.ones(3)
    applying(double)(x)
    applying(triple)(x)
    np.testing.assert_array_equal(x, np.full(3, 6.0))
    assert applying(double).info.kernels is not applying(triple).info.kernels


class Stream:
    """A C++-style class whose methods define their kernels (BabelStream's shape)."""

    def __init__(self, n):
        self.a, self.b = np.ones(n), np.zeros(n)

    def copy(self):
        @acc.parallel_loop
        def copy_kernel(a, b):
            for i in range(a.shape[0]):
                b[i] = a[i]
        copy_kernel(self.a, self.b)


def test_a_kernel_defined_in_a_method_is_built_once(emulated, builds):
    stream = Stream(16)
    stream.copy()
    built = builds[0]
    for _ in range(5):
        stream.copy()
    assert builds[0] == built
    np.testing.assert_array_equal(stream.b, stream.a)
