"""The data directives (API.md §4; OpenACC 3.3 §2.6.5, §2.6.6, §2.8, §2.14.4).

Owns: ``data`` (a structured data region, a single-use context manager: ``_region``),
``enter_data``, ``exit_data``, ``update``, ``host_data`` and ``declare``. Each validates its clauses in one place
(``_clauses``), builds ``MapRequest`` values, and calls one runtime verb on the calling
thread's current device; each is all-or-nothing.
"""

from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager

import numpy as np

from pyacc.mapping import (
    BUS,
    AccError,
    ClauseError,
    Counter,
    EventKind,
    ExecutionError,
    InvalidArgumentError,
    MapKind,
    Mapped,
    MapRequest,
    UpdateDirection,
    UpdateItem,
    check_array,
)
from pyacc.mapping.plan import not_present, partly_present

from ._attach import attach, checked_struct, detach, structs_of
from ._clauses import arrays_of, canonical_clauses, check_clauses, queue_of, requests_of, wait_for
from ._devices import ICVS, current_runtime
from ._directive_text import with_text
from ._errors import report, reported
from ._express import DATA_BASE, configure_data
from ._region import SingleUseRegion

__all__ = ["data", "enter_data", "exit_data", "update", "host_data", "declare"]

_DATA_CLAUSES = ("copy", "copyin", "copyout", "create", "no_create", "present", "deviceptr",
                 "create_zero", "copyout_zero")
#: ``create(zero:)``, ``copyout(zero:)`` as keywords: their create action zero-fills the new
#: device memory (OpenACC 3.3 §2.7.8, 2.7.9)
_ZEROED = {"create_zero": MapKind.CREATE, "copyout_zero": MapKind.COPYOUT}
_CONTROL = ("if_", "async_", "wait")
_DATA_ALLOWED = _DATA_CLAUSES + ("default",) + _CONTROL  # every clause of acc.data
_KIND_OF = {kind.value: kind for kind in MapKind}
_HOLDING = BUS.holding()  # (one object: ``with`` it costs no call)
_ACTIVE = BUS.active
_REGION_ENTER = int(EventKind.REGION_ENTER)
_REGION_EXIT = int(EventKind.REGION_EXIT)


