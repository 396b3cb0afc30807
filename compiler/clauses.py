"""Compute-construct clauses: the value object and its two spellings.

Owns :class:`ComputeClauses` (a frozen, hashable value with normalised fields) and
:func:`parse_clauses`, which accepts keyword clauses, one OpenACC clause string, or both,
and yields the very same value for equivalent spellings. What a clause value may be
written as (:class:`ClauseExpr`, counts, reduction lists) and the shared text helpers
live in ``clause_text`` (re-exported here).

Invariants:
    * Every field of a ``ComputeClauses`` is normalised: names are tuples of ``str`` in
      the order written, reductions are ``(op, var)`` tuples with ``op`` one of
      :data:`REDUCTION_OPS`, integers are ``int``; so ``==`` compares meaning.
    * Data clauses name parameters, members of parameters (``s.x``, ``s.a.b``; Fortran's
      ``s%x``) and sections of them (``a[0:n]``, ``a[0:n][0:m]``, Fortran ``a(1:n)``,
      ``s.x[0:n]``: OpenACC 3.3 §2.7.1), in strings and in keyword lists alike. The
      name fields hold the names (a section's array: ``"a"``, ``"s.x"``); ``sections``
      holds ``(clause, Section)`` for each item written with bounds. ``deviceptr`` takes
      no section, ``private``/``firstprivate`` no member.
    * Lists are read as C writes them: ``reduction(+:a,b)``, ``"+:a, +:b"`` and
      ``"+:a max:b"`` (an item starts at ``op:``); an empty list or an empty item in a
      clause string (``present(,)``, ``reduction(max:)``) is a :class:`CompileError`,
      never an empty clause (OpenACC 3.3 §2.5.15, §2.7).
    * A clause that is not valid on the construct raises :class:`CompileError` whose
      message quotes the clause (and, for strings, shows a caret under it) and suggests
      the closest valid clause.
    * In a clause string the values of ``num_gangs``, ``num_workers``, ``vector_length``,
      ``gang(n)``, ``worker(n)``, ``vector(n)``, ``if``, ``async`` and ``wait`` may be
      Python expressions of the parameters and module globals: a literal is kept as its
      value, an expression without free names is folded at parse time, any other becomes
      a :class:`ClauseExpr` that the launcher evaluates at each call
      (:meth:`ComputeClauses.evaluate`). Keyword counts must be ints.
    * A count clause (``num_gangs``, ``num_workers``, ``vector_length`` and the counts of
      ``gang``/``worker``/``vector``) is always a positive ``int`` once evaluated; a real
      value is truncated toward zero as C integer division does for positive operands
      (:func:`count_value`), so ``gang((n+127)/128)`` means what it means in C.
    * ``async_``, ``wait`` and ``if_`` are otherwise kept raw (only literal ints, tuples,
      expressions and the bare-clause markers are normalised); the launcher interprets
      them.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import re
from dataclasses import dataclass
from typing import Any, Mapping

from .clause_text import (EXPR_BUILTINS, REDUCTION_OPS, ArgError, ClauseExpr,  # noqa: F401 - re-exported
                          Section, arguments_at, caret, closing_paren, count_value,
                          data_list, names_list, parse_expression, reduction_list, split_top,
                          tile_sizes)
from .clause_kinds import ASYNC_NOVAL, DATA_CLAUSES, PRIVATE_CLAUSES, WAIT_ALL
from .clause_rules import check_disjoint, check_exclusive, one_action_each
from .device_types import check_in_group, device_type_names
from .clause_kinds import COUNT_MODIFIER as _COUNT_MODIFIER, COUNT_OF as _COUNT_OF, \
    FLAG_CLAUSES as _FLAG_CLAUSES, INT_CLAUSES as _INT_CLAUSES, \
    KEYWORD_ALIASES as _KEYWORD_ALIASES, RAW_CLAUSES as _RAW_CLAUSES, \
    STRING_ALIASES as _STRING_ALIASES, VALID as _VALID
from .errors import CompileError

__all__ = ["ComputeClauses", "ClauseExpr", "Section", "parse_clauses", "parse_loop_clauses",
           "count_value", "CONSTRUCTS", "REDUCTION_OPS", "ASYNC_NOVAL", "WAIT_ALL",
           "EXPR_BUILTINS", "clause_items"]

CONSTRUCTS = ("parallel", "parallel_loop", "kernels", "kernels_loop", "serial", "routine",
              "loop")

# ----------------------------------------------------------------------------- value


@dataclass(frozen=True)
class ComputeClauses:
    """Normalised clauses of one compute construct, combined construct or routine.

    Data-clause fields hold parameter names and member chains (``"s.x"``); ``sections``
    holds ``(clause, Section)`` for the items written as sections (OpenACC 3.3 §2.7.1);
    ``zero`` the names whose create action zero-fills (``create(zero: b)``, §2.7.9);
    ``reductions`` holds ``(op, var)`` pairs; ``tile`` a size per loop of the nest (an int,
    ``"*"``, or a constant expression's text: a hint, the nest is as deep as the list);
    the count clauses are ``int`` or a :class:`ClauseExpr` evaluated at each call;
    ``async_``, ``wait`` and ``if_`` are raw values for the launcher (a :class:`ClauseExpr`
    where the clause string gave an expression of the parameters; ``wait`` a tuple whose
    items may be); ``device_types`` the groups of a clause string's ``device_type``
    clauses, ``((device types, ((field, value), ...)), ...)`` (``device_types``).
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
    auto: bool = False
    nohost: bool = False
    zero: tuple[str, ...] = ()
    bind: Any = None
    tile: tuple = ()
    num_gangs: int | ClauseExpr | None = None
    num_workers: int | ClauseExpr | None = None
    vector_length: int | ClauseExpr | None = None
    async_: Any = None
    wait: Any = None
    if_: Any = None
    sections: tuple[tuple[str, Section], ...] = ()
    device_types: tuple = ()

    @property
    def nest_depth(self) -> int:
        """How many tightly nested loops the loop clauses take (``collapse(n)``, or one
        per ``tile`` size: OpenACC 3.3 §2.9.1, §2.9.8)."""
        return len(self.tile) or self.collapse

    def data_names(self) -> dict[str, str]:
        """Map each name in a data clause to its clause (``copy`` … ``deviceptr``)."""
        return {name: kind for kind in DATA_CLAUSES for name in getattr(self, kind)}

    def reduction_vars(self) -> tuple[str, ...]:
        """Names of the reduction variables, in order."""
        return tuple(var for _, var in self.reductions)

    def expressions(self) -> dict[str, ClauseExpr]:
        """Every call-time expression, keyed by its field (``"num_gangs"``, ``"if_"`` …)
        or ``"wait[i]"`` for item ``i`` of the ``wait`` tuple; empty when there is none."""
        found = {name: getattr(self, name) for name in _INT_CLAUSES + ("async_", "if_")
                 if isinstance(getattr(self, name), ClauseExpr)}
        if isinstance(self.wait, tuple):
            found.update((f"wait[{index}]", item) for index, item in enumerate(self.wait)
                         if isinstance(item, ClauseExpr))
        found.update((f"device_type({','.join(names)}) {name}", value)
                     for names, values in self.device_types for name, value in values
                     if isinstance(value, ClauseExpr))
        return found

    def expression_names(self) -> frozenset[str]:
        """The free names the call-time expressions read (parameters or globals)."""
        return frozenset(name for expr in self.expressions().values()
                         for name in expr.names)

    def section_names(self) -> frozenset[str]:
        """The free names the sections' bounds read (parameters or globals)."""
        return frozenset(name for _, section in self.sections for name in section.names())

    def member_names(self) -> tuple[str, ...]:
        """The member chains (``"s.x"``) named in data clauses, sections included."""
        return tuple(name for name in self.data_names() if "." in name)

    def evaluate(self, namespace: Mapping[str, Any]) -> ComputeClauses:
        """This value with each :class:`ClauseExpr` replaced by its value in
        ``namespace`` (see :meth:`ClauseExpr.evaluate`): counts become positive ints by
        :func:`count_value`, ``if_``/``async_``/``wait`` items are left as computed.
        Returns ``self`` when there is no expression.

        Raises:
            ValueError: A count is not a positive integer (:func:`count_value`).
            Exception: Whatever an expression raises (``NameError``, ...).
        """
        changes = {}
        for name in _INT_CLAUSES + ("async_", "if_"):
            value = getattr(self, name)
            if isinstance(value, ClauseExpr):
                value = value.evaluate(namespace)
                changes[name] = count_value(value, name) if name in _INT_CLAUSES else value
        if isinstance(self.wait, tuple) and any(isinstance(item, ClauseExpr)
                                                for item in self.wait):
            changes["wait"] = tuple(item.evaluate(namespace)
                                    if isinstance(item, ClauseExpr) else item
                                    for item in self.wait)
        if any(isinstance(v, ClauseExpr) for _, values in self.device_types for _, v in values):
            changes["device_types"] = tuple(
                (names, tuple((name, count_value(value.evaluate(namespace), name)
                               if isinstance(value, ClauseExpr) else value)
                              for name, value in values)) for names, values in self.device_types)
        return dataclasses.replace(self, **changes) if changes else self


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
            a malformed value or list, or a name given twice.
    """
    if construct not in CONSTRUCTS:
        raise CompileError(f"unknown construct {construct!r}; expected one of "
                           f"{', '.join(CONSTRUCTS)}")
    values: dict[str, Any] = {}
    if clause_string is not None:
        if not isinstance(clause_string, str):
            raise CompileError(f"{construct}: clauses must be a string or keywords, got "
                               f"{type(clause_string).__name__}")
        groups, group = {}, None  # (OpenACC 3.3 §2.4: device_type starts a group)
        for name, value in _parse_string(construct, clause_string):
            if name == "device_type":
                if construct == "routine":
                    raise CompileError("routine: device_type is not supported on a routine: "
                                       "its level of parallelism is one for every device type")
                group = groups.setdefault(value, {})
            elif group is not None:
                check_in_group(construct, name)
                _merge(group, name, value, construct, f"clause {name!r} after device_type")
            else:
                _merge(values, name, value, construct, f"clause {name!r}")
        if groups:
            values["device_types"] = tuple((names, tuple(sorted(group.items())))
                                           for names, group in groups.items())
    for raw_name, raw_value in keyword_clauses.items():
        name = _KEYWORD_ALIASES.get(raw_name, raw_name)
        if name == "device_type":  # (a group is the clauses after it: string only)
            raise CompileError(f"{construct}: device_type is written in the clause string, "
                               f"followed by its clauses (\"device_type(nvidia) "
                               f"vector_length(128)\"), not as a keyword")
        _check_valid(construct, name, "keyword", None, None)
        _merge(values, name, _normalise_keyword(name, raw_value, construct), construct,
               f"keyword {raw_name}=")
    one_action_each(construct, values)
    check_disjoint(construct, values)
    check_exclusive(construct, values)
    return ComputeClauses(construct=construct, **values)


def parse_loop_clauses(clause_string=None, /, **keyword_clauses) -> ComputeClauses:
    """Parse the clauses of an ``acc.loop(...)`` marker (OpenACC 3.3 §2.9): keywords and/or
    one clause string, whose values are literals (a marker's clauses are fixed)."""
    clauses = parse_clauses("loop", clause_string, **keyword_clauses)
    if clauses.expressions():
        raise CompileError(f"loop: clause values of acc.loop are literals, got "
                           f"{', '.join(e.text for e in clauses.expressions().values())}; "
                           f"give the count on the construct (num_gangs, vector_length)")
    return clauses


def _merge(values, name, value, construct, what):
    if name == "reduction":
        values["reductions"] = values.get("reductions", ()) + value
    elif name in DATA_CLAUSES + PRIVATE_CLAUSES:  # ((name, Section or None) items, zeroed)
        items, zeroed = value
        values[name] = values.get(name, ()) + tuple(item for item, _ in items)
        values["sections"] = values.get("sections", ()) + tuple(
            (name, section) for _, section in items if section is not None)
        if zeroed:
            values["zero"] = values.get("zero", ()) + zeroed
    elif name in _COUNT_OF and isinstance(value, tuple):
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
    raise CompileError(reason + caret(text, pos))


def _normalise_keyword(name, value, construct):
    """Normalise one keyword clause value; returns the value for field ``name``."""
    try:
        if name in DATA_CLAUSES + PRIVATE_CLAUSES:
            return names_list(name, value)
        if name == "reduction":
            return _reductions(value)
        if name == "default":
            return _default(value)
        if name == "collapse":
            return _positive_int(value, "collapse")
        if name == "tile":
            return tile_sizes(value)
        if name == "bind":  # a function, or its name in the routine's module (§2.15.1)
            if not (callable(value) or isinstance(value, str) and value.strip().isidentifier()):
                raise ValueError(f"expects a function or its name, got {value!r}")
            return value.strip() if isinstance(value, str) else value
        if name in _FLAG_CLAUSES:
            if not isinstance(value, bool):
                raise ValueError(f"expects True or False, got {value!r}")
            return value
        if name in _INT_CLAUSES:
            return _count_keyword(name, value)
        if name == "wait":
            return _wait(value)
        if isinstance(value, str) and not (name == "async_" and value == ASYNC_NOVAL):
            return _value_arg(value)[1]  # async_="q", if_="n > 100": as in a string
        return value  # async_, if_: raw
    except ArgError as exc:
        source = exc.source if exc.source is not None else (
            value if isinstance(value, str) else None)
        raise CompileError(f"{construct}: bad value for {name}=: {exc}"
                           + caret(source, exc.offset)) from None
    except (TypeError, ValueError) as exc:
        raise CompileError(f"{construct}: bad value for {name}=: {exc}") from None


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


def _count_keyword(name, value):
    """A keyword count: an int (or a ready :class:`ClauseExpr`); a string is an error
    that points at the clause-string form, which takes expressions."""
    if value is None or isinstance(value, ClauseExpr):
        return value
    if isinstance(value, str):
        raise ValueError(f"{name}= takes a positive int, got the string {value!r}; to "
                         f"compute it from the parameters at each call, use the clause "
                         f"string form, e.g. \"{name}({value})\"")
    return _positive_int(value, name)


def _wait(value):
    """Keyword ``wait``: None, True, a queue, a list, or a string as in ``wait(...)``."""
    if value is None or value is True:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, str):
        return _wait_list(value) if value.strip() else None
    if isinstance(value, (list, tuple)):
        return tuple(_value_arg(item)[1] if isinstance(item, str) else item
                     for item in value)
    return value


def _reductions(value) -> tuple[tuple[str, str], ...]:
    """Keyword reductions: a string as C writes the list, or a list of such strings
    (a blank string or an empty list: none)."""
    if isinstance(value, str):
        items = [value] if value.strip() else []
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise TypeError(f"expects 'op:var' or a list of them, got {type(value).__name__}")
    out: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"{item!r} is not of the form 'op:var[,var...]'")
        try:
            out += reduction_list(item)
        except ArgError as exc:
            exc.source = item
            raise
    return tuple(out)


