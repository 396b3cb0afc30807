"""What ported C and Fortran OpenACC programs need, round three (OpenACC 3.3 §2.5.3,
§2.9; API.md §6.1): each rule found by porting a real program as written, on ``host``
and ``emulated``.

1. ``kernels`` dependence analysis reads C's element spelling ``c[i][j]`` as ``c[i, j]``
   (§2.5.3).
2. a ``min``/``max`` reduction update takes any number of values, as Fortran's
   ``MIN(m, a, b)`` (§2.5.15), for scalars and array elements.
3. clause strings read as Fortran writes them: clause names, reduction operators
   (``.AND.``, ``IEOR``), ``default`` values and OpenMP map types in any case.
4. a parallel loop tightly nested in a parallel nest (gang outer, vector inner; two
   ``independent`` loops; two proved ones) is planned for a GPU as one space of threads
   (§2.9), and runs inside each iteration on CPUs, with the same results.
5. a gang loop holds no gang loop, a worker loop no worker loop, a vector loop no vector
   loop (§2.9.2–2.9.4): refused at decoration, naming both loops.
6. ``acc.memcpy_d2d`` copies between two devices' copies of host arrays (§3.2.30).
7. ``device_type`` groups tune the launch per device type (§2.4).
8. an array named only in loops' ``private`` clauses takes no implicit data clause
   (§2.6.2): nothing is copied for it.
9. a scalar first assigned inside a loop but read, on some path, before its store is
   carried from one iteration to the next (§2.5.3): the loop is not independent; a
   tuple, annotated or chained assignment stores it; ``a.shape[1]`` is no element of
   ``a``; an inner loop's temporary read after a ``kernels`` nest is kept.
10. an atomic update of a bool or complex array is refused saying what to write (§2.12).
11. C's ``attach(data.a, data.b)`` in a directive's string attaches the struct once (§2.7.2).
12. a ``kernels`` loop that leaves early (``break``) runs as written (§2.5.3).
"""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import pyacc as acc
from pyacc.compiler.frontend import Scope, local_names
from pyacc.compiler.planner import Planner


@pytest.fixture(params=["host", "emulated"])
def device(request):
    """The shared-memory ``host`` device and the ``emulated`` one (separate memory)."""
    return request.getfixturevalue("host_device" if request.param == "host" else "emulated")


def plan_notes(region):
    info = region.info
    return Planner(info.source, info.clauses,
                   Scope(info.func, local_names(info.source.tree))).plan().notes


def same_as_python(region, *args):
    """Run ``region`` on copies of ``args`` and plain Python on others; compare."""
    got = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    want = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", acc.PerformanceWarning)
        region(*got)
    region.__wrapped__(*want)
    for g, w in zip(got, want):
        if isinstance(g, np.ndarray):
            np.testing.assert_array_equal(g, w)


# ===================================================== 1. C's c[i][j] in kernels loops


@acc.kernels
def doubled_rows(a, c, n):
    for i in range(n):
        for j in range(n):
            c[i][j] = a[i][j] * 2.0


@acc.kernels
def running_rows(c, n):
    for i in range(1, n):
        for j in range(n):
            c[i][j] = c[i - 1][j] + 1.0


@acc.kernels
def through_a_row_view(c, n):
    for i in range(n):
        for j in range(n - 1):
            c[i][1:][j] = c[i][j] + 1.0


def test_an_element_written_as_c_i_j_is_the_element_c_i_comma_j(device):
    """§2.5.3: ``c[i][j]`` (C's spelling, one index at a time) is the element ``c[i, j]``:
    the dependence test proves the nest parallel as it does ``c[i, j]`` (before, a
    write "through a nested subscript" kept every such kernels loop sequential)."""
    assert plan_notes(doubled_rows)[0].parallel
    same_as_python(doubled_rows, np.arange(36.0).reshape(6, 6), np.zeros((6, 6)), 6)


@pytest.mark.parametrize("region", [running_rows, through_a_row_view],
                         ids=["row i reads row i-1", "a row view shifts the index"])
def test_c_i_j_writes_that_meet_stay_sequential(device, region):
    """§2.5.3: a dependence through ``c[i][j]`` is found as through ``c[i, j]``; an inner
    slice (``c[i][1:][j]``: a view, its indices shifted) is not read as an element."""
    assert not plan_notes(region)[0].parallel
    same_as_python(region, np.arange(36.0).reshape(6, 6), 6)


