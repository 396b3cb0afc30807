"""The ``cpu`` target: each parallel nest as Numba ``prange`` code (multicore CPU).

Owns :class:`CpuTarget`. A nest whose reductions Numba's ``prange`` recognises, with no
private copies, is emitted as a user would write it by hand (``_native_nest``); any
other nest is split into chunks run by ``prange`` with private accumulators
(``_chunked_nest``). The inner loops of a collapsed nest in the dot-product form of a
matrix product are interchanged (``interchange``).

Invariants:
    * Collapsed nests are flattened into one iteration space of ``prod(trip counts)``;
      indices are recovered by divmod once per contiguous segment of the innermost level
      (OpenACC 3.3 §2.9.1).
    * Reductions: the space is split into ``chunk_count`` chunks run by ``prange``;
      each chunk has private accumulators starting at the operator's identity, partials
      are combined in chunk order after the loop and then with the variable's value
      before the loop, which thus participates exactly once (OpenACC 3.3 §2.9.11).
"""
from __future__ import annotations

import ast
import copy

from . import interchange, runtime
from .atomics import INTRINSICS
from .codegen import RT, Target
from .reductions import COMBINE, NP
from .templates import Renamer, fill, fill_body, indent, is_const, range_bounds

__all__ = ["CpuTarget"]


class CpuTarget(Target):
    """Numba ``njit(parallel=True, nogil=True)`` with ``prange`` (multicore CPU)."""

    name = "cpu"
    builder = None  # the module being built (attach; builds hold compiler.kernel's lock)

    def attach(self, builder):
        self.builder = builder

    def imports(self):
        return [f"import numpy as {NP}",
                "from numba import njit as _acc_njit, prange as _acc_prange",
                f"from pyacc.compiler import runtime as {RT}",
                "from pyacc.compiler.atomics import " + ", ".join(
                    f"{n} as _acc_{n}" for n in sorted(set(INTRINSICS.values())))]

    def decorator(self, *, kind, parallel, boundscheck, cache):
        # NumPy's error model everywhere: a float division by zero is inf or nan, an integer
        # one 0, as NumPy gives for the arrays' elements (plain Python over them), as the
        # GPU gives, and as Numba's parallel loops always give: so a nest's serial twin
        # (below ``serial_below`` iterations) and its reductions agree with its parallel run
        options = ["nogil=True", f"cache={cache}", "error_model='numpy'"]
        if parallel and not boundscheck:
            # Exceptions raised inside prange are lost in Numba; bounds-checked
            # kernels therefore run their loops on one thread (see get_kernel).
            options.insert(0, "parallel=True")
        if boundscheck:
            options.append("boundscheck=True")
        return f"@_acc_njit({', '.join(options)})"

    def hoist_zero_d(self, loop, known_types):
        return _hoist_zero_d(loop, known_types)

    def widened(self, nest):
        """The inner loops of a native nest (no reduction or private copies): ``prange``
        over the outer level and plain loops below it, the schedule the nest had, with
        the interchange of matrix-product nests that a ``collapse`` nest gets."""
        return 0 if nest.reductions or nest.private or nest.firstprivate or \
            nest.array_reductions else nest.widen

    def parallel_nest(self, nest, body, prefix, slots):
        native = (not nest.private and not nest.firstprivate and not nest.array_reductions
                  and all(_numba_reduces(op, f"{prefix}rv_{var}", body) for op, var in nest.reductions))
        if native:
            interchanged = _interchange(nest, body, prefix, slots)
            if interchanged and self.builder is not None:
                self.builder.interchanged.add(nest.levels[0].lineno)
            stmts = _native_nest(nest, body, prefix, interchanged)
        else:
            stmts = _chunked_nest(nest, body, prefix, slots)
        below = self.builder.serial_below if self.builder is not None else 0
        # the serial twin gives the same results: no reductions (independent iterations),
        # or the chunked form (the same chunks, combined in the same order); a native
        # reduction's order is Numba's thread split, so those nests stay parallel
        if below and _straight_line(body) and not (native and nest.reductions):
            self.builder.serial_twins[nest.levels[0].lineno] = below
            return _with_serial_twin(nest, stmts, prefix, below)
        return stmts


