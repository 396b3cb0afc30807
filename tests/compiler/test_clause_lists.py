"""compiler/clauses.py: clause lists as C writes them, and call-time clause values.

API.md §6.1 "Clause lists as C writes them" and "Call-time clause values";
OpenACC 3.3 §2.5.9-2.5.15 (parallel clauses), §2.9 (loop clauses), §2.16 (async, wait).
"""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from pyacc.compiler import CompileError, parse_clauses
from pyacc.compiler.clauses import ClauseExpr, count_value


def caret_column(message: str) -> int:
    """Index into the quoted clause text of the caret under it."""
    lines = message.splitlines()
    return lines[-1].index("^") - lines[-2].index(lines[-2].strip())


def quoted(message: str) -> str:
    return message.splitlines()[-2].strip()


# ----------------------------------------------------------------------- reduction lists


@pytest.mark.parametrize("text, keywords", [
    ("reduction(+:a,b)", dict(reduction="+:a, +:b")),
    ("reduction(+:a,b)", dict(reduction="+:a,b")),
    ("reduction(+:a, +:b)", dict(reduction=["+:a", "+:b"])),
    ("reduction(+:a b)", dict(reduction="+:a +:b")),
    ("reduction(+:mass, +:te)", dict(reduction="+:mass, +:te")),
    ("reduction(+:total max:mx)", dict(reduction="+:total max:mx")),
    ("reduction(+:total) reduction(max:mx)", dict(reduction="+:total, max:mx")),
    ("reduction( + : a , b  max : c )", dict(reduction=["+:a,b", "max:c"])),
])
def test_reduction_list_spellings_are_equal(text, keywords):
    """OpenACC 3.3 §2.5.15: ``reduction(op:var-list)`` as C writes it, with several
    items (``+:a, +:b``, ``+:a max:b``) and several clauses, equals the keyword form."""
    assert parse_clauses("parallel_loop", text) == parse_clauses("parallel_loop",
                                                                 **keywords)


def test_reduction_items_keep_their_operators_in_order():
    """OpenACC 3.3 §2.5.15: each item starts at ``op:`` and its names follow."""
    clauses = parse_clauses("parallel_loop", "reduction(+:mass, +:te max:mx,my *:p)")
    assert clauses.reductions == (("+", "mass"), ("+", "te"), ("max", "mx"),
                                  ("max", "my"), ("*", "p"))
    assert parse_clauses("parallel_loop", reduction="+:mass, +:te").reductions == (
        ("+", "mass"), ("+", "te"))


def test_every_reduction_operator_and_its_c_alias():
    """OpenACC 3.3 §2.5.15: operators ``+ * max min & | ^ && ||`` (``and``/``or``)."""
    text = "reduction(+:a *:b max:c min:d &:e |:f ^:g and:h or:i &&:j ||:k)"
    ops = tuple(op for op, _ in parse_clauses("parallel_loop", text).reductions)
    assert ops == ("+", "*", "max", "min", "&", "|", "^", "and", "or", "and", "or")
    assert parse_clauses("parallel_loop", reduction="&&:ok ||:any").reductions == (
        ("and", "ok"), ("or", "any"))


def test_names_that_spell_operators_are_variables_without_a_colon():
    """OpenACC 3.3 §2.5.15: only ``op:`` starts an item, so a variable may be called
    ``max``."""
    assert parse_clauses("parallel_loop", "reduction(+:max, min)").reductions == (
        ("+", "max"), ("+", "min"))


def test_reduction_variable_twice_across_items_is_an_error():
    """OpenACC 3.3 §2.5.15: a variable appears in one reduction only."""
    with pytest.raises(CompileError, match="'a' given twice"):
        parse_clauses("parallel_loop", "reduction(+:a max:a)")


