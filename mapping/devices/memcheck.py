"""Memory checking of the emulated device (``PYACC_CHECK=memory``): guard zones and
poisoned, quarantined freed blocks (compute-sanitizer's memcheck for device memory,
ASan's redzones and quarantine).

Owns :func:`set_memcheck`, :class:`MemoryFinding` and :class:`GuardedMemory`, the part of
``EmulatedDevice`` that knows the zones of its blocks (the tail zone every block has,
the guard zones of blocks allocated while checking is on), allocates guarded blocks,
checks a plain block's tail zone at its free, poisons and quarantines freed guarded
blocks and scans them all (``memcheck_scan``, ``memcheck_state``). See ``emulated``'s
module docstring for the rules; the invariants are there too (the device and its zones
share one arena).
"""

from __future__ import annotations

import weakref

import numpy as np

from ..errors import format_range

__all__ = ["set_memcheck", "memcheck_enabled", "MemoryFinding", "GuardedMemory", "GUARD",
           "GUARD_BYTE", "POISON_BYTE", "UNDEFINED_BYTE", "QUARANTINE_BYTES", "TAIL"]

#: memory checking: guard bytes before each block (and at least as many after it)
GUARD = 256  # one allocation unit (emulated.ALIGNMENT)


#: the byte of guard zones and tail zones, and of freed blocks (poisoned): read as an
#: element of any kernel dtype they are ordinary numbers (0x4141… is 12.1 as float32,
#: 2.3e6 as float64; 0x3D3D… 0.046 and 1.0e-13), so an out-of-bounds read-modify-write
#: (``a[n] += 1``, an atomic add) changes their bytes and is found (0xFB… read as a
#: float64 was -1.7e289, which absorbed any addition); and rarely a byte of the values
#: programs write, whose written bytes are told by their difference from it
GUARD_BYTE = 0x41
POISON_BYTE = 0x3D
#: the bytes of a new block until a copy or a kernel writes them (``create``, the block of
#: a ``copyout``, ``acc.malloc``: OpenACC 3.3 §2.7.8, their values are undefined): NaN
#: as any float, -1 as any signed integer, so a kernel that reads device memory nothing
#: wrote (``copyout(hist)`` with ``hist[j] += 1``) gives visibly wrong values instead of
#: the zeros a fresh arena happens to hold (compute-sanitizer's initcheck finds these)
UNDEFINED_BYTE = 0xFF


#: bytes of freed blocks kept poisoned (out of the allocator) before they are reused
QUARANTINE_BYTES = 16 << 20

#: the tail zone every block keeps after its last byte, checking on or off: at least this
#: many bytes (one element of any dtype up to 64 bytes wide), filled with ``GUARD_BYTE``
TAIL = 64

