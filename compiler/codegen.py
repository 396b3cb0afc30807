"""Source generation: a planned kernel → the text of an importable Numba module.

Owns :class:`ModuleBuilder` (one generated module: imports, bound globals, routines,
bounds-check helpers and the kernel ``_acc_kernel``), :class:`FunctionRewriter` (markers,
atomics, ``on_device``, globals and routine calls rewritten for the target, each parallel
nest handed to the target) and the :class:`Target` protocol. The targets live in
``cpu_target`` (Numba ``prange``) and ``cuda_target`` (GPU kernels and a driver).

Invariants:
    * Generated names start with ``_acc_``; user code may not use that prefix.
    * The text is a pure function of (user sources, bound constants, clauses, argument
      kinds, target, device type, bounds checking, reduction types), so its hash is a
      sound cache key. Objects that cannot be written as source (functions, Numba
      dispatchers, ufuncs) are *injected* into the module after import; each one is
      described in a comment, so the text still changes when they do.
    * Module-level names a kernel reads that may change between calls (arrays, numeric
      scalars) are not bound here: they are extra kernel parameters
      (``KernelInfo.free_params``) that the launcher reads at each call.
    * Reduction partial types are placeholders (``_ACC_RTYPE_…``) until
      :meth:`ReductionSlots.fill` replaces them (after the typing probe).
"""
from __future__ import annotations

import ast
import dataclasses
import builtins
import copy
import hashlib
import inspect
import math
import types
from dataclasses import dataclass, field

import numpy as np

from . import interchange, markers
from .analysis import check_free_names
from .free_names import own_arrays, with_params, with_routine_arrays
from .atomics import INTRINSICS, atomic_problem
from .bounds_checks import BoundsChecks
from .frontend import (MISSING, CallKind, FunctionSource, Scope, classify_call,
                       is_numeric_constant, load_function, local_names, routine_function)
from .planner import NestPlan, LoopPlan
from .privates import NestCopies, privatize
from .reductions import NP, ReductionSlots, narrowed_returns
from .templates import Renamer

__all__ = ["Target", "ModuleBuilder", "FunctionRewriter", "KERNEL_NAME", "CACHE_FLAG", "RT",
           "add_function"]

KERNEL_NAME = "_acc_kernel"
#: The name a generated module's decorators read for ``cache=``: the loader binds it
#: (True when the module runs from its file in the kernel cache, False from memory).
CACHE_FLAG = "_acc_cache"
#: Name of ``compiler.runtime`` in generated modules.
RT = "_acc_rt"


# ------------------------------------------------------------------------------ targets


class Target:
    """How a target turns a planned nest into code (protocol; subclass per target).

    Attributes:
        name: Target name (``"cpu"``; later ``"cuda"``).
    """

    name = "abstract"
    #: The generated module's name of the runtime whose ``private_copy`` and
    #: ``firstprivate_copy`` make private copies outside nests (``private_copy``).
    copies = RT
    #: Whether a nest guarded by run-time conditions (``NestPlan.conditions``) may be
    #: emitted as ``if conditions: <parallel> else: <as written>``.
    runtime_conditions = True

    def decorator(self, *, kind: str, parallel: bool, boundscheck: bool,
                  cache: bool) -> str:
        """Decorator source for a function of ``kind`` (``kernel`` or ``routine``)."""
        raise NotImplementedError

    def imports(self) -> list[str]:
        """Import lines the generated module needs for this target."""
        raise NotImplementedError

    def parallel_nest(self, nest: NestPlan, body: list, prefix: str,
                      slots: "ReductionSlots") -> list:
        """Statements replacing a parallel nest whose rewritten body is ``body``.

        ``slots`` gives the source of each reduction's partial dtype and identity.
        """
        raise NotImplementedError

    def widened(self, nest: NestPlan) -> int:
        """How many of the inner loops ``nest.widen`` counts this target adds to the
        nest's levels (a GPU: all, one space of threads); the others run inside each
        iteration, as written."""
        return 0

    def hoist_zero_d(self, loop: ast.For, known_types: dict) -> list:
        """Statements to run before nest ``loop`` so that it indexes no 0-d array
        (``s[()]``; the nest is changed in place): Numba's parfor lowering needs it
        (``cpu_target``), GPU kernels do not."""
        return []

    def atomic_function(self, op: str) -> ast.expr:
        """The function a kernel calls for ``acc.atomic.<op>`` (array, index, value)."""
        return ast.Name(id=f"_acc_{INTRINSICS[op]}", ctx=ast.Load())

    def attach(self, builder: "ModuleBuilder") -> None:
        """Called once by the builder that uses this target (targets that keep
        per-module state, like ``cuda``, are created per build)."""

    def finish_kernel(self, tree: ast.FunctionDef, source: FunctionSource) -> ast.FunctionDef:
        """The kernel function after its nests were rewritten (last chance to
        restructure it); the CPU keeps it as it is."""
        return tree

    def finish_routine(self, tree: ast.FunctionDef, source: FunctionSource) -> ast.FunctionDef:
        """A routine (device function) after its rewrite; the CPU keeps it as it is."""
        return tree

    def private_copy(self, name: str, first: bool) -> str:
        """Source of an expression: a private copy of array ``name`` (``first``: with its
        values, ``firstprivate``) outside a parallel nest (``privates``)."""
        return f"{self.copies}.{'first' if first else ''}private_copy({name})"


