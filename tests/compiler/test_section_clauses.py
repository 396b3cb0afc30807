"""Sections and members in data clauses, struct parameters and record dtypes, at the
compiler's level (issue 29 items 1 and 4; OpenACC 3.3 §2.7.1, §2.7.2; API.md §6.2).

1. clause strings and keyword lists take C sections ``a[start:length]`` (also
   ``a[0:n][0:m]``), Fortran sections ``a(lo:hi)`` (1-based, inclusive), members ``s.x``
   (Fortran ``s%x``) and sections of members; bounds are expressions of the parameters
   evaluated at each call (``Section.index``); malformed items are ``CompileError``s
   with a caret;
2. struct parameters are found at decoration (member reads, clause members), and a call
   with a struct runs the function flattened for its layout (``s.x`` → a parameter of
   its own), whose written set knows member writes; a clause naming the struct applies
   to every member without a clause of its own;
3. each record dtype is its own kernel kind.
"""

from collections import namedtuple
from dataclasses import dataclass
import types

import numpy as np
import pytest

from pyacc.compiler import ClauseExpr, CompileError, analyze, argument_kind, get_kernel, parse_clauses
from pyacc.compiler.analysis import MemberError, flat_clauses, flattened, struct_layout
from pyacc.compiler.clause_text import Section


def caret_column(message):
    lines = message.split("\n")
    return lines[-1].index("^") - 4


# ------------------------------------------------------------------------- parsing


def test_c_sections_in_data_clauses_name_their_array():
    """OpenACC 3.3 §2.7.1: ``a[start:length]`` in a data clause names ``a`` and records
    the section; bounds that read parameters are expressions evaluated at each call."""
    clauses = parse_clauses("parallel_loop", "present(a[0:n]) copyin(b[2:5], c)")
    assert clauses.present == ("a",) and clauses.copyin == ("b", "c")
    assert clauses.sections == (("present", Section("a", ((0, ClauseExpr("n")),))),
                                ("copyin", Section("b", ((2, 5),))))
    assert clauses.section_names() == frozenset({"n"})


def test_multidimensional_c_sections_take_one_bracket_per_dimension():
    """OpenACC 3.3 §2.7.1: ``a[0:n][0:m]``: the first dimensions, in order."""
    (_, section), = parse_clauses("parallel", "copy(u[1:n-2][0:m])").sections
    assert section.bounds == ((1, ClauseExpr("n-2")), (0, ClauseExpr("m")))
    assert not section.fortran


def test_fortran_sections_are_one_based_and_inclusive():
    """OpenACC 3.3 §2.7.1 (Fortran): ``a(lo:hi)`` is elements lo..hi counted from 1."""
    (_, section), = parse_clauses("parallel", "copyin(a(2:4, 1:m))").sections
    assert section.fortran
    assert section.index({"m": 3}, (5, 3)) == (slice(1, 4), slice(0, 3))
    (_, whole), = parse_clauses("parallel", "copyin(a(:))").sections
    assert whole.index({}, (7,)) == (slice(0, 7),)


def test_c_section_index_is_start_and_length():
    """OpenACC 3.3 §2.7.1 (C): ``a[start:length]``; an omitted start is 0, an omitted
    length the rest of the dimension; unwritten dimensions are whole."""
    (_, section), = parse_clauses("parallel", "copyin(a[2:n])").sections
    assert section.index({"n": 3}, (10, 4)) == (slice(2, 5),)
    (_, rest), = parse_clauses("parallel", "copyin(a[4:])").sections
    assert rest.index({}, (10,)) == (slice(4, 10),)


def test_section_bounds_are_truncated_as_c_integer_division():
    """OpenACC 3.3 §2.7.1 with C's arithmetic: ``a[0:n/2]`` means ``n/2`` truncated."""
    (_, section), = parse_clauses("parallel", "copyin(a[0:n/2])").sections
    assert section.index({"n": 7}, (10,)) == (slice(0, 3),)


@pytest.mark.parametrize("text, shape, fragment", [
    ("copyin(a[0:n])", (4,), "outside 0..3"),
    ("copyin(a[-1:2])", (4,), "start -1"),
    ("copyin(a(0:2))", (4,), "1-based"),
    ("copyin(a(1:9))", (4,), "outside 1:4"),
    ("copyin(a[0:1][0:1])", (4,), "2 dimensions"),
    ("copyin(a[0:x])", (4,), "must be an integer"),
])
def test_a_section_outside_its_array_is_refused_by_index(text, shape, fragment):
    """OpenACC 3.3 §2.7.1: a section lies inside its array; ``Section.index`` says which
    dimension and by how much (the launcher reports it as InvalidArgumentError)."""
    (_, section), = parse_clauses("parallel", text).sections
    with pytest.raises(ValueError, match=fragment):
        section.index({"n": 9, "x": "text"}, shape)


