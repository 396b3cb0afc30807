"""Dependence analysis of ``kernels`` loops (OpenACC 3.3 §2.5.3: in a ``kernels``
region the compiler decides which loops are parallel).

Owns :func:`array_dependence` and :func:`carried_scalar`, the tests the planner asks before running a ``kernels``
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
from dataclasses import dataclass

from .access import SHAPE_ATTRS, mutating_library_call, shape_subscript
from .affine import Facts, Poly, poly_of, size_symbol
from . import liveness
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
    """Reason when a scalar may be read in an iteration before that iteration assigns it:
    one defined before the nest (``outer``) read before it is re-assigned, or one the
    body alone assigns that some path reads first (``if j == 0: prev = 0.0`` then
    ``b[j] = a[j] - prev; prev = a[j]``: the previous iteration's value; a loop in the
    body may not run, so its stores do not count: ``liveness.read_first``)."""
    first = {}
    stored = set()
    for stmt in body:
        for node in _evaluation_order(stmt):
            if isinstance(node, ast.Name):
                first.setdefault(node.id, type(node.ctx).__name__)
                if isinstance(node.ctx, ast.Store):
                    stored.add(node.id)
    loaded = {n.id for stmt in body for n in ast.walk(stmt)
              if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for name in sorted(stored - set(allowed) - _comprehension_only(body)):
        if name in outer and (first.get(name) == "Load" or (
                name in loaded and not _assigned_first(body, name))) or \
                name not in outer and liveness.read_first(body, name):
            return f"scalar {name!r} carries a value from one iteration to the next"
    return ""


def _comprehension_only(body) -> set:
    """The names every mention of which lies in a comprehension that binds them (its own
    variable: ``sum([k for k in r])``), not a scalar of the loop."""
    inside, bound = set(), set()
    for stmt in body:
        for comp in (n for n in ast.walk(stmt) if isinstance(n, (
                ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp))):
            names = {n.id for g in comp.generators for n in ast.walk(g.target)
                     if isinstance(n, ast.Name)}
            bound |= names
            inside |= {id(n) for n in ast.walk(comp) if isinstance(n, ast.Name) and n.id in names}
    return {name for name in bound if all(
        id(n) in inside for stmt in body for n in ast.walk(stmt)
        if isinstance(n, ast.Name) and n.id == name)}


def _assigned_first(body, name) -> bool:
    """True when every iteration assigns ``name`` before any read of it: the first
    top-level statement that mentions it is a plain assignment to it (a store inside an
    ``if`` does not happen in every iteration, so a later read may see the previous
    iteration's value)."""
    for stmt in body:
        if not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt)):
            continue
        return (isinstance(stmt, ast.Assign) and
                any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets) and
                not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt.value)))
    return True


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


def array_dependence(body, scope, levels, outer, fresh, tree):
    """Why two iterations of the nest may touch one array element, one of them writing
    it (``""`` when they cannot), and the run-time conditions the answer relies on.

    Every pair of a write and another access of the same array is tested dimension by
    dimension on the polynomials of their subscripts (``affine``): a dimension whose
    subscripts are the same function of one parallel index pins that index (equal
    elements imply the same iteration); a dimension where one subscript moves with the
    parallel indices and the other never reaches its range separates them. A flat
    subscript ``q*n + r`` with ``0 <= r < n`` is read as the pair ``(q, r)``
    (delinearization). Facts that cannot be proved from the loop bounds and sizes
    (``k >= 0`` in ``a[i*n + k]``) become conditions (``Poly`` ≥ 0) the kernel checks at
    run time before running the nest in parallel.

    Returns:
        ``(reason, conditions)``.
    """
    loop_vars = {level.target.id for level in levels}
    writes = set()
    atomic_targets = set()
    subscript_bases = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                subscript_bases.add(id(node.value))
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                name = _element_chain_root(node)
                if name is None:
                    return ("an element is written through a nested subscript or "
                            f"attribute (line {node.lineno})"), ()
                if name in fresh:
                    continue
                if name not in outer:
                    return f"array {name!r} is an alias assigned inside the loop", ()
                writes.add(name)
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
                                    f"{name!r}"), ()
    facts = _facts(body, levels, outer, tree)
    env = _local_polys(body, outer)
    facts.strides = _stride_sums(body, env, facts)
    conditions = {}
    for name in sorted(writes):
        if name in atomic_targets:
            return f"{name!r} is both written and updated atomically", ()
        reason = _whole_use(body, name, subscript_bases)
        if reason:
            return reason, ()
        accesses = _accesses(body, name, env)
        for write in (a for a in accesses if a.write):
            for other in accesses:
                found = _separated(write, other, levels, facts)
                if found is None:
                    what = "written" if other.write else "read"
                    return (f"{name!r} is written at line {write.line} ({write.text}) and "
                            f"{what} at line {other.line} ({other.text}): the compiler "
                            f"cannot prove that two iterations never touch the same "
                            f"element"), ()
                conditions.update((poly.source(), poly) for poly in found)
    return "", tuple(f"{poly.source()} >= 0" for poly in conditions.values())


