"""Every kernel feature on the cuda target, run in Numba's CUDA simulator and compared
with the same function run as plain Python (collected only under NUMBA_ENABLE_CUDASIM=1)."""
from __future__ import annotations

import numpy as np
import pytest

import pyacc as acc

from cases import CASES

from pyacc import compiler
from pyacc.compiler import CompileError, analyze, get_kernel, parse_clauses


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_cuda_kernel_matches_python(case):
    info = case.info()
    value, arrays = case.run("cuda", info=info)
    expected, expected_arrays = case.run("python", info=info)
    if isinstance(expected, tuple):
        np.testing.assert_allclose(np.array(value, dtype=float),
                                   np.array(expected, dtype=float), rtol=1e-12)
    else:
        assert value == pytest.approx(expected, rel=1e-12) if expected is not None else value is None
    for position, (a, b) in enumerate(zip(arrays, expected_arrays)):
        if isinstance(a, np.ndarray) and position not in case.ignore:
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_reduction_results_keep_their_types():
    case = next(c for c in CASES if c.name == "float32_reduction")
    value, _ = case.run("cuda")
    assert isinstance(value, np.float32) and value == 100
    ints = next(c for c in CASES if c.name == "every_operator_on_ints")
    value, _ = ints.run("cuda")
    assert value[7] == False and value[8] == True  # noqa: E712 - numpy bools


def test_zero_step_raises_like_python():
    from cases import K
    info = analyze(K.backwards, parse_clauses("parallel_loop"))
    args = (np.zeros(3), np.zeros(3), 2, 0)
    with pytest.raises(ValueError):
        get_kernel(info, args, target="cuda", device_type="cuda")(*args)


def test_private_copies_are_not_copied_back():
    case = next(c for c in CASES if c.name == "private_array_and_firstprivate")
    _, arrays = case.run("cuda")
    assert (arrays[1] == 0).all()
    np.testing.assert_allclose(arrays[0], 3 * np.arange(100.0) + 6)


def returns_an_element(a):
    for i in range(a.shape[0]):
        a[i] = 1.0
    return a[0]


def test_returning_an_element_asks_for_a_variable():
    info = analyze(returns_an_element, parse_clauses("parallel"))
    with pytest.raises(CompileError, match="computed into a variable"):
        get_kernel(info, (np.zeros(4),), target="cuda", device_type="cuda")


def test_kernel_is_memoised_per_argument_kinds():
    case = next(c for c in CASES if c.name == "implicit_reduction_int_to_float")
    info = analyze(case.func, parse_clauses("parallel_loop"))
    first = get_kernel(info, (np.zeros(5),), target="cuda", device_type="cuda")
    assert get_kernel(info, (np.zeros(9),), target="cuda", device_type="cuda") is first
    assert get_kernel(info, (np.zeros(5, np.float32),), target="cuda",
                      device_type="cuda") is not first
    assert compiler.get_kernel(info, (np.zeros(5),), target="cpu") is not first


@pytest.mark.parametrize("name", ["private_arrays_made_in_the_region", "array_made_in_the_region"])
def test_arrays_the_region_makes_reach_gpu_kernels_as_device_arrays(name, monkeypatch):
    """No host (NumPy) array is ever a GPU kernel's argument (the real stacks refuse one
    on an async stream): a private array the region makes is not passed at all (each
    thread gets its own row of scratch device memory), and an array the region makes and
    its kernels share becomes one device array before the first kernel takes it."""
    from pyacc.compiler import cuda_runtime

    launched = []
    original = cuda_runtime._simulated_launch

    def recording(kernel, grid, block, args):
        launched.append(args)
        original(kernel, grid, block, args)

    monkeypatch.setattr(cuda_runtime, "_simulated_launch", recording)
    case = next(c for c in CASES if c.name == name)
    value, arrays = case.run("cuda")
    expected, expected_arrays = case.run("python")
    every = [a for args in launched for a in args]
    assert launched and not any(isinstance(a, np.ndarray) for a in every)
    for got, want in zip(arrays, expected_arrays):
        if isinstance(got, np.ndarray):
            np.testing.assert_allclose(got, want, rtol=1e-12)
    shapes = [getattr(a, "shape", None) for a in every]
    if name == "private_arrays_made_in_the_region":  # stencil (4,) and vals (2,): rows only
        assert (4,) not in shapes and (2,) not in shapes
        assert any(shape is not None and shape[1:] == (4,) for shape in shapes)
    else:  # w (3,): one device copy, taken by each of the four kernels
        shared = [a for a in every if getattr(a, "shape", None) == (3,)]
        assert len(shared) == 4 and len({id(a) for a in shared}) == 1


