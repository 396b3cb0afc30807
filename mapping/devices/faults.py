"""Fault injection of the emulated device (``EmulatedDevice.inject_faults``,
``pyacc.testing.inject_faults``): the k-th allocation, copy or kernel launch fails as it
would on a GPU. Owns :class:`FaultPlan` and the faulty launch wrapper; the rules are in
``emulated``'s module docstring."""

from __future__ import annotations

import threading

import numpy as np

from ..errors import ExecutionError, InvalidArgumentError

__all__ = ["FaultPlan"]


class FaultPlan:
    """Which allocations, copies and kernel launches of a device fail (fault injection).

    Operations are counted from 1, per kind, from the moment the plan is installed
    (``EmulatedDevice.inject_faults``): allocations when they are asked for, copies and
    launches when they run. A plan with no targets only counts — run a scenario once
    under it to learn how many operations of each kind it does.

    Args:
        alloc, copy, launch: the index (an int ≥ 1) of the operation of that kind that
            fails, an iterable of indexes, or None (none fails).
        error: raise this instead of the realistic device error (an exception class,
            called with the message, or an instance) — e.g. ``KeyboardInterrupt``, to
            check that an interrupt arriving during a device operation rolls back too.

    Attributes:
        counts: ``{"alloc": n, "copy": n, "launch": n}``, operations seen so far.
        fired: ``(kind, index, what)`` of every failure injected so far.
    """

    KINDS = ("alloc", "copy", "launch")

    def __init__(self, *, alloc=None, copy=None, launch=None, error=None):
        self.error = error
        self._targets = {kind: _indexes(kind, value)
                         for kind, value in zip(self.KINDS, (alloc, copy, launch))}
        self.counts = dict.fromkeys(self.KINDS, 0)
        self.fired: list[tuple[str, int, str]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        targets = ", ".join(f"{kind}={sorted(indexes)}" for kind, indexes in self._targets.items() if indexes)
        return f"FaultPlan({targets or 'counting only'}; seen {self.counts}, fired {len(self.fired)})"

    def fails(self, kind: str, what: str) -> int | None:
        """Count one operation of ``kind`` (described as ``what``); return its index when
        it is to fail, else None."""
        with self._lock:
            index = self.counts[kind] = self.counts[kind] + 1
            if index not in self._targets[kind]:
                return None
            self.fired.append((kind, index, what))
            return index

    def failure(self, default: BaseException) -> BaseException:
        """The exception to raise for an injected failure: ``default`` (the realistic
        device error) unless the plan names another."""
        if self.error is None:
            return default
        if isinstance(self.error, BaseException):
            return self.error
        return self.error(str(default))


def _indexes(kind: str, value) -> frozenset:
    if value is None:
        return frozenset()
    values = [value] if isinstance(value, (int, np.integer)) else list(value)
    for index in values:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 1:
            raise InvalidArgumentError(f"inject_faults: {kind}={value!r}: operations are counted "
                                       "from 1; give an int >= 1 or a list of them")
    return frozenset(int(index) for index in values)


class _FaultyKernel:
    """A kernel whose launch is counted when it runs, and fails if the plan says so."""

    __slots__ = ("kernel", "plan", "number", "name")

    def __init__(self, kernel, plan: FaultPlan, number: int, name):
        self.kernel = kernel
        self.plan = plan
        self.number = number  # the device's (a helper keeps no device: calls go down)
        self.name = name

    def __call__(self, *args):
        index = self.plan.fails("launch", f"launch of kernel {self.name}")
        if index is not None:
            raise self.plan.failure(ExecutionError(
                f"emulated device {self.number}: launch #{index} (kernel {self.name}) "
                "failed: injected fault (like CUDA_ERROR_LAUNCH_FAILED); the kernel did not run",
                kernel=self.name, injected=True))
        return self.kernel(*args)
