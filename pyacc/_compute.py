"""Compute regions: the decorators and the launcher (API.md §6; OpenACC 3.3 §2.5, §2.9).

Owns: ``parallel``, ``parallel_loop``, ``kernels``, ``kernels_loop``, ``serial`` and
``routine``, and ``ComputeRegion`` — the one place where ``compiler`` and ``mapping`` meet
(DESIGN.md). At decoration time the function is analysed (``compiler.analyze``: compile
errors surface here, pointing at the offending line). At each call the launcher

1. classifies every argument (``ComputeRegion.sort``, OpenACC 3.3 §2.6.2 implicit data
   attributes): an explicit data clause applies as written; otherwise arrays are
   present-or-copy — ``copy`` when the kernel may write them, ``copyin`` when it only
   reads them (nothing is copied back) — or ``present`` under ``default="present"`` (the
   decorator's, or that of the innermost enclosing ``acc.data`` region);
   ``default="none"`` requires a clause; ``deviceptr`` arrays are already device memory;
   scalars are firstprivate;
2. enters the region's data through ``mapping.compute.enter_compute`` (replay, join or
   full entry; present data is used in place, a strided view of present data becomes the
   matching strided device view), which returns a ``ComputeTicket``;
3. gets the kernel for the device's target and arguments (``compiler.kernel_for``: the
   compiler's one cache), launches it on the queue, and
4. exits through ``exit_compute`` (copy-backs, frees), returning the reductions.

Sections and structs (API.md §6.2; OpenACC 3.3 §2.7.1, §2.7.2) take ``_special_call``
before step 1. A section in a clause (``present(a[0:n])``) is evaluated at each call; one
that covers its whole array is the clause on the array (such calls take the direct path,
``_WholeSections``); a proper section acts on the enclosing mapping when the whole
parameter is present (the kernel always receives the whole parameter), and is otherwise
refused by name (``InvalidDataSectionError``: a device copy of a section cannot stand for
the array). A struct argument runs the region's *variant* for its layout
(``_StructVariant``: the function flattened by ``compiler.analysis``, each member the
kernel takes a parameter of its own, mapped and typed like an argument; members of a
struct attached with ``acc.attach`` are ``present``).

``PYACC_DISABLE_JIT=1`` runs kernels as plain Python with the same data semantics.
A kernel that fails raises ``ExecutionError``; its ``copy``/``copyout`` data is not
copied back (the device data may be garbage) but every count is released.

Before step 1 the call reads what it needs besides its arguments (``_call_inputs``: the
values of the kernel's free parameters — module-level and closure names —, the clause
expressions evaluated with the arguments, ``if_`` given at the call); a call that repeats
a recent one skips step 1 and replays its plan (``_replay.CallPlan``: the kernel and the
mapping's memo). A synchronous call with constant clauses and no event subscriber takes
``__call__``'s direct path (no clause reading, no holding). A profiling or error
callback that raises during the call does so once the region's data actions are
complete.
"""

from __future__ import annotations

import collections
import functools
import inspect
import sys

import numpy as np

from pyacc import compiler
from pyacc.compiler import CompileError, KernelIndexError
from pyacc.mapping import (
    BUS,
    AccError,
    ClauseError,
    EventKind,
    Counter,
    ExecutionError,
    InvalidArgumentError,
    InvalidDataSectionError,
    MapKind,
    MapRequest,
    NotPresentError,
    PartlyPresentError,
    check_array,
)

from pyacc.mapping.compute import enter_compute, exit_compute
from pyacc.mapping.ranges import Relation
from pyacc.mapping.queues import CROSSOVER, Pending
from pyacc.compiler import kernel_env
from pyacc.compiler import analysis as _structs
from pyacc.compiler.analysis import MemberError
from pyacc.compiler.clause_text import EXPR_BUILTINS
from pyacc.compiler.kernel import SCALAR_TYPES, feedback_view

from . import _routines
from ._clauses import queue_of, wait_for
from ._call_inputs import clause_values, free_reader
from ._replay import CallPlan, is_device_array
from ._devices import ICVS, current_runtime, enclosing_deviceptr
from ._errors import directive_end, report
from ._express import CALL_BASE, configure_async, express_lane, plan_spec
from .observe._locate import Location

__all__ = ["parallel", "parallel_loop", "kernels", "kernels_loop", "serial", "routine", "ComputeRegion",
           "explain"]

_ACTIVE = BUS.active
_HOLDING = BUS.holding()
_SILENT = BUS.silent
_STRUCTURED = Counter.STRUCTURED
_REGION_ENTER = int(EventKind.REGION_ENTER)
_REGION_EXIT = int(EventKind.REGION_EXIT)
_DIRECTIVE_END = int(EventKind.DIRECTIVE_END)

_KIND_OF_CLAUSE = {
    "copy": MapKind.COPY,
    "copyin": MapKind.COPYIN,
    "copyout": MapKind.COPYOUT,
    "create": MapKind.CREATE,
    "no_create": MapKind.NO_CREATE,
    "present": MapKind.PRESENT,
    # private arrays: each execution gets scratch device memory; firstprivate: a copy of
    # the host values (the compiler makes the per-gang copies from it)
    "private": MapKind.CREATE,
    "firstprivate": MapKind.COPYIN,
}


class AsyncResult:
    """What an async compute call returns: ``.result()`` waits for its queue (raising the
    queue's error, if any, as ``ExecutionError``) and returns the reductions (None when
    the kernel has none); ``.done()`` tells whether the queue has got there."""

    __slots__ = ("_queue", "_value")

    def __init__(self, queue, value):
        self._queue = queue
        self._value = value  # a mapping.queues.Pending on an asynchronous queue

    def result(self):
        try:
            self._queue.synchronize()
            value = self._value
            if not isinstance(value, Pending):
                return value
            if value.error is not None:  # even after a plain wait reported the queue's error
                raise ExecutionError(f"the kernel of this handle failed: {type(value.error).__name__}: "
                                     f"{value.error}") from value.error
            return value.value
        except AccError as error:
            report(error)
            raise

    def done(self) -> bool:
        return self._queue.is_idle()


configure_async(AsyncResult)  # the express lane makes those of async calls run at once


