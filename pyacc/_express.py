"""The express lane's Python side (the lane itself: ``pyacc/_fastcall.c``).

Owns: loading the optional C extension ``pyacc._fastcall`` (``CALL_BASE``, the base class
of ``ComputeRegion``: the extension's ``FastCall``, or ``object`` without it;
``lane_routine``: a data routine whose plain calls enter the data lane in C;
``DATA_BASE``: the base class of ``acc.data``, the extension's ``DataRegion``, or ``object``),
``express_lane``/``set_lane`` (whether calls try their express plans), and ``plan_spec``:
what a call the Python launcher has just replayed hands the lane, so that the next such
calls repeat it in C (guide: "What a compute call costs").

Invariants:
    * The lane is configured once, at import, with what every plan reads: the thread's
      ICVs, ``os.environ``'s data and the kernel environment's keys, ``BUS.silent`` and
      ``BUS.tally_alone``, ``numpy.ndarray``; ``pyacc._devices`` tells it of every change
      of a thread's runtime or open regions' default (``watch_context``), which its
      plans remember per thread instead of reading them at each call.
    * A plan is made only from a replay whose work the lane repeats exactly
      (``ComputeMemo.express``) and whose unmapped arguments are scalars of a type.
"""

from __future__ import annotations

import _thread
import functools
import os
import sys
from typing import NamedTuple

import numpy as np

from pyacc.compiler import cpu_plans
from pyacc.compiler.kernel import KERNEL_ENV_KEYS
from pyacc.mapping import BUS, EventKind
from pyacc.mapping import inline
from pyacc.mapping.events import STAT_KEYS, STATS
from pyacc.mapping.queues import QueueSet, WorkerQueue

from ._devices import ICVS, watch_context
from ._outcome import AsyncResult

__all__ = ["CALL_BASE", "DATA_BASE", "configure_data", "enable_vectorcall", "ExpressPlan", "express_lane", "set_lane",
           "plan_spec", "configure_async", "lane_routine", "RETURNS_DEVICE_ARRAY", "RETURNS_NONE",
           "ANSWERS", "SETTLES", "enqueuer"]


GIL_HOLD_BELOW = "PYACC_GIL_HOLD_BELOW"


def gil_hold_below() -> float:
    """Seconds under which a prepared call repeated with the same arguments keeps the GIL
    for its kernel's run (``pyacc/_prepared_call.c.h``): ``$PYACC_GIL_HOLD_BELOW`` in µs
    (read at import), else 10 µs; 0: every run gives the GIL back as ``nogil`` asks.

    Raises:
        ValueError: the setting is not a number of µs ≥ 0.
    """
    below = inline.microseconds_setting(GIL_HOLD_BELOW, "a kernel's run always gives the GIL back")
    return 10e-6 if below is None else below


def _load():
    """``pyacc._fastcall``, configured, or None: not built (no C compiler at install),
    turned off (``PYACC_EXPRESS=0``), or not CPython on POSIX (it reads CPython's and
    NumPy's structs and ``os.environ``'s bytes dict)."""
    if os.environ.get("PYACC_EXPRESS", "1").strip() in ("0", "") or os.name != "posix" or \
            sys.implementation.name != "cpython":
        return None
    try:
        from . import _fastcall  # optional: the C extension, absent when not built
    except ImportError:
        return None
    # the context memo is per thread state: not for ICVs local to something else (gevent's
    # monkey-patched threading.local keeps one per greenlet, all on one thread state)
    per_thread = isinstance(ICVS, _thread._local)
    _fastcall.configure(ICVS, os.environ._data, KERNEL_ENV_KEYS, BUS.silent, BUS.tally_alone,
                        np.ndarray, per_thread)
    watch_context(_fastcall.context_changed)
    _fastcall.configure_prepared(cpu_plans.prepare, _HOLD_BELOW)  # CPU kernels' prepared calls
    return _fastcall


