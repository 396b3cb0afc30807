"""A fake device for testing the table and the verbs alone (CuPy tests its pool with a
fake allocator the same way): memory is a dict of numpy blocks at made-up addresses, every
call is logged, and the k-th allocation or transfer can be made to fail."""

from __future__ import annotations

import numpy as np

from pyacc.mapping import Device, ExecutionError, OutOfMemoryError


class RecordingDevice(Device):
    type_name = "fake"

    def __init__(self, *, capacity=1 << 20, fail_alloc_at=None, fail_copy_at=None):
        super().__init__(0)
        self.capacity = capacity
        self.blocks: dict[int, np.ndarray] = {}
        self.log: list[tuple] = []
        self.next_address = 0x10_0000_0000
        self.allocations = 0
        self.copies = 0
        self.fail_alloc_at = fail_alloc_at
        self.fail_copy_at = fail_copy_at

    def allocate(self, nbytes):
        self.allocations += 1
        if self.allocations == self.fail_alloc_at or self.memory_in_use + nbytes > self.capacity:
            raise OutOfMemoryError(f"fake device full ({nbytes} bytes requested)")
        address = self.next_address
        self.next_address += (nbytes + 4095) // 4096 * 4096 + 4096
        self.blocks[address] = np.zeros(nbytes, np.uint8)
        self.log.append(("alloc", address, nbytes))
        return address

    def free(self, address):
        del self.blocks[address]
        self.log.append(("free", address))

    def allocation_of(self, address):
        for begin, block in self.blocks.items():
            if begin <= address < begin + block.nbytes:
                return begin, block.nbytes
        return None

    def view(self, address, like):
        begin, _ = self.allocation_of(address)
        return np.ndarray(like.shape, like.dtype, buffer=self.blocks[begin],
                          offset=address - begin, strides=like.strides)

    def extent_of(self, device_array):
        raise NotImplementedError("the fake device has no raw-memory API")

    def _copy(self, destination, source):
        self.copies += 1
        if self.copies == self.fail_copy_at:
            raise ExecutionError("fake transfer failure")
        np.copyto(destination, source)

    def upload(self, device_array, host_array, queue, *, name=None):
        self.log.append(("upload", host_array.nbytes))
        super().upload(device_array, host_array, queue, name=name)

    def download(self, host_array, device_array, queue, *, name=None):
        self.log.append(("download", host_array.nbytes))
        super().download(host_array, device_array, queue, name=name)

    @property
    def memory_in_use(self):
        return sum(block.nbytes for block in self.blocks.values())

    def properties(self):
        return {"memory": self.capacity}


def close_streams(device) -> None:
    """Stop the worker threads of a cuda device's fake streams (``mapping/devices/cuda_fake``):
    each queue's streams (its own and its staging stream) and the synchronous queue's."""
    for queue in device.existing_queues():
        for stream in queue.streams():
            stream.close()
    device.sync_queue.stream.close()