class ComputeRegion(CALL_BASE):
    """A decorated compute-region function; calling it launches the kernel.

    Call as ``f(*args, async_=None, wait=None, if_=None)``; keyword arguments by parameter
    name are accepted too. ``if_`` given at the call overrides the ``if`` clause: false runs
    the region on the host on host data (OpenACC 3.3 §2.5.6). Returns the reduction value (a tuple for several; None without), or an
    ``AsyncResult`` when ``async_`` names a queue.

    The call itself is the express lane's (``_fastcall.FastCall``, in C) when it is
    built: a call that repeats one the Python launcher replayed (``_arm_express``) is
    checked and launched there; any other goes to ``_call_slow``, the Python launcher.
    """

    def __init__(self, function, info):
        self.info = info
        self._where = Location(info.filename, info.lineno, info.name)  # for events
        self.__wrapped__ = function
        functools.update_wrapper(self, function)
        clauses = info.clauses
        self._explicit = {}
        for clause, kind in _KIND_OF_CLAUSE.items():
            for name in getattr(clauses, clause):
                self._explicit[name] = kind
        self._deviceptr = frozenset(clauses.deviceptr)
        self._default = clauses.default
        self._clause_values = clause_values(clauses)  # (enabled, async, wait) of the clauses
        #: clause values written as expressions of the parameters (``"gang((n+127)/128)"``,
        #: ``"if(n > 100)"``): evaluated at each call (API.md §6.1)
        self._expressions = bool(clauses.expressions())
        self._arity = len(info.params)
        # the last joined calls' plans (newest first), for the next ones: a Jacobi loop
        # calls step(u, unew) and step(unew, u) in turn, and each needs its own plan
        self._plans: tuple = ()
        #: a call with no call-time clauses may go straight to ``_launch`` with the
        #: clauses' values: they are constants, the region runs on the synchronous queue
        self._direct = False
        self._uses_default = True
        self._read_free = None  # reads the free parameters' values (None: there are none)
        self._bound = False  # free parameters resolved (at the first call)
        #: a replayed direct call may become an express plan (``_arm_express``)
        self._expressable = False
        #: ``(clause, Section)`` of the sections the clauses map (OpenACC 3.3 §2.7.1)
        self._sections = clauses.sections
        #: the struct parameters (``compiler.analysis``): such calls run a variant
        self._struct_params = info.struct_params
        #: sections or struct parameters: every call takes ``_special_call``
        self._special = bool(self._sections or self._struct_params)
        self._variants: dict = {}  # (StructLayout, attached) -> _StructVariant
        self._last_variant = None  # the variant of the last struct call (acc.explain)
        self._labels = info.labels  # a variant's members as the program spells them
        #: a region with sections or struct parameters (not both) whose clauses are
        #: otherwise constant: its synchronous calls may be direct (``_route_direct``)
        self._special_direct = False
        #: for a region with sections: tells whether a call's sections cover their whole
        #: arrays, so that it is a direct call
        self._whole = None

    @functools.cached_property
    def _signature(self) -> inspect.Signature:
        """The function's signature, to bind keyword arguments (made at the first such
        call: a region decorated again at each call of its method must cost little)."""
        return inspect.signature(self.__wrapped__)

    def _evaluate_clauses(self, args):
        """Evaluate the clause expressions with this call's arguments (parameters by
        name, then the function's globals) and set the launch's clauses from them."""
        info = self.info
        namespace = collections.ChainMap(dict(zip(info.params, args)), info.func.__globals__)
        try:
            clauses = info.clauses.evaluate(namespace)
        except Exception as error:  # noqa: BLE001 - a user expression may raise anything
            texts = ", ".join(f"{name}({expr.text})" for name, expr in info.clauses.expressions().items())
            raise InvalidArgumentError(
                f"{info.where}: a clause value could not be evaluated for this call "
                f"({texts}): {type(error).__name__}: {error}") from None
        return clause_values(clauses) + (clauses,)

    def _bind_free_names(self):
        """At the first call: resolve the module-level names the kernel reads (API.md
        §6.1; names defined after the decorator count) and prepare to read their values
        at each call."""
        info = self.info
        compiler.bind_free_names(info)
        # the enclosing default(...) matters only when some array parameter has no clause
        self._uses_default = self._default is None and any(
            name not in self._explicit and name not in self._deviceptr for name in info.kernel_params)
        self._read_free = free_reader(info)
        self._bound = True
        enabled, async_clause, wait_clause = self._clause_values[:3]
        self._direct = (not self._expressions and enabled and async_clause is None
                        and wait_clause is None and not self._special)
        self._expressable = self._direct and self._read_free is None and CALL_BASE is not object
        if self._special and not self._expressions and enabled and async_clause is None \
                and wait_clause is None and not (self._sections and self._struct_params):
            self._special_direct = True
            if self._sections:
                self._whole = _WholeSections(info, self._sections)

    def __repr__(self) -> str:
        return f"<pyacc {self.info.clauses.construct} region {self.info.where}>"

    def __get__(self, instance, owner):
        return self if instance is None else functools.partial(self, instance)

    def _call_slow(self, *args, async_=None, wait=None, if_=None, **kwargs):
        """The Python launcher: every call the express lane does not take (``__call__``
        itself without it)."""
        if self._direct and async_ is None and wait is None and if_ is None and not kwargs \
                and len(args) == self._arity and _SILENT[0]:
            # the common call: constant clauses, synchronous, nobody observing events;
            # exact as the full path (a subscriber that comes now sees the next call)
            try:
                if self._read_free is not None:
                    args = (*args, *self._read_free())
                runtime = ICVS.runtime or current_runtime()
                plan = None
                if self._plans:  # _matching_plan and CallPlan.applies, inlined: the hot path
                    key = (kernel_env(), ICVS.default_clause.innermost_default if self._uses_default else None,
                           None)
                    for candidate in self._plans:
                        if candidate.runtime is runtime and candidate.key == key and (
                                not candidate.scalars or candidate.scalars_match(args)) and \
                                candidate.memo.matches(args):
                            plan = candidate
                            break
                return self._launch(runtime, args, runtime.device.sync_queue, None, True, plan)
            except AccError as error:
                _add_section_hint(error)
                report(error)
                raise
        if self._direct and type(async_) is int and async_ >= 0 and wait is None and if_ is None \
                and not kwargs and len(args) == self._arity and _SILENT[0]:
            return self._call_async(args, async_)
        if self._special_direct and async_ is None and wait is None and if_ is None \
                and not kwargs and len(args) == self._arity and _SILENT[0]:
            # sections that cover their whole arrays, or structs, at this call: a direct
            # call of this region or of the struct layout's variant
            routed = self._route_direct(args)
            if routed is not None:
                return routed[0]._launch_direct(routed[1])
        return self._call(args, async_, wait, if_, kwargs)

    def _call_async(self, args, number):
        """The direct call on asynchronous queue ``number`` (constant clauses, nobody
        observing events): ``_call_slow``'s direct path with the queue; its replays arm
        the express lane, which runs later such calls at once when their queue is idle
        (``_ran_at_once``)."""
        try:
            if self._read_free is not None:
                args = (*args, *self._read_free())
            runtime = ICVS.runtime or current_runtime()
            queue = runtime.device.queue(number)
            value = self._launch(runtime, args, queue, None, True, self._matching_plan(runtime, args))
            return AsyncResult(queue, value)
        except AccError as error:
            _add_section_hint(error)
            report(error)
            raise

    def _route_direct(self, args):
        """``(region, arguments)`` of a direct call of a region with sections or struct
        parameters (its clauses otherwise constant, the call synchronous and silent):
        its own, when its sections cover their whole arrays at this call; a struct
        layout's variant with the members, when it has no sections. None: anything
        else (a proper section, a member error ...), for the full path to decide."""
        full = args if self._read_free is None else (*args, *self._read_free())
        if self._whole is not None:
            return (self, full) if self._whole.covers(full, self.info.func.__globals__) else None
        try:
            layout = _structs.struct_layout(self.info, args)
        except MemberError:
            return None
        if layout is None:
            return self, full
        variant = self._last_variant = self._variant(ICVS.runtime or current_runtime(), layout, args)
        return variant, layout.flatten(full)

    def _launch_direct(self, args):
        """The direct call of ``_call_slow`` (the same steps, for a region whose sections
        cover their whole arrays at this call, ``_WholeSections``)."""
        try:
            runtime = ICVS.runtime or current_runtime()
            plan = None
            if self._plans:
                key = (kernel_env(), _enclosing_default() if self._uses_default else None, None)
                plan = next((candidate for candidate in self._plans
                             if candidate.applies(runtime, key, args)), None)
            return self._launch(runtime, args, runtime.device.sync_queue, None, True, plan)
        except AccError as error:
            _add_section_hint(error)
            report(error)
            raise

    def _call(self, args, async_, wait, if_, kwargs):
        """A call in full: bind the arguments, read the clauses (expressions evaluated
        with the arguments, ``if_``/``async_``/``wait`` given at the call), the queue and
        its waits; then ``_launch`` (or the host, under ``if(false)``)."""
        if kwargs or len(args) != self._arity:
            args = self._bind(args, kwargs)
        try:
            if not self._bound:
                self._bind_free_names()
            values = self._evaluate_clauses(args) if self._expressions else self._clause_values
            if if_ is not None:  # given at the call, it overrides the clause (§2.5.6)
                values = (bool(if_),) + values[1:]
            region, sections = self, ()
            if self._special:  # sections in the clauses, struct parameters
                region, args, values, sections = self._special_call(args, values)
            elif self._read_free is not None:  # globals and closure values, read now
                args = (*args, *self._read_free())
            return region._run(args, values, sections, async_, wait)
        except Exception as error:
            if isinstance(error, AccError):
                _add_section_hint(error)
                report(error)
            if _ACTIVE[_DIRECTIVE_END]:  # a checkpoint after a failed call, too
                directive_end(self.info.where)
            raise

    def _run(self, args, values, sections, async_, wait):
        """The call with its arguments and clause values read: the queue and its waits,
        then ``_launch`` (or the host, under ``if(false)``). ``sections``: the proper
        sections its clauses map (``_special_call``)."""
        # a profiling or error callback that raises does so only once the region's
        # data actions are complete and the table is consistent (API.md §11)
        with _HOLDING:
            runtime = current_runtime()
            enabled, async_clause, wait_clause = values[:3]
            async_arg = async_ if async_ is not None else async_clause
            queue = queue_of(runtime, async_arg)
            if wait is not None or wait_clause is not None:
                wait_for(runtime, wait if wait is not None else wait_clause, queue)
            if not enabled:
                return self._run_on_host(args)
            clauses = values[3] if len(values) > 3 else None
            sorter = _SectionSorter(self, self._section_kinds(runtime, args, sections)) \
                if sections else self
            value = self._launch(runtime, args, queue, clauses, False,
                                 self._matching_plan(runtime, args, clauses), sorter)
            return value if async_arg is None else AsyncResult(queue, value)

    # -- sections and structs (OpenACC 3.3 §2.7.1, §2.7.2) -------------------------------
    def _special_call(self, args, values):
        """What a call of a region with sections in its clauses or struct parameters
        runs: ``(region, args, values, sections)`` — this region, or the variant for
        the call's struct layout (``_variant``) with the structs' members as arguments
        and its clauses; ``sections``: ``(slot, clause, view, text)`` of each *proper*
        section (not the whole array) the clauses map. The bounds are evaluated with
        this call's arguments (names of the parameters and globals, API.md §6.2)."""
        info = self.info
        free = tuple(self._read_free()) if self._read_free is not None else ()
        try:
            layout = _structs.struct_layout(info, args) if self._struct_params else None
        except MemberError as error:
            raise InvalidArgumentError(f"{info.where}: {error}", name=error.name) from None
        full = (*args, *free)
        found = self._evaluate_sections(full) if values[0] and self._sections else ()
        if layout is None:
            params = info.kernel_params
            return self, full, values, [(params.index(name), *rest) for name, *rest in found]
        variant = self._last_variant = self._variant(current_runtime(), layout, args)
        flat = layout.flatten(full)
        if len(values) > 3:  # the evaluated clauses, for the flattened kernel
            values = values[:3] + (_structs.flat_clauses(values[3], variant.info),)
        if not found:
            return variant, flat, values, ()
        slots = {variant._label(name): slot for slot, name in enumerate(variant.info.kernel_params)}
        return variant, flat, values, [(slots[name], *rest) for name, *rest in found]

    def _evaluate_sections(self, full):
        """``(name, clause, view, text)`` of each proper section of a mapping clause,
        its bounds evaluated for this call; whole-array sections (``a[0:n]`` with ``n ==
        len(a)``) need nothing more (the clause applies to the array).

        Raises:
            InvalidArgumentError: A bound cannot be evaluated or reaches outside the
                array, or the section's variable is not an array.
            InvalidDataSectionError: The section is not contiguous (§2.7.1).
        """
        info = self.info
        namespace = collections.ChainMap(dict(zip(info.kernel_params, full)), info.func.__globals__)
        found = []
        params = info.kernel_params
        for clause, section in self._sections:
            if section.name not in params and "." not in section.name:
                continue  # a local variable's private section: its own shape (§2.5.13)
            array = _section_array(namespace, section.name)
            if is_device_array(array) and not isinstance(array, np.ndarray):
                continue  # device data: the clause itself is refused by name (sort)
            view = self._section_view(clause, section, array, namespace)
            if clause in ("private", "firstprivate") or view.shape == array.shape:
                continue  # a private copy is of the whole variable; a whole section
            found.append((section.name, clause, view, section.text))
        return found

    def _section_view(self, clause, section, array, namespace):
        """The view of ``array`` that ``section`` of ``clause`` maps (checked; a whole
        section is the array, a strided argument included, API.md §2)."""
        where, text = self.info.where, f"{clause}({section.text})"
        if not isinstance(array, np.ndarray):
            raise InvalidArgumentError(
                f"{where}: {text}: {section.name!r} is a {type(array).__name__}, not an "
                f"array: a section takes an array parameter or member", name=section.name)
        try:
            view = array[section.index(namespace, array.shape)]
        except Exception as error:  # noqa: BLE001 - a bound may raise anything
            raise InvalidArgumentError(
                f"{where}: {text} does not fit {section.name!r} (shape {array.shape}) at "
                f"this call: {error}; give bounds inside the array (OpenACC 3.3 §2.7.1: "
                f"C a[start:length], Fortran a(lo:hi), 1-based)", name=section.name) from None
        if view.shape != array.shape and view.size and not (
                view.flags.c_contiguous or view.flags.f_contiguous):
            raise InvalidDataSectionError(
                f"{where}: {text} is not contiguous in {section.name!r} (shape "
                f"{array.shape}, strides {view.strides}): a data clause maps a contiguous "
                f"section (OpenACC 3.3 §2.7.1; a C section of the leading dimension is "
                f"one): map the whole array, or a section of its leading dimension",
                name=section.name)
        return view

    def _section_kinds(self, runtime, args, sections):
        """The clause kinds of this call with its proper sections decided (OpenACC 3.3
        §2.7.1): the kernel receives the whole parameter, so a section helps it only
        where the whole array is present (then it acts on the enclosing mapping:
        ``present``); a section mapped alone cannot stand for the whole array (pyacc
        passes arrays, not pointers): a clear error naming both fixes."""
        explicit = dict(self._explicit)
        params = self.info.kernel_params
        for slot, clause, view, text in sections:
            whole, name = args[slot], params[slot]
            if runtime.is_present(whole):
                explicit[name] = MapKind.PRESENT
                continue
            present = view.size == 0 or runtime.is_present(view)
            if clause == "no_create" and not present:
                continue  # the whole array follows no_create (§2.7.10)
            raise self._section_error(clause, text, self._label(name), whole, view, present)
        return explicit

    def _section_error(self, clause, text, label, whole, view, present):
        where = self.info.where
        whole_clause = "" if clause == "present" else f"name the whole array ({clause}({label})) or "
        fix = (f"{whole_clause}map the whole array around the call (acc.data/acc.enter_data"
               f"(copyin=[{label}])), or pass the section as the argument ({label}[lo:hi]) "
               f"and index it from 0")
        if clause == "present" and not present:
            return NotPresentError(
                f"{where}: present({text}): the section ({view.size} of the {whole.size} "
                f"elements of {label!r}) is not present on the device: {fix}", name=label)
        return InvalidDataSectionError(
            f"{where}: {clause}({text}) maps {view.size} of the {whole.size} elements of "
            f"{label!r} (shape {whole.shape}), but the kernel receives the whole array and "
            f"{label!r} is not present as a whole: a device copy of a section cannot stand "
            f"for the array (pyacc passes arrays, not pointers; OpenACC 3.3 §2.7.1): {fix}",
            name=label)

    def _variant(self, runtime, layout, args):
        """The region of the function flattened for ``layout`` (``compiler.flattened``:
        each member the kernel takes is a parameter of its own), one per layout and
        attachment (a struct attached on this device, ``acc.attach``, has its members
        without a clause of their own ``present``: OpenACC 3.3 §2.7.2)."""
        attached = tuple(_routines.attachment_count(runtime, args[index]) > 0
                         for index, _, _ in layout.structs)
        key = (layout, attached)
        variant = self._variants.get(key)
        if variant is None:
            info = _structs.flattened(self.info, layout)
            variant = _StructVariant(self.__wrapped__, info)
            for (_, name, _), held in zip(layout.structs, attached):
                if held:
                    variant._attach(name)
            variant = self._variants.setdefault(key, variant)
        return variant

    def _label(self, name):
        """A parameter as the program spells it (``s.x`` for a struct's member)."""
        return self._labels.get(name, name) if self._labels else name

    def _bind(self, args, kwargs):
        """Positional arguments in parameter order, as Python binds them (keywords,
        defaults; ``TypeError`` for a missing, duplicate or unknown argument)."""
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.args

    # -- the launch ----------------------------------------------------------------------
    # The launch is the hot path of every compute call (budget: 1 µs over a direct Numba
    # call), so it avoids per-call allocation where it can: a call that repeats a recent
    # one finds its plan (``CallPlan``: the kernel, and the mapping runtime's memo that
    # ``enter_compute`` replays without classification or present-table lookup).

    def _launch(self, runtime, args, queue, clauses, silent, plan, sorter=None):
        """One compute call on ``runtime`` and ``queue``: enter the region's data
        (``mapping.compute.enter_compute``: replay ``plan``'s memo, join or full entry),
        launch the kernel, exit (``exit_compute``). ``REGION_ENTER``/``REGION_EXIT`` are
        published here and nowhere else (not at all when ``silent``: nobody listened when
        the call began). ``clauses``: the clause values evaluated for this call, when
        some are expressions; ``sorter``: the ``ArgumentSorter`` (this region, unless
        sections decide kinds at this call)."""
        if not silent and _ACTIVE[_REGION_ENTER]:
            BUS.publish(EventKind.REGION_ENTER, runtime.device.identity, name=self.info.name,
                        info=self.info.clauses.construct, where=self._where)
        staged = None
        if plan is None and not runtime.device.shares_host_memory:
            args, staged = self._stage_strided(runtime, args, sorter or self, queue)
        try:
            # a silent synchronous call's replay may hold the table instead of counting
            ticket = enter_compute(runtime, args, queue, sorter or self, None if plan is None
                                   else plan.memo, hold=silent and queue is runtime.device.sync_queue)
            kernel = plan.kernel if ticket.replayed else self._kernel(runtime, ticket, queue, clauses)
            try:
                value = runtime.device.launch(kernel, ticket.device_args, queue,
                                              name=self.info.name, where=self._where, info=self.info)
            except BaseException as error:
                # the kernel did not complete (a device failure of the launch, an
                # interrupt): device data is not copied back
                exit_compute(runtime, ticket, queue, copy_back=False)
                if _is_kernel_failure(error):
                    raise self._execution_error(error) from error
                raise
            exit_compute(runtime, ticket, queue)
            if staged:
                _unstage(staged, queue)
        finally:
            if not silent and _ACTIVE[_REGION_EXIT]:
                BUS.publish(EventKind.REGION_EXIT, runtime.device.identity, name=self.info.name,
                            info=self.info.clauses.construct, where=self._where)
        if ticket.memo is not None and not ticket.replayed:  # a joined call: keep its plan
            plan = CallPlan(runtime, self._call_key(clauses), args, ticket.memo, kernel)
            self._plans = (plan,) + self._plans[:_PLANS_KEPT - 1]
        if silent and self._expressable and plan is not None and (
                ticket.replayed or runtime.device.shares_host_memory):
            # a replay (on shared memory, where nothing is mapped, a join already is one)
            self._arm_express(runtime, plan, args)
        return value

    def _arm_express(self, runtime, plan, args):
        """Give the express lane (``_fastcall.FastCall``) what this replayed direct call
        checked and launched (``_express.plan_spec``), so that the next such calls repeat
        it in C. Not when the lane is off, nor when the replay did more than it checks, nor
        while a second tally subscriber makes the lane send every call back (a plan made
        at each call would cost more than it saves)."""
        if express_lane() and BUS.tally_alone[0]:
            spec = plan_spec(runtime, plan, args, self._uses_default)
            if spec is not None:
                self._arm_plan(spec)

    def _ran_at_once(self, queue, kernel, seconds, nbytes, value, error):
        """The express lane ran an ``async_`` call's kernel at once on ``queue``, taken
        for it (``QueueSet.take_at_once``): give the queue back, keeping the kernel's
        ``error`` for the covering wait as a queued kernel's is (an interrupt, not an
        ``Exception``, is raised now); the call's ``AsyncResult``."""
        if error is None:
            queue.ran_at_once(kernel, seconds, nbytes, None, None)
            return AsyncResult(queue, value)
        handle = Pending(None, (), self.info.name, queue.async_value)
        handle.error = error
        interrupt = not isinstance(error, Exception)
        queue.ran_at_once(kernel, seconds, nbytes, ("kernel", self.info.name),
                          None if interrupt else error)
        if interrupt:
            raise error
        return AsyncResult(queue, handle)

    def _express_failed(self, error):
        """The kernel of an express call raised ``error``: raise what ``_launch`` would
        (the express lane has released the table already)."""
        if _is_kernel_failure(error):
            wrapped = self._execution_error(error)
            wrapped.__cause__ = error
            error = wrapped
        if isinstance(error, AccError):
            report(error)
        raise error

    def _matching_plan(self, runtime, args, clauses=None):
        """A recent call's plan that holds for this call (``CallPlan.applies``), or None.
        Changes nothing."""
        if self._plans:
            key = self._call_key(clauses)
            for plan in self._plans:
                if plan.applies(runtime, key, args):
                    return plan
        return None

    def _kernel(self, runtime, ticket, queue, clauses):
        """The compiled kernel for the ticket's arguments on this device (the compiler's
        cache, ``compiler.kernel_for``). A compile error at the first call leaves the
        region's data again before it propagates."""
        try:
            return compiler.kernel_for(self.info, ticket.device_args, runtime.device.type_name, clauses)
        except BaseException:
            exit_compute(runtime, ticket, queue, copy_back=False)
            raise

    def _call_key(self, clauses=None):
        """What else decides a call's kernel and data: the kernel environment
        (``compiler.kernel_env``: a change of spelling only costs one full-path call),
        the enclosing ``default`` when an array parameter has no clause, and the launch
        shape of clauses evaluated at this call (on cuda it is part of the kernel)."""
        shape = None if clauses is None else (clauses.num_gangs, clauses.num_workers, clauses.vector_length)
        return (kernel_env(), _enclosing_default() if self._uses_default else None, shape)

    def _run_on_host(self, args):
        """``if(false)``: the region runs on the local thread with host data (§2.5.6); a
        device array (a CuPy array on cuda) has no host data, so it is refused by name
        before a CPU kernel could be handed one."""
        for name, value in zip(self.info.kernel_params, args):
            if not isinstance(value, np.ndarray) and is_device_array(value):
                raise InvalidArgumentError(
                    f"{self.info.where}: the if clause is false, so the region runs on the "
                    f"host (OpenACC 3.3 §2.5.6), but argument {name!r} is a device array "
                    f"({type(value).__name__}) that host code cannot read: pass its host "
                    "array instead, or copy it to the host first", name=name)
        return compiler.kernel_for(self.info, list(args), "host")(*args)

    # -- the ArgumentSorter of mapping.compute.enter_compute ---------------------------------
    def sort(self, runtime, args, explicit=None):
        """Sort the arguments (OpenACC 3.3 §2.6.2): the slots of the arrays to map and
        their ``(MapKind, name)``. Scalars are firstprivate; ``deviceptr`` arrays and
        device arrays are passed as they are (after the device has checked that they are
        its memory); anything else is refused here, before any data action.
        ``explicit``: the clause kinds by parameter, when sections decided some at this
        call (``_SectionSorter``)."""
        map_kinds, slots = [], []
        default = None
        params = self.info.kernel_params
        explicit = explicit or self._explicit
        owns = runtime.device.owns
        for slot, value in enumerate(args):
            if type(value) is not np.ndarray and not isinstance(value, np.ndarray):
                if type(value) not in SCALAR_TYPES:
                    if is_device_array(value):
                        self._check_device_argument(runtime, params[slot], value)
                    else:
                        self._check_scalar_argument(params[slot], value)
                continue
            name = params[slot]
            if value.dtype.char not in _KERNEL_DTYPES or not value.dtype.isnative:
                self._refuse_dtype(name, value)
            kind = explicit.get(name)
            if kind is None:
                # deviceptr arrays, memory of the device (acc.malloc, acc.deviceptr,
                # host_data) and arrays an enclosing acc.data names in deviceptr are passed
                # as they are (API.md §6.2; OpenACC 3.3 §2.7.4)
                if name in self._deviceptr or owns(value) or enclosing_deviceptr(value):
                    runtime.device.extent_of(value)  # must be memory of this device
                    continue
                if default is None:
                    default = self._default or _enclosing_default() or ""
                kind = self._kind_of(name, default)
            map_kinds.append((kind, self._labels.get(name, name) if self._labels else name))
            slots.append(slot)
        return slots, map_kinds

    def counter_of(self, name):
        """OpenACC data clauses hold the structured count (OpenACC 3.3 §2.6.7);
        ``pyacc.omp`` regions override this (API.md §9)."""
        return _STRUCTURED

    def requests(self, runtime, arrays, map_kinds):
        """Validated map requests, for the full entry."""
        requests = []
        for array, (kind, name) in zip(arrays, map_kinds):
            check_array(array, name=name, contiguous=False)
            if not (array.flags.c_contiguous or array.flags.f_contiguous):
                kind = self._strided_kind(runtime, array, name)
            requests.append(MapRequest(kind, array, name))
        return requests

    def _check_scalar_argument(self, name, value) -> None:
        """Anything but an array must be a number, a boolean or a tuple of them (kernel
        scalars are firstprivate, OpenACC 3.3 §2.6.2): a list or another object is
        refused here, before any data action, instead of failing inside Numba."""
        if isinstance(value, (bool, int, float, complex, np.generic)) or (
                isinstance(value, tuple) and all(isinstance(v, (bool, int, float, complex, np.generic))
                                                 for v in value)):
            return
        name = self._label(name)
        if _structs.is_struct(value):  # not read as a struct by this function
            hint = (f"; the function does not read members of {name!r} (s.x), so it is not "
                    f"taken as a struct: read its members in the region, or pass its arrays")
        elif isinstance(value, (list, tuple, range)):
            hint = " (convert it with np.asarray)"
        else:
            hint = ""
        raise InvalidArgumentError(
            f"{self.info.where}: argument {name!r} is a {type(value).__name__}{hint}; a compute "
            "region takes NumPy arrays (or device arrays), numeric or boolean scalars and "
            "structs of them", name=name)

    def _refuse_dtype(self, name, value) -> None:
        """Numba compiles kernels for native-endian booleans, integers, floats and
        complex numbers, and records (structured dtypes) of them; anything else is
        refused before any data action."""
        problem = _record_problem(value.dtype)
        if problem is None:
            return  # a record array: Numba's records (API.md §6.2)
        name = self._label(name)
        fix = ("x.astype(x.dtype.newbyteorder('=')) for byte-swapped fields; a dtype without "
               "its string or object fields" if value.dtype.fields else "e.g. x.astype(np.float64)")
        raise InvalidArgumentError(
            f"{self.info.where}: argument {name!r} (shape {value.shape}, dtype {value.dtype}) "
            f"has a dtype kernels cannot use{problem}: they take native-endian bool, int8-64, "
            "uint8-64, float32/64 and complex64/128 arrays, and records (structured dtypes) of "
            f"those; convert it first ({fix})", name=name)

    def _check_device_argument(self, runtime, name, value) -> None:
        """A device array (``__cuda_array_interface__``: a CuPy or numba-cuda array) is
        device data: passed to the kernel as it is, like a ``deviceptr`` argument, after
        the device has checked that it is its memory (``extent_of``). Host data clauses
        cannot take it."""
        clauses = self.info.clauses
        clause = next((c for c in _KIND_OF_CLAUSE if name in getattr(clauses, c)), None)
        if clause is not None:
            raise InvalidArgumentError(
                f"{self.info.where}: argument {name!r} is a device array ({type(value).__name__} "
                f"with __cuda_array_interface__), but the {clause} clause takes host (numpy) "
                "arrays: name it in deviceptr=... instead, or pass the host array", name=name)
        runtime.device.extent_of(value)  # must be memory of this device

    def _kind_of(self, name, default) -> MapKind:
        """The implicit data attribute of an array parameter without a clause (§2.6.2)."""
        if default == "present":
            return MapKind.PRESENT
        if default == "none":
            raise ClauseError(
                f"{self.info.where}: array argument {name!r} has no data clause and the "
                "region has default(none); name it in copy/copyin/copyout/create/present "
                "(OpenACC 3.3 §2.6.2)", clause="default")
        # implicit present-or-copy; arrays the kernel never writes are not copied back
        return MapKind.COPY if name in self.info.written else MapKind.COPYIN

    def _stage_strided(self, runtime, args, sorter, queue):
        """A non-contiguous view (``a[::-1]``, ``a[:, 0]``) of data that is not present,
        passed without a data clause on a device with memory of its own: its implicit
        copy (OpenACC 3.3 §2.6.2) maps a contiguous copy of it instead, as Fortran passes
        a non-contiguous actual argument, and the copy's values go back into the view
        after the region when the kernel writes it (:func:`_unstage`), so the call does
        what it does on ``host``. A data clause takes contiguous arrays only (API.md §2:
        the view is no contiguous section, OpenACC 3.3 §2.7.1), so a view named in one,
        or under ``default(present)``/``default(none)``, is left to ``_strided_kind``'s
        error. A view that may share memory with another array argument is refused
        (separate copies would not see each other's writes). On an async queue the
        queue's earlier work (and its write-backs) completes first: the copy is taken
        in order. ``(args, [(view, copy)])``."""
        staged = None
        for slot, value in enumerate(args):
            if not isinstance(value, np.ndarray) or value.flags.c_contiguous or value.flags.f_contiguous:
                continue
            name = self.info.kernel_params[slot]
            if name in self._deviceptr or runtime.device.owns(value) or enclosing_deviceptr(value):
                continue  # device memory is passed as it is (sort)
            if runtime.table.lookup(value).relation is not Relation.DISJOINT:
                continue  # present (or partly: an error) data: _strided_kind decides
            if name in getattr(sorter, "explicit", self._explicit) or \
                    (self._default or _enclosing_default()) in ("present", "none"):
                continue  # data clauses take contiguous arrays (API.md §2): the error says so
            self._refuse_aliased_view(args, slot, name)
            if staged is None:
                if queue is not runtime.device.sync_queue:
                    queue.synchronize()  # earlier calls' write-backs into this view
                args, staged = list(args), []
            args[slot] = np.ascontiguousarray(value)
            if name in self.info.written:
                staged.append((value, args[slot]))
        return args, staged

    def _refuse_aliased_view(self, args, slot, name) -> None:
        view = args[slot]
        for other, value in enumerate(args):
            if other != slot and isinstance(value, np.ndarray) and np.may_share_memory(view, value):
                other_name = self._label(self.info.kernel_params[other])
                raise InvalidDataSectionError(
                    f"{self.info.where}: argument {self._label(name)!r} is a non-contiguous view "
                    f"(strides {view.strides}) of data that is not present, and it shares memory "
                    f"with argument {other_name!r}: a copy of the view would not see the "
                    "other's writes. Map the whole array first (acc.data / acc.enter_data), "
                    "then pass the views", name=name)

    @staticmethod
    def _strided_kind(runtime, array, name) -> MapKind:
        """A strided view can only use data already present (it is not a contiguous
        section that could be mapped on its own, OpenACC 3.3 §2.7.1)."""
        if runtime.is_present(array):
            return MapKind.PRESENT
        raise InvalidDataSectionError(
            f"argument {name!r} is a non-contiguous view (strides {array.strides}) of data "
            "that is not present: map the whole array first (acc.data / acc.enter_data), "
            "then pass the view", name=name)

    def _execution_error(self, error) -> ExecutionError:
        if isinstance(error, KernelIndexError):
            array = None if error.array is None else self._label(error.array)
            on = f" on array {array!r}" if array is not None else ""
            return ExecutionError(
                f"kernel {error.kernel} failed: index out of bounds{on}: {error}",
                kernel=error.kernel, name=array)
        error = _raised_inside(error)
        return ExecutionError(f"kernel {self.info.where} failed: {type(error).__name__}: {error}",
                              kernel=self.info.where)


