"""Variable names and source locations of the user's code, for messages and events.

Owns: ``user_frame`` (the first stack frame outside pyacc's own packages) and
``variable_name`` (the name the caller bound an array to). Both walk the stack, so they
run only when a mapping is created or an error is raised, never on hot paths.
"""

from __future__ import annotations

import os
import sys

import numpy as np

__all__ = ["user_frame", "variable_name"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_OWN_DIRS = tuple(
    directory + os.sep
    for directory in (
        _PACKAGE_DIR,
        os.path.dirname(os.path.abspath(sys.modules["mapping"].__file__)),
        os.path.join(os.path.dirname(_PACKAGE_DIR), "compiler"),
    )
)


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


def variable_name(array) -> str | None:
    """The name the user's frame binds to ``array`` (or to the array it is a view of)."""
    frame = user_frame()
    if frame is None:
        return None
    base = array.base if isinstance(array, np.ndarray) else None
    fallback = None
    for name, value in frame.f_locals.items():
        if value is array:
            return name
        if base is not None and value is base and fallback is None:
            fallback = f"{name}[...]"
    return fallback