_HOLD_BELOW = gil_hold_below()  # (checked at import with the lane or without it)
_FASTCALL = _load()
CALL_BASE = object if _FASTCALL is None else _FASTCALL.FastCall
#: the base class of ``acc.data``: the extension's ``DataRegion`` (regions of present data
#: entered and left in C, ``pyacc/_data_region.c.h``), or ``object`` without it
DATA_BASE = object if _FASTCALL is None else _FASTCALL.DataRegion


def enable_vectorcall(region_class) -> None:
    """Calls of ``region_class``'s instances (a ``ComputeRegion`` class) take the
    vectorcall protocol of its C base (``FastCall``: no keyword dict for an ``async_``
    call); before Python 3.12 a Python subclass does not inherit it. Nothing without the
    extension."""
    if _FASTCALL is not None:
        _FASTCALL.enable_vectorcall(region_class)


def configure_data(region_class, enter, exit, clauses) -> None:
    """Tell ``acc.data``'s C base its class (``region_class``: only regions of that exact
    class are C regions, a subclass's hooks run in Python), the Python entry and exit it
    falls back to (``SingleUseRegion.__enter__``/``__exit__``) and the data clauses a
    region it enters itself may have; it reads ``BUS.active`` for REGION_ENTER and
    REGION_EXIT."""
    if _FASTCALL is not None:
        _FASTCALL.configure_data(region_class, BUS.active, int(EventKind.REGION_ENTER),
                                 int(EventKind.REGION_EXIT), enter, exit, clauses)


def configure_async(async_result) -> None:
    """Tell the lane what an ``async_`` call it runs at once returns (``AsyncResult``), and
    what it holds its queue by in C (``pyacc/_queue_take.c.h``, ``_queue_settled.c.h``): the
    exact queue classes and the kernels' run records (``inline.RUNS``, ``record_kernel``)."""
    if _FASTCALL is not None:
        _FASTCALL.configure_async(async_result, WorkerQueue, QueueSet, inline.RUNS,
                                  inline._KEPT_WITHIN, inline.record_kernel)


_LAUNCHES = STAT_KEYS.index("launch_count")  # the launch count's place in a statistics row


def express_lane() -> bool:
    """True when compute calls that repeat a replayed call take the C express lane
    (``pyacc/_fastcall.c``), False when every call takes the Python launcher."""
    return _FASTCALL is not None and _FASTCALL.is_enabled()


def set_lane(enabled: bool) -> bool:
    """Turn the lane's plans on or off (tests, benchmarks; off, no plan is armed either);
    returns the previous setting. Without the extension: nothing, False."""
    if _FASTCALL is None:
        return False
    return _FASTCALL.set_enabled(enabled)


class ExpressPlan(NamedTuple):
    """The launch-plan record: what ``FastCall._arm_plan`` (``pyacc/_fastcall.c``,
    ``new_plan``) takes. C reads its fields by name (``_fastcall.PLAN_FIELDS``, equal to
    ``ExpressPlan._fields``), so this class is their one definition."""

    owner: object          #: the ``CallPlan`` the call replayed
    nargs: int             #: positional arguments of the call
    runtime: object        #: the thread's current runtime when armed (``ICVS.runtime``)
    ranges: object         #: the table's version holder, or None (nothing mapped)
    table: object          #: the present table whose lock a held replay takes, or None
    version: object        #: the table's version when armed
    kernel: object         #: what the call launches: the device's launcher of its compiled kernel
    reads_default: bool    #: whether the enclosing ``default`` is checked
    default: object        #: that enclosing default
    env_values: tuple      #: the values of ``KERNEL_ENV_KEYS`` that chose the kernel
    launch_count: tuple    #: ``(row, index)``: the device's launch count in the statistics
    device_dict: dict      #: the device's instance dict (no launch installed on it)
    arrays: tuple          #: ``(slot, host array, device array | None)`` per mapped argument
    scalars: tuple         #: ``(slot, type)`` per scalar argument
    exact: bool            #: arrays compared by identity and layout (separate memory)
    take_at_once: object   #: ``QueueSet.take_at_once`` for ``async_`` calls, or None
    #: for ``async_`` calls on a device whose queues are not host threads (``cuda``: a
    #: queue enqueues on its stream): ``enqueue(value, device_args)`` (``enqueuer``), the
    #: call's ``AsyncResult``, or None when the Python launcher must decide; else None
    enqueue: object
    #: on separate memory (``exact``): ``CallPlan.follow`` of ``owner``, which the lane
    #: calls, the table's lock held, when the table changed since the plan's ``version``
    #: or when no plan of the region matches a call's arrays exactly but this one's layout
    #: does: the plan then takes the device arrays of the arrays' mappings as they are
    #: now (and those arrays); else None (nothing mapped: nothing to follow)
    follow: object


