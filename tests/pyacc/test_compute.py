"""End-to-end tests of the compute-region launcher (API.md §6; OpenACC 3.3 §2.5, §2.6.2).

What is checked, mostly on the ``emulated`` device (separate device memory, real copies):

* the implicit data rules of §2.6.2, observed through transfer counts (``acc.stats()``):
  read-only arrays are copied in only, written arrays in and out, present data moves
  nothing; explicit clauses, ``default("present")`` (on the decorator and on an enclosing
  ``acc.data``), ``default("none")``, scalars firstprivate, ``deviceptr``, strided views;
* the present table is back to its prior state after every call;
* a data region around 100 Jacobi steps moves exactly one copy-in per input and one
  copy-out of the result (issue 3, speed bullet 4);
* the conformance scenarios that need compute (openacc-semantics.md §4: S20–S23, S26);
* the same kernels give the same results on ``host``, ``emulated`` and under
  ``PYACC_DISABLE_JIT=1``;
* reductions (one value, a tuple for several, ``async_`` handles), ``if_=False``;
* errors: ``PYACC_BOUNDSCHECK=1`` index errors, global/closure arrays, malformed clause
  strings, wrong argument counts; clause strings equal to keyword forms.

Kernels are defined once at module level (each costs a Numba compile) and shared.
Device contents are observed through ``acc.deviceptr(a)`` (on ``emulated`` a numpy array
living in device memory).
"""

import inspect
import os

import numpy as np
import pytest

import pyacc as acc

HERE = os.path.basename(__file__)


# =========================================================================== kernels


