"""The loop planner: which loops of a compute region run in parallel, and how.

Owns :class:`Planner`, which decides for every loop of a function whether it is a
parallel loop nest, with which collapse depth, reductions and private variables; the
results :class:`LoopPlan`, :class:`NestPlan` and :class:`LoopNote` live in ``loop_plans``
(re-exported here). Code generation re-runs the planner at
first call (names defined after decoration are resolved then), so the plan and the
checks always come from this one module.

Invariants:
    * A parallel nest is ``levels`` tightly nested ``for v in range(...)`` loops whose
      bounds depend only on values computed before the nest, with no ``break``/``return``
      inside (OpenACC 3.3 §2.9.1 collapse, §2.9 loop restrictions).
    * Every reduction variable of a nest is updated only by statements of its operator
      (OpenACC 3.3 §2.9.11); undeclared scalars updated only that way become implicit
      reductions (logged at debug level on the ``pyacc`` logger).
    * ``kernels`` loops run in parallel only when ``dependence`` proves their iterations
      independent (or ``independent`` says so); every decision is recorded in
      :attr:`LoopPlan.notes` for compiler feedback (``acc.explain``).
"""
from __future__ import annotations

import ast

from .clauses import ComputeClauses, parse_loop_clauses
from .errors import CompileError
from .loop_plans import AS_WRITTEN, LoopNote, NestPlan, LoopPlan
from .frontend import CallKind, FunctionSource, Scope, classify_call
from .access import shape_subscript
from .nests import check_levels, nest_levels, subscripted_in, written_by_all
from .reductions import COMBINE, array_updates, canonical, is_absorbing_store, same_op, \
    scalar_updates
from . import dependence, liveness

__all__ = ["Planner", "LoopPlan", "NestPlan", "LoopNote"]

_KERNELS_CONSTRUCTS = ("kernels", "kernels_loop")


# ------------------------------------------------------------------------------ planner


