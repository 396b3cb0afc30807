"""Array sections in compute-construct clauses, end to end (issue 29 item 1; API.md §6.2;
OpenACC 3.3 §2.7.1).

The rule, on every device type:

* a section is what the clause maps; its bounds are expressions of the parameters,
  evaluated at each call (C ``a[start:length]``, Fortran ``a(lo:hi)``, 1-based);
* the kernel receives the whole parameter (Python's meaning of the argument), so
  - a section covering the whole array (``a[0:n]`` with ``n == len(a)``: the common
    case) is the clause on the array;
  - a proper section of an array that is present as a whole acts on the enclosing
    mapping (counts, no transfer), and the kernel gets the array's device view;
  - a proper section of an array that is not present as a whole cannot stand for the
    array (pyacc passes arrays, not pointers): ``InvalidDataSectionError``
    (``NotPresentError`` for ``present`` of a section that is absent), naming the array,
    the section and both fixes; on ``host`` every array is present;
* a section outside its array, a bound that cannot be evaluated, a section of something
  that is not an array: ``InvalidArgumentError`` at the call; a non-contiguous section:
  ``InvalidDataSectionError``; all before any data action;
* Python slicing of an argument at the call (``f(a[2:5])``) keeps Python's meaning.

Device contents are seen through ``acc.stats()`` and the host arrays after the data
regions; ``device`` runs on host, emulated (and the fake GPU in the simulator run).
"""

import numpy as np
import pytest

import pyacc as acc


def transfers():
    s = acc.stats()
    return s["h2d_bytes"], s["d2h_bytes"]


@acc.parallel_loop("present(a[0:n]) copyout(b[0:n])")
def add_one_present(a, b, n):
    for i in range(n):
        b[i] = a[i] + 1.0


@acc.parallel_loop("copyin(a[0:n]) copy(b[0:n])")
def add_into(a, b, n):
    for i in range(n):
        b[i] += a[i]


@acc.parallel_loop("copyin(a(1:n)) copyout(b(1:n))")
def fortran_double(a, b, n):
    for i in range(n):
        b[i] = 2.0 * a[i]


@acc.parallel_loop("copyin(a[2:3]) copy(b)")
def middle(a, b):
    for i in range(2, 5):
        b[i] = a[i]


@acc.parallel_loop("present(a[2:3])")
def middle_present(a):
    for i in range(2, 5):
        a[i] += 1.0


@acc.parallel_loop("no_create(a[2:3])")
def middle_no_create(a):
    for i in range(2, 5):
        a[i] += 1.0


@acc.parallel_loop(collapse=2, copy=["u[0:n][0:m]"])
def grid_plus_one(u, n, m):
    for i in range(n):
        for j in range(m):
            u[i, j] += 1.0


@acc.parallel_loop("copy(u[1:k])")
def rows_plus_one(u, k):
    for i in range(1, 1 + k):
        for j in range(u.shape[1]):
            u[i, j] += 1.0


@acc.parallel_loop("copy(u[0:n][1:2])")
def columns(u, n):
    for i in range(n):
        u[i, 1] += 1.0


def test_a_whole_array_section_is_the_clause_on_the_array(device):
    """OpenACC 3.3 §2.7.1: ``copyin(a[0:n]) copy(b[0:n])`` with ``n == len``: the arrays
    are mapped whole, copied as the clauses say."""
    a, b = np.arange(6.0), np.ones(6)
    add_into(a, b, 6)
    np.testing.assert_array_equal(b, np.arange(6.0) + 1)
    if device != "host":
        assert transfers() == (96, 48)  # a and b in, b out


def test_a_present_section_inside_a_data_region_is_used_in_place(device):
    """OpenACC 3.3 §2.7.1, §2.7.5: ``present(a[0:n])`` inside a region mapping ``a``."""
    a, b = np.arange(5.0), np.zeros(5)
    with acc.data(copyin=[a]):
        acc.reset_stats()
        add_one_present(a, b, 5)
        if device != "host":
            assert transfers() == (0, 40)  # only b comes back
    np.testing.assert_array_equal(b, np.arange(5.0) + 1)


def test_fortran_sections_cover_lo_to_hi_from_one(device):
    """OpenACC 3.3 §2.7.1 (Fortran): ``a(1:n)`` with ``n == len(a)`` is the array."""
    a, b = np.arange(4.0), np.zeros(4)
    fortran_double(a, b, 4)
    np.testing.assert_array_equal(b, 2 * np.arange(4.0))


