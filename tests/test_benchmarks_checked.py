"""Every benchmark runs clean under the checkers (issue 16: "the checkers stay silent on
every example and benchmark"; API.md §11, docs/RELIABILITY.md).

Each script ``benchmarks/bench_*.py`` and ``benchmarks/suite.py`` — found by glob, so a
new benchmark is covered the day it lands — runs as ``python <script> --smoke`` (every
kernel and measure once at tiny sizes, nothing written; the suite's smoke run leaves
PyOMP out and never installs it) in a subprocess:

- on the ``emulated`` device (``ACC_DEVICE_TYPE=emulated``) with every checker on at once:
  ``PYACC_CHECK=counters,memory,stale:error,race:error`` and ``PYACC_AUTOCOMPARE=1``;
- on the ``host`` device with ``PYACC_CHECK=counters,race:error`` (its async queues run on
  worker threads too).

The run must exit 0, and its stderr (children's included: the scripts that start
subprocesses pass the checker settings on and their stderr through) must carry no
checker finding — no consistency, memory, stale or race error or warning, no autocompare
difference or failed host run, no warning at all, no traceback. On ``emulated`` every
autocompare summary must say ``0 differed`` (and there must be one: the check was on).
A script without a ``--smoke`` flag fails with a message saying so. The examples run
under the same checkers in tests/observe/test_checkers.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(path.name for path in BENCHMARKS.glob("bench_*.py")) + ["suite.py"]
CHECKERS = {
    "emulated": {"PYACC_CHECK": "counters,memory,stale:error,race:error", "PYACC_AUTOCOMPARE": "1"},
    "host": {"PYACC_CHECK": "counters,race:error"},
}
#: words that only a checker finding (or a failure) puts on stderr
FINDINGS = ("ConsistencyError", "MemoryCheck", "StaleData", "RaceError", "RaceWarning", "PYACC_CHECK=",
            "pyacc autocompare: ", "Warning", "Traceback")
TIMEOUT = 600  # seconds per run: generous for a cold kernel cache on a loaded machine


def _environment(device: str) -> dict:
    """The caller's environment without pyacc/OpenACC settings (the kernel cache and the
    fake-cuda switch kept), the device type and the checkers of ``device``."""
    env = {key: value for key, value in os.environ.items()
           if not (key.startswith(("PYACC_", "ACC_", "OMP_"))
                   and key not in ("PYACC_CACHE_DIR", "PYACC_TESTING_FAKE_CUDA"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env["ACC_DEVICE_TYPE"] = device
    env.update(CHECKERS[device])
    return env


def _explain(done) -> str:
    return (f"exit code {done.returncode}\n--- stdout (tail)\n{done.stdout[-4000:]}\n"
            f"--- stderr (tail)\n{done.stderr[-8000:]}")


def test_every_benchmark_is_found():
    assert "suite.py" in SCRIPTS and "bench_compute.py" in SCRIPTS and len(SCRIPTS) >= 8


@pytest.mark.parametrize("device", list(CHECKERS))
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_smoke_run_is_clean_under_the_checkers(script, device):
    source = (BENCHMARKS / script).read_text()
    if '"--smoke"' not in source:
        pytest.fail(f"benchmarks/{script} has no --smoke flag: every benchmark must run all its "
                    "kernels once at tiny sizes with `--smoke` (writing nothing, exit 0), so that "
                    "this test can run it under the checkers", pytrace=False)
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), "--smoke"], cwd=ROOT,
                          env=_environment(device), capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, _explain(done)
    found = [line for line in done.stderr.splitlines() if any(word in line for word in FINDINGS)]
    assert not found, "checker findings:\n" + "\n".join(found[:20]) + "\n" + _explain(done)
    if device == "emulated":
        summaries = [line for line in done.stderr.splitlines()
                     if line.startswith("pyacc autocompare summary:")]
        assert summaries, "PYACC_AUTOCOMPARE=1 printed no summary\n" + _explain(done)
        wrong = [line for line in summaries if " 0 differed" not in line or "failed" in line]
        assert not wrong, "\n".join(wrong) + "\n" + _explain(done)
