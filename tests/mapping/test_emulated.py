"""The emulated device: its allocator, separate memory, copies and capacity."""

import numpy as np
import pytest

from pyacc.mapping import EmulatedDevice, InvalidArgumentError, OutOfMemoryError
from pyacc.mapping.devices.emulated import ALIGNMENT, Arena, capacity_from_environment


def test_arena_best_fit_and_coalescing():
    arena = Arena(16 * ALIGNMENT)
    blocks = [arena.allocate(ALIGNMENT) for _ in range(4)]
    assert blocks == [0, ALIGNMENT, 2 * ALIGNMENT, 3 * ALIGNMENT]
    arena.free(blocks[1])
    arena.free(blocks[2])  # coalesces with the block before
    assert arena.allocate(2 * ALIGNMENT) == ALIGNMENT  # fits the merged hole exactly
    assert arena.in_use == 4 * ALIGNMENT
    for offset in (0, ALIGNMENT, 3 * ALIGNMENT):
        arena.free(offset)
    assert arena.in_use == 0 and arena.largest_free == 16 * ALIGNMENT


def test_arena_rounds_to_alignment_and_reports_full():
    arena = Arena(4 * ALIGNMENT)
    assert arena.allocate(1) == 0
    assert arena.in_use == ALIGNMENT
    assert arena.allocate(4 * ALIGNMENT) is None
    assert arena.block_of(10) == (0, ALIGNMENT)
    assert arena.block_of(ALIGNMENT + 1) is None


def test_device_memory_is_separate_from_host_memory():
    device = EmulatedDevice(0, capacity=1 << 16)
    host = np.arange(10.0)
    address = device.allocate(host.nbytes)
    device_array = device.view(address, host)
    assert not np.shares_memory(device_array, host)
    device.upload(device_array, host, device.sync_queue)
    host[:] = 0
    assert device_array[3] == 3.0
    device.download(host, device_array, device.sync_queue)
    assert host[3] == 3.0


def test_strided_copies_move_only_the_view_elements():
    device = EmulatedDevice(0, capacity=1 << 16)
    grid = np.arange(20.0).reshape(4, 5)
    device_grid = device.view(device.allocate(grid.nbytes), grid)
    device.upload(device_grid, grid, device.sync_queue)
    device_grid[:, 2] = -1.0
    device.download(grid[:, 2], device_grid[:, 2], device.sync_queue)
    assert list(grid[:, 2]) == [-1.0] * 4 and grid[0, 1] == 1.0


def test_out_of_memory_message_says_what_to_do():
    device = EmulatedDevice(0, capacity=4 * ALIGNMENT)
    device.allocate(3 * ALIGNMENT)
    with pytest.raises(OutOfMemoryError, match="PYACC_EMULATED_MEMORY"):
        device.allocate(2 * ALIGNMENT)


def test_host_array_is_not_device_memory():
    device = EmulatedDevice(0, capacity=1 << 16)
    device.allocate(64)
    with pytest.raises(InvalidArgumentError, match="is it a host array"):
        device.extent_of(np.zeros(4))


@pytest.mark.parametrize("text, value", [("1024", 1024), ("2K", 2048), ("1.5M", 3 << 19), ("1G", 1 << 30)])
def test_capacity_from_environment(monkeypatch, text, value):
    monkeypatch.setenv("PYACC_EMULATED_MEMORY", text)
    assert capacity_from_environment() == value


@pytest.mark.parametrize("text", ["lots", "-1", "inf", "nan", "G"])
def test_capacity_from_environment_rejects_garbage(monkeypatch, text):
    monkeypatch.setenv("PYACC_EMULATED_MEMORY", text)
    with pytest.raises(InvalidArgumentError, match="PYACC_EMULATED_MEMORY"):
        capacity_from_environment()


# == the tail zone of every block, checking on or off (issue 29 item 8; API.md §11) ========
from pyacc.mapping.devices.emulated import GUARD_BYTE, TAIL  # noqa: E402


