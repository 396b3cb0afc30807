"""SAXPY (y = a·x + y, single precision): the smallest OpenACC program, two ways.

1. ``implicit``: call the kernel on plain host arrays. Each call is its own compute
   region: ``x`` (only read) is copied in, ``y`` (written) is copied in and back out —
   two transfers in and one out *per call*.
2. ``data region``: the same calls inside ``with acc.data(copyin=[x], copy=[y])``: the
   kernel finds both arrays present, so there is one transfer in per array and one out
   for ``y``, however many calls there are.

On the ``host`` device there are no transfers at all (memory is shared); run with
``ACC_DEVICE_TYPE=emulated`` to see them counted. Run::

    python examples/saxpy.py                     # 10 million elements, 20 calls
    python examples/saxpy.py --small             # CI size
    ACC_DEVICE_TYPE=emulated python examples/saxpy.py --n 100000

It prints the time and the transfer summary of each variant and checks ``y`` against
NumPy.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pyacc as acc


@acc.parallel_loop
def saxpy(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


def implicit(a, x, y, calls: int) -> None:
    """Every call maps x and y on its own (present-or-copy)."""
    for _ in range(calls):
        saxpy(a, x, y)


def with_data_region(a, x, y, calls: int) -> None:
    """x and y stay on the device for all the calls."""
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(calls):
            saxpy(a, x, y)


def numpy_reference(a, x, y, calls: int) -> np.ndarray:
    y = y.copy()
    for _ in range(calls):
        y = a * x + y
    return y


def transfer_summary(stats: dict) -> str:
    return (f"{stats['h2d_count']} to device ({stats['h2d_bytes']} B), "
            f"{stats['d2h_count']} to host ({stats['d2h_bytes']} B), "
            f"{stats['launch_count']} kernel launches")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="vector length")
    parser.add_argument("--calls", type=int, default=20, help="kernel calls per variant")
    parser.add_argument("--small", action="store_true", help="a quick run (n = 10000, 5 calls)")
    parser.add_argument("--device", default=None,
                        help="host, emulated or cuda (default: ACC_DEVICE_TYPE or the default device)")
    args = parser.parse_args(argv)
    if args.small:
        args.n, args.calls = 10_000, 5
    if args.device:
        acc.set_device_type(args.device)

    rng = np.random.default_rng(1)
    a = np.float32(2.5)
    x = rng.random(args.n, dtype=np.float32)
    y0 = rng.random(args.n, dtype=np.float32)
    reference = numpy_reference(a, x, y0, args.calls)

    saxpy(a, x[:8], y0[:8].copy())  # compile the kernel before timing
    print(f"saxpy: n = {args.n}, {args.calls} calls per variant, on the {acc.get_device_type()} device")
    failed = False
    for label, variant in (("implicit", implicit), ("data region", with_data_region)):
        y = y0.copy()
        acc.reset_stats()
        start = time.perf_counter()
        variant(a, x, y, args.calls)
        elapsed = time.perf_counter() - start
        stats = acc.stats()
        gbytes = 3 * 4 * args.n * args.calls / elapsed / 1e9
        print(f"  {label:12s} time: {elapsed:.4f} s ({gbytes:.1f} GB/s)   transfers: {transfer_summary(stats)}")
        # float32: a·x + y rounds the same in the kernel and in NumPy, up to a contraction
        if not np.allclose(y, reference, rtol=1e-5, atol=1e-6):
            worst = int(np.argmax(np.abs(y - reference)))
            print(f"check: FAILED — {label}: y[{worst}] = {y[worst]!r}, NumPy says {reference[worst]!r}",
                  file=sys.stderr)
            failed = True
    if failed:
        return 1
    print("check: matches the NumPy reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
