"""A write one element past the end of any device block is found at the next check point
(issue 29 item 8; API.md §11 ``memory``): for every dtype size and every block size
(multiples of the 256-byte alignment included, whose blocks have no rounding padding),
whether memory checking was on when the block was allocated (guard zones) or not (the
tail zone every ``emulated`` block keeps), whether the check point is the kernel's end
under ``PYACC_CHECK=memory``, ``pyacc.testing.check("memory")`` called right after the
kernel, or the first check point after the block was freed. The error names the array
(when known), its block and the bytes written."""

import numpy as np
import pytest

import pyacc as acc
from pyacc.mapping.devices.emulated import memcheck_enabled
from pyacc.testing import check


@acc.parallel_loop
def write_one_past(a):
    """Writes a[1..n]: the last write lands one element past the end."""
    for i in range(a.shape[0]):
        a[i + 1] = 7


@acc.parallel_loop(deviceptr="d")
def write_one_past_raw(d):
    for i in range(d.shape[0]):
        d[i + 1] = 7


DTYPES = [np.bool_, np.uint8, np.int16, np.float32, np.int64, np.float64, np.complex128]
#: bytes of the array: one element, small, one short of a unit, exactly 1, 2, 8, 15, 16
#: units (no padding below 4 KiB), and larger blocks with the allocator's gap
SIZES = [16, 80, 240, 256, 512, 2048, 3840, 4096, 8192, 8192 + 16]


