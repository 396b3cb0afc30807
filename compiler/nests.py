"""The loops of a parallel nest, and the checks each must pass.

Owns :func:`nest_levels`: the ``collapse`` (or ``tile``) tightly nested loops starting at
a parallel loop (OpenACC 3.3 §2.9.1, §2.9.8; OpenMP 5.2 §4.4.1), each validated, for the
planner (``planner.Planner._levels``); :func:`check_levels`, the nesting of gang, worker
and vector loops (§2.9.2–2.9.4); and the facts about an inner loop the planner's widening
asks (:func:`written_by_all`, :func:`subscripted_in`).

Invariants:
    * Every level is ``for v in range(...)`` (``acc.loop(range(...))`` too) of one loop
      variable, one to three positional bounds, a step that is not the literal zero, no
      ``for ... else``.
    * A level's bounds read only values computed before the nest: neither an outer
      level's index nor a name the nest assigns. An OpenMP nest may be non-rectangular
      (``for i in range(j, n)`` inside ``for j``): it is collapsed up to that level, which
      then runs in each iteration of the collapsed ones, and the caller is told (``cut``);
      OpenACC 3.3 has no such nests (§2.9.1), so there it is a ``CompileError``.
    * No ``return`` inside the nest, and no ``break`` out of its innermost level.
"""
from __future__ import annotations

import ast

from .frontend import CallKind, FunctionSource, Scope, classify_call, loaded_names, stored_names

__all__ = ["nest_levels", "range_call", "check_levels", "subscripted_in", "written_by_all"]

_KERNELS = ("kernels", "kernels_loop")
#: the levels of parallelism, outermost highest (OpenACC 3.3 §2.9.2–2.9.4)
_LEVEL = {"gang": 3, "worker": 2, "vector": 1}


def nest_levels(source: FunctionSource, scope: Scope, loop: ast.For, collapse: int,
                spelled: str = "", *, rectangular: bool = True) -> tuple:
    """``(levels, cut)``: the ``collapse`` tightly nested loops starting at ``loop``,
    validated (module docstring), and ``cut``: ``(level, index)`` where a nest that need
    not be rectangular stopped (None: it did not). ``spelled``: the clause that asks for
    the levels (``collapse(2)``, ``tile(32, *)``), for messages.

    Raises:
        CompileError: the loops are not tightly nested, or a level fails a check.
    """
    levels = [loop]
    for depth in range(1, collapse):
        body = levels[-1].body
        if len(body) != 1 or not isinstance(body[0], ast.For):
            where = body[0] if body and not isinstance(body[0], ast.For) else \
                (body[1] if len(body) > 1 else levels[-1])
            raise source.error(
                f"{spelled or f'collapse({collapse})'} needs {collapse} tightly nested "
                f"'for' loops; this statement sits between loop levels {depth} and "
                f"{depth + 1}", where)
        levels.append(body[0])
    for level in levels:
        _check_level(source, scope, level)
    cut = None if rectangular else _first_dependent(scope, levels)
    if cut is not None:
        levels = levels[:levels.index(cut[0])]
    _check_bounds(source, scope, levels)
    _check_body(source, levels[-1].body)
    return levels, cut


def range_call(scope: Scope, loop: ast.For) -> ast.Call | None:
    """The ``range(...)`` call ``loop`` iterates over (through ``acc.loop``), or None."""
    call = loop.iter
    if isinstance(call, ast.Call) and classify_call(call, scope)[0] == CallKind.LOOP and \
            call.args:
        call = call.args[0]
    if isinstance(call, ast.Call) and classify_call(call, scope)[0] == CallKind.RANGE:
        return call
    return None


def _check_level(source, scope, loop: ast.For) -> None:
    if not isinstance(loop.target, ast.Name):
        raise source.error("a parallel loop needs a single loop variable", loop)
    call = range_call(scope, loop)
    if call is None or call.keywords or not 1 <= len(call.args) <= 3 or any(
            isinstance(a, ast.Starred) for a in call.args):
        raise source.error("a parallel loop must iterate over range(...): the trip count of "
                           "other iterables is unknown before the loop", loop)
    if loop.orelse:
        raise source.error("'for ... else' is not allowed on a parallel loop", loop.orelse[0])
    if len(call.args) == 3 and isinstance(call.args[2], ast.Constant) and \
            call.args[2].value == 0:
        raise source.error("range() step must not be zero", call)


