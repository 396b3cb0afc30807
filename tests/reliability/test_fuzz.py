"""Fuzzing (issue 8, item 4), with hypothesis: random clause strings, random keyword
clause sets, random directive arguments, and random small loop functions through the
compiler front end and the launcher.

What is checked:

* **clause strings** — any text (printable junk, and strings assembled from clause
  tokens, parentheses, operators and numbers) given to a compute decorator either parses
  or raises ``CompileError``; nothing else escapes. A valid clause set written as a
  string parses to exactly the value the same clauses give as keywords (no silent
  misreading).
* **keyword clause sets** — random keywords with random values (names, lists, ints,
  bools, None, floats, arrays) on every compute construct: the decorator succeeds or
  raises ``CompileError``.
* **directive arguments** — random keyword sets for ``enter_data``, ``exit_data``,
  ``update``, ``acc.data``, ``host_data`` and the data routines, with values drawn from
  arrays, views (contiguous, strided, zero-size, read-only), non-arrays, object arrays,
  lists mixing them, async values and flags: each call completes or raises an
  ``acc.AccError`` (the documented tree) — and when it raises, the present table and
  device memory are exactly as before (all or nothing).
* **loop functions** — random race-free loop kernels (element-wise assignments and
  updates, conditionals, temporaries, inner sequential loops, writes through a local
  alias, reductions) are generated as source files, decorated and run on the emulated
  device with the implicit data rules; the result (every array, and the reduction) must
  equal running the same function as plain Python. Most examples run with
  ``PYACC_DISABLE_JIT=1`` (the front end, analysis and data movement without a Numba
  compile each); a few are compiled for real. Random *invalid* functions (unsupported
  statements mixed in) raise ``CompileError`` at decoration or at the first call, or run
  correctly — never another exception, never a wrong result.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import string
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pyacc import compiler
import pyacc as acc

from .support import memory_in_use

#: ``PYACC_FUZZ_SCALE=k`` runs k times more examples, with a random seed (the default run
#: is derandomized: the same examples every time, so CI is deterministic)
SCALE = int(os.environ.get("PYACC_FUZZ_SCALE", "1") or "1")
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=SCALE == 1)
CONSTRUCTS = ["parallel", "parallel_loop", "kernels", "kernels_loop", "serial", "routine"]


def _sample(x, y, out, n, c):  # the function the clause fuzzers decorate
    s = 0.0
    for i in range(n):
        out[i] = x[i] + y[i] * c
        s += out[i]
    return s


# =========================================================================== clause strings

_TOKENS = ["copy", "copyin", "copyout", "create", "present", "no_create", "deviceptr", "private",
           "firstprivate", "reduction", "collapse", "gang", "worker", "vector", "seq",
           "independent", "num_gangs", "num_workers", "vector_length", "async", "wait", "if",
           "default", "none", "present", "x", "y", "out", "s", "n", "c", "+", "*", "max", "min",
           "&&", "||", "^", ":", ",", "(", ")", " ", "  ", "1", "2", "0", "-1", "1e999", "3.5",
           "num:", "length:", "'str'", "[1, 2]", "((", "))", "\t", "\n", "_", "x y", "import os",
           "__import__('os')", "9" * 40, "(" * 30, ")" * 30, "lambda: 0", "True", "None", "...",
           "acc", "éé", "\x00"]


clause_text = st.one_of(
    st.text(alphabet=string.printable, max_size=60),
    st.lists(st.sampled_from(_TOKENS), max_size=14).map("".join),
    st.lists(st.sampled_from(_TOKENS), max_size=10).map(" ".join),
)


@settings(max_examples=600 * SCALE, **SETTINGS)
@given(construct=st.sampled_from(CONSTRUCTS), text=clause_text)
def test_any_clause_string_parses_or_raises_compile_error(construct, text):
    try:
        clauses = compiler.parse_clauses(construct, text)
    except compiler.CompileError as error:
        assert str(error), "an empty error message"
        return
    assert isinstance(clauses, compiler.ComputeClauses) and clauses.construct == construct


@settings(max_examples=150 * SCALE, **SETTINGS)
@given(construct=st.sampled_from(["parallel_loop", "kernels_loop", "parallel"]), text=clause_text)
def test_any_clause_string_on_a_decorator_gives_a_region_or_compile_error(construct, text):
    decorator = getattr(acc, construct)
    try:
        region = decorator(text)(_sample)
    except compiler.CompileError:
        return
    assert callable(region)


_NAMES = st.sampled_from(["x", "y", "out"])


@st.composite
def valid_clause_sets(draw):
    """Keyword clauses (normalised values) that are valid on parallel_loop."""
    kw = {}
    names = draw(st.permutations(["x", "y", "out"]))
    kinds = draw(st.lists(st.sampled_from(["copy", "copyin", "copyout", "create", "present",
                                           "no_create", "deviceptr", "firstprivate"]),
                          min_size=3, max_size=3))
    for name, kind in zip(names, kinds):
        if draw(st.booleans()):
            kw.setdefault(kind, []).append(name)
    if draw(st.booleans()):
        kw["reduction"] = [f"{draw(st.sampled_from(['+', '*', 'max', 'min']))}:s"]
    if draw(st.booleans()):
        kw["collapse"] = draw(st.integers(1, 4))
    for flag in ("gang", "worker", "vector", "independent"):
        if draw(st.booleans()):
            kw[flag] = True
    for count in ("num_gangs", "num_workers", "vector_length"):
        if draw(st.booleans()):
            kw[count] = draw(st.integers(1, 1024))
    if draw(st.booleans()):
        kw["default"] = draw(st.sampled_from(["none", "present"]))
    if draw(st.booleans()):
        kw["async_"] = draw(st.integers(0, 9))
    if draw(st.booleans()):
        kw["wait"] = tuple(draw(st.lists(st.integers(0, 9), min_size=1, max_size=3)))
    return kw


def _as_string(kw) -> str:
    parts = []
    for key, value in kw.items():
        word = {"async_": "async", "if_": "if"}.get(key, key)
        if value is True:
            parts.append(word)
        elif isinstance(value, (list, tuple)):
            separator = ", " if key != "reduction" else " "
            if key == "reduction":
                parts.extend(f"reduction({item})" for item in value)
                continue
            parts.append(f"{word}({separator.join(str(v) for v in value)})")
        else:
            parts.append(f"{word}({value})")
    return " ".join(parts)


@settings(max_examples=300 * SCALE, **SETTINGS)
@given(kw=valid_clause_sets())
def test_a_clause_string_means_exactly_what_the_same_keywords_mean(kw):
    from_keywords = compiler.parse_clauses("parallel_loop", **kw)
    from_string = compiler.parse_clauses("parallel_loop", _as_string(kw))
    assert from_string == from_keywords, _as_string(kw)


# =========================================================================== keyword clauses

_ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 5), st.floats(allow_nan=True), st.text(max_size=12),
    _NAMES, st.lists(st.one_of(_NAMES, st.integers(-1, 3), st.text(max_size=4)), max_size=3),
    st.tuples(st.integers(0, 3)), st.just(np.zeros(3)), st.just("+:s"), st.just(["max:s", "+:q"]),
    st.just("x, y out"), st.just({"x": 1}),
)
_KEYWORDS = st.sampled_from(
    ["copy", "copyin", "copyout", "create", "present", "no_create", "deviceptr", "private",
     "firstprivate", "reduction", "collapse", "gang", "worker", "vector", "seq", "independent",
     "num_gangs", "num_workers", "vector_length", "async_", "async", "wait", "if_", "if", "default",
     "bogus", "copy_in", "Reduction", "tile"])


@settings(max_examples=400 * SCALE, **SETTINGS)
@given(construct=st.sampled_from(CONSTRUCTS), kw=st.dictionaries(_KEYWORDS, _ANY_VALUE, max_size=5))
def test_any_keyword_clause_set_gives_a_region_or_compile_error(construct, kw):
    decorator = getattr(acc, construct)
    try:
        result = decorator(**kw)(_sample)
    except compiler.CompileError as error:
        assert str(error)
        return
    assert callable(result)


# =========================================================================== directive arguments


def _values():
    """Values a directive clause might be given (a fresh set per example)."""
    base = np.arange(24, dtype=np.float64)
    read_only = np.arange(8, dtype=np.float64)
    read_only.flags.writeable = False
    return [
        base, base[4:12], base[::2], base[:0], base.reshape(4, 6)[:, 1:3], base.reshape(4, 6),
        np.arange(6, dtype=np.int32), read_only, np.array([1, "a"], dtype=object),
        np.zeros((2, 3), order="F"), 3, 2.5, "a", None, [base[:4], base[4:8]], [base, 7],
        (base[8:16],), [], True,
    ]


_DIRECTIVE_KEYWORDS = {
    "enter_data": ["copyin", "create", "if_", "async_", "wait", "copyout", "bogus"],
    "exit_data": ["copyout", "delete", "finalize", "if_", "async_", "wait", "copyin"],
    "update": ["self", "host", "device", "if_present", "if_", "async_", "wait", "copy"],
    "data": ["copy", "copyin", "copyout", "create", "no_create", "present", "deviceptr",
             "default", "if_", "async_", "wait", "delete"],
    "host_data": ["use_device", "if_present", "if_", "async_"],
}
_CONTROL_VALUES = {"if_": [True, False, 0, 1], "async_": [None, 0, 1, -1, -2, -3, 2.5, "q", True],
                   "wait": [None, 0, [0, 1], [], True, -5, "x"], "finalize": [True, False],
                   "if_present": [True, False], "default": ["none", "present", "all", None]}


@st.composite
def directive_calls(draw):
    directive = draw(st.sampled_from(sorted(_DIRECTIVE_KEYWORDS)))
    keywords = draw(st.lists(st.sampled_from(_DIRECTIVE_KEYWORDS[directive]), max_size=4, unique=True))
    choices = {}
    for keyword in keywords:
        if keyword in _CONTROL_VALUES:
            choices[keyword] = ("control", draw(st.sampled_from(_CONTROL_VALUES[keyword])))
        else:
            choices[keyword] = ("value", draw(st.integers(0, len(_values()) - 1)))
    premapped = draw(st.lists(st.integers(0, 6), max_size=2, unique=True))
    return directive, choices, premapped


def _call_directive(directive, kw):
    if directive == "data":
        with acc.data(**kw):
            pass
    elif directive == "host_data":
        with acc.host_data(**kw):
            pass
    else:
        getattr(acc, directive)(**kw)


@settings(max_examples=400 * SCALE, **SETTINGS)
@given(call=directive_calls())
def test_any_directive_arguments_complete_or_raise_acc_error_changing_nothing(fuzz_device, call):
    directive, choices, premapped = call
    values = _values()
    for index in premapped:  # some data already present (whole arrays or views)
        try:
            acc.copyin(values[index])
        except acc.AccError:
            pass
    table, memory = acc.present_table(), memory_in_use()
    kw = {k: (v if kind == "control" else values[v]) for k, (kind, v) in choices.items()}
    try:
        _call_directive(directive, kw)
    except acc.AccError:
        acc.wait_all()
        assert acc.present_table() == table, f"{directive}({kw}) raised but changed the table"
        assert memory_in_use() == memory
    acc.wait_all()
    acc.shutdown("emulated")


@pytest.fixture(scope="module")
def fuzz_device():
    acc.shutdown("emulated")
    acc.set_device_type("emulated")
    acc.set_device_num(0, "emulated")
    acc.set_default_async(acc.async_noval)
    yield
    acc.shutdown("emulated")


_ROUTINE_VALUES = st.sampled_from(range(len(_values())))


@settings(max_examples=200 * SCALE, **SETTINGS)
@given(routine=st.sampled_from(["copyin", "create", "copyout", "delete", "update_device", "update_self",
                                "is_present", "deviceptr", "refcounts"]),
       index=_ROUTINE_VALUES, async_=st.sampled_from([None, 0, -1, -7, "x"]),
       premapped=st.booleans())
def test_any_data_routine_argument_completes_or_raises_acc_error(fuzz_device, routine, index, async_, premapped):
    values = _values()
    if premapped:
        acc.enter_data(copyin=values[0])
    table, memory = acc.present_table(), memory_in_use()
    function = getattr(acc, routine)
    kwargs = {"async_": async_} if routine not in ("is_present", "deviceptr", "refcounts") else {}
    try:
        function(values[index], **kwargs)
    except acc.AccError:
        acc.wait_all()
        assert acc.present_table() == table and memory_in_use() == memory
    acc.wait_all()
    acc.shutdown("emulated")


# =========================================================================== loop functions

_SOURCE_DIR = tempfile.mkdtemp(prefix="pyacc_fuzz_")
_counter = itertools.count()


def _load(source: str, name: str):
    """Write ``source`` to a real file (the front end reads kernels' source) and import it."""
    module_name = f"pyacc_fuzz_{next(_counter)}"
    path = os.path.join(_SOURCE_DIR, module_name + ".py")
    with open(path, "w") as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


@st.composite
def expressions(draw, depth=0, written=()):
    """An expression for iteration ``i``: reads x anywhere (read-only), y and out only
    at ``i`` when the kernel writes them (no races)."""
    leaves = ["x[i]", "c", "1.5", "2.0", "x[(i + 1) % n]", "x[n - 1 - i]", "float(i)"]
    leaves += ["y[i]"] + ([] if "y" in written else ["y[(i + 3) % n]"])
    if depth >= 2 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(leaves))
    kind = draw(st.sampled_from(["bin", "bin", "call", "neg", "ternary"]))
    left = draw(expressions(depth + 1, written))
    if kind == "bin":
        right = draw(expressions(depth + 1, written))
        return f"({left} {draw(st.sampled_from(['+', '-', '*']))} {right})"
    if kind == "call":
        function = draw(st.sampled_from(["abs", "min", "max"]))
        if function == "abs":
            return f"abs({left})"
        return f"{function}({left}, {draw(expressions(depth + 1, written))})"
    if kind == "neg":
        return f"(-{left})"
    right = draw(expressions(depth + 1, written))
    return f"({left} if {draw(expressions(depth + 1, written))} > 0.0 else {right})"


