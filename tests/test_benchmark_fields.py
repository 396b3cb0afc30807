"""The benchmark suite's array placement (benchmarks/fields.py): the invariants its
module docstring promises, since every implementation's timings rest on them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import fields  # noqa: E402


@pytest.mark.parametrize("shape, dtype", [((1024, 1024), np.float64), ((1000,), np.float32),
                                          ((3, 5), np.int64)])
def test_apart_arrays_never_share_their_offset_within_a_page(shape, dtype):
    arrays = fields.apart(16, shape, dtype)
    starts = [array.ctypes.data for array in arrays]
    for array in arrays:
        assert array.shape == shape and array.dtype == dtype
        assert array.flags.c_contiguous and array.ctypes.data % fields.LINE == 0
        assert not array.any()
    offsets = {start % 4096 for start in starts}
    assert len(offsets) == 16  # any two differ modulo 4096: no 4K aliasing, no set conflict
    for first, second in zip(arrays, arrays[1:]):  # disjoint, in order
        assert first.ctypes.data + first.nbytes <= second.ctypes.data


def test_apart_refuses_more_arrays_than_offsets():
    with pytest.raises(ValueError, match="count must be 1..16"):
        fields.apart(17, (4,))


def test_problem_arrays_hold_the_suites_data():
    rng = np.random.default_rng(1)
    saxpy = fields.problem_arrays("saxpy", 1000)
    assert np.array_equal(saxpy["x"], rng.random(1000))
    assert np.array_equal(saxpy["y"], rng.random(1000))
    jacobi = fields.problem_arrays("jacobi", 8)
    assert (jacobi["u"][0] == 1).all() and not jacobi["u"][1:].any()
    assert np.array_equal(jacobi["unew"], jacobi["u"]) and np.array_equal(jacobi["start"], jacobi["u"])
    matmul = fields.problem_arrays("matmul", 4)
    rng = np.random.default_rng(1)
    assert np.array_equal(matmul["a"], rng.random((4, 4))) and not matmul["c"].any()
    with pytest.raises(ValueError, match="unknown kernel 'fft'"):
        fields.problem_arrays("fft", 4)
