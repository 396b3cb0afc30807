"""Compiled kernels (target "cpu") against plain Python (target "python")."""
from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from pyacc import compiler as acc  # the markers are reached the way users reach them: acc.loop
from pyacc.compiler import analyze, get_kernel, mark_routine, parse_clauses

SCALE = 2.5          # a global numeric constant used inside kernels
TARGETS = ["cpu", "python"]


def both(run, func, construct, *args, ignore=(), **clauses):
    """Run on cpu and python with fresh copies of array arguments; results must agree.

    ``ignore``: positions of arrays not compared (private arrays are discarded on cpu).
    """
    results = []
    for target in TARGETS:
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        value = run(func, construct, *copies, target=target, **clauses)
        results.append((value, copies))
    (value_cpu, arrays_cpu), (value_py, arrays_py) = results
    for position, (a, b) in enumerate(zip(arrays_cpu, arrays_py)):
        if isinstance(a, np.ndarray) and position not in ignore:
            np.testing.assert_allclose(a, b)
    return value_cpu, value_py, arrays_cpu


# ----------------------------------------------------------------------- reductions


def int_reductions(x, f, b):
    s = 5
    p = -2
    mx = -7
    mn = 1000
    band = -1
    bor = 64
    bxor = 3
    land = True
    lor = False
    for i in range(x.shape[0]):
        s += x[i]
        p *= f[i]
        mx = max(mx, x[i])
        mn = min(x[i], mn)
        band &= x[i] | 1024
        bor |= x[i]
        bxor ^= x[i]
        land = land and b[i]
        lor = lor or b[i]
    return s, p, mx, mn, band, bor, bxor, land, lor


def float_reductions(x):
    s = 1.5
    p = 0.5
    mx = -3.0
    mn = 100.0
    for i in range(x.shape[0]):
        s += x[i]
        p *= 1.0 + x[i] * 1e-4
        mx = max(mx, x[i])
        mn = min(mn, x[i])
    return s, p, mx, mn


INT_CLAUSES = ["+:s", "*:p", "max:mx", "min:mn", "&:band", "|:bor", "^:bxor", "and:land",
               "or:lor"]


def _int_inputs(n=3001):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 1000, n)
    f = np.ones(n, dtype=np.int64)
    f[rng.choice(n, 20, replace=False)] = -1
    f[rng.choice(n, 5, replace=False)] = 3
    return x, f


def test_every_operator_on_ints(run):
    x, f = _int_inputs()
    b = np.ones(x.shape[0], dtype=np.bool_)
    cpu, py, _ = both(run, int_reductions, "parallel_loop", x, f, b,
                      reduction=INT_CLAUSES)
    assert cpu == py
    assert cpu[0] == 5 + x.sum() and cpu[2] == max(-7, x.max())
    assert cpu[7] is True or cpu[7] == True  # noqa: E712
    b[17] = False
    cpu, py, _ = both(run, int_reductions, "parallel_loop", x, f, b,
                      reduction=INT_CLAUSES)
    assert cpu == py and not cpu[7] and cpu[8]


def test_initial_value_participates_once_with_empty_loop(run):
    x, f = np.zeros(0, dtype=np.int64), np.ones(0, dtype=np.int64)
    b = np.ones(0, dtype=np.bool_)
    cpu, py, _ = both(run, int_reductions, "parallel_loop", x, f, b,
                      reduction=INT_CLAUSES)
    assert cpu == py == (5, -2, -7, 1000, -1, 64, 3, True, False)


def test_every_operator_on_floats(run):
    x = np.random.default_rng(2).standard_normal(10_000)
    cpu, py, _ = both(run, float_reductions, "parallel_loop", x,
                      reduction="+:s *:p max:mx min:mn".split() and
                      ["+:s", "*:p", "max:mx", "min:mn"])
    np.testing.assert_allclose(cpu, py, rtol=1e-12)
    assert cpu[2] == max(-3.0, x.max()) and cpu[3] == min(100.0, x.min())


def test_implicit_reduction_and_int_to_float_promotion(run):
    x = np.full(1000, 0.5)
    # s starts as an int and becomes a float under Python semantics.
    assert run(promoting_sum, "parallel_loop", x) == 500.0


def promoting_sum(x):
    s = 0
    for i in range(x.shape[0]):
        s += x[i]
    return s


