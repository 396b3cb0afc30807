"""Loop interchange of a sequential loop with the innermost collapsed level (CPU target).

Every interchanged kernel must give results bit-identical to the function run as written
(target "python"): the interchange keeps each accumulator's operations in their order.
Each test also checks, in the generated source, whether the interchange happened, so a
pattern that silently stops matching (or starts matching where it must not) fails here.
"""
from __future__ import annotations

import ast
import math
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pyacc import compiler as acc
from pyacc.compiler import analyze, get_kernel, mark_routine, parse_clauses
from pyacc.compiler import kernel as kernel_module
from pyacc.compiler.interchange import MIN_TRIPS, PURE_MARK, mark_pure, match

RNG = np.random.default_rng(7)


def analyzed(func, construct="parallel_loop", **clauses):
    return analyze(func, parse_clauses(construct, None, **clauses))


def generated_text(kernel) -> str:
    """The text of the module a cpu kernel was generated into."""
    return Path(kernel.py_func.__code__.co_filename).read_text()


def compiled(func, args, **clauses):
    """(the cpu kernel, the text of its generated module)."""
    kernel = get_kernel(analyzed(func, **clauses), args, target="cpu")
    return kernel, generated_text(kernel)


def run_both(func, *args, **clauses):
    """Run on cpu and as plain Python on copies; every array must be bit-identical.
    Returns (the generated module's text, the cpu run's arrays)."""
    cpu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    py = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    info = analyzed(func, **clauses)
    kernel = get_kernel(info, cpu, target="cpu")
    text = generated_text(kernel)
    value = kernel(*cpu)
    expected = get_kernel(info, py, target="python")(*py)
    assert value == expected
    for position, (a, b) in enumerate(zip(cpu, py)):
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype
            assert np.array_equal(a, b, equal_nan=True), f"argument {position} differs"
    return text, cpu


def interchanged(text: str) -> bool:
    """The generated module expands a scalar into an array (``_acc_<n>_x_<name>``)."""
    return "_x_" in text and "_acc_np.empty(" in text


# ------------------------------------------------------------------------ the pattern


def matmul(a, b, c):
    n, kmax = a.shape
    m = b.shape[1]
    for i in range(n):
        for j in range(m):
            total = 0.0
            for k in range(kmax):
                total += a[i, k] * b[k, j]
            c[i, j] = total


@pytest.mark.parametrize("n, kmax, m", [(7, 29, 41), (3, 1, 16), (2, 50, 33), (40, 3, 17)])
def test_matmul_collapse2_is_interchanged_and_bit_identical(n, kmax, m):
    a, b = RNG.random((n, kmax)), RNG.random((kmax, m))
    text, _ = run_both(matmul, a, b, np.zeros((n, m)), collapse=2)
    assert interchanged(text)
    assert "_acc_np.float64" in text  # the probe typed the accumulator


@pytest.mark.parametrize("m", [1, MIN_TRIPS - 1])
def test_short_j_loop_runs_as_written_in_the_same_kernel(m):
    a, b = RNG.random((5, 9)), RNG.random((9, m))
    text, _ = run_both(matmul, a, b, np.zeros((5, m)), collapse=2)
    assert interchanged(text)  # the short path is the else branch of the same kernel


def test_empty_k_loop_leaves_the_initial_value():
    a, b = np.zeros((4, 0)), np.zeros((0, 20))
    c = np.full((4, 20), 9.0)
    _, (_, _, out) = run_both(matmul, a, b, c, collapse=2)
    assert (out == 0.0).all()


def gemm_strided(a, b, c, alpha, beta):
    n = c.shape[0]
    m = c.shape[1]
    for i in range(1, n, 2):
        for j in range(m - 1, -1, -3):
            total = 0.0
            for k in range(a.shape[1] - 1, -1, -1):
                total += a[i, k] * b[k, j]
            c[i, j] = alpha * total + beta * c[i, j]


def test_negative_steps_and_a_post_statement_reading_the_output():
    a, b, c = RNG.random((9, 13)), RNG.random((13, 70)), RNG.random((9, 70))
    text, _ = run_both(gemm_strided, a, b, c, 1.5, -0.25, collapse=2)
    assert interchanged(text)