def _first_dependent(scope, levels):
    """``(level, index)`` of the first level whose bounds read an outer level's index."""
    targets = set()
    for level in levels:
        outer = targets & {n for a in range_call(scope, level).args for n in loaded_names(a)}
        if outer:
            return level, sorted(outer)[0]
        targets.add(level.target.id)
    return None


def _check_bounds(source, scope, levels) -> None:
    stored = stored_names(levels[0].body)
    targets = {lvl.target.id for lvl in levels}
    for depth, level in enumerate(levels):
        for arg in range_call(scope, level).args:
            for name in loaded_names(arg):
                if name in targets or (name in stored and depth > 0):
                    raise source.error(
                        f"collapse: the bounds of this loop depend on {name!r}, which "
                        f"changes inside the nest; bounds must depend only on values "
                        f"computed before the nest", level)


def _check_body(source, body) -> None:
    for stmt in body:
        for node, loop_depth in _walk_with_loop_depth(stmt):
            if isinstance(node, ast.Return):
                raise source.error("'return' inside a parallel loop is not supported", node)
            if isinstance(node, ast.Break) and loop_depth == 0:
                raise source.error("'break' out of a parallel loop is not supported (the "
                                   "iterations run in parallel)", node)


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


def check_levels(source: FunctionSource, clauses, marker_of, node=None, outer=None) -> None:
    """OpenACC 3.3 §2.9.2–2.9.4: a gang loop holds no gang loop, a worker loop no gang or
    worker loop, a vector loop none of the three (``marker_of(loop)``: a loop's
    ``acc.loop`` clauses; ``outer``: the innermost enclosing partitioned loop, ``(level,
    line, words)``; a combined construct's clauses are its loop's). Not in ``kernels``,
    whose levels the compiler picks (§2.5.3): PGI-era codes nest gang loops there for a
    2-D grid (Rodinia's lud and srad)."""
    node = source.tree if node is None else node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        inner = outer
        if isinstance(child, ast.For):
            given = [marker_of(child)]
            if node is source.tree and clauses.construct in ("parallel_loop", "kernels_loop"):
                given.append(clauses)
            words = [w for w in ("gang", "worker", "vector")
                     if any(c is not None and getattr(c, w) for c in given)]
            if words and outer is not None and _LEVEL[words[0]] >= outer[0] and \
                    clauses.construct not in _KERNELS:
                raise source.error(
                    f"a {' '.join(words)} loop inside the {outer[2]} loop at line "
                    f"{outer[1]}: a gang loop may hold worker and vector loops, a worker "
                    f"loop vector loops, a vector loop none (OpenACC 3.3 §2.9.2–2.9.4); "
                    f"drop {' '.join(words)} from the inner loop (without them it is "
                    f"still a parallel loop, its level the compiler's), or make it seq", child)
            if words:
                inner = (_LEVEL[words[-1]], child.lineno, " ".join(words))
        check_levels(source, clauses, marker_of, child, inner)


def subscripted_in(loop, names) -> bool:
    """Whether ``loop`` subscripts one of ``names`` (an array, not a scalar)."""
    return any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and
               n.value.id in names for n in ast.walk(loop))


def written_by_all(loop, private=()) -> bool:
    """Whether ``loop`` stores an element whose subscript does not move with its index
    (nor with a name computed from it): every iteration writes that element (of an array
    not in ``private``: each iteration's own)."""
    moving, grown = {loop.target.id}, True
    while grown:  # (names computed from the index: jj = j + 1)
        grown = False
        for node in ast.walk(loop):
            if isinstance(node, ast.Assign) and loaded_names(node.value) & moving:
                new = {t.id for t in node.targets if isinstance(t, ast.Name)} - moving
                moving |= new
                grown = grown or bool(new)
    return any(isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and
               not loaded_names(n.slice) & moving and
               not (isinstance(n.value, ast.Name) and n.value.id in private)
               for n in ast.walk(loop))
