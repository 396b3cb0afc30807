"""Compute regions: the decorators and the launcher (API.md §6; OpenACC 3.3 §2.5, §2.9).

Owns: ``parallel``, ``parallel_loop``, ``kernels``, ``kernels_loop``, ``serial`` and
``routine``, and ``ComputeRegion`` — the one place where ``compiler`` and ``mapping`` meet
(DESIGN.md). At decoration time the function is analysed (``compiler.analyze``: compile
errors surface here, pointing at the offending line). At each call the launcher

1. classifies every argument (OpenACC 3.3 §2.6.2 implicit data attributes):
   an explicit data clause applies as written; otherwise arrays are present-or-copy —
   ``copy`` when the kernel may write them, ``copyin`` when it only reads them (nothing is
   copied back) — or ``present`` under ``default="present"`` (the decorator's, or that of
   the innermost enclosing ``acc.data`` region); ``default="none"`` requires a clause;
   ``deviceptr`` arrays are already device memory; scalars are firstprivate;
2. enters a structured region around the call (present data is used in place; a strided
   view of present data becomes the matching strided device view),
3. gets the kernel for the device's target and arguments (``compiler.get_kernel``,
   memoised), launches it on the queue, and
4. exits the region (copy-backs, frees), returning the reductions.

``PYACC_DISABLE_JIT=1`` runs kernels as plain Python with the same data semantics.
A kernel that fails raises ``ExecutionError``; its ``copy``/``copyout`` data is not
copied back (the device data may be garbage) but every count is released.
"""

from __future__ import annotations

import functools
import os

import numpy as np

import compiler
from compiler import CompileError, KernelIndexError
from mapping import (
    BUS,
    ClauseError,
    EventKind,
    Counter,
    ExecutionError,
    InvalidDataSectionError,
    MapKind,
    MapRequest,
    check_array,
)

from ._clauses import async_noval, async_value, queue_of, wait_for
from ._devices import ICVS, current_runtime
from ._errors import report

__all__ = ["parallel", "parallel_loop", "kernels", "kernels_loop", "serial", "routine", "ComputeRegion"]

_ACTIVE = BUS.active
_REGION_ENTER = int(EventKind.REGION_ENTER)
_REGION_EXIT = int(EventKind.REGION_EXIT)

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
    """What an async compute call returns: ``.result()`` waits for its queue and returns
    the reductions (None when the kernel has none)."""

    def __init__(self, runtime, queue_number, value):
        self._runtime = runtime
        self._queue_number = queue_number
        self._value = value

    def result(self):
        self._runtime.device.queue(self._queue_number).synchronize()
        return self._value

    def done(self) -> bool:
        return self._runtime.device.queue(self._queue_number).is_idle()


