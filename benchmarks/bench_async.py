"""Async queues at the cost of a synchronous call, and the data API's per-call costs
(issue 30; API.md §5, last point).

Measures, in one run, with warm-up and medians of alternating samples:

1. a trivial compute call (``c[i] = a[i] + b[i]`` on present arrays) per call, on
   ``host`` and ``emulated``, at 8 to 10⁷ elements: synchronous; ``async_=1`` with one
   ``wait`` at the end; ``async_=1`` and a ``wait(1)`` after each call;
2. overlap: two such kernels on queues 1 and 2 against the same two synchronous, at 10⁵
   elements (each below the serial crossover: one thread each, so two queues can use
   both cores) and 10⁷ (each parallel on every core: a memory-bound loop gains nothing
   from a second queue) — the worker path kept for work long enough to pay;
3. an async-heavy program (``async_program.py``, miniWeather's shape: four kernels a
   step, all on queue 1, a wait per step) against the same loops in Numba; and the
   blocked pipeline of ``examples/mandelbrot_async.py`` (1024², 16 blocks) async
   against synchronous, on ``emulated``, and (2048², 16 blocks) on ``host`` and
   ``emulated`` against the same loops in Numba, per block and over the whole image;
4. the data API on present data, per call on ``emulated``: ``is_present``, ``copyin``
   (dynamic +1), ``delete`` (−1), ``update_device`` of 8 elements, ``acc.data(present=)``
   entered and left; with ``--callgrind``, the same counted in machine instructions
   (``valgrind --tool=callgrind``: repeatable whatever the neighbours do).

Targets (issue 30): async ≤ 2 × sync + 1 µs and async + wait ≤ 2 × sync + 3 µs at 1,000
elements; two queues still overlap at 10⁷; the data API ≤ 0.5 µs a call.

Run: ``python benchmarks/bench_async.py [--quick] [--smoke] [--callgrind] [--json F]
[--plot F]``. It prints tables and the machine. ``--smoke`` runs each measure once at
tiny sizes and checks no target.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

import pyacc as acc  # noqa: E402
from bench_runtime import machine_description  # noqa: E402


@acc.parallel_loop
def add(a, b, c):
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]


@acc.parallel_loop(async_=1)
def add_on_one(a, b, c):
    """``add`` with the construct's own ``async(1)`` clause."""
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]


@acc.parallel_loop(async_=2, wait=1)
def add_on_two_after_one(a, b, c):
    """``add`` with ``async(2) wait(1)``: a pipelined program's spelling."""
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]


@acc.parallel_loop(wait=1)
def add_after_one(a, b, c):
    """``add`` with ``wait(1)``: the host waits for queue 1 first."""
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]


SCALE = 1.0  # a module-level name ``add_scaled``'s kernel reads (API.md §6.1)


@acc.parallel_loop
def add_scaled(a, b, c):
    """``add`` reading the module-level ``SCALE``, as ported programs read their constants."""
    for i in range(a.shape[0]):
        c[i] = a[i] + SCALE * b[i]


@acc.parallel_loop(if_="a.shape[0] > 100")
def add_if_long(a, b, c):
    """``add`` with ``if(n > 100)``: an expression the call evaluates (true here)."""
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]