# ----------------------------------------------------------------------------- strings

_NAME_RE = re.compile(r"\s*,?\s*([A-Za-z_][A-Za-z0-9_]*)")


def clause_items(text, fail):
    """Yield ``(word, args, args_at, start, end)`` for each clause of a clause string as
    C writes it (``"collapse(2) reduction(max:err), nowait"``; blanks or commas between
    clauses): its name, the text inside its parentheses (None: it has none) and where
    that starts, and where the clause starts and ends. The one scanner of OpenACC's
    compute and data directives and OpenMP's constructs.

    Raises:
        ``fail(message)``: a clause name is expected, a ``(`` is unbalanced, or something
            else follows a clause's name (the message ends with the string and a caret).
    """
    try:
        yield from _scanned(text)
    except ArgError as exc:
        raise fail(f"{exc}" + caret(text, exc.offset)) from None


def _scanned(text):
    pos = 0
    while True:
        while pos < len(text) and (text[pos].isspace() or text[pos] == ","):
            pos += 1
        if pos >= len(text):
            return
        match = _NAME_RE.match(text, pos)
        if match is None:
            raise ArgError("malformed clause string: expected a clause name", pos)
        word, start = match.group(1).lower(), match.start(1)  # (Fortran's PRESENT(a))
        pos = arguments_at(text, match.end())
        args = args_at = None
        if pos < len(text) and text[pos] == "(":
            close = closing_paren(text, pos)
            if close is None:
                raise ArgError("malformed clause string: unbalanced '('", pos)
            args, args_at, pos = text[pos + 1:close], pos + 1, close + 1
        elif pos < len(text) and not (text[pos].isspace() or text[pos] == ","):
            raise ArgError(f"malformed clause string: unexpected {text[pos]!r} after "
                           f"{word!r}", pos)
        yield word, args, args_at, start, pos


