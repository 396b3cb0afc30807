"""Host-side helpers that generated ``cuda`` drivers call (the cuda twin of ``runtime``).

A kernel compiled for the ``cuda`` target is a plain-Python *driver* that computes the
iteration spaces and launches GPU kernels compiled by the chosen compiler
(``cuda_compilers``: numba-cuda-mlir or numba-cuda; see ``cuda_target``). Owns what those
drivers need at run time:

* :func:`launch` — a kernel launch on :func:`stream`, configured once per kernel, grid,
  block and stream (:func:`_configured`), after :func:`refuse_host_arrays`; with
  numba-cuda, later launches with the same argument facts go through a prepared launch
  (``cuda_plans``) instead of the dispatcher, and a kernel with a saved binary
  (``cuda_binaries``) through one from its first launch, never configured or compiled;
* :func:`stream` — the stream to launch on: CuPy's *current* stream (the ``cuda`` device
  makes a queue's stream current while it runs a kernel of that queue, OpenACC 3.3
  §2.16.1), named once per device and handle by a :class:`QueueStream` (its compiler's
  ``cuda.external_stream`` and cuda.core's stream made when first needed; ``_external``:
  the driver hands a destroyed stream's handle out again, after
  ``acc.shutdown`` to another device's stream too, and a configuration's plan keeps one
  device's function handle); the default stream when CuPy is not in use (Numba's CUDA
  simulator);
* :func:`launch_shape` — grid and block of a nest: ``vector_length`` threads per block,
  ``num_gangs`` blocks when given, else one thread per iteration; nests with
  reductions or private arrays use a grid capped to a few blocks per multiprocessor
  (grid-stride loops cover the rest), so their per-block partials stay small;
* :func:`tile`, :func:`launch_tiles` — the 2-D block and grid of a *tiled* nest (two or
  more levels, ``cuda_target``): x along the innermost level, y along the other levels'
  iterations, 16 × 16 threads unless ``vector_length`` says how many (a square-ish block
  re-reads its neighbours' rows and columns from cache, as hand-written 2-D kernels do);
* :func:`partials`, :func:`scratch` — device arrays for block partials and per-thread
  private copies of a launch (its grid and block), from CuPy's memory pool when CuPy is
  in use;
* :func:`on_device` — an array the driver itself made on the host (``t = np.zeros(3)``
  in the region's body), as a device array, once: the driver rebinds the name to it;
* :func:`finish` — the second pass of a reduction: the block partials combined with
  the operator on the host (OpenACC 3.3 §2.5.15);
* :func:`scalar` — the value a single-thread region left in its one-element output.

Invariants: every device operation here is ordered on :func:`stream`; a helper that
returns a host value has waited for that stream. No host (NumPy) array is ever a GPU
kernel's argument: the real stacks refuse one on any stream but the default one
("NumPy only supports stream=None") and copy it in and out implicitly on the default
one, so :func:`launch` raises instead, on the GPU and in the simulator alike. A device
array of a record (void) dtype reaches a kernel as the compiler's own device array over
the same memory (:func:`_own_record_array`): numba-cuda types a CuPy array by DLPack,
which CuPy refuses for void dtypes, then by ``__cuda_array_interface__``'s ``typestr``
alone (``|V16``: no type, ``NumbaNotImplementedError``); the simulated launch refuses a
fake array of a record dtype the same way. No warning
names a launch configuration pyacc chose (API.md §12): the compilers' low-occupancy
warning is silenced where pyacc configures a launch, and a ``num_gangs`` the program
gave that is that small is reported once through ``PYACC_INFO`` instead. Under the
simulator (``NUMBA_ENABLE_CUDASIM=1``) blocks are capped at :data:`SIMULATOR_BLOCK`
threads and grids at :data:`SIMULATOR_GRID` blocks: each simulated thread costs ~100 µs.
"""
from __future__ import annotations

import math
import sys
import threading
import warnings

import numpy as np
from numba import config as _numba_config

from . import cuda_compilers, cuda_plans
from .arguments import is_device_array
from .feedback import info_enabled, log_info

__all__ = ["launch", "stream", "QueueStream", "trip_count", "launch_shape", "tile", "launch_tiles",
           "partials", "scratch", "on_device", "finish", "scalar", "refuse_host_arrays",
           "SIMULATED", "DEFAULT_BLOCK"]

