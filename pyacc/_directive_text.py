"""Data directives written as their OpenACC clause text, read in the caller's frame.

Owns :func:`keywords_of` (``acc.data("copyin(a[0:n]) copy(b) async(q)")``,
``acc.enter_data``, ``acc.exit_data``, ``acc.update`` with one clause string → the keyword
clauses those directives take) and :func:`resolve_item` (a list item — a variable, a
member ``s.x`` or an array section ``a[0:n][0:m]`` — as the array it names in a scope;
OpenMP's data constructs resolve their strings' items with it too).

Invariants:
    * The items and expressions of a string are read in the *user's frame* (the first
      frame outside pyacc: ``_names.user_frame``), its locals over its module's globals,
      once, when the directive runs: a section is the view its bounds give then (OpenACC
      3.3 §2.7.1), exactly the array a keyword clause would have been given.
    * Spellings are C's and Fortran's: sections ``a[start:length]`` or ``a(lo:hi)``
      (``clause_text``), ``zero:``/``readonly:`` modifiers, the ``present_or_`` aliases, a
      bare ``async`` (the default queue) or ``wait`` (every queue); a clause the directive
      does not take is a ``ClauseError`` showing the string with a caret under it.
"""

from __future__ import annotations

import difflib
import functools

import numpy as np

from pyacc.compiler.clause_kinds import PRESENT_OR
from pyacc.compiler.clause_text import ArgError, ClauseExpr, caret, data_items, data_list
from pyacc.compiler.clauses import clause_items
from pyacc.compiler.errors import CompileError
from pyacc.mapping import ClauseError

from ._clauses import async_noval
from ._names import _locals_of, user_frame

__all__ = ["keywords_of", "with_text", "resolve_item", "item_of"]

_CONTROL = ("if", "async", "wait")
#: the clauses each directive's string takes (OpenACC 3.3 §2.6.5, 2.8, 2.14.4)
_LISTS = {
    "acc.data": ("copy", "copyin", "copyout", "create", "no_create", "present", "deviceptr"),
    "acc.enter_data": ("copyin", "create", "attach"),
    "acc.exit_data": ("copyout", "delete", "detach"),
    "acc.update": ("self", "host", "device"),
}
_FLAGS = {"acc.data": (), "acc.enter_data": (), "acc.exit_data": ("finalize",),
          "acc.update": ("if_present",)}
_OTHER = {"acc.data": ("default",)}


def keywords_of(directive: str, text) -> dict:
    """The keyword clauses of ``directive`` (``"acc.data"``, ``"acc.enter_data"`` …)
    that the clause string ``text`` writes, its items and expressions read in the
    user's frame.

    Raises:
        ClauseError: ``text`` is not a string, a clause is unknown or not taken by
            the directive, malformed, or names something the frame lacks.
    """
    if not isinstance(text, str):
        raise ClauseError(f"{directive}: its one positional argument is a clause string "
                          f"(\"copyin(a[0:n]) copy(b)\"), got {type(text).__name__}; give "
                          f"arrays as keywords ({directive}(copyin=[a]))")
    frame = user_frame()  # (its locals read as ``variable_name`` reads them: no snapshot kept)
    scope = {**frame.f_globals, **dict(_locals_of(frame))} if frame is not None else {}
    keywords: dict = {}
    for word, args, args_at, start, end in _clauses(directive, text):
        try:
            name, value = _keyword(directive, word, args, scope)
        except (ArgError, CompileError, ValueError, NameError, TypeError, AttributeError,
                KeyError) as exc:
            at = args_at + exc.offset if isinstance(exc, ArgError) and args_at else start
            raise ClauseError(f"{directive}: bad clause {text[start:end]!r}: {exc}"
                              + caret(text, at), clause=text[start:end]) from None
        if name in keywords and isinstance(value, list):
            keywords[name] = list(keywords[name]) + value  # (copyin(a) copyin(b))
        elif name in keywords:
            raise ClauseError(f"{directive}: clause {word!r} given twice" + caret(text, start),
                              clause=word)
        else:
            keywords[name] = value
    return keywords