@acc.parallel_loop
def saxpy(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


@acc.parallel_loop
def vadd(a, b, c):
    for i in range(c.shape[0]):
        c[i] = a[i] + b[i]


@acc.parallel_loop
def accumulate(a, b, c):
    for i in range(c.shape[0]):
        c[i] += a[i] + b[i]


@acc.parallel_loop
def add_one(v):
    for i in range(v.shape[0]):
        v[i] += 1.0


@acc.parallel_loop(copyin="x", copyout="y")
def double_copyout(x, y):
    for i in range(x.shape[0]):
        y[i] = 2.0 * x[i]


@acc.parallel_loop(copyin="x y")
def double_copyin_only(x, y):
    for i in range(x.shape[0]):
        y[i] = 2.0 * x[i]


@acc.parallel_loop(copyin=["x"], create=["tmp"], copyout=["y"])
def via_scratch(x, tmp, y):
    for i in range(x.shape[0]):
        tmp[i] = 3.0 * x[i]
        y[i] = tmp[i] + 1.0


@acc.parallel(copyin="x", create="tmp", copyout="y")
def via_scratch2(x, tmp, y):
    for i in acc.loop(range(x.shape[0])):
        tmp[i] = 3.0 * x[i]
    for i in acc.loop(range(x.shape[0])):
        y[i] = tmp[i] + 1.0


@acc.parallel_loop(present="x, y")
def double_present(x, y):
    for i in range(x.shape[0]):
        y[i] = 2.0 * x[i]


@acc.parallel_loop(no_create="x", copyout="y")
def double_no_create(x, y):
    for i in range(y.shape[0]):
        y[i] = 2.0 * x[i]


@acc.parallel_loop(default="present")
def double_default_present(x, y):
    for i in range(x.shape[0]):
        y[i] = 2.0 * x[i]


@acc.parallel_loop(default="none", copyin="x")
def double_default_none_missing(x, y):
    for i in range(x.shape[0]):
        y[i] = 2.0 * x[i]


@acc.parallel_loop(default="none", copyin="x", copyout="y")
def double_default_none_ok(x, y):
    for i in range(x.shape[0]):
        y[i] = 2.0 * x[i]


@acc.parallel_loop(deviceptr="d")
def triple_into_deviceptr(x, d):
    for i in range(x.shape[0]):
        d[i] = 3.0 * x[i]


@acc.parallel_loop(deviceptr="x y")
def saxpy_deviceptr(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


@acc.parallel_loop(collapse=2, reduction="max:err", present=["u", "unew"])
def jacobi_step(u, unew):
    n, m = u.shape
    err = 0.0
    for i in range(1, n - 1):
        for j in range(1, m - 1):
            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
            err = max(err, abs(unew[i, j] - u[i, j]))
    return err


@acc.parallel_loop("collapse(2) reduction(max:err) present(u, unew)")
def jacobi_step_str(u, unew):
    n, m = u.shape
    err = 0.0
    for i in range(1, n - 1):
        for j in range(1, m - 1):
            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
            err = max(err, abs(unew[i, j] - u[i, j]))
    return err


@acc.parallel_loop(collapse=2, present=["u", "unew"])
def jacobi_copy(u, unew):
    n, m = u.shape
    for i in range(1, n - 1):
        for j in range(1, m - 1):
            u[i, j] = unew[i, j]


@acc.parallel_loop(collapse=2, reduction="max:err")
def stencil_max(u, unew):
    n, m = u.shape
    err = 0.0
    for i in range(1, n - 1):
        for j in range(1, m - 1):
            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
            err = max(err, abs(unew[i, j] - u[i, j]))
    return err


@acc.parallel_loop(reduction="+:s")
def dot(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


@acc.parallel_loop(reduction=["+:s", "max:m"])
def sum_and_max(x):
    s = 10.0  # a non-identity initial value
    m = -1.0e300
    for i in range(x.shape[0]):
        s += x[i]
        m = max(m, x[i])
    return s, m


@acc.parallel_loop
def histogram(keys, counts):
    for i in range(keys.shape[0]):
        acc.atomic.add(counts, keys[i] % counts.shape[0], 1)


@acc.routine
def smooth_step(t):
    return t * t * (3.0 - 2.0 * t)


@acc.parallel_loop
def apply_routine(x, y):
    for i in range(x.shape[0]):
        y[i] = smooth_step(x[i])


@acc.parallel_loop(if_=False)
def double_if_false(x, y):
    for i in range(x.shape[0]):
        y[i] = 2.0 * x[i]


@acc.parallel_loop
def shift_read(x, y):
    for i in range(y.shape[0]):
        y[i] = x[i + 1]


@acc.parallel_loop
def wrap_read(x, y):
    for i in range(y.shape[0]):
        y[i] = x[i - 1]  # x[-1] at i == 0: plain Python semantics


@acc.routine
def put(v, i, value):
    v[i] = value


@acc.parallel_loop
def many_write_forms(x, a, b, c, d, u):
    for i in range(x.shape[0]):
        put(a, i, x[i])  # through a routine
        alias = b
        alias[i] = x[i] + 1.0  # through a local alias
        c[i], d[i] = x[i] + 2.0, x[i] + 3.0  # tuple assignment
        row = u[i]
        row[0] = x[i] + 4.0  # through a row view


@acc.kernels
def kernels_two_nests(x, y, z):
    for i in range(x.shape[0]):
        y[i] = x[i] + 1.0
    for i in range(x.shape[0]):
        z[i] = y[i] * 2.0


@acc.kernels_loop
def kernels_loop_scale(x, y):
    for i in range(x.shape[0]):
        y[i] = 4.0 * x[i]


@acc.serial
def serial_prefix_sum(x, y):
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i]
        y[i] = total


@acc.parallel_loop(reduction="+:s", async_=4)
def dot_async_clause(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


SCALE = 3.0


@acc.parallel_loop
def uses_global_scalar(x, y):
    for i in range(x.shape[0]):
        y[i] = SCALE * x[i]


# =========================================================================== helpers


def table():
    """The present table as comparable tuples (host range, counts)."""
    return [(r.host_begin, r.host_end, r.structured, r.dynamic) for r in acc.present_table()]


def stats():
    s = acc.stats()
    return {k: s[k] for k in ("h2d_count", "h2d_bytes", "d2h_count", "d2h_bytes",
                              "alloc_count", "free_count", "launch_count")}


def expect_stats(**expected):
    got = stats()
    for key, value in expected.items():
        assert got[key] == value, f"{key}: expected {value}, got {got[key]} (all: {got})"


def dev(a):
    d = acc.deviceptr(a)
    assert d is not None, "expected the array to be present"
    return np.array(d, copy=True)


def rc(a):
    return tuple(acc.refcounts(a))


def line_of(marker):
    """Line number in this file of the line holding ``marker`` (a unique comment)."""
    lines = inspect.getsource(inspect.getmodule(line_of)).splitlines()
    hits = [n for n, text in enumerate(lines, 1) if marker in text and "line_of(" not in text]
    assert len(hits) == 1, hits
    return hits[0]


def x_y(n=16):
    """Two float64 arrays with exactly representable values (results compare exactly)."""
    return 0.5 + 0.25 * (np.arange(n) % 7), np.arange(n, dtype=np.float64)


# =========================================================================== implicit data


def test_read_only_array_copied_in_not_out_written_array_in_and_out(emulated):
    x, y = x_y()
    expected = 2.0 * x + y
    assert saxpy(2.0, x, y) is None
    np.testing.assert_array_equal(y, expected)
    n = x.nbytes
    # x: copyin only; y: copy (in and out); the scalar a is firstprivate, never mapped
    expect_stats(h2d_count=2, h2d_bytes=2 * n, d2h_count=1, d2h_bytes=n,
                 alloc_count=2, free_count=2, launch_count=1)
    assert table() == []


def test_read_only_array_is_not_copied_back(emulated):
    """The device copy of a read-only array is never copied over the host array."""
    x, y = x_y()
    x0 = x.copy()
    saxpy(1.0, x, y)
    np.testing.assert_array_equal(x, x0)
    assert acc.stats()["d2h_bytes"] == y.nbytes


def test_present_data_moves_nothing_and_is_used_in_place(emulated):
    x, y = x_y()
    y0 = y.copy()
    with acc.data(copyin=[x], copy=[y]):
        before = table()
        acc.reset_stats()
        saxpy(2.0, x, y)
        saxpy(2.0, x, y)
        expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, free_count=0, launch_count=2)
        assert table() == before
        # the kernel wrote device memory; the host is unchanged until the copy-out
        np.testing.assert_array_equal(y, y0)
        np.testing.assert_array_equal(dev(y), y0 + 4.0 * x)
    np.testing.assert_array_equal(y, y0 + 4.0 * x)
    assert table() == []


def test_dynamic_data_is_used_in_place(emulated):
    x, y = x_y()
    y0 = y.copy()
    acc.copyin(x)
    acc.copyin(y)
    before = table()
    acc.reset_stats()
    saxpy(3.0, x, y)
    expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, free_count=0, launch_count=1)
    assert table() == before
    assert rc(x) == (0, 1) and rc(y) == (0, 1)
    np.testing.assert_array_equal(y, y0)
    acc.copyout(y)
    acc.delete(x)
    np.testing.assert_array_equal(y, y0 + 3.0 * x)
    assert table() == []


def test_contained_view_of_present_data_uses_enclosing_mapping(emulated):
    big = np.zeros(32)
    with acc.data(copy=[big]):
        acc.reset_stats()
        add_one(big[8:16])  # contiguous view inside the mapping
        expect_stats(h2d_count=0, d2h_count=0, alloc_count=0)
        assert big.sum() == 0.0
        d = dev(big)
        assert (d[8:16] == 1.0).all() and d[:8].sum() == 0.0 and d[16:].sum() == 0.0
    assert (big[8:16] == 1.0).all() and big.sum() == 8.0


def test_scalars_are_firstprivate_not_mapped(emulated):
    x, y = x_y()
    y0 = y.copy()
    a = np.float64(1.5)  # a numpy scalar is a scalar too
    saxpy(a, x, y)
    np.testing.assert_array_equal(y, 1.5 * x + y0)
    # only the two arrays moved
    assert acc.stats()["h2d_bytes"] == x.nbytes + y.nbytes
    assert acc.stats()["alloc_count"] == 2
    assert a == 1.5


def test_every_form_of_write_is_copied_back(emulated):
    x = np.arange(4, dtype=np.float64)
    a, b, c, d = (np.zeros(4) for _ in range(4))
    u = np.zeros((4, 2))
    many_write_forms(x, a, b, c, d, u)
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(b, x + 1.0)
    np.testing.assert_array_equal(c, x + 2.0)
    np.testing.assert_array_equal(d, x + 3.0)
    np.testing.assert_array_equal(u[:, 0], x + 4.0)
    np.testing.assert_array_equal(u[:, 1], 0.0)
    assert table() == []


def test_kernel_reading_only_is_not_copied_back_kernels_constructs(emulated):
    x = np.arange(8, dtype=np.float64)
    y, z = np.zeros(8), np.zeros(8)
    kernels_two_nests(x, y, z)
    # x read only: in; y, z written: in and out
    expect_stats(h2d_count=3, d2h_count=2, d2h_bytes=y.nbytes + z.nbytes)
    acc.reset_stats()
    serial_prefix_sum(x, y)
    expect_stats(h2d_count=2, d2h_count=1, d2h_bytes=y.nbytes)


def test_array_element_passed_to_routine_is_not_copied_back(emulated):
    x = np.arange(8) * 0.125
    y = np.zeros(8)
    apply_routine(x, y)
    np.testing.assert_array_equal(y, x * x * (3.0 - 2.0 * x))
    expect_stats(h2d_count=2, d2h_count=1, d2h_bytes=y.nbytes)


# =========================================================================== explicit clauses


def test_explicit_copyout_copies_out_only(emulated):
    x = np.arange(16) * 0.125
    y = np.full(16, -7.0)
    double_copyout(x, y)
    np.testing.assert_array_equal(y, 2.0 * x)
    expect_stats(h2d_count=1, h2d_bytes=x.nbytes, d2h_count=1, d2h_bytes=y.nbytes,
                 alloc_count=2, free_count=2, launch_count=1)
    assert table() == []


def test_explicit_copyin_on_written_array_is_not_copied_back(emulated):
    x, y = x_y()
    y0 = y.copy()
    double_copyin_only(x, y)
    np.testing.assert_array_equal(y, y0)
    expect_stats(h2d_count=2, d2h_count=0, alloc_count=2, free_count=2, launch_count=1)
    assert table() == []


def test_explicit_create_moves_nothing(emulated):
    x = np.arange(16) * 0.125
    tmp = np.full(16, -1.0)
    y = np.zeros(16)
    via_scratch2(x, tmp, y)
    np.testing.assert_array_equal(y, 3.0 * x + 1.0)
    np.testing.assert_array_equal(tmp, -1.0)  # create: never copied in or out
    expect_stats(h2d_count=1, h2d_bytes=x.nbytes, d2h_count=1, d2h_bytes=y.nbytes,
                 alloc_count=3, free_count=3, launch_count=1)
    assert table() == []


def test_explicit_create_in_loop_region(emulated):
    x = np.arange(16) * 0.125
    tmp = np.full(16, -1.0)
    y = np.full(16, 5.0)
    via_scratch(x, tmp, y)
    np.testing.assert_array_equal(y, 3.0 * x + 1.0)
    np.testing.assert_array_equal(tmp, -1.0)
    expect_stats(h2d_count=1, h2d_bytes=x.nbytes, d2h_count=1, alloc_count=3, free_count=3)
    assert table() == []


def test_explicit_present_requires_presence(emulated):
    x, y = x_y()
    y0 = y.copy()
    with pytest.raises(acc.NotPresentError):
        double_present(x, y)
    assert table() == []
    expect_stats(h2d_count=0, d2h_count=0, launch_count=0)
    np.testing.assert_array_equal(y, y0)
    # only one of the two present: still an error, and x's counts are untouched
    with acc.data(copyin=[x]):
        before = table()
        with pytest.raises(acc.NotPresentError):
            double_present(x, y)
        assert table() == before
        assert rc(x) == (1, 0)
    with acc.data(copyin=[x], create=[y]):
        acc.reset_stats()
        double_present(x, y)
        expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, launch_count=1)
        np.testing.assert_array_equal(dev(y), 2.0 * x)
        np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(y, y0)  # create: no copy-out


