"""Atomic array updates for compiled CPU kernels (LLVM ``atomicrmw`` via llvmlite).

Owns one Numba ``@intrinsic`` per ``acc.atomic`` operation (and ``atomic_problem``, what
is wrong with a kernel's call of one): ``atomic_add``,
``atomic_sub``, ``atomic_max``, ``atomic_min``, ``atomic_and``, ``atomic_or``,
``atomic_xor``, each ``(array, index, value) -> old value``. Generated kernel modules
import them; ``markers.atomic`` holds the plain-Python versions.

Invariants:
    * Every update is one LLVM ``atomicrmw`` (sequentially consistent), so it is exact
      under Numba's parallel threads: integer ``add sub and or xor max min`` (``umax``/
      ``umin`` for unsigned), float ``fadd fsub fmax fmin`` (OpenACC 3.3 §2.12).
    * ``index`` is an integer (1-d arrays) or a tuple of integers, one per dimension;
      negative indices wrap as in Python. ``value`` is cast to the array's dtype.
    * Bitwise operations on floats and any operation on bool/complex arrays are refused
      by :func:`atomic_problem`, saying what to write (a ``CompileError``).
"""
from __future__ import annotations

import ast

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

__all__ = ["atomic_add", "atomic_sub", "atomic_max", "atomic_min", "atomic_and",
           "atomic_or", "atomic_xor", "INTRINSICS", "atomic_problem"]

# op name -> (LLVM op for signed ints, unsigned ints, floats); None: not defined.
_LLVM_OPS = {
    "add": ("add", "add", "fadd"),
    "sub": ("sub", "sub", "fsub"),
    "max": ("max", "umax", "fmax"),
    "min": ("min", "umin", "fmin"),
    "and_": ("and", "and", None),
    "or_": ("or", "or", None),
    "xor": ("xor", "xor", None),
}


def _llvm_op(op: str, dtype) -> str | None:
    signed, unsigned, floating = _LLVM_OPS[op]
    if isinstance(dtype, types.Boolean):
        return None
    if isinstance(dtype, types.Integer):
        return signed if dtype.signed else unsigned
    if isinstance(dtype, types.Float):
        return floating
    return None


def _index_types(index, ndim):
    """Return the per-dimension index types, or None when ``index`` cannot index."""
    if isinstance(index, types.Integer):
        return [index] if ndim == 1 else None
    if isinstance(index, types.BaseTuple) and len(index) == ndim:
        if all(isinstance(t, types.Integer) for t in index.types):
            return list(index.types)
    return None


def _index_values(context, builder, index_type, index):
    if isinstance(index_type, types.Integer):
        return [context.cast(builder, index, index_type, types.intp)]
    values = cgutils.unpack_tuple(builder, index, len(index_type))
    return [context.cast(builder, v, t, types.intp) for v, t in zip(values, index_type)]


def _make_intrinsic(op: str):
    def typer(typingctx, array, index, value):
        if not isinstance(array, types.Array) or _llvm_op(op, array.dtype) is None:
            return None
        if _index_types(index, array.ndim) is None:
            return None
        if not isinstance(value, (types.Number, types.Boolean)):
            return None
        signature = array.dtype(array, index, value)

        def codegen(context, builder, sig, args):
            array_type, index_type, value_type = sig.args
            ary = make_array(array_type)(context, builder, args[0])
            indices = _index_values(context, builder, index_type, args[1])
            pointer = cgutils.get_item_pointer(
                context, builder, array_type, ary, indices, wraparound=True,
                boundscheck=bool(getattr(context, "enable_boundscheck", False)))
            operand = context.cast(builder, args[2], value_type, array_type.dtype)
            return builder.atomic_rmw(_llvm_op(op, array_type.dtype), pointer, operand,
                                      "seq_cst")
        return signature, codegen

    typer.__name__ = f"atomic_{op.rstrip('_')}"
    return intrinsic(typer)


atomic_add = _make_intrinsic("add")
atomic_sub = _make_intrinsic("sub")
atomic_max = _make_intrinsic("max")
atomic_min = _make_intrinsic("min")
atomic_and = _make_intrinsic("and_")
atomic_or = _make_intrinsic("or_")
atomic_xor = _make_intrinsic("xor")

#: ``markers.atomic`` attribute name -> name of the intrinsic in this module.
INTRINSICS = {"add": "atomic_add", "sub": "atomic_sub", "max": "atomic_max",
              "min": "atomic_min", "and_": "atomic_and", "or_": "atomic_or",
              "xor": "atomic_xor"}


def atomic_problem(call, op: str, arg_types: dict) -> str | None:
    """What is wrong with the kernel's call ``acc.atomic.<op>(...)`` (``call``, an AST
    node), said so that the user can write it right; None when nothing is (OpenACC 3.3
    §2.12: an update of an array element)."""
    if op not in INTRINSICS:
        return (f"acc.atomic.{op} is not an atomic operation; the atomic updates are "
                f"{', '.join(f'acc.atomic.{o}' for o in INTRINSICS)} (OpenACC 3.3 §2.12; "
                "each returns the element's old value, for atomic capture)")
    if len(call.args) != 3 or call.keywords:
        return f"acc.atomic.{op} takes (array, index, value)"
    array = call.args[0]
    base = array.value if isinstance(array, ast.Subscript) else array
    target = arg_types.get(getattr(base, "id", None))
    if isinstance(array, ast.Subscript) and getattr(target, "ndim", 0):
        return (f"acc.atomic.{op} takes the array and the index of its element: write "
                f"acc.atomic.{op}({base.id}, <index>, value), not an element "
                f"({ast.unparse(array)})")
    if target is not None and not hasattr(target, "ndim"):
        return (f"acc.atomic.{op} updates an element of an array, not {base.id!r} ({target}); "
                "a scalar total is a reduction, or a one-element (or 0-d) array")
    if isinstance(getattr(target, "dtype", None), (types.Boolean, types.Complex)):
        hint = ("hold the flags in an int8 array of 0 and 1 (Fortran's .AND./.OR./.NEQV. "
                "are and_/or_/xor there)" if isinstance(target.dtype, types.Boolean) else
                "update the real and imaginary parts as two float arrays")
        return (f"acc.atomic.{op} on {base.id!r}, an array of {target.dtype}: atomics update "
                f"integer and float elements (OpenACC 3.3 §2.12); {hint}")
    if op in ("and_", "or_", "xor") and isinstance(getattr(target, "dtype", None), types.Float):
        return (f"acc.atomic.{op} is a bitwise update: {base.id!r} holds {target.dtype}, an "
                "integer array is needed (OpenACC 3.3 §2.12)")
    return None
