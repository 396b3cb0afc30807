"""OpenMP device numbering, the default-device ICV, offload policy and nowait queues
(OpenMP 5.2 §2.4 ICVs, §18.7 device routines, ch. 21 environment).

Owns: how an OpenMP ``device`` number resolves to a pyacc device runtime; the per-thread
``default-device-var``; ``OMP_TARGET_OFFLOAD`` and ``OMP_DEFAULT_DEVICE``; the queue that
``nowait`` work of the calling thread runs on, and ``taskwait``.

Numbering (API.md §9): the non-host devices of the thread's current device type are
``0 … get_num_devices()-1``; ``get_initial_device() == get_num_devices()`` is the host.
When the current type is ``host`` (shared memory, multicore kernels) there is no non-host
device: ``get_num_devices() == 0`` and device 0 is the initial device — constructs run
with pyacc's host device, whose data clauses are no-ops. On a device type with separate
memory, ``device=get_initial_device()`` runs a construct on the host with no data action.

The default device is pyacc's current device number of the current type (the two models
share the selection: ``omp.set_default_device(1)`` is ``acc.set_device_num(1)``), except
that it may also be the initial device (a per-thread flag).

``OMP_TARGET_OFFLOAD`` (mandatory, disabled, default) is applied as ``PYACC_OFFLOAD``
when that variable is unset (pyacc reads its offload policy from ``PYACC_OFFLOAD``, so the
value is copied there: the policy then holds for OpenACC code of the same program too, as
one libomptarget serves both models in LLVM). ``OMP_DEFAULT_DEVICE`` is read at the first
OpenMP call of each thread.
"""

from __future__ import annotations

import itertools
import os
import threading

import numpy as np

from pyacc.mapping import AccError, DeviceUnavailableError, InvalidArgumentError

from .. import _devices as _acc_devices
from .._devices import ICVS, current_runtime

__all__ = [
    "get_num_devices", "get_initial_device", "get_default_device", "set_default_device",
    "get_device_num", "is_initial_device", "initial_device", "invalid_device",
    "resolve", "Target", "nowait_queue", "taskwait", "note_nowait",
]

#: ``omp_initial_device`` (OpenMP 5.2): names the host in a ``device`` clause
initial_device = -1
#: ``omp_invalid_device`` (OpenMP 5.2): using it is an error
invalid_device = -2

_ENV_SET: dict = {}  # what this module copied into PYACC_OFFLOAD: {"value": ...}


def sync_offload_environment() -> None:
    """Copy ``OMP_TARGET_OFFLOAD`` into ``PYACC_OFFLOAD`` when the user did not set the
    latter (and follow later changes of ``OMP_TARGET_OFFLOAD`` that we made)."""
    omp = os.environ.get("OMP_TARGET_OFFLOAD", "").strip()
    acc = os.environ.get("PYACC_OFFLOAD")
    ours = _ENV_SET.get("value")
    if acc is not None and acc != ours:
        return  # the user's PYACC_OFFLOAD wins
    if omp:
        if acc != omp:
            os.environ["PYACC_OFFLOAD"] = omp
            _ENV_SET["value"] = omp
    elif ours is not None and acc == ours:
        del os.environ["PYACC_OFFLOAD"]
        _ENV_SET.clear()


class _ThreadState(threading.local):
    def __init__(self):
        self.started = False  # OMP_DEFAULT_DEVICE applied
        self.on_initial = False  # the default device is the initial device
        self.queue_number = None  # this thread's nowait queue
        self.nowait = {}  # id(runtime) -> runtime, devices with nowait work of this thread


_STATE = _ThreadState()
_QUEUE_NUMBERS = itertools.count()
#: nowait queues are numbered from here (far above the queue numbers programs use)
NOWAIT_QUEUE_BASE = 1 << 24


def _start() -> None:
    """The first OpenMP call of a thread: the environment's default device."""
    if _STATE.started:
        return
    _STATE.started = True
    text = ""
    try:
        sync_offload_environment()
        text = os.environ.get("OMP_DEFAULT_DEVICE", "").strip()
        if text:
            try:
                number = int(text)
            except ValueError:
                raise InvalidArgumentError(f"OMP_DEFAULT_DEVICE={text!r} is not an integer: "
                                           "set a device number, or unset it") from None
            set_default_device(number)
    except AccError as error:  # every OpenMP call says it, until the environment is fixed
        _STATE.started = False
        if text and not str(error).startswith("OMP_DEFAULT_DEVICE"):
            error.args = (f"OMP_DEFAULT_DEVICE={text}: {error.args[0] if error.args else error}",
                          *error.args[1:])
        raise


def _current_type() -> str:
    return ICVS.device_type


def get_num_devices() -> int:
    """``omp_get_num_devices``: non-host devices of the current device type (0 on host)."""
    _start()
    sync_offload_environment()
    device_type = _current_type()
    if device_type == "host":
        return 0
    return _acc_devices.num_devices(device_type)


def get_initial_device() -> int:
    """``omp_get_initial_device``: the host's device number, ``get_num_devices()``."""
    return get_num_devices()


