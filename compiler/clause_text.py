"""Clause text: what clause values may be written as, and the text helpers every clause
parser shares (OpenACC's ``compiler.clauses`` and OpenMP's ``pyacc.omp._clauses``).

Owns :class:`ClauseExpr` (a clause value written as a Python expression of the
parameters, validated and compiled once, evaluated at each call), :func:`count_value`
(what a count clause's value means, C truncation included), the reduction-list reader
(``+:a,b``, ``+:a max:b``: OpenACC 3.3 §2.5.15), the data-clause list reader
(:func:`data_items`: names, members ``s.x`` and the sections :class:`Section` of OpenACC 3.3
§2.7.1), :func:`caret` (the one spelling of a clause error's pointer) and
:func:`closing_paren`.

Invariants:
    * A clause expression sees only its names (parameters, then the function's globals)
      and :data:`EXPR_BUILTINS`; anything else (lambdas, comprehensions, dunder
      attributes, other calls) is a :class:`CompileError` at parse time, with a caret.
    * A malformed argument raises :class:`ArgError` with the offset of the problem, for
      the caller to quote with :func:`caret`.
    * A :class:`Section`'s bounds are ints or :class:`ClauseExpr` (never evaluated at
      parse time unless free of names); :meth:`Section.index` turns them into 0-based
      Python slices checked against the array's shape, so a section never reaches an
      array out of bounds.
"""
from __future__ import annotations

import ast
import builtins
import difflib
import math
import numbers
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .clause_kinds import PRIVATE_CLAUSES
from .errors import CompileError

__all__ = ["ClauseExpr", "count_value", "EXPR_BUILTINS", "REDUCTION_OPS", "ArgError",
           "caret", "arguments_at", "closing_paren", "reduction_list", "parse_expression",
           "Section", "tile_sizes", "data_list", "names_list", "data_items", "split_top",
           "bound_value", "top_colon"]

#: The reduction operators (OpenACC 3.3 §2.5.15); C's ``&&``/``||`` are read as and/or.
REDUCTION_OPS = ("+", "*", "max", "min", "&", "|", "^", "and", "or")
#: C's and Fortran's spellings of the operators (OpenACC 3.3 §2.5.15)
_OP_ALIASES = {"&&": "and", "||": "or", ".and.": "and", ".or.": "or", "iand": "&",
               "ior": "|", "ieor": "^"}


# ------------------------------------------------------------------------- expressions

#: The builtins a clause expression may call, and the only builtins it sees.
EXPR_BUILTINS = {name: getattr(builtins, name)
                 for name in ("abs", "bool", "float", "int", "len", "max", "min", "round")}

# What a clause expression may contain: names, constants, arithmetic, boolean and
# comparison operators, conditional expressions, subscripts (with slices and tuples),
# attribute reads and calls of EXPR_BUILTINS.
_EXPR_NODES = (ast.Expression, ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.BoolOp,
               ast.Compare, ast.IfExp, ast.Subscript, ast.Slice, ast.Tuple, ast.Attribute,
               ast.Call, ast.operator, ast.unaryop, ast.boolop, ast.cmpop,
               ast.expr_context)
_NODE_WORDS = {"Lambda": "a lambda", "NamedExpr": "':=' (an assignment expression)",
               "Await": "'await'", "ListComp": "a comprehension",
               "SetComp": "a comprehension", "DictComp": "a comprehension",
               "GeneratorExp": "a generator expression",
               "JoinedStr": "an f-string", "Starred": "'*' unpacking",
               "keyword": "a keyword argument", "Yield": "'yield'", "YieldFrom": "'yield'"}


