"""Device types, device numbers and the per-thread ICVs that select the current device.

Owns: the spelling of device types (``host``, ``emulated``, ``cuda`` and the aliases
``multicore``, ``nvidia``, ``not_host``), the selection of a device through the registry
of device runtimes (``_registry``: one per device, created on first use, shared by all
threads; the program's end), and the internal control variables of OpenACC 3.3 §2.3:
``acc-current-device-type-var``, ``acc-current-device-num-var`` and
``acc-default-async-var``, one copy per host thread.

Every change of a thread's ``ICVS.runtime``, ``ICVS.region_stack`` or of what its open
data regions lend the compute calls inside them (the innermost ``default(...)``, the
``deviceptr(...)`` arrays: ``RegionStack``; ``enclosing_deviceptr``) is announced before
and after it (``watch_context``): the express lane remembers them per thread between
calls.

``"default"`` as a device type (``acc_device_default``) is the calling thread's current
device type, whose initial value ``ACC_DEVICE_TYPE`` sets (else ``default_type()``, the
implementation's): ``canonical_type`` (OpenACC 3.3 §4.1, §3.2.2; API.md §6.2).

It applies the offload policy, ``PYACC_OFFLOAD`` (``_offload``: what happens when the
requested device type has no usable device here), each time a selection is resolved.

The cuda device type is probed once, at first need (``_cuda_probe``), and a cuda device
is created, with the driver's checks, by ``_registry``; so is the program's end (an
``atexit`` handler waits for every queue, then ends the ``acc.declare`` lifetimes).

Environment (read once, at first use, OpenACC 3.3 ch. 4): ``ACC_DEVICE_TYPE``,
``ACC_DEVICE_NUM``, ``PYACC_EMULATED_DEVICES`` (default 1), ``PYACC_TESTING_FAKE_CUDA``.

After ``os.fork()`` (``os.register_at_fork``) the child forgets the parent's queues —
their worker threads do not exist in the child, so waiting on them would hang — and
starts with new, empty ones; work the parent had queued is the parent's (it is neither
run nor waited for in the child, and blocks it would have freed stay allocated there).
Table locks are re-created in the child, in case another thread of the parent held one
at the fork. A child forked after pyacc initialised CUDA in the parent (a cuda device was
created; ``_cuda_probe``) is a bad fork (API.md §12): its cuda runtimes are dropped, the
forking thread's current runtime is forgotten when it was one of them (announced through
``watch_context``, so no express plan launches on it), ``get_num_devices("cuda") == 0``
with a reason naming the cause and the fixes, and selecting cuda — explicitly, through
``ACC_DEVICE_TYPE``, as the default type, or as the thread's current type at its next
use — raises ``DeviceTypeUnavailableError`` with it (or falls back to host under
``PYACC_OFFLOAD=default``). The default type stays cuda there: a program that ran on
the GPU never silently moves to the CPU in its children.

Invariants:
- internal code never reads the ICVs except through ``current_runtime()`` and
  ``default_async()``; everything below receives its device and queue explicitly;
- a device's runtime object lives for the whole process (a bad fork's child drops its
  cuda runtimes); ``shutdown`` empties it.
"""

from __future__ import annotations

import difflib
import os
import threading
import warnings

import numpy as np

from pyacc.mapping import DeviceTypeUnavailableError, InvalidArgumentError, MappingRuntime
from pyacc.mapping import _probe
from pyacc.mapping.devices.cuda_layout import extent, interface_layout

from . import _cuda_probe
from ._registry import REGISTRY as _REGISTRY, unavailable as _unavailable
from ._offload import OFFLOAD_POLICIES, OffloadFallbackWarning, _Fallback, _user_stacklevel, offload_policy

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
    "enclosing_deviceptr",
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


# == offload policy (PYACC_OFFLOAD, in ``_offload``) ==========================================
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


def default_non_host_type() -> str:
    """``not_host``: cuda when usable (or in a bad fork's child: API.md §12), else emulated."""
    return "cuda" if _REGISTRY.count("cuda") or _cuda_probe.forked_after_cuda() else "emulated"