def test_members_and_member_sections_are_named_as_c_and_fortran_write_them():
    """OpenACC 3.3 §2.7.1: ``s.x``, ``s.x[0:n]``, Fortran ``s%x(1:n)``."""
    clauses = parse_clauses("parallel", "copyin(s, s.x[0:s.n]) copy(s%y(1:n))")
    assert clauses.copyin == ("s", "s.x") and clauses.copy == ("s.y",)
    assert set(clauses.member_names()) == {"s.x", "s.y"}
    assert [section.name for _, section in clauses.sections] == ["s.x", "s.y"]
    assert clauses.section_names() == frozenset({"s", "n"})


def test_keyword_lists_take_sections_and_members_like_clause_strings():
    """API.md §6.2: ``present=["a[0:n]"]`` means ``present(a[0:n])``."""
    assert parse_clauses("parallel", present=["a[0:n]", "s.x"]) == \
        parse_clauses("parallel", "present(a[0 : n], s.x)")
    assert parse_clauses("parallel", copyin="a(1:n) b") == \
        parse_clauses("parallel", "copyin(a(1:n), b)")


def test_private_takes_a_section_of_a_variable():
    """OpenACC 3.3 §2.5.13: ``private(t[0:4])`` (C codes size their private arrays)."""
    clauses = parse_clauses("parallel_loop", "private(t[0:4])")
    assert clauses.private == ("t",) and clauses.sections[0][0] == "private"


@pytest.mark.parametrize("text, fragment", [
    ("present(a[3])", "is an element, not a section"),
    ("present(a(3))", "is an element, not a section"),
    ("present(a[0:n)", "unbalanced"),
    ("present(a[0:n](1:2))", "not both"),
    ("present(a(1:2)(3:4))", "one parenthesis"),
    ("present(a[0:1+])", "not a Python expression"),
    ("present(a[0:lambda: 1])", "lambda"),
    ("deviceptr(d[0:n])", "deviceptr takes device arrays, not sections"),
    ("private(s.x)", "takes variables, not members"),
    ("present(a.)", "is not a parameter name"),
    ("copyin(a[0:n]) copyout(a[n:2])", "is in copyin, copyout with different sections"),
    ("copyin(a[0:2], a[5:2])", "is in copyin with different sections"),
])
def test_malformed_sections_are_compile_errors(text, fragment):
    """OpenACC 3.3 §2.7.1: a section is a range per dimension; a malformed one is a
    CompileError quoting the clause (a caret under the problem), never a silent whole
    array; a construct maps each variable with one section."""
    with pytest.raises(CompileError, match=fragment.replace("(", r"\(")):
        parse_clauses("parallel_loop", text)


def test_the_caret_points_into_the_section():
    """API.md §6: a bad clause's message shows where in the string the problem is."""
    with pytest.raises(CompileError) as raised:
        parse_clauses("parallel_loop", "copyin(x) present(a[0:n][5])")
    assert caret_column(str(raised.value)) == len("copyin(x) present(a[0:n][")


def takes_a(a, n):
    for i in range(n):
        a[i] = 1.0


def test_a_member_of_a_name_that_is_not_a_parameter_is_a_compile_error():
    """OpenACC 3.3 §2.7.1: members of parameters only (the decorator's line)."""
    with pytest.raises(CompileError, match="names a member of 'q', which is not a parameter"):
        analyze(takes_a, parse_clauses("parallel_loop", "copyin(q.x)"))


def test_a_section_of_a_name_that_is_not_a_parameter_is_a_compile_error():
    """OpenACC 3.3 §2.7: a data clause names variables of the region."""
    with pytest.raises(CompileError, match=r"present\(b\) does not name a parameter"):
        analyze(takes_a, parse_clauses("parallel_loop", "present(b[0:n])"))


# ------------------------------------------------------------------------- structs

S = namedtuple("S", "x y n")


def scale_into(s, out):
    for i in range(s.x.shape[0]):
        out[i] = s.x[i] * s.n
        s.y[i] = 2.0 * s.x[i]


def only_array_attributes(a, out):
    for i in range(a.shape[0]):
        out[i] = a.T[i] + a.size


def test_struct_parameters_are_found_by_their_member_reads():
    """OpenACC 2.6 structs (API.md §6.2): a parameter read through attributes that an
    ndarray does not have is a struct parameter, with its member chains in order."""
    info = analyze(scale_into, parse_clauses("parallel_loop"))
    assert info.struct_params == {"s": (("x", "shape"), ("x",), ("n",), ("y",))}
    assert analyze(only_array_attributes, parse_clauses("parallel_loop")).struct_params == {}


