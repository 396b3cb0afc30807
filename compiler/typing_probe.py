"""The typing probe: Numba's type inference of a kernel, without compiling it.

Owns :func:`probe_types` (the types of the variables behind a module's reduction slots:
a reduction's partial results, and a scalar a loop interchange expands, must have the
type the variable has under Python semantics) and :func:`private_local_types` (whether a
``private`` variable the region makes is an array, for the cuda target), with
:func:`may_be_arrays`, the syntactic test that spares the typing where every such
variable is a scalar. ``kernel._build`` asks it before a module's text is final.

Invariants:
    * The probe types the kernel run serially on the CPU (``ModuleBuilder(..., serial=True)``
      without a cache), stops the Numba pipeline after type inference, and makes no
      machine code; it runs under ``kernel``'s build lock, as the build that asks it.
    * A failure of Numba's typing is a ``CompileError`` located in the user's source
      (``kernel_errors.compile_error``).
"""
from __future__ import annotations

import ast
import linecache

from numba.core import compiler as nb_compiler
from numba.core import types as nbtypes
from numba.core.compiler_machinery import FunctionPass, register_pass
from numba.core.registry import cpu_target
from numba.core.typed_passes import NopythonTypeInference

from .codegen import KERNEL_NAME, ModuleBuilder, add_function
from .errors import CompileError
from .kernel_errors import compile_error

__all__ = ["may_be_arrays", "private_local_types", "probe_types"]


@register_pass(mutates_CFG=False, analysis_only=True)
class _StopAfterTyping(FunctionPass):
    """Ends a Numba pipeline once types are known (the probe needs no machine code)."""

    _name = "pyacc_stop_after_typing"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        raise nb_compiler._EarlyPipelineCompletion(state.typemap)


class _TypeOnlyCompiler(nb_compiler.CompilerBase):
    def define_pipelines(self):
        manager = nb_compiler.DefaultPassBuilder.define_untyped_pipeline(self.state)
        manager.add_pass(NopythonTypeInference, "nopython type inference")
        manager.add_pass(_StopAfterTyping, "stop after typing")
        manager.finalize()
        return [manager]


def private_local_types(info, plan, device, arg_types, cpu) -> dict:
    """Numba types of the ``private``/``firstprivate`` variables that are not parameters
    (``stencil = np.zeros(4)`` in the region's body, OpenACC 3.3 §2.5.13): only typing
    the function tells an array from a scalar there."""
    names = {n for nest in plan.nests.values() for n in nest.private + nest.firstprivate}
    names -= set(info.kernel_params)
    names = may_be_arrays(info.source.tree, names, dict(zip(info.kernel_params, arg_types)))
    if not names:  # only scalars (loop indices, arithmetic): no typing, which costs ~40 ms
        return {}
    typemap, typing_context = _typemap(info, plan, device, arg_types, cpu)
    return {n: _unified_type(typemap, n, typing_context) for n in sorted(names)}


def may_be_arrays(tree, names, known) -> set:
    """The ``names`` that some assignment of the function may give an array: a call, a
    display or comprehension, an attribute (``a.T``), a slice or a partial index of an
    array (``a[i]`` of a 2-d ``a``), or another such name. Loop targets and arithmetic on
    scalars are scalars."""
    values = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and name.id in names:
                        values.setdefault(name.id, []).append(node.value)
    found, grew = set(), True
    while grew:  # aliases of aliases
        before = len(found)
        found |= {n for n, exprs in values.items()
                  if any(_array_valued(e, known, found) for e in exprs)}
        grew = len(found) > before
    return found


def _array_valued(expr, known, found) -> bool:
    indices = {id(n.slice) for n in ast.walk(expr) if isinstance(n, ast.Subscript)}
    for node in ast.walk(expr):
        if id(node) in indices:  # ``a[i, j]``'s tuple is an index, not a display
            continue
        if isinstance(node, (ast.Call, ast.List, ast.Tuple, ast.ListComp, ast.Attribute)):
            return True
        if isinstance(node, ast.Name) and (node.id in found or getattr(
                known.get(node.id), "ndim", 0) and not _indexed(expr, node.id, known)):
            return True
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            ndim = getattr(known.get(node.value.id), "ndim", 0)
            if any(isinstance(i, ast.Slice) for i in index) or len(index) < ndim:
                return True
    return False


def _indexed(expr, name, known) -> bool:
    """Whether every use of array ``name`` in ``expr`` is a full element index."""
    ndim = getattr(known.get(name), "ndim", 0)
    uses = [n for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id == name]
    elements = [n for n in ast.walk(expr) if isinstance(n, ast.Subscript)
                and isinstance(n.value, ast.Name) and n.value.id == name
                and len(n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]) == ndim]
    return len(uses) == len(elements)


def probe_types(info, plan, device, arg_types, slots, cpu):
    """Numba types of the variables behind ``slots``' placeholders, from typing the
    kernel run serially.

    The partial results of a reduction, and the array a loop interchange expands a
    scalar into, must have the type the variable has under Python semantics
    (``s = 0; s += 0.5`` makes ``s`` a float), which only Numba's type inference of the
    whole function knows. Reduction variables must be numeric or boolean
    (``CompileError`` otherwise); an expanded scalar of another type maps to its type as
    found, and the caller builds the kernel without the interchange.
    """
    typemap, typing_context = _typemap(info, plan, device, arg_types, cpu)
    types = {var: _unified_type(typemap, var, typing_context)
             for var in slots.accumulators()}
    for var in slots.reductions():
        types[var] = _unified_type(typemap, var, typing_context)
        if not slots.is_reducible(types[var]):
            raise CompileError(f"{info.name}: reduction variable {var!r} has type "
                               f"{types[var]}; reductions need numeric or boolean scalars "
                               f"or arrays of them", info.filename, info.lineno)
    return types


def _typemap(info, plan, device, arg_types, cpu):
    """``(typemap, typing context)`` of the kernel run serially on the CPU: Numba's
    type inference of the whole function, without compiling it (``cpu``: the CPU target
    of ``kernel.TARGETS``)."""
    builder = ModuleBuilder(cpu, device_type=device, boundscheck=False,
                            arg_types=dict(zip(info.kernel_params, arg_types)), cache=False,
                            serial=True)
    add_function(builder, info, plan)
    text, linemap = builder.text(f"# pyacc typing probe for {info.where}")
    filename = f"<pyacc-probe {info.name}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace = {"__name__": "_pyacc_probe"}
    exec(compile(text, filename, "exec"), namespace)  # noqa: S102 - generated code
    namespace.update(builder.injected)
    func = namespace[KERNEL_NAME].py_func
    typing_context, target_context = cpu_target.typing_context, cpu_target.target_context
    typing_context.refresh()
    target_context.refresh()
    flags = nb_compiler.Flags()
    flags.nrt = True  # the region may make arrays (np.zeros ...), as the kernels do
    pipeline = _TypeOnlyCompiler(typing_context, target_context, None, arg_types, None,
                                 flags, {})
    try:
        return pipeline.compile_extra(func), typing_context
    except Exception as exc:  # noqa: BLE001
        raise compile_error(info, exc, filename, linemap) from None


def _unified_type(typemap, var, typing_context):
    """The type of every SSA version of ``var`` unified (None when they do not unify)."""
    found = [nbtypes.unliteral(t) for name, t in typemap.items()
             if name == var or name.startswith(var + ".")]
    if not found:
        return nbtypes.float64
    return typing_context.unify_types(*found) if len(found) > 1 else found[0]
