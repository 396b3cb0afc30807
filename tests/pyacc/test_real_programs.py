"""What real OpenACC programs need (API.md §6.1; OpenACC 3.3 §2.5–2.9).

One test (or one parametrised family) per rule, on ``host`` and ``emulated`` wherever data
movement matters:

1. kernels read module-level (global) and closure arrays and scalars (OpenACC 3.3 §2.6.2:
   a global array is present-or-copy like an argument, copyin when never written; a global
   scalar is firstprivate with its value at the call); data clauses may name globals; a
   routine reads the global arrays it uses on the device (declared, §2.15.1);
2. ``private`` naming loop indices (§2.5.13, indices are private already);
3. scalars written in compute regions (§2.6.2: ``kernels`` keeps the value, as an
   ``or``/``and`` reduction or sequentially; ``parallel`` requires a reduction, §2.5.15);
4. ``kernels`` dependence analysis on affine subscripts (§2.5.3);
5. clause values as expressions of the parameters evaluated at each call (§2.5.6, §2.5.10);
6. call-time ``if_=`` (§2.5.6), ``async_=``, ``wait=``;
7. array reductions (§2.5.15, §2.9.11);
8. reduction lists as C writes them;
9. ``declare`` data used in place by kernels (§2.13);
10. bad input refused with a clear error before anything runs (API.md §7), and a partly
    present argument's message suggesting the section (§2.7.3).

Kernels are defined once at module level (each costs a Numba compile) and shared by
parametrised tests. On ``emulated`` device contents are seen through ``acc.deviceptr``.
"""

import re
import warnings

import numpy as np
import pytest

import pyacc as acc
from pyacc.compiler.frontend import Scope, local_names
from pyacc.compiler.planner import Planner


# =========================================================================== fixtures


@pytest.fixture(params=["host", "emulated"])
def device(request):
    """The shared-memory ``host`` device and the ``emulated`` one (separate memory)."""
    return request.getfixturevalue("host_device" if request.param == "host" else "emulated")


def stats():
    s = acc.stats()
    return {k: s[k] for k in ("h2d_count", "d2h_count", "alloc_count", "free_count",
                              "launch_count")}


def expect_stats(**expected):
    got = stats()
    for key, value in expected.items():
        assert got[key] == value, f"{key}: expected {value}, got {got[key]} (all: {got})"


def rc(a):
    return tuple(acc.refcounts(a))


def table():
    return [(r.host_begin, r.host_end, r.structured, r.dynamic) for r in acc.present_table()]


def plan_notes(region):
    info = region.info
    return Planner(info.source, info.clauses,
                   Scope(info.func, local_names(info.source.tree))).plan().notes


# =========================================================================== 1. globals

G_IN = np.arange(8, dtype=np.float64)  # read by kernels, never written
G_ACC = np.zeros(8)  # written by kernels
ALPHA = 2.0


@acc.parallel_loop
def scale_global(y):
    for i in range(y.shape[0]):
        y[i] = ALPHA * G_IN[i]


@acc.parallel_loop
def add_into_global(x):
    for i in range(x.shape[0]):
        G_ACC[i] += x[i]


@acc.parallel_loop
def reads_late_global(y):
    for i in range(y.shape[0]):
        y[i] = LATE[i] + LATE_SCALE


@acc.parallel_loop(present="G_IN")
def scale_present_global(y):
    for i in range(y.shape[0]):
        y[i] = 3.0 * G_IN[i]


@acc.parallel_loop(copyin="G_ACC")
def add_into_global_copyin(x):
    for i in range(x.shape[0]):
        G_ACC[i] += x[i]


@acc.parallel_loop(default="none", copyout="y")
def global_without_clause(y):
    for i in range(y.shape[0]):
        y[i] = G_IN[i]


@acc.parallel_loop(default="present")
def global_default_present(y):
    for i in range(y.shape[0]):
        y[i] = G_IN[i] + 1.0


LATE = np.full(8, 10.0)  # defined after the kernel that reads it
LATE_SCALE = 0.5


def _make_closure_kernel(table_, factor):
    @acc.parallel_loop
    def closure_scale(y):
        for i in range(y.shape[0]):
            y[i] = factor * table_[i]

    def rebind(new_table, new_factor):
        nonlocal table_, factor
        table_, factor = new_table, new_factor

    return closure_scale, rebind


CLOSURE_TABLE = np.arange(8, dtype=np.float64) + 100.0
closure_scale, rebind_closure = _make_closure_kernel(CLOSURE_TABLE, 4.0)


@pytest.fixture
def fresh_globals(monkeypatch):
    """Fresh global arrays for each test (kernels and data regions mutate them)."""
    monkeypatch.setitem(globals(), "G_IN", np.arange(8, dtype=np.float64))
    monkeypatch.setitem(globals(), "G_ACC", np.zeros(8))
    monkeypatch.setitem(globals(), "ALPHA", 2.0)


def test_global_array_and_scalar_are_read_by_kernel(device, fresh_globals):
    """API.md §6.1 / OpenACC 3.3 §2.6.2: a global array read by a kernel is copyin only."""
    y = np.zeros(8)
    scale_global(y)
    np.testing.assert_array_equal(y, 2.0 * G_IN)
    if device == "emulated":
        # G_IN copyin only, y copy in and out
        expect_stats(h2d_count=2, d2h_count=1, alloc_count=2, free_count=2, launch_count=1)
        assert table() == []
        assert rc(G_IN) == (0, 0)


def test_global_array_written_by_kernel_is_copied_back(device, fresh_globals):
    """OpenACC 3.3 §2.6.2: a written global array is present-or-copy."""
    x = np.arange(8, dtype=np.float64)
    add_into_global(x)
    add_into_global(x)
    np.testing.assert_array_equal(G_ACC, 2.0 * x)
    if device == "emulated":
        # each call: x in, G_ACC in and out
        expect_stats(h2d_count=4, d2h_count=2, launch_count=2)
        assert table() == []


def test_global_scalar_is_read_at_each_call(device, fresh_globals):
    """API.md §6.1: a global scalar is firstprivate with its value at the call, never the
    value frozen at the first compile (OpenACC 3.3 §2.6.2)."""
    global ALPHA
    y = np.zeros(8)
    ALPHA = 2.0
    scale_global(y)
    np.testing.assert_array_equal(y, 2.0 * G_IN)
    ALPHA = 5.0
    scale_global(y)
    np.testing.assert_array_equal(y, 5.0 * G_IN)
    ALPHA = -1  # an int now: still a scalar, the value is what counts
    scale_global(y)
    np.testing.assert_array_equal(y, -1.0 * G_IN)


def test_rebinding_global_array_changes_what_kernel_sees(device, fresh_globals):
    """API.md §6.1: names are looked up at each call."""
    global G_IN
    y = np.zeros(8)
    scale_global(y)
    np.testing.assert_array_equal(y, 2.0 * np.arange(8))
    G_IN = np.full(8, 7.0)
    scale_global(y)
    np.testing.assert_array_equal(y, 14.0)
    G_IN = np.arange(8, dtype=np.int64) - 3  # another dtype: compiled again
    scale_global(y)
    np.testing.assert_array_equal(y, 2.0 * (np.arange(8) - 3))
    if device == "emulated":
        assert table() == []


def test_global_defined_after_the_decorated_function(device):
    """API.md §6.1: names defined after the decorator count (they are resolved at the
    first call)."""
    y = np.zeros(8)
    reads_late_global(y)
    np.testing.assert_array_equal(y, 10.5)


def test_closure_array_and_scalar_are_read(device):
    """API.md §6.1: closure variables are read like globals (OpenACC 3.3 §2.6.2)."""
    y = np.zeros(8)
    closure_scale(y)
    np.testing.assert_array_equal(y, 4.0 * CLOSURE_TABLE)
    if device == "emulated":
        assert stats()["d2h_count"] == 1  # y only: the closure array is read-only
        assert table() == []


def test_explain_calls_a_closure_variable_a_closure_variable(emulated):
    """acc.explain names where each free name comes from: a closure variable is not
    module-level (srad's ``q0sqr``, a local of the function around the kernel)."""
    closure_scale(np.zeros(8))
    text = acc.explain(closure_scale)
    assert "table_ (closure): copyin" in text and "factor (closure): firstprivate" in text
    assert "module-level" not in text


EXPLAIN_N, EXPLAIN_TABLE = 8, np.ones(8)


@acc.parallel_loop("default(present)")
def scaled_by_table(b, s):
    for i in range(EXPLAIN_N):
        b[i] = s * EXPLAIN_TABLE[i]


def test_explain_before_the_first_call_knows_the_free_names_values():
    """Before the first call the parameters' types are unknown (said so: "if an array"),
    but a module-level scalar is a scalar already: firstprivate, never default(present)
    (OpenACC 3.3 §2.6.2: default(present) is for aggregates); a module-level array is
    present without the proviso."""
    text = acc.explain(scaled_by_table)
    assert "EXPLAIN_N (module-level): firstprivate (implicit: scalar, §2.6.2)" in text
    assert "EXPLAIN_TABLE (module-level): present (default(present))\n" in text
    assert "s: present (default(present)) if an array" in text


def test_closure_variables_are_read_at_each_call(device):
    """API.md §6.1: rebinding a closure variable (``nonlocal``) changes what the kernel
    sees, like a global."""
    y = np.zeros(8)
    try:
        rebind_closure(np.ones(8), -2.0)
        closure_scale(y)
        np.testing.assert_array_equal(y, -2.0)
        rebind_closure(np.arange(8, dtype=np.int64), 3)  # other dtypes: a new kernel
        closure_scale(y)
        np.testing.assert_array_equal(y, 3.0 * np.arange(8))
    finally:
        rebind_closure(CLOSURE_TABLE, 4.0)
    closure_scale(y)
    np.testing.assert_array_equal(y, 4.0 * CLOSURE_TABLE)


def test_same_array_as_argument_and_global_is_mapped_once(emulated, fresh_globals):
    """A global array also passed as the argument: one mapping (copy), one result."""
    scale_global(G_IN)
    np.testing.assert_array_equal(G_IN, 2.0 * np.arange(8))
    expect_stats(h2d_count=1, d2h_count=1, alloc_count=1, free_count=1)
    assert table() == []


def test_global_array_with_async_call_is_copied_back_after_wait(emulated, fresh_globals):
    """An async call: the global's copy-back happens on the queue (OpenACC 3.3 §2.16)."""
    x = np.arange(8, dtype=np.float64)
    handle = add_into_global(x, async_=3)
    assert table() == []  # counts change at once
    assert handle.result() is None
    acc.wait(3)
    np.testing.assert_array_equal(G_ACC, x)


