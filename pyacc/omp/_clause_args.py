"""The argument lists of OpenMP clauses (OpenMP 5.2 ch. 5): ``map``'s map type,
modifiers and list, ``to``/``from``'s motion modifier, ``reduction``'s operator,
``depend``'s dependence types, and the lists themselves (names; for data, also members
and array sections as OpenACC's data clauses read them). ``_clauses`` calls these for
each clause of a string or keyword; each raises ``_Bad`` with the offset of the fault in
the argument text.
"""

from __future__ import annotations

import difflib
import re

from pyacc.compiler.clause_text import ArgError, data_items, top_colon

from ._clause_model import (MAP_MODIFIERS, MAP_TYPES, MapSpec, _Bad, _REDUCTION_OPS,
                            _UNSUPPORTED_MODIFIERS)

__all__ = ["_names", "_split_colon", "_map_arg", "_motion_arg", "_reduction_arg", "_depend_arg",
           "_DEPEND_TYPES"]


def _names(text: str, base: int = 0, *, items: bool = False) -> list[str]:
    """A list of variable names (``a, b``); an empty item is an error. With ``items``
    (the lists of ``map``, ``to``/``from``, ``enter``): also members (``s.x``) and array
    sections (``a[0:n]``, ``a[:n][0:m]``; OpenMP 5.2 §5.2.5), each as written, blanks
    removed: read as OpenACC's data clause items (``clause_text.data_items``)."""
    if items:
        try:
            return [section.text if section is not None else name
                    for name, section in data_items(text)]
        except ArgError as exc:
            raise _Bad(str(exc), base + exc.offset) from None
    names, offset = [], 0
    for piece in text.split(","):
        if not piece.strip():
            raise _Bad("empty item in the list", base + offset + len(piece))
        for word in re.finditer(r"\S+", piece):
            item = word.group()
            if not item.isidentifier():
                hint = ""
                if "[" in item or ":" in item:
                    hint = " (this clause takes names; sections go in map, to and from)"
                raise _Bad(f"{item!r} is not a variable name{hint}", base + offset + word.start())
            names.append(item)
        offset += len(piece) + 1
    return names


def _split_colon(text: str):
    """``(head, head_at, tail, tail_at)`` at the first ':' outside brackets, or
    ``(None, 0, text, 0)``."""
    index = top_colon(text)
    return (None, 0, text, 0) if index is None else (text[:index], 0, text[index + 1:], index + 1)


#: the map type of a ``map`` clause written without one (OpenMP 5.2 §5.8.3: ``tofrom``;
#: on ``target enter data`` it means ``to``, on ``target exit data`` ``from``)
_UNTYPED_MAP = {"target_enter_data": "to", "target_exit_data": "from"}


def _map_arg(args: str, construct: str = ""):
    """``[modifier[,] ...] type: list`` or just ``list`` (type: ``_UNTYPED_MAP``)."""
    head, _, tail, tail_at = _split_colon(args)
    if head is None:
        first = re.match(r"\s*(\w+)[\s,]", args)
        if first and first.group(1) in MAP_TYPES + MAP_MODIFIERS:
            raise _Bad(f"missing ':' after {first.group(1)!r} (map({first.group(1)}: a))",
                       first.end(1))
        return MapSpec(_UNTYPED_MAP.get(construct, "tofrom")), _names(args, items=True)
    words = [(m.group().lower(), m.start()) for m in re.finditer(r"[^\s,]+", head)]  # (TO:)
    if not words:
        raise _Bad("missing map type before ':' (to, from, tofrom, alloc, release, delete)", 0)
    map_type, type_at = words[-1]
    if map_type not in MAP_TYPES:
        if map_type in MAP_MODIFIERS:
            raise _Bad(f"{map_type!r} is a map-type modifier; a map type (to, from, tofrom, "
                       f"alloc, release, delete) must follow it", type_at)
        close = difflib.get_close_matches(map_type, MAP_TYPES + MAP_MODIFIERS, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise _Bad(f"unknown map type {map_type!r} (valid: {', '.join(MAP_TYPES)}){hint}", type_at)
    flags = {"always": False, "present": False, "ompx_hold": False}
    for word, at in words[:-1]:
        key = word.split("(")[0]
        if key in _UNSUPPORTED_MODIFIERS:
            raise _Bad(_UNSUPPORTED_MODIFIERS[key], at)
        if word == "close":
            continue
        if word not in flags:
            close = difflib.get_close_matches(word, MAP_MODIFIERS, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise _Bad(f"unknown map-type modifier {word!r} (valid: "
                       f"{', '.join(MAP_MODIFIERS)}){hint}", at)
        if flags[word]:
            raise _Bad(f"map-type modifier {word!r} given twice", at)
        flags[word] = True
    spec = MapSpec(map_type, flags["always"], flags["present"], flags["ompx_hold"])
    return spec, _names(tail, tail_at, items=True)


def _motion_arg(args: str):
    """``to([present:] list)`` / ``from(...)`` of target update (5.2 §5.9)."""
    head, _, tail, tail_at = _split_colon(args)
    if head is None:
        return False, _names(args, items=True)
    if head.strip() != "present":
        raise _Bad(f"unknown motion modifier {head.strip()!r} (valid: present)",
                   len(head) - len(head.lstrip()))
    return True, _names(tail, tail_at, items=True)


def _reduction_arg(args: str) -> str:
    """``[modifier,] op: list`` → the OpenACC spelling ``op:list``."""
    head, _, tail, tail_at = _split_colon(args)
    if head is None:
        raise _Bad("expected 'op: list' (e.g. 'reduction(+: sum)')", 0)
    parts = [p.strip().lower() for p in head.split(",")]  # (Fortran: REDUCTION(MAX: m))
    op = parts[-1]
    for modifier in parts[:-1]:
        if modifier != "default":
            raise _Bad(f"reduction modifier {modifier!r} is not supported (inscan and task "
                       "reductions are not implemented)", 0)
    if op not in _REDUCTION_OPS:
        close = difflib.get_close_matches(op, list(_REDUCTION_OPS), n=1, cutoff=0.3)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise _Bad(f"unknown reduction operator {op!r} (valid: {' '.join(_REDUCTION_OPS)})"
                   f"{hint}", head.lower().index(op) if op else 0)
    names = _names(tail, tail_at)
    return f"{_REDUCTION_OPS[op]}:{','.join(names)}"


_DEPEND_TYPES = ("in", "out", "inout", "mutexinoutset", "inoutset")
_DEPEND_TYPE = re.compile(r"\b(" + "|".join(_DEPEND_TYPES) + r")\s*:", re.IGNORECASE)


def _depend_arg(text: str):
    """``type: list``, or several in one string (``"in: a out: b"``, as the C clauses
    ``depend(in: a) depend(out: b)``): ``[(type, name), ...]``."""
    if not text.strip():
        raise _Bad("expected 'type: list' (in, out, inout)", 0)
    marks = list(_DEPEND_TYPE.finditer(text))
    if not marks or text[:marks[0].start()].strip():
        head = _split_colon(text)[0]
        if head is None:
            raise _Bad("expected 'type: list' (in, out, inout)", 0)
        raise _Bad(f"unknown dependence type {head.strip()!r} (valid: "
                   f"{', '.join(_DEPEND_TYPES)})", len(head) - len(head.lstrip()))
    found = []
    for mark, after in zip(marks, marks[1:] + [None]):
        end = len(text) if after is None else after.start()
        found += [(mark.group(1).lower(), name) for name in _names(text[mark.end():end], mark.end())]
    return found
