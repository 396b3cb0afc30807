"""Loop interchange of a sequential inner loop with the innermost collapsed level (CPU).

Owns :func:`match` (recognise the pattern in a rewritten nest body), :func:`emit` (the
interchanged statements) and the purity mark the rewriter puts on calls it proved free
of side effects (:func:`mark_pure`).

The pattern is the dot-product form of matrix multiplication, written the way OpenACC
codes write it::

    for i in range(n):              # collapse(2): both levels are independent loops
        for j in range(m):          # <- the innermost collapsed level
            total = 0.0             # PRE: scalars set before the sequential loop
            for k in range(p):      # KLOOP: bounds that do not depend on j
                total += a[i, k] * b[k, j]   # KBODY: scalar assignments only
            c[i, j] = total         # POST: anything that leaves PRE's scalars alone

Run as written, every ``j`` walks a column of ``b`` (a stride of ``m`` elements per
``k``): one element per cache line. Interchanged, the scalars of PRE are expanded into
one array over ``j`` (scalar expansion), and the ``j`` loop moves inside the ``k``
loop, so each ``k`` sweeps a contiguous row of ``b`` and LLVM vectorises it::

    for jx in range(nj): j = ...; PRE; acc_total[jx] = total
    for k in range(p):
        for jx in range(nj): j = ...; total = acc_total[jx]; KBODY; acc_total[jx] = total
    for jx in range(nj): j = ...; total = acc_total[jx]; POST

Why it is exact (results are bit-identical, not just close):
    * The iterations of the collapsed levels are independent (OpenACC 3.3 §2.9.1
      collapse: the loop construct's ``independent``, implied on loops of a parallel
      construct by §2.9.9, applies to every associated loop), so statement instances of
      different ``j`` may run in any order: distributing PRE, KLOOP and POST into three
      loops over ``j`` and swapping ``j`` with ``k`` keeps every dependence.
    * Within one ``j``, PRE, every ``k`` in order and POST run in their original order,
      so each accumulator sees the same operations in the same order (no re-association).
    * The expanded array has exactly the scalar's Numba type (``ReductionSlots``' typing
      probe; every assignment of the scalar is in PRE or KBODY, so the type the probe
      unifies is the type of the value carried around the ``k`` loop). When that type is
      not a number or a boolean, the kernel is rebuilt without interchange.

What the matcher demands (anything else is left as written):
    * PRE: one or more ``name = expr`` statements; KBODY: ``name = expr`` /
      ``name op= expr`` statements; every expression free of side effects (names,
      constants, arithmetic, comparisons, element reads, calls :func:`mark_pure`
      accepted: builtins like ``abs``/``max``, ``math``/``cmath`` functions, NumPy ufuncs
      on their inputs only).
    * The scalars of PRE (the *carried* names) and those KBODY assigns (its *temporaries*)
      are assigned nowhere else in the function; temporaries are assigned before they are
      read and appear nowhere outside KBODY; PRE reads only values fixed before the
      ``j`` loop, ``j`` and earlier PRE scalars.
    * KLOOP is ``for k in range(...)`` without ``else``; its bounds read neither ``j``
      nor any name the ``j`` body assigns; ``k`` appears nowhere outside KLOOP.
    * POST does not assign the carried names, the loop variables or ``k``, and has no
      ``break``/``continue``/``return``.
    * The loop variables of the nest are not assigned in its body.
    * It pays (:func:`_profitable`): KBODY reads some array along ``j`` in its last,
      row-major contiguous index (``b[k, j]``), and reads none along ``k`` in its last
      index while moving with ``j`` (``bt[j, k]``: contiguous as written). The rule
      assumes C (row-major) order, NumPy's default; the generated code is the same for
      every layout, and stays exact for all of them.

The interchanged loops run when the ``j`` loop has at least :data:`MIN_TRIPS`
iterations; shorter ones run as written (too short to pay for the accumulator array).
"""
from __future__ import annotations

import ast
import builtins
import cmath
import copy
import math
from dataclasses import dataclass

import numpy as np

from .templates import fill, is_const, range_bounds

__all__ = ["Interchange", "match", "emit", "mark_pure", "MIN_TRIPS"]

#: Fewer iterations of the ``j`` loop than this run as written.
MIN_TRIPS = 16

#: Attribute set on ``ast.Call`` nodes whose callee is known to be free of side effects.
PURE_MARK = "_pyacc_pure"

_PURE_BUILTINS = frozenset(getattr(builtins, name) for name in (
    "abs", "min", "max", "float", "int", "complex", "bool", "round", "pow"))