def test_the_bounds_are_evaluated_at_each_call(device):
    """API.md §6.1-6.2: a bound is an expression of the parameters read at the call."""
    for n in (3, 7):
        a, b = np.arange(float(n)), np.zeros(n)
        add_into(a, b, n)
        np.testing.assert_array_equal(b, np.arange(float(n)))


def test_every_call_checks_its_sections(separate_memory):
    """OpenACC 3.3 §2.7.1: whole-array calls take the direct path, yet a later call
    whose bounds make a proper section (or leave the array) is still caught."""
    a, b = np.arange(6.0), np.zeros(6)
    for _ in range(3):
        add_into(a, b, 6)  # whole: an ordinary call
    with pytest.raises(acc.InvalidDataSectionError, match=r"copyin\(a\[0:n\]\) maps 4 of the 6"):
        add_into(a, b, 4)
    with pytest.raises(acc.InvalidArgumentError, match="does not fit"):
        add_into(a, b, 7)
    with acc.data(copyin=[a], copy=[b]):
        add_into(a, b, 4)  # proper, inside whole mappings
    np.testing.assert_array_equal(b, [0, 4, 8, 12, 12, 15])


def test_keyword_sections_work_like_strings(device):
    """API.md §6.2: ``copy=["u[0:n][0:m]"]``; two-dimensional whole sections."""
    u = np.zeros((3, 4))
    grid_plus_one(u, 3, 4)
    np.testing.assert_array_equal(u, np.ones((3, 4)))


def test_a_proper_section_of_an_array_present_as_a_whole_acts_on_its_mapping(device):
    """OpenACC 3.3 §2.7.1, API.md §2: a section inside a mapped range is present; the
    clause acts on the enclosing mapping (a count, no transfer) and the kernel gets the
    whole array's device view."""
    a = np.arange(6.0)
    with acc.data(copy=[a]):
        acc.reset_stats()
        middle_present(a)
        if device != "host":
            assert transfers() == (0, 0)
            assert acc.refcounts(a) == (1, 0)
    np.testing.assert_array_equal(a, [0, 1, 3, 4, 5, 5])


def test_a_proper_section_of_an_absent_array_is_refused_on_separate_memory(separate_memory):
    """OpenACC 3.3 §2.7.1: the device copy would hold only the section, and pyacc
    cannot hand the kernel a device view of the whole array from it: the error names
    the array, the section and both fixes, before any data action."""
    a, b = np.arange(6.0), np.zeros(6)
    with pytest.raises(acc.InvalidDataSectionError) as raised:
        middle(a, b)
    message = str(raised.value)
    assert "copyin(a[2:3]) maps 3 of the 6 elements of 'a'" in message
    assert "copyin(a)" in message and "a[lo:hi]" in message
    assert acc.refcounts(a) == (0, 0) and acc.refcounts(b) == (0, 0)
    assert acc.stats()["alloc_count"] == 0
    with pytest.raises(acc.NotPresentError, match=r"present\(a\[2:3\]\): the section"):
        middle_present(a)


def test_the_fixes_named_by_the_error_work(separate_memory):
    """OpenACC 3.3 §2.7.1: map the whole array around the call, or pass the section."""
    a, b = np.arange(6.0), np.zeros(6)
    with acc.data(copyin=[a]):
        middle(a, b)
    np.testing.assert_array_equal(b, [0, 0, 2, 3, 4, 0])


def test_a_proper_section_works_on_the_host_device(host_device):
    """API.md §1: on ``host`` every array is present, so the section is too."""
    a, b = np.arange(6.0), np.zeros(6)
    middle(a, b)
    np.testing.assert_array_equal(b, [0, 0, 2, 3, 4, 0])


@pytest.fixture(params=["host", "emulated"])
def cpu_device(request):
    """The devices whose kernels run on CPU threads (they can read host memory)."""
    return request.getfixturevalue("host_device" if request.param == "host" else "emulated")


def test_no_create_of_an_absent_section_uses_the_host_array(cpu_device):
    """OpenACC 3.3 §2.7.10: ``no_create`` of absent data uses the local data (on cuda
    a kernel cannot take host memory, with or without a section)."""
    a = np.arange(6.0)
    middle_no_create(a)
    np.testing.assert_array_equal(a, [0, 1, 3, 4, 5, 5])