def test_global_array_with_if_false_uses_host_data(emulated, fresh_globals):
    """``if_=False``: the global is read and written on the host, nothing moves
    (OpenACC 3.3 §2.5.6)."""
    x = np.arange(8, dtype=np.float64)
    with acc.data(copyin=[G_ACC]):
        acc.reset_stats()
        add_into_global(x, if_=False)
        np.testing.assert_array_equal(G_ACC, x)  # the host copy was updated
        np.testing.assert_array_equal(acc.deviceptr(G_ACC), 0.0)
        expect_stats(h2d_count=0, d2h_count=0, launch_count=0)
        assert rc(G_ACC) == (1, 0)


def test_global_array_present_in_data_region_is_used_in_place(emulated, fresh_globals):
    """OpenACC 3.3 §2.6.2: a present global array is used in place: no transfer, no
    count change, and the kernel reads the device copy."""
    y = np.zeros(8)
    with acc.data(copyin=[G_IN]):
        assert rc(G_IN) == (1, 0)
        G_IN[:] = -1.0  # the host changes after the copy-in: the device copy is stale
        acc.reset_stats()
        scale_global(y)
        scale_global(y)
        # y is copied in and out each call; G_IN never moves
        expect_stats(h2d_count=2, d2h_count=2, alloc_count=2, free_count=2, launch_count=2)
        assert rc(G_IN) == (1, 0)
        np.testing.assert_array_equal(y, 2.0 * np.arange(8))  # the device values
    assert rc(G_IN) == (0, 0)
    assert table() == []


def test_written_global_array_in_data_region_stays_on_device(emulated, fresh_globals):
    """OpenACC 3.3 §2.6.2: a present written global is updated on the device only and
    copied back at the region's end."""
    x = np.arange(8, dtype=np.float64)
    with acc.data(copy=[G_ACC]):
        acc.reset_stats()
        add_into_global(x)
        add_into_global(x)
        expect_stats(h2d_count=2, d2h_count=0, launch_count=2)  # x only
        assert rc(G_ACC) == (1, 0)
        np.testing.assert_array_equal(G_ACC, 0.0)  # host not yet updated
        np.testing.assert_array_equal(acc.deviceptr(G_ACC), 2.0 * x)
    np.testing.assert_array_equal(G_ACC, 2.0 * x)
    assert table() == []


def test_global_array_entered_with_enter_data_is_used_in_place(emulated, fresh_globals):
    """A dynamic (enter data) global: used in place, counts unchanged (§2.6.2)."""
    acc.enter_data(copyin=[G_IN])
    try:
        acc.reset_stats()
        y = np.zeros(8)
        scale_global(y)
        assert rc(G_IN) == (0, 1)
        expect_stats(h2d_count=1, d2h_count=1)  # y only
    finally:
        acc.exit_data(delete=[G_IN])
    assert table() == []


def test_data_clause_may_name_a_global_present(device, fresh_globals):
    """API.md §6.1: a data clause may name a global: ``present("G_IN")`` requires it."""
    y = np.zeros(8)
    if device == "emulated":
        with pytest.raises(acc.NotPresentError):
            scale_present_global(y)
        assert table() == []
    with acc.data(copyin=[G_IN]):
        scale_present_global(y)
    np.testing.assert_array_equal(y, 3.0 * G_IN)


LATE_TABLE = None  # a C global pointer: allocated in main, after the kernels


@acc.parallel_loop("copyin(LATE_TABLE)")
def doubles_late_table(y):
    for i in range(y.shape[0]):
        y[i] = 2.0 * LATE_TABLE[i]


NEVER_SET = None


@acc.parallel_loop("present(NEVER_SET)")
def reads_never_set(y):
    for i in range(y.shape[0]):
        y[i] = NEVER_SET[i]


def test_a_data_clause_may_name_a_global_that_is_none_until_the_first_call(emulated):
    """API.md §6.1: globals are looked up at each call, so a data clause may name one
    that holds ``None`` when the function is decorated (``G = None`` for C's global
    pointer, allocated later); before, the clause was refused at decoration."""
    global LATE_TABLE
    LATE_TABLE = np.arange(4.0)
    try:
        y = np.zeros(4)
        doubles_late_table(y)
        np.testing.assert_array_equal(y, 2.0 * np.arange(4.0))
        expect_stats(h2d_count=2, d2h_count=1)  # LATE_TABLE copied in only
    finally:
        LATE_TABLE = None


def test_a_data_clause_naming_a_global_that_is_still_none_says_so_at_the_call(emulated):
    """Bad input: the global is still ``None`` at the first call: a CompileError naming
    it, its value and the fix."""
    with pytest.raises(acc.CompileError, match=r"present\(NEVER_SET\): 'NEVER_SET' is "
                       r"neither a parameter nor a module-level array \(at this call it "
                       r"is NoneType None\): assign the array before the first call"):
        reads_never_set(np.zeros(4))
    assert table() == []


@acc.parallel("copy(total) copyin(a)")
def sum_in_parallel_copy(a):
    total = 0.0
    for i in acc.loop(range(a.shape[0]), reduction="+:total"):
        total += a[i]
    return total


def test_copy_of_a_local_reduction_variable_is_its_result(device):
    """OpenACC 3.3 §2.9.11: C's ``parallel copy(sum)`` around ``loop reduction(+:sum)``:
    the local the function returns is the host's ``sum``, the reduction gives its value
    (before: refused as naming no parameter)."""
    assert sum_in_parallel_copy(np.arange(100.0)) == 4950.0


def test_copy_of_a_local_that_no_loop_reduces_is_refused():
    """Bad input: any other local in ``copy`` is the kernel's own: a CompileError naming
    it and the two fixes."""
    with pytest.raises(acc.CompileError, match=r"copy\(t\) names a local variable of the "
                                               r"function that no loop reduces"):
        @acc.parallel_loop("copy(t)")
        def fills(a):
            t = 0.0
            for i in range(a.shape[0]):
                a[i] = t


def test_data_clause_may_name_a_global_copyin(emulated, fresh_globals):
    """``copyin("G_ACC")`` on a global the kernel writes: not copied back (§2.7.7)."""
    x = np.ones(8)
    add_into_global_copyin(x)
    np.testing.assert_array_equal(G_ACC, 0.0)
    expect_stats(h2d_count=2, d2h_count=0)
    assert table() == []


_ROUTINE_TABLE = np.ones(4)


def _routine_reads_global_array(i):
    return _ROUTINE_TABLE[i]


def test_default_none_requires_a_clause_for_a_global_array(emulated, fresh_globals):
    """Bad input (OpenACC 3.3 §2.5.16): under ``default(none)`` a global array needs a
    data clause like any array."""
    y = np.zeros(8)
    with pytest.raises(acc.InvalidArgumentError, match="G_IN"):
        global_without_clause(y)
    assert table() == []
    expect_stats(h2d_count=0, launch_count=0)


def test_default_present_applies_to_a_global_array(emulated, fresh_globals):
    """``default(present)`` (§2.5.16): an absent global is NotPresentError naming it;
    present, it is used in place."""
    y = np.zeros(8)
    with acc.data(copy=[y]):
        with pytest.raises(acc.NotPresentError, match="G_IN"):
            global_default_present(y)
        assert rc(y) == (1, 0)
        with acc.data(copyin=[G_IN]):
            acc.reset_stats()
            global_default_present(y)
            expect_stats(h2d_count=0, d2h_count=0, launch_count=1)
    np.testing.assert_array_equal(y, G_IN + 1.0)
    assert table() == []


@pytest.mark.parametrize("value, error", [
    ([0.0] * 8, acc.InvalidArgumentError),  # a list: not an array
    ("text", acc.InvalidArgumentError),
], ids=["list", "str"])
def test_global_of_unsupported_type_is_invalid_argument(emulated, monkeypatch, value, error):
    """Bad input: a global that is neither an array nor a numeric scalar is an
    InvalidArgumentError naming it; nothing is mapped."""
    y = np.zeros(8)
    scale_global(y)  # compiled and bound with valid values first
    acc.reset_stats()
    monkeypatch.setitem(globals(), "G_IN", value)
    with pytest.raises(error, match="G_IN"):
        scale_global(y)
    expect_stats(h2d_count=0, launch_count=0)
    assert table() == []


def test_strided_global_view_not_present_is_copied_in(emulated, monkeypatch):
    """A non-contiguous global view that is not present is copied in through a
    contiguous copy (its implicit copyin, OpenACC 3.3 §2.6.2), as an argument is;
    mapped whole first, it is used in place."""
    y = np.zeros(8)
    scale_global(y)
    base = np.arange(16, dtype=np.float64)
    monkeypatch.setitem(globals(), "G_IN", base[::2])
    scale_global(y)
    np.testing.assert_array_equal(y, 2.0 * base[::2])
    assert table() == []
    y[:] = 0
    with acc.data(copyin=[base]):
        scale_global(y)
    np.testing.assert_array_equal(y, 2.0 * base[::2])


@acc.parallel_loop
def calls_a_routine_reading_a_table(y):
    for i in range(y.shape[0]):
        y[i] = _weighted(i)


def _weighted(i):
    return _ROUTINE_WEIGHTS[i] * _routine_reads_global_array(i)


_ROUTINE_WEIGHTS = np.full(4, 0.5)


def test_a_routine_reads_the_declared_global_arrays_on_the_device(device):
    """OpenACC 3.3 §2.15.1: a global a routine uses is declared (``acc.declare``), so on
    the device: the routine reads the device copy (stale until ``update``, on a device
    with its own memory), through a routine that calls it too (each routine takes the
    arrays it reaches as parameters; before, any global array in a routine was refused).
    """
    acc.declare(copyin=[_ROUTINE_TABLE, _ROUTINE_WEIGHTS])
    try:
        y = np.zeros(4)
        calls_a_routine_reading_a_table(y)
        np.testing.assert_array_equal(y, 0.5)
        _ROUTINE_TABLE[:] = 3.0
        calls_a_routine_reading_a_table(y)
        np.testing.assert_array_equal(y, 1.5 if device == "host" else 0.5)
        acc.update(device=[_ROUTINE_TABLE])
        calls_a_routine_reading_a_table(y)
        np.testing.assert_array_equal(y, 1.5)
        assert "present (read by routine _weighted: declared" in \
            acc.explain(calls_a_routine_reading_a_table)
    finally:
        _ROUTINE_TABLE[:] = 1.0
        acc.shutdown()


@acc.routine(seq=True)
def _scaled_entry(i, scale=1.0):
    return _ROUTINE_WEIGHTS[i] * scale


