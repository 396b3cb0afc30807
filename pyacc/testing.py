"""Helpers for testing code that uses pyacc: held queues and injected device faults.

``hold_queue(q)`` keeps queue ``q`` of the calling thread's current device from starting
any operation until the ``with`` block ends: work can be queued and observed as pending
(``acc.async_test(q)`` is False, deferred frees have not happened) without relying on
timing. Only queues that run on host threads (``host``, ``emulated``) can be held.

Do not wait on a held queue inside its own ``with`` block: the wait would never end.

``inject_faults(alloc=k, copy=k, launch=k)`` makes the k-th allocation, copy or kernel
launch of the calling thread's current device fail while the ``with`` block runs (the
``emulated`` device only): an allocation raises ``OutOfMemoryError``, a copy or a launch
``ExecutionError`` — at once on the synchronous queue, at the wait that covers the queue
on an asynchronous one. Operations are counted from 1 per kind; allocations when asked
for, copies and launches when they run. The block yields the ``FaultPlan``: its
``counts`` tell how many operations of each kind ran, its ``fired`` which failures were
injected. With no arguments it only counts::

    with acc.testing.inject_faults() as plan:      # how many copies does this do?
        scenario()
    for k in range(1, plan.counts["copy"] + 1):
        with acc.testing.inject_faults(copy=k):
            try:
                scenario()
            except acc.ExecutionError:
                pass                               # then check nothing leaked

Wait for queued work inside the block: a copy or launch that runs after it ends is
neither counted nor failed.

``check("memory")`` called as a statement is a check point now (for ``memory``: a write
past the end of any ``emulated`` device block, or into a freed one, raises
``acc.MemoryCheckError``); as a context manager (``enable_check``/``disable_check`` as
functions) it switches a ``PYACC_CHECK`` mode on for the block, whatever the environment
says, with a check point where the block starts (API.md §11): ``"counters"`` (the
consistency checker), ``"memory"`` (guard zones and poisoned freed blocks on
``emulated``: ``acc.MemoryCheckError``), ``"stale"`` (missing
``update device`` and lost host updates: ``acc.StaleDataWarning``; ``error=True``
raises ``acc.StaleDataError`` instead), ``"race"`` (work on shared data that no wait
orders, across async queues: ``acc.RaceWarning``; ``error=True`` raises
``acc.RaceError``); several modes as a comma list or several arguments::

    with acc.testing.check("memory", "stale", error=True):
        run_my_port()

``check_consistency()`` runs the consistency checker of ``PYACC_CHECK=1`` now, on every
device in use (``pyacc.observe.verify_all``): it raises ``acc.ConsistencyError`` naming
the entry or block that is wrong.

The cuda device type without a GPU (testing only): with the environment variables

    PYACC_TESTING_FAKE_CUDA=1 NUMBA_ENABLE_CUDASIM=1 pytest ...

set before the program starts, the ``cuda`` device type is available with one device
(so it becomes the default device type) whose memory, streams and events are
``mapping.devices.cuda_fake.FakeCudaBackend`` — host memory standing in for CuPy, device arrays
that refuse what CuPy's refuse (implicit conversion to NumPy, Numba CPU typing, host
reads without ``.get()``) — and whose kernels are the real ``cuda`` target of the compiler, run by
Numba's CUDA simulator. Everything above the backend (the runtime, the launcher, the
cuda code generation) then runs as on a GPU, slowly (~100 µs per simulated thread: keep
arrays to a few hundred elements). It proves nothing about CuPy itself, real
concurrency, timings or ``__cuda_array_interface__`` import; those need a GPU
(``tests/gpu``). ``NUMBA_ENABLE_CUDASIM`` is read when ``numba.cuda`` is first imported,
so both variables belong in the environment of a new process; with the switch but
without the simulator, selecting ``cuda`` raises ``DeviceTypeUnavailableError`` saying
so. Never set the switch in production: it is not a GPU.
"""

from __future__ import annotations

from contextlib import contextmanager

from pyacc.mapping import InvalidArgumentError, InvalidAsyncError
from pyacc.mapping.devices.emulated import FaultPlan

from . import observe
from ._clauses import async_value
from ._devices import current_runtime
from ._names import user_frame
from .observe import verify_all
from .observe.memcheck import check_point

__all__ = ["hold_queue", "inject_faults", "FaultPlan", "check_consistency", "check",
           "enable_check", "disable_check"]


@contextmanager
def hold_queue(q):
    """Hold asynchronous queue ``q`` (an int ≥ 0 or ``acc.async_noval``)."""
    number = async_value(q)
    if number is None:
        raise InvalidAsyncError("the synchronous queue cannot be held: its work runs at once", value=q)
    queue = current_runtime().device.queue(number)
    with queue.hold():
        yield queue