class Planner:
    """Finds the loop nests of a function and decides how each runs.

    Args:
        source: The function.
        clauses: The construct's clauses.
        scope: Name resolution for the function.

    Its decisions are logged at a kernel's first compile from the notes
    (``feedback.log_decisions``), not here: the plan is made once, at decoration.
    """

    def __init__(self, source: FunctionSource, clauses: ComputeClauses, scope: Scope):
        self.source = source
        self.clauses = clauses
        self.scope = scope
        self.result = LoopPlan()

    def plan(self) -> LoopPlan:
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
        both = (self.clauses,) if marker is None else (self.clauses, marker)
        levels = self._levels(first, *max(_depth(c) for c in both))
        if any(c.seq for c in both):
            self._add(levels, parallel=False, reason="seq clause")
            return
        declared = self.clauses.reductions + (marker.reductions if marker else ())
        private = self.clauses.private + (marker.private if marker else ())
        conditions = ()
        # kernels, or auto (§2.9.7): parallel when the compiler proves it (§2.9.9)
        if (self.clauses.construct == "kernels_loop" or any(c.auto for c in both)) and \
                not any(c.independent for c in both):
            reason, found, conditions = self._dependence(levels, declared, private)
            if reason:
                self._add(levels, parallel=False, reason=reason)
                return
            declared += found
        elif self.clauses.construct == "kernels_loop":
            declared += self._independent_kept(levels, declared, private)
        self._add(levels, parallel=True, declared=declared, private=private,
                  firstprivate=self.clauses.firstprivate, marker=marker,
                  conditions=conditions)

    def _plan_parallel(self, stmts, inside):
        for stmt in stmts:
            if isinstance(stmt, ast.For) and not inside:
                marker = self._marker_clauses(stmt)
                if marker is not None and not marker.seq:
                    levels = self._levels(stmt, *_depth(marker))
                    declared = self.clauses.reductions + marker.reductions
                    private = self.clauses.private + marker.private
                    reason, found, conditions = self._dependence(levels, declared, private) \
                        if marker.auto else ("", (), ())  # auto: as in kernels (§2.9.7)
                    if not reason:
                        self._add(levels, parallel=True, declared=declared + found,
                                  private=private, firstprivate=self.clauses.firstprivate,
                                  marker=marker, conditions=conditions)
                        continue
                    self._note_sequential(stmt, reason)
            for child in _child_blocks(stmt):
                self._plan_parallel(child, inside)

    def _plan_kernels(self, stmt):
        if isinstance(stmt, ast.For):
            marker = self._marker_clauses(stmt)
            try:  # (a loop no directive marks, with a break or a while: runs as written)
                levels = None if marker is not None and marker.seq else \
                    self._levels(stmt, *(_depth(marker) if marker else (1, "")))
            except CompileError as exc:
                if marker is not None:
                    raise
                self._note_sequential(stmt, AS_WRITTEN + _unnamed(exc))
                levels = None
            if levels:
                declared = marker.reductions if marker else ()
                private = marker.private if marker else ()
                reason, found, conditions = ("", self._independent_kept(
                    levels, declared, private), ()) if marker is not None and \
                    marker.independent else self._dependence(levels, declared, private)
                if not reason:
                    self._add(levels, parallel=True, declared=declared + found,
                              private=private, marker=marker, conditions=conditions)
                    return
                self._note_sequential(stmt, reason)
        for child in _child_blocks(stmt):
            for inner in child:
                self._plan_kernels(inner)

    # -- nests

    def _add(self, levels, *, parallel, declared=(), private=(), firstprivate=(),
             reason="", marker=None, conditions=()):
        if not parallel:
            if reason:
                self._note_sequential(levels[0], reason)
            return
        reductions, arrays = self._reductions(levels, declared)
        # loop indices are private already (C codes write private(i, j, k))
        indices = {level.target.id for level in levels}
        private = tuple(n for n in dict.fromkeys(private) if n not in indices)
        firstprivate = tuple(n for n in dict.fromkeys(firstprivate) if n not in indices)
        if self.clauses.construct in ("parallel", "parallel_loop"):
            self._check_live_out(levels, reductions, private + firstprivate)
        if self.clauses.construct != "kernels" or marker is not None:
            self._check_index_after(levels)  # a loop with a loop directive (§2.6.1)
        widened, (stopped, why) = ([], (None, "")) if conditions or private or firstprivate \
            else self._widened(levels, reductions)
        nest = NestPlan(tuple(levels), True, reductions, private, firstprivate,
                        array_reductions=frozenset(arrays), conditions=tuple(conditions),
                        widen=len(widened))
        self.result.nests[nest.key] = nest
        named = {var for _, var in declared}
        self.result.notes.append(LoopNote(
            levels[0].lineno, True, collapse=len(levels), schedule=self._schedule(marker),
            reductions=reductions, implicit=tuple(v for _, v in reductions if v not in named),
            private=private + firstprivate, construct=self.clauses.construct,
            conditions=tuple(conditions)))
        for inner in (n for s in levels[-1].body for n in ast.walk(s) if isinstance(n, ast.For)):
            inner_marker = self._marker_clauses(inner)
            if inner_marker is not None:
                self._check_shared_private(levels[0], inner, inner_marker.private)
            if inner_marker is not None or inner in widened:  # (feedback)
                self.result.notes.append(LoopNote(
                    inner.lineno, False, schedule=self._schedule(inner_marker, own=True),
                    construct=self.clauses.construct, within=levels[0].lineno,
                    widened=inner in widened, reason=why if inner is stopped else ""))

    def _check_shared_private(self, nest, loop, private):
        """A local array made before ``nest`` and named in ``private`` of a loop inside it
        would be one array for every thread of the nest (only parameters get copies
        there): refused, saying how to write it (OpenACC 3.3 §2.9.10)."""
        inside = {n.id for n in ast.walk(nest) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)}
        for name in private:
            if name not in self.source.params and name not in inside and \
                    subscripted_in(loop, (name,)):
                raise self.source.error(
                    f"private({name}) on this loop names a local array made before the "
                    f"parallel loop at line {nest.lineno}, which its threads would share: "
                    f"make it inside the loop body ({name} = np.zeros(...) there is each "
                    f"iteration's own) or pass it as a parameter", loop)

    def _widened(self, levels, reductions) -> tuple:
        """``(loops, (next, why))``: the loops tightly nested under a nest (without
        private copies: an outer loop's private array is one per outer iteration) that join
        its iteration space where the target wants them (``NestPlan.widen``), and the next
        one with why it does not (``_not_joined``; ``(None, "")`` if none is nested): independent by its own directive (``acc.loop``
        gang, worker, vector or independent) with no scalar carried and no element every
        iteration writes (``out[i]`` under a vector ``j`` loop: the program's race, run
        in order here), or proved so as ``kernels`` loops are (§2.9.7, §2.5.3)."""
        extended = list(levels)
        keep = {var for _, var in reductions}
        while len(extended[-1].body) == 1 and isinstance(extended[-1].body[0], ast.For):
            inner = extended[-1].body[0]
            why = self._not_joined(extended, inner, reductions, keep)
            if why is not None:
                return extended[len(levels):], (inner, why)
            extended.append(inner)
        return extended[len(levels):], (None, "")

    def _not_joined(self, extended, inner, reductions, keep):
        """Why ``inner`` cannot join the nest ``extended``: None if it can, ``""`` when it
        says so (``seq``); its own clauses must not change under a collapse, its bounds be
        invariant and host-computed, its index unread after the nest (§2.6.1)."""
        marker = self._marker_clauses(inner)
        if marker is not None and marker.seq:
            return ""
        if marker is not None and (marker.nest_depth > 1 or not set(marker.reductions) <=
                                   set(reductions)):
            return "not joined with the nest: it has a collapse, tile or reduction of its own"
        if marker is not None and not set(marker.private) <= set(self.source.params) and \
                subscripted_in(inner, marker.private):
            return "not joined with the nest: a private local array"
        try:
            nest_levels(self.source, self.scope, extended[0], len(extended) + 1)
        except CompileError as exc:
            return f"not joined with the nest: {_unnamed(exc)}"
        if self._index_read_after(extended[0], inner.target.id) is not None or any(
                isinstance(n, ast.Subscript) and not shape_subscript(n) for n in ast.walk(inner.iter)):
            return "not joined with the nest: its index is read after it, or its bounds read an element"
        loop_vars = {level.target.id for level in (*extended, inner)}
        reason = dependence.carried_scalar(inner.body, self._defined_outside(extended[0]),
                                           keep | loop_vars)
        if not reason and written_by_all(inner, marker.private if marker is not None else ()):
            reason = (f"every iteration writes one element (a sum over {inner.target.id}? "
                      f"declare the reduction, or make the loop seq)")
        if not reason and (marker is None or marker.auto or self.clauses.construct in
                           _KERNELS_CONSTRUCTS and not marker.independent):
            reason = self._dependence([*extended, inner], tuple(reductions))[0]
        return f"not joined with the nest: {reason}" if reason else None

    def _schedule(self, marker, own=False) -> str:
        """The gang/worker/vector clauses of a loop, as written (for the notes): the
        construct's and its marker's, or (``own``) the marker's alone."""
        parts = []
        for clauses in (marker,) if own else (self.clauses, marker):
            if clauses is None:
                continue
            for flag, count in (("gang", "num_gangs"), ("worker", "num_workers"),
                                ("vector", "vector_length")):
                value = getattr(clauses, count)
                if getattr(clauses, flag) or value is not None:
                    text = getattr(value, "text", value)
                    parts.append(flag if value is None else f"{flag}({text})")
            if clauses.tile:
                parts.append(_depth(clauses)[1])
        return " ".join(dict.fromkeys(parts))

    def _check_live_out(self, levels, reductions, private):
        """In a ``parallel`` region a scalar is firstprivate (OpenACC 3.3 §2.5.1,
        §2.6.2): one that a parallel loop assigns and the function reads after the loop
        would keep its value from before the region, so that is refused."""
        skip = {var for _, var in reductions} | set(private)
        for var, store, use in self._live_out(levels, skip):
            hint = _reduction_hint(levels, var)
            raise self.source.error(
                f"{var!r} is assigned in this parallel loop (line {store}) and read after "
                f"it (line {use}); in a parallel region a scalar is firstprivate, so that "
                f"read would see the value from before the loop. Declare the reduction it "
                f"computes, e.g. reduction=\"{hint}:{var}\" (OpenACC 3.3 §2.5.15), or "
                f"use acc.kernels/acc.serial, where the region's last value is kept",
                levels[0])

    def _check_index_after(self, levels):
        """The index of a loop with a loop directive (``parallel_loop``, ``kernels_loop``,
        ``acc.loop``) is private to each iteration (OpenACC 3.3 §2.6.1): it has no value
        after the loop (each thread has its own), so reading it after the nest before
        assigning it again is refused, on every device alike. (A ``kernels`` loop without
        a directive keeps the region's last value, as the planner says elsewhere.)"""
        for level in levels:
            index = level.target.id
            first = self._index_read_after(levels[0], index)
            if first is not None:
                raise self.source.error(
                    f"{index!r} is the index of the parallel loop at line {level.lineno} and is "
                    f"read after the loop (line {first.lineno}): a loop index is private to "
                    f"each iteration (OpenACC 3.3 §2.6.1), so it has no value after the loop. "
                    f"Compute the value you need from the loop bounds (e.g. the last index "
                    f"is the range's stop - 1), or make the loop seq", first)

    def _index_read_after(self, nest, index):
        """The first use of ``index`` after ``nest`` when it reads the value (a load, or
        ``index += 1``), else None (no use, or a store)."""
        first = liveness.first_use_after(self.source.tree, nest, index)
        if first is None or isinstance(first.ctx, ast.Load) or any(
                isinstance(node, ast.AugAssign) and node.target is first
                for node in ast.walk(self.source.tree)):
            return first
        return None

    def _live_out(self, levels, skip, every=False):
        """``(var, store line, use line)`` for each scalar defined before the nest (or,
        ``every``, anywhere) that the nest assigns and the function reads after it (or
        anywhere outside it, when the nest sits in a loop)."""
        nest = levels[0]
        outer = self._defined_outside(nest)
        inside = {id(n) for n in ast.walk(nest)}
        in_loop = liveness.in_loop(self.source.tree, nest)
        indices = {level.target.id for level in levels}
        stores = {}
        for node in ast.walk(nest):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and \
                    (every or node.id in outer) and node.id not in skip and \
                    node.id not in indices:
                stores.setdefault(node.id, node.lineno)
        found, live = [], {}  # (live: read_after of each name, asked once)
        for node in ast.walk(self.source.tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                    id(node) not in inside and node.id in stores and \
                    (in_loop or node.lineno > nest.end_lineno):
                if node.id not in live:
                    live[node.id] = liveness.read_after(self.source.tree, nest, node.id)
                if live[node.id]:
                    found.append((node.id, stores.pop(node.id), node.lineno))
        return found

    def _kept_scalars(self, levels, skip):
        """The implied reductions of the scalars a ``kernels`` nest assigns and the region
        reads after it (``copy`` there, OpenACC 3.3 §2.6.2, so the last value is kept): a
        nest that only stores ``True`` (``False``) computes an ``or`` (``and``). Returns
        ``(reductions, None)``, or ``((), (var, store line, use line))`` for a scalar
        whose last value needs the iterations in order."""
        found = []
        for var, store, use in self._live_out(levels, skip, every=True):  # (t of an inner loop too)
            op = _absorbing_op(levels[0], var)
            if op is None:
                return (), (var, store, use)
            found.append((op, var))
        return tuple(found), None

    def _independent_kept(self, levels, declared, private):
        """The reductions an ``independent`` nest of ``kernels`` implies for the scalars
        the region keeps (§2.9.9: no dependences, yet the region's scalars stay ``copy``):
        a flag (``stop = True``) is an ``or``; a scalar needing the last value, refused."""
        reductions, _ = self._reductions(levels, declared)  # (found ones too: s += x[i])
        found, ordered = self._kept_scalars(levels, {v for _, v in reductions} | set(private))
        if ordered is not None:
            var, store, use = ordered
            raise self.source.error(
                f"{var!r} is assigned in this independent loop (line {store}) and read "
                f"after it (line {use}): its value would be the last iteration's, but "
                f"independent iterations run in no order. Declare the reduction it "
                f"computes, e.g. reduction=\"{_reduction_hint(levels, var)}:{var}\" "
                f"(OpenACC 3.3 §2.5.15), or drop independent so the loop runs in order",
                levels[0])
        return found

    def _note_sequential(self, node, reason):
        self.result.notes.append(LoopNote(node.lineno, False, reason=reason,
                                          construct=self.clauses.construct))

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
        text = call.args[1].value if len(call.args) == 2 and isinstance(call.args[1], ast.Constant) \
            and isinstance(call.args[1].value, str) else None
        if len(call.args) != 1 + (text is not None) or any(k.arg is None for k in call.keywords):
            raise self.source.error("acc.loop takes one iterable, then keyword clauses or one "
                                    "clause string", call)
        values = {}
        for keyword in call.keywords:
            try:
                values[keyword.arg] = ast.literal_eval(keyword.value)
            except ValueError:
                raise self.source.error(f"acc.loop clause {keyword.arg}= must be a "
                                        f"literal", keyword.value) from None
        try:
            return parse_loop_clauses(text, **values)
        except CompileError as exc:
            raise self.source.error(exc.reason, call) from None

    def _levels(self, loop: ast.For, collapse: int, spelled: str = ""):
        """The ``collapse`` tightly nested loops starting at ``loop`` (``nests``); an
        OpenMP nest stops at a non-rectangular level, which the explain note names."""
        levels, cut = nest_levels(self.source, self.scope, loop, collapse, spelled,
                                  rectangular=not hasattr(self.clauses.construct, "omp"))
        if cut is not None:
            level, index = cut
            self.result.notes.append(LoopNote(
                level.lineno, False, construct=self.clauses.construct, within=loop.lineno,
                reason=f"collapse stops here: its bounds read {index!r}, a non-rectangular "
                       f"nest"))
        return levels

    def _check_markers(self):
        """Validate every acc.loop marker's clauses, parallel or not; note each marked
        loop's private names (``LoopPlan.loop_private``)."""
        for node in ast.walk(self.source.tree):
            if isinstance(node, ast.Call) and \
                    classify_call(node, self.scope)[0] == CallKind.LOOP:
                self._parse_marker(node)
            marker = self._marker_clauses(node) if isinstance(node, ast.For) else None
            if marker is not None and marker.private:
                self.result.loop_private[(node.lineno, node.col_offset)] = marker.private
        check_levels(self.source, self.clauses, self._marker_clauses)

    # -- reductions

    def _reductions(self, levels, declared):
        """Validate declared reductions and find implicit ones; returns the (op, var)
        pairs and the names of the array reductions among them."""
        body = levels[-1].body
        updates, reads = scalar_updates(body, self.scope)
        declared_ops = {var: op for op, var in declared}
        result, arrays = [], []
        for var, op in declared_ops.items():
            if self._is_array_reduction(body, var, op):
                arrays.append(var)
            absorbing = {id(s.targets[0]) for s in _stores_of(levels[-1], var)
                         if is_absorbing_store(s, var, op)}
            for found, node in updates.get(var, ()):
                if found is None and id(node) in absorbing:
                    continue  # stop = True under reduction(or:stop)
                if found is None or not same_op(op, found):
                    raise self.source.error(
                        f"reduction({op}:{var}): this statement is not a '{op}' update of "
                        f"{var!r}", node)
            result.append((op, var))
        outer = self._defined_outside(levels[0])
        for var, found in updates.items():
            if var in declared_ops or var not in outer:
                continue
            ops = {canonical(op) for op, _ in found}
            if None in ops or len(ops) != 1 or var in reads:
                continue
            op = ops.pop()
            result.append((op, var))
        return tuple(result), tuple(arrays)

    def _is_array_reduction(self, body, var, op) -> bool:
        """True when the loop updates elements of ``var`` (an array reduction, OpenACC
        3.3 §2.5.15); every store into it must then be an ``op`` update of one element,
        and the array is used nowhere else in the loop."""
        updates, other_uses = array_updates(body, self.scope, var)
        if not updates:
            return False
        for found, node in updates:
            if found is None or not same_op(op, found):
                raise self.source.error(
                    f"reduction({op}:{var}): this statement is not a '{op}' update of an "
                    f"element of {var!r} (write {_element_update_text(var, op)})",
                    node)
        if other_uses:
            raise self.source.error(
                f"reduction({op}:{var}): the array reduction variable {var!r} is read at "
                f"line {other_uses[0]}; inside the loop each thread updates its private "
                f"copy, which starts at the operator's identity, so it may only be "
                f"updated (OpenACC 3.3 §2.5.15)")
        return True

    def _defined_outside(self, nest_node):
        inside = {id(n) for n in ast.walk(nest_node)}
        names = set(self.source.params)
        for node in ast.walk(self.source.tree):
            if id(node) not in inside and isinstance(node, ast.Name) and \
                    isinstance(node.ctx, ast.Store):
                names.add(node.id)
        return names

    # -- kernels dependence test

    def _dependence(self, levels, declared, private=()):
        """Why iterations of the nest may depend on each other ('' when independent),
        and the reductions found for scalars the region keeps (``kernels``).

        Sufficient test for ``kernels`` (OpenACC 3.3 §2.5.3: the compiler decides):
        scalars assigned inside are private or reductions; a scalar the function reads
        after the loop is ``copy`` in ``kernels`` (§2.6.2), so its last value must be
        kept: a loop that only stores ``True`` into it (``False``) computes an ``or``
        (``and``) reduction, any other such loop runs sequentially; array elements are
        tested by ``dependence.array_dependence``.
        """
        body = levels[-1].body
        loop_vars = {lvl.target.id for lvl in levels}
        outer = self._defined_outside(levels[0])
        try:
            reductions, _ = self._reductions(levels, declared)
        except CompileError as exc:
            return exc.reason, (), ()
        reduction_vars = {var for _, var in reductions}
        found, ordered = self._kept_scalars(levels, reduction_vars | set(private))
        if ordered is not None:
            var, store, use = ordered
            return (f"scalar {var!r} is assigned in the loop (line {store}) and used "
                    f"after it (line {use}), so its last value must be kept"), (), ()
        reduction_vars.update(var for _, var in found)
        fresh = dependence.fresh_locals(body, outer) | set(private)  # (each its own copy)
        reason = dependence.carried_scalar(body, outer, reduction_vars | loop_vars)
        if reason:
            return reason, (), ()
        reason, conditions = dependence.array_dependence(body, self.scope, levels, outer,
                                                         fresh, self.source.tree)
        return reason, tuple(found), conditions


# ------------------------------------------------------------------------ AST helpers


def _stores_of(nest, var):
    return [n for n in ast.walk(nest) if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == var for t in n.targets)] + \
        [n for n in ast.walk(nest) if isinstance(n, (ast.AugAssign, ast.For))
         and isinstance(n.target, ast.Name) and n.target.id == var]