def _per_call(run, calls, repeats) -> float:
    """Median over ``repeats`` samples of µs per call of ``run(calls)``."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(calls)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def _forms(a, b, c):
    def sync(calls):
        for _ in range(calls):
            add(a, b, c)

    def async_once(calls):
        for _ in range(calls):
            add(a, b, c, async_=1)
        acc.wait(1)

    def async_wait(calls):
        for _ in range(calls):
            add(a, b, c, async_=1)
            acc.wait(1)

    return {"sync": sync, "async": async_once, "async+wait": async_wait}


def sweep(device, sizes, repeats, budget_s=0.02) -> dict:
    """µs per call of each form at each size on ``device``."""
    acc.set_device_type(device)
    rows = {}
    for n in sizes:
        a, b, c = np.ones(n), np.ones(n), np.zeros(n)
        with acc.data(copyin=[a, b], copy=[c]):
            forms = _forms(a, b, c)
            for run in forms.values():  # compile, measure the kernel, arm the lane
                run(3)
            one = max(_per_call(forms["sync"], 3, 1), 0.5)
            calls = max(3, min(2000, int(budget_s * 1e6 / one)))
            samples = {name: [] for name in forms}
            for sample in range(repeats):  # alternating: no form always runs first
                order = list(forms.items()) if sample % 2 else list(forms.items())[::-1]
                for name, run in order:
                    samples[name].append(_per_call(run, calls, 1))
            rows[n] = {name: statistics.median(values) for name, values in samples.items()}
    acc.shutdown(device)
    return rows


def overlap(device, n, repeats) -> dict:
    """Two kernels over ``n`` elements on two queues against the same two synchronous."""
    acc.set_device_type(device)
    arrays = [(np.ones(n), np.ones(n), np.zeros(n)) for _ in range(2)]
    with acc.data(copyin=[x for t in arrays for x in t[:2]], copy=[t[2] for t in arrays]):
        def two_sync():
            for a, b, c in arrays:
                add(a, b, c)

        def two_queues():
            for queue, (a, b, c) in enumerate(arrays, start=1):
                add(a, b, c, async_=queue)
            acc.wait(1, 2)

        for run in (two_sync, two_queues, two_sync, two_queues):
            run()
        times = {"sync": [], "two queues": []}
        for sample in range(repeats):
            for name, run in ((("sync", two_sync), ("two queues", two_queues)) if sample % 2
                              else (("two queues", two_queues), ("sync", two_sync))):
                start = time.perf_counter()
                run()
                times[name].append((time.perf_counter() - start) * 1e3)
    acc.shutdown(device)
    result = {name: statistics.median(values) for name, values in times.items()}
    result["speed-up"] = result["sync"] / result["two queues"]
    return result


def pipeline(size, blocks, repeats) -> dict:
    """``examples/mandelbrot_async.py``: async against synchronous, ms."""
    import mandelbrot_async

    acc.set_device_type("emulated")
    mandelbrot_async.render(64, 4, 50, use_async=True)
    times = {True: [], False: []}
    for sample in range(repeats):
        for use_async in ((True, False) if sample % 2 else (False, True)):
            times[use_async].append(mandelbrot_async.render(size, blocks, 200, use_async=use_async)[1] * 1e3)
    acc.shutdown("emulated")
    sync, asynchronous = statistics.median(times[False]), statistics.median(times[True])
    return {"sync ms": sync, "async ms": asynchronous, "speed-up": sync / asynchronous}


def mandelbrot_against_numba(size, blocks, repeats) -> dict:
    """``examples/mandelbrot_async.py``'s render (async, two queues) on ``host`` and
    ``emulated`` against the same loops written in Numba (``parallel=True``): the blocks as
    one function called per block, and the whole image in one call; ms, medians of
    ``repeats``, the forms alternated."""
    import mandelbrot_async
    from numba import njit, prange

    @njit(parallel=True)
    def numba_block(image, first_row, rows, size, max_iterations):
        for index in prange(rows * size):  # collapse(2): one parallel loop over both
            r, column = index // size, index % size
            c_re = -2.0 + 3.0 * column / size
            c_im = -1.5 + 3.0 * (first_row + r) / size
            z_re = z_im = 0.0
            count = 0
            for _ in range(max_iterations):
                if z_re * z_re + z_im * z_im > 4.0:
                    break
                z_re, z_im = z_re * z_re - z_im * z_im + c_re, 2.0 * z_re * z_im + c_im
                count += 1
            image[first_row + r, column] = count

    def numba(blocks_):
        def run():
            image = np.zeros((size, size), dtype=np.int32)
            start = time.perf_counter()
            rows = size // blocks_
            for block in range(blocks_):
                numba_block(image, block * rows, rows, size, 200)
            return (time.perf_counter() - start) * 1e3
        return run

    def pyacc(device):
        def run():
            acc.set_device_type(device)
            return mandelbrot_async.render(size, blocks, 200, use_async=True)[1] * 1e3
        return run

    forms = {"numba per block": numba(blocks), "numba whole image": numba(1),
             "pyacc host async": pyacc("host"), "pyacc emulated async": pyacc("emulated")}
    for run in forms.values():
        run()
    samples = {name: [] for name in forms}
    for sample in range(repeats):
        for name, run in (list(forms.items()) if sample % 2 else list(forms.items())[::-1]):
            samples[name].append(run())
    for device in ("host", "emulated"):
        acc.shutdown(device)
    return {name: statistics.median(values) for name, values in samples.items()}


def program(nx, nz, steps, repeats) -> dict:
    """``async_program``: µs per time step, pyacc (every kernel async, a wait per step)
    on ``host`` and ``emulated`` against the best of the same loops in Numba."""
    import async_program as p

    dx, dt = 1.0 / nx, 0.1 / nx
    runs = {"numba " + form: (lambda form=form: p.run_numba(form, *p.fields(nx, nz), steps, dx, dt))
            for form in p.NUMBA}
    for device in ("host", "emulated"):
        def run(device=device):
            acc.set_device_type(device)
            p.run_pyacc(*p.fields(nx, nz), steps, dx, dt)
        runs["pyacc " + device] = run
    reference = p.fields(nx, nz)
    p.run_numba("fused serial", *reference, steps, dx, dt)
    check = p.fields(nx, nz)
    acc.set_device_type("emulated")
    p.run_pyacc(*check, steps, dx, dt)
    np.testing.assert_allclose(check[0], reference[0], rtol=1e-12, atol=1e-12)
    for run in runs.values():
        run()
    samples = {name: [] for name in runs}
    for sample in range(repeats):
        for name, run in (list(runs.items()) if sample % 2 else list(runs.items())[::-1]):
            start = time.perf_counter()
            run()
            samples[name].append((time.perf_counter() - start) / steps * 1e6)
    result = {name: statistics.median(values) for name, values in samples.items()}
    four = min(result["numba 4 functions serial"], result["numba 4 functions prange"])
    fused = min(result["numba fused serial"], result["numba fused prange"])
    for device in ("host", "emulated"):
        result[f"pyacc {device} ÷ best numba, 4 functions"] = result["pyacc " + device] / four
        result[f"pyacc {device} ÷ best numba, fused"] = result["pyacc " + device] / fused
    return result


#: steps a steady-state sample runs before its clock starts (the lane armed again)
WARM_STEPS = 3


def first_steps(nx, nz, repeats) -> dict:
    """µs of each of ``async_program``'s first ``WARM_STEPS`` + 1 steps after the arrays
    are mapped (a data region entered), async form, on ``host`` and ``emulated``: what
    ``program_steady`` leaves out. Medians of ``repeats`` regions."""
    import async_program as p

    dx, dt = 1.0 / nx, 0.1 / nx
    state, flux, tend = p.fields(nx, nz)
    result = {}
    for device in ("host", "emulated"):
        acc.set_device_type(device)
        samples = []
        for _ in range(repeats + 1):  # (the first region also compiles: dropped)
            with acc.data(copy=[state], create=[flux, tend]):
                times = []
                for _ in range(WARM_STEPS + 1):
                    start = time.perf_counter()
                    p.async_steps(state, flux, tend, 1, dx, dt)
                    times.append((time.perf_counter() - start) * 1e6)
            samples.append(times)
        result[device] = [statistics.median(s[i] for s in samples[1:]) for i in range(WARM_STEPS + 1)]
        acc.shutdown(device)
    return result


def program_steady(nx, nz, steps, repeats) -> dict:
    """``async_program``'s steps in the steady state: µs per step with the arrays made once
    (``program`` makes them anew at each run, so each of its runs also pays the first
    calls, the lane's arming and the worker's first measurement of each kernel): the four
    loops as Numba functions and fused, and pyacc's step synchronous and async (a wait per
    step) on ``host`` and ``emulated``; medians of ``repeats`` samples of ``steps`` steps,
    the forms alternated. Each pyacc sample maps the arrays for its steps and runs
    ``WARM_STEPS`` steps before its clock starts: on ``emulated`` a new mapping means new
    device arrays, which each kernel's plan follows at its first call after it
    (``first_steps`` measures those steps; ``program`` times whole runs)."""
    import async_program as p

    dx, dt = 1.0 / nx, 0.1 / nx
    state, flux, tend = p.fields(nx, nz)

    def pyacc(device, async_):
        run_steps = p.async_steps if async_ else p.sync_steps

        def run():
            acc.set_device_type(device)
            with acc.data(copy=[state], create=[flux, tend]):
                run_steps(state, flux, tend, WARM_STEPS, dx, dt)
                start = time.perf_counter()
                run_steps(state, flux, tend, steps, dx, dt)
                return time.perf_counter() - start
        return run

    def numba(form):
        def run():
            start = time.perf_counter()
            p.run_numba(form, state, flux, tend, steps, dx, dt)
            return time.perf_counter() - start
        return run

    forms = {"numba " + form: numba(form) for form in ("4 functions serial", "fused serial")}
    for device in ("host", "emulated"):
        for async_ in (False, True):
            forms[f"pyacc {device} {'async' if async_ else 'sync'}"] = pyacc(device, async_)
    for run in forms.values():  # compile, arm the lane, measure the kernels
        run()
    samples = {name: [] for name in forms}
    for sample in range(repeats):
        for name, run in (list(forms.items()) if sample % 2 else list(forms.items())[::-1]):
            samples[name].append(run() / steps * 1e6)
    for device in ("host", "emulated"):
        acc.shutdown(device)
    return {name: statistics.median(values) for name, values in samples.items()}


#: the data API on present data: (name, one call). Calls named in a pair alternate
#: (``_PAIRS``), so that the counts stay where they were; the floor is what any routine
#: written in Python costs here: a call of a no-op function of the routines' signature.
#: Each runs in a loop in a function (``_loop``), as a program's calls run; the loop's own
#: cost is the first row's, which ``net_of_the_loop`` takes from the others.
LOOP = "loop alone: for _ in range(n): pass"
_DATA_CALLS = {
    LOOP: "pass",
    "floor: no-op Python function": "floor(x)",
    "is_present": "acc.is_present(x)",
    "copyin (present, +1)": "acc.copyin(x)",
    "delete (present, -1)": "acc.delete(x)",
    "create (present, +1)": "acc.create(x)",
    "copyout (present, -1)": "acc.copyout(x)",
    "update_device (8 elements)": "acc.update_device(x)",
    "data(present=) enter + exit": "with acc.data(present=[x]): pass",
}
_PAIRS = {"copyin": "acc.copyin(x); acc.delete(x)", "delete": "acc.copyin(x); acc.delete(x)",
          "create": "acc.create(x); acc.copyout(x)", "copyout": "acc.create(x); acc.copyout(x)"}


def floor(a, *, async_=None):
    """The floor: a Python function of a data routine's signature that does nothing."""
    return a


