"""The loops of a parallel nest, and the checks each must pass.

Owns :func:`nest_levels`: the ``collapse`` (or ``tile``) tightly nested loops starting at
a parallel loop (OpenACC 3.3 §2.9.1, §2.9.8; OpenMP 5.2 §4.4.1), each validated, for the
planner (``planner.Planner._levels``).

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

__all__ = ["nest_levels", "range_call"]


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
