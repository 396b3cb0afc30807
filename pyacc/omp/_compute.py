"""OpenMP compute constructs on pyacc's compute machinery (OpenMP 5.2 §13.8, ch. 17).

Owns: the decorators ``target_teams_distribute_parallel_for`` (and the combined forms
users write: ``target_teams_distribute_parallel_for_simd``, ``target_parallel_for``,
``target_teams_loop``, ``target_parallel_loop``), ``target`` (a region whose loops are
marked with ``omp.loop(range(...))``), ``declare_target``, and :class:`TargetRegion`.

Each OpenMP clause set is translated into the OpenACC clauses of pyacc's compute
constructs (``compiler.parse_clauses`` keywords) and the function goes through the very
same ``compiler.analyze`` and ``pyacc._compute.ComputeRegion`` as an ``@acc.parallel_loop``
— the kernels are the same code (the construct's name is a ``ConstructName``, equal to the
OpenACC one, so even the kernel cache is shared):

=========================================  ===================================
OpenMP                                     OpenACC (pyacc)
=========================================  ===================================
target teams distribute parallel for ...   parallel loop
(also target teams distribute)
target (+ omp.loop markers)                parallel (+ acc.loop markers)
(also target teams, target parallel)
map(to:) / map(from:) / map(tofrom:)       copyin / copyout / copy
map(alloc:)                                create
map(present, ...:)                         present
is_device_ptr / has_device_addr            deviceptr
num_teams / thread_limit                   num_gangs / vector_length
defaultmap(none) / defaultmap(present)     default(none) / default(present)
nowait                                     async(the thread's nowait queue)
if / private / firstprivate / collapse /   the same
reduction
=========================================  ===================================

Counting (API.md §9, OpenMP 5.2 §5.8.3): the maps of a compute construct — explicit, or
the implicit ``map(tofrom:)`` of an array — change the entry's one OpenMP count, the
*dynamic* one: they enter like ``target enter data`` and leave like ``target exit data``
(copy-out at the last release; nothing once another thread's ``map(delete:)`` has set
the count to 0). ``ompx_hold`` maps (or ``hold=True``) take the structured count, as
OpenACC's data clauses do (``TargetRegion.counter_of``; ``mapping.compute``).
``always`` maps add an update before (``to``) / after (``from``) the kernel when the
data was already present; ``device(n)`` runs on OpenMP device ``n``
(``get_initial_device()``: on the host, on host data, as ``if(false)``).
"""

from __future__ import annotations

import collections

from pyacc import compiler
from pyacc.compiler import CompileError
from pyacc.compiler.clauses import ClauseExpr
from pyacc.mapping import AccError, Counter, InvalidArgumentError, UpdateDirection

from .. import _compute as acc_compute, _devices as _acc_devices, _directives
from .._call_inputs import truth_of
from .._compute import ComputeRegion, at_caller
from .._devices import ICVS
from .._errors import report
from . import _devices
from .._directive_text import item_of
from ._clauses import parse
from ._names import ConstructName

__all__ = [
    "target", "target_teams_distribute_parallel_for", "target_teams_distribute_parallel_for_simd",
    "target_parallel_for", "target_teams_loop", "target_parallel_loop", "declare_target",
    "target_teams_distribute", "target_teams", "target_parallel", "TargetRegion",
]

#: OpenMP construct → the pyacc construct it compiles as
_ACC_CONSTRUCT = {
    "target": "parallel",
    "target_teams_distribute_parallel_for": "parallel_loop",
    "target_teams_distribute_parallel_for_simd": "parallel_loop",
    "target_parallel_for": "parallel_loop",
    "target_teams_loop": "parallel_loop",
    "target_parallel_loop": "parallel_loop",
    "target_teams_distribute": "parallel_loop",
    "target_teams": "parallel",  # (their loops marked omp.loop, as target's)
    "target_parallel": "parallel",
}

_ACC_KIND = {"to": "copyin", "from": "copyout", "tofrom": "copy", "alloc": "create"}
_REGION_CALL = ComputeRegion.__call__
_THREAD = _devices._STATE