#: True when kernels run in Numba's CUDA simulator.
SIMULATED = bool(_numba_config.ENABLE_CUDASIM)
#: Threads per block when a construct has no ``vector_length`` clause.
DEFAULT_BLOCK = 128
#: Blocks per multiprocessor for grids that are capped (reductions, private arrays).
BLOCKS_PER_SM = 8
SIMULATOR_BLOCK = 16
SIMULATOR_GRID = 3
#: a tiled nest's block without ``vector_length`` (x, y): as hand-written 2-D kernels
DEFAULT_TILE = (16, 16)
#: x threads of a tile when ``vector_length`` allows: 16 8-byte elements, a 128-byte line
TILE_WIDTH = 16
#: the simulator's tiles and tiled grids, per dimension
SIMULATOR_TILE = 4
SIMULATOR_TILES = 2
_MAX_GRID = 2**31 - 1
_MAX_GRID_Y = 65535  # CUDA's limit on a grid's y dimension
#: both compilers warn of "low occupancy" below this many blocks
_FEW_BLOCKS = 128
#: configured launches kept (kernel, grid, block, stream); the oldest go first
_CONFIGURED_KEPT = 512

_external: dict[tuple[int, int], QueueStream] = {}  # (device, handle) → its one name
_multiprocessors: list[int] = []
_configured: dict[tuple, object] = {}
_prepared: list = []  # [CuPy's array class, or None: no prepared launches], once decided
#: the default streams' handles: the legacy one (0 and 1) and the per-thread one (2), each
#: meaning the current device's
_EVERY_DEVICES = (1, 2)
_shared: set[int] = set()  # ids of the wrappers of those streams
_lock = threading.Lock()


def _cuda():
    """The chosen compiler's ``cuda`` module (``cuda_compilers.load``)."""
    return cuda_compilers.load()


def _cupy():
    """CuPy when the program uses it (the real ``cuda`` device imports it), else None."""
    if SIMULATED:
        return None
    return sys.modules.get("cupy")


def stream():
    """The :class:`QueueStream` of the queue being run (CuPy's current stream), or 0 (the
    default stream: no CuPy in use, Numba's simulator)."""
    cupy = _cupy()
    if cupy is None:
        return 0
    current = cupy.cuda.get_current_stream()
    pointer = current.ptr
    if pointer == 0:
        return 0
    place = (current.device_id, pointer)  # a handle names one stream of one device at a time
    named = _external.get(place)
    if named is None:
        named = _external.setdefault(place, QueueStream(pointer))
        if pointer in _EVERY_DEVICES:
            _shared.add(id(named))  # (kept for ever: their ids stay theirs)
    return named


class QueueStream:
    """One stream of one device, as launches name it (``stream``): the compiler's wrapper
    of it and cuda.core's, each made when first needed (a process whose kernels all load
    from saved binaries never imports the compiler: ``cuda_kernels``)."""

    __slots__ = ("handle", "_compiler", "_core")

    def __init__(self, handle: int):
        self.handle, self._compiler, self._core = handle, None, None

    def compiler(self):
        """The compiler's ``cuda.external_stream`` of it (a launch configuration's)."""
        if self._compiler is None:
            self._compiler = _cuda().external_stream(self.handle)
        return self._compiler

    def core(self):
        """cuda.core's stream of it (a prepared launch of a loaded kernel's)."""
        if self._core is None:
            self._core = cuda_plans.core_stream(self.handle)
        return self._core


def refuse_host_arrays(kernel, args) -> None:
    """Raise ``TypeError`` naming the parameter when an argument is a host (NumPy) array:
    a GPU kernel takes device arrays only (module docstring)."""
    for position, value in enumerate(args):
        if isinstance(value, np.ndarray):
            raise TypeError(
                f"GPU kernel {_kernel_name(kernel)} was given a host NumPy array for "
                f"parameter {_parameter_name(kernel, position)!r} (shape {value.shape}, "
                f"dtype {value.dtype}); GPU kernels take device arrays only. This is a "
                "pyacc bug: please report it with the compute region's code")


def _kernel_name(kernel) -> str:
    return getattr(getattr(kernel, "py_func", None), "__name__", type(kernel).__name__)


def _parameter_name(kernel, position: int) -> str:
    code = getattr(getattr(kernel, "py_func", None), "__code__", None)
    if code is None or position >= code.co_argcount:
        return f"#{position}"
    return code.co_varnames[position]


