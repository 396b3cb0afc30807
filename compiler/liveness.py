"""Where a name is read after a loop: the liveness questions the planner asks.

Owns :func:`read_after` (may some path from the end of a nest read a name before
storing it), :func:`read_first` (may a block read a name before storing it: a value
carried into it), :func:`first_use_after` (the first mention of a name after a nest),
:func:`in_loop` and the statement walks they share (``_first_touch``, ``_block_path``).

Invariants: conservative answers: a statement form not followed counts as a read, and a
loop around the nest is followed into its next iteration.
"""
from __future__ import annotations

import ast

from .frontend import loaded_names

__all__ = ["read_after", "read_first", "first_use_after", "in_loop"]


def read_after(tree, nest, name) -> bool:
    """Whether some path from the end of ``nest`` may read ``name`` before storing it
    (False only when every path stores it first: a temporary the code after the nest
    assigns before it uses it, ``t = b[i] + 1.0`` in the next loop). Conservative
    (``_first_touch``); a loop around the nest is followed into its next iteration (up
    to the nest) and out of it."""
    path = _block_path(tree, nest)
    if path is None:  # (a statement form not followed: assume it is read)
        return True
    for body, index, owner in reversed(path):
        touch = _block_touch(body[index + 1:], name)
        if touch is not None:
            return touch == "load"
        if isinstance(owner, ast.While) and name in loaded_names(owner.test) or \
                isinstance(owner, (ast.For, ast.While)) and \
                _block_touch(body[:index], name) == "load":
            return True
    return False


def read_first(stmts, name) -> bool:
    """Whether some path through ``stmts`` may read ``name`` before storing it (a value
    from before them: an earlier iteration's, in a loop body; a loop in them may not run,
    so its stores do not count)."""
    return _block_touch(stmts, name) == "load"


def _block_touch(stmts, name):
    """The first ``_first_touch`` of ``name`` in ``stmts`` that is not None."""
    return next((t for t in (_first_touch(stmt, name) for stmt in stmts) if t), None)


def _first_touch(stmt, name):
    """How ``stmt`` first touches ``name`` on every path: ``"store"`` (``name = value``,
    ``a, name = value``, ``name = b[i] = value``, ``name: float = value``, ``value`` not
    reading it; an ``if`` storing it first in both branches), ``"load"`` (it may be read
    first: any other statement mentioning it), or None (it is never mentioned, or only
    stored on some paths: a loop's body may not run)."""
    if not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt)):
        return None
    if _plain_store(stmt, name):
        return "store"
    head = {ast.If: "test", ast.While: "test", ast.For: "iter"}.get(type(stmt))
    if head is None or name in loaded_names(getattr(stmt, head)):
        return "load"
    if isinstance(stmt, ast.For) and name in {n.id for n in ast.walk(stmt.target)
                                              if isinstance(n, ast.Name)}:
        return None if _block_touch(stmt.orelse, name) != "load" else "load"  # (its index)
    touches = (_block_touch(stmt.body, name), _block_touch(stmt.orelse, name))
    if "load" in touches:
        return "load"
    return "store" if isinstance(stmt, ast.If) and touches == ("store", "store") else None


def _plain_store(stmt, name) -> bool:
    """An assignment that stores ``name`` without reading it: its value, and each
    target's subscripts (``b[t] = t = 1`` reads ``t``), never load ``name``."""
    if isinstance(stmt, ast.AnnAssign):
        targets = [stmt.target] if stmt.value is not None else []
    else:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
    stored = {n.id for t in targets for n in ast.walk(t)
              if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return name in stored and name not in loaded_names(stmt.value) and \
        not any(name in loaded_names(t) for t in targets)


def _block_path(tree, target):
    """``[(statements, index, owner)]`` from the function's body down to ``target``:
    each block holding it (or its ancestor) at ``index``, and the statement owning it."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(tree, field, None)
        for index, stmt in enumerate(block if isinstance(block, list) else ()):
            if stmt is target:
                return [(block, index, tree)]
            inner = _block_path(stmt, target) if any(
                node is target for node in ast.walk(stmt)) else None
            if inner is not None:
                return [(block, index, tree)] + inner
    for handler in getattr(tree, "handlers", ()):
        inner = _block_path(handler, target)
        if inner is not None:
            return inner
    return None


def in_loop(tree, target) -> bool:
    """True when ``target`` sits inside a ``for``/``while`` loop of ``tree``."""
    def visit(node, looping):
        if node is target:
            return looping
        inner = looping or isinstance(node, (ast.For, ast.While))
        return any(visit(child, inner) for child in ast.iter_child_nodes(node))
    return visit(tree, False)


def first_use_after(tree, nest, name):
    """The first ``Name`` node of ``name`` after ``nest`` in source order, outside the
    nest and outside comprehensions and lambdas that bind ``name`` themselves (their
    ``name`` is another variable)."""
    skipped = {id(n) for n in ast.walk(nest)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) and any(
                name in {t.id for t in ast.walk(g.target) if isinstance(t, ast.Name)}
                for g in node.generators):
            skipped |= {id(n) for n in ast.walk(node)}
        elif isinstance(node, ast.Lambda) and name in {a.arg for a in node.args.args}:
            skipped |= {id(n) for n in ast.walk(node)}
    end = (nest.end_lineno, nest.end_col_offset)
    after = [node for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == name
             and id(node) not in skipped and (node.lineno, node.col_offset) > end]
    return min(after, key=lambda node: (node.lineno, node.col_offset), default=None)
