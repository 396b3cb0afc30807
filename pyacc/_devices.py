"""Device types, device numbers and the per-thread ICVs that select the current device.

Owns: the spelling of device types (``host``, ``emulated``, ``cuda`` and the aliases
``multicore``, ``nvidia``, ``not_host``), the registry of device runtimes (one per device,
created on first use, shared by all threads), and the internal control variables of
OpenACC 3.3 §2.3: ``acc-current-device-type-var``, ``acc-current-device-num-var`` and
``acc-default-async-var``, one copy per host thread.

It also owns the offload policy, ``PYACC_OFFLOAD`` (like OpenMP's ``OMP_TARGET_OFFLOAD``):
what happens when the requested device type has no usable device here. It is read each
time a selection is resolved (first use of a thread, ``set_device_type``,
``set_device_num``, ``init``) and by ``get_num_devices``; values are case-insensitive:

- unset or empty: an explicit request (``ACC_DEVICE_TYPE``, ``set_device_type``) of an
  unavailable type is an error (``DeviceTypeUnavailableError``: ``set_device_type`` raises
  at once, ``ACC_DEVICE_TYPE`` when the device is first used); the implicit default is cuda when a usable GPU is found, else host,
  silently. This keeps the behaviour of pyacc without the variable, so that a typo or a
  missing GPU is never hidden.
- ``default``: a request of an unavailable non-host type falls back to host; the first
  fallback of the process warns (``OffloadFallbackWarning``). The implicit default is as
  when unset (not a request, so no warning).
- ``mandatory``: a request of an unavailable type raises at once, and so does the implicit
  default without a usable GPU (the default search wants cuda; ``emulated`` is used only
  when asked for). An explicit ``host`` is allowed.
- ``disabled``: offload is off; host is the only device. Every selection resolves to host
  (``set_device_type("emulated")`` and ``ACC_DEVICE_TYPE=cuda`` select host, silently:
  the user asked for it), ``get_device_type()`` is ``"host"``, ``get_num_devices`` of
  emulated and cuda is 0, and their properties raise ``DeviceTypeUnavailableError``.

When a type falls back to host, the device number becomes 0 (host has one device).
A selection already resolved is not re-resolved when the variable changes later.

Environment (read once, at first use, OpenACC 3.3 ch. 4): ``ACC_DEVICE_TYPE``,
``ACC_DEVICE_NUM``, ``PYACC_EMULATED_DEVICES`` (default 1).

Invariants:
- internal code never reads the ICVs except through ``current_runtime()`` and
  ``default_async()``; everything below receives its device and queue explicitly;
- a device's runtime object lives for the whole process; ``shutdown`` empties it.
"""

from __future__ import annotations

import difflib
import os
import sys
import threading
import warnings

from mapping import (
    DeviceRuntime,
    DeviceTypeUnavailableError,
    DeviceUnavailableError,
    EmulatedDevice,
    HostDevice,
    InvalidArgumentError,
    SharedMemoryRuntime,
)

from . import _names

__all__ = [
    "DEVICE_TYPES",
    "TYPE_NAMES",
    "OFFLOAD_POLICIES",
    "OffloadFallbackWarning",
    "offload_policy",
    "unavailable_reason",
    "resolve",
    "canonical_type",
    "num_devices",
    "runtime_of",
    "current_runtime",
    "set_current",
    "ICVS",
]

DEVICE_TYPES = ("host", "emulated", "cuda")
_ALIASES = {
    "host": "host",
    "multicore": "host",
    "emulated": "emulated",
    "cuda": "cuda",
    "nvidia": "cuda",
}


#: every accepted spelling of a device type (case-insensitive)
TYPE_NAMES = (*_ALIASES, "not_host", "default")

#: hints for common names that are not device types
_HINTS = {"gpu": "cuda", "cpu": "host", "device": "not_host"}


