"""Compute-construct clauses: the value object and its two spellings.

Owns :class:`ComputeClauses` (a frozen, hashable value with normalised fields) and
:func:`parse_clauses`, which accepts keyword clauses, one OpenACC clause string, or both,
and yields the very same value for equivalent spellings.

Invariants:
    * Every field of a ``ComputeClauses`` is normalised: names are tuples of ``str`` in
      the order written, reductions are ``(op, var)`` tuples with ``op`` one of
      :data:`REDUCTION_OPS`, integers are ``int``; so ``==`` compares meaning.
    * A clause that is not valid on the construct raises :class:`CompileError` whose
      message quotes the clause (and, for strings, shows a caret under it) and suggests
      the closest valid clause.
    * ``async_``, ``wait`` and ``if_`` are kept raw (only literal ints, tuples and the
      bare-clause markers are normalised); the launcher interprets them.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import re
from dataclasses import dataclass
from typing import Any

from .errors import CompileError

__all__ = ["ComputeClauses", "parse_clauses", "parse_loop_clauses", "CONSTRUCTS",
           "REDUCTION_OPS", "ASYNC_NOVAL", "WAIT_ALL"]

CONSTRUCTS = ("parallel", "parallel_loop", "kernels", "kernels_loop", "serial", "routine",
              "loop")

#: Reduction operators (OpenACC 3.3 §2.5.15); ``&&``/``||`` are accepted as aliases.
REDUCTION_OPS = ("+", "*", "max", "min", "&", "|", "^", "and", "or")
_OP_ALIASES = {"&&": "and", "||": "or"}

#: Value of ``async_`` for a bare ``async`` clause in a clause string (OpenACC
#: ``acc_async_noval``); the launcher maps it to its own constant.
ASYNC_NOVAL = "noval"
#: Value of ``wait`` for a bare ``wait`` clause (wait for every queue).
WAIT_ALL = True

DATA_CLAUSES = ("copy", "copyin", "copyout", "create", "no_create", "present", "deviceptr")
PRIVATE_CLAUSES = ("private", "firstprivate")
_FLAG_CLAUSES = ("gang", "worker", "vector", "seq", "independent")
_INT_CLAUSES = ("num_gangs", "num_workers", "vector_length")
_RAW_CLAUSES = ("async_", "wait", "if_")

# Clause sets per construct: OpenACC 3.3 §2.5.1 (parallel), §2.5.2 (serial),
# §2.5.3 (kernels), §2.9 (loop), §2.11 (combined), §2.15.1 (routine).
_COMPUTE_COMMON = DATA_CLAUSES + ("default",) + _RAW_CLAUSES
_LOOP_ONLY = ("collapse", "reduction", "private") + _FLAG_CLAUSES
_VALID = {
    "parallel": _COMPUTE_COMMON + PRIVATE_CLAUSES + ("reduction",) + _INT_CLAUSES,
    "serial": _COMPUTE_COMMON + PRIVATE_CLAUSES + ("reduction",),
    "kernels": _COMPUTE_COMMON + _INT_CLAUSES,
    "routine": ("gang", "worker", "vector", "seq"),
    "loop": _LOOP_ONLY,
}
_VALID["parallel_loop"] = _VALID["parallel"] + _LOOP_ONLY
_VALID["kernels_loop"] = _VALID["kernels"] + _LOOP_ONLY

# Spellings accepted for keyword names (Python keywords need the trailing underscore).
_KEYWORD_ALIASES = {"async": "async_", "if": "if_"}
# Spellings in clause strings.
_STRING_ALIASES = {"async": "async_", "if": "if_", "reduction": "reduction"}


@dataclass(frozen=True)
class ComputeClauses:
    """Normalised clauses of one compute construct, combined construct or routine.

    Data-clause fields hold parameter names; ``reductions`` holds ``(op, var)`` pairs;
    ``async_``, ``wait`` and ``if_`` are raw values for the launcher.
    """

    construct: str
    copy: tuple[str, ...] = ()
    copyin: tuple[str, ...] = ()
    copyout: tuple[str, ...] = ()
    create: tuple[str, ...] = ()
    no_create: tuple[str, ...] = ()
    present: tuple[str, ...] = ()
    deviceptr: tuple[str, ...] = ()
    private: tuple[str, ...] = ()
    firstprivate: tuple[str, ...] = ()
    default: str | None = None
    collapse: int = 1
    reductions: tuple[tuple[str, str], ...] = ()
    gang: bool = False
    worker: bool = False
    vector: bool = False
    seq: bool = False
    independent: bool = False
    num_gangs: int | None = None
    num_workers: int | None = None
    vector_length: int | None = None
    async_: Any = None
    wait: Any = None
    if_: Any = None

    def data_names(self) -> dict[str, str]:
        """Map each name in a data clause to its clause (``copy`` … ``deviceptr``)."""
        return {name: kind for kind in DATA_CLAUSES for name in getattr(self, kind)}

    def reduction_vars(self) -> tuple[str, ...]:
        """Names of the reduction variables, in order."""
        return tuple(var for _, var in self.reductions)


# --------------------------------------------------------------------------- keywords


def parse_clauses(construct: str, clause_string: str | None = None,
                  **keyword_clauses) -> ComputeClauses:
    """Build the clause value of a construct from a clause string and/or keywords.

    Args:
        construct: One of :data:`CONSTRUCTS` (``"loop"`` is used for ``acc.loop``).
        clause_string: OpenACC clauses, e.g. ``"collapse(2) reduction(max:err)"``.
        **keyword_clauses: The same clauses as keywords (``async_``/``if_`` or
            ``async``/``if``).

    Returns:
        The normalised :class:`ComputeClauses`.

    Raises:
        CompileError: Unknown construct or clause, a clause not valid on the construct,
            a malformed value, or a name given twice.
    """
    if construct not in CONSTRUCTS:
        raise CompileError(f"unknown construct {construct!r}; expected one of "
                           f"{', '.join(CONSTRUCTS)}")
    values: dict[str, Any] = {}
    if clause_string is not None:
        if not isinstance(clause_string, str):
            raise CompileError(f"{construct}: clauses must be a string or keywords, got "
                               f"{type(clause_string).__name__}")
        for name, value in _parse_string(construct, clause_string):
            _merge(values, name, value, construct, f"clause {name!r}")
    for raw_name, raw_value in keyword_clauses.items():
        name = _KEYWORD_ALIASES.get(raw_name, raw_name)
        _check_valid(construct, name, "keyword", None, None)
        _merge(values, name, _normalise_keyword(name, raw_value, construct), construct,
               f"keyword {raw_name}=")
    _check_disjoint(construct, values)
    return ComputeClauses(construct=construct, **values)


def parse_loop_clauses(**keyword_clauses) -> ComputeClauses:
    """Parse the keyword clauses of an ``acc.loop(...)`` marker (OpenACC 3.3 §2.9)."""
    return parse_clauses("loop", **keyword_clauses)


def _merge(values, name, value, construct, what):
    if name == "reduction":
        values["reductions"] = values.get("reductions", ()) + value
    elif name in DATA_CLAUSES + PRIVATE_CLAUSES:
        values[name] = values.get(name, ()) + value
    elif name in ("gang", "worker", "vector") and isinstance(value, tuple):
        flag, count_name, count = value
        values[name] = flag
        if count is not None:
            _merge(values, count_name, count, construct, what)
    else:
        if name in values and values[name] != value:
            raise CompileError(f"{construct}: {what} given twice with different values "
                               f"({values[name]!r} and {value!r})")
        values[name] = value


def _check_valid(construct, name, what, text, pos):
    valid = _VALID[construct]
    if name in valid:
        return
    everything = sorted(set(DATA_CLAUSES + PRIVATE_CLAUSES + _FLAG_CLAUSES + _INT_CLAUSES
                            + _RAW_CLAUSES + ("default", "collapse", "reduction")))
    if name in everything:
        reason = (f"{construct}: clause {name!r} is not valid on this construct; "
                  f"valid clauses: {', '.join(valid)}")
    else:
        reason = f"{construct}: unknown {what} {name!r}"
        close = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
        if close:
            reason += f"; did you mean {close[0]!r}?"
    raise CompileError(reason + _caret(text, pos))


def _caret(text, pos):
    if text is None:
        return ""
    return f"\n    {text}\n    {' ' * pos}^"


def _normalise_keyword(name, value, construct):
    """Normalise one keyword clause value; returns the value for field ``name``."""
    try:
        if name in DATA_CLAUSES + PRIVATE_CLAUSES:
            return _names(value)
        if name == "reduction":
            return _reductions(value)
        if name == "default":
            return _default(value)
        if name == "collapse":
            return _positive_int(value, "collapse")
        if name in _FLAG_CLAUSES:
            if not isinstance(value, bool):
                raise ValueError(f"expects True or False, got {value!r}")
            return value
        if name in _INT_CLAUSES:
            return None if value is None else _positive_int(value, name)
        if name == "wait":
            return _wait(value)
        return value  # async_, if_: raw
    except (TypeError, ValueError) as exc:
        raise CompileError(f"{construct}: bad value for {name}=: {exc}") from None


def _names(value) -> tuple[str, ...]:
    if isinstance(value, str):
        parts = [p for p in re.split(r"[\s,]+", value) if p]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        raise TypeError(f"expects parameter names (a list or a string), got "
                        f"{type(value).__name__}")
    for part in parts:
        if not isinstance(part, str) or not part.isidentifier():
            raise ValueError(f"{part!r} is not a parameter name")
    return tuple(parts)


def _default(value):
    if value is None:
        return None
    if value not in ("none", "present"):
        raise ValueError(f"default must be 'none' or 'present', got {value!r}")
    return value


def _positive_int(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} needs a positive integer literal, got {value!r}")
    return int(value)


def _wait(value):
    if value is None or value is True:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value


def _reductions(value) -> tuple[tuple[str, str], ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"expects 'op:var' or a list of them, got {type(value).__name__}")
    out = []
    for item in items:
        if not isinstance(item, str) or ":" not in item:
            raise ValueError(f"{item!r} is not of the form 'op:var[,var...]'")
        op, _, names = item.partition(":")
        op = _OP_ALIASES.get(op.strip(), op.strip())
        if op not in REDUCTION_OPS:
            close = difflib.get_close_matches(op, REDUCTION_OPS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown reduction operator {op!r} (valid: "
                             f"{' '.join(REDUCTION_OPS)}){hint}")
        for var in _names(names):
            out.append((op, var))
    return tuple(out)


def _check_disjoint(construct, values):
    seen: dict[str, str] = {}
    for kind in DATA_CLAUSES + PRIVATE_CLAUSES:
        for name in values.get(kind, ()):
            if name in seen:
                raise CompileError(f"{construct}: {name!r} appears in both {seen[name]} "
                                   f"and {kind}")
            seen[name] = kind
    rvars = [var for _, var in values.get("reductions", ())]
    for var in rvars:
        if rvars.count(var) > 1:
            raise CompileError(f"{construct}: reduction variable {var!r} given twice")
        if var in seen:
            raise CompileError(f"{construct}: reduction variable {var!r} also appears in "
                               f"{seen[var]}")


# ----------------------------------------------------------------------------- strings

_NAME_RE = re.compile(r"\s*,?\s*([A-Za-z_][A-Za-z0-9_]*)")


def _parse_string(construct, text):
    """Yield ``(field, value)`` for each clause of an OpenACC clause string."""
    pos = 0
    while True:
        while pos < len(text) and (text[pos].isspace() or text[pos] == ","):
            pos += 1
        if pos >= len(text):
            return
        match = _NAME_RE.match(text, pos)
        if match is None:
            raise CompileError(f"{construct}: malformed clause string: expected a clause "
                               f"name" + _caret(text, pos))
        word, start = match.group(1), match.start(1)
        pos = match.end()
        args = None
        if pos < len(text) and text[pos] == "(":
            close = _matching_paren(text, pos, construct)
            args, pos = text[pos + 1:close].strip(), close + 1
        elif pos < len(text) and not (text[pos].isspace() or text[pos] == ","):
            raise CompileError(f"{construct}: malformed clause string: unexpected "
                               f"{text[pos]!r} after {word!r}" + _caret(text, pos))
        name = _STRING_ALIASES.get(word, word)
        _check_valid(construct, name, "clause", text, start)
        try:
            yield _string_value(name, args)
        except (TypeError, ValueError, SyntaxError) as exc:
            raise CompileError(f"{construct}: bad clause {text[start:pos]!r}: {exc}"
                               + _caret(text, start)) from None


def _matching_paren(text, open_pos, construct):
    depth = 0
    for index in range(open_pos, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    raise CompileError(f"{construct}: malformed clause string: unbalanced '('"
                       + _caret(text, open_pos))


def _literal(arg):
    try:
        return ast.literal_eval(arg)
    except (ValueError, SyntaxError):
        return arg


def _string_value(name, args):
    """Convert one clause's argument text to ``(field, value)``."""
    if name in DATA_CLAUSES + PRIVATE_CLAUSES:
        return name, _names(_required(name, args))
    if name == "reduction":
        return "reduction", _reductions(_required(name, args))
    if name == "default":
        return name, _default(_required(name, args))
    if name == "collapse":
        return name, _positive_int(_literal(_required(name, args)), name)
    if name in _INT_CLAUSES:
        return name, _positive_int(_literal(_required(name, args)), name)
    if name in ("gang", "worker", "vector"):
        return _flag_with_count(name, args)
    if name in _FLAG_CLAUSES:
        if args is not None:
            raise ValueError(f"{name} takes no argument")
        return name, True
    if name == "async_":
        return name, ASYNC_NOVAL if args is None else _literal(args)
    if name == "wait":
        if args is None:
            return name, WAIT_ALL
        return name, tuple(_literal(a.strip()) for a in args.split(",") if a.strip())
    return name, _literal(_required("if", args))  # if_


def _flag_with_count(name, args):
    count_name = {"gang": "num_gangs", "worker": "num_workers", "vector": "vector_length"}
    if args is None:
        return name, True
    arg = args.split(":", 1)[-1].strip()  # gang(num:4), vector(length:128)
    return name, (True, count_name[name], _positive_int(_literal(arg), name))


def _required(name, args):
    if args is None or not args.strip():
        raise ValueError(f"{name} needs an argument in parentheses")
    return args


def replace(clauses: ComputeClauses, **changes) -> ComputeClauses:
    """Return a copy of ``clauses`` with fields changed (thin ``dataclasses.replace``)."""
    return dataclasses.replace(clauses, **changes)

