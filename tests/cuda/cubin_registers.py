"""The registers a kernel's machine code uses, without a GPU: PTX linked into a cubin by
nvJitLink (what numba-cuda's linker calls at a first launch), then the count read from
the cubin, as ``cuobjdump --dump-resource-usage`` reads it.

A cubin is an ELF file; its ``.nv.info`` section is a list of attributes, each
``format (1 byte), attribute (1 byte)``, then for the format ``EIFMT_SVAL`` (4) a 2-byte
size and that many bytes, for the others a 4-byte record in all. ``EIATTR_REGCOUNT`` (0x2f) holds ``(function symbol, registers)``
as two 32-bit words, one per function of the cubin (NVIDIA's ``nvinfo`` layout, the
same since CUDA 4). Used by ``test_cuda_ptx.py`` to check the occupancy a generated
kernel allows: at 256 threads a block, 8 blocks (2,048 threads) fit a multiprocessor's
65,536 registers only at 32 registers a thread or fewer.
"""
from __future__ import annotations

import struct

__all__ = ["registers", "LinkerUnavailable"]


class LinkerUnavailable(RuntimeError):
    """nvJitLink cannot be loaded here (its wheel or library is missing)."""

_EIFMT_SVAL = 0x04
_EIATTR_REGCOUNT = 0x2F


def _cubin(ptx: str, arch: str) -> bytes:
    try:
        from cuda.bindings import nvjitlink  # the toolkit wheel numba-cuda links with

        handle = nvjitlink.create(2, [f"-arch={arch}", "-O3"])
    except Exception as why:  # noqa: BLE001 - ImportError, or the library failing to load
        raise LinkerUnavailable(f"nvJitLink cannot link here: {type(why).__name__}: {why}") from why
    try:
        data = ptx.encode()
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
        nvjitlink.complete(handle)
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
    finally:
        nvjitlink.destroy(handle)
    return bytes(cubin)


def _sections(elf: bytes):
    """``(name, contents)`` of each section of a 64-bit little-endian ELF file."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    (offset,) = struct.unpack_from("<Q", elf, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, offset + i * entry_size)
               for i in range(count)]
    names = headers[names_index]
    for header in headers:
        start = names[4] + header[0]
        name = elf[start:elf.index(b"\0", start)].decode()
        yield name, elf[header[4]:header[4] + header[5]]


def registers(ptx: str, arch: str = "sm_90") -> list[int]:
    """The registers of each function of ``ptx`` once linked for ``arch``."""
    counts = []
    for name, data in _sections(_cubin(ptx, arch)):
        if name != ".nv.info":
            continue
        at = 0
        while at < len(data):
            form, attribute = data[at], data[at + 1]
            if form == _EIFMT_SVAL:
                (size,) = struct.unpack_from("<H", data, at + 2)
                payload, at = data[at + 4:at + 4 + size], at + 4 + size
            else:  # a value of at most 2 bytes: a 4-byte record
                payload, at = b"", at + 4
            if attribute == _EIATTR_REGCOUNT:
                counts.append(struct.unpack_from("<II", payload)[1])
    if not counts:
        raise ValueError("the cubin names no register count")
    return counts
