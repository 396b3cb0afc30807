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
      doubling sizes from 2**20 down to 256 (``_measure``): the smallest size of the run
      where parallel wins; 2**20 when it does not win there, and with one thread (so that
      big loops still spread if threads are added later).
"""
from __future__ import annotations

import json
import os
import platform
import threading
import time

import numba
import numpy as np
from numba import njit, prange

from .caches import cache_dir, replace_signed, verified_bytes

__all__ = ["serial_below", "measured_crossover", "recorded", "busy_cpu_seconds",
           "LOWEST", "HIGHEST"]

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
    read from ``<cache>/crossover.signed``."""
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
_METHOD = "race-stream-2"


#: a race during which other processes (or neighbouring VMs: steal time) used more CPU
#: than this share of its wall time is not kept: a loaded machine says parallel never
#: pays, which would stay true for this machine's every later process
_BUSY_SHARE = 0.25


def busy_cpu_seconds(steal: bool = True):
    """CPU seconds this machine's processes have used since boot (``/proc/stat``: user,
    nice, system, irq and softirq time; guest time is in user), plus the time
    neighbouring VMs took (steal) unless ``steal`` is False; None where ``/proc/stat``
    cannot be read."""
    try:
        with open("/proc/stat") as file:
            fields = [int(value) for value in file.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    fields += [0] * (8 - len(fields))
    user, nice, system, _, _, irq, softirq, stolen = fields
    busy = user + nice + system + irq + softirq + (stolen if steal else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def _cpu_reading():
    """The machine's busy CPU seconds (steal time included) and this process's, or None
    where ``/proc/stat`` cannot be read."""
    busy = busy_cpu_seconds()
    return None if busy is None else (busy, time.process_time())


def _load_or_measure() -> int:
    value = recorded(_machine_key(), _measure)
    return value if isinstance(value, int) else _measure()


def recorded(name: str, measure):
    """The value recorded under ``name`` in this machine's signed record
    (``<cache>/crossover.signed``), else ``measure()``, recorded there unless other
    processes used more than a quarter of the machine meanwhile (a loaded machine's
    measurement is for this process only). Also the async crossover's store
    (``mapping.inline``, through ``pyacc``). No cache folder: measured in every process."""
    try:
        path = cache_dir().parent / "crossover.signed"
    except OSError:
        return measure()
    known = _known(path)
    if name in known:
        return known[name]
    before, start = _cpu_reading(), time.perf_counter()
    value = measure()
    after = _cpu_reading()
    if before is not None and after is not None:
        others = (after[0] - before[0]) - (after[1] - before[1])  # CPU s of other processes
        if others > _BUSY_SHARE * (time.perf_counter() - start):
            return value  # for this process only: the next one measures again
    known[name] = value
    try:
        replace_signed(path, json.dumps(known).encode())
    except OSError:
        pass  # a read-only or full cache: measure again next time
    return value


def _known(path) -> dict:
    """The crossovers recorded in ``path`` by machine, when pyacc signed the record for
    this user (``caches``); else none (an altered record is measured again)."""
    try:
        content = verified_bytes(path.read_bytes(), path)
        known = json.loads(content) if content is not None else {}
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


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
    """The fastest sample (seconds per call) of the serial and of the parallel probe at
    ``n`` elements, in alternating samples (neither always runs after the other; the
    fastest is what each form can do, whatever a neighbour did to one sample)."""
    arrays = (np.empty(n), np.ones(n), np.ones(n))
    calls = max(1, int(_SAMPLE_S / max(_seconds_per_call(_serial_probe, arrays, 1), 1e-9)))
    serial, parallel = [], []
    for sample in range(_SAMPLES):
        pair = [(_serial_probe, serial), (_parallel_probe, parallel)]
        for function, samples in pair if sample % 2 else pair[::-1]:
            samples.append(_seconds_per_call(function, arrays, calls))
    return min(serial), min(parallel)


def _measure() -> int:
    """Race the serial and the parallel form of a streaming loop (``out = x + 2y``: two
    loads and a store per element, what a straight-line nest is) at doubling sizes, from
    the largest down: the crossover is the smallest size of the run of sizes at which
    parallel wins by 3%, a run that ends where parallel loses at two sizes in a row (one
    loss alone, between the caches and memory where the two can trade places, or a noisy
    sample, does not end it). A fork-join model alone (wake-up cost over per-element
    cost) assumed the threads speed a streaming loop up T-fold; the race measures what
    they do."""
    if numba.get_num_threads() <= 1:
        return HIGHEST
    small = (np.empty(8), np.ones(8), np.ones(8))
    for function in (_parallel_probe, _serial_probe):  # compile or load, warm up
        function(*small)
    crossover, losses = HIGHEST, 0
    for n in reversed(_PROBE_SIZES):
        serial, parallel = _race(n)
        if parallel < _MARGIN * serial:
            crossover, losses = n, 0
        else:
            losses += 1
            if losses == 2:
                break
    return max(LOWEST, crossover)
