"""pyacc.omp against pyacc and hand-written Numba on the CPU kernels (issue 20: "OpenMP
kernels compile to the same code as the OpenACC ones: within 5% of hand-written Numba").

The kernels of ``bench_compute.py`` — saxpy 1e7, Jacobi 2048² × 100, dot 1e7, matmul 1024²
— in their OpenMP spelling (``omp_*``: ``@omp.target_teams_distribute_parallel_for`` with
clause strings), their OpenACC spelling (``acc_*``) and hand-written Numba (``nb_*``; for
matmul the faster of the loops as written and interchanged by hand), on the host device,
their data in a data region. Method, for ratios that hold on a noisy 2-core VM:

- rounds: every candidate once per round, in a new order each round (no candidate always
  follows the same one: ``bench_compute.interleaved``), 15 rounds after a warm-up round;
  medians;
- each sample runs its kernel back to back for at least 50 ms (a 5-10 ms kernel timed once
  after an idle pause measured ~9-10 ms for all three implementations on the VM, back to
  back ~5.4 ms: an idle virtual CPU takes milliseconds to wake, and one call per sample
  turned that into ±50% swings between identical kernels);
- every sample starts from the same data (``reset``) once the previous one's threads are
  quiet (``bench_compute.settle``).

Then the cost of a call: a trivial kernel on 3 present arrays (8 elements) in both
spellings, on the host and the emulated device (µs per call, shuffled rounds).

Prints a table (times, omp ÷ Numba, acc ÷ Numba, omp ÷ acc) and the machine and load.
Run: ``python benchmarks/bench_omp.py [--rounds N] [--smoke] [--json FILE]`` (``--smoke``:
every kernel once at tiny sizes, no figures).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_compute as bc  # noqa: E402  (the kernels, settle)
from bench_runtime import machine_description  # noqa: E402
from fields import problem_arrays  # noqa: E402

import numpy as np  # noqa: E402

import pyacc as acc  # noqa: E402
from pyacc import omp  # noqa: E402

#: label, kernel, size, steps: bench_compute.py's full sizes (smoke: tiny)
PROBLEMS = {"full": [("saxpy 1e7", "saxpy", 10**7, 0), ("jacobi 2048² × 100", "jacobi", 2048, 100),
                     ("dot 1e7", "dot", 10**7, 0), ("matmul 1024²", "matmul", 1024, 0)],
            "smoke": [("saxpy 1e3", "saxpy", 1000, 0), ("jacobi 16² × 2", "jacobi", 16, 2),
                      ("dot 1e3", "dot", 1000, 0), ("matmul 8²", "matmul", 8, 0)]}
SPELLINGS = ("omp", "acc", "nb")


def problem(kernel: str, size: int, steps: int):
    """(candidates name -> callable, reset, data region clauses) for one problem."""
    arrays = problem_arrays(kernel, size)
    reset = None
    if kernel == "saxpy":
        x, y = arrays["x"], arrays["y"]
        start = y.copy()
        calls = {s: (lambda f=getattr(bc, f"{s}_saxpy"): f(2.0, x, y)) for s in SPELLINGS}

        def reset():
            y[:] = start
        clauses = dict(copyin=[x], copy=[y])
    elif kernel == "dot":
        x, y = arrays["x"], arrays["y"]
        calls = {s: (lambda f=getattr(bc, f"{s}_dot"): f(x, y)) for s in SPELLINGS}
        clauses = dict(copyin=[x, y])
    elif kernel == "jacobi":
        u, unew, start = arrays["u"], arrays["unew"], arrays["start"]
        calls = {s: (lambda run=bc.jacobi_steps(getattr(bc, f"{s}_jacobi"), steps): run(u, unew))
                 for s in SPELLINGS}

        def reset():
            u[:] = start
            unew[:] = start
        clauses = dict(copy=[u, unew])
    else:
        a, b, c = arrays["a"], arrays["b"], arrays["c"]
        calls = {s: (lambda f=getattr(bc, f"{s}_matmul"): f(a, b, c)) for s in SPELLINGS}
        calls["nb_ikj"] = lambda: bc.nb_matmul_ikj(a, b, c)
        clauses = dict(copyin=[a, b], copyout=[c])
    return calls, reset, clauses


@omp.target_teams_distribute_parallel_for("map(present, to: x, y) map(present, tofrom: z)")
def omp_trivial(x, y, z):
    for i in range(x.shape[0]):
        z[i] = x[i] + y[i]


def call_cost_us(rounds: int, calls: int) -> dict[str, dict[str, float]]:
    """µs per call of the trivial kernel, both spellings, host and emulated devices."""
    out = {}
    x, y, z = np.ones(8), np.ones(8), np.zeros(8)
    for device in ("host", "emulated"):
        acc.set_device_type(device)
        with acc.data(copyin=[x, y], copy=[z]):
            loops = {}
            for name, kernel in (("omp", omp_trivial), ("acc", bc.acc_trivial)):
                def loop(kernel=kernel):
                    for _ in range(calls):
                        kernel(x, y, z)
                loops[name] = loop
            times = bc.interleaved(loops, rounds)
        out[device] = {name: seconds / calls * 1e6 for name, seconds in times.items()}
    acc.set_device_type("host")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--smoke", action="store_true", help="every kernel once at tiny sizes")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    mode = "smoke" if args.smoke else "full"
    rounds, min_sample = (1, 0.0) if args.smoke else (args.rounds, 0.05)
    acc.set_device_type("host")
    load = os.getloadavg()
    print(f"machine: {machine_description()}; load {load[0]:.2f} at the start")
    rows = []
    for label, kernel, size, steps in PROBLEMS[mode]:
        calls, reset, clauses = problem(kernel, size, steps)
        with acc.data(**clauses):
            times = bc.interleaved(calls, rounds, reset, min_sample)
        numba = min(t for name, t in times.items() if name.startswith("nb"))
        rows.append({"kernel": label, "times": times, "omp_numba": times["omp"] / numba,
                     "acc_numba": times["acc"] / numba, "omp_acc": times["omp"] / times["acc"]})
    costs = call_cost_us(rounds, 10 if args.smoke else 5000)
    load_end = os.getloadavg()
    print(f"{'kernel':20} {'omp ms':>9} {'acc ms':>9} {'Numba ms':>9} {'omp÷Numba':>10} "
          f"{'acc÷Numba':>10} {'omp÷acc':>8}")
    for row in rows:
        t = row["times"]
        numba = min(v for k, v in t.items() if k.startswith("nb"))
        print(f"{row['kernel']:20} {t['omp'] * 1e3:9.3f} {t['acc'] * 1e3:9.3f} {numba * 1e3:9.3f} "
              f"{row['omp_numba']:10.3f} {row['acc_numba']:10.3f} {row['omp_acc']:8.3f}")
    for device, cost in costs.items():
        print(f"trivial kernel, 3 present arrays, {device}: omp {cost['omp']:.2f} µs, acc "
              f"{cost['acc']:.2f} µs per call (omp − acc {cost['omp'] - cost['acc']:.2f} µs)")
    print(f"load {load_end[0]:.2f} at the end; {rounds} shuffled rounds, medians")
    if args.smoke:
        print("smoke run: every kernel ran at tiny sizes (no figures)")
        return 0
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": machine_description(), "load": [load, load_end], "rounds": rounds,
                       "rows": rows, "call_us": costs}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
