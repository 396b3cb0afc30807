"""Python builtins a GPU kernel compiler lacks, written in the forms it has (``cuda`` target).

Owns :func:`pairwise_extrema`: ``min(a, b, c)`` and ``max(a, b, c, d)`` of three or more
values (Fortran's ``MIN(dt, dtc, dtu)``, C's nested ``fmin``) become nested two-value
calls, ``min(min(a, b), c)``: numba-cuda-mlir lowers only the two-value form.

Invariants: the nested form returns what the builtin returns, left to right (Python's
``min(a, b)`` keeps ``a`` unless ``b < a``: each step keeps the first minimum, NaNs
included); a call with keywords, a starred argument or one iterable is left as written,
and so is a ``min``/``max`` that is not the builtin.
"""
from __future__ import annotations

import ast

__all__ = ["pairwise_extrema"]


def pairwise_extrema(stmts: list, shadowed: dict) -> list:
    """``stmts`` with every builtin ``min``/``max`` of three or more values nested into
    two-value calls; ``shadowed``: the module's injected names (a ``min`` there that is
    not the builtin stays as written)."""
    return [_Pairwise(shadowed).visit(stmt) for stmt in stmts]


class _Pairwise(ast.NodeTransformer):
    def __init__(self, shadowed: dict):
        self.shadowed = shadowed

    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        if not (isinstance(func, ast.Name) and func.id in ("min", "max") and
                len(node.args) > 2 and not node.keywords and
                not any(isinstance(a, ast.Starred) for a in node.args) and
                self.shadowed.get(func.id, {"min": min, "max": max}[func.id]) in (min, max)):
            return node
        value = node.args[0]
        for arg in node.args[1:]:
            value = ast.copy_location(ast.Call(func=ast.Name(id=func.id, ctx=ast.Load()),
                                               args=[value, arg], keywords=[]), node)
        return value