def _element_chain_root(node: ast.Subscript) -> str | None:
    """The array ``a`` that ``a[i, j]`` or ``a[i][j]`` (C's spelling: the same element,
    one index at a time) subscripts, or None when an inner subscript is a slice (a view
    whose indices are shifted) or the chain starts elsewhere (``s.a[i]``)."""
    current = node.value
    while isinstance(current, ast.Subscript):
        index = current.slice
        if any(isinstance(e, ast.Slice) for e in (index.elts if isinstance(index, ast.Tuple)
                                                  else [index])):
            return None
        current = current.value
    return current.id if isinstance(current, ast.Name) else None


@dataclass
class _Access:
    """One subscripted use of an array in the loop body."""

    write: bool
    dims: list          # a Poly per index (None: a slice or an index that is no Poly)
    line: int
    text: str


def _accesses(body, name, env):
    """Every element access of ``name`` (``a[i, j]`` and ``a[i][j]`` alike)."""
    inner = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Subscript):
                inner.add(id(node.value))
    found = []
    for stmt in body:
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Subscript) or id(node) in inner or \
                    root_name(node) != name or shape_subscript(node):
                continue  # (a.shape[1] is no element of a)
            chain, current = [], node
            while isinstance(current, ast.Subscript):
                chain.insert(0, current.slice)
                current = current.value
            dims = []
            for index in chain:
                elts = index.elts if isinstance(index, ast.Tuple) else [index]
                dims += [None if isinstance(e, ast.Slice) else poly_of(e, env) for e in elts]
            write = isinstance(node.ctx, ast.Store) or _augmented_target(stmt, node)
            found.append(_Access(write, dims, node.lineno, ast.unparse(node)))
    return found


def _augmented_target(stmt, node) -> bool:
    return any(isinstance(n, ast.AugAssign) and n.target is node for n in ast.walk(stmt))


def _separated(write, other, levels, facts):
    """Conditions (a list of ``Poly`` ≥ 0, maybe empty) under which no two different
    iterations make ``write`` and ``other`` touch the same element; None if unknown."""
    if len(write.dims) != len(other.dims):
        return None
    parallel = [level.target.id for level in levels]
    primed = facts.primed()
    pinned, conditions = set(), []
    for w, x in zip(write.dims, other.dims):
        if w is None or x is None:
            continue
        for qw, qx in _delinearized(w, x, parallel, facts, conditions):
            verdict = _compare(qw, qx, parallel, facts, primed)
            if verdict is None:
                continue
            if verdict[0] == "pin":
                pinned.add(verdict[1])
            else:  # disjoint, perhaps under conditions
                return conditions + verdict[1]
    return conditions if pinned >= set(parallel) else None