def _unstage(staged, queue) -> None:
    """Write each staged copy back into its view (``ComputeRegion._stage_strided``), in
    the queue's order: after the region's copy-backs."""
    def write_back():
        for view, copy in staged:
            view[...] = copy
    queue.defer(write_back)  # on the host, once the queue has passed the copy-backs


class _StructVariant(ComputeRegion):
    """The region a struct call runs (``ComputeRegion._variant``): the function
    flattened for one struct layout (``compiler.analysis.flattened``), whose arguments
    are the structs' members. It is entered by its parent with everything read
    (``_run``): arguments, free values and clause values, evaluated with the structs."""

    def __init__(self, function, info):
        super().__init__(function, info)
        self._special = False  # the parent evaluated the sections
        self._bound = True
        self._read_free = None  # the parent read them
        self._uses_default = self._default is None and any(
            name not in self._explicit and name not in self._deviceptr for name in info.kernel_params)
        self._attached: dict = {}  # member parameter -> struct, of attached structs

    def _attach(self, name):
        """Struct parameter ``name`` is attached (``acc.attach``): its members without a
        clause of their own are ``present`` (OpenACC 3.3 §2.7.2: the device struct
        refers to their device copies; nothing is copied implicitly)."""
        for flat, label in self.info.labels.items():
            if label.split(".")[0] == name and flat not in self._explicit:
                self._explicit[flat] = MapKind.PRESENT
                self._attached[flat] = name
        self._uses_default = self._default is None and any(
            n not in self._explicit and n not in self._deviceptr for n in self.info.kernel_params)

    def __call__(self, *args, **kwargs):
        raise TypeError("a struct variant is run by its region, not called")

    _call_slow = __call__

    def _launch(self, *launch, **options):
        try:
            return super()._launch(*launch, **options)
        except NotPresentError as error:
            name = getattr(error, "name", None)
            struct = next((s for flat, s in self._attached.items() if self._label(flat) == name), None)
            if struct is not None:
                error.args = (f"{error.args[0]}; {struct!r} is attached (acc.attach), so the "
                              f"kernel uses its members' device copies: map {name} again, "
                              f"or acc.detach({struct}) to let the implicit rules copy it",)
            raise


