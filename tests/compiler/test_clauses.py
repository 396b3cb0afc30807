"""compiler/clauses.py: clause values, string and keyword spellings, errors."""
from __future__ import annotations

import pytest

from pyacc.compiler import CompileError, ComputeClauses, parse_clauses
from pyacc.compiler.clauses import ASYNC_NOVAL


@pytest.mark.parametrize("construct, text, keywords", [
    ("parallel_loop", "collapse(2) reduction(max:err) present(u, unew) async(1) "
     "vector_length(128)",
     dict(collapse=2, reduction="max:err", present=["u", "unew"], async_=1,
          vector_length=128)),
    ("parallel", "copyin(x) copyout(y), default(present) num_gangs(4) wait(1, 2)",
     dict(copyin="x", copyout="y", default="present", num_gangs=4, wait=[1, 2])),
    ("parallel_loop", "reduction(+:a,b) reduction(max:m) private(t) gang vector",
     dict(reduction=["+:a,b", "max:m"], private="t", gang=True, vector=True)),
    ("kernels_loop", "independent copy(a b) if(0)",
     {"independent": True, "copy": "a, b", "if": 0}),
    ("serial", "firstprivate(k) create(tmp) no_create(z) deviceptr(d)",
     dict(firstprivate=("k",), create="tmp", no_create=["z"], deviceptr="d")),
    ("routine", "seq", dict(seq=True)),
])
def test_clause_string_equals_keywords(construct, text, keywords):
    assert parse_clauses(construct, text) == parse_clauses(construct, **keywords)


def test_values_are_normalised():
    clauses = parse_clauses("parallel_loop", reduction="+:a,b", present="u v",
                            wait=3)
    assert clauses.reductions == (("+", "a"), ("+", "b"))
    assert clauses.present == ("u", "v")
    assert clauses.wait == (3,)
    assert isinstance(clauses, ComputeClauses) and hash(clauses)


def test_bare_async_and_wait():
    clauses = parse_clauses("parallel", "async wait")
    assert clauses.async_ == ASYNC_NOVAL and clauses.wait is True


def test_c_spellings_of_logical_reductions():
    assert parse_clauses("parallel_loop", "reduction(&&:ok) reduction(||:any)") \
        .reductions == (("and", "ok"), ("or", "any"))


@pytest.mark.parametrize("text, fragment", [
    ("colapse(2)", "did you mean 'collapse'"),
    ("collapse(2", "unbalanced '('"),
    ("reduction(foo:x)", "unknown reduction operator 'foo'"),
    ("present(u) $", "expected a clause name"),
    ("collapse(0)", "positive integer"),
    ("collapse(n)", "positive integer"),
    ("reduction(max)", "op:var"),
    ("present()", "needs an argument"),
    ("gang(4)x", "unknown clause 'x'"),
    ("gang-", "unexpected '-'"),
])
def test_malformed_strings_point_at_the_clause(text, fragment):
    with pytest.raises(CompileError) as info:
        parse_clauses("parallel_loop", text)
    message = str(info.value)
    assert fragment in message
    assert text in message and "^" in message


def test_caret_sits_under_the_bad_clause():
    with pytest.raises(CompileError) as info:
        parse_clauses("parallel_loop", "collapse(2) presnt(u)")
    lines = str(info.value).splitlines()
    assert "did you mean 'present'" in lines[0]
    assert lines[2].index("^") == lines[1].index("presnt")


def test_unknown_keyword_suggests():
    with pytest.raises(CompileError, match="did you mean 'copyin'"):
        parse_clauses("parallel", copyn="x")


def test_clause_not_valid_on_construct():
    with pytest.raises(CompileError, match="'collapse' is not valid"):
        parse_clauses("parallel", collapse=2)
    with pytest.raises(CompileError, match="'num_gangs' is not valid"):
        parse_clauses("serial", "num_gangs(2)")


@pytest.mark.parametrize("keywords, fragment", [
    (dict(copyin="x", private="x"), "both copyin and private"),
    (dict(reduction=["+:s", "max:s"]), "given twice"),
    (dict(present=[1]), "not a parameter name"),
    (dict(default="always"), "default must be"),
    (dict(gang="yes"), "True or False"),
])
def test_bad_keyword_values(keywords, fragment):
    with pytest.raises(CompileError, match=fragment):
        parse_clauses("parallel_loop", **keywords)


def test_unknown_construct():
    with pytest.raises(CompileError, match="unknown construct"):
        parse_clauses("teams")


@pytest.mark.parametrize("text, one", [
    ("copyin(t) copyout(t)", "copy"), ("copyout(t) copyin(t)", "copy"),
    ("copy(t) copyout(t)", "copy"), ("create(t) copyin(t)", "copyin"),
    ("present(t) copyout(t)", "present"), ("no_create(t) create(t)", "create"),
    ("copyin(t) copyin(t)", "copyin"),
])
def test_a_variable_in_several_data_clauses_gets_the_clause_they_make_together(text, one):
    """OpenACC 3.3 §2.7 does not forbid it (the V&V suite's copyin_copyout, copy_copyout),
    and the clauses' order may not matter: the one clause that does what they do."""
    clauses = parse_clauses("parallel_loop", text)
    assert clauses.data_names() == {"t": one} and getattr(clauses, one) == ("t",)
