"""Which CUDA kernel compiler the cuda target uses (API.md §12, ``compiler.cuda_compilers``),
and numba-cuda on NumPy without ``np.row_stack`` (NumPy ≥ 2.5)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pyacc import compiler
from pyacc.compiler import analyze, cuda_compilers, get_kernel, parse_clauses

ROOT = Path(__file__).resolve().parents[2]
MLIR, CLASSIC = cuda_compilers.COMPILERS["mlir"], cuda_compilers.COMPILERS["numba-cuda"]


@pytest.fixture
def installed(monkeypatch):
    """``installed(mlir=..., classic=...)``: which compilers look installed."""
    def set_installed(*, mlir: bool, classic: bool):
        present = {MLIR.name: mlir, CLASSIC.name: classic}
        monkeypatch.setattr(cuda_compilers.CudaCompiler, "installed",
                            lambda self: present[self.name])
    monkeypatch.delenv(cuda_compilers.ENVIRONMENT, raising=False)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    return set_installed


def test_numba_cuda_mlir_is_the_default_when_installed(installed):
    installed(mlir=True, classic=True)
    compiler_, reason, how = cuda_compilers._decide()
    assert compiler_ is MLIR and reason is None and "default" in how


def test_numba_cuda_compiles_when_numba_cuda_mlir_is_not_installed(installed):
    installed(mlir=False, classic=True)
    assert cuda_compilers._decide()[0] is CLASSIC


@pytest.mark.parametrize("text, name", [("mlir", "mlir"), ("numba-cuda-mlir", "mlir"),
                                        ("NUMBA-CUDA", "numba-cuda"), ("numba_cuda", "numba-cuda")])
def test_pyacc_cuda_compiler_chooses(installed, monkeypatch, text, name):
    installed(mlir=True, classic=True)
    monkeypatch.setenv(cuda_compilers.ENVIRONMENT, text)
    compiler_, reason, how = cuda_compilers._decide()
    assert compiler_ is cuda_compilers.COMPILERS[name] and f"PYACC_CUDA_COMPILER={text}" == how


def test_a_bad_pyacc_cuda_compiler_is_a_reason_naming_the_choices(installed, monkeypatch):
    installed(mlir=True, classic=True)
    monkeypatch.setenv(cuda_compilers.ENVIRONMENT, "nvcc")
    compiler_, reason, _ = cuda_compilers._decide()
    assert compiler_ is None and "'nvcc'" in reason and "'mlir'" in reason and "'numba-cuda'" in reason


def test_a_chosen_compiler_that_is_not_installed_is_a_reason_naming_the_fix(installed, monkeypatch):
    installed(mlir=False, classic=True)
    monkeypatch.setenv(cuda_compilers.ENVIRONMENT, "mlir")
    compiler_, reason, _ = cuda_compilers._decide()
    assert compiler_ is None and "numba-cuda-mlir" in reason and "pip install" in reason


def test_no_compiler_installed_is_a_reason_naming_the_fix(installed):
    installed(mlir=False, classic=False)
    compiler_, reason, _ = cuda_compilers._decide()
    assert compiler_ is None and "pip install 'pyacc[cuda]'" in reason


def test_the_simulator_is_numba_cudas(installed, monkeypatch):
    installed(mlir=True, classic=True)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    monkeypatch.setattr(cuda_compilers, "simulated", lambda: True)
    assert cuda_compilers._decide()[0] is CLASSIC
    monkeypatch.setenv(cuda_compilers.ENVIRONMENT, "mlir")
    compiler_, reason, _ = cuda_compilers._decide()
    assert compiler_ is None and "simulator" in reason


def test_the_choice_is_made_once_per_process(monkeypatch):
    monkeypatch.setattr(cuda_compilers, "_choice", [])
    first = cuda_compilers.choice()
    monkeypatch.setenv(cuda_compilers.ENVIRONMENT, "nonsense")
    assert cuda_compilers.choice() is first


def saxpy(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


@pytest.mark.skipif(not (MLIR.installed() and CLASSIC.installed()),
                    reason="needs both compilers (pip install 'pyacc[test]')")
def test_the_generated_source_differs_only_in_the_import_of_cuda(monkeypatch, tmp_path):
    """API.md §12: the same generated CUDA source for both compilers, but for the line
    that binds ``cuda`` (so the source hash, and every cache, tells them apart); outside
    the simulator it names the compiler that ``cuda_kernels`` imports when a kernel must
    be compiled."""
    monkeypatch.setenv("PYACC_CACHE_DIR", str(tmp_path))
    sources = {}
    for compiler_ in (MLIR, CLASSIC):
        monkeypatch.setattr(cuda_compilers, "_choice", [(compiler_, None, "the test")])
        info = analyze(saxpy, parse_clauses("parallel_loop"))
        kernel = get_kernel(info, (2.0, np.zeros(4), np.zeros(4)), target="cuda", device_type="cuda")
        *text, signature = Path(kernel.driver.__code__.co_filename).read_text().splitlines()
        assert signature.startswith("# pyacc-signature: ")  # of the text, so it differs too
        sources[compiler_.name] = text
    differing = [(a, b) for a, b in zip(sources["mlir"], sources["numba-cuda"]) if a != b]
    assert len(sources["mlir"]) == len(sources["numba-cuda"])
    assert differing == [("_acc_cuda = _acc_cuda_deferred('mlir')",
                          "_acc_cuda = _acc_cuda_deferred('numba-cuda')")]


def scale(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i]


def test_explain_names_the_compiler_of_the_gpu_kernels(monkeypatch, tmp_path):
    # a function of its own: kernels are shared by every decoration of the same code
    # (compiler/analysis.py memo), so saxpy's GPU kernels from the test above would show
    monkeypatch.setenv("PYACC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_compilers, "_choice", [(CLASSIC, None, "the test")])
    info = analyze(scale, parse_clauses("parallel_loop"))
    args = (2.0, np.zeros(4), np.zeros(4))
    get_kernel(info, args, target="cpu")
    assert "GPU kernels" not in compiler.explain(info, info.notes, info.arg_types)
    get_kernel(info, args, target="cuda", device_type="cuda")
    text = compiler.explain(info, info.notes, info.arg_types)
    assert f"GPU kernels compiled by {CLASSIC.label()} (the test)" in text


@pytest.mark.parametrize("version, lacks, needed", [
    ("0.30.4", True, True), ("0.30.0", True, True), ("0.20.1", True, True),
    ("0.31.0", True, False), ("1.0", True, False), ("0.30.4", False, False), (None, True, False)])
def test_the_row_stack_fix_applies_only_to_numba_cuda_0_30_on_numpy_without_it(version, lacks, needed):
    numpy = type("numpy", (), {} if lacks else {"row_stack": np.vstack})
    assert cuda_compilers.needs_row_stack_fix(version, numpy) is needed


_WITHOUT_ROW_STACK = """
import numpy as np
import numba.np.arrayobj  # Numba's CPU overloads, registered by NumPy version
if hasattr(np, "row_stack"):  # NumPy < 2.5 here: give numba-cuda NumPy 2.5's namespace
    del np.row_stack
