"""The OpenMP data constructs (OpenMP 5.2 §13.5–13.9): ``target_data``,
``target_enter_data``, ``target_exit_data``, ``target_update``, and ``taskwait``.

Each validates its clauses (keywords, or one OpenMP clause string whose items are the
caller's variables, their members and array sections: ``map(to: a[0:n], s.x)``), resolves its device (``device``; the initial device and ``if_``
false: nothing happens), combines the maps per array (``_maps.combine``) and calls the
mapping runtime's verbs on that device's runtime. Each is all-or-nothing (API.md §4).
``nowait`` work goes to the calling thread's nowait queue (``omp.taskwait()`` waits for
it); ``depend`` is honoured by that queue's order, and a construct without ``nowait``
that has ``depend`` clauses first waits for the thread's nowait work.
"""

from __future__ import annotations

import sys

from pyacc.mapping import BUS, AccError, EventKind, ExecutionError, UpdateDirection
from pyacc.mapping import ClauseError, check_array

from .._directive_text import item_of
from .._errors import directive_end, report, reported
from .._region import SingleUseRegion
from . import _devices
from ._clauses import ClauseExpr, parse
from ._maps import MapItem, check_present, combine, enter_maps, exit_maps
from ._names import ConstructName

__all__ = ["target_data", "target_enter_data", "target_exit_data", "target_update", "taskwait"]

_ACTIVE = BUS.active
_DIRECTIVE_END = int(EventKind.DIRECTIVE_END)
_TARGET_DATA = ConstructName("data", "target_data")


def _reported(function):
    """pyacc's ``reported`` for OpenMP routines: errors reach the error callbacks, and the
    end is published (DIRECTIVE_END, a PYACC_CHECK checkpoint) as ``omp.<name>``."""
    return reported(function, prefix="omp")


def _parse(construct, clause_string, keywords, depth=3):
    """Parse the clauses; a clause string names variables of the user's frame, and so does
    a clause value written as text (``if_="n > 3"``, ``device="dev"``), given either way."""
    clauses = parse(construct, clause_string, error=ClauseError, **keywords)
    texts = any(isinstance(value, ClauseExpr) for value in (clauses.device, clauses.if_, clauses.nowait))
    if clause_string is not None or texts:
        frame = sys._getframe(depth)
        scope = {**frame.f_globals, **frame.f_locals}
        clauses.maps = [(_lookup(scope, item, construct), spec) for item, spec in clauses.maps]
        clauses.motions = [(_lookup(scope, item, construct), d, p) for item, d, p in clauses.motions]
        clauses.device = _value(clauses.device, scope)
        clauses.if_ = _value(clauses.if_, scope)
        clauses.nowait = _value(clauses.nowait, scope)
    return clauses


def _lookup(scope, item, construct):
    """The array a clause string's item names in the caller's ``scope``: a variable, a
    member (``s.x``) or an array section (``a[0:n]``, its bounds read in ``scope``)."""
    if not isinstance(item, str):
        return item
    try:
        return item_of(scope, item)
    except (ValueError, NameError) as exc:
        raise ClauseError(f"omp {construct.replace('_', ' ')}: {item!r} in the clause string: "
                          f"{exc}", clause=item) from None


def _value(value, scope):
    return value.evaluate(scope) if isinstance(value, ClauseExpr) else value


def _enabled(clauses) -> bool:
    return clauses.if_ is None or bool(clauses.if_)


def _queue(target, clauses, what):
    """The queue of a data construct: the thread's nowait queue or the synchronous one;
    ``depend`` without ``nowait`` first waits for the thread's nowait work."""
    runtime = target.runtime
    if clauses.nowait:
        _devices.note_nowait(runtime)
        return runtime.device.queue(_devices.nowait_queue())
    if clauses.depend:
        _devices.taskwait()
    return runtime.device.sync_queue


def _maps_of(clauses, runtime, what):
    pairs = [(check_array(array), spec) for array, spec in clauses.maps]
    if clauses.hold:
        pairs = [(array, type(spec)(spec.type, spec.always, spec.present, True)) for array, spec in pairs]
    return combine(pairs, runtime.namer, what)


