"""``KernelInfo.may_return_arrays``: whether what a compute region returns may be (or
hold, or view) an array it was given. The launcher lends such a kernel no device array
that it keeps between calls (``mapping.compute.ComputeMemo``), since one returned to the
program would outlive the memory it views; every other kernel keeps the replay's views
and its express plan. Conservative: anything but numbers computed from constants and
reduction variables counts as an array."""
from __future__ import annotations

import pytest

from pyacc.compiler import analyze, parse_clauses


def nothing(x):
    for i in range(x.shape[0]):
        x[i] = 0.0


def a_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return s


def a_range(x):
    lo, hi = 1e300, -1e300
    for i in range(x.shape[0]):
        lo = min(lo, x[i])
        hi = max(hi, x[i])
    return (lo, hi), abs(hi - lo) / 2.0, None


def a_constant(x):
    for i in range(x.shape[0]):
        x[i] = 0.0
    return 0


def the_argument(x):
    for i in range(x.shape[0]):
        x[i] += 1.0
    return x


def a_view(x):
    y = x[1:]
    for i in range(y.shape[0]):
        y[i] = 1.0
    return y


def an_argument_in_a_tuple(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return s, x


def a_scalar_parameter(x, n):
    for i in range(n):
        x[i] = 0.0
    return n * 2


def an_element(x):
    for i in range(x.shape[0]):
        x[i] = 1.0
    return x[0]


@pytest.mark.parametrize("function, clauses, expected", [
    (nothing, "", False),
    (a_sum, "reduction(+:s)", False),
    (a_range, "reduction(min:lo) reduction(max:hi)", False),
    (a_constant, "", False),
    (the_argument, "", True),
    (a_view, "", True),
    (an_argument_in_a_tuple, "reduction(+:s)", True),
    (a_scalar_parameter, "", True),  # (a parameter may be an array: conservative)
    (an_element, "", True),  # (x[0] of a 2-d x is a row: conservative)
])
def test_may_return_arrays_is_false_only_for_numbers_of_reductions_and_constants(function, clauses, expected):
    info = analyze(function, parse_clauses("parallel_loop", clauses or None))
    assert info.may_return_arrays is expected