@dataclass(frozen=True)
class ClauseExpr:
    """A clause value written as a Python expression, evaluated at each call.

    ``ClauseExpr("(n+127)/128")`` validates and compiles the text once. Equal and hashed
    by ``text`` (the expression as written, outer blanks stripped); ``names`` are the free
    names it reads, in order of first use (the builtins it calls are not among them).

    Raises:
        CompileError: The text is not one Python expression, or uses something other than
            names, constants, operators, conditional expressions, subscripts, attribute
            reads and calls of :data:`EXPR_BUILTINS` (message with a caret).
    """

    text: str
    names: tuple[str, ...] = field(init=False, compare=False)
    _code: Any = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.text, str):
            raise CompileError(f"a clause expression must be a string, got "
                               f"{type(self.text).__name__}")
        text = self.text.strip()
        tree, problem = parse_expression(text)
        if problem is not None:
            message, offset = problem
            raise CompileError(f"bad clause expression {text!r}: {message}"
                               + caret(text, offset))
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "names", _free_names(tree))
        object.__setattr__(self, "_code", compile(tree, f"<clause {text}>", "eval"))

    def __repr__(self) -> str:
        return f"ClauseExpr({self.text!r})"

    def __reduce__(self):
        return ClauseExpr, (self.text,)  # the code object does not pickle; recompile

    def evaluate(self, namespace: Mapping[str, Any]) -> Any:
        """The expression's value with its names looked up in ``namespace`` (parameter
        values by name, then the function's globals; any mapping, not modified), and
        only :data:`EXPR_BUILTINS` as builtins. Exceptions of the expression propagate."""
        return eval(self._code, {"__builtins__": EXPR_BUILTINS}, namespace)


def tile_sizes(value) -> tuple:
    """``tile`` sizes (OpenACC 3.3 §2.9.8), a list or a string as C writes them: per loop a
    positive int, ``*`` (the implementation's choice), or a constant expression (kept as
    its text: the sizes are a hint to the target; the nest is as deep as the list)."""
    if isinstance(value, str):
        items = [(piece.strip(), offset) for piece, offset in split_top(value)]
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [(value, 0)]
    elif isinstance(value, (list, tuple)):
        items = [(item.strip() if isinstance(item, str) else item, 0) for item in value]
    else:
        raise TypeError(f"expects tile sizes (a list of ints and '*', or a string), got "
                        f"{type(value).__name__}")
    sizes = []
    for item, offset in items:
        size = item
        if isinstance(item, str) and item != "*":
            try:
                size = ast.literal_eval(item)
            except (ValueError, SyntaxError):
                pass
        if size == "" or (not isinstance(size, (int, str)) or isinstance(size, bool)) or (
                isinstance(size, int) and size < 1):
            raise ArgError(f"a tile size is a positive integer or '*', got {item!r}", offset)
        if isinstance(size, str) and size != "*":  # a constant expression: its text
            problem = parse_expression(size)[1]
            if problem is not None:
                raise ArgError(f"tile size {size!r}: {problem[0]}", offset + problem[1])
        sizes.append(size)
    return tuple(sizes)


def names_list(clause, value) -> tuple:
    """Keyword items: a list of items, or a comma/space-separated string as in a clause
    string (blank: no names); each item a name, a member or a section, after a modifier
    (``"zero: b"``). Returns ``(items, the names a zero: modifier zero-fills)``."""
    if isinstance(value, str):
        return data_list(clause, value) if value.strip() else ((), ())
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"expects parameter names (a list or a string), got "
                        f"{type(value).__name__}")
    items, zeroed = [], []
    for part in value:
        if not isinstance(part, str) or not part.strip():
            raise ValueError(f"{part!r} is not a parameter name")
        try:
            found, zero = data_list(clause, part)
        except ArgError as exc:
            exc.source = part
            raise
        if len(found) != 1:
            raise ValueError(f"{part!r} is not a parameter name (one item per list entry)")
        items += found
        zeroed += zero
    return tuple(items), tuple(zeroed)


#: the modifiers a data clause's list may start with (OpenACC 3.3 §2.7.7 ``copyin
#: (readonly:)``, a hint; §2.7.8, 2.7.9 ``copyout(zero:)``, ``create(zero:)``)
_MODIFIERS = {"copyin": ("readonly",), "copyout": ("zero",), "create": ("zero",)}
_MODIFIER_RE = re.compile(r"\s*([A-Za-z_]\w*)\s*:")


