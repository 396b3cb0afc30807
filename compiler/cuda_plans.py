"""Prepared launches: the cuda target's express lane past numba-cuda's dispatcher.

A launch through numba-cuda's dispatcher (``kernel[grid, block, stream](*args)``) types
every argument and asks each CuPy array for a DLPack view, twice, before it calls
``cuda.core.launch``: 76% of a present-data compute call on an H100 (issue 28, ~125 µs
against ~3 µs for the driver call itself; ``../shared/reference/gpu-anchors.md`` §1).
A :class:`PreparedLaunch` does that work once per *configuration* (kernel, grid, block,
stream) and *argument facts*, and then launches with one driver call (below, "The launch").

**How a plan is made** (:func:`launch_and_prepare`). The first two launches of a
configuration with given facts go through numba-cuda in full (facts seen once are only
remembered, apart from the plans: arguments that never repeat, such as fresh scratch
arrays, cost no plan and push none out). At the second, a pre-launch callback (numba-cuda's
public ``_LaunchConfiguration.pre_launch_callbacks``) names the compiled kernel that
launch used. The plan then asks that kernel's own marshaller (``_Kernel._prepare_args``,
what numba-cuda's launch calls) for the kernel-parameter words of this call: an array's
words (``meminfo, parent, size, itemsize, pointer, *shape, *strides``) are kept, a
scalar's are marshalled again by the same method whenever its value differs from the
last launch's (the same value of the same type: the same words). No word is spelled by
pyacc: the compiler's ABI stays the compiler's.

**A loaded kernel** (``cuda_binaries``): in a process where a kernel's binary is saved
for its arguments' kinds, the first launch of a configuration with given facts makes its
plan from the binary at once (its handle the binary's cubin loaded, its words spelled by
``cuda_binaries.spell``), and the dispatcher never compiles it. A kernel without a
binary names its compiled kernel at its first launch (the same callback), and the binary
is saved then.

**The launch** of a plan: where the driver's ``cuLaunchKernel`` is known
(:func:`driver_launch`: ``cuGetProcAddress`` through cuda-bindings, once) and the C
extension ``_launch`` is built, a plan keeps a ``LaunchRecord`` (:func:`record`,
``compiler/_launch.c``): the kernel's handle, grid, block, stream and its words packed
once as ``cuda.core``'s ``ParamHolder`` packs them; a launch packs only its scalars' words
and makes one driver call from C. Otherwise (and for a cooperative kernel) it calls
``cuda.core.launch``, which packs every word and builds the driver's configuration at
each launch. A launch the driver refuses raises ``cuda.core``'s ``CUDAError`` either way.

**Facts** (:func:`facts`): for a CuPy array, its pointer, shape, strides and dtype:
numba-cuda's type of it (dtype, ndim, layout; CuPy arrays are never read-only) and its
words are functions of these; a CuPy array of a record (void) dtype has none (numba-cuda
cannot type it: ``cuda_runtime`` launches it as numba-cuda's own device array). For a
scalar, its type: ``bool``, ``float``, ``int`` (well inside 64 bits), or a NumPy number
(bool, integer, float, complex) whose type settles its dtype. Any other argument (a NumPy array, a tuple, a record, a
``timedelta64``, an unknown device array) has no facts, and its launch takes the full
path. Equal facts therefore mean the same compiled kernel and the same array words;
two plans per configuration cover a swap of two arrays (Jacobi's ``u, unew``).

**No plan is made** (the full path stays, reported once through ``PYACC_INFO``) when
the compiler is not numba-cuda 0.30 (numba-cuda-mlir launches through its own C++
launcher), under the simulator, with ``PYACC_EXPRESS=0``, on a default stream (legacy or per
thread: every device's, and a plan keeps one device's function handle; pyacc's queues
each have a stream of their own device), when preparing fails, and for a kernel compiled
with ``debug`` (its launch reads an error word back), with dispatcher extensions, that
is launch-config sensitive, or a configuration with other pre-launch callbacks.

The tables change under one lock (``_lock``); a launch through a plan takes none (it
only reads them). Invariants: a plan launches the words numba-cuda's launch would pass for the same
arguments, on the same stream object (the configuration's ``cuda.core`` stream, which is
CuPy's current one: DLPack's stream hand-over would order that stream after itself),
with the same ``LaunchConfig`` fields; a kernel is never recompiled under a plan (pyacc
never recompiles, module docstring of ``cuda_runtime``).
"""
from __future__ import annotations

