"""When asynchronous work runs at once: the inline crossover and the run-time predictions.

OpenACC lets an ``async`` operation run asynchronously; it does not require it to
(OpenACC 3.3 §2.16.1: the host *may* continue; NVHPC's multicore target runs async work
at once). Handing an operation to a queue's worker thread costs tens of µs (a lock, a
wake-up, the GIL going back and forth), far more than a kernel over a few thousand
elements takes. So an operation on an idle queue whose predicted run time is below that
handoff runs at once on the calling thread (``queues.WorkerQueue.submit``); a longer one
still goes to the worker and overlaps the host and other queues (API.md §5, last point).

Owns:
- ``Crossover`` (its one instance is ``queues.CROSSOVER``): the run time below which
  work runs at once, in seconds — ``$PYACC_ASYNC_INLINE_BELOW`` (µs; ``0``: never), else the handoff measured once per
  machine (``measure``: the median round trip of an empty operation through a worker
  queue), and the host's copy bandwidth, which turns a copy's bytes into a predicted
  time; ``pyacc`` installs a recorder that keeps the measurement in the signed cache
  record (``compiler.crossover.recorded``);
- ``predict_kernel``/``record_kernel``: a kernel's predicted run time follows its runs
  (down at once, up at most twofold per run at once; a run on a worker, whose time is
  long by its wait for the GIL, only lowers it), scaled up by the bytes of its
  arguments when they grew. A kernel never measured is predicted unknown (None) and
  goes to the worker, where it is measured;
- ``microseconds_setting``: an environment setting in µs read and checked (this
  crossover's, and the express lane's ``PYACC_GIL_HOLD_BELOW``);
- each queue adapts its crossover to the program (``WorkerQueue._adapt``): when the host
  blocks in a wait for work that went to the worker (a time step that queues its
  kernels and waits at once: the overlap bought nothing), it doubles, up to ``MOST``
  (1 ms); when a wait finds that work done (the host had its own work meanwhile), it
  halves back towards the measured one.

Invariants: a prediction scales only up with bytes and is kept while runs at once over
the same bytes stay within a quarter of it on its side of the crossover; a kernel that
runs long at once is sent to the worker within log2(crossover / its prediction) + 1
runs; the environment is read when a queue is created (``below``), never per operation.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

import numpy as np

__all__ = ["Crossover", "RUNS", "MOST", "predict_kernel", "record_kernel", "arguments_bytes",
           "ENVIRONMENT", "measure", "microseconds_setting"]

ENVIRONMENT = "PYACC_ASYNC_INLINE_BELOW"
#: the most a queue's crossover grows to while the host keeps blocking in its waits
#: (``queues.WorkerQueue._adapt``): longer work always goes to the worker
MOST = 1e-3
_clock = time.perf_counter

#: kernel -> (predicted seconds, bytes of its last run); at most ``_KEPT`` kernels
#: (cleared when full: a prediction is only an optimization)
RUNS: dict = {}
_KEPT = 4096
#: a run at once over the same bytes within this share of the record keeps it (no write:
#: the express lane's async call runs this at every call, ``pyacc/_queue_take.c.h``)
_KEPT_WITHIN = 0.25


def predict_kernel(kernel, nbytes: int):
    """Predicted seconds of ``kernel`` over arguments of ``nbytes`` bytes, or None when
    it never ran on an asynchronous queue."""
    last = RUNS.get(kernel)
    if last is None:
        return None
    seconds, measured = last
    return seconds if nbytes <= measured else seconds * (nbytes / max(measured, 1))


def record_kernel(kernel, seconds: float, nbytes: int, at_once: bool,
                  below: float | None = None) -> None:
    """``kernel`` ran ``seconds`` over arguments of ``nbytes`` bytes, ``at_once`` on the
    calling thread or else on a queue's worker. A run shorter than predicted for its
    bytes replaces the prediction; a longer run at once at most doubles it, so one slow
    run (a neighbour, a page fault) does not send it to the worker, while a kernel that
    became long gets there within a few calls. A run on a worker only lowers it: its
    time is an upper bound, which also counts the wait for the GIL after the kernel (up
    to the switch interval while the host runs Python). A run at once over the record's
    bytes within ``_KEPT_WITHIN`` (a quarter) of its seconds keeps the record — no
    rewrite at every call for a prediction's noise — unless it falls on the other side of
    the queue's crossover ``below`` than the record (then the record follows, and the
    next call is decided by it)."""
    last = RUNS.get(kernel)  # ``predict_kernel``, spelled out on this hot path:
    if last is None:
        if len(RUNS) >= _KEPT:
            RUNS.clear()
        RUNS[kernel] = (seconds, nbytes)
        return
    predicted = last[0] if nbytes <= last[1] else last[0] * (nbytes / max(last[1], 1))
    if seconds > predicted:
        if not at_once:
            return
        seconds = min(seconds, 2.0 * predicted)
    if at_once and nbytes == last[1] and abs(seconds - last[0]) <= _KEPT_WITHIN * last[0] \
            and (below is None or (seconds < below) == (last[0] < below)):
        return
    RUNS[kernel] = (seconds, nbytes)


def microseconds_setting(name: str, zero_means: str) -> float | None:
    """Seconds the environment setting ``name`` gives as µs, or None when it is unset.

    Raises:
        ValueError: it is not a number of µs ≥ 0 (the message says what 0 means:
            ``zero_means``).
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):  # (also NaN)
        raise ValueError(f"{name}={raw!r}: expected a number of microseconds ≥ 0 (0: {zero_means})")
    return value * 1e-6