def default_type() -> str:
    """The implementation's default device type, the initial value of every thread's
    device type when ``ACC_DEVICE_TYPE`` is unset (or ``default``): cuda when a usable
    GPU is found, else host (API.md §1); ``canonical_type("default")`` is the thread's
    current type, which starts here;
    always cuda under PYACC_OFFLOAD=mandatory (selecting it then fails without a GPU),
    and in the child of a fork after the parent initialised CUDA (selecting it raises the
    fork's reason: a GPU program's children never silently run on the CPU, API.md §12)."""
    if _REGISTRY.count("cuda") or offload_policy() == "mandatory" or _cuda_probe.forked_after_cuda():
        return "cuda"
    return "host"


def canonical_type(device_type) -> str:
    """Map a device-type spelling (case-insensitive, aliases) to host/emulated/cuda.

    ``"default"`` (``acc_device_default``) is the default device type of the calling
    thread: the type ``ACC_DEVICE_TYPE`` set at first use (OpenACC 3.3 §4.1), else the
    implementation's (``default_type``), or the type an earlier ``set_device_type``
    (``set_device_num``, ``init``) selected (§3.2.2, §3.2.7: ``acc-current-device-type-var``,
    §2.3). So ``acc_init(acc_device_default)`` never switches device, and
    ``get_num_devices("default")`` counts the devices of that type (API.md §6.2).

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
        return ICVS.device_type  # acc-current-device-type-var (OpenACC 3.3 §2.3, §4.1)
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


def runtime_of(device_type: str, number: int) -> MappingRuntime:
    if device_type != "host" and offload_policy() == "disabled":
        check_device(device_type, number)  # raises: the runtime may predate the policy
    return _REGISTRY.runtime(device_type, number)


def live_runtimes(device_type: str) -> list[MappingRuntime]:
    return _REGISTRY.live(device_type)


# == fork =================================================================================
def _after_fork_in_child() -> None:
    _REGISTRY.after_fork_in_child()
    runtime = ICVS.runtime  # the forking thread's (the child's only thread)
    if runtime is not None and runtime.device.type_name == "cuda" and _cuda_probe.forked_after_cuda():
        ICVS.runtime = None  # the next use resolves again and raises (_select_runtime)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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
        if text and text.lower() != "default":  # "default": the implementation's (§4.1)
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


def _nobody() -> None:
    """No express lane is listening (``watch_context``)."""


#: called after every change of what a compute call's express plan remembers of a
#: thread's ICVs: the current runtime, the open regions' default (``watch_context``)
_context_changed = _nobody


def watch_context(callback) -> None:
    """Call ``callback()`` before and after each change of any thread's ``ICVS.runtime``,
    default queue (``ICVS.default_async``) or of what its open regions lend the calls
    inside them (the innermost ``default(...)``, the ``deviceptr(...)`` arrays): the
    express lane (``pyacc/_fastcall.c``) then checks its context again instead of
    remembering it. One watcher (a second replaces the first)."""
    global _context_changed
    _context_changed = callback


class RegionStack(list):
    """A thread's open ``acc.data`` regions, innermost last (exits need not be LIFO), and
    what compute calls inside them inherit, kept by ``push``/``remove_region`` so that a
    call reads each in one attribute access:

    - ``innermost_default``: the ``default(...)`` of the innermost one that has one (None);
    - ``deviceptrs``: the device ranges ``(low, high, array)`` of the open regions'
      ``deviceptr(...)`` arrays, innermost region first (``()`` when none has one):
      ``deviceptr`` on a data construct applies to the constructs inside it (OpenACC 3.3
      §2.7.4; API.md §6.2), so a compute call passes such an array, or a view inside one,
      to its kernel as it is (``enclosing_deviceptr``).

    Each change of either is announced through ``watch_context`` (before and after it), as
    every change of what the express lane may have remembered of the thread's context.
    A region's ``deviceptr`` attribute lists its arrays (empty under ``if(false)``)."""

    __slots__ = ("innermost_default", "deviceptrs")

    def __init__(self):
        super().__init__()
        self.innermost_default = None
        self.deviceptrs = ()

    def push(self, region) -> None:
        self.append(region)
        self._refresh(region)

    def remove_region(self, region) -> None:
        """Remove ``region`` (by identity, from the innermost end)."""
        for index in range(len(self) - 1, -1, -1):
            if self[index] is region:
                del self[index]
                break
        self._refresh(region)

    def _refresh(self, changed) -> None:
        """After ``changed`` was pushed or removed: the ranges are computed again only
        when it has ``deviceptr`` arrays (a data region without costs one scan for its
        ``default``, and none when it has no ``default`` either: a region without one
        changes no innermost default by coming or going)."""
        lends = bool(getattr(changed, "deviceptr", ()))
        if not lends and changed.default is None:
            return
        innermost = next(
            (region.default for region in reversed(self) if region.default is not None), None)
        if innermost is self.innermost_default and not lends:
            return
        deviceptrs = tuple(_device_range(array) for region in reversed(self)
                           for array in getattr(region, "deviceptr", ())) if lends else self.deviceptrs
        _context_changed()  # (before and after: see _ThreadICVs.__setattr__)
        try:
            self.innermost_default = innermost
            self.deviceptrs = deviceptrs
        finally:
            _context_changed()

    def encloses_device_range(self, low: int, high: int) -> bool:
        """Whether device bytes ``[low, high)`` lie inside one open region's
        ``deviceptr`` array."""
        for begin, end, _ in self.deviceptrs:
            if begin <= low and high <= end:
                return True
        return False