class data(*((SingleUseRegion,) if DATA_BASE is object else (DATA_BASE, SingleUseRegion))):
    """A structured data region: ``with acc.data(copyin=[a], copy=[b]) as region:``.

    Clauses: ``copy``, ``copyin``, ``copyout``, ``create``, ``no_create``, ``present``,
    ``deviceptr`` (each one array or a list), ``default`` (``"none"`` or ``"present"``,
    applied to compute regions called inside), ``if_``, ``async_``, ``wait``.

    ``deviceptr`` arrays must be memory of the current device (checked at entry); while
    the region is open, compute regions called inside it on the same thread pass them —
    and any view inside them — to their kernels as they are, never as host data (OpenACC
    3.3 §2.7.4; API.md §6.2): the region pushes itself on the thread's ``RegionStack``,
    whose ``deviceptrs`` ``pyacc._devices.enclosing_deviceptr`` reads.

    The arrays are fixed when the region object is created (OpenACC 3.3 §2.7.1: a
    subarray is evaluated once), entry actions run at ``__enter__`` (structured counts
    +1, absent data allocated and copied in), exit actions at ``__exit__``.

    On an exception inside the block the exit actions still run, so every structured
    count is released, and the exception propagates. Data is copied back as on a normal
    exit — the device data is valid after a host-side exception — unless the exception is
    an ``acc.ExecutionError`` (a device failure: its data may be garbage). If an exit
    action itself fails, that error is raised with the block's exception as its context.

    A profiling callback that raises during the entry (``enter_data``,
    ``data_construct_start`` ...) makes ``__enter__`` raise after the region has been
    left again (its exit actions
    run): the block does not run and no count is left behind.

    A region object is single-use (like ``trio.CancelScope``): entering it twice raises
    ``InvalidArgumentError``. ``async_`` applies to the entry and exit operations only;
    the block runs synchronously (§2.6.5).

    With the C extension, the constructor, ``__enter__`` and ``__exit__`` are its base
    class's (``DATA_BASE``, ``pyacc/_data_region.c.h``): a region of data clauses only
    whose arrays are all present is entered and left in C (the data lane's ``join`` and
    ``part``), and any other goes through the methods below, with the same outcome.
    """

    _NAME = "acc.data"
    _WHAT = "acc.data region"
    #: what a region lends compute calls inside it (``RegionStack``): none for a region
    #: entered in C, which has data clauses only (set per region by ``_setup``)
    default = None
    deviceptr = ()

    def _init(self, clauses) -> None:
        """The Python constructor (the C base calls it for any region it does not enter
        itself): validate the clauses, errors reported."""
        try:
            self._setup(clauses)
        except AccError as error:
            report(error)
            raise

    def _with_text(self, clause_string, clauses) -> dict:
        """The keyword clauses of ``acc.data("copyin(a[0:n]) copy(b)", **keywords)`` (the
        C constructor asks for them), errors reported."""
        try:
            return with_text("acc.data", clause_string, clauses or {})
        except AccError as error:
            report(error)
            raise

    def _exit_joined(self, stack, joined, exc) -> None:
        """The exit of a region the C base entered (``stack``: the region stack it is
        on, ``joined``: the entries the lane joined), when the lane's ``part`` declines
        because a lifetime ends: the Python exit (copy back, free) of those entries."""
        runtime = self._runtime
        self._setup(self._clauses)  # valid: the C base checked every array as check_array does
        self._runtime, self._queue = runtime, runtime.device.sync_queue
        self._joined, self._stack, self._state = joined, stack, "done"
        self._exit(exc)

    def _setup(self, clauses) -> None:
        clauses = canonical_clauses(clauses)
        check_clauses("acc.data", clauses, _DATA_ALLOWED, data_clauses=_DATA_CLAUSES)
        self.default = _check_default(clauses.get("default"))
        self._enabled = bool(clauses.get("if_", True))
        self._async = clauses.get("async_")
        self._wait = clauses.get("wait")
        self._requests = []
        self._deviceptrs = arrays_of(clauses.get("deviceptr"), "deviceptr")
        #: what compute regions inside inherit (OpenACC 3.3 §2.7.4: deviceptr on a data
        #: construct applies to the constructs inside it; ``RegionStack.deviceptrs``)
        self.deviceptr = tuple(self._deviceptrs) if self._enabled else ()
        if self._enabled:
            for keyword, value in clauses.items():
                if keyword in _KIND_OF or keyword in _ZEROED:
                    self._requests += _clause_requests(keyword, value)
        self._runtime = None
        self._queue = None
        self._mapped = []
        #: the arrays the data lane may join (``runtime.lane.join``: a synchronous region
        #: with data clauses only), and the entries it joined (None: the Python verbs)
        self._arrays = [request.array for request in self._requests] if (
            self._requests and self._async is None and self._wait is None and not self._deviceptrs) else None
        self._joined = None
        self._stack = None  # the thread's stack of open regions this region is on

    def _enter(self):
        with _HOLDING:  # a profiling callback's exception waits for the entry
            runtime = self._runtime = current_runtime()
            queue = self._queue = queue_of(runtime, self._async)
            if self._enabled:
                for device_array in self._deviceptrs:
                    runtime.device.extent_of(device_array)  # must be this device's memory
                if self._wait is not None:
                    wait_for(runtime, self._wait, queue)
                if self._arrays is not None:  # present data: one C call (``_lane_regions.c.h``)
                    self._joined = runtime.lane.join(self._arrays)
                if self._joined is None:
                    self._mapped = runtime.enter(self._requests, Counter.STRUCTURED, queue,
                                                 at_once=False)  # API.md §10
            self._stack = ICVS.region_stack
            self._stack.push(self)
            if _ACTIVE[_REGION_ENTER]:
                _publish_region(EventKind.REGION_ENTER, runtime, "data")
        return self

    def _opened(self) -> bool:
        return self._stack is not None  # on the thread's stack: its exit actions must run

    def _leave(self, exc) -> None:
        # from the stack of the thread that entered it (exits need not be LIFO)
        self._stack.remove_region(self)
        joined = self._joined
        if joined is not None:  # no lifetime ends: one C call; else the full exit
            if self._runtime.lane.part(joined):
                return
            self._mapped = [Mapped(request, entry) for request, entry in zip(self._requests, joined)]
        self._runtime.exit_structured(self._mapped, self._queue,
                                      copy_back=not isinstance(exc, ExecutionError))

    def _left(self) -> None:
        if _ACTIVE[_REGION_EXIT]:
            _publish_region(EventKind.REGION_EXIT, self._runtime, "data")

    def device(self, a):
        """The device array of ``a`` on this region's device, like ``acc.deviceptr(a)``."""
        runtime = self._runtime or current_runtime()
        check_array(a, contiguous=False)
        return runtime.deviceptr(a)