def _compare(w, x, parallel, facts, primed):
    """``("pin", index)``, ``("disjoint", conditions)`` or None for one dimension."""
    cw = {p: w.coefficient(p) for p in parallel if p in w.names()}
    cx = {p: x.coefficient(p) for p in parallel if p in x.names()}
    if None in cw.values() or None in cx.values():
        return None
    if cw and cw == cx and len(cw) == 1:
        (p, coefficient), = cw.items()
        step = coefficient.constant()
        # the other iteration's inner (sequential) loop indices are its own: k' for k
        gap = w - _prime(x, Facts({n: b for n, b in facts.bounds.items() if n not in cw}))
        difference = gap.constant()
        if step and difference is not None and difference % step:
            return "disjoint", []
        if step and (difference == 0 or difference is None and all(  # |gap| < |step|
                primed.prove_nonneg(Poly.const(abs(step) - 1) + sign * gap) is True
                for sign in (Poly.const(1), Poly.const(-1)))):
            return "pin", p
        return None
    if not cw and not cx and (w - _prime(x, facts)).constant():  # two fixed places
        return "disjoint", []
    if bool(cw) != bool(cx):  # one moves with the parallel indices, the other does not
        x_other = _prime(x, facts)
        for gap in (w - x_other - Poly.const(1), x_other - w - Poly.const(1)):
            proof = primed.prove_nonneg(gap)
            if proof is True:
                return "disjoint", []
            if isinstance(proof, Poly):
                return "disjoint", [proof]
    return None


def _delinearized(w, x, parallel, facts, conditions, used=frozenset()):
    """``[(w, x)]``, or ``[..., (qw, qx), (rw, rx)]`` when both are ``q*S + r`` for a
    stride ``S`` with ``0 <= r <= S - 1`` (conditions appended for what is not proved),
    the quotients delinearized again: C's ``a[(l*nz + k)*nx + i]`` is ``a[l][k][i]``,
    and with halos ``a[(j + 1)*(n + 2) + i + 1]`` is ``a[j + 1][i + 1]``. A stride is a
    symbol multiplying a parallel index, or a loop index's coefficient (``n + 2``); a
    stride proved outright is taken before one that needs conditions."""
    chosen = None
    for key, stride in _strides(w, x, parallel, facts, used):
        parts = [_split(poly, stride) for poly in (w, x)]
        if None in parts:
            continue
        (qw, rw), (qx, rx) = parts
        one = stride - Poly.const(1)
        proofs = [facts.prove_nonneg(poly) for poly in (rw, rx, one - rw, one - rx)]
        if False in proofs:
            continue
        if chosen is None or all(proof is True for proof in proofs):
            chosen = (key, qw, qx, rw, rx, [p for p in proofs if isinstance(p, Poly)])
        if not chosen[5]:
            break
    if chosen is None:
        return [(w, x)]
    key, qw, qx, rw, rx, needed = chosen
    conditions += needed
    return _delinearized(qw, qx, parallel, facts, conditions, used | {key}) + [(rw, rx)]


def _strides(w, x, parallel, facts, used):
    """``(key, stride)`` candidates of ``_delinearized``: the coefficients of loop indices
    with several terms (``n + 2``), the sums the subscripts multiply by, then the symbols
    multiplying a parallel index."""
    symbols = [(s, Poly.name(s)) for s in sorted((w.names() | x.names()) - set(facts.bounds))
               if any(s in m and set(m) & set(parallel) for poly in (w, x) for m in poly.terms)]
    found = []
    for index in sorted(set(facts.bounds)):
        for poly in (w, x):
            factor = poly.coefficient(index)
            if factor is not None and len(factor.terms) > 1 and factor.names() and \
                    not factor.names() & set(facts.bounds):
                found.append((factor.source(), factor))
    found += [(stride.source(), stride) for stride in facts.strides] + symbols  # (sums first:
    # where a sum is a stride, its symbols alone split only under false conditions)
    return [(key, stride) for key, stride in dict(found).items() if key not in used]


def _stride_sums(body, env, facts) -> list:
    """The sums of symbols the loop's subscripts multiply by (``(nx + 4)`` in
    ``a[ll*(nz + 4)*(nx + 4) + 0*(nx + 4) + i]``): strides that appear in no loop
    index's coefficient alone, when the row index is a constant."""
    found = {}
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                for side in (node.left, node.right):
                    poly = poly_of(side, env) if isinstance(side, ast.BinOp) and \
                        isinstance(side.op, (ast.Add, ast.Sub)) else None
                    if poly is not None and len(poly.terms) > 1 and poly.names() and \
                            not poly.names() & set(facts.bounds):
                        found.setdefault(poly.source(), poly)
    return list(found.values())


