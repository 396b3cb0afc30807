"""Dense matrix multiply C = A·B with ``collapse(2)``: the i and j loops form one parallel
loop of n·m iterations; the k loop inside runs sequentially in each iteration, summing
into a scalar that is private to the iteration.

The data clauses are explicit: ``a`` and ``b`` are only read (``copyin``), ``c`` is only
written (``copyout``: allocated on the device, never copied in). The second kernel is the
same loop nest written with the OpenACC clause-string spelling and with ``b`` transposed
first on the device (``present`` data inside an ``acc.data`` region), which makes its
inner loop read both operands with stride 1. Run::

    python examples/matmul.py                    # 512 × 512
    python examples/matmul.py --small            # CI size
    ACC_DEVICE_TYPE=emulated python examples/matmul.py --n 256

Each product is checked against NumPy's ``a @ b`` with a tolerance for the different
summation order (k·ε·Σ|aᵢₗbₗⱼ|).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pyacc as acc


@acc.parallel_loop(collapse=2, copyin="a b", copyout="c")
def matmul(a, b, c):
    n, k = a.shape
    m = b.shape[1]
    for i in range(n):
        for j in range(m):
            s = 0.0
            for l in range(k):
                s += a[i, l] * b[l, j]
            c[i, j] = s


@acc.parallel_loop("collapse(2) present(b, bt)")
def transpose(b, bt):
    k, m = b.shape
    for j in range(m):
        for l in range(k):
            bt[j, l] = b[l, j]


@acc.parallel_loop("collapse(2) present(a, bt, c)")
def matmul_transposed(a, bt, c):
    n, k = a.shape
    m = bt.shape[0]
    for i in range(n):
        for j in range(m):
            s = 0.0
            for l in range(k):
                s += a[i, l] * bt[j, l]
            c[i, j] = s


def transfer_summary(stats: dict) -> str:
    return (f"{stats['h2d_count']} to device ({stats['h2d_bytes']} B), "
            f"{stats['d2h_count']} to host ({stats['d2h_bytes']} B), "
            f"{stats['launch_count']} kernel launches")


def check(label: str, c: np.ndarray, a: np.ndarray, b: np.ndarray) -> str | None:
    reference = a @ b
    k = a.shape[1]
    tolerance = 2.0 * k * np.finfo(np.float64).eps * (np.abs(a) @ np.abs(b))
    bad = np.abs(c - reference) > tolerance
    if bad.any():
        i, j = np.argwhere(bad)[0]
        return (f"{label}: c[{i}, {j}] = {c[i, j]!r}, NumPy says {reference[i, j]!r} "
                f"({int(bad.sum())} elements differ)")
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=512, help="matrix size (n × n times n × n)")
    parser.add_argument("--small", action="store_true", help="a quick run (n = 64)")
    parser.add_argument("--device", default=None,
                        help="host, emulated or cuda (default: ACC_DEVICE_TYPE or the default device)")
    args = parser.parse_args(argv)
    if args.small:
        args.n = 64
    if args.device:
        acc.set_device_type(args.device)
    n = args.n

    rng = np.random.default_rng(3)
    a = rng.standard_normal((n, n))
    b = rng.standard_normal((n, n))
    flops = 2.0 * n ** 3

    # compile before timing
    tiny = np.ones((2, 2))
    matmul(tiny, tiny, np.empty((2, 2)))
    scratch_t, scratch_c = np.empty((2, 2)), np.empty((2, 2))
    with acc.data(copyin=[tiny], create=[scratch_t], copyout=[scratch_c]):
        transpose(tiny, scratch_t)
        matmul_transposed(tiny, scratch_t, scratch_c)

    print(f"matrix multiply {n}x{n} · {n}x{n} on the {acc.get_device_type()} device")
    problems = []

    c = np.empty((n, n))
    acc.reset_stats()
    start = time.perf_counter()
    matmul(a, b, c)
    elapsed = time.perf_counter() - start
    print(f"  collapse(2), copyin/copyout:  {elapsed:.4f} s  {flops / elapsed / 1e9:6.2f} GFLOP/s   "
          f"transfers: {transfer_summary(acc.stats())}")
    problems.append(check("collapse(2)", c, a, b))

    c2 = np.empty((n, n))
    bt = np.empty((n, n))
    acc.reset_stats()
    start = time.perf_counter()
    with acc.data(copyin=[a, b], create=[bt], copyout=[c2]):
        transpose(b, bt)
        matmul_transposed(a, bt, c2)
    elapsed = time.perf_counter() - start
    print(f"  transposed b, data region:    {elapsed:.4f} s  {flops / elapsed / 1e9:6.2f} GFLOP/s   "
          f"transfers: {transfer_summary(acc.stats())}")
    problems.append(check("transposed", c2, a, b))

    problems = [p for p in problems if p]
    if problems:
        for problem in problems:
            print(f"check: FAILED — {problem}", file=sys.stderr)
        return 1
    print("check: matches the NumPy reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
