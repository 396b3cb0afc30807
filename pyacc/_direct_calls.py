"""The direct calls of a compute region: the Python launcher's entry and its short paths
(API.md §6; OpenACC 3.3 §2.5, §2.16).

Owns :class:`DirectCalls`, the half of ``ComputeRegion`` (``_compute``) that every call the
express lane does not take enters first (``_call_slow``): a synchronous or asynchronous
call of a region whose clauses are constants, with nobody observing events, goes straight
to ``_launch`` (``_call_direct``; ``_launch_direct`` for a region with sections or structs)
without reading clauses or holding the event bus; its arguments given by name or left to
their defaults are bound first (``_bind``); any other call takes the full path
(``ComputeRegion._call``).

Invariants:
    * A direct call is observably the full path's: the same queue, waits, data actions and
      errors (reported through ``_errors.report``, with a section hint).
    * A direct call's replays arm the express lane (``ComputeRegion._arm_express``); the
      lane's calls repeat them in C.
"""

from __future__ import annotations

from ._call_inputs import condition_holds, constant_queues
from ._clauses import async_noval, is_sync, wait_for
from ._devices import ICVS, current_runtime
from ._errors import report
from ._outcome import AsyncResult, add_section_hint
from pyacc.mapping import BUS, AccError

__all__ = ["DirectCalls"]

_SILENT = BUS.silent


class DirectCalls:
    """The Python launcher's entry and its direct paths, mixed into ``ComputeRegion`` (the
    module docstring); ``_call``, ``_launch``, ``_matching_call_plan`` and
    ``_route_direct`` are the region's own."""

    __slots__ = ()

    def _call_slow(self, /, *args, async_=None, wait=None, if_=None, **kwargs):
        """The Python launcher: every call the express lane does not take (``__call__``
        itself without it). (``self`` positional-only: a kernel parameter may be named so.)"""
        # (``_direct`` read first: the clauses are set before it, at the first call)
        direct = self._direct and _SILENT[0]
        if kwargs or len(args) != self._arity:  # arguments by name, defaults (TypeError)
            args = self._bind(args, kwargs)
        waits = self._clause_wait
        if direct and wait is not None:  # the call's own wait replaces the clause's (§2.16.2)
            given = constant_queues(None, wait)
            direct, waits = given is not None, given and given[1]
        if direct and if_ is None and self._condition is not None:  # (false: the host's)
            direct = condition_holds(self._condition, args)
        direct = direct and (if_ is None or if_ is True)  # (if_=True: the device, §2.5.6)
        call_async = async_  # (the full path reads the clauses itself)
        if async_ is None:  # the construct's own async clause, when constant and direct
            async_ = self._clause_async
        elif is_sync(async_):  # acc.async_sync: synchronous, whatever the clause (§2.16.1)
            async_ = None
        if type(async_) is int and async_ == async_noval:  # the thread's default queue
            async_ = ICVS.default_async
        if direct and (async_ is None or type(async_) is int and async_ >= 0):
            # the common call: constant clauses, nobody observing events; exact as the full
            # path (a subscriber that comes now sees the next call)
            return self._call_direct(args, async_, waits)
        if self._special_direct and async_ is None and wait is None and if_ is None and _SILENT[0]:
            # sections that cover their whole arrays, or structs, at this call: a direct
            # call of this region or of the struct layout's variant
            routed = self._route_direct(args)
            if routed is not None:
                return routed[0]._launch_direct(routed[1])
        return self._call(args, call_async, wait, if_)

    def _call_direct(self, args, number, waits, read_free=True):
        """The direct call on the synchronous queue (``number`` None) or asynchronous queue
        ``number``, after the queues ``waits`` (None: no wait; constant clauses, nobody
        observing events): the value, or an ``AsyncResult``. Its replays arm the express
        lane, which repeats them in C (an async one runs at once when its queue is idle:
        ``_ran_at_once``). ``read_free``: the free parameters' values are still to read."""
        try:
            if read_free and self._read_free is not None:
                args = (*args, *self._read_free())
            runtime = ICVS.runtime or current_runtime()
            device = runtime.device
            queue = device.sync_queue if number is None else device.queue(number)
            wait_for(runtime, waits, queue)  # (None: no wait)
            value = self._launch(runtime, args, queue, None, True,
                                 self._matching_call_plan(runtime, args))
            return value if number is None else AsyncResult(queue, value)
        except AccError as error:
            add_section_hint(error)
            report(error)
            raise

    def _launch_direct(self, args):
        """The direct call of a region whose sections cover their whole arrays at this
        call (``WholeSections``), or of a struct layout's variant: ``args`` hold the free
        values already (``_route_direct``)."""
        return self._call_direct(args, None, None, read_free=False)
