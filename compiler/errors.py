"""Errors raised by the compiler layer.

Owns: :class:`CompileError` (a kernel or a clause cannot be compiled) and
:class:`KernelIndexError` (an index out of bounds inside a running kernel, raised only
for kernels compiled under ``PYACC_BOUNDSCHECK=1``).

Invariants:
    * Every ``CompileError`` that concerns user source carries ``filename`` and
      ``lineno`` and its message starts with ``"file:line: "``.
    * ``KernelIndexError`` is an ``IndexError`` so that plain-Python handlers still work;
      ``pyacc`` turns it into its ``ExecutionError``.
"""
from __future__ import annotations

__all__ = ["CompileError", "KernelIndexError", "PerformanceWarning"]


class CompileError(Exception):
    """A kernel, a routine or a clause cannot be compiled.

    Attributes:
        reason: The reason, without the location.
        filename: Source file of the offending statement (``None`` for clause strings).
        lineno: Line of the offending statement (``None`` when unknown).
    """

    def __init__(self, reason: str, filename: str | None = None,
                 lineno: int | None = None):
        self.reason = reason
        self.filename = filename
        self.lineno = lineno
        super().__init__(self._format())

    def _format(self) -> str:
        if self.filename is None:
            return self.reason
        where = self.filename if self.lineno is None else f"{self.filename}:{self.lineno}"
        return f"{where}: {self.reason}"


class KernelIndexError(IndexError):
    """An out-of-bounds index inside a kernel (only under ``PYACC_BOUNDSCHECK=1``).

    Attributes:
        kernel: ``"name (file:line)"`` of the kernel's decorated function.
        array: Parameter (or local) name of the indexed array, ``None`` when unknown.
        index: The offending index value, when known.
        size: The extent of the indexed dimension, when known.
    """

    def __init__(self, kernel: str, array: str | None, index=None, size=None,
                 detail: str | None = None):
        self.kernel = kernel
        self.array = array
        self.index = index
        self.size = size
        what = f"array '{array}'" if array else "an array"
        msg = f"index out of bounds in kernel {kernel}: {what}"
        if index is not None:
            msg += f", index {index} for a dimension of size {size}"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class PerformanceWarning(UserWarning):
    """A compute region runs slower than it could (``acc.PerformanceWarning``): a
    ``kernels`` loop the compiler had to run sequentially, with the dependence it found.
    Shown once per loop; silence it with ``warnings.filterwarnings``."""