@acc.parallel_loop
def calls_with_keywords_and_defaults(y):
    for i in range(y.shape[0]):
        y[i] = _scaled_entry(i) + _scaled_entry(i, scale=2.0) + _scaled_entry(i, 4.0)


def test_a_routine_call_may_name_its_arguments_and_leave_out_defaults(device):
    """A routine is called as Python calls it: keyword arguments, defaults (numbers)
    filled in — with or without the arrays it reads (before: ``look(i)`` of ``def
    look(i, scale=1.0)`` failed to type, and keywords clashed with those arrays)."""
    acc.declare(copyin=[_ROUTINE_WEIGHTS])
    try:
        y = np.zeros(4)
        calls_with_keywords_and_defaults(y)
        np.testing.assert_array_equal(y, 0.5 * 7.0)
    finally:
        acc.shutdown()


def test_a_routine_call_with_an_unknown_keyword_is_a_compile_error(emulated):
    """Bad input: a keyword the routine does not have is a CompileError naming it."""
    @acc.parallel_loop
    def misnamed(y):
        for i in range(y.shape[0]):
            y[i] = _scaled_entry(i, sc=2.0)

    acc.declare(copyin=[_ROUTINE_WEIGHTS])
    try:
        with pytest.raises(acc.CompileError, match=r"routine _scaled_entry has no parameter 'sc'"):
            misnamed(np.zeros(4))
    finally:
        acc.shutdown()


def _closure_routine_kernel(table):
    @acc.routine(seq=True)
    def entry(i):
        return table[i]

    @acc.parallel_loop
    def copies_entries(out):
        for i in range(out.shape[0]):
            out[i] = entry(i)

    return copies_entries


def test_a_routine_reads_a_declared_closure_array(device):
    """§2.15.1: a routine's closure array (a variable of the function that made it) is
    read on the device like a global one; the kernel, made beside it, has no such name
    itself (before: refused at the first call as a clash of names)."""
    table = np.array([7.0, 8.0, 9.0])
    acc.declare(copyin=[table])
    try:
        out = np.zeros(3)
        _closure_routine_kernel(table)(out)
        np.testing.assert_array_equal(out, table)
    finally:
        acc.shutdown()


def test_a_routines_global_array_that_is_not_on_the_device_is_not_present(emulated):
    """Bad input: a routine's global array the program never put on the device is a
    NotPresentError naming it; nothing is mapped or run."""
    with pytest.raises(acc.NotPresentError, match=r"'_ROUTINE_(TABLE|WEIGHTS), which routine "
                                                  r"_\w+ reads \(acc.declare it"):
        calls_a_routine_reading_a_table(np.zeros(4))
    assert table() == []
    expect_stats(launch_count=0)


def test_kernel_reading_an_undefined_global_is_compile_error(emulated):
    """Bad input: a name defined nowhere is a CompileError at the first call."""
    @acc.parallel_loop
    def reads_nothing_defined(y):
        for i in range(y.shape[0]):
            y[i] = NOT_DEFINED_ANYWHERE[i]  # noqa: F821

    with pytest.raises(acc.CompileError) as info:
        reads_nothing_defined(np.zeros(4))
    assert "NOT_DEFINED_ANYWHERE" in str(info.value)
    assert table() == []


def test_global_deleted_after_first_call_is_a_clear_error(emulated, monkeypatch):
    """Bad input: a global removed after the first call is a NameError naming it."""
    y = np.zeros(8)
    reads_late_global(y)
    monkeypatch.delitem(globals(), "LATE")
    with pytest.raises(NameError, match="LATE"):
        reads_late_global(y)
    assert table() == []


# =========================================================================== 2. private(i)


@acc.parallel_loop(private="i")
def scale_private_index(x, y):
    for i in range(x.shape[0]):
        y[i] = 2.0 * x[i]


@acc.parallel_loop(private="i, j")
def row_sums_private_indices(a, s):
    for i in range(a.shape[0]):
        t = 0.0
        for j in range(a.shape[1]):
            t += a[i, j]
        s[i] = t


def test_private_naming_the_loop_index(device):
    """API.md §6.1 / OpenACC 3.3 §2.5.13: ``private(i)`` of the loop index is accepted
    (the index is private already)."""
    x = np.arange(16, dtype=np.float64)
    y = np.zeros(16)
    scale_private_index(x, y)
    np.testing.assert_array_equal(y, 2.0 * x)


def test_private_naming_outer_and_inner_loop_indices(device):
    """``private(i, j)``: both loop indices, the inner one of a sequential inner loop."""
    a = np.arange(24, dtype=np.float64).reshape(6, 4)
    s = np.zeros(6)
    row_sums_private_indices(a, s)
    np.testing.assert_array_equal(s, a.sum(axis=1))
    if device == "emulated":
        expect_stats(h2d_count=2, d2h_count=1)  # private names map nothing


# =========================================================================== 3. written scalars


@acc.kernels_loop
def kernels_any_negative(x):
    stop = False
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            stop = True
    return stop


@acc.kernels_loop
def kernels_all_positive(x):
    ok = True
    for i in range(x.shape[0]):
        if x[i] <= 0.0:
            ok = False
    return ok


@acc.kernels_loop
def kernels_last_negative(x):
    v = 0.0
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            v = x[i]
    return v


@acc.parallel_loop(reduction="or:stop")
def parallel_any_negative(x):
    stop = False
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            stop = True
    return stop


@acc.parallel_loop("reduction(||:stop)")
def parallel_any_negative_str(x):
    stop = False
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            stop = True
    return stop


FLAG_CASES = [
    (np.ones(50), False),
    (np.concatenate([np.ones(30), [-1.0], np.ones(19)]), True),
    (np.concatenate([[-2.0], np.ones(49)]), True),
    (np.concatenate([np.ones(49), [-3.0]]), True),
    (-np.ones(50), True),
]


@pytest.mark.parametrize("x, expected", FLAG_CASES, ids=["none", "middle", "first", "last", "all"])
def test_kernels_flag_store_becomes_or_reduction(device, x, expected):
    """API.md §6.1 / OpenACC 3.3 §2.6.2: in kernels a scalar stored in the loop is copy:
    ``stop = True`` under a condition returns whether any iteration stored it."""
    result = kernels_any_negative(x)
    assert isinstance(result, (bool, np.bool_)) and bool(result) is expected
    assert bool(kernels_all_positive(x)) is (not (x <= 0.0).any())
    assert bool(parallel_any_negative(x)) is expected
    assert bool(parallel_any_negative_str(x)) is expected


def test_kernels_flag_loops_are_parallel():
    """The flag stores are reductions (or / and): the loops stay parallel (§2.5.3)."""
    for region in (kernels_any_negative, kernels_all_positive):
        notes = plan_notes(region)
        assert notes and all(note.parallel for note in notes), [(n.line, n.reason) for n in notes]


@acc.kernels
def kernels_independent_flag(x):
    stop = False
    for i in acc.loop(range(x.shape[0]), independent=True):
        if x[i] < 0.0:
            stop = True
    return stop


@acc.kernels_loop(independent=True)
def kernels_loop_independent_flag(x):
    ok = True
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            ok = False
    return ok


@pytest.mark.parametrize("x, expected", FLAG_CASES, ids=["none", "middle", "first", "last", "all"])
def test_an_independent_kernels_loop_keeps_the_regions_flag(device, x, expected, monkeypatch):
    """OpenACC 3.3 §2.6.2 and §2.9.9: ``independent`` says the iterations have no
    dependences; the kernels region's scalar stays ``copy``: ``stop = True`` stores are an
    ``or`` (``ok = False``: an ``and``) whether the loop runs on one thread or in parallel
    (Rodinia's BFS ``kernels { loop independent }``; before, the flag kept its first
    value once the loop ran in parallel)."""
    monkeypatch.setenv("PYACC_SERIAL_BELOW", "0")
    assert bool(kernels_independent_flag(x)) is expected
    assert bool(kernels_loop_independent_flag(x)) is (not expected)


@acc.kernels
def independent_sum_and_max(x):
    s, m = 0.0, -1.0
    for i in acc.loop(range(x.shape[0]), independent=True):
        s += x[i]
        if x[i] > m:
            m = x[i]
    return s, m


@acc.kernels
def two_nests_one_inner_index(a, b, n):
    for j in acc.loop(range(n), independent=True):
        for i in acc.loop(range(n), independent=True):
            a[j * n + i] = i + j
    for j in acc.loop(range(n), independent=True):
        for i in acc.loop(range(n), independent=True):
            b[j * n + i] = a[j * n + i] * 2.0


def test_an_independent_kernels_loop_still_finds_its_reductions(device, monkeypatch):
    """§2.9.9 and §2.5.15: an independent loop's sums and maxima are the reductions the
    compiler finds, as without independent (a regression of the flag rule refused them);
    an inner loop's index the next nest's loop assigns again is no kept scalar."""
    monkeypatch.setenv("PYACC_SERIAL_BELOW", "0")
    x = np.arange(1000.0)
    assert independent_sum_and_max(x) == (x.sum(), 999.0)
    a, b = np.zeros(16), np.zeros(16)
    two_nests_one_inner_index(a, b, 4)
    np.testing.assert_array_equal(b, 2.0 * np.add.outer(np.arange(4.0), np.arange(4.0)).ravel())


def test_an_independent_kernels_loop_refuses_a_scalar_needing_the_last_iteration():
    """§2.9.9: independent iterations run in no order, so a scalar whose last value the
    region reads after the loop has no value to keep: refused, naming the reduction."""
    with pytest.raises(acc.CompileError, match=r"'v' is assigned in this independent loop "
                       r"\(line \d+\) and read after it.*reduction=\"\+:v\""):
        @acc.kernels_loop(independent=True)
        def last_value(x):
            v = 0.0
            for i in range(x.shape[0]):
                if x[i] < 0.0:
                    v = x[i]
            return v


@acc.kernels
def two_loops_one_temporary(a, b, n):
    for i in acc.loop(range(n), independent=True):
        t = a[i] * 2.0
        b[i] = t
    for i in acc.loop(range(n), independent=True):
        t = b[i] + 1.0
        a[i] = t


def temporary_then_maybe_stored(a, b, n, flag):
    t = -1.0
    for i in acc.loop(range(n), independent=True):
        t = a[i]
        b[i] = t
    if flag:
        t = 0.0
    return t


