"""Compiler feedback: how each loop of a compute region was compiled (like NVHPC's
``-Minfo=accel``).

Owns :func:`explain` (the text ``acc.explain(f)`` returns and ``PYACC_INFO=1`` prints at
each kernel's first compile) and :func:`warn_sequential` (the ``PerformanceWarning`` of a
``kernels`` loop that runs sequentially).

Invariants:
    * The text is built only from the planner's notes (``planner.LoopNote``), the
      kernel's analysis (``KernelInfo``) and, once compiled, the argument types: what it
      says is what the code generator did, never a second guess.
    * A warning names the file and line of the loop (``warnings.warn_explicit``), so
      Python's default filter shows it once per loop.
"""
from __future__ import annotations

import logging
import os
import sys
import warnings

import numpy as np
from numba.core import types as nbtypes

from . import cuda_compilers
from .clause_kinds import OMP_MAP_TYPE
from .loop_plans import AS_WRITTEN
from .frontend import Scope, is_numeric_constant
from .errors import PerformanceWarning

__all__ = ["explain", "warn_sequential", "report_build", "info_enabled", "log_info",
           "log_decisions"]

_LOG = logging.getLogger("pyacc")

_KERNELS = ("kernels", "kernels_loop")


def info_enabled() -> bool:
    """True when ``PYACC_INFO`` is set to something other than ``""``/``"0"``."""
    return os.environ.get("PYACC_INFO", "0") not in ("", "0")


def log_info(text: str) -> None:
    """One line of ``PYACC_INFO``'s output on stderr (callers check :func:`info_enabled`)."""
    print(f"pyacc info: {text}", file=sys.stderr)


def explain(info, notes, arg_types=None) -> str:
    """The compiler feedback of one compute region.

    Args:
        info: Its ``KernelInfo``.
        notes: The planner's ``LoopNote`` list.
        arg_types: ``{parameter: numba type}`` once compiled (None: not yet called).
    """
    clauses = info.clauses
    lines = [f"{info.where}: {clauses.construct}"]
    if not notes:
        lines.append("  no loop runs in parallel: the region runs as written on one thread"
                     if clauses.construct != "serial" else "  serial: runs on one thread")
    for note in sorted(notes, key=lambda note: note.line):
        lines.append(f"  line {note.line}: {_loop_text(note)}")
    lines += _data_lines(info, arg_types)
    lines += _cuda_lines(info)
    return "\n".join(lines)


def _cuda_lines(info) -> list[str]:
    """Which compiler made the region's GPU kernels (API.md §12), once it has some."""
    if not any(key and key[0] == "cuda" for key in info.kernels):
        return []
    return [f"  GPU kernels compiled by {cuda_compilers.describe()}"]


def _loop_text(note) -> str:
    if note.within:
        return (f"inner loop{' (' + note.schedule + ')' if note.schedule else ''}: "
                + (f"collapsed with the parallel loop at line {note.within} (on a GPU a "
                   f"thread per iteration of both; on CPUs threads split line "
                   f"{note.within}'s iterations)" if note.widened else f"each iteration of "
                   f"the parallel loop at line {note.within} runs it on its thread")
                + (f" ({note.reason})" if note.reason else ""))
    if not note.parallel:
        return f"sequential loop: {note.reason}"
    parts = ["parallel loop"]
    if note.collapse > 1:
        parts.append(f"collapse({note.collapse})")
    if note.schedule:
        parts.append(note.schedule)
    text = ", ".join(parts)
    for op, var in note.reductions:
        found = " (implicit: found in the loop)" if var in note.implicit else ""
        text += f"; reduction({op}:{var}){found}"
    if note.private:
        text += f"; private({', '.join(note.private)})"
    if note.interchange:
        text += "; inner loops interchanged (matrix-product form, unit-stride inner loop)"
    if note.serial_below:
        text += (f"; runs on one thread below {note.serial_below} iterations "
                 f"(PYACC_SERIAL_BELOW; same results)")
    if note.conditions:
        text += ("; parallel only when " + " and ".join(note.conditions) +
                 " (checked at each call; otherwise the loop runs as written)")
    return text


