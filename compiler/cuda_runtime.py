"""Host-side helpers that generated ``cuda`` drivers call (the cuda twin of ``runtime``).

A kernel compiled for the ``cuda`` target is a plain-Python *driver* that computes the
iteration spaces and launches ``numba.cuda`` kernels (see ``cuda_target``). Owns what
those drivers need at run time:

* :func:`launch` — a kernel launch on :func:`stream`;
* :func:`stream` — the numba-cuda stream to launch on: CuPy's *current* stream (the
  ``cuda`` device makes a queue's stream current while it runs a kernel of that queue,
  OpenACC 3.3 §2.16.1), wrapped with ``cuda.external_stream``; the default stream when
  CuPy is not in use (Numba's CUDA simulator);
* :func:`launch_shape` — grid and block of a nest: ``vector_length`` threads per block,
  ``num_gangs`` blocks when given, else one thread per iteration; nests with
  reductions or private arrays use a grid capped to a few blocks per multiprocessor
  (grid-stride loops cover the rest), so their per-block partials stay small;
* :func:`partials`, :func:`scratch` — device arrays for block partials and per-thread
  private copies, from CuPy's memory pool when CuPy is in use;
* :func:`finish` — the second pass of a reduction: the block partials combined with
  the operator on the host (OpenACC 3.3 §2.5.15);
* :func:`scalar` — the value a single-thread region left in its one-element output.

Invariants: every device operation here is ordered on :func:`stream`; a helper that
returns a host value has waited for that stream. Under the simulator
(``NUMBA_ENABLE_CUDASIM=1``) blocks are capped at :data:`SIMULATOR_BLOCK` threads and
grids at :data:`SIMULATOR_GRID` blocks: each simulated thread costs ~100 µs.
"""
from __future__ import annotations

import sys
import threading
import warnings

import numpy as np
from numba import config as _numba_config
from numba import cuda
from numba.core.errors import NumbaPerformanceWarning

__all__ = ["launch", "stream", "launch_shape", "partials", "scratch", "finish", "scalar",
           "SIMULATED", "DEFAULT_BLOCK"]

#: True when kernels run in Numba's CUDA simulator.
SIMULATED = bool(_numba_config.ENABLE_CUDASIM)
#: Threads per block when a construct has no ``vector_length`` clause.
DEFAULT_BLOCK = 128
#: Blocks per multiprocessor for grids that are capped (reductions, private arrays).
BLOCKS_PER_SM = 8
SIMULATOR_BLOCK = 16
SIMULATOR_GRID = 3
_MAX_GRID = 2**31 - 1

_external: dict[int, object] = {}
_multiprocessors: list[int] = []


def _cupy():
    """CuPy when the program uses it (the real ``cuda`` device imports it), else None."""
    if SIMULATED:
        return None
    return sys.modules.get("cupy")


def stream():
    """The numba-cuda stream of the queue being run (CuPy's current stream)."""
    cupy = _cupy()
    if cupy is None:
        return 0
    pointer = cupy.cuda.get_current_stream().ptr
    if pointer == 0:
        return 0
    wrapped = _external.get(pointer)
    if wrapped is None:
        wrapped = _external[pointer] = cuda.external_stream(pointer)
    return wrapped


#: numba-cuda warns of "low occupancy" below this many blocks (``_LaunchConfiguration``)
_FEW_BLOCKS = 128
_QUIET = threading.Lock()


def launch(kernel, grid: int, block: int, args: tuple) -> None:
    """``kernel[grid, block]`` on the current queue's stream (:func:`stream`)."""
    if SIMULATED:
        _simulated_launch(kernel, grid, block, args)
    elif grid >= _FEW_BLOCKS:
        kernel[grid, block, stream()](*args)
    else:
        # pyacc chose this grid (the problem is small, num_gangs, a single-thread run):
        # numba-cuda's low-occupancy warning would name a grid the user never wrote
        with _QUIET, warnings.catch_warnings():
            warnings.simplefilter("ignore", NumbaPerformanceWarning)
            configured = kernel[grid, block, stream()]
        configured(*args)


#: The simulator swaps ``cuda`` in a kernel's globals while it runs: one launch at a time.
_SIMULATOR_LOCK = threading.Lock()


def _simulated_launch(kernel, grid, block, args):
    """A launch in Numba's CUDA simulator. Host arrays that stand for device memory are
    handed over as they are (the simulator would otherwise copy them in and out, and it
    cannot copy strided views), and launches from several queues take turns."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    args = tuple(FakeCUDAArray(a) if isinstance(a, np.ndarray) and a.ndim else a
                 for a in args)
    with _SIMULATOR_LOCK:
        kernel[grid, block, 0](*args)


def _capped_grid() -> int:
    if SIMULATED:
        return SIMULATOR_GRID
    if not _multiprocessors:
        _multiprocessors.append(cuda.get_current_device().MULTIPROCESSOR_COUNT)
    return BLOCKS_PER_SM * _multiprocessors[0]


def launch_shape(total: int, block: int, gangs: int | None, capped: bool):
    """``(grid, block)`` for a nest of ``total`` iterations (``total`` > 0)."""
    if SIMULATED:
        block = min(block, SIMULATOR_BLOCK)
    if gangs:
        grid = gangs
    else:
        grid = (total + block - 1) // block
        grid = min(grid, _capped_grid() if capped else _MAX_GRID)
    if SIMULATED:
        grid = min(grid, SIMULATOR_GRID)
    return max(1, grid), block


def _empty(shape, dtype):
    cupy = _cupy()
    if cupy is not None:
        return cupy.empty(shape, dtype)
    return cuda.device_array(shape, dtype)


def partials(count: int, dtype):
    """A device array of ``count`` partial results."""
    return _empty(count, dtype)


def scratch(threads: int, like):
    """One private copy of array ``like`` per thread: shape ``(threads, *like.shape)``."""
    return _empty((threads,) + tuple(like.shape), like.dtype)


def _to_host(array) -> np.ndarray:
    if isinstance(array, np.ndarray):
        return array
    get = getattr(array, "get", None)
    if get is not None and _cupy() is not None:  # a CuPy array: copied on the current stream
        return get()
    return array.copy_to_host()


_REDUCE = {
    "+": np.add.reduce, "*": np.multiply.reduce, "max": np.maximum.reduce,
    "min": np.minimum.reduce, "&": np.bitwise_and.reduce, "|": np.bitwise_or.reduce,
    "^": np.bitwise_xor.reduce, "and": np.logical_and.reduce, "or": np.logical_or.reduce,
}


def finish(partials_array, op: str):
    """The block partials of a reduction combined with ``op``: a scalar of their dtype."""
    host = _to_host(partials_array)
    if op in ("and", "or"):
        return np.bool_(_REDUCE[op](host))
    return host.dtype.type(_REDUCE[op](host, dtype=host.dtype))


def scalar(output):
    """The value a single-thread region stored in its one-element ``output``."""
    return _to_host(output)[0]
