"""Compute regions: the decorators and the launcher (API.md §6; OpenACC 3.3 §2.5, §2.9).

Owns: ``parallel``, ``parallel_loop``, ``kernels``, ``kernels_loop``, ``serial`` and
``routine``, and ``ComputeRegion`` — the one place where ``compiler`` and ``mapping`` meet
(DESIGN.md). At decoration time the function is analysed (``compiler.analyze``: compile
errors surface here, pointing at the offending line). At each call the launcher

1. classifies every argument (``ComputeRegion.sort``, from ``_arguments``; OpenACC 3.3
   §2.6.2 implicit data attributes): an explicit data clause applies as written; otherwise arrays are
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
(``_sections``) before step 1: a proper section acts on the enclosing mapping or is
refused by name; a struct argument runs the region's *variant* for its layout
(``_StructVariant``, made by ``_variant``: the function flattened by ``compiler.analysis``).

``PYACC_DISABLE_JIT=1`` runs kernels as plain Python with the same data semantics.
A kernel that fails raises ``ExecutionError`` (``_outcome``); its ``copy``/``copyout``
data is not copied back (the device data may be garbage) but every count is released.

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

import functools
import inspect
import sys

import numpy as np

from pyacc import compiler
from pyacc.compiler import CompileError
from pyacc.mapping import (
    BUS,
    AccError,
    EventKind,
    InvalidArgumentError,
)

from pyacc.mapping.compute import enter_compute, exit_compute
from pyacc.mapping.queues import CROSSOVER, Pending
from pyacc.compiler import kernel_env, threading_layer
from pyacc.compiler import analysis as _structs
from pyacc.compiler.arguments import is_device_array
from pyacc.compiler.kernel import feedback_view

from . import _routines
from ._arguments import KIND_OF_CLAUSE, ArgumentSorting, unstage
from ._clauses import is_sync, queue_of, wait_for
from ._call_inputs import (call_binding, clause_values, condition_of, constant_queues, evaluate_clauses,
                           free_reader, free_sources, truth_of)
from ._outcome import AsyncResult, add_section_hint, is_kernel_failure, kernel_failure
from ._replay import CallPlan
from ._devices import ICVS, current_runtime
from ._errors import directive_end, report
from ._express import CALL_BASE, configure_async, enable_vectorcall, express_lane, plan_spec
from ._direct_calls import DirectCalls
from ._sections import SectionCalls, SectionSorter, StructVariant, WholeSections
from .observe._locate import Location

__all__ = ["parallel", "parallel_loop", "kernels", "kernels_loop", "serial", "routine", "ComputeRegion",
           "explain"]

_ACTIVE = BUS.active
_HOLDING = BUS.holding()
_REGION_ENTER = int(EventKind.REGION_ENTER)
_REGION_EXIT = int(EventKind.REGION_EXIT)
_DIRECTIVE_END = int(EventKind.DIRECTIVE_END)

configure_async(AsyncResult)  # the express lane makes those of async calls run at once


class ComputeRegion(DirectCalls, SectionCalls, ArgumentSorting, CALL_BASE):
    """A decorated compute-region function; calling it launches the kernel.

    Call as ``f(*args, async_=None, wait=None, if_=None)``; keyword arguments by parameter
    name are accepted too. ``if_`` given at the call overrides the ``if`` clause: false runs
    the region on the host on host data (OpenACC 3.3 §2.5.6). Returns the reduction value (a tuple for several; None without), or an
    ``AsyncResult`` when ``async_`` names a queue.

    The call itself is the express lane's (``_fastcall.FastCall``, in C) when it is
    built: a call that repeats one the Python launcher replayed (``_arm_express``) is
    checked and launched there; any other goes to ``_call_slow``, the Python launcher.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        enable_vectorcall(cls)  # (a subclass's calls take the C base's vectorcall too)

    def __init__(self, function, info):
        self.info = info
        self._where = Location(info.filename, info.lineno, info.name)  # for events
        self.__wrapped__ = function
        functools.update_wrapper(self, function)
        clauses = info.clauses
        self._explicit = {}
        for clause, kind in KIND_OF_CLAUSE.items():
            for name in getattr(clauses, clause):
                self._explicit[name] = kind
        for name in info.loop_private:  # (only in loops' private clauses: §2.6.2)
            self._explicit.setdefault(name, KIND_OF_CLAUSE["private"])
        self._deviceptr = frozenset(clauses.deviceptr)
        self._default = clauses.default
        self._clause_values = clause_values(clauses)  # (enabled, async, wait) of the clauses
        #: clause values written as expressions of the parameters (``"gang((n+127)/128)"``,
        #: ``"if(n > 100)"``): evaluated at each call (API.md §6.1)
        self._expressions = bool(clauses.expressions())
        self._arity = len(info.params)
        # the last joined calls' plans (newest first), for the next ones: a Jacobi loop
        # calls step(u, unew) and step(unew, u) in turn, and each needs its own plan
        self._call_plans: tuple = ()
        #: a call with no call-time clauses may go straight to ``_launch`` with the
        #: clauses' values: they are constants, the region runs on the synchronous queue
        #: or on its constant ``async`` clause's (``_clause_async``), after the queues of
        #: its constant ``wait`` clause (``_clause_wait``)
        self._direct = False
        self._clause_async = self._clause_wait = self._condition = None  # (set with ``_direct``)
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

    def _bind_free_names(self):
        """At the first call: resolve the module-level names the kernel reads (API.md
        §6.1; names defined after the decorator count) and prepare to read their values
        at each call."""
        info = self.info
        compiler.bind_free_names(info)
        for name in info.owners:  # (routines' arrays found now: present, OpenACC 3.3 §2.15.1)
            self._explicit.setdefault(name, KIND_OF_CLAUSE["present"])
        # the enclosing default(...) matters only when some array parameter has no clause
        self._uses_default = self._default is None and any(
            name not in self._explicit and name not in self._deviceptr for name in info.kernel_params)
        self._read_free = free_reader(info)
        self._labels = info.labels  # (with the modules' attributes found now: ``gmod.G``)
        enabled, async_clause, wait_clause = self._clause_values[:3]
        constant = constant_queues(async_clause, wait_clause)
        #: an ``if`` clause written as an expression, the region's only one: its direct
        #: calls ask it first (``FastCall``'s ``_condition``; false: the full path's host run)
        self._condition = condition_of(info)
        direct = (not self._expressions or self._condition is not None) and enabled \
            and constant is not None and not self._special
        #: a direct region's constant ``async`` clause (a queue, or ``acc.async_noval``):
        #: its calls without ``async_`` run there (OpenACC 3.3 §2.16.1), and its ``wait``
        #: clause's queues, which its calls without ``wait`` wait for first (§2.16.2), also
        #: in the express lane (``FastCall``'s ``_clause_async``, ``_clause_wait``). Set
        #: before ``_direct``: another thread's call in between must not skip them
        self._clause_async, self._clause_wait = constant if direct else (None, None)
        self._direct = direct
        self._expressable = direct and CALL_BASE is not object
        if self._expressable and self._read_free is not None:  # read in C at each call, too
            self._free = free_sources(info)
        binding = call_binding(self._signature) if self._expressable else None
        if binding is not None and len(binding[0]) == self._arity:  # by name, defaults: in C too
            self._binding = binding
        if self._special and not self._expressions and enabled and async_clause is None \
                and wait_clause is None and not (self._sections and self._struct_params):
            self._special_direct = True
            if self._sections:
                self._whole = WholeSections(info, self._sections)
        self._bound = True  # (last: a call on another thread meanwhile binds again)

    def __repr__(self) -> str:
        return f"<pyacc {self.info.clauses.construct} region {self.info.where}>"

    def __get__(self, instance, owner):
        return self if instance is None else functools.partial(self, instance)

    def _call(self, args, async_, wait, if_):
        """A call in full, its arguments bound (``_bind``): read the clauses (expressions
        evaluated with the arguments, ``if_``/``async_``/``wait`` given at the call), the
        queue and its waits; then ``_launch`` (or the host, under ``if(false)``)."""
        try:
            if not self._bound:
                self._bind_free_names()
            # (an if expression, the region's only one, is not evaluated when if_ replaces it)
            values = evaluate_clauses(self.info, args, self._condition is None) if self._expressions \
                and not (if_ is not None and self._condition is not None) else self._clause_values
            if if_ is not None:  # given at the call, it overrides the clause (§2.5.6)
                values = (truth_of(if_, self.info.where),) + values[1:]
            region, sections = self, ()
            if self._special:  # sections in the clauses, struct parameters
                region, args, values, sections = self._special_call(args, values)
            elif self._read_free is not None:  # globals and closure values, read now
                args = (*args, *self._read_free())
            return region._run(args, values, sections, async_, wait)
        except Exception as error:
            if isinstance(error, AccError):
                add_section_hint(error)
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
            if is_sync(async_arg):  # acc.async_sync: synchronous, a value (§2.16.1)
                async_arg = None
            queue = queue_of(runtime, async_arg)
            if wait is not None or wait_clause is not None:  # if(false): the local thread waits
                wait_for(runtime, wait if wait is not None else wait_clause,
                         queue if enabled else runtime.device.sync_queue)
            if not enabled:
                return self._run_on_host(args)
            clauses = values[3] if len(values) > 3 else None
            sorter = SectionSorter(self, self._section_kinds(runtime, args, sections)) \
                if sections else self
            value = self._launch(runtime, args, queue, clauses, False,
                                 self._matching_call_plan(runtime, args, clauses), sorter)
            return value if async_arg is None else AsyncResult(queue, value)

    # -- sections and structs (OpenACC 3.3 §2.7.1, §2.7.2) -------------------------------
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
        the call began). ``clauses``: the clause values evaluated for this call, when some
        are expressions; ``sorter``: the ``ArgumentSorter`` (unless sections decide, this)."""
        if not silent and _ACTIVE[_REGION_ENTER]:
            BUS.publish(EventKind.REGION_ENTER, runtime.device.identity, name=self.info.name,
                        info=self.info.clauses.construct, where=self._where)
        staged = None
        if plan is None and not runtime.device.shares_host_memory:
            args, staged = self._stage_strided(runtime, args, sorter or self, queue)
        try:
            # a silent synchronous call's replay may hold the table instead of counting
            ticket = enter_compute(runtime, args, queue, sorter or self, None if plan is None
                                   else plan.memo, hold=silent and queue is runtime.device.sync_queue,
                                   lend=not self.info.may_return_arrays)
            kernel = plan.kernel if ticket.replayed else self._kernel(runtime, ticket, queue, clauses)
            try:
                value = runtime.device.launch(kernel, ticket.device_args, queue,
                                              name=self.info.name, where=self._where, info=self.info)
            except BaseException as error:
                # the kernel did not complete (a device failure of the launch, an
                # interrupt): device data is not copied back
                exit_compute(runtime, ticket, queue, copy_back=False)
                if is_kernel_failure(error):
                    raise kernel_failure(error, self.info.where, self._label) from error
                raise
            exit_compute(runtime, ticket, queue)
            if staged:
                unstage(staged, queue)
        finally:
            if not silent and _ACTIVE[_REGION_EXIT]:
                BUS.publish(EventKind.REGION_EXIT, runtime.device.identity, name=self.info.name,
                            info=self.info.clauses.construct, where=self._where)
        if ticket.memo is not None and not ticket.replayed:  # a joined call: keep its plan
            plan = CallPlan(runtime, self._call_key(clauses), args, ticket.memo, kernel)
            self._call_plans = (plan,) + self._call_plans[:_CALL_PLANS_KEPT - 1]
        elif ticket.replayed and ticket.memo is not plan.memo:
            plan.memo = ticket.memo  # the memo followed to a changed table (ComputeMemo.followed)
        if silent and self._expressable and plan is not None and (
                ticket.replayed or runtime.device.shares_host_memory):
            # a replay (on shared memory, where nothing is mapped, a join already is one)
            self._arm_express(runtime, plan, args)
        return value

    def _arm_express(self, runtime, plan, args):
        """Give the express lane (``_fastcall.FastCall``) what this replayed direct call
        checked and launched (``_express.plan_spec``), for the next such calls to repeat in
        C. Not when the lane is off, the replay did more than it checks, or a second tally
        subscriber makes the lane send every call back (a plan per call costs more)."""
        if express_lane() and BUS.tally_alone[0]:
            spec = plan_spec(runtime, plan, args, self._uses_default,
                             (self.info.name, self._where, self.info))
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
        if is_kernel_failure(error):
            wrapped = kernel_failure(error, self.info.where, self._label)
            wrapped.__cause__ = error
            error = wrapped
        if isinstance(error, AccError):
            report(error)
        raise error

    def _matching_call_plan(self, runtime, args, clauses=None):
        """A recent call's plan that holds for this call (``CallPlan``'s docstring), or None.
        Changes nothing. The one replay check of the Python launcher: every call path
        asks it (the express lane's, in C, is ``enter_plan`` in ``_express_plan.c.h``)."""
        plans = self._call_plans
        if plans:
            key = self._call_key(clauses)
            for plan in plans:
                if plan.runtime is runtime and plan.key == key and (
                        not plan.scalars or plan.scalars_match(args)) and plan.memo.matches(args):
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
        shape = None if clauses is None else (clauses.num_gangs, clauses.num_workers, clauses.vector_length,
                                              clauses.device_types)  # (§2.4: each type's own)
        # enclosing_default(), spelled out: every Python launch asks for this key
        return (kernel_env(), ICVS.region_stack.innermost_default if self._uses_default else None, shape)

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



class _StructVariant(StructVariant, ComputeRegion):
    """The region a struct call runs (``ComputeRegion._variant``): the function
    flattened for one struct layout (``compiler.analysis.flattened``), whose arguments
    are the structs' members. It is entered by its parent with everything read
    (``_run``): arguments, free values and clause values, evaluated with the structs."""


if CALL_BASE is object:  # no express lane: the Python launcher is the call
    ComputeRegion.__call__ = ComputeRegion._call_slow
enable_vectorcall(ComputeRegion)


#: call plans a region keeps (each is tried in turn, newest first, before the full path)
_CALL_PLANS_KEPT = 4


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
    caveat = threading_layer.caveat() if at_once else None  # (a CPU device's kernels)
    if caveat is not None:
        text += "\n" + caveat
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