@pytest.mark.parametrize("nbytes", [1, 8, 80, 200, 255, 256, 512, 2048, 3840, 4096, 8192])
def test_every_block_has_a_tail_zone_of_guard_bytes(nbytes):
    """At least ``TAIL`` bytes after the last byte asked for, ``GUARD_BYTE``, also for
    sizes that are multiples of the alignment (no rounding padding)."""
    device = EmulatedDevice(0, capacity=1 << 16)
    address = device.allocate(nbytes)
    raw = address - device._base
    size = device._arena.size_of(raw)
    assert size - nbytes >= TAIL
    assert (device._memory[raw + nbytes:raw + size] == GUARD_BYTE).all()


def test_the_capacity_counts_blocks_without_their_zones():
    """Four 2048-byte arrays fill a device of 8192 bytes, as before tail zones: the zones
    take pool room (``ROOM``) the capacity does not count, so ``memory_in_use``, the
    allocations that fail and the counters checker's books are unchanged."""
    device = EmulatedDevice(0, capacity=4 * 2048)
    addresses = [device.allocate(2048) for _ in range(4)]
    assert device.memory_in_use == 4 * 2048 and device.properties()["free_memory"] == 0
    with pytest.raises(OutOfMemoryError, match="0 of 8192 free"):
        device.allocate(1)
    assert [device.allocation_of(a + 5) for a in addresses] == [(a, 2048) for a in addresses]
    assert device.allocation_of(addresses[0] + 2048) is None  # the tail zone is no block's
    for address in addresses:
        device.free(address)
    assert device.memory_in_use == 0 and device.check_memory() == []
    assert device._arena.capacity == 2 * 8192  # as much room again (a small device)


def test_a_write_into_a_tail_zone_is_found_by_a_scan_and_reported_once():
    device = EmulatedDevice(0, capacity=1 << 16)
    address = device.allocate(256)
    view = device.view(address, np.zeros(33))  # one element more than the block
    view[32] = 1.5
    findings = device.memcheck_scan()
    assert len(findings) == 1 and findings[0].kind == "out of bounds"
    assert findings[0].block == (address, 256) and findings[0].touched == (address + 256, 8)
    assert device.memcheck_scan() == []  # restored
    device.free(address)
    assert device.check_memory() == []


def test_a_write_into_a_tail_zone_is_found_at_the_blocks_free():
    """The free keeps what it found for the next scan (the block is reused after)."""
    device = EmulatedDevice(0, capacity=1 << 16)
    address = device.allocate(256)
    device.view(address, np.zeros(257, np.uint8))[256] = 1
    device.free(address)
    findings = device.memcheck_scan()
    assert [(f.block, f.touched) for f in findings] == [((address, 256), (address + 256, 1))]


def test_emulated_owns_its_device_arrays_and_no_host_array():
    """``Device.owns`` (API.md §6.2): every array the device makes, and every view of
    one, is device memory; host arrays, empty arrays and non-arrays are not."""
    import numpy.lib.stride_tricks as stride_tricks

    device = EmulatedDevice(0, capacity=1 << 16)
    assert not device.owns(np.zeros(4))  # before any allocation
    d = device.view(device.allocate(800), np.zeros((10, 10)))
    for array in (d, d[2:5], d.T, d.reshape(100), d.view(np.int64), d[::-1, ::2],
                  stride_tricks.as_strided(d, shape=(5,), strides=(16,))):
        assert device.owns(array), array.shape
    host = np.zeros((10, 10))
    for other in (host, host[2:5], host.T, np.zeros(0), d.copy(), [1.0], 3.0, None):
        assert not device.owns(other)
    assert not EmulatedDevice(1, capacity=1 << 16).owns(d)  # another device's memory


def test_emulated_owns_a_stale_device_array():
    """A device array whose block was freed is still never host data."""
    device = EmulatedDevice(0, capacity=1 << 16)
    address = device.allocate(64)
    stale = device.view(address, np.zeros(8))
    device.free(address)
    assert device.owns(stale)


def test_owns_costs_one_identity_test(monkeypatch):
    """Cheap enough for every array argument of a compute call: a device view is known
    by its ``base``, a host array without reading its address."""
    device = EmulatedDevice(0, capacity=1 << 20)
    d = device.view(device.allocate(80), np.zeros(10))
    host = np.zeros(10)
    blocks = [device.allocate(256) for _ in range(2000)]  # no scan over the blocks
    monkeypatch.setattr(device._arena, "block_of", None)  # nor a lookup
    assert device.owns(d) and not device.owns(host)
    for address in blocks:
        device.free(address)
