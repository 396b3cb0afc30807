"""Variable names and source locations of the user's code, for messages and events.

Owns: ``user_frame`` (the first stack frame outside pyacc's own packages) and
``variable_name`` (the name the caller bound an array to). Both walk the stack, so they
run only when a mapping is created or an error is raised, never on hot paths.
"""

from __future__ import annotations

import inspect
import sys

import numpy as np

from . import _layers

__all__ = ["user_frame", "variable_name"]

_OWN_DIRS = _layers.folders()


def user_frame():
    """The innermost frame that is not pyacc's, mapping's or the standard library's
    ``contextlib`` (the user's ``with`` statement or call)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_OWN_DIRS) and not filename.endswith("contextlib.py"):
            return frame
        frame = frame.f_back
    return None


def _locals_of(frame) -> list:
    """The ``(name, value)`` pairs of a frame's locals, without keeping them alive.

    Before Python 3.13 (PEP 667), reading ``f_locals`` of a function frame materialises
    a dict snapshot that stays on the frame: a local the user later deletes would live
    on in it until the function returns. The snapshot is only a cache of the fast locals
    (nothing copies it back outside tracing), so it is emptied after reading. From 3.13
    on ``f_locals`` is a live proxy that must not be cleared, and keeps nothing alive.
    """
    if sys.version_info < (3, 13) and frame.f_code.co_flags & inspect.CO_OPTIMIZED:
        snapshot = frame.f_locals
        pairs = list(snapshot.items())
        snapshot.clear()
        return pairs
    return list(frame.f_locals.items())


def variable_name(array) -> str | None:
    """The name the user's frame binds to ``array`` (or to the array it is a view of),
    in its locals, then (a function's frame) in its module's globals."""
    frame = user_frame()
    if frame is None:
        return None
    base = array.base if isinstance(array, np.ndarray) else None
    fallback = None
    scopes = [_locals_of(frame)]
    if frame.f_code.co_flags & inspect.CO_OPTIMIZED:  # a function's: then its module's
        # (never ``frame.f_locals`` again: before 3.13 it makes the snapshot again)
        scopes.append(list(frame.f_globals.items()))  # (another thread may add one)
    for pairs in scopes:
        for name, value in pairs:
            if value is array:
                return name
            if base is not None and value is base and fallback is None:
                fallback = f"{name}[...]"
        if fallback is not None:
            return fallback
    return None