#: Expression nodes an operand of KBODY/PRE may contain (calls are checked apart).
_PURE_NODES = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare,
               ast.IfExp, ast.Subscript, ast.Tuple, ast.Attribute, ast.Call,
               ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def mark_pure(call: ast.Call, callee) -> None:
    """Mark ``call`` as free of side effects when ``callee`` (the object its function
    expression resolves to) is a known pure function called on its inputs only."""
    if call.keywords:
        return
    pure = False
    try:
        if callee in _PURE_BUILTINS:
            pure = True
        elif isinstance(callee, np.ufunc):
            pure = len(call.args) <= callee.nin  # a further positional argument is `out`
        elif isinstance(callee, type) and issubclass(callee, np.generic):
            pure = len(call.args) <= 1  # a NumPy scalar constructor: np.float32(x)
        elif callable(callee):
            name = getattr(callee, "__name__", None)
            pure = isinstance(name, str) and any(
                getattr(module, name, None) is callee for module in (math, cmath))
    except TypeError:  # unhashable callee
        pure = False
    if pure:
        setattr(call, PURE_MARK, True)


@dataclass
class Interchange:
    """A matched innermost level.

    Attributes:
        level: The innermost collapsed ``for`` (the ``j`` loop).
        pre: PRE statements.
        kloop: The sequential ``for k in range(...)`` loop.
        post: POST statements.
        carried: Names assigned by PRE, in order (each gets an accumulator array).
    """

    level: ast.For
    pre: list
    kloop: ast.For
    post: list
    carried: tuple


# ------------------------------------------------------------------------------ matching


def match(level: ast.For, body: list, levels: tuple,
          stored_outside: frozenset) -> Interchange | None:
    """The interchange of ``level`` (innermost collapsed level, rewritten ``body``) with
    the sequential loop of its body, or None when the body is not of the pattern.

    Args:
        level: The innermost collapsed level.
        body: Its rewritten body.
        levels: Every level of the nest (their variables must stay unassigned).
        stored_outside: Names the function assigns outside the nest (and parameters).
    """
    split = _split(body)
    if split is None:
        return None
    pre, kloop, post = split
    loop_vars = {lv.target.id for lv in levels}
    carried = tuple(dict.fromkeys(stmt.targets[0].id for stmt in pre))
    temps = _kbody_temporaries(kloop.body, carried)
    if temps is None:
        return None
    k = kloop.target.id
    j = level.target.id
    body_stores = _stored(body)
    own = set(carried) | set(temps) | {k}
    if own & (loop_vars | stored_outside) or k in carried or k in temps \
            or body_stores & loop_vars:
        return None
    if not _pre_reads_ok(pre, body_stores, j):
        return None
    if _names(kloop.iter) & (body_stores | {j}) or "range" in (body_stores | stored_outside):
        return None
    kbody_reads = _names(*kloop.body) - set(carried) - set(temps) - {k, j}
    if kbody_reads & body_stores:
        return None
    post_names = _names(*post)
    if post_names & (set(temps) | {k}) or _stored(post) & (set(carried) | loop_vars):
        return None
    if any(isinstance(node, (ast.Break, ast.Continue, ast.Return, ast.Yield,
                             ast.YieldFrom, ast.Global, ast.Nonlocal))
           for stmt in post for node in ast.walk(stmt)):
        return None
    if not _profitable(kloop.body, j, k):
        return None
    return Interchange(level, pre, kloop, post, carried)


def _profitable(stmts, j, k):
    """True when the interchange turns strided reads into contiguous ones: some element
    read in KBODY has ``j`` (and not ``k``) in its last index, the unit-stride one of a
    row-major array (``b[k, j]``), and none has ``k`` in its last index while moving
    with ``j`` (``bt[j, k]`` is contiguous as written and would become strided)."""
    gain = False
    for node in (n for stmt in stmts for n in ast.walk(stmt)):
        if not isinstance(node, ast.Subscript):
            continue
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        last, every = _names(index[-1]), _names(*index)
        if k in last and j in every:
            return False
        gain = gain or (j in last and k not in last)
    return gain


def _split(body):
    """(PRE, KLOOP, POST) of ``body``, or None."""
    loops = [n for n, stmt in enumerate(body) if isinstance(stmt, ast.For)]
    if not loops or loops[0] == 0:
        return None
    at = loops[0]
    pre, kloop, post = body[:at], body[at], body[at + 1:]
    if not all(_simple_assign(stmt) for stmt in pre):
        return None
    if not (isinstance(kloop.target, ast.Name) and not kloop.orelse and kloop.body
            and _is_range(kloop.iter)):
        return None
    return pre, kloop, post


def _is_range(node):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "range" and 1 <= len(node.args) <= 3 and not node.keywords
            and all(_pure(arg) for arg in node.args))