import itertools
import os
import threading
import weakref

import numpy as np

from . import cuda_binaries
from .feedback import info_enabled, log_info

try:
    from . import _launch  # optional: the C launch (compiler/_launch.c), absent when not built
except ImportError:
    _launch = None

__all__ = ["find", "launch_and_prepare", "launch_loaded", "LAUNCHED", "core_stream", "facts",
           "PreparedLaunch", "record", "driver_launch", "driver_function", "driver_error",
           "recorded", "counted", "RECORDING", "NUMBERS", "enabled", "PLANS_KEPT",
           "FACTS_KEPT", "SIGHTINGS_KEPT"]

#: configurations with plans kept; the oldest go first
PLANS_KEPT = 512
#: plans kept per configuration (argument facts); the oldest go first
FACTS_KEPT = 8
#: facts seen once, over all configurations; the oldest go first
SIGHTINGS_KEPT = 1024
#: ``int`` scalars in this range are typed ``int64`` by numba-cuda whatever their value
_INT_RANGE = range(-(2 ** 62), 2 ** 62)
#: NumPy scalars whose type settles numba-cuda's type of them, marshalled by value (not
#: ``timedelta64``/``datetime64``, typed by their unit; not records, which numba-cuda
#: copies to the device at each launch)
NUMBERS = frozenset(np.dtype(code).type for code in "?bBhHiIlLqQefdFD")
#: the numba-cuda releases whose launch (``_Kernel.launch``) a plan reproduces
_SUPPORTED = ("0.30.",)

#: :func:`launch_loaded`'s answer when it launched
LAUNCHED = "launched"

_plans: dict[tuple, dict[tuple, PreparedLaunch | bool]] = {}  # False: refused
_sightings: dict[tuple, None] = {}  # (configuration, facts) seen once
_lock = threading.Lock()  # over the changes to the tables and to configurations' callbacks
_launched = threading.local()  # .kernel: what the armed pre-launch callback saw
_refused = weakref.WeakSet()  # kernels (dispatchers) whose refusal was reported
_driver: dict[str, int | None] = {}  # the driver's functions' addresses (None: none), once asked
#: threads recording their launches now (:func:`recorded`); ``cuda_runtime.launch`` counts
#: its launches (:func:`counted`) only while it is not 0
RECORDING = [0]
_recording = threading.local()  # .launches: this thread's recording, .count: launches begun


def enabled(compiler) -> bool:
    """Whether launches by ``compiler`` (a ``cuda_compilers.CudaCompiler``) are prepared."""
    if os.environ.get("PYACC_EXPRESS", "1").strip() in ("0", ""):
        return False
    version = compiler.version() or ""
    return compiler.name == "numba-cuda" and version.startswith(_SUPPORTED)


def facts(args, array_class) -> tuple | None:
    """The facts of a launch's arguments (module docstring), or None: one has none."""
    found = []
    for value in args:
        kind = type(value)
        if kind is array_class:
            dtype = value.dtype
            if dtype.kind == "V":  # a record array (module docstring)
                return None
            found.append((value.data.ptr, value.shape, value.strides, dtype))
        elif kind is float or kind is bool or (kind is int and value in _INT_RANGE):
            found.append(kind)
        elif kind in NUMBERS:
            found.append(kind)  # a NumPy number: typed by its dtype
        else:
            return None
    return tuple(found)


def find(key, found):
    """The plan of configuration ``key`` for arguments of facts ``found``, or None."""
    plans = _plans.get(key)
    return None if plans is None or found is None else plans.get(found) or None