def _translate(omp, construct: str):
    """OpenMP clauses → (OpenACC keyword clauses, always_to names, always_from names)."""
    where = f"omp {construct.replace('_', ' ')}"
    combined: dict[str, list] = {}
    for item, spec in omp.maps:
        if not isinstance(item, str):
            raise CompileError(f"{where}: map clauses of a compute construct name the function's "
                               f"parameters (strings), got {type(item).__name__}")
        flags = combined.setdefault(item, [False, False, False, False, False])  # to from alloc present
        flags[0] |= spec.type in ("to", "tofrom")
        flags[1] |= spec.type in ("from", "tofrom")
        flags[2] |= spec.type == "alloc"
        flags[3] |= spec.present
        if spec.always:
            if spec.type in ("to", "tofrom"):
                flags[4] = flags[4] or "to"
            if spec.type in ("from", "tofrom"):
                flags[4] = "both" if flags[4] == "to" else (flags[4] or "from")
    keywords: dict[str, list] = {}
    always_to, always_from = [], []
    for name, (to, from_, alloc, present, always) in combined.items():
        if present:
            kind = "present"
        elif to and from_:
            kind = "copy"
        elif to:
            kind = "copyin"
        elif from_:
            kind = "copyout"
        else:
            kind = "create"
        keywords.setdefault(kind, []).append(name)
        if always in ("to", "both"):
            always_to.append(name)
        if always in ("from", "both"):
            always_from.append(name)
    for field, acc in (("is_device_ptr", "deviceptr"), ("private", "private"),
                       ("firstprivate", "firstprivate")):
        names = list(getattr(omp, field))
        for item in names:
            if not isinstance(item, str):
                _bad(where, field, item)
        if names:
            keywords.setdefault(acc, []).extend(names)
    if omp.reductions:
        keywords["reduction"] = list(omp.reductions)
    if omp.collapse is not None:
        keywords["collapse"] = omp.collapse
    if omp.defaultmap in ("none", "present"):
        keywords["default"] = omp.defaultmap
    if omp.num_teams is not None:
        keywords["num_gangs"] = omp.num_teams
    if omp.thread_limit is not None:
        keywords["vector_length"] = omp.thread_limit
    if omp.if_ is not None:
        keywords["if_"] = omp.if_
    return keywords, tuple(always_to), tuple(always_from)


def _bad(where, field, value):
    raise CompileError(f"{where}: {field} names the function's parameters (strings), got "
                       f"{type(value).__name__}")


class TargetRegion(ComputeRegion):
    """An OpenMP compute construct: a pyacc ``ComputeRegion`` whose calls also take the
    OpenMP call-time clauses.

    Call as ``f(*args, nowait=None, device=None, if_=None, depend=None)``: ``nowait``
    (or the decorator's) queues the region on the calling thread's nowait queue and
    returns at once (``omp.taskwait()`` waits; a reduction returns a handle whose
    ``.result()`` waits); ``device`` picks the OpenMP device. Returns the reductions as
    ``acc`` regions do.
    """

    def __init__(self, function, info, omp, always_to, always_from):
        super().__init__(function, info)
        self._omp_nowait = omp.nowait
        self._omp_device = omp.device
        self._omp_depend = bool(omp.depend)
        self._always_to = always_to
        self._always_from = always_from
        #: no OpenMP clause acts at the call (nowait, device, depend, always): a call that
        #: passes none either is the OpenACC region's call (``__call__``'s fast path)
        self._plain = (not omp.nowait and omp.device is None and not omp.depend
                       and not always_to and not always_from)
        #: the parameters mapped with ``ompx_hold`` (all of them under ``hold=True``)
        self._all_held = bool(omp.hold)
        self._held = frozenset(item for item, spec in omp.maps if spec.hold)

    def counter_of(self, name) -> Counter:
        """OpenMP maps change the dynamic count; ``ompx_hold`` maps the structured one
        (API.md §9; the ``ArgumentSorter`` of ``mapping.compute``)."""
        return Counter.STRUCTURED if self._all_held or name in self._held else Counter.DYNAMIC

    def __repr__(self) -> str:
        return f"<pyacc.omp {self.info.clauses.construct} region {self.info.where}>"

    def _call_value(self, value, args, kwargs):
        if not isinstance(value, ClauseExpr):
            return value
        bound = self._signature.bind(*args, **kwargs)
        namespace = collections.ChainMap(dict(bound.arguments), self.info.func.__globals__)
        try:
            return value.evaluate(namespace)
        except Exception as error:  # noqa: BLE001 - a user expression may raise anything
            raise InvalidArgumentError(f"{self.info.where}: clause value {value.text!r} could not "
                                       f"be evaluated for this call: {type(error).__name__}: {error}") from None

    def __call__(self, *args, nowait=None, device=None, if_=None, depend=None, **kwargs):
        if self._plain and nowait is None and device is None and depend is None:
            thread = _THREAD  # the thread's OpenMP state, read without a call (hot path)
            if thread.started and not thread.on_initial or _devices.default_is_current():
                # on the current device, synchronous: exactly what the full path below
                # does (resolve → that device's runtime, no switch; _call_on → the call)
                if if_ is None and not kwargs:
                    return _REGION_CALL(self, *args)
                return _REGION_CALL(self, *args, if_=if_, **kwargs)
        try:
            nowait = self._call_value(self._omp_nowait if nowait is None else nowait, args, kwargs)
            device = self._call_value(self._omp_device if device is None else device, args, kwargs)
            target = _devices.resolve(device, f"{self.info.where}: device")
        except AccError as error:
            report(error)
            raise
        if target.on_host:  # the initial device: host code on host data (as if(false))
            return super().__call__(*args, if_=False, **kwargs)
        if not target.switch:
            return self._call_on(target.runtime, args, kwargs, nowait, if_, depend)
        device_type = ICVS.device_type
        previous = _acc_devices.device_num_of(device_type)
        _acc_devices.set_current(device_type, target.number)
        try:
            return self._call_on(target.runtime, args, kwargs, nowait, if_, depend)
        finally:
            _acc_devices.set_current(device_type, previous)

    def _call_on(self, runtime, args, kwargs, nowait, if_, depend):
        async_ = None
        if nowait:
            async_ = _devices.nowait_queue()
            _devices.note_nowait(runtime)
        elif depend or self._omp_depend:
            _devices.taskwait()  # a dependence on earlier nowait work of this thread
        if not (self._always_to or self._always_from) or runtime.device.shares_host_memory:
            return super().__call__(*args, async_=async_, if_=if_, **kwargs)
        # ``always`` maps of data that is present already (else the map itself copies)
        bound = self._signature.bind(*args, **kwargs).arguments
        queue = runtime.device.queue(async_)
        # the call's if_, else the construct's if clause (an expression: evaluated now);
        # false: the region runs on the host on host data, no data action (§2.5.6)
        clause = self.info.clauses.if_ if if_ is None else if_
        enabled = clause is None or truth_of(self._call_value(clause, args, kwargs), self.info.where)
        scope = {**self.info.func.__globals__, **bound}  # (items: names, members, sections)
        moves = [(UpdateDirection.DEVICE, array, name) for name in self._always_to
                 if runtime.is_present(array := item_of(scope, name))]
        back = [(UpdateDirection.SELF, array, name) for name in self._always_from
                if runtime.is_present(array := item_of(scope, name))]
        if moves and enabled:
            runtime.update(moves, queue, if_present=True)
        result = super().__call__(*args, async_=async_, if_=if_, **kwargs)
        if back and enabled:
            runtime.update(back, queue, if_present=True)
        return result


