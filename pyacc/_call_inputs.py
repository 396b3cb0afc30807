"""What a compute call reads besides its arguments, at each call.

Owns the reading of a kernel's free parameters (global and closure values,
:func:`free_reader`) and the launch's ``(enabled, async, wait)`` from its (evaluated)
clauses (:func:`clause_values`). The environment that decides a kernel is read at each
call by ``compiler.kernel_env``.
"""

from __future__ import annotations

from pyacc import compiler

from ._clauses import async_noval

__all__ = ["free_reader", "clause_values"]


def clause_values(clauses):
    """``(enabled, async, wait)`` of a launch from its (evaluated) clauses."""
    enabled = True if clauses.if_ is None else bool(clauses.if_)
    async_clause = async_noval if clauses.async_ == compiler.ASYNC_NOVAL else clauses.async_
    wait_clause = None if clauses.wait in (None, False) else ([] if clauses.wait is True else clauses.wait)
    return enabled, async_clause, wait_clause


def free_reader(info):
    """A function returning the current values of ``info.free_params`` (global and
    closure variables, read at each call), or None when the kernel has none."""
    names = info.free_params
    if not names:
        return None
    func = info.func
    cells = dict(zip(func.__code__.co_freevars, func.__closure__ or ()))
    namespace = func.__globals__
    readers = [(cells[name], None) if name in cells else (None, name) for name in names]

    def read():
        try:
            return [cell.cell_contents if cell is not None else namespace[name]
                    for cell, name in readers]
        except (KeyError, ValueError):  # deleted since: a clear NameError
            return info.free_values()

    return read