class _WholeSections:
    """Tells fast whether every mapping section of a region covers its whole array at
    a call (``a[0:n]`` with ``n == len(a)``, ``a(1:n)``, ``a[:]``): such a call is an
    ordinary call (OpenACC 3.3 §2.7.1), which takes the direct path. The bounds of all
    the sections are one compiled tuple expression, evaluated once per call with the
    names it reads; any doubt (a bound that fails, a section that is not whole, an
    argument that is not an array) answers False, and the full path decides."""

    __slots__ = ("code", "sources", "plan")

    def __init__(self, info, sections):
        params = info.kernel_params
        exprs, plan = [], []
        for clause, section in sections:
            if clause in ("private", "firstprivate") or section.name not in params:
                continue  # (a private copy is of the whole variable)
            dims = tuple((_operand(first, exprs), _operand(second, exprs))
                         for first, second in section.bounds)
            plan.append((params.index(section.name), section.fortran, dims))
        names = sorted({name for expr in exprs for name in expr.names})
        self.sources = tuple((name, params.index(name) if name in params else None)
                             for name in names)
        self.code = compile("(" + "".join(f"({expr.text}), " for expr in exprs) + ")",
                            "<pyacc sections>", "eval") if exprs else None
        self.plan = tuple(plan)

    def covers(self, full, module_globals) -> bool:
        values = ()
        if self.code is not None:
            try:
                namespace = {name: full[slot] if slot is not None else module_globals[name]
                             for name, slot in self.sources}
                values = eval(self.code, _BOUND_GLOBALS, namespace)  # noqa: S307 - checked text
            except Exception:  # noqa: BLE001 - the full path reports it
                return False
        for slot, fortran, dims in self.plan:
            array = full[slot]
            if type(array) is not np.ndarray or len(dims) > array.ndim:
                return False
            for (first, second), extent in zip(dims, array.shape):
                low = values[first[1]] if type(first) is tuple else first
                high = values[second[1]] if type(second) is tuple else second
                if fortran:
                    if not ((low is None or low == 1) and (high is None or high == extent)):
                        return False
                elif not ((low is None or low == 0) and (high is None or high == extent)):
                    return False
        return True


