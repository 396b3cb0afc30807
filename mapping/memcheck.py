"""Memory checking of the emulated device (``PYACC_CHECK=memory``): guard zones and
poisoned, quarantined freed blocks (compute-sanitizer's memcheck for device memory,
ASan's redzones and quarantine).

Owns :func:`set_memcheck`, :class:`MemoryFinding` and :class:`GuardedMemory`, the part of
``EmulatedDevice`` that allocates guarded blocks, poisons and quarantines freed ones and
scans them (``memcheck_scan``, ``memcheck_state``). See ``emulated``'s module docstring
for the rules; the invariants are there too (the device and its guards share one arena).
"""

from __future__ import annotations

import weakref

import numpy as np

from .device import emit
from .errors import format_range
from .events import EventKind

__all__ = ["set_memcheck", "memcheck_enabled", "MemoryFinding", "GuardedMemory", "GUARD",
           "GUARD_BYTE", "POISON_BYTE", "QUARANTINE_BYTES"]

#: memory checking: guard bytes before each block (and at least as many after it)
GUARD = 256  # one allocation unit (emulated.ALIGNMENT)


GUARD_BYTE = 0xFB


POISON_BYTE = 0xFD


#: bytes of freed blocks kept poisoned (out of the allocator) before they are reused
QUARANTINE_BYTES = 16 << 20

_MEMCHECK = [False]


_DEVICES: "weakref.WeakSet" = weakref.WeakSet()  # every emulated device (set_memcheck)


def set_memcheck(enabled: bool) -> None:
    """Switch memory checking on or off for every emulated device (module docstring).
    Off: quarantined blocks go back to the allocator (their poison checked first: what
    changed is kept for the next ``memcheck_scan``)."""
    _MEMCHECK[0] = bool(enabled)
    if not enabled:
        for device in list(_DEVICES):
            device._flush_quarantine(0)


def memcheck_enabled() -> bool:
    return _MEMCHECK[0]


class MemoryFinding:
    """One memory-check finding: bytes that changed in a guard zone or in a freed block,
    or a device array that reached outside a live block.

    Attributes:
        kind: ``"out of bounds"``, ``"use after free"``.
        block: ``(begin, nbytes)`` of the block asked for (device addresses).
        touched: ``(begin, nbytes)`` of the bytes found changed or touched.
        detail: words on where (``"8 bytes past the end"``).
    """

    __slots__ = ("kind", "block", "touched", "detail")

    def __init__(self, kind, block, touched, detail):
        self.kind, self.block, self.touched, self.detail = kind, block, touched, detail

    def __repr__(self) -> str:
        return (f"MemoryFinding({self.kind}: block {format_range(*self.block)}, bytes "
                f"{format_range(*self.touched)}, {self.detail})")


_POISON_WORD = np.uint64(int.from_bytes(bytes([POISON_BYTE]) * 8, "little"))


_GUARD_WORD = np.uint64(int.from_bytes(bytes([GUARD_BYTE]) * 8, "little"))


def _out_of_bounds(base, address, nbytes, first, last) -> MemoryFinding:
    """Bytes ``[first, last)`` (arena offsets) outside the block ``address, nbytes``."""
    begin, end = base + first, base + last
    if begin < address:
        where = f"{address - begin} byte(s) before the start of the block"
    else:
        where = f"at offsets {begin - address}..{end - 1 - address}, past the end of the block"
    return MemoryFinding("out of bounds", (address, nbytes), (begin, end - begin), where)


