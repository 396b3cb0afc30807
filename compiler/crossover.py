"""The serial/parallel crossover of CPU kernels: below how many iterations a loop nest
runs on one thread.

Numba's parallel loops wake the thread pool at every call (1–2 µs on the machines this
project was measured on), while a trivial loop of 1,000 elements costs 0.3 µs serially.
OpenACC leaves the schedule to the implementation (OpenACC 3.3 §2.5.1: gangs, workers
and vector lanes are a mapping, not a promise), so a CPU nest whose body is straight-line
code gets a serial twin, run when its trip count is below :func:`serial_below`.

Owns :func:`serial_below`: ``PYACC_SERIAL_BELOW=n`` (``0``: never serial), else the
crossover measured once per machine (:func:`measured_crossover`) and kept in the kernel
cache folder.

Invariants:
    * The value is baked into the generated source, so it is part of every kernel's
      cache key; changing ``PYACC_SERIAL_BELOW`` compiles the kernels again.
    * The measurement compares the same elementwise kernel compiled serial and parallel:
      the fork-join cost ``F`` and the per-element cost ``e`` give ``F / (e (1 - 1/T))``
      for ``T`` threads, clamped to [256, 2**20] (one thread: never parallel is better,
      2**20 is used so that big loops still spread if threads are added later).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import threading
import time

import numba
import numpy as np
from numba import njit, prange

__all__ = ["serial_below", "measured_crossover", "LOWEST", "HIGHEST"]

LOWEST, HIGHEST = 256, 1 << 20
_lock = threading.Lock()
_measured: list = []


def serial_below() -> int:
    """Trip count below which a straight-line CPU nest runs serially (0: never).

    Raises:
        ValueError: ``PYACC_SERIAL_BELOW`` is not a whole number ≥ 0.
    """
    raw = os.environ.get("PYACC_SERIAL_BELOW", "")
    if raw.strip():
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < 0:
            raise ValueError(f"PYACC_SERIAL_BELOW={raw!r}: expected a whole number of "
                             f"iterations (0: loops always run in parallel)")
        return value
    return measured_crossover()


def measured_crossover() -> int:
    """This machine's crossover, measured at the first call of any process and then
    read from ``<cache>/crossover.json``."""
    if _measured:
        return _measured[0]
    with _lock:
        if not _measured:
            _measured.append(_load_or_measure())
        return _measured[0]


def _machine_key() -> str:
    return f"{platform.processor() or platform.machine()}|{os.cpu_count()}|" \
           f"{numba.config.NUMBA_NUM_THREADS}|{numba.__version__}"


def _load_or_measure() -> int:
    from .kernel import cache_dir  # the kernels' cache folder (kernel imports this module)
    path = cache_dir().parent / "crossover.json"
    key = _machine_key()
    try:
        with open(path) as file:
            known = json.load(file)
        if isinstance(known.get(key), int):
            return known[key]
    except (OSError, ValueError):
        known = {}
    value = _measure()
    known[key] = value
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(known))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache: measure again next time
    return value


@njit(parallel=True, nogil=True, cache=True)
def _parallel_probe(out, x):
    for i in prange(x.shape[0]):
        out[i] = x[i] + 1.0


@njit(nogil=True, cache=True)
def _serial_probe(out, x):
    for i in range(x.shape[0]):
        out[i] = x[i] + 1.0


def _median_seconds(function, out, x, calls=200):
    samples = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(calls):
            function(out, x)
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def _measure() -> int:
    threads = numba.get_num_threads()
    if threads <= 1:
        return HIGHEST
    small, large = np.ones(8), np.ones(1 << 16)
    out_small, out_large = np.empty_like(small), np.empty_like(large)
    for function in (_parallel_probe, _serial_probe):  # compile / load, warm up
        function(out_small, small)
        function(out_large, large)
    fork_join = _median_seconds(_parallel_probe, out_small, small) - \
        _median_seconds(_serial_probe, out_small, small)
    per_element = (_median_seconds(_serial_probe, out_large, large, 20) -
                   _median_seconds(_serial_probe, out_small, small)) / (large.size - small.size)
    if per_element <= 0 or fork_join <= 0:
        return LOWEST
    crossover = fork_join / (per_element * (1 - 1 / threads))
    return int(min(HIGHEST, max(LOWEST, crossover)))
