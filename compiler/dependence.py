"""Dependence analysis of ``kernels`` loops (OpenACC 3.3 §2.5.3: in a ``kernels``
region the compiler decides which loops are parallel).

Owns :func:`loop_dependence`, the test the planner asks before running a ``kernels``
loop nest in parallel: scalars carried from one iteration to the next, and array
elements that one iteration writes and another reads or writes.

Invariants:
    * The test is sufficient, never optimistic: a nest it calls independent has no two
      iterations touching the same element where one of them writes it (assuming the
      subscripts stay within the array's bounds, as C and Fortran programs do).
    * Every "dependent" answer is a sentence naming the variable and the line, shown to
      the user by ``acc.explain`` / ``PYACC_INFO`` and the ``PerformanceWarning``.
"""
from __future__ import annotations

import ast

from .access import SHAPE_ATTRS, mutating_library_call
from .frontend import CallKind, classify_call, root_name

__all__ = ["carried_scalar", "fresh_locals", "array_dependence"]

_FRESH_ALLOCATORS = frozenset({"empty", "zeros", "ones", "full", "empty_like",
                               "zeros_like", "ones_like", "full_like", "copy", "array",
                               "arange"})


def _evaluation_order(node):
    """Yield nodes roughly in Python's evaluation order (values before targets)."""
    if isinstance(node, ast.Assign):
        yield from _evaluation_order(node.value)
        for target in node.targets:
            yield from _evaluation_order(target)
        return
    if isinstance(node, ast.AugAssign):
        if isinstance(node.target, ast.Name):
            yield ast.Name(id=node.target.id, ctx=ast.Load())
        yield from _evaluation_order(node.value)
        yield from _evaluation_order(node.target)
        return
    if isinstance(node, ast.For):
        yield from _evaluation_order(node.iter)
        yield from _evaluation_order(node.target)
        for stmt in node.body + node.orelse:
            yield from _evaluation_order(stmt)
        return
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _evaluation_order(child)


def carried_scalar(body, outer, allowed):
    """Reason when a scalar defined before the nest is read before it is re-assigned."""
    first = {}
    stored = set()
    for stmt in body:
        for node in _evaluation_order(stmt):
            if isinstance(node, ast.Name):
                first.setdefault(node.id, type(node.ctx).__name__)
                if isinstance(node.ctx, ast.Store):
                    stored.add(node.id)
    for name in sorted(stored):
        if name in outer and name not in allowed and first.get(name) == "Load":
            return f"scalar {name!r} carries a value from one iteration to the next"
    return ""


def fresh_locals(body, outer):
    """Names assigned in the body from a fresh allocation (private arrays)."""
    fresh = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                func = node.value.func
                name = func.attr if isinstance(func, ast.Attribute) else \
                    getattr(func, "id", None)
                if name in _FRESH_ALLOCATORS:
                    fresh.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return fresh - outer


def _index_key(slice_node):
    elts = slice_node.elts if isinstance(slice_node, ast.Tuple) else [slice_node]
    return ast.dump(ast.Tuple(elts=elts, ctx=ast.Load())), elts


def array_dependence(body, scope, loop_vars, outer, fresh):
    writes: dict[str, set] = {}
    atomic_targets = set()
    subscript_bases = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                subscript_bases.add(id(node.value))
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                if not isinstance(node.value, ast.Name):
                    return "an element is written through a nested subscript or " \
                           "attribute"
                name = node.value.id
                if name in fresh:
                    continue
                if name not in outer:
                    return f"array {name!r} is an alias assigned inside the loop"
                key, elts = _index_key(node.slice)
                if not all(any(isinstance(e, ast.Name) and e.id == v for e in elts)
                           for v in loop_vars):
                    return (f"{name!r} is written at an index that does not use the "
                            f"loop variable directly (line {node.lineno})")
                writes.setdefault(name, set()).add(key)
            if isinstance(node, ast.Call):
                kind, detail = classify_call(node, scope)
                if kind == CallKind.ATOMIC and node.args:
                    atomic_targets.add(root_name(node.args[0]))
                    for arg in node.args[:1]:
                        if isinstance(arg, ast.Name):
                            subscript_bases.add(id(arg))
                elif kind in (CallKind.ROUTINE, CallKind.UNKNOWN, CallKind.METHOD) or (
                        kind == CallKind.LIBRARY and mutating_library_call(node)):
                    for arg in list(node.args) + [k.value for k in node.keywords]:
                        name = root_name(arg)
                        if name in outer and name not in loop_vars and \
                                not _is_scalar_expr(arg):
                            return (f"the call at line {node.lineno} may write "
                                    f"{name!r}")
    for name, keys in writes.items():
        if len(keys) > 1:
            return f"{name!r} is written at more than one index expression"
        if name in atomic_targets:
            return f"{name!r} is both written and updated atomically"
        (key,) = keys
        reason = _other_uses(body, name, key, subscript_bases)
        if reason:
            return reason
    return ""


def _is_scalar_expr(node):
    return isinstance(node, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare))


def _other_uses(body, name, key, subscript_bases):
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and \
                    node.value.id == name and _index_key(node.slice)[0] != key:
                return (f"{name!r} is read at another index than it is written "
                        f"(line {node.lineno})")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id == name and node.attr in SHAPE_ATTRS:
                subscript_bases.add(id(node.value))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "len":
                for arg in node.args:
                    subscript_bases.add(id(arg))
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id == name and \
                    id(node) not in subscript_bases:
                return f"{name!r} is used as a whole (line {node.lineno})"
    return ""
