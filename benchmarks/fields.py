"""The benchmark problems' arrays, placed so that no two of them conflict in the caches.

Owns: ``apart`` (arrays carved from one buffer, never a multiple of 4 KiB apart) and
``problem_arrays`` (the named initial arrays of each suite kernel: the same values for
every implementation, in this process and in PyOMP's). Pure NumPy: ``pyomp_kernels.py``
imports it in PyOMP's own virtual environment.

Why placement matters. glibc serves large blocks from fresh ``mmap`` pages (two arrays
of 8 MiB then sit 8 MiB + 4 KiB apart) until a large block is freed; its dynamic mmap
threshold then rises, and later blocks of that size come from the heap exactly
``nbytes + 16`` bytes apart. Measured with the hand-written Numba Jacobi sweep on this
repository's 2-core VM (``benchmarks/RESULTS.md``), 1024² grids:

- 8 MiB + 4 KiB apart (fresh pages): 1.26 ms per step;
- 8 MiB + 16 B apart (heap, after an 8 MiB array was freed): 3.77 ms per step;
- exactly 8 MiB apart: 6.9 ms; 8 MiB + 256 B apart: 1.27 ms.

The likely mechanism: loads of ``u`` alias stores to ``unew`` a few iterations earlier
(the CPU compares the low 12 address bits: 4K aliasing), and exactly a power of two
apart the grids also compete for the same cache sets. Which case a problem hit depended
on what the problems before it had freed, so the suite's host-array columns measured
allocator history. The emulated device's allocator pads its blocks for the same reason
(``mapping/devices/emulated.py``); here every implementation's arrays get the same placement.

Invariants: ``apart`` arrays are C-contiguous, 64-byte aligned, zero-filled, disjoint,
and any two start ``256·k`` bytes apart modulo 4096 with ``0 < k < 16`` (for up to 16
arrays).
"""

from __future__ import annotations

import numpy as np

__all__ = ["apart", "problem_arrays", "GAP", "LINE"]

#: bytes between the page-rounded end of one array and the start of the next
GAP = 256
#: alignment of every array (a cache line)
LINE = 64
_PAGE = 4096


def apart(count: int, shape, dtype=np.float64) -> list[np.ndarray]:
    """``count`` zeroed C-contiguous arrays of ``shape`` and ``dtype`` from one buffer,
    each ``GAP`` bytes past a page boundary from the previous one (see the module doc)."""
    if not 0 < count <= _PAGE // GAP:
        raise ValueError(f"apart: count must be 1..{_PAGE // GAP}, got {count}")
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    stride = -(-nbytes // _PAGE) * _PAGE + GAP
    buffer = np.zeros(stride * count + LINE, dtype=np.uint8)
    first = -buffer.ctypes.data % LINE
    return [buffer[first + k * stride:first + k * stride + nbytes].view(dtype).reshape(shape)
            for k in range(count)]


def problem_arrays(kernel: str, size: int) -> dict[str, np.ndarray]:
    """The initial arrays of one suite problem (seeded: identical in every process).

    saxpy, dot: ``x``, ``y`` random of ``size``; jacobi: ``u`` (top row 1, else 0),
    ``unew`` and ``start`` copies of it; matmul: ``a``, ``b`` random ``size × size``,
    ``c`` zero.
    """
    rng = np.random.default_rng(1)
    if kernel in ("saxpy", "dot"):
        x, y = apart(2, (size,))
        x[:] = rng.random(size)
        y[:] = rng.random(size)
        return {"x": x, "y": y}
    if kernel == "jacobi":
        u, unew, start = apart(3, (size, size))
        u[0, :] = 1.0
        unew[:] = u
        start[:] = u
        return {"u": u, "unew": unew, "start": start}
    if kernel == "matmul":
        a, b, c = apart(3, (size, size))
        a[:] = rng.random((size, size))
        b[:] = rng.random((size, size))
        return {"a": a, "b": b, "c": c}
    raise ValueError(f"unknown kernel {kernel!r}")