@st.composite
def loop_functions(draw):
    """Source of a race-free parallel loop kernel and what it returns."""
    writes_y = draw(st.booleans())
    written = ("out", "y") if writes_y else ("out",)
    reduction = draw(st.sampled_from([None, "+", "max", "min", "*"]))
    body = []
    expression = lambda: draw(expressions(0, written))  # noqa: E731
    for _ in range(draw(st.integers(1, 4))):
        form = draw(st.sampled_from(["assign", "update", "if", "temp", "inner", "alias"]))
        if form == "assign":
            body.append(f"out[i] = {expression()}")
        elif form == "update":
            body.append(f"out[i] {draw(st.sampled_from(['+=', '-=', '*=']))} {expression()}")
        elif form == "if":
            body.append(f"if {expression()} > {expression()}:\n            out[i] = {expression()}\n"
                        f"        else:\n            out[i] += 1.0")
        elif form == "temp":
            body.append(f"t = {expression()}\n        out[i] = t * 0.5 + out[i]")
        elif form == "inner":
            body.append(f"for k in range(3):\n            out[i] += x[(i + k) % n] * {draw(st.sampled_from(['0.5', 'c']))}")
        else:
            body.append(f"w = out\n        w[i] = {expression()}")
    if writes_y:
        target = draw(st.sampled_from(["y[i] = ", "y[i] += ", "v = y\n        v[i] = "]))
        body.append(f"{target}{expression()}")
    head, tail, clause = "", "", ""
    if reduction is not None:
        init = {"+": "0.0", "*": "1.0", "max": "-1.0e300", "min": "1.0e300"}[reduction]
        head = f"    r = {init}\n"
        update = {"+": "r += out[i]", "*": "r *= 1.0 + 0.001 * abs(out[i])",
                  "max": "r = max(r, out[i])", "min": "r = min(r, out[i])"}[reduction]
        body.append(update)
        tail = "    return r\n"
        clause = f'(reduction="{reduction}:r")'
    body_text = "\n        ".join(line for line in body)
    source = (
        "import pyacc as acc\n\n\n"
        f"@acc.parallel_loop{clause}\n"
        "def kernel(x, y, out, c):\n"
        "    n = x.shape[0]\n"
        f"{head}"
        "    for i in range(n):\n"
        f"        {body_text}\n"
        f"{tail}"
    )
    return source