class PreparedLaunch:
    """One configuration's launch for one set of argument facts: the driver's function
    handle, one ``LaunchConfig``, the stream, and the parameter words of the arguments in
    one flat tuple (an array's kept; a scalar's made again at each launch by ``marshal``,
    the kernel's marshaller or a loaded kernel's spelling, into its span of the words).
    With a ``record`` (a ``LaunchRecord``, :func:`record`) it launches by one call of the
    driver's ``cuLaunchKernel`` from C; else through ``cuda.core.launch``."""

    __slots__ = ("_launch", "_stream", "_config", "_handle", "_words", "_scalars", "_marshal",
                 "_last", "_record")

    def __init__(self, launch, stream, config, handle, words, scalars, marshal, record=None):
        self._launch = launch  # ``cuda.core.launch``, as numba-cuda imports it
        self._stream, self._config, self._handle, self._marshal = stream, config, handle, marshal
        self._record = record
        self._words = tuple(itertools.chain(*words))  # ``words``: one tuple per argument
        spans, start = [], 0
        for argument in words:
            spans.append((start, start + len(argument)))
            start += len(argument)
        #: (slot, start, stop, position, kind) of each scalar's words (kind: what
        #: ``marshal`` takes, a numba type or a loaded kernel's parameter)
        self._scalars = tuple((slot,) + spans[position] + (position, kind)
                              for slot, (position, kind) in enumerate(scalars))
        #: each scalar's last value and its words (a loop bound, a coefficient: most
        #: launches repeat them, and their words are then the marshaller's of last time)
        self._last = [(None, None)] * len(self._scalars)

    def launch(self, args) -> None:
        """The launch, with these arguments' scalars (their facts are the plan's)."""
        record = self._record
        if not self._scalars:
            if record is None:
                self._launch(self._stream, self._config, self._handle, *self._words)
            else:
                _launch_record(record)
                if RECORDING[0]:
                    _recorded(record, ())
            return
        scalars = self._marshalled(args)
        if record is not None:
            _launch_record(record, *scalars)
            if RECORDING[0]:
                _recorded(record, tuple(scalars))
            return
        words = list(self._words)
        for start, marshalled in scalars:
            words[start:start + len(marshalled)] = marshalled
        self._launch(self._stream, self._config, self._handle, *words)

    def _marshalled(self, args) -> list:
        """``(start, words)`` of each scalar of ``args``: the words of last time while its
        value repeats."""
        spans, last = [], self._last
        for slot, start, _stop, position, kind in self._scalars:
            value = args[position]
            seen, marshalled = last[slot]  # (one tuple: another thread's store is whole)
            # (a zero is marshalled again: 0.0 == -0.0, and the sign is the kernel's)
            if seen is not value and not (type(seen) is type(value) and seen == value and value):
                marshalled = self._marshal(kind, value)
                last[slot] = (value, marshalled)
            spans.append((start, marshalled))
        return spans


def recorded(call, args) -> tuple:
    """``(call(*args), launches)``: ``launches`` the launches the call made, in order, as
    ``[(LaunchRecord, spans), ...]`` when every one was a plan's launch from C (the words
    of each launch's scalars in ``spans``), else None (another launch, none, or a call
    already recording on this thread). ``compiler/_relaunch.c.h`` keeps them."""
    if getattr(_recording, "launches", None) is not None:
        return call(*args), None
    launches = _recording.launches = []
    _recording.count = 0
    with _lock:
        RECORDING[0] += 1
    try:
        result = call(*args)
    finally:
        _recording.launches = None
        with _lock:
            RECORDING[0] -= 1
    return result, (launches if launches and len(launches) == _recording.count else None)


def counted() -> None:
    """A launch began on this thread (``cuda_runtime.launch``, while :data:`RECORDING`)."""
    if getattr(_recording, "launches", None) is not None:
        _recording.count += 1


def _recorded(record, spans) -> None:
    launches = getattr(_recording, "launches", None)
    if launches is not None:
        launches.append((record, spans))


def _launch_record(record, *spans) -> None:
    """``record.launch(*spans)``; a launch the driver refuses raises cuda.core's
    ``CUDAError`` naming the driver's error, as ``cuda.core.launch`` does."""
    try:
        record.launch(*spans)
    except _launch.LaunchFailed as failed:
        raise driver_error(failed.code) from None