def _data_lines(info, arg_types):
    """Each parameter's data clause: explicit, or the implicit one of §2.6.2."""
    clauses = info.clauses
    explicit = clauses.data_names()
    explicit.update({n: k for k in ("private", "firstprivate") for n in getattr(clauses, k)})
    lines = []
    closure = set(info.func.__code__.co_freevars)
    for name in info.kernel_params:
        where = "" if name not in info.free_params else \
            " (closure)" if name in closure else " (module-level)"
        numba_type = (arg_types or {}).get(name)
        kind = _known_kind(info, name, numba_type)
        suffix = "" if kind is not None else " if an array"
        if name in info.owners and explicit.get(name) == "present":
            lines.append(f"  {name}{where}: present (read by routine "
                         f"{info.owners[name].__name__}: declared, OpenACC 3.3 §2.15.1)")
        elif name in explicit:
            lines.append(f"  {name}{where}: {explicit[name]} (explicit clause)")
        elif name in info.loop_private:
            lines.append(f"  {name}{where}: private (only in loops' private clauses: "
                         f"no data clause, §2.6.2)")
        elif kind == "scalar":
            lines.append(f"  {name}{where}: firstprivate (implicit: scalar, §2.6.2)")
        elif clauses.default == "present":
            lines.append(f"  {name}{where}: present (default(present)){suffix}")
        elif kind is None and name not in info.written and name not in info.read:
            continue
        else:
            rule = ("copy (implicit present-or-copy: the kernel writes it)"
                    if name in info.written else
                    "copyin (implicit present-or-copy: never written, not copied back)")
            lines.append(f"  {name}{where}: {rule}{suffix}")
    return [_omp_spelling(line) for line in lines] if hasattr(clauses.construct, "omp") \
        else lines


def _known_kind(info, name, numba_type):
    """``"scalar"``, ``"array"`` or None (not known yet): from the call's types, else
    (before the first call) from the value a plain free name holds now."""
    if numba_type is not None:
        return "array" if isinstance(numba_type, nbtypes.Array) else "scalar"
    if name not in info.free_params or name in info.labels:  # (chains: read at the call)
        return None
    value = Scope(info.func, set()).lookup(name)
    if isinstance(value, np.ndarray):
        return "array"
    return "scalar" if is_numeric_constant(value) and not isinstance(value, tuple) else None


#: a data line's words in OpenMP's spelling (a construct of ``pyacc.omp``: its name has
#: ``.omp``), longest first
_OMP_WORDS = (("implicit present-or-copy: the kernel writes it", "implicit, §5.8.1: written"),
              ("implicit present-or-copy: never written", "implicit, §5.8.1: never written"),
              ("implicit: scalar, §2.6.2", "implicit: scalar, OpenMP 5.2 §5.8.1"),
              ("(default(present))", "(defaultmap(present))"),
              *((f": {kind} ", f": map({map_type}) ") for kind, map_type in OMP_MAP_TYPE.items()),
              (": deviceptr ", ": is_device_ptr "))


def _omp_spelling(line: str) -> str:
    for acc_words, omp_words in _OMP_WORDS:
        line = line.replace(acc_words, omp_words)
    return line


def warn_sequential(info, notes) -> None:
    """``PerformanceWarning`` for each ``kernels`` loop that runs sequentially."""
    if info.clauses.construct not in _KERNELS:
        return
    for note in notes:
        if not note.parallel and note.reason != "seq clause" and not note.within and \
                not note.reason.startswith(AS_WRITTEN):
            warnings.warn_explicit(
                PerformanceWarning(
                    f"{info.name}: the kernels loop at line {note.line} runs sequentially: "
                    f"{note.reason}. If its iterations are independent, say so with "
                    f"independent (OpenACC 3.3 §2.9.9); acc.explain({info.name}) shows how "
                    f"each loop was compiled"),
                PerformanceWarning, info.filename, note.line)


def report_build(info, notes, arg_types) -> None:
    """At a kernel's first compile: the warnings, and ``PYACC_INFO``'s text on stderr."""
    warn_sequential(info, notes)
    if info_enabled():
        print(explain(info, notes, arg_types), file=sys.stderr)


def log_decisions(info, notes) -> None:
    """Debug records (logger ``pyacc``) of the planner's decisions, at a kernel's
    compile: each loop that runs sequentially and why, each reduction found."""
    if not _LOG.isEnabledFor(logging.DEBUG):
        return
    for note in notes:
        if not note.parallel:
            _LOG.debug("%s: loop at %s:%d runs sequentially: %s", info.name, info.filename,
                       note.line, note.reason)
        for op, var in note.reductions:
            if var in note.implicit:
                _LOG.debug("%s: %r is updated with '%s' in the loop at %s:%d; treated as "
                           "reduction(%s:%s)", info.name, var, op, info.filename, note.line, op, var)
