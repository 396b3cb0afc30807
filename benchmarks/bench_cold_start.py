"""Cold start from a warm kernel cache: the first call of cached kernels in a fresh process,
and a warm call, for two pyacc trees side by side (issue 32: signing and checking the
cache must cost little at start and nothing per call).

Each sample is a fresh ``python`` process with its own ``PYACC_CACHE_DIR`` (filled by one
unmeasured process per tree first) that imports pyacc, decorates two kernels (a
``parallel_loop`` saxpy and a ``reduction(+)`` dot) and times, inside the process, their
first calls together (load the cached module, check it, load Numba's machine code) and
then the median of 2000 warm saxpy calls. Trees alternate sample by sample; the figures
are medians. Device ``host`` (``ACC_DEVICE_TYPE`` when set); the children's stderr is
passed on.

Run: ``python benchmarks/bench_cold_start.py [--before REV] [--samples N] [--smoke]``.
``--before`` (default ``2edbb74``, the last commit before issue 32) is checked out as a
``git worktree`` in a temporary folder and compared with this tree. ``--smoke``: this
tree only, two samples, no figures written.
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

ROOT = Path(__file__).resolve().parent.parent

#: the two kernels every cold-start child decorates (``bench_cuda.py``'s too)
KERNELS = r"""
@acc.parallel_loop
def saxpy(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]

@acc.parallel_loop(reduction="+:s")
def dot(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s
"""

#: what every cold-start child times (``bench_cuda.py``'s too), given ``x``, ``y`` and
#: ``WARM``: the first calls of both kernels (``first``, the dot's result ``total``),
#: then ``WARM`` calls of saxpy, each timed (``warm``)
CALLS = r"""
t = time.perf_counter()
saxpy(2.0, x, y)
total = dot(x, y)
first = time.perf_counter() - t
warm = []
for _ in range(WARM):
    t = time.perf_counter()
    saxpy(2.0, x, y)
    warm.append(time.perf_counter() - t)
"""

CHILD = r"""
import json, statistics, sys, time
t0 = time.perf_counter()
import numpy as np
import pyacc as acc
imported = time.perf_counter() - t0
""" + KERNELS + r"""
x = np.ones(1000); y = np.zeros(1000)
WARM = 2000
""" + CALLS + r"""
assert y[0] == 2.0 * 2001
print(json.dumps({"file": acc.__file__, "import_s": imported, "first_s": first,
                  "warm_us": statistics.median(warm) * 1e6}))
"""


def stage(tree: Path, folder: Path) -> Path:
    """An importable ``pyacc`` of ``tree`` (the installed layout: mapping/ and compiler/
    as pyacc.mapping and pyacc.compiler) in ``folder``; the C express lane is this tree's
    build when ``tree`` has none (its source must match: checked)."""
    package = folder / "pyacc"
    package.mkdir(parents=True)
    for entry in (tree / "pyacc").iterdir():
        (package / entry.name).symlink_to(entry)
    (package / "mapping").symlink_to(tree / "mapping")
    (package / "compiler").symlink_to(tree / "compiler")
    built = sorted((ROOT / "pyacc").glob("_fastcall*.so"))
    if built and not list((tree / "pyacc").glob("_fastcall*.so")):
        same = (tree / "pyacc" / "_fastcall.c").read_bytes() == (ROOT / "pyacc" / "_fastcall.c").read_bytes()
        if same:
            (package / built[0].name).symlink_to(built[0])
    return folder


def sample(path: Path, cache: Path) -> dict:
    child = path / "cold_start_child.py"  # kernels must live in a file (their source is read)
    if not child.exists():
        child.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=str(path), PYACC_CACHE_DIR=str(cache / "cache"),
               PYACC_CACHE_KEY=str(cache / "cache.key"),
               ACC_DEVICE_TYPE=os.environ.get("ACC_DEVICE_TYPE") or "host")
    out = subprocess.run([sys.executable, str(child)], env=env, capture_output=True,
                         text=True, check=False)
    sys.stderr.write(out.stderr)  # the child's warnings and checker reports, passed on
    if out.returncode:
        raise SystemExit("the child process failed")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["file"].startswith(str(path)):
        raise SystemExit(f"the child imported {result['file']}, not the tree staged in {path}")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="2edbb74", help="the git revision to compare with")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--smoke", action="store_true", help="this tree only, 2 samples, no figures")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pyacc-cold-") as tmp:
        tmp = Path(tmp)
        trees = {"after": stage(ROOT, tmp / "after")}
        if not args.smoke:
            worktree = tmp / "before-tree"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q",
                            str(worktree), args.before], check=True)
            trees["before"] = stage(worktree, tmp / "before")
        try:
            results = run(trees, tmp, 2 if args.smoke else args.samples)
        finally:
            if not args.smoke:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(tmp / "before-tree")], check=False)
    report(results, args)
    return 0


def run(trees: dict, tmp: Path, samples: int) -> dict:
    caches = {name: tmp / f"cache-{name}" for name in trees}
    for name, path in trees.items():
        sample(path, caches[name])  # fills the cache (compiles); not measured
    results = {name: [] for name in trees}
    for _ in range(samples):
        for name, path in trees.items():  # alternated: neighbours' noise hits both
            results[name].append(sample(path, caches[name]))
    return results


def report(results: dict, args) -> None:
    rows = {}
    for name, samples in results.items():
        rows[name] = {key: statistics.median(s[key] for s in samples)
                      for key in ("import_s", "first_s", "warm_us")}
        print(f"{name:>6}: import {rows[name]['import_s'] * 1e3:7.1f} ms   first calls "
              f"{rows[name]['first_s'] * 1e3:7.2f} ms   warm saxpy {rows[name]['warm_us']:6.2f} µs "
              f"(median of {len(samples)} processes)")
    if "before" in rows:
        for key in ("first_s", "warm_us"):
            print(f"after/before {key}: {rows['after'][key] / rows['before'][key]:.3f}")
    if not args.smoke:
        out = Path(__file__).with_name("results_cold_start.json")
        out.write_text(json.dumps({"before": args.before, "medians": rows,
                                   "samples": results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