@pytest.mark.parametrize("text, fragment, column", [
    ("reduction(max:)", "'max:' names no variable", 10),
    ("reduction(:x)", "missing reduction operator", 10),
    ("reduction(+:a,)", "empty item", 13),
    ("reduction(+:,a)", "empty item", 12),
    ("reduction(+:a,,b)", "empty item", 14),
    ("reduction(+:a max:)", "'max:' names no variable", 14),
    ("reduction(+: max:b)", "'+:' names no variable", 10),
    ("reduction(-:a)", "unknown reduction operator '-'", 10),
    ("reduction(maxx:a)", "did you mean 'max'", 10),
    ("reduction(a, b)", "op:var", 10),
    ("reduction(+:a[0:n])", "unexpected '['", 13),
    ("reduction( )", "needs an argument", 10),
])
def test_malformed_reduction_lists_are_errors_with_a_caret(text, fragment, column):
    """OpenACC 3.3 §2.5.15: an empty or malformed reduction list is a CompileError
    whose caret sits under the fault, never an empty clause."""
    with pytest.raises(CompileError) as info:
        parse_clauses("parallel_loop", text)
    message = str(info.value)
    assert fragment in message and quoted(message) == text
    assert caret_column(message) == column, message


@pytest.mark.parametrize("value, fragment", [
    ("max:", "'max:' names no variable"),
    (["+:a", "max:"], "'max:' names no variable"),
    (["+:a", "b"], "op:var"),
    (["+:a", ""], "empty reduction list"),
    ("+:a,", "empty item"),
    ("foo:x", "unknown reduction operator 'foo'"),
    ([3], "op:var"),
])
def test_malformed_keyword_reductions_are_errors(value, fragment):
    """OpenACC 3.3 §2.5.15: the keyword form follows the same rules, with a caret under
    the offending string."""
    with pytest.raises(CompileError) as info:
        parse_clauses("parallel_loop", reduction=value)
    assert fragment in str(info.value)


def test_empty_keyword_reduction_means_none():
    """API.md §6: an empty keyword string or list names nothing (no reduction)."""
    assert parse_clauses("parallel_loop", reduction="").reductions == ()
    assert parse_clauses("parallel_loop", reduction=[]).reductions == ()


# ---------------------------------------------------------------------------- name lists


@pytest.mark.parametrize("text", ["present(,)", "copyin()", "private( , )", "copy(a,,b)",
                                  "create(a,)", "present(, a)", "firstprivate()"])
def test_empty_name_lists_in_strings_are_errors(text):
    """OpenACC 3.3 §2.7 (var-list): a data or private clause names at least one
    variable; an empty list or item in a clause string is a CompileError with a caret."""
    with pytest.raises(CompileError) as info:
        parse_clauses("parallel_loop", text)
    message = str(info.value)
    assert ("empty item" in message or "needs an argument" in message)
    assert quoted(message) == text and "^" in message


def test_empty_name_list_caret_sits_at_the_empty_item():
    """OpenACC 3.3 §2.7: the caret points at where the missing name should be."""
    with pytest.raises(CompileError) as info:
        parse_clauses("parallel_loop", "copyin(x) copy(a,,b)")
    assert caret_column(str(info.value)) == len("copyin(x) copy(a,")


def test_name_lists_take_commas_and_blanks():
    """API.md §6: names are separated by commas and/or blanks."""
    assert parse_clauses("parallel", "present(a, b c,d)").present == ("a", "b", "c", "d")
    assert parse_clauses("parallel", present="a, b c") == parse_clauses(
        "parallel", "present(a b, c)")


def test_empty_keyword_name_list_means_no_names():
    """API.md §6: ``present=""`` or ``present=[]`` names nothing."""
    assert parse_clauses("parallel", present="").present == ()
    assert parse_clauses("parallel", copyin=[]).copyin == ()


@pytest.mark.parametrize("value, fragment", [
    ("a,,b", "empty item"), ("a b-c", "'b-c' is not a parameter name"),
    ([1], "not a parameter name"),
])
def test_malformed_keyword_name_lists_are_errors(value, fragment):
    """OpenACC 3.3 §2.7: a keyword list names parameters only."""
    with pytest.raises(CompileError, match=fragment):
        parse_clauses("parallel", present=value)


# ------------------------------------------------------------------- call-time values


