"""``KernelInfo.may_return_arrays``: whether what a compute region returns may be (or
hold, or view) an array it was given. The launcher lends such a kernel no device array
that it keeps between calls (``mapping.compute.ComputeMemo``), since one returned to the
program would outlive the memory it views; every other kernel keeps the replay's views
and its express plan. Conservative: anything but fresh values (constants, arithmetic,
reduction variables bound only to fresh values) counts as an array."""
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
    (a_scalar_parameter, "", False),  # (arithmetic: a new value, whatever n is)
    (an_element, "", True),  # (x[0] of a 2-d x is a row: conservative)
])
def test_may_return_arrays_is_false_only_for_fresh_values(function, clauses, expected):
    info = analyze(function, parse_clauses("parallel_loop", clauses or None))
    assert info.may_return_arrays is expected


def an_array_reduction_bound_to_a_parameter(x, hist):
    h = hist
    for i in range(x.shape[0]):
        h[int(x[i]) % h.shape[0]] += 1.0
    return h


def an_array_reduction_bound_to_a_view(x, hist):
    h, s = hist[0:4], 0.0
    for i in range(x.shape[0]):
        h[int(x[i]) % 4] += 1.0
    return h


def a_reduction_seeded_by_a_walrus(x):
    (s := 0.0)
    for i in range(x.shape[0]):
        s += x[i]
    return s


@pytest.mark.parametrize("function, clauses, expected", [
    (an_array_reduction_bound_to_a_parameter, "reduction(+:h)", True),
    (an_array_reduction_bound_to_a_view, "reduction(+:h)", True),
    (a_reduction_seeded_by_a_walrus, "reduction(+:s)", False),
])
def test_a_reduction_variable_is_fresh_only_when_every_binding_is(function, clauses, expected):
    info = analyze(function, parse_clauses("parallel_loop", clauses))
    assert info.may_return_arrays is expected


def a_reduction_unpacked_from_a_parameter(x, pair):
    s, t = pair
    for i in range(x.shape[0]):
        s += x[i]
    return s


def a_chunked_sum(x, scale):
    s = 0.0
    for i in range(x.shape[0]):
        t = x[i] * scale
        s = t * t + s
    return s


def one_of_two_arguments(x, y, flag):
    for i in range(x.shape[0]):
        x[i] = y[i]
    return x if flag else y


@pytest.mark.parametrize("function, clauses, expected", [
    (a_reduction_unpacked_from_a_parameter, "reduction(+:s)", True),
    (a_chunked_sum, "reduction(+:s)", False),
    (one_of_two_arguments, "", True),
])
def test_bindings_and_forms_of_returns(function, clauses, expected):
    info = analyze(function, parse_clauses("parallel_loop", clauses or None))
    assert info.may_return_arrays is expected


def a_sum_with_a_helper_inside(x):
    def helper(y):
        return y

    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return s


def test_returns_of_a_function_defined_inside_are_its_own():
    assert analyze(a_sum_with_a_helper_inside,
                   parse_clauses("parallel_loop", "reduction(+:s)")).may_return_arrays is False