def _plain(region):
    return region.__wrapped__


def _inputs(seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, 12)
    y = rng.uniform(-2, 2, 12)
    out = rng.uniform(-2, 2, 12)
    return x, y, out, float(rng.uniform(-1, 1))


def _check_against_plain_python(region, seed):
    x, y, out, c = _inputs(seed)
    ex, ey, eout = x.copy(), y.copy(), out.copy()
    expected = _plain(region)(ex, ey, eout, c)
    result = region(x, y, out, c)
    np.testing.assert_allclose(x, ex, rtol=1e-12, atol=1e-12, err_msg="x (read only) changed")
    np.testing.assert_allclose(y, ey, rtol=1e-12, atol=1e-12, err_msg="y differs from plain Python")
    np.testing.assert_allclose(out, eout, rtol=1e-12, atol=1e-12, err_msg="out differs from plain Python")
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert acc.present_table() == [] and memory_in_use() == 0


@settings(max_examples=120 * SCALE, **SETTINGS)
@given(source=loop_functions(), seed=st.integers(0, 2**16))
def test_random_loop_kernels_give_the_plain_python_result_without_jit(fuzz_device, monkeypatch_module, source, seed):
    region = _load(source, "kernel")
    _check_against_plain_python(region, seed)


@pytest.mark.slow
@settings(max_examples=6 * SCALE, **SETTINGS)
@given(source=loop_functions(), seed=st.integers(0, 2**16))
def test_random_loop_kernels_give_the_plain_python_result_compiled(fuzz_device, jit_on, source, seed):
    region = _load(source, "kernel")
    _check_against_plain_python(region, seed)
    assert any(key[0] == "cpu" for key in region.info.kernels), "the kernel was not compiled"


