"""OpenMP compute constructs compile to the same kernels as the OpenACC ones and follow
the OpenMP implicit rules (API.md §9; OpenMP 5.2 §5.8.1 implicit data-mapping).

Sources: SOLLVE V&V ``tests/4.5/target_teams_distribute_parallel_for/
test_target_teams_distribute_parallel_for_map_to.c``, ``..._map_from.c``,
``..._map_tofrom.c``, ``..._reduction_max.c``, ``tests/4.5/target/test_target_defaultmap.c``
and ``tests/5.0/target/test_target_defaultmap_present.c`` (translated: the C checks on
the arrays after the region become the assertions)."""

import numpy as np
import pytest

import pyacc as acc
from pyacc.compiler import CompileError
from pyacc import omp

N = 1024


@omp.target_teams_distribute_parallel_for("map(to: a, b) map(from: c)")
def add_to_from(a, b, c):
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]


@omp.target_teams_distribute_parallel_for(map_tofrom="a", map_to="b")
def add_into(a, b):
    for i in range(a.shape[0]):
        a[i] += b[i]


@omp.target_teams_distribute_parallel_for("map(to: a) reduction(max: m) collapse(2)")
def max_of(a):
    m = -1.0e300
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            m = max(m, a[i, j])
    return m


@omp.target_parallel_for("reduction(+: s)")
def implicit_sum(a):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i]
    return s


@omp.target_teams_loop(defaultmap="none", map_tofrom="y")
def needs_maps(x, y):
    for i in range(y.shape[0]):
        y[i] = x[i]


@omp.target_teams_distribute_parallel_for("defaultmap(present) ")
def only_present(x):
    for i in range(x.shape[0]):
        x[i] = 2 * x[i]


@omp.target("map(tofrom: a) map(to: b)")
def two_loops(a, b):
    for i in omp.loop(range(a.shape[0])):
        a[i] = b[i] + 1.0
    for i in omp.loop(range(a.shape[0])):
        a[i] *= 2.0


@omp.declare_target
def twice(v):
    return 2.0 * v


@omp.target_teams_distribute_parallel_for
def with_routine(a):
    for i in range(a.shape[0]):
        a[i] = twice(a[i])


@acc.parallel_loop(copyin="a", reduction="max:m", collapse=2)
def acc_max_of(a):
    m = -1.0e300
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            m = max(m, a[i, j])
    return m


def test_map_to_from(device):
    """SOLLVE 4.5 test_target_teams_distribute_parallel_for_map_to/_from."""
    a, b, c = np.arange(N, dtype=np.float64), np.full(N, 2.0), np.zeros(N)
    add_to_from(a, b, c)
    np.testing.assert_array_equal(c, a + 2.0)
    assert acc.present_table() == []


def test_map_tofrom(device):
    """SOLLVE 4.5 test_target_teams_distribute_parallel_for_map_tofrom."""
    a, b = np.ones(N), np.arange(N, dtype=np.float64)
    add_into(a, b)
    np.testing.assert_array_equal(a, 1.0 + b)


def test_reduction_max_collapse(device):
    """SOLLVE 4.5 test_target_teams_distribute_parallel_for_reduction_max (collapse(2))."""
    rng = np.random.default_rng(1)
    a = rng.random((33, 17))
    assert max_of(a) == a.max()


def test_same_code_as_openacc(emulated):
    """The OpenMP kernel is the OpenACC kernel: the same construct, the same clauses
    (up to the spelling of the construct's name), the same explain text."""
    omp_clauses, acc_clauses = max_of.info.clauses, acc_max_of.info.clauses
    assert omp_clauses.construct == "parallel_loop"
    assert omp_clauses.construct == "target_teams_distribute_parallel_for"
    assert repr(omp_clauses.construct) == repr(acc_clauses.construct)
    assert omp_clauses.copyin == acc_clauses.copyin == ("a",)
    assert omp_clauses.reductions == acc_clauses.reductions
    assert omp_clauses.collapse == acc_clauses.collapse == 2
    a = np.arange(12.0).reshape(3, 4)
    assert max_of(a) == acc_max_of(a) == 11.0
    assert isinstance(max_of, acc._compute.ComputeRegion)
    text = omp.explain(max_of)
    assert "target_teams_distribute_parallel_for" in text


def test_explain_speaks_openmp_for_openmp_regions(emulated):
    """The observability speaks the construct's language (docs/openmp.md): an OpenMP
    region's data lines say map(to)/map(tofrom)/map(alloc), not copyin/copy/create."""
    add_into(np.ones(8), np.ones(8))
    text = omp.explain(add_into)
    assert "map(tofrom) (explicit clause)" in text and "map(to) (explicit clause)" in text
    assert not any(word in text for word in ("copyin", "copy ", "present-or-copy", "§2.6.2"))
    implicit_sum(np.ones(8))
    assert "a: map(to) (implicit, §5.8.1: never written, not copied back)" in \
        omp.explain(implicit_sum)


def test_implicit_tofrom_and_firstprivate(emulated):
    """OpenMP 5.2 §5.8.1: arrays without a map are map(tofrom:), scalars firstprivate."""
    a = np.arange(100, dtype=np.float64)
    assert implicit_sum(a) == a.sum()
    b = np.ones(8)
    add_into(b, np.ones(8))
    assert acc.present_table() == []


def test_defaultmap_none_requires_maps(emulated):
    """SOLLVE 4.5 test_target_defaultmap: defaultmap(none) — same error as default(none)."""
    x, y = np.ones(4), np.zeros(4)
    with pytest.raises(acc.ClauseError, match="default"):
        needs_maps(x, y)
    assert acc.present_table() == []


