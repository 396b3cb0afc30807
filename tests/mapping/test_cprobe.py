"""The C searches of the present table (mapping/_cprobe.c) give the Numba functions'
answers (mapping/_probe.py) for every array view and table, and refuse what they cannot
read with TypeError, so that callers take the pure-Python search."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pyacc.mapping import _probe
from tests.relayout import relayout

_cprobe = pytest.importorskip("pyacc.mapping._cprobe", reason="built without a C compiler")

MAX = np.iinfo(np.int64).max


def _bounds(ranges, capacity=8):
    bounds = np.full((2, max(capacity, len(ranges))), MAX, dtype=np.int64)
    for slot, (begin, end) in enumerate(sorted(ranges)):
        bounds[:, slot] = begin, end
    return bounds


BASE = np.arange(4096, dtype=np.float64).reshape(64, 64)
VIEWS = st.tuples(st.integers(0, 63), st.integers(1, 64), st.sampled_from([1, 2, 3, -1, -2]),
                  st.integers(0, 63), st.integers(0, 64), st.sampled_from([1, 2, -1]))


def _view_index(spec):
    """Row and column slices, any step sign (a negative step walks back from the far end)."""
    row, rows, row_step, column, columns, column_step = spec
    rows_slice = slice(row, row + rows, row_step) if row_step > 0 else slice(row + rows, row, row_step)
    columns_slice = (slice(column, column + columns, column_step) if column_step > 0
                     else slice(column + columns, column, column_step))
    return rows_slice, columns_slice


def _view(spec):
    return BASE[_view_index(spec)]


@settings(max_examples=300, deadline=None)
@given(VIEWS, st.lists(st.tuples(st.integers(0, 40000), st.integers(1, 9000)), max_size=5))
def test_cprobe_contained_index_answers_as_the_numba_search(spec, pieces):
    view = _view(spec)
    base = BASE.ctypes.data
    ranges, end = [], 0
    for offset, length in pieces:  # non-overlapping ranges around and inside BASE's bytes
        begin = max(end, offset)
        ranges.append((base - 1000 + begin, base - 1000 + begin + length))
        end = begin + length
    bounds = _bounds(ranges)
    expected = _probe._contained_index_numba(bounds, view)
    assert _cprobe.contained_index(bounds, view) == expected
    assert _probe.contained_index_python(bounds, view) == expected


@settings(max_examples=200, deadline=None)
@given(VIEWS, st.sampled_from(["<f8", ">f8", "<i2", "u1", "<c16"]))
def test_cprobe_extent_is_the_numba_extent_for_any_view_and_dtype(spec, dtype):
    view = np.zeros((64, 64), dtype=dtype)[_view_index(spec)]
    expected = _probe._extent_python(view)
    assert _cprobe.extent(view) == expected
    if view.dtype.isnative:
        assert tuple(_probe._extent(view)) == expected


def test_cprobe_empty_and_zero_dimensional_arrays():
    bounds = _bounds([(0, MAX - 1)])
    empty = np.zeros((3, 0))
    assert _cprobe.contained_index(bounds, empty) == -1
    data = empty.ctypes.data
    assert _cprobe.extent(empty) == (data, data, data)
    scalar = np.zeros((), dtype=np.int32)
    assert _cprobe.extent(scalar) == (scalar.ctypes.data, scalar.ctypes.data, scalar.ctypes.data + 4)
    assert _cprobe.contained_index(bounds, scalar) == 0


def test_cprobe_refuses_what_it_cannot_read_with_type_error():
    bounds = _bounds([])
    with pytest.raises(TypeError):
        _cprobe.contained_index(bounds, [1.0, 2.0])
    with pytest.raises(TypeError):
        _cprobe.extent(memoryview(b"abc"))
    with pytest.raises(TypeError):
        _cprobe.contained_index(bounds.astype(np.int32), np.zeros(3))
    with pytest.raises(TypeError):
        _cprobe.contained_index(np.asfortranarray(bounds), np.zeros(3))
    with pytest.raises(TypeError):
        _cprobe.contained_index(bounds)


def test_cprobe_is_what_the_table_uses():
    assert _probe._contained_index is _cprobe.contained_index
    assert _probe.extent(np.zeros(4))[2] - _probe.extent(np.zeros(4))[1] == 32
    swapped = np.zeros(4, dtype=">f8")  # Numba cannot type it: same answer through C
    assert _probe.extent(swapped) == _probe._extent_python(swapped)


def test_cprobe_same_layout_compares_shape_strides_and_dtype_object():
    a = np.zeros((4, 6))
    assert _cprobe.same_layout(a, np.ones((4, 6))) is True
    assert _cprobe.same_layout(a, np.ones((6, 4))) is False
    assert _cprobe.same_layout(a, np.ones((4, 6), order="F")) is False
    assert _cprobe.same_layout(a, np.ones((4, 6), dtype=np.float32)) is False
    assert _cprobe.same_layout(a, np.ones(24)) is False
    assert _cprobe.same_layout(a, [[0.0] * 6] * 4) is None  # not numpy: the caller compares


def test_a_cached_device_view_follows_its_array_reshaped_in_place(emulated):
    import pyacc as acc

    a = np.arange(12.0)
    d = acc.copyin(a)
    assert acc.copyin(a) is d  # the cached view
    relayout(a, shape=(3, 4))  # the same memory, another layout
    d2 = acc.copyin(a)
    assert d2.shape == (3, 4) and np.array_equal(d2, a)
    relayout(a, dtype=np.int64)  # and another dtype
    assert acc.copyin(a).dtype == np.int64
    acc.delete(a, finalize=True)


class _Sub(np.ndarray):
    pass


@pytest.mark.parametrize("make, expected", [
    (lambda: np.zeros(5), True), (lambda: np.zeros((3, 4), order="F"), True),
    (lambda: np.zeros(()), True), (lambda: np.zeros((4, 4))[:, ::2], False),
    (lambda: np.zeros(5).view(_Sub), False), (lambda: [1.0, 2.0], False), (lambda: None, False),
])
def test_cprobe_plain_block_is_the_data_apis_hot_path_test(make, expected):
    x = make()
    assert _cprobe.plain_block(x) is expected
    python = type(x) is np.ndarray and (x.flags.c_contiguous or x.flags.f_contiguous)
    assert bool(python) is expected
