"""Jacobi relaxation of the 2-D Laplace equation written with OpenMP target directives.

The OpenMP spelling of examples/laplace2d.py, as a C OpenMP-offload code writes it::

    #pragma omp target data map(tofrom: a[0:n*n]) map(alloc: anew[0:n*n])
    while (err > tol && iter < iter_max) {
        #pragma omp target teams distribute parallel for collapse(2) reduction(max:err)
        for (...) { anew = stencil(a); err = fmax(err, fabs(anew - a)); }
        #pragma omp target teams distribute parallel for collapse(2)
        for (...) a = anew;
    }

The grid stays on the device for the whole solve: one ``omp.target_data`` region maps the
field ``tofrom`` and the scratch grid ``alloc``; the kernels find their arrays present
(``map(present, ...)``), so each iteration moves no data. Run::

    python examples/jacobi_omp.py                  # 1024² grid, default device
    python examples/jacobi_omp.py --n 64 --device emulated --check

It prints the iterations, the final error, the time and the transfer summary, and checks
the result against a NumPy version of the same iterations (``--check``; on by default for
small grids).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pyacc as acc
from pyacc import omp


@omp.target_teams_distribute_parallel_for(
    "map(present, to: a) map(present, alloc: anew) collapse(2) reduction(max: err)")
def stencil(a, anew):
    n, m = a.shape
    err = 0.0
    for j in range(1, n - 1):
        for i in range(1, m - 1):
            anew[j, i] = 0.25 * (a[j, i + 1] + a[j, i - 1] + a[j - 1, i] + a[j + 1, i])
            err = max(err, abs(anew[j, i] - a[j, i]))
    return err


@omp.target_teams_distribute_parallel_for("map(present, tofrom: a) map(present, to: anew) collapse(2)")
def copy_back(a, anew):
    n, m = a.shape
    for j in range(1, n - 1):
        for i in range(1, m - 1):
            a[j, i] = anew[j, i]


def initial_grid(n: int) -> np.ndarray:
    """Zero interior, the top edge held at 1."""
    grid = np.zeros((n, n))
    grid[0, :] = 1.0
    return grid


def solve(a: np.ndarray, iterations: int, tolerance: float) -> tuple[int, float]:
    """Relax ``a`` in place on the default OpenMP device; return (iterations, error)."""
    anew = np.empty_like(a)
    error, done = 1.0, 0
    with omp.target_data(map_tofrom=[a], map_alloc=[anew]):
        omp.target_update(to=[anew[0:1, :]])  # only interior points are written
        while error > tolerance and done < iterations:
            error = stencil(a, anew)
            copy_back(a, anew)
            done += 1
    return done, error


def numpy_reference(a: np.ndarray, iterations: int) -> tuple[np.ndarray, float]:
    error = 0.0
    for _ in range(iterations):
        interior = 0.25 * (a[1:-1, 2:] + a[1:-1, :-2] + a[:-2, 1:-1] + a[2:, 1:-1])
        error = float(np.abs(interior - a[1:-1, 1:-1]).max())
        a[1:-1, 1:-1] = interior
    return a, error


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024, help="grid size (n × n)")
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--tolerance", type=float, default=1e-6)
    parser.add_argument("--device", default=None,
                        help="host, emulated or cuda (default: ACC_DEVICE_TYPE or the default device)")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                        help="compare with NumPy (default: on when n ≤ 256)")
    args = parser.parse_args(argv)
    if args.device:
        acc.set_device_type(args.device)
    check = args.check if args.check is not None else args.n <= 256

    a = initial_grid(args.n)
    solve(initial_grid(8), 2, 0.0)  # compile the kernels before timing
    acc.reset_stats()
    start = time.perf_counter()
    iterations, error = solve(a, args.iterations, args.tolerance)
    elapsed = time.perf_counter() - start
    stats = acc.stats()

    print(f"Jacobi relaxation (OpenMP directives) of a {args.n}x{args.n} grid on the "
          f"{acc.get_device_type()} device (OpenMP device {omp.get_default_device()} of "
          f"{omp.get_num_devices()})")
    print(f"iterations: {iterations}  error: {error:.6e}  time: {elapsed:.3f} s")
    print(f"transfers: {stats['h2d_count']} to device ({stats['h2d_bytes']} B), "
          f"{stats['d2h_count']} to host ({stats['d2h_bytes']} B), "
          f"{stats['launch_count']} kernel launches")
    if check:
        reference, reference_error = numpy_reference(initial_grid(args.n), iterations)
        if not (np.allclose(a, reference, rtol=1e-12, atol=1e-12) and np.isclose(error, reference_error)):
            print("check: FAILED — differs from the NumPy reference", file=sys.stderr)
            return 1
        print("check: matches the NumPy reference")
    else:  # cheap invariants: a maximum principle and the left-right symmetry of the problem
        if not (a.min() >= 0.0 and a.max() <= 1.0 and np.allclose(a, a[:, ::-1])):
            print("check: FAILED — the solution breaks the maximum principle or symmetry", file=sys.stderr)
            return 1
        print("check: bounded by the boundary values and symmetric")
    return 0


if __name__ == "__main__":
    sys.exit(main())