@pytest.fixture
def jit_on(monkeypatch_module):
    monkeypatch_module.delenv("PYACC_DISABLE_JIT")
    yield
    monkeypatch_module.setenv("PYACC_DISABLE_JIT", "1")


@pytest.fixture(scope="module")
def monkeypatch_module():
    patch = pytest.MonkeyPatch()
    patch.setenv("PYACC_DISABLE_JIT", "1")
    yield patch
    patch.undo()


_BAD_STATEMENTS = [
    "while out[i] > 100.0:\n            out[i] -= 1.0",
    "try:\n            out[i] = 1.0\n        except Exception:\n            pass",
    "print(i)",
    "global_thing = [i]",
    "out[i] = len('abc')",
    "out[i] = undefined_name",
    "out[i] = x",
    "break",
    "return 1.0",
    "out[i] = (lambda q: q)(1.0)",
    "with open('f') as f:\n            pass",
    "out[i] = x.sum()",
    "del out",
    "import math",
    "out[i] = {'a': 1}['a']",
    "assert x[i] < 1e9",
    "out[i:i + 1] = 1.0",
    "out[i] = 1.0 / 0.0 if c > 5.0 else 0.0",
    "out = out + 1.0",
    "x = y",
]


@st.composite
def invalid_loop_functions(draw):
    source = draw(loop_functions())
    statement = draw(st.sampled_from(_BAD_STATEMENTS))
    lines = source.splitlines()
    loop = next(index for index, line in enumerate(lines) if line.startswith("    for i in range"))
    position = draw(st.integers(loop + 1, len(lines) - (2 if "return r" in source else 1)))
    position = min(position, len(lines))
    lines.insert(position, "        " + statement)
    return "\n".join(lines) + "\n"


@settings(max_examples=60 * SCALE, **SETTINGS)
@given(source=invalid_loop_functions(), seed=st.integers(0, 2**16))
def test_random_invalid_loop_functions_raise_compile_error_or_run_correctly(fuzz_device, monkeypatch_module,
                                                                            source, seed):
    try:
        region = _load(source, "kernel")
    except SyntaxError:
        assume(False)  # not Python at all: not the compiler's business
    except compiler.CompileError:
        return
    x, y, out, c = _inputs(seed)
    try:
        result = region(x, y, out, c)
    except (compiler.CompileError, acc.ExecutionError):
        assert acc.present_table() == [] and memory_in_use() == 0
        return
    # it ran: then it must have done what the function does as plain Python
    ex, ey, eout, _ = _inputs(seed)
    expected = _plain(region)(ex, ey, eout, c)
    for name, got, want in (("x", x, ex), ("y", y, ey), ("out", out, eout)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{name}:\n{source}")
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert acc.present_table() == [] and memory_in_use() == 0