def _cuda_unavailable_reason() -> str | None:
    """Why the cuda device type cannot be used here, or None when it can."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "CuPy is not installed (pip install 'pyacc[cuda]')"
    except Exception as error:  # pragma: no cover - broken CUDA install
        return f"CuPy failed to import: {error}"
    if not cupy.is_available():
        return "CuPy found no usable GPU (no NVIDIA GPU or driver on this machine)"
    return "the cuda device type is not implemented in this version of pyacc"


# == offload policy (PYACC_OFFLOAD, like OMP_TARGET_OFFLOAD) =================================
OFFLOAD_POLICIES = ("mandatory", "disabled", "default")

#: pyacc/, mapping/, compiler/: frames skipped when a warning points at the user's code
_INTERNAL = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), name) + os.sep
    for name in ("pyacc", "mapping", "compiler")
)


class OffloadFallbackWarning(RuntimeWarning):
    """A requested device type is unavailable; ``PYACC_OFFLOAD=default`` runs on host."""


def offload_policy() -> str | None:
    """``PYACC_OFFLOAD`` in lower case, or None when it is unset or empty.

    Raises:
        InvalidArgumentError: any other value than mandatory, disabled, default.
    """
    text = os.environ.get("PYACC_OFFLOAD", "").strip()
    if not text:
        return None
    if text.lower() not in OFFLOAD_POLICIES:
        raise InvalidArgumentError(
            f"PYACC_OFFLOAD={text!r} is not an offload policy: use mandatory, disabled or "
            "default (case-insensitive), or leave PYACC_OFFLOAD unset"
        )
    return text.lower()


class _Fallback:
    """The once-per-process fallback warning."""

    lock = threading.Lock()
    warned = False


def _user_stacklevel() -> int:
    """``stacklevel`` for a ``warnings.warn`` made by our caller: the first frame outside
    pyacc, mapping and compiler (1 when there is none)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1


def _warn_fallback(device_type: str) -> None:
    with _Fallback.lock:
        if _Fallback.warned:
            return
        _Fallback.warned = True
    warnings.warn(
        f"device type '{device_type}' is not available: {unavailable_reason(device_type)}; "
        "running on 'host' instead because PYACC_OFFLOAD=default (set PYACC_OFFLOAD=mandatory "
        "to make this an error)",
        OffloadFallbackWarning,
        stacklevel=_user_stacklevel(),
    )


class _Registry:
    """Device runtimes by ``(type, number)``, created on first use."""

    def __init__(self):
        self._lock = threading.Lock()
        self._runtimes: dict[tuple[str, int], DeviceRuntime] = {}
        self._cuda_reason: str | None | bool = False  # False: not probed yet
        self._emulated_count: int | None = None

    def cuda_reason(self) -> str | None:
        if self._cuda_reason is False:
            self._cuda_reason = _cuda_unavailable_reason()
        return self._cuda_reason

    def count(self, device_type: str) -> int:
        if device_type == "host":
            return 1
        if offload_policy() == "disabled":
            return 0
        if device_type == "emulated":
            if self._emulated_count is None:
                self._emulated_count = _emulated_devices_from_environment()
            return self._emulated_count
        return 0 if self.cuda_reason() else 1

    def runtime(self, device_type: str, number: int) -> DeviceRuntime:
        key = (device_type, number)
        runtime = self._runtimes.get(key)
        if runtime is not None:
            return runtime
        self.check(device_type, number)
        with self._lock:
            runtime = self._runtimes.get(key)
            if runtime is None:
                runtime = self._runtimes[key] = self._create(device_type, number)
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
            raise _unavailable(device_type)
        if not 0 <= number < count:
            raise DeviceUnavailableError(
                f"there is no {device_type} device {number}: {count} device(s) of that type "
                f"(numbers 0..{count - 1})"
                + ("; set PYACC_EMULATED_DEVICES for more" if device_type == "emulated" else ""),
                device_type=device_type,
                device_num=number,
            )

    @staticmethod
    def _create(device_type: str, number: int) -> DeviceRuntime:
        if device_type == "host":
            runtime = SharedMemoryRuntime(HostDevice(number))
        elif device_type == "emulated":
            runtime = DeviceRuntime(EmulatedDevice(number))
        else:  # pragma: no cover - cuda lands with its own issue
            raise DeviceTypeUnavailableError("the cuda device type is not implemented yet")
        runtime.namer = _names.variable_name
        return runtime

    def live(self, device_type: str) -> list[DeviceRuntime]:
        with self._lock:
            return [rt for (kind, _), rt in self._runtimes.items() if kind == device_type]