@pytest.mark.parametrize("text, field, expr", [
    ("gang((naa+127)/128) vector(128)", "num_gangs", "(naa+127)/128"),
    ("gang(num:(n+127)/128)", "num_gangs", "(n+127)/128"),
    ("num_gangs(n // 128)", "num_gangs", "n // 128"),
    ("worker(num: w)", "num_workers", "w"),
    ("num_workers(min(w, 8))", "num_workers", "min(w, 8)"),
    ("vector(length:x.shape[0])", "vector_length", "x.shape[0]"),
    ("vector_length(len(x) if n > 0 else 32)", "vector_length", "len(x) if n > 0 else 32"),
])
def test_count_clauses_take_expressions_of_the_parameters(text, field, expr):
    """OpenACC 3.3 §2.5.10-2.5.12, §2.9.2-2.9.4: counts are int-expr; in a clause
    string a non-literal count is a ClauseExpr evaluated at each call."""
    clauses = parse_clauses("parallel_loop", text)
    assert getattr(clauses, field) == ClauseExpr(expr)
    assert clauses.expressions()[field] == ClauseExpr(expr)


def test_literal_counts_stay_ints():
    """OpenACC 3.3 §2.5.10-2.5.12: literals keep today's value; name-free expressions
    are folded at parse time, truncated as C integer division."""
    clauses = parse_clauses("parallel_loop", "gang(4) worker(num:2) vector(length:128)")
    assert (clauses.num_gangs, clauses.num_workers, clauses.vector_length) == (4, 2, 128)
    assert clauses.gang and clauses.worker and clauses.vector
    assert parse_clauses("parallel_loop", "gang((1000+127)/128)").num_gangs == 8
    assert parse_clauses("parallel", "num_gangs(2*64)") == parse_clauses("parallel",
                                                                         num_gangs=128)
    assert clauses.expressions() == {} and clauses.expression_names() == frozenset()


@pytest.mark.parametrize("text, fragment", [
    ("num_gangs(0)", "positive integer"),
    ("gang(-1)", "positive integer"),
    ("vector(1/2)", "vector evaluated to 0.5 (truncated to 0)"),
    ("num_gangs(1/0)", "cannot be evaluated"),
    ("gang(static:4)", "gang(static:...) is not supported"),
    ("vector(num:4)", "expected vector(n) or vector(length:n)"),
    ("gang()", "needs an argument"),
])
def test_non_positive_or_malformed_counts_fail_at_parse_time(text, fragment):
    """OpenACC 3.3 §2.5.10-2.5.12: a count known at parse time must be positive."""
    with pytest.raises(CompileError) as info:
        parse_clauses("parallel_loop", text)
    assert fragment in str(info.value) and "^" in str(info.value)


def test_if_async_and_wait_take_expressions():
    """OpenACC 3.3 §2.5.6 (if), §2.16.1 (async), §2.16.2 (wait): non-literal values
    become ClauseExprs; literal ones stay as they are."""
    clauses = parse_clauses("parallel", "if(n > 100) async(q) wait(q1, q2, 3)")
    assert clauses.if_ == ClauseExpr("n > 100")
    assert clauses.async_ == ClauseExpr("q")
    assert clauses.wait == (ClauseExpr("q1"), ClauseExpr("q2"), 3)
    assert clauses.expressions() == {
        "if_": ClauseExpr("n > 100"), "async_": ClauseExpr("q"),
        "wait[0]": ClauseExpr("q1"), "wait[1]": ClauseExpr("q2")}
    assert clauses.expression_names() == frozenset({"n", "q", "q1", "q2"})
    literal = parse_clauses("parallel", "if(0) async(1) wait(queues: 1, 2)")
    assert (literal.if_, literal.async_, literal.wait) == (0, 1, (1, 2))


def test_wait_list_splits_only_at_top_level_commas():
    """OpenACC 3.3 §2.16.2: ``wait(int-expr-list)``; an expression may hold commas."""
    assert parse_clauses("parallel", "wait(min(a, b), c[1, 2])").wait == (
        ClauseExpr("min(a, b)"), ClauseExpr("c[1, 2]"))


@pytest.mark.parametrize("text, fragment", [
    ("wait(1,,2)", "empty item"), ("wait()", "needs an argument"),
    ("async()", "needs an argument"), ("if()", "needs an argument"),
    ("if(n &&)", "not a Python expression"), ("wait(devnum:1:q)", "not supported"),
])
def test_malformed_call_time_values_are_errors(text, fragment):
    """OpenACC 3.3 §2.5.6, §2.16: an empty or unparsable value is a CompileError."""
    with pytest.raises(CompileError) as info:
        parse_clauses("parallel", text)
    assert fragment in str(info.value) and "^" in str(info.value)