def launch(kernel, grid, block, args: tuple) -> None:
    """``kernel[grid, block, stream()](*args)``, host arrays refused; through its
    prepared launch (``cuda_plans``) when one matches the arguments."""
    if cuda_plans.RECORDING[0]:  # (a synchronous call's launches, ``cuda_plans.recorded``)
        cuda_plans.counted()
    if SIMULATED:
        refuse_host_arrays(kernel, args)
        _simulated_launch(kernel, grid, block, _own_records(args))
        return
    where = stream()  # 0, or the one name of its device and pointer (``_external``)
    key = (kernel, grid, block, where)
    # a queue's stream belongs to one device; the default streams are every device's, and
    # a plan keeps one device's function handle: no plans there
    shared = type(where) is int or id(where) in _shared  # (0: the default stream)
    array_class = None if shared else _array_class()
    found = None if array_class is None else cuda_plans.facts(args, array_class)
    prepared = cuda_plans.find(key, found)
    if prepared is not None:  # its arguments are CuPy arrays and numbers only
        prepared.launch(args)
        return
    refuse_host_arrays(kernel, args)
    binary = None if found is None else cuda_plans.launch_loaded(key, args, found, array_class)
    if binary is cuda_plans.LAUNCHED:
        return  # through the plan of its saved binary: the compiler never sees it
    args = _own_records(args)  # (records have no facts: never a plan's arguments)
    configured = _configured.get(key)
    if configured is None:
        configured = _configure(key, kernel, grid, block, where)
    if array_class is None:
        configured(*args)
    else:
        cuda_plans.launch_and_prepare(key, configured, args, found, array_class, binary)


def _own_records(args: tuple) -> tuple:
    """``args`` with every other library's device array of a record dtype as the
    compiler's own (:func:`_own_record_array`)."""
    if not any(map(_foreign_record, args)):
        return args
    return tuple(_own_record_array(a) if _foreign_record(a) else a for a in args)


def _foreign_record(value) -> bool:
    """Whether ``value`` is a device array of a void dtype that the compiler does not type
    by itself (not its own device array, which has ``_numba_type_``; not a host record)."""
    dtype = getattr(value, "dtype", None)
    return (isinstance(dtype, np.dtype) and dtype.kind == "V"
            and not hasattr(type(value), "_numba_type_")
            and hasattr(value, "__cuda_array_interface__"))


def _own_record_array(array):
    """The compiler's own device array over ``array``'s memory, with its record dtype
    (module docstring), keeping ``array`` alive; under the simulator, the simulator's
    over the fake's memory."""
    if SIMULATED:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray  # simulator runs only (NUMBA_ENABLE_CUDASIM)

        return FakeCUDAArray(array.simulator_view())
    interface = {**array.__cuda_array_interface__, "stream": None}  # no stream to wrap or wait for
    own = _cuda().from_cuda_array_interface(interface, owner=array, sync=False)
    return own.view(array.dtype)  # (numba-cuda's dtype is the typestr's: '|V16')


def _array_class():
    """CuPy's array class when launches are prepared (``cuda_plans.enabled``), else None;
    decided once CuPy is in use."""
    if not _prepared:
        cupy = _cupy()
        if cupy is None:
            return None
        _prepared.append(cupy.ndarray if cuda_plans.enabled(cuda_compilers.chosen()) else None)
    return _prepared[0]


def _configure(key, kernel, grid, block, where):
    """``kernel[grid, block, where]``, kept; a grid pyacc chose never warns (module
    docstring). Both compilers warn while configuring, with classes of their own (not
    Numba's ``NumbaPerformanceWarning``), so the filter matches the message.

    ``warnings.catch_warnings`` is process-wide: ``_lock`` serialises pyacc's own
    configurations only, so another thread's warning of that text in this instant is
    dropped too. A kept configuration stays valid as long as its kernel is not
    recompiled, which pyacc never does (numba-cuda-mlir keeps its own configure cache,
    which a recompile invalidates)."""
    with _lock, warnings.catch_warnings():
        if _size(grid) < _FEW_BLOCKS:
            warnings.filterwarnings("ignore", message=cuda_compilers.LOW_OCCUPANCY.pattern)
        configured = kernel[grid, block, where if type(where) is int else where.compiler()]
        if len(_configured) >= _CONFIGURED_KEPT:
            del _configured[next(iter(_configured))]
        _configured[key] = configured
    return configured