#: what a section bound sees besides its names (the builtins a clause expression may call)
_BOUND_GLOBALS = {"__builtins__": EXPR_BUILTINS}


def _operand(bound, exprs):
    """A bound for ``_WholeSections``: None, an int, or ``("expr", index)``."""
    if bound is None or not hasattr(bound, "text"):
        return bound
    exprs.append(bound)
    return ("expr", len(exprs) - 1)


class _SectionSorter:
    """The ``ArgumentSorter`` of a call whose proper sections decided some clause kinds
    (``ComputeRegion._section_kinds``): its region's, with those kinds."""

    __slots__ = ("region", "explicit")

    def __init__(self, region, explicit):
        self.region = region
        self.explicit = explicit

    def sort(self, runtime, args):
        return self.region.sort(runtime, args, self.explicit)

    def requests(self, runtime, arrays, map_kinds):
        return self.region.requests(runtime, arrays, map_kinds)

    def counter_of(self, name):
        return self.region.counter_of(name)


def _section_array(namespace, name):
    """The variable a section names: a parameter (or global), or a member ``s.x``."""
    root, *path = name.split(".")
    value = namespace[root]
    for depth, attr in enumerate(path):
        try:
            value = getattr(value, attr)
        except AttributeError:
            spelled = ".".join([root, *path[:depth + 1]])
            raise InvalidArgumentError(f"a data clause names {spelled!r}, but {root!r} "
                                       f"({type(namespace[root]).__name__}) has no such "
                                       f"member at this call", name=spelled) from None
    return value


