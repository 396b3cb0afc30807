"""Unstructured data lifetimes: ``enter data`` in one function, ``exit data`` in another.

A structured ``with acc.data(...)`` region cannot outlive the block that opens it. Real
codes allocate device copies when an object is built and release them when it is torn
down; OpenACC's ``enter data``/``exit data`` (the *dynamic* reference count) are for that.
This example is a 1-D heat-diffusion solver whose class keeps its fields on the device:

- ``__init__`` maps the fields with ``acc.enter_data(copyin=[...], create=[...])``;
- ``step()`` launches kernels with ``present(...)``: no transfers at all;
- ``values()`` is ``acc.update_self`` when the host needs the numbers — without it the host
  copy is stale (shown on the emulated device);
- ``add_heat()`` changes the host copy of a few cells and pushes only that slice to the
  device with ``acc.update_device`` of a view;
- ``sample()`` fetches every k-th cell with ``acc.update(self=[u[::k]])``, a strided view;
- ``close()`` (or leaving a ``with`` block) ends the lifetime with ``acc.exit_data``:
  ``copyout`` for the field, ``delete`` for the scratch.

Across functions: ``make_solver()`` creates the object (entering data) and ``run()``
uses it; the device copies live until ``close()``. Run::

    python examples/unstructured.py              # 1 million cells, 200 steps
    python examples/unstructured.py --small      # CI size
    ACC_DEVICE_TYPE=emulated python examples/unstructured.py

The result is checked against the same iterations in NumPy.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pyacc as acc


@acc.parallel_loop(present="u unew")
def diffuse(u, unew, c):
    n = u.shape[0]
    for i in range(1, n - 1):
        unew[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])


@acc.parallel_loop(present="u", reduction="+:total")
def heat(u):
    total = 0.0
    for i in range(u.shape[0]):
        total += u[i]
    return total


class HeatSolver:
    """A 1-D rod whose temperature lives on the device between calls.

    ``u`` holds the temperature (both ends fixed), ``unew`` is scratch. The two swap
    roles each step; both stay mapped, so ``self.u`` is always a present array.
    """

    def __init__(self, n: int, c: float = 0.25):
        self.c = c
        self.u = np.zeros(n)
        self.u[0] = self.u[-1] = 1.0               # the ends are held at 1
        self.unew = self.u.copy()                  # same boundary values
        # copyin: the initial field, dynamic count 1; create: scratch, never copied in ...
        acc.enter_data(copyin=[self.u], create=[self.unew])
        # ... so the boundary cells of the scratch must be sent once
        acc.update_device(self.unew[:1])
        acc.update_device(self.unew[-1:])
        self.closed = False

    def step(self, steps: int = 1) -> None:
        for _ in range(steps):
            diffuse(self.u, self.unew, self.c)
            self.u, self.unew = self.unew, self.u

    def total_heat(self) -> float:
        return heat(self.u)                        # a reduction on device data

    def values(self) -> np.ndarray:
        acc.update_self(self.u)                    # the host copy is stale until now
        return self.u

    def add_heat(self, lo: int, hi: int, amount: float) -> None:
        """Change a few cells on the host and send only those to the device."""
        acc.update_self(self.u[lo:hi])             # start from the device's current values
        self.u[lo:hi] += amount
        acc.update_device(self.u[lo:hi])           # a contiguous view of present data

    def sample(self, every: int) -> np.ndarray:
        view = self.u[::every]
        acc.update(self=[view])                    # only the strided elements move
        return view.copy()

    def close(self) -> np.ndarray:
        """End the device lifetime; the final field is copied back into ``self.u``."""
        if not self.closed:
            acc.exit_data(copyout=[self.u], delete=[self.unew])
            self.closed = True
        return self.u

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


PROBE = 2  # a cell next to the heated end


def make_solver(n: int) -> HeatSolver:
    """Enter data here ..."""
    return HeatSolver(n)


def run(solver: HeatSolver, steps: int, log) -> dict:
    """... use it there: every kernel finds the fields present."""
    results = {}
    solver.step(steps // 2)
    stale = float(solver.u[PROBE])                 # the host copy, not updated
    results["fresh"] = float(solver.values()[PROBE])
    results["stale"] = stale
    n = solver.u.shape[0]
    solver.add_heat(n // 2 - 2, n // 2 + 2, 0.5)
    solver.step(steps - steps // 2)
    results["total"] = solver.total_heat()
    results["sample"] = solver.sample(max(1, n // 16))
    log(f"  refcounts of the field (structured, dynamic): {acc.refcounts(solver.u)}")
    return results


def numpy_reference(n: int, steps: int, c: float = 0.25) -> np.ndarray:
    u = np.zeros(n)
    u[0] = u[-1] = 1.0
    for k in range(steps):
        if k == steps // 2:
            u[n // 2 - 2:n // 2 + 2] += 0.5
        u[1:-1] = u[1:-1] + c * (u[:-2] - 2.0 * u[1:-1] + u[2:])
    return u


def transfer_summary(stats: dict) -> str:
    return (f"{stats['h2d_count']} to device ({stats['h2d_bytes']} B), "
            f"{stats['d2h_count']} to host ({stats['d2h_bytes']} B), "
            f"{stats['launch_count']} kernel launches")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="number of cells")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--small", action="store_true", help="a quick run (1000 cells, 50 steps)")
    parser.add_argument("--device", default=None,
                        help="host, emulated or cuda (default: ACC_DEVICE_TYPE or the default device)")
    args = parser.parse_args(argv)
    if args.small:
        args.n, args.steps = 1000, 50
    if args.device:
        acc.set_device_type(args.device)
    if args.n < 16 or args.steps < 2:
        parser.error("need --n ≥ 16 and --steps ≥ 2")

    with HeatSolver(16) as warm_up:                # compile the kernels before timing
        warm_up.step(2)
        warm_up.total_heat()
        warm_up.sample(3)

    print(f"1-D heat diffusion, {args.n} cells, {args.steps} steps, on the {acc.get_device_type()} device")
    acc.reset_stats()
    start = time.perf_counter()
    solver = make_solver(args.n)
    results = run(solver, args.steps, print)
    final = solver.close()
    elapsed = time.perf_counter() - start
    stats = acc.stats()
    print(f"  time: {elapsed:.4f} s   transfers: {transfer_summary(stats)}")
    print(f"  after {args.steps // 2} steps, cell {PROBE}: host copy before update_self {results['stale']:.6g}, "
          f"after {results['fresh']:.6g}")
    print(f"  total heat {results['total']:.9g}; present after close(): {acc.is_present(final)}")

    reference = numpy_reference(args.n, args.steps)
    half = numpy_reference(args.n, args.steps // 2)[PROBE]
    problems = []
    if not np.allclose(final, reference, rtol=1e-12, atol=1e-14):
        worst = int(np.argmax(np.abs(final - reference)))
        problems.append(f"u[{worst}] = {final[worst]!r}, NumPy says {reference[worst]!r}")
    if not np.isclose(results["fresh"], half, rtol=1e-12, atol=1e-14):
        problems.append(f"value after update_self {results['fresh']!r}, NumPy says {half!r}")
    if not np.isclose(results["total"], reference.sum(), rtol=1e-9):
        problems.append(f"total heat {results['total']!r}, NumPy says {reference.sum()!r}")
    if not np.array_equal(results["sample"], final[::max(1, args.n // 16)]):
        problems.append("the strided sample differs from the final field")
    if acc.is_present(final) and acc.get_device_type() != "host":
        problems.append("the field is still present after close()")
    if acc.get_device_type() == "emulated" and results["stale"] != 0.0:
        problems.append("the host copy changed without update_self on the emulated device")
    if problems:
        for problem in problems:
            print(f"check: FAILED — {problem}", file=sys.stderr)
        return 1
    print("check: matches the NumPy reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