def data_list(clause, text) -> tuple:
    """``(items, zeroed)``: the items of a data clause's list (``_name_list``) and the
    names its ``zero:`` modifier zero-fills."""
    match = _MODIFIER_RE.match(text)
    if match is None:
        return _name_list(clause, text), ()
    allowed, modifier = _MODIFIERS.get(clause, ()), match.group(1).lower()  # (Fortran: ZERO:)
    if modifier not in allowed:
        raise ArgError(f"{clause} takes {' or '.join(m + ':' for m in allowed) or 'no modifier'}"
                       f", not {match.group(1)}: (OpenACC 3.3 §2.7)", match.start(1))
    try:
        items = _name_list(clause, text[match.end():])
    except ArgError as exc:
        exc.offset += match.end()
        raise
    return items, tuple(name for name, _ in items) if modifier == "zero" else ()


def _name_list(clause, text) -> tuple:
    """The items of a list as C writes it (``a, b``; blanks also separate): ``(name,
    Section or None)`` each; an empty item (``present(,)``, ``a,,b``) is an error
    (OpenACC 3.3 §2.7: var-list; §2.7.1 sections and members)."""
    items = data_items(text)
    for name, section in items:
        at = max(text.find(name.split(".")[0]), 0)
        if section is not None and clause == "deviceptr":
            raise ArgError(f"deviceptr takes device arrays, not sections: write "
                           f"deviceptr({name}) (OpenACC 3.3 §2.7.4)", at)
        if "." in name and clause in PRIVATE_CLAUSES:
            raise ArgError(f"{clause} takes variables, not members: {name!r} is a member; "
                           f"the members of a struct parameter are firstprivate values or "
                           f"mapped arrays already", at)
    return items


def parse_expression(text):
    """``(tree, None)`` for a valid clause expression, else
    ``(None, (message, offset))``."""
    if not text:
        return None, ("empty expression", 0)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        offset = max((exc.offset or 1) - 1, 0)
        return None, (f"not a Python expression ({exc.msg})", offset)
    for node in ast.walk(tree):
        problem = _node_problem(node)
        if problem is not None:
            return None, (problem, getattr(node, "col_offset", 0))
    return tree, None


def _node_problem(node):
    if not isinstance(node, _EXPR_NODES):
        what = _NODE_WORDS.get(type(node).__name__, f"{type(node).__name__} syntax")
        return (f"{what} is not allowed in a clause expression (names, constants, "
                f"operators, subscripts, attributes and calls of "
                f"{', '.join(EXPR_BUILTINS)} are)")
    if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                           and node.func.id in EXPR_BUILTINS):
        return f"a clause expression may call only {', '.join(EXPR_BUILTINS)}"
    if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
        return f"attribute {node.attr!r} is not allowed in a clause expression"
    return None


def _free_names(tree) -> tuple[str, ...]:
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    names = sorted((node.lineno, node.col_offset, node.id) for node in ast.walk(tree)
                   if isinstance(node, ast.Name) and id(node) not in called)
    return tuple(dict.fromkeys(name for _, _, name in names))


def count_value(value: Any, clause_name: str) -> int:
    """The positive count a ``num_gangs``/``num_workers``/``vector_length`` (or
    ``gang``/``worker``/``vector`` count) value means (OpenACC 3.3 §2.5.10-2.5.12).

    Integers (Python or NumPy) are taken as they are; a real value is truncated toward
    zero as C integer division does for positive operands, so ``(n+127)/128`` gives what
    it gives in C. (Only the final value is truncated: write ``n//128*4`` for C's
    ``n/128*4``.)

    Raises:
        ValueError: The value is not a number, not finite, a bool, or below 1; the
            message names the clause and the value.
    """
    must = "; it must be a positive integer"
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{clause_name} evaluated to {value!r}{must}")
    try:
        count, note = operator.index(value), ""
    except TypeError:
        if not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"{clause_name} evaluated to {value!r} "
                             f"({type(value).__name__}){must}") from None
        count = int(value)
        note = f" (truncated to {count})"
    if count < 1:
        raise ValueError(f"{clause_name} evaluated to {value!r}{note}{must}")
    return count