# ------------------------------------------------------------------------ the rewriter


class FunctionRewriter(ast.NodeTransformer):
    """Rewrites one function of the generated module for the target.

    Args:
        builder: The module being built (binds globals, routines, helpers).
        source: The function.
        fidx: Index of the function in the module (prefix of its bound globals).
        plan: Parallel nests to turn into target loops (None: everything sequential).
    """

    def __init__(self, builder: "ModuleBuilder", source: FunctionSource, fidx: int,
                 plan: LoopPlan | None):
        self.builder = builder
        self.source = source
        self.scope = Scope(source.func, local_names(source.tree))
        self.fidx = fidx
        self.plan = plan
        self.nest_count = 0
        self.in_nest = False

    # -- calls

    def visit_Call(self, node):
        kind, detail = classify_call(node, self.scope)
        if kind == CallKind.LOOP:
            return self.visit(node.args[0])
        if kind == CallKind.CACHE:  # (a hint used as a value: None, as in Python)
            return ast.copy_location(ast.Constant(None), node)
        if kind == CallKind.ON_DEVICE:
            return ast.copy_location(ast.Constant(self._on_device(node, detail)), node)
        if kind == CallKind.HOST:
            raise self.source.error(f"{ast.unparse(node.func)} is a routine of the host runtime "
                                    "and cannot run in a kernel: call it before the region and "
                                    "pass its value as an argument", node)
        if kind == CallKind.ATOMIC:
            return self._atomic(node, detail)
        if kind == CallKind.ROUTINE:
            detail = detail or routine_function(self.scope.resolve(node.func))  # (bind: raises)
            name = self.builder.add_routine(detail)
            node.func = ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node.func)
            node.args = [self.visit(a) for a in self._positional(node, detail)] + [
                ast.Name(id=array, ctx=ast.Load()) for array in self.builder.arrays[name]]
            node.keywords = []  # (its arrays, last: ``free_names.routine_arrays``)
            return node
        if kind == CallKind.LIBRARY:
            interchange.mark_pure(node, detail)
        return self.generic_visit(node)

    def _positional(self, node, func) -> list:
        """A routine call's arguments in ``func``'s parameter order: keywords placed,
        defaults filled in as constants (a routine is compiled without them)."""
        params = list(inspect.signature(func).parameters.values())
        given = {k.arg: k.value for k in node.keywords}
        if None in given or any(isinstance(a, ast.Starred) for a in node.args) or \
                len(node.args) > len(params):
            raise self.source.error(f"call {func.__name__} with its parameters written out "
                                    f"(no *args or **kwargs, at most {len(params)})", node)
        unknown = sorted(set(given) - {param.name for param in params})
        if unknown:
            raise self.source.error(f"routine {func.__name__} has no parameter "
                                    f"{unknown[0]!r}", node)
        args = list(node.args)
        for param in params[len(args):]:
            if param.name in given:
                args.append(given.pop(param.name))
            elif param.default is not param.empty and is_numeric_constant(param.default):
                args.append(ast.copy_location(_constant_expr(param.default), node))
            else:
                what = "has no value" if param.default is param.empty else \
                    f"has the default {param.default!r}, not a number: pass it"
                raise self.source.error(f"routine {func.__name__}: parameter "
                                        f"{param.name!r} {what}", node)
        if given:  # (given positionally too)
            raise self.source.error(f"routine {func.__name__}: parameter "
                                    f"{next(iter(given))!r} given twice", node)
        return args

    def _on_device(self, node, query=None):
        if query is not None:  # omp.is_initial_device(): takes no argument
            if node.args or node.keywords:
                raise self.source.error(f"{ast.unparse(node.func)}() takes no arguments", node)
            return markers.on_device_value(query, self.builder.device_type)
        if len(node.args) != 1 or node.keywords:
            raise self.source.error("acc.on_device takes one device type", node)
        try:
            query = ast.literal_eval(node.args[0])
        except ValueError:
            query = self.scope.resolve(node.args[0])
        if not isinstance(query, str):
            raise self.source.error("acc.on_device needs a literal device type string",
                                    node)
        return markers.on_device_value(query, self.builder.device_type)

    def _atomic(self, node, op):
        problem = atomic_problem(node, op, self.builder.arg_types or {})
        if problem is not None:
            raise self.source.error(problem, node)
        args = [self.visit(a) for a in node.args]
        if self.builder.boundscheck:
            args[1] = self.builder.bounds.index_arg(args[0], args[1])
        func = self.builder.target.atomic_function(op)
        return ast.copy_location(ast.Call(func=func, args=args, keywords=[]), node)

    # -- names

    def visit_Name(self, node):
        if not isinstance(node.ctx, ast.Load) or node.id in self.scope.local or \
                node.id.startswith("_acc_"):  # generated names are locals
            return node
        return self.builder.bind_global(self, node)

    def visit_Attribute(self, node):
        value = self.scope.resolve(node) if _root_is_free(node, self.scope) else MISSING
        if value is not MISSING and is_numeric_constant(value):
            return ast.copy_location(_constant_expr(value), node)
        return self.generic_visit(node)

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if self.builder.boundscheck:
            return self.builder.bounds.subscript(node)
        return node

    # -- loops

    def visit_For(self, node):
        nest = None if self.plan is None or self.in_nest else \
            self.plan.nests.get((node.lineno, node.col_offset))
        if nest is None:
            return self.generic_visit(node)
        for var in nest.array_reductions:  # (its private copies would be scalars)
            if getattr((self.builder.arg_types or {}).get(var), "ndim", None) == 0:
                raise self.source.error(f"reduction on the 0-d array {var!r}: reduce into a "
                                        f"one-element array ({var} = np.zeros(1), {var}[0] += ...) "
                                        "or a scalar variable the function returns", node)
        hoisted = self.builder.target.hoist_zero_d(node, self.builder.arg_types or {})
        if hoisted:  # 0-d arrays (x[()]): see Target.hoist_zero_d
            rest = self.visit_For(node)
            return [self.visit(stmt) for stmt in hoisted] + _flatten(
                rest if isinstance(rest, list) else [rest])
        if nest.conditions:
            if not self.builder.target.runtime_conditions:
                return self.generic_visit(node)  # this target runs the loop as written
            sequential = ast.NodeTransformer.generic_visit(self, copy.deepcopy(node))
        private, firstprivate = self.builder.copies.of(nest)
        levels = [node]  # (the target sees the copies: an inner loop's private arrays too)
        while len(levels) < len(nest.levels) + self.builder.target.widened(
                dataclasses.replace(nest, private=private, firstprivate=firstprivate)):
            levels.append(levels[-1].body[0])
        nest = NestPlan(tuple(levels), True, nest.reductions, private,
                        firstprivate, array_reductions=nest.array_reductions,
                        conditions=nest.conditions)
        self.in_nest = True
        try:
            inner = nest.levels[-1]
            for level in nest.levels:
                level.iter = self.visit(level.iter)
            body = [self.visit(stmt) for stmt in inner.body]
        finally:
            self.in_nest = False
        body = _flatten(body)
        prefix = f"_acc_{self.nest_count}_"
        self.nest_count += 1
        mapping = {var: f"{prefix}rv_{var}" for _, var in nest.reductions}
        mapping.update({n: f"{prefix}pp_{n}" for n in nest.private + nest.firstprivate})
        body = [Renamer(mapping).visit(stmt) for stmt in body]
        nest = _rewritten_nest(nest, self.builder.names_outside(nest.levels[0]),
                               self.builder.interchange)
        parallel = self.builder.target.parallel_nest(nest, body, prefix, self.builder.slots)
        if not nest.conditions:
            return parallel
        # the dependence test's run-time conditions: parallel when they hold, else the
        # loop as written (OpenACC 3.3 §2.5.3 leaves the choice to the compiler)
        test = ast.parse(" and ".join(f"({c})" for c in nest.conditions), mode="eval").body
        return ast.copy_location(ast.If(test=test, body=_flatten([parallel]),
                                        orelse=[sequential]), node)