def _parse_string(construct, text):
    """Yield ``(field, value)`` for each clause of an OpenACC clause string."""
    for word, args, args_at, start, pos in clause_items(
            text, lambda message: CompileError(f"{construct}: {message}")):
        name = _STRING_ALIASES.get(word, word)
        _check_valid(construct, name, "clause", text, start)
        try:
            yield _string_value(name, args)
        except (TypeError, ValueError, SyntaxError) as exc:
            at = start
            if isinstance(exc, ArgError) and args_at is not None:
                at = args_at + exc.offset
            raise CompileError(f"{construct}: bad clause {text[start:pos]!r}: {exc}"
                               + caret(text, at)) from None


def _literal(arg):
    try:
        return ast.literal_eval(arg)
    except (ValueError, SyntaxError):
        return arg


def _string_value(name, args):
    """Convert one clause's argument text (``None`` without parentheses; offsets of
    errors are into it) to ``(field, value)``."""
    if name in _COUNT_OF:
        return (name, True) if args is None else _flag_with_count(name, args)
    if name in _FLAG_CLAUSES:
        if args is not None:
            raise ValueError(f"{name} takes no argument")
        return name, True
    if name == "device_type":
        return name, device_type_names(args)
    if name == "async_" and args is None:
        return name, ASYNC_NOVAL
    if name == "wait" and args is None:
        return name, WAIT_ALL
    _required(name, args)
    if name in DATA_CLAUSES + PRIVATE_CLAUSES:
        return name, data_list(name, args)
    if name == "reduction":
        return "reduction", tuple(reduction_list(args))
    if name == "default":
        return name, _default(args.strip().lower())
    if name == "collapse":  # the loop structure: a literal (OpenACC 3.3 §2.9.1)
        if re.match(r"\s*force\s*:", args, re.IGNORECASE):
            raise ArgError("collapse(force:n) is not supported: make the loops tightly nested "
                           "(move the code between them into the innermost loop)", 0)
        return name, _positive_int(_literal(args.strip()), name)
    if name == "tile":
        return name, tile_sizes(args)
    if name == "bind":  # bind(name) or bind("name"): a function of the routine's module
        bound = args.strip().strip("\"'")
        if not bound.isidentifier():
            raise ArgError(f"bind takes the name of a function, got {args.strip()!r}", 0)
        return name, bound
    if name in _INT_CLAUSES:
        return name, _count_arg(name, args)
    if name == "wait":
        return name, _wait_list(args)
    return name, _value_arg(args)[1]  # async_, if_


