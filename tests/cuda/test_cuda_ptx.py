"""Every cuda-target kernel of ``cases.py`` compiled by NVVM to PTX for an H100
(compute capability 9.0) — what numba-cuda does at a kernel's first launch on a real
GPU — without a GPU: the driver runs on host arrays, and each launch compiles the
kernel for the launch's argument types instead of running it. Needs NVVM (the
``nvidia-cuda-nvcc-cu12`` wheel that ``numba-cuda[cu12]`` installs); skipped without it.
"""
from __future__ import annotations

import numba
import numpy as np
import pytest

from cases import CASES

from compiler import CompileError, analyze, cuda_runtime, get_kernel, parse_clauses

cuda = pytest.importorskip("numba.cuda")
if cuda_runtime.SIMULATED:  # pragma: no cover - conftest keeps this file out
    pytest.skip("compiles for a real GPU", allow_module_level=True)

CAPABILITY = (9, 0)


def _nvvm_available() -> bool:
    def probe(a):
        a[0] = 1.0
    try:
        cuda.compile_ptx(probe, (numba.float64[:],), cc=CAPABILITY)
    except Exception:  # noqa: BLE001 - any failure means no usable NVVM here
        return False
    return True


pytestmark = pytest.mark.skipif(not _nvvm_available(),
                                reason="NVVM not found (pip install 'numba-cuda[cu12]')")


class _CompileInsteadOfLaunch:
    """Stands in for a kernel in the driver's module: ``kernel[grid, block, stream](*args)``
    compiles it to PTX for the types of ``args`` and records the result."""

    def __init__(self, dispatcher, compiled):
        self.dispatcher = dispatcher
        self.compiled = compiled

    def __getitem__(self, configuration):
        def launch(*args):
            signature = tuple(numba.typeof(a) for a in args)
            ptx, _ = cuda.compile_ptx(self.dispatcher.py_func, signature, cc=CAPABILITY)
            self.compiled.append((self.dispatcher.py_func.__name__, ptx))
        return launch


@pytest.fixture
def compile_only(monkeypatch):
    """Drivers run on host arrays and compile their kernels instead of launching them."""
    monkeypatch.setattr(cuda_runtime, "_empty", lambda shape, dtype: np.zeros(shape, dtype))
    monkeypatch.setattr(cuda_runtime, "_multiprocessors", [132])
    # routines (device functions) are compiled for the current device's capability,
    # which needs a GPU: name the H100's instead
    from numba.cuda import dispatcher
    monkeypatch.setattr(dispatcher, "get_current_device",
                        lambda: type("H100", (), {"compute_capability": CAPABILITY})())
    compiled = []

    def run(info, args):
        kernel = get_kernel(info, args, target="cuda", device_type="cuda")
        module = kernel.driver.__globals__
        for name, value in list(module.items()):
            if name.startswith(("_acc_k", "_acc_s")) and hasattr(value, "py_func"):
                monkeypatch.setitem(module, name, _CompileInsteadOfLaunch(value, compiled))
        kernel(*args)
        return compiled

    return run


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_kernel_compiles_to_ptx(case, compile_only):
    compiled = compile_only(case.info(), case.make_args())
    if case.name != "initial_value_participates_once_with_empty_loop":
        assert compiled, "no kernel was launched"
    for name, ptx in compiled:
        assert ".entry" in ptx and f".target sm_{CAPABILITY[0]}{CAPABILITY[1]}" in ptx, name


def test_reductions_use_shared_memory_and_one_partial_per_block(compile_only):
    case = next(c for c in CASES if c.name == "every_operator_on_floats")
    (name, ptx), = compile_only(case.info(), case.make_args())
    assert ".shared" in ptx and "bar.sync" in ptx


def test_atomics_are_hardware_atomics(compile_only):
    case = next(c for c in CASES if c.name == "atomic_histogram")
    (name, ptx), = compile_only(case.info(), case.make_args())
    assert "atom.global.add" in ptx or "red.global.add" in ptx


def untypable(a):
    for i in range(a.shape[0]):
        a[i] = "text"


def test_typing_errors_point_at_the_user_loop(compile_only):
    info = analyze(untypable, parse_clauses("parallel_loop"))
    with pytest.raises(CompileError) as raised:
        compile_only(info, (np.zeros(4),))
    first = untypable.__code__.co_firstlineno
    assert raised.value.lineno in (first + 1, first + 2)  # the loop, or the statement
    assert raised.value.filename == __file__
    assert "_acc_k" not in str(raised.value).split("\n")[0]


def test_launch_shape_follows_the_clauses(monkeypatch):
    monkeypatch.setattr(cuda_runtime, "_multiprocessors", [132])
    assert cuda_runtime.launch_shape(1000, 128, None, False) == (8, 128)
    assert cuda_runtime.launch_shape(10**9, 256, None, True) == (8 * 132, 256)
    assert cuda_runtime.launch_shape(10**9, 64, 7, False) == (7, 64)
    assert cuda_runtime.launch_shape(1, 128, None, False) == (1, 128)


class _WarnsLikeNumbaCuda:
    """A kernel whose launch configuration warns as numba-cuda's does for small grids."""

    def __init__(self):
        self.launched = []

    def __getitem__(self, configuration):
        grid = configuration[0]
        if grid < 128:
            import warnings
            from numba.core.errors import NumbaPerformanceWarning
            warnings.warn(NumbaPerformanceWarning(f"Grid size {grid} will likely result in "
                                                  "GPU under-utilization due to low occupancy."))
        return lambda *args: self.launched.append((configuration, args))


def test_small_grids_pyacc_chose_do_not_warn_of_low_occupancy(recwarn):
    kernel = _WarnsLikeNumbaCuda()
    cuda_runtime.launch(kernel, 1, 1, (1.0,))      # a single-thread run
    cuda_runtime.launch(kernel, 3, 128, ())        # a small problem
    assert not recwarn.list
    assert kernel.launched == [((1, 1, 0), (1.0,)), ((3, 128, 0), ())]