def test_explicit_no_create_uses_present_data(emulated):
    x, y = x_y()
    with acc.data(copyin=[x]):
        acc.reset_stats()
        double_no_create(x, y)
        # x present: used in place; y copyout
        expect_stats(h2d_count=0, d2h_count=1, d2h_bytes=y.nbytes, alloc_count=1)
        assert rc(x) == (1, 0)
    np.testing.assert_array_equal(y, 2.0 * x)


def test_explicit_no_create_absent_data_is_not_mapped(emulated):
    x, y = x_y()
    double_no_create(x, y)
    # x is absent: no_create maps nothing for it (only y is allocated and copied out)
    expect_stats(h2d_count=0, alloc_count=1, free_count=1, d2h_count=1)
    assert table() == []


def test_default_present_on_decorator(emulated):
    x, y = x_y()
    with pytest.raises(acc.NotPresentError):
        double_default_present(x, y)
    expect_stats(h2d_count=0, alloc_count=0, launch_count=0)
    assert table() == []
    with acc.data(copyin=[x]):
        with pytest.raises(acc.NotPresentError):
            double_default_present(x, y)
        assert rc(x) == (1, 0) and rc(y) == (0, 0)
    with acc.data(copyin=[x], copyout=[y]):
        acc.reset_stats()
        double_default_present(x, y)
        expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, launch_count=1)
    np.testing.assert_array_equal(y, 2.0 * x)