@contextmanager
def inject_faults(*, alloc=None, copy=None, launch=None, error=None):
    """Make the ``alloc``-th allocation, ``copy``-th copy and ``launch``-th kernel launch
    (each an int ≥ 1, a list of them, or None) of the current device fail inside the
    block; yields the ``FaultPlan``. ``error`` (an exception class or instance, e.g.
    ``KeyboardInterrupt``) is raised instead of the realistic device error. Raises
    ``InvalidArgumentError`` on a device that cannot inject faults (only ``emulated``
    can)."""
    device = current_runtime().device
    if not hasattr(device, "inject_faults"):
        raise InvalidArgumentError(
            f"inject_faults: the {device.type_name} device cannot inject faults; use the "
            "emulated device (acc.set_device_type('emulated'))")
    plan = FaultPlan(alloc=alloc, copy=copy, launch=launch, error=error)
    previous = device.inject_faults(plan)
    try:
        yield plan
    finally:
        device.inject_faults(previous)


def check_consistency() -> None:
    """Check the present tables, counters and device memory of every device in use
    against the checker's own bookkeeping (``acc.ConsistencyError`` when they differ).
    The checker must be on: ``PYACC_CHECK=1`` before the program starts, or set it and
    call ``pyacc.observe.configure()`` (``RuntimeError`` otherwise)."""

    verify_all()


def _modes(modes) -> list[str]:
    names = [part.strip() for mode in modes for part in str(mode).split(",") if part.strip()]
    if not names:
        raise InvalidArgumentError("check: name at least one mode: counters, memory, stale, race")
    return names


def enable_check(*modes, error: bool = False) -> None:
    """Switch ``PYACC_CHECK`` modes on now (``"counters"``, ``"memory"``, ``"stale"``,
    ``"race"``; ``error=True``: ``stale`` raises ``acc.StaleDataError`` and ``race``
    ``acc.RaceError`` instead of warning). Each call is undone by one ``disable_check``
    of the same modes.

    Raises:
        InvalidArgumentError: an unknown mode.
    """

    names = _modes(modes)
    for mode in names:  # all validated before any is switched on
        try:
            observe.parse_check(mode)
        except ValueError as problem:
            raise InvalidArgumentError(f"check: {problem}") from None
    for mode in names:
        observe.enable_check(mode, error=error and mode in ("stale", "race"))


def disable_check(*modes) -> None:
    """Undo ``enable_check(*modes)``."""

    for mode in _modes(modes):
        observe.disable_check(mode)


class check:  # noqa: N801 - spelled like a function: a statement and a context manager
    """``pyacc.testing.check("memory")`` — a check point now; and ``with
    acc.testing.check("memory", "stale"):`` — the modes on inside the block
    (``enable_check``), off again after it unless the environment or an enclosing block
    asks for them. Yields nothing.

    The check point (API.md §11: each mode is also ``pyacc.testing.check(mode)`` on
    demand) runs when ``check(...)`` is called (so also where a with-block starts;
    inside the block the modes' own check points run): for ``memory``, every ``emulated`` device in use is scanned
    (``pyacc.observe.memcheck.check_point``: a write past the end of any live block,
    whenever it was allocated, a write past a block freed since, or into a freed block
    that checking quarantined) and what is found raises ``acc.MemoryCheckError`` naming
    the array, its block and the bytes; for ``counters``, the consistency checker
    verifies every device when it is installed; the other modes report as their
    constructs run.

    Raises:
        InvalidArgumentError: an unknown mode (before any is switched on).
        MemoryCheckError, ConsistencyError: what the check point found.
    """

    def __init__(self, *modes, error: bool = False):
        self._modes = _validated(modes)
        self._error = error
        _check_point(self._modes, "at pyacc.testing.check")

    def __enter__(self) -> None:
        enable_check(*self._modes, error=self._error)

    def __exit__(self, exc_type, exc, traceback) -> bool:
        disable_check(*self._modes)
        return False


def _validated(modes) -> list[str]:
    """The modes named (a comma list or several arguments), each one that
    ``PYACC_CHECK`` takes (InvalidArgumentError otherwise)."""

    names = _modes(modes)
    for mode in names:
        try:
            observe.parse_check(mode)
        except ValueError as problem:
            raise InvalidArgumentError(f"check: {problem}") from None
    return names


def _check_point(modes, what: str) -> None:
    """The on-demand check point of ``modes`` (``check``), at the caller's line."""

    frame = user_frame()
    where = what if frame is None else f"{what} ({frame.f_code.co_filename}:{frame.f_lineno})"
    wanted = {name for mode in modes for name in observe.parse_check(mode)}
    if "memory" in wanted:
        check_point(where)
    if "counters" in wanted and observe.active("check") is not None:
        observe.verify_all()