def test_float32_reduction_keeps_its_type(run):
    x = np.ones(100, dtype=np.float32)
    value = run(float32_sum, "parallel_loop", x, reduction="+:s")
    assert value == 100.0


def float32_sum(x):
    s = np.float32(0)
    for i in range(x.shape[0]):
        s += x[i]
    return s


def test_reduction_clause_string_form(run):
    x = np.arange(100.0)
    assert run(float32_sum, "parallel_loop", x, clause_string="reduction(+:s)") == 4950.0


# ------------------------------------------------------------------ collapse, ranges


def stencil(u, unew):
    n, m = u.shape
    err = 0.0
    for i in range(1, n - 1):
        for j in range(1, m - 1):
            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
            err = max(err, abs(unew[i, j] - u[i, j]))
    return err


def test_collapse_2_with_max_reduction(run):
    u = np.random.default_rng(3).random((37, 53))
    unew = np.zeros_like(u)
    cpu, py, arrays = both(run, stencil, "parallel_loop", u, unew, collapse=2,
                           reduction="max:err")
    assert cpu == py
    assert arrays[1][0].sum() == 0  # the boundary stays untouched


def strided3(a, lo):
    n0, n1, n2 = a.shape
    count = 0
    for i in range(n0 - 1, lo - 1, -2):
        for j in range(lo, n1, 3):
            for k in range(n2 - 1, -1, -1):
                a[i, j, k] += 100 * i + 10 * j + k
                count += 1
    return count


def test_collapse_3_negative_steps_and_nonzero_start(run):
    a = np.zeros((9, 10, 7), dtype=np.int64)
    cpu, py, arrays = both(run, strided3, "parallel_loop", a, 1, collapse=3)
    assert cpu == py == len(range(8, 0, -2)) * len(range(1, 10, 3)) * 7
    expected = np.zeros_like(a)
    for i in range(8, 0, -2):
        for j in range(1, 10, 3):
            for k in range(6, -1, -1):
                expected[i, j, k] = 100 * i + 10 * j + k
    np.testing.assert_array_equal(arrays[0], expected)


def backwards(x, y, start, step):
    for i in range(start, 0, step):
        y[i] = x[i] * SCALE + math.sqrt(4.0)


def test_single_loop_negative_runtime_step_and_global_constant(run):
    x = np.arange(20.0)
    _, _, arrays = both(run, backwards, "parallel_loop", x, np.zeros(20), 19, -3)
    expected = np.zeros(20)
    expected[19:0:-3] = x[19:0:-3] * 2.5 + 2.0
    np.testing.assert_array_equal(arrays[1], expected)


def test_zero_step_raises_like_python(run):
    with pytest.raises(ValueError):
        run(backwards, "parallel_loop", np.zeros(3), np.zeros(3), 2, 0)


# ------------------------------------------------------------ parallel and kernels


def two_loops(x, y):
    total = 0.0
    for i in acc.markers.loop(range(x.shape[0]), gang=True, vector=True):
        y[i] = 2.0 * x[i]
    for i in acc.markers.loop(range(x.shape[0]), reduction="+:total"):
        y[i] += 1.0
        total += y[i]
    for t in range(3):
        for i in acc.markers.loop(range(x.shape[0])):
            y[i] += 1.0
    for i in acc.markers.loop(range(1, x.shape[0]), seq=True):
        y[i] += y[i - 1]
    return total


def test_parallel_with_marked_loops(run):
    x = np.arange(50.0)
    cpu, py, arrays = both(run, two_loops, "parallel", x, np.zeros(50))
    assert cpu == py == (2 * x + 1).sum()
    np.testing.assert_allclose(arrays[1], np.cumsum(2 * x + 4))


def kernels_nests(a, b, c):
    n = a.shape[0]
    for i in range(n):           # independent: each iteration writes b[i]
        b[i] = 2 * a[i]
    for i in range(1, n):        # dependent: reads c[i - 1]
        c[i] = c[i - 1] + b[i]
    s = 0.0
    for i in range(n):           # independent with an implicit reduction
        s += c[i]
    return s


