"""Array reductions (OpenACC 3.3 §2.5.15) against hand-written Numba (issue: real programs).

Side by side in one run, warm-up then medians of interleaved samples (``interleaved``
of ``bench_compute``), on the host device:

- a histogram of 1e7 values into 64 and into 4096 bins, ``reduction(+:hist)``;
- the cluster sums of a k-means step (1e6 points × 8 features into 16 centres, a 2-D
  array reduction, as in ``examples/kmeans.py``);

each against the hand-written Numba version a user would write: one private partial
array per thread (``numba.get_num_threads()``), filled by ``prange`` over the threads,
then summed (target: pyacc ≤ 1.10 × that), and against ``acc.atomic.add`` (the
workaround before array reductions). The results go to ``RESULTS.md`` by hand, with the
machine line printed here.

Run: ``python benchmarks/bench_array_reduction.py [--quick] [--smoke]`` (``--smoke``:
every case once at tiny sizes, results still checked, no figures).
"""
from __future__ import annotations

import argparse
import os
import sys

import numba
import numpy as np
from numba import njit, prange

import pyacc as acc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compute import interleaved  # noqa: E402
from bench_runtime import machine_description  # noqa: E402


@acc.parallel_loop(reduction="+:hist")
def acc_histogram(x, hist):
    for i in range(x.shape[0]):
        hist[int(x[i] * hist.shape[0])] += 1


@acc.parallel_loop
def acc_histogram_atomic(x, hist):
    for i in range(x.shape[0]):
        acc.atomic.add(hist, int(x[i] * hist.shape[0]), 1)


@njit(parallel=True, nogil=True)
def numba_histogram(x, hist):
    threads = numba.get_num_threads()
    partial = np.zeros((threads, hist.shape[0]), hist.dtype)
    n = x.shape[0]
    for t in prange(threads):
        for i in range(n * t // threads, n * (t + 1) // threads):
            partial[t, int(x[i] * hist.shape[0])] += 1
    for t in range(threads):
        for b in range(hist.shape[0]):
            hist[b] += partial[t, b]


@acc.parallel_loop(reduction="+:sums, +:counts")
def acc_cluster_sums(points, membership, sums, counts):
    for i in range(points.shape[0]):
        c = membership[i]
        counts[c] += 1
        for j in range(points.shape[1]):
            sums[c, j] += points[i, j]


@njit(parallel=True, nogil=True)
def numba_cluster_sums(points, membership, sums, counts):
    threads = numba.get_num_threads()
    psums = np.zeros((threads,) + sums.shape, sums.dtype)
    pcounts = np.zeros((threads, counts.shape[0]), counts.dtype)
    n = points.shape[0]
    for t in prange(threads):
        for i in range(n * t // threads, n * (t + 1) // threads):
            c = membership[i]
            pcounts[t, c] += 1
            for j in range(points.shape[1]):
                psums[t, c, j] += points[i, j]
    for t in range(threads):
        for c in range(sums.shape[0]):
            counts[c] += pcounts[t, c]
            for j in range(sums.shape[1]):
                sums[c, j] += psums[t, c, j]


def histogram_case(n, bins, repeats):
    x = np.random.default_rng(1).random(n)
    hists = {name: np.zeros(bins, np.int64) for name in ("pyacc", "atomic", "numba")}
    reference = np.bincount((x * bins).astype(np.int64), minlength=bins)
    runs = {"pyacc": lambda: acc_histogram(x, hists["pyacc"]),
            "pyacc atomic.add": lambda: acc_histogram_atomic(x, hists["atomic"]),
            "numba per-thread": lambda: numba_histogram(x, hists["numba"])}

    def reset():
        for hist in hists.values():
            hist[:] = 0

    reset()
    for run in runs.values():  # each candidate once from zero: the same histogram
        run()
    for hist in hists.values():
        assert np.array_equal(hist, reference)
    return interleaved(runs, repeats, reset)


def kmeans_case(n, features, clusters, repeats):
    rng = np.random.default_rng(2)
    points = rng.integers(0, 8, (n, features)).astype(np.float64)  # exact sums
    membership = rng.integers(0, clusters, n).astype(np.int64)
    out = {name: (np.zeros((clusters, features)), np.zeros(clusters, np.int64))
           for name in ("pyacc", "numba")}
    runs = {"pyacc": lambda: acc_cluster_sums(points, membership, *out["pyacc"]),
            "numba per-thread": lambda: numba_cluster_sums(points, membership, *out["numba"])}

    def reset():
        for sums, counts in out.values():
            sums[:] = 0
            counts[:] = 0

    reset()
    for run in runs.values():
        run()
    assert np.array_equal(out["pyacc"][0], out["numba"][0])
    assert np.array_equal(out["pyacc"][1], out["numba"][1])
    return interleaved(runs, repeats, reset)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer samples")
    parser.add_argument("--smoke", action="store_true",
                        help="every case once at tiny sizes (results checked, no figures)")
    args = parser.parse_args(argv)
    repeats = 1 if args.smoke else 5 if args.quick else 15
    n = 10**4 if args.smoke else 10**6 if args.quick else 10**7
    print(f"machine: {machine_description()}; numba threads: {numba.get_num_threads()}")
    print("| case | pyacc | hand-written Numba (per-thread partials) | pyacc ÷ Numba | "
          "acc.atomic.add | target |")
    print("|---|---:|---:|---:|---:|---|")
    for bins in (64, 4096):
        t = histogram_case(n, bins, repeats)
        ratio = t["pyacc"] / t["numba per-thread"]
        print(f"| histogram {n:.0e} values, {bins} bins | {t['pyacc'] * 1e3:.2f} ms | "
              f"{t['numba per-thread'] * 1e3:.2f} ms | {ratio:.3f} | "
              f"{t['pyacc atomic.add'] * 1e3:.2f} ms | ≤ 1.10: "
              f"{'met' if ratio <= 1.10 else 'NOT met'} |")
    points = n // 10
    t = kmeans_case(points, 8, 16, repeats)
    ratio = t["pyacc"] / t["numba per-thread"]
    print(f"| k-means cluster sums, {points:.0e} points × 8 → 16 | {t['pyacc'] * 1e3:.2f} ms | "
          f"{t['numba per-thread'] * 1e3:.2f} ms | {ratio:.3f} | – | ≤ 1.10: "
          f"{'met' if ratio <= 1.10 else 'NOT met'} |")
    if args.smoke:
        print("smoke run: every case ran once at tiny sizes, results checked (targets not)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