def test_default_present_of_enclosing_data_region(emulated):
    x, y = x_y()
    with acc.data(copyin=[x], default="present"):
        before = table()
        with pytest.raises(acc.NotPresentError):
            saxpy(2.0, x, y)  # y is not present: the region's default(present) applies
        assert table() == before
        assert rc(x) == (1, 0)
    # outside the region the implicit rule is back
    acc.reset_stats()
    y0 = y.copy()
    saxpy(2.0, x, y)
    np.testing.assert_array_equal(y, 2.0 * x + y0)
    expect_stats(h2d_count=2, d2h_count=1)
    # both present: fine, nothing moves during the call
    y1 = y.copy()
    with acc.data(copyin=[x], copy=[y], default="present"):
        acc.reset_stats()
        saxpy(1.0, x, y)
        expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, launch_count=1)
    np.testing.assert_array_equal(y, x + y1)


def test_explicit_clause_wins_over_enclosing_default_present(emulated):
    x = np.arange(4, dtype=np.float64)
    y = np.zeros(4)
    with acc.data(create=[np.zeros(2)], default="present"):
        double_copyout(x, y)  # copyin(x) copyout(y): default(present) is for implicit ones
    np.testing.assert_array_equal(y, 2.0 * x)
    assert table() == []


def test_default_present_of_enclosing_region_nested(emulated):
    """An inner data region without ``default`` keeps the outer ``default(present)``."""
    x, y = x_y()
    with acc.data(copyin=[x], default="present"):
        with acc.data(create=[np.zeros(3)]):
            with pytest.raises(acc.NotPresentError):
                saxpy(2.0, x, y)
    assert table() == []


def test_default_none_requires_a_clause(emulated):
    x, y = x_y()
    with pytest.raises(acc.ClauseError) as info:
        double_default_none_missing(x, y)
    assert "y" in str(info.value)
    assert table() == []
    expect_stats(h2d_count=0, alloc_count=0, launch_count=0)
    y = np.zeros_like(x)
    double_default_none_ok(x, y)
    np.testing.assert_array_equal(y, 2.0 * x)
    expect_stats(h2d_count=1, d2h_count=1, alloc_count=2, free_count=2)


def test_deviceptr_of_malloc_is_used_as_is(emulated):
    x = np.arange(16) * 0.125
    d = acc.malloc(16, dtype=np.float64)
    try:
        acc.reset_stats()
        triple_into_deviceptr(x, d)
        # only x is mapped: d is device memory already
        expect_stats(h2d_count=1, h2d_bytes=x.nbytes, d2h_count=0, alloc_count=1,
                     free_count=1, launch_count=1)
        assert table() == []
        out = np.empty(16)
        acc.memcpy_from_device(out, d)
        np.testing.assert_array_equal(out, 3.0 * x)
    finally:
        acc.free(d)


def test_deviceptr_of_present_data_writes_device_copy(emulated):
    x, y = x_y()
    y0 = y.copy()
    with acc.data(copyin=[x, y]):
        dy = acc.deviceptr(y)
        before = table()
        acc.reset_stats()
        triple_into_deviceptr(x, dy)
        expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, launch_count=1)
        assert table() == before
        np.testing.assert_array_equal(y, y0)  # the host is not touched
        np.testing.assert_array_equal(dev(y), 3.0 * x)
        acc.update_self(y)
        np.testing.assert_array_equal(y, 3.0 * x)


def test_deviceptr_given_host_memory_raises(emulated):
    x = np.arange(4, dtype=np.float64)
    with pytest.raises(acc.AccError):
        triple_into_deviceptr(x, np.zeros(4))
    assert table() == []
    expect_stats(h2d_count=0, alloc_count=0, launch_count=0)


# =========================================================================== strided views


def test_strided_column_of_present_data_is_a_device_view(emulated):
    u = np.zeros((6, 5))
    with acc.data(copy=[u]):
        before = table()
        acc.reset_stats()
        add_one(u[:, 3])
        add_one(u[:, 3])
        expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, launch_count=2)
        assert table() == before
        assert u.sum() == 0.0  # host unchanged until the copy-out
        d = dev(u)
        np.testing.assert_array_equal(d[:, 3], 2.0)
        assert d.sum() == 2.0 * 6
    expected = np.zeros((6, 5))
    expected[:, 3] = 2.0
    np.testing.assert_array_equal(u, expected)


def test_strided_view_with_explicit_clause_uses_present_data(emulated):
    x = np.arange(6, dtype=np.float64)
    u = np.zeros((6, 5))
    with acc.data(copyin=[x], copy=[u]):
        acc.reset_stats()
        double_copyout(x, u[:, 1])  # copyout(y) on a strided view of present data
        expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, launch_count=1)
        assert u.sum() == 0.0
    np.testing.assert_array_equal(u[:, 1], 2.0 * x)
    assert u.sum() == (2.0 * x).sum()


def test_strided_step_view_of_present_data_is_a_device_view(emulated):
    u = np.arange(10, dtype=np.float64)
    u0 = u.copy()
    acc.copyin(u)
    add_one(u[::2])
    np.testing.assert_array_equal(u, u0)
    d = dev(u)
    np.testing.assert_array_equal(d[::2], u0[::2] + 1.0)
    np.testing.assert_array_equal(d[1::2], u0[1::2])
    acc.update_self(u[::2])
    expected = u0.copy()
    expected[::2] += 1.0
    np.testing.assert_array_equal(u, expected)
    acc.delete(u)
    assert table() == []


