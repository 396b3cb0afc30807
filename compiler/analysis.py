"""Analysis of a kernel's AST: loop nests, reductions, privates, and what it writes.

Owns :class:`KernelInfo`, :func:`analyze` (decoration time) and :class:`Planner`, which
decides for every loop of a function whether it is a parallel loop nest, with which
collapse depth, reductions and private variables. Code generation re-runs the planner at
first call (names defined after decoration are resolved then), so the plan and the
checks always come from this one module.

Invariants:
    * A parallel nest is ``levels`` tightly nested ``for v in range(...)`` loops whose
      bounds depend only on values computed before the nest, with no ``break``/``return``
      inside (OpenACC 3.3 §2.9.1 collapse, §2.9 loop restrictions).
    * Every reduction variable of a nest is updated only by statements of its operator
      (OpenACC 3.3 §2.9.11); undeclared scalars updated only that way become implicit
      reductions (logged at debug level on the ``pyacc`` logger).
    * ``KernelInfo.written`` over-approximates the parameters whose elements the kernel
      may write (element stores, augmented stores, atomics, arrays handed to routines,
      unknown calls or mutating methods, through local aliases); never under-approximates.
"""
from __future__ import annotations

import ast
import logging
import types as pytypes
from dataclasses import dataclass, field

import numpy as np

from . import markers
from .clauses import ComputeClauses, parse_loop_clauses
from .errors import CompileError
from .frontend import (MISSING, RESERVED_PREFIX, ROUTINE_ATTR, CallKind, FunctionSource, Scope,
                       classify_call, load_function, local_names, root_name)

__all__ = ["KernelInfo", "analyze", "Planner", "Plan", "NestPlan", "check_free_names"]

log = logging.getLogger("pyacc")

# Reduction operators by AST operator (OpenACC 3.3 §2.5.15); "-" accumulates into "+".
_AUG_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.BitAnd: "&", ast.BitOr: "|",
            ast.BitXor: "^"}
_BIN_OPS = {ast.Add: "+", ast.Mult: "*", ast.BitAnd: "&", ast.BitOr: "|",
            ast.BitXor: "^"}
_BOOL_OPS = {ast.And: "and", ast.Or: "or"}
# ndarray methods that do not write their array.
_READONLY_METHODS = frozenset({
    "copy", "sum", "prod", "mean", "std", "var", "min", "max", "argmin", "argmax", "any",
    "all", "dot", "reshape", "ravel", "flatten", "transpose", "astype", "item",
    "nonzero", "cumsum", "cumprod", "view", "conj", "conjugate", "tolist", "take",
    "repeat", "squeeze", "swapaxes", "searchsorted"})
_SHAPE_ATTRS = frozenset({"shape", "size", "ndim", "dtype", "itemsize", "nbytes",
                          "strides"})
_FRESH_ALLOCATORS = frozenset({"empty", "zeros", "ones", "full", "empty_like",
                               "zeros_like", "ones_like", "full_like", "copy", "array",
                               "arange"})


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


@dataclass
class NestPlan:
    """One loop nest of a kernel and how it runs.

    Attributes:
        levels: The ``levels`` tightly nested ``For`` nodes (outermost first).
        parallel: True for a parallel (prange) nest; False: runs as written.
        reductions: ``(op, var)`` pairs reduced over the nest.
        private: Names private to each chunk of iterations (``private`` clause).
        firstprivate: Names copied into each chunk (``firstprivate`` clause).
        reason: Why a ``kernels`` nest runs sequentially.
        stored_outside: Names the function assigns outside the nest, and its
            parameters; set by code generation when it may interchange loops of the
            nest (``interchange``), None otherwise.
    """

    levels: tuple
    parallel: bool
    reductions: tuple = ()
    private: tuple = ()
    firstprivate: tuple = ()
    reason: str = ""
    stored_outside: frozenset | None = None

    @property
    def key(self):
        """Position of the outermost loop: identifies the nest in a copy of the tree."""
        node = self.levels[0]
        return (node.lineno, node.col_offset)


