"""The arrays a compute region makes, on the ``cuda`` target (``cuda_target``).

Owns :class:`LocalArrays` (an array made inside a kernel's loop body or a routine,
``t = np.zeros(5)``, becomes a per-thread ``cuda.local.array``, OpenACC 3.3 §2.5.13) and
:func:`rebind_on_device` (an array the driver makes on the host becomes a device array
before any kernel takes it), and the names of the generated module they write
(:data:`CUDA`, :data:`CRT`, :data:`DEVICE_COPIES`; ``cuda_target`` uses the same).

Invariants:
    * A per-thread array's size is fixed when compiling (literals, arithmetic on them,
      inlined module-level integers); anything else is a ``CompileError`` naming the
      array and the fix (``private``).
    * The driver keeps one device copy per host array and call (``DEVICE_COPIES``), so
      aliases of one host array stay one device array.
"""
from __future__ import annotations

import ast

import numpy as np

from .cuda_builtins import pairwise_extrema
from .reductions import NP

__all__ = ["CRT", "CUDA", "DEVICE_COPIES", "LOCAL_FILL", "LocalArrays", "rebind_on_device"]

#: the generated module's names of numba-cuda (or numba-cuda-mlir) and of ``cuda_runtime``
CUDA = "_acc_cuda"
CRT = "_acc_crt"
#: the driver's device copies of the host arrays it made, for one call (``rebind_on_device``)
DEVICE_COPIES = "_acc_device_copies"

LOCAL_FILL = {"zeros": "0", "ones": "1", "empty": None, "full": "FILL"}


class LocalArrays(ast.NodeTransformer):
    """Arrays made inside a kernel's loop body or a routine (``t = np.zeros(5)``) become
    per-thread arrays, ``cuda.local.array`` (OpenACC 3.3 §2.5.13: a variable declared in
    the region is private to the thread that runs it), filled as the NumPy function would.
    Their size must be known when compiling (literals, or module-level integers, which
    are inlined); otherwise a ``CompileError`` names the array and the fix (``private``)."""

    def __init__(self, target, source):  # target: the ``cuda_target.CudaTarget``
        self.target, self.source, self.count = target, source, 0

    def rewrite(self, stmts: list) -> list:
        """``stmts`` as device code: local arrays made per thread, and builtins the GPU
        compilers lack written as they have them (``cuda_builtins``)."""
        module = ast.Module(body=list(stmts), type_ignores=[])
        return pairwise_extrema(self.visit(module).body, self.target.builder.injected)

    def visit_Assign(self, node):
        maker = self.target.numpy_maker(node.value)
        if maker is None:
            return self.generic_visit(node)
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            raise self.source.error(
                f"on the cuda target an array made in a kernel (np.{maker}) must be assigned "
                "to one name", node)
        return self._local_array(node.targets[0].id, maker, node.value, node)

    def visit_Call(self, node):
        maker = self.target.numpy_maker(node)
        if maker is not None:
            raise self.source.error(
                f"on the cuda target an array made in a kernel (np.{maker}(...)) must be "
                "assigned to a name of its own (t = np.zeros(4)), not used in an expression",
                node)
        return self.generic_visit(node)

    def _local_array(self, name, maker, call, node) -> list:
        shape = self._shape(name, maker, call)
        dtype, fill = self._dtype_and_fill(name, maker, call)
        self.count += 1
        index = [f"_acc_l{self.count}_{d}" for d in range(len(shape))]
        lines = [f"{name} = {CUDA}.local.array({ast.unparse(ast.Tuple(elts=shape))}, {dtype})"]
        if fill is not None:
            for depth, (variable, extent) in enumerate(zip(index, shape)):
                lines.append("    " * depth + f"for {variable} in range({ast.unparse(extent)}):")
            lines.append("    " * len(shape) + f"{name}[{', '.join(index)}] = {fill}")
        return [ast.copy_location(stmt, node) for stmt in ast.parse("\n".join(lines)).body]

    def _shape(self, name, maker, call) -> list:
        if not call.args:
            raise self.source.error(f"np.{maker} of array {name!r} has no shape", call)
        shape = call.args[0]
        parts = shape.elts if isinstance(shape, ast.Tuple) else [shape]
        extents = [_literal_int(part) for part in parts]
        if not all(type(e) is int and e > 0 for e in extents):
            raise self.source.error(
                f"on the cuda target array {name!r} (np.{maker}({ast.unparse(shape)})) is made "
                "in a kernel, where each thread gets its own copy of a size fixed when "
                "compiling (a literal); its size is known only at run time: make it once "
                f"before the loop ({name} = np.{maker}(...)) and name it private "
                f"(private=\"{name}\"), which gives each thread its own copy of any size",
                call)
        return [ast.Constant(e) for e in extents]

    def _dtype_and_fill(self, name, maker, call):
        keywords = {k.arg: k.value for k in call.keywords}
        position = 2 if maker == "full" else 1
        dtype = keywords.get("dtype", call.args[position] if len(call.args) > position else None)
        fill = LOCAL_FILL[maker]
        if maker == "full":
            value = keywords.get("fill_value", call.args[1] if len(call.args) > 1 else None)
            if value is None:
                raise self.source.error(f"np.full of array {name!r} has no fill value", call)
            fill = ast.unparse(value)
            if dtype is None and not isinstance(value, ast.Constant):
                raise self.source.error(
                    f"on the cuda target np.full of array {name!r} with a fill value that is "
                    "not a literal needs dtype=... (the array's type is fixed when compiling)",
                    call)
            if dtype is None:
                dtype = ast.parse(f"{NP}.{_SCALAR_DTYPE[type(value.value)]}").body[0].value
        if dtype is None:
            return f"{NP}.float64", fill
        if isinstance(dtype, ast.Constant) and isinstance(dtype.value, str):
            return f"{NP}.{np.dtype(dtype.value).name}", fill
        return ast.unparse(dtype), fill


