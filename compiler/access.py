"""Access sets: which parameters a kernel may write and which it reads.

Owns :func:`access_sets`. Arrays a kernel never writes are not copied back (OpenACC 3.3
§2.6.2 implicit present-or-copy of read-only arrays, API.md §6).

Invariants:
    * ``written`` over-approximates the parameters whose elements the kernel may write
      (element stores, augmented stores, atomics, arrays handed to routines, unknown
      calls or mutating methods, through local aliases); never under-approximates.
"""
from __future__ import annotations

import ast

from .frontend import ROUTINE_ATTR, CallKind, FunctionSource, Scope, classify_call, load_function, local_names, root_name

__all__ = ["access_sets", "SHAPE_ATTRS", "mutating_library_call", "shape_subscript"]

# ndarray methods that do not write their array.
_READONLY_METHODS = frozenset({
    "copy", "sum", "prod", "mean", "std", "var", "min", "max", "argmin", "argmax", "any",
    "all", "dot", "reshape", "ravel", "flatten", "transpose", "astype", "item",
    "nonzero", "cumsum", "cumprod", "view", "conj", "conjugate", "tolist", "take",
    "repeat", "squeeze", "swapaxes", "searchsorted"})
SHAPE_ATTRS = frozenset({"shape", "size", "ndim", "dtype", "itemsize", "nbytes",
                          "strides"})


def shape_subscript(node: ast.Subscript) -> bool:
    """``a.shape[1]``, ``a.strides[0]``: a subscript of an array's shape, read on the host
    and no element of ``a`` (``a.T[j, i]`` is one: a view)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr in SHAPE_ATTRS


def mutating_library_call(call):
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name == "copyto" or any(k.arg == "out" for k in call.keywords)


# ------------------------------------------------------------------ written / read sets


def access_sets(source: FunctionSource, scope: Scope, private=()):
    """Parameters the function may write (elements) and reads: ``(written, read)``.
    ``private``: the construct's private/firstprivate names, whose writes go to the
    region's copies (``privates``), never to the parameter."""
    params = set(source.params)
    aliases = _aliases(source.tree, params)
    written, read = set(), set()

    def mark(node):
        name = root_name(node)
        if name is not None:
            written.update(aliases.get(name, ()))

    for node in ast.walk(source.tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            read.update(aliases.get(node.id, ()))
        if isinstance(node, (ast.Subscript, ast.Attribute)) and \
                isinstance(node.ctx, ast.Store):
            mark(node)
        if isinstance(node, ast.Call):
            _mark_call(node, scope, mark)
    return (written & params) - set(private), read & params


def _mark_call(call, scope, mark):
    kind, detail = classify_call(call, scope)
    if kind in (CallKind.LOOP, CallKind.ON_DEVICE, CallKind.RANGE):
        return
    if kind == CallKind.ATOMIC:
        if call.args:
            mark(call.args[0])
        return
    if kind == CallKind.LIBRARY:
        if mutating_library_call(call):
            for arg in call.args[:1] + [k.value for k in call.keywords if k.arg == "out"]:
                mark(arg)
        return
    if isinstance(call.func, ast.Attribute) and kind == CallKind.METHOD:
        if call.func.attr not in _READONLY_METHODS:
            mark(call.func.value)
    if kind == CallKind.ROUTINE and detail is not None:
        written_params = _routine_written(detail)
        if written_params is not None:
            _mark_routine_arguments(call, detail, written_params, mark)
            return
    for arg in list(call.args) + [k.value for k in call.keywords]:
        mark(arg)


def _mark_routine_arguments(call, routine, written_params, mark):
    """Mark only the arguments bound to parameters the routine may write."""
    params = routine.__code__.co_varnames[: routine.__code__.co_argcount]
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred) or position >= len(params) or params[position] in written_params:
            mark(arg)
    for keyword in call.keywords:
        if keyword.arg is None or keyword.arg in written_params:
            mark(keyword.value)


_ROUTINE_WRITES: dict = {}


def _routine_written(routine) -> frozenset | None:
    """The parameters a routine may write, from its own analysis (``acc.routine``'s
    ``KernelInfo``, or an access-set analysis of an implicit routine); None when it
    cannot be analysed (then every argument counts as written)."""
    info = getattr(routine, ROUTINE_ATTR, None)
    if info is not None:
        return info.written
    if routine in _ROUTINE_WRITES:
        return _ROUTINE_WRITES[routine]
    _ROUTINE_WRITES[routine] = None  # a recursive call sees "unknown": conservative
    try:
        source = load_function(routine)
        written, _ = access_sets(source, Scope(source.func, local_names(source.tree)))
        _ROUTINE_WRITES[routine] = frozenset(written)
    except Exception:  # not analysable (no source, a builtin ...): stay conservative
        _ROUTINE_WRITES[routine] = None
    return _ROUTINE_WRITES[routine]


def _aliases(tree, params):
    """Map each variable to the parameters whose memory it may refer to."""
    aliases = {p: {p} for p in params}
    changed = True
    while changed:
        changed = False
        for node in ast.walk(tree):
            for target, value in _bindings(node):
                sources = set()
                for name in _array_sources(value):
                    sources |= aliases.get(name, set())
                for name in _bound_names(target):
                    if sources - aliases.get(name, set()):
                        aliases.setdefault(name, set()).update(sources)
                        changed = True
    return aliases


def _bindings(node):
    if isinstance(node, ast.Assign):
        return [(t, node.value) for t in node.targets]
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
        return [(node.target, node.value)]
    if isinstance(node, ast.For):
        return [(node.target, node.iter)]
    if isinstance(node, ast.NamedExpr):
        return [(node.target, node.value)]
    return []


def _bound_names(target):
    """Names a target rebinds (``a`` in ``a, b = ...``; none in ``a[i] = ...``)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _bound_names(elt)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def _array_sources(value):
    """Names whose memory ``value`` may refer to (skips shapes, len(), range())."""
    if isinstance(value, ast.Attribute) and value.attr in SHAPE_ATTRS:
        return set()
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
            value.func.id in ("len", "range"):
        return set()
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
            value.func.attr == "loop":
        return set().union(*(_array_sources(a) for a in value.args)) if value.args \
            else set()
    if isinstance(value, ast.Name):
        return {value.id}
    names = set()
    for child in ast.iter_child_nodes(value):
        names |= _array_sources(child)
    return names
