"""Two trees side by side: per-call costs of the hot paths, alternated, in one run.

For comparing a change against an earlier commit on a noisy VM: each tree is a checkout
with its own virtual environment (``.venv``, extensions built: ``pip install -e .``),
and the measures run in one process per tree and device, the trees alternated for
``--rounds`` rounds; each figure is the median of the rounds' best-of-5 ``timeit``.

Measures (µs per call): a compute call (trivial kernel, 3 present arrays of 1,000
elements, inside a data region: the express lane), the same call with ``async_=1`` (one
wait at the end), with a wait after each call, ``acc.data(present=)`` entered and left,
and the data API on present data (8 elements).

Run: ``python benchmarks/bench_trees.py OLD_TREE NEW_TREE [--rounds 5]``; or
``python benchmarks/bench_trees.py --child DEVICE`` to print one tree's measures as JSON
(what the driver runs in each tree's interpreter); ``--smoke``: this tree's measures once
with a few calls each (tests/test_benchmarks_checked.py). Results: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import timeit

DEVICES = ("host", "emulated")


def measure(device: str, smoke: bool = False) -> dict:
    """This interpreter's pyacc, on ``device``: µs per call of each measure (``smoke``:
    each measure a few calls, once)."""
    import numpy as np
    import pyacc as acc

    acc.set_device_type(device)

    @acc.parallel_loop
    def add(a, b, c):
        for i in range(a.shape[0]):
            c[i] = a[i] + b[i]

    a, b, c = np.ones(1000), np.ones(1000), np.zeros(1000)
    x = np.ones(8)
    acc.copyin(x)

    def best(function, calls):
        calls = 3 if smoke else calls
        return min(timeit.repeat(function, number=calls, repeat=1 if smoke else 5)) / calls * 1e6

    def region():
        with acc.data(present=[a]):
            pass

    def async_then_wait():
        add(a, b, c, async_=1)
        acc.wait(1)

    out = {}
    with acc.data(copyin=[a, b], copyout=[c]):
        for _ in range(3 if smoke else 300):  # compiled, replayed, the crossover measured
            add(a, b, c)
            add(a, b, c, async_=1)
            acc.wait(1)  # (both write c: the queued call must end before the next one)
        out["compute call"] = best(lambda: add(a, b, c), 20000)
        out["async call"] = best(lambda: add(a, b, c, async_=1), 20000)
        acc.wait(1)
        out["async call + wait"] = best(async_then_wait, 20000)
        out["data(present) enter+exit"] = best(region, 5000)
        out["is_present"] = best(lambda: acc.is_present(x), 50000)
        out["copyin+delete (pair)"] = best(lambda: (acc.copyin(x), acc.delete(x)), 20000)
        out["create+copyout (pair)"] = best(lambda: (acc.create(x), acc.copyout(x)), 20000)
        out["update_device (8)"] = best(lambda: acc.update_device(x), 20000)
    acc.delete(x)
    return out


def compare(trees, rounds: int) -> dict:
    """``{(measure, device): {tree: [µs per round]}}``, the trees alternated."""
    samples = collections.defaultdict(lambda: collections.defaultdict(list))
    for _ in range(rounds):
        for tree in trees:
            python = os.path.join(tree, ".venv", "bin", "python")
            for device in DEVICES:
                result = subprocess.run([python, os.path.abspath(__file__), "--child", device],
                                        cwd=tree, capture_output=True, text=True, check=True)
                for name, value in json.loads(result.stdout.splitlines()[-1]).items():
                    samples[(name, device)][tree].append(value)
    return samples


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", help="two checkouts, each with its .venv")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", choices=DEVICES, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="this tree's measures once, tiny")
    args = parser.parse_args()
    if args.smoke:
        for device in DEVICES:
            print(device, json.dumps(measure(device, smoke=True)))
        return
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    if len(args.trees) != 2:
        parser.error("give two trees: the old and the new")
    old, new = args.trees
    print(f"| measure | device | {old} µs | {new} µs | new ÷ old | spread old | spread new |")
    print("|---|---|---:|---:|---:|---|---|")
    for (name, device), by_tree in compare(args.trees, args.rounds).items():
        before, after = statistics.median(by_tree[old]), statistics.median(by_tree[new])
        print(f"| {name} | {device} | {before:.2f} | {after:.2f} | {after / before:.2f} | "
              f"{min(by_tree[old]):.2f}–{max(by_tree[old]):.2f} | "
              f"{min(by_tree[new]):.2f}–{max(by_tree[new]):.2f} |")


if __name__ == "__main__":
    sys.exit(main())