def _rewritten_nest(nest, outside, interchange_allowed):
    """The nest as code generation sees it: private names that are defined only inside
    the nest need no chunk copy; the names stored ``outside`` it are recorded for the loop
    interchange (when the builder allows one)."""
    private = tuple(n for n in nest.private if n in outside)
    return NestPlan(nest.levels, nest.parallel, nest.reductions, private,
                    nest.firstprivate, nest.reason,
                    stored_outside=frozenset(outside) if interchange_allowed else None,
                    array_reductions=nest.array_reductions, conditions=nest.conditions)


def _names_outside(tree, nest_node):
    """Parameters and names stored outside the nest's lines. (``tree`` may be another
    copy of the function's tree than the one ``nest_node`` belongs to, so the nest is
    recognised by its lines, not by node identity: a ``for`` statement spans whole lines.)"""
    first, last = nest_node.lineno, nest_node.end_lineno
    names = {a.arg for a in tree.args.args}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and \
                not first <= node.lineno <= last:
            names.add(node.id)
    return names


def _flatten(stmts):
    out = []
    for stmt in stmts:
        out.extend(stmt if isinstance(stmt, list) else [stmt])
    return out


def _root_is_free(node, scope):
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id not in scope.local


def _constant_expr(value) -> ast.expr:
    """An expression for a numeric constant (inf/nan and numpy scalars included)."""
    if isinstance(value, tuple):
        return ast.Tuple(elts=[_constant_expr(v) for v in value], ctx=ast.Load())
    if isinstance(value, np.generic):
        inner = _constant_expr(value.item())
        call = ast.Call(func=ast.Attribute(value=ast.Name(id=NP, ctx=ast.Load()),
                                           attr=type(value).__name__, ctx=ast.Load()),
                        args=[inner], keywords=[])
        interchange.mark_pure(call, type(value))
        return call
    if isinstance(value, float) and not math.isfinite(value):
        name = "nan" if math.isnan(value) else "inf"
        expr = ast.Attribute(value=ast.Name(id=NP, ctx=ast.Load()), attr=name,
                             ctx=ast.Load())
        return ast.UnaryOp(op=ast.USub(), operand=expr) if value < 0 else expr
    return ast.Constant(value)