# ======================================= 2. min/max updates of several values (§2.5.15)


@acc.parallel_loop("reduction(min:m)")
def smallest_step(a, b, c):
    m = 1e30
    for i in range(a.shape[0]):
        m = min(m, a[i], b[i] * 2.0, c[i])
    return m


@acc.parallel_loop("reduction(max:peak)")
def peaks(a, b, peak):
    for i in range(a.shape[0]):
        peak[i % 3] = max(peak[i % 3], a[i], b[i])


def test_a_min_update_of_several_values_is_a_min_reduction(device):
    """CloverLeaf's ``dt = MIN(dt, dtct, dtut, dtvt)`` under ``reduction(min:dt)``: a
    ``min`` update whatever the number of values (before: "not a 'min' update")."""
    a, b, c = np.arange(5.0, 15.0), np.arange(10.0)[::-1] + 3, np.full(10, 7.5)
    assert smallest_step(a, b, c) == min(a.min(), 2 * b.min(), c.min())


def test_a_max_update_of_an_element_takes_several_values(device):
    """An array reduction's element update ``p[k] = max(p[k], a, b)`` (§2.5.15 array
    reductions): each element the largest of its values and its value before."""
    rng = np.random.default_rng(5)
    a, b = rng.random(40), rng.random(40)
    peak = np.full(3, 0.5)
    peaks(a, b, peak)
    expected = np.full(3, 0.5)
    for i in range(40):
        expected[i % 3] = max(expected[i % 3], a[i], b[i])
    np.testing.assert_array_equal(peak, expected)


# ============================================ 3. Fortran's upper-case directive text


@acc.parallel_loop("PRESENT(a) COLLAPSE(2) REDUCTION(MAX:peak) Vector_Length(32)")
def shouted(a):
    peak = -1.0
    for j in range(a.shape[0]):
        for i in acc.loop(range(a.shape[1]), "INDEPENDENT"):
            peak = max(peak, a[j, i])
    return peak


def test_clause_names_operators_and_defaults_are_read_in_any_case():
    """Fortran directives are case-insensitive: ``!$ACC PARALLEL LOOP PRESENT(a)
    COLLAPSE(2) REDUCTION(MAX:peak)`` parses as its lower-case text (names in the lists
    stay as written: they are Python names)."""
    from pyacc.compiler import parse_clauses
    assert parse_clauses("parallel_loop", "COPYIN(Big) REDUCTION(.AND.:ok, IEOR:x) "
                         "DEFAULT(NONE) GANG VECTOR") == \
        parse_clauses("parallel_loop", "copyin(Big) reduction(and:ok, ^:x) default(none) "
                      "gang vector")
    a = np.arange(12.0).reshape(3, 4)
    with acc.data("COPYIN(a)"):
        assert shouted(a) == 11.0


def test_openmp_map_types_are_read_in_any_case():
    """``!$OMP TARGET DATA MAP(ALWAYS, TO: a)``: the map type and its modifiers in any
    case, and the other clauses' arguments (reduction operators, schedule kinds,
    defaultmap, dependence types)."""
    from pyacc import omp
    from pyacc.omp._clauses import parse
    a = np.ones(4)
    with omp.target_data("MAP(ALWAYS, TO: a)"):
        assert omp.target_is_present(a)
    upper = parse("target_teams_distribute_parallel_for", "MAP(TO: a) REDUCTION(MAX: m) "
                  "SCHEDULE(STATIC) DEFAULTMAP(TOFROM: AGGREGATE) DEPEND(IN: a)")
    lower = parse("target_teams_distribute_parallel_for", "map(to: a) reduction(max: m) "
                  "schedule(static) defaultmap(tofrom: aggregate) depend(in: a)")
    assert upper == lower


def test_clause_modifiers_are_read_in_any_case():
    """``GANG(NUM:4) VECTOR(LENGTH:32) COPYIN(READONLY:a) CREATE(ZERO:b)`` as written in
    Fortran; ``COLLAPSE(FORCE:2)`` gets its own message."""
    from pyacc.compiler import parse_clauses
    assert parse_clauses("parallel_loop", "GANG(NUM:4) VECTOR(LENGTH:32) COPYIN(READONLY:a) "
                         "CREATE(ZERO:b)") == \
        parse_clauses("parallel_loop", "gang(num:4) vector(length:32) copyin(readonly:a) "
                      "create(zero:b)")
    with pytest.raises(acc.CompileError, match="collapse.force:n. is not supported"):
        parse_clauses("parallel_loop", "COLLAPSE(FORCE:2)")