def _record_problem(dtype):
    """None for a record dtype kernels can take (fields of kernel dtypes, native byte
    order, nested records and fixed-size subarrays of them); else what is wrong, for
    the message."""
    if dtype.fields is None:
        return ""
    for field, (field_type, *_rest) in dtype.fields.items():
        base = field_type.base
        if base.fields is not None:
            inner = _record_problem(base)
            if inner is not None:
                return inner
        elif base.char not in _KERNEL_DTYPES or not base.isnative:
            return f" (its field {field!r} is {field_type})"
    return None


if CALL_BASE is object:  # no express lane: the Python launcher is the call
    ComputeRegion.__call__ = ComputeRegion._call_slow


#: what to do when a kernel argument is only partly present (multi-device codes map
#: x[lo:hi] per device and index the whole array)
_SECTION_HINT = ("a compute region maps each array argument whole: pass the section that is "
                 "present (a view such as x[lo:hi]) and index it from 0, or map the whole array")

#: fast-path plans a region keeps (each is tried in turn, newest first, before the full path)
_PLANS_KEPT = 4

#: dtype characters of the arrays a kernel can take (bool, signed and unsigned integers,
#: float32/64, complex64/128; not float16, long double, objects, strings, records)
_KERNEL_DTYPES = frozenset("?bBhHiIlLqQfdFD")