def _required(name, args):
    if args is None or not args.strip():
        raise ArgError(f"{name.rstrip('_')} needs an argument in parentheses", 0)


def _flag_with_count(name, args):
    """``gang(n)``/``gang(num:n)``, ``worker(n)``/``worker(num:n)``,
    ``vector(n)``/``vector(length:n)`` (OpenACC 3.3 §2.9.2-2.9.4): the flag and the
    count it sets."""
    _required(name, args)
    offset = 0
    modifier = re.match(r"\s*([A-Za-z_]\w*)\s*:", args)
    if modifier is not None:
        if modifier.group(1).lower() != _COUNT_MODIFIER[name]:  # (Fortran: NUM:)
            raise ArgError(f"{name}({modifier.group(1)}:...) is not supported; "
                            f"expected {name}(n) or {name}({_COUNT_MODIFIER[name]}:n)",
                            modifier.start(1))
        offset = modifier.end()
    try:
        count = _count_arg(name, args[offset:])
    except ArgError as exc:
        raise ArgError(str(exc), offset + exc.offset) from None
    return name, (True, _COUNT_OF[name], count)


def _count_arg(clause, text):
    """A count: a positive literal, a name-free expression folded by
    :func:`count_value`, or a :class:`ClauseExpr` of the parameters."""
    kind, value = _value_arg(text)
    if kind == "literal" and isinstance(value, tuple):  # num_gangs(n, m): OpenACC 3.3 §2.5.10
        raise ArgError(f"{clause} takes one count here: gangs of several dimensions "
                       f"(num_gangs(n, m), gang(dim:k)) are not supported", 0)
    try:
        if kind == "literal":
            return _positive_int(value, clause)
        return count_value(value, clause) if kind == "folded" else value
    except ValueError as exc:
        raise ArgError(str(exc), len(text) - len(text.lstrip())) from None


