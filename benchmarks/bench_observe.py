"""What the diagnostics cost (issue: observability).

Measures, side by side, with the runs of every variant interleaved round-robin (the
machines are noisy) and medians over rounds, the per-call cost of a trivial compute region
on three present arrays, of ``acc.is_present`` and of ``acc.copyin``+``acc.delete`` of
present data, in fresh processes (``_observe_child.py``) for:

- ``baseline``: pyacc as it was before the diagnostics existed (commit ``--baseline``,
  checked out into a temporary git worktree);
- ``off``: this tree, nothing enabled — the target: ≤ 3% over the baseline on the kernel
  call and ``is_present``;
- ``notify=3``, ``time``, ``trace``, ``check``: this tree with one diagnostic on (the
  notify lines go to /dev/null);
- ``memory``, ``stale``, ``all checks``: the ``PYACC_CHECK`` modes of API.md §11 alone
  and together (``counters,memory,stale``).

Run: ``python benchmarks/bench_observe.py [--quick] [--smoke] [--baseline COMMIT] [--json FILE]``.
``--smoke`` runs every variant's child once with a few calls, in this tree only (no
baseline worktree), the caller's ``PYACC_*`` settings kept under each variant's, the
children's stderr passed through; no figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHILD = os.path.join(HERE, "_observe_child.py")
#: the last commit before the event stream grew DONE / DIRECTIVE_END and the diagnostics
BASELINE = "b618752"

sys.path.insert(0, HERE)
from bench_runtime import machine_description  # noqa: E402


def variants(trace_path: str) -> dict[str, dict]:
    return {"off": {}, "notify=3": {"PYACC_NOTIFY": "3"}, "time": {"PYACC_TIME": "1"},
            "trace": {"PYACC_TRACE": trace_path}, "check": {"PYACC_CHECK": "1"},
            "memory": {"PYACC_CHECK": "memory"}, "stale": {"PYACC_CHECK": "stale"},
            "all checks": {"PYACC_CHECK": "counters,memory,stale"}}


def run_child(tree: str, variables: dict, calls: int, repeats: int, smoke: bool = False) -> dict:
    """The child's figures in ``tree`` with ``variables`` set. Measuring, the caller's
    PYACC_* variables are dropped; in a smoke run they are kept (under ``variables``) and
    the child's stderr goes to this process's."""
    environ = {k: v for k, v in os.environ.items() if smoke or not k.startswith("PYACC_")}
    environ.update(variables)
    environ["PYTHONPATH"] = tree
    done = subprocess.run([sys.executable, CHILD, str(calls), str(repeats)], env=environ,
                          stdout=subprocess.PIPE, stderr=None if smoke else subprocess.PIPE,
                          text=True, timeout=600, cwd=tree)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark child failed ({variables}):\n{done.stderr}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if not figures.pop("pyacc").startswith(tree):
        raise RuntimeError(f"the child imported pyacc from outside {tree}")
    return figures


def measure(baseline_tree: str, rounds: int, calls: int, repeats: int) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as scratch:
        runs = {"baseline": (baseline_tree, {})}
        runs.update({name: (ROOT, env) for name, env in
                     variants(os.path.join(scratch, "trace.json")).items()})
        samples: dict = {name: {} for name in runs}
        for _ in range(rounds):
            for name, (tree, environ) in runs.items():
                for figure, value in run_child(tree, environ, calls, repeats).items():
                    samples[name].setdefault(figure, []).append(value)
    return {name: {figure: statistics.median(values) for figure, values in figures.items()}
            for name, figures in samples.items()}


def table(results: dict[str, dict]) -> str:
    figures = list(results["baseline"])
    lines = ["| variant | " + " | ".join(f"{f} (µs)" for f in figures) + " |",
             "|---|" + "---|" * len(figures)]
    base = results["baseline"]
    for name, row in results.items():
        cells = [f"{row[f]:.2f}" + ("" if name == "baseline" else f" ({row[f] / base[f]:.3f}×)")
                 for f in figures]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare against")
    parser.add_argument("--smoke", action="store_true",
                        help="every variant once, a few calls, this tree only, no figures")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory() as scratch:
            for name, environ in variants(os.path.join(scratch, "trace.json")).items():
                run_child(ROOT, environ, 20, 1, smoke=True)
                print(f"{name}: ran")
        print("smoke run: every variant's child ran once (no baseline, no figures)")
        return 0
    rounds, calls, repeats = (3, 2000, 3) if args.quick else (7, 20000, 5)
    with tempfile.TemporaryDirectory() as worktree:
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", worktree,
                        args.baseline], check=True)
        try:
            results = measure(worktree, rounds, calls, repeats)
        finally:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", worktree], check=False)
    print(f"machine: {machine_description()}")
    print(f"baseline: commit {args.baseline}; {rounds} interleaved rounds, medians\n")
    print(table(results))
    off, base = results["off"], results["baseline"]
    for figure in ("kernel call", "is_present"):
        ratio = off[figure] / base[figure]
        print(f"{figure}: off / baseline = {ratio:.3f} (target ≤ 1.03): "
              f"{'PASS' if ratio <= 1.03 else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as stream:
            json.dump({"machine": machine_description(), "baseline": args.baseline,
                       "results": results}, stream, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