# ============================== 4. gang outer, vector inner: one space on a GPU (§2.9)


@acc.kernels
def cloverleaf_flux(a, b):
    for k in acc.loop(range(a.shape[1]), "independent"):
        for j in acc.loop(range(a.shape[0]), "independent"):
            b[j, k] = 0.5 * a[j, k] + k


@acc.parallel
def rows_of_running_sums(a, b):
    for i in acc.loop(range(a.shape[0]), "gang"):
        t = 0.0
        for j in acc.loop(range(a.shape[1]), "vector"):
            t = t + a[i, j]
            b[i, j] = t


@acc.parallel
def carried_in_a_vector_loop(a, b, t):
    for i in acc.loop(range(a.shape[0]), "gang"):
        for j in acc.loop(range(a.shape[1]), "vector"):
            t = t + a[i, j]
            b[i, j] = t


@acc.parallel
def mvt(n, x1, a, y):
    for i in acc.loop(range(n)):
        for j in acc.loop(range(n)):
            x1[i] = x1[i] + a[i, j] * y[j]


def test_explain_says_why_an_inner_loop_does_not_join_its_nest(device):
    """PolyBench's mvt: every j writes ``x1[i]`` (a sum over j, a race if the loop ran in
    parallel), so the j loop runs in order within each i; acc.explain says why and what
    to write (before: nothing, the directive silently dropped)."""
    text = acc.explain(mvt)
    assert "not joined with the nest: every iteration writes one element (a sum over j?" in text
    a, y = np.arange(16.0).reshape(4, 4), np.ones(4)
    same_as_python(mvt, 4, np.zeros(4), a, y)


def test_independent_loops_nested_are_one_space_on_a_gpu(device):
    """CloverLeaf's ``LOOP INDEPENDENT`` k around ``LOOP INDEPENDENT`` j: the plan adds j
    to the nest for a GPU (``NestPlan.widen``, which ``acc.explain`` reports); CPUs run it
    inside each k, with the same result."""
    nest, = cloverleaf_flux.info.plan.nests.values()
    assert nest.widen == 1
    assert "collapsed with the parallel loop" in acc.explain(cloverleaf_flux)
    same_as_python(cloverleaf_flux, np.asfortranarray(np.arange(24.0).reshape(6, 4)),
                   np.zeros((6, 4), order="F"))


def test_an_inner_loop_after_other_statements_or_carrying_a_scalar_is_not_widened(device):
    """Not tightly nested (``t = 0.0`` between the loops), or a scalar carried from one
    inner iteration to the next: the inner loop stays inside each outer iteration."""
    for region in (rows_of_running_sums, carried_in_a_vector_loop):
        nest, = region.info.plan.nests.values()
        assert nest.widen == 0, region
    same_as_python(rows_of_running_sums, np.arange(12.0).reshape(3, 4), np.zeros((3, 4)))


@acc.parallel
def product_of_two_loops(n, c, a, b):
    for i in acc.loop(range(n)):
        for j in acc.loop(range(n)):
            s = 0.0
            for k in range(n):
                s += a[i, k] * b[k, j]
            c[i, j] = s


def test_a_matrix_product_of_two_acc_loops_is_interchanged_as_collapse_2_is(device):
    """PolyBench's gemm as ``acc loop`` i around ``acc loop`` j: both independent (§2.9),
    the same nest as ``collapse(2)``, so the CPU gets the same unit-stride interchange
    (before: 10–20× slower at 384² than the collapse(2) spelling)."""
    a, b = np.arange(30.0).reshape(5, 6) / 7, np.arange(30.0).reshape(6, 5) / 3
    c = np.zeros((5, 5))
    product_of_two_loops(5, c, a[:, :5].copy(), b[:5].copy())
    np.testing.assert_allclose(c, a[:, :5] @ b[:5], rtol=1e-13)
    assert "inner loops interchanged" in acc.explain(product_of_two_loops)


# ==================================== 5. levels of parallelism nest (§2.9.2–2.9.4)


def _gang_in_gang(n, a):
    for i in acc.loop(range(n), "gang worker"):
        for j in acc.loop(range(n), "gang worker"):
            a[i, j] = 2.0