def _array(dtype, nbytes):
    itemsize = np.dtype(dtype).itemsize
    return np.zeros(max(nbytes // itemsize, 1), dtype)


def _assert_names_the_write(error, name, nbytes, itemsize):
    """The error names the array, its block [begin,+nbytes] and the element's bytes."""
    assert error.kind == "out of bounds" and error.name == name
    begin, size = error.block
    assert size == nbytes and error.touched == (begin + nbytes, itemsize)
    message = str(error)
    assert f"[{begin:#x},+{nbytes}]" in message and f"[{begin + nbytes:#x},+{itemsize}]" in message
    assert f"offsets {nbytes}..{nbytes + itemsize - 1}, past the end" in message
    if name is not None:
        assert f"'{name}'" in message


@pytest.mark.parametrize("nbytes", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_write_past_a_block_is_found_by_check_memory_called_right_after_it(emulated, dtype, nbytes):
    """The issue's case: no ``PYACC_CHECK`` while the block was allocated, and
    ``pyacc.testing.check("memory")`` as a statement right after the kernel (it said
    nothing: a context manager never entered, and a block of 256 bytes has no padding)."""
    a = _array(dtype, nbytes)
    with acc.data(copy=[a]):
        write_one_past(a)
        with pytest.raises(acc.MemoryCheckError) as raised:
            acc.testing.check("memory")
        acc.testing.check("memory")  # reported once: the tail zone was restored
    _assert_names_the_write(raised.value, "a", a.nbytes, a.itemsize)
    assert not memcheck_enabled()  # a check point does not switch checking on


@pytest.mark.parametrize("nbytes", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_write_past_a_block_allocated_before_checking_began_is_found_at_the_kernels_end(
        emulated, dtype, nbytes):
    """``with check("memory")`` around the kernel only: the block was allocated with
    checking off (no guard zones), its tail zone still shows the write."""
    a = _array(dtype, nbytes)
    with acc.data(copy=[a]):
        with check("memory"):
            with pytest.raises(acc.MemoryCheckError) as raised:
                write_one_past(a)
    _assert_names_the_write(raised.value, "a", a.nbytes, a.itemsize)
    assert "after kernel 'write_one_past'" in str(raised.value)


@pytest.mark.parametrize("nbytes", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_write_past_a_guarded_block_is_found_at_the_kernels_end(emulated, dtype, nbytes):
    """Checking on from the mapping (``PYACC_CHECK=memory``): the block's guard zone."""
    a = _array(dtype, nbytes)
    with check("memory"):
        with pytest.raises(acc.MemoryCheckError) as raised:
            with acc.data(copy=[a]):
                write_one_past(a)
    _assert_names_the_write(raised.value, "a", a.nbytes, a.itemsize)


@acc.parallel_loop
def add_one_past(a):
    """a[i + 1] += 2: the last update reads and writes one element past the end."""
    for i in range(a.shape[0]):
        a[i + 1] += 2


@acc.parallel_loop
def atomic_add_one_past(a):
    for i in range(a.shape[0]):
        acc.atomic.add(a, i + 1, 2)


@pytest.mark.parametrize("region", [add_one_past, atomic_add_one_past])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=lambda d: np.dtype(d).name)
def test_a_read_modify_write_past_a_block_is_found(emulated, dtype, region):
    """The guard bytes read as an ordinary number of every dtype (``GUARD_BYTE``): adding
    to it changes them (0xFB… read as a float64 was -1.7e289, which absorbed the add)."""
    a = np.zeros(24, dtype)
    with check("memory"):
        with pytest.raises(acc.MemoryCheckError, match="out of bounds"):
            with acc.data(copy=[a]):
                region(a)


@pytest.mark.parametrize("nbytes", [16, 256, 2048, 4096])
@pytest.mark.parametrize("dtype", [np.uint8, np.float64, np.complex128], ids=lambda d: np.dtype(d).name)
def test_a_write_past_a_block_freed_before_the_check_point_is_still_found(emulated, dtype, nbytes):
    """The block's free checks its tail zone and keeps the finding for the next check
    point (the region ended before anyone checked)."""
    a = _array(dtype, nbytes)
    with acc.data(copy=[a]):
        write_one_past(a)
    with pytest.raises(acc.MemoryCheckError) as raised:
        acc.testing.check("memory")
    _assert_names_the_write(raised.value, None, a.nbytes, a.itemsize)
    assert "mapping ended before this check point" in str(raised.value)
    acc.testing.check("memory")  # reported once


def _one_element_wider(device_array):
    """A view of a device array's memory one element longer (a write past its end from
    the host, which no kernel's check point sees)."""
    pool = device_array.base
    offset = device_array.__array_interface__["data"][0] - pool.__array_interface__["data"][0]
    return np.ndarray((device_array.size + 1,), device_array.dtype, buffer=pool, offset=offset)


def test_a_block_freed_under_the_checker_is_named_from_its_mappings_end(emulated):
    """Mapped before the checker was installed, written past and freed while it
    listens: its free finds the write, the end of ``acc.delete`` reports it, named from
    the mapping's end (EXIT_DATA)."""
    a = np.zeros(32)
    acc.copyin(a)
    with check("memory"):
        _one_element_wider(acc.deviceptr(a))[32] = 1.5
        with pytest.raises(acc.MemoryCheckError) as raised:
            acc.delete(a)
    _assert_names_the_write(raised.value, "a", 256, 8)
    assert "found at acc.delete" in str(raised.value)


@pytest.mark.parametrize("nbytes", [8, 256, 4096])
def test_a_write_past_acc_malloc_memory_is_found_by_the_next_check_point(emulated, nbytes):
    d = acc.malloc((nbytes // 8,), np.float64)
    write_one_past_raw(d)
    with pytest.raises(acc.MemoryCheckError) as raised:
        acc.testing.check("memory")
    _assert_names_the_write(raised.value, None, nbytes, 8)
    assert "acc.malloc memory" in str(raised.value)
    acc.free(d)


def test_check_memory_called_on_a_correct_program_is_silent(emulated):
    a, d = np.arange(64.0), acc.malloc((64,), np.float64)
    with acc.data(copy=[a]):
        write_one_past(a[:-1])  # writes a[1..63]: inside the block
        acc.memcpy_to_device(d, a)
        acc.testing.check("memory")
    acc.free(d)
    acc.testing.check("memory")
    assert a[-1] == 7


def test_check_with_an_unknown_mode_raises_before_anything(emulated):
    with pytest.raises(acc.InvalidArgumentError, match="unknown mode"):
        acc.testing.check("memroy")


@acc.parallel_loop("copyout(h)")
def counts_into(h):
    for i in range(h.shape[0]):
        h[i] += 1


@pytest.mark.parametrize("dtype, shows", [(np.float64, np.isnan), (np.float32, np.isnan),
                                          (np.int32, lambda v: v == 0)],
                         ids=["float64", "float32", "int32"])
def test_device_memory_nothing_wrote_reads_as_undefined_under_the_checker(emulated, dtype,
                                                                          shows):
    """OpenACC 3.3 §2.7.8: a ``copyout`` (``create``) block's values are undefined until
    written. Under ``PYACC_CHECK=memory`` they are ``UNDEFINED_BYTE`` (NaN as a float, -1
    as a signed integer: ``h[i] += 1`` reads back NaN, 0), not the zeros a fresh arena
    holds, so reading them shows (the classroom ``copyout(hist)`` with ``hist[j]++``)."""
    h = np.full(64, 5, dtype)
    with check("memory"):
        counts_into(h)
    assert shows(h).all(), h
    h[:] = 5
    with check("memory"):
        with acc.data(create=[h]):
            acc.update(device=[h])  # written by the copy: defined
            counts_into(h)
            acc.update(self=[h])
    assert (h == 6).all()