def _straight_line(body) -> bool:
    """True when the nest's body has no loop and calls no routine: each iteration's cost
    is then small and even, the case where waking the threads can cost more than the
    loop (bodies with loops or routine calls always run in parallel)."""
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, (ast.For, ast.While)):
            return False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id.startswith("_acc_r"):
            return False
    return True


def _with_serial_twin(nest, stmts, p, below):
    """``if trips < below: <the nest on one thread> else: <the nest>``: the serial copy
    is the same code with ``range`` for ``prange`` (``crossover``)."""
    exprs, factors = {}, []
    for depth, level in enumerate(nest.levels):
        start, stop, step = range_bounds(level)
        exprs.update({f"START{depth}": start, f"STOP{depth}": stop, f"STEP{depth}": step})
        factors.append(f"{RT}.trip_count(START{depth}, STOP{depth}, STEP{depth})")
    text = (f"{p}tt = {' * '.join(factors)}\nif {p}tt < {below}:\n    SERIAL\n"
            f"else:\n    PARALLEL")
    serial = [_Serial().visit(copy.deepcopy(stmt)) for stmt in stmts]
    return fill(text, exprs, {"SERIAL": serial, "PARALLEL": stmts}, nest.levels[0])


class _Serial(ast.NodeTransformer):
    """``_acc_prange(...)`` → ``range(...)``."""

    def visit_Name(self, node):
        if node.id == "_acc_prange":
            return ast.copy_location(ast.Name(id="range", ctx=node.ctx), node)
        return node


def _interchange(nest, body, prefix, slots):
    """The innermost level interchanged with the sequential loop of its body (see
    ``interchange``), or None: only for nests of two or more levels without reductions
    (the interchanged loops sit inside the ``prange``) when the builder allows it."""
    if nest.stored_outside is None or len(nest.levels) < 2 or nest.reductions:
        return None
    found = interchange.match(nest.levels[-1], body, nest.levels, nest.stored_outside)
    if found is None:
        return None
    return interchange.emit(found, prefix, lambda name: slots.accumulator(prefix, name))


#: Reduction operators Numba's ``prange`` recognises itself (``s += x``, ``s *= x``,
#: ``s = max(s, x)``, ``s = min(s, x)``); nests with only these are emitted as plain
#: ``prange`` loops, exactly what a user would write by hand.
_NUMBA_REDUCTIONS = ("+", "*", "max", "min")
_AUGMENTED = {"+": ast.Add, "*": ast.Mult}


def _numba_reduces(op: str, name: str, body: list) -> bool:
    """True when Numba's ``prange`` will reduce ``name`` itself: ``op`` is one it knows
    and the body updates ``name`` exactly once, as ``name op= e``, ``name = name op e``
    or ``name = max/min(name, e)``. Anything else (``s = e + s``, two updates per
    iteration ...) takes the chunked form, which handles every update the analysis
    accepts."""
    if op not in _NUMBA_REDUCTIONS:
        return False
    updates = [node for stmt in body for node in ast.walk(stmt)
               if isinstance(node, (ast.Assign, ast.AugAssign))
               and any(isinstance(t, ast.Name) and t.id == name
                       for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))]
    if len(updates) != 1:
        return False
    update = updates[0]
    if isinstance(update, ast.AugAssign):
        return op in _AUGMENTED and isinstance(update.op, _AUGMENTED[op])
    value = update.value
    if op in _AUGMENTED:
        return (isinstance(value, ast.BinOp) and isinstance(value.op, _AUGMENTED[op])
                and isinstance(value.left, ast.Name) and value.left.id == name)
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id == op and len(value.args) == 2 and not value.keywords
            and isinstance(value.args[0], ast.Name) and value.args[0].id == name)