def plan_spec(runtime, call_plan, args, reads_default: bool, described: tuple):
    """The express plan of a call with ``args`` that replayed ``call_plan``
    on ``runtime``: what ``FastCall._arm_plan`` takes — the plan's kernel, environment
    and enclosing default (checked when ``reads_default``), the runtime and its device's
    instance dict, where the statistics count its launches, the kinds of the arguments passed as
    they are, the memo's arrays and table guard, and how an ``async_`` call takes its
    queue to run at once (``QueueSet.take_at_once``; None on devices whose queues never
    do), and on those others ``enqueue`` (``enqueuer``), which hands an ``async_`` call's
    kernel to its queue, described by ``described`` (the region's name, location and
    ``KernelInfo``, as ``Device.launch`` takes them); None where the lane would not repeat
    the replay exactly."""
    guard = call_plan.memo.express(runtime, args)
    if guard is None or not all(isinstance(kind, type) for _, kind in call_plan.scalars):
        return None
    holder, table, version, arrays, exact = guard
    env, default, _ = call_plan.key
    device = runtime.device
    take_at_once = device.queues.take_at_once if device.runs_work_at_once else None
    launch_count = (STATS.counter_row(device.identity), _LAUNCHES)
    # what the synchronous call launches (its async calls run at once only where the
    # device's launcher is the kernel itself: queues of host threads)
    kernel = device.launcher(call_plan.kernel, device.sync_queue)
    if take_at_once is not None and kernel is not call_plan.kernel:
        take_at_once = None
    if kernel is not call_plan.kernel and getattr(call_plan.kernel, "relaunchable", False):
        kernel = _relaunching(kernel, device.sync_queue)
    enqueue = None if device.runs_work_at_once else enqueuer(device, call_plan.kernel, *described)
    return ExpressPlan(call_plan, len(args), runtime, holder, table, version, kernel,
                       reads_default, default, env, launch_count, vars(device), arrays,
                       call_plan.scalars, exact, take_at_once, enqueue,
                       call_plan.follow if exact else None)


def _relaunching(kernel, queue):
    """``kernel`` (the synchronous ``queue``'s launcher of a cuda driver that only launches)
    made again from C when its arguments repeat (``compiler.cuda_relaunch``), or itself."""
    from pyacc.compiler import cuda_relaunch  # here: only cuda kernels have relaunchable drivers

    return cuda_relaunch.relaunching(kernel, queue.synchronize)


