"""What a compute call reads besides its arguments, at each call.

Owns the reading of a kernel's free parameters (global and closure values,
:func:`free_reader`), the launch's ``(enabled, async, wait)`` from its (evaluated)
clauses (:func:`clause_values`), and the environment flags the launcher reads per call
(:func:`environ_get`, :func:`env_flag`: a change takes effect at the next call).
"""

from __future__ import annotations

import os

import compiler

from ._clauses import async_noval

__all__ = ["free_reader", "clause_values", "environ_get", "env_flag"]


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


_ENVIRON = getattr(os.environ, "_data", None)  # the bytes dict behind os.environ (POSIX)


def environ_get_portable(name: bytes):  # pragma: no cover - non-POSIX
    return os.environ.get(name.decode())


#: ``environ_get(b"NAME")``: the raw value of an environment variable, or None, read at
#: every launch so that a change takes effect at once. ``os.environ.get`` costs ~0.5 µs a
#: call; the dict behind it, which ``os.environ`` keeps in step, ~0.05 µs.
environ_get = _ENVIRON.get if _ENVIRON is not None else environ_get_portable


def env_flag(name: bytes) -> bool:
    """An on/off environment flag: set and not "" or "0"."""
    value = environ_get(name)
    return value is not None and value not in (b"", b"0", "", "0")