_REGISTRY = _Registry()


def _unavailable(device_type: str, origin: str = "") -> DeviceTypeUnavailableError:
    """The error for selecting a type without devices; ``origin`` says who asked for it."""
    policy = offload_policy()
    prefix = ""
    if policy == "mandatory":
        prefix = f"PYACC_OFFLOAD=mandatory and {origin or 'the requested '}"
    advice = ""
    if policy not in ("default", "disabled"):
        advice = ", or set PYACC_OFFLOAD=default to fall back to host"
    return DeviceTypeUnavailableError(
        f"{prefix}device type '{device_type}' is not available: {unavailable_reason(device_type)}. "
        f"Use 'host' (multicore CPU) or 'emulated' (separate memory, for testing){advice}",
        device_type=device_type,
    )


def unavailable_reason(device_type: str) -> str | None:
    """Why a device type (any spelling) cannot be used here, or None when it can."""
    return _REGISTRY.reason(canonical_type(device_type))


def resolve(device_type: str, origin: str = "") -> str:
    """The type that a request of ``device_type`` (canonical) selects under PYACC_OFFLOAD.

    Unset policy: the request itself (selecting it raises later if it is unavailable).

    Raises:
        DeviceTypeUnavailableError: PYACC_OFFLOAD=mandatory and the type is unavailable.
        InvalidArgumentError: PYACC_OFFLOAD has an unknown value.
    """
    if device_type == "host" or _REGISTRY.count(device_type):
        return device_type
    policy = offload_policy()
    if policy == "mandatory":
        raise _unavailable(device_type, origin)
    if policy == "default":
        _warn_fallback(device_type)
    return "host" if policy else device_type


def _emulated_devices_from_environment() -> int:
    text = os.environ.get("PYACC_EMULATED_DEVICES", "1").strip() or "1"
    try:
        count = int(text)
    except ValueError:
        raise InvalidArgumentError(f"PYACC_EMULATED_DEVICES={text!r} is not an integer") from None
    if count < 0:
        raise InvalidArgumentError(f"PYACC_EMULATED_DEVICES={text!r} is negative")
    return count


def default_non_host_type() -> str:
    """``not_host``: cuda when usable, else emulated."""
    return "cuda" if _REGISTRY.count("cuda") else "emulated"


def default_type() -> str:
    """The default device type: cuda when a usable GPU is found, else host (API.md §1);
    always cuda under PYACC_OFFLOAD=mandatory (selecting it then fails without a GPU)."""
    if _REGISTRY.count("cuda") or offload_policy() == "mandatory":
        return "cuda"
    return "host"


def canonical_type(device_type) -> str:
    """Map a device-type spelling (case-insensitive, aliases) to host/emulated/cuda.

    Raises:
        DeviceTypeUnavailableError: the name is not a device type.
    """
    if not isinstance(device_type, str):
        raise DeviceTypeUnavailableError(
            f"device type must be a string such as 'host', 'emulated' or 'cuda', got {device_type!r}",
            device_type=device_type,
        )
    key = device_type.strip().lower()
    if key in _ALIASES:
        return _ALIASES[key]
    if key == "not_host":
        return default_non_host_type()
    if key == "default":
        return default_type()
    hint = _HINTS.get(key)
    if hint is None:
        close = difflib.get_close_matches(key, list(_ALIASES) + ["not_host", "default"], n=1)
        hint = close[0] if close else None
    raise DeviceTypeUnavailableError(
        f"unknown device type {device_type!r}"
        + (f" (did you mean {hint!r}?)" if hint else "")
        + "; device types are 'host' (alias 'multicore'), 'emulated', 'cuda' (alias "
        "'nvidia'), 'not_host' and 'default'",
        device_type=device_type,
    )


