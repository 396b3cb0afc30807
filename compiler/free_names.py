"""The names a kernel reads besides its parameters, read at each call (API.md §6.1).

Owns the *free parameters* of a kernel: the module-level and closure names it reads whose
value is an array or a numeric scalar (:func:`free_params`), and the attributes of
modules it reads that are (:func:`free_chains`: ``gmod.G``, ``pkg.mod.S``, the spelling of
a Fortran module variable or a C ``extern`` global kept in another file), each made a
parameter of the kernel (:func:`with_params`) whose value the launcher reads at each call
(:func:`chain_source`, :func:`chain_value`).

Invariants:
    * A free parameter's value is never frozen at the first compile (Numba freezes the
      globals and module attributes it is given: a module attribute left to it was read
      once, and an array's writes were lost).
    * A chain's parameter is named ``root__attr`` (as a struct member's, ``s__x``), made
      unique among the function's names; ``KernelInfo.labels`` spells it ``root.attr``.
    * The constants of the numeric libraries (``np.pi``, ``math.e``: ``LIBRARY_MODULES``)
      are left to Numba, which folds them: they never change.
    * A routine's module-level and closure arrays (:func:`routine_arrays`; OpenACC 3.3
      §2.15.1: declared, so on the device) are parameters of that routine, of every
      routine that calls it and of the kernel, named as the program names them: one
      name, one array (two routines reading different arrays of one name are refused).
"""
from __future__ import annotations

import ast
import copy
import dataclasses
from types import ModuleType

import numpy as np

from .arguments import is_device_array
from .errors import CompileError
from .frontend import (MISSING, CallKind, FunctionSource, Scope, classify_call, in_library,
                       load_function, local_names)
from .structs import chain_of

__all__ = ["is_array_like", "is_free_value", "free_params", "free_chains", "with_params",
           "chain_source", "chain_value", "own_arrays", "routine_arrays", "with_routine_arrays"]


def is_array_like(value) -> bool:
    return isinstance(value, np.ndarray) or is_device_array(value)


def is_free_value(value) -> bool:
    """True for the values a kernel reads as free parameters: arrays and numeric
    scalars (not tuples, strings, functions or modules, which are bound when the kernel
    is compiled)."""
    if is_array_like(value):
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


def free_chains(source: FunctionSource) -> dict[str, tuple[str, ...]]:
    """The attributes of modules the function reads whose current value is an array or a
    numeric scalar (each step but the last a module, the first a free name; not a numeric
    library's), as ``{parameter name: (root, attr, ...)}``, sorted by parameter name."""
    scope = Scope(source.func, local_names(source.tree))
    taken = {n.id for n in ast.walk(source.tree) if isinstance(n, ast.Name)} | set(source.params)
    chains = {}
    for node in ast.walk(source.tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
            continue
        chain = chain_of(node)
        if chain is None or chain[0] in scope.local:
            continue
        chain = (chain[0], *chain[1])
        if chain not in chains.values() and _module_chain(scope.lookup(chain[0]), chain[1:]):
            name = "__".join(chain)
            while name in taken:
                name += "_"
            taken.add(name)
            chains[name] = chain
    return dict(sorted(chains.items()))


def _module_chain(value, attrs) -> bool:
    """Whether ``value.attrs[0]...attrs[-1]`` goes through modules only (not a numeric
    library's) to an array or a numeric scalar."""
    for attr in attrs:
        if not isinstance(value, ModuleType) or in_library(value.__name__):
            return False
        value = getattr(value, attr, MISSING)
    return is_free_value(value)


def with_params(source: FunctionSource, names: tuple[str, ...],
                chains: dict[str, tuple[str, ...]] | None = None) -> FunctionSource:
    """``source`` with ``names``, then the parameters of ``chains`` (``free_chains``),
    appended to its parameters, each chain read in the body replaced by its parameter
    (its tree copied)."""
    chains = chains or {}
    if not names and not chains:
        return source
    tree = copy.deepcopy(source.tree)
    if chains:
        _ChainNames({chain: name for name, chain in chains.items()}).visit(tree)
    added = (*names, *chains)
    tree.args.args += [ast.arg(arg=name, lineno=tree.lineno, col_offset=tree.col_offset)
                       for name in added]
    return dataclasses.replace(source, tree=tree, params=source.params + added)


class _ChainNames(ast.NodeTransformer):
    """``gmod.G`` → ``gmod__G`` for each chain (the outermost chain that is one:
    ``gmod.G.shape`` → ``gmod__G.shape``)."""

    def __init__(self, names):
        self.names = names

    def visit_Attribute(self, node):
        chain = chain_of(node)
        name = self.names.get((chain[0], *chain[1])) if chain is not None else None
        if name is None or not isinstance(node.ctx, ast.Load):
            return self.generic_visit(node)
        return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)


