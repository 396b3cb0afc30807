"""Numba's threading layer for pyacc's CPU kernels: oneTBB, which survives ``fork``.

Numba runs ``parallel=True`` kernels on one of three layers. GNU OpenMP (``omp``, the
default where libgomp is found) is not fork safe: a child forked after a parallel kernel
ran is killed by libgomp ("fork() called from a process already using GNU OpenMP"), so
``multiprocessing`` with fork, or a plain ``os.fork``, loses the child. ``workqueue`` is
not thread safe, and pyacc launches kernels from several host threads (async queues).
oneTBB is both thread and fork safe (Numba's ``safe`` category). The ``tbb`` wheel puts
``libtbb.so.12`` in the environment's ``lib`` folder, which the dynamic loader does not
search, so :func:`select` loads it by path (``RTLD_GLOBAL``) before Numba looks for it.

Owns :func:`select` (called once when ``compiler`` is imported), :func:`describe`,
:func:`serialized` and :func:`one_at_a_time`.

Without oneTBB, Numba takes GNU OpenMP, else ``workqueue`` (an image without libgomp and
without the ``tbb`` wheel, such as the lent H100's Python). Measured there and here:
- ``workqueue`` aborts the process ("Concurrent access has been detected") when two
  threads run parallel kernels at once, which pyacc's async queues do (two queues, or a
  queue and the program's thread): with it, pyacc runs its parallel CPU kernels one at a
  time (:func:`one_at_a_time`, a process-wide lock; no prepared calls then);
- an exception raised inside a parallel loop (a division by zero, an ``IndexError``) is
  reported only where the thread that raised it is the caller's: always with oneTBB,
  for the first chunk only with OpenMP, never with ``workqueue``, where the kernel
  returns as if nothing happened (the failed chunk's remaining elements unwritten).
  ``pyacc info`` and ``acc.explain`` name the layer, and say so when it is not oneTBB.

Invariants:
    * A choice the user made wins: ``NUMBA_THREADING_LAYER`` set, or
      ``numba.config.THREADING_LAYER`` changed before pyacc is imported, is left alone.
    * Without a loadable oneTBB the layer stays Numba's default (and fork after a
      parallel kernel stays unsafe with GNU OpenMP; docs/RELIABILITY.md says so).
    * oneTBB is looked for where a ``tbb`` wheel puts it (``<prefix>/lib`` of the
      interpreter, and of each ``sys.path`` entry's environment) and where the dynamic
      loader looks (``LD_LIBRARY_PATH``, the system's folders).
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading

import numba

__all__ = ["select", "describe", "serialized", "one_at_a_time", "caveat"]

_SELECTED: list = []
#: the parallel kernels' turn under workqueue (reentrant: a kernel that calls back into
#: Python may call another)
_ONE_AT_A_TIME = threading.RLock()


def _library_candidates():
    names = ("libtbb.so.12", "libtbb.so")
    roots = [sys.prefix, sys.base_prefix, os.path.dirname(sys.executable) + "/.."]
    for entry in sys.path:  # <env>/lib/pythonX.Y/site-packages → <env>
        if entry.endswith("site-packages"):
            roots.append(os.path.join(entry, "..", "..", ".."))
    for root in dict.fromkeys(roots):
        for name in names:
            yield os.path.join(root, "lib", name)
    yield "libtbb.so.12"  # the dynamic loader's own search: LD_LIBRARY_PATH, ld.so.cache


def _load_tbb() -> bool:
    """Load oneTBB so that Numba's ``tbbpool`` extension links; True when it imports."""
    for path in _library_candidates():
        if os.path.exists(path) or os.sep not in path:
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


@functools.cache
def layer() -> str:
    """The layer Numba runs parallel kernels on (its thread pool started, once)."""
    from numba.np.ufunc.parallel import _launch_threads  # what a first parallel kernel calls

    _launch_threads()
    return numba.threading_layer()


def serialized() -> bool:
    """Whether pyacc's parallel CPU kernels must take turns (``workqueue``: module
    docstring)."""
    return layer() == "workqueue"


class one_at_a_time:
    """``kernel`` run under the process-wide turn of parallel kernels (``workqueue``);
    its other attributes (``py_func``, ``overloads``, ``dispatcher``...) are the kernel's.
    Not a Numba dispatcher: the express lane calls it as it is, with no prepared call
    (``compiler.cpu_plans.prepare``), so every call takes the turn."""

    __slots__ = ("kernel",)

    def __init__(self, kernel):
        self.kernel = kernel

    def __call__(self, *args):
        with _ONE_AT_A_TIME:
            return self.kernel(*args)

    def __getattr__(self, name):
        return getattr(self.kernel, name)


def caveat() -> str | None:
    """What a program should know of the layer in use, or None (oneTBB)."""
    name = layer()
    if name == "tbb":
        return None
    lost = "never reported" if name == "workqueue" else "reported only from the first chunk"
    turns = "; parallel kernels run one at a time (it is not thread safe)" if name == "workqueue" else ""
    return (f"Numba's threading layer is {name}, not oneTBB: an exception raised inside a "
            f"parallel loop is {lost}{turns}; pip install tbb")