def test_strided_view_of_absent_data_is_copied_through_a_contiguous_copy(emulated):
    """OpenACC 3.3 §2.6.2 implicit copy of a non-contiguous view of absent data (no
    clause names it): a contiguous copy is mapped and written back into the view, as on
    host (issue 29 item 8); nothing stays mapped."""
    u = np.zeros((6, 5))
    add_one(u[:, 3])
    add_one(u.ravel()[::-2])
    expected = np.zeros((6, 5))
    expected[:, 3] += 1
    expected.ravel()[::-2] += 1
    np.testing.assert_array_equal(u, expected)
    assert table() == []
    expect_stats(h2d_count=2, d2h_count=2, launch_count=2)


def test_strided_view_of_device_memory_is_passed_as_it_is(emulated):
    """A strided view of acc.malloc memory is device memory (API.md §6.2): passed to the
    kernel as it is, never staged through a host copy."""
    d = acc.malloc((8,), np.float64)
    acc.memcpy_to_device(d, np.zeros(8))
    acc.reset_stats()
    add_one(d[::2])
    expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, launch_count=1)
    h = np.empty(8)
    acc.memcpy_from_device(h, d)
    np.testing.assert_array_equal(h, [1, 0] * 4)
    acc.free(d)


def test_strided_view_of_absent_data_in_a_data_clause_raises(emulated):
    """API.md §2: data clauses take contiguous arrays; a strided view named in one is
    InvalidDataSectionError, before any data action."""
    u = np.zeros((6, 5))
    with pytest.raises(acc.InvalidDataSectionError):
        double_copyout(np.ones(6), u[:, 3])
    assert table() == []
    expect_stats(h2d_count=0, alloc_count=0, launch_count=0)
    assert u.sum() == 0.0


def test_strided_view_of_absent_data_on_an_async_queue_is_written_back_in_order(emulated):
    """Two calls on one queue over the same view: the second copies the view only once
    the first's write-back is done (as on host)."""
    u = np.zeros((6, 5))
    add_one(u[:, 3], async_=2)
    add_one(u[:, 3], async_=2)
    acc.wait(2)
    np.testing.assert_array_equal(u[:, 3], 2.0)
    assert table() == []


@acc.serial
def add_one_to_both(x, y):
    for i in range(x.shape[0]):
        x[i] += 1.0
        y[i] += 1.0


@pytest.mark.parametrize("views", [lambda u: (u[:, 1], u[:, 1]), lambda u: (u[:, 1], u[:, 1:3])],
                         ids=["the same view twice", "overlapping arguments"])
def test_strided_view_of_absent_data_sharing_memory_with_another_argument_raises(emulated, views):
    """Separate copies of views that share memory would not see each other's writes:
    refused by name with the fix, before any data action."""
    u = np.zeros((6, 5))
    with pytest.raises(acc.InvalidDataSectionError, match="shares memory with argument"):
        add_one_to_both(*views(u))
    assert table() == [] and u.sum() == 0.0
    with acc.data(copy=[u]):  # the fix: map the whole array, then pass the views
        add_one_to_both(u[:, 1], u[:, 2])
    assert u[:, 1].sum() == 6.0 and u[:, 2].sum() == 6.0


# =========================================================================== Jacobi


