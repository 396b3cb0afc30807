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
import copy
import dataclasses
import logging
import types as pytypes
from dataclasses import dataclass, field

import numpy as np

from .access import access_sets
from .clauses import ComputeClauses
from .frontend import (MISSING, RESERVED_PREFIX, FunctionSource, Scope, load_function,
                       local_names)
from .planner import NestPlan, Plan, Planner

__all__ = ["KernelInfo", "analyze", "bind_free_names", "free_params", "Planner", "Plan",
           "NestPlan", "check_free_names"]

log = logging.getLogger("pyacc")



# ----------------------------------------------------------------------------- results


@dataclass(eq=False)
class KernelInfo:
    """What ``analyze`` learned about a decorated function.

    Attributes:
        name: The function's name.
        filename: Its source file.
        lineno: Line of its ``def``.
        params: Parameter names, in order (what the user passes).
        clauses: Its :class:`ComputeClauses`.
        written: Parameters and free parameters whose elements the kernel may write
            (over-approximation).
        read: Parameters and free parameters the kernel reads (any use of the name).
        reductions: ``(op, var)`` reductions of its parallel loops, in order.
        func: The Python function itself.
        free_params: Module-level and closure names the kernel reads whose value is an
            array or a numeric scalar; the kernel takes them after ``params``, and the
            launcher passes their values at the call (:meth:`free_values`).
        source: The function's source, its tree extended with ``free_params`` as
            parameters (what code generation compiles).
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
    free_params: tuple[str, ...] = ()
    #: the planner's decisions (``Plan``), made once: at decoration, again only when the
    #: first call adds free parameters (``bind_free_names``); code generation and
    #: ``acc.explain`` use it
    plan: object = field(default=None, repr=False)
    #: set at the first compile: the planner's notes and the argument types (feedback)
    notes: list | None = field(default=None, repr=False)
    arg_types: dict | None = field(default=None, repr=False)

    @property
    def where(self) -> str:
        """``"name (file:line)"``."""
        return f"{self.name} ({self.filename}:{self.lineno})"

    @property
    def kernel_params(self) -> tuple[str, ...]:
        """The compiled kernel's parameters: ``params`` then ``free_params``."""
        return self.params + self.free_params

    def free_values(self) -> tuple:
        """The current values of the free parameters, read now (API.md §6.1: a global
        or closure name is read at each call, never frozen at the first compile).

        Raises:
            NameError: A global was deleted since (the message names the kernel).
        """
        scope = Scope(self.func, set())
        values = []
        for name in self.free_params:
            value = scope.lookup(name)
            if value is MISSING:
                raise NameError(f"{self.where} reads the module-level name {name!r}, "
                                f"which is no longer defined")
            values.append(value)
        return tuple(values)



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
    check_function(source)
    user_params = source.params
    source = with_params(source, free_params(source))
    scope = Scope(source.func, local_names(source.tree))
    _check_clause_names(source, clauses, scope)
    check_free_names(source, scope, strict=False)
    plan = Planner(source, clauses, scope).plan()
    written, read = access_sets(source, scope)
    reductions = tuple(dict.fromkeys(clauses.reductions + plan.reductions()))
    return KernelInfo(name=source.func.__name__, filename=source.filename,
                      lineno=source.lineno, params=user_params, clauses=clauses,
                      written=frozenset(written), read=frozenset(read),
                      reductions=reductions, func=source.func, source=source,
                      free_params=source.params[len(user_params):], plan=plan)


def bind_free_names(info: KernelInfo) -> None:
    """Complete ``info.free_params`` at the first call: names that could not be resolved
    at decoration (a global array defined after the function) are looked up again.

    Raises:
        CompileError: A name in a data clause is not an array or scalar at the call, or
            a clause expression reads a name that is not defined.
    """
    new = free_params(info.source)
    if new:
        info.source = with_params(info.source, new)
        info.free_params += new
        scope = Scope(info.func, local_names(info.source.tree))
        written, read = access_sets(info.source, scope)
        info.written, info.read = frozenset(written), frozenset(read)
        info.plan = Planner(info.source, info.clauses, scope).plan()
    clauses, scope = info.clauses, Scope(info.func, set(info.params))
    for name in sorted(clauses.expression_names()):
        if name not in info.params and scope.lookup(name) is MISSING:
            texts = ", ".join(f"{field}({expr.text})" for field, expr in
                              clauses.expressions().items() if name in expr.names)
            raise info.source.error(f"the clause value {texts} reads {name!r}, which is "
                                    f"neither a parameter nor a module-level name")
    known = set(info.kernel_params)
    for name, kind in info.clauses.data_names().items():
        if name not in known:
            raise info.source.error(f"{kind}({name}): {name!r} is neither a parameter nor "
                                    f"a module-level array")


def is_free_value(value) -> bool:
    """True for the values a kernel reads as free parameters: arrays and numeric
    scalars (not tuples, strings, functions or modules, which are bound when the kernel
    is compiled)."""
    if _is_array_like(value):
        return True
    return isinstance(value, (bool, int, float, complex, np.bool_, np.number))


def free_params(source: FunctionSource) -> tuple[str, ...]:
    """Free names of the function (globals, closure variables) whose current value is
    an array or a numeric scalar, sorted (OpenACC 3.3 §2.6.2: a global read in a compute
    region has an implicit data attribute like any other variable)."""
    scope = Scope(source.func, local_names(source.tree))
    found = set()
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                node.id not in scope.local and is_free_value(scope.lookup(node.id)):
            found.add(node.id)
    return tuple(sorted(found))


def with_params(source: FunctionSource, names: tuple[str, ...]) -> FunctionSource:
    """``source`` with ``names`` appended to its parameters (its tree copied)."""
    if not names:
        return source
    tree = copy.deepcopy(source.tree)
    tree.args.args += [ast.arg(arg=name, lineno=tree.lineno, col_offset=tree.col_offset)
                       for name in names]
    return dataclasses.replace(source, tree=tree, params=source.params + tuple(names))


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


def _check_clause_names(source, clauses, scope):
    params, local = set(source.params), scope.local
    free = {n.id for n in ast.walk(source.tree)
            if isinstance(n, ast.Name) and n.id not in local}
    for name, kind in clauses.data_names().items():
        if name not in params and not (name in free and scope.lookup(name) is MISSING):
            raise source.error(f"{kind}({name}) does not name a parameter or a "
                               f"module-level array the function reads "
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
    """Reject global/closure arrays that are not parameters of ``source`` (a routine's
    free arrays: a kernel's are free parameters, see :func:`free_params`); with
    ``strict``, also undefined names. ``strict`` is used at first call, when every name
    must resolve.
    """
    for node in ast.walk(source.tree):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            continue
        if node.id in scope.local:
            continue
        value = scope.lookup(node.id)
        if _is_array_like(value):
            kind = "closure" if scope.is_closure(node.id) else "global"
            raise source.error(f"uses the {kind} array {node.id!r}; a routine (a function "
                               f"called from a kernel) may not read {kind} arrays: pass it "
                               f"as an argument (kernels themselves may)", node)
        if strict and value is MISSING:
            raise source.error(f"name {node.id!r} is not defined", node)
