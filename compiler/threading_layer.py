"""Numba's threading layer for pyacc's CPU kernels: oneTBB, which survives ``fork``.

Numba runs ``parallel=True`` kernels on one of three layers. GNU OpenMP (``omp``, the
default where libgomp is found) is not fork safe: a child forked after a parallel kernel
ran is killed by libgomp ("fork() called from a process already using GNU OpenMP"), so
``multiprocessing`` with fork, or a plain ``os.fork``, loses the child. ``workqueue`` is
not thread safe, and pyacc launches kernels from several host threads (async queues).
oneTBB is both thread and fork safe (Numba's ``safe`` category). The ``tbb`` wheel puts
``libtbb.so.12`` in the environment's ``lib`` folder, which the dynamic loader does not
search, so :func:`select` loads it by path (``RTLD_GLOBAL``) before Numba looks for it.

Owns :func:`select` (called once when ``compiler`` is imported) and :func:`describe`.

Invariants:
    * A choice the user made wins: ``NUMBA_THREADING_LAYER`` set, or
      ``numba.config.THREADING_LAYER`` changed before pyacc is imported, is left alone.
    * Without a loadable oneTBB the layer stays Numba's default (and fork after a
      parallel kernel stays unsafe with GNU OpenMP; docs/RELIABILITY.md says so).
"""
from __future__ import annotations

import ctypes
import os
import sys

import numba

__all__ = ["select", "describe"]

_SELECTED: list = []


def _library_candidates():
    names = ("libtbb.so.12", "libtbb.so")
    for root in dict.fromkeys((sys.prefix, sys.base_prefix, os.path.dirname(sys.executable) + "/..")):
        for name in names:
            yield os.path.join(root, "lib", name)


def _load_tbb() -> bool:
    """Load oneTBB so that Numba's ``tbbpool`` extension links; True when it imports."""
    for path in _library_candidates():
        if os.path.exists(path):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue
    try:
        # optional: whether Numba's TBB layer (oneTBB) can be loaded here
        from numba.np.ufunc import tbbpool  # noqa: F401 - Numba's TBB layer
    except ImportError:
        return False
    return True


def select() -> str:
    """Choose the threading layer once (module docstring); returns its name as set in
    ``numba.config.THREADING_LAYER``."""
    if _SELECTED:
        return _SELECTED[0]
    chosen = numba.config.THREADING_LAYER
    # oneTBB is loaded by path whenever it may be used: when pyacc chooses it, and when
    # the user asks for it (by name or by a category Numba fills with it)
    usable = chosen in ("default", "tbb", "safe", "threadsafe", "forksafe") and _load_tbb()
    if "NUMBA_THREADING_LAYER" not in os.environ and chosen == "default" and usable:
        numba.config.THREADING_LAYER = chosen = "tbb"
    _SELECTED.append(chosen)
    return chosen


def describe() -> str:
    """The layer in use (once a parallel kernel ran) or the one requested."""
    try:
        return numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet
        return f"{numba.config.THREADING_LAYER} (requested)"
