"""The registry of device runtimes: one per device, created on first use; the program's end.

Owns :data:`REGISTRY` (runtimes by ``(type, number)``, shared by all threads; how many
devices each canonical type has here, and why none), the creation of a device's runtime
(``host``: shared memory; ``emulated``: a device with memory of its own; ``cuda``:
``_cuda_device``), and :func:`finish_program`. ``_devices`` (device-type spelling, the
offload policy, the per-thread ICVs) is its one user and re-exports what the rest of
pyacc reads.

The cuda device type is probed once, at first need, by ``pyacc._cuda_probe`` (NVML counts
the GPUs, so that detecting them creates no CUDA context, API.md §12). The checks that
need the driver run when a cuda device is first created (``_cuda_device``): CUDA is
initialised there, and a failure is recorded as the type's reason (its count is 0 from
then on) and raised as ``DeviceTypeUnavailableError``.

Program end (OpenACC 3.3 §2.16: the end of the program completes the queues; §2.13: the
implicit data region of the program ends): an ``atexit`` handler, registered once when
the first device runtime is created (so that it runs before the diagnostics' exit
reports, registered at import), waits for every asynchronous queue of every device in
use — queue workers are daemon threads, and work still queued when the interpreter
finalises would otherwise be dropped (``exit_data(copyout=[a], async_=1)`` as a script's
last statement would never reach ``a``) — then ends the ``acc.declare`` lifetimes
(``copy`` data copied back). An error of queued work that no ``acc.wait`` reported is
printed on stderr, naming the device, queue and operation. The exit status is left as
the program made it: Python gives exit handlers no clean way to change it (``os._exit``
would skip the other handlers and lose buffered output).

Invariants:
    * A device's runtime object lives for the whole process (a bad fork's child drops its
      cuda runtimes, ``after_fork_in_child``); ``shutdown`` empties it.
    * Every device type here is canonical (``host``, ``emulated``, ``cuda``): spellings
      are ``_devices.canonical_type``'s.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

from pyacc.mapping import (
    DeviceRuntime,
    DeviceTypeUnavailableError,
    DeviceUnavailableError,
    EmulatedDevice,
    HostDevice,
    InvalidArgumentError,
    MappingRuntime,
    SharedMemoryRuntime,
)

from . import _cuda_probe, _names
from ._offload import offload_policy

__all__ = ["REGISTRY", "finish_program", "unavailable"]

#: values of PYACC_OVERSUBSCRIBE that switch oversubscription on (API.md §10)
_ON = ("1", "true", "yes", "on")


class _Registry:
    """Device runtimes by ``(type, number)``, created on first use."""

    def __init__(self):
        self._lock = threading.Lock()
        self._runtimes: dict[tuple[str, int], MappingRuntime] = {}
        self._cuda: tuple[str | None, int] | None = None  # (reason, count); None: not probed
        self._emulated_count: int | None = None

    def _cuda_probe(self) -> tuple[str | None, int]:
        probe = self._cuda
        if probe is None:
            probe = self._cuda = _cuda_probe.probe()
        return probe

    def cuda_reason(self) -> str | None:
        return self._cuda_probe()[0]

    def count(self, device_type: str) -> int:
        if device_type == "host":
            return 1
        if offload_policy() == "disabled":
            return 0
        if device_type == "emulated":
            if self._emulated_count is None:
                self._emulated_count = _emulated_devices_from_environment()
            return self._emulated_count
        return self._cuda_probe()[1]

    def runtime(self, device_type: str, number: int) -> MappingRuntime:
        key = (device_type, number)
        runtime = self._runtimes.get(key)
        if runtime is not None:
            return runtime
        self.check(device_type, number)
        with self._lock:
            runtime = self._runtimes.get(key)
            if runtime is None:
                runtime = self._runtimes[key] = self._create(device_type, number)
                _register_exit_handler()
        return runtime

    def reason(self, device_type: str) -> str | None:
        """Why a (canonical) device type has no usable device here, or None."""
        if self.count(device_type):
            return None
        if offload_policy() == "disabled":
            return "offload is disabled (PYACC_OFFLOAD=disabled): host is the only device"
        if device_type == "emulated":
            return "PYACC_EMULATED_DEVICES=0"
        return self.cuda_reason()

    def check(self, device_type: str, number: int) -> None:
        count = self.count(device_type)
        if count == 0:
            raise unavailable(device_type)
        if not 0 <= number < count:
            raise DeviceUnavailableError(
                f"there is no {device_type} device {number}: {count} device(s) of that type "
                f"(numbers 0..{count - 1})"
                + ("; set PYACC_EMULATED_DEVICES for more" if device_type == "emulated" else ""),
                device_type=device_type,
                device_num=number,
            )

    def _create(self, device_type: str, number: int) -> MappingRuntime:
        if device_type == "host":
            runtime = SharedMemoryRuntime(HostDevice(number))
        elif device_type == "emulated":
            runtime = DeviceRuntime(EmulatedDevice(number))
        else:
            runtime = DeviceRuntime(self._cuda_device(number))
        runtime.namer = _names.variable_name
        if device_type != "host" and os.environ.get("PYACC_OVERSUBSCRIBE", "").strip().lower() in _ON:
            runtime.set_oversubscribe(True)  # API.md §10 (pyacc._placement)
        return runtime

    def _cuda_device(self, number: int):
        """``_cuda_device``; a failure becomes cuda's reason (its count is 0 from then on)."""
        try:
            return _cuda_device(number, fake=_cuda_probe.fake_cuda_requested())
        except _CudaUnusable as failure:
            self._cuda = (str(failure), 0)
        raise unavailable("cuda")

    def live(self, device_type: str) -> list[MappingRuntime]:
        with self._lock:
            return [rt for (of_type, _), rt in self._runtimes.items() if of_type == device_type]

    def all(self) -> list[MappingRuntime]:
        with self._lock:
            return list(self._runtimes.values())

    def after_fork_in_child(self) -> None:
        """The child of ``os.fork``: new locks, and every device without its queues; after
        CUDA was initialised in the parent, no cuda runtime and no cuda device (the fork
        reason instead: module docstring)."""
        self._lock = threading.Lock()
        for runtime in self._runtimes.values():  # cuda's too: an old reference never hangs
            runtime.after_fork_in_child()
        if _cuda_probe.after_fork_in_child():
            self._runtimes = {key: runtime for key, runtime in self._runtimes.items()
                              if key[0] != "cuda"}
            self._cuda = (_cuda_probe.fork_reason(), 0)