def _jacobi_reference(u, steps):
    u = u.copy()
    for _ in range(steps):
        unew = u.copy()
        unew[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        err = np.abs(unew[1:-1, 1:-1] - u[1:-1, 1:-1]).max()
        u = unew
    return u, err


def _jacobi_start(n=12, m=10):
    u = np.zeros((n, m))
    u[0, :] = 1.0
    u[:, 0] = 0.5
    return u


def test_jacobi_100_steps_in_a_data_region_moves_each_array_once(emulated):
    u = _jacobi_start()
    unew = u.copy()
    expected, expected_err = _jacobi_reference(u, 100)
    acc.reset_stats()
    with acc.data(copy=[u], copyin=[unew]):
        for _ in range(100):
            err = jacobi_step(u, unew)
            jacobi_copy(u, unew)
    # one copy-in of each input, one copy-out of the result, nothing else
    assert stats() == dict(h2d_count=2, h2d_bytes=2 * u.nbytes, d2h_count=1,
                           d2h_bytes=u.nbytes, alloc_count=2, free_count=2,
                           launch_count=200)
    np.testing.assert_allclose(u, expected, rtol=1e-12, atol=1e-14)
    assert err == pytest.approx(expected_err, rel=1e-12, abs=1e-15)
    assert table() == []


def test_jacobi_present_clause_without_data_raises(emulated):
    u = _jacobi_start()
    with pytest.raises(acc.NotPresentError):
        jacobi_step(u, u.copy())
    with pytest.raises(acc.NotPresentError):
        jacobi_step_str(u, u.copy())
    assert table() == []


# =========================================================================== clause strings


def test_clause_string_equals_keyword_form():
    assert jacobi_step_str.info.clauses == jacobi_step.info.clauses
    for kw, text in [
        (dict(copyin="x", copyout="y"), "copyin(x) copyout(y)"),
        (dict(present=["u", "unew"], collapse=2), "present(u, unew) collapse(2)"),
        (dict(reduction=["+:s", "max:m"]), "reduction(+:s) reduction(max:m)"),
        (dict(default="present"), "default(present)"),
        (dict(default="none", copyin="x"), "default(none) copyin(x)"),
        (dict(deviceptr="x y"), "deviceptr(x, y)"),
        (dict(async_=1), "async(1)"),
        (dict(if_=False), "if(False)"),
    ]:
        def body(u, unew, x, y):
            s = 0.0
            m = 0.0
            for i in range(u.shape[0]):
                for j in range(u.shape[1]):
                    s += u[i, j]
                    m = max(m, u[i, j])
            return s, m
        a = acc.parallel_loop(**kw)(body)
        b = acc.parallel_loop(text)(body)
        assert a.info.clauses == b.info.clauses, (kw, text)


def test_clause_string_behaves_as_keyword_version(emulated):
    u = _jacobi_start()
    unew = u.copy()
    u2 = u.copy()
    unew2 = u.copy()
    with acc.data(copy=[u, unew, u2, unew2]):
        acc.reset_stats()
        e1 = jacobi_step(u, unew)
        e2 = jacobi_step_str(u2, unew2)
        expect_stats(h2d_count=0, d2h_count=0, launch_count=2)
    assert e1 == e2
    np.testing.assert_array_equal(unew, unew2)


# =========================================================================== scenarios


def test_s20_finalize_copies_back_regardless_of_dynamic_count(emulated):
    n = 16
    a = np.arange(n, dtype=np.float64)
    b = np.full(n, 10.0)
    c = np.zeros(n)
    acc.enter_data(create=[c])
    acc.enter_data(create=[c])
    assert rc(c) == (0, 2)
    with acc.data(copyin=[a, b], present=[c]):
        vadd(a, b, c)
        assert rc(c) == (1, 2)
    assert rc(c) == (0, 2)
    np.testing.assert_array_equal(c, 0.0)
    acc.copyout(c, finalize=True)
    assert rc(c) == (0, 0)
    assert not acc.is_present(c)
    np.testing.assert_array_equal(c, a + b)
    # acc_delete_finalize.c T1: copyin twice, a finalize delete ends it in one call
    acc.copyin(a)
    acc.copyin(a)
    assert rc(a) == (0, 2)
    acc.delete(a, finalize=True)
    assert rc(a) == (0, 0) and not acc.is_present(a)
    assert table() == []


def test_s21_inner_copyout_does_not_copy_while_outer_holds(emulated):
    n = 16
    a = np.arange(n, dtype=np.float64)
    b = np.full(n, 2.0)
    c = np.zeros(n)
    with acc.data(copyin=[c]):
        with acc.data(copyin=[a, b], copyout=[c]):
            assert rc(c) == (2, 0)
            accumulate(a, b, c)
        assert rc(c) == (1, 0)
        np.testing.assert_array_equal(c, 0.0)  # inner exit: only a decrement
        np.testing.assert_array_equal(dev(c), a + b)
    np.testing.assert_array_equal(c, 0.0)  # outer copyin exit: a delete, no copy
    assert table() == []


def test_s22_exit_data_inside_region_region_exit_wins(emulated):
    n = 16
    a = np.arange(n, dtype=np.float64)
    b = np.full(n, 2.0)
    c = np.zeros(n)
    for arr in (a, b, c):
        acc.copyin(arr)
        assert rc(arr) == (0, 1)
    with acc.data(copyin=[c]):
        assert rc(c) == (1, 1)
        accumulate(a, b, c)
        acc.exit_data(copyout=[c], delete=[a, b])
        assert rc(c) == (1, 0)
        assert not acc.is_present(a) and not acc.is_present(b)
        np.testing.assert_array_equal(c, 0.0)  # no copy: the structured count holds it
    assert rc(c) == (0, 0)
    np.testing.assert_array_equal(c, 0.0)  # the copyin exit is a delete with no copy
    assert table() == []


def test_s23_subarray_bounds_captured_at_entry(emulated):
    n = 16
    a = np.arange(n, dtype=np.float64)
    b = np.full(n, 3.0)
    c = np.zeros(n)
    length = n
    region = acc.data(copyin=[a[0:length], b[0:length]], copyout=[c[0:length]])
    length = 1  # changing the bound after the directive is created changes nothing
    with region:
        vadd(a, b, c)
        length = 1
        assert rc(c) == (1, 0)
    assert length == 1
    np.testing.assert_array_equal(c, a + b)  # all n elements copied back
    assert table() == []


def test_s26_host_data_use_device_numpy_library(emulated):
    n = 16
    x = np.arange(n) * 0.125
    y = np.arange(n, dtype=np.float64)
    y0 = y.copy()
    alpha = 2.5
    with acc.data(copyin=[x], copy=[y]):
        with acc.host_data(use_device=[x, y]) as (dx, dy):
            assert dx is not x and dy is not y
            acc.reset_stats()
            dy += alpha * dx  # an "external library" working on device arrays
            expect_stats(h2d_count=0, d2h_count=0)
        np.testing.assert_array_equal(y, y0)  # host untouched inside the region
    np.testing.assert_array_equal(y, y0 + alpha * x)
    assert table() == []


def test_s26_host_data_use_device_pyacc_deviceptr_kernel(emulated):
    n = 16
    x = np.arange(n) * 0.125
    y = np.arange(n, dtype=np.float64)
    y0 = y.copy()
    with acc.data(copyin=[x], copy=[y]):
        before = table()
        with acc.host_data(use_device=[x, y]) as (dx, dy):
            acc.reset_stats()
            saxpy_deviceptr(2.0, dx, dy)
            expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, launch_count=1)
        assert table() == before
        np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(y, y0 + 2.0 * x)


def test_s26_host_data_absent_raises_unless_if_present(emulated):
    x = np.ones(4)
    with pytest.raises(acc.NotPresentError):
        with acc.host_data(use_device=[x]):
            pass
    with acc.host_data(use_device=[x], if_present=True) as (dx,):
        assert dx is x


# =========================================================================== same results everywhere


SETUPS = [("host", False), ("emulated", False), ("emulated", True), ("host", True)]


@pytest.fixture(params=SETUPS, ids=lambda p: f"{p[0]}{'-nojit' if p[1] else ''}")
def setup(request, monkeypatch):
    device_type, nojit = request.param
    request.getfixturevalue("host_device" if device_type == "host" else "emulated")
    if nojit:
        monkeypatch.setenv("PYACC_DISABLE_JIT", "1")
    else:
        monkeypatch.delenv("PYACC_DISABLE_JIT", raising=False)
    return request.param


def test_same_saxpy(setup):
    x, y = x_y(64)
    expected = 1.5 * x + y
    saxpy(1.5, x, y)
    np.testing.assert_array_equal(y, expected)
    assert table() == []