def driver_error(code: int) -> Exception:
    """cuda.core's ``CUDAError`` for the driver's ``CUresult`` ``code`` (RuntimeError
    where cuda.core cannot say)."""
    try:
        from cuda.bindings import driver  # here: a launch failed on a GPU
        from cuda.core._utils.cuda_utils import CUDAError  # what cuda.core.launch raises

        result = driver.CUresult(code)
    except Exception:  # noqa: BLE001 - an unknown code, or no cuda-bindings: say the number
        return RuntimeError(f"cuLaunchKernel failed: CUresult {code}")
    try:
        text = driver.cuGetErrorString(result)[1].decode()
    except Exception:  # noqa: BLE001 - (the driver's library is needed for its text)
        return CUDAError(result.name)
    return CUDAError(f"{result.name}: {text}")


def driver_launch() -> int | None:
    """The address of the driver's ``cuLaunchKernel`` (:func:`driver_function`)."""
    return driver_function("cuLaunchKernel")


def driver_function(name: str) -> int | None:
    """The address of the driver's function ``name`` (``cuGetProcAddress``, CUDA 12.0's
    ABI, the legacy default stream's variant: plans never launch on a default stream), or
    None: no C launch here (``compiler/_launch.c`` not built, no driver). Asked once."""
    try:
        return _driver[name]
    except KeyError:
        return _driver.setdefault(name, _ask_driver(name) if _launch is not None else None)


def _ask_driver(name: str) -> int | None:
    try:
        from cuda.bindings import driver  # here: only once a plan is made, on a GPU
    except ImportError:
        return None
    flags = driver.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_LEGACY_STREAM
    try:
        error, address, found = driver.cuGetProcAddress(name.encode(), 12000, flags)
    except Exception:  # noqa: BLE001 - no libcuda: cuda.core launches (and reports)
        return None
    if error != driver.CUresult.CUDA_SUCCESS or \
            found != driver.CUdriverProcAddressQueryResult.CU_GET_PROC_ADDRESS_SUCCESS:
        return None
    return int(address) or None


def record(handle, grid, block, shared: int, stream, words, cooperative: bool = False,
           owner=None):
    """The ``LaunchRecord`` of a launch of the kernel ``handle`` (cuda.core's ``Kernel``)
    with these ``words`` (one tuple per argument) on ``stream`` (cuda.core's), or None:
    no C launch here (:func:`driver_launch`), or a cooperative kernel (``cuLaunchKernel``
    does not launch those), or a word a record does not pack (``cuda.core.launch`` then
    does, as it did before records). The record keeps ``owner`` (default: ``handle``)
    alive: what keeps the kernel loaded."""
    driver = driver_launch()
    if driver is None or cooperative:
        return None
    try:
        return _launch.LaunchRecord(driver, int(handle.handle), _dimensions(grid),
                                    _dimensions(block), shared, int(stream.handle),
                                    tuple(itertools.chain(*words)),
                                    handle if owner is None else owner)
    except (TypeError, ValueError, OverflowError):  # (a word of more than 8 bytes, ...)
        return None


def _launch_config(dispatcher, cooperative, configured):
    """The ``LaunchConfig`` numba-cuda's ``_Kernel.launch`` builds (its two spellings)."""
    if dispatcher.CUDA_CORE_GE_1_0:
        return dispatcher.LaunchConfig(grid=configured.griddim, block=configured.blockdim,
                                       shmem_size=configured.sharedmem,
                                       is_cooperative=cooperative)
    return dispatcher.LaunchConfig(grid=configured.griddim, block=configured.blockdim,
                                   shmem_size=configured.sharedmem,
                                   cooperative_launch=cooperative)


def marshal(kernel, kind, value, stream) -> tuple:
    """The parameter words of one argument, by the kernel's own marshaller."""
    words, written_back = [], []
    kernel._prepare_args(kind, value, stream, written_back, words)
    if written_back:
        raise _Unplannable("an argument is copied back after the launch")
    return tuple(words)


class _Unplannable(Exception):
    """Why a launch cannot be prepared (reported through ``PYACC_INFO``)."""


def _seen(kernel, configured) -> None:
    """The pre-launch callback: remember the kernel when this thread armed it."""
    if getattr(_launched, "armed", False):
        _launched.kernel = kernel