def num_devices(device_type: str) -> int:
    return _REGISTRY.count(canonical_type(device_type))


def check_device(device_type: str, number: int) -> None:
    _REGISTRY.check(device_type, number)


def runtime_of(device_type: str, number: int) -> DeviceRuntime:
    if device_type != "host" and offload_policy() == "disabled":
        check_device(device_type, number)  # raises: the runtime may predate the policy
    return _REGISTRY.runtime(device_type, number)


def live_runtimes(device_type: str) -> list[DeviceRuntime]:
    return _REGISTRY.live(device_type)


# == per-thread ICVs (OpenACC 3.3 §2.3) =======================================================
class _Initial:
    """Initial ICV values from the environment, read once at first use (ch. 4)."""

    _lock = threading.Lock()
    values: tuple[str, int] | None = None

    @classmethod
    def get(cls) -> tuple[str, int]:
        if cls.values is None:
            with cls._lock:
                if cls.values is None:
                    cls.values = cls._read()
        return cls.values

    @staticmethod
    def _read() -> tuple[str, int]:
        text = os.environ.get("ACC_DEVICE_TYPE", "").strip()
        if text:
            requested = canonical_type(text)
            device_type = resolve(requested, f"ACC_DEVICE_TYPE={text}: ")
        else:
            requested = default_type()
            device_type = resolve(requested, "ACC_DEVICE_TYPE unset: the default ")
        number_text = os.environ.get("ACC_DEVICE_NUM", "").strip() or "0"
        try:
            number = int(number_text)
        except ValueError:
            raise InvalidArgumentError(f"ACC_DEVICE_NUM={number_text!r} is not an integer") from None
        return device_type, max(number, 0) if device_type == requested else 0


class _ThreadICVs(threading.local):
    """One copy per host thread; initial values come from the environment at first use."""

    def __init__(self):
        self._device_type: str | None = None
        self.device_num: dict[str, int] = {}
        self.default_async = 0
        self.runtime: DeviceRuntime | None = None  # cache of the current device's runtime
        self.default_clause: list[str | None] = []  # default(...) of enclosing data regions

    @property
    def device_type(self) -> str:
        if self._device_type is None:
            device_type, number = _Initial.get()
            self._device_type = device_type
            self.device_num.setdefault(device_type, number)
        return self._device_type

    @device_type.setter
    def device_type(self, value: str) -> None:
        self._device_type = value


ICVS = _ThreadICVs()


def current_runtime() -> DeviceRuntime:
    """The runtime of the calling thread's current device."""
    runtime = ICVS.runtime
    if runtime is None:
        device_type = ICVS.device_type
        runtime = ICVS.runtime = runtime_of(device_type, ICVS.device_num.get(device_type, 0))
    return runtime


def device_num_of(device_type: str) -> int:
    ICVS.device_type  # applies the environment's initial values
    return ICVS.device_num.get(device_type, 0)


def set_current(device_type: str, number: int | None = None) -> None:
    """Make ``(device_type, number)`` the calling thread's current device, or host
    (number 0) when PYACC_OFFLOAD makes the request fall back."""
    resolved = resolve(device_type)
    if resolved != device_type:
        device_type, number = resolved, 0
    elif number is None:
        number = device_num_of(device_type)
    check_device(device_type, number)
    ICVS.device_type = device_type
    ICVS.device_num[device_type] = number
    ICVS.runtime = None
