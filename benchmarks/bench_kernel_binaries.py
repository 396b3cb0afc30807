"""The first call of cached GPU kernels in a fresh process, three ways, measured without a GPU.

Each sample is a fresh ``python`` process that imports pyacc, puts numba-cuda's launch
path in place with the GPU's leaves standing in (``tests/cuda/numba_cuda_leaves.py``: the
device's compute capability, streams, DLPack views, the loaded function, and
``cuda.core.launch``, which does nothing), and then times the first calls of two
generated cuda drivers (a ``parallel_loop`` saxpy and a ``collapse(2)`` stencil) on
stand-in device arrays: the code made or read from the kernel cache, and each GPU
kernel's first launch. The three ways:

- ``compiled``: an empty kernel cache: numba-cuda types, compiles (NVVM) and links
  (nvJitLink) each kernel, and pyacc saves its kernel binary (``compiler.cuda_binaries``);
- ``numba-cuda cache``: the cache the first way left, without pyacc's kernel binaries:
  numba-cuda's dispatcher loads each kernel from its own disk cache (what every cached
  first call did before the binaries);
- ``binaries``: the same cache with the binaries: each kernel is loaded from its binary
  (a signed file read, its cubin handed to the stand-in loader), never typed or compiled.

What a GPU adds to every way alike is left out: the CUDA context, the driver's load of a
cubin (~1 ms) and the launches themselves. ``import numba.cuda`` (numba-cuda's import,
with cuda.core's) is timed apart, before the calls: the stand-ins need it in every way,
where on a GPU the first two ways pay it at their first compile and the third never
does (``compiler.cuda_kernels``) but imports cuda.core at ``acc.init``. The GPU figure is
``bench_cuda.py``'s ``cached_first_call_ms``.

Run: ``python benchmarks/bench_kernel_binaries.py [--samples N] [--smoke]`` (needs
numba-cuda 0.30 and pytest, as the test suite does).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WAYS = ("compiled", "numba-cuda cache", "binaries")

_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import pytest
import pyacc as acc
from pyacc.compiler import analyze, cuda_binaries, cuda_compilers, get_kernel, parse_clauses
t = time.perf_counter()
cuda_compilers.load(cuda_compilers.COMPILERS["numba-cuda"])
imported = time.perf_counter() - t
from numba.cuda import codegen, dispatcher
from numba_cuda_leaves import DeviceArray, stand_in

patch = pytest.MonkeyPatch()
stand_in(patch)
patch.setattr(dispatcher, "launch", lambda stream, config, handle, *words: None)
patch.setattr(codegen.JITCUDACodegen, "magic_tuple", lambda self: ((13, 0), (9, 0)))
patch.setattr(cuda_binaries, "_capability", lambda: "90")
patch.setattr(cuda_binaries, "_load_kernel", lambda cubin, entry: ((len(cubin), entry), None))

def saxpy(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]

def stencil(u, v):
    n, m = u.shape
    for i in range(1, n - 1):
        for j in range(1, m - 1):
            v[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])

x, y = DeviceArray((4096,), ptr=0x10000), DeviceArray((4096,), ptr=0x20000)
u, v = DeviceArray((256, 256), ptr=0x30000), DeviceArray((256, 256), ptr=0x40000)
calls = ((saxpy, "parallel_loop", {}, (2.0, x, y)),
         (stencil, "parallel_loop", {"collapse": 2}, (u, v)))
t = time.perf_counter()
for function, construct, clauses, args in calls:
    driver = get_kernel(analyze(function, parse_clauses(construct, **clauses)), args,
                        target="cuda", device_type="cuda")
    driver(*args)
first = time.perf_counter() - t
print(json.dumps({"import_s": imported, "first_s": first, **cuda_binaries.counts()}))
"""


def child(cache: Path) -> dict:
    """One fresh process on the kernel cache ``cache``: its JSON line. (Its script is a
    file beside the cache: pyacc reads a kernel's source from its file.)"""
    script = cache.parent / "child.py"
    script.write_text(_CHILD)
    env = dict(os.environ, PYACC_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    done = subprocess.run([sys.executable, str(script), str(ROOT / "tests" / "cuda")], env=env,
                          capture_output=True, text=True, timeout=600)
    sys.stderr.write(done.stderr)  # passed on (the checkers' findings and summaries too)
    if done.returncode:
        raise RuntimeError(f"the child exited {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def sample(folder: Path) -> dict:
    """One process of each way (module docstring), in order, on a new cache in ``folder``."""
    cache = folder / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    compiled = child(cache)
    binaries = cache / "kernels" / "gpu"
    kept = folder / "kept"
    shutil.rmtree(kept, ignore_errors=True)
    shutil.move(binaries, kept)  # numba-cuda's own cache alone
    numba_cache = child(cache)
    shutil.rmtree(binaries, ignore_errors=True)  # (the binaries it saved again)
    shutil.move(kept, binaries)
    loaded = child(cache)
    if compiled["saved"] < 2 or loaded["loaded"] != compiled["saved"] or loaded["saved"]:
        raise RuntimeError(f"binaries saved {compiled['saved']}, then loaded {loaded['loaded']} "
                           f"and saved {loaded['saved']}: not each kernel loaded once")
    return dict(zip(WAYS, (compiled, numba_cache, loaded)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one sample")
    options = parser.parse_args(argv)
    samples = 1 if options.smoke else options.samples
    with tempfile.TemporaryDirectory(prefix="pyacc-binaries-") as folder:
        runs = [sample(Path(folder)) for _ in range(samples)]
    print(f"First calls of two generated cuda drivers in a fresh process (ms, median of "
          f"{samples}; GPU leaves standing in):")
    for way in WAYS:
        first = statistics.median(run[way]["first_s"] * 1e3 for run in runs)
        print(f"  {way:18s} {first:8.1f}")
    imported = statistics.median(run[w]["import_s"] * 1e3 for run in runs for w in WAYS)
    print(f"  (import numba.cuda, apart: {imported:.1f} ms)")


if __name__ == "__main__":
    main()