# ------------------------------------------------------------------------ the module


@dataclass
class _Block:
    text: str
    source: FunctionSource | None
    origin_lines: list = field(default_factory=list)  # generated line -> user line


class ModuleBuilder:
    """Builds the text of one generated module.

    Args:
        target: The code-generation target.
        device_type: Device the kernel runs on (for ``on_device``).
        boundscheck: Emit index checks (``PYACC_BOUNDSCHECK=1``).
        arg_types: Numba types of the kernel's parameters, by name.
        cache: Let the decorators cache on disk as the loader says (``cache=_acc_cache``,
            a name the loader binds: False when the module runs from memory); False
            emits ``cache=False`` (the in-memory probe).
        serial: Ignore the plan: every loop runs as written (probe, ``serial``).
        interchange: Let the target interchange loops of a nest (``interchange``).
        serial_below: Give straight-line nests a serial twin run below this trip count
            (``crossover``; 0: none).
    """

    def __init__(self, target: Target, *, device_type: str, boundscheck: bool,
                 arg_types: dict, cache: bool = True, serial: bool = False,
                 interchange: bool = False, serial_below: int = 0):
        self.target = target
        self.serial_below = serial_below
        self.serial_twins: dict = {}  # line of a nest -> trip count below which it is serial
        self.interchange = interchange
        self.device_type = markers.normalise_device_type(device_type)
        self.boundscheck = boundscheck
        self.arg_types = arg_types
        self.cache = cache
        self.cache_flag = CACHE_FLAG if cache else "False"
        self.serial = serial
        self.slots = ReductionSlots()
        self.lines: list[str] = []
        self.injected: dict[str, object] = {}
        self.routines: dict[int, str] = {}
        #: each routine's arrays (``free_names.routine_arrays``), its last parameters
        self.arrays: dict[str, tuple] = {}
        self._adding: list[int] = []  # the routines being added (a call back to one: recursion)
        #: a routine calls itself (or one that calls it): Numba's disk cache cannot hold such a
        #: module (a second process's load crashed), so none of its functions is cached on disk
        self.recursive = False
        self.blocks: list[_Block] = []
        self.bounds = BoundsChecks(arg_types)  # (``boundscheck``: the subscripts' checks)
        self.footer: list[str] = []
        self.fcount = 0
        self.clauses = None  # the construct's ComputeClauses (launch shape on cuda)
        self.current_source: FunctionSource | None = None  # the kernel being rewritten
        self.interchanged: set = set()  # lines of the nests whose loops were interchanged
        self.copies = NestCopies({}, frozenset())  # the kernel's private copies (privates)
        target.attach(self)

    def names_outside(self, nest_node) -> frozenset:
        """The kernel's parameters and the names it stores outside the nest ``nest_node``
        starts, the private copies made at its top included (``privates``)."""
        return frozenset(_names_outside(self.current_source.tree, nest_node)) | self.copies.defined

    # -- globals

    def bind_global(self, rewriter: FunctionRewriter, node: ast.Name):
        """Expression that stands for free name ``node.id`` in the generated module."""
        source, scope = rewriter.source, rewriter.scope
        value = scope.lookup(node.id)
        if value is MISSING:
            raise source.error(f"name {node.id!r} is not defined", node)
        if is_numeric_constant(value):
            return ast.copy_location(_constant_expr(value), node)
        if isinstance(value, str):
            return ast.copy_location(ast.Constant(value), node)
        if _is_builtin(node.id, value, scope):
            return node
        routine = routine_function(value)
        if routine is not None:
            return ast.copy_location(ast.Name(id=self.add_routine(routine),
                                              ctx=ast.Load()), node)
        name = f"_acc_g{rewriter.fidx}_{node.id}"
        if hasattr(value, "__spec__") and isinstance(getattr(value, "__name__", None),
                                                     str) and _is_module(value):
            line = f"import {value.__name__} as {name}"
        else:
            self.injected[name] = value
            line = f"{name} = None  # injected: {_describe(value)}"
        if line not in self.lines:
            self.lines.append(line)
        return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)

    # -- functions

    def add_kernel(self, source: FunctionSource, plan: LoopPlan, *, parallel: bool):
        """Add the kernel function (named ``_acc_kernel``)."""
        fidx = self._next_index()
        tree = copy.deepcopy(source.tree)
        narrowed_returns(tree, plan.reductions() + getattr(self.clauses, "reductions", ()),
                         self.arg_types)
        plan = None if self.serial else plan
        self.copies = privatize(tree, plan, self.clauses, self.target, self.arg_types)
        rewriter = FunctionRewriter(self, source, fidx, plan)
        self.current_source = source
        tree = rewriter.visit(tree)
        tree = self.target.finish_kernel(tree, source)
        tree.name = KERNEL_NAME
        parallel = parallel and not self.serial and bool(plan.nests)
        decorator = self.target.decorator(kind="kernel", parallel=parallel,
                                          boundscheck=self.boundscheck, cache=self.cache_flag)
        self.add_block(decorator, tree, source)

    def add_routine(self, func) -> str:
        """Compile ``func`` as a device function in this module; returns its name."""
        if id(func) in self.routines:
            self.recursive |= id(func) in self._adding
            return self.routines[id(func)]
        source = load_function(func)
        name = f"_acc_r{len(self.routines)}_{func.__name__}"
        self.routines[id(func)] = name
        own = own_arrays(source, Scope(func, local_names(source.tree)))  # (then its callees')
        source = with_params(source, own)
        source, callees = with_routine_arrays(source, Scope(func, local_names(source.tree)))
        self.arrays[name] = (*own, *callees)
        scope = Scope(source.func, local_names(source.tree))
        check_free_names(source, scope, strict=True)
        rewriter = FunctionRewriter(self, source, self._next_index(), None)
        self._adding.append(id(func))
        try:
            tree = self.target.finish_routine(rewriter.visit(copy.deepcopy(source.tree)), source)
        finally:
            self._adding.pop()
        tree.name = name
        decorator = self.target.decorator(kind="routine", parallel=False,
                                          boundscheck=self.boundscheck, cache=self.cache_flag)
        self.add_block(decorator, tree, source)
        return name

    def _next_index(self):
        self.fcount += 1
        return self.fcount - 1

    def add_block(self, decorator, tree, source):
        """Add function ``tree`` (from ``source``) under ``decorator`` to the module."""
        ast.fix_missing_locations(tree)
        text = decorator + "\n" + ast.unparse(tree)
        origin = _line_origins(tree, text)
        self.blocks.append(_Block(text, source, [source.lineno] + origin))

    # -- text

    def text(self, header: str) -> tuple[str, list]:
        """The module text and its line map: ``linemap[n]`` is ``(file, line)`` of the
        user statement behind generated line ``n`` (1-based), or None."""
        lines = [header] + self.target.imports() + self.lines + [""]
        for helper in self.bounds.helpers(self.cache_flag):
            lines.extend(helper.split("\n"))
        linemap = [None] * (len(lines) + 1)
        for block in self.blocks:
            lines.append("")
            linemap.append(None)
            block_lines = block.text.split("\n")
            lines.extend(block_lines)
            linemap.extend((block.source.filename, n) for n in block.origin_lines)
        lines.extend([""] + self.footer)
        text = "\n".join(lines) + "\n"
        if self.recursive:
            text = text.replace(f"cache={CACHE_FLAG}", "cache=False")
        return text, linemap