def batched(a, b, c):
    for p in range(a.shape[0]):
        for i in range(a.shape[1]):
            for j in range(b.shape[2]):
                total = 0.0
                for k in range(a.shape[2]):
                    total += a[p, i, k] * b[p, k, j]
                c[p, i, j] = total


def test_collapse3_interchanges_the_innermost_level():
    a, b = RNG.random((3, 4, 11)), RNG.random((3, 11, 19))
    text, _ = run_both(batched, a, b, np.zeros((3, 4, 19)), collapse=3)
    assert interchanged(text)


def int_start_float_sum(a, b, c):
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            total = 0  # an int that the updates make a float (Python semantics)
            for k in range(a.shape[1]):
                total += a[i, k] * b[k, j]
            c[i, j] = total


def test_int_initial_value_promoted_to_float_like_numba_does():
    a, b = RNG.random((4, 6)), RNG.random((6, 24))
    text, _ = run_both(int_start_float_sum, a, b, np.zeros((4, 24)), collapse=2)
    assert interchanged(text) and "_acc_np.float64" in text


def float32_dot(a, b, c):
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            total = np.float32(0)
            for k in range(a.shape[1]):
                total += a[i, k] * b[k, j]
            c[i, j] = total


def test_float32_accumulator_keeps_float32_arithmetic():
    a = RNG.random((5, 300)).astype(np.float32)
    b = RNG.random((300, 20)).astype(np.float32)
    text, _ = run_both(float32_dot, a, b, np.zeros((5, 20), np.float32), collapse=2)
    assert interchanged(text) and "_acc_np.float32" in text


def int_matmul(a, b, c):
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            total = 0
            for k in range(a.shape[1]):
                total += a[i, k] * b[k, j]
            c[i, j] = total


def test_integer_matmul():
    a, b = RNG.integers(-9, 9, (6, 8)), RNG.integers(-9, 9, (8, 30))
    text, _ = run_both(int_matmul, a, b, np.zeros((6, 30), np.int64), collapse=2)
    assert interchanged(text) and "_acc_np.int64" in text


def complex_parts(ar, ai, br, bi, cr, ci):
    for i in range(ar.shape[0]):
        for j in range(br.shape[1]):
            re = 0.0
            im = 0.0
            for k in range(ar.shape[1]):
                x = ar[i, k]
                y = ai[i, k]
                re += x * br[k, j] - y * bi[k, j]
                im = im + (x * bi[k, j] + y * br[k, j])
            cr[i, j] = re
            ci[i, j] = math.hypot(re, im)


def test_two_accumulators_and_temporaries():
    ar, ai = RNG.random((3, 10)), RNG.random((3, 10))
    br, bi = RNG.random((10, 18)), RNG.random((10, 18))
    text, _ = run_both(complex_parts, ar, ai, br, bi, np.zeros((3, 18)), np.zeros((3, 18)),
                       collapse=2)
    assert interchanged(text) and "_x_re" in text and "_x_im" in text


def tropical(a, b, c):
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            best = np.inf
            for k in range(a.shape[1]):
                best = min(best, a[i, k] + abs(b[k, j]))
            c[i, j] = best


def test_min_plus_product_with_pure_calls():
    a, b = RNG.standard_normal((4, 12)), RNG.standard_normal((12, 17))
    text, _ = run_both(tropical, a, b, np.zeros((4, 17)), collapse=2)
    assert interchanged(text)


def test_parallel_construct_with_a_collapse_marker():
    def marked(a, b, c):
        for i in acc.markers.loop(range(a.shape[0]), collapse=2):
            for j in range(b.shape[1]):
                total = 0.0
                for k in range(a.shape[1]):
                    total += a[i, k] * b[k, j]
                c[i, j] = total

    a, b = RNG.random((3, 5)), RNG.random((5, 20))
    text, _ = run_both(marked, a, b, np.zeros((3, 20)), construct="parallel")
    assert interchanged(text)


# ------------------------------------------------------------- left as written (and exact)