def _statement(name) -> tuple[str, int]:
    """What to run for ``name``, and how many calls one run of it makes."""
    pair = _PAIRS.get(name.split()[0])
    return (pair, 2) if pair else (_DATA_CALLS[name], 1)


def _loop(statement, calls) -> str:
    """The source of ``run()``: ``statement`` ``calls`` times in a loop, in a function (its
    names global or local, as in a program; at a module's top level each name would be a
    dict lookup, ~400 instructions more per run of a data region)."""
    return f"def run():\n    for _ in range({calls}):\n        {statement}\n"


def net_of_the_loop(per_call: dict) -> dict:
    """Each call's figure less its share of the loop's own (``LOOP``'s row)."""
    loop = per_call[LOOP]
    return {name: value - loop / _statement(name)[1] for name, value in per_call.items() if name != LOOP}


def _data_setup():
    acc.set_device_type("emulated")
    x = np.ones(8)
    acc.copyin(x)
    return x


def data_api(repeats, calls=20000) -> dict:
    """µs per call of each data-API call on present data (``copyin`` and ``delete``
    alternate, so that the counts stay where they were)."""
    x = _data_setup()
    env = {"acc": acc, "x": x, "floor": floor}
    result = {}
    for name in _DATA_CALLS:
        body, per_run = _statement(name)
        exec(compile(_loop(body, calls), name, "exec"), env)
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            env["run"]()
            samples.append((time.perf_counter() - start) / calls * 1e6 / per_run)
        result[name] = statistics.median(samples)
    acc.delete(x)
    return result