def add_function(builder, info, plan):
    """Add the function of ``info`` to ``builder``: a routine as a device function bound to
    ``KERNEL_NAME``, a compute region as the kernel (parallel unless ``serial``)."""
    construct = info.clauses.construct
    if construct == "routine":
        builder.footer.append(f"{KERNEL_NAME} = {builder.add_routine(info.func)}")
        return
    builder.add_kernel(info.source, plan, parallel=construct != "serial")


def _line_origins(tree, text):
    """User line of each generated line of ``text`` (decorator line excluded)."""
    reparsed = ast.parse(text.split("\n", 1)[1])
    origins: dict[int, int] = {}
    for new, old in zip(ast.walk(reparsed.body[0]), ast.walk(tree)):
        if hasattr(new, "lineno") and getattr(old, "lineno", None):
            origins.setdefault(new.lineno, old.lineno)
    count = text.count("\n")
    result, last = [], tree.lineno
    for line in range(1, count + 1):
        last = origins.get(line, last)
        result.append(last)
    return result


def _is_builtin(name, value, scope):
    return name not in scope.func.__globals__ and getattr(builtins, name, None) is value


def _is_module(value):
    return isinstance(value, types.ModuleType)


def _describe(value) -> str:
    module = getattr(value, "__module__", None) or type(value).__module__
    qualname = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) \
        or type(value).__qualname__
    text = f"{type(value).__name__} {module}.{qualname}"
    py_func = getattr(value, "py_func", None)
    if py_func is not None:
        try:
            digest = hashlib.sha256(inspect.getsource(py_func).encode()).hexdigest()[:16]
            text += f" source={digest}"
        except (OSError, TypeError):
            text += f" id={id(value)}"
    return text.replace("\n", " ")
