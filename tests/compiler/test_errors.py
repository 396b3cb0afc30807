"""CompileError for unsupported constructs (with file:line), bounds-check errors."""
from __future__ import annotations

import numpy as np
import pytest

from pyacc import compiler as acc
from pyacc.compiler import CompileError, KernelIndexError, analyze, get_kernel, parse_clauses

GLOBAL_ARRAY = np.zeros(4)


def _line_of(func, text):
    import inspect
    lines, start = inspect.getsourcelines(func)
    for offset, line in enumerate(lines):
        if text in line:
            return start + offset
    raise AssertionError(text)


def breaks(x):
    for i in range(x.shape[0]):
        if x[i] < 0:
            break
        x[i] = 1


def returns(x):
    for i in range(x.shape[0]):
        if x[i] < 0:
            return 1
        x[i] = 1


def while_loop(x):
    i = 0
    while i < x.shape[0]:
        x[i] = 1
        i += 1


def not_range(x):
    for v in x:
        print(v)


def not_tight(x):
    for i in range(x.shape[0]):
        t = i * 2
        for j in range(x.shape[1]):
            x[i, j] = t


def triangular(x):
    for i in range(x.shape[0]):
        for j in range(i):
            x[i, j] = 1


def uses_global(x):
    for i in range(x.shape[0]):
        x[i] = GLOBAL_ARRAY[i]


def two_nests(x):
    for i in range(x.shape[0]):
        x[i] = 1
    for i in range(x.shape[0]):
        x[i] = 2


def inner_break_is_fine(x):
    for i in range(x.shape[0]):
        for j in range(10):
            if j == 3:
                break
        x[i] = j


def bad_reduction_update(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = x[i]
    return s


@pytest.mark.parametrize("func, construct, clauses, text, fragment", [
    (breaks, "parallel_loop", {}, "            break", "'break'"),
    (returns, "parallel_loop", {}, "return 1", "'return'"),
    (while_loop, "parallel_loop", {}, "while i", "'while' loop"),
    (not_range, "parallel_loop", {}, "for v in x", "range(...)"),
    (not_tight, "parallel_loop", {"collapse": 2}, "t = i * 2", "tightly nested"),
    (triangular, "parallel_loop", {"collapse": 2}, "for j in range(i)", "depend on 'i'"),
    (two_nests, "parallel_loop", {}, "x[i] = 2", "second top-level loop"),
    (bad_reduction_update, "parallel_loop", {"reduction": "+:s"}, "s = x[i]",
     "not a '+' update"),
])
def test_unsupported_constructs_name_file_and_line(func, construct, clauses, text,
                                                   fragment):
    with pytest.raises(CompileError) as info:
        analyze(func, parse_clauses(construct, **clauses))
    error = info.value
    assert fragment in str(error)
    assert error.filename == __file__
    line = _line_of(func, text)
    if fragment == "second top-level loop":
        line -= 1  # points at the `for` of the second nest
    assert error.lineno == line
    assert f"{__file__}:{line}" in str(error)


def test_inner_break_is_allowed():
    analyze(inner_break_is_fine, parse_clauses("parallel_loop"))


def test_global_and_closure_arrays_are_free_parameters():
    """API.md §6.1: a kernel may read module-level and closure arrays; they become
    parameters the launcher passes at each call (a routine may not, see test_globals)."""
    data = np.ones(3)

    def kernel(x):
        for i in range(x.shape[0]):
            x[i] = data[i] + GLOBAL_ARRAY[i]

    info = analyze(kernel, parse_clauses("parallel_loop"))
    assert info.free_params == ("GLOBAL_ARRAY", "data")
    assert info.kernel_params == ("x", "GLOBAL_ARRAY", "data")
    assert "data" not in info.written and "x" in info.written
    assert analyze(uses_global, parse_clauses("parallel_loop")).free_params == ("GLOBAL_ARRAY",)


def test_data_clause_must_name_a_parameter():
    with pytest.raises(CompileError, match=r"copyin\(y\) does not name a parameter"):
        analyze(breaks, parse_clauses("parallel_loop", copyin="y"))


def untypable(x):
    for i in range(x.shape[0]):
        x[i] = "text" + x[i]


def test_numba_typing_error_becomes_compile_error():
    info = analyze(untypable, parse_clauses("parallel_loop"))
    with pytest.raises(CompileError) as error:
        get_kernel(info, (np.zeros(3),))
    assert "Numba cannot type" in str(error.value)
    assert error.value.filename == __file__
    assert error.value.lineno == _line_of(untypable, '"text"')


def out_of_bounds(x, y):
    for i in range(x.shape[0]):
        y[i + 1] = x[i]


def atomic_out_of_bounds(x, h):
    for i in range(x.shape[0]):
        acc.markers.atomic.add(h, i, 1.0)


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_bounds_check_names_the_array(monkeypatch, target):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    info = analyze(out_of_bounds, parse_clauses("parallel_loop"))
    args = (np.zeros(5), np.zeros(5))
    kernel = get_kernel(info, args, target=target)
    with pytest.raises(KernelIndexError) as error:
        kernel(*args)
    assert isinstance(error.value, IndexError)
    assert "out_of_bounds" in error.value.kernel and __file__ in error.value.kernel
    if target == "cpu":
        assert error.value.array == "y" and error.value.index == 5
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "0")
    fast = get_kernel(info, (np.zeros(5), np.zeros(6)), target=target)
    assert fast is not kernel