def test_a_section_of_leading_rows_is_contiguous(device):
    """OpenACC 3.3 §2.7.1: a C section of the leading dimension is contiguous; present
    as a whole, the rows map in place."""
    u = np.zeros((4, 3))
    with acc.data(copy=[u]):
        rows_plus_one(u, 2)
    np.testing.assert_array_equal(u[1:3], np.ones((2, 3)))
    assert not u[0].any() and not u[3].any()


def test_a_non_contiguous_section_is_refused(device):
    """API.md §2, OpenACC 3.3 §2.7.1: data clauses map contiguous data only."""
    u = np.zeros((3, 4))
    with pytest.raises(acc.InvalidDataSectionError, match=r"copy\(u\[0:n\]\[1:2\]\) is not contiguous"):
        columns(u, 3)


def test_a_whole_section_of_a_strided_argument_is_the_argument(device):
    """API.md §2: a strided view of present data is handed to the kernel as the
    matching strided device view; a section covering it changes nothing."""
    u = np.zeros(8)
    with acc.data(copy=[u]):
        add_into(np.ones(4), u[::2], 4)
    np.testing.assert_array_equal(u, [1, 0, 1, 0, 1, 0, 1, 0])


@pytest.mark.parametrize("n, fragment", [
    (9, "outside 0..5"),
    (-1, "length -1"),
    ("x", "must be an integer"),
])
def test_a_section_outside_its_array_is_refused_at_the_call(device, n, fragment):
    """OpenACC 3.3 §2.7.1: a section lies inside its array; the error names the clause,
    the array and the dimension, before any data action."""
    a, b = np.arange(6.0), np.zeros(6)
    with pytest.raises(acc.InvalidArgumentError, match=fragment) as raised:
        add_into(a, b, n)
    assert "copyin(a[0:n]) does not fit 'a' (shape (6,))" in str(raised.value)
    assert acc.refcounts(a) == (0, 0)


@acc.parallel_loop("copyin(a[0:missing])")
def reads_an_undefined_name(a):
    for i in range(a.shape[0]):
        a[i] = 0.0


def test_a_bound_reading_an_undefined_name_is_a_compile_error_at_the_first_call(device):
    """API.md §6: bounds read parameters and module-level names."""
    with pytest.raises(acc.CompileError, match=r"copyin\(a\[0:missing\]\) read 'missing'"):
        reads_an_undefined_name(np.zeros(2))


@acc.parallel_loop("copyin(n[0:2])")
def section_of_a_scalar(a, n):
    for i in range(a.shape[0]):
        a[i] = n


def test_a_section_of_a_scalar_is_refused(device):
    """OpenACC 3.3 §2.7.1: a section is of an array."""
    with pytest.raises(acc.InvalidArgumentError, match="'n' is a int, not an array"):
        section_of_a_scalar(np.zeros(2), 3)


def test_if_false_evaluates_no_section(device):
    """OpenACC 3.3 §2.5.6: with a false ``if`` no data clause acts (the region runs on
    the host on host data), so no section is evaluated."""
    a, b = np.arange(3.0), np.zeros(3)
    add_into(a, b, 3, if_=False)
    np.testing.assert_array_equal(b, np.arange(3.0))


def test_an_async_call_with_sections_counts_at_once(device):
    """OpenACC 3.3 §2.16: sections behave the same on a queue."""
    a, b = np.arange(4.0), np.zeros(4)
    add_into(a, b, 4, async_=1)
    acc.wait(1)
    np.testing.assert_array_equal(b, np.arange(4.0))


def test_python_slicing_at_the_call_keeps_its_meaning(device):
    """API.md §6.2: ``f(a[2:5])`` passes the view, and the clause's section is of what
    was passed: ``copyin(a[0:n])`` with ``n == 3`` is the whole view, indexed from 0."""
    a, b = np.arange(8.0), np.full(8, -1.0)
    add_into(a[2:5], b[4:7], 3)
    np.testing.assert_array_equal(b, [-1, -1, -1, -1, 1, 2, 3, -1])


@acc.parallel_loop("private(t[0:3])")
def private_section(x, y):
    t = np.zeros(3)
    for i in range(x.shape[0]):
        t[0] = x[i]
        y[i] = t[0] * 2.0


def test_a_private_section_privatises_the_variable(device):
    """OpenACC 3.3 §2.5.13: ``private(t[0:3])`` as C sizes private arrays."""
    x, y = np.arange(4.0), np.zeros(4)
    private_section(x, y)
    np.testing.assert_array_equal(y, 2 * np.arange(4.0))
