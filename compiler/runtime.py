"""Small jitted helpers that generated kernel modules call.

Owns the arithmetic of iteration spaces (Python ``range`` trip counts, chunk counts)
and the per-chunk copies behind ``private``/``firstprivate``. Every helper is a cached
``njit`` function or a Numba ``overload``, so kernels that call them stay disk-cacheable.

Invariants:
    * ``trip_count(start, stop, step)`` equals ``len(range(start, stop, step))`` and
      raises ``ValueError`` for a zero step, exactly like Python.
    * ``chunk_count(total, chunks_wanted())`` is ≥ 1 and ≤ max(total, 1); it depends on
      the thread count only beyond 16 threads, so float reductions give the same result
      run to run.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import overload

__all__ = ["trip_count", "chunk_count", "chunks_wanted", "threads_wanted", "private_copy", "firstprivate_copy",
           "MIN_CHUNKS"]

#: Reductions split the iteration space into at least this many chunks.
MIN_CHUNKS = 64


@numba.njit(cache=True, nogil=True)
def trip_count(start, stop, step):
    """Number of iterations of ``range(start, stop, step)``."""
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    if step < 0:
        return max(0, (start - stop - step - 1) // (-step))
    raise ValueError("range() arg 3 must not be zero")


def chunks_wanted() -> int:
    """Chunks per reduction loop: ``max(64, 4 × NUMBA_NUM_THREADS)``.

    Baked into the generated source as a constant: calling ``numba.get_num_threads``
    inside a kernel would make it uncacheable (a dynamic global).
    """
    return max(MIN_CHUNKS, 4 * numba.config.NUMBA_NUM_THREADS)


def threads_wanted() -> int:
    """Chunks of a loop with an array reduction: one per thread
    (``NUMBA_NUM_THREADS``), baked into the source like :func:`chunks_wanted`."""
    return max(1, numba.config.NUMBA_NUM_THREADS)


@numba.njit(cache=True, nogil=True)
def chunk_count(total, wanted):
    """Number of chunks for a reduction loop of ``total`` iterations (≥ 1)."""
    return max(1, min(total, wanted))


def private_copy(value):
    """A chunk-private copy for ``private`` (uninitialised array, or the scalar)."""
    if isinstance(value, np.ndarray):
        return np.empty_like(value)
    return value


def firstprivate_copy(value):
    """A chunk-private copy for ``firstprivate`` (initialised array, or the scalar)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def narrowed(value, kind):
    """A reduction variable passed in as a narrow integer or bool (``np.int8``): ``value``
    in ``kind`` when Numba's arithmetic left an integer or bool (wrapped, as NumPy's and
    C's keep it), as it is when it made a float (OpenACC 3.3 §2.5.15; ``reductions``)."""
    if isinstance(value, (bool, int, np.integer, np.bool_)):
        return np.asarray(value).astype(kind)[()]  # (C's cast: a Python int would raise)
    return value


@overload(narrowed)
def _narrowed_overload(value, kind):
    if isinstance(value, (types.Integer, types.Boolean)):
        return lambda value, kind: kind(value)
    return lambda value, kind: value


@overload(private_copy)
def _private_copy_overload(value):
    if isinstance(value, types.Array):
        return lambda value: np.empty_like(value)
    return lambda value: value


@overload(firstprivate_copy)
def _firstprivate_copy_overload(value):
    if isinstance(value, types.Array):
        return lambda value: value.copy()
    return lambda value: value