def get_device_num() -> int:
    """``omp_get_device_num``: the device the calling thread runs on. Python code
    outside kernels always runs on the host: the initial device's number."""
    return get_initial_device()


def is_initial_device() -> bool:
    """``omp_is_initial_device``: True in host code (always, outside kernels); in a
    kernel, whether it runs on the host (``acc.on_device("host")``, OpenMP 5.2 §18.7.6)."""
    return True


is_initial_device.__acc_on_device__ = "host"  # (compiler.frontend.ON_DEVICE_ATTR)


def get_default_device() -> int:
    """``omp_get_default_device``: the device used when a construct names none."""
    _start()
    if _STATE.on_initial or _current_type() == "host":
        return get_initial_device()
    return _acc_devices.device_num_of(_current_type())


def _check_number(n, what: str) -> int:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise InvalidArgumentError(f"{what}: a device number must be an int, got {n!r}")
    return int(n)


def set_default_device(n) -> None:
    """``omp_set_default_device``: ``n`` in ``0 … get_num_devices()-1`` selects that device
    of the current type (as ``acc.set_device_num(n)``); ``get_initial_device()`` or
    ``omp.initial_device`` (-1) the host.

    Raises:
        DeviceUnavailableError: no such device.
    """
    _STATE.started = True
    n = _check_number(n, "omp.set_default_device")
    initial = get_initial_device()
    if n == initial or n == initial_device:
        _STATE.on_initial = True
        return
    if not 0 <= n < initial:
        raise _no_device(n, "omp.set_default_device")
    _acc_devices.set_current(_current_type(), n)
    _STATE.on_initial = False


def _no_device(n, what) -> DeviceUnavailableError:
    count = get_num_devices()
    device_type = _current_type()
    return DeviceUnavailableError(
        f"{what}: there is no OpenMP device {n}: the current device type '{device_type}' has "
        f"{count} non-host device(s) (0..{count - 1}) and the host is device {count} "
        "(omp.get_initial_device())"
        + ("; set PYACC_EMULATED_DEVICES for more" if device_type == "emulated" else ""),
        device_type=device_type, device_num=n)


class Target:
    """Where a construct runs: ``runtime`` (None: the host, no data action) and the
    OpenMP device number ``number``; ``switch`` says whether pyacc's current device must
    change for the call (a compute region on another device than the current one)."""

    __slots__ = ("runtime", "number", "switch")

    def __init__(self, runtime, number, switch):
        self.runtime, self.number, self.switch = runtime, number, switch

    @property
    def on_host(self) -> bool:
        return self.runtime is None


def default_is_current() -> bool:
    """Whether a construct that names no device runs on pyacc's current device (the
    default device is not the initial device): the compute decorators' fast path."""
    if not _STATE.started:
        _start()
    return not _STATE.on_initial


def resolve(device, what: str) -> Target:
    """The target of a construct with ``device`` clause value ``device`` (None: default).

    Raises:
        DeviceUnavailableError: ``device`` is not an OpenMP device number here
            (``omp.invalid_device`` included).
    """
    _start()
    device_type = _current_type()
    if device is None:
        if _STATE.on_initial and device_type != "host":
            return Target(None, get_initial_device(), False)
        number = _acc_devices.device_num_of(device_type) if device_type != "host" else 0
        return Target(current_runtime(), number, False)
    n = _check_number(device, what)
    count = get_num_devices()
    if n == count or n == initial_device:
        if device_type == "host":
            return Target(current_runtime(), count, False)
        return Target(None, count, False)
    if not 0 <= n < count:
        raise _no_device(n, what)
    current = _acc_devices.device_num_of(device_type)
    if n == current:
        return Target(current_runtime(), n, False)
    return Target(_acc_devices.runtime_of(device_type, n), n, True)


# == nowait queues and taskwait ==================================================================
def nowait_queue() -> int:
    """The async queue number on which ``nowait`` work of the calling thread runs (one per
    host thread; a pyacc extension: ``acc.wait(omp.nowait_queue())`` also waits for it)."""
    number = _STATE.queue_number
    if number is None:
        number = _STATE.queue_number = NOWAIT_QUEUE_BASE + next(_QUEUE_NUMBERS)
    return number


def note_nowait(runtime) -> None:
    """Remember that the calling thread queued nowait work on ``runtime``'s device."""
    _STATE.nowait[id(runtime)] = runtime


def taskwait() -> None:
    """``#pragma omp taskwait``: block until every ``nowait`` construct of the calling
    thread has completed, on every device it used; the first error of that work is
    raised as ``ExecutionError`` (after every queue has drained)."""
    runtimes = list(_STATE.nowait.values())
    number = _STATE.queue_number
    if number is None or not runtimes:
        return
    failure = None
    for runtime in runtimes:
        device = runtime.device
        try:
            device.wait(device.queue(number))
        except Exception as error:  # noqa: BLE001 - every device drains first
            failure = failure or error
    if failure is not None:
        raise failure