# ----------------------------------------------------------------------- nest builders


def _native_nest(nest, body, p, interchanged=None):
    """The nest as a user would write it for Numba: ``prange`` over the outermost level,
    the collapsed levels below it as plain loops (a valid schedule of the collapsed
    iteration space, OpenACC 3.3 §2.9.1), reductions left to Numba's ``prange``.
    ``interchanged`` (statements from ``interchange.emit``) replaces the innermost level.

    ``prange(stop)`` is used when the loop starts at 0 with step 1: its index is then
    unsigned, so Numba drops the negative-index wraparound checks and LLVM vectorises
    (measured 1.5× faster than ``prange(0, stop)`` on saxpy).
    """
    outer = _outer_header(nest.levels[0], p)
    lines, exprs = [outer[0]], dict(outer[1])
    inner = nest.levels[1:-1] if interchanged else nest.levels[1:]
    for depth, level in enumerate(inner, start=1):
        start, stop, step = range_bounds(level)
        exprs.update({f"START{depth}": start, f"STOP{depth}": stop, f"STEP{depth}": step})
        lines.append("    " * depth + f"for {level.target.id} in range(START{depth}, STOP{depth}, STEP{depth}):")
    lines.append("    " * (len(inner) + 1) + "BODY")
    if interchanged:
        body = interchanged
    # the body updates the chunked form's accumulators; Numba reduces the variables
    renames = {f"{p}rv_{var}": var for _, var in nest.reductions}
    body = [Renamer(renames).visit(copy.deepcopy(stmt)) for stmt in body]
    prologue = outer[2]
    return fill_body(prologue + "\n".join(lines), exprs, body, nest.levels[0])


def _outer_header(level, p):
    """``(for-line, exprs, prologue)`` of the parallel (outermost) level."""
    start, stop, step = range_bounds(level)
    var = level.target.id
    if is_const(start, 0) and is_const(step, 1):
        return f"for {var} in _acc_prange(STOP0):", {"STOP0": stop}, ""
    if is_const(step, 1):
        return f"for {var} in _acc_prange(START0, STOP0):", {"START0": start, "STOP0": stop}, ""
    prologue = (f"{p}s0 = START0\n{p}e0 = STOP0\n{p}t0 = STEP0\n"
                f"{p}n0 = {RT}.trip_count({p}s0, {p}e0, {p}t0)\n")
    return (f"for {p}k in _acc_prange({p}n0):\n    {var} = {p}s0 + {p}k * {p}t0",
            {"START0": start, "STOP0": stop, "STEP0": step}, prologue)


def _level_vars(nest, p):
    return [(f"{p}s{d}", f"{p}e{d}", f"{p}t{d}", f"{p}n{d}")
            for d in range(len(nest.levels))]