#: The simulator swaps ``cuda`` in a kernel's globals while it runs: one launch at a time.
_SIMULATOR_LOCK = threading.Lock()


def _simulated_launch(kernel, grid, block, args):
    """A launch in Numba's CUDA simulator; launches from several queues take turns.
    Device arrays of the fake cuda device (``mapping.devices.cuda_fake``) are handed over as the
    simulator's own device arrays over the same memory (it would otherwise copy them in
    and out, and it cannot copy strided views); one of a record dtype is refused, as
    numba-cuda refuses a CuPy array of one (module docstring)."""
    args = tuple(_simulated_argument(a) for a in args)
    with _SIMULATOR_LOCK:
        kernel[grid, block, 0](*args)


def _simulated_argument(value):
    """``value`` as the simulator takes it (``_simulated_launch``)."""
    view = getattr(value, "simulator_view", None)
    if view is None:
        return value
    if value.dtype.kind == "V":  # what numba-cuda raises for a CuPy array of a record dtype
        from numba.cuda.core.errors import NumbaNotImplementedError  # simulator runs only (NUMBA_ENABLE_CUDASIM)

        raise NumbaNotImplementedError(value.dtype.str)
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray  # simulator runs only (NUMBA_ENABLE_CUDASIM)

    return FakeCUDAArray(view())


def _capped_grid() -> int:
    if SIMULATED:
        return SIMULATOR_GRID
    if not _multiprocessors:  # CuPy's count where it is in use: no compiler imported for it
        cupy = _cupy()
        _multiprocessors.append(
            cupy.cuda.Device().attributes["MultiProcessorCount"] if cupy is not None
            else _cuda().get_current_device().MULTIPROCESSOR_COUNT)
    return BLOCKS_PER_SM * _multiprocessors[0]


def trip_count(start, stop, step) -> int:
    """The iterations of ``range(start, stop, step)``, Python's own count (a zero step
    raises ``ValueError``, as ``runtime.trip_count`` does): a driver runs on the host, and
    calling Numba's helper from there would load Numba's CPU target in a process that runs
    only GPU kernels (~0.15 s at the first call)."""
    return len(range(start, stop, step))


def launch_shape(total: int, block: int, gangs: int | None, capped: bool):
    """``(grid, block)`` for a nest of ``total`` iterations (``total`` > 0)."""
    if SIMULATED:
        block = min(block, SIMULATOR_BLOCK)
    if gangs:
        grid = gangs
        if gangs < _FEW_BLOCKS:
            _report_few_gangs(gangs)
    else:
        grid = (total + block - 1) // block
        grid = min(grid, _capped_grid() if capped else _MAX_GRID)
    if SIMULATED:
        grid = min(grid, SIMULATOR_GRID)
    return max(1, grid), block


def tile(threads: int | None) -> tuple[int, int]:
    """The ``(x, y)`` block of a tiled nest: ``DEFAULT_TILE``, or ``threads`` in all (the
    ``vector_length``, OpenACC 3.3 §2.5.12) as rows of ``TILE_WIDTH`` when it divides
    them into two or more, else one row of ``threads``."""
    if not threads:
        return DEFAULT_TILE
    if threads % TILE_WIDTH == 0 and threads >= 2 * TILE_WIDTH:
        return TILE_WIDTH, threads // TILE_WIDTH
    return threads, 1