def test_without_collapse_a_j_loop_proved_independent_is_interchanged_too():
    """No collapse: the j loop is part of the nest only because the dependence test
    proves its iterations independent (``NestPlan.widen``, OpenACC 3.3 §2.9); the CPU
    then interchanges as for collapse(2), bit-identical."""
    a, b = RNG.random((3, 5)), RNG.random((5, 20))
    text, _ = run_both(matmul, a, b, np.zeros((3, 20)))
    assert interchanged(text)


def running_columns(a, b, c):
    n, kmax = a.shape
    m = b.shape[1]
    for i in range(n):
        for j in range(1, m):
            total = c[i, j - 1]
            for k in range(kmax):
                total += a[i, k] * b[k, j]
            c[i, j] = total


def test_without_collapse_a_j_loop_carrying_a_value_is_not_interchanged():
    """``c[i, j]`` reads ``c[i, j - 1]``: the j loop is not independent, so it stays in
    each i iteration, as written."""
    a, b = RNG.random((3, 5)), RNG.random((5, 20))
    text, _ = run_both(running_columns, a, b, np.zeros((3, 20)))
    assert not interchanged(text)


def transposed(a, bt, c):
    for i in range(a.shape[0]):
        for j in range(bt.shape[0]):
            total = 0.0
            for k in range(a.shape[1]):
                total += a[i, k] * bt[j, k]  # both rows contiguous in k as written
            c[i, j] = total


def triangular(a, b, c):
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            total = 0.0
            for k in range(min(j, a.shape[1])):  # the k bounds depend on j
                total += a[i, k] * b[k, j]
            c[i, j] = total


def accumulate_into_output(a, b, c):
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for k in range(a.shape[1]):  # no scalar: the loop stores array elements
                c[i, j] += a[i, k] * b[k, j]


def post_reads_k(a, b, c):
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            total = 0.0
            for k in range(a.shape[1]):
                total += a[i, k] * b[k, j]
            c[i, j] = total + k


@mark_routine
def scaled(x):
    return 2.0 * x


def kbody_calls_a_routine(a, b, c):
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            total = 0.0
            for k in range(a.shape[1]):
                total += scaled(a[i, k]) * b[k, j]
            c[i, j] = total


def carried_from_before_the_nest(a, b, c):
    total = 0.0
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            total = 0.0
            for k in range(a.shape[1]):
                total += a[i, k] * b[k, j]
            c[i, j] = total


@pytest.mark.parametrize("func", [transposed, triangular, accumulate_into_output, post_reads_k,
                                  kbody_calls_a_routine, carried_from_before_the_nest],
                         ids=lambda f: f.__name__)
def test_not_of_the_pattern_runs_as_written(func):
    a, b = RNG.random((3, 20)), RNG.random((20, 24))
    text, _ = run_both(func, a, b, np.zeros((3, 24)), collapse=2)
    assert not interchanged(text)


# The matcher's rules one by one, on the AST of a collapsed nest i, j (the body of j as
# the rewriter hands it over; names stored outside the nest: a, b, c and n).
BASE = """
for i in range(n):
    for j in range(n):
        total = 0.0
        for k in range(n):
            total += a[i, k] * b[k, j]
        c[i, j] = total
"""


def _match(source):
    outer = ast.parse(textwrap.dedent(source)).body[0]
    level = outer.body[0]
    return match(level, level.body, (outer, level), frozenset({"a", "b", "c", "n"}))


def test_matcher_accepts_the_base_pattern():
    found = _match(BASE)
    assert found is not None and found.carried == ("total",)


SETS_LAST = ("c[i, j] = total", "c[i, j] = total\n        last = total")


@pytest.mark.parametrize("changes", [
    [("total += a[i, k] * b[k, j]", "total += a[i, k] * b[k, j] + last"), SETS_LAST],
    [("total = 0.0", "total = last"), SETS_LAST],  # PRE reads a value of the last j
    [("total += a[i, k] * b[k, j]", "total += w\n            w = 1.0")],  # w: last k/j
    [("total += a[i, k] * b[k, j]", "c[i, k] += b[k, j]")],                # element store
    [("c[i, j] = total", "c[i, j] = total\n        total = 1.0")],        # POST sets it
    [("c[i, j] = total", "c[i, j] = total\n        break")],              # control flow
    [("c[i, j] = total", "c[i, j] = total + k")],                         # POST reads k
    [("for k in range(n):", "for k in range(j):")],                       # bounds read j
    [("for k in range(n):", "for j in range(n):")],                       # k is a level
    [("total = 0.0", "i = 0.0")],                                         # sets a level
    [("total = 0.0", "n = 0.0")],                                         # stored outside
    [("total = 0.0", "total = f(j)")],                                    # unknown call
    [("b[k, j]", "b[j, k]")],                              # contiguous as written: no gain
    [("b[k, j]", "b[k * n + j]")],                         # flattened: walks k and j
    [("a[i, k] * b[k, j]", "a[i, k]")],                    # nothing read along j
])
def test_matcher_refuses(changes):
    source = BASE
    for old, new in changes:
        assert old in source
        source = source.replace(old, new, 1)
    assert _match(source) is None