_FOLD = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
         ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b if b else None}


def _literal_int(node):
    """The value of an integer literal, or of arithmetic on such (``2 * 8``); None for
    anything known only at run time."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.BinOp) and type(node.op) in _FOLD:
        left, right = _literal_int(node.left), _literal_int(node.right)
        return None if left is None or right is None else _FOLD[type(node.op)](left, right)
    return None


#: the dtype NumPy gives ``np.full`` of a literal fill value
_SCALAR_DTYPE = {bool: "bool_", int: "int64", float: "float64", complex: "complex128"}


def rebind_on_device(stmts: list, names: set) -> bool:
    """After each driver statement that assigns one of ``names`` (the variables that
    kernels take), rebind it to ``cuda_runtime.on_device`` of itself: an array the region
    makes on the host (``t = np.zeros(3)``, a parameter given a new array) becomes a device
    array before any kernel takes it. ``on_device`` keeps one device copy per host array
    for the call (``DEVICE_COPIES``), so aliases (``w = v = np.zeros(3)``) stay one array
    and kernels share it. A loop variable, a ``with ... as`` name or a walrus in a
    statement's header is rebound at the top of each of its bodies and after it. True
    when something was rebound."""
    if not names:
        return False
    rebound = False
    index = 0
    while index < len(stmts):
        stmt = stmts[index]
        bodies = [getattr(stmt, f) for f in ("body", "orelse", "finalbody")
                  if isinstance(getattr(stmt, f, None), list) and getattr(stmt, f)
                  and isinstance(getattr(stmt, f)[0], ast.stmt)]
        bodies += [handler.body for handler in getattr(stmt, "handlers", ())]
        for inner in bodies:
            rebound |= rebind_on_device(inner, names)
        if bodies:  # a compound statement: what its header assigns
            assigned = sorted(_header_names(stmt) & names)
            for inner in bodies:
                inner[:0] = _rebinding(assigned, stmt)
        else:
            assigned = sorted(_assigned(stmt) & names)
        stmts[index + 1:index + 1] = _rebinding(assigned, stmt)
        rebound |= bool(assigned)
        index += 1 + len(assigned)
    return rebound


def _assigned(node) -> set:
    """Names a statement (or expression) assigns in the driver's own scope: not those of
    a comprehension, lambda or nested function, which have scopes of their own."""
    found = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                              ast.Lambda, ast.FunctionDef)):
            continue
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            found.add(child.id)
        found |= _assigned(child)
    return found


def _header_names(stmt) -> set:
    """Names the header of a compound statement assigns: a ``for`` target, ``with ...
    as`` names, walrus targets in its test or iterable."""
    parts = [getattr(stmt, f) for f in ("target", "iter", "test") if getattr(stmt, f, None)]
    parts += [item for item in getattr(stmt, "items", ())]
    found = set()
    for part in parts:
        found |= _assigned(ast.Expr(value=part) if isinstance(part, ast.expr) else part)
    return found


def _rebinding(names, where) -> list:
    return [ast.copy_location(ast.parse(
        f"{n} = {CRT}.on_device({n}, {DEVICE_COPIES})").body[0], where) for n in names]