_CALLGRIND_CHILD = """
import sys
sys.path.insert(0, sys.argv[3])
import numpy as np, pyacc as acc
from bench_async import _loop, floor
acc.set_device_type("emulated")
x = np.ones(8)
acc.copyin(x)
statement, calls = sys.argv[1], int(sys.argv[2])
env = {"acc": acc, "x": x, "floor": floor}
exec(compile(_loop(statement, calls), "bench", "exec"), env)
for _ in range(3):  # warm: the routines' first calls, the lane's first look at the device
    exec(compile(statement, "warm", "exec"), env)
sys.breakpointhook = env["run"]
breakpoint()  # counted: CPython's builtin_breakpoint, which nothing else calls
"""


def instructions(statement, calls, child=None, env=None, options=()) -> int:
    """Machine instructions of a process making ``calls`` such calls (callgrind);
    ``child``: another program and its arguments instead of the data API's."""
    argv = child if child is not None else (_CALLGRIND_CHILD, statement, str(calls), HERE)
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "callgrind.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *options,
                        sys.executable, "-c", *argv],
                       check=True, capture_output=True, timeout=1800, cwd=folder,  # (not the caller's
                       # folder, which ``-c`` puts first on sys.path: a checkout there would be imported)
                       env=dict(os.environ, PYTHONHASHSEED="0", **(env or {})))  # the same run each time
        with open(out) as text:
            for line in text:
                if line.startswith("summary:") or line.startswith("totals:"):
                    return int(line.split()[1])
    raise RuntimeError("callgrind wrote no total")