class GuardedMemory:
    """The memory-checking half of ``EmulatedDevice`` (a mixin: it uses the device's
    ``_arena``, ``_memory`` and locks)."""

    def _user_block(self, block, address):
        """``allocation_of`` while some blocks have guards: the block asked for (guards
        excluded), None inside a guard zone or a quarantined block."""
        raw, size = block
        if raw in self._quarantine:
            return None
        begin = self._base + raw + GUARD
        guarded = self._guarded.get(begin)
        if guarded is None or guarded[0] != raw:  # allocated before checking began
            return (self._base + raw, size)
        user_size = size - 2 * GUARD
        return (begin, user_size) if begin <= address < begin + user_size else None

    # -- memory checking (module docstring) ----------------------------------------------
    def _allocate_guarded(self, nbytes: int) -> int:
        with self._check_lock:
            raw = self._arena.allocate(nbytes + 2 * GUARD)
            if raw is None and self._quarantine:  # quarantine must not cause out of memory
                self._flush_quarantine(0)
                raw = self._arena.allocate(nbytes + 2 * GUARD)
            if raw is None:
                raise self._out_of_memory(nbytes)
            size = self._arena._live[raw]
            memory = self._memory
            memory[raw:raw + GUARD] = GUARD_BYTE
            memory[raw + GUARD + nbytes:raw + size] = GUARD_BYTE
            address = self._base + raw + GUARD
            self._guarded[address] = (raw, size, nbytes)
            self._overhead += 2 * GUARD
            self._guard_index = None
        self._requested[address] = nbytes
        emit(EventKind.ALLOC, self.identity, nbytes, device_begin=address)
        return address

    def _free_guarded(self, address: int) -> None:
        with self._check_lock:
            raw, size, nbytes = self._guarded.pop(address)
            self._guard_index = None
            self._findings += self._guard_findings(address, raw, size, nbytes)
            self._overhead -= 2 * GUARD
            if not _MEMCHECK[0]:
                self._arena.free(raw)
                return
            self._memory[raw:raw + size] = POISON_BYTE
            self._quarantine[raw] = (size, address, nbytes)
            self._quarantined_bytes += size
            self._overhead += size
            self._flush_quarantine(QUARANTINE_BYTES)

    def _flush_quarantine(self, keep: int) -> None:
        """Give quarantined blocks back to the allocator, oldest first, until at most
        ``keep`` bytes stay (their poison checked first)."""
        with self._check_lock:
            while self._quarantine and self._quarantined_bytes > keep:
                raw, (size, address, nbytes) = self._quarantine.popitem(last=False)
                self._findings += self._poison_findings(raw, size, address, nbytes)
                self._quarantined_bytes -= size
                self._overhead -= size
                self._arena.free(raw)

    def _guard_findings(self, address, raw, size, nbytes) -> list[MemoryFinding]:
        findings = []
        memory = self._memory
        for low, high in ((raw, raw + GUARD), (raw + GUARD + nbytes, raw + size)):
            changed = np.flatnonzero(memory[low:high] != GUARD_BYTE)
            if changed.size:
                first, last = low + int(changed[0]), low + int(changed[-1]) + 1
                findings.append(_out_of_bounds(self._base, address, nbytes, first, last))
        return findings

    def _poison_findings(self, raw, size, address, nbytes) -> list[MemoryFinding]:
        words = self._memory[raw:raw + size].view(np.uint64)
        if not (words != _POISON_WORD).any():
            return []
        changed = np.flatnonzero(self._memory[raw:raw + size] != POISON_BYTE)
        first, last = raw + int(changed[0]), raw + int(changed[-1]) + 1
        base = self._base
        return [MemoryFinding("use after free", (address, nbytes),
                              (base + first, last - first),
                              f"at offsets {first - raw - GUARD}..{last - 1 - raw - GUARD} "
                              f"({int(changed.size)} byte(s) changed)")]

    def memcheck_scan(self, *, poison: bool = True) -> list[MemoryFinding]:
        """What memory checking found since the last scan: every guard byte of a live
        block that changed, and (``poison``) every byte of a quarantined block that
        changed, plus what frees and evictions found meanwhile. A guard or poison byte
        that changed is reported once (it is restored)."""
        with self._check_lock:
            findings, self._findings = self._findings, []
            if self._memory is None:
                return findings
            if self._guarded:
                findings += self._scan_guards()
            if poison and self._quarantine:
                findings += self._scan_quarantine()
            return findings

    def _scan_quarantine(self) -> list[MemoryFinding]:
        """Changed bytes of quarantined blocks: one comparison per run of adjacent blocks
        (frees in a row usually quarantine neighbours), block by block only when a run
        changed; the poison is restored."""
        words = self._memory.view(np.uint64)
        blocks = sorted(self._quarantine.items())
        findings = []
        start = 0
        while start < len(blocks):
            end = start + 1
            while end < len(blocks) and blocks[end][0] == blocks[end - 1][0] + blocks[end - 1][1][0]:
                end += 1
            low = blocks[start][0]
            high = blocks[end - 1][0] + blocks[end - 1][1][0]
            if (words[low // 8:high // 8] != _POISON_WORD).any():
                for raw, (size, address, nbytes) in blocks[start:end]:
                    found = self._poison_findings(raw, size, address, nbytes)
                    if found:
                        self._memory[raw:raw + size] = POISON_BYTE
                        findings += found
            start = end
        return findings

    def _scan_guards(self) -> list[MemoryFinding]:
        index = self._guard_index
        if index is None:
            index = self._guard_index = self._build_guard_index()
        words, partial = index
        memory = self._memory
        if not ((memory.view(np.uint64)[words] != _GUARD_WORD).any()
                or (partial.size and (memory[partial] != GUARD_BYTE).any())):
            return []
        findings = []
        for address, (raw, size, nbytes) in self._guarded.items():
            found = self._guard_findings(address, raw, size, nbytes)
            if found:
                memory[raw:raw + GUARD] = GUARD_BYTE
                memory[raw + GUARD + nbytes:raw + size] = GUARD_BYTE
                findings += found
        return findings

    def _build_guard_index(self):
        """Every guard byte of the live blocks, as the indexes of the 8-byte words that
        lie wholly in guards (offsets are 8-aligned: raw offsets and ``GUARD`` are) and
        the indexes of the few bytes before the first such word of each tail zone."""
        words, partial = [], []
        for raw, size, nbytes in self._guarded.values():
            words.append(np.arange(raw // 8, (raw + GUARD) // 8, dtype=np.int64))
            tail = raw + GUARD + nbytes
            aligned = (tail + 7) // 8 * 8
            partial.append(np.arange(tail, aligned, dtype=np.int64))
            words.append(np.arange(aligned // 8, (raw + size) // 8, dtype=np.int64))
        return np.concatenate(words), np.concatenate(partial)

    def memcheck_state(self, low: int, high: int) -> MemoryFinding | None:
        """None when device bytes ``[low, high)`` lie inside one live block as asked for
        (or memory checking knows nothing of them); else the finding: they reach into a
        guard zone (out of bounds) or lie in a quarantined block (use after free)."""
        if self._memory is None or high <= low or not (self._guarded or self._quarantine):
            return None
        base = self._base
        with self._check_lock:
            block = self._arena.block_of(low - base)
            if block is None:
                return None
            raw, size = block
            quarantined = self._quarantine.get(raw)
            if quarantined is not None:
                _, address, nbytes = quarantined
                return MemoryFinding("use after free", (address, nbytes), (low, high - low),
                                     "in a freed block")
            address = base + raw + GUARD
            guarded = self._guarded.get(address)
            if guarded is None or guarded[0] != raw:
                return None
            nbytes = guarded[2]
            if address <= low and high <= address + nbytes:
                return None
            if low < address:
                first, last = max(low, base + raw), min(high, address)
            else:
                first, last = max(low, address + nbytes), min(high, base + raw + size)
            return _out_of_bounds(base, address, nbytes, first - base, last - base)