def test_bounds_check_on_atomics(monkeypatch):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    info = analyze(atomic_out_of_bounds, parse_clauses("parallel_loop"))
    args = (np.zeros(5), np.zeros(4))
    with pytest.raises(KernelIndexError) as error:
        get_kernel(info, args)(*args)
    assert error.value.array == "h"


@pytest.mark.parametrize("clauses", [dict(copyin="zz"), dict(reduction="+:q"), dict(private="w"),
                                     "present(q)"], ids=str)
def test_a_clause_naming_no_variable_is_reported_at_the_decorator(clauses):
    """API.md §6: a bad clause's ``CompileError`` names the decorator's line (where the
    clause is written), as a clause that does not parse does; it named the ``def``."""
    import pyacc

    with pytest.raises(CompileError) as error:
        @(pyacc.parallel_loop(clauses) if isinstance(clauses, str) else pyacc.parallel_loop(**clauses))
        def kernel(x):
            for i in range(x.shape[0]):
                x[i] = 1

    assert error.value.lineno == _line_of(test_a_clause_naming_no_variable_is_reported_at_the_decorator,
                                          "@(pyacc.parallel_loop")


def with_statement(x):
    for i in range(x.shape[0]):
        with open("x"):
            x[i] = 1


def test_a_with_statement_is_reported_at_its_line():
    with pytest.raises(CompileError, match="'with' statement cannot be in a kernel") as error:
        analyze(with_statement, parse_clauses("parallel_loop"))
    assert error.value.lineno == _line_of(with_statement, "with open")


def test_a_reduction_on_a_0_d_array_is_a_compile_error_that_says_what_to_do():
    """Its per-chunk private copies would be scalars (Numba could not index them: a
    TypingError naming generated code); the error names the array and the two spellings
    that work, at the loop's line."""
    import pyacc

    @pyacc.parallel_loop(reduction="+:c")
    def total_into(x, c):
        for i in range(x.shape[0]):
            c[()] += x[i]

    with pytest.raises(CompileError, match=r"0-d array 'c'.*one-element array") as error:
        total_into(np.ones(4), np.array(1.0))
    assert error.value.lineno == _line_of(total_into, "for i in")


def test_a_kernel_whose_source_is_another_files_says_so(tmp_path):
    """A function made by exec/compile under another file's name: pyacc would read the
    wrong lines; the error says where the source came from and what to do."""
    import pyacc as acc

    other = tmp_path / "other.py"
    other.write_text('"""A module."""\nX = 1\n')
    namespace = {}
    exec(compile("def k(a):\n    for i in range(a.shape[0]):\n        a[i] = 1\n",
                 str(other), "exec"), namespace)
    with pytest.raises(CompileError, match="is not this function's definition"):
        acc.parallel_loop(namespace["k"])


def test_a_wrapper_kernel_says_to_decorate_the_function_itself():
    import functools

    import pyacc as acc

    def wrap(f):
        @functools.wraps(f)
        def wrapper(*args):
            return f(*args)
        return wrapper

    @wrap
    def fills(a):
        for i in range(a.shape[0]):
            a[i] = 1.0

    with pytest.raises(CompileError, match=r"a wrapper of fills \(functools.wraps\)"):
        acc.parallel_loop(fills)
