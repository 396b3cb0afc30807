"""The ``tile`` (OpenACC 3.3 §2.9.8), ``auto`` (§2.9.7) and routine-level (§2.15.1) clauses:
their spellings, their exclusions, and what they do to the loop nest."""
from __future__ import annotations

import numpy as np
import pytest

import pyacc as acc
from pyacc.compiler import CompileError, parse_clauses


@pytest.mark.parametrize("text, keywords, sizes", [
    ("tile(32, *)", dict(tile=[32, "*"]), (32, "*")),
    ("tile(*,*,*)", dict(tile="*, *, *"), ("*", "*", "*")),
    ("tile(8)", dict(tile=8), (8,)),
    ("tile(N // 4, 2)", dict(tile=["N // 4", 2]), ("N // 4", 2)),
])
def test_tile_sizes_are_spelled_as_c_writes_them(text, keywords, sizes):
    assert parse_clauses("parallel_loop", text) == parse_clauses("parallel_loop", **keywords)
    clauses = parse_clauses("loop", **keywords)
    assert clauses.tile == sizes and clauses.nest_depth == len(sizes)


@pytest.mark.parametrize("text, message", [
    ("tile(0)", "a tile size is a positive integer or '\\*'"),
    ("tile(2, -1)", "positive integer"),
    ("tile(2.5)", "positive integer"),
    ("tile(2,)", "positive integer"),
    ("tile(2) collapse(2)", "tile and collapse may not appear together"),
    ("seq independent", "seq and independent may not appear together"),
    ("auto independent", "independent and auto may not appear together"),
])
def test_bad_loop_clauses_are_compile_errors(text, message):
    with pytest.raises(CompileError, match=message):
        parse_clauses("parallel_loop", text)


@pytest.mark.parametrize("text", ["seq worker", "gang vector", "worker vector seq"])
def test_a_routine_has_one_level_of_parallelism(text):
    with pytest.raises(CompileError, match=r"§2.15.1: a routine has one level"):
        parse_clauses("routine", text)


def test_routine_nohost_is_accepted():
    assert parse_clauses("routine", "seq nohost").nohost


@acc.parallel_loop("tile(*, *) reduction(+:total)")
def tiled_sum(a):
    total = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            total += a[i, j]
    return total


@acc.parallel
def tiled_three_levels(a, b):
    for i in acc.loop(range(a.shape[0]), tile=(2, 32, "*")):
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                b[i, j, k] = 2 * a[i, j, k]


@acc.parallel
def auto_recurrence(c):
    for i in acc.loop(range(1, c.shape[0]), auto=True):
        c[i] = c[i - 1] + 1.0


@acc.parallel_loop(auto=True)
def auto_independent(c, d):
    for i in range(c.shape[0]):
        d[i] = 2 * c[i]


def test_tile_makes_its_loops_one_parallel_nest(device):
    a = np.arange(6000.0).reshape(60, 100)
    assert tiled_sum(a) == a.sum()
    x, y = np.random.default_rng(1).random((4, 50, 6)), np.zeros((4, 50, 6))
    tiled_three_levels(x, y)
    np.testing.assert_array_equal(y, 2 * x)
    assert "collapse(2), tile(*, *)" in acc.explain(tiled_sum)


def test_tile_needs_as_many_tightly_nested_loops():
    def one_loop(a):
        for i in acc.loop(range(a.shape[0]), tile=(4, 4)):
            a[i] = 1.0

    with pytest.raises(CompileError, match=r"tile\(4, 4\) needs 2 tightly nested"):
        acc.parallel(one_loop)(np.zeros(3))


def test_auto_loop_with_a_dependence_runs_as_written(device):
    c = np.zeros(20000)
    auto_recurrence(c)
    np.testing.assert_array_equal(c, np.arange(20000.0))
    assert "sequential loop" in acc.explain(auto_recurrence)


def test_auto_loop_without_a_dependence_runs_in_parallel(device):
    c, d = np.arange(100.0), np.zeros(100)
    auto_independent(c, d)
    np.testing.assert_array_equal(d, 2 * c)
    assert "parallel loop" in acc.explain(auto_independent)


def device_square(v):
    return v * v + 1000.0


@acc.routine("seq bind(device_square)")
def square_by_name(v):
    return v * v


@acc.routine(seq=True, bind=device_square)
def square_by_function(v):
    return v * v


@acc.routine("seq bind(defined_after_the_kernel)")
def square_defined_later(v):
    return v * v