class target_data(SingleUseRegion):
    """``#pragma omp target data``: ``with omp.target_data(map_to=[a], map_from=[b]) as region:``.

    Maps: ``map_to``, ``map_from``, ``map_tofrom``, ``map_alloc`` with the ``always`` /
    ``present`` prefixes, ``hold=True`` (``ompx_hold`` on every map); also ``device``,
    ``if_``, ``use_device_ptr``/``use_device_addr`` (see ``region.device``). Or one clause
    string: ``omp.target_data("map(to: a) map(ompx_hold, tofrom: b)")`` naming variables
    of the calling function.

    Entry: each map's dynamic count +1 (``ompx_hold`` maps: the structured count), absent
    data allocated and copied in (``to``/``tofrom``), ``always`` copies in anyway. Exit:
    the dynamic count −1 — nothing when it is already 0 — and data whose total count
    reaches 0 is copied out (``from``/``tofrom``) and freed; ``always`` copies out anyway.
    On an exception inside the block the exit still runs (copying back unless it is an
    ``ExecutionError``) and the exception propagates. A region object is single-use
    (``pyacc._region``).
    """

    _NAME = "omp.target_data"
    _WHAT = "omp.target_data region"

    def __init__(self, clause_string=None, /, **clauses):
        try:
            self._clauses = _parse("target_data", clause_string, clauses, depth=2)
            self._target = None
            self._items = []
            self._held = []
        except AccError as error:
            report(error)
            raise

    def _enter(self):
        clauses = self._clauses
        if _enabled(clauses):
            target = _devices.resolve(clauses.device, "omp.target_data")
            if not target.on_host:
                runtime = target.runtime
                items = _maps_of(clauses, runtime, "omp target data")
                queue = runtime.device.sync_queue
                with BUS.holding():  # a profiling callback's exception waits for the entry
                    self._held = enter_maps(runtime, items, queue, "omp target data")
                    self._items, self._target = items, target
                    _publish(EventKind.REGION_ENTER, runtime)
        return self

    def _opened(self) -> bool:
        return self._target is not None  # the maps were entered: their exit must run

    def _leave(self, exc) -> None:
        runtime = self._target.runtime
        exit_maps(runtime, self._items, runtime.device.sync_queue, held_mapped=self._held,
                  copy_back=not isinstance(exc, ExecutionError))

    def _left(self) -> None:
        _publish(EventKind.REGION_EXIT, self._target.runtime)
        if _ACTIVE[_DIRECTIVE_END]:
            directive_end("omp.target_data")

    def device(self, a):
        """The device array of ``a`` (``use_device_addr``; like ``acc.deviceptr``);
        on the host (initial device, ``if_`` false) ``a`` itself."""
        check_array(a, contiguous=False)
        if self._target is None:
            return a
        return self._target.runtime.deviceptr(a)


def _publish(kind, runtime) -> None:
    if BUS.wants(kind):
        BUS.publish(kind, runtime.device.identity, info=_TARGET_DATA)


@_reported
def target_enter_data(clause_string=None, /, **clauses) -> None:
    """``#pragma omp target enter data``: ``map_to`` / ``map_alloc`` (and
    ``map_always_to``, ``map_present_to``, ``map_present_alloc``) add one to each
    array's dynamic count; absent data is allocated (and copied in for ``to``). Also
    ``device``, ``if_``, ``nowait``, ``depend``."""
    parsed = _parse("target_enter_data", clause_string, clauses)
    if not _enabled(parsed):
        return
    target = _devices.resolve(parsed.device, "omp.target_enter_data")
    if target.on_host:
        return
    runtime = target.runtime
    items = _maps_of(parsed, runtime, "omp target enter data")
    enter_maps(runtime, items, _queue(target, parsed, "omp target enter data"), "omp target enter data")


@_reported
def target_exit_data(clause_string=None, /, **clauses) -> None:
    """``#pragma omp target exit data``: ``map_from`` and ``map_release`` subtract one from
    each array's dynamic count, ``map_delete`` sets it to 0; data whose counts both reach
    0 is copied out (``from``) and freed. Absent data is skipped (unless ``present``).
    Also ``map_always_from``, ``map_present_from``, ``device``, ``if_``, ``nowait``,
    ``depend``."""
    parsed = _parse("target_exit_data", clause_string, clauses)
    if not _enabled(parsed):
        return
    target = _devices.resolve(parsed.device, "omp.target_exit_data")
    if target.on_host:
        return
    runtime = target.runtime
    items = _maps_of(parsed, runtime, "omp target exit data")
    check_present(runtime, items, "omp target exit data")
    exit_maps(runtime, items, _queue(target, parsed, "omp target exit data"))


@_reported
def target_update(clause_string=None, /, **clauses) -> None:
    """``#pragma omp target update``: ``to`` copies host → device, ``from_`` device →
    host, in the order written. Absent data is skipped (OpenMP 5.1+); ``present_to`` /
    ``present_from`` (``to(present: a)``) require presence. Any strided view of
    present data. Also ``device``, ``if_``, ``nowait``, ``depend``."""
    parsed = _parse("target_update", clause_string, clauses)
    if not _enabled(parsed):
        return
    if not parsed.motions:
        raise ClauseError("omp.target_update needs a motion clause (to, from_)", clause=None)
    target = _devices.resolve(parsed.device, "omp.target_update")
    if target.on_host:
        return
    runtime = target.runtime
    queue = _queue(target, parsed, "omp target update")
    required = [MapItem(check_array(a, contiguous=False), runtime.namer(a), present=True,
                        text=f"{d}(present: …)")
                for a, d, present in parsed.motions if present]
    check_present(runtime, required, "omp target update")  # before anything moves
    items = [(_DIRECTION[d], check_array(a, contiguous=False), None) for a, d, _ in parsed.motions]
    runtime.update(items, queue, if_present=True)


_DIRECTION = {"to": UpdateDirection.DEVICE, "from": UpdateDirection.SELF}


def taskwait() -> None:
    """``#pragma omp taskwait``: wait for every ``nowait`` construct of this thread."""
    try:
        _devices.taskwait()
    except AccError as error:
        report(error)
        raise