def data_api_instructions(calls=20000) -> dict:
    """Instructions per call, counted only inside the loop of ``calls`` calls (run by
    ``breakpoint()``: ``--toggle-collect`` of CPython's ``builtin_breakpoint``), so the
    import and the set-up are not counted; the loop's own cost is ``LOOP``'s row."""
    result = {}
    for name in _DATA_CALLS:
        statement, per_run = _statement(name)
        count = instructions(statement, calls, options=("--collect-atstart=no",
                                                        "--toggle-collect=builtin_breakpoint"))
        result[name] = count / calls / per_run
    return result


_COMPUTE_CHILD = """
import sys
sys.path.insert(0, sys.argv[4])
import numpy as np, pyacc as acc
from bench_async import add, add_on_one, add_on_two_after_one, add_after_one, add_scaled, add_if_long
device, form, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
acc.set_device_type(device)
acc.set_default_async(1)  # (async_noval: queue 1)
a, b, c = np.ones(1000), np.ones(1000), np.zeros(1000)
from numba import njit
@njit(nogil=True)
def numba_add(a, b, c):  # the same loop, hand-written Numba: the call it is compared with
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]
loops = {"sync": "add(a, b, c)", "async": "add(a, b, c, async_=1)",
         "async+wait": "add(a, b, c, async_=1); acc.wait(1)", "numba": "numba_add(a, b, c)",
         "async clause": "add_on_one(a, b, c)", "async_noval": "add(a, b, c, async_=acc.async_noval)",
         "async(2) wait(1)": "add_on_two_after_one(a, b, c)", "wait(1)": "add_after_one(a, b, c)",
         "module-level name": "add_scaled(a, b, c)", "if expression": "add_if_long(a, b, c)",
         "by name": "add(a=a, b=b, c=c)", "async_sync": "add(a, b, c, async_=acc.async_sync)"}
code = compile("for _ in range(%d):\\n    %s" % (calls, loops[form]), "bench", "exec")
with acc.data(copyin=[a, b], copy=[c]):
    for _ in range(5):  # compile, measure the kernel, arm the lane
        add(a, b, c)
        add(a, b, c, async_=1)
        add_on_one(a, b, c)
        add(a, b, c, async_=acc.async_noval)
        add_on_two_after_one(a, b, c)
        add_after_one(a, b, c)
        add_scaled(a, b, c)
        add_if_long(a, b, c)
        add(a=a, b=b, c=c)
        add(a, b, c, async_=acc.async_sync)
        acc.wait()
        numba_add(a, b, c)
    acc.update_device(a, async_=1)  # queue 1 made, and settled: the waits hold already
    acc.wait()
    sys.breakpointhook = lambda: exec(code, {"acc": acc, "add": add, "a": a, "b": b, "c": c,
                                             "numba_add": numba_add, "add_on_one": add_on_one,
                                             "add_on_two_after_one": add_on_two_after_one,
                                             "add_after_one": add_after_one, "add_scaled": add_scaled,
                                             "add_if_long": add_if_long})
    breakpoint()  # counted: CPython's builtin_breakpoint, which nothing else calls
    acc.wait()
"""