def _split(poly, stride):
    """``(q, r)`` with ``poly == q*stride + r`` exactly and ``r`` free of the stride's
    symbol (a symbol ``s`` of coefficient ±1 in it, not in its other terms: ``s`` is
    written ``±(σ - rest)`` with ``σ`` standing for the stride, the polynomial split at
    ``σ``, and ``σ`` put back), or None."""
    for s in sorted(stride.names()):
        factor = stride.coefficient(s)  # (None: s squared)
        if factor is None or factor.constant() not in (1, -1):
            continue
        sign = factor.constant()
        sigma = f"<{stride.source()}>"
        rewritten = poly.substitute(s, Poly.const(sign) * (Poly.name(sigma) - stride.without({s})))
        q = rewritten.coefficient(sigma)
        if q is None or sigma in q.names():
            return None
        return q, rewritten.without({sigma})
    return None


def _prime(poly, facts):
    """``poly`` with every loop index renamed ``i'`` (the other iteration's)."""
    for name in sorted(poly.names() & set(facts.bounds)):
        poly = poly.substitute(name, Poly.name(name + "'"))
    return poly


def _facts(body, levels, outer, tree):
    """Ranges of the loop indices of the nest and of the loops in its body, sizes."""
    facts = Facts()
    stored_inside = {n.id for stmt in body for n in ast.walk(stmt)
                     if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    loops = list(levels) + [n for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.For)]
    for loop in loops:
        bounds = _range_bounds(loop)
        if bounds is not None and isinstance(loop.target, ast.Name):
            facts.bounds[loop.target.id] = bounds
    for node in ast.walk(tree):  # n = a.shape[0]; n, m = a.shape; n = len(a)
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name) and size_symbol(value) is not None:
                facts.nonneg.add(target.id)
            elif isinstance(target, ast.Tuple) and isinstance(value, ast.Attribute) and \
                    value.attr == "shape":
                facts.nonneg.update(e.id for e in target.elts if isinstance(e, ast.Name))
    symbols = {n for poly in facts.bounds.values() for p in poly for n in p.names()}
    facts.nonneg.update(n for n in symbols | _size_symbols(body) if not n.isidentifier())
    facts.invariant = {n for n in symbols | set(outer) | facts.nonneg
                       if n not in facts.bounds and n not in stored_inside
                       and (n.isidentifier() and n in outer or not n.isidentifier())}
    facts.nonneg -= stored_inside
    return facts


def _size_symbols(body):
    return {size_symbol(n) for stmt in body for n in ast.walk(stmt)} - {None}


def _range_bounds(loop):
    """``(lowest, highest)`` of a ``for v in range(...)`` with a positive constant step."""
    call = loop.iter
    if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "loop" and call.args:
        call = call.args[0]
    if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "range"):
        return None
    args = call.args
    if len(args) == 3:
        if not (isinstance(args[2], ast.Constant) and type(args[2].value) is int
                and args[2].value > 0):
            return None
    start = poly_of(args[0]) if len(args) > 1 else Poly.const(0)
    stop = poly_of(args[1] if len(args) > 1 else args[0])
    if start is None or stop is None:
        return None
    return start, stop - Poly.const(1)


def _local_polys(body, outer):
    """Locals assigned once in the body from an index expression (``row = i * n``)."""
    assigned: dict = {}
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                assigned[node.id] = assigned.get(node.id, 0) + 1
    env = {}
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            if assigned.get(name) == 1 and name not in outer:
                poly = poly_of(stmt.value, env)
                if poly is not None:
                    env[name] = poly
    return env


def _whole_use(body, name, subscript_bases):
    """A reason when the array is used other than through its elements and sizes."""
    for stmt in body:
        for node in ast.walk(stmt):
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


def _is_scalar_expr(node):
    return isinstance(node, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare))