def arguments_bytes(args) -> int:
    """The bytes of the arrays among a kernel's arguments (what its run time scales with)."""
    total = 0
    for value in args:
        nbytes = getattr(value, "nbytes", None)
        if type(nbytes) is int:
            total += nbytes
    return total


class Crossover:
    """The run time below which an operation on an idle asynchronous queue runs at once.

    Args:
        measure: returns ``(handoff seconds, copy bytes per second)`` of this machine.
    """

    def __init__(self, measure):
        self._measure = measure
        self.recorder = None  # recorder(measure) -> the same pair, kept between processes
        self.announce = None  # announce(text): told describe() once, at the first below()
        self._measured = None
        self._lock = threading.Lock()

    def below(self) -> float:
        """Seconds below which work runs at once (0.0: never).

        Raises:
            ValueError: ``$PYACC_ASYNC_INLINE_BELOW`` is not a number of µs ≥ 0.
        """
        below = microseconds_setting(ENVIRONMENT, "async work always goes to the queue's thread")
        if below is None:
            below = self.measured()[0]
        announce, self.announce = self.announce, None
        if announce is not None:
            announce(self.describe())
        return below

    def bandwidth(self) -> float:
        """Bytes per second a host copy moves (a copy's predicted time is bytes over it)."""
        return self.measured()[1]

    def measured(self) -> tuple[float, float]:
        """This machine's ``(handoff seconds, copy bytes per second)``."""
        if self._measured is None:
            with self._lock:
                if self._measured is None:
                    pair = self._measure() if self.recorder is None else self.recorder(self._measure)
                    self._measured = (float(pair[0]), float(pair[1]))
        return self._measured

    def describe(self) -> str:
        """One line for ``acc.explain``/``PYACC_INFO``."""
        raw = os.environ.get(ENVIRONMENT, "").strip()
        try:
            below = self.below()
        except ValueError as error:
            return f"async work at once: {error}"
        source = f"{ENVIRONMENT}={raw}" if raw else "measured on this machine"
        if below == 0.0:
            return f"async work at once: never ({source})"
        return (f"async work at once: on an idle queue, when predicted under "
                f"{below * 1e6:.1f} µs ({source})")


#: one handoff sample: an empty operation through a worker queue and back
_HANDOFFS = 201
_COPY_BYTES = 4 << 20


def measure(new_queue) -> tuple[float, float]:
    """``(handoff seconds, copy bytes per second)``: the median round trip of an empty
    operation submitted to a fresh queue of ``new_queue(0, label)`` and waited for, and
    the best of a few host copies of 4 MiB. Takes a few ms."""
    queue = new_queue(0, "the inline crossover's probe")
    try:
        samples = []
        for _ in range(_HANDOFFS):
            start = _clock()
            queue.submit(_nothing, "a probe")
            queue.synchronize()
            samples.append(_clock() - start)
    finally:
        queue.close()
    source = np.ones(_COPY_BYTES // 8)
    target = np.empty_like(source)
    copies = []
    for _ in range(5):
        start = _clock()
        np.copyto(target, source)
        copies.append(_clock() - start)
    return statistics.median(samples), _COPY_BYTES / max(min(copies), 1e-9)


def _nothing() -> None:
    pass
