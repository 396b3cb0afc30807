"""OpenMP kernels compile to the same code as the OpenACC ones (issue 20, API.md §9).

``pyacc.omp``'s compute decorators translate their clauses into pyacc's and go through
the same ``compiler.analyze`` / ``compiler.get_kernel``. Checked here on the generated
kernel modules themselves (the text ``compiler.get_kernel`` writes and imports; the first
line is a header naming the function and its file:line):

- the benchmark kernels of ``benchmarks/bench_compute.py`` (``acc_*`` and their OpenMP
  spelling ``omp_*``, the ones ``benchmarks/suite.py`` times side by side) generate the
  same module text, header aside, on the host and the emulated device;
- one function decorated both ways lands in the very same kernel-cache file;
- the comparison can fail: a clause that changes the code (no ``collapse``) or another
  kernel gives different text.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from pyacc import compiler
import pyacc as acc
from pyacc import omp

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench_compute():
    """``benchmarks/bench_compute.py`` as a module (it puts ``benchmarks/`` on sys.path
    for its own imports; that is undone afterwards)."""
    path = list(sys.path)
    spec = importlib.util.spec_from_file_location("_pyacc_test_bench_compute", BENCHMARKS / "bench_compute.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path[:] = path


def generated(region, args, device_type: str = "host") -> tuple[str, list[str]]:
    """(file, lines without the header and the signature) of the kernel
    ``compiler.get_kernel`` builds for ``region`` called with ``args`` on the CPU target
    for ``device_type`` (the signature covers the header, so it differs too)."""
    kernel = compiler.get_kernel(region.info, list(args), target="cpu", device_type=device_type)
    filename = kernel.py_func.__code__.co_filename
    lines = Path(filename).read_text().splitlines()
    assert lines[0].startswith("# pyacc generated kernel for "), lines[0]
    assert lines[-1].startswith("# pyacc-signature: "), lines[-1]
    return filename, lines[1:-1]


def problems():
    rng = np.random.default_rng(0)
    x, y = rng.random(101), rng.random(101)
    u = rng.random((12, 9))
    a, b = rng.random((7, 5)), rng.random((5, 6))
    return {"saxpy": (2.0, x, y), "jacobi": (u, u.copy()), "dot": (x, y),
            "matmul": (a, b, np.zeros((7, 6)))}


@pytest.mark.parametrize("device_type", ["host", "emulated"])
@pytest.mark.parametrize("kernel", ["saxpy", "jacobi", "dot", "matmul"])
def test_benchmark_kernels_generate_the_same_code(bench_compute, kernel, device_type):
    args = problems()[kernel]
    acc_file, acc_code = generated(getattr(bench_compute, f"acc_{kernel}"), args, device_type)
    omp_file, omp_code = generated(getattr(bench_compute, f"omp_{kernel}"), args, device_type)
    assert acc_file != omp_file  # two functions: two modules, compared line by line
    assert omp_code == acc_code
    assert len(acc_code) > 5  # a real kernel module, not an empty comparison


def test_benchmark_kernels_run_alike(bench_compute):
    """The same code gives the same results (the suite checks this too, at its start)."""
    for kernel, args in problems().items():
        acc_args = [arg.copy() if isinstance(arg, np.ndarray) else arg for arg in args]
        omp_args = [arg.copy() if isinstance(arg, np.ndarray) else arg for arg in args]
        arrays = [arg for arg in acc_args + omp_args if isinstance(arg, np.ndarray)]
        with acc.data(copy=arrays):  # Jacobi's clauses say present
            acc_result = getattr(bench_compute, f"acc_{kernel}")(*acc_args)
            omp_result = getattr(bench_compute, f"omp_{kernel}")(*omp_args)
        assert acc_result == omp_result, kernel
        for left, right in zip(acc_args, omp_args):
            assert np.array_equal(left, right), kernel


def _stencil(u, unew):
    n, m = u.shape
    err = 0.0
    for i in range(1, n - 1):
        for j in range(1, m - 1):
            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
            err = max(err, abs(unew[i, j] - u[i, j]))
    return err


def test_one_function_both_ways_is_one_kernel_cache_entry():
    openacc = acc.parallel_loop(collapse=2, reduction="max:err", present="u unew")(_stencil)
    openmp = omp.target_teams_distribute_parallel_for(
        "map(present, tofrom: u, unew) collapse(2) reduction(max: err)")(_stencil)
    u = np.random.default_rng(1).random((10, 11))
    acc_file, acc_code = generated(openacc, (u, u.copy()))
    omp_file, omp_code = generated(openmp, (u, u.copy()))
    assert omp_file == acc_file and omp_code == acc_code


def test_the_comparison_tells_different_code_apart(bench_compute):
    """Without ``collapse(2)`` the OpenMP kernel parallelises the outer loop only: other
    code, which the comparison above would catch; and two different kernels differ."""
    outer_only = omp.target_teams_distribute_parallel_for(
        "map(present, tofrom: u, unew) reduction(max: err)")(_stencil)
    collapsed = acc.parallel_loop(collapse=2, reduction="max:err", present="u unew")(_stencil)
    u = np.random.default_rng(2).random((10, 11))
    assert generated(outer_only, (u, u.copy()))[1] != generated(collapsed, (u, u.copy()))[1]
    args = problems()
    assert generated(bench_compute.omp_saxpy, args["saxpy"])[1] != \
        generated(bench_compute.acc_dot, args["dot"])[1]