REGISTRY = _Registry()


class _CudaUnusable(Exception):
    """The driver's checks at a cuda device's creation failed; the message is the reason."""


def _cuda_device(number: int, *, fake: bool):
    """A cuda device: on the GPU through CuPy, or (``fake``: PYACC_TESTING_FAKE_CUDA=1, the
    probe having checked that the simulator is on) on the host-memory stand-in. CUDA is
    initialised here: from now on a forked child cannot use it (``_cuda_probe``).

    Raises:
        _CudaUnusable: CuPy finds no driver or GPU, or the kernel compiler cannot use it.
    """
    from pyacc.mapping.devices.cuda import CudaDevice  # imported on first use: it needs CuPy

    _cuda_probe.note_cuda_initialised(f"used the GPU (pyacc created cuda device {number})")
    if fake:
        from pyacc.mapping.devices.cuda_fake import FakeCudaBackend  # on first use too: tests only (PYACC_TESTING_FAKE_CUDA)

        return CudaDevice(number, backend=FakeCudaBackend())
    reason = _cuda_probe.driver_reason()  # the compiler's is_available(): the process's,
    if reason is not None:                 # asked before a device (and its stream) exists
        raise _CudaUnusable(reason)
    try:
        return CudaDevice(number)  # CupyBackend: the driver's device count (cuInit)
    except DeviceTypeUnavailableError as error:
        raise _CudaUnusable(str(error)) from None


def unavailable(device_type: str, origin: str = "") -> DeviceTypeUnavailableError:
    """The error for selecting a (canonical) type without devices; ``origin`` says who
    asked for it."""
    policy = offload_policy()
    prefix = ""
    if policy == "mandatory":
        prefix = f"PYACC_OFFLOAD=mandatory and {origin or 'the requested '}"
    advice = ""
    if policy not in ("default", "disabled"):
        advice = ", or set PYACC_OFFLOAD=default to fall back to host"
    return DeviceTypeUnavailableError(
        f"{prefix}device type '{device_type}' is not available: {REGISTRY.reason(device_type)}. "
        f"Use 'host' (multicore CPU) or 'emulated' (separate memory, for testing){advice}",
        device_type=device_type,
    )


def _emulated_devices_from_environment() -> int:
    text = os.environ.get("PYACC_EMULATED_DEVICES", "1").strip() or "1"
    try:
        count = int(text)
    except ValueError:
        raise InvalidArgumentError(f"PYACC_EMULATED_DEVICES={text!r} is not an integer") from None
    if count < 0:
        raise InvalidArgumentError(f"PYACC_EMULATED_DEVICES={text!r} is negative")
    return count


# == program end =============================================================================
_EXIT_HANDLER: list = []  # one element once the handler is registered


def _register_exit_handler() -> None:
    """Register ``finish_program`` with ``atexit``, once (the registry lock is held)."""
    if not _EXIT_HANDLER:
        atexit.register(finish_program)
        _EXIT_HANDLER.append(finish_program)


def finish_program(file=None) -> int:
    """What the end of the program does (module docstring): wait for every queue of
    every device in use, then end the ``acc.declare`` lifetimes. Errors are printed on
    ``file`` (stderr), never raised. Returns the number of errors printed."""
    out = file if file is not None else sys.stderr
    errors = 0
    for runtime in REGISTRY.all():
        device = runtime.device
        label = f"{device.type_name} device {device.number}"
        for queue in device.existing_queues():  # not published as a program's WAIT
            try:
                queue.synchronize()
            except Exception as error:  # noqa: BLE001 - reported, never raised at exit
                errors += 1
                print(f"pyacc: at program exit, queued work on {label} failed and was never "
                      f"waited for (add acc.wait() before the end of the program to handle "
                      f"it): {type(error).__name__}: {error}", file=out, flush=True)
        try:
            runtime.end_declarations()
        except Exception as error:  # noqa: BLE001
            errors += 1
            print(f"pyacc: at program exit, ending the acc.declare data of {label} failed: "
                  f"{type(error).__name__}: {error}", file=out, flush=True)
    return errors