def launch_loaded(key, args, found, array_class):
    """Launch ``args`` of facts ``found`` on configuration ``key`` through the plan of the
    kernel's saved binary (``cuda_binaries``), made now; :data:`LAUNCHED` when it did,
    else what the lookup answered for ``launch_and_prepare`` (``cuda_binaries.DUE``: save
    the binary after this launch; None: nothing to save)."""
    kinds = cuda_binaries.kinds(found)
    binary = cuda_binaries.lookup(key[0], kinds)
    if type(binary) is not cuda_binaries.Binary:
        return binary
    try:
        _loaded(key, binary, args, found, array_class).launch(args)
    except Exception as why:  # noqa: BLE001 - not launched: the dispatcher compiles it
        cuda_binaries.refuse(key[0], kinds, f"its launch failed ({type(why).__name__}: {why})")
        with _lock:
            _plans.get(key, {}).pop(found, None)
        return None
    return LAUNCHED


def launch_and_prepare(key, configured, args, found, array_class, binary=None) -> None:
    """Launch ``args`` of facts ``found`` on configuration ``key`` through numba-cuda in
    full, preparing the plan when these facts are seen the second time (module docstring),
    and saving the kernel's binary after this launch when ``binary`` (what
    :func:`launch_loaded` answered) is ``cuda_binaries.DUE``."""
    due = binary is cuda_binaries.DUE
    second = found is not None and _second_sight(key, found)
    if not second and not due:
        configured(*args)
        return
    kernel = _launch_naming_kernel(configured, args)
    if due:
        cuda_binaries.save(key[0], kernel, cuda_binaries.kinds(found), args,
                           _words_of(kernel, configured, args))
    if not second:
        return
    try:
        plan = _prepare(kernel, configured, args, array_class)
    except Exception as why:  # noqa: BLE001 - the kernel ran: nothing here may fail the call
        plan = False  # these facts launch in full from now on
        _report(configured, why if isinstance(why, _Unplannable) else
                f"preparing its launch failed ({type(why).__name__}: {why})")
    _store(key, found, plan)


def _launch_naming_kernel(configured, args):
    """``configured(*args)``, and the compiled kernel the launch used (None: not named)."""
    with _lock:  # (another thread may be adding it too)
        if _seen not in configured.pre_launch_callbacks:
            configured.pre_launch_callbacks.append(_seen)
    _launched.armed, _launched.kernel = True, None
    try:
        configured(*args)
    finally:
        _launched.armed = False
    kernel, _launched.kernel = _launched.kernel, None
    return kernel


def _words_of(kernel, configured, args) -> tuple:
    """The words numba-cuda's launch of ``kernel`` passes for ``args``, or () when its
    marshaller fails or no kernel was named (no binary is then saved: the words differ)."""
    if kernel is None:
        return ()
    try:
        return tuple(itertools.chain(*(marshal(kernel, kind, value, configured.stream)
                                       for kind, value in zip(kernel.argument_types, args))))
    except Exception:  # noqa: BLE001 - the kernel ran: nothing here may fail the call
        return ()


def _store(key, found, plan) -> None:
    """Keep ``plan`` (False: refused) for configuration ``key`` and facts ``found``."""
    with _lock:
        plans = _plans.get(key)
        if plans is None:
            plans = _keep(_plans, key, {}, PLANS_KEPT)
        _keep(plans, found, plan, FACTS_KEPT)


def _loaded(key, binary, args, found, array_class) -> PreparedLaunch:
    """The plan of a loaded kernel (``cuda_binaries``) for these arguments, kept for their
    facts from their second sight (fresh scratch arrays push no plan out): cuda.core's launch of the binary's kernel on the configuration's stream, with
    the ``LaunchConfig`` numba-cuda's launch makes for pyacc's configurations (no dynamic
    shared memory, not cooperative: a kernel that is is never saved)."""
    _, grid, block, stream = key
    launch, config = _core()
    parameters = binary.parameters
    words = tuple(cuda_binaries.word(kind, value) for kind, value in zip(parameters, args))
    scalars = tuple((position, parameters[position]) for position, value in enumerate(args)
                    if type(value) is not array_class)
    core = stream.core()
    plan = PreparedLaunch(launch, core, config(grid=_dimensions(grid), block=_dimensions(block),
                                               shmem_size=0),
                          binary.handle, words, scalars, cuda_binaries.word,
                          record(binary.handle, grid, block, 0, core, words, owner=binary))
    if _second_sight(key, found):  # kept as numba-cuda's plans are: facts seen twice
        _store(key, found, plan)
    return plan