def _vector_in_vector(a):
    for i in range(a.shape[0]):
        for j in acc.loop(range(a.shape[1]), "vector"):
            a[i, j] = 1.0


@pytest.mark.parametrize("decorate, words", [
    (lambda f: acc.parallel(f), "a gang worker loop inside the gang worker loop at line"),
    (lambda f: acc.parallel_loop("vector")(f), "a vector loop inside the vector loop at line"),
], ids=["gang in gang", "vector in the combined construct's vector loop"])
def test_a_loop_inside_a_loop_of_its_own_level_is_refused(decorate, words):
    """§2.9.2: "The region of a loop with the gang clause may not contain another loop with
    the gang clause" (a worker loop likewise no worker loop, a vector loop no vector loop);
    the combined construct's clauses are its loop's. Before: accepted silently."""
    function = _gang_in_gang if "gang" in words else _vector_in_vector
    with pytest.raises(acc.CompileError, match=words):
        decorate(function)


@acc.kernels
def lud_style_rows(a):
    for i in acc.loop(range(a.shape[0]), "independent gang vector(8)"):
        for j in acc.loop(range(a.shape[1]), "gang vector(32)"):
            a[i, j] = i * 10 + j


def test_a_gang_loop_in_a_gang_loop_of_kernels_is_accepted(device):
    """Rodinia's lud and srad (PGI-era ``kernels``): ``gang vector(8)`` around ``gang
    vector(32)``; in ``kernels`` the compiler picks the levels (§2.5.3), so the nest is
    accepted, and runs as one 2-D space where it is proved independent."""
    nest, = lud_style_rows.info.plan.nests.values()
    assert nest.widen == 1
    same_as_python(lud_style_rows, np.zeros((4, 6)))


@acc.parallel
def gang_worker_vector(a):
    for i in acc.loop(range(a.shape[0]), "gang"):
        for j in acc.loop(range(a.shape[1]), "worker"):
            for k in acc.loop(range(a.shape[2]), "vector"):
                a[i, j, k] = i * 100 + j * 10 + k


def test_gang_worker_vector_nest_in_that_order_is_accepted(device):
    """The three levels nested outermost first are the intended form."""
    same_as_python(gang_worker_vector, np.zeros((3, 4, 5)))


# ======================================= 6. acc.memcpy_d2d between devices (§3.2.30)

_D2D_PROGRAM = """
import numpy as np, pyacc as acc
acc.set_device_type("emulated")
a, c, b = np.arange(8.0), np.zeros(8), np.zeros(8)
acc.set_device_num(0); acc.copyin(a); acc.create(b)
acc.set_device_num(1); acc.create(c)
acc.set_device_num(0)
acc.memcpy_d2d(c, a[:6], 1, 0)           # device 0's a[:6] -> start of device 1's c
acc.memcpy_d2d(b, a, 0, 0, async_=2)     # on one device, on queue 2
acc.wait(2)
acc.update_self(b)
acc.set_device_num(1); acc.update_self(c)
assert list(c) == [0, 1, 2, 3, 4, 5, 0, 0], c
assert list(b) == list(a), b
for call, error in ((lambda: acc.memcpy_d2d(a, c, 1, 0), "NotPresentError"),
                    (lambda: acc.memcpy_d2d(c, a, 5, 0), "InvalidArgumentError"),
                    (lambda: acc.memcpy_d2d(c[:2], a, 1, 0), "InvalidArgumentError")):
    try:
        call()
    except Exception as exc:
        assert type(exc).__name__ == error, exc
        print(exc)
    else:
        raise AssertionError("no error")
print("d2d ok")
"""