def test_iterations_past_the_grids_limits_take_further_launches(monkeypatch):
    """An uncapped tiled nest's threads never stride (``cuda_target``): columns
    and rows past the grid's limits (here the simulator's 2 tiles of 4) go to further launches,
    each from its first column and row, and every element is computed once."""
    from pyacc.compiler import cuda_runtime

    firsts = []
    original = cuda_runtime._simulated_launch

    def recording(kernel, grid, block, args):
        firsts.append(args[-2:])
        original(kernel, grid, block, args)

    monkeypatch.setattr(cuda_runtime, "_simulated_launch", recording)
    case = next(c for c in CASES if c.name == "tiled_collapse_2_matmul")  # 11 columns
    _, arrays = case.run("cuda")
    _, expected = case.run("python")
    assert firsts == [(0, 0), (8, 0), (0, 8), (8, 8)]  # 11 columns, 9 rows
    np.testing.assert_allclose(arrays[2], expected[2], rtol=1e-12)


def serial_firstprivate(c, d):
    for y in range(c.shape[0]):
        c[y] += 1.0
    for y in range(c.shape[0]):
        d[y] = c[y]


def loop_private_in_serial(c, d):
    for x in acc.loop(range(d.shape[0]), private="c"):
        for y in range(c.shape[0]):
            c[y] = 10.0 * x + y
        d[x] = c[0] + c[c.shape[0] - 1]


def inner_loop_private(a, c):
    for i in acc.loop(range(a.shape[0]), gang=True):
        for j in acc.loop(range(a.shape[1]), vector=True, private="c"):
            for k in range(c.shape[0]):
                c[k] = i * 100.0 + j + k
            a[i, j] = c[0] + c[c.shape[0] - 1]


@pytest.mark.parametrize("func, construct, clauses, expected", [
    (serial_firstprivate, "serial", {"firstprivate": "c"}, [8.0] * 3 + [0.0] * 2),
    (loop_private_in_serial, "serial", {}, [20.0 * x + 2 for x in range(5)]),
])
def test_private_arrays_outside_nests_are_device_copies(func, construct, clauses, expected):
    """OpenACC 3.3 §2.5.14, 2.9.10: the region's or the loop's copy, made by the driver on
    the device (``cuda_runtime.private_copy``); the original device array is unchanged."""
    from numba import cuda
    c, d = cuda.to_device(np.full(3, 7.0)), cuda.to_device(np.zeros(5))
    info = analyze(func, parse_clauses(construct, **clauses))
    get_kernel(info, (c, d), target="cuda", device_type="cuda")(c, d)
    assert list(c.copy_to_host()) == [7.0] * 3
    assert list(d.copy_to_host()) == expected


def test_inner_loop_private_array_is_each_threads_own_row():
    from numba import cuda
    a, c = cuda.to_device(np.zeros((6, 5))), cuda.to_device(np.full(4, 7.0))
    info = analyze(inner_loop_private, parse_clauses("parallel"))
    get_kernel(info, (a, c), target="cuda", device_type="cuda")(a, c)
    assert list(c.copy_to_host()) == [7.0] * 4
    expected = 2 * (100.0 * np.arange(6)[:, None] + np.arange(5)[None, :]) + 3
    np.testing.assert_array_equal(a.copy_to_host(), expected)