def test_matcher_accepts_values_fixed_before_the_loop():
    assert _match(BASE.replace("total = 0.0", "total = last")) is not None
    assert _match(BASE.replace("c[i, j] = total", "c[i, j] = total\n        last = 1.0")) \
        is not None


def test_matcher_refuses_a_k_loop_with_else():
    source = BASE.replace("        c[i, j] = total",
                          "        else:\n            total = 1.0\n        c[i, j] = total")
    assert _match(source) is None


def reduction_nest(a, b, c):
    grand = 0.0
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            total = 0.0
            for k in range(a.shape[1]):
                total += a[i, k] * b[k, j]
            c[i, j] = total
            grand += total
    return grand


def test_nest_with_a_reduction_is_left_to_numba():
    a, b = RNG.random((3, 5)), RNG.random((5, 20))
    cpu = np.zeros((3, 20))
    kernel, text = compiled(reduction_nest, [a, b, cpu], collapse=2, reduction="+:grand")
    assert not interchanged(text)
    np.testing.assert_allclose(kernel(a, b, cpu), (a @ b).sum())


# ------------------------------------------------------- a scalar that is not a number


def row_sums(x, b, out):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            row = x[i, j]  # a 1-D view: an array, not a scalar
            for k in range(b.shape[0]):
                row = row + b[k, j]
            out[i, j] = row.sum()


def test_array_valued_scalar_builds_without_interchange_and_says_so():
    x, b = RNG.random((2, 20, 3)), RNG.random((4, 20))
    text, _ = run_both(row_sums, x, b, np.zeros((2, 20)), collapse=2)
    assert not interchanged(text)
    assert "loop interchange off: 'row' has type array(float64, 1d" in text.splitlines()[0]


def test_module_built_without_interchange_is_reused_with_its_own_line_map(monkeypatch):
    """A second build (another process, or after the memo is cleared) finds the file on
    disk and rebuilds its line map from the non-interchanged code."""
    x, b = RNG.random((2, 20, 3)), RNG.random((4, 20))
    args = [x, b, np.zeros((2, 20))]
    _, first = compiled(row_sums, args, collapse=2)
    probes = []
    monkeypatch.setattr(kernel_module, "_probe_types",
                        lambda *a, **k: probes.append(a) or {})
    # a fresh KernelInfo: nothing memoised in this process
    kernel = get_kernel(analyzed(row_sums, collapse=2), args, target="cpu")
    assert probes == []  # found on disk: no probe, no rewrite
    assert generated_text(kernel) == first
    kernel(*args)
    np.testing.assert_allclose(args[2], x.sum(axis=2) + 3 * b.sum(axis=0))


@pytest.mark.parametrize("call, callee, pure", [
    ("abs(x)", abs, True),
    ("max(x, y)", max, True),
    ("math.sqrt(x)", math.sqrt, True),
    ("np.float32(x)", np.float32, True),
    ("np.add(x, y)", np.add, True),
    ("np.add(x, y, out)", np.add, False),        # the third positional argument is `out`
    ("np.add(x, y, out=z)", np.add, False),      # keywords are never accepted
    ("print(x)", print, False),
    ("np.copyto(x, y)", np.copyto, False),
    ("scaled(x)", scaled, False),
])
def test_only_known_side_effect_free_calls_are_marked_pure(call, callee, pure):
    node = ast.parse(call).body[0].value
    mark_pure(node, callee)
    assert getattr(node, PURE_MARK, False) is pure
