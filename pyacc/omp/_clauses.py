"""OpenMP clause strings and keywords → one normalised value (OpenMP 5.2 ch. 5, 13, 18).

Owns: :func:`parse` (a clause string such as ``"map(always, to: a) map(tofrom: y)
collapse(2) reduction(max:err) nowait"`` and/or keyword clauses → :class:`OmpClauses`),
the clause sets of each construct, and error messages as good as the OpenACC ones
(``compiler/clauses.py``): the clause quoted with a caret under the offending place, and
the closest valid clause suggested.

Items of data clauses are *names* when they come from a clause string (a compute
decorator's parameters, or variables of the caller for the data constructs) and whatever
the user passed when they come from keywords (names or arrays); the constructs resolve
them.

Keyword spellings (API.md §9): ``map_to``, ``map_from``, ``map_tofrom``, ``map_alloc``,
``map_release``, ``map_delete``, modifiers as prefixes (``map_always_to``,
``map_present_alloc``, ``map_always_present_tofrom`` …); ``hold=True`` is LLVM's
``ompx_hold`` on every map of the construct; ``to``/``from_`` for ``target update``.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import re

from pyacc.compiler.clause_kinds import OMP_MAP_TYPE, omp_spelling
from pyacc.compiler.clauses import ClauseExpr, clause_items
from pyacc.compiler.errors import CompileError

from ._clause_args import (_DEPEND_TYPES, _depend_arg, _map_arg, _motion_arg, _names,
                           _reduction_arg, _split_colon)
from ._clause_model import (  # noqa: F401 - re-exported names
    CONSTRUCT_CLAUSES, MAP_TYPES, MapSpec, OmpClauses, _Bad, _COMPUTE_MAP_TYPES,
    _KEYWORD_ALIAS, _MAP_TYPES_OF, _NOT_SUPPORTED, _error, caret)

__all__ = ["MapSpec", "OmpClauses", "parse", "caret", "MAP_TYPES", "CONSTRUCT_CLAUSES"]



def parse(construct: str, clause_string: str | None = None, *, error=CompileError,
          **keywords) -> OmpClauses:
    """Parse an OpenMP clause string and/or keyword clauses of ``construct``.

    Raises:
        CompileError (compute decorators) or ClauseError (data constructs; ``error``):
            an unknown clause (the closest valid one suggested), a clause not valid on
            the construct, a malformed argument — with the clause string and a caret.
    """
    result = OmpClauses(construct)
    if clause_string is not None:
        if not isinstance(clause_string, str):
            raise _error(error, f"omp {_spell(construct)}: clauses must be a string or keywords, got "
                                f"{type(clause_string).__name__}")
        _parse_string(result, clause_string, error)
    for name, value in keywords.items():
        _keyword(result, name, value, error)
    _check_map_types(result, error)
    return result


def _spell(construct: str) -> str:
    return construct.replace("_", " ")


# == clause strings ================================================================================
def _parse_string(result: OmpClauses, text: str, error) -> None:
    construct = result.construct
    valid = CONSTRUCT_CLAUSES[construct]
    for word, args, args_at, start, pos in clause_items(
            text, lambda message: _error(error, f"omp {_spell(construct)}: {message}")):
        _check_valid(construct, word, valid, text, start, error)
        try:
            _apply(result, word, args)
        except _Bad as bad:
            at = start if args_at is None else args_at + bad.offset
            raise _error(error, f"omp {_spell(construct)}: bad clause {text[start:pos]!r}: {bad}"
                         + caret(text, at)) from None


def _check_valid(construct, word, valid, text, pos, error):
    if word in valid:
        return
    where = f"omp {_spell(construct)}"
    if word in _NOT_SUPPORTED:
        raise _error(error, f"{where}: {_NOT_SUPPORTED[word]}" + caret(text, pos))
    known = {c for clauses in CONSTRUCT_CLAUSES.values() for c in clauses}
    if word in known:
        reason = (f"{where}: clause {word!r} is not valid on this construct; valid clauses: "
                  f"{', '.join(valid)}")
    elif word in _ACC_WORDS:
        reason = (f"{where}: {word!r} is an OpenACC clause; the OpenMP spelling is "
                  f"{_ACC_WORDS[word]!r}")
    else:
        reason = f"{where}: unknown clause {word!r}"
        close = difflib.get_close_matches(word, valid, n=1, cutoff=0.5)
        if close:
            reason += f"; did you mean {close[0]!r}?"
    raise _error(error, reason + caret(text, pos))


#: OpenACC habits, answered with the OpenMP clause
_ACC_WORDS = {**{kind: omp_spelling(kind) for kind in (*OMP_MAP_TYPE, "deviceptr")},
              "async": "nowait", "num_gangs": "num_teams",
              "vector_length": "thread_limit", "gang": "(implied by teams distribute)",
              "wait": "depend(...) or omp.taskwait()"}


def _required(word, args):
    if args is None or not args.strip():
        raise _Bad(f"{word} needs an argument in parentheses", 0)


def _apply(result: OmpClauses, word: str, args: str | None) -> None:
    """One clause of a string (``args``: the text inside the parentheses, or None)."""
    if word in ("nowait", "seq", "indirect"):
        if args is not None and word != "nowait":
            raise _Bad(f"{word} takes no argument", 0)
        if word == "nowait":
            result.nowait = True if args is None else _flag_expr(args)
        elif word == "seq":
            result.loop_flags["seq"] = True
        return
    if word == "hold":  # pyacc's keyword spelling also works in strings
        result.hold = True
        return
    _required(word, args)
    if word == "map":
        spec, items = _map_arg(args, result.construct)
        result.maps += [(name, spec) for name in items]
    elif word in ("to", "from"):
        present, names = _motion_arg(args)
        if result.construct == "declare_target":
            result.maps += [(name, MapSpec("to")) for name in names]
        else:
            result.motions += [(name, word, present) for name in names]
    elif word == "enter":
        result.maps += [(name, MapSpec("to")) for name in _names(args)]
    elif word in ("firstprivate", "private"):
        getattr(result, word).extend(_names(args))
    elif word in ("is_device_ptr", "has_device_addr"):
        result.is_device_ptr.extend(_names(args))
    elif word in ("use_device_ptr", "use_device_addr"):
        result.use_device.extend(_names(args))
    elif word == "shared":
        _names(args)  # arrays are shared already; names are checked
    elif word == "reduction":
        result.reductions.append(_reduction_arg(args))
    elif word == "collapse":
        result.collapse = _positive_literal(args, "collapse")
    elif word == "defaultmap":
        result.defaultmap = _defaultmap(args)
    elif word in ("num_teams", "thread_limit", "num_threads"):
        value = _expr(args)
        if word != "num_threads":
            setattr(result, word, value)
    elif word == "device":
        result.device = _device_arg(args)
    elif word == "if":
        result.if_ = _if_arg(args, result.construct)
    elif word == "depend":
        result.depend += _depend_arg(args)
    elif word == "device_type":
        value = args.strip()
        if value not in ("host", "nohost", "any"):
            raise _Bad(f"device_type takes host, nohost or any, got {value!r}", 0)
        result.device_type = value
    elif word == "default":
        value = args.strip()
        if value not in ("shared", "none", "firstprivate", "private"):
            raise _Bad(f"default takes shared, none, firstprivate or private, got {value!r}", 0)
    elif word == "order":
        if args.strip().split(":")[-1].strip() != "concurrent":
            raise _Bad("order takes concurrent (optionally reproducible:/unconstrained:)", 0)
    elif word == "bind":
        if args.strip() not in ("teams", "parallel", "thread"):
            raise _Bad(f"bind takes teams, parallel or thread, got {args.strip()!r}", 0)
    elif word in ("schedule", "dist_schedule"):
        kind = args.split(",")[0].split(":")[-1].strip().lower()
        if kind not in ("static", "dynamic", "guided", "auto", "runtime"):
            raise _Bad(f"unknown schedule kind {kind!r}", 0)
    elif word in ("aligned", "nontemporal"):  # hints without effect: their names checked
        _names(args if word == "nontemporal" else _split_colon(args + ":")[0])
    elif word in ("proc_bind", "simdlen", "safelen"):
        pass  # hints without effect here
    else:  # pragma: no cover - every valid clause is handled above
        raise _Bad(f"{word} is not implemented", 0)


def _positive_literal(text: str, what: str) -> int:
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        raise _Bad(f"{what} needs a positive integer literal, got {text.strip()!r}", 0) from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Bad(f"{what} needs a positive integer literal, got {value!r}", 0)
    return value


def _expr(text: str):
    """A literal, or a :class:`ClauseExpr` evaluated at each call."""
    lead = len(text) - len(text.lstrip())
    body = text.strip()
    try:
        return ast.literal_eval(body)
    except (ValueError, SyntaxError):
        pass
    try:
        return ClauseExpr(body)
    except CompileError as failure:
        message = str(failure).split("\n")[0]
        raise _Bad(message, lead) from None


def _flag_expr(text: str):
    value = _expr(text)
    return bool(value) if not isinstance(value, ClauseExpr) else value


def _device_arg(text: str):
    head, _, tail, tail_at = _split_colon(text)
    if head is not None:
        if head.strip() == "ancestor":
            raise _Bad("device(ancestor: ...) (reverse offload) is not supported", 0)
        if head.strip() != "device_num":
            raise _Bad(f"unknown device modifier {head.strip()!r} (valid: device_num)", 0)
        return _expr(tail)
    return _expr(text)


def _if_arg(text: str, construct: str):
    """``if([directive-name-modifier:] expr)``; the modifier must name this construct."""
    head, _, tail, tail_at = _split_colon(text)
    if head is not None and re.fullmatch(r"\s*[A-Za-z_ ]+\s*", head):
        modifier = " ".join(head.split())
        if modifier not in ("target", _spell(construct), "target data", "target enter data",
                            "target exit data", "target update", "parallel", "teams", "simd"):
            raise _Bad(f"if({modifier}: ...) does not name this construct", 0)
        try:
            return _expr(tail)
        except _Bad as bad:
            raise _Bad(str(bad), tail_at + bad.offset) from None
    return _expr(text)


_DEFAULTMAP = ("none", "present", "tofrom", "default", "firstprivate", "to", "from", "alloc")


def _defaultmap(text: str) -> str:
    """``defaultmap(behavior[: category])``: returns the behaviour for arrays (or
    ``"scalar:..."`` forms reduced to what pyacc supports)."""
    head, _, tail, tail_at = _split_colon(text)
    behavior = (head if head is not None else text).strip().lower()  # (Fortran: TOFROM)
    category = tail.strip().lower() if head is not None else "all"
    return _defaultmap_value(behavior, category)


def _defaultmap_value(behavior: str, category: str = "all") -> str:
    if behavior not in _DEFAULTMAP:
        close = difflib.get_close_matches(behavior, _DEFAULTMAP, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise _Bad(f"unknown defaultmap behaviour {behavior!r} (valid: {', '.join(_DEFAULTMAP)})"
                   f"{hint}", 0)
    if category not in ("all", "scalar", "aggregate", "pointer", "allocatable"):
        raise _Bad(f"unknown defaultmap category {category!r} (valid: scalar, aggregate, "
                   "pointer, all)", 0)
    if category == "scalar":
        if behavior in ("firstprivate", "default"):
            return "default"
        raise _Bad(f"defaultmap({behavior}: scalar) is not supported: scalars of a target "
                   "region are firstprivate (return a reduction to get a value back)", 0)
    if behavior in ("none", "present"):
        return behavior
    if behavior in ("tofrom", "default"):
        return "default"
    raise _Bad(f"defaultmap({behavior}) is not supported for arrays: name them in map "
               "clauses (the implicit rule is map(tofrom:))", 0)


# == keywords ======================================================================================
_KEYWORD_MAP = re.compile(r"map_((?:always_|present_|ompx_hold_|hold_|close_)*)"
                          r"(to|from|tofrom|alloc|release|delete)$")


def keyword_names(construct: str) -> list[str]:
    """Every keyword a construct accepts (for messages and suggestions)."""
    valid = CONSTRUCT_CLAUSES[construct]
    names = []
    if "map" in valid:
        types = _MAP_TYPES_OF.get(construct, _COMPUTE_MAP_TYPES)
        for t in types:
            names.append(f"map_{t}")
        for t in types:
            if t not in ("release", "delete"):
                names += [f"map_always_{t}", f"map_present_{t}"]
        if construct == "target_exit_data":
            names += ["map_always_from", "map_present_from"]
    for clause in valid:
        if clause == "map":
            continue
        if clause == "if":
            names.append("if_")
        elif clause == "from":
            names += ["from_", "present_from"]
        elif clause == "to":
            names += ["to", "present_to"]
        elif clause == "reduction":
            names.append("reduction")
        else:
            names.append(clause)
    return list(dict.fromkeys(names))


def _keyword(result: OmpClauses, raw: str, value, error) -> None:
    construct = result.construct
    where = f"omp.{construct}"
    name = _KEYWORD_ALIAS.get(raw, raw)
    valid = CONSTRUCT_CLAUSES[construct]
    match = _KEYWORD_MAP.fullmatch(raw)
    try:
        if match is not None and "map" in valid:
            mods = match.group(1)
            spec = MapSpec(match.group(2), "always_" in mods, "present_" in mods,
                           "hold_" in mods)
            result.maps += [(item, spec) for item in _items(value)]
            return
        if raw in ("present_to", "present_from") and ("to" in valid):
            result.motions += [(item, raw[8:], True) for item in _items(value)]
            return
        if name not in valid or name in ("map",):
            raise _UnknownKeyword()
        if name in ("to", "from"):
            if construct == "declare_target":
                result.maps += [(item, MapSpec("to")) for item in _items(value)]
            else:
                result.motions += [(item, name, False) for item in _items(value)]
        elif name == "enter":
            result.maps += [(item, MapSpec("to")) for item in _items(value)]
        elif name in ("firstprivate", "private"):
            getattr(result, name).extend(_items(value))
        elif name in ("is_device_ptr", "has_device_addr"):
            result.is_device_ptr.extend(_items(value))
        elif name in ("use_device_ptr", "use_device_addr"):
            result.use_device.extend(_items(value))
        elif name == "shared":
            _items(value)
        elif name == "reduction":
            items = [value] if isinstance(value, str) else list(value or ())
            for item in items:
                if not isinstance(item, str):
                    raise _Bad(f"reduction items are 'op:var' strings, got {item!r}")
                result.reductions.append(_reduction_arg(item))
        elif name == "collapse":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _Bad(f"collapse needs a positive int, got {value!r}")
            result.collapse = value
        elif name == "defaultmap":
            if value is not None:
                if not isinstance(value, str):
                    raise _Bad(f"defaultmap takes a string such as 'none' or 'present', got {value!r}")
                result.defaultmap = _defaultmap(value)
        elif name in ("num_teams", "thread_limit"):
            setattr(result, name, _count_keyword(name, value))
        elif name in ("num_threads", "schedule", "dist_schedule", "order", "bind", "default",
                      "proc_bind", "simdlen", "safelen", "aligned", "nontemporal", "indirect",
                      "seq"):
            if name == "seq":
                result.loop_flags["seq"] = bool(value)
        elif name == "device":
            result.device = _expr(value) if isinstance(value, str) else value
        elif name == "if":
            result.if_ = _expr(value) if isinstance(value, str) else value
        elif name == "nowait":
            result.nowait = _expr(value) if isinstance(value, str) else value
        elif name == "depend":
            result.depend += _depend_keyword(value)
        elif name == "hold":
            result.hold = bool(value)
        elif name == "device_type":
            if value not in ("host", "nohost", "any"):
                raise _Bad(f"device_type takes 'host', 'nohost' or 'any', got {value!r}")
            result.device_type = value
        else:  # pragma: no cover
            raise _UnknownKeyword()
    except _UnknownKeyword:
        accepted = keyword_names(construct)
        hint = difflib.get_close_matches(raw, accepted, n=1, cutoff=0.5)
        extra = ""
        if raw in ("copyin", "copyout", "copy", "create", "present", "async_", "deviceptr"):
            extra = f" ({raw!r} is OpenACC; see API.md §9 for the OpenMP keywords)"
        elif "hold" in raw and construct in ("target_enter_data", "target_exit_data"):
            extra = " (ompx_hold is allowed only on target and target data, as in LLVM)"
        raise _error(error, f"{where}: unknown clause {raw!r}"
                     + (f" (did you mean {hint[0]!r}?)" if hint else "") + extra
                     + f"; {where} accepts {', '.join(accepted)}") from None
    except _Bad as bad:
        raise _error(error, f"{where}: bad value for {raw}=: {bad}") from None


class _UnknownKeyword(Exception):
    pass


def _items(value) -> list:
    """A keyword clause value: one item, a list/tuple, or a string of names."""
    if value is None:
        return []
    if isinstance(value, str):
        return _names(value) if value.strip() else []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _count_keyword(name, value):
    if value is None or isinstance(value, ClauseExpr):
        return value
    if isinstance(value, str):
        return _expr(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Bad(f"{name} needs a positive int, got {value!r}")
    return value


def _depend_keyword(value):
    """``depend="in: a"``, ``depend=["out: a", "in: b"]`` or ``depend=[("in", a)]``."""
    items = [value] if isinstance(value, (str, tuple)) else list(value or ())
    out = []
    for item in items:
        if isinstance(item, str):
            out += _depend_arg(item)
        elif isinstance(item, tuple) and len(item) == 2 and item[0] in _DEPEND_TYPES:
            out.append(item)
        else:
            raise _Bad(f"depend items are 'type: names' strings or (type, array) pairs, got {item!r}")
    return out


def _check_map_types(result: OmpClauses, error) -> None:
    """Map types a construct forbids (5.2 §5.8.3, §13.6, §13.7)."""
    allowed = _MAP_TYPES_OF.get(result.construct, _COMPUTE_MAP_TYPES)
    for _, spec in result.maps:
        if result.construct == "declare_target":
            continue
        if spec.type not in allowed:
            raise _error(error, f"omp {_spell(result.construct)}: map type {spec.type!r} is not "
                                f"allowed here (allowed: {', '.join(allowed)})")
        if spec.hold and result.construct in ("target_enter_data", "target_exit_data"):
            raise _error(error, f"omp {_spell(result.construct)}: the ompx_hold map-type "
                                "modifier is allowed only on target and target data (LLVM)")


def replace(clauses: OmpClauses, **changes) -> OmpClauses:
    return dataclasses.replace(clauses, **changes)
