"""What the loop planner decides: :class:`LoopPlan`, :class:`NestPlan` and :class:`LoopNote`.

Owns the planner's results (``planner.Planner`` makes them): each parallel loop nest of a
function and how it runs (:class:`NestPlan`: levels, reductions, private variables,
run-time conditions), every nest of a function keyed by position (:class:`LoopPlan`), and a
note on every loop decided about (:class:`LoopNote`), the compiler feedback of
``acc.explain`` and ``PYACC_INFO``.

Invariants:
    * A plan is made once per ``KernelInfo`` (``KernelInfo.plan``); code generation reads
      it and sets only the fields documented as set by code generation
      (``NestPlan.stored_outside``, ``LoopNote.interchange``, ``LoopNote.serial_below``).
    * ``NestPlan.key`` (the outermost loop's line and column) identifies a nest in any
      copy of the function's tree.
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LoopNote", "NestPlan", "LoopPlan", "AS_WRITTEN"]

#: how the reason of a ``kernels`` loop no directive could make parallel (a ``break``, a
#: ``return``) starts: it runs as written, and no PerformanceWarning suggests
#: ``independent``
AS_WRITTEN = "runs as written, as no directive could make it parallel: "


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
        array_reductions: The reduction variables that are arrays (§2.5.15).
        conditions: Run-time conditions (``expr >= 0`` sources) the parallel form needs;
            the nest runs as written when one is false (``kernels`` loops only).
        widen: How many loops tightly nested under the levels may join the nest's
            iteration space (``planner.Planner._widened``): loops parallel by their own
            directive (``acc.loop`` gang/worker/vector/independent) or proved so, with
            invariant bounds, that run each iteration the same whether collapsed or not
            (OpenACC 3.3 §2.9: gang outer, vector inner is one space of threads on a
            GPU). Each target takes what it wants (``Target.widened``): a GPU all, a CPU
            those of nests without reductions or private copies (the interchange).
    """

    levels: tuple
    parallel: bool
    reductions: tuple = ()
    private: tuple = ()
    firstprivate: tuple = ()
    reason: str = ""
    stored_outside: frozenset | None = None
    array_reductions: frozenset = frozenset()
    conditions: tuple = ()
    widen: int = 0

    @property
    def key(self):
        """Position of the outermost loop: identifies the nest in a copy of the tree."""
        node = self.levels[0]
        return (node.lineno, node.col_offset)


@dataclass
class LoopNote:
    """What the planner decided for one loop: the compiler feedback of ``acc.explain``
    and ``PYACC_INFO`` (like NVHPC's ``-Minfo=accel``).

    Attributes:
        line: Line of the loop's ``for``.
        parallel: Runs in parallel (False: sequentially, see ``reason``).
        reason: Why the loop runs sequentially (the dependence found, or ``seq``).
        collapse: Levels collapsed into one iteration space.
        schedule: The gang/worker/vector clauses given (``"gang vector(128)"``).
        reductions: ``(op, var)`` reductions, declared or implicit.
        implicit: The variables of ``reductions`` that were found, not declared.
        private: Private variables (declared) of the loop.
        construct: The construct the loop belongs to (``kernels``, ``parallel`` ...).
        interchange: Set by code generation when it interchanged the nest's inner loops.
        serial_below: Set by code generation: the trip count below which the nest runs
            on one thread (its serial twin, ``crossover``; 0: always parallel).
        conditions: Run-time conditions (source, each ``expr >= 0``) under which the
            dependence test proved the loop parallel; when one fails at a call, the
            loop runs sequentially.
        within: For a marked loop inside a parallel nest: the line of the nest, whose
            every iteration runs it (0: not inside one).
        widened: For such a loop: it joins the nest (``NestPlan.widen``; the targets
            that take it, ``Target.widened``).
    """

    line: int
    parallel: bool
    reason: str = ""
    collapse: int = 1
    schedule: str = ""
    reductions: tuple = ()
    implicit: tuple = ()
    private: tuple = ()
    construct: str = ""
    interchange: bool = False
    conditions: tuple = ()
    serial_below: int = 0
    within: int = 0
    widened: bool = False


@dataclass
class LoopPlan:
    """Every parallel nest of a function, keyed by :attr:`NestPlan.key`, a note on every
    loop the planner decided about, in source order, and the markers' private names."""

    nests: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    #: the ``private`` names of each ``acc.loop`` marker, keyed by its loop's position
    #: (``privates``: a loop that is not a nest's own level gets its copies there)
    loop_private: dict = field(default_factory=dict)

    def reductions(self):
        """All ``(op, var)`` reductions, in source order, without repeats."""
        seen = []
        for nest in self.nests.values():
            for item in nest.reductions:
                if item not in seen:
                    seen.append(item)
        return tuple(seen)
