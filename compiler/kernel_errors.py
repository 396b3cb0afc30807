"""A kernel's failures in the user's terms: Numba's compile errors and bounds errors.

Owns :func:`compile_error` (Numba's failure as a ``CompileError`` located in the user's
source through the generated module's line map) and :func:`bounds_checked` (the wrapper
that turns an index out of bounds, under ``PYACC_BOUNDSCHECK=1``, into a
``KernelIndexError`` naming the kernel and the array).

Invariants:
    * Messages name the user's file and line, never the generated module's, where the
      line map knows it; generated names (``_acc_g…_``, ``_acc_r…_``) are removed.
    * Only a bounds check's ``IndexError`` becomes ``KernelIndexError``; one the kernel
      raises itself passes unchanged.
"""
from __future__ import annotations

import os
import re

from .errors import CompileError, KernelIndexError

__all__ = ["bounds_checked", "compile_error"]


def compile_error(info, exc, generated_file, linemap, fallback=None) -> CompileError:
    """Numba's failure as a ``CompileError`` located in the user's source (at
    ``fallback`` when Numba's message names no line of the generated file)."""
    located = []

    def to_user(match):
        number = int(match.group(1))
        origin = linemap[number] if 0 < number < len(linemap) else None
        if origin is None:
            return match.group(0)
        located.append(origin)
        return f'File "{origin[0]}", line {origin[1]}'

    # Numba names the file absolute or relative: match on its base name.
    name = re.escape(os.path.basename(generated_file))
    message = re.sub(rf'File "[^"]*{name}", line (\d+)', to_user, str(exc))
    message = re.sub(rf"at \S*{name} \((\d+)\)",
                     lambda m: "at " + to_user(m).replace('File "', "").replace(
                         '", line ', ":"), message)
    message = re.sub(r"_acc_g\d+_|_acc_r\d+_", "", message)
    # each compiler has its own TypingError (numba-cuda-mlir's is not Numba's)
    typing = any(cls.__name__ == "TypingError" for cls in type(exc).__mro__)
    kind = "cannot type" if typing else "cannot compile"
    filename, lineno = located[-1] if located else (fallback or (info.filename, info.lineno))
    return CompileError(f"{info.name}: Numba {kind} this kernel: {message.strip()}",
                        filename, lineno)


def bounds_checked(dispatcher, where):
    """``dispatcher`` with a bounds error raised as ``KernelIndexError`` (named by ``where``,
    and the array when pyacc's own check found it); the program's own ``IndexError`` passes."""
    def kernel(*args):
        try:
            return dispatcher(*args)
        except KernelIndexError:
            raise
        except IndexError as exc:
            if not is_bounds_error(exc):
                raise  # the program's own IndexError: not an index out of bounds
            raise index_error(where, exc) from exc

    kernel.dispatcher = dispatcher
    kernel.__name__ = f"bounds_checked_{where.split(' ')[0]}"
    return kernel


def is_bounds_error(exc) -> bool:
    """An IndexError from a bounds check (pyacc's named checks, or Numba's
    ``boundscheck``), not one the kernel raises itself (``raise IndexError("...")``)."""
    first = exc.args[0] if exc.args else ""
    return isinstance(first, str) and (first.startswith("pyacc-bounds:")
                                       or first == "index is out of bounds")


def index_error(where, exc) -> KernelIndexError:
    args = exc.args
    if args and isinstance(args[0], str) and args[0].startswith("pyacc-bounds:"):
        name = args[0].split(":", 1)[1]
        index, size, dim = (list(args[1:4]) + [None] * 3)[:3]
        return KernelIndexError(where, name, index=index, size=size,
                                detail=f"dimension {dim}")
    return KernelIndexError(where, None, detail=str(exc))