def _construct(self, clause_string=None, /, **clauses) -> None:
    self._init(clauses if clause_string is None else self._with_text(clause_string, clauses))


if DATA_BASE is object:  # no C base: the constructor is the Python one
    data.__init__ = _construct
else:  # the C base's constructor takes the same keywords
    data.__signature__ = inspect.signature(functools.partial(_construct, None))
configure_data(data, SingleUseRegion.__enter__, SingleUseRegion.__exit__,
               ("copy", "copyin", "copyout", "create", "no_create", "present"))


def _clause_requests(keyword: str, value) -> list:
    """The map requests of one data clause of a data directive (``create_zero``,
    ``copyout_zero``: its create action zero-fills)."""
    return requests_of(_ZEROED.get(keyword) or _KIND_OF[keyword], value, zero=keyword in _ZEROED)


def _publish_region(kind, runtime, construct: str, name=None) -> None:
    if BUS.wants(kind):
        BUS.publish(kind, runtime.device.identity, name=name, info=construct)


def _check_default(value):
    if value not in (None, "none", "present"):
        raise InvalidArgumentError(f"default={value!r}: the default clause takes 'none' or 'present' (OpenACC 3.3 §2.5.16)")
    return value


@reported
def enter_data(clause_string=None, /, **clauses) -> None:
    """``enter data``: ``copyin`` and ``create`` increment dynamic counts (absent data is
    allocated, and copied in for ``copyin``); then ``attach`` attaches structs, as
    ``acc.attach`` (OpenACC 3.3 §2.7.12). Also ``if_``, ``async_``, ``wait``. Keywords,
    or the clauses as C writes them (``acc.enter_data("copyin(a[0:n]) create(b)")``, read
    in the caller's frame: ``_directive_text``)."""
    clauses = with_text("acc.enter_data", clause_string, clauses)
    if _counted_in_the_lane(clauses, entering=True):
        return
    clauses = canonical_clauses(clauses)
    entering = ("copyin", "create", "create_zero")
    check_clauses("acc.enter_data", clauses, entering + ("attach",) + _CONTROL,
                  data_clauses=entering + ("attach",))
    if not clauses.get("if_", True):
        return
    requests = []
    for keyword, value in clauses.items():  # in the order the user wrote them
        if keyword in entering:
            requests += _clause_requests(keyword, value)
    structs = [checked_struct("enter_data(attach=...)", s) for s in structs_of(clauses.get("attach"))]
    runtime = current_runtime()
    queue = queue_of(runtime, clauses.get("async_"))
    wait_for(runtime, clauses.get("wait"), queue)
    runtime.enter(requests, Counter.DYNAMIC, queue, at_once=False)  # API.md §10
    attached = []
    try:
        for s in structs:
            attach(s)
            attached.append(s)
    except BaseException:  # all or nothing: the attaches and the entries undone
        for s in attached:
            detach(s)
        runtime.exit_dynamic([MapRequest(MapKind.DELETE, r.array) for r in requests], queue)
        raise