def test_a_temporary_the_next_loop_assigns_first_is_no_kept_scalar(device):
    """OpenACC 3.3 §2.6.2: a kernels scalar is kept only if the code after the loop may
    read it before storing it; C's block-scope temporary ``t`` reused by the next loop
    (which assigns it first) is each iteration's own (before: refused as needing the
    last iteration). One stored only on some paths after the loop is still kept."""
    a, b = np.arange(8.0), np.zeros(8)
    two_loops_one_temporary(a, b, 8)
    np.testing.assert_array_equal(b, 2.0 * np.arange(8.0))
    np.testing.assert_array_equal(a, 2.0 * np.arange(8.0) + 1.0)
    assert all(note.parallel for note in plan_notes(two_loops_one_temporary))
    with pytest.raises(acc.CompileError, match=r"'t' is assigned in this independent loop"):
        acc.kernels(temporary_then_maybe_stored)


@acc.parallel_loop("reduction(max:maximum)")
def relative_max(a, b):
    maximum = 0.0
    for i in range(a.shape[0]):
        temp = abs(a[i] - b[i]) / a[i]
        if temp > maximum:
            maximum = temp
    return maximum


@acc.kernels_loop
def smallest_and_largest(a):
    low, high = 1e300, -1e300
    for i in range(a.shape[0]):
        if low > a[i]:
            low = a[i]
        if a[i] > high:
            high = a[i]
    return low, high


@acc.kernels_loop
def keeps_the_last_tie(a):
    m = 0.0
    for i in range(a.shape[0]):
        if a[i] >= m:
            m = a[i]
    return m


def test_an_if_that_keeps_the_larger_value_is_a_max_update(device):
    """OpenACC 3.3 §2.5.15 leaves the update's spelling free: ``if t > m: m = t`` (C's
    ``if (temp > maximum) maximum = temp;``, the lattice Boltzmann GpuSum) is the update
    ``m = max(m, t)``: accepted by ``reduction(max:m)``, found by ``kernels`` (``min``
    for ``m > t``), and the loop stays parallel."""
    rng = np.random.default_rng(5)
    a, b = rng.random(1000) + 1.0, rng.random(1000)
    assert relative_max(a, b) == (np.abs(a - b) / a).max()
    assert smallest_and_largest(a) == (a.min(), a.max())
    assert all(note.parallel for note in plan_notes(smallest_and_largest))
    # ``>=`` takes the element on a tie, which max(m, e) does not: left as written
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", acc.PerformanceWarning)  # (it runs as written)
        assert str(keeps_the_last_tie(np.array([-0.0]))) == "-0.0"


def test_an_if_that_also_does_something_else_is_not_a_max_update():
    """Only ``if e > m: m = e`` alone is the update: an argmax (``m = t; k = i``) is not,
    and ``reduction(max:m)`` refuses it, naming the statement."""
    with pytest.raises(acc.CompileError, match=r"reduction\(max:m\): this statement is "
                                               r"not a 'max' update of 'm'"):
        @acc.parallel_loop("reduction(max:m)")
        def argmax(a):
            m, k = -1.0, 0
            for i in range(a.shape[0]):
                if a[i] > m:
                    m = a[i]
                    k = i
            return m


@acc.kernels_loop
def kernels_flag_read_in_loop(x, y):
    stop = False
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            stop = True
        if stop:
            y[i] = 1.0
    return stop


