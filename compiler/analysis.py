"""Analysis of a compute-region function at decoration time.

Owns :class:`KernelInfo` and :func:`analyze`, the checks every kernel passes (no
``global`` statements, generators, reserved names; clause names that name variables) and
the resolution of the module-level names a kernel reads (:func:`free_params`). The
work is done by concept in other modules: ``planner`` (loop nests), ``dependence``
(kernels loops), ``reductions``, ``access`` (written/read sets).

Invariants:
    * A module-level or closure array, or numeric scalar, that a kernel reads is a
      *free parameter*: the kernel takes it after its own parameters, and the launcher
      reads its current value at each call (API.md §6.1: never frozen at the first
      compile). Functions, modules and other objects are bound at compile time.
    * ``KernelInfo.written`` over-approximates the parameters (and free parameters) whose
      elements the kernel may write (``access``).
"""
from __future__ import annotations

import ast
import logging
import types as pytypes
from dataclasses import dataclass, field

import numpy as np

from .access import access_sets
from .clauses import ComputeClauses
from .frontend import (MISSING, RESERVED_PREFIX, FunctionSource, Scope, load_function,
                       local_names)
from .planner import NestPlan, Plan, Planner

__all__ = ["KernelInfo", "analyze", "Planner", "Plan", "NestPlan", "check_free_names"]

log = logging.getLogger("pyacc")




# ----------------------------------------------------------------------------- results


@dataclass(eq=False)
class KernelInfo:
    """What ``analyze`` learned about a decorated function.

    Attributes:
        name: The function's name.
        filename: Its source file.
        lineno: Line of its ``def``.
        params: Parameter names, in order (the kernel's argument order).
        clauses: Its :class:`ComputeClauses`.
        written: Parameters whose elements the kernel may write (over-approximation).
        read: Parameters the kernel reads (any use of the name).
        reductions: ``(op, var)`` reductions of its parallel loops, in order.
        func: The Python function itself.
    """

    name: str
    filename: str
    lineno: int
    params: tuple[str, ...]
    clauses: ComputeClauses
    written: frozenset
    read: frozenset
    reductions: tuple[tuple[str, str], ...]
    func: pytypes.FunctionType = field(repr=False)
    source: FunctionSource = field(repr=False)
    kernels: dict = field(default_factory=dict, repr=False)

    @property
    def where(self) -> str:
        """``"name (file:line)"``."""
        return f"{self.name} ({self.filename}:{self.lineno})"




# ------------------------------------------------------------------------------ analyze


def analyze(func, clauses: ComputeClauses) -> KernelInfo:
    """Analyse a compute-region function (or a routine) at decoration time.

    Args:
        func: The undecorated Python function.
        clauses: Its clauses (``parse_clauses``).

    Returns:
        The :class:`KernelInfo` that ``get_kernel`` compiles.

    Raises:
        CompileError: Unsupported constructs, clauses naming unknown variables, global or
            closure arrays; the message names ``file:line``.
    """
    source = load_function(func)
    scope = Scope(source.func, local_names(source.tree))
    check_function(source)
    _check_clause_names(source, clauses, scope.local)
    check_free_names(source, scope, strict=False)
    plan = Planner(source, clauses, scope).plan()
    written, read = access_sets(source, scope)
    reductions = tuple(dict.fromkeys(clauses.reductions + plan.reductions()))
    return KernelInfo(name=source.func.__name__, filename=source.filename,
                      lineno=source.lineno, params=source.params, clauses=clauses,
                      written=frozenset(written), read=frozenset(read),
                      reductions=reductions, func=source.func, source=source)


def check_function(source: FunctionSource) -> None:
    """Reject statements no kernel may contain (anywhere in the function)."""
    for node in ast.walk(source.tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            raise source.error("'global'/'nonlocal' statements are not allowed in "
                               "kernels; pass the value as an argument", node)
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise source.error("generators and coroutines cannot be kernels", node)
        if isinstance(node, ast.Name) and node.id.startswith(RESERVED_PREFIX):
            raise source.error(f"names starting with {RESERVED_PREFIX!r} are reserved "
                               f"for generated code ({node.id!r})", node)


def _check_clause_names(source, clauses, local):
    params = set(source.params)
    for name, kind in clauses.data_names().items():
        if name not in params:
            raise source.error(f"{kind}({name}) does not name a parameter "
                               f"(parameters: {', '.join(source.params) or 'none'})")
    for kind in ("private", "firstprivate"):
        for name in getattr(clauses, kind):
            if name not in local:
                raise source.error(f"{kind}({name}) does not name a parameter or a "
                                   f"local variable")
    for op, var in clauses.reductions:
        if var not in local:
            raise source.error(f"reduction({op}:{var}): {var!r} is not a variable of "
                               f"the function")


def _is_array_like(value) -> bool:
    return isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__")


def check_free_names(source: FunctionSource, scope: Scope, *, strict: bool) -> None:
    """Reject global/closure arrays; with ``strict``, also undefined names.

    A kernel may not use global or closure arrays (API.md §6): their data would bypass
    the data clauses. ``strict`` is used at first call, when every name must resolve.
    """
    for node in ast.walk(source.tree):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            continue
        if node.id in scope.local:
            continue
        value = scope.lookup(node.id)
        if _is_array_like(value):
            kind = "closure" if scope.is_closure(node.id) else "global"
            raise source.error(f"uses the {kind} array {node.id!r}; a kernel may not use "
                               f"global or closure arrays: pass it as an argument", node)
        if strict and value is MISSING:
            raise source.error(f"name {node.id!r} is not defined", node)