def enqueuer(device, kernel, name, where, info):
    """What an express plan on ``device`` hands an ``async_=value`` call's kernel to
    (``ExpressPlan.enqueue``): ``enqueue(value, device_args)`` launches ``kernel`` on
    queue ``value`` as the Python launcher does (``Device.launch``, with the region's
    ``name``, ``where`` and ``info``: counted, a ``Pending`` the queue runs in its order)
    and returns the call's ``AsyncResult``; None, for the Python launcher to resolve, when
    ``value`` is negative (``acc.async_sync``, an invalid one: the lane has resolved
    ``acc.async_noval`` to the thread's default queue) or its queue is not made yet (making one may fail, and takes a stream). The lane calls
    it with the replay's checks made and the table lock held, as the held replay
    launches; ``enqueue(value, device_args, waits)`` first makes the queue wait for the
    queues ``waits`` (the region's constant ``wait`` clause, a tuple of numbers, empty:
    every queue; a queue never made has nothing to wait for: :func:`_joined`), as
    ``wait_for`` does for the Python launcher. A relaunchable cuda driver is launched through its ``Relaunch`` for the
    queue (:func:`_queue_relaunch`): a call with the facts of one it kept is made again
    from C inside the queue's bookkeeping (``CudaDevice.relaunch``), no ``Pending``."""
    queues = device.queues
    relaunch_for = _queue_relaunch(device, kernel)

    def enqueue(value, device_args, waits=None):
        queue = queues.made(value) if value >= 0 else None
        if queue is None:
            return None
        if waits is not None and not _joined(device, queue, waits):
            return None
        launcher = kernel if relaunch_for is None else relaunch_for(queue)
        if launcher is not kernel and not launcher.gave_up:
            outcome = device.relaunch(launcher.again, device_args, queue, name)
            if outcome is not None:
                return AsyncResult(queue, outcome)
        return AsyncResult(queue, device.launch(launcher, device_args, queue, name=name, where=where,
                                                info=info))
    return enqueue


def _joined(device, queue, waits) -> bool:
    """``queue`` made to wait for the queues ``waits`` on the device (a region's ``wait``
    clause, §2.16.2: a tuple of numbers, empty: every queue; a queue never made has nothing
    to wait for), as ``wait_for`` does for the Python launcher; False when the join raised
    an ``Exception``: the call is then the Python launcher's, whose ``wait_for`` joins
    again and raises what it raises (outside the kernel's launch: not a kernel's failure)."""
    queues = device.queues
    try:
        device.join(queue, queues.existing() if not waits else
                    [waited for waited in map(queues.made, waits) if waited is not None])
    except Exception:
        return False
    return True


def _queue_relaunch(device, kernel):
    """For a relaunchable driver on a device that makes launches again on its asynchronous
    queues (``cuda``: ``relaunch``), ``relaunch_for(queue)``: the queue's ``Relaunch`` of
    ``kernel`` (``cuda_relaunch.relaunching``, no wait; one per queue, kept in the queue's
    ``relaunches``, so that its kept launches live as long as the stream they go to), or
    ``kernel`` itself where nothing can be made again from C; else None."""
    if not getattr(kernel, "relaunchable", False) or not hasattr(device, "relaunch"):
        return None
    from pyacc.compiler import cuda_relaunch  # here: only cuda kernels have relaunchable drivers

    def relaunch_for(queue):
        made = queue.relaunches.get(kernel)
        if made is None:
            made = queue.relaunches[kernel] = cuda_relaunch.relaunching(kernel)
        return made
    return relaunch_for


#: what a data lane's answer means to a routine (``pyacc/_routine_lane.c.h``): a device
#: array or None (``enter``); True or None (``leave``, ``update``); the answer (``present``);
#: SETTLES: not the lane's, ``acc.wait``'s: its queues checked settled in C
RETURNS_DEVICE_ARRAY, RETURNS_NONE, ANSWERS, SETTLES = range(4)


def lane_routine(function, verb: str, kind: int):
    """The data routine ``function`` as a ``LaneRoutine`` (``pyacc/_routine_lane.c.h``):
    its calls with one positional argument try the current runtime's ``lane.<verb>(a)``
    in C before ``function`` runs (no Python frame, no read of the thread's ICVs);
    ``functools.update_wrapper`` gives it ``function``'s name, docstring and
    ``__wrapped__``. A routine of kind ``SETTLES`` (``acc.wait``) instead returns at once
    from calls with plain queue numbers whose queues are settled, checked in C. Without the
    extension: ``function`` itself, which tries the lane (or the check) from Python."""
    if _FASTCALL is None:
        return function
    routine = _FASTCALL.LaneRoutine(verb, function, kind)
    functools.update_wrapper(routine, function)
    return routine
