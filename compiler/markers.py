"""Markers usable inside kernels, with plain-Python meanings.

Owns ``loop``, the ``atomic`` namespace, ``on_device`` and ``cache``. ``pyacc`` re-exports these
very objects (``pyacc`` imports ``compiler``, never the reverse); the compiler recognises
them in a kernel's AST by resolving the dotted name through the function's globals and
comparing object identity, so any import spelling works (``acc.loop``, ``pyacc.loop``,
``from pyacc import loop``).

Invariants:
    * In plain Python (``target="python"``, ``PYACC_DISABLE_JIT=1``) every marker does
      what its compiled form does: ``loop(r)`` returns ``r``; ``atomic.add(a, i, v)``
      updates ``a[i]`` and returns the old value (under a lock, so plain-Python threads
      stay exact); ``on_device(t)`` answers for the thread's current device type;
      ``cache(...)`` does nothing (a hint; compiled, the statement is removed first).
    * The current device type of plain-Python code is thread-local (``device_scope``).
"""
from __future__ import annotations

import contextlib
import threading
import types as _pytypes

from .clauses import parse_loop_clauses
from .errors import CompileError

__all__ = ["loop", "atomic", "on_device", "cache", "normalise_device_type", "device_scope",
           "on_device_value", "DEVICE_TYPES"]

#: Canonical device types and their aliases (API.md §1).
DEVICE_TYPES = {"host": "host", "multicore": "host", "emulated": "emulated",
                "cuda": "cuda", "nvidia": "cuda", "not_host": "not_host"}


def normalise_device_type(device_type: str) -> str:
    """Return the canonical device type for a spelling (case-insensitive)."""
    try:
        return DEVICE_TYPES[str(device_type).lower()]
    except KeyError:
        raise CompileError(f"unknown device type {device_type!r}; expected one of "
                           f"{', '.join(DEVICE_TYPES)}") from None


def on_device_value(query: str, device_type: str) -> bool:
    """``acc_on_device(query)`` for code running on ``device_type`` (OpenACC 3.3 §3.2.17).

    Args:
        query: The device type asked about (``host``, ``not_host``, ``cuda``, ...).
        device_type: Where the code runs (``host``, ``emulated``, ``cuda``).
    """
    if str(query).lower() == "none":  # ``acc_device_none``: no code runs there
        return False
    query, where = normalise_device_type(query), normalise_device_type(device_type)
    if query == "not_host":
        return where != "host"
    return query == where


def loop(iterable, clause_string=None, /, **loop_clauses):
    """Mark a loop inside ``acc.parallel``/``acc.kernels`` (OpenACC 3.3 §2.9).

    ``for i in loop(range(n), gang=True, reduction="+:s"):``, or with the clauses as the
    pragma writes them, ``loop(range(n), "gang vector reduction(+:s)")``. In plain Python
    it returns ``iterable`` unchanged (the clauses are still checked).
    """
    if loop_clauses or clause_string is not None:
        parse_loop_clauses(clause_string, **loop_clauses)
    return iterable


def cache(*items) -> None:
    """``acc.cache(a[i-1:i+2], b)``: OpenACC 3.3 §2.10's cache directive at the top of a
    loop body, a hint that those elements are reused; pyacc leaves caching to the
    compiler (Numba, the GPU's caches), as the directive allows: no effect, anywhere."""
    return None


_state = threading.local()
_atomic_lock = threading.Lock()


def _current_device_type() -> str:
    return getattr(_state, "device_type", "host")


@contextlib.contextmanager
def device_scope(device_type: str):
    """Run plain-Python kernel code as if on ``device_type`` (for ``on_device``)."""
    previous = _current_device_type()
    _state.device_type = normalise_device_type(device_type)
    try:
        yield
    finally:
        _state.device_type = previous


def on_device(device_type: str) -> bool:
    """True when the calling code runs on ``device_type`` (OpenACC 3.3 §3.2.17).

    Inside compiled kernels this is a compile-time constant; in plain Python it answers
    for the thread's current device type (``host`` outside kernels).
    """
    return on_device_value(device_type, _current_device_type())


def _atomic_update(name, combine):
    def update(array, index, value):
        with _atomic_lock:
            old = array[index]
            array[index] = combine(old, value)
            return old
    update.__name__ = update.__qualname__ = name
    update.__doc__ = (f"Atomically ``array[index] = {name}(array[index], value)``; returns "
                      f"the old value (OpenACC 3.3 §2.12 atomic update/capture).")
    return update


#: ``acc.atomic``: atomic read-modify-write updates (OpenACC 3.3 §2.12).
atomic = _pytypes.SimpleNamespace(
    add=_atomic_update("add", lambda old, v: old + v),
    sub=_atomic_update("sub", lambda old, v: old - v),
    max=_atomic_update("max", lambda old, v: v if v > old else old),
    min=_atomic_update("min", lambda old, v: v if v < old else old),
    and_=_atomic_update("and_", lambda old, v: old & v),
    or_=_atomic_update("or_", lambda old, v: old | v),
    xor=_atomic_update("xor", lambda old, v: old ^ v),
)

#: Identity of each atomic marker → operation name used by code generation.
ATOMIC_OPS = {id(getattr(atomic, name)): name for name in vars(atomic)}
