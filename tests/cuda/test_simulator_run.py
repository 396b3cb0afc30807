"""Runs the simulator tests of this folder in a child pytest started with
NUMBA_ENABLE_CUDASIM=1 (the simulator is chosen when numba.cuda is first imported, so it
cannot be switched on inside this process)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _simulated_pytest(tmp_path, *paths):
    """pytest on ``paths`` in a child process with a fake GPU: the cuda device type
    usable (PYACC_TESTING_FAKE_CUDA=1: host-memory device, kernels in the simulator)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYACC_TESTING_FAKE_CUDA="1",
               PYACC_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("ACC_DEVICE_TYPE", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_workers(), *paths],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return result.stdout


def _workers() -> list[str]:
    """``-n 4`` where pytest-xdist is installed and the machine has cores to spare (a
    GPU machine: this child would otherwise be the suite's longest test by far)."""
    if importlib.util.find_spec("xdist") is None or (os.cpu_count() or 1) < 8:
        return []
    return ["-n", "4"]


def test_cuda_target_under_the_simulator(tmp_path):
    summary = _simulated_pytest(tmp_path, str(HERE)).strip().split("\n")[-1]
    assert " passed" in summary and "skipped" not in summary, summary


def test_suite_with_cuda_as_the_default_device(tmp_path):
    """The runtime, observability and example tests again with a (fake) GPU present:
    cuda is then the default device type, so every test that does not pick a device,
    and every example, runs on the cuda device and its kernels."""
    _simulated_pytest(tmp_path, "tests/pyacc", "tests/observe", "tests/test_examples.py")