def test_defaultmap_present(emulated):
    """SOLLVE 5.0 test_target_defaultmap_present: absent data is an error, present data
    is used in place."""
    x = np.ones(16)
    with pytest.raises(acc.NotPresentError):
        only_present(x)
    with omp.target_data(map_tofrom=[x]):
        only_present(x)
    np.testing.assert_array_equal(x, 2.0)


def test_target_with_loop_markers(device):
    a, b = np.zeros(50), np.arange(50, dtype=np.float64)
    two_loops(a, b)
    np.testing.assert_array_equal(a, (b + 1.0) * 2.0)


def test_declare_target_function(device):
    a = np.arange(10, dtype=np.float64)
    with_routine(a)
    np.testing.assert_array_equal(a, 2.0 * np.arange(10))


def test_nowait_and_taskwait(emulated):
    """nowait work runs on the thread's queue; taskwait waits for it."""
    a, b = np.ones(N), np.full(N, 3.0)
    with omp.target_data(map_tofrom=[a], map_to=[b]):
        for _ in range(4):
            add_into(a, b, nowait=True)
        omp.taskwait()
        omp.target_update(from_=[a])
        np.testing.assert_array_equal(a, 13.0)


def test_nowait_reduction_handle(emulated):
    a = np.arange(10, dtype=np.float64)
    handle = implicit_sum(a, nowait=True)
    assert handle.result() == 45.0
    omp.taskwait()


def test_device_initial_runs_on_host(emulated):
    """device(omp_get_initial_device()): host code on host data, no data action."""
    a, b = np.ones(8), np.ones(8)
    add_into(a, b, device=omp.get_initial_device())
    np.testing.assert_array_equal(a, 2.0)
    assert acc.stats()["h2d_count"] == 0


def test_default_device_initial_runs_on_host_and_back(emulated):
    """The default device set to the initial device: a construct naming no device runs
    on the host (the compute call's fast path must not skip this); back to device 0, it
    maps again."""
    a, b = np.ones(8), np.ones(8)
    omp.set_default_device(omp.get_initial_device())
    try:
        add_into(a, b)
        np.testing.assert_array_equal(a, 2.0)
        assert acc.stats()["h2d_count"] == 0
    finally:
        omp.set_default_device(0)
    add_into(a, b)
    np.testing.assert_array_equal(a, 3.0)
    assert acc.stats()["h2d_count"] == 2 and acc.stats()["d2h_count"] == 1


def test_if_false_runs_on_host(emulated):
    a, b = np.ones(8), np.ones(8)
    add_into(a, b, if_=False)
    np.testing.assert_array_equal(a, 2.0)
    assert acc.stats()["h2d_count"] == 0


@omp.target_teams_distribute_parallel_for("map(always, to: x) map(always, from: y)")
def always_copy(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i]


def test_always_on_a_target_region(emulated):
    """map(always, to/from:) copies even when the data is present (SOLLVE 4.5
    test_target_data_map_always — the target construct form)."""
    x, y = np.ones(8), np.zeros(8)
    omp.target_enter_data(map_to=[x], map_alloc=[y])
    x[:] = 5.0  # the host changes x; always copies it in
    always_copy(x, y)
    np.testing.assert_array_equal(y, 5.0)  # always copied y out while it stays present
    omp.target_exit_data(map_delete=[x, y])


def test_clause_errors_point_at_the_clause():
    with pytest.raises(acc.CompileError) as info:
        omp.target_teams_distribute_parallel_for("map(to: x) colapse(2)")
    text = str(info.value)
    assert "did you mean 'collapse'" in text and "^" in text
    assert "test_omp_compute.py" in text
    with pytest.raises(acc.CompileError, match="unknown map type 'tofro'.*did you mean 'tofrom'"):
        omp.target_teams_distribute_parallel_for("map(tofro: x)")
    with pytest.raises(acc.CompileError, match="OpenACC clause"):
        omp.target_parallel_for("copyin(x)")
    with pytest.raises(acc.CompileError, match="not allowed here"):
        omp.target_parallel_for("map(delete: x)")
    with pytest.raises(acc.CompileError, match="lastprivate is not supported"):
        omp.target_parallel_for("lastprivate(x)")


def test_a_clause_error_names_the_decorators_file_and_line():
    """As pyacc's decorators do (API.md §6): the error points at the decorator."""
    import inspect

    line = inspect.currentframe().f_lineno + 2  # the decorator below
    with pytest.raises(CompileError) as caught:
        @omp.target_teams_distribute_parallel_for("map(tofrom: a) colapse(2)")
        def misspelled(a):
            for i in range(a.shape[0]):
                a[i] = 1.0
    assert caught.value.filename == __file__ and caught.value.lineno == line
    assert "did you mean 'collapse'" in str(caught.value)


@omp.target_teams_distribute_parallel_for("collapse(2) map(tofrom: a)")
def fills_upper_triangle(a, n):
    for j in range(n):
        for i in range(j, n):
            a[j, i] = i + j


def test_a_non_rectangular_collapse_is_collapsed_up_to_the_dependent_loop(device):
    """OpenMP 5.2 §4.4.1 allows an inner bound to read an outer index (SOLLVE's
    lsms_triangular_packing): the nest is collapsed up to that loop, which runs in each
    iteration of the outer one, and explain says so (before: a CompileError)."""
    a = np.zeros((6, 6))
    fills_upper_triangle(a, 6)
    j, i = np.indices((6, 6))
    np.testing.assert_array_equal(a, np.where(i >= j, i + j, 0.0))
    assert "collapse stops here: its bounds read 'j', a non-rectangular nest" in \
        omp.explain(fills_upper_triangle)