def test_a_member_in_a_clause_makes_a_struct_parameter():
    """OpenACC 3.3 §2.7.1: ``copyin(q.x)`` names a member of parameter ``q``."""
    info = analyze(takes_a, parse_clauses("parallel_loop", "copyin(a.x)"))
    assert "a" in info.struct_params


def test_the_flattened_kernel_takes_the_members_as_parameters():
    """OpenACC 3.3 §2.7.2 in pyacc's terms: the kernel takes each member (``s.x`` →
    ``s__x``), and the written set knows member writes (``s.y[i] = ...``), so a member
    the kernel only reads is not copied back."""
    info = analyze(scale_into, parse_clauses("parallel_loop"))
    s = S(np.arange(4.0), np.zeros(4), 3)
    variant = flattened(info, struct_layout(info, (s, np.zeros(4))))
    assert variant.params == ("s__x", "s__n", "s__y", "out")
    assert variant.written == {"s__y", "out"}
    assert variant.labels == {"s__x": "s.x", "s__n": "s.n", "s__y": "s.y"}
    assert flattened(info, struct_layout(info, (s, np.zeros(4)))) is variant


def test_a_kernel_taking_a_struct_computes_what_python_does():
    """API.md §6.2: namedtuple, dataclass and plain objects alike."""

    @dataclass
    class D:
        x: np.ndarray
        y: np.ndarray
        n: int

    info = analyze(scale_into, parse_clauses("parallel_loop"))
    for s in (S(np.arange(5.0), np.zeros(5), 3), D(np.arange(5.0), np.zeros(5), 3),
              types.SimpleNamespace(x=np.arange(5.0), y=np.zeros(5), n=3)):
        out = np.zeros(5)
        get_kernel(info, (s, out), target="cpu")(s, out)
        np.testing.assert_array_equal(out, 3 * np.arange(5.0))
        np.testing.assert_array_equal(s.y, 2 * np.arange(5.0))


def nested(s, out):
    for i in range(out.shape[0]):
        out[i] = s.a.b[i] + s.c


def test_nested_structs_flatten_to_their_leaves():
    """OpenACC 2.6 nested structs: ``s.a.b`` is a member of its own."""
    info = analyze(nested, parse_clauses("parallel_loop"))
    s = types.SimpleNamespace(a=types.SimpleNamespace(b=np.arange(3.0)), c=1.0)
    out = np.zeros(3)
    get_kernel(info, (s, out))(s, out)
    np.testing.assert_array_equal(out, np.arange(3.0) + 1)
    assert flattened(info, struct_layout(info, (s, out))).params == ("s__a__b", "s__c", "out")


def test_a_struct_whose_members_change_gets_its_own_kernel():
    """API.md §6.2: the layout and the members' kinds decide the kernel (caching stays
    correct when an int member becomes a float, or a member set changes)."""
    info = analyze(scale_into, parse_clauses("parallel_loop"))
    out = np.zeros(3)
    ints = S(np.arange(3.0), np.zeros(3), 2)
    floats = S(np.arange(3.0), np.zeros(3), 0.5)
    first = get_kernel(info, (ints, out))
    first(ints, out)
    second = get_kernel(info, (floats, out))
    second(floats, out)
    assert second.kernel is not first.kernel
    np.testing.assert_array_equal(out, 0.5 * np.arange(3.0))
    assert get_kernel(info, (S(np.ones(3), np.zeros(3), 7), out)).kernel is first.kernel


def test_a_missing_member_is_a_member_error():
    """API.md §6.2: the message names the member the kernel reads."""
    info = analyze(scale_into, parse_clauses("parallel_loop"))
    s = types.SimpleNamespace(x=np.arange(3.0), n=1)
    with pytest.raises(MemberError, match="has no member 's.y'"):
        struct_layout(info, (s, np.zeros(3)))


def reads_a_nested_struct_whole(s, out):
    for i in range(out.shape[0]):
        out[i] = s.a


def test_a_struct_read_as_a_value_is_a_member_error():
    """OpenACC 2.6: a kernel takes a struct's arrays and scalars, not a struct."""
    info = analyze(reads_a_nested_struct_whole, parse_clauses("parallel_loop", "copyin(s.b)"))
    s = types.SimpleNamespace(a=types.SimpleNamespace(b=1.0), b=np.zeros(1))
    with pytest.raises(MemberError, match="'s.a' itself"):
        struct_layout(info, (s, np.zeros(3)))


def assigns_a_member(s, out):
    for i in range(out.shape[0]):
        out[i] = s.x[i]
    s.n = 0


def test_assigning_a_member_is_a_compile_error_at_decoration():
    """OpenACC 3.3 §2.5.14: a struct's scalar members are firstprivate values; writing
    one cannot reach the program, so it is refused at the decorator."""
    with pytest.raises(CompileError, match="assigns the member 's.n'"):
        analyze(assigns_a_member, parse_clauses("parallel_loop"))


