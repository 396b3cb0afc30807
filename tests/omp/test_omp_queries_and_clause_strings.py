"""OpenMP spellings found by porting the SOLLVE V&V suite: ``omp.is_initial_device()``
inside a target region (OpenMP 5.2 §18.7.6), host routines refused in kernels, clauses
without arguments followed by others in clause strings, a reduction item also mapped, and
``map(A)`` without a map type on enter/exit data (§5.8.3)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import pyacc as acc
from pyacc import omp


@pytest.fixture(params=["host", "emulated"])
def device(request):
    acc.shutdown(request.param)
    acc.set_device_type(request.param)
    yield request.param
    acc.shutdown(request.param)


@omp.target("map(tofrom: x)")
def where_it_runs(x):
    x[0] = 1 if omp.is_initial_device() else 0
    x[1] = 1 if acc.on_device("host") else 0


def test_is_initial_device_in_a_target_region_is_false_off_the_host(device):
    x = np.full(2, -1)
    where_it_runs(x)
    expected = 1 if device == "host" else 0
    assert list(x) == [expected, expected]
    assert omp.is_initial_device()  # host code


@omp.target("map(tofrom: x)")
def asks_its_device_number(x):
    x[0] = omp.get_device_num()


def test_a_host_runtime_routine_in_a_kernel_is_a_compile_error_at_its_line(device):
    with pytest.raises(acc.CompileError, match=r"omp.get_device_num is a routine of the host "
                                                r"runtime .* pass its value as an argument"):
        asks_its_device_number(np.zeros(1))


def test_a_clause_without_arguments_may_come_first():
    @omp.target_teams_distribute_parallel_for("nowait map(tofrom: a) nowait")
    def twice(a):
        for i in range(a.shape[0]):
            a[i] *= 2

    a = np.ones(8)
    twice(a)
    omp.taskwait()
    assert (a == 2).all()


@omp.target_teams_distribute_parallel_for("map(to: a) map(tofrom: total) reduction(+: total)")
def mapped_reduction(a, total):
    for i in range(a.shape[0]):
        total += a[i]
    return total


def test_a_reduction_item_may_also_be_mapped(device):
    assert mapped_reduction(np.arange(1024), 0) == 523776


@omp.target_teams_distribute_parallel_for("map(tofrom: sum) reduction(+:sum)")
def babelstream_dot(a, b):
    sum = 0.0
    for i in range(a.shape[0]):
        sum += a[i] * b[i]
    return sum


def test_a_reduction_item_that_is_a_local_may_also_be_mapped(device):
    """OpenMP 5.2 §5.5.8 (BabelStream's dot, verbatim): the reduction variable is the
    function's local, initialised before the loop and returned; ``map(tofrom: sum)``
    says what the reduction does already (before: refused as naming no parameter)."""
    a = np.arange(1000.0)
    assert babelstream_dot(a, np.full(1000, 2.0)) == 999000.0


@dataclass
class Grid:
    x: np.ndarray


@omp.target_teams_distribute_parallel_for("map(to: a[0:n], g.x[:n]) map(from: b[0:n])")
def adds_sections(a, b, g, n):
    for i in range(n):
        b[i] = a[i] + g.x[i]


def test_map_takes_array_sections_and_members_as_openacc_clauses_do(device):
    """OpenMP 5.2 §5.2.5: list items of map are variables, members and array sections
    (C's ``a[0:n]``), in a compute construct's string as in OpenACC's (API.md §6.2);
    before, only names were accepted."""
    a, b, grid = np.arange(10.0), np.full(10, -1.0), Grid(np.ones(10))
    adds_sections(a, b, grid, 10)
    np.testing.assert_array_equal(b, np.arange(10.0) + 1.0)
    if device != "host":  # a section of part of an array: refused as OpenACC's (§2.7.1)
        with pytest.raises(acc.InvalidDataSectionError, match=r"copyin\(a\[0:n\]\) maps 6"):
            adds_sections(a, b, grid, 6)


@omp.target_teams_distribute_parallel_for("map(always, to: a[0:n]) map(from: b[0:n])")
def adds_one_always(a, b, n):
    for i in range(n):
        b[i] = a[i] + 1.0


def test_an_always_map_of_a_section_copies_present_data_again(separate_memory):
    """OpenMP 5.2 §5.8.3: ``always`` copies present data in again, a section too (before:
    KeyError naming the section text)."""
    a, b = np.ones(4), np.zeros(4)
    with omp.target_data(map_to=[a], map_alloc=[b]):
        a[:] = 5.0
        adds_one_always(a, b, 4)
        omp.target_update(from_=[b])
    np.testing.assert_array_equal(b, 6.0)


def test_data_construct_strings_read_sections_and_members_in_the_callers_frame(separate_memory):
    """A data construct's string names the caller's variables (API.md §9): sections
    (bounds read in the caller's frame) and members too; a section outside the array or
    a bound the caller lacks is a ClauseError naming it."""
    n, a, grid = 6, np.arange(10.0), Grid(np.ones(4))
    omp.target_enter_data("map(to: a[0:n], grid.x)")
    assert omp.target_is_present(a[0:n]) and not omp.target_is_present(a)
    assert omp.target_is_present(grid.x)
    a[:] = -1.0
    omp.target_update("from(a[2:3])")
    np.testing.assert_array_equal(a, np.r_[-1.0, -1.0, 2.0, 3.0, 4.0, np.full(5, -1.0)])
    omp.target_exit_data("map(delete: a[0:n], grid.x)")
    assert not omp.target_is_present(grid.x)
    with pytest.raises(acc.ClauseError, match=r"'a\[0:20\]' in the clause string: dimension 0"):
        omp.target_enter_data("map(to: a[0:20])")
    with pytest.raises(acc.ClauseError, match=r"'a\[0:m\]' in the clause string: name 'm'"):
        omp.target_enter_data("map(to: a[0:m])")
    assert not omp.target_is_present(a[0:1])


def test_one_depend_string_may_hold_several_dependence_types(separate_memory):
    """C writes ``depend(in: t0) depend(out: t1)``: ``depend="in: t0 out: t1"`` is the
    same two clauses (before: ``'out:' is not a variable name``)."""
    t0, t1 = np.zeros(3), np.zeros(3)
    omp.target_enter_data(map_to=[t0, t1], nowait=True, depend="in: t0 out: t1")
    omp.taskwait()
    assert omp.target_is_present(t0) and omp.target_is_present(t1)
    omp.target_exit_data(map_delete=[t0, t1])
    with pytest.raises(acc.ClauseError, match=r"unknown dependence type 'at'"):
        omp.target_enter_data(map_to=[t0], nowait=True, depend="at: t0")


@omp.target_teams_distribute_parallel_for_simd("map(tofrom: a) aligned(a: 64) nontemporal(a)")
def simd_hints(a):
    for i in range(a.shape[0]):
        a[i] += 1.0


def test_aligned_and_nontemporal_are_hints(device):
    """OpenMP 5.2 §5.11, §10.4.1: alignment and nontemporal are hints; accepted on simd
    constructs as simdlen and safelen are (before: 'unknown clause')."""
    a = np.zeros(8)
    simd_hints(a)
    assert (a == 1.0).all()


def test_map_without_a_type_is_to_on_enter_data_and_from_on_exit_data(device):
    a = np.arange(16.0)
    omp.target_enter_data("map(a)")
    assert omp.target_is_present(a)
    omp.target_exit_data("map(a)")
    if device != "host":
        assert not omp.target_is_present(a)


@omp.target_teams_distribute("map(tofrom: a) num_teams(4)")
def teams_distribute(a):
    for i in range(a.shape[0]):
        a[i] += 1


@omp.target_teams("map(tofrom: a)")
def teams_with_a_distribute_loop(a):
    for i in omp.distribute(range(a.shape[0])):
        a[i] += 1


@omp.target_parallel(map_tofrom="a")
def parallel_with_a_for_loop(a):
    for i in omp.parallel_for(range(a.shape[0])):
        a[i] += 1


def test_target_teams_distribute_target_teams_and_target_parallel(device):
    """OpenMP 5.2 §17 combined constructs: the same parallel loop, the same region."""
    a = np.zeros(100)
    teams_distribute(a)
    teams_with_a_distribute_loop(a)
    parallel_with_a_for_loop(a)
    assert (a == 3).all()


@omp.target("map(tofrom: x)")
def asks_with_an_argument(x):
    x[0] = 1 if omp.is_initial_device("nvidia") else 0


def test_is_initial_device_takes_no_argument_in_a_kernel(device):
    with pytest.raises(acc.CompileError, match=r"omp.is_initial_device\(\) takes no arguments"):
        asks_with_an_argument(np.zeros(1))


@pytest.mark.parametrize("text, message", [
    ("map(to: Q[0:n])", r"map\(to: Q\) does not name a parameter or a module-level array"),
    ("map(to A[0:n])", r"bad clause 'map\(to A\[0:n\]\)': missing ':' after 'to'"),
], ids=["unknown name", "no colon"])
def test_a_bad_map_of_a_compute_construct_is_told_in_openmps_words(text, message):
    """Bad input: the messages speak OpenMP (map(to: ...)), not the OpenACC clause the
    map becomes (copyin), and a map type without its ':' is named as such."""
    with pytest.raises(acc.CompileError, match=message):
        @omp.target_teams_distribute_parallel_for(text)
        def fills(A, n):
            for i in range(n):
                A[i] = 1.0