def _dimensions(value) -> tuple:
    """A grid's or block's three dimensions, as numba-cuda normalises them."""
    value = (value,) if isinstance(value, int) else tuple(value)
    return value + (1,) * (3 - len(value))


def _core():
    """cuda.core's ``launch`` and ``LaunchConfig`` (what numba-cuda's launch calls)."""
    from cuda.core import LaunchConfig, launch  # here: on a GPU, once a binary is loaded

    return launch, LaunchConfig


def core_stream(handle: int):
    """cuda.core's stream of the driver's stream ``handle`` (numba-cuda's, for a launch)."""
    from cuda.core import Stream  # here: on a GPU, once a binary is loaded

    return Stream.from_handle(handle)


def _second_sight(key, found) -> bool:
    """Whether configuration ``key`` met these facts before (then a plan is made now);
    else they are remembered (refused facts are never seen a second time)."""
    with _lock:
        plans = _plans.get(key)
        if plans is not None and found in plans:
            return False
        sighting = (key, found)
        if sighting in _sightings:
            del _sightings[sighting]
            return True
        _keep(_sightings, sighting, None, SIGHTINGS_KEPT)
        return False


def _keep(table: dict, key, value, most: int):
    """``table[key] = value`` as its newest entry, the oldest dropped past ``most``
    (``_lock`` held)."""
    table.pop(key, None)
    if len(table) >= most:
        del table[next(iter(table))]
    table[key] = value
    return value


def _prepare(kernel, configured, args, array_class) -> PreparedLaunch:
    from numba.cuda import dispatcher  # here: numba-cuda only, and only on a GPU

    if kernel is None:
        raise _Unplannable("the launch did not name its compiled kernel")
    _refuse_unusual(kernel, configured)
    kinds = kernel.argument_types
    if len(kinds) != len(args):
        raise _Unplannable(f"{len(args)} arguments for {len(kinds)} parameters")
    stream = configured.stream
    words = tuple(marshal(kernel, kind, value, stream) for kind, value in zip(kinds, args))
    scalars = tuple((position, kinds[position]) for position, value in enumerate(args)
                    if type(value) is not array_class)
    handle = kernel._codelibrary.get_cufunc().kernel
    return PreparedLaunch(dispatcher.launch, stream,
                          _launch_config(dispatcher, kernel.cooperative, configured),
                          handle, words, scalars,
                          lambda kind, value: marshal(kernel, kind, value, stream),
                          record(handle, configured.griddim, configured.blockdim,
                                 configured.sharedmem, stream, words, kernel.cooperative))


def _refuse_unusual(kernel, configured) -> None:
    """Raise ``_Unplannable`` for what a plan does not reproduce of numba-cuda's launch."""
    if getattr(kernel, "debug", False):
        raise _Unplannable("the kernel was compiled with debug (its launch reads an error word)")
    if getattr(kernel, "extensions", ()):
        raise _Unplannable("numba-cuda dispatcher extensions marshal its arguments")
    if getattr(kernel, "launch_config_sensitive", False) or \
            getattr(configured.dispatcher, "_launch_config_sensitive", False):
        raise _Unplannable("the kernel is launch-config sensitive")
    if configured.pre_launch_callbacks != [_seen]:
        raise _Unplannable("the configuration has pre-launch callbacks")
    if configured.sharedmem:
        raise _Unplannable("the launch asks for dynamic shared memory")


def _report(configured, why) -> None:
    """Say once per kernel, through ``PYACC_INFO``, why its launches are not prepared."""
    dispatcher = configured.dispatcher
    if not info_enabled() or dispatcher in _refused:
        return
    _refused.add(dispatcher)
    name = getattr(getattr(dispatcher, "py_func", None), "__name__", "a kernel")
    log_info(f"GPU kernel {name} launches through numba-cuda's dispatcher: {why}")