@reported
def exit_data(clause_string=None, /, **clauses) -> None:
    """``exit data``: ``copyout`` and ``delete`` decrement dynamic counts (``finalize``:
    set them to 0); data whose counts both reach 0 is copied out (``copyout``) and freed.
    Absent data is skipped. ``detach`` detaches structs first, as ``acc.detach``
    (OpenACC 3.3 §2.7.13). Also ``if_``, ``async_``, ``wait``; keywords or a clause string."""
    clauses = with_text("acc.exit_data", clause_string, clauses)
    if _counted_in_the_lane(clauses, entering=False):
        return
    check_clauses("acc.exit_data", clauses, ("copyout", "delete", "detach", "finalize") + _CONTROL,
                  data_clauses=("copyout", "delete", "detach"))
    if not clauses.get("if_", True):
        return
    for s in [checked_struct("exit_data(detach=...)", s) for s in structs_of(clauses.get("detach"))]:
        detach(s, finalize=bool(clauses.get("finalize", False)))  # first (OpenACC 3.3 §2.7.13)
    requests = []
    for keyword, value in clauses.items():
        if keyword in ("copyout", "delete"):
            requests += requests_of(_KIND_OF[keyword], value)
    runtime = current_runtime()
    queue = queue_of(runtime, clauses.get("async_"))
    wait_for(runtime, clauses.get("wait"), queue)
    runtime.exit_dynamic(requests, queue, finalize=bool(clauses.get("finalize", False)))


#: the clauses of ``enter_data`` and ``exit_data`` whose common form the data lane makes
#: (``mapping/_cprobe.c``: ``enter``, the dynamic count +1 of present data, as
#: ``acc.copyin``/``acc.create``; ``leave``, its −1 of data that stays present, as
#: ``acc.copyout``/``acc.delete``)
_ENTER_CLAUSES, _EXIT_CLAUSES = ("copyin", "create"), ("copyout", "delete")


def _lane_arrays(clauses, keywords, contiguous: bool = False) -> tuple:
    """``(runtime, [(keyword, array), ...])`` of a directive whose clauses are all among
    ``keywords`` (the data lane's) and name plain NumPy arrays (no object dtype, which the
    Python path refuses; C- or F-contiguous when ``contiguous``, as its data clauses need),
    in the order written; ``(None, None)`` for any other form, or a thread without a
    current runtime yet."""
    runtime, arrays = ICVS.runtime, []
    if runtime is None:
        return None, None
    for keyword, value in clauses.items():
        if keyword not in keywords:
            return None, None
        for array in value if type(value) in (list, tuple) else (value,):
            if type(array) is not np.ndarray or array.dtype.hasobject or contiguous and not (
                    array.flags.c_contiguous or array.flags.f_contiguous):
                return None, None
            arrays.append((keyword, array))
    return runtime, arrays


