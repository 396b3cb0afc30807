"""The emulated device: its allocator, separate memory, copies and capacity."""

import numpy as np
import pytest

from pyacc.mapping import EmulatedDevice, InvalidArgumentError, OutOfMemoryError
from pyacc.mapping.emulated import ALIGNMENT, Arena, capacity_from_environment


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


def test_capacity_from_environment_rejects_garbage(monkeypatch):
    monkeypatch.setenv("PYACC_EMULATED_MEMORY", "lots")
    with pytest.raises(InvalidArgumentError, match="PYACC_EMULATED_MEMORY"):
        capacity_from_environment()