def _decorator(construct: str):
    acc_construct = _ACC_CONSTRUCT[construct]
    name = ConstructName(acc_construct, construct)

    def decorator(function=None, clause_string=None, /, **clauses):
        if isinstance(function, str):  # @omp.target_teams_distribute_parallel_for("map(...)")
            function, clause_string = None, function
        try:
            omp = parse(construct, clause_string, **clauses)
            keywords, always_to, always_from = _translate(omp, construct)
            parsed = compiler.parse_clauses(name, None, **keywords)
        except CompileError as error:
            raise at_caller(error, 2) from None

        def wrap(func):
            if not callable(func):
                raise CompileError(f"@omp.{construct} decorates a function, got {func!r}")
            return TargetRegion(func, compiler.analyze(func, parsed), omp, always_to, always_from)

        return wrap if function is None else wrap(function)

    decorator.__name__ = decorator.__qualname__ = construct
    decorator.__doc__ = (
        f"``@omp.{construct}`` — ``#pragma omp {construct.replace('_', ' ')}`` on a Python "
        "function: bare, with clauses as keywords (``map_to=\"x\"``, ``map_tofrom=\"y\"``, "
        "``collapse=2``, ``reduction=\"max:err\"``, ``nowait=True`` ...) or with one OpenMP "
        "clause string (``\"map(to: x) map(tofrom: y) collapse(2)\"``). Compiled as "
        f"``@acc.{acc_construct}``. See API.md §9 and docs/openmp.md.")
    return decorator


target = _decorator("target")
target_teams_distribute_parallel_for = _decorator("target_teams_distribute_parallel_for")
target_teams_distribute_parallel_for_simd = _decorator("target_teams_distribute_parallel_for_simd")
target_parallel_for = _decorator("target_parallel_for")
target_teams_loop = _decorator("target_teams_loop")
target_parallel_loop = _decorator("target_parallel_loop")
target_teams_distribute = _decorator("target_teams_distribute")
target_teams = _decorator("target_teams")
target_parallel = _decorator("target_parallel")


def declare_target(function=None, clause_string=None, /, **clauses):
    """``#pragma omp declare target``.

    On a function (bare ``@omp.declare_target``, or with ``device_type``/``indirect``):
    a device function callable from target regions — ``acc.routine`` (seq).
    With ``enter=[arrays]`` (``to=`` is the older spelling): module-level arrays get a
    device copy for the whole program, initialised from the host (``acc.declare(copyin=)``);
    returns None.
    """
    if isinstance(function, str):
        function, clause_string = None, function
    try:
        omp = parse("declare_target", clause_string, **clauses)
    except CompileError as error:
        raise at_caller(error, 2) from None
    if omp.maps:
        if function is not None or clause_string is not None and any(isinstance(i, str) for i, _ in omp.maps):
            raise CompileError("omp.declare_target(enter=[...]) takes arrays (module-level data), "
                               "not a function or names")
        _directives.declare(copyin=[array for array, _ in omp.maps])
        return None

    def wrap(func):
        return acc_compute.routine(func)

    return wrap if function is None else wrap(function)