def caret(text: str | None, pos: int | None) -> str:
    """The clause string quoted with a caret under ``pos`` ('' without a string), the one
    spelling of clause errors (also ``pyacc.omp``'s)."""
    if text is None or pos is None:
        return ""
    return f"\n    {text}\n    {' ' * pos}^"


class ArgError(ValueError):
    """A malformed clause argument: ``offset`` is where it is in the argument text (or in
    ``source``, a keyword list item, when set)."""

    def __init__(self, message, offset=0, source=None):
        super().__init__(message)
        self.offset = offset
        self.source = source


# An item of a reduction list: an operator (any run of operator characters or a word)
# and ':', a variable name, or a separating comma.
_RED_TOKEN = re.compile(r"\s*(?:(?P<op>[-+*/%&|^<>!~=]+|\.[A-Za-z]+\.|[A-Za-z_]\w*|)\s*:"
                        r"|(?P<name>[A-Za-z_]\w*)|(?P<sep>,))")


def reduction_list(text) -> list[tuple[str, str]]:
    """``(op, var)`` pairs of a reduction list as C writes it (OpenACC 3.3 §2.5.15):
    ``+:a,b``, ``+:a, +:b``, ``+:total max:mx``. An item starts at ``op:``; names follow,
    separated by commas or blanks, up to the next ``op:``."""
    pairs, op, op_at, named, last, pos = [], None, 0, 0, None, 0
    while text[pos:].strip():
        match = _RED_TOKEN.match(text, pos)
        if match is None:
            at = len(text) - len(text[pos:].lstrip())
            raise ArgError(f"unexpected {text[at]!r} in the reduction list", at)
        if match.group("op") is not None:
            if op is not None and not named:
                raise ArgError(f"'{op}:' names no variable", op_at)
            op_at = match.start("op")
            op, named, last = _reduction_op(match.group("op"), op_at), 0, "op"
        elif match.group("name") is not None:
            if op is None:
                raise ArgError(f"expected 'op:var[,var...]' (e.g. '+:sum'), got "
                                f"{match.group('name')!r}", match.start("name"))
            pairs.append((op, match.group("name")))
            named, last = named + 1, "name"
        else:
            if last != "name":
                raise ArgError("empty item in the reduction list", match.start("sep"))
            last = "sep"
        pos = match.end()
    if op is None:
        raise ArgError("empty reduction list; expected 'op:var[,var...]'", 0)
    if not named:
        raise ArgError(f"'{op}:' names no variable", op_at)
    if last == "sep":
        raise ArgError("empty item in the reduction list", text.rindex(","))
    return pairs