def _chunked_nest(nest, body, p, slots):
    """Chunked prange over the flattened space (collapse, reductions, privates)."""
    exprs, setup = {}, []
    names = _level_vars(nest, p)
    for depth, level in enumerate(nest.levels):
        start, stop, step = range_bounds(level)
        s, e, t, n = names[depth]
        exprs.update({f"START{depth}": start, f"STOP{depth}": stop,
                      f"STEP{depth}": step})
        lines = [f"{e} = STOP{depth}"]
        # Literal starts and steps stay literals: LLVM then sees unit-stride indexing.
        if is_const(start):
            s = repr(start.value)
        else:
            lines.insert(0, f"{s} = START{depth}")
        if is_const(step):
            t = repr(step.value)
        else:
            lines.append(f"{t} = STEP{depth}")
        names[depth] = (s, e, t, n)
        setup.append("\n".join(lines) + f"\n{n} = {RT}.trip_count({s}, {e}, {t})")
    total = " * ".join(n for _, _, _, n in names)
    setup.append(f"{p}total = {total}")
    arrays = nest.array_reductions
    # an array reduction's private copies cost memory and a combine pass each: one per
    # thread (OpenACC 3.3 §2.5.15 leaves the order of combination unspecified)
    wanted = runtime.threads_wanted() if arrays else runtime.chunks_wanted()
    setup.append(f"{p}nch = {RT}.chunk_count({p}total, {wanted})")
    for op, var in nest.reductions:
        if var in arrays:  # a private copy of the array per chunk, every element the identity
            setup.append(f"{p}pv_{var} = {NP}.full(({p}nch,) + {var}.shape, "
                         f"{slots.identity(p, op, var)}, {slots.dtype(p, op, var)})")
        else:
            setup.append(f"{p}pv_{var} = {NP}.empty({p}nch, {slots.dtype(p, op, var)})")
    chunk = [f"{p}rv_{var} = {slots.identity(p, op, var)}" for op, var in nest.reductions
             if var not in arrays]
    chunk += [f"{p}pp_{name} = {RT}.private_copy({name})" for name in nest.private]
    chunk += [f"{p}pp_{name} = {RT}.firstprivate_copy({name})"
              for name in nest.firstprivate]
    chunk += [f"{p}lo = ({p}total * {p}c) // {p}nch",
              f"{p}hi = ({p}total * ({p}c + 1)) // {p}nch"]
    chunk += _iteration_lines(nest, names, p)
    chunk += [f"{p}pv_{var}[{p}c] = {p}rv_{var}" for _, var in nest.reductions
              if var not in arrays]
    if arrays:
        body = [_PrivateCopies(p, arrays).visit(copy.deepcopy(stmt)) for stmt in body]
    text = "\n".join(setup) + f"\nfor {p}c in _acc_prange({p}nch):\n" + \
        indent("\n".join(chunk), 1) + "\n" + _combine_lines(nest, p)
    return fill_body(text, exprs, body, nest.levels[0])


class _PrivateCopies(ast.NodeTransformer):
    """An array reduction's element ``rv[k]`` becomes ``pv[c, k]``: the chunk's row of
    the partials, indexed directly (a per-chunk view ``pv[c]`` indexed in the loop ran
    17% slower on the k-means cluster sums); ``rv.shape`` becomes the array's own."""

    def __init__(self, p, arrays):
        self.p = p
        self.private = {f"{p}rv_{var}": var for var in arrays}

    def visit_Subscript(self, node):
        if not (isinstance(node.value, ast.Name) and node.value.id in self.private):
            return self.generic_visit(node)
        node.slice = self.visit(node.slice)
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        row = ast.Name(id=f"{self.p}c", ctx=ast.Load())
        node.value = ast.Name(id=f"{self.p}pv_{self.private[node.value.id]}", ctx=ast.Load())
        node.slice = ast.Tuple(elts=[row, *index], ctx=ast.Load())
        return node

    def visit_Name(self, node):
        if node.id in self.private:  # hist.shape, len(hist): the array's own
            return ast.copy_location(ast.Name(id=self.private[node.id], ctx=node.ctx), node)
        return node


def _iteration_lines(nest, names, p):
    """Lines that run iterations ``[lo, hi)`` of the flattened space, ending in BODY."""
    last = len(nest.levels) - 1
    s_l, _, t_l, n_l = names[last]
    var_l = nest.levels[last].target.id
    if last == 0:
        return [f"for {p}j in range({p}lo, {p}hi):",
                f"    {var_l} = {s_l} + {p}j * {t_l}", "    BODY"]
    lines = [f"{p}k = {p}lo", f"while {p}k < {p}hi:",
             f"    {p}q = {p}k // {n_l}",
             f"    {p}r = {p}k - {p}q * {n_l}",
             f"    {p}m = min({n_l} - {p}r, {p}hi - {p}k)"]
    for depth in range(last - 1, -1, -1):
        s, _, t, n = names[depth]
        var = nest.levels[depth].target.id
        if depth > 0:
            lines += [f"    {p}x = {p}q // {n}", f"    {var} = {s} + ({p}q - {p}x * {n}) * {t}",
                      f"    {p}q = {p}x"]
        else:
            lines += [f"    {var} = {s} + {p}q * {t}"]
    lines += [f"    for {p}j in range({p}r, {p}r + {p}m):",
              f"        {var_l} = {s_l} + {p}j * {t_l}", "        BODY",
              f"    {p}k += {p}m"]
    return lines