@dataclass
class Plan:
    """Every parallel nest of a function, keyed by :attr:`NestPlan.key`."""

    nests: dict = field(default_factory=dict)

    def reductions(self):
        """All ``(op, var)`` reductions, in source order, without repeats."""
        seen = []
        for nest in self.nests.values():
            for item in nest.reductions:
                if item not in seen:
                    seen.append(item)
        return tuple(seen)


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


# ------------------------------------------------------------------------------ planner


class Planner:
    """Finds the loop nests of a function and decides how each runs.

    Args:
        source: The function.
        clauses: The construct's clauses.
        scope: Name resolution for the function.
        log_decisions: Emit debug records (at first call, not at decoration).
    """

    def __init__(self, source: FunctionSource, clauses: ComputeClauses, scope: Scope,
                 *, log_decisions: bool = False):
        self.source = source
        self.clauses = clauses
        self.scope = scope
        self.log_decisions = log_decisions
        self.result = Plan()

    def plan(self) -> Plan:
        """Plan the whole function; raises ``CompileError`` on unsupported loops."""
        construct = self.clauses.construct
        body = self.source.tree.body
        if construct in ("parallel_loop", "kernels_loop"):
            self._plan_combined(body)
        elif construct == "parallel":
            self._plan_parallel(body, inside=False)
        elif construct == "kernels":
            for stmt in body:
                self._plan_kernels(stmt)
        self._check_markers()
        return self.result

    # -- constructs

    def _plan_combined(self, body):
        loops = [s for s in body if isinstance(s, (ast.For, ast.While, ast.AsyncFor))]
        if not loops:
            raise self.source.error(f"{self.clauses.construct} needs a loop: the function "
                                    f"body has no top-level 'for' loop")
        first = loops[0]
        if not isinstance(first, ast.For):
            raise self.source.error("a 'while' loop cannot be the parallel loop: its trip "
                                    "count is unknown before the loop", first)
        if len(loops) > 1:
            raise self.source.error(
                f"{self.clauses.construct} has one loop nest, but a second top-level loop "
                f"starts here; use acc.parallel/acc.kernels with acc.loop markers",
                loops[1])
        marker = self._marker_clauses(first)
        collapse = max(self.clauses.collapse, marker.collapse if marker else 1)
        levels = self._levels(first, collapse)
        if self.clauses.seq or (marker is not None and marker.seq):
            self._add(levels, parallel=False, reason="seq clause")
            return
        declared = self.clauses.reductions + (marker.reductions if marker else ())
        private = self.clauses.private + (marker.private if marker else ())
        if self.clauses.construct == "kernels_loop" and not (
                self.clauses.independent or (marker is not None and marker.independent)):
            reason = self._dependence(levels, declared)
            if reason:
                self._add(levels, parallel=False, reason=reason)
                return
        self._add(levels, parallel=True, declared=declared, private=private,
                  firstprivate=self.clauses.firstprivate)

    def _plan_parallel(self, stmts, inside):
        for stmt in stmts:
            if isinstance(stmt, ast.For) and not inside:
                marker = self._marker_clauses(stmt)
                if marker is not None and not marker.seq:
                    levels = self._levels(stmt, marker.collapse)
                    self._add(levels, parallel=True,
                              declared=self.clauses.reductions + marker.reductions,
                              private=self.clauses.private + marker.private,
                              firstprivate=self.clauses.firstprivate)
                    continue
            for child in _child_blocks(stmt):
                self._plan_parallel(child, inside)

    def _plan_kernels(self, stmt):
        if isinstance(stmt, ast.For):
            marker = self._marker_clauses(stmt)
            if marker is None or not marker.seq:
                collapse = marker.collapse if marker else 1
                levels = self._levels(stmt, collapse)
                declared = marker.reductions if marker else ()
                reason = "" if marker is not None and marker.independent else \
                    self._dependence(levels, declared)
                if not reason:
                    self._add(levels, parallel=True, declared=declared,
                              private=marker.private if marker else ())
                    return
                self._note_sequential(stmt, reason)
        for child in _child_blocks(stmt):
            for inner in child:
                self._plan_kernels(inner)

    # -- nests

    def _add(self, levels, *, parallel, declared=(), private=(), firstprivate=(),
             reason=""):
        if not parallel:
            if reason:
                self._note_sequential(levels[0], reason)
            return
        reductions = self._reductions(levels, declared)
        nest = NestPlan(tuple(levels), True, reductions, tuple(dict.fromkeys(private)),
                        tuple(dict.fromkeys(firstprivate)))
        self.result.nests[nest.key] = nest

    def _note_sequential(self, node, reason):
        if self.log_decisions:
            log.debug("%s: loop at %s:%d runs sequentially: %s",
                      self.source.func.__name__, self.source.filename, node.lineno, reason)

    def _marker_clauses(self, loop: ast.For):
        """The clauses of ``acc.loop(...)`` wrapping the loop's iterable, or None."""
        call = loop.iter
        if not isinstance(call, ast.Call):
            return None
        kind, _ = classify_call(call, self.scope)
        if kind != CallKind.LOOP:
            return None
        return self._parse_marker(call)

    def _parse_marker(self, call: ast.Call):
        if len(call.args) != 1 or any(k.arg is None for k in call.keywords):
            raise self.source.error("acc.loop takes one iterable and keyword clauses",
                                    call)
        values = {}
        for keyword in call.keywords:
            try:
                values[keyword.arg] = ast.literal_eval(keyword.value)
            except ValueError:
                raise self.source.error(f"acc.loop clause {keyword.arg}= must be a "
                                        f"literal", keyword.value) from None
        try:
            return parse_loop_clauses(**values)
        except CompileError as exc:
            raise self.source.error(exc.reason, call) from None

    def _levels(self, loop: ast.For, collapse: int):
        """The ``collapse`` tightly nested loops starting at ``loop`` (validated)."""
        levels = [loop]
        for depth in range(1, collapse):
            body = levels[-1].body
            if len(body) != 1 or not isinstance(body[0], ast.For):
                where = body[0] if body and not isinstance(body[0], ast.For) else \
                    (body[1] if len(body) > 1 else levels[-1])
                raise self.source.error(
                    f"collapse({collapse}) needs {collapse} tightly nested 'for' loops; "
                    f"this statement sits between loop levels {depth} and {depth + 1}",
                    where)
            levels.append(body[0])
        for level in levels:
            self._check_level(level)
        self._check_bounds(levels)
        self._check_body(levels[-1].body)
        return levels

    def _range_call(self, loop: ast.For) -> ast.Call | None:
        call = loop.iter
        if isinstance(call, ast.Call) and classify_call(call, self.scope)[0] == \
                CallKind.LOOP and call.args:
            call = call.args[0]
        if isinstance(call, ast.Call) and classify_call(call, self.scope)[0] == \
                CallKind.RANGE:
            return call
        return None

    def _check_level(self, loop: ast.For):
        if not isinstance(loop.target, ast.Name):
            raise self.source.error("a parallel loop needs a single loop variable", loop)
        call = self._range_call(loop)
        if call is None or call.keywords or not 1 <= len(call.args) <= 3 or any(
                isinstance(a, ast.Starred) for a in call.args):
            raise self.source.error(
                "a parallel loop must iterate over range(...): the trip count of other "
                "iterables is unknown before the loop", loop)
        if loop.orelse:
            raise self.source.error("'for ... else' is not allowed on a parallel loop",
                                    loop.orelse[0])
        if len(call.args) == 3 and isinstance(call.args[2], ast.Constant) and \
                call.args[2].value == 0:
            raise self.source.error("range() step must not be zero", call)

    def _check_bounds(self, levels):
        stored = _stored_names(levels[0].body)
        targets = {lvl.target.id for lvl in levels}
        for depth, level in enumerate(levels):
            for arg in self._range_call(level).args:
                for name in _loaded_names(arg):
                    if name in targets or (name in stored and depth > 0):
                        raise self.source.error(
                            f"collapse: the bounds of this loop depend on {name!r}, which "
                            f"changes inside the nest; bounds must depend only on values "
                            f"computed before the nest", level)

    def _check_body(self, body):
        for stmt in body:
            for node, loop_depth in _walk_with_loop_depth(stmt):
                if isinstance(node, ast.Return):
                    raise self.source.error("'return' inside a parallel loop is not "
                                            "supported", node)
                if isinstance(node, ast.Break) and loop_depth == 0:
                    raise self.source.error("'break' out of a parallel loop is not "
                                            "supported (the iterations run in parallel)",
                                            node)

    def _check_markers(self):
        """Validate every acc.loop marker's clauses, parallel or not."""
        for node in ast.walk(self.source.tree):
            if isinstance(node, ast.Call) and \
                    classify_call(node, self.scope)[0] == CallKind.LOOP:
                self._parse_marker(node)

    # -- reductions

    def _reductions(self, levels, declared):
        """Validate declared reductions and find implicit ones; returns (op, var) pairs."""
        body = levels[-1].body
        updates, reads = _scalar_updates(body, self.scope)
        declared_ops = {var: op for op, var in declared}
        result = []
        for var, op in declared_ops.items():
            for found, node in updates.get(var, ()):
                if found is None or not _same_op(op, found):
                    raise self.source.error(
                        f"reduction({op}:{var}): this statement is not a '{op}' update of "
                        f"{var!r}", node)
            result.append((op, var))
        outer = self._defined_outside(levels[0])
        for var, found in updates.items():
            if var in declared_ops or var not in outer:
                continue
            ops = {_canonical(op) for op, _ in found}
            if None in ops or len(ops) != 1 or var in reads:
                continue
            op = ops.pop()
            result.append((op, var))
            if self.log_decisions:
                log.debug("%s: %r is updated with '%s' in the loop at %s:%d; treated as "
                          "reduction(%s:%s)", self.source.func.__name__, var, op,
                          self.source.filename, levels[0].lineno, op, var)
        return tuple(result)

    def _defined_outside(self, nest_node):
        inside = {id(n) for n in ast.walk(nest_node)}
        names = set(self.source.params)
        for node in ast.walk(self.source.tree):
            if id(node) not in inside and isinstance(node, ast.Name) and \
                    isinstance(node.ctx, ast.Store):
                names.add(node.id)
        return names

    # -- kernels dependence test

    def _dependence(self, levels, declared) -> str:
        """Why iterations of the nest may depend on each other ('' when independent).

        Sufficient test for ``kernels`` (OpenACC 3.3 §2.5.3: the compiler decides):
        every array written is written at one index expression that contains each loop
        variable directly, and read nowhere else; scalars assigned inside are private
        or reductions.
        """
        body = levels[-1].body
        loop_vars = {lvl.target.id for lvl in levels}
        outer = self._defined_outside(levels[0])
        try:
            self._reductions(levels, declared)
        except CompileError as exc:
            return exc.reason
        reduction_vars = {var for _, var in self._reductions(levels, declared)}
        fresh = _fresh_locals(body, outer)
        reason = _carried_scalar(body, outer, reduction_vars | loop_vars)
        if reason:
            return reason
        return _array_dependence(body, self.scope, loop_vars, outer, fresh)