def _add_section_hint(error) -> None:
    """A partly present argument (only ``enter_compute`` raises it in a compute call):
    the message says what to pass instead."""
    if isinstance(error, PartlyPresentError) and _SECTION_HINT not in str(error):
        error.args = (f"{error.args[0] if error.args else error}; {_SECTION_HINT}",) + error.args[1:]


def _raised_inside(error):
    """The exception a kernel raised: Python reports one raised in a routine the kernel
    calls as ``SystemError: ... returned a result with an exception set``, with the
    routine's exception (``ZeroDivisionError`` ...) as its context."""
    while isinstance(error, SystemError) and "with an exception set" in str(error) \
            and error.__context__ is not None:
        error = error.__context__
    return error


def _is_kernel_failure(error) -> bool:
    """Errors raised by the kernel itself (not pyacc's own errors or interrupts)."""
    return isinstance(error, Exception) and not isinstance(error, (AccError, CompileError))


def _enclosing_default():
    """``default(...)`` of the innermost open ``acc.data`` region of this thread that has
    one (the regions push themselves on ``ICVS.default_clause``, a ``RegionStack``)."""
    return ICVS.default_clause.innermost_default


def explain(region) -> str:
    """How each loop of a compute region was compiled (API.md §6.1, like NVHPC's
    ``-Minfo=accel``): parallel (collapse, gang/vector, interchange, run-time
    conditions) or sequential and why (the dependence found: array and line),
    reductions (declared or found), private variables, and each parameter's data clause
    (explicit, or the implicit rule of OpenACC 3.3 §2.6.2). Before the first call the
    argument types are unknown: arrays and scalars are told apart from the first call on.
    ``PYACC_INFO=1`` prints the same text at each kernel's first compile."""
    if not isinstance(region, ComputeRegion):
        raise TypeError(f"acc.explain takes a compute region (a function decorated with "
                        f"@acc.parallel_loop, @acc.kernels ...), got {region!r}")
    info = (region._last_variant or region).info  # a struct call: the kernel it ran
    notes = info.notes
    if notes is None:  # not compiled yet: the planner's decisions at decoration
        notes = info.plan.notes
    shown, arg_types = feedback_view(info, info.arg_types)
    text = compiler.explain(shown, notes, arg_types)
    try:
        at_once = current_runtime().device.runs_work_at_once
    except AccError:  # no usable current device: nothing to say about its queues
        at_once = False
    if at_once:  # its async calls (API.md §5)
        text += "\n" + CROSSOVER.describe()
    return text