def helper(s, i):
    return s.x[i]


def passes_the_struct_on(s, out):
    for i in range(out.shape[0]):
        out[i] = helper(s, i) + s.n


def test_passing_the_struct_itself_is_a_compile_error():
    """OpenACC 2.6 in pyacc: a routine gets the members it needs, not the struct."""
    info = analyze(passes_the_struct_on, parse_clauses("parallel_loop"))
    s = S(np.arange(3.0), np.zeros(3), 1)
    with pytest.raises(CompileError, match="uses the struct parameter 's' itself"):
        get_kernel(info, (s, np.zeros(3)))


def test_a_clause_on_the_struct_applies_to_members_without_their_own():
    """OpenACC 3.3 §2.7.1-2.7.2 as C writes it: ``copyin(s) copyout(s.y[0:n])``: the
    member's own clause wins, the struct's covers the others."""
    info = analyze(scale_into, parse_clauses("parallel_loop", "copyin(s) copyout(s.y[0:n])"))
    s = S(np.arange(4.0), np.zeros(4), 3)
    variant = flattened(info, struct_layout(info, (s, np.zeros(4))))
    assert variant.clauses.copyin == ("s__x", "s__n") and variant.clauses.copyout == ("s__y",)
    assert variant.clauses.sections[0][1].name == "s__y"
    evaluated = flat_clauses(info.clauses, variant)
    assert evaluated.copyout == ("s__y",)


def test_a_clause_member_the_kernel_does_not_read_is_still_mapped():
    """OpenACC 3.3 §2.7: a clause maps what it names."""
    info = analyze(scale_into, parse_clauses("parallel_loop", "copyin(s.extra)"))
    s = types.SimpleNamespace(x=np.arange(2.0), y=np.zeros(2), n=1, extra=np.ones(5))
    variant = flattened(info, struct_layout(info, (s, np.zeros(2))))
    assert "s__extra" in variant.params and variant.clauses.copyin == ("s__extra",)


def test_a_clause_member_of_an_array_argument_is_a_member_error():
    """OpenACC 3.3 §2.7.1: ``copyin(s.x)`` needs ``s`` to be a struct at the call."""
    info = analyze(scale_into, parse_clauses("parallel_loop", "copyin(s.x)"))
    with pytest.raises(MemberError, match="argument 's' is a ndarray, not a struct"):
        struct_layout(info, (np.zeros(3), np.zeros(3)))


def test_flat_names_never_collide_with_the_functions_names():
    """Generated member parameters are fresh names."""

    def clash(s, out):
        s__x = 1.0
        for i in range(out.shape[0]):
            out[i] = s.x[i] + s__x

    info = analyze(clash, parse_clauses("parallel_loop"))
    s = types.SimpleNamespace(x=np.arange(3.0))
    out = np.zeros(3)
    get_kernel(info, (s, out))(s, out)
    np.testing.assert_array_equal(out, np.arange(3.0) + 1)
    assert flattened(info, struct_layout(info, (s, out))).params[0] == "s__x_"


# ------------------------------------------------------------------------- records

ENERGY = np.dtype([("energy", "f8"), ("n", "i4")])


def test_each_record_dtype_is_its_own_kernel_kind():
    """Every record dtype has dtype char 'V': the kernel key holds the dtype itself, so
    records with other fields (or alignment) get their own kernel."""
    aligned = np.dtype([("energy", "f8"), ("n", "i4")], align=True)
    floats = np.dtype([("energy", "f4"), ("n", "i4")])
    kinds = {argument_kind(np.zeros(2, dtype)) for dtype in (ENERGY, aligned, floats)}
    assert len(kinds) == 3
    assert argument_kind(np.zeros(2, ENERGY)) == argument_kind(np.ones(5, ENERGY))


def test_one_section_in_two_data_clauses_is_one_copy_clause():
    clauses = parse_clauses("parallel_loop", "copyin(a[0:n]) copyout(a[0:n])")
    assert clauses.data_names() == {"a": "copy"}
    assert [(kind, section.text) for kind, section in clauses.sections] == [("copy", "a[0:n]")]


def test_copyin_and_copyout_of_one_array_copy_it_back(emulated):
    """The V&V suite's copyin_copyout: the region's result reaches the host, in either
    order of the clauses."""
    import pyacc as acc

    for text in ("copyin(t[0:n]) copyout(t[0:n])", "copyout(t) copyin(t)"):
        @acc.parallel_loop(text)
        def increment(t, n):
            for x in range(n):
                t[x] += 1.0

        t = np.ones(16)
        increment(t, 16)
        assert (t == 2.0).all() and not acc.is_present(t)