def test_kernels_several_nests(run, caplog):
    a = np.arange(40.0)
    with caplog.at_level(logging.DEBUG, logger="pyacc"):
        cpu, py, arrays = both(run, kernels_nests, "kernels", a, np.zeros(40),
                               np.zeros(40))
    assert cpu == py
    np.testing.assert_allclose(arrays[2], np.concatenate([[0], np.cumsum(2 * a[1:])]))
    assert any("runs sequentially" in r.getMessage() and "'c'" in r.getMessage()
               for r in caplog.records)


def test_kernels_plan_decisions():
    from pyacc.compiler.planner import Planner
    from pyacc.compiler.frontend import Scope, local_names
    info = analyze(kernels_nests, parse_clauses("kernels"))
    plan = Planner(info.source, info.clauses,
                   Scope(info.func, local_names(info.source.tree))).plan()
    lines = sorted(k[0] for k in plan.nests)
    assert len(lines) == 2  # first and third nests are parallel
    assert plan.reductions() == (("+", "s"),)


def shift(a):
    for i in range(a.shape[0] - 1):
        a[i] = a[i + 1]


def test_kernels_loop_independent_clause_forces_parallel():
    info = analyze(shift, parse_clauses("kernels_loop", independent=True))
    from pyacc.compiler.planner import Planner
    from pyacc.compiler.frontend import Scope, local_names
    scope = Scope(info.func, local_names(info.source.tree))
    assert Planner(info.source, info.clauses, scope).plan().nests
    info = analyze(shift, parse_clauses("kernels_loop"))
    assert not Planner(info.source, info.clauses, scope).plan().nests


def serial_scan(x):
    for i in range(1, x.shape[0]):
        x[i] += x[i - 1]


def test_serial_runs_in_order(run):
    _, _, arrays = both(run, serial_scan, "serial", np.ones(100))
    np.testing.assert_array_equal(arrays[0], np.arange(1, 101))


# --------------------------------------------------------------- private variables


def with_private(x, tmp, k):
    for i in range(x.shape[0]):
        for j in range(3):
            tmp[j] = x[i] + j + k
        x[i] = tmp[0] + tmp[1] + tmp[2]


def test_private_array_per_chunk(run):
    x = np.arange(1000.0)
    tmp = np.zeros(3)
    _, _, arrays = both(run, with_private, "parallel_loop", x, tmp, 1.0, ignore=(1,),
                        private="tmp", firstprivate="k")
    assert (arrays[1] == 0).all()  # private copies are not copied back
    np.testing.assert_allclose(arrays[0], 3 * np.arange(1000.0) + 6)


# ----------------------------------------------------------------------- routines


@mark_routine
def clamp(v, lo, hi):
    return lo if v < lo else (hi if v > hi else v)


def implicit_helper(v):
    return 2 * clamp(v, 0.0, 10.0)


def call_routines(x, y):
    for i in range(x.shape[0]):
        y[i] = implicit_helper(x[i]) + clamp(x[i], 1.0, 2.0)


def test_routines_called_from_kernels(run):
    x = np.linspace(-5, 15, 41)
    _, _, arrays = both(run, call_routines, "parallel_loop", x, np.zeros(41))
    np.testing.assert_allclose(arrays[1], 2 * np.clip(x, 0, 10) + np.clip(x, 1, 2))


def test_routine_construct_compiles_alone():
    info = analyze(clamp, parse_clauses("routine", seq=True))
    kernel = get_kernel(info, (3.0, 0.0, 1.0))
    assert kernel(3.0, 0.0, 1.0) == 1.0


# ------------------------------------------------------------ atomics and on_device


def histogram(x, h):
    for i in range(x.shape[0]):
        acc.markers.atomic.add(h, x[i] % h.shape[0], 1)


def test_atomic_histogram_is_exact_under_collisions(run):
    x = np.arange(2_000_003)
    h = np.zeros(3, dtype=np.int64)
    run(histogram, "parallel_loop", x, h)
    np.testing.assert_array_equal(h, np.bincount(x % 3))


def atomics_2d(x, h, bits):
    for i in range(x.shape[0]):
        acc.markers.atomic.add(h, (i % 2, 0), 0.5)
        acc.markers.atomic.sub(h, (i % 2, 1), 0.25)
        acc.markers.atomic.max(h, (2, 0), x[i])
        acc.markers.atomic.min(h, (2, 1), x[i])
        acc.markers.atomic.or_(bits, 0, 1 << (i % 16))
        acc.markers.atomic.xor(bits, 1, i)
        acc.markers.atomic.and_(bits, 2, ~(1 << (i % 16)))