def test_same_stencil_max(setup):
    u = _jacobi_start(9, 7)
    u[4, 3] = 5.0
    unew = u.copy()
    err = stencil_max(u, unew)
    ref = u.copy()
    ref[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    np.testing.assert_array_equal(unew, ref)
    assert err == np.abs(ref - u).max()
    assert table() == []


def test_same_dot(setup):
    x = np.arange(100, dtype=np.float64)
    y = np.full(100, 0.5)
    assert dot(x, y) == pytest.approx(float(x @ y), rel=1e-12)
    ix = np.arange(100, dtype=np.float64) * 0 + 2.0
    assert dot(ix, ix) == 400.0


def test_same_histogram(setup):
    # heavy collisions: 20000 increments into 5 bins
    keys = (np.arange(20000, dtype=np.int64) * 7) % 13
    counts = np.zeros(5, dtype=np.int64)
    histogram(keys, counts)
    np.testing.assert_array_equal(counts, np.bincount(keys % 5, minlength=5))
    assert counts.sum() == 20000
    assert table() == []


def test_same_routine(setup):
    x = np.linspace(0.0, 1.0, 33)
    y = np.zeros_like(x)
    apply_routine(x, y)
    np.testing.assert_allclose(y, x * x * (3.0 - 2.0 * x), rtol=1e-15, atol=0)
    assert smooth_step(0.5) == 0.5  # still callable from Python


def test_same_negative_index_wraps_like_python(setup, monkeypatch):
    x = np.arange(6, dtype=np.float64)
    y = np.zeros(6)
    wrap_read(x, y)
    np.testing.assert_array_equal(y, np.roll(x, 1))
    # a negative index is valid Python: not an error under bounds checking either
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    y[:] = 0.0
    wrap_read(x, y)
    np.testing.assert_array_equal(y, np.roll(x, 1))


def test_same_kernels_serial_constructs(setup):
    x = np.arange(8, dtype=np.float64)
    y = np.zeros(8)
    z = np.zeros(8)
    kernels_two_nests(x, y, z)
    np.testing.assert_array_equal(y, x + 1.0)
    np.testing.assert_array_equal(z, 2.0 * (x + 1.0))
    kernels_loop_scale(x, y)
    np.testing.assert_array_equal(y, 4.0 * x)
    serial_prefix_sum(x, y)
    np.testing.assert_array_equal(y, np.cumsum(x))
    uses_global_scalar(x, z)
    np.testing.assert_array_equal(z, 3.0 * x)
    assert table() == []


def test_same_two_reductions(setup):
    x = np.array([3.0, -1.0, 7.5, 2.0])
    result = sum_and_max(x)
    assert isinstance(result, tuple) and len(result) == 2
    assert result[0] == pytest.approx(10.0 + x.sum())
    assert result[1] == 7.5


def test_disable_jit_read_per_call(emulated, monkeypatch):
    x, y = x_y()
    y0 = y.copy()
    monkeypatch.setenv("PYACC_DISABLE_JIT", "1")
    saxpy(1.0, x, y)
    monkeypatch.setenv("PYACC_DISABLE_JIT", "0")
    saxpy(1.0, x, y)
    np.testing.assert_array_equal(y, y0 + 2.0 * x)
    # the same data semantics without JIT
    expect_stats(h2d_count=4, d2h_count=2, alloc_count=4, free_count=4, launch_count=2)


def test_disable_jit_same_data_semantics(emulated, monkeypatch):
    monkeypatch.setenv("PYACC_DISABLE_JIT", "1")
    x, y = x_y()
    y0 = y.copy()
    with acc.data(copyin=[x], copy=[y]):
        acc.reset_stats()
        saxpy(2.0, x, y)
        expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, launch_count=1)
        np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(y, y0 + 2.0 * x)
    u = np.zeros((4, 4))
    add_one(u[:, 1])  # a strided view of absent data: through a contiguous copy
    np.testing.assert_array_equal(u[:, 1], 1.0)
    with pytest.raises(acc.InvalidDataSectionError):  # named in a data clause
        double_copyout(np.ones(4), u[:, 1])


# =========================================================================== reductions, async, if


def test_reduction_returns_value(emulated):
    x = np.arange(10, dtype=np.float64)
    y = x + 1.0
    assert dot(x, y) == float(x @ y)
    # reduction inputs are read-only: nothing copied back
    expect_stats(h2d_count=2, d2h_count=0, alloc_count=2, free_count=2)
    # the same array passed twice is mapped once (the second argument finds it present)
    acc.reset_stats()
    assert dot(x, x) == float(x @ x)
    expect_stats(h2d_count=1, d2h_count=0, alloc_count=1, free_count=1)
    assert table() == []


def test_async_returns_handle_with_result(emulated):
    x = np.arange(10, dtype=np.float64)
    handle = dot(x, x, async_=1)
    assert not isinstance(handle, float)
    assert handle.result() == float(x @ x)
    acc.wait(1)
    assert table() == []


def test_async_copy_back_after_wait(emulated):
    x, y = x_y()
    y0 = y.copy()
    handle = saxpy(2.0, x, y, async_=2)
    # counts change at once; the data is on the host after the wait
    assert table() == []
    assert handle.result() is None
    acc.wait(2)
    np.testing.assert_array_equal(y, y0 + 2.0 * x)


def test_async_clause_on_decorator(emulated):
    x = np.arange(10, dtype=np.float64)
    handle = dot_async_clause(x, x + 1.0)
    assert handle.result() == float(x @ (x + 1.0))
    handle = dot_async_clause(x, x, async_=5)  # the call's async_ overrides the clause
    assert handle.result() == float(x @ x)
    acc.wait_all()
    assert table() == []


