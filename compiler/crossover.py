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
    * The measurement races the same streaming loop compiled serial and parallel at
      doubling sizes from 256 to 2**20 (``_measure``): the first size from which parallel
      wins twice in a row; 2**20 when it never does, and with one thread (so that big
      loops still spread if threads are added later).
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
           f"{numba.config.NUMBA_NUM_THREADS}|{numba.__version__}|{_METHOD}"


#: names the measurement (``_measure``): a value measured another way is measured again
_METHOD = "race-stream"


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
def _parallel_probe(out, x, y):
    for i in prange(x.shape[0]):
        out[i] = x[i] + 2.0 * y[i]


@njit(nogil=True, cache=True)
def _serial_probe(out, x, y):
    for i in range(x.shape[0]):
        out[i] = x[i] + 2.0 * y[i]


#: the trip counts raced, 256 to 2**20 (``LOWEST`` to ``HIGHEST``), doubling
_PROBE_SIZES = [1 << k for k in range(8, 21)]
#: each sample lasts about this long; the race at one size takes ``_SAMPLES`` of each
_SAMPLE_S, _SAMPLES = 0.001, 7
#: parallel must be this much faster to count as faster
_MARGIN = 0.97


def _seconds_per_call(function, arrays, calls) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        function(*arrays)
    return (time.perf_counter() - start) / calls


def _race(n) -> tuple[float, float]:
    """Median seconds per call of the serial and the parallel probe at ``n`` elements,
    in alternating samples (neither always runs after the other)."""
    arrays = (np.empty(n), np.ones(n), np.ones(n))
    calls = max(1, int(_SAMPLE_S / max(_seconds_per_call(_serial_probe, arrays, 1), 1e-9)))
    serial, parallel = [], []
    for sample in range(_SAMPLES):
        pair = [(_serial_probe, serial), (_parallel_probe, parallel)]
        for function, samples in pair if sample % 2 else pair[::-1]:
            samples.append(_seconds_per_call(function, arrays, calls))
    return statistics.median(serial), statistics.median(parallel)


def _measure() -> int:
    """Race the serial and the parallel form of a streaming loop (``out = x + 2y``: two
    loads and a store per element, what a straight-line nest is) at doubling sizes: the
    crossover is the smallest size from which parallel wins by 3% at every larger size
    raced. Between the caches and memory the two can take turns (on a 2-core VM parallel
    won at 3·10⁴ elements, lost at 1.3·10⁵ and won again from 2.6·10⁵ on): the loop is
    then serial up to the last size where parallel lost. A fork-join model alone
    (wake-up cost over per-element cost) assumed the threads speed a streaming loop up
    T-fold and put the crossover at 1.5·10⁴ on that VM."""
    if numba.get_num_threads() <= 1:
        return HIGHEST
    small = (np.empty(8), np.ones(8), np.ones(8))
    for function in (_parallel_probe, _serial_probe):  # compile or load, warm up
        function(*small)
    crossover = HIGHEST
    for n in reversed(_PROBE_SIZES):
        serial, parallel = _race(n)
        if parallel >= _MARGIN * serial:
            break
        crossover = n
    return max(LOWEST, crossover)