def test_kernels_flag_read_inside_the_loop_keeps_sequential_semantics(device):
    """OpenACC 3.3 §2.6.2 / §2.5.3: the flag is also read in the loop (``if stop:``), so
    iterations see earlier stores: the loop must keep the sequential meaning."""
    x = np.ones(1000)
    x[10] = -1.0
    y = np.zeros(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", acc.PerformanceWarning)
        assert bool(kernels_flag_read_in_loop(x, y)) is True
    np.testing.assert_array_equal(y, (np.arange(1000) >= 10).astype(np.float64))


@acc.kernels_loop
def kernels_and_flag_read_in_loop(x, y):
    ok = True
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            ok = False
        if ok:
            y[i] = 1.0
    return ok


def test_kernels_and_flag_read_inside_the_loop_keeps_sequential_semantics(device):
    """OpenACC 3.3 §2.6.2: ``ok = False`` stores read in the loop (``if ok:``)."""
    x = np.ones(100)
    x[10] = -1.0
    y = np.zeros(100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", acc.PerformanceWarning)
        assert bool(kernels_and_flag_read_in_loop(x, y)) is False
    np.testing.assert_array_equal(y, (np.arange(100) < 10).astype(np.float64))


def test_kernels_other_live_out_scalar_runs_sequentially_keeping_last_value(device):
    """OpenACC 3.3 §2.6.2: any other scalar the kernels loop assigns and the function reads
    afterwards is kept: the loop runs sequentially and the last value is returned."""
    x = np.array([1.0, -2.0, 3.0, -4.0, 5.0, -6.5, 7.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", acc.PerformanceWarning)
        assert kernels_last_negative(x) == -6.5
        assert kernels_last_negative(np.ones(5)) == 0.0
    notes = plan_notes(kernels_last_negative)
    assert notes and not notes[0].parallel
    assert "'v'" in notes[0].reason


def test_parallel_live_out_scalar_without_reduction_is_compile_error():
    """API.md §6.1 / OpenACC 3.3 §2.5.15: in parallel the scalar is firstprivate; writing
    it and returning it without a reduction is a CompileError naming the variable and
    suggesting ``reduction="or:stop"``."""
    with pytest.raises(acc.CompileError) as info:
        @acc.parallel_loop
        def parallel_flag_without_reduction(x):
            stop = False
            for i in range(x.shape[0]):
                if x[i] < 0.0:
                    stop = True
            return stop
    message = str(info.value)
    assert "'stop'" in message and 'reduction="or:stop"' in message, message


def test_parallel_live_out_plain_assignment_is_compile_error():
    """The same for a non-flag scalar (no silent initial value)."""
    with pytest.raises(acc.CompileError, match="'v'"):
        @acc.parallel_loop
        def parallel_last_without_reduction(x):
            v = 0.0
            for i in range(x.shape[0]):
                if x[i] < 0.0:
                    v = x[i]
            return v


# =========================================================================== 4. dependence


@acc.kernels_loop
def flatten_scaled(a, b):
    n = b.shape[1]
    for i in range(b.shape[0]):
        for j in range(n):
            a[i * n + j] = 2.0 * b[i, j]


@acc.kernels_loop
def lu_step(a, n, k):
    for i in range(k + 1, n):
        a[i * n + k] /= a[k * n + k]
        for j in range(k + 1, n):
            a[i * n + j] -= a[i * n + k] * a[k * n + j]


@acc.kernels_loop
def bump_block(a, m, n):
    for i in range(n):
        for j in range(m):
            a[i * n + j] += 1.0


@acc.kernels_loop
def row_recurrence(a, b):
    n = b.shape[1]
    for i in range(1, b.shape[0]):
        for j in range(n):
            a[i * n + j] = a[(i - 1) * n + j] + b[i, j]


@acc.kernels_loop
def shift_left(a):
    for i in range(a.shape[0] - 1):
        a[i] = a[i + 1]


@acc.kernels_loop
def running_sum(a):
    for i in range(a.shape[0] - 1):
        a[i + 1] += a[i]


def _lu_plain(a, n):
    for k in range(n):
        for i in range(k + 1, n):
            a[i * n + k] /= a[k * n + k]
            for j in range(k + 1, n):
                a[i * n + j] -= a[i * n + k] * a[k * n + j]


def test_affine_flat_subscript_is_parallel(device):
    """OpenACC 3.3 §2.5.3 (kernels: the compiler finds the parallelism): ``a[i*n + j]``
    with ``j in range(n)`` never overlaps between iterations of ``i``."""
    notes = plan_notes(flatten_scaled)
    assert notes and notes[0].parallel, [(n.line, n.reason) for n in notes]
    b = np.arange(35, dtype=np.float64).reshape(5, 7)
    a = np.zeros(35)
    flatten_scaled(a, b)
    np.testing.assert_array_equal(a, 2.0 * b.ravel())


NX, NZ = 6, 4  # miniWeather's globals: every state array is state[(ll*NZ + k)*NX + i]


@acc.kernels_loop("collapse(3)")
def flat_3d_update(a, b, nv):
    for ll in range(nv):
        for k in range(NZ):
            for i in range(NX):
                b[ll * NZ * NX + k * NX + i] = a[(ll * NZ + k) * NX + i] + ll


@acc.kernels_loop("collapse(2)")
def halo_stencil(a, b, n, m):
    for j in range(m):
        for i in range(n):
            b[(j + 1) * (n + 2) + i + 1] = a[(j + 1) * (n + 2) + i] + a[(j + 1) * (n + 2) + i + 2]


@acc.kernels_loop
def halo_planes(a, b, nv, nz, nx, hs):
    for ll in range(nv):
        for k in range(nz):
            for i in range(nx):
                b[ll * (nz + 2 * hs) * (nx + 2 * hs) + (k + hs) * (nx + 2 * hs) + i + hs] = \
                    a[ll * (nz + 2 * hs) * (nx + 2 * hs) + (k + hs) * (nx + 2 * hs) + i + hs] + ll


@acc.kernels_loop
def reads_the_other_row(a):
    for i in range(1, a.shape[1]):
        a[0, i] = a[1, i - 1] * 2.0


@acc.kernels_loop("collapse(2)")
def fills_halo_rows(s, nv, nx, nz):
    for ll in range(nv):
        for i in range(nx):
            s[ll * (nz + 4) * (nx + 4) + 0 * (nx + 4) + i] = s[ll * (nz + 4) * (nx + 4) + 2 * (nx + 4) + i]
            s[ll * (nz + 4) * (nx + 4) + 1 * (nx + 4) + i] = s[ll * (nz + 4) * (nx + 4) + 2 * (nx + 4) + i]


def test_a_constant_row_splits_at_the_sum_the_subscript_multiplies_by(device):
    """§2.5.3: miniWeather's halo rows ``+ 0*(nx + 4) + i``: the row stride ``nx + 4`` is
    no loop index's coefficient, but the subscript multiplies by it, and so it is tried
    (before a symbol alone); parallel when ``nz`` is at least -1 (checked at each call)."""
    notes = plan_notes(fills_halo_rows)
    assert notes[0].parallel, notes[0].reason
    assert all(c.startswith("nz + ") for c in notes[0].conditions), notes[0].conditions
    s, expected = np.arange(2.0 * 7 * 9), np.arange(2.0 * 7 * 9)
    fills_halo_rows(s, 2, 5, 3)
    fills_halo_rows.__wrapped__(expected, 2, 5, 3)
    np.testing.assert_array_equal(s, expected)


def test_two_fixed_rows_never_meet(device):
    """§2.5.3: row 0 written and row 1 read are different elements whatever the columns
    (a dimension where both subscripts are different constants separates them; before,
    the shifted column alone made the loop sequential)."""
    assert plan_notes(reads_the_other_row)[0].parallel
    a = np.arange(20.0).reshape(2, 10)
    expected = a.copy()
    reads_the_other_row(a)
    reads_the_other_row.__wrapped__(expected)
    np.testing.assert_array_equal(a, expected)


def test_a_subscript_with_halos_is_delinearized_by_its_padded_stride(device):
    """§2.5.3: C's halo-padded rows, ``a[(j + 1)*(n + 2) + i + 1]``, split at the stride
    ``n + 2`` (any loop index's coefficient of several terms, read as one symbol): the
    stencil is parallel; miniWeather's ``(k + hs)*(nx + 2*hs) + i + hs`` is parallel when
    ``hs >= 0`` (a condition checked at each call). Before, both ran sequentially."""
    notes = plan_notes(halo_stencil)
    assert notes[0].parallel and not notes[0].conditions, notes[0].reason
    n, m = 5, 4
    a = np.arange((n + 2) * (m + 2), dtype=np.float64)
    b, expected = np.zeros_like(a), np.zeros_like(a)
    halo_stencil(a, b, n, m)
    halo_stencil.__wrapped__(a, expected, n, m)
    np.testing.assert_array_equal(b, expected)
    notes = plan_notes(halo_planes)
    assert notes[0].parallel and [c for c in notes[0].conditions] == ["hs >= 0"]
    a = np.arange(3 * 5 * 7, dtype=np.float64)
    b, expected = np.zeros_like(a), np.zeros_like(a)
    halo_planes(a, b, 3, 1, 3, 2)
    halo_planes.__wrapped__(a, expected, 3, 1, 3, 2)
    np.testing.assert_array_equal(b, expected)


@acc.kernels_loop("collapse(3)")
def flat_3d_plane_write(b, nv):
    for ll in range(nv):
        for k in range(NZ):
            for i in range(NX):
                b[ll * NZ * NX + k * NX] += 1.0


@acc.kernels_loop("collapse(3)")
def flat_3d_shifted(b, nv):
    for ll in range(nv):
        for k in range(NZ):
            for i in range(NX):
                b[ll * NZ * NX + k * NX + i + 1] = b[ll * NZ * NX + k * NX + i]


def test_a_subscript_flattened_over_three_levels_is_delinearized(device):
    """§2.5.3: ``a[(l*nz + k)*nx + i]`` with ``i < nx`` and ``k < nz`` is ``a[l][k][i]``:
    each split's quotient is delinearized again (miniWeather's kernels loops; before,
    the two-level form only, and these ran sequentially blaming the wrong array)."""
    notes = plan_notes(flat_3d_update)
    assert notes and notes[0].parallel, [(n.line, n.reason) for n in notes]
    a = np.arange(3 * NZ * NX, dtype=np.float64)
    b = np.zeros_like(a)
    flat_3d_update(a, b, 3)
    np.testing.assert_array_equal(b, a + np.repeat(np.arange(3.0), NZ * NX))


@pytest.mark.parametrize("region", [flat_3d_plane_write, flat_3d_shifted],
                         ids=["i missing", "i + 1 crosses the row"])
def test_a_flattened_subscript_that_repeats_elements_stays_sequential(device, region):
    """§2.5.3: an element written by two iterations (no ``i`` term; ``i + 1`` reaches
    the next row) is a dependence: the loop runs as written, plain Python's result."""
    assert not plan_notes(region)[0].parallel
    b, expected = np.arange(2.0 * NZ * NX + 1), np.arange(2.0 * NZ * NX + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", acc.PerformanceWarning)
        region(b, 2)
    region.__wrapped__(expected, 2)
    np.testing.assert_array_equal(b, expected)


@acc.kernels_loop
def prefix_pairs(a, n):
    for i in range(n):
        t = 0.0
        for k in range(2):
            if k == 0:
                t = a[i + k]
            else:
                a[i + k] = a[i + k] + t  # a[i+1] += a[i]: a running sum


@acc.kernels_loop
def fills_triples(b, n):
    for i in range(n):
        for k in range(3):
            b[i * 3 + k] = i + 0.5 * k


def test_an_inner_loops_index_in_a_subscript_is_the_other_iterations_own(device):
    """§2.5.3: in ``a[i + k]`` the inner loop's ``k`` takes its own values in another
    iteration of ``i`` (``i + 1 + 0 == i + 1``): no pin of ``i``, the loop stays
    sequential (before: parallel, a race on every second element). ``b[3*i + k]`` with
    ``k < 3`` still pins ``i`` (the gap of two ``k`` is under the stride)."""
    assert not plan_notes(prefix_pairs)[0].parallel
    a, expected = np.ones(200_001), np.ones(200_001)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", acc.PerformanceWarning)
        prefix_pairs(a, 200_000)
    prefix_pairs.__wrapped__(expected, 200_000)
    np.testing.assert_array_equal(a, expected)
    assert plan_notes(fills_triples)[0].parallel
    b = np.zeros(30)
    fills_triples(b, 10)
    np.testing.assert_array_equal(b, np.repeat(np.arange(10.0), 3) + np.tile([0, .5, 1], 10))


def test_lu_step_is_parallel_under_runtime_conditions(device):
    """§2.5.3: the LU update of step ``k`` is parallel when ``k >= 0`` and ``n-1-k >= 0``;
    the factorisation equals a plain Python loop's."""
    notes = plan_notes(lu_step)
    assert notes and notes[0].parallel, [(n.line, n.reason) for n in notes]
    assert notes[0].conditions
    n = 12
    rng = np.random.default_rng(3)
    m = rng.random((n, n)) + n * np.eye(n)  # diagonally dominant: no pivoting needed
    a = m.ravel().copy()
    for k in range(n):
        lu_step(a, n, k)
    expected = m.ravel().copy()
    _lu_plain(expected, n)
    np.testing.assert_allclose(a, expected, rtol=1e-13, atol=1e-13)
    lower = np.tril(a.reshape(n, n), -1) + np.eye(n)
    upper = np.triu(a.reshape(n, n))
    np.testing.assert_allclose(lower @ upper, m, rtol=1e-12, atol=1e-12)


def test_lu_step_with_conditions_false_still_correct(device):
    """A step whose run-time conditions fail (``k = n``: the loop is empty; ``k = -1``
    is out of the proven range) still gives the plain loop's result."""
    n = 5
    m = np.arange(1.0, 26.0).reshape(n, n) + 10 * np.eye(n)
    for k in (n, -1):
        a = m.ravel().copy()
        lu_step(a, n, k)
        expected = m.ravel().copy()
        for i in range(k + 1, n):
            expected[i * n + k] /= expected[k * n + k]
            for j in range(k + 1, n):
                expected[i * n + j] -= expected[i * n + k] * expected[k * n + j]
        np.testing.assert_array_equal(a, expected)


@pytest.mark.parametrize("m, n", [(3, 5), (5, 5), (7, 4), (0, 3)])
def test_runtime_condition_decides_parallel_or_sequential(device, m, n):
    """§2.5.3: ``a[i*n + j]`` with ``j in range(m)`` is parallel only when ``m <= n``
    (a run-time condition); when rows overlap (``m > n``) the result is still the plain
    loop's."""
    notes = plan_notes(bump_block)
    assert notes and notes[0].parallel and notes[0].conditions
    a = np.zeros(64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", acc.PerformanceWarning)
        bump_block(a, m, n)
    expected = np.zeros(64)
    for i in range(n):
        for j in range(m):
            expected[i * n + j] += 1.0
    np.testing.assert_array_equal(a, expected)


def test_row_recurrence_stays_sequential(device):
    """§2.5.3: row ``i`` reads row ``i-1`` (``a[(i-1)*n + j]``): a carried dependence."""
    notes = plan_notes(row_recurrence)
    assert notes and not notes[0].parallel and "'a'" in notes[0].reason
    b = np.ones((100, 10))
    a = np.zeros(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", acc.PerformanceWarning)
        row_recurrence(a, b)
    np.testing.assert_array_equal(a.reshape(100, 10), np.repeat(np.arange(100.0)[:, None], 10, axis=1))


@pytest.mark.parametrize("region, expected", [
    (shift_left, lambda a: np.append(a[1:], a[-1])),
    (running_sum, np.cumsum),
], ids=["shift_left", "running_sum"])
def test_loop_carried_dependence_stays_sequential(device, region, expected):
    """§2.5.3: ``a[i] = a[i+1]`` and ``a[i+1] += a[i]`` carry a dependence: the kernels
    loop runs sequentially (plain Python result)."""
    notes = plan_notes(region)
    assert notes and not notes[0].parallel
    assert "a" in notes[0].reason
    a = np.arange(1.0, 301.0)
    want = expected(a.copy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", acc.PerformanceWarning)
        region(a)
    np.testing.assert_array_equal(a, want)


def test_sequential_kernels_loop_warns_once(emulated):
    """API.md §6.1: a kernels loop that runs sequentially warns (PerformanceWarning)."""
    @acc.kernels_loop
    def shift_left_warns(a):
        for i in range(a.shape[0] - 1):
            a[i] = a[i + 1]

    a = np.arange(10.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shift_left_warns(a)
        shift_left_warns(a)
    perf = [w for w in caught if issubclass(w.category, acc.PerformanceWarning)]
    assert len(perf) == 1, [str(w.message) for w in caught]
    assert "shift_left_warns" in str(perf[0].message)


# =========================================================================== 5. clause values


@acc.parallel_loop("gang((n+127)/128) vector(128)")
def scale_gangs(x, y, n):
    for i in range(n):
        y[i] = 2.0 * x[i]


@acc.parallel_loop("if(n > 100)")
def where_it_ran(flags, n):
    for i in range(n):
        if acc.on_device("host"):
            flags[i] = 1.0
        else:
            flags[i] = 2.0


@acc.parallel_loop(if_=False)
def where_it_ran_if_false(flags, n):
    for i in range(n):
        if acc.on_device("host"):
            flags[i] = 1.0
        else:
            flags[i] = 2.0


IF_THRESHOLD = 100


@acc.parallel_loop("if(n > IF_THRESHOLD)")
def where_it_ran_global_threshold(flags, n):
    for i in range(n):
        if acc.on_device("host"):
            flags[i] = 1.0
        else:
            flags[i] = 2.0


@acc.parallel_loop("num_gangs(g) vector_length(v)")
def fill_with_counts(x, g, v):
    for i in range(x.shape[0]):
        x[i] = 1.0


@pytest.mark.parametrize("n", [1, 127, 128, 129, 1000])
def test_gang_count_expression_evaluated_at_each_call(device, n):
    """API.md §6.1 / OpenACC 3.3 §2.5.10: ``gang((n+127)/128)`` is evaluated with each
    call's ``n``."""
    x = np.arange(1000, dtype=np.float64)
    y = np.zeros(1000)
    scale_gangs(x, y, n)
    np.testing.assert_array_equal(y[:n], 2.0 * x[:n])
    np.testing.assert_array_equal(y[n:], 0.0)


def test_gang_count_expression_evaluating_to_zero_is_invalid_argument(device):
    """Bad input: a count that evaluates to 0 (``(0+127)/128`` truncates to 0) is an
    InvalidArgumentError naming the clause; nothing is mapped."""
    x = np.arange(8, dtype=np.float64)
    y = np.zeros(8)
    with pytest.raises(acc.InvalidArgumentError, match="gang"):
        scale_gangs(x, y, 0)
    np.testing.assert_array_equal(y, 0.0)
    if device == "emulated":
        expect_stats(h2d_count=0, launch_count=0)
        assert table() == []


def test_if_expression_false_runs_on_host_with_host_data(emulated):
    """OpenACC 3.3 §2.5.6: ``if(n > 100)`` false runs on the host on host data, with no
    data action; true runs on the device."""
    flags = np.zeros(1000)
    where_it_ran(flags, 50)
    np.testing.assert_array_equal(flags[:50], 1.0)
    np.testing.assert_array_equal(flags[50:], 0.0)
    expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, launch_count=0)
    flags[:] = 0.0
    where_it_ran(flags, 500)
    np.testing.assert_array_equal(flags[:500], 2.0)
    np.testing.assert_array_equal(flags[500:], 0.0)
    expect_stats(h2d_count=1, d2h_count=1, launch_count=1)
    assert table() == []


def test_if_expression_on_host_device(host_device):
    """On the host device both branches run on the host."""
    flags = np.zeros(200)
    where_it_ran(flags, 50)
    where_it_ran(flags, 150)
    np.testing.assert_array_equal(flags[:150], 1.0)


def test_clause_expression_reads_globals_at_each_call(emulated, monkeypatch):
    """API.md §6.1: clause expressions see the module's globals, with their values at
    the call."""
    flags = np.zeros(50)
    where_it_ran_global_threshold(flags, 50)
    np.testing.assert_array_equal(flags, 1.0)  # 50 > 100 is false: host
    monkeypatch.setitem(globals(), "IF_THRESHOLD", 10)
    where_it_ran_global_threshold(flags, 50)
    np.testing.assert_array_equal(flags, 2.0)  # 50 > 10: device
    expect_stats(launch_count=1)


@pytest.mark.parametrize("g, v", [(1, 1), (3, 32), (2.9, 128)])
def test_count_clause_expressions_valid(device, g, v):
    """``num_gangs(g) vector_length(v)`` from parameters (a float count truncates as C's
    conversion does)."""
    x = np.zeros(16)
    fill_with_counts(x, g, v)
    np.testing.assert_array_equal(x, 1.0)


@pytest.mark.parametrize("g, v, clause", [
    (0, 32, "num_gangs"), (-1, 32, "num_gangs"), (2, 0, "vector_length"),
    ("many", 32, "num_gangs"), (0.5, 32, "num_gangs"),
])
def test_count_clause_expressions_invalid(device, g, v, clause):
    """Bad input: a count that is not a positive integer is an InvalidArgumentError
    naming the clause; nothing is mapped or launched."""
    x = np.zeros(16)
    with pytest.raises(acc.InvalidArgumentError, match=clause):
        fill_with_counts(x, g, v)
    np.testing.assert_array_equal(x, 0.0)
    expect_stats(h2d_count=0, launch_count=0)
    assert table() == []


def test_clause_expression_reading_undefined_name_is_compile_error(emulated):
    """Bad input: a clause expression reading a name that is neither a parameter nor a
    global is a CompileError at the first call."""
    @acc.parallel_loop("if(nn > 100)")
    def undefined_if_name(flags, n):
        for i in range(n):
            flags[i] = 1.0

    flags = np.zeros(8)
    with pytest.raises(acc.CompileError, match="nn"):
        undefined_if_name(flags, 8)
    assert table() == []
    np.testing.assert_array_equal(flags, 0.0)


# =========================================================================== 6. call-time if_


def test_call_time_if_false_runs_on_host_with_no_data_action(emulated):
    """API.md §6.1 / OpenACC 3.3 §2.5.6: ``f(x, if_=False)`` runs on the host on host data
    with no transfers."""
    flags = np.zeros(500)
    where_it_ran(flags, 500, if_=False)
    np.testing.assert_array_equal(flags, 1.0)
    expect_stats(h2d_count=0, d2h_count=0, alloc_count=0, free_count=0, launch_count=0)
    assert table() == []


def test_call_time_if_false_inside_data_region_uses_host_copy(emulated):
    """``if_=False`` with present data: the host copy is written, the device copy is not,
    and counts are unchanged."""
    flags = np.zeros(500)
    with acc.data(copyin=[flags]):
        acc.reset_stats()
        where_it_ran(flags, 500, if_=False)
        np.testing.assert_array_equal(flags, 1.0)
        np.testing.assert_array_equal(acc.deviceptr(flags), 0.0)
        assert rc(flags) == (1, 0)
        expect_stats(h2d_count=0, d2h_count=0, launch_count=0)


def test_call_time_if_true_overrides_false_clause(emulated):
    """A call's ``if_=True`` overrides the decorator's ``if(false)``."""
    flags = np.zeros(20)
    where_it_ran_if_false(flags, 20)
    np.testing.assert_array_equal(flags, 1.0)
    where_it_ran_if_false(flags, 20, if_=True)
    np.testing.assert_array_equal(flags, 2.0)
    expect_stats(launch_count=1, h2d_count=1, d2h_count=1)
    # also over an if(n > 100) expression that is false for this call
    where_it_ran(flags, 10, if_=True)
    np.testing.assert_array_equal(flags[:10], 2.0)
    expect_stats(launch_count=2)


def test_call_time_async_and_wait(emulated):
    """``async_=`` and ``wait=`` at the call (OpenACC 3.3 §2.16)."""
    flags = np.zeros(300)
    handle = where_it_ran(flags, 300, async_=1)
    assert handle.result() is None
    acc.wait(1)
    np.testing.assert_array_equal(flags, 2.0)
    x = np.arange(300, dtype=np.float64)
    y = np.zeros(300)
    scale_gangs(x, y, 300, async_=2)
    where_it_ran(flags, 300, wait=[2])
    acc.wait_all()
    np.testing.assert_array_equal(y, 2.0 * x)
    assert table() == []


# =========================================================================== 7. array reductions


@acc.parallel_loop(reduction="+:hist")
def hist_add(keys, hist):
    for i in range(keys.shape[0]):
        b = keys[i] % hist.shape[0]
        hist[b] += 1


@acc.parallel_loop(reduction="max:out")
def bin_max(keys, v, out):
    for i in range(keys.shape[0]):
        b = keys[i] % out.shape[0]
        out[b] = max(out[b], v[i])


@acc.parallel_loop(reduction="min:out")
def bin_min(keys, v, out):
    for i in range(keys.shape[0]):
        b = keys[i] % out.shape[0]
        out[b] = min(out[b], v[i])


@acc.parallel_loop(reduction="*:out")
def bin_prod(keys, v, out):
    for i in range(keys.shape[0]):
        b = keys[i] % out.shape[0]
        out[b] *= v[i]


@acc.parallel_loop(reduction="|:out")
def bin_or(keys, v, out):
    for i in range(keys.shape[0]):
        b = keys[i] % out.shape[0]
        out[b] |= v[i]


@acc.parallel_loop(reduction="&:out")
def bin_and(keys, v, out):
    for i in range(keys.shape[0]):
        b = keys[i] % out.shape[0]
        out[b] &= v[i]


@acc.parallel_loop(reduction="^:out")
def bin_xor(keys, v, out):
    for i in range(keys.shape[0]):
        b = keys[i] % out.shape[0]
        out[b] ^= v[i]


@acc.parallel_loop(reduction="and:out")
def bin_all(keys, v, out):
    for i in range(keys.shape[0]):
        b = keys[i] % out.shape[0]
        out[b] = out[b] and v[i]


@acc.parallel_loop(reduction="or:out")
def bin_any(keys, v, out):
    for i in range(keys.shape[0]):
        b = keys[i] % out.shape[0]
        out[b] = v[i] or out[b]


@acc.parallel_loop(reduction="+:sums")
def center_sums(x, labels, sums):
    for i in range(x.shape[0]):
        c = labels[i]
        for j in range(x.shape[1]):
            sums[c, j] += x[i, j]


@acc.parallel_loop(reduction="+:hist")
def hist_add_plain_form(keys, hist):
    for i in range(keys.shape[0]):
        b = keys[i] % hist.shape[0]
        hist[b] = hist[b] + 1


@acc.parallel_loop(reduction="+:hist, +:total")
def hist_and_total(keys, hist):
    total = 0
    for i in range(keys.shape[0]):
        hist[keys[i] % hist.shape[0]] += 1
        total += keys[i]
    return total


KEYS = (np.arange(1000, dtype=np.int64) * 7) % 13


def _binned(op, initial, keys, values):
    out = initial.copy()
    for k, v in zip(keys, values):
        b = k % out.shape[0]
        out[b] = op(out[b], v)
    return out


ARRAY_REDUCTIONS = {
    "max": (bin_max, max, lambda: np.linspace(-5.0, 5.0, 1000), np.array([0.0, 100.0, -1e9, 3.0, 4.0])),
    "min": (bin_min, min, lambda: np.linspace(-5.0, 5.0, 1000), np.array([0.0, -100.0, 1e9, 3.0, 4.0])),
    "*": (bin_prod, lambda a, b: a * b, lambda: 1.0 + ((np.arange(1000) % 3) - 1) * 0.001,
          np.array([2.0, -1.0, 0.5, 1.0, 3.0])),
    "|": (bin_or, lambda a, b: a | b, lambda: (np.arange(1000, dtype=np.int64) * 37) % 256,
          np.array([0, 1 << 10, 0, 3, 0], dtype=np.int64)),
    "&": (bin_and, lambda a, b: a & b, lambda: ((np.arange(1000, dtype=np.int64) * 37) % 256) | 0x10,
          np.array([-1, 0xFF, 0x30, 0x1F, -1], dtype=np.int64)),
    "^": (bin_xor, lambda a, b: a ^ b, lambda: (np.arange(1000, dtype=np.int64) * 37) % 256,
          np.array([0, 5, 0, 7, 1 << 12], dtype=np.int64)),
    # (the V&V suite's parallel_loop_reduction_and_general: a[k] = a[k] and v)
    "and": (bin_all, lambda a, b: a and b, lambda: np.arange(1000) % 97 != 3,
            np.array([True, True, False, True, True])),
    "or": (bin_any, lambda a, b: a or b, lambda: np.arange(1000) % 89 == 5,
           np.array([False, True, False, False, False])),
}


def test_array_reduction_histogram(device):
    """API.md §6.1 / OpenACC 3.3 §2.5.15, §2.9.11: ``reduction(+:hist)`` on an array; the
    original values take part once."""
    hist = np.arange(5, dtype=np.int64) * 100  # non-zero start
    hist_add(KEYS, hist)
    np.testing.assert_array_equal(hist, np.arange(5) * 100 + np.bincount(KEYS % 5, minlength=5))
    hist_add(KEYS, hist)
    np.testing.assert_array_equal(hist, np.arange(5) * 100 + 2 * np.bincount(KEYS % 5, minlength=5))
    if device == "emulated":
        assert table() == []


@pytest.mark.parametrize("op", list(ARRAY_REDUCTIONS))
def test_array_reduction_operators(device, op):
    """§2.5.15: ``max``, ``min``, ``*``, ``|``, ``&``, ``^``, ``and``, ``or`` array
    reductions equal a plain loop, the original values included once."""
    region, combine, values, initial = ARRAY_REDUCTIONS[op]
    v = values()
    out = initial.copy()
    region(KEYS, v, out)
    expected = _binned(combine, initial, KEYS, v)
    if out.dtype.kind == "f":
        np.testing.assert_allclose(out, expected, rtol=1e-12)
    else:
        np.testing.assert_array_equal(out, expected)


def test_array_reduction_two_dimensional(device):
    """§2.9.11: a 2-D reduction array (k-means centre sums)."""
    rng = np.random.default_rng(7)
    x = rng.integers(0, 10, size=(200, 3)).astype(np.float64)  # exact sums
    labels = (np.arange(200, dtype=np.int64) * 5) % 4
    sums = np.ones((4, 3))
    center_sums(x, labels, sums)
    expected = np.ones((4, 3))
    for c in range(4):
        expected[c] += x[labels == c].sum(axis=0)
    np.testing.assert_array_equal(sums, expected)


def test_array_reduction_on_a_section_view(device):
    """API.md §6.1: the reduction array may be an array-section view (``hist[2:6]``); the
    elements outside the section are untouched."""
    big = np.full(10, 7, dtype=np.int64)
    hist_add(KEYS, big[2:6])
    expected = np.full(10, 7)
    expected[2:6] += np.bincount(KEYS % 4, minlength=4)
    np.testing.assert_array_equal(big, expected)


def test_array_reduction_written_as_plain_update(device):
    """§2.5.15: ``hist[b] = hist[b] + 1`` is the same update as ``hist[b] += 1``."""
    hist = np.full(6, 3, dtype=np.int64)
    hist_add_plain_form(KEYS, hist)
    np.testing.assert_array_equal(hist, 3 + np.bincount(KEYS % 6, minlength=6))


def test_array_and_scalar_reductions_in_one_list(device):
    """``"+:hist, +:total"``: an array and a scalar reduction together; the call
    returns the scalar."""
    hist = np.zeros(4, dtype=np.int64)
    assert hist_and_total(KEYS, hist) == KEYS.sum()
    np.testing.assert_array_equal(hist, np.bincount(KEYS % 4, minlength=4))


def test_array_reduction_async(emulated):
    """An async array reduction: the result is on the host after the wait."""
    hist = np.zeros(5, dtype=np.int64)
    handle = hist_add(KEYS, hist, async_=2)
    assert handle.result() is None
    acc.wait(2)
    np.testing.assert_array_equal(hist, np.bincount(KEYS % 5, minlength=5))
    assert table() == []


def test_array_reduction_inside_data_region(emulated):
    """A present reduction array is reduced into its device copy (no transfers)."""
    hist = np.full(5, 1, dtype=np.int64)
    with acc.data(copy=[hist], copyin=[KEYS]):
        acc.reset_stats()
        hist_add(KEYS, hist)
        expect_stats(h2d_count=0, d2h_count=0, launch_count=1)
        np.testing.assert_array_equal(hist, 1)
        np.testing.assert_array_equal(acc.deviceptr(hist), 1 + np.bincount(KEYS % 5, minlength=5))
    np.testing.assert_array_equal(hist, 1 + np.bincount(KEYS % 5, minlength=5))
    assert table() == []


def test_array_reduction_reading_the_array_is_compile_error():
    """Bad input (§2.5.15): the loop may not read the reduction array (except its shape)."""
    with pytest.raises(acc.CompileError, match="hist"):
        @acc.parallel_loop(reduction="+:hist")
        def reads_reduction_array(keys, hist, out):
            for i in range(keys.shape[0]):
                b = keys[i] % hist.shape[0]
                hist[b] += 1
                out[i] = hist[b]


def test_array_reduction_plain_store_is_compile_error():
    """Bad input: ``hist[b] = 1`` is not a reduction update."""
    with pytest.raises(acc.CompileError, match="hist"):
        @acc.parallel_loop(reduction="+:hist")
        def stores_into_reduction_array(keys, hist):
            for i in range(keys.shape[0]):
                hist[keys[i] % hist.shape[0]] = 1


@pytest.mark.parametrize("op, written", [("and", "flags[k] = flags[k] and value"),
                                         ("max", "flags[k] = max(flags[k], value)"),
                                         ("+", "flags[k] += value")])
def test_array_reduction_error_says_how_to_write_the_update(op, written):
    """The message shows Python that can be written (there is no ``and=``)."""
    with pytest.raises(acc.CompileError, match=re.escape(f"(write {written})")):
        @acc.parallel_loop(reduction=f"{op}:flags")
        def stores_into_reduction_array(keys, flags):
            for i in range(keys.shape[0]):
                flags[keys[i] % flags.shape[0]] = 1


def test_array_reduction_wrong_operator_update_is_compile_error():
    """Bad input: ``*=`` under ``reduction(+:hist)`` is not the declared operator."""
    with pytest.raises(acc.CompileError, match="hist"):
        @acc.parallel_loop(reduction="+:hist")
        def wrong_operator(keys, hist):
            for i in range(keys.shape[0]):
                hist[keys[i] % hist.shape[0]] *= 2


# =========================================================================== 8. reduction lists


@acc.parallel_loop(reduction="+:mass, +:te")
def mass_energy(m, v):
    mass = 0.0
    te = 0.0
    for i in range(m.shape[0]):
        mass += m[i]
        te += 0.5 * m[i] * v[i] * v[i]
    return mass, te


@acc.parallel_loop("reduction(+:a,b)")
def two_sums(x):
    a = 0.0
    b = 1.0
    for i in range(x.shape[0]):
        a += x[i]
        b += 2.0 * x[i]
    return a, b


@acc.parallel_loop(reduction="+:total max:mx")
def total_and_max(x):
    total = 0.0
    mx = -1.0e300
    for i in range(x.shape[0]):
        total += x[i]
        mx = max(mx, x[i])
    return total, mx


def test_reduction_list_comma_separated(device):
    """API.md §6.1 / OpenACC 3.3 §2.5.15: ``"+:mass, +:te"`` returns a tuple."""
    m = np.arange(1.0, 101.0)
    v = np.arange(100) % 4 * 1.0
    mass, te = mass_energy(m, v)
    assert mass == m.sum()
    assert te == pytest.approx(float((0.5 * m * v * v).sum()), rel=1e-14)


def test_reduction_list_one_operator_several_names(device):
    """``reduction(+:a,b)``: one operator, two variables."""
    x = np.arange(64, dtype=np.float64)
    assert two_sums(x) == (x.sum(), 1.0 + 2.0 * x.sum())


def test_reduction_list_mixed_operators(device):
    """``"+:total max:mx"``: two operators in one string."""
    x = np.concatenate([np.arange(50.0), [-3.0, 999.0, 2.0]])
    result = total_and_max(x)
    assert isinstance(result, tuple)
    assert result == (x.sum(), 999.0)


@pytest.mark.parametrize("text", ["+:a,", "+:", "+:a max:"])
def test_malformed_reduction_list_is_compile_error(text):
    """Bad input: an empty name or list in a reduction list is a CompileError."""
    with pytest.raises(acc.CompileError):
        @acc.parallel_loop(reduction=text)
        def bad_reduction_list(x):
            a = 0.0
            for i in range(x.shape[0]):
                a += x[i]
            return a


# ===================================================== 9. declare with kernels (§2.13)

DECLARED = np.arange(8.0)


@acc.parallel_loop
def reads_declared(y):
    for i in range(y.shape[0]):
        y[i] = DECLARED[i] * 2.0


def test_declared_global_is_used_in_place_by_kernels(emulated):
    """OpenACC 3.3 §2.13: ``declare copyin`` data stays present; a kernel reading the
    global uses the device copy in place (no transfer of it), and the host copy changing
    is not seen until ``update device``."""
    acc.declare(copyin=[DECLARED])
    try:
        assert rc(DECLARED) == (0, 1)
        y = np.zeros(8)
        acc.reset_stats()
        reads_declared(y)
        np.testing.assert_array_equal(y, np.arange(8.0) * 2.0)
        expect_stats(h2d_count=1, d2h_count=1)  # y in and out; DECLARED stays on the device
        DECLARED[:] = 100.0
        reads_declared(y)
        np.testing.assert_array_equal(y, np.arange(8.0) * 2.0)  # the device copy
        acc.update(device=[DECLARED])
        reads_declared(y)
        np.testing.assert_array_equal(y, 200.0)
        assert rc(DECLARED) == (0, 1)
    finally:
        acc.shutdown()
        DECLARED[:] = np.arange(8.0)


# ============================================ 10. bad input: clear errors before running


@acc.parallel_loop
def copies_first(x, y):
    for i in range(x.shape[0]):
        x[i] = y[0]


@pytest.mark.parametrize("bad, words", [
    ([1.0, 2.0], ["'y' is a list", "np.asarray"]),
    ({"a": 1}, ["'y' is a dict"]),
    (np.zeros(3, ">f8"), ["'y'", ">f8", "native-endian"]),
    (np.zeros(3, np.longdouble), ["'y'", "float128", "astype"]),
    (np.zeros(3, object), ["'y'", "object"]),
])
def test_bad_kernel_arguments_are_refused_before_anything_runs(device, bad, words):
    """API.md §7: a list, an object or an array of a dtype kernels cannot use is an
    ``InvalidArgumentError`` naming the argument, raised before any data action."""
    x = np.zeros(3)
    acc.reset_stats()
    with pytest.raises(acc.InvalidArgumentError) as info:
        copies_first(x, bad)
    for word in words:
        assert word in str(info.value), str(info.value)
    expect_stats(h2d_count=0, alloc_count=0, launch_count=0)
    assert table() == []


def test_bad_clause_names_the_decorators_file_and_line():
    """API.md §6: a bad clause is a ``CompileError`` at the decorator's line."""
    with pytest.raises(acc.CompileError) as info:
        @acc.parallel_loop("reduction(max:)")  # MARK-BAD-CLAUSE
        def bad(x):
            for i in range(x.shape[0]):
                x[i] = 1.0
    line = next(n for n, text in enumerate(open(__file__), 1) if "MARK-BAD-CLAUSE" in text
                and "next(" not in text)
    assert info.value.filename == __file__ and info.value.lineno == line
    assert f"{__file__}:{line}" in str(info.value)


@acc.parallel_loop
def raises_its_own_index_error(x):
    for i in range(x.shape[0]):
        if x[i] > 1.0:
            raise IndexError("boom")
        x[i] = 2.0


def test_boundscheck_keeps_the_programs_own_index_error(device, monkeypatch):
    """``PYACC_BOUNDSCHECK=1`` reports bounds errors by array; an ``IndexError`` the kernel
    raises itself is reported as what it is, not as 'index out of bounds on array None'."""
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    with pytest.raises(acc.ExecutionError) as info:
        raises_its_own_index_error(np.full(4, 5.0))
    assert "IndexError: boom" in str(info.value)
    assert "array None" not in str(info.value)


@acc.routine
def ratio_of(x, y):
    if y == 0.0:  # (x / 0.0 itself is inf: NumPy's error model, as on the GPU)
        raise ZeroDivisionError("division by zero")
    return x / y


@acc.parallel_loop
def divides_in_a_routine(a, b, out):
    for i in range(out.shape[0]):
        out[i] = ratio_of(a[i], b[i])


def test_an_exception_raised_in_a_routine_is_reported_as_itself(device):
    """A kernel's failure names the exception the program raised, also when a routine
    the kernel calls raised it (not Python's SystemError about the call)."""
    if device == "cuda":
        pytest.skip("GPU kernels raise no Python exceptions (x / 0.0 is inf there)")
    from pyacc.compiler import threading_layer

    caveat = threading_layer.caveat()  # (the lent H100's image: workqueue, the error lost)
    if caveat is not None:
        pytest.skip(f"{caveat} (tests/compiler/test_threading_layer.py checks it is said)")
    out = np.zeros(4)
    with pytest.raises(acc.ExecutionError, match="ZeroDivisionError: division by zero"):
        try:
            divides_in_a_routine(np.ones(4), np.array([1.0, 0.0, 2.0, 4.0]), out)
        except acc.ExecutionError:
            raise
        else:  # (what ran instead: for the failure's message; an H100 machine's run got here)
            pytest.fail(f"no ExecutionError; out = {out}; {acc.explain(divides_in_a_routine)}")


@acc.parallel_loop
def reads_zero_d(x, s):
    for i in range(x.shape[0]):
        x[i] = s[()] + i


def test_zero_d_array_read_inside_the_loop(device):
    """A 0-d array read in a parallel loop (``s[()]``) is hoisted out of the loop (Numba's
    parallel lowering cannot index it inside)."""
    x = np.zeros(5)
    reads_zero_d(x, np.array(3.0))
    np.testing.assert_array_equal(x, 3.0 + np.arange(5))


@acc.parallel_loop
def writes_zero_d(x, s, found):
    for i in range(x.shape[0]):
        if x[i] > s[()]:
            found[()] = 1
            s[()] = s[()]  # a read of a written 0-d array goes through the same view


def test_zero_d_array_written_inside_the_loop(device):
    """A 0-d array written in a parallel loop (``found[()] = 1``, the flag of a search)
    is written through a one-element view of the same memory (Numba's parallel lowering
    cannot index a 0-d array inside); the write reaches the caller on every device."""
    found, s = np.zeros((), np.int64), np.array(2.5)
    writes_zero_d(np.arange(4.0), s, found)
    assert found == 1 and s == 2.5
    found[()] = 0
    writes_zero_d(np.arange(2.0), s, found)
    assert found == 0


@acc.parallel_loop
def whole_through_empty_index(a):
    for i in range(a.shape[0]):
        a[i] = a[()][i] + 1


def test_empty_index_of_an_n_d_array_is_the_whole_array(device):
    """``a[()]`` of a 1-d array is the array itself (not a 0-d array): left as written."""
    a = np.arange(4.0)
    whole_through_empty_index(a)
    np.testing.assert_array_equal(a, np.arange(4.0) + 1)


def last_index(x):
    for i in range(x.shape[0]):
        x[i] = 1.0
    return i


def last_inner_index(x):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = 1.0
    return x[0, j]


def test_loop_index_read_after_a_parallel_loop_is_refused():
    """OpenACC 3.3 §2.6.1: a parallel loop's index is private, with no value after the
    loop; reading it there is a CompileError naming it (not an arbitrary thread's value),
    at decoration, for every index of a collapsed nest."""
    with pytest.raises(acc.CompileError, match=r"'i' is the index of the parallel loop .*§2\.6\.1"):
        acc.parallel_loop(last_index)
    with pytest.raises(acc.CompileError, match=r"'j' is the index"):
        acc.parallel_loop(collapse=2)(last_inner_index)


def bumps_last_index(x):
    for i in range(x.shape[0]):
        x[i] = 1.0
    i += 1
    return i


def test_loop_index_updated_after_the_loop_is_refused():
    """``i += 1`` reads the private index too (OpenACC 3.3 §2.6.1)."""
    with pytest.raises(acc.CompileError, match=r"'i' is the index of the parallel loop"):
        acc.parallel_loop(bumps_last_index)


def test_loop_index_name_reused_by_a_comprehension_is_fine():
    """A comprehension's ``for i`` is a variable of its own, not the loop's index."""
    @acc.parallel
    def counts(x):
        for i in acc.loop(range(x.shape[0])):
            x[i] = 1.0
        return sum([i for i in range(3)])

    assert counts(np.zeros(4)) == 3


def test_loop_index_of_a_kernels_loop_without_a_directive_keeps_its_last_value():
    """§2.6.1 makes private the index of a loop with a loop directive; a ``kernels``
    loop without one keeps the region's last value, as in the C the region ports."""
    @acc.kernels
    def last(x):
        for i in range(x.shape[0]):
            x[i] = 1.0
        x[0] = i

    x = np.zeros(8)
    last(x)
    assert x[0] == 7.0 and x[1:].sum() == 7.0


def test_loop_index_assigned_again_after_the_loop_is_fine():
    @acc.parallel_loop
    def reuses(x):
        for i in range(x.shape[0]):
            x[i] = 1.0
        i = x.shape[0] - 1
        return i

    x = np.zeros(3)
    assert reuses(x) == 2 and x.sum() == 3.0


def test_loop_index_of_a_sequential_kernels_loop_keeps_pythons_value():
    """A loop that runs as written (seq) is not a private-index loop: Python's value."""
    @acc.kernels
    def scan(x):
        for i in range(1, x.shape[0]):
            x[i] += x[i - 1]
        return i

    with pytest.warns(acc.PerformanceWarning):
        assert scan(np.ones(4)) == 3


@acc.parallel_loop
def whole_vector(x):
    for i in range(x.shape[0]):
        x[i] += 1.0


def test_partly_present_argument_suggests_the_section(emulated):
    """OpenACC 3.3 §2.7.3: a kernel over a whole array of which only a section is present
    is an error; the message says to pass the present section."""
    x = np.zeros(100)
    with acc.data(copy=[x[10:20]]):
        with pytest.raises(acc.PartlyPresentError, match="pass the section that is present"):
            whole_vector(x)
        assert rc(x[10:20]) == (1, 0)
        whole_vector(x[10:20])  # the suggested fix
    np.testing.assert_array_equal(x[10:20], 1.0)
    assert table() == []


@acc.parallel_loop
def divides_by(x, d):
    for i in range(x.shape[0]):
        x[i] = x[i] / d


@acc.parallel_loop(reduction="+:s")
def sums_quotients(x, d):
    s = 0
    for i in range(x.shape[0]):
        s += int(x[i]) // d
    return s


@pytest.mark.parametrize("n", [10, 100_000], ids=["one thread", "parallel"])
def test_a_division_by_zero_gives_numpys_result_at_any_trip_count(device, n):
    """NumPy's error model (``CpuTarget.decorator``): ``x / 0.0`` is inf and ``k // 0`` is
    0, as NumPy gives for the elements and the GPU gives, whether the nest runs on one
    thread (below ``PYACC_SERIAL_BELOW``) or in parallel, and in a reduction; before, the
    one-thread run raised ZeroDivisionError and the parallel one did not."""
    x = np.ones(n)
    divides_by(x, 0.0)
    assert np.isinf(x).all()
    assert sums_quotients(np.ones(n), 0) == 0


@acc.parallel_loop(reduction="+:total")
def sum_of_pairs(a, b, total):
    for x in range(a.shape[0]):
        total += a[x] + b[x]
    return total


@pytest.mark.parametrize("dtype, start, expected", [
    (np.int8, 10, np.int8(98)),     # 10 + 600 wraps as NumPy's and C's int8 do
    (np.uint8, 10, np.uint8(98)),
    (np.int16, 10, 610),
    (np.bool_, True, True),         # the V&V suite's type_check_pt1 (_Bool)
])
def test_a_narrow_reduction_variable_keeps_its_types_values(device, dtype, start, expected):
    """OpenACC 3.3 §2.5.15: the reduction result is of the variable's type (Numba widens
    int8 arithmetic to int64; the returned value is wrapped back into int8's values; a
    float result stays a float, as NumPy's arithmetic makes one)."""
    a = np.ones(300, dtype)
    assert sum_of_pairs(a, a, dtype(start)) == expected
    assert sum_of_pairs(a, a, 10) == 610  # a Python int: int64
    assert sum_of_pairs(np.full(2, 150.5), np.zeros(2), dtype(start)) == 301.0 + start