def _combine_lines(nest, p):
    lines = []
    for op, var in nest.reductions:
        if var in nest.array_reductions:  # element by element, chunks in order
            element = f"{var}[{p}idx]"
            lines += [f"for {p}c in range({p}nch):",
                      f"    for {p}idx in {NP}.ndindex({var}.shape):",
                      f"        {element} = " + COMBINE[op].format(
                          a=element, b=f"{p}pv_{var}[{p}c][{p}idx]")]
            continue
        acc = f"{p}tot_{var}"
        lines += [f"{acc} = {p}pv_{var}[0]",
                  f"for {p}c in range(1, {p}nch):",
                  "    " + f"{acc} = " + COMBINE[op].format(a=acc, b=f"{p}pv_{var}[{p}c]"),
                  f"{var} = " + COMBINE[op].format(a=var, b=acc)]
    return "\n".join(lines)


def _hoist_zero_d(loop, known_types):
    """Numba's parfor lowering cannot index a 0-d array (``s[()]``) inside a parallel
    nest. Replace each read ``s[()]`` of a 0-d array the nest never writes by a local
    read once before the nest (exact: nothing in the nest writes ``s``), and each
    ``s[()]`` of one it writes by ``v[0]`` of a one-element view ``v = s.reshape(1)``
    made before the nest (the same memory). Only names that may be 0-d arrays: a
    parameter typed otherwise (``a[()]`` of an n-d array is the whole array, of a tuple
    the empty tuple) is left as written. An atomic update of a 0-d array's element
    (``acc.atomic.add(s, (), x)``) updates ``v[0]`` the same way. Returns those
    assignments; the nest is changed in place."""
    def zero_d(name):
        known = known_types.get(name)
        return known is None or getattr(known, "ndim", None) == 0

    def atomic_on_zero_d(node):  # acc.atomic.<op>(s, (), v): an update of s's element
        func, args = node.func, node.args
        return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) \
            and func.value.attr == "atomic" and len(args) == 3 \
            and isinstance(args[0], ast.Name) and zero_d(args[0].id) \
            and isinstance(args[1], ast.Tuple) and not args[1].elts

    stored = {n.value.id for n in ast.walk(loop) if isinstance(n, ast.Subscript)
              and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)}
    stored |= {n.args[0].id for n in ast.walk(loop)
               if isinstance(n, ast.Call) and atomic_on_zero_d(n)}
    names = []

    class Hoist(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            args = node.args
            if atomic_on_zero_d(node):
                if args[0].id not in names:
                    names.append(args[0].id)
                args[0] = ast.copy_location(ast.Name(id=f"_acc_w_{args[0].id}", ctx=ast.Load()),
                                            args[0])
                args[1] = ast.copy_location(ast.Constant(0), args[1])
            return node

        def visit_Subscript(self, node):
            self.generic_visit(node)
            if not (isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Tuple)
                    and not node.slice.elts):
                return node
            name = node.value.id
            if not zero_d(name):
                return node
            if name not in names:
                names.append(name)
            if name in stored:
                view = ast.Name(id=f"_acc_w_{name}", ctx=ast.Load())
                return ast.copy_location(ast.Subscript(value=view, slice=ast.Constant(0),
                                                       ctx=node.ctx), node)
            return ast.copy_location(ast.Name(id=f"_acc_h_{name}", ctx=ast.Load()), node)

    for index, stmt in enumerate(loop.body):
        loop.body[index] = Hoist().visit(stmt)
    return [ast.copy_location(ast.parse(f"_acc_w_{name} = {name}.reshape(1)" if name in stored
                                        else f"_acc_h_{name} = {name}[()]").body[0], loop)
            for name in names]