def chain_source(func, chain: tuple[str, ...]):
    """Where a chain's value is read at each call: ``(the last module's dict, attr)``, that
    module resolved now from ``func``'s names; None when it is no longer a module."""
    module = chain_value(func, chain[:-1])
    return (module.__dict__, chain[-1]) if isinstance(module, ModuleType) else None


def chain_value(func, chain: tuple[str, ...]):
    """A chain's current value, or ``MISSING``."""
    value = Scope(func, set()).lookup(chain[0])
    for attr in chain[1:]:
        if value is MISSING:
            break
        value = getattr(value, attr, MISSING)
    return value


def routine_arrays(source: FunctionSource, scope: Scope) -> dict:
    """The module-level and closure arrays read by the routines ``source`` calls and by
    the routines those call (not ``source``'s own): ``{name: the routine whose scope
    holds it}``, sorted by name. Each is a hidden parameter of the routines that reach it
    (``codegen``), its value passed down from the kernel, which reads it in that
    routine's scope at each call (``KernelInfo.owners``).

    Raises:
        CompileError: two routines read different arrays of one name.
    """
    found: dict = {}
    _routine_arrays(source, scope, found, set())
    return dict(sorted(found.items()))


def with_routine_arrays(source: FunctionSource, scope: Scope, known=()) -> tuple:
    """``(source, owners)``: ``source`` with the :func:`routine_arrays` it does not read
    itself appended to its parameters, and ``{name: owning routine}`` of those (not
    ``known`` ones: parameters made by an earlier call).

    Raises:
        CompileError: a routine's array has the name of another of the kernel's.
    """
    owners = {}
    for name, func in routine_arrays(source, scope).items():
        if name in known:
            continue
        value = Scope(func, set()).lookup(name)
        own = Scope(source.func, set()).lookup(name)  # (the kernel's free name, if any)
        if name in scope.local and not (name in source.params and own is value):
            raise CompileError(f"{source.func.__name__}: routine {func.__name__} reads the array "
                               f"{name!r}, and this function has its own {name!r}: rename one")
        if name not in source.params:
            owners[name] = func
    return with_params(source, tuple(owners)), owners


def own_arrays(source: FunctionSource, scope: Scope) -> tuple[str, ...]:
    """The module-level and closure names ``source`` reads that hold arrays, sorted."""
    return tuple(sorted({n.id for n in ast.walk(source.tree) if isinstance(n, ast.Name) and
                         isinstance(n.ctx, ast.Load) and n.id not in scope.local and
                         is_array_like(scope.lookup(n.id))}))


def _routine_arrays(source, scope, found, seen) -> None:
    for node in ast.walk(source.tree):
        kind, func = classify_call(node, scope) if isinstance(node, ast.Call) else (None, None)
        if kind is not CallKind.ROUTINE or func is None or id(func) in seen:
            continue  # (a bind named later: compiling it says what it reads)
        seen.add(id(func))
        called = load_function(func)
        inner = Scope(func, local_names(called.tree))
        for name in own_arrays(called, inner):
            value = inner.lookup(name)
            owner = found.setdefault(name, func)
            if owner is not func and Scope(owner, set()).lookup(name) is not value:
                raise CompileError(f"{source.func.__name__}: the routines {owner.__name__} and "
                                   f"{func.__name__} read different arrays named {name!r}; "
                                   f"a kernel passes one array of each name: rename one")
        _routine_arrays(called, inner, found, seen)