def test_async_result_after_earlier_work_on_the_same_queue(emulated):
    """The handle's value is the kernel's, even when the kernel ran after the call
    returned (the queue was busy with an earlier transfer)."""
    big = np.ones(1 << 20)
    x = np.arange(10, dtype=np.float64)
    acc.enter_data(copyin=[big], async_=1)
    handle = dot(x, x, async_=1)
    assert handle.result() == float(x @ x)
    acc.exit_data(delete=[big], async_=1)
    acc.wait(1)
    assert table() == []


def test_async_two_reductions(emulated):
    x = np.array([1.0, 4.0, 2.0])
    handle = sum_and_max(x, async_=3)
    assert handle.result() == (pytest.approx(17.0), 4.0)


def test_if_false_runs_on_host_with_host_data(emulated):
    x, y = x_y()
    double_if_false(x, y)
    np.testing.assert_array_equal(y, 2.0 * x)
    expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, free_count=0, launch_count=0)
    assert table() == []


def test_if_false_with_present_data_uses_host_copy(emulated):
    """``if(false)`` runs with the local (host) data even when a device copy exists."""
    x, y = x_y()
    with acc.data(copyin=[x], create=[y]):
        double_if_false(x, y)
        np.testing.assert_array_equal(y, 2.0 * x)  # the host copy was written
        assert rc(y) == (1, 0)
        assert stats()["launch_count"] == 0


# =========================================================================== errors


def test_boundscheck_out_of_bounds_raises_execution_error(emulated, monkeypatch):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x = np.arange(8, dtype=np.float64)
    y = np.full(8, -1.0)
    with pytest.raises(acc.ExecutionError) as info:
        shift_read(x, y)
    message = str(info.value)
    assert "shift_read" in message
    assert "'x'" in message
    assert info.value.code == "execution"
    # counts released, nothing copied back (y is copy: its device data is not trusted)
    assert table() == []
    np.testing.assert_array_equal(y, -1.0)
    s = stats()
    assert s["d2h_count"] == 0
    assert s["alloc_count"] == s["free_count"] == 2


def test_boundscheck_error_inside_data_region_releases_only_the_call(emulated, monkeypatch):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x = np.arange(8, dtype=np.float64)
    y = np.full(8, -1.0)
    with acc.data(copyin=[x]):
        before = table()
        with pytest.raises(acc.ExecutionError):
            shift_read(x, y)
        assert table() == before
        assert rc(x) == (1, 0) and rc(y) == (0, 0)
    np.testing.assert_array_equal(y, -1.0)
    assert table() == []


def test_execution_error_leaving_a_data_region_skips_its_copy_back(emulated, monkeypatch):
    """API.md §4: leaving ``acc.data`` by a device error runs the exit actions without
    copying back."""
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x = np.arange(8, dtype=np.float64)
    y = np.full(8, -1.0)
    with pytest.raises(acc.ExecutionError):
        with acc.data(copy=[y]):
            acc.deviceptr(y)[:] = 5.0
            shift_read(x, y)
    np.testing.assert_array_equal(y, -1.0)
    assert table() == []


def test_boundscheck_in_bounds_kernel_still_runs(emulated, monkeypatch):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x, y = x_y()
    y0 = y.copy()
    saxpy(1.0, x, y)
    np.testing.assert_array_equal(y, y0 + x)


def test_kernel_exception_without_jit_is_execution_error(emulated, monkeypatch):
    monkeypatch.setenv("PYACC_DISABLE_JIT", "1")
    x = np.arange(8, dtype=np.float64)
    y = np.full(8, -1.0)
    with pytest.raises(acc.ExecutionError) as info:
        shift_read(x, y)
    assert "shift_read" in str(info.value)
    assert table() == []
    np.testing.assert_array_equal(y, -1.0)


GLOBAL_ARRAY = np.ones(4)


def _routine_reading_global(i):
    return GLOBAL_ARRAY[i]


def test_routine_reading_a_global_array_needs_it_on_the_device(separate_memory):
    """OpenACC 3.3 §2.15.1: a routine's global array is declared, so on the device: a
    kernel reaching the routine needs it present (NotPresentError naming it), and then
    the routine reads the device copy."""
    @acc.parallel_loop
    def uses_global(y):
        for i in range(y.shape[0]):
            y[i] = _routine_reading_global(i)

    y = np.zeros(4)
    with pytest.raises(acc.NotPresentError, match="GLOBAL_ARRAY"):
        uses_global(y)
    assert table() == []
    with acc.data(copyin=[GLOBAL_ARRAY]):
        uses_global(y)
    np.testing.assert_array_equal(y, 1.0)


@pytest.mark.parametrize("text, fragment", [
    ("collapse(2 present(u)", "collapse"),
    ("reduction(maxx:err)", "maxx"),
    ("frobnicate(u)", "frobnicate"),
    ("present(u,", "present"),
    ("collapse(two)", "collapse"),
    ("default(shared)", "default"),
])
def test_malformed_clause_string_is_compile_error(text, fragment):
    with pytest.raises(acc.CompileError) as info:
        @acc.parallel_loop(text)
        def body(u, unew):
            n, m = u.shape
            err = 0.0
            for i in range(1, n - 1):
                err = max(err, u[i, 0])
            return err
    assert fragment in str(info.value), str(info.value)


def test_wrong_number_of_arguments_is_type_error(emulated):
    x, y = x_y()
    with pytest.raises(TypeError):
        saxpy(1.0, x)
    with pytest.raises(TypeError):
        saxpy(1.0, x, y, y)
    with pytest.raises(TypeError):
        saxpy(1.0, x, y, z=y)
    assert table() == []
    expect_stats(h2d_count=0, alloc_count=0, launch_count=0)


def test_keyword_arguments_by_parameter_name(emulated):
    x, y = x_y()
    y0 = y.copy()
    saxpy(2.0, y=y, x=x)
    np.testing.assert_array_equal(y, y0 + 2.0 * x)
