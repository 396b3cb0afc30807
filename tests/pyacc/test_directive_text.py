"""Data directives written as C writes their clauses (``_directive_text``): the string's
items and expressions are read in the caller's frame, once, and mean what the same
keywords would (API.md §4; OpenACC 3.3 §2.6.5, 2.7.1, 2.8, 2.14.4)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import pyacc as acc


def stats():
    return acc.stats()


def table():
    return list(acc.present_table())


@acc.parallel_loop("present(a, b)")
def add_one(a, b):
    for i in range(a.shape[0]):
        b[i] = a[i] + 1.0


def test_a_data_region_string_maps_what_its_keywords_would(separate_memory):
    """``acc.data("copyin(a[0:n]) copy(b[0:n])")``: C's sections (start:length), their
    bounds read in the caller's frame; one copy in each, one copy back."""
    n = 10
    a, b = np.arange(10.0), np.zeros(10)
    with acc.data("copyin(a[0:n]) copy(b[0:n])"):
        add_one(a, b)
    np.testing.assert_array_equal(b, np.arange(10.0) + 1.0)
    assert stats()["h2d_count"] == 2 and stats()["d2h_count"] == 1
    assert table() == []


def test_enter_update_and_exit_data_strings(separate_memory):
    """enter data with ``async`` (the default queue), ``update self`` of a section
    (``n/2``: C's integer division), exit data with ``copyout``, ``delete`` and
    ``finalize``; the present_or_ aliases and the ``zero:`` modifier are read too."""
    n = 10
    a, b, c = np.arange(10.0), np.zeros(10), np.full(4, 7.0)
    acc.enter_data("pcopyin(a) create(b) create(zero: c) async")
    acc.wait()
    add_one(a, b)
    b[:] = -1.0
    acc.update("self(b[0:n/2])")
    np.testing.assert_array_equal(b, np.r_[np.arange(1.0, 6.0), np.full(5, -1.0)])
    acc.exit_data("copyout(c) delete(a, b) finalize")
    np.testing.assert_array_equal(c, 0.0)
    assert table() == []


def test_a_strings_if_and_wait_are_read_in_the_callers_frame(separate_memory):
    """``if(n > 100)`` false: nothing happens (§2.6.6); ``wait(q)`` reads ``q``."""
    n, q = 10, 2
    a = np.ones(n)
    acc.enter_data("copyin(a) if(n > 100)")
    assert not acc.is_present(a)
    acc.enter_data("copyin(a) async(q)")
    acc.update("device(a) wait(q) if_present")
    acc.exit_data("delete(a)")
    assert table() == []


@pytest.mark.parametrize("text, message", [
    ("copin(a)", r"'copin' is not a clause of this directive .*did you mean 'copyin'\?"),
    ("self(a)", r"'self' is not a clause of this directive"),
    ("copyin(missing)", r"bad clause 'copyin\(missing\)': 'missing' is not a variable"),
    ("copyin(a[0:20])", r"bad clause 'copyin\(a\[0:20\]\)': dimension 0 \(extent 10\)"),
    ("copyin(a) copy", r"copy takes a list of variables"),
    ("copyin(a) async(q +)", r"bad clause 'async\(q \+\)'"),
], ids=["misspelt", "other directive's", "undefined", "outside", "no list", "bad expression"])
def test_a_bad_clause_string_is_a_clause_error_that_maps_nothing(separate_memory, text,
                                                                 message):
    """Bad input: a ClauseError quoting the clause (a caret under it), nothing mapped."""
    a = np.ones(10)
    with pytest.raises(acc.ClauseError, match=message):
        with acc.data(text):
            pass
    with pytest.raises(acc.ClauseError, match=r"acc.exit_data: 'copyin' is not a clause"):
        acc.exit_data("copyin(a)")
    assert table() == []


def test_a_clause_given_as_text_and_as_a_keyword_is_refused(separate_memory):
    a = np.ones(4)
    with pytest.raises(acc.ClauseError, match=r"copyin given both in the clause string and "
                                              r"as a keyword"):
        acc.enter_data("copyin(a)", copyin=[a])
    with pytest.raises(acc.ClauseError, match=r"its one positional argument is a clause "
                                              r"string .* got int"):
        acc.data(3)
    assert table() == []


def test_keywords_and_a_string_together(separate_memory):
    """A string and other keywords: both apply (``async_`` as a keyword here)."""
    a, b = np.ones(4), np.zeros(4)
    with acc.data("copyin(a)", copy=[b], async_=1):
        add_one(a, b, async_=1)
    acc.wait(1)
    np.testing.assert_array_equal(b, 2.0)


def _maps_then_forgets() -> bool:
    a = np.ones(1000)
    with acc.data("copyin(a)"):
        pass
    acc.enter_data("copyin(a)")
    acc.exit_data("delete(a)")
    reference = weakref.ref(a)
    del a
    gc.collect()
    return reference() is None  # (while this function's frame still runs)


def test_a_clause_string_keeps_no_array_of_the_callers_alive(separate_memory):
    """Reading the caller's variables leaves nothing behind: before Python 3.13 reading a
    frame's ``f_locals`` leaves a snapshot of its locals on the frame, which kept a
    deleted array alive until the function returned; with keywords it is freed at once,
    and so with a clause string."""
    assert _maps_then_forgets()


def test_a_name_of_an_enclosing_function_the_caller_never_uses_is_explained(separate_memory):
    """Bad input: Python gives a nested function only the enclosing variables it uses, so
    a clause string cannot see the others; the ClauseError says so."""
    a = np.ones(4)

    def inner():
        acc.enter_data("copyin(a)")

    with pytest.raises(acc.ClauseError, match=r"'a' is not a variable of the calling function "
                                              r"or module \(a variable of a function around "
                                              r"it is seen only when the calling function "
                                              r"uses it too\)"):
        inner()
    assert table() == []

