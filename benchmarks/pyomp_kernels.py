"""PyOMP versions of the CPU suite's kernels, run in PyOMP's own virtual environment.

PyOMP (``pip install pyomp``; OpenMP directives as ``with openmp("...")`` blocks in
functions compiled by its own ``njit``) pins an older Numba than pyacc, so
``benchmarks/suite.py`` creates ``benchmarks/.venv-pyomp`` and runs this file there, in a
subprocess. It imports neither pyacc nor anything else from this repository but
``fields.py`` beside it (pure NumPy: the problems' arrays, the same as the suite's).

The kernels are the hand-written Numba ones of ``bench_compute.py`` with ``prange``
replaced by ``parallel for`` (``reduction(+:total)`` on dot). Two PyOMP 0.6 limits shape
them:

- its directive grammar has no ``max``/``min`` reduction operators
  (``reduction(max:err)`` is a parse error), so Jacobi keeps a per-row maximum, as the
  hand-written Numba version does;
- ``parallel for collapse(2)`` over an n × m nest with n ≠ m runs the wrong iteration
  space (a 33 × 29 matmul leaves rows 29–32 unwritten; square nests come out right), so
  matmul parallelises the outer loop only, like the hand-written Numba version.

Two modes:

``jacobi-target`` is Jacobi in PyOMP's OpenMP *target* spelling (``target data`` +
``target teams distribute parallel for`` on ``device(1)``, the host as an offload device
with its own memory), the spelling ``pyacc.omp`` users port from: ``omp_jacobi_target``.

- batch: ``python pyomp_kernels.py --kernel jacobi --size 2048 --steps 100 --repeats 5``
  prints one JSON object: warm-up (compile) seconds, every repeat, the median, and whether
  the result matched NumPy;
- ``--serve``: reads JSON requests line by line on stdin and answers one JSON line each on
  stdout (``setup`` a kernel and size, ``run`` it ``number`` times and answer the mean seconds,
  ``quit``), so the suite can
  interleave PyOMP with the in-process candidates round by round. After each run it waits
  ``--settle`` seconds before answering, so its OpenMP threads have stopped spinning
  (libomp's default KMP_BLOCKTIME is 200 ms) before the suite times the next candidate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import numpy as np

from fields import problem_arrays

# == kernels =================================================================================

try:
    import numba
    from numba.openmp import njit
    from numba.openmp import openmp_context as openmp
except ImportError as _error:  # reported as JSON by main()
    IMPORT_ERROR = f"{type(_error).__name__}: {_error}"
else:
    IMPORT_ERROR = None

    @njit
    def omp_saxpy(a, x, y):
        n = x.shape[0]
        with openmp("parallel for"):
            for i in range(n):
                y[i] = a * x[i] + y[i]

    @njit
    def omp_jacobi(u, unew):
        n = u.shape[0]
        m = u.shape[1]
        row_max = np.zeros(n)
        with openmp("parallel for"):
            for i in range(1, n - 1):
                err = 0.0
                for j in range(1, m - 1):
                    unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
                    err = max(err, abs(unew[i, j] - u[i, j]))
                row_max[i] = err
        return row_max.max()

    @njit
    def omp_jacobi_target(u, unew, steps, row_max):
        """``steps`` (even) Jacobi steps in PyOMP's *target* spelling, on ``device(1)`` (the
        host as an offload device, with its own memory: pyomp_probe.py): the grids mapped
        once by a ``target data`` region around the loop, each step a ``target teams
        distribute parallel for`` whose per-row maxima come back by ``target update`` for
        the host to take the step's error, as pyacc's Jacobi returns it every step. (One
        loop per direction: a ``target update`` inside a region whose loop branches on the
        step's parity crashed PyOMP 0.6.)"""
        n = u.shape[0]
        m = u.shape[1]
        err = 0.0
        with openmp("target data device(1) map(tofrom: u, unew) map(to: row_max)"):
            for s in range(steps // 2):
                with openmp("target teams distribute parallel for device(1)"):
                    for i in range(1, n - 1):
                        e = 0.0
                        for j in range(1, m - 1):
                            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
                            e = max(e, abs(unew[i, j] - u[i, j]))
                        row_max[i] = e
                with openmp("target update device(1) from(row_max)"):
                    pass
                err = row_max.max()
                with openmp("target teams distribute parallel for device(1)"):
                    for i in range(1, n - 1):
                        e = 0.0
                        for j in range(1, m - 1):
                            u[i, j] = 0.25 * (unew[i - 1, j] + unew[i + 1, j] + unew[i, j - 1] + unew[i, j + 1])
                            e = max(e, abs(u[i, j] - unew[i, j]))
                        row_max[i] = e
                with openmp("target update device(1) from(row_max)"):
                    pass
                err = row_max.max()
        return err

    @njit
    def omp_dot(x, y):
        n = x.shape[0]
        total = 0.0
        with openmp("parallel for reduction(+:total)"):
            for i in range(n):
                total += x[i] * y[i]
        return total

    @njit
    def omp_matmul(a, b, c):
        n = a.shape[0]
        k_max = a.shape[1]
        m = b.shape[1]
        with openmp("parallel for"):
            for i in range(n):
                for j in range(m):
                    total = 0.0
                    for k in range(k_max):
                        total += a[i, k] * b[k, j]
                    c[i, j] = total


# == problems: the same data as the suite (same generator, same seed, same sizes) ===========


class Problem:
    """One kernel at one size: ``run()`` does the timed work once; ``check()`` compares a
    fresh result with NumPy."""

    def __init__(self, kernel: str, size: int, steps: int = 0):
        self.kernel, self.size, self.steps = kernel, size, steps
        # x, y | u, unew, start | a, b, c: the suite's data, placed as the suite places it
        self.__dict__.update(problem_arrays("jacobi" if kernel == "jacobi-target" else kernel, size))
        if kernel == "jacobi-target":
            self.row_max = np.zeros(size)

    def reset(self):
        """Back to the initial grid (Jacobi; untimed, before every sample): every
        implementation then times the same steps from the same values, none of them
        on a grid that has drifted into subnormal numbers."""
        if self.kernel in ("jacobi", "jacobi-target"):
            self.u[:] = self.start
            self.unew[:] = self.start

    def run(self):
        if self.kernel == "saxpy":
            omp_saxpy(2.0, self.x, self.y)
        elif self.kernel == "dot":
            return omp_dot(self.x, self.y)
        elif self.kernel == "jacobi-target":
            return omp_jacobi_target(self.u, self.unew, self.steps, self.row_max)
        elif self.kernel == "jacobi":
            for _ in range(self.steps // 2):
                omp_jacobi(self.u, self.unew)
                omp_jacobi(self.unew, self.u)
        else:
            omp_matmul(self.a, self.b, self.c)

    def check(self) -> bool:
        rng = np.random.default_rng(7)
        if self.kernel == "saxpy":
            x, y = rng.random(1000), rng.random(1000)
            expected = 2.0 * x + y
            omp_saxpy(2.0, x, y)
            return bool(np.allclose(y, expected, rtol=1e-14, atol=0))
        if self.kernel == "dot":
            x, y = rng.random(10007), rng.random(10007)
            return bool(np.isclose(omp_dot(x, y), x @ y, rtol=1e-12))
        if self.kernel == "jacobi-target":  # 4 steps against NumPy's: both grids, the error
            a = rng.random((37, 41))
            u, unew, b = a.copy(), a.copy(), a.copy()
            err = omp_jacobi_target(u, unew, 4, np.zeros(37))
            for step in range(4):
                src, dst = (a, b) if step % 2 == 0 else (b, a)
                dst[1:-1, 1:-1] = 0.25 * (src[:-2, 1:-1] + src[2:, 1:-1] + src[1:-1, :-2] + src[1:-1, 2:])
                expected = np.abs(dst[1:-1, 1:-1] - src[1:-1, 1:-1]).max()
            return bool(np.allclose(u, a, rtol=1e-13, atol=0) and np.allclose(unew, b, rtol=1e-13, atol=0)
                        and np.isclose(err, expected, rtol=1e-12))
        if self.kernel == "jacobi":
            u = rng.random((37, 41))
            unew = u.copy()
            err = omp_jacobi(u, unew)
            interior = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
            return bool(np.array_equal(unew[1:-1, 1:-1], interior)
                        and err == np.abs(interior - u[1:-1, 1:-1]).max())
        a, b = rng.random((33, 17)), rng.random((17, 29))
        c = np.zeros((33, 29))
        omp_matmul(a, b, c)
        return bool(np.allclose(c, a @ b, rtol=1e-12))


def info() -> dict:
    import numba.openmp

    return {"pyomp": getattr(numba.openmp, "__version__", "?"), "numba": numba.__version__,
            "numpy": np.__version__, "python": sys.version.split()[0],
            "omp_threads": int(numba.openmp.omp_get_max_threads())}


# == modes ===================================================================================


def batch(args) -> dict:
    problem = Problem(args.kernel, args.size, args.steps)
    start = time.perf_counter()
    problem.run()  # warm-up: compiles
    warmup = time.perf_counter() - start
    samples = []
    for _ in range(args.repeats):
        problem.reset()
        start = time.perf_counter()
        problem.run()
        samples.append(time.perf_counter() - start)
    return {"kernel": args.kernel, "size": args.size, "steps": args.steps, "warmup_s": warmup,
            "samples_s": samples, "median_s": statistics.median(samples),
            "check": problem.check(), **info()}


def serve(settle: float, reply) -> None:
    problem = None
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            op = request["op"]
            if op == "quit":
                reply({"ok": True})
                return
            if op == "info":
                reply({"ok": True, **info()})
            elif op == "setup":
                problem = Problem(request["kernel"], int(request["size"]), int(request.get("steps", 0)))
                start = time.perf_counter()
                problem.run()  # warm-up: compiles
                warmup = time.perf_counter() - start
                ok = problem.check()
                time.sleep(settle)
                reply({"ok": True, "warmup_s": warmup, "check": ok})
            elif op == "run":  # mean seconds of `number` runs in a row
                number = max(1, int(request.get("number", 1)))
                problem.reset()
                start = time.perf_counter()
                for _ in range(number):
                    problem.run()
                seconds = (time.perf_counter() - start) / number
                time.sleep(settle)
                reply({"ok": True, "seconds": seconds})
            else:
                reply({"ok": False, "error": f"unknown op {op!r}"})
        except Exception as error:  # noqa: BLE001 - every failure is reported, not raised
            reply({"ok": False, "error": f"{type(error).__name__}: {error}",
                   "traceback": traceback.format_exc(limit=3)})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="answer JSON requests on stdin")
    parser.add_argument("--settle", type=float, default=0.3,
                        help="seconds to wait after each run before answering (--serve)")
    parser.add_argument("--kernel", choices=["saxpy", "jacobi", "jacobi-target", "dot", "matmul"])
    parser.add_argument("--size", type=int, default=10**6)
    parser.add_argument("--steps", type=int, default=100, help="Jacobi steps per run")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    # JSON goes to the real stdout; anything else printed (Numba, OpenMP) to stderr
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def reply(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    if IMPORT_ERROR is not None:
        reply({"ok": False, "error": f"PyOMP cannot be imported: {IMPORT_ERROR}"})
        return 1
    if args.serve:
        serve(args.settle, reply)
        return 0
    if not args.kernel:
        reply({"ok": True, **info()})
        return 0
    reply({"ok": True, **batch(args)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