#: findings of frees kept for the next scan, at most
KEPT_FINDINGS = 1000

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
        freed: found when the block was freed (its address may belong to another block
            by the time the finding is reported).
    """

    __slots__ = ("kind", "block", "touched", "detail", "freed")

    def __init__(self, kind, block, touched, detail, freed=False):
        self.kind, self.block, self.touched, self.detail = kind, block, touched, detail
        self.freed = freed

    def __repr__(self) -> str:
        return (f"MemoryFinding({self.kind}: block {format_range(*self.block)}, bytes "
                f"{format_range(*self.touched)}, {self.detail})")


_POISON_WORD = np.uint64(int.from_bytes(bytes([POISON_BYTE]) * 8, "little"))


_GUARD_WORD = np.uint64(int.from_bytes(bytes([GUARD_BYTE]) * 8, "little"))


#: a zone's expected bytes (a tail zone of an unguarded block is shorter than 2 units)
_GUARD_BYTES = bytes([GUARD_BYTE]) * (1 << 12)


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
    ``_arena``, ``_memory``, ``_requested`` and locks): the zones of the blocks (a tail
    zone on every block, guard zones on blocks allocated while checking is on), the
    quarantine, and the scans."""

    # -- the zones of the live blocks ---------------------------------------------------
    def _zones(self) -> list[tuple[int, int, int, int, int]]:
        """``(address, raw offset, raw size, nbytes, head)`` of every live block: its
        bytes ``[raw + head, raw + head + nbytes)`` are the ones asked for; ``[raw, raw +
        head)`` is its head guard (``GUARD`` bytes while checking is on at allocation,
        else none) and ``[raw + head + nbytes, raw + size)`` its tail zone."""
        base, arena, guarded = self._base, self._arena, self._guarded
        zones = []
        for address, nbytes in list(self._requested.items()):
            raw = address - base
            try:
                if address in guarded:
                    raw, size, _ = guarded[address]
                    zones.append((address, raw, size, nbytes, GUARD))
                else:
                    zones.append((address, raw, arena.size_of(raw), nbytes, 0))
            except KeyError:  # freed meanwhile (it is checked at its free)
                continue
        return zones

    def _zone_findings(self, address, raw, size, nbytes, head) -> list[MemoryFinding]:
        """What changed in the head guard and tail zone of one block."""
        findings = []
        memory, raw_bytes = self._memory, self._bytes
        for low, high in ((raw, raw + head), (raw + head + nbytes, raw + size)):
            if high <= low or raw_bytes[low:high].tobytes() == _GUARD_BYTES[:high - low]:
                continue
            changed = np.flatnonzero(memory[low:high] != GUARD_BYTE)
            first, last = low + int(changed[0]), low + int(changed[-1]) + 1
            findings.append(_out_of_bounds(self._base, address, nbytes, first, last))
        return findings

    def _restore_zones(self, raw, size, nbytes, head) -> None:
        memory = self._memory
        memory[raw:raw + head] = GUARD_BYTE
        memory[raw + head + nbytes:raw + size] = GUARD_BYTE

    def _keep_findings(self, findings) -> None:
        """Keep what a free found for the next scan, marked ``freed`` (at most
        ``KEPT_FINDINGS``: a program that writes past a block at every step without a
        check point does not grow the list for ever)."""
        if findings:
            for finding in findings:
                finding.freed = True
            with self._check_lock:
                room = KEPT_FINDINGS - len(self._findings)
                self._findings += findings[:max(room, 0)]

    # -- allocation and free ------------------------------------------------------------
    def _allocate_guarded(self, nbytes: int) -> int:
        """A block with a head guard of ``GUARD`` bytes and a tail guard of at least as
        many, both ``GUARD_BYTE``, its bytes ``UNDEFINED_BYTE``; its address (the caller
        records and announces it)."""
        with self._check_lock:
            accounted = self._count(nbytes)
            raw = self._arena.allocate(nbytes + 2 * GUARD)
            if raw is None and self._quarantine:  # quarantine must not cause out of memory
                self._flush_quarantine(0)
                raw = self._arena.allocate(nbytes + 2 * GUARD)
            if raw is None:
                self._in_use -= accounted
                raise self._out_of_memory(nbytes)
            size = self._arena.size_of(raw)
            self._restore_zones(raw, size, nbytes, GUARD)
            self._bytes[raw + GUARD:raw + GUARD + nbytes] = bytes([UNDEFINED_BYTE]) * nbytes
            address = self._base + raw + GUARD
            self._guarded[address] = (raw, size, nbytes)
            self._guard_index = None
        return address

    def _free_plain(self, address: int, nbytes: int) -> None:
        """Free a block without guards; what its tail zone shows is kept for the next
        scan (a write past its end, found though no check point ran while it lived)."""
        raw = address - self._base
        with self._check_lock:  # (a scan reads the zones under it)
            size = self._arena.size_of(raw)
            tail = raw + nbytes
            if self._bytes[tail:raw + size].tobytes() != _GUARD_BYTES[:size - nbytes]:
                self._keep_findings(self._zone_findings(address, raw, size, nbytes, 0))
            self._guard_index = None
            self._arena.free(raw)
            self._uncount(nbytes)

    def _free_guarded(self, address: int) -> None:
        with self._check_lock:
            raw, size, nbytes = self._guarded.pop(address)
            self._uncount(nbytes)
            self._guard_index = None
            self._keep_findings(self._zone_findings(address, raw, size, nbytes, GUARD))
            if not _MEMCHECK[0]:
                self._arena.free(raw)
                return
            self._memory[raw:raw + size] = POISON_BYTE
            self._quarantine[raw] = (size, address, nbytes)
            self._quarantined_bytes += size
            self._flush_quarantine(QUARANTINE_BYTES)

    def _flush_quarantine(self, keep: int) -> None:
        """Give quarantined blocks back to the allocator, oldest first, until at most
        ``keep`` bytes stay (their poison checked first)."""
        with self._check_lock:
            while self._quarantine and self._quarantined_bytes > keep:
                raw, (size, address, nbytes) = self._quarantine.popitem(last=False)
                self._findings += self._poison_findings(raw, size, address, nbytes)
                self._quarantined_bytes -= size
                self._arena.free(raw)

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
        """What memory checking found since the last scan: every guard or tail byte of a
        live block that changed (blocks allocated while checking was off included: their
        tail zones), and (``poison``) every byte of a quarantined block that changed,
        plus what frees and evictions found meanwhile. A guard, tail or poison byte that
        changed is reported once (it is restored)."""
        with self._check_lock:
            findings, self._findings = self._findings, []
            if self._memory is None:
                return findings
            if self._requested:
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
        """Changed bytes in the guard and tail zones of every live block: one fancy-indexed
        comparison over the cached index of their bytes, block by block only when
        something changed; the patterns are restored."""
        index = self._guard_index
        if index is None:
            index = self._guard_index = self._build_guard_index()
        words, partial = index
        memory = self._memory
        if not ((words.size and (memory.view(np.uint64)[words] != _GUARD_WORD).any())
                or (partial.size and (memory[partial] != GUARD_BYTE).any())):
            return []
        findings = []
        for address, raw, size, nbytes, head in self._zones():
            found = self._zone_findings(address, raw, size, nbytes, head)
            if found:
                self._restore_zones(raw, size, nbytes, head)
                findings += found
        return findings

    def _build_guard_index(self):
        """Every guard and tail byte of the live blocks, as the indexes of the 8-byte words
        that lie wholly in a zone (raw offsets and ``GUARD`` are 8-aligned) and the
        indexes of the few bytes of each tail zone before its first such word."""
        words, partial = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        for _, raw, size, nbytes, head in self._zones():
            if head:
                words.append(np.arange(raw // 8, (raw + head) // 8, dtype=np.int64))
            tail = raw + head + nbytes
            aligned = min((tail + 7) // 8 * 8, raw + size)
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