class ComputeRegion:
    """A decorated compute-region function; calling it launches the kernel.

    Call as ``f(*args, async_=None, wait=None)``; keyword arguments by parameter name are
    accepted too. Returns the reduction value (a tuple for several; None without), or an
    ``AsyncResult`` when ``async_`` names a queue.
    """

    def __init__(self, function, info):
        self.info = info
        self.__wrapped__ = function
        functools.update_wrapper(self, function)
        clauses = info.clauses
        self._explicit = {}
        for clause, kind in _KIND_OF_CLAUSE.items():
            for name in getattr(clauses, clause):
                self._explicit[name] = kind
        self._deviceptr = frozenset(clauses.deviceptr)
        self._default = clauses.default

    def __repr__(self) -> str:
        return f"<pyacc {self.info.clauses.construct} region {self.info.where}>"

    def __get__(self, instance, owner):
        return self if instance is None else functools.partial(self, instance)

    def __call__(self, *args, async_=None, wait=None, **kwargs):
        if kwargs:
            args = self._bind(args, kwargs)
        try:
            return self._launch(args, async_, wait)
        except Exception as error:
            if hasattr(error, "code"):
                report(error)
            raise

    def _bind(self, args, kwargs):
        params = self.info.params
        values = list(args) + [None] * (len(params) - len(args))
        for name, value in kwargs.items():
            if name not in params:
                raise TypeError(f"{self.info.name}() got an unexpected keyword argument {name!r}")
            values[params.index(name)] = value
        return tuple(values)

    # -- the launch ----------------------------------------------------------------------
    def _launch(self, args, async_, wait):
        if len(args) != len(self.info.params):
            raise TypeError(f"{self.info.name}() takes {len(self.info.params)} arguments "
                            f"({', '.join(self.info.params)}), {len(args)} given")
        runtime = ICVS.runtime or current_runtime()
        async_arg = self._async_argument(async_)
        queue = runtime.device.sync_queue if async_arg is None else queue_of(runtime, async_arg)
        if wait is not None or self.info.clauses.wait not in (None, False):
            wait_for(runtime, wait if wait is not None else self._wait_clause())
        if not self._enabled():
            return self._run_on_host(args)
        requests, slots = self._requests(runtime, args)
        if _ACTIVE[_REGION_ENTER]:
            BUS.publish(EventKind.REGION_ENTER, runtime.device.identity, name=self.info.name,
                        info=self.info.clauses.construct)
        mapped = runtime.enter(requests, Counter.STRUCTURED, queue)
        device_args = list(args)
        for slot, item in zip(slots, mapped):
            device_args[slot] = runtime.device_array(item)
        try:
            value = self._run(runtime, device_args, queue)
        except BaseException as error:
            failed = _is_kernel_failure(error)
            self._exit(runtime, mapped, queue, copy_back=not failed)
            if failed:
                raise self._execution_error(error) from error
            raise
        self._exit(runtime, mapped, queue, copy_back=True)
        if async_arg is not None:
            return AsyncResult(runtime, async_value(async_arg), value)
        return value

    def _exit(self, runtime, mapped, queue, *, copy_back):
        try:
            runtime.exit_structured(mapped, queue, copy_back=copy_back)
        finally:
            if _ACTIVE[_REGION_EXIT]:
                BUS.publish(EventKind.REGION_EXIT, runtime.device.identity, name=self.info.name,
                            info=self.info.clauses.construct)

    def _run(self, runtime, device_args, queue):
        target = "python" if _jit_disabled() else "cpu"
        kernel = compiler.get_kernel(self.info, device_args, target=target,
                                     device_type=runtime.device.type_name)
        return runtime.device.launch(kernel, tuple(device_args), queue, name=self.info.name)

    def _run_on_host(self, args):
        """``if(false)``: the region runs on the local thread with host data (§2.5.6)."""
        kernel = compiler.get_kernel(self.info, list(args), target="python" if _jit_disabled() else "cpu",
                                     device_type="host")
        return kernel(*args)

    def _requests(self, runtime, args):
        """Map requests for the array arguments, and the argument slot of each."""
        requests, slots = [], []
        default = self._default or _enclosing_default()
        for slot, (name, value) in enumerate(zip(self.info.params, args)):
            if not isinstance(value, np.ndarray):
                continue  # scalars (and other values) are firstprivate (§2.6.2)
            if name in self._deviceptr:
                runtime.device.extent_of(value)  # must be memory of this device
                continue
            kind = self._kind_of(name, default)
            array = check_array(value, name=name, contiguous=False)
            if not (array.flags.c_contiguous or array.flags.f_contiguous):
                kind = self._strided_kind(runtime, array, name, kind)
            requests.append(MapRequest(kind, array, name))
            slots.append(slot)
        return requests, slots

    def _kind_of(self, name, default) -> MapKind:
        kind = self._explicit.get(name)
        if kind is not None:
            return kind
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
    def _strided_kind(runtime, array, name, kind) -> MapKind:
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
            return ExecutionError(
                f"kernel {error.kernel} failed: index out of bounds on array "
                f"{error.array!r}: {error}", kernel=error.kernel, name=error.array)
        return ExecutionError(f"kernel {self.info.where} failed: {type(error).__name__}: {error}",
                              kernel=self.info.where)

    def _enabled(self) -> bool:
        condition = self.info.clauses.if_
        return True if condition is None else bool(condition)

    def _async_argument(self, async_):
        if async_ is not None:
            return async_
        clause = self.info.clauses.async_
        if clause is None:
            return None
        return async_noval if clause == compiler.ASYNC_NOVAL else clause

    def _wait_clause(self):
        clause = self.info.clauses.wait
        return [] if clause is True else clause


def _is_kernel_failure(error) -> bool:
    """Errors raised by the kernel itself (not pyacc's own errors or interrupts)."""
    return isinstance(error, Exception) and not hasattr(error, "code") and not isinstance(error, CompileError)


def _enclosing_default():
    for default in reversed(ICVS.default_clause):
        if default is not None:
            return default
    return None


def _jit_disabled() -> bool:
    return os.environ.get("PYACC_DISABLE_JIT", "0") not in ("", "0")


# == decorators ==============================================================================
def _decorator(construct: str):
    def decorator(function=None, clause_string=None, /, **clauses):
        if isinstance(function, str):  # @acc.parallel_loop("collapse(2) ...")
            function, clause_string = None, function
        parsed = compiler.parse_clauses(construct, clause_string, **clauses)

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
    parsed = compiler.parse_clauses("routine", clause_string, **clauses)

    def wrap(func):
        return compiler.mark_routine(func, parsed)

    return wrap if function is None else wrap(function)