def _device_range(array) -> tuple:
    """``(low, high, array)``: the bytes a ``deviceptr`` array spans on its device."""
    _, low, high = _extent(array)
    return low, high, array


def _extent(array) -> tuple[int, int, int]:
    """``(data, low, high)`` of a numpy array (host memory, or ``emulated``'s device
    memory) or of an object exporting ``__cuda_array_interface__``."""
    if isinstance(array, np.ndarray):
        return _probe.extent(array)
    data, shape, dtype, strides = interface_layout(array.__cuda_array_interface__)
    return extent(data, shape, dtype.itemsize, strides)


def enclosing_deviceptr(array) -> bool:
    """Whether ``array`` lies (by its device range: a view counts) inside a
    ``deviceptr(...)`` array of one of the calling thread's open ``acc.data`` regions:
    a compute call inside them passes it to its kernel as it is, never as host data
    (OpenACC 3.3 §2.7.4: ``deviceptr`` on a data construct applies to the constructs
    inside it; API.md §6.2). One attribute test when no open region has ``deviceptr``."""
    stack = ICVS.region_stack
    if not stack.deviceptrs:
        return False
    try:
        _, low, high = _extent(array)
    except (AttributeError, TypeError, KeyError, ValueError):
        return False  # not an array (a scalar argument)
    if high == 0 and not isinstance(array, np.ndarray):
        return True  # a device array without elements (CuPy gives it no address): as it is
    return stack.encloses_device_range(low, high)


class _ThreadICVs(threading.local):
    """One copy per host thread; initial values come from the environment at first use."""

    #: the attributes the express lane remembers per thread (``watch_context``): an
    #: express plan's runtime and region stack, the default queue of an ``async_noval``
    _WATCHED = frozenset({"runtime", "region_stack", "default_async"})

    def __init__(self):
        self._device_type: str | None = None
        self.device_num: dict[str, int] = {}
        self.default_async = 0
        self.runtime: MappingRuntime | None = None  # cache of the current device's runtime
        self.region_stack = RegionStack()  # the open data regions (default, deviceptr arrays)

    def __setattr__(self, name, value) -> None:
        # the express lane is told before the store (a signal handler's call during it
        # checks again) and after it, in a ``finally``: a KeyboardInterrupt between the
        # store and the next bytecode must not leave the lane remembering the old value
        if name not in self._WATCHED:
            return super().__setattr__(name, value)
        _context_changed()
        try:
            super().__setattr__(name, value)
        finally:
            _context_changed()

    def __delattr__(self, name) -> None:
        _context_changed()
        try:
            super().__delattr__(name)
        finally:
            _context_changed()

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


def current_runtime() -> MappingRuntime:
    """The runtime of the calling thread's current device: the one spelling every caller
    uses (the cached runtime, else ``_select_runtime``)."""
    return ICVS.runtime or _select_runtime()


def _select_runtime() -> MappingRuntime:
    device_type = ICVS.device_type
    if device_type == "cuda" and _cuda_probe.forked_after_cuda():
        set_current("cuda")  # API.md §12: raises the fork's reason, or falls back to host
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
