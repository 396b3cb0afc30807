"""The runtime's error tree, and the one range notation every message uses.

Owns: the exception classes of API.md §7 (OpenACC 3.3 §5.2.2 ``acc_error_t`` codes) and
the helpers that describe arrays and host ranges in messages. ``pyacc`` re-exports these
classes; ``compiler`` has its own ``CompileError`` and never sees this module.

::

    AccError (RuntimeError)                  .code: the acc_error_t name
    ├── NotPresentError (LookupError)        not_present: absent where presence is required
    ├── PartlyPresentError                   partly_present: overlaps a mapping without lying inside it
    ├── PresentError                         present: unexpectedly present (map_data, unmap_data, free)
    ├── OutOfMemoryError (MemoryError)       out_of_memory: the device allocator is full
    ├── InvalidArgumentError (ValueError)    invalid_argument: not an array, object dtype, bad value
    │   └── ClauseError (TypeError)          an unknown clause keyword or a malformed clause value
    ├── InvalidAsyncError (ValueError)       invalid_async: an async value that is not ≥ 0, sync or noval
    ├── InvalidDataSectionError (ValueError) invalid_data_section: a non-contiguous view in a data clause
    ├── DeviceUnavailableError               device_unavailable: no device with that number
    ├── DeviceTypeUnavailableError           device_type_unavailable: unknown or unusable device type
    ├── ExecutionError                       execution: a device operation or kernel failed
    │   ├── MemoryCheckError                 PYACC_CHECK=memory: device memory touched out of
    │   │                                    bounds or after its block was freed
    │   └── RaceError                        PYACC_CHECK=race:error: two operations touch the
    │                                        same data with nothing ordering them
    ├── StaleDataError                       stale_data: PYACC_CHECK=stale:error found a missing
    │                                        update device or a lost host update
    └── ConsistencyError (AssertionError)    consistency: PYACC_CHECK found the runtime's
                                             bookkeeping wrong (a pyacc bug, or memory corrupted)
    StaleDataWarning (UserWarning)           PYACC_CHECK=stale: the same findings, as warnings
    RaceWarning (UserWarning)                PYACC_CHECK=race: a RaceError's finding, as a warning

Every error carries its facts as attributes (``name``, ``host_range``, ``mapping_range``
where they apply) and a message in one notation: ``[0x7f3a5c000000,+800]`` for a host or
device byte range, naming both ranges when two are involved, and saying what to do.
Errors pickle (``__reduce__``), so they cross process boundaries (multiprocessing, MPI).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "AccError",
    "ConsistencyError",
    "NotPresentError",
    "PartlyPresentError",
    "PresentError",
    "OutOfMemoryError",
    "InvalidArgumentError",
    "ClauseError",
    "InvalidAsyncError",
    "InvalidDataSectionError",
    "DeviceUnavailableError",
    "DeviceTypeUnavailableError",
    "ExecutionError",
    "MemoryCheckError",
    "StaleDataError",
    "StaleDataWarning",
    "RaceError",
    "RaceWarning",
    "format_range",
    "describe_array",
]


def format_range(begin: int, nbytes: int) -> str:
    """Return the range notation used in every message: ``[0x7f3a…,+nbytes]``."""
    return f"[{begin:#x},+{nbytes}]"


def describe_array(array, name: str | None = None, begin: int | None = None) -> str:
    """Describe an array for a message: name, shape, dtype and host range when known."""
    label = f"'{name}' " if name else ""
    if not isinstance(array, np.ndarray):
        return f"{label}({type(array).__name__})"
    text = f"{label}(shape {array.shape}, dtype {array.dtype}"
    if begin is not None:
        text += f", host {format_range(begin, array.nbytes)}"
    return text + ")"


class AccError(RuntimeError):
    """Base of every pyacc runtime error; ``.code`` is the OpenACC ``acc_error_t`` name.

    Args:
        message: the full, human-readable message.
        **facts: attributes to attach (``name``, ``host_range``, ``mapping_range`` ...).
    """

    code = "other"

    def __init__(self, message: str, **facts):
        super().__init__(message)
        self.message = message
        self._facts = facts
        for key, value in facts.items():
            setattr(self, key, value)

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self._facts))


def _rebuild(cls, message, facts):
    return cls(message, **facts)


class NotPresentError(AccError, LookupError):
    """Data that must be present on the device is not (``present`` clause, ``update``,
    ``host_data`` without ``if_present``). Map it first (``acc.copyin``, ``acc.data``)."""

    code = "not_present"


class PartlyPresentError(AccError):
    """A host range overlaps a mapping without lying inside it (it extends before or after
    the mapping, covers it, or spans several). OpenACC 3.3 §2.7.3. Adjacent mappings are
    never merged: map the whole array once, then use views of it."""

    code = "partly_present"


class PresentError(AccError):
    """Data is present where it must not be: ``map_data`` over mapped data, ``unmap_data``
    of data not mapped by ``map_data`` or still held by a structured region, ``free`` of
    device memory that is mapped (OpenACC 3.3 §3.2.21–3.2.22)."""

    code = "present"


class OutOfMemoryError(AccError, MemoryError):
    """The device's allocator cannot satisfy a request; nothing of the directive is left
    mapped. Free or unmap data, or raise the capacity (``PYACC_EMULATED_MEMORY``)."""

    code = "out_of_memory"


class InvalidArgumentError(AccError, ValueError):
    """An argument is not acceptable: not a numpy array, object dtype, a device array of
    another device, a size that does not fit."""

    code = "invalid_argument"


class ClauseError(InvalidArgumentError, TypeError):
    """An unknown clause keyword, or a clause value of the wrong kind."""


class InvalidAsyncError(AccError, ValueError):
    """An async value other than an int ≥ 0, ``acc.async_noval`` or ``acc.async_sync``
    (OpenACC 3.3 §2.16)."""

    code = "invalid_async"


class InvalidDataSectionError(AccError, ValueError):
    """A data clause or data routine got a view that is neither C- nor F-contiguous
    (OpenACC 3.3 §2.7.1). Pass the whole array, a contiguous slice, or use ``update``,
    which accepts strided views of present data."""

    code = "invalid_data_section"


class DeviceUnavailableError(AccError):
    """No device with the requested number exists for the device type."""

    code = "device_unavailable"


class DeviceTypeUnavailableError(AccError):
    """The device type is unknown, or known but unusable here (e.g. ``cuda`` without a GPU
    or without CuPy); the message says which and what is missing."""

    code = "device_type_unavailable"


class ExecutionError(AccError):
    """A device operation or a kernel failed; device data touched by it may be garbage."""

    code = "execution"


class MemoryCheckError(ExecutionError):
    """``PYACC_CHECK=memory`` (emulated device, like compute-sanitizer's memcheck): device
    memory was written outside its block (a guard zone changed), after its block was freed
    (a poisoned block changed), or a kernel or copy touched a block that is not allocated.
    Raised at the next check point (after a kernel or copy, at a wait, a directive's end).

    Attributes: ``name`` (the array, when known), ``block`` (``(begin, nbytes)`` device
    range of the block), ``touched`` (``(begin, nbytes)`` of the bytes found changed or
    touched), ``findings`` (every finding's text)."""


class StaleDataError(AccError):
    """``PYACC_CHECK=stale:error``: a compute region read device data whose host copy
    changed since the last transfer (a missing ``update device``), or a copy back was
    about to overwrite host changes never sent to the device (a lost host update).
    Raised once the action that found it is complete. Attributes: ``name``, ``problem``
    (``"missing update device"`` or ``"lost host update"``)."""

    code = "stale_data"


class StaleDataWarning(UserWarning):
    """``PYACC_CHECK=stale``: a missing ``update device`` or a lost host update (see
    ``StaleDataError``); the message names the array, where it was used and the last
    transfer of its mapping."""


class RaceError(ExecutionError):
    """``PYACC_CHECK=race:error``: an operation (compute construct, update, data copy,
    host access through ``acc.acquire``) touches data that unfinished work on another
    queue — or on the synchronous queue of another thread — writes, or writes data that
    such work reads, and no wait orders the two (OpenACC 3.3 §2.16: work on different
    queues runs in any order). Raised once the action that found it is queued or done.
    Attributes: ``name`` (the array), ``operation`` and ``other`` (the two operations,
    with their file:line), ``queue`` and ``other_queue`` (their async values, None for
    the synchronous queue), ``device_range`` (``(begin, nbytes)`` of the bytes both
    touch)."""


class RaceWarning(UserWarning):
    """``PYACC_CHECK=race``: the finding of a ``RaceError``, as a warning at the user's
    line (the message names both operations, the array and the fix)."""


class ConsistencyError(AccError, AssertionError):
    """The consistency checker (``PYACC_CHECK=1``) found the present table, a counter or
    the device memory accounting different from what the directives so far imply. Not
    an OpenACC error code: it reports a bug in pyacc (or corrupted runtime state)."""

    code = "consistency"