# == decorators ==============================================================================
def at_caller(error: CompileError, depth: int) -> CompileError:
    """``error`` located at the line of the frame ``depth`` levels above this function's
    (the decorator expression in the user's code), unless it has a location already
    (API.md §6: a bad clause names the file and line of the decorator; also
    ``pyacc.omp``'s decorators)."""
    if error.filename is not None:
        return error
    frame = sys._getframe(depth)
    return CompileError(error.reason, frame.f_code.co_filename, frame.f_lineno)


def _parse_at_caller(construct, clause_string, clauses):
    """``compiler.parse_clauses``, with a clause error located at the decorator's line."""
    try:
        return compiler.parse_clauses(construct, clause_string, **clauses)
    except CompileError as error:
        raise at_caller(error, 3) from None


def _decorator(construct: str):
    def decorator(function=None, clause_string=None, /, **clauses):
        if isinstance(function, str):  # @acc.parallel_loop("collapse(2) ...")
            function, clause_string = None, function
        parsed = _parse_at_caller(construct, clause_string, clauses)

        def wrap(func):
            if not callable(func):
                raise CompileError(f"@acc.{construct} decorates a function, got {func!r}")
            return ComputeRegion(func, compiler.analyze(func, parsed))

        return wrap if function is None else wrap(function)

    decorator.__name__ = construct
    decorator.__qualname__ = construct
    decorator.__doc__ = (
        f"``@acc.{construct}`` — bare, with clauses as keywords, or with one OpenACC clause "
        "string: ``@acc.{c}``, ``@acc.{c}(collapse=2)``, ``@acc.{c}(\"collapse(2)\")``. "
        "See API.md §6.".replace("{c}", construct))
    return decorator


parallel = _decorator("parallel")
parallel_loop = _decorator("parallel_loop")
kernels = _decorator("kernels")
kernels_loop = _decorator("kernels_loop")
serial = _decorator("serial")


def routine(function=None, clause_string=None, /, **clauses):
    """``@acc.routine``: a function callable from kernels (compiled as a device function)
    and still callable from Python. Bare, or with ``seq``/``gang``/``worker``/``vector``."""
    if isinstance(function, str):
        function, clause_string = None, function
    if clause_string is None and not clauses:
        clauses = {"seq": True}
    parsed = _parse_at_caller("routine", clause_string, clauses)

    def wrap(func):
        return compiler.mark_routine(func, parsed)

    return wrap if function is None else wrap(function)
