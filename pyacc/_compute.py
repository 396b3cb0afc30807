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
    PartlyPresentError,
    check_array,
)

from pyacc.mapping.compute import enter_compute, exit_compute
from pyacc.mapping.queues import Pending
from pyacc.compiler import kernel_env
from pyacc.compiler.kernel import SCALAR_TYPES

from ._clauses import queue_of, wait_for
from ._call_inputs import clause_values, free_reader
from ._replay import CallPlan, is_device_array
from ._devices import ICVS, current_runtime
from ._errors import directive_end, report
from ._express import CALL_BASE, express_lane, plan_spec
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
        self._signature = inspect.signature(function)
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
                        and wait_clause is None)
        self._expressable = self._direct and self._read_free is None and CALL_BASE is not object

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
        return self._call(args, async_, wait, if_, kwargs)

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
            if self._read_free is not None:  # globals and closure values, read now
                args = (*args, *self._read_free())
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
                value = self._launch(runtime, args, queue, clauses, False,
                                     self._matching_plan(runtime, args, clauses))
                return value if async_arg is None else AsyncResult(queue, value)
        except Exception as error:
            if isinstance(error, AccError):
                _add_section_hint(error)
                report(error)
            if _ACTIVE[_DIRECTIVE_END]:  # a checkpoint after a failed call, too
                directive_end(self.info.where)
            raise

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

    def _launch(self, runtime, args, queue, clauses, silent, plan):
        """One compute call on ``runtime`` and ``queue``: enter the region's data
        (``mapping.compute.enter_compute``: replay ``plan``'s memo, join or full entry),
        launch the kernel, exit (``exit_compute``). ``REGION_ENTER``/``REGION_EXIT`` are
        published here and nowhere else (not at all when ``silent``: nobody listened when
        the call began). ``clauses``: the clause values evaluated for this call, when
        some are expressions."""
        if not silent and _ACTIVE[_REGION_ENTER]:
            BUS.publish(EventKind.REGION_ENTER, runtime.device.identity, name=self.info.name,
                        info=self.info.clauses.construct, where=self._where)
        try:
            # a silent call is synchronous: its replay may hold the table instead of counting
            ticket = enter_compute(runtime, args, queue, self, None if plan is None else plan.memo,
                                   hold=silent)
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
    def sort(self, runtime, args):
        """Sort the arguments (OpenACC 3.3 §2.6.2): the slots of the arrays to map and
        their ``(MapKind, name)``. Scalars are firstprivate; ``deviceptr`` arrays and
        device arrays are passed as they are (after the device has checked that they are
        its memory); anything else is refused here, before any data action."""
        map_kinds, slots = [], []
        default = None
        params = self.info.kernel_params
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
            kind = self._explicit.get(name)
            if kind is None:
                if name in self._deviceptr:
                    runtime.device.extent_of(value)  # must be memory of this device
                    continue
                if default is None:
                    default = self._default or _enclosing_default() or ""
                kind = self._kind_of(name, default)
            map_kinds.append((kind, name))
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
        hint = " (convert it with np.asarray)" if isinstance(value, (list, tuple, range)) else ""
        raise InvalidArgumentError(
            f"{self.info.where}: argument {name!r} is a {type(value).__name__}{hint}; a compute "
            "region takes NumPy arrays (or device arrays) and numeric or boolean scalars", name=name)

    def _refuse_dtype(self, name, value) -> None:
        """Numba compiles kernels for native-endian booleans, integers, floats and
        complex numbers only; anything else is refused before any data action."""
        raise InvalidArgumentError(
            f"{self.info.where}: argument {name!r} (shape {value.shape}, dtype {value.dtype}) "
            "has a dtype kernels cannot use: they take native-endian bool, int8-64, uint8-64, "
            "float32/64 and complex64/128 arrays; convert it first (e.g. "
            "x.astype(np.float64))", name=name)

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
            on = f" on array {error.array!r}" if error.array is not None else ""
            return ExecutionError(
                f"kernel {error.kernel} failed: index out of bounds{on}: {error}",
                kernel=error.kernel, name=error.array)
        return ExecutionError(f"kernel {self.info.where} failed: {type(error).__name__}: {error}",
                              kernel=self.info.where)


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
    info = region.info
    notes = info.notes
    if notes is None:  # not compiled yet: the planner's decisions at decoration
        notes = info.plan.notes
    return compiler.explain(info, notes, info.arg_types)


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
