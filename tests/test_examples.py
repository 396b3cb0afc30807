"""Every example runs at its small size, on ``host`` and on ``emulated``, and passes its
own check against NumPy.

Each example runs in a subprocess (as a user runs it), with ``ACC_DEVICE_TYPE`` selecting
the device; the test asserts exit code 0, the device named in the output and the
example's success line. ``cupy_interop.py`` needs a GPU: without one it must still run,
explain why it skips and exit 0; its data flow is exercised with ``--device emulated``
(NumPy standing in for CuPy). Planted bugs show that the self-checks can fail: a copy
of an example with a kernel or data-movement bug must exit 1 with ``check: FAILED``.

Kernels compile once per process (and are cached on disk, ``PYACC_CACHE_DIR``), so a
first run on a fresh cache is slower than the ~1 s per example of later runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import pyacc as acc

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
OK = "check: matches the NumPy reference"

# example -> (small-size arguments, success line)
CASES = {
    "laplace2d.py": (["--n", "48", "--iterations", "20"], OK),
    "mandelbrot_async.py": (["--n", "64", "--blocks", "4", "--iterations", "50"],
                            "check: async and synchronous images are identical"),
    "saxpy.py": (["--small"], OK),
    "dot.py": (["--small"], OK),
    "matmul.py": (["--small"], OK),
    "histogram.py": (["--small"], OK),
    "unstructured.py": (["--small"], OK),
    "needleman_wunsch.py": (["--small"], OK),
    "kmeans.py": (["--small"], OK),
    "jacobi_omp.py": (["--n", "48", "--iterations", "20"], OK),
    "xsbench.py": (["--small"], OK),
}
# Sizes for the fake cuda device, whose kernels run in Numba's CUDA simulator (~100 µs
# per simulated thread, and atomics take a lock): a few thousand iterations per kernel.
SIMULATOR_ARGS = {
    "laplace2d.py": ["--n", "16", "--iterations", "8"],
    "mandelbrot_async.py": ["--n", "24", "--blocks", "4", "--iterations", "20"],
    "saxpy.py": ["--n", "2000", "--calls", "5"],
    "dot.py": ["--n", "2001"],
    "matmul.py": ["--n", "12"],
    "histogram.py": ["--n", "3000", "--bins", "16"],
    "unstructured.py": ["--n", "300", "--steps", "10"],
    "needleman_wunsch.py": ["--n", "16"],
    "kmeans.py": ["--n", "200", "--features", "4", "--clusters", "3"],
    "jacobi_omp.py": ["--n", "16", "--iterations", "8"],
    "xsbench.py": ["--lookups", "200", "--gridpoints", "10"],
}
DEVICES = ["host", "emulated"] + (["cuda"] if acc.get_num_devices("cuda") else [])
#: PYACC_TESTING_FAKE_CUDA=1: cuda is the host-memory stand-in with simulated kernels
#: (tests/cuda/test_simulator_run.py): the examples run on it, but there is no CuPy
FAKE_CUDA = os.environ.get("PYACC_TESTING_FAKE_CUDA", "0") not in ("", "0")
REAL_GPU = acc.get_num_devices("cuda") > 0 and not FAKE_CUDA
# more lines some runs must print: the transfer summaries count real copies on emulated
# only (saxpy: per call x in, y in and out; in a data region once each)
EXPECTED = {
    ("saxpy.py", "emulated"): ["transfers: 10 to device (400000 B), 5 to host (200000 B), 5 kernel launches",
                               "transfers: 2 to device (80000 B), 1 to host (40000 B), 5 kernel launches"],
    ("saxpy.py", "host"): ["transfers: 0 to device (0 B), 0 to host (0 B), 5 kernel launches"],
    ("laplace2d.py", "emulated"): ["iterations: 20  error:", "1 to host (18432 B)"],
    ("unstructured.py", "emulated"): ["refcounts of the field (structured, dynamic): (0, 1)",
                                      "present after close(): False"],
    # one data region: the score matrix in and out, the substitution scores in (257² int32)
    ("needleman_wunsch.py", "emulated"): ["transfers: 2 to device (528392 B), 1 to host (264196 B), "
                                          "509 kernel launches"],
    # the six SimulationData members in once each, the verification values out (not in)
    ("xsbench.py", "emulated"): ["transfers: 6 to device (1343184 B), 1 to host (160000 B), "
                                 "1 kernel launches"],
}
TIMEOUT = 300  # seconds per run; generous for a cold kernel cache on a loaded machine


def _environment(device: str | None) -> dict:
    """The caller's environment without pyacc/OpenACC settings that would change what
    the examples do (PYACC_DISABLE_JIT, PYACC_NOTIFY, ...); the kernel cache is kept."""
    env = {key: value for key, value in os.environ.items()
           if not (key.startswith(("PYACC_", "ACC_"))
                   and key not in ("PYACC_CACHE_DIR", "PYACC_TESTING_FAKE_CUDA"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    if device is not None:
        env["ACC_DEVICE_TYPE"] = device
    return env


def run_example(name: str, args: list[str], device: str | None):
    """Run ``examples/name`` with ``args``, ``ACC_DEVICE_TYPE=device`` (None: unset)."""
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=ROOT,
                          env=_environment(device), capture_output=True, text=True,
                          timeout=TIMEOUT)


def _explain(result) -> str:
    return f"exit code {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def test_every_example_is_covered():
    """A new example must be added to CASES (or to the GPU and MPI ones below)."""
    others = {"cupy_interop.py", "jacobi_mpi.py"}
    found = {path.name for path in EXAMPLES.glob("*.py") if not path.name.startswith("_")}
    assert found - others == set(CASES)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(CASES))
def test_example_passes_its_check(name, device):
    args, success = CASES[name]
    if device == "cuda" and FAKE_CUDA:
        args = SIMULATOR_ARGS[name]
    if name == "mandelbrot_async.py":
        args = [*args, "--device", device]  # its --device defaults to emulated
    result = run_example(name, args, device)
    assert result.returncode == 0, _explain(result)
    assert success in result.stdout.splitlines(), _explain(result)
    assert f"on the {device} device" in result.stdout, _explain(result)
    assert "FAILED" not in result.stdout + result.stderr, _explain(result)
    for expected in EXPECTED.get((name, device), []):
        assert expected in result.stdout, f"missing {expected!r}\n" + _explain(result)


@pytest.mark.skipif(FAKE_CUDA, reason="the fake cuda device has no CuPy")
@pytest.mark.parametrize("device", DEVICES)
def test_cupy_interop_skips_without_a_gpu(device):
    result = run_example("cupy_interop.py", ["--small"], device)
    assert result.returncode == 0, _explain(result)
    if not REAL_GPU:
        assert "skipped, this example needs a GPU" in result.stdout, _explain(result)
    else:  # pragma: no cover - needs a GPU
        assert OK in result.stdout.splitlines(), _explain(result)


def test_cupy_interop_data_flow_on_emulated():
    """The host_data pipeline with NumPy standing in for CuPy."""
    result = run_example("cupy_interop.py", ["--small", "--device", "emulated"], None)
    assert result.returncode == 0, _explain(result)
    assert OK in result.stdout.splitlines(), _explain(result)
    assert "device arrays from host_data are numpy.ndarray" in result.stdout, _explain(result)


@pytest.mark.gpu
@pytest.mark.skipif(not REAL_GPU, reason="needs a usable cuda device")
def test_cupy_interop_on_the_gpu():  # pragma: no cover - needs a GPU
    result = run_example("cupy_interop.py", ["--small"], None)
    assert result.returncode == 0, _explain(result)
    assert OK in result.stdout.splitlines(), _explain(result)
    assert "device arrays from host_data are cupy." in result.stdout, _explain(result)


# -- the self-checks can fail ---------------------------------------------------------------
# (example, text to replace, replacement, device): a bug planted in a copy of the example
MUTATIONS = [
    # a kernel bug: the reduction skips the last element
    ("dot.py", "for i in range(x.shape[0]):\n        s += x[i] * y[i]",
     "for i in range(x.shape[0] - 1):\n        s += x[i] * y[i]", "host"),
    # a data bug: the host reads the field without update_self (stale on emulated)
    ("unstructured.py", "acc.update_self(self.u)  ", "pass  ", "emulated"),
    # a data bug: the solution is never copied back to the host
    ("laplace2d.py", "with acc.data(copy=[a], create=[anew]):",
     "with acc.data(copyin=[a], create=[anew]):", "emulated"),
    # the OpenMP spelling: map(to:) instead of map(tofrom:) never copies the field back
    ("jacobi_omp.py", "with omp.target_data(map_tofrom=[a], map_alloc=[anew]):",
     "with omp.target_data(map_to=[a], map_alloc=[anew]):", "emulated"),
    # a data bug: the centres the host recomputes never reach the device again
    ("kmeans.py", "while True:\n            acc.update(device=[clusters])",
     "while True:\n            pass", "emulated"),
    # a struct member's section created instead of copied in: the device never gets the
    # concentrations (copyin(SD) does not cover a member that has a clause of its own)
    ("xsbench.py", '"copyin( SD.concs[0:SD.length_concs]) "',
     '"create( SD.concs[0:SD.length_concs]) "', "emulated"),
]


@pytest.mark.parametrize("name, old, new, device", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_planted_bug_fails_the_check(name, old, new, device):
    source = (EXAMPLES / name).read_text()
    assert source.count(old) == 1, f"{name} no longer contains {old!r}: update MUTATIONS"
    # a fixed place, so that the mutant's kernels are found in the kernel cache next time
    folder = Path(tempfile.gettempdir()) / f"pyacc-example-mutants-{os.getuid()}" / name[:-3]
    folder.mkdir(parents=True, exist_ok=True)
    mutant = folder / name
    mutant.write_text(source.replace(old, new))
    args = CASES[name][0]
    result = subprocess.run([sys.executable, str(mutant), *args], cwd=ROOT,
                            env=_environment(device), capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 1, _explain(result)
    assert "check: FAILED" in result.stderr, _explain(result)