def test_memcpy_d2d_copies_between_two_devices_copies_of_host_arrays():
    """§3.2.30 ``acc_memcpy_d2d(dst, src, bytes, dev_dst, dev_src)``: the device copies of
    two host arrays, on two emulated devices (through host memory) or on one (on the
    queue); absent data, a device that does not exist and a destination too small are
    errors naming what to do."""
    env = dict(os.environ, PYACC_EMULATED_DEVICES="2")
    result = subprocess.run([sys.executable, "-c", _D2D_PROGRAM], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "d2d ok"
    assert "the source c is not (wholly) present on emulated device 0" in lines[0]
    assert "there is no emulated device 5" in lines[1]
    assert "pass a section of the source" in lines[2]


# ============================================= 7. device_type groups (OpenACC 3.3 §2.4)


@acc.parallel_loop("gang vector_length(64) device_type(nvidia) vector_length(128) "
                   "num_gangs(n // 2) device_type(*) vector_length(4)")
def tuned_per_device_type(a, n):
    for i in range(n):
        a[i] = 2.0 * i


def test_device_type_groups_are_accepted_and_keep_the_results(device):
    """§2.4: ``device_type(nvidia) vector_length(128) device_type(*) ...`` as NVHPC codes
    write it; the CPU devices run the loop as they do without the groups."""
    a = np.zeros(10)
    tuned_per_device_type(a, 10)
    np.testing.assert_array_equal(a, 2.0 * np.arange(10))


def test_device_type_groups_apply_to_their_device_types_only():
    """The group naming a type applies on it (``nvidia`` is ``cuda``), ``*`` on the types
    no group names, the construct's own clauses elsewhere; a count written as an
    expression is evaluated at each call, as the construct's are."""
    from pyacc.compiler import parse_clauses
    from pyacc.compiler.device_types import for_device_type
    clauses = parse_clauses("parallel_loop", "num_gangs(2) DEVICE_TYPE(NVIDIA) num_gangs(n) "
                            "vector(128) dtype(host) num_gangs(3)").evaluate({"n": 7})
    assert (for_device_type(clauses, "cuda").num_gangs,
            for_device_type(clauses, "cuda").vector_length) == (7, 128)
    assert for_device_type(clauses, "host").num_gangs == 3
    assert for_device_type(clauses, "emulated").num_gangs == 2


def test_every_group_naming_a_device_type_applies_in_order():
    """§2.4: two groups naming ``nvidia`` both apply (the later value wins a clause both
    set); ``*`` applies only where no group names the type."""
    from pyacc.compiler import parse_clauses
    from pyacc.compiler.device_types import for_device_type
    clauses = parse_clauses("parallel_loop", "device_type(nvidia) num_gangs(2) "
                            "device_type(nvidia, radeon) vector_length(64) num_gangs(5) "
                            "device_type(*) num_gangs(9)")
    cuda = for_device_type(clauses, "cuda")
    assert (cuda.num_gangs, cuda.vector_length) == (5, 64)
    assert for_device_type(clauses, "host").num_gangs == 9


def test_device_type_as_a_keyword_or_on_a_routine_is_refused_saying_why():
    """A group is the clauses written after ``device_type`` in a string: as a keyword it
    has none; a routine's one level of parallelism is one for every type (§2.15.1)."""
    from pyacc.compiler import parse_clauses
    with pytest.raises(acc.CompileError, match="written in the clause string"):
        parse_clauses("parallel_loop", device_type="nvidia")
    with pytest.raises(acc.CompileError, match="not supported on a routine"):
        parse_clauses("routine", "seq device_type(nvidia) vector")


@pytest.mark.parametrize("text, word", [("device_type(nvidia) async(1)", "async"),
                                        ("device_type(*) collapse(2)", "collapse"),
                                        ("device_type(nvidia) copyin(a)", "copyin"),
                                        ("device_type() gang", "needs a list of device types")])
def test_a_clause_that_would_change_the_plan_after_device_type_is_refused(text, word):
    """Only the launch's tuning clauses may follow ``device_type`` in pyacc (one plan
    serves every device type): anything else is a CompileError saying where to write it."""
    from pyacc.compiler import parse_clauses
    with pytest.raises(acc.CompileError, match=word):
        parse_clauses("parallel_loop", text)


# ================================ 8. arrays private to a loop take no data clause (§2.6.2)


@acc.kernels
def block_solve(r, z, dp_l):
    for ko in acc.loop(range(r.shape[1]), "independent"):
        for j in acc.loop(range(r.shape[0]), "independent private(dp_l)"):
            dp_l[0] = r[j, ko] * 2.0
            z[j, ko] = dp_l[0] + 1.0


@acc.kernels
def private_and_read_after(r, z, dp_l):
    for j in acc.loop(range(r.shape[0]), "independent private(dp_l)"):
        dp_l[0] = r[j, 0] * 2.0
        z[j, 0] = dp_l[0]
    z[0, 1] = dp_l[1]


def test_an_array_private_to_a_loop_is_not_copied(emulated):
    """TeaLeaf's ``tea_block_solve``: ``dp_l`` appears only in the inner loop that makes
    it private, so its accesses are not exposed to the ``kernels`` construct (§2.6.2): no
    implicit copy (before: copied in and out at every call); results as plain Python."""
    r, z, dp_l = np.arange(16.0).reshape(4, 4), np.zeros((4, 4)), np.full(4, 7.0)
    assert block_solve.info.loop_private == {"dp_l"}
    with acc.data(copyin=[r], copy=[z]):
        acc.reset_stats()
        block_solve(r, z, dp_l)
        assert (acc.stats()["h2d_count"], acc.stats()["d2h_count"]) == (0, 0)
    np.testing.assert_array_equal(z, 2.0 * r + 1.0)
    np.testing.assert_array_equal(dp_l, 7.0)  # (never written through)
    assert "dp_l: private (only in loops' private clauses" in acc.explain(block_solve)


def test_an_array_also_used_outside_its_private_loop_keeps_its_data_clause():
    """Read outside the loop that makes it private: exposed to the construct, so the
    implicit rule applies (present-or-copy)."""
    assert private_and_read_after.info.loop_private == frozenset()
    assert "dp_l: copy" in acc.explain(private_and_read_after)


# ================================= 9. scalars carried from one iteration (§2.5.3)


@acc.kernels
def differences(a, b):
    for j in range(a.shape[0]):
        if j == 0:
            prev = 0.0
        b[j] = a[j] - prev
        prev = a[j]


@acc.parallel
def two_nests_one_index(a, b):
    for i in acc.loop(range(a.shape[0]), "gang"):
        for j in acc.loop(range(a.shape[1]), "vector"):
            a[i, j] = i + j
    for i in acc.loop(range(b.shape[0]), "gang"):
        for j in acc.loop(range(b.shape[1]), "vector"):
            b[i, j] = a[i, j] * 2.0


def test_a_scalar_first_assigned_in_the_loop_but_read_before_its_store_is_carried(device):
    """``prev`` is set in the iteration ``j == 0`` only, and read in every iteration
    before the store at its end: each iteration reads the previous one's value, a
    dependence (before: the loop ran in parallel, each thread reading an unset value)."""
    note = plan_notes(differences)[0]
    assert not note.parallel and "'prev' carries a value" in note.reason
    same_as_python(differences, np.arange(12.0) ** 2, np.zeros(12))


def test_an_index_stored_again_by_a_later_nest_does_not_stop_the_widening(device):
    """The second nest's ``for j`` stores ``j``: no read of the first nest's index after
    it (§2.6.1), so both inner loops join their nests."""
    assert [nest.widen for nest in two_nests_one_index.info.plan.nests.values()] == [1, 1]
    same_as_python(two_nests_one_index, np.zeros((3, 4)), np.zeros((3, 4)))


# ================================== 10. atomics on logical arrays (OpenACC 3.3 §2.12)


@acc.parallel
def all_true_per_row(a, t):
    for x in acc.loop(range(a.shape[0])):
        for y in acc.loop(range(a.shape[1])):
            acc.atomic.and_(t, x, a[x, y])


def test_an_atomic_update_of_a_bool_array_says_to_use_int8_flags(device):
    """Fortran's ``t(x) = t(x) .AND. a(x, y)`` under ``!$acc atomic`` ported to a bool
    array: a CompileError naming the array and the int8 0/1 form (before: Numba's typing
    dump); the int8 form gives the logical result."""
    a = np.ones((5, 3), np.bool_)
    a[2, 1] = False
    with pytest.raises(acc.CompileError, match="'t', an array of bool: .*int8 array of 0 and 1"):
        all_true_per_row(a, np.ones(5, np.bool_))
    t = np.ones(5, np.int8)
    all_true_per_row(a.astype(np.int8), t)
    np.testing.assert_array_equal(t, [1, 1, 0, 1, 1])


# =============================== 11. C's member spelling of attach/detach (§2.7.2)


def test_attach_of_members_in_a_clause_string_attaches_their_struct_once(emulated):
    """V&V ``enter_data_attach.c``: ``enter data attach(data.a, data.b)`` after the
    members are copied in; ``exit data detach(data.a, data.b)`` takes it back (before:
    "takes a struct ... got ndarray")."""
    import types
    from pyacc._attach import attachment_count
    from pyacc._devices import current_runtime
    data = types.SimpleNamespace(a=np.ones(8), b=np.arange(8.0))
    n = 8
    acc.enter_data("copyin(data.a[0:n], data.b[0:n])")
    acc.enter_data("attach(data.a, data.b)")
    assert attachment_count(current_runtime(), data) == 1
    acc.exit_data("detach(data.a, data.b) delete(data.a, data.b)")
    assert attachment_count(current_runtime(), data) == 0 and not acc.is_present(data.a)



@acc.kernels
def mandelbrot_rows(out, n):
    for i in range(n):
        for j in range(n):
            z_re, z_im = 0.0, 0.0
            c: float = (i - j) / n
            for _ in range(20):
                z_re, z_im = z_re * z_re - z_im * z_im + c, 2.0 * z_re * z_im
                if z_re * z_re + z_im * z_im > 4.0:
                    break
            out[i, j] = z_re


@acc.kernels
def fill_by_shape(a):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            a[i, j] = i * 10 + j


@acc.kernels
def inner_temporary_read_after(a, b):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            t = a[i, j] * 2.0
            b[i, j] = t
    b[0, 0] = t


def test_tuple_and_annotated_stores_are_stores(device):
    """``z_re, z_im = 0.0, 0.0`` and ``c: float = ...`` store those names first in each
    iteration: the nest is parallel (the first fix of the carried-scalar test read every
    assignment but ``name = value`` as a read, and then refused the iteration loop's
    ``break``)."""
    assert plan_notes(mandelbrot_rows)[0].parallel
    same_as_python(mandelbrot_rows, np.zeros((6, 6)), 6)


def test_a_bound_read_from_the_arrays_shape_is_no_element_read(device):
    """``range(a.shape[1])`` over the array the nest writes reads its shape, not an
    element: the most common 2-D kernels nest is parallel (before: "'a' is written ...
    and read at line ... (a.shape[1])", sequential)."""
    note = plan_notes(fill_by_shape)[0]
    assert note.parallel, note.reason
    same_as_python(fill_by_shape, np.zeros((3, 5)))


def test_an_inner_loops_temporary_read_after_a_kernels_nest_keeps_the_last_value(device):
    """``t`` of the inner loop, read after the nest: ``kernels`` keeps the region's last
    value (§2.6.2), so the nest runs in order (before: parallel, and on a GPU the read
    after it found no ``t``)."""
    assert not plan_notes(inner_temporary_read_after)[0].parallel
    same_as_python(inner_temporary_read_after, np.arange(12.0).reshape(3, 4), np.zeros((3, 4)))



def _shared_scratch(a, b):
    tmp = np.zeros(1)
    for i in acc.loop(range(a.shape[0]), "gang"):
        for j in acc.loop(range(a.shape[1]), "vector private(tmp)"):
            tmp[0] = a[i, j]
            b[i, j] = tmp[0] * 2.0


def test_a_local_array_private_to_an_inner_loop_but_made_before_the_nest_is_refused():
    """§2.9.10: ``private(tmp)`` on an inner loop, ``tmp`` a local array made before the
    parallel loop: only parameters get per-thread copies there, so every thread would
    share it (a race, silent before on every device); refused, saying how to write it."""
    with pytest.raises(acc.CompileError, match=r"private\(tmp\) on this loop names a local "
                                               r"array made before the parallel loop"):
        acc.parallel(_shared_scratch)


# ============================== 12. kernels loops that leave early run as written (§2.5.3)


@acc.kernels
def first_negative(a):
    found = -1
    for i in range(a.shape[0]):
        if a[i] < 0:
            found = i
            break
    return found


@acc.kernels
def count_until_bigger(a, b):
    for i in range(a.shape[0]):
        c = 0
        for k in range(3):
            if a[i] > k:
                break
            c += 1
        b[i] = c


def test_a_kernels_loop_with_a_break_runs_as_written(device):
    """§2.5.3: in ``kernels`` the compiler decides; a loop no directive marks that
    ``break``s out runs as written, quietly (no PerformanceWarning: ``independent`` could
    not make it parallel); before, a CompileError. An outer loop over it is still
    parallel."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", acc.PerformanceWarning)
        assert first_negative(np.array([1.0, 2.0, -3.0, 4.0, -5.0])) == 2
    assert "runs as written" in plan_notes(first_negative)[0].reason
    assert plan_notes(count_until_bigger)[0].parallel
    same_as_python(count_until_bigger, np.array([-1.0, 0.5, 1.5, 2.5, 9.0]), np.zeros(5))