def _wait_list(text):
    """The queues of ``wait(...)``: ``wait(1, q)``, ``wait(queues: q1, q2)``
    (OpenACC 3.3 §2.16.3); each a literal or a :class:`ClauseExpr`."""
    offset = 0
    modifier = re.match(r"\s*([A-Za-z_]\w*)\s*:", text)
    if modifier is not None:
        if modifier.group(1) != "queues":
            raise ArgError(f"wait({modifier.group(1)}:...) is not supported; expected "
                            f"wait(q, ...) or wait(queues: q, ...)", modifier.start(1))
        offset = modifier.end()
    items = []
    for piece, at in _split_top(text[offset:]):
        if not piece.strip():
            raise ArgError("empty item in the wait list", offset + at + len(piece))
        try:
            items.append(_value_arg(piece)[1])
        except ArgError as exc:
            raise ArgError(str(exc), offset + at + exc.offset) from None
    return tuple(items)


_split_top = split_top


def _value_arg(text):
    """Read one clause value: ``("literal", value)``, ``("folded", value)`` for an
    expression without free names, or ``("expr", ClauseExpr)``."""
    lead = len(text) - len(text.lstrip())
    body = text.strip()
    tree, problem = parse_expression(body)
    if problem is not None:
        message, offset = problem
        raise ArgError(message, lead + offset)
    try:
        return "literal", ast.literal_eval(tree.body)
    except ValueError:
        pass
    expr = ClauseExpr(body)
    if expr.names:
        return "expr", expr
    try:
        return "folded", expr.evaluate({})
    except Exception as exc:  # 1/0, len(3): the user's expression fails
        raise ArgError(f"{body!r} cannot be evaluated ({type(exc).__name__}: {exc})",
                        lead) from None


def replace(clauses: ComputeClauses, **changes) -> ComputeClauses:
    """Return a copy of ``clauses`` with fields changed (thin ``dataclasses.replace``)."""
    return dataclasses.replace(clauses, **changes)
