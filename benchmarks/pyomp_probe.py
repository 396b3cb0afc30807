"""What PyOMP's OpenMP *target* spelling does on a machine without a GPU (the facts behind
docs/openmp.md's side-by-side; run in PyOMP's venv, which ``benchmarks/suite.py`` creates).

Run: ``benchmarks/.venv-pyomp/bin/python benchmarks/pyomp_probe.py``. Each case runs in a
child process of its own (some crash the interpreter) and prints one line:

- ``devices``: ``omp_get_num_devices()`` and ``omp_get_initial_device()``;
- ``separate-memory``: a ``target device(1) map(to: a)`` region writes ``a``; is the host
  array unchanged afterwards (separate device memory, as pyacc's ``emulated``)?
- ``present-modifier``: ``map(present, to: u)`` (OpenMP 5.1) on a target construct;
- ``max-reduction``: ``reduction(max: err)`` on ``parallel for``;
- ``delete-map``: ``target exit data map(delete: a)``;
- ``resident-swapped``: data entered by ``target enter data`` in one ``@njit`` function,
  used by a target region in another, called with its two arrays in both orders (the
  Jacobi pattern ``step(u, unew)``, ``step(unew, u)``);
- ``data-region-loop``: a ``target data`` region around a loop of target regions, all in
  one ``@njit`` function (PyOMP's documented style), Jacobi steps alternating direction.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np

try:  # module-level functions: PyOMP does not compile directives in nested functions
    from numba.openmp import njit, omp_get_initial_device, omp_get_num_devices
    from numba.openmp import openmp_context as openmp
except ImportError as _error:  # not PyOMP's venv
    sys.exit(f"pyomp_probe.py runs in PyOMP's venv (benchmarks/.venv-pyomp): {_error}")


@njit
def ask_devices():
    return omp_get_num_devices(), omp_get_initial_device()


@njit
def write_mapped_to(a):
    n = len(a)
    with openmp("target device(1) map(to: a)"):
        with openmp("teams distribute parallel for"):
            for i in range(n):
                a[i] = 7.0


@njit
def scale_present(u):
    n = len(u)
    with openmp("target teams distribute parallel for device(1) map(present, tofrom: u)"):
        for i in range(n):
            u[i] = 2.0 * u[i]


@njit
def largest(x):
    err = 0.0
    n = len(x)
    with openmp("parallel for reduction(max: err)"):
        for i in range(n):
            err = max(err, x[i])
    return err


@njit
def enter_one(a):
    with openmp("target enter data device(1) map(to: a)"):
        pass


@njit
def delete_one(a):
    with openmp("target exit data device(1) map(delete: a)"):
        pass


@njit
def enter_two(u, unew):
    with openmp("target enter data device(1) map(to: u, unew)"):
        pass


@njit
def step(u, unew):
    n = len(u)
    m = len(u[0])
    with openmp("target teams distribute parallel for device(1) map(to: u) map(tofrom: unew)"):
        for i in range(1, n - 1):
            for j in range(1, m - 1):
                unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


@njit
def solve(u, unew, steps):
    n = u.shape[0]
    m = u.shape[1]
    with openmp("target data device(1) map(tofrom: u, unew)"):
        for s in range(steps):
            with openmp("target teams distribute parallel for device(1)"):
                for i in range(1, n - 1):
                    for j in range(1, m - 1):
                        if s % 2 == 0:
                            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
                        else:
                            u[i, j] = 0.25 * (unew[i - 1, j] + unew[i + 1, j] + unew[i, j - 1] + unew[i, j + 1])


def grid():
    u = np.zeros((16, 16))
    u[0] = 1.0
    return u, u.copy()


CASES = {
    "devices": lambda: "omp_get_num_devices() = {}, omp_get_initial_device() = {}".format(*ask_devices()),
    "separate-memory": lambda: _separate_memory(),
    "present-modifier": lambda: (scale_present(np.ones(8)), "accepted")[1],
    "max-reduction": lambda: f"accepted ({largest(np.arange(10.0))})",
    "delete-map": lambda: (_enter_delete(), "accepted")[1],
    "resident-swapped": lambda: _resident_swapped(),
    "data-region-loop": lambda: (solve(*grid(), 4), "ran")[1],
}


def _separate_memory() -> str:
    a = np.zeros(8)
    write_mapped_to(a)
    return ("the host array is unchanged: separate device memory" if a[0] == 0.0
            else "the host array changed: shared memory")


def _enter_delete() -> None:
    a = np.ones(8)
    enter_one(a)
    delete_one(a)


def _resident_swapped() -> str:
    u, unew = grid()
    enter_two(u, unew)
    step(u, unew)
    step(unew, u)
    return "ran"


def child(name: str) -> None:
    try:
        print(f"{name}: {CASES[name]()}")
    except Exception as error:  # noqa: BLE001 - the finding is the error
        lines = [line for line in str(error).splitlines() if line.strip()]
        print(f"{name}: {type(error).__name__}: {lines[0] if lines else ''}".rstrip(": "))


def main() -> int:
    if len(sys.argv) > 1:
        child(sys.argv[1])
        return 0
    for name in CASES:
        done = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True,
                              timeout=600)
        lines = [line for line in done.stdout.splitlines() if line.startswith(f"{name}: ")]
        if lines:
            print(lines[-1])
        else:
            print(f"{name}: the process died (exit {done.returncode}"
                  + (", segmentation fault" if done.returncode == -11 else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