def test_keyword_strings_for_if_async_wait_read_as_in_a_clause_string():
    """API.md §6.1: ``if_="n > 100"`` means ``if(n > 100)``, not a truthy string."""
    assert parse_clauses("parallel", if_="n > 100") == parse_clauses("parallel",
                                                                     "if(n > 100)")
    assert parse_clauses("parallel", async_="q", wait="q1, 2") == parse_clauses(
        "parallel", "async(q) wait(q1, 2)")
    assert parse_clauses("parallel", wait=["q", 2]).wait == (ClauseExpr("q"), 2)


def test_keyword_counts_must_be_ints():
    """API.md §6.1: keyword counts are ints; a string suggests the clause-string form."""
    with pytest.raises(CompileError) as info:
        parse_clauses("parallel", num_gangs="n/128")
    assert '"num_gangs(n/128)"' in str(info.value)
    with pytest.raises(CompileError, match="positive integer"):
        parse_clauses("parallel", vector_length=0)


def test_expression_given_twice_with_different_values_is_an_error():
    """OpenACC 3.3 §2.5.10: one construct has one gang count."""
    with pytest.raises(CompileError, match="given twice"):
        parse_clauses("parallel_loop", "num_gangs(n) gang(m)")
    same = parse_clauses("parallel_loop", "num_gangs(n) gang(n)")
    assert same.num_gangs == ClauseExpr("n")


# ----------------------------------------------------------------------- ClauseExpr


def test_clause_expr_is_a_hashable_value_equal_by_text():
    """API.md §6.1: a ClauseExpr is a frozen value; equal and hashed by its text."""
    a, b = ClauseExpr(" (n+127)/128 "), ClauseExpr("(n+127)/128")
    assert a == b and hash(a) == hash(b) and a.text == "(n+127)/128"
    assert a != ClauseExpr("(n+128)/128") and len({a, b}) == 1
    assert repr(a) == "ClauseExpr('(n+127)/128')"
    with pytest.raises(AttributeError):
        a.text = "n"
    assert pickle.loads(pickle.dumps(a)) == a
    assert copy.deepcopy(a).evaluate({"n": 1}) == 1.0
    clauses = parse_clauses("parallel_loop", "gang((n+127)/128) if(n > 0)")
    again = parse_clauses("parallel_loop", "gang((n+127)/128) if(n > 0)")
    assert hash(clauses) == hash(again) and clauses == again


def test_clause_expr_names_are_the_free_names_it_reads():
    """API.md §6.1: names lists parameters/globals in order of use, not builtins."""
    assert ClauseExpr("min(n, m) + x.shape[0] * len(y) + n").names == ("n", "m", "x", "y")
    assert ClauseExpr("128").names == ()


def test_clause_expr_evaluates_in_the_given_namespace():
    """API.md §6.1: values of the parameters by name, then the function's globals."""
    expr = ClauseExpr("(naa + 127) / 128 + len(x) - LIMIT")
    namespace = {"naa": 1000, "x": [1, 2], "LIMIT": 2}
    assert expr.evaluate(namespace) == pytest.approx(1127 / 128)
    assert namespace == {"naa": 1000, "x": [1, 2], "LIMIT": 2}  # not modified
    assert ClauseExpr("x.shape[0] // 2").evaluate({"x": np.zeros(10)}) == 5
    with pytest.raises(NameError):
        ClauseExpr("n + 1").evaluate({})
    with pytest.raises(NameError):  # only the listed builtins are visible
        ClauseExpr("open").evaluate({})