import numba
{body}
"""


def _run(body: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    environ["PYTHONPATH"] = str(ROOT)
    code = _WITHOUT_ROW_STACK.format(body=textwrap.dedent(body))
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


_COMPILE = """
def kernel(x):
    x[0] = 1.0
try:
    cuda.compile_ptx(kernel, (numba.float64[:],), cc=(9, 0))
except Exception as error:
    if "row_stack" in str(error):
        raise
    print("compiled or failed for another reason:", type(error).__name__)
else:
    print("compiled")
print("row_stack" if hasattr(np, "row_stack") else "no row_stack")
"""


@pytest.mark.skipif(not CLASSIC.installed(), reason="numba-cuda is not installed")
def test_numba_cuda_compiles_on_numpy_without_row_stack():
    """numba-cuda ≤ 0.30 registers ``overload(np.row_stack)``, which NumPy 2.5 removed:
    its first compile fails with AttributeError (NVIDIA/numba-cuda#907). Loaded through
    ``cuda_compilers.load`` it compiles, and the program never sees an ``np.row_stack``."""
    unfixed = _run("from numba import cuda\n" + _COMPILE)
    assert unfixed.returncode != 0 and "row_stack" in unfixed.stderr  # the fault is real
    fixed = _run("from compiler import cuda_compilers\n"
                 "cuda = cuda_compilers.load(cuda_compilers.COMPILERS['numba-cuda'])\n" + _COMPILE)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert fixed.stdout.splitlines()[-1] == "no row_stack"


def test_a_failed_fix_says_which_packages_fix_it(monkeypatch):
    """Never an AttributeError at the first launch: a clear message before any."""
    def failing(name):
        raise AttributeError("module 'numpy' has no attribute 'row_stack'")

    monkeypatch.delattr(np, "row_stack", raising=False)  # NumPy 2.5's namespace
    monkeypatch.delitem(sys.modules, "numba.cuda.np.arrayobj", raising=False)
    monkeypatch.setattr(cuda_compilers, "needs_row_stack_fix", lambda version: True)
    monkeypatch.setattr(cuda_compilers.importlib, "import_module", failing)
    with pytest.raises(RuntimeError, match=r"numba-cuda-mlir .*pip install 'pyacc\[cuda\]'.*numpy<2.5"):
        cuda_compilers._register_numpy_overloads(CLASSIC)
    assert not hasattr(np, "row_stack")  # the alias lived only during the import


def test_another_failure_of_that_import_is_not_blamed_on_numpy(monkeypatch):
    def failing(name):
        raise ImportError("libcuda bindings are broken")

    monkeypatch.delattr(np, "row_stack", raising=False)
    monkeypatch.delitem(sys.modules, "numba.cuda.np.arrayobj", raising=False)
    monkeypatch.setattr(cuda_compilers, "needs_row_stack_fix", lambda version: True)
    monkeypatch.setattr(cuda_compilers.importlib, "import_module", failing)
    with pytest.raises(ImportError, match="libcuda bindings are broken"):
        cuda_compilers._register_numpy_overloads(CLASSIC)
    assert not hasattr(np, "row_stack")