# ------------------------------------------------------------------------ AST helpers


def _child_blocks(stmt):
    """The statement lists nested in a compound statement."""
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(stmt, "handlers", ()):
        yield handler.body


def _stored_names(stmts):
    return {n.id for s in stmts for n in ast.walk(s)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _loaded_names(node):
    return {n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _walk_with_loop_depth(node, depth=0):
    """Yield ``(node, depth)`` where depth counts enclosing loops inside the body."""
    yield node, depth
    if isinstance(node, (ast.FunctionDef, ast.Lambda, ast.ClassDef)):
        return
    inner = depth + 1 if isinstance(node, (ast.For, ast.While)) else depth
    for name, value in ast.iter_fields(node):
        children = value if isinstance(value, list) else [value]
        for child in children:
            if isinstance(child, ast.AST):
                if isinstance(node, (ast.For, ast.While)) and name == "orelse":
                    yield from _walk_with_loop_depth(child, depth)
                else:
                    yield from _walk_with_loop_depth(child, inner)


def _same_op(declared, found):
    return _canonical(found) == declared


def _canonical(op):
    return "+" if op == "-" else op


def _reduction_pattern(stmt, scope):
    """``(var, op, var_node)`` when ``stmt`` is a reduction update, else None."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        op = _AUG_OPS.get(type(stmt.op))
        var = stmt.target.id
        if op and var not in _loaded_names(stmt.value):
            return var, op, stmt.target
        return None
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and
            isinstance(stmt.targets[0], ast.Name)):
        return None
    var, value = stmt.targets[0].id, stmt.value
    operands, op = None, None
    if isinstance(value, ast.BinOp) and type(value.op) in _BIN_OPS:
        operands, op = [value.left, value.right], _BIN_OPS[type(value.op)]
    elif isinstance(value, ast.BoolOp) and len(value.values) == 2:
        operands, op = value.values, _BOOL_OPS[type(value.op)]
    elif isinstance(value, ast.Call) and len(value.args) == 2 and not value.keywords:
        target = scope.resolve(value.func)
        if target is max or target is min:
            operands, op = value.args, target.__name__
    if operands is None:
        return None
    mine = [o for o in operands if isinstance(o, ast.Name) and o.id == var]
    others = [o for o in operands if o not in mine]
    if len(mine) != 1 or len(others) != 1 or var in _loaded_names(others[0]):
        return None
    if op in ("and", "or") and operands[0] is not mine[0]:
        return None  # `x and s` is not `s and x` in Python
    return var, op, mine[0]


def _scalar_updates(body, scope):
    """Map each stored name to [(op or None, node)], and the set read elsewhere."""
    updates: dict[str, list] = {}
    pattern_nodes = set()
    for stmt in body:
        for node in ast.walk(stmt):
            found = _reduction_pattern(node, scope) if isinstance(node, ast.stmt) \
                else None
            if found:
                var, op, var_node = found
                updates.setdefault(var, []).append((op, node))
                pattern_nodes.add(id(var_node))
                if isinstance(node, ast.AugAssign):
                    pattern_nodes.add(id(node.target))
                else:
                    pattern_nodes.add(id(node.targets[0]))
    reads = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and id(node) not in pattern_nodes:
                if isinstance(node.ctx, ast.Store):
                    updates.setdefault(node.id, []).append((None, node))
                else:
                    reads.add(node.id)
    return updates, reads


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


def _carried_scalar(body, outer, allowed):
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


def _fresh_locals(body, outer):
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


def _array_dependence(body, scope, loop_vars, outer, fresh):
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
                        kind == CallKind.LIBRARY and _mutating_library_call(node)):
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


def _mutating_library_call(call):
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name == "copyto" or any(k.arg == "out" for k in call.keywords)


def _other_uses(body, name, key, subscript_bases):
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and \
                    node.value.id == name and _index_key(node.slice)[0] != key:
                return (f"{name!r} is read at another index than it is written "
                        f"(line {node.lineno})")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id == name and node.attr in _SHAPE_ATTRS:
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


# ------------------------------------------------------------------ written / read sets


def access_sets(source: FunctionSource, scope: Scope):
    """Parameters the function may write (elements) and reads: ``(written, read)``."""
    params = set(source.params)
    aliases = _aliases(source.tree, params)
    written, read = set(), set()

    def mark(node):
        name = root_name(node)
        if name is not None:
            written.update(aliases.get(name, ()))

    for node in ast.walk(source.tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            read.update(aliases.get(node.id, ()))
        if isinstance(node, (ast.Subscript, ast.Attribute)) and \
                isinstance(node.ctx, ast.Store):
            mark(node)
        if isinstance(node, ast.Call):
            _mark_call(node, scope, mark)
    return written & params, read & params


def _mark_call(call, scope, mark):
    kind, detail = classify_call(call, scope)
    if kind in (CallKind.LOOP, CallKind.ON_DEVICE, CallKind.RANGE):
        return
    if kind == CallKind.ATOMIC:
        if call.args:
            mark(call.args[0])
        return
    if kind == CallKind.LIBRARY:
        if _mutating_library_call(call):
            for arg in call.args[:1] + [k.value for k in call.keywords if k.arg == "out"]:
                mark(arg)
        return
    if isinstance(call.func, ast.Attribute) and kind == CallKind.METHOD:
        if call.func.attr not in _READONLY_METHODS:
            mark(call.func.value)
    if kind == CallKind.ROUTINE and detail is not None:
        written_params = _routine_written(detail)
        if written_params is not None:
            _mark_routine_arguments(call, detail, written_params, mark)
            return
    for arg in list(call.args) + [k.value for k in call.keywords]:
        mark(arg)


def _mark_routine_arguments(call, routine, written_params, mark):
    """Mark only the arguments bound to parameters the routine may write."""
    params = routine.__code__.co_varnames[: routine.__code__.co_argcount]
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred) or position >= len(params) or params[position] in written_params:
            mark(arg)
    for keyword in call.keywords:
        if keyword.arg is None or keyword.arg in written_params:
            mark(keyword.value)


_ROUTINE_WRITES: dict = {}


def _routine_written(routine) -> frozenset | None:
    """The parameters a routine may write, from its own analysis (``acc.routine``'s
    ``KernelInfo``, or an access-set analysis of an implicit routine); None when it
    cannot be analysed (then every argument counts as written)."""
    info = getattr(routine, ROUTINE_ATTR, None)
    if info is not None:
        return info.written
    if routine in _ROUTINE_WRITES:
        return _ROUTINE_WRITES[routine]
    _ROUTINE_WRITES[routine] = None  # a recursive call sees "unknown": conservative
    try:
        source = load_function(routine)
        written, _ = access_sets(source, Scope(source.func, local_names(source.tree)))
        _ROUTINE_WRITES[routine] = frozenset(written)
    except Exception:  # not analysable (no source, a builtin ...): stay conservative
        _ROUTINE_WRITES[routine] = None
    return _ROUTINE_WRITES[routine]


def _aliases(tree, params):
    """Map each variable to the parameters whose memory it may refer to."""
    aliases = {p: {p} for p in params}
    changed = True
    while changed:
        changed = False
        for node in ast.walk(tree):
            for target, value in _bindings(node):
                sources = set()
                for name in _array_sources(value):
                    sources |= aliases.get(name, set())
                for name in _bound_names(target):
                    if sources - aliases.get(name, set()):
                        aliases.setdefault(name, set()).update(sources)
                        changed = True
    return aliases


def _bindings(node):
    if isinstance(node, ast.Assign):
        return [(t, node.value) for t in node.targets]
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
        return [(node.target, node.value)]
    if isinstance(node, ast.For):
        return [(node.target, node.iter)]
    if isinstance(node, ast.NamedExpr):
        return [(node.target, node.value)]
    return []


def _bound_names(target):
    """Names a target rebinds (``a`` in ``a, b = ...``; none in ``a[i] = ...``)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _bound_names(elt)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def _array_sources(value):
    """Names whose memory ``value`` may refer to (skips shapes, len(), range())."""
    if isinstance(value, ast.Attribute) and value.attr in _SHAPE_ATTRS:
        return set()
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
            value.func.id in ("len", "range"):
        return set()
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
            value.func.attr == "loop":
        return set().union(*(_array_sources(a) for a in value.args)) if value.args \
            else set()
    if isinstance(value, ast.Name):
        return {value.id}
    names = set()
    for child in ast.iter_child_nodes(value):
        names |= _array_sources(child)
    return names
