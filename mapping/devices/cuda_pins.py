"""Page-locked mappings of the ``cuda`` device: host arrays registered while they are mapped.

Owns: ``Pins`` (the host ranges a ``CudaDevice`` registered with the driver, and the
lookup its transfers make) and ``threshold_from_environment`` (``PYACC_PIN``).

Why (API.md §12; ../shared/reference/gpu-anchors.md §2): a copy through a pinned staging
buffer is first a CPU copy into that buffer, so it cannot beat the host's memcpy (9.6 /
10.3 GB/s h2d / d2h measured on the H100 host), while the DMA engines reach 55 GB/s from
page-locked memory. ``cudaHostRegister`` page-locks the program's own array in place:
26 ms to register and 17 ms to unregister 1 GiB on that host, i.e. about 40 µs per MiB
for both, against about 85 µs per MiB saved by every copy that no longer goes through
staging. So registering pays from the first copy of an array of a few hundred KiB up,
and pays again at every ``update`` of data that stays mapped.

Rules (the lifetime of a registration is the lifetime of the mapping):
- a mapping's host range is registered when the mapping is created (its counts leave
  zero: ``commit.allocate`` → ``Device.pin``), when it holds at least the threshold's
  bytes and its host elements are one contiguous block; the whole pages *inside* it are
  registered (a page the range shares with a neighbouring array is left out: two
  mappings never ask for the same page, which ``cudaHostRegister`` would refuse);
- it is unregistered when the mapping's device block is freed — counts back at zero,
  the free deferred until every queue that may still copy to or from the host array
  has passed (``QueueSet.release``) — and at ``reset`` (``acc.shutdown``, the exit of
  the program). A child forked after the parent used the GPU has no cuda device
  (``pyacc._cuda_probe``), and memory locks are not inherited by ``fork``: nothing to do;
- a registration keeps the host array alive until it is unregistered (CUDA: registered
  memory must be unregistered before it is freed). The mapping's own reference ends
  with the mapping, before a deferred free: an array the program dropped after an async
  ``delete`` would otherwise be freed while registered, numpy would give its pages back
  (``munmap``), and the next large array, often at the same addresses, would meet the
  stale registration — the driver maps those addresses to the old pinned pages (a DMA
  reads or writes those, not the new array), and ``locked_part`` still finds them;
- a registration the system refuses (the locked-memory limit, pages another mapping or
  the program registered already) leaves the mapping unpinned, silently: its transfers
  go through staging as before;
- a transfer whose host side is one contiguous block that meets a registered range of
  the mapping its device side lies in (never another mapping's: a mapping of the same
  array that ended on another queue is unregistered once that queue has passed, without
  waiting for this one) copies that part with one memcpy on the queue's stream, and
  its partial first and last pages (less than a page each) through staging: every part
  reads (upload) or writes (download) the host array when it runs in stream order
  (OpenACC 3.3 §2.16.1), as staging did.

Threading: ``Pins`` has its own lock; ``register``/``unregister`` (driver calls) run
outside it. A lookup answers for the moment it is made: a registered range stays
registered while a transfer of its mapping can still be queued (the table lock is held
while transfers are queued, and the unregistration waits for the queues).
"""

from __future__ import annotations

import os
import threading

from .common import size_setting
from .cuda_backend import BlockIndex

__all__ = ["Pins", "threshold_from_environment", "ENVIRONMENT", "DEFAULT_THRESHOLD", "PAGE"]

ENVIRONMENT = "PYACC_PIN"
#: from the H100 figures (module docstring): registration pays above a few hundred KiB
DEFAULT_THRESHOLD = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def threshold_from_environment() -> int:
    """``$PYACC_PIN`` in bytes (suffixes K, M, G): mappings at least that large are
    page-locked; ``0`` turns page-locking off; unset or empty: ``DEFAULT_THRESHOLD``.

    Raises:
        InvalidArgumentError: the value is not a size in bytes (naming the setting).
    """
    return size_setting(ENVIRONMENT, DEFAULT_THRESHOLD,
                        f"give the smallest mapping to page-lock (e.g. {ENVIRONMENT}=1048576 or "
                        f"{ENVIRONMENT}=1M), or {ENVIRONMENT}=0 to never page-lock")


class Pins:
    """The host ranges one device registered, each tied to the device block of its
    mapping.

    Args:
        backend: the device's backend (``register``/``unregister``).

    Invariant: ``_ranges`` holds each registered page range by its first page (value:
    its bytes and the device block's ``(begin, end)``); ``_by_block`` maps that block's
    address back to the range's first page and the host array, kept alive while
    registered.
    """

    def __init__(self, backend):
        self._backend = backend
        self._lock = threading.Lock()
        self._ranges = BlockIndex()
        self._by_block: dict[int, tuple[int, object]] = {}  # block → (first page, array)
        self.threshold = threshold_from_environment()

    def pin(self, block: int, host_begin: int, host_end: int, owner=None) -> bool:
        """Register the pages of ``[host_begin, host_end)``, the host range of the mapping
        whose device block starts at ``block``, when it is large enough (the caller
        has checked that its elements are contiguous); ``owner`` (the host array) is kept
        alive until the range is unregistered. Whether it is now registered."""
        if not self.threshold or host_end - host_begin < self.threshold:
            return False
        begin = -(-host_begin // PAGE) * PAGE
        end = host_end - host_end % PAGE
        if end <= begin:
            return False
        if not self._backend.register(begin, end - begin):  # refused: pages registered already
            return False
        with self._lock:  # the device block is as large as the host range it maps
            self._ranges.add(begin, end - begin, (block, block + host_end - host_begin))
            self._by_block[block] = (begin, owner)
        return True

    def unpin(self, block: int) -> None:
        """Unregister the range tied to the device block at ``block``, if any (the block
        is being freed)."""
        with self._lock:
            found = self._by_block.pop(block, None)
            if found is None:
                return
            self._ranges.pop(found[0])
        self._backend.unregister(found[0])  # (``found`` keeps the array alive until then)

    def locked_part(self, low: int, high: int, device_address: int):
        """``(begin, end)``: the part of the host bytes ``[low, high)`` inside the
        registered range that holds their first byte, or else their first whole page,
        when that range is the one of the mapping whose block holds ``device_address``
        (the transfer's device side); None otherwise. A mapping registers one range, so
        the bytes meet at most one of its own: bytes that start inside it and end past it
        are found by their first byte (their first whole page may be past its end), bytes
        that start before it by their first whole page. Another mapping's registration may
        end while this transfer is still queued: a mapping of the same array that ends on
        another queue is unregistered once that queue has passed, which does not wait for
        this one."""
        if not self._by_block:  # nothing registered: no lock
            return None
        first = min(-(-low // PAGE) * PAGE, high - 1)
        with self._lock:
            found = self._ranges.find(low) or self._ranges.find(first)
        if found is None:
            return None
        block, block_end = found[2]
        if not block <= device_address < block_end:
            return None
        begin, end = max(low, found[0]), min(high, found[0] + found[1])
        return (begin, end) if begin < end else None

    def unpin_all(self) -> None:
        """Unregister every range (``reset``), and read ``$PYACC_PIN`` again."""
        with self._lock:
            registered = list(self._by_block.values())
            self._by_block.clear()
            self._ranges.clear()
        for begin in [first for first, _owner in registered]:  # (``registered`` keeps every
            self._backend.unregister(begin)                      # array alive until then)
        self.threshold = threshold_from_environment()

    def __len__(self) -> int:
        return len(self._by_block)