@pytest.mark.parametrize("text, fragment, column", [
    ("lambda: 3", "a lambda", 0),
    ("n + [i for i in x][0]", "comprehension", 4),
    ("(k := 3)", "assignment expression", 1),
    ("await n", "'await'", 0),
    ("n + f(3)", "may call only", 4),
    ("x.__class__", "'__class__'", 0),
    ("n +", "not a Python expression", 0),
    ("a = 3", "not a Python expression", 2),
    ("", "empty expression", 0),
    ("max(n, key=abs)", "keyword argument", 7),
])
def test_clause_expr_rejects_anything_but_plain_expressions(text, fragment, column):
    """API.md §6.1: names, constants, operators, subscripts, attributes and calls of
    builtins only; a CompileError with a caret under the offending part."""
    with pytest.raises(CompileError) as info:
        ClauseExpr(text)
    message = str(info.value)
    assert fragment in message
    lines = message.splitlines()
    assert lines[-1].index("^") - 4 == column, message


def test_bad_expression_in_a_clause_string_points_into_it():
    """API.md §6.1: the caret sits under the offending part of the clause string."""
    text = "collapse(2) gang( n + f(3) )"
    with pytest.raises(CompileError) as info:
        parse_clauses("parallel_loop", text)
    assert caret_column(str(info.value)) == text.index("f(3)")


# ------------------------------------------------------------------ counts at the call


@pytest.mark.parametrize("value, count", [
    (8, 8), (np.int64(3), 3), (8.8046875, 8), (1.0, 1), (np.float32(7.9), 7),
])
def test_count_value_truncates_like_c_integer_division(value, count):
    """OpenACC 3.3 §2.5.10-2.5.12: C writes ``(n+127)/128`` for an integer quotient; a
    real value is truncated toward zero."""
    assert count_value(value, "num_gangs") == count
    assert type(count_value(value, "num_gangs")) is int


@pytest.mark.parametrize("value, fragment", [
    (0, "num_gangs evaluated to 0; it must be a positive integer"),
    (-4, "evaluated to -4"),
    (0.5, "evaluated to 0.5 (truncated to 0)"),
    (True, "evaluated to True"),
    ("8", "evaluated to '8' (str)"),
    (float("inf"), "evaluated to inf"),
    (None, "evaluated to None"),
])
def test_count_value_rejects_non_positive_values(value, fragment):
    """OpenACC 3.3 §2.5.10-2.5.12: a count must be a positive integer."""
    with pytest.raises(ValueError) as info:
        count_value(value, "num_gangs")
    assert fragment in str(info.value)


def test_clauses_evaluate_at_the_call():
    """API.md §6.1: the launcher gets the clause values of one call."""
    clauses = parse_clauses("parallel_loop", "gang((n+127)/128) vector(128) if(n > 100) "
                                             "async(q) wait(q, 2)")
    now = clauses.evaluate({"n": 1000, "q": 3})
    assert (now.num_gangs, now.vector_length, now.if_, now.async_, now.wait) == (
        8, 128, True, 3, (3, 2))
    assert now.expressions() == {} and now.reductions == clauses.reductions
    assert clauses.num_gangs == ClauseExpr("(n+127)/128")  # unchanged
    assert parse_clauses("parallel", "num_gangs(4)").evaluate({}) == parse_clauses(
        "parallel", "num_gangs(4)")
    with pytest.raises(ValueError, match=r"num_gangs evaluated to 0\.0 \(truncated to 0"):
        clauses.evaluate({"n": -127, "q": 1})


def _gangs(x, n):
    for i in range(x.shape[0]):
        x[i] = n


def test_a_launch_shape_evaluated_at_the_call_is_part_of_the_cuda_kernel_key():
    """On cuda the launch shape is compiled into the kernel: clause expressions evaluated
    to another shape must give another kernel (the CPU ignores the shape)."""
    from pyacc.compiler import analyze, parse_clauses
    from pyacc.compiler.kernel import kernel_key

    info = analyze(_gangs, parse_clauses("parallel_loop", "num_gangs((n + 127) / 128)"))
    args = (np.zeros(4), 1000)
    one, eight = info.clauses.evaluate({"n": 1}), info.clauses.evaluate({"n": 1000})
    assert one.num_gangs == 1 and eight.num_gangs == 8
    assert kernel_key(info, args, "cuda", "cuda", one) != kernel_key(info, args, "cuda", "cuda", eight)
    assert kernel_key(info, args, "cpu", "host", one) == kernel_key(info, args, "cpu", "host", eight)