@acc.parallel_loop
def squares(a, b):
    for i in range(a.shape[0]):
        b[i] = square_by_name(a[i]) + square_by_function(a[i]) + square_defined_later(a[i])


def defined_after_the_kernel(v):
    return v * v + 1.0


def test_routine_bind_runs_the_bound_function_in_kernels(device):
    """OpenACC 3.3 §2.15.1 bind: kernels call the bound function; Python calls the
    routine itself."""
    a, b = np.arange(4.0), np.zeros(4)
    squares(a, b)
    np.testing.assert_array_equal(b, 3 * a * a + 2001.0)
    assert square_by_name(3.0) == 9.0


@acc.routine("seq bind(nowhere)")
def bound_to_nothing(v):
    return v


@acc.parallel_loop
def calls_bound_to_nothing(a):
    for i in range(a.shape[0]):
        a[i] = bound_to_nothing(a[i])


def test_routine_bind_to_a_missing_name_is_a_compile_error(host_device):
    with pytest.raises(CompileError, match=r"routine bind\(nowhere\) names no function"):
        calls_bound_to_nothing(np.ones(3))


@pytest.mark.parametrize("text", ["seq bind(1x)", "seq bind()"])
def test_bind_takes_a_function_name(text):
    with pytest.raises(CompileError, match="bind"):
        parse_clauses("routine", text)


@acc.parallel
def loop_with_a_clause_string(a):
    total = 0.0
    for i in acc.loop(range(a.shape[0]), "gang vector reduction(+:total)"):
        total += a[i]
    return total


def test_acc_loop_takes_the_clauses_as_the_pragma_writes_them(device):
    assert loop_with_a_clause_string(np.arange(100.0)) == 4950.0
    assert list(acc.loop(range(3), "seq")) == [0, 1, 2]  # plain Python


def test_acc_loop_clause_string_values_are_literals():
    def counted(a, n):
        for i in acc.loop(range(a.shape[0]), "gang((n+1)/2)"):
            a[i] = 1.0

    with pytest.raises(CompileError, match="clause values of acc.loop are literals"):
        acc.parallel(counted)
    with pytest.raises(CompileError, match="unknown clause 'gnag'"):
        acc.loop(range(3), "gnag")


@pytest.mark.parametrize("text, message", [
    ("num_gangs(2, 2)", "num_gangs takes one count here: gangs of several dimensions"),
    ("collapse(force:2)", r"collapse\(force:n\) is not supported: make the loops tightly"),
])
def test_unsupported_forms_of_supported_clauses_say_so(text, message):
    with pytest.raises(CompileError, match=message):
        parse_clauses("parallel_loop", text)


def test_async_forms_have_their_own_names_and_signatures():
    import inspect

    from pyacc import openacc
    assert openacc.acc_copyin_async.__name__ == "acc_copyin_async"
    assert str(inspect.signature(openacc.acc_copyin_async)) == "(a, async_arg)"
    assert str(inspect.signature(openacc.acc_delete_finalize)) == "(a, *, async_=None)"


@acc.routine("seq bind(bound_back)")
def binds_forth(v):
    return v + 1.0


@acc.routine("seq bind(binds_forth)")
def bound_back(v):
    return v + 2.0


@acc.parallel_loop
def calls_a_bind_cycle(a):
    for i in range(a.shape[0]):
        a[i] = binds_forth(a[i])


def test_a_bind_cycle_is_a_compile_error(host_device):
    with pytest.raises(CompileError, match=r"bind\(...\) cycles back to binds_forth"):
        calls_a_bind_cycle(np.ones(2))


def test_deviceptr_with_another_data_clause_says_why():
    with pytest.raises(CompileError, match="a deviceptr variable is device memory already"):
        parse_clauses("parallel", "deviceptr(t) copy(t)")


@acc.parallel
def auto_with_a_private_array(a, t):
    for i in acc.loop(range(a.shape[0]), auto=True, private="t"):
        t[0] = i * 2.0
        a[i] = t[0]


def test_a_private_array_is_no_dependence_of_an_auto_loop(device):
    """OpenACC 3.3 §2.9.7, 2.9.10: each iteration writes its own copy of ``t``."""
    a, t = np.zeros(100), np.zeros(1)
    auto_with_a_private_array(a, t)
    np.testing.assert_array_equal(a, 2.0 * np.arange(100))
    assert t[0] == 0.0 and "line" in acc.explain(auto_with_a_private_array)
    assert "parallel loop; private(t)" in acc.explain(auto_with_a_private_array)
