"""Size sweep of a trivial compute call (issue: compute calls as cheap as a Numba call).

``c[i] = a[i] + 2*b[i]`` with its three arrays present (inside ``acc.data``), from 8 to
1e7 elements, on ``host`` and ``emulated``, side by side in one run with the same kernel
hand-written for Numba, serial (``njit``) and parallel (``njit(parallel=True)`` with
``prange``). Where the express lane is built (``pyacc/_fastcall.c``) a fourth column
times the same pyacc call with the lane off: the Python launcher alone. Target: pyacc ≤
1.05 × the better of the two Numba versions + 1.0 µs.

How a size is timed (``measure``), and why:

- *Rounds of short samples*, the candidates in a new order each round, back to back, for
  a time budget per size (at least 31 rounds); a candidate's figure is the median of its
  samples. A sample is one untimed call, then the mean of enough calls to last ~1 ms (at
  least 3). Many short rounds put every candidate through the same moments of this
  shared 2-core VM; 31 rounds of 5 ms samples let one burst of a neighbour's load decide
  a row (pyacc read 0.91–1.13 × Numba parallel at 10⁵ from one run to the next, the
  same kernel).
- *Each candidate its own arrays* (equal values; pyacc's present in a data region): on
  ``emulated`` pyacc's kernel runs on the device copies, and with one set of host arrays
  the two Numba versions found each other's data in the caches where pyacc's never was
  (10⁶ elements: pyacc 1.19–1.27 × Numba parallel; the same kernel called on the Numba
  arrays' memory read 1.00). Sharing is a bias either way: pyacc and its Python-launcher
  column on one set made pyacc read 0.85–0.94 × Numba parallel at 10⁶.
- *The untimed call* takes what changes from one candidate to the next (its data coming
  back into the caches, the worker threads waking) out of every candidate alike.

Every size first checks that the three versions give the same ``c``.

Run: ``python benchmarks/bench_sweep.py [--quick] [--plot FILE.png] [--json FILE]`` (the
suite, ``suite.py``, runs it too; the plot needs
matplotlib: ``pip install -e '.[bench]'``); ``--smoke`` runs each candidate at two tiny
sizes on both devices, checks the results and times nothing (CI runs it under every
checker: ``tests/test_benchmarks_checked.py``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import numba
import numpy as np
from numba import njit, prange

import pyacc as acc
from pyacc.compiler import crossover
from pyacc._express import set_lane

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compute import round_order, settle  # noqa: E402
from bench_runtime import machine_description  # noqa: E402

SIZES = [8, 100, 1000, 10_000, 100_000, 1_000_000, 10_000_000]
#: each sample is the mean of enough calls to last this long (at least 3 calls)
SAMPLE_S = 0.001
#: seconds of rounds per size (at least MIN_ROUNDS rounds), full and --quick
BUDGET_S = {"full": 2.0, "quick": 0.4}
MIN_ROUNDS = 31


@acc.parallel_loop
def acc_triad(a, b, c):
    for i in range(a.shape[0]):
        c[i] = a[i] + 2.0 * b[i]


@njit(nogil=True)
def numba_serial(a, b, c):
    for i in range(a.shape[0]):
        c[i] = a[i] + 2.0 * b[i]


@njit(parallel=True, nogil=True)
def numba_parallel(a, b, c):
    for i in prange(a.shape[0]):
        c[i] = a[i] + 2.0 * b[i]


#: the column of pyacc's Python launcher alone (the express lane turned off for its samples)
NO_LANE = "pyacc, Python launcher"


def lane_column() -> bool:
    """The Python launcher is timed beside the lane when the lane is built and on."""
    return acc.express_lane()


def per_call_seconds(function, args, calls):
    start = time.perf_counter()
    for _ in range(calls):
        function(*args)
    return (time.perf_counter() - start) / calls


def triad_arrays(n):
    return np.arange(n, dtype=np.float64), np.full(n, 2.0), np.zeros(n)


def measure(n, device, budget_s):
    """Median seconds per call of each candidate at ``n`` elements (module docstring);
    ``budget_s`` 0: only the warm-up and the check."""
    acc.set_device_type(device)
    arrays = {"pyacc": triad_arrays(n), "numba serial": triad_arrays(n),
              "numba parallel": triad_arrays(n)}  # each its own (module docstring)
    candidates = {"pyacc": acc_triad, "numba serial": numba_serial,
                  "numba parallel": numba_parallel}
    if lane_column():
        candidates[NO_LANE] = acc_triad  # timed with the express lane off
        arrays[NO_LANE] = triad_arrays(n)
    mapped = [arrays[name] for name in ("pyacc", NO_LANE) if name in arrays]
    with contextlib.ExitStack() as regions:
        for a, b, c in mapped:  # present for the whole measure
            regions.enter_context(acc.data(copyin=[a, b], copy=[c]))
        for name, function in candidates.items():  # warm-up, compile
            function(*arrays[name])
        check(n, device, *arrays["pyacc"])
        if not budget_s:
            return None
        first = per_call_seconds(numba_serial, arrays["numba serial"], 3)
        calls = max(3, min(20_000, int(SAMPLE_S / max(first, 1e-9))))
        rounds = max(MIN_ROUNDS, int(budget_s / (len(candidates) * (calls + 1) * first)))
        samples = {name: [] for name in candidates}
        settle()  # once: a sleep before every round would wake the threads cold each time
        for repeat in range(rounds):
            for name in round_order(list(candidates), repeat):
                samples[name].append(timed_sample(candidates[name], arrays[name], calls,
                                                  lane=name != NO_LANE))
    return {name: statistics.median(values) for name, values in samples.items()}


def timed_sample(function, args, calls, lane=True):
    """One untimed call, then the mean seconds of ``calls`` calls (the express lane off
    for both when ``lane`` is false)."""
    previous = None if lane else set_lane(False)
    try:
        function(*args)
        return per_call_seconds(function, args, calls)
    finally:
        if previous is not None:
            set_lane(previous)


def check(n, device, a, b, c) -> None:
    """The pyacc kernel's ``c`` (brought back from the device) equals Numba's."""
    expected = np.empty_like(c)
    numba_serial(a, b, expected)
    got = c.copy()
    c.fill(-1.0)
    acc_triad(a, b, c)
    acc.update_self(c)
    if not np.array_equal(c, expected):
        raise SystemExit(f"bench_sweep: pyacc's result differs from Numba's at n={n} on {device}")
    c[:] = got
    acc.update_device(c)


def sweep(budget_s) -> list:
    """Every size on both devices: ``[(device, n, {candidate: seconds per call})]``."""
    return [(device, n, measure(n, device, budget_s))
            for device in ("host", "emulated") for n in SIZES]


def table_lines(rows) -> list[str]:
    """The sweep as a Markdown table, each row against the target."""
    extra = all(NO_LANE in t for _, _, t in rows)
    lines = ["| device | elements | pyacc µs | Numba serial µs | Numba parallel µs | "
             "pyacc ÷ best | pyacc − 1.05 × best (µs) | target ≤ 1.05 × best + 1 µs |"
             + (" pyacc, Python launcher µs |" if extra else ""),
             "|---|---:|---:|---:|---:|---:|---:|---|" + ("---:|" if extra else "")]
    for device, n, t in rows:
        best = min(t["numba serial"], t["numba parallel"])
        excess = (t["pyacc"] - 1.05 * best) * 1e6
        met = "met" if excess <= 1.0 else "NOT met"
        lines.append(f"| {device} | {n:,} | {t['pyacc'] * 1e6:.2f} | {t['numba serial'] * 1e6:.2f} | "
                     f"{t['numba parallel'] * 1e6:.2f} | {t['pyacc'] / best:.2f} | {excess:+.2f} | "
                     f"{met} |" + (f" {t[NO_LANE] * 1e6:.2f} |" if extra else ""))
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--plot", help="write a log-log plot of the sweep to this PNG")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--smoke", action="store_true",
                        help="check each candidate at two tiny sizes on both devices; time nothing")
    args = parser.parse_args()
    if args.smoke:
        for device in ("host", "emulated"):
            for n in (8, 1000):
                measure(n, device, 0.0)
        print("bench_sweep --smoke: ok")
        return
    machine = (f"{machine_description()}; numba threads: {numba.get_num_threads()}; "
               f"serial below: {crossover.serial_below()}")
    print(f"machine: {machine}", flush=True)
    rows = sweep(BUDGET_S["quick" if args.quick else "full"])
    print("\n".join(table_lines(rows)))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": machine, "rows": rows}, out, indent=1)
    if args.plot:
        plot(rows, args.plot)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for axis, device in zip(axes, ("host", "emulated")):
        data = [(n, t) for d, n, t in rows if d == device]
        sizes = [n for n, _ in data]
        for name, style in (("pyacc", "o-"), ("numba serial", "s--"), ("numba parallel", "^--"),
                            (NO_LANE, "x:")):
            if all(name in t for _, t in data):
                axis.loglog(sizes, [t[name] * 1e6 for _, t in data], style, label=name)
        axis.set_title(f"c[i] = a[i] + 2 b[i], present arrays, {device}")
        axis.set_xlabel("elements")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("µs per call (median)")
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