def _simple_assign(stmt):
    """``name = pure`` (PRE)."""
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and _pure(stmt.value))


def _kbody_temporaries(stmts, carried):
    """Names KBODY assigns that are not carried, when every statement is a pure scalar
    assignment and each of them is assigned before it is read; else None."""
    assigned: list[str] = []
    stored = _stored(stmts)
    for stmt in stmts:
        if isinstance(stmt, ast.AugAssign):
            target, reads = stmt.target, _names(stmt.value) | {getattr(stmt.target, "id", "")}
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, reads = stmt.targets[0], _names(stmt.value)
        else:
            return None
        if not isinstance(target, ast.Name) or not _pure(stmt.value):
            return None
        # a name read before KBODY assigns it carries a value from the previous k: it
        # must be one of PRE's scalars (else it would come from the previous j)
        early = {name for name in reads if name not in assigned and name not in carried}
        if early & stored:
            return None
        assigned.append(target.id)
    return tuple(dict.fromkeys(n for n in assigned if n not in carried))


def _pre_reads_ok(pre, body_stores, j):
    """PRE reads values fixed before the j loop, ``j`` and earlier PRE scalars."""
    defined = set()
    for stmt in pre:
        if (_names(stmt.value) - defined - {j}) & body_stores:
            return False
        defined.add(stmt.targets[0].id)
    return True


def _pure(expr) -> bool:
    for node in ast.walk(expr):
        if not isinstance(node, _PURE_NODES):
            return False
        if isinstance(node, ast.Call) and not getattr(node, PURE_MARK, False):
            return False
        if isinstance(node, (ast.Name, ast.Subscript, ast.Attribute, ast.Tuple)) and \
                not isinstance(node.ctx, ast.Load):
            return False
    return True


def _names(*nodes) -> set:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _stored(stmts) -> set:
    return {n.id for stmt in stmts for n in ast.walk(stmt)
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}


# ------------------------------------------------------------------------------- emitting


def emit(found: Interchange, prefix: str, dtype_of) -> list:
    """Statements replacing the ``j`` loop: the interchanged loops when the ``j`` loop
    has at least :data:`MIN_TRIPS` iterations, the loop as written otherwise.

    Args:
        found: What :func:`match` returned.
        prefix: The nest's generated-name prefix (``_acc_<n>_``).
        dtype_of: ``dtype_of(name)`` is the source of the NumPy dtype of carried
            ``name`` (a typing-probe placeholder).
    """
    p = f"{prefix}x"
    level, j = found.level, found.level.target.id
    start, stop, step = range_bounds(level)
    index = _index_expr(start, step, p)
    acc = {name: f"{p}_{name}" for name in found.carried}
    setup = [f"{p}s = START", f"{p}e = STOP", f"{p}t = STEP",
             f"{p}n = _acc_rt.trip_count({p}s, {p}e, {p}t)",
             f"if {p}n >= {MIN_TRIPS}:"]
    setup += [f"    {acc[name]} = _acc_np.empty({p}n, {dtype_of(name)})" for name in acc]
    setup += [f"    for {p}j in range({p}n):", f"        {j} = {index}", "        PRE"]
    setup += [f"        {acc[name]}[{p}j] = {name}" for name in acc]
    setup += ["    KLOOP", f"    for {p}j in range({p}n):", f"        {j} = {index}"]
    setup += [f"        {name} = {acc[name]}[{p}j]" for name in acc]
    setup += ["        POST", "else:", f"    for {j} in range({p}s, {p}e, {p}t):",
              "        BODY"]
    inner = [f"for {p}j in range({p}n):", f"    {j} = {index}"]
    inner += [f"    {name} = {acc[name]}[{p}j]" for name in acc]
    inner += ["    KBODY"] + [f"    {acc[name]}[{p}j] = {name}" for name in acc]
    kloop = copy.deepcopy(found.kloop)
    kloop.body = fill("\n".join(inner), {}, {"KBODY": found.kloop.body}, level)
    statements = {"PRE": found.pre, "KLOOP": [kloop],
                  "POST": found.post or [ast.Pass()],
                  "BODY": found.pre + [found.kloop] + found.post}
    exprs = {"START": start, "STOP": stop, "STEP": step}
    return fill("\n".join(setup), exprs, statements, level)


def _index_expr(start, step, p):
    """``j`` from the position ``{p}j``: literal starts and unit steps stay literal, so
    LLVM sees unit-stride indexing."""
    unit, zero = is_const(step, 1), is_const(start, 0)
    position = f"{p}j" if unit else f"{p}j * {p}t"
    return position if zero else f"{p}s + {position}"