def with_text(directive: str, text, clauses: dict) -> dict:
    """``clauses`` (keywords) after the clauses of the string ``text`` (None: none).

    Raises:
        ClauseError: as :func:`keywords_of`, or a clause given both ways.
    """
    if text is None:
        return clauses
    written = keywords_of(directive, text)
    both = written.keys() & clauses.keys()
    if both:
        raise ClauseError(f"{directive}: {', '.join(sorted(both))} given both in the clause "
                          f"string and as a keyword: give each clause once")
    return {**written, **clauses}


def _clauses(directive, text):
    """``(word, args or None, args_at, start, end)`` of each clause of ``text``, validated."""
    taken = _LISTS[directive] + _FLAGS[directive] + _OTHER.get(directive, ()) + _CONTROL
    for raw, args, args_at, start, end in clause_items(
            text, lambda message: ClauseError(f"{directive}: {message}", clause=text)):
        word = PRESENT_OR.get(raw, raw)
        if word not in taken:
            close = difflib.get_close_matches(word, taken, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ClauseError(f"{directive}: {raw!r} is not a clause of this directive "
                              f"(it takes {', '.join(taken)}){hint}" + caret(text, start),
                              clause=raw)
        yield word, args, args_at, start, end


def _keyword(directive, word, args, scope):
    """``(keyword, value)`` of one clause."""
    if word in _LISTS[directive]:
        if args is None:
            raise ValueError(f"{word} takes a list of variables: {word}(a, b[0:n])")
        items, zeroed = data_list(word, args)
        arrays = [resolve_item(scope, name, section) for name, section in items]
        if word in ("attach", "detach"):
            arrays = _structs_of_members(scope, items, arrays)
        return (f"{word}_zero" if zeroed else word), arrays
    if word in _FLAGS[directive]:
        return word, True if args is None else bool(_value(args, scope))
    if word == "default":
        return "default", (args or "").strip()
    if word == "async":
        return "async_", async_noval if args is None else _value(args, scope)
    if word == "wait":
        if args is None:
            return "wait", True
        return "wait", [_value(part, scope) for part in args.split(",")]
    if args is None:  # if
        raise ValueError("if takes a condition: if(n > 100)")
    return "if_", _value(args, scope)


def _structs_of_members(scope, items, values) -> list:
    """C's ``attach(data.a, data.b)`` (OpenACC 3.3 §2.7.2: each pointer member of
    ``data``): a struct's array members attach with the struct (``acc.attach``), so each
    member item is its struct, once."""
    found = []
    for (name, _section), value in zip(items, values):
        if "." in name and isinstance(value, np.ndarray):
            value = resolve_item(scope, name.rsplit(".", 1)[0])
        if not any(value is seen for seen in found):
            found.append(value)
    return found


def _value(text, scope):
    """The value of a clause expression (``if(n > 3)``, ``async(q)``) in ``scope``."""
    return ClauseExpr(text).evaluate(scope)


def resolve_item(scope, name: str, section=None):
    """The array a list item names in ``scope``: the variable ``name`` (or member chain
    ``s.x``), then the view of ``section`` (its bounds read in ``scope``).

    Raises:
        NameError: the first name of the chain is not in ``scope``.
        ValueError: a bound is not an integer, or the section reaches outside the array.
    """
    root, *members = name.split(".")
    if root not in scope:
        raise NameError(f"{root!r} is not a variable of the calling function or module (a "
                        f"variable of a function around it is seen only when the calling "
                        f"function uses it too)")
    value = functools.reduce(getattr, members, scope[root])
    return value if section is None else value[section.index(scope, np.shape(value))]


def item_of(scope, text: str):
    """:func:`resolve_item` of one item written as text (``"a[0:n]"``, ``"s.x"``)."""
    ((name, section),) = data_items(text)
    return resolve_item(scope, name, section)
