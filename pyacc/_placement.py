"""Data placement beyond OpenACC (API.md §10): ``acc.acquire``, ``acc.prefetch``,
``acc.wont_use``, ``acc.set_oversubscribe`` / ``acc.get_oversubscribe``.

Owns: the public spelling of StarPU's data management (``starpu_data.h``) over the
mapping runtime: ``acquire`` is ``starpu_data_acquire``/``release`` (host access ordered
against the work queued before it, by access mode), ``prefetch`` is
``starpu_data_prefetch_on_node``, ``wont_use`` is ``starpu_data_wont_use``, and
oversubscription is StarPU's eviction under memory pressure (``mapping.residency`` has the
rules). Validation and the calling thread's device and queue are decided here; the
runtime verbs (``mapping.oversubscribe``) do the rest.

``acquire`` is a single-use context manager like ``acc.data`` (``_region``; its docstring
says what an exception in the block does); it is all-or-nothing on entry: a failing copy
leaves the counters as they were.
"""

from __future__ import annotations

from pyacc.mapping import (BUS, AccError, Counter, ExecutionError, InvalidArgumentError, MapKind, MapRequest,
                     NotPresentError, UpdateDirection, UpdateItem, check_array)
from pyacc.mapping.errors import describe_array

from ._clauses import queue_of
from ._devices import current_runtime
from ._errors import report, reported
from ._region import SingleUseRegion

__all__ = ["acquire", "prefetch", "wont_use", "set_oversubscribe", "get_oversubscribe"]

#: access mode -> (copy device→host on entry, copy host→device on exit)
_MODES = {"r": (True, False), "w": (False, True), "rw": (True, True)}


class acquire(SingleUseRegion):  # noqa: N801 - a context manager spelled like the other directives
    """``with acc.acquire(a, mode="r"|"w"|"rw", async_=None) as h:`` — host code works on
    host array ``a`` (``h is a``) in a consistent state while ``a`` stays present.

    Present data: the structured count is held for the block; ``r`` copies device→host on
    entry (after the work queued before it on ``async_``'s queue; the block starts once
    the copy has arrived), ``w`` copies host→device on exit (queued on ``async_``'s queue,
    like ``update device async``), ``rw`` both; an evicted device copy is restored first
    (API.md §10). Absent data: a block that does nothing (as StarPU's acquire of data
    without a device replicate). Partly present data raises ``PartlyPresentError``.
    Leaving the block by an exception still releases it; the ``w`` copy is skipped only
    when the exception is a device error (``ExecutionError``), as for ``acc.data``.
    """

    _NAME = _WHAT = "acc.acquire"

    def __init__(self, a, mode: str = "r", *, async_=None):
        try:
            check_array(a)
            if mode not in _MODES:
                raise InvalidArgumentError(
                    f"acc.acquire: mode={mode!r} for {describe_array(a)} is not one of 'r', 'w', "
                    "'rw' (read: device→host on entry; write: host→device on exit)")
        except AccError as error:
            report(error)
            raise
        self._array = a
        self._reads, self._writes = _MODES[mode]
        self._async = async_
        self._runtime = self._queue = self._mapped = None

    def _enter(self):
        with BUS.holding():  # a profiling callback's exception waits for the entry
            runtime = self._runtime = current_runtime()
            queue = self._queue = queue_of(runtime, self._async)
            try:
                self._mapped = runtime.enter([MapRequest(MapKind.PRESENT, self._array)],
                                             Counter.STRUCTURED, queue)
            except NotPresentError:  # absent: a no-op block
                return self._array
            if self._reads:
                self._read(runtime, queue)
        return self._array

    def _opened(self) -> bool:
        return self._mapped is not None  # held: the hold must be released

    def _abandon(self, error) -> None:
        """Held, then a profiling callback raised: the hold is released here (nothing is
        written back), and an ``AccError`` is reported, before the exception propagates."""
        mapped, self._mapped = self._mapped, None
        self._runtime.exit_structured(mapped, self._queue, copy_back=False)
        if isinstance(error, AccError):
            report(error)

    def _read(self, runtime, queue) -> None:
        """device→host, and wait for it; on failure the hold is released (all or nothing)."""
        try:
            runtime.update([UpdateItem(UpdateDirection.SELF, self._array, None)], queue)
            if queue.async_value is not None:
                runtime.device.wait(queue)
        except BaseException:
            mapped, self._mapped = self._mapped, None
            runtime.exit_structured(mapped, queue, copy_back=False)
            raise

    def _leave(self, exc) -> None:
        if self._writes and not isinstance(exc, ExecutionError):
            self._runtime.update([UpdateItem(UpdateDirection.DEVICE, self._array, None)], self._queue)

    def _left(self) -> None:
        mapped, self._mapped = self._mapped, None
        self._runtime.exit_structured(mapped, self._queue, copy_back=False)


@reported
def prefetch(a, *, async_=None, if_present: bool = False) -> None:
    """Start bringing present data's device copy back into device memory (after an
    eviction) on ``async_``'s queue, ahead of its use; stamps it as recently used. A hint:
    no counter changes, and no error when it does not fit now. Absent data raises
    ``NotPresentError`` unless ``if_present``."""
    runtime = current_runtime()
    queue = queue_of(runtime, async_)
    runtime.prefetch(check_array(a, contiguous=False), queue, if_present=if_present)


@reported
def wont_use(a) -> None:
    """Hint: ``a``'s device copy will not be used soon; under memory pressure it is the
    first evicted (until its next use). Absent data: nothing happens."""
    current_runtime().wont_use(check_array(a, contiguous=False))


@reported
def set_oversubscribe(enabled: bool = True) -> None:
    """Oversubscription on the current device (API.md §10; also ``PYACC_OVERSUBSCRIBE=1``):
    when an allocation would fail, device copies not in use are evicted to runtime-owned
    host memory and restored before their next use. Off: evicted data is restored first
    (``OutOfMemoryError`` if it does not fit; oversubscription then stays on). No effect on
    ``host`` (shared memory)."""
    current_runtime().set_oversubscribe(bool(enabled))


def get_oversubscribe() -> bool:
    """Whether the current device oversubscribes its memory."""
    return bool(current_runtime().tracks_use)

