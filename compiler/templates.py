"""Source templates of generated code, and the bounds of ``range`` loop headers.

Owns :func:`fill` (parse a template, give its nodes the user's line, splice expressions
and statement lists into its placeholders), :func:`range_bounds` and :func:`is_const`,
shared by the CPU code generator (``codegen``), the loop interchange (``interchange``)
and the CUDA target (``cuda_target``).

Invariants:
    * A placeholder expression is an upper-case name (``STOP0``); a placeholder statement
      is a statement consisting of an upper-case name alone (``BODY``). Both are replaced
      by deep copies, so one node may be spliced into several places.
    * Every node parsed from a template carries the line of ``where``, so a generated line
      maps back to the user's loop in error messages.
"""
from __future__ import annotations

import ast
import copy

__all__ = ["fill", "fill_body", "range_bounds", "is_const", "Renamer", "indent"]


class _Substitute(ast.NodeTransformer):
    """Replace placeholder names by expressions and placeholder statements by lists."""

    def __init__(self, exprs: dict, statements: dict):
        self.exprs = exprs
        self.statements = statements

    def visit_Name(self, node):
        if node.id in self.exprs:
            return copy.deepcopy(self.exprs[node.id])
        return node

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Name) and node.value.id in self.statements:
            return copy.deepcopy(self.statements[node.value.id])
        return self.generic_visit(node)


def fill(text: str, exprs: dict, statements: dict, where: ast.AST) -> list:
    """The statements of template ``text`` located at ``where``'s line, with ``exprs``
    (name → expression) and ``statements`` (name → list of statements) spliced in."""
    stmts = ast.parse(text).body
    for stmt in stmts:
        for node in ast.walk(stmt):
            if "lineno" in node._attributes:
                node.lineno = node.end_lineno = where.lineno
                node.col_offset = node.end_col_offset = 0
    out = []
    for stmt in stmts:
        new = _Substitute(exprs, statements).visit(stmt)
        out.extend(new if isinstance(new, list) else [new])
    return out


def range_bounds(level: ast.For):
    """``(start, stop, step)`` expressions of a loop's ``range(...)`` header."""
    args = list(level.iter.args)
    if len(args) == 1:
        return ast.Constant(0), args[0], ast.Constant(1)
    if len(args) == 2:
        return args[0], args[1], ast.Constant(1)
    return args[0], args[1], args[2]


def is_const(node, value=None) -> bool:
    """True for an integer literal (equal to ``value`` when given)."""
    return isinstance(node, ast.Constant) and isinstance(node.value, int) and (
        value is None or node.value == value)


class Renamer(ast.NodeTransformer):
    """Renames variables (``Name`` nodes) by a mapping; other names are kept."""

    def __init__(self, mapping):
        self.mapping = mapping

    def visit_Name(self, node):
        if node.id in self.mapping:
            return ast.copy_location(ast.Name(id=self.mapping[node.id], ctx=node.ctx),
                                     node)
        return node


def fill_body(text, exprs, body, where):
    """``templates.fill`` with the nest body as placeholder ``BODY``."""
    return fill(text, exprs, {"BODY": body}, where)


def indent(text, levels):
    """``text`` with every non-empty line indented by ``levels`` levels."""
    pad = "    " * levels
    return "\n".join(pad + line if line else line for line in text.split("\n"))
