"""The GPU benchmark suite: pyacc on the ``cuda`` device against hand-written numba-cuda
kernels and CuPy, in one run (needs a GPU; without one it says why and exits 0).

Side by side, interleaved round by round (``suite.measure``: a warm-up round, then the
median of timed rounds; every candidate ends each run with a device synchronise):

- saxpy 1e8, Jacobi 4096² × 100 (2-D stencil + max reduction, the error read back every
  step), dot 1e8 (+ reduction), dense matmul 4096² (the naive triple loop): pyacc with
  its data resident (``acc.data``) ÷ a hand-written numba-cuda kernel of the same
  algorithm (target ≤ 1.1), CuPy beside them (its idiomatic call: elementwise
  expressions, cuBLAS for dot and matmul);
- host↔device bandwidth of ``acc.update`` (async, through pyacc's pinned staging) on a
  1 GiB array ÷ CuPy's own copy from/to pinned host memory (target ≥ 0.9), with CuPy's
  copy from pageable memory shown for context;
- launch overhead: a trivial kernel on 3 present arrays through pyacc ÷ the same
  numba-cuda kernel launched raw (target ≤ 0.4, and ≤ 10 µs), synchronous (each launch waited for)
  and asynchronous (launches queued on one queue/stream, one wait at the end); for
  context pyacc with every launch through the dispatcher (no prepared launches,
  ``compiler.cuda_plans``), pyacc with every call through the Python launcher (no express
  lane), pyacc with each synchronous call through its driver (not made again from C,
  ``compiler/cuda_relaunch.py``), the same with its prepared launches through
  ``cuda.core.launch`` (not from C, ``compiler/_launch.c``), numba-cuda on CuPy arrays,
  and the driver call itself, its
  words marshalled once (``cuda.core.launch``, and from C by a ``LaunchRecord``), each
  waited for;
- two queues: saxpy kernels on queue 1 beside an h2d update on queue 2, alone and
  together: the share of the shorter hidden behind the longer (``overlap_hidden``);
- kernels compiled once per machine: the first call of two kernels (saxpy, dot) in a
  fresh process with an empty kernel cache (compiled) and, median of a few more fresh
  processes, with the cache it left (loaded, target ≤ 50 ms: ``cached_first_call_ms``);
- a strided column update of an 8192² float64 array (``acc.update(self=a[:, j])`` and
  ``device=``): its host↔device transfers counted with ``acc.stats()`` (target: 1 each,
  the column packed on the device), checked exact, and timed.

Correctness first: every kernel of every candidate is checked against NumPy on small data.

The results go to the "GPU suite" section of ``benchmarks/RESULTS.md`` (between its
BEGIN/END markers, with the GPU's name; the rest of the file is kept) and to
``benchmarks/results_cuda.json``.

Run: ``python benchmarks/bench_cuda.py [--quick] [--smoke] [--no-write] [--json FILE] [--note TEXT]``
(``--smoke``: every kernel and measure once at tiny sizes, correctness checked, nothing
written; without a GPU it says why and exits 0)
(``pip install -e '.[cuda]'`` first).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import bench_compute as bc  # noqa: E402  (the pyacc kernels, the same as the CPU suite's)
from bench_cold_start import CALLS as COLD_CALLS  # noqa: E402  (the CPU cold start's timing)
from bench_cold_start import KERNELS as COLD_KERNELS  # noqa: E402  (the CPU cold start's)
from bench_runtime import machine_description  # noqa: E402
from suite import Candidate, measure, write_results  # noqa: E402  (the CPU suite's)

import pyacc as acc  # noqa: E402
from pyacc.compiler import cuda_compilers, cuda_runtime  # noqa: E402
from pyacc import _devices  # noqa: E402
from pyacc._express import set_lane  # noqa: E402

RESULTS = HERE / "RESULTS.md"
JSON = HERE / "results_cuda.json"
BEGIN = "<!-- BEGIN GPU SUITE: written by benchmarks/bench_cuda.py, replaced on each run -->"
END = "<!-- END GPU SUITE -->"
IMPLEMENTATIONS = ["pyacc", "numba-cuda", "cupy"]
LABELS = {"pyacc": "pyacc (cuda)", "numba-cuda": "hand-written numba-cuda", "cupy": "CuPy"}
THREADS = 256  # threads per block of the 1-D numba-cuda kernels (16 × 16 for 2-D)

# targets of the issue
KERNEL_RATIO = 1.1  # pyacc ÷ numba-cuda, at most
BANDWIDTH_RATIO = 0.9  # pyacc ÷ CuPy pinned copy (bandwidth), at least
LAUNCH_RATIO = 0.4  # pyacc ÷ raw numba-cuda launch (device arrays), at most (issue 28)
LAUNCH_US = 10.0  # pyacc's launch of the trivial kernel, µs, at most (issue 28)
CACHED_FIRST_CALL_MS = 50.0  # first calls of cached kernels in a fresh process, at most
OVERLAP_HIDDEN = 0.5  # share of the shorter of two queues' work hidden behind the other, at least


def gpu_unavailable_reason() -> str | None:
    """Why this machine cannot run the GPU suite, or None."""
    if os.environ.get("PYACC_TESTING_FAKE_CUDA", "").strip() not in ("", "0"):
        return "PYACC_TESTING_FAKE_CUDA is set: its cuda device is host memory, not a GPU"
    if acc.get_num_devices("cuda") == 0:
        return _devices.unavailable_reason("cuda") or "no cuda device"
    if cuda is None:
        return "no CUDA kernel compiler for the reference kernels (pip install 'pyacc[cuda]')"
    return None


# == hand-written numba-cuda kernels (what a user would write without pyacc) =================

def _reference_compiler():
    """The compiler of the hand-written reference kernels: numba-cuda where installed
    (the reference the GPU issues name), else the one pyacc uses (numba-cuda-mlir, what
    `pip install pyacc[cuda]` brings)."""
    classic = cuda_compilers.COMPILERS["numba-cuda"]
    return classic if classic.installed() else cuda_compilers.chosen()


try:  # the kernels compile at their first launch. Loaded as pyacc loads it
    # (compiler.cuda_compilers): on NumPy >= 2.5 numba-cuda 0.30 compiles nothing without
    # the row_stack fix there
    REFERENCE = _reference_compiler()
    cuda = cuda_compilers.load(REFERENCE)
    # the reference kernels' grids are small at --smoke and --quick sizes, on purpose:
    # the compiler's low-occupancy warning (at each new grid) is noise here
    REFERENCE.config().CUDA_LOW_OCCUPANCY_WARNINGS = 0
except Exception:  # noqa: BLE001 - no compiler: gpu_unavailable_reason says why
    cuda = REFERENCE = None

# The same algorithms as pyacc's kernels: saxpy one thread per element; Jacobi one thread
# per point (16 × 16 blocks), the block's max error reduced in shared memory and one atomic
# max per block; dot a grid-stride loop, a shared-memory tree per block and one atomic add
# per block; matmul one thread per element of c (no tiling). Module-level functions (not
# closures), so that Numba's CUDA simulator can run them too.
if cuda is not None:

    @cuda.jit
    def nb_saxpy(a, x, y):
        i = cuda.grid(1)
        if i < x.shape[0]:
            y[i] = a * x[i] + y[i]

    @cuda.jit
    def nb_jacobi(u, unew, err):
        shared = cuda.shared.array(256, cuda.float64)
        j, i = cuda.grid(2)  # x along the contiguous columns: coalesced accesses
        t = cuda.threadIdx.y * cuda.blockDim.x + cuda.threadIdx.x
        n, m = u.shape
        local = 0.0
        if 1 <= i and i < n - 1 and 1 <= j and j < m - 1:
            value = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
            unew[i, j] = value
            local = abs(value - u[i, j])
        shared[t] = local
        cuda.syncthreads()
        step = 128
        while step > 0:
            if t < step:
                shared[t] = max(shared[t], shared[t + step])
            cuda.syncthreads()
            step //= 2
        if t == 0:
            cuda.atomic.max(err, 0, shared[0])

    @cuda.jit
    def nb_dot(x, y, out):
        shared = cuda.shared.array(256, cuda.float64)
        t = cuda.threadIdx.x
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        total = 0.0
        while i < x.shape[0]:
            total += x[i] * y[i]
            i += stride
        shared[t] = total
        cuda.syncthreads()
        step = 128
        while step > 0:
            if t < step:
                shared[t] += shared[t + step]
            cuda.syncthreads()
            step //= 2
        if t == 0:
            cuda.atomic.add(out, 0, shared[0])

    @cuda.jit
    def nb_matmul(a, b, c):
        j, i = cuda.grid(2)
        if i < c.shape[0] and j < c.shape[1]:
            total = 0.0
            for k in range(a.shape[1]):
                total += a[i, k] * b[k, j]
            c[i, j] = total

    @cuda.jit
    def nb_trivial(x, y, z):
        i = cuda.grid(1)
        if i < x.shape[0]:
            z[i] = x[i] + y[i]


def numba_kernels() -> SimpleNamespace:
    """The hand-written numba-cuda kernels (what a user would write without pyacc)."""
    return SimpleNamespace(cuda=cuda, saxpy=nb_saxpy, jacobi=nb_jacobi, dot=nb_dot,
                           matmul=nb_matmul, trivial=nb_trivial)


def blocks_1d(n: int) -> int:
    return max(1, (n + THREADS - 1) // THREADS)


def grid_2d(shape) -> tuple[tuple[int, int], tuple[int, int]]:
    n, m = shape
    return ((m + 15) // 16, (n + 15) // 16), (16, 16)


class NumbaReduction:
    """A one-element device accumulator for the numba-cuda reductions: reset (8 bytes
    host→device), launch, read back (8 bytes device→host), as a user would write it."""

    def __init__(self, cuda):
        self.zero = cuda.pinned_array(1, np.float64)
        self.zero[0] = 0.0
        self.host = cuda.pinned_array(1, np.float64)
        self.device = cuda.to_device(self.zero)

    def reset(self):
        self.device.copy_to_device(self.zero)
        return self.device

    def value(self) -> float:
        self.device.copy_to_host(self.host)
        return float(self.host[0])


def numba_dot_blocks(nb, n: int) -> int:
    sms = getattr(nb.cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1)  # 1: the simulator
    return max(1, min(blocks_1d(n), sms * 32))


def numba_calls(nb):
    """Python callables running each numba-cuda kernel to its result (as pyacc's)."""
    accumulator = NumbaReduction(nb.cuda)

    def saxpy(a, x, y):
        nb.saxpy[blocks_1d(x.shape[0]), THREADS](a, x, y)

    def jacobi(u, unew):
        grid, block = grid_2d(u.shape)
        nb.jacobi[grid, block](u, unew, accumulator.reset())
        return accumulator.value()

    def dot(x, y):
        nb.dot[numba_dot_blocks(nb, x.shape[0]), THREADS](x, y, accumulator.reset())
        return accumulator.value()

    def matmul(a, b, c):
        grid, block = grid_2d(c.shape)
        nb.matmul[grid, block](a, b, c)

    return SimpleNamespace(saxpy=saxpy, jacobi=jacobi, dot=dot, matmul=matmul)


# == CuPy (idiomatic) ========================================================================


def cupy_calls(cupy):
    def saxpy(a, x, y):
        y += a * x

    def jacobi(u, unew):
        unew[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        return float(cupy.abs(unew[1:-1, 1:-1] - u[1:-1, 1:-1]).max())

    def dot(x, y):
        return float(x.dot(y))

    def matmul(a, b, c):
        cupy.matmul(a, b, out=c)

    return SimpleNamespace(saxpy=saxpy, jacobi=jacobi, dot=dot, matmul=matmul)


# == correctness before speed ================================================================


def check_kernels(cupy, nb) -> dict[str, bool]:
    """Every candidate against NumPy on small data."""
    rng = np.random.default_rng(3)
    sync = cupy.cuda.runtime.deviceSynchronize
    cuda = nb.cuda
    nbc, cpc = numba_calls(nb), cupy_calls(cupy)
    checks = {}

    x, y = rng.random(10_000), rng.random(10_000)
    expected = 2.0 * x + y
    got = {}
    y1 = y.copy()
    with acc.data(copyin=[x], copy=[y1]):
        bc.acc_saxpy(2.0, x, y1)
    got["pyacc"] = y1
    dy = cuda.to_device(y)
    nbc.saxpy(2.0, cuda.to_device(x), dy)
    got["numba-cuda"] = dy.copy_to_host()
    cy = cupy.asarray(y)
    cpc.saxpy(2.0, cupy.asarray(x), cy)
    got["cupy"] = cupy.asnumpy(cy)
    checks["saxpy"] = all(np.allclose(v, expected, rtol=1e-14, atol=0) for v in got.values())

    expected = float(np.dot(x, y))
    with acc.data(copyin=[x, y]):
        values = [bc.acc_dot(x, y)]
    values.append(nbc.dot(cuda.to_device(x), cuda.to_device(y)))
    values.append(cpc.dot(cupy.asarray(x), cupy.asarray(y)))
    checks["dot"] = all(abs(v - expected) <= 1e-10 * abs(expected) for v in values)

    u = np.zeros((130, 70))
    u[0, :] = 1.0
    reference = [u.copy(), u.copy()]
    errors = []
    for step in range(4):
        a, b = reference[step % 2], reference[1 - step % 2]
        bc.np_jacobi(a, b)
        errors.append(float(np.abs(b[1:-1, 1:-1] - a[1:-1, 1:-1]).max()))
    results = []
    uu, vv = u.copy(), u.copy()
    with acc.data(copy=[uu, vv]):
        errs = [bc.acc_jacobi(*((uu, vv) if s % 2 == 0 else (vv, uu))) for s in range(4)]
    results.append((uu, errs))
    du, dv = cuda.to_device(u), cuda.to_device(u)
    errs = [nbc.jacobi(*((du, dv) if s % 2 == 0 else (dv, du))) for s in range(4)]
    results.append((du.copy_to_host(), errs))
    cu, cv = cupy.asarray(u), cupy.asarray(u)
    errs = [cpc.jacobi(*((cu, cv) if s % 2 == 0 else (cv, cu))) for s in range(4)]
    results.append((cupy.asnumpy(cu), errs))
    checks["jacobi"] = all(np.allclose(field, reference[0], rtol=1e-13, atol=1e-15)
                           and np.allclose(errs, errors, rtol=1e-12) for field, errs in results)

    a, b = rng.random((96, 80)), rng.random((80, 112))
    expected = a @ b
    c = np.zeros((96, 112))
    with acc.data(copyin=[a, b], copyout=[c]):
        bc.acc_matmul(a, b, c)
    dc = cuda.device_array((96, 112))
    nbc.matmul(cuda.to_device(a), cuda.to_device(b), dc)
    cc = cupy.zeros((96, 112))
    cpc.matmul(cupy.asarray(a), cupy.asarray(b), cc)
    checks["matmul"] = all(np.allclose(v, expected, rtol=1e-12)
                           for v in (c, dc.copy_to_host(), cupy.asnumpy(cc)))
    sync()
    return checks


# == the kernel problems =====================================================================


def with_sync(run, sync):
    def timed():
        run()
        sync()
    return timed


def problem(kernel: str, size: int, steps: int, cupy, nb):
    """Candidates for one problem: pyacc with its data resident on the current cuda
    device, numba-cuda and CuPy with device copies of the same data. Returns
    (candidates, cleanup)."""
    rng = np.random.default_rng(1)
    cuda = nb.cuda
    sync = cupy.cuda.runtime.deviceSynchronize
    nbc, cpc = numba_calls(nb), cupy_calls(cupy)
    if kernel == "saxpy":
        host = [rng.random(size), rng.random(size)]
        region = acc.data(copyin=[host[0]], copy=[host[1]])
        nb_args = [cuda.to_device(h) for h in host]
        cp_args = [cupy.asarray(h) for h in host]
        runs = [lambda: bc.acc_saxpy(2.0, *host), lambda: nbc.saxpy(2.0, *nb_args),
                lambda: cpc.saxpy(2.0, *cp_args)]
    elif kernel == "dot":
        host = [rng.random(size), rng.random(size)]
        region = acc.data(copyin=host)
        nb_args = [cuda.to_device(h) for h in host]
        cp_args = [cupy.asarray(h) for h in host]
        runs = [lambda: bc.acc_dot(*host), lambda: nbc.dot(*nb_args), lambda: cpc.dot(*cp_args)]
    elif kernel == "jacobi":
        u = np.zeros((size, size))
        u[0, :] = 1.0
        host = [u, u.copy()]
        region = acc.data(copy=host)
        nb_args = [cuda.to_device(h) for h in host]
        cp_args = [cupy.asarray(h) for h in host]
        runs = [lambda f=f, args=args: bc.jacobi_steps(f, steps)(*args)
                for f, args in ((bc.acc_jacobi, host), (nbc.jacobi, nb_args),
                                (cpc.jacobi, cp_args))]
    elif kernel == "matmul":
        host = [rng.random((size, size)), rng.random((size, size)), np.zeros((size, size))]
        region = acc.data(copyin=host[:2], create=host[2:])
        nb_args = [cuda.to_device(h) for h in host]
        cp_args = [cupy.asarray(h) for h in host]
        runs = [lambda: bc.acc_matmul(*host), lambda: nbc.matmul(*nb_args),
                lambda: cpc.matmul(*cp_args)]
    else:
        raise ValueError(kernel)
    region.__enter__()
    sync()
    candidates = {name: Candidate(with_sync(run, sync)) for name, run in zip(IMPLEMENTATIONS, runs)}

    def cleanup():
        region.__exit__(None, None, None)
        nb_args.clear()
        cp_args.clear()
        cupy.get_default_memory_pool().free_all_blocks()

    return candidates, cleanup


#: samples per measure of each run mode (``smoke``: one, at tiny sizes)
REPEATS = {"full": (5, 7), "quick": (3, 3), "smoke": (1, 1)}


def kernel_problems(mode: str) -> list[tuple[str, str, int, int]]:
    if mode == "smoke":
        return [("saxpy 1e3", "saxpy", 1000, 0), ("jacobi 32² × 2", "jacobi", 32, 2),
                ("dot 1e3", "dot", 1000, 0), ("matmul 32²", "matmul", 32, 0)]
    if mode == "quick":
        return [("saxpy 1e6", "saxpy", 10**6, 0), ("jacobi 512² × 20", "jacobi", 512, 20),
                ("dot 1e6", "dot", 10**6, 0), ("matmul 512²", "matmul", 512, 0)]
    return [("saxpy 1e8", "saxpy", 10**8, 0), ("jacobi 4096² × 100", "jacobi", 4096, 100),
            ("dot 1e8", "dot", 10**8, 0), ("matmul 4096²", "matmul", 4096, 0)]


def run_kernels(mode, cupy, nb, budget) -> list[dict]:
    rows = []
    for label, kernel, size, steps in kernel_problems(mode):
        before = set(_launched_kernels())
        candidates, cleanup = problem(kernel, size, steps, cupy, nb)
        try:
            times, failed = measure(candidates, REPEATS[mode][0], budget)
        finally:
            cleanup()
        launched = _launched_kernels()
        new = {key: launched[key] for key in launched.keys() - before}
        rows.append({"label": label, "kernel": kernel, "size": size, "steps": steps,
                     "times": times, "notes": failed, "registers": registers(kernel, nb, new)})
        print(f"  {label}: " + ", ".join(f"{k} {v:.5f}s" for k, v in times.items())
              + ("; " + "; ".join(f"{k}: {v}" for k, v in failed.items()) if failed else ""))
    return rows


def _launched_kernels() -> dict:
    """``{(id of the kernel, its name): cuda.core Kernel}`` of every prepared launch made
    so far (``cuda_plans``, numba-cuda's launches only: its function handle, the compiled
    or loaded kernel). Every generated module names its first kernel ``_acc_k0``: the
    kernel object tells them apart."""
    from pyacc.compiler import cuda_plans

    found = {}
    for key, plans in list(cuda_plans._plans.items()):
        for plan in list(plans.values()):
            handle = getattr(plan, "_handle", None)
            if handle is not None:
                name = getattr(getattr(key[0], "py_func", None), "__name__", None) or repr(key[0])
                found[(id(key[0]), name)] = handle
    return found


def registers(kernel: str, nb, new: dict) -> dict:
    """Registers a thread of pyacc's kernels launched for ``kernel`` (``new``: what
    :func:`_launched_kernels` found of them) and of the hand-written one (what bounds the
    blocks a multiprocessor holds: 65,536 registers); what neither says (no prepared
    launches under numba-cuda-mlir) is absent."""
    found = {}
    for key in sorted(new, key=lambda k: k[1]):
        try:
            count = new[key].attributes.num_regs  # (a method before cuda.core 1.0)
            found[f"pyacc {key[1]}"] = int(count() if callable(count) else count)
        except Exception:  # noqa: BLE001 - a figure less, never a failed benchmark
            pass
    if not new:
        found["pyacc"] = "not known (no prepared launch: numba-cuda 0.30 only)"
    try:
        counts = getattr(nb, kernel).get_regs_per_thread()
        found[REFERENCE.name] = int(counts if isinstance(counts, int) else max(counts.values()))
    except Exception:  # noqa: BLE001 - numba-cuda-mlir's dispatcher may not say
        pass
    return found


# == bandwidth ===============================================================================


def run_bandwidth(mode, cupy, budget) -> dict:
    """``acc.update`` async through pyacc's pinned staging against CuPy's copies."""
    import cupyx

    nbytes = {"full": 1 << 30, "quick": 64 << 20, "smoke": 1 << 20}[mode]
    n = nbytes // 8
    a = np.random.default_rng(2).random(n)
    acc.enter_data(copyin=[a])
    pinned = cupyx.empty_pinned((n,), np.float64)
    pinned[:] = a
    d = cupy.empty(n, np.float64)
    stream = cupy.cuda.Stream(non_blocking=True)
    sync = cupy.cuda.runtime.deviceSynchronize

    def async_update(way, array):
        """``acc.update(way=[array], async_=1)`` and its wait, as one candidate."""
        def run():
            acc.update(**{way: [array]}, async_=1)
            acc.wait(1)
        return run

    def cupy_h2d():
        d.set(pinned, stream=stream)
        stream.synchronize()

    def cupy_d2h():
        d.get(stream=stream, out=pinned)
        stream.synchronize()

    # CuPy's pageable copies need an array pyacc never mapped: ``a`` is page-locked while
    # mapped (PYACC_PIN, mapping/devices/cuda_pins.py), so copies of it run at pinned speed
    pageable = a.copy()

    def cupy_h2d_pageable():
        d.set(pageable)
        sync()

    def cupy_d2h_pageable():
        d.get(out=pageable)
        sync()

    half = a.reshape(-1, 2)[:, 0]  # every other element: a strided host side, always staged,
    # in pieces through two pinned buffers (mapping/devices/cuda_staging.py)

    b = np.random.default_rng(3).random(n)  # unmapped: every copy maps, copies, unmaps

    def pyacc_once_h2d():
        acc.copyin(b)
        acc.delete(b)

    def pyacc_once_d2h():
        acc.create(b)
        acc.copyout(b)

    candidates = {name: Candidate(run) for name, run in (
        ("pyacc h2d", async_update("device", a)), ("cupy pinned h2d", cupy_h2d),
        ("cupy pageable h2d", cupy_h2d_pageable),
        ("pyacc d2h", async_update("self", a)), ("cupy pinned d2h", cupy_d2h),
        ("cupy pageable d2h", cupy_d2h_pageable),
        ("pyacc one-off h2d", pyacc_once_h2d), ("pyacc one-off d2h", pyacc_once_d2h),
        ("pyacc staged h2d", async_update("device", half)), ("pyacc staged d2h", async_update("self", half)))}
    try:
        times, failed = measure(candidates, REPEATS[mode][1], budget)
    finally:
        acc.exit_data(delete=[a])
        del d, pinned
        cupy.get_default_memory_pool().free_all_blocks()
    gbps = {name: (half.nbytes if "staged" in name else nbytes) / seconds / 1e9
            for name, seconds in times.items()}
    print("  bandwidth (GB/s): " + ", ".join(f"{k} {v:.2f}" for k, v in gbps.items()))
    try:  # a refusal (the pages registered already, a container's limit) is a note
        registration = registration_cost(cupy, pageable)
    except Exception as error:  # noqa: BLE001 - CUDARuntimeError: the other figures stand
        registration, failed["page-locking"] = None, f"{type(error).__name__}: {error}"
    else:
        print(f"  page-locking {nbytes >> 20} MiB: register {registration['register_ms']:.2f} ms, "
              f"unregister {registration['unregister_ms']:.2f} ms")
    return {"nbytes": nbytes, "seconds": times, "gbps": gbps, "registration": registration,
            "notes": failed}


def registration_cost(cupy, array) -> dict:
    """ms to ``cudaHostRegister`` / ``cudaHostUnregister`` ``array`` (the pages inside
    it, as ``PYACC_PIN`` does; an array pyacc has not mapped, else they are registered
    already), median of 3; what mapping a large array costs once."""
    page = 4096
    low = -(-array.ctypes.data // page) * page
    size = (array.ctypes.data + array.nbytes) // page * page - low
    runtime = cupy.cuda.runtime
    register, unregister = [], []
    for _ in range(3):
        start = time.perf_counter()
        runtime.hostRegister(low, size, 0)
        middle = time.perf_counter()
        runtime.hostUnregister(low)
        register.append((middle - start) * 1e3)
        unregister.append((time.perf_counter() - middle) * 1e3)
    return {"register_ms": statistics.median(register), "unregister_ms": statistics.median(unregister),
            "nbytes": size}


def summary_fields(report: dict) -> dict:
    """The headline figures of issue 28 at the top of results_cuda.json."""
    fields = {"gpu": report["machine"].get("gpu")}
    g = report.get("bandwidth", {}).get("gbps", {})
    for way in ("h2d", "d2h"):
        if f"pyacc {way}" in g and f"cupy pinned {way}" in g:
            fields[f"{way}_ratio"] = g[f"pyacc {way}"] / g[f"cupy pinned {way}"]
        if f"pyacc one-off {way}" in g and f"cupy pageable {way}" in g:
            fields[f"one_off_{way}_vs_pageable"] = g[f"pyacc one-off {way}"] / g[f"cupy pageable {way}"]
    us = report.get("launch", {}).get("us", {})
    if "pyacc sync" in us:
        fields["launch_us"] = us["pyacc sync"]
    if "pyacc async" in us:
        fields["launch_async_us"] = us["pyacc async"]
    cold = report.get("cold_start", {})
    if "cached_first_call_ms" in cold:
        fields["cached_first_call_ms"] = cold["cached_first_call_ms"]
        fields["compile_first_call_ms"] = cold["compile_first_call_ms"]
    if "hidden" in report.get("overlap", {}):
        fields["overlap_hidden"] = report["overlap"]["hidden"]
    return fields


# == launch overhead =========================================================================


def run_launch(mode, cupy, nb, budget) -> dict:
    """µs per launch of a trivial kernel (8 elements, 3 arrays): pyacc on present data
    against the raw numba-cuda launch, waited for each time and queued."""
    cuda = nb.cuda
    calls = {"full": 2000, "quick": 200, "smoke": 10}[mode]
    x, y, z = np.ones(8), np.ones(8), np.zeros(8)
    dx, dy, dz = cuda.to_device(x), cuda.to_device(y), cuda.to_device(z)
    stream = cuda.stream()

    def pyacc_sync():
        for _ in range(calls):
            bc.acc_trivial(x, y, z)

    def numba_sync():
        for _ in range(calls):
            nb.trivial[1, 32](dx, dy, dz)
            cuda.synchronize()

    def pyacc_async():
        for _ in range(calls):
            bc.acc_trivial(x, y, z, async_=1)
        acc.wait(1)

    def numba_async():
        for _ in range(calls):
            nb.trivial[1, 32, stream](dx, dy, dz)
        stream.synchronize()

    cx, cy, cz = cupy.asarray(x), cupy.asarray(y), cupy.asarray(z)

    def numba_cupy_sync():
        for _ in range(calls):
            nb.trivial[1, 32](cx, cy, cz)
            cuda.synchronize()

    # the driver call itself, from numba-cuda's kernel (numba-cuda-mlir has a launcher of
    # its own, the reference kernels are its kernels then: no such row)
    try:
        driver = driver_launch(nb, (dx, dy, dz)) if REFERENCE.name == "numba-cuda" else None
        without_driver = None
    except Exception as error:  # noqa: BLE001 - numba-cuda's internals moved: a context row less
        driver, without_driver = None, f"{type(error).__name__}: {error}"

    def driver_sync():
        for _ in range(calls):
            driver()
            cuda.synchronize()

    def c_driver_sync():
        for _ in range(calls):
            c_driver()
            cuda.synchronize()
    c_driver = driver_record(nb, (dx, dy, dz)) if driver is not None else None

    with acc.data(copyin=[x, y], copy=[z]):
        bc.acc_trivial(x, y, z)  # compiled; whether its launches are prepared is decided
        planned = [cuda_runtime._array_class()]
        candidates = {
            "pyacc sync": Candidate(pyacc_sync, prepare=_plans(planned)),
            "numba-cuda sync": Candidate(numba_sync),
            "pyacc async": Candidate(pyacc_async, prepare=_plans(planned)),
            "numba-cuda async": Candidate(numba_async),
            "pyacc sync, dispatcher": Candidate(pyacc_sync, prepare=_plans([None])),
            "pyacc sync, not relaunched": Candidate(pyacc_sync,
                                                  prepare=_plans(planned, relaunch=False)),
            "pyacc async, not relaunched": Candidate(pyacc_async,
                                                   prepare=_plans(planned, relaunch=False)),
            "pyacc sync, cuda.core launch": Candidate(pyacc_sync, prepare=_plans(
                planned, record=False, relaunch=False)),
            "pyacc sync, Python launcher": Candidate(pyacc_sync, prepare=_plans(planned, lane=False)),
            "numba-cuda sync, CuPy arrays": Candidate(numba_cupy_sync)}
        if driver is not None:
            candidates["driver launch (cuda.core) sync"] = Candidate(driver_sync)
        if c_driver is not None:
            candidates["driver launch (C) sync"] = Candidate(c_driver_sync)
        try:
            times, failed = measure(candidates, REPEATS[mode][1], budget)
        finally:
            _plans(planned)()
    us = {name: seconds / calls * 1e6 for name, seconds in times.items()}
    print("  launch (µs): " + ", ".join(f"{k} {v:.2f}" for k, v in us.items()))
    return {"calls": calls, "us": us, "notes": failed, "prepared": planned[0] is not None,
            "driver_row_missing": without_driver}


def _plans(state, lane=True, record=True, relaunch=True):
    """A candidate's ``prepare``: pyacc's cuda launches prepared (``compiler.cuda_plans``)
    or not (``[None]``: every launch through the compiler's dispatcher), made from C
    (``cuda_plans.record``) or, ``record`` False, through ``cuda.core.launch`` (plans made
    again when that changes), calls made again from C (``cuda_relaunch``) or,
    ``relaunch`` False, all through their driver, and compute calls through the express
    lane or, ``lane`` False, all through the Python launcher
    (``pyacc._express.set_lane``; a call with the lane back on arms its plan again)."""
    from pyacc.compiler import cuda_plans

    def prepare():
        cuda_runtime._prepared[:] = state
        set_lane(lane)
        if cuda_plans._launch is not None:
            cuda_plans._launch.set_relaunching(relaunch)
        if _C_DRIVER[0] is _UNASKED:
            _C_DRIVER[0] = cuda_plans.driver_launch()
        wanted = _C_DRIVER[0] if record else None
        if cuda_plans._driver.get("cuLaunchKernel") != wanted:
            cuda_plans._driver["cuLaunchKernel"] = wanted
            cuda_plans._plans.clear()  # (made again at their facts' next two sights)
            cuda_plans._sightings.clear()
    return prepare


_UNASKED = object()
_C_DRIVER = [_UNASKED]  # the driver's cuLaunchKernel, as ``cuda_plans`` found it


def driver_record(nb, arrays):
    """:func:`driver_launch` from C (``cuda_plans.record``: the words packed once, one
    ``cuLaunchKernel``), or None where there is no C launch."""
    from numba.cuda import dispatcher  # the reference compiler is numba-cuda here
    from pyacc.compiler import cuda_plans

    kernel, words = _reference_words(nb, arrays)
    handle = kernel._codelibrary.get_cufunc().kernel
    record = cuda_plans.record(handle, (1, 1, 1), (32, 1, 1), 0,
                               dispatcher.driver._to_core_stream(0), [words])
    return None if record is None else record.launch


def driver_launch(nb, arrays):
    """One launch of ``nb.trivial`` on ``arrays`` by ``cuda.core.launch``, its words
    marshalled once (cuda.core packs them at each launch): the floor a prepared launch
    approaches (numba-cuda's kernels only)."""
    from numba.cuda import dispatcher  # the reference compiler is numba-cuda here

    kernel, words = _reference_words(nb, arrays)
    config = dispatcher.LaunchConfig(grid=(1, 1, 1), block=(32, 1, 1), shmem_size=0)
    handle = kernel._codelibrary.get_cufunc().kernel
    stream = dispatcher.driver._to_core_stream(0)
    return lambda: dispatcher.launch(stream, config, handle, *words)


def _reference_words(nb, arrays):
    """The compiled kernel one launch of ``nb.trivial`` on ``arrays`` used (numba-cuda's
    pre-launch callback), and the words numba-cuda's marshaller makes of ``arrays``."""
    seen = []
    configured = nb.trivial[1, 32]
    configured.pre_launch_callbacks.append(lambda kernel, config: seen.append(kernel))
    try:
        configured(*arrays)
    finally:
        configured.pre_launch_callbacks.pop()
    kernel = seen[-1]
    words = []
    for kind, value in zip(kernel.argument_types, arrays):
        kernel._prepare_args(kind, value, 0, [], words)
    return kernel, words


# == two queues: copies hidden behind kernels ==================================================


def run_overlap(mode, budget) -> dict:
    """Kernels on queue 1 (saxpy, ``launches`` times) and an h2d update of a mapped array
    on queue 2, timed alone and issued together (each run waits for its queues).
    ``hidden``: the share of the shorter of the two hidden behind the longer,
    ``(kernels + copy − both) / min(kernels, copy)`` (1: fully hidden, 0: serialised).
    Uses the current device: ``cuda`` here; the tests run it on ``emulated``."""
    n = {"full": 1 << 26, "quick": 1 << 24, "smoke": 1 << 12}[mode]
    nbytes = {"full": 256 << 20, "quick": 64 << 20, "smoke": 1 << 16}[mode]
    launches = 8
    rng = np.random.default_rng(4)
    x, y, c = rng.random(n), rng.random(n), rng.random(nbytes // 8)

    def kernels():
        for _ in range(launches):
            bc.acc_saxpy(1e-9, x, y, async_=1)

    def copy():
        acc.update(device=[c], async_=2)

    def alone(issue, queue):
        def run():
            issue()
            acc.wait(queue)
        return run

    def both():
        copy()
        kernels()
        acc.wait(1)
        acc.wait(2)

    acc.enter_data(copyin=[x, y, c])
    try:
        times, failed = measure({"kernels (queue 1)": Candidate(alone(kernels, 1)),
                                 "copy (queue 2)": Candidate(alone(copy, 2)),
                                 "both": Candidate(both)}, REPEATS[mode][1], budget)
    finally:
        acc.exit_data(delete=[x, y, c])
    result = {"launches": launches, "n": n, "nbytes": nbytes, "seconds": times, "notes": failed}
    if len(times) == 3:
        k, t, b = times["kernels (queue 1)"], times["copy (queue 2)"], times["both"]
        result["hidden"] = (k + t - b) / min(k, t)
        print(f"  overlap: kernels {k * 1e3:.2f} ms, copy {t * 1e3:.2f} ms, both {b * 1e3:.2f} ms: "
              f"{result['hidden']:.2f} of the shorter hidden")
    return result


# == kernels compiled once per machine: first calls in fresh processes ==========================

#: The fresh process: pyacc imported, the device initialised (``acc.init``: its context,
#: streams and kernel compiler, OpenACC 3.3 §3.2.7), two arrays mapped, then the first
#: calls of saxpy and a ``+`` reduction timed (their kernels made, loaded or compiled, and
#: run), then warm saxpy calls; results checked. Prints one JSON line.
COLD_CHILD = r"""
import json, statistics, sys, time
t0 = time.perf_counter()
import numpy as np
import pyacc as acc
from pyacc.compiler import cuda_binaries
imported = time.perf_counter() - t0
t = time.perf_counter()
acc.init()
initialised = time.perf_counter() - t
""" + COLD_KERNELS + r"""
x = np.ones(1000); y = np.zeros(1000)
acc.enter_data(copyin=[x, y])
WARM = 200
""" + COLD_CALLS + r"""
acc.exit_data(copyout=[y], delete=[x])
assert y[0] == 2.0 * 201 and total == 2000.0, (y[0], total)
print(json.dumps({"file": acc.__file__, "import_s": imported, "init_s": initialised,
                  "first_s": first, "warm_us": statistics.median(warm) * 1e6,
                  "binaries": cuda_binaries.counts()}))
"""


def cold_start(device_type: str, processes: int) -> dict:
    """ms of the first calls of two kernels in fresh processes on ``device_type``
    (:data:`COLD_CHILD`): one with an empty kernel cache (its kernels compiled, their
    binaries saved: ``compiler.cuda_binaries``), then ``processes`` with the cache it filled
    (loaded): ``compile_first_call_ms`` and ``cached_first_call_ms`` (median), the
    binaries each saved and loaded, and the whole start of the loaded processes
    (``cached_start_ms``: import, ``acc.init`` and first calls)."""
    # the child imports the pyacc this process measures (ROOT's, as ``sys.path`` above),
    # installed or not: its script lives in the cache folder, which is all its sys.path adds
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))

    def child(cache: str) -> dict:
        env = dict(os.environ, PYACC_CACHE_DIR=cache, ACC_DEVICE_TYPE=device_type, PYTHONPATH=path)
        done = subprocess.run([sys.executable, str(Path(cache) / "cold_child.py")], env=env,
                              capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"the child exited {done.returncode}: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        if not Path(result["file"]).resolve().is_relative_to(ROOT):
            raise RuntimeError(f"the child imported {result['file']}, not the pyacc of {ROOT}")
        return result

    with tempfile.TemporaryDirectory(prefix="pyacc-cold-") as cache:
        (Path(cache) / "cold_child.py").write_text(COLD_CHILD)  # kernels live in files
        compiled = child(cache)
        loaded = [child(cache) for _ in range(processes)]
    ms = [run["first_s"] * 1e3 for run in loaded]
    start = [(run["import_s"] + run["init_s"] + run["first_s"]) * 1e3 for run in loaded]
    result = {"compile_first_call_ms": compiled["first_s"] * 1e3,
              "cached_first_call_ms": statistics.median(ms),
              "cached_start_ms": statistics.median(start),
              "init_ms": statistics.median(run["init_s"] * 1e3 for run in loaded),
              "binaries_saved": compiled["binaries"]["saved"],
              "binaries_loaded": min(run["binaries"]["loaded"] for run in loaded),
              "processes": processes, "notes": {}}
    print(f"  first calls (saxpy + dot) in a fresh process: compiled {result['compile_first_call_ms']:.1f} ms "
          f"({result['binaries_saved']} kernel binaries saved), from the cache "
          f"{result['cached_first_call_ms']:.1f} ms ({result['binaries_loaded']} loaded; median of "
          f"{processes}); the whole start from the cache {result['cached_start_ms']:.1f} ms "
          f"(acc.init {result['init_ms']:.1f} ms)")
    return result


def run_cold_start(mode) -> dict:
    """``cold_start`` on ``cuda``, a failure kept in ``notes`` (the other measures stand)."""
    try:
        return cold_start("cuda", {"full": 5, "quick": 3, "smoke": 1}[mode])
    except Exception as error:  # noqa: BLE001 - reported with the figures, not raised
        print(f"  first calls in a fresh process: failed: {error}")
        return {"notes": {"cold start": repr(error)}}


# == strided column update ===================================================================


def run_strided(mode, cupy, budget) -> dict:
    """``acc.update`` of one column of an n × n float64 array: transfers, exactness, time."""
    n = {"full": 8192, "quick": 1024, "smoke": 64}[mode]
    column = 17
    a = np.zeros((n, n))
    a[:, column] = np.arange(n)
    acc.enter_data(copyin=[a])
    try:
        # the device has the column, the host no longer (through pyacc's verbs: written
        # with CuPy through host_data, the column would be device memory written outside
        # them, which PYACC_CHECK's autocompare does not mirror and reports, API.md §11)
        a[:, column] = 0.0
        a[:, column + 1] = 5.0  # host-only change next to it: must survive the update
        acc.reset_stats()
        acc.update(self=[a[:, column]])
        d2h = acc.stats()
        exact_self = bool(np.array_equal(a[:, column], np.arange(n)) and (a[:, column + 1] == 5.0).all()
                          and not a[:, column + 2].any())
        a[:, column] = -np.arange(n)
        acc.reset_stats()
        acc.update(device=[a[:, column]])
        h2d = acc.stats()
        device = acc.deviceptr(a)
        exact_device = bool(np.array_equal(cupy.asnumpy(device[:, column]), -np.arange(n))
                            and not cupy.asnumpy(device[:, column + 1]).any())
        sync = cupy.cuda.runtime.deviceSynchronize
        view = a[:, column]
        times, failed = measure({
            "pyacc update self": Candidate(with_sync(lambda: acc.update(self=[view]), sync)),
            "pyacc update device": Candidate(with_sync(lambda: acc.update(device=[view]), sync)),
            "cupy column get": Candidate(with_sync(lambda: device[:, column].get(), sync)),
        }, REPEATS[mode][1], budget)
    finally:
        acc.exit_data(delete=[a])
    counts = {"update_self": {k: d2h[k] for k in ("h2d_count", "d2h_count", "d2h_bytes")},
              "update_device": {k: h2d[k] for k in ("h2d_count", "d2h_count", "h2d_bytes")}}
    print(f"  strided column of {n}²: update self {counts['update_self']}, update device "
          f"{counts['update_device']}, exact {exact_self and exact_device}; "
          + ", ".join(f"{k} {v * 1e6:.1f} µs" for k, v in times.items()))
    return {"n": n, "counts": counts, "exact": exact_self and exact_device, "seconds": times,
            "notes": failed}


# == reporting ===============================================================================


def gpu_machine(cupy) -> dict:
    runtime = cupy.cuda.runtime
    device = cupy.cuda.Device()
    properties = runtime.getDeviceProperties(device.id)
    name = properties["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)

    def version(package):
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    driver = runtime.driverGetVersion()
    return {"gpu": name, "gpu_memory": properties.get("totalGlobalMem"),
            "compute_capability": f"{properties.get('major')}.{properties.get('minor')}",
            "driver": f"{driver // 1000}.{driver % 1000 // 10}",
            "cupy": cupy.__version__, "numba_cuda": version("numba-cuda"),
            "reference_compiler": REFERENCE.label(),
            "pyacc_compiler": cuda_compilers.describe(),
            "host": machine_description(), "python": platform.python_version(),
            "pyacc": acc.__version__, "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M")}


def _fmt(value, digits=5):
    return "—" if value is None else f"{value:.{digits}f}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _row(measure: str, value: str, target: str = "", ok: bool | None = None) -> str:
    """A row of the measures' table: its verdict only when it has a target."""
    return f"| {measure} | {value} | {target} | {'' if ok is None else _verdict(ok)} |"


def kernel_table(rows) -> list[str]:
    lines = [f"| kernel | pyacc cuda (s) | numba-cuda (s) | CuPy (s) | pyacc ÷ numba-cuda (≤ {KERNEL_RATIO}) "
             "| pyacc ÷ CuPy |", "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        t = row["times"]
        ratio = t["pyacc"] / t["numba-cuda"] if "pyacc" in t and "numba-cuda" in t else None
        versus = f"{t['pyacc'] / t['cupy']:.2f}" if "pyacc" in t and "cupy" in t else "—"
        shown = "—" if ratio is None else f"{ratio:.3f} {_verdict(ratio <= KERNEL_RATIO)}"
        lines.append(f"| {row['label']} | " + " | ".join(_fmt(t.get(k)) for k in IMPLEMENTATIONS)
                     + f" | {shown} | {versus} |")
    counted = [f"{row['label']}: " + ", ".join(f"{k} {v}" for k, v in row["registers"].items())
               for row in rows if row.get("registers")]
    if counted:
        lines += ["", "Registers a thread (cuda.core's `num_regs`; 8 blocks of 256 threads "
                  "fit a multiprocessor at 32 or fewer): " + "; ".join(counted) + "."]
    return lines


def measure_lines(report) -> list[str]:
    lines = ["| measure | value | target | |", "|---|---:|---|---|"]
    bw = report.get("bandwidth")
    if bw and bw.get("gbps"):
        g = bw["gbps"]
        size = f"{bw['nbytes'] / 2**20:.0f} MiB"
        for way in ("h2d", "d2h"):
            if f"pyacc {way}" in g and f"cupy pinned {way}" in g:
                ratio = g[f"pyacc {way}"] / g[f"cupy pinned {way}"]
                lines.append(f"| {way}, {size}: pyacc async update (GB/s) ÷ CuPy pinned copy "
                             f"| {ratio:.3f} ({g[f'pyacc {way}']:.2f} vs {g[f'cupy pinned {way}']:.2f}; "
                             f"CuPy pageable {g.get(f'cupy pageable {way}', float('nan')):.2f}) "
                             f"| ≥ {BANDWIDTH_RATIO} | {_verdict(ratio >= BANDWIDTH_RATIO)} |")
            if f"pyacc one-off {way}" in g and f"cupy pageable {way}" in g:
                ratio = g[f"pyacc one-off {way}"] / g[f"cupy pageable {way}"]
                lines.append(f"| {way}, {size}: pyacc one-off copy of an unmapped array (map, copy, "
                             f"unmap) ÷ CuPy pageable copy | {ratio:.3f} | ≥ 1 | {_verdict(ratio >= 1)} |")
        if "pyacc staged h2d" in g and "pyacc staged d2h" in g:
            lines.append(f"| every other element of the {size} array (a strided host side), async "
                         f"update through chunked staging, h2d / d2h (GB/s) "
                         f"| {g['pyacc staged h2d']:.2f} / {g['pyacc staged d2h']:.2f} | | |")
        cost = bw.get("registration")
        if cost:
            lines.append(f"| page-locking {cost['nbytes'] / 2**20:.0f} MiB (PYACC_PIN): register / "
                         f"unregister | {cost['register_ms']:.2f} / {cost['unregister_ms']:.2f} ms | | |")
    launch = report.get("launch")
    if launch and launch.get("us"):
        us = launch["us"]
        for mode in ("sync", "async"):
            if f"pyacc {mode}" in us and f"numba-cuda {mode}" in us:
                ratio = us[f"pyacc {mode}"] / us[f"numba-cuda {mode}"]
                lines.append(f"| trivial kernel, 3 present arrays, {mode}: pyacc ÷ raw numba-cuda launch "
                             f"| {ratio:.3f} ({us[f'pyacc {mode}']:.2f} vs {us[f'numba-cuda {mode}']:.2f} µs) "
                             f"| ≤ {LAUNCH_RATIO} | {_verdict(ratio <= LAUNCH_RATIO)} |")
        for mode in ("sync", "async"):
            if f"pyacc {mode}" in us:
                value = us[f"pyacc {mode}"]
                lines.append(_row(f"trivial kernel, 3 present arrays, {mode}: pyacc µs per call",
                                  f"{value:.2f}", f"≤ {LAUNCH_US}", value <= LAUNCH_US))
        context = [f"{name} {us[name]:.2f}" for name in ("pyacc sync, dispatcher",
                   "pyacc sync, Python launcher", "pyacc sync, not relaunched",
                   "pyacc sync, cuda.core launch",
                   "numba-cuda sync, CuPy arrays", "driver launch (cuda.core) sync",
                   "driver launch (C) sync") if name in us]
        if context:
            lines.append(_row("the same kernel, each launch waited for, for context (µs per launch)",
                              "; ".join(context)))
        if "pyacc async, not relaunched" in us:
            lines.append(_row("the same kernel queued, not made again from C, for context (µs per launch)",
                              f"{us['pyacc async, not relaunched']:.2f}"))
    overlap = report.get("overlap", {})
    if "hidden" in overlap:
        s, hidden = overlap["seconds"], overlap["hidden"]
        lines.append(_row(
            f"two queues: {overlap['launches']} saxpy of {overlap['n']:,} on queue 1 beside an h2d "
            f"update of {overlap['nbytes'] >> 20} MiB on queue 2: share of the shorter hidden",
            f"{hidden:.2f} (alone {s['kernels (queue 1)'] * 1e3:.2f} and {s['copy (queue 2)'] * 1e3:.2f} "
            f"ms, together {s['both'] * 1e3:.2f} ms)", f"≥ {OVERLAP_HIDDEN}", hidden >= OVERLAP_HIDDEN))
    cold = report.get("cold_start", {})
    if "cached_first_call_ms" in cold:
        ms = cold["cached_first_call_ms"]
        lines.append(_row("first calls of saxpy + dot in a fresh process after `acc.init`, "
                          "kernels cached (ms)",
                          f"{ms:.1f} (compiled: {cold['compile_first_call_ms']:.1f}; "
                          f"binaries loaded {cold.get('binaries_loaded', '?')} of "
                          f"{cold.get('binaries_saved', '?')} saved)",
                          f"≤ {CACHED_FIRST_CALL_MS}", ms <= CACHED_FIRST_CALL_MS))
        if "cached_start_ms" in cold:
            lines.append(f"| the same process's whole start from the cache: import pyacc, "
                         f"`acc.init` (context, streams, compiler), first calls (ms) "
                         f"| {cold['cached_start_ms']:.1f} (acc.init {cold['init_ms']:.1f}) | | |")
    strided = report.get("strided")
    if strided and "counts" in strided:
        n, counts, s = strided["n"], strided["counts"], strided["seconds"]
        one = counts["update_self"]["d2h_count"] == 1 and counts["update_self"]["h2d_count"] == 0 \
            and counts["update_device"]["h2d_count"] == 1 and counts["update_device"]["d2h_count"] == 0
        lines.append(f"| strided column of {n}² float64: transfers of update self, update device "
                     f"| {counts['update_self']['d2h_count']}, {counts['update_device']['h2d_count']} "
                     f"| 1, 1 | {_verdict(one)} |")
        lines.append(f"| the same: exact (only the column moved) | {strided['exact']} | True "
                     f"| {_verdict(strided['exact'])} |")
        for name, seconds in s.items():
            lines.append(f"| the same: {name} (µs) | {seconds * 1e6:.1f} | | |")
    return lines


def section(report: dict, args) -> str:
    m = report["machine"]
    out = [BEGIN, "", "## GPU suite — `benchmarks/bench_cuda.py`", ""]
    out += [f"Run: `python benchmarks/bench_cuda.py{' --quick' if args.quick else ''}` on {m['date']}. "
            f"GPU: **{m['gpu']}** (compute capability {m['compute_capability']}, "
            f"{(m['gpu_memory'] or 0) / 2**30:.0f} GiB), driver {m['driver']}; CuPy {m['cupy']}, "
            f"numba-cuda {m['numba_cuda']}, pyacc {m['pyacc']} (its kernels compiled by "
            f"{m['pyacc_compiler']}; the reference kernels by "
            f"{m.get('reference_compiler', 'numba-cuda')}). Host: {m['host']}."]
    if args.note:
        out += ["", f"**Note:** {args.note}"]
    out += ["", "Every cell is the median of interleaved rounds after a warm-up round, each "
            "run ending with a device synchronise; the same data and sizes for everyone. "
            "pyacc: data resident (`acc.data`), kernels generated for the cuda target. "
            "numba-cuda: hand-written kernels of the same algorithms (`benchmarks/bench_cuda.py`). "
            "CuPy: idiomatic calls (elementwise expressions; cuBLAS for dot and matmul). "
            "Reductions (Jacobi error, dot) are read back to the host at every call by all three.", ""]
    out += ["Correctness before timing (against NumPy on small data): "
            + ", ".join(f"{k} {'ok' if v else 'WRONG'}" for k, v in report["checks"].items()), ""]
    out += ["### Kernels", ""] + kernel_table(report["kernels"]) + [""]
    notes = [f"- {row['label']}, {LABELS.get(k, k)}: {v}" for row in report["kernels"]
             for k, v in row["notes"].items()]
    for key in MEASURES:
        notes += [f"- {key}, {k}: {v}" for k, v in report.get(key, {}).get("notes", {}).items()]
    if notes:
        out += ["Failed candidates:", ""] + notes + [""]
    out += ["### Transfers and launches", ""] + measure_lines(report) + [""]
    out += [END]
    return "\n".join(out) + "\n"


# == main ====================================================================================


#: the sections after the kernels' (``measure_sections``), each a dict with its ``notes``
MEASURES = ("bandwidth", "launch", "strided", "overlap", "cold_start")


def measure_sections(mode, cupy, nb, budget) -> dict:
    """Every measure in turn, as ``(key, run)``: a section that raises is kept as a note
    (the others still run: a GPU lent for minutes gives every figure it can)."""
    return {"kernels": lambda: run_kernels(mode, cupy, nb, budget),
            "bandwidth": lambda: run_bandwidth(mode, cupy, budget),
            "launch": lambda: run_launch(mode, cupy, nb, budget),
            "strided": lambda: run_strided(mode, cupy, budget),
            "overlap": lambda: run_overlap(mode, budget),
            "cold_start": lambda: run_cold_start(mode)}


def run_all(mode, cupy, nb, save, only=None) -> dict:
    """The whole suite (``only``: the names of the sections to run, else all);
    ``save(report)`` after each section, so that a run cut short (a timeout on a lent
    GPU) still leaves every figure measured until then."""
    report = {"machine": gpu_machine(cupy), "mode": mode}
    m = report["machine"]
    print(f"GPU: {m['gpu']} (cc {m['compute_capability']}), driver {m['driver']}, CuPy {m['cupy']}, "
          f"numba-cuda {m['numba_cuda']}; pyacc's kernels compiled by {m['pyacc_compiler']}, "
          f"the reference kernels by {m['reference_compiler']}")
    # seconds of timed rounds per problem (at least)
    budget = {"full": 10.0, "quick": 2.0, "smoke": 0.0}[mode]
    start = time.perf_counter()
    report["checks"] = check_kernels(cupy, nb)
    print("correctness: " + ", ".join(f"{k} {'ok' if v else 'WRONG'}" for k, v in report["checks"].items()))
    for key, run in measure_sections(mode, cupy, nb, budget).items():
        if only and key not in only:
            continue
        try:
            report[key] = run()
        except Exception as error:  # noqa: BLE001 - kept with the figures, the run goes on
            print(f"  {key}: failed: {type(error).__name__}: {error}")
            report[key] = [] if key == "kernels" else {"notes": {key: f"{type(error).__name__}: {error}"}}
            report.setdefault("failed_sections", []).append(key)
        report["seconds"] = time.perf_counter() - start
        save(report)
    report.update(summary_fields(report))
    save(report)
    return report


def smoke_failures(report) -> list[str]:
    failures = [f"{row['label']}, {k}: {v}" for row in report["kernels"] for k, v in row["notes"].items()]
    failures += [f"{key}, {k}: {v}" for key in MEASURES for k, v in report[key]["notes"].items()]
    return failures


def profile_launch(calls: int = 2000, top: int = 25) -> None:
    """cProfile of ``calls`` synchronous and ``calls`` asynchronous launches of the trivial
    kernel on 3 present arrays (where a launch's time goes on this machine)."""
    import cProfile
    import pstats

    x, y, z = np.ones(8), np.ones(8), np.zeros(8)
    with acc.data(copyin=[x, y], copy=[z]):
        for _ in range(20):  # compiled, its plan armed
            bc.acc_trivial(x, y, z)
            bc.acc_trivial(x, y, z, async_=1)
        acc.wait(1)
        for label, run in (("sync", lambda: bc.acc_trivial(x, y, z)),
                           ("async", lambda: bc.acc_trivial(x, y, z, async_=1))):
            profiler = cProfile.Profile()
            begin = time.perf_counter()
            profiler.enable()
            for _ in range(calls):
                run()
            acc.wait(1)
            profiler.disable()
            print(f"== {calls} {label} launches under cProfile: "
                  f"{(time.perf_counter() - begin) / calls * 1e6:.1f} µs per call (profiled)")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def write_report(report, args) -> None:
    """RESULTS.md's GPU section and results_cuda.json, from ``report``."""
    write_results(section(report, args), RESULTS, BEGIN, END)
    with open(JSON, "w") as out:
        json.dump(report, out, indent=1, default=str)
    print(f"wrote the GPU suite section of {RESULTS.relative_to(ROOT)} "
          f"(figures: {JSON.relative_to(ROOT)})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats (~1 min)")
    parser.add_argument("--smoke", action="store_true",
                        help="every kernel and measure once at tiny sizes, correctness checked, "
                             "nothing written (no GPU: says why, exit 0)")
    parser.add_argument("--no-write", action="store_true", help="do not touch RESULTS.md (print only)")
    parser.add_argument("--json", help="also write every figure to this JSON file (after each section)")
    parser.add_argument("--note", help="a sentence to put in the RESULTS.md section")
    parser.add_argument("--from-json", metavar="FILE",
                        help="no measuring: write RESULTS.md's section and results_cuda.json from "
                             "the --json FILE of a run on a GPU machine (no GPU needed here)")
    parser.add_argument("--only", metavar="SECTIONS",
                        help="comma-separated sections to run (kernels, bandwidth, launch, "
                             "strided, overlap, cold_start); implies --no-write")
    parser.add_argument("--profile-launch", action="store_true",
                        help="no suite: cProfile of the trivial kernel's launches on present data")
    args = parser.parse_args(argv)

    if args.from_json:
        with open(args.from_json) as saved:
            report = json.load(saved)
        args.quick = report.get("mode") == "quick"
        report.update(summary_fields(report))
        write_report(report, args)
        return 0
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    if mode == "smoke":
        args.no_write = True
    only = set(args.only.split(",")) if args.only else None
    if only:
        unknown = only - set(measure_sections(mode, None, None, 0))
        if unknown:
            parser.error(f"--only: no section {', '.join(sorted(unknown))}")
        args.no_write = True  # a partial run never replaces the published figures
    reason = gpu_unavailable_reason()
    if reason:
        print(f"bench_cuda.py: not run, no usable GPU here: {reason}"
              + (" (smoke run skipped: it needs a GPU)" if args.smoke else ""))
        return 0
    import cupy

    acc.set_device_type("cuda")
    acc.set_device_num(0, "cuda")
    if args.profile_launch:
        profile_launch()
        return 0

    def save(report):
        if args.json:
            with open(args.json, "w") as out:
                json.dump(report, out, indent=1, default=str)

    report = run_all(mode, cupy, numba_kernels(), save, only)
    print()
    print("\n".join(kernel_table(report.get("kernels", []))))
    print("\n".join(measure_lines(report)))
    if not args.no_write:
        write_report(report, args)
    checked = all(report["checks"].values()) and not report.get("failed_sections")
    if mode == "smoke" and not only:
        failures = smoke_failures(report)
        for failure in failures:
            print(f"smoke run: FAILED: {failure}", file=sys.stderr)
        if failures or not checked:
            return 1
        print("smoke run: every kernel and measure ran once at tiny sizes (targets not checked)")
        return 0
    return 0 if checked else 1


if __name__ == "__main__":
    sys.exit(main())
