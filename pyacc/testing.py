"""Helpers for testing code that uses pyacc's asynchronous queues.

``hold_queue(q)`` keeps queue ``q`` of the calling thread's current device from starting
any operation until the ``with`` block ends: work can be queued and observed as pending
(``acc.async_test(q)`` is False, deferred frees have not happened) without relying on
timing. Only queues that run on host threads (``host``, ``emulated``) can be held.

Do not wait on a held queue inside its own ``with`` block: the wait would never end.
"""

from __future__ import annotations

from contextlib import contextmanager

from mapping import InvalidAsyncError

from ._clauses import async_value
from ._devices import current_runtime

__all__ = ["hold_queue"]


@contextmanager
def hold_queue(q):
    """Hold asynchronous queue ``q`` (an int ≥ 0 or ``acc.async_noval``)."""
    number = async_value(q)
    if number is None:
        raise InvalidAsyncError("the synchronous queue cannot be held: its work runs at once", value=q)
    queue = current_runtime().device.queue(number)
    with queue.hold():
        yield queue