def launch_tiles(columns: int, rows: int, block: tuple[int, int], capped: bool = False):
    """``(grid, block)`` of a tiled nest of ``rows`` × ``columns`` iterations (both > 0):
    one thread per iteration; past CUDA's grid limits, further launches (``cuda_target``:
    an uncapped tile's threads never stride); ``capped`` (a nest with reductions or
    private arrays, whose threads stride both ways): at most the capped grid's blocks in
    all, as for 1-D grids."""
    x, y = _fitted(columns, rows, *block)
    if SIMULATED:
        x, y = min(x, SIMULATOR_TILE), min(y, SIMULATOR_TILE)
    most_x, most_y = (SIMULATOR_TILES, SIMULATOR_TILES) if SIMULATED else (_MAX_GRID, _MAX_GRID_Y)
    blocks_x, blocks_y = (columns + x - 1) // x, (rows + y - 1) // y
    if not capped:  # the launches even (the last is no full grid of idle blocks)
        return (_even(blocks_x, most_x), _even(blocks_y, most_y)), (x, y)
    grid_x, grid_y = min(blocks_x, most_x), min(blocks_y, most_y)
    if not SIMULATED:
        most = _capped_grid()
        grid_x = min(grid_x, most)
        grid_y = min(grid_y, max(1, most // grid_x))
    return (grid_x, grid_y), (x, y)


def _even(blocks: int, most: int) -> int:
    """The blocks of each of the fewest launches of at most ``most`` blocks that cover
    ``blocks``, as equal as they can be."""
    launches = (blocks + most - 1) // most
    return (blocks + launches - 1) // launches


def _fitted(columns: int, rows: int, x: int, y: int) -> tuple[int, int]:
    """The tile ``(x, y)`` narrowed to the power of two that covers fewer ``columns`` (or
    shortened to cover fewer ``rows``), the threads it frees given to the other direction:
    a nest of 3 columns gets 4-wide tiles, not 16-wide ones with 13 threads in 16 idle.
    Never more threads than ``x * y`` (a reduction's shared array has that many)."""
    threads = x * y
    if columns < x:
        x = 1 << max(0, columns - 1).bit_length()
        y = threads // x
    if rows < y:
        y = 1 << max(0, rows - 1).bit_length()
        x = threads // y
    return x, y


def _size(dimensions) -> int:
    """The blocks of a grid, or the threads of a block (an int, or a tuple of dimensions)."""
    return math.prod(dimensions) if isinstance(dimensions, tuple) else dimensions


_reported_gangs: set[int] = set()


def _report_few_gangs(gangs: int) -> None:
    """A ``num_gangs`` under 128 blocks, once per value, through ``PYACC_INFO``: the
    program chose it, so it is the program's to know, never a warning."""
    if gangs in _reported_gangs or not info_enabled():
        return
    _reported_gangs.add(gangs)
    log_info(f"num_gangs({gangs}): a grid of {gangs} blocks may leave the GPU's "
             "multiprocessors idle (they take 2 or more blocks each)")


def _empty(shape, dtype):
    cupy = _cupy()
    if cupy is not None:
        return cupy.empty(shape, dtype)
    return _cuda().device_array(shape, dtype)


def on_device(value, copies: dict):
    """``value`` as a device array when it is a host NumPy array the driver made (module
    docstring): a copy on the current stream, one per host array in ``copies`` (the
    driver's, for one call: aliases share it); anything else as it is."""
    if not isinstance(value, np.ndarray):
        return value
    kept = copies.get(id(value))
    if kept is not None and kept[0] is value:
        return kept[1]
    cupy = _cupy()
    if cupy is not None:
        device = cupy.asarray(value)  # on CuPy's current stream: the queue's
    else:
        device = _cuda().to_device(value)
    copies[id(value)] = (value, device)  # the host array kept: its id stays its own
    return device


def private_copy(value):
    """The driver's private copy of device array ``value`` outside a nest (``privates``:
    ``private``, uninitialised); any other value as it is."""
    if not is_device_array(value):
        return value  # scalars; host arrays reach no kernel (``on_device``)
    return _empty(value.shape, value.dtype)


def firstprivate_copy(value):
    """As ``private_copy``, with ``value``'s elements (``firstprivate``): CuPy copies on the
    current stream, any layout; the compiler's own device arrays (the simulator's) through
    the host, as a contiguous copy."""
    if not is_device_array(value):
        return value
    cupy = _cupy()
    if cupy is not None:
        return cupy.array(value, copy=True)
    return _cuda().to_device(np.ascontiguousarray(_to_host(value)))


def partials(grid, dtype):
    """A device array of one partial result per block of ``grid`` (an int, or a tuple of
    dimensions)."""
    return _empty(_size(grid), dtype)


def scratch(grid, block, like):
    """One private copy of array ``like`` per thread of a launch of ``grid`` × ``block``:
    shape ``(threads, *like.shape)``."""
    return _empty((_size(grid) * _size(block),) + tuple(like.shape), like.dtype)


def _to_host(array) -> np.ndarray:
    if isinstance(array, np.ndarray):
        return array
    copy_to_host = getattr(array, "copy_to_host", None)
    if copy_to_host is not None:  # the compiler's own device array (the simulator's)
        return copy_to_host()
    return array.get()  # a CuPy array (or the fake's): copied on the current stream


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