#: the compute call's forms counted in instructions (``compute_instructions``)
COMPUTE_FORMS = ("sync", "async", "async+wait", "async clause", "async_noval", "async(2) wait(1)",
                 "wait(1)", "module-level name", "if expression", "by name", "async_sync")


def compute_instructions(calls=2000, devices=("host", "emulated")) -> dict:
    """Instructions per trivial compute call on 3 present arrays of 1,000 elements, in
    each form, and per call of the same loop in hand-written Numba: callgrind counts only inside the loop, run by ``breakpoint()``
    (``--toggle-collect`` of CPython's ``builtin_breakpoint``, on the calling thread), so the import, the compile and
    the warm-up, and the threads of the kernels and queues, are not counted. The
    crossover is set (``PYACC_ASYNC_INLINE_BELOW`` = 1 ms): under valgrind every measured
    time is tens of times longer, and the measure is of the path taken at once."""
    def count(device, form):
        return instructions(None, calls, child=(_COMPUTE_CHILD, device, form, str(calls), HERE),
                            env={"PYACC_ASYNC_INLINE_BELOW": "1000"},
                            options=("--collect-atstart=no", "--toggle-collect=builtin_breakpoint")) / calls

    result = {f"{device} {form}": count(device, form) for device in devices for form in COMPUTE_FORMS}
    result["numba, the same loop called directly"] = count(devices[0], "numba")
    return result


def _print_sweep(device, rows):
    print(f"\n{device}: µs per call (median); targets at 1,000: async ≤ 2·sync + 1, async+wait ≤ 2·sync + 3")
    print(f"{'elements':>10} {'sync':>9} {'async':>9} {'async+wait':>11}  {'async ok':>8} {'+wait ok':>8}")
    for n, row in rows.items():
        ok_async = row["async"] <= 2 * row["sync"] + 1
        ok_wait = row["async+wait"] <= 2 * row["sync"] + 3
        print(f"{n:>10} {row['sync']:>9.2f} {row['async']:>9.2f} {row['async+wait']:>11.2f}  "
              f"{'yes' if ok_async else 'no':>8} {'yes' if ok_wait else 'no':>8}")


