"""Private copies outside a parallel nest's own (OpenACC 3.3 §2.5.13, 2.5.14, 2.9.10).

Owns :func:`privatize`. A parallel nest gets private and firstprivate copies from its
target (per chunk of iterations on the CPU, per thread on a GPU) of the names its own
clauses list. Everywhere else a name in a ``private`` or ``firstprivate`` clause would
still name the original array, and the region would write the program's data. Before a
kernel is rewritten (``codegen.ModuleBuilder.add_kernel``), on its copy of the tree:

* a construct's ``private``/``firstprivate`` array parameter (``serial``, ``parallel``)
  that the region uses outside its parallel nests is rebound at the top of the function
  to the region's own copy (``x = <copy of x>``): the code of a ``serial`` region and the
  code around a ``parallel`` region's loops never touch the original (a nest then copies
  the region's copy with its values, ``NestCopies.seeded``: what the code before the loop
  stored is what the loop reads, as a gang's loop reads the gang's copy);
* a loop's ``private`` array parameter (``acc.loop(..., private="t")``) on a loop that
  runs as written: the loop's body names a copy made at the top of the function;
* the same on a loop inside a parallel nest (an inner ``acc.loop``, which runs as written
  within each iteration of the nest): the loop's body names an alias of the parameter
  (``_acc_lpK_t = t``) that the nest privatises like its own private names.

Invariants:
    * Only array parameters are copied: they are defined at the top of the function
      (a local array in a private clause is the region's own already; scalars are
      firstprivate values).
    * The target makes the copies (``Target.private_copy``): ``np.empty_like``/``copy``
      on the CPU, device arrays on the queue's stream on a GPU.
    * One copy serves every iteration of a sequential loop: a private copy's values are
      undefined when an iteration starts (§2.9.10).
"""
from __future__ import annotations

import ast
from typing import NamedTuple

from .access import SHAPE_ATTRS
from .templates import Renamer

__all__ = ["privatize", "NestCopies"]

_PRIVATE_CONSTRUCTS = ("serial", "parallel", "parallel_loop", "kernels_loop")


class NestCopies(NamedTuple):
    """What ``privatize`` tells the rewrite of each nest: ``aliases``, ``{nest key:
    names}`` it privatises beyond its own; ``seeded``, the region's copies, which a nest
    copies with their values (``firstprivate``): the code before the loop may have set
    them, as a gang's redundant code sets the gang's copy that its loop then uses."""

    aliases: dict
    seeded: frozenset
    #: every name the copies define at the top of the function (a GPU kernel of a nest
    #: takes them as parameters: ``cuda_target``)
    defined: frozenset = frozenset()

    def of(self, nest) -> tuple[tuple, tuple]:
        """``(private, firstprivate)`` names of ``nest`` as its target copies them."""
        private = tuple(n for n in nest.private if n not in self.seeded)
        seeded = tuple(n for n in nest.private if n in self.seeded)
        return (private + tuple(self.aliases.get(nest.key, ())),
                tuple(dict.fromkeys(nest.firstprivate + seeded)))


def privatize(tree: ast.FunctionDef, plan, clauses, target, arg_types: dict) -> NestCopies:
    """Make the copies of the module docstring in ``tree`` (changed in place). ``plan``:
    the nests the rewrite makes parallel (None: none)."""
    nests = plan.nests if plan is not None else {}
    loop_private = plan.loop_private if plan is not None else {}
    params = [a.arg for a in tree.args.args]
    arrays = {n for n in params if hasattr(arg_types.get(n), "ndim")}  # (0-d included)
    top, seeded = _region_copies(tree, nests, clauses, target, arrays)
    found = _Loops(nests, loop_private, arrays, target, arg_types)
    for stmt in tree.body:
        found.visit(stmt, None, 0)
    made = [ast.copy_location(ast.parse(line).body[0], tree.body[0]) for line in top + found.top]
    tree.body[:0] = made
    return NestCopies(found.aliases, frozenset(seeded),
                      frozenset(stmt.targets[0].id for stmt in made))


def _region_copies(tree, nests, clauses, target, arrays) -> tuple[list[str], list[str]]:
    """``x = <copy>`` for the construct's private/firstprivate arrays used outside its
    nests, and those names."""
    if clauses is None or clauses.construct not in _PRIVATE_CONSTRUCTS:
        return [], []
    # a nest is recognised by its lines (a ``for`` statement spans whole lines)
    spans = [(n.levels[0].lineno, n.levels[0].end_lineno) for n in nests.values()]
    sizes = {id(node.value) for node in ast.walk(tree)  # x.shape needs no copy of x
             if isinstance(node, ast.Attribute) and node.attr in SHAPE_ATTRS}
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)
            and id(node) not in sizes
            and not any(first <= node.lineno <= last for first, last in spans)}
    copied = [(n, first) for names, first in ((clauses.private, False),
                                              (clauses.firstprivate, True))
              for n in names if n in arrays and n in used]
    return [f"{n} = {target.private_copy(n, first)}" for n, first in copied], \
        [n for n, _ in copied]


class _Loops:
    """Walks the statements, finding the marked loops with private arrays."""

    def __init__(self, nests, loop_private, arrays, target, arg_types):
        self.nests, self.loop_private, self.arrays = nests, loop_private, arrays
        self.target, self.arg_types = target, arg_types
        self.top: list[str] = []
        self.aliases: dict = {}

    def visit(self, node, nest, levels_left):
        """``nest``: the parallel nest ``node`` is in (None: none); ``levels_left``: how
        many of its levels ``node`` may still be."""
        if isinstance(node, ast.For):
            key = (node.lineno, node.col_offset)
            if nest is None and key in self.nests:
                nest, levels_left = self.nests[key], len(self.nests[key].levels)
            if levels_left:
                levels_left -= 1  # one of the nest's own levels: the nest privatises
            else:
                self._private_loop(node, key, nest)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                self.visit(child, nest, levels_left)

    def _private_loop(self, loop, key, nest):
        names = [n for n in self.loop_private.get(key, ()) if n in self.arrays]
        if not names:
            return
        mapping = {n: f"_acc_lp{len(self.top)}_{n}" for n in names}
        for name, alias in mapping.items():
            if nest is None:
                self.top.append(f"{alias} = {self.target.private_copy(name, False)}")
            else:
                self.top.append(f"{alias} = {name}")
                self.aliases.setdefault(nest.key, []).append(alias)
                self.arg_types[alias] = self.arg_types[name]
        renamer = Renamer(mapping)
        loop.body = [renamer.visit(stmt) for stmt in loop.body]
        loop.orelse = [renamer.visit(stmt) for stmt in loop.orelse]