def _counted_in_the_lane(clauses, entering: bool) -> bool:
    """``enter data``/``exit data``'s common form — data clauses alone, of contiguous NumPy
    arrays that are present and stay present — made by the current runtime's data lane in
    C, one dynamic count each in the clauses' order, as ``acc.copyin``/``acc.delete`` make
    one (OpenACC 3.3 §2.14.6-7: nothing moves, nothing is allocated or freed): True when
    done; False, nothing changed, for the Python path. The table lock is held throughout.
    Entering: every array is checked present first; one the lane then declines (a
    ``map_data`` mapping, an observer) is counted with the rest by the Python verb, which
    for present data only counts. Exiting: when the lane declines one (an exit that would
    end a mapping, ...), the counts it took are given back and the Python path makes the
    whole directive (all or nothing)."""
    runtime, arrays = _lane_arrays(clauses, _ENTER_CLAUSES if entering else _EXIT_CLAUSES, True)
    if not arrays:
        return False
    lane, queue = runtime.lane, runtime.device.sync_queue
    with runtime.table.locked():
        if entering:
            if not all(lane.present(array) for _, array in arrays):
                return False
            for done, (_, array) in enumerate(arrays):
                if lane.enter(array) is None:
                    runtime.enter([MapRequest(_KIND_OF[keyword], array) for keyword, array in arrays[done:]],
                                  Counter.DYNAMIC, queue, at_once=False)
                    break
            return True
        for done, (_, array) in enumerate(arrays):
            if lane.leave(array) is None:
                for _, earlier in reversed(arrays[:done]):  # (present, a normal mapping)
                    if lane.enter(earlier) is None:
                        runtime.enter([MapRequest(MapKind.COPYIN, earlier)], Counter.DYNAMIC, queue,
                                      at_once=False)
                return False
    return True


_UPDATE_DIRECTION = {
    "self": UpdateDirection.SELF,
    "host": UpdateDirection.SELF,
    "device": UpdateDirection.DEVICE,
}


#: the data lane's verb (``pyacc/_routine_lane.c.h``'s ``upload``/``download``) per direction
_LANE_VERB = {"self": "download", "host": "download", "device": "upload"}


@reported
def update(clause_string=None, /, **clauses) -> None:
    """``update``: ``self``/``host`` copy device → host, ``device`` host → device, in the
    order the keywords are written. Any strided view of present data; absent data raises
    ``NotPresentError`` unless ``if_present``. Also ``if_``, ``async_``, ``wait``; keywords
    or a clause string (``acc.update("self(b[0:n]) async")``)."""
    clauses = with_text("acc.update", clause_string, clauses)
    if _updated_in_the_lane(clauses):
        return
    check_clauses("acc.update", clauses, ("self", "host", "device", "if_present") + _CONTROL,
                  data_clauses=("self", "host", "device"))
    if not clauses.get("if_", True):
        return
    items = []
    for keyword, value in clauses.items():
        if keyword in _UPDATE_DIRECTION:
            for array in arrays_of(value, keyword):
                items.append(UpdateItem(_UPDATE_DIRECTION[keyword], check_array(array, contiguous=False)))
    runtime = current_runtime()
    queue = queue_of(runtime, clauses.get("async_"))
    wait_for(runtime, clauses.get("wait"), queue)
    runtime.update(items, queue, if_present=bool(clauses.get("if_present", False)))


def _updated_in_the_lane(clauses) -> bool:
    """``update``'s common form — direction clauses alone, of NumPy arrays wholly present —
    made by the current runtime's data lane in C, array by array in the clauses' order, as
    ``acc.update_device``/``update_self`` make one: True when done. False, nothing done,
    for any other form (the Python path decides, and checks: an object dtype, a read-only
    array to copy into). The table lock is held from the presence checks to the last copy
    (nobody unmaps an array meanwhile), so the directive is all or nothing as the Python
    path's; an array the lane declines (a strided view, an observer) goes, with the ones
    after it, through the Python path."""
    runtime, arrays = _lane_arrays(clauses, tuple(_LANE_VERB))
    if not arrays or any(_LANE_VERB[keyword] == "download" and not array.flags.writeable
                         for keyword, array in arrays):
        return False
    lane = runtime.lane
    order = [(keyword, getattr(lane, _LANE_VERB[keyword]), array) for keyword, array in arrays]
    with runtime.table.locked():
        if not all(lane.present(array) for _, _, array in order):
            return False
        for done, (keyword, verb, array) in enumerate(order):
            if verb(array) is None:  # declined: this one and the rest, in order, in Python
                runtime.update([UpdateItem(_UPDATE_DIRECTION[keyword], array) for keyword, _, array in order[done:]],
                               runtime.device.sync_queue)
                break
    return True