def _absorbing_op(nest, var):
    """``"or"`` when every store into ``var`` in the nest is ``var = True`` (``"and"``
    for ``False``) and the nest never reads it, else None (a read inside the loop would
    see the iteration's private copy, not the running value)."""
    if any(isinstance(n, ast.Name) and n.id == var and isinstance(n.ctx, ast.Load)
           for n in ast.walk(nest)):
        return None
    for op in ("or", "and"):
        stores = _stores_of(nest, var)
        if stores and all(is_absorbing_store(s, var, op) for s in stores):
            return op
    return None


def _reduction_hint(levels, var) -> str:
    """The operator to suggest for a scalar a parallel loop assigns."""
    op = _absorbing_op(levels[0], var)
    if op is not None:
        return op
    for stmt in _stores_of(levels[0], var):
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Mult):
            return "*"
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and \
                getattr(stmt.value.func, "id", None) in ("max", "min"):
            return stmt.value.func.id
    return "+"


def _child_blocks(stmt):
    """The statement lists nested in a compound statement."""
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(stmt, "handlers", ()):
        yield handler.body


def _depth(clauses) -> tuple[int, str]:
    """How many loops ``clauses`` take, and the clause that says so (OpenACC 3.3 §2.9.1
    ``collapse``, §2.9.8 ``tile``: one loop per size)."""
    spelled = f"tile({', '.join(map(str, clauses.tile))})" if clauses.tile else \
        f"collapse({clauses.collapse})"
    return clauses.nest_depth, spelled


def _element_update_text(var, op) -> str:
    """How to write an ``op`` update of an element of ``var`` (OpenACC 3.3 §2.5.15)."""
    if op in ("and", "or", "max", "min"):  # (no augmented assignment: COMBINE's form)
        return f"{var}[k] = " + COMBINE[op].format(a=f"{var}[k]", b="value")
    return f"{var}[k] {'+' if op == '-' else op}= value"


def _unnamed(exc: CompileError) -> str:
    """The reason of a ``FunctionSource.error`` without the function's name before it."""
    return exc.reason.split(": ", 1)[-1]
