"""Histogram with ``acc.atomic.add``: many loop iterations increment the same bin.

``counts[b] += 1`` from a parallel loop is a data race (two iterations read the same old
count, both write old + 1, one increment is lost). ``acc.atomic.add(counts, b, 1)`` is
OpenACC's ``#pragma acc atomic update``: each increment is one indivisible
read-modify-write. The bins of a 2-D histogram are addressed with a tuple index,
``acc.atomic.add(counts2d, (i, j), 1)``. A ``routine`` computes the bin of a value; it is
compiled into the kernels that call it and is an ordinary Python function elsewhere.
Run::

    python examples/histogram.py                 # 20 million samples, 64 bins
    python examples/histogram.py --small         # CI size
    ACC_DEVICE_TYPE=emulated python examples/histogram.py

The counts are integers and must equal NumPy's exactly (``np.bincount`` on bins computed
with the same formula); every sample in range must be counted once.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pyacc as acc


@acc.routine
def bin_of(value, lo, width, bins):
    """The bin of ``value`` in [lo, lo + bins·width), or -1 outside it."""
    if value < lo:
        return -1
    b = int((value - lo) / width)
    if b >= bins:
        return -1
    return b


@acc.parallel_loop
def histogram(samples, counts, lo, width):
    bins = counts.shape[0]
    for i in range(samples.shape[0]):
        b = bin_of(samples[i], lo, width, bins)
        if b >= 0:
            acc.atomic.add(counts, b, 1)


@acc.parallel_loop
def histogram2d(xs, ys, counts, lo, width):
    bins = counts.shape[0]
    for i in range(xs.shape[0]):
        bx = bin_of(xs[i], lo, width, bins)
        by = bin_of(ys[i], lo, width, bins)
        if bx >= 0 and by >= 0:
            acc.atomic.add(counts, (bx, by), 1)


def numpy_bins(samples: np.ndarray, lo: float, width: float, bins: int) -> np.ndarray:
    """The same bin formula, vectorised; -1 outside the range."""
    b = np.where(samples >= lo, ((samples - lo) / width).astype(np.int64), -1)
    return np.where(b < bins, b, -1)


def transfer_summary(stats: dict) -> str:
    return (f"{stats['h2d_count']} to device ({stats['h2d_bytes']} B), "
            f"{stats['d2h_count']} to host ({stats['d2h_bytes']} B), "
            f"{stats['launch_count']} kernel launches")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000_000, help="number of samples")
    parser.add_argument("--bins", type=int, default=64)
    parser.add_argument("--small", action="store_true", help="a quick run (n = 100000)")
    parser.add_argument("--device", default=None,
                        help="host, emulated or cuda (default: ACC_DEVICE_TYPE or the default device)")
    args = parser.parse_args(argv)
    if args.small:
        args.n = 100_000
    if args.device:
        acc.set_device_type(args.device)

    rng = np.random.default_rng(11)
    samples = rng.normal(0.0, 1.0, args.n)         # some fall outside [-4, 4)
    xs, ys = rng.normal(0.0, 1.0, (2, args.n // 4))
    lo, hi = -4.0, 4.0
    width = (hi - lo) / args.bins

    # compile before timing
    histogram(samples[:4], np.zeros(args.bins, dtype=np.int64), lo, width)
    histogram2d(xs[:4], ys[:4], np.zeros((args.bins, args.bins), dtype=np.int64), lo, width)

    counts = np.zeros(args.bins, dtype=np.int64)
    counts2d = np.zeros((args.bins, args.bins), dtype=np.int64)
    acc.reset_stats()
    start = time.perf_counter()
    histogram(samples, counts, lo, width)
    histogram2d(xs, ys, counts2d, lo, width)
    elapsed = time.perf_counter() - start
    stats = acc.stats()

    print(f"histogram of {args.n} samples in {args.bins} bins, and of {xs.shape[0]} points in "
          f"{args.bins}x{args.bins} bins, on the {acc.get_device_type()} device")
    print(f"  time: {elapsed:.4f} s   transfers: {transfer_summary(stats)}")
    print(f"  counted {int(counts.sum())} samples in range; fullest bin {int(counts.argmax())} "
          f"with {int(counts.max())}")

    b = numpy_bins(samples, lo, width, args.bins)
    reference = np.bincount(b[b >= 0], minlength=args.bins)
    bx, by = numpy_bins(xs, lo, width, args.bins), numpy_bins(ys, lo, width, args.bins)
    inside = (bx >= 0) & (by >= 0)
    reference2d = np.bincount(bx[inside] * args.bins + by[inside],
                              minlength=args.bins * args.bins).reshape(args.bins, args.bins)
    problems = []
    if not np.array_equal(counts, reference):
        lost = int(reference.sum() - counts.sum())
        problems.append(f"1-D counts differ from NumPy's in {int((counts != reference).sum())} bins "
                        f"({lost} increments lost)")
    if not np.array_equal(counts2d, reference2d):
        problems.append(f"2-D counts differ from NumPy's in {int((counts2d != reference2d).sum())} bins")
    in_range = int(((samples >= lo) & (samples < hi)).sum())
    if int(counts.sum()) != in_range:
        problems.append(f"{int(counts.sum())} samples counted, {in_range} are in [{lo}, {hi})")
    if problems:
        for problem in problems:
            print(f"check: FAILED — {problem}", file=sys.stderr)
        return 1
    print("check: matches the NumPy reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