def _plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for axis, device in zip(axes, ("host", "emulated")):
        rows = results["sweep"][device]
        sizes = [int(n) for n in rows]
        for form in ("sync", "async", "async+wait"):
            axis.loglog(sizes, [rows[n][form] for n in rows], marker="o", label=form)
        axis.set_title(f"{device}: a trivial compute call")
        axis.set_xlabel("elements")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("µs per call (median)")
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--plot")
    args = parser.parse_args(argv)
    repeats = 1 if args.smoke else 5 if args.quick else 11
    sizes = [8, 1000] if args.smoke else [8, 100, 1000, 10_000, 100_000, 1_000_000, 10_000_000]
    print(f"machine: {machine_description()}")
    results = {"machine": machine_description(), "sweep": {}}
    for device in ("host", "emulated"):
        results["sweep"][device] = rows = sweep(device, sizes, repeats)
        _print_sweep(device, rows)
    for n in ([10_000] if args.smoke else [100_000, 10_000_000]):
        for device in ("host", "emulated"):
            results[f"overlap {device} {n}"] = found = overlap(device, n, max(3, repeats))
            print(f"\noverlap, {device}, two kernels of {n} elements: sync {found['sync']:.3f} ms, "
                  f"two queues {found['two queues']:.3f} ms, speed-up {found['speed-up']:.2f}")
    for nx, nz, steps in ([(32, 8, 5)] if args.smoke else [(128, 32, 400), (512, 128, 100)]):
        results[f"program {nx}x{nz}"] = found = program(nx, nz, steps, max(3, repeats))
        print(f"\nasync program {nx}×{nz} (4 async kernels + a wait per step), µs per step: "
              + ", ".join(f"{name} {value:.2f}" for name, value in found.items()))
    for nx, nz, steps in ([(32, 8, 5)] if args.smoke else [(128, 32, 2000), (512, 128, 200)]):
        results[f"program steady {nx}x{nz}"] = found = program_steady(nx, nz, steps, max(3, repeats))
        print(f"\nasync program {nx}×{nz}, steady state, µs per step: "
              + ", ".join(f"{name} {value:.2f}" for name, value in found.items()))
    nx, nz = (32, 8) if args.smoke else (128, 32)
    results[f"first steps {nx}x{nz}"] = found = first_steps(nx, nz, max(3, repeats))
    print(f"\nasync program {nx}×{nz}, µs of each of the first {WARM_STEPS + 1} steps after mapping: "
          + "; ".join(f"{device} " + ", ".join(f"{t:.1f}" for t in times) for device, times in found.items()))
    size, blocks = (128, 4) if args.smoke else (1024, 16)
    results["pipeline"] = found = pipeline(size, blocks, max(3, repeats // 2))
    print(f"\nmandelbrot_async {size}², {blocks} blocks (emulated): sync {found['sync ms']:.1f} ms, "
          f"async {found['async ms']:.1f} ms, speed-up {found['speed-up']:.2f}")
    if not args.smoke:
        results["mandelbrot against numba"] = found = mandelbrot_against_numba(2048, 16, max(3, repeats))
        print("\nmandelbrot_async 2048², 16 blocks, ms (medians): "
              + ", ".join(f"{name} {value:.1f}" for name, value in found.items()))
    results["data api µs"] = found = data_api(repeats, 200 if args.smoke else 20000)
    results["data api µs net of the loop"] = net = net_of_the_loop(found)
    print("\ndata API on present data (emulated), µs per call (target ≤ 0.5), and net of the loop:")
    for name, value in found.items():
        print(f"  {name:<36} {value:7.3f}" + (f" {net[name]:7.3f}" if name in net else ""))
    if args.callgrind:
        results["compute instructions"] = found = compute_instructions(20 if args.smoke else 2000)
        print("\ncompute call, 1,000 elements, instructions per call:")
        for name, value in found.items():
            print(f"  {name:<30} {value:9.0f}")
        results["data api instructions"] = found = data_api_instructions(200 if args.smoke else 20000)
        results["data api instructions net of the loop"] = net = net_of_the_loop(found)
        print("\ndata API on present data (emulated), instructions per call (target ≤ 3,000), "
              "and net of the loop:")
        for name, value in found.items():
            print(f"  {name:<36} {value:9.0f}" + (f" {net[name]:9.0f}" if name in net else ""))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1, default=str)
    if args.plot:
        _plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
