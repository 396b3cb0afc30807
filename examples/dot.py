"""Dot product and other reductions: ``reduction("+:s")`` is the function's return value.

A reduction variable is initialised in the function, updated only by its operator inside
the loop, and returned; the call returns the reduced value (a tuple for several
reductions). Shown here:

- ``dot``: ``reduction="+:s"``, one value;
- ``stats_of``: three reductions at once (``+``, ``max``, and an integer ``+`` count),
  returned as a tuple;
- the same ``dot`` on two halves of the vectors on two async queues: with ``async_=q``
  the call returns a handle, ``handle.result()`` waits for the queue and gives the value.
  The halves are views of arrays mapped by the enclosing ``acc.data``, so they are present
  and nothing moves.

Run::

    python examples/dot.py                    # 10 million elements
    python examples/dot.py --small            # CI size
    ACC_DEVICE_TYPE=emulated python examples/dot.py

The floating-point sums are added in a different order than NumPy's pairwise sum, so the
check allows the worst-case rounding error of an n-term sum, n·ε·Σ|xᵢyᵢ|; the integer
count and the maximum must match exactly.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pyacc as acc


@acc.parallel_loop(reduction="+:s")
def dot(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


@acc.parallel_loop("reduction(+:sum_sq) reduction(max:largest) reduction(+:positive)")
def stats_of(x):
    sum_sq = 0.0
    largest = 0.0
    positive = 0
    for i in range(x.shape[0]):
        sum_sq += x[i] * x[i]
        largest = max(largest, abs(x[i]))
        if x[i] > 0.0:
            positive += 1
    return sum_sq, largest, positive


def dot_tolerance(x, y) -> float:
    """The worst-case rounding error of summing x·y in any order (γₙ·Σ|xᵢyᵢ|)."""
    n = x.shape[0]
    return 2.0 * n * np.finfo(np.float64).eps * float(np.abs(x * y).sum()) + 1e-300


def transfer_summary(stats: dict) -> str:
    return (f"{stats['h2d_count']} to device ({stats['h2d_bytes']} B), "
            f"{stats['d2h_count']} to host ({stats['d2h_bytes']} B), "
            f"{stats['launch_count']} kernel launches")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="vector length")
    parser.add_argument("--small", action="store_true", help="a quick run (n = 10001)")
    parser.add_argument("--device", default=None,
                        help="host, emulated or cuda (default: ACC_DEVICE_TYPE or the default device)")
    args = parser.parse_args(argv)
    if args.small:
        args.n = 10_001
    if args.device:
        acc.set_device_type(args.device)
    if args.n < 2:
        parser.error("--n must be at least 2")

    rng = np.random.default_rng(7)
    x = rng.uniform(-1.0, 1.0, args.n)
    y = rng.uniform(-1.0, 1.0, args.n)
    half = args.n // 2

    dot(x[:4], y[:4]), stats_of(x[:4])  # compile the kernels before timing
    acc.reset_stats()
    start = time.perf_counter()
    with acc.data(copyin=[x, y]):
        s = dot(x, y)
        sum_sq, largest, positive = stats_of(x)
        first = dot(x[:half], y[:half], async_=1)  # two queues, overlapping
        second = dot(x[half:], y[half:], async_=2)
        s_async = first.result() + second.result()
    elapsed = time.perf_counter() - start
    stats = acc.stats()

    print(f"reductions over n = {args.n} on the {acc.get_device_type()} device")
    print(f"  x·y = {s:.12g}   (two async halves: {s_async:.12g})")
    print(f"  Σx² = {sum_sq:.12g}   max|x| = {largest:.12g}   count(x > 0) = {positive}")
    print(f"  time: {elapsed:.4f} s   transfers: {transfer_summary(stats)}")

    reference = float(np.dot(x, y))
    problems = []
    tolerance = dot_tolerance(x, y)
    for label, value in (("x·y", s), ("x·y on two queues", s_async)):
        if not abs(value - reference) <= tolerance:
            problems.append(f"{label} = {value!r}, NumPy says {reference!r} (tolerance {tolerance:.3g})")
    if not abs(sum_sq - float(np.dot(x, x))) <= dot_tolerance(x, x):
        problems.append(f"Σx² = {sum_sq!r}, NumPy says {float(np.dot(x, x))!r}")
    if largest != float(np.abs(x).max()):
        problems.append(f"max|x| = {largest!r}, NumPy says {float(np.abs(x).max())!r}")
    if positive != int(np.count_nonzero(x > 0.0)):
        problems.append(f"count(x > 0) = {positive}, NumPy says {int(np.count_nonzero(x > 0.0))}")
    if problems:
        for problem in problems:
            print(f"check: FAILED — {problem}", file=sys.stderr)
        return 1
    print("check: matches the NumPy reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
