"""The Jacobi calling pattern: a compute region called with its arrays in two orders in
turn (``step(u, unew)``, ``step(unew, u)``) against one order, inside a data region.

Before, the launcher kept one replay plan, so every other call took the full path. Now it
keeps the last few plans, and each order replays its own. Tiny 4 × 4 arrays, so the figure
is launch overhead, not arithmetic.

Run: ``python benchmarks/bench_alternating.py [host|emulated] [--smoke]`` (default
emulated; ``--smoke``: a few calls of each pattern on the current device type —
``ACC_DEVICE_TYPE`` — unless one is named, no figures). Compare two versions by running
this file alternately with ``PYTHONPATH`` set to each checkout.
"""
import argparse
import statistics
import sys
import time

import numpy as np

import pyacc as acc


@acc.parallel_loop(collapse=2)
def step(u, unew):
    for i in range(1, u.shape[0] - 1):
        for j in range(1, u.shape[1] - 1):
            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("device", nargs="?", choices=["host", "emulated"],
                        help="device type (default: emulated; with --smoke the current one)")
    parser.add_argument("--smoke", action="store_true",
                        help="a few calls of each pattern, no figures")
    args = parser.parse_args(argv)
    if args.device or not args.smoke:
        acc.set_device_type(args.device or "emulated")
    pairs, rounds = (5, 1) if args.smoke else (2000, 7)
    print(f"device: {acc.get_device_type()}")
    u = np.zeros((4, 4))
    unew = np.zeros((4, 4))
    with acc.data(copy=[u, unew]):
        for _ in range(pairs):  # warm-up: compile, and a replay plan for each order
            step(u, unew)
            step(unew, u)

        def same():
            t = time.perf_counter()
            for _ in range(pairs):
                step(u, unew)
                step(u, unew)
            return (time.perf_counter() - t) / (2 * pairs) * 1e6

        def alternating():
            t = time.perf_counter()
            for _ in range(pairs):
                step(u, unew)
                step(unew, u)
            return (time.perf_counter() - t) / (2 * pairs) * 1e6

        rs, ra = [], []
        for _ in range(rounds):
            rs.append(same())
            ra.append(alternating())
    if args.smoke:
        print("smoke run: both calling patterns ran (no figures)")
        return 0
    print(f"same arrays {statistics.median(rs):.2f} us/call, alternating "
          f"{statistics.median(ra):.2f} us/call, ratio {statistics.median(ra) / statistics.median(rs):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