@contextmanager
def host_data(**clauses):
    """``host_data use_device(...)``: inside the block, work with the device arrays.

    ``with acc.host_data(use_device=[a, b]) as (da, db):`` — one array gives one device
    array, a list gives a tuple. Absent data raises ``NotPresentError`` unless
    ``if_present=True``, which passes the host array through; ``if_=False`` passes every
    host array through (OpenACC 3.3 §2.8). On ``host`` the device arrays are the host arrays.
    """
    try:
        check_clauses("acc.host_data", clauses, ("use_device", "if_present", "if_"),
                      data_clauses=("use_device",))
        value = clauses.get("use_device")
        if value is None:  # (OpenACC 3.3 §2.8: the construct needs its use_device clause)
            raise ClauseError("acc.host_data needs use_device=[arrays]: the present arrays whose "
                              "device arrays the block works with", clause="use_device")
        arrays = [check_array(a, contiguous=False) for a in arrays_of(value, "use_device")]
        device_arrays = _use_device(arrays, bool(clauses.get("if_present", False)),
                                    bool(clauses.get("if_", True)))
    except Exception as error:
        if isinstance(error, AccError):
            report(error)
        raise
    single = not isinstance(value, (list, tuple))
    yield device_arrays[0] if single else tuple(device_arrays)


def _use_device(arrays, if_present: bool, enabled: bool) -> list:
    if not enabled:
        return list(arrays)
    runtime = current_runtime()
    result = []
    for array in arrays:
        device_array = runtime.deviceptr(array)
        if device_array is None:
            found = runtime.table.lookup(array)
            if found.relation.is_partial:
                raise partly_present(array, runtime.namer(array), found)
            if not if_present:
                raise not_present(array, runtime.namer(array), found, "host_data use_device", runtime.table)
            device_array = array
        result.append(device_array)
    return result


_DECLARE_CLAUSES = {
    "copyin": MapKind.COPYIN,
    "create": MapKind.CREATE,
    "copy": MapKind.COPY,
    "device_resident": MapKind.CREATE,  # allocated on the device, no copy (§2.13.1)
}


@reported
def declare(**clauses) -> None:
    """``declare`` (OpenACC 3.3 §2.13) for module-level arrays: each array is mapped on
    the current device for the rest of the program — ``copyin`` and ``copy`` copy it in,
    ``create`` and ``device_resident`` allocate it only. Each clause takes one array or
    a list.

    Declared data stays present until ``acc.shutdown()`` or interpreter exit: like
    ``map_data`` its dynamic count is pinned at 1, so exit operations and routines
    (``acc.delete``, ``acc.copyout``, ``exit_data``, even with finalize) leave it present
    and ``acc.refcounts(a)`` is ``(0, 1)``; ``update`` works on it and compute regions use
    it in place. When the declaration ends, ``copy`` data is copied back to the host
    (after the queues have been waited for).

    Raises:
        PresentError: an array is already present — mapped by another directive, or
            declared before: declaring the same data twice is an error, as a second
            ``declare`` of a variable is in C (end the other mapping first).
        PartlyPresentError: an array overlaps a mapping without lying inside it.
        InvalidArgumentError: a ``copy`` array is read-only.
        OutOfMemoryError: the device is full; nothing of the call was declared.
    """
    check_clauses("acc.declare", clauses, tuple(_DECLARE_CLAUSES), data_clauses=tuple(_DECLARE_CLAUSES))
    requests = []
    for keyword, value in clauses.items():  # in the order the user wrote them
        requests += requests_of(_DECLARE_CLAUSES[keyword], value)
    if requests:
        current_runtime().declare(requests)
