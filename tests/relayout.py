"""``relayout``: an array's shape, dtype or strides changed in place, as a program may do
between two compute calls (the lanes must see it: the same object, another layout).

NumPy 2.5 deprecates setting these attributes; a later NumPy may refuse it. The warning is
silenced here (the tests mean the in-place change), and where NumPy refuses, the test is
skipped: no program can change a layout in place then, and nothing is left to check.
"""
from __future__ import annotations

import warnings

import pytest

__all__ = ["relayout"]


def relayout(array, *, shape=None, dtype=None, strides=None) -> None:
    """Set ``array``'s ``shape``, ``dtype`` and ``strides`` (those given) in place."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            for name, value in (("shape", shape), ("dtype", dtype), ("strides", strides)):
                if value is not None:
                    setattr(array, name, value)
        except AttributeError as refused:
            pytest.skip(f"this NumPy cannot change an array's layout in place: {refused}")