def _reduction_op(raw, at):
    op = _OP_ALIASES.get(raw.lower(), raw.lower())  # (Fortran's MIN, .AND.: any case)
    if op in REDUCTION_OPS:
        return op
    if not raw:
        raise ArgError("missing reduction operator before ':'", at)
    close = difflib.get_close_matches(raw, REDUCTION_OPS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ArgError(f"unknown reduction operator {raw!r} (valid: "
                    f"{' '.join(REDUCTION_OPS + tuple(_OP_ALIASES))}){hint}", at)


def arguments_at(text: str, pos: int) -> int:
    """Where a clause name ending at ``pos`` has its ``(``: past the blanks before it (C
    writes ``copyin (a)`` too); ``pos`` itself when none follows (a clause without
    arguments, maybe followed by the next clause: ``nowait map(to: a)``)."""
    opening = len(text) - len(text[pos:].lstrip(" \t"))
    return opening if text[opening:opening + 1] == "(" else pos


def closing_paren(text: str, open_pos: int) -> int | None:
    """Index of the ``)`` that closes the ``(`` at ``open_pos``, or None (unbalanced)."""
    depth = 0
    for index in range(open_pos, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    return None


def split_top(text):
    """``(piece, offset)`` of ``text`` split at commas outside brackets."""
    depth, start = 0, 0
    for index, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            yield text[start:index], start
            start = index + 1
    yield text[start:], start


# ---------------------------------------------------------------- sections and members


@dataclass(frozen=True)
class Section:
    """A section of an array named in a data clause (OpenACC 3.3 §2.7.1).

    ``name`` is the parameter or member it is a section of (``"a"``, ``"s.x"``);
    ``bounds`` has one ``(first, second)`` pair per dimension written, each an int, a
    :class:`ClauseExpr` of the parameters (evaluated at each call) or None (omitted).
    C sections (``a[start:length]``, ``a[0:n][0:m]``) give ``(start, length)``;
    Fortran sections (``fortran``: ``a(lo:hi)``, ``a(1:n, 1:m)``) give ``(lo, hi)``,
    1-based and inclusive as in Fortran (the default lower bound 1). The dimensions
    written are the array's first ones, in order; the others are whole. Equal by
    meaning (``text``, the clause item as written, is not compared).
    """

    name: str
    bounds: tuple = ()
    fortran: bool = False
    text: str = field(default="", compare=False)

    def names(self) -> tuple[str, ...]:
        """Free names the bound expressions read."""
        return tuple(dict.fromkeys(name for pair in self.bounds for bound in pair
                                   if isinstance(bound, ClauseExpr) for name in bound.names))

    def index(self, namespace: Mapping[str, Any], shape: tuple) -> tuple:
        """The 0-based slices of this section of an array of ``shape``, the bounds
        evaluated in ``namespace``.

        Raises:
            ValueError: A bound is not an integer (a real value is truncated toward
                zero, as C integer division), the section has more dimensions than the
                array, or it reaches outside the array (the message says which
                dimension and by how much).
            Exception: Whatever a bound expression raises.
        """
        if len(self.bounds) > len(shape):
            raise ValueError(f"it has {len(self.bounds)} dimensions, the array has "
                             f"{len(shape)} (shape {shape})")
        return tuple(self._slice(dim, pair, extent, namespace)
                     for dim, (pair, extent) in enumerate(zip(self.bounds, shape)))

    def _slice(self, dim, pair, extent, namespace) -> slice:
        first, second = (None if b is None else bound_value(
            b.evaluate(namespace) if isinstance(b, ClauseExpr) else b) for b in pair)
        where = f"dimension {dim} (extent {extent})"
        if self.fortran:  # lo:hi, 1-based, inclusive
            lower = 1 if first is None else first
            upper = extent if second is None else second
            if lower < 1 or upper > extent or upper < lower - 1:
                raise ValueError(f"{where}: {lower}:{upper} is outside 1:{extent} (Fortran "
                                 f"sections are 1-based and inclusive)")
            return slice(lower - 1, upper)
        start = 0 if first is None else first
        length = extent - start if second is None else second
        if start < 0 or length < 0 or start + length > extent:
            raise ValueError(f"{where}: start {start}, length {length} reaches element "
                             f"{start + length - 1}, outside 0..{extent - 1} (C sections "
                             f"are [start:length])")
        return slice(start, start + length)


def bound_value(value) -> int:
    """A section bound's integer: an int (Python or NumPy) as it is, a finite real value
    truncated toward zero (C integer division: ``a[0:n/2]``).

    Raises:
        ValueError: Not a number, not finite, or a bool.
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"a bound evaluated to {value!r}; it must be an integer")
    try:
        return operator.index(value)
    except TypeError:
        if not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"a bound evaluated to {value!r} ({type(value).__name__}); "
                             f"it must be an integer") from None
        return int(value)


# a name or a member chain (``s.x``, ``s.a.b``; Fortran's ``s%x``)
_MEMBER = re.compile(r"[A-Za-z_]\w*(?:\s*[.%]\s*[A-Za-z_]\w*)*")


def data_items(text: str) -> tuple:
    """The items of a data clause's list as C and Fortran write them (OpenACC 3.3 §2.7:
    var-list; §2.7.1 sections): ``(name, Section or None)`` each, ``name`` a parameter
    or a member chain normalised to ``s.x`` (Fortran ``s%x`` too). Items are separated
    by commas and/or blanks; an empty item is an error.

    Raises:
        ArgError: A malformed item (offset into ``text``).
    """
    items = []
    for piece, at in split_top(text):
        if not piece.strip():
            raise ArgError("empty item in the name list", at + len(piece))
        pos = 0
        while True:
            pos = _skip_blanks(piece, pos)
            if pos >= len(piece):
                break
            item, pos = _data_item(piece, pos, at)
            items.append(item)
    return tuple(items)


def _skip_blanks(text, pos):
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _data_item(piece, pos, at):
    """One item of a data clause list starting at ``piece[pos]``: ``(item, end)``."""
    match = _MEMBER.match(piece, pos)
    word = re.match(r"[^\s\[(]+", piece[pos:])
    if match is None:
        shown = word.group() if word else piece[pos]
        raise ArgError(f"{shown!r} is not a parameter name", at + pos)
    name = re.sub(r"\s+", "", match.group()).replace("%", ".")
    end = match.end()
    if end < len(piece) and not piece[end].isspace() and piece[end] not in "[(":
        raise ArgError(f"{word.group()!r} is not a parameter name", at + pos)
    groups, cursor = [], _skip_blanks(piece, end)
    while cursor < len(piece) and piece[cursor] in "[(":
        close = _closing_bracket(piece, cursor)
        if close is None:
            raise ArgError(f"unbalanced {piece[cursor]!r}", at + cursor)
        groups.append((piece[cursor], piece[cursor + 1:close], at + cursor + 1))
        end = cursor = close + 1
        cursor = _skip_blanks(piece, cursor)
    if not groups:
        return (name, None), end
    text = piece[pos:end]
    return (name, _section(name, groups, re.sub(r"\s+", "", text))), end


def _closing_bracket(text, open_pos):
    """Index of the bracket closing the one at ``open_pos`` (``[`` or ``(``), or None."""
    depth = 0
    for index in range(open_pos, len(text)):
        if text[index] in "([{":
            depth += 1
        elif text[index] in ")]}":
            depth -= 1
            if depth == 0:
                return index
    return None


def _section(name, groups, text):
    """The :class:`Section` of ``name`` from its bracket groups (C ``[...]`` each one
    dimension; Fortran ``(...)`` one group for every dimension)."""
    kinds = {kind for kind, _, _ in groups}
    if kinds == {"("}:
        if len(groups) > 1:
            raise ArgError("a Fortran section is one parenthesis: a(lo:hi, lo2:hi2)",
                           groups[1][2] - 1)
        _, body, offset = groups[0]
        bounds = tuple(_range(part, offset + at, fortran=True)
                       for part, at in split_top(body))
        return Section(name, bounds, True, text)
    if kinds != {"["}:
        raise ArgError("a section is written in C ([start:length]...) or in Fortran "
                       "((lo:hi, ...)), not both", groups[0][2] - 1)
    return Section(name, tuple(_range(body, offset, fortran=False)
                               for _, body, offset in groups), False, text)


def _range(body, offset, *, fortran):
    """``(first, second)`` of one dimension: C ``start:length`` or Fortran ``lo:hi``,
    either side omitted; a single index (an element, not a section) is an error."""
    colon = top_colon(body)
    if colon is None:
        example = "a(i:i)" if fortran else "a[i:1]"
        raise ArgError(f"{body.strip() or 'an empty subscript'!r} is an element, not a "
                       f"section: write a range ({example} for one element)", offset)
    return (_bound(body[:colon], offset), _bound(body[colon + 1:], offset + colon + 1))


def top_colon(body):
    """The index of the first ':' outside brackets of ``body``, or None."""
    depth = 0
    for index, char in enumerate(body):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == ":" and depth == 0:
            return index
    return None


def _bound(text, offset):
    """One bound: None (omitted), an int, or a :class:`ClauseExpr` (names folded when
    the expression has none)."""
    body = text.strip()
    if not body:
        return None
    lead = len(text) - len(text.lstrip())
    tree, problem = parse_expression(body)
    if problem is not None:
        message, at = problem
        raise ArgError(message, offset + lead + at)
    expr = ClauseExpr(body)
    if expr.names:
        return expr
    try:
        return bound_value(expr.evaluate({}))
    except Exception as exc:  # noqa: BLE001 - the user's expression fails: 1/0, 1.5j
        raise ArgError(f"bound {body!r}: {exc}", offset + lead) from None