def test_atomics_on_floats_ints_and_tuples(run):
    x = np.random.default_rng(4).standard_normal(100_001)
    h = np.zeros((3, 2))
    h[2] = [-np.inf, np.inf]
    bits = np.array([0, 0, 0xFFFFF], dtype=np.int64)
    cpu, py, arrays = both(run, atomics_2d, "parallel_loop", x, h, bits)
    h, bits = arrays[1], arrays[2]
    assert h[0, 0] == 50_001 * 0.5 and h[1, 1] == -50_000 * 0.25
    assert h[2, 0] == x.max() and h[2, 1] == x.min()
    assert bits[0] == 0xFFFF and bits[2] == 0xF0000
    assert bits[1] == np.bitwise_xor.reduce(np.arange(100_001))


def where_am_i(out):
    for i in range(out.shape[0]):
        if acc.markers.on_device("host"):
            out[i] = 1
        elif acc.markers.on_device("emulated"):
            out[i] = 2
        else:
            out[i] = 3


@pytest.mark.parametrize("device, expected", [("host", 1), ("emulated", 2),
                                              ("multicore", 1)])
@pytest.mark.parametrize("target", TARGETS)
def test_on_device_is_a_compile_time_constant(run, device, expected, target):
    out = np.zeros(4)
    run(where_am_i, "parallel_loop", out, target=target, device_type=device)
    assert (out == expected).all()


# -------------------------------------------------------------------------- misc


def test_kernel_is_the_numba_dispatcher_and_memoised():
    info = analyze(shift, parse_clauses("parallel_loop"))
    a = np.arange(5.0)
    first = get_kernel(info, (a,))
    assert get_kernel(info, (np.zeros(7),)) is first
    assert hasattr(first, "py_func")
    assert get_kernel(info, (np.zeros(7, dtype=np.int32),)) is not first


def test_written_and_read_sets():
    info = analyze(call_routines, parse_clauses("parallel_loop"))
    assert info.written == {"y"}  # routines that only read x[i] do not make x written
    info = analyze(stencil, parse_clauses("parallel_loop", collapse=2))
    assert info.written == {"unew"} and info.read == {"u", "unew"}
    info = analyze(histogram, parse_clauses("parallel_loop"))
    assert info.written == {"h"} and info.read == {"x", "h"}
    info = analyze(aliasing, parse_clauses("parallel_loop"))
    assert info.written == {"a"} and info.read == {"a", "b"}


def aliasing(a, b):
    row = a[0]
    for i in range(b.shape[0]):
        row[i] = b[i] + len(b)


def test_written_set_follows_what_routines_write():
    """An array passed to a routine that only reads it is not written; one the routine
    writes is (the routine's own analysis decides, OpenACC 3.3 §2.15.1)."""
    from pyacc import compiler

    def read_only(values, i):
        return values[i] * 2.0

    def writes_first(target, i, value):
        target[i] = value

    def kernel(x, y, z):
        for i in range(x.shape[0]):
            y[i] = read_only(x, i)
            writes_first(z, i, x[i])

    info = compiler.analyze(kernel, compiler.parse_clauses("parallel_loop"))
    assert info.written == {"y", "z"}


def reduction_written_backwards(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = x[i] + s
    return s


def reduction_updated_twice(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
        s += 1.0
    return s


def reduction_max_then_min(x):
    hi = -1.0
    lo = 2.0
    for i in range(x.shape[0]):
        hi = max(x[i], hi)
        lo = min(lo, x[i])
    return hi, lo


@pytest.mark.parametrize("function, reduction, expected", [
    (reduction_written_backwards, "+:s", 1000.0),
    (reduction_updated_twice, "+:s", 2000.0),
    (reduction_max_then_min, "max:hi min:lo", (1.0, 1.0)),
])
def test_reduction_updates_numba_would_not_reduce_use_the_chunked_form(function, reduction, expected):
    from pyacc import compiler

    x = np.ones(1000)
    info = compiler.analyze(function, compiler.parse_clauses("parallel_loop", f"reduction({reduction.split()[0]})"
                                                             + "".join(f" reduction({r})" for r in reduction.split()[1:])))
    assert compiler.get_kernel(info, (x,))(x) == expected
