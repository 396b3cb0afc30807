"""What a compute call gives back: the ``AsyncResult`` of an asynchronous call, and the
``ExecutionError`` of a kernel that failed (API.md §6; OpenACC 3.3 §2.16).

Owns :class:`AsyncResult` (``.result()`` waits for its queue and returns the reductions)
and the translation of a launch's failure: :func:`kernel_failure` (a kernel's own
exception, or a ``KernelIndexError`` under ``PYACC_BOUNDSCHECK``, as ``ExecutionError``),
:func:`is_kernel_failure` (which exceptions are the kernel's, not pyacc's) and
:func:`add_section_hint` (a partly present argument's message says what to pass).

Invariants:
    * pyacc's own errors (``AccError``, ``CompileError``) and interrupts pass unchanged;
      only an ``Exception`` the kernel raised becomes ``ExecutionError``.
    * A failing ``AsyncResult.result()`` reports its error (the error callbacks) once.
"""

from __future__ import annotations

from pyacc.compiler import CompileError, KernelIndexError
from pyacc.mapping import AccError, ExecutionError, PartlyPresentError
from pyacc.mapping.queues import Pending, reported_cause

from ._errors import report

__all__ = ["AsyncResult", "add_section_hint", "is_kernel_failure", "kernel_failure"]


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


def kernel_failure(error, where, label) -> ExecutionError:
    """The ``ExecutionError`` of a kernel that raised ``error`` (an index out of bounds
    under ``PYACC_BOUNDSCHECK``, or the exception of a routine it called); ``where``: the
    region's place, ``label``: a parameter as the program spells it."""
    if isinstance(error, KernelIndexError):
        array = None if error.array is None else label(error.array)
        on = f" on array {array!r}" if array is not None else ""
        return ExecutionError(
            f"kernel {error.kernel} failed: index out of bounds{on}: {error}",
            kernel=error.kernel, name=array)
    error = reported_cause(error)
    return ExecutionError(f"kernel {where} failed: {type(error).__name__}: {error}",
                          kernel=where)


#: what to do when a kernel argument is only partly present (multi-device codes map
#: x[lo:hi] per device and index the whole array)
_SECTION_HINT = ("a compute region maps each array argument whole: pass the section that is "
                 "present (a view such as x[lo:hi]) and index it from 0, or map the whole array")


def add_section_hint(error) -> None:
    """A partly present argument (only ``enter_compute`` raises it in a compute call):
    the message says what to pass instead."""
    if isinstance(error, PartlyPresentError) and _SECTION_HINT not in str(error):
        error.args = (f"{error.args[0] if error.args else error}; {_SECTION_HINT}",) + error.args[1:]


def is_kernel_failure(error) -> bool:
    """Errors raised by the kernel itself (not pyacc's own errors or interrupts)."""
    return isinstance(error, Exception) and not isinstance(error, (AccError, CompileError))
