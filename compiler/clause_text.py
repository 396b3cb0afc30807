"""Clause text: what clause values may be written as, and the text helpers every clause
parser shares (OpenACC's ``compiler.clauses`` and OpenMP's ``pyacc.omp._clauses``).

Owns :class:`ClauseExpr` (a clause value written as a Python expression of the
parameters, validated and compiled once, evaluated at each call), :func:`count_value`
(what a count clause's value means, C truncation included), the reduction-list reader
(``+:a,b``, ``+:a max:b``: OpenACC 3.3 §2.5.15), :func:`caret` (the one spelling of a
clause error's pointer) and :func:`closing_paren`.

Invariants:
    * A clause expression sees only its names (parameters, then the function's globals)
      and :data:`EXPR_BUILTINS`; anything else (lambdas, comprehensions, dunder
      attributes, other calls) is a :class:`CompileError` at parse time, with a caret.
    * A malformed argument raises :class:`ArgError` with the offset of the problem, for
      the caller to quote with :func:`caret`.
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

from .errors import CompileError

__all__ = ["ClauseExpr", "count_value", "EXPR_BUILTINS", "REDUCTION_OPS", "ArgError",
           "caret", "closing_paren", "reduction_list", "parse_expression"]

#: The reduction operators (OpenACC 3.3 §2.5.15); C's ``&&``/``||`` are read as and/or.
REDUCTION_OPS = ("+", "*", "max", "min", "&", "|", "^", "and", "or")
_OP_ALIASES = {"&&": "and", "||": "or"}


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
_RED_TOKEN = re.compile(r"\s*(?:(?P<op>[-+*/%&|^<>!~=]+|[A-Za-z_]\w*|)\s*:"
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
    op = _OP_ALIASES.get(raw, raw)
    if op in REDUCTION_OPS:
        return op
    if not raw:
        raise ArgError("missing reduction operator before ':'", at)
    close = difflib.get_close_matches(raw, REDUCTION_OPS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ArgError(f"unknown reduction operator {raw!r} (valid: "
                    f"{' '.join(REDUCTION_OPS + tuple(_OP_ALIASES))}){hint}", at)


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
