"""The OpenACC runtime routines (API.md §1, §3, §5; OpenACC 3.3 §3.2), Python spelling.

Owns: thin public functions that validate arguments, pick the calling thread's current
device and queue, and call one runtime verb. No mapping policy lives here.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from pyacc.mapping import _probe
from pyacc.mapping import (
    BUS, STATS, EventKind, AccError, Counter, DeviceTypeUnavailableError, InvalidArgumentError,
    InvalidAsyncError, MapKind, MapRequest, UpdateDirection, check_array,
)

from pyacc.compiler import cuda_binaries

from . import _devices
from ._clauses import async_value, is_noval, queue_of, wait_values
from ._devices import ICVS, canonical_type, current_runtime
from ._errors import directive_end, report, reported
from ._express import ANSWERS, RETURNS_DEVICE_ARRAY, RETURNS_NONE, SETTLES, lane_routine

__all__ = [
    "copyin", "create", "copyout", "delete", "update_device", "update_self",
    "is_present", "deviceptr", "hostptr", "malloc", "free", "map_data", "unmap_data",
    "memcpy_to_device", "memcpy_from_device", "memcpy_device", "refcounts",
    "present_table", "dump_present_table", "stats", "reset_stats",
    "get_num_devices", "set_device_type", "get_device_type", "set_device_num",
    "get_device_num", "init", "shutdown", "init_device", "shutdown_device", "get_property",
    "get_property_string", "wait", "wait_all", "wait_async", "wait_any", "async_test",
    "async_test_all",
    "get_default_async", "set_default_async", "get_cuda_stream",
    "attach", "detach", "memcpy_d2d",
]


_DYNAMIC = Counter.DYNAMIC  # Enum attribute access is slow on the hot path
_COPYIN = MapKind.COPYIN
_CREATE = MapKind.CREATE
_DELETE = MapKind.DELETE
_NDARRAY = np.ndarray  # one global lookup on the hot paths instead of two
_plain_block = _probe.plain_block  # a numpy.ndarray of one C- or F-ordered block (C, 0.03 µs)
_ACTIVE = BUS.active
_SILENT = BUS.silent
_DIRECTIVE_END = int(EventKind.DIRECTIVE_END)


# == data routines (OpenACC 3.3 §3.2.18–3.2.28) ==========================================
def _enter_one(kind: MapKind, array, async_):
    runtime = current_runtime()
    queue = queue_of(runtime, async_)
    check_array(array)
    return runtime.enter_one(kind, array, _DYNAMIC, queue)


def _entered(kind: MapKind, a, async_, routine: str):
    """``copyin``/``create`` past the lane: the Python verb, its errors reported and its
    end published."""
    try:
        if async_ is None and _plain_block(a):
            # no request built, one table probe
            return current_runtime().enter_one(kind, a, _DYNAMIC)
        return _enter_one(kind, a, async_)
    except AccError as error:
        report(error)
        raise
    finally:
        if _ACTIVE[_DIRECTIVE_END]:
            directive_end(routine)


# The data routines first try the current runtime's lane (``runtime.lane``, mapping/_cprobe.c):
# one C call that does the routine on present data when nobody listens to its events, or
# answers None (or raises) having changed nothing. Built, the C entry (``lane_routine``,
# pyacc/_routine_lane.c.h) makes that call before any Python frame; the functions below
# try it again for what the entry passes on. A thread with no runtime selects one here.
def _entering(kind: MapKind, name: str, doc: str):
    """The data routine ``acc.<name>`` that enters data as ``kind`` (copyin, create)."""
    routine = f"acc.{name}"

    def enter(a, *, async_=None):
        if async_ is None:
            runtime = ICVS.runtime
            if runtime is not None:
                try:
                    device_array = runtime.lane.enter(a)
                except Exception:  # the lane changed nothing: the verb decides and reports
                    device_array = None
                if device_array is not None:
                    return device_array
        return _entered(kind, a, async_, routine)

    enter.__name__ = enter.__qualname__ = name
    enter.__doc__ = doc
    return lane_routine(enter, "enter", RETURNS_DEVICE_ARRAY)


copyin = _entering(_COPYIN, "copyin", """Present: dynamic count +1, no transfer. Absent: allocate, copy in, dynamic = 1.

    Returns:
        The device array of ``a``.
    """)
create = _entering(_CREATE, "create", """As ``copyin``, without the transfer.""")


def _exit_one(kind: MapKind, array, finalize, async_) -> None:
    runtime = current_runtime()
    queue = queue_of(runtime, async_)
    check_array(array)
    runtime.exit_dynamic([MapRequest(kind, array)], queue, finalize=finalize)


def _exited(kind: MapKind, a, finalize, async_, routine: str) -> None:
    """``copyout``/``delete`` past the lane: the Python verb, its errors reported and its
    end published."""
    try:
        if async_ is None and _plain_block(a):
            # data that stays present only loses a dynamic count (no transfer either way)
            if current_runtime().leave_present(a, finalize=finalize):
                return
        _exit_one(kind, a, finalize, async_)
    except AccError as error:
        report(error)
        raise
    finally:
        if _ACTIVE[_DIRECTIVE_END]:
            directive_end(routine)


def _leaving(kind: MapKind, name: str, doc: str):
    """The data routine ``acc.<name>`` that exits data as ``kind`` (copyout, delete)."""
    routine = f"acc.{name}"

    def leave(a, finalize=False, *, async_=None) -> None:
        if async_ is None and not finalize:
            runtime = ICVS.runtime
            try:
                if runtime is not None and runtime.lane.leave(a):
                    return
            except Exception:  # the lane changed nothing: the verb decides and reports
                pass
        _exited(kind, a, finalize, async_, routine)

    leave.__name__ = leave.__qualname__ = name
    leave.__doc__ = doc
    return lane_routine(leave, "leave", RETURNS_NONE)


copyout = _leaving(MapKind.COPYOUT, "copyout", """Dynamic count −1 (``finalize``: 0); when both counts reach 0, copy out and free.
    Absent data, or a dynamic count already 0: nothing (API.md §8).""")
delete = _leaving(_DELETE, "delete", """As ``copyout``, without the transfer.""")


def _update_one(direction, array, if_present, async_) -> None:
    runtime = current_runtime()
    queue = queue_of(runtime, async_)
    check_array(array, contiguous=False)
    runtime.update_one(direction, array, queue, if_present=if_present)


@reported
def update_device(a, if_present=False, *, async_=None) -> None:
    """Copy host → device. Any strided view of present data; absent data raises
    ``NotPresentError`` unless ``if_present``."""
    _update_one(UpdateDirection.DEVICE, a, if_present, async_)


@reported
def update_self(a, if_present=False, *, async_=None) -> None:
    """Copy device → host; see ``update_device``."""
    _update_one(UpdateDirection.SELF, a, if_present, async_)


update_device = lane_routine(update_device, "upload", RETURNS_NONE)  # (emulated: the lane copies)
update_self = lane_routine(update_self, "download", RETURNS_NONE)


def is_present(a) -> bool:
    """True when every element of ``a`` (any view) is present on the current device."""
    try:  # the hot path: no wrapper frame; the runtime's ``is_present`` is its lane's
        runtime = ICVS.runtime or current_runtime()
        if type(a) is not _NDARRAY or a.dtype.hasobject:  # (API.md §2: no object dtype)
            check_array(a, contiguous=False)
        return runtime.is_present(a)
    except AccError as error:
        report(error)
        raise


is_present = lane_routine(is_present, "present", ANSWERS)


@reported
def deviceptr(a):
    """The device array of present ``a`` (a view at the matching offset), or None.

    On ``host`` it is ``a`` itself; on ``emulated`` a numpy array in device memory.
    ``None`` (C's NULL) gives None (OpenACC 3.3 §3.2.23).
    """
    if a is None:
        return None
    check_array(a, contiguous=False)
    return current_runtime().deviceptr(a)


@reported
def hostptr(d):
    """The host array whose device copy is ``d`` (inverse of ``deviceptr``), or None
    (also for ``None``, C's NULL: OpenACC 3.3 §3.2.24)."""
    return None if d is None else current_runtime().hostptr(d)


@reported
def malloc(shape, dtype=np.uint8):
    """Raw device memory for an array of ``shape`` and ``dtype``, not in the present
    table. A zero-size request returns an empty array."""
    return current_runtime().malloc(shape, dtype)


@reported
def free(d) -> None:
    """Free memory from ``malloc``. ``None`` does nothing; memory that backs a mapping
    raises ``PresentError``."""
    if d is None:
        return
    current_runtime().free(d)


@reported
def map_data(a, d) -> None:
    """Map host ``a`` onto device array ``d``; its dynamic count is pinned at 1 until
    ``unmap_data``. Present data raises ``PresentError``."""
    check_array(a)
    current_runtime().map_data(a, d)


@reported
def unmap_data(a) -> None:
    """End a ``map_data`` lifetime without freeing the device memory."""
    check_array(a)
    current_runtime().unmap_data(a)


@reported
def memcpy_to_device(d, a, *, async_=None) -> None:
    """Copy the ``a.nbytes`` bytes of host ``a`` to the start of device array ``d``."""
    runtime = current_runtime()
    runtime.memcpy_to_device(d, a, queue_of(runtime, async_))


@reported
def memcpy_from_device(a, d, *, async_=None) -> None:
    """Copy the first ``a.nbytes`` bytes of device array ``d`` into host ``a``."""
    runtime = current_runtime()
    runtime.memcpy_from_device(a, d, queue_of(runtime, async_))


@reported
def memcpy_device(d_dst, d_src, *, async_=None) -> None:
    """Copy the bytes of device array ``d_src`` to the start of device array ``d_dst``."""
    runtime = current_runtime()
    runtime.memcpy_device(d_dst, d_src, queue_of(runtime, async_))


# == introspection (pyacc extensions) ======================================================
@reported
def refcounts(a) -> tuple[int, int]:
    """``(structured, dynamic)`` of the mapping holding ``a``; ``(0, 0)`` when absent."""
    check_array(a, contiguous=False)
    return current_runtime().refcounts(a)


def present_table() -> list:
    """Every mapping of the current device, in host-address order."""
    return current_runtime().records()


def dump_present_table(file=None) -> None:
    """Print the present table of the current device (to stderr by default)."""
    runtime = current_runtime()
    records = runtime.records()
    out = file or sys.stderr
    print(f"present table of {runtime.device.type_name} device {runtime.device.number}: "
          f"{len(records)} mapping(s), {runtime.device.memory_in_use} bytes of device memory in use",
          file=out)
    for record in records:
        print(f"  {record}", file=out)


def stats() -> dict:
    """Counts and bytes of transfers, allocations, frees and launches on the current
    device since the last ``reset_stats``, and its ``memory_in_use``."""
    runtime = current_runtime()
    result = STATS.snapshot(runtime.device.identity)
    result["memory_in_use"] = runtime.device.memory_in_use
    return result


def reset_stats() -> None:
    """Zero the counters of ``stats`` for the current device."""
    STATS.reset(current_runtime().device.identity)


# == devices (OpenACC 3.3 §3.2.1–3.2.8) =====================================================
@reported
def get_num_devices(device_type) -> int:
    """Number of devices of a type (0 when the type is known but unusable here, and for
    ``acc_device_none``: OpenACC 3.3 §3.2.1)."""
    if _is_none_type(device_type):
        return 0
    return _devices.num_devices(device_type)


def _is_none_type(device_type) -> bool:
    """Whether ``device_type`` is ``acc_device_none`` ("none"): a type without devices."""
    return isinstance(device_type, str) and device_type.lower() == "none"


@reported
def set_device_type(device_type) -> None:
    """Select the device type for the calling thread."""
    _devices.set_current(canonical_type(device_type))


def get_device_type() -> str:
    """The calling thread's current device type: "host", "emulated" or "cuda"."""
    return ICVS.device_type


@reported
def set_device_num(n, device_type=None) -> None:
    """Select device ``n`` (n < 0: the default, 0) of ``device_type`` (default: the current
    type) for the calling thread; also makes that type current (§3.2.4)."""
    device_type = canonical_type(device_type) if device_type is not None else ICVS.device_type
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise InvalidArgumentError(f"device number must be an int, got {n!r}")
    _devices.set_current(device_type, max(int(n), 0))


@reported
def get_device_num(device_type=None) -> int:
    """The calling thread's device number for a type; -1 when the type has no device
    (``acc_device_none`` included: OpenACC 3.3 §3.2.5)."""
    if _is_none_type(device_type):
        return -1
    device_type = canonical_type(device_type) if device_type is not None else ICVS.device_type
    if _devices.num_devices(device_type) == 0:
        return -1
    return _devices.device_num_of(device_type)


@reported
def init(device_type=None) -> None:
    """Initialise the device (and make the type current, §3.2.7); on cuda also import the
    loader of saved GPU kernels, which the first compute call would otherwise pay
    (``cuda_binaries.prepare``)."""
    if device_type is not None:
        set_device_type(device_type)
    current_runtime()
    if ICVS.device_type == "cuda":
        cuda_binaries.prepare()


@reported
def shutdown(device_type=None) -> None:
    """End every data lifetime on every device of the type and free its memory (§3.2.8).
    Queues are drained first; errors of queued operations are dropped with the lifetimes
    they belonged to (logged at debug level on the ``pyacc`` logger)."""
    device_type = canonical_type(device_type) if device_type is not None else ICVS.device_type
    for runtime in _devices.live_runtimes(device_type):
        _shut_down(runtime)


def _shut_down(runtime) -> None:
    """End every data lifetime of ``runtime``'s device, free its memory, retire its queues
    (new ones read the async crossover again: API.md §5)."""
    runtime.shutdown()
    runtime.device.queues.retire()


@reported
def init_device(device_num, device_type=None) -> None:
    """Initialise device ``device_num`` of the type and make it the thread's current
    device (OpenACC 3.3 §3.2.7 ``acc_init_device``: it implies ``set_device_num``)."""
    set_device_num(device_num, device_type)
    init(device_type)


@reported
def shutdown_device(device_num, device_type=None) -> None:
    """``shutdown`` of device ``device_num`` of the type only (§3.2.8
    ``acc_shutdown_device``): its data lifetimes end and its memory is freed."""
    device_type = canonical_type(device_type) if device_type is not None else ICVS.device_type
    count = _devices.num_devices(device_type)
    if isinstance(device_num, bool) or not isinstance(device_num, (int, np.integer)) or \
            not 0 <= device_num < count:
        raise InvalidArgumentError(f"shutdown_device: no {device_type} device {device_num!r} "
                                   f"(the type has {count}: 0 to {count - 1})")
    for runtime in _devices.live_runtimes(device_type):
        if runtime.device.number == device_num:
            _shut_down(runtime)


_PROPERTIES = ("memory", "free_memory", "shared_memory_support", "name", "vendor", "driver")


@reported
def get_property(prop, device_num=None, device_type=None):
    """A property of a device (§3.2.6): ``memory``, ``free_memory`` (bytes),
    ``shared_memory_support`` (0/1), ``name``, ``vendor``, ``driver`` (strings)."""
    if prop not in _PROPERTIES:
        order = "; the property comes first here (C's acc_get_property(dev_num, dev_type, " \
            "property) is pyacc.openacc.acc_get_property)" if not isinstance(prop, str) else ""
        raise InvalidArgumentError(f"unknown device property {prop!r}; properties are "
                                   f"{', '.join(_PROPERTIES)}{order}")
    device_type = canonical_type(device_type) if device_type is not None else ICVS.device_type
    number = _devices.device_num_of(device_type) if device_num is None else device_num
    if not isinstance(number, (int, np.integer)) or isinstance(number, bool):
        raise InvalidArgumentError(f"device number must be an int, got {number!r}")
    return _devices.runtime_of(device_type, int(number)).device.properties()[prop]


@reported
def get_property_string(prop, device_num=None, device_type=None) -> str:
    """A string property of a device (§3.2.6 ``acc_get_property_string``): ``name``,
    ``vendor``, ``driver``."""
    value = get_property(prop, device_num, device_type)
    if not isinstance(value, str):
        raise InvalidArgumentError(f"device property {prop!r} is a number: acc.get_property "
                                   f"gives it")
    return value


# == async (OpenACC 3.3 §3.2.9–3.2.14) ======================================================
def wait(*queues, async_=None) -> None:
    """Wait for the listed queues (none: every queue) of the current device (§3.2.10).

    Without ``async_`` the host blocks until their work has run, and the first error of
    a queued operation is raised as ``ExecutionError`` naming the queue and the
    operation. With ``async_=q`` the host does not block: queue ``q`` waits for them
    (§3.2.11, ``acc_wait_async``). Queues with nothing pending and no error to report
    cost a check (API.md §5), made in C when the extension is built (``lane_routine``).
    """
    if async_ is None and _SILENT[0]:  # (nobody listens for the WAIT event it would publish)
        runtime = ICVS.runtime
        if runtime is not None and runtime.device.queues.settled(queues):
            return
    _wait(queues, async_)


wait = lane_routine(wait, "wait", SETTLES)  # built: its plain calls of settled queues, in C


@reported
def _wait(queues, async_) -> None:
    """``wait`` in full."""
    device = current_runtime().device
    target = async_value(async_)
    numbers = wait_values(list(queues))
    waited = [device.queue(number) for number in numbers] if queues else device.existing_queues()
    if target is None:
        device.queues.wait(waited)  # every queue drains; no error is lost
    else:
        device.join(device.queue(target), waited)


@reported
def wait_all() -> None:
    """Block until every queue of the current device has finished (§3.2.10)."""
    current_runtime().device.synchronize()


@reported
def wait_async(q, on) -> None:
    """Queue ``on`` waits for queue ``q`` without blocking the host (§3.2.11); with
    ``on`` synchronous (``acc.async_sync``) the host waits."""
    device = current_runtime().device
    device.join(device.queue(async_value(on)), [device.queue(async_value(q))])


@reported
def async_test(q) -> bool:
    """True when every operation queued on ``q`` has completed, or there were none
    (§3.2.9)."""
    number = async_value(q)
    if number is None:
        return True
    return current_runtime().device.queue(number).is_idle()


@reported
def wait_any(queues) -> int:
    """Block until one of ``queues`` has finished its work and return its index in the
    list (§3.2.12 ``acc_wait_any``); ``acc.async_sync`` entries are skipped, and -1 is
    returned when every entry is one (or the list is empty). The finished queue's error,
    if it has one, is raised as ``acc.wait`` raises it."""
    if not isinstance(queues, (list, tuple)):
        raise InvalidArgumentError(f"acc.wait_any takes a list of queues, got {queues!r}")
    device = current_runtime().device
    listed = [(index, device.queue(number)) for index, number in
              enumerate(async_value(q) for q in queues) if number is not None]
    delay = 1e-6
    while listed:
        for index, queue in listed:
            if queue.is_idle():
                device.queues.wait([queue])
                return index
        time.sleep(delay)
        delay = min(2 * delay, 1e-3)
    return -1


@reported
def async_test_all() -> bool:
    """True when every queue of the current device is idle (§3.2.9)."""
    return all(queue.is_idle() for queue in current_runtime().device.existing_queues())


def get_default_async() -> int:
    """The calling thread's default queue (what ``acc.async_noval`` means)."""
    return ICVS.default_async


@reported
def set_default_async(q) -> None:
    """Set the calling thread's default queue; ``acc.async_noval`` restores the initial
    default (queue 0), like ``acc_async_default``."""
    if is_noval(q):
        ICVS.default_async = 0
        return
    number = async_value(q)
    if number is None:
        raise InvalidAsyncError(f"{q!r} is synchronous and cannot be the default queue", value=q)
    ICVS.default_async = number


@reported
def get_cuda_stream(q):
    """The CuPy stream behind async queue ``q`` of the current cuda device (OpenACC's
    ``acc_get_cuda_stream``, for NVIDIA targets). ``q`` is an int ≥ 0,
    ``acc.async_noval`` (the thread's default queue) or ``acc.async_sync`` / None (the
    synchronous queue's stream). Work the caller puts on that stream (a CuPy kernel, a
    numba-cuda kernel on ``cuda.external_stream(stream.ptr)``) is ordered with pyacc's
    work on the queue.

    Raises:
        DeviceTypeUnavailableError: the current device is not a cuda device (its type has
            no CUDA streams).
        InvalidAsyncError: ``q`` is not an async value.
    """
    number = async_value(q)
    runtime = current_runtime()
    device = runtime.device
    if device.type_name != "cuda":
        raise DeviceTypeUnavailableError(
            f"acc.get_cuda_stream: the current device is {device.type_name} device "
            f"{device.number}, which has no CUDA streams; select a GPU first with "
            "acc.set_device_type('cuda') (acc.get_num_devices('cuda') tells whether one is "
            "usable here)", device_type=device.type_name)
    return device.queue(number).stream


# == attach / detach (OpenACC 3.3 §2.7.2, §3.2.34-3.2.35): ``_attach`` ======================
from ._attach import attach, attachment_count, detach  # noqa: E402 (its own module: the 600-line rule)
from ._d2d import memcpy_d2d  # noqa: E402 (OpenACC 3.3 §3.2.30; its own module likewise)
