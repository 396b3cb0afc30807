"""The one place that validates the user's spellings of clauses and async values.

Owns: keyword checking for the directives (an unknown clause is a ``ClauseError`` that
suggests the closest valid one, never swallowed), normalising a clause value (one array
or a list of arrays) into ``MapRequest`` values, and resolving ``async_`` / ``wait``
arguments to device queues (OpenACC 3.3 §2.16).
"""

from __future__ import annotations

import difflib
import numbers

import numpy as np

from pyacc.compiler.clause_kinds import PRESENT_OR
from pyacc.mapping import ClauseError, InvalidAsyncError, MapKind, MapRequest, check_array

__all__ = [
    "async_sync",
    "async_noval",
    "check_clauses",
    "is_sync",
    "is_noval",
    "arrays_of",
    "requests_of",
    "async_value",
    "queue_of",
]

#: ``acc_async_sync``: run synchronously (the default); GCC's value
async_sync = -2
#: ``acc_async_noval``: the calling thread's default queue; GCC's value
async_noval = -1


def check_clauses(directive: str, given: dict, allowed: tuple[str, ...], *, data_clauses=()) -> None:
    """Raise ``ClauseError`` for a keyword that is not a clause of ``directive``.

    Args:
        directive: the directive's name, for the message.
        given: the keywords the user passed.
        allowed: every clause the directive accepts.
        data_clauses: when not empty, at least one of these (or ``default``) must be
            given (OpenACC 3.3 §2.6.5, §2.6.6).
    """
    for keyword in given:
        if keyword not in allowed:
            hint = difflib.get_close_matches(keyword, allowed, n=1)
            raise ClauseError(
                f"{directive}: unknown clause {keyword!r}"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; {directive} accepts {', '.join(allowed)}",
                clause=keyword,
            )
    if data_clauses and given.keys().isdisjoint(data_clauses) and "default" not in given:
        raise ClauseError(
            f"{directive} needs at least one data clause ({', '.join(data_clauses)})",
            clause=None,
        )


def arrays_of(value, clause: str = "") -> list:
    """A clause value as a list: one array, or a list/tuple of arrays; None is empty
    (``clause``: its name, for the reader of the call)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def requests_of(kind: MapKind, value, *, contiguous: bool = True, zero: bool = False) -> list[MapRequest]:
    """Validated ``MapRequest`` values for the arrays of one clause (``zero``: its create
    action zero-fills, ``create(zero:)``)."""
    return [MapRequest(kind, check_array(array, contiguous=contiguous), None, zero)
            for array in arrays_of(value)]


def canonical_clauses(clauses: dict) -> dict:
    """``clauses`` with the ``present_or_`` aliases (the compiler's table, ``PRESENT_OR``)
    spelled as their clause (lists of one clause joined)."""
    if PRESENT_OR.keys().isdisjoint(clauses):
        return clauses
    out: dict = {}
    for keyword, value in clauses.items():
        keyword = PRESENT_OR.get(keyword, keyword)
        out[keyword] = arrays_of(out[keyword]) + arrays_of(value) if keyword in out else value
    return out


def async_value(value) -> int | None:
    """Resolve an ``async_`` argument to a queue number, or None for synchronous.

    ``None`` and ``async_sync`` are synchronous; ``async_noval`` is the calling thread's
    default queue (``acc.set_default_async``); an int ≥ 0 is that queue.

    Raises:
        InvalidAsyncError: anything else (OpenACC 3.3 §2.16.1).
    """
    if value is None or is_sync(value):
        return None
    if not _is_int(value):
        raise InvalidAsyncError(
            f"invalid async value {value!r}: use an int >= 0 (a queue), acc.async_noval or "
            "acc.async_sync",
            value=value,
        )
    if value == async_noval:
        from ._devices import ICVS  # local: the ICVs import the device registry

        return ICVS.default_async
    if value < 0:
        raise InvalidAsyncError(
            f"invalid async value {value}: negative values other than acc.async_noval "
            f"({async_noval}) and acc.async_sync ({async_sync}) are not queues",
            value=value,
        )
    return int(value)


def wait_values(value) -> list[int | None]:
    """Resolve a ``wait`` argument (one async value or a list) to queue numbers."""
    if value is None:
        return []
    values = value if isinstance(value, (list, tuple)) else [value]
    return [async_value(v) for v in values]


def queue_of(runtime, value):
    """The device queue for an ``async_`` argument on ``runtime``'s device (``None``, the
    common case, returns the synchronous queue without further checks)."""
    if value is None:
        return runtime.device.sync_queue
    return runtime.device.queue(async_value(value))


def wait_for(runtime, wait, queue) -> None:
    """Honour a ``wait`` clause (OpenACC 3.3 §2.16.2): the operation, about to be queued
    on ``queue``, starts only after everything already queued on the listed queues (an
    empty list or ``True``: all queues) has run. On an asynchronous queue this is a
    device-side join (the queue waits for events of the others) and the host goes on;
    on the synchronous queue the host waits."""
    if wait is None:  # no wait clause
        return
    device = runtime.device
    if wait is True or (isinstance(wait, (list, tuple)) and not wait):
        others = device.existing_queues()
    else:
        others = [device.queue(number) for number in wait_values(wait)]
    device.join(queue, others)


def is_sync(value) -> bool:
    """Whether an ``async_`` value is ``acc.async_sync``: synchronous, as no ``async_`` is,
    and given at a call it replaces the region's ``async`` clause (OpenACC 3.3 §2.16.1)."""
    return _is_int(value) and value == async_sync


def is_noval(value) -> bool:
    """Whether an ``async_`` value is ``acc.async_noval``: the calling thread's default queue
    (``acc.set_default_async(acc.async_noval)`` restores the initial one)."""
    return _is_int(value) and value == async_noval


def _is_int(value) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, bool)
