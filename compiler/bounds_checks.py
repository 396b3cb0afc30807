"""Bounds checks of generated kernels (``boundscheck``, ``PYACC_BOUNDSCHECK=1``).

Owns :class:`BoundsChecks`: each integer index of a subscript of an array parameter (and
the index of an atomic update) wrapped in a call of a generated helper per array,
``_acc_bc_<k>(index, size, dim)``, that raises ``IndexError('pyacc-bounds:<name>',
index, size, dim)`` outside ``-size <= index < size`` (NumPy's own rule: negative
indices count from the end); the launcher turns it into an ``ExecutionError`` naming the
array. Slices, ``None``, ``...`` and subscripts of more dimensions than the array are
left as they are.
"""
from __future__ import annotations

import ast

from numba import types as nbtypes

__all__ = ["BoundsChecks"]


class BoundsChecks:
    """The checks of one generated module: ``arg_types`` gives each array's dimensions."""

    def __init__(self, arg_types):
        self.arg_types = arg_types or {}
        self.checks: dict[str, str] = {}

    def subscript(self, node: ast.Subscript):
        """Wrap each integer index of ``node`` in a named bounds check."""
        name = node.value.id if isinstance(node.value, ast.Name) else None
        numba_type = self.arg_types.get(name)
        if not isinstance(numba_type, nbtypes.Array):
            return node
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if len(elts) > numba_type.ndim or any(
                isinstance(e, ast.Starred) or (isinstance(e, ast.Constant) and (
                    e.value is None or e.value is Ellipsis)) for e in elts):
            return node
        checked = [e if isinstance(e, ast.Slice) else self._checked(name, e, dim)
                   for dim, e in enumerate(elts)]
        node.slice = ast.Tuple(elts=checked, ctx=ast.Load()) if \
            isinstance(node.slice, ast.Tuple) else checked[0]
        return node

    def index_arg(self, array, index):
        """Bounds-check the index argument of an atomic update."""
        name = array.id if isinstance(array, ast.Name) else None
        numba_type = self.arg_types.get(name)
        if not isinstance(numba_type, nbtypes.Array):
            return index
        if isinstance(index, ast.Tuple) and len(index.elts) == numba_type.ndim:
            return ast.Tuple(elts=[self._checked(name, e, d)
                                   for d, e in enumerate(index.elts)], ctx=ast.Load())
        if numba_type.ndim == 1 and not isinstance(index, ast.Tuple):
            return self._checked(name, index, 0)
        return index

    def _checked(self, name, expr, dim):
        helper = self.checks.get(name)
        if helper is None:
            helper = self.checks[name] = f"_acc_bc_{len(self.checks)}"
        shape = ast.Subscript(value=ast.Attribute(value=ast.Name(id=name, ctx=ast.Load()),
                                                  attr="shape", ctx=ast.Load()),
                              slice=ast.Constant(dim), ctx=ast.Load())
        return ast.copy_location(ast.Call(func=ast.Name(id=helper, ctx=ast.Load()),
                                          args=[expr, shape, ast.Constant(dim)],
                                          keywords=[]), expr)

    def helpers(self, cache_flag: str) -> list[str]:
        """The source of each helper the checks call."""
        return [f"@_acc_njit(nogil=True, cache={cache_flag})\n"
                f"def {helper}(index, size, dim):\n"
                f"    if index < -size or index >= size:\n"
                f"        raise IndexError('pyacc-bounds:{name}', index, size, dim)\n"
                f"    return index\n" for name, helper in self.checks.items()]
