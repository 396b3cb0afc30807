"""Struct parameters: which parameters are structs, and a struct call's layout.

OpenACC 2.6 structs of arrays (members in data clauses, attach: OpenACC 3.3 §2.7.1,
§2.7.2). A Python struct holds references to arrays, not pointers: pyacc maps each member
the kernel uses like an array parameter, and the kernel takes the members as parameters
of their own (the function flattened for the call's layout, ``analysis.flattened``).

Owns :func:`struct_params` (the parameters a function reads members of, or whose members
a clause names), :func:`is_struct` (whether a call's value is taken as a struct),
:class:`StructLayout` and :func:`struct_layout` (the members a call's structs have, and
their kinds: the key of the flattened kernel), :class:`MemberError`, and the helpers the
flattening shares (:func:`chain_of`, :func:`refuse_member_store`).

Invariants:
    * A parameter read only through ndarray's attributes (``a.shape``, ``a.sum()``) is an
      array, never a struct; any other attribute makes it a struct parameter.
    * A struct's members are read, never assigned, by a kernel (``s.x = ...`` is a
      ``CompileError``): the layout of a call decides its kernel.
    * This module imports nothing of ``analysis`` at run time (``KernelInfo`` only in
      annotations): ``analysis`` imports it.
"""
from __future__ import annotations

import ast
import dataclasses
import numbers
import types as pytypes
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .arguments import is_device_array
from .clauses import ComputeClauses

if TYPE_CHECKING:  # annotations only: analysis imports this module
    from .analysis import KernelInfo

__all__ = ["MemberError", "StructLayout", "chain_of", "checked_struct_params", "is_struct",
           "refuse_member_store", "struct_layout", "struct_params"]


# OpenACC 2.6 structs of arrays (members in data clauses, attach: OpenACC 3.3 §2.7.1,
# §2.7.2). A Python struct holds references to arrays, not pointers: pyacc maps each
# member the kernel uses like an array parameter, and the kernel takes the members as
# parameters of their own (the function flattened for the call's layout).

#: the ndarray attributes and methods Numba compiles: a parameter read only through
#: these is an array (``a.shape``, ``a.sum()``); any other attribute (``s.x``, and
#: ``s.data``, which Numba's arrays do not have) makes it a struct parameter
_ARRAY_ATTRIBUTES = frozenset({
    "T", "ctypes", "dtype", "flags", "flat", "imag", "itemsize", "nbytes", "ndim", "real",
    "shape", "size", "strides", "all", "any", "argmax", "argmin", "argsort", "astype",
    "conj", "conjugate", "copy", "cumprod", "cumsum", "dot", "fill", "flatten", "item",
    "itemset", "max", "mean", "min", "nonzero", "prod", "ravel", "repeat", "reshape",
    "sort", "std", "sum", "take", "transpose", "var", "view", "squeeze", "swapaxes",
    "searchsorted", "tolist"})


class MemberError(ValueError):
    """A struct argument's member that a kernel cannot take: missing, or a struct where
    the kernel needs an array or a scalar. ``name`` is the member as the program spells
    it (``"s.x"``); the launcher reports it as ``InvalidArgumentError``."""

    def __init__(self, message, name):
        super().__init__(message)
        self.name = name


def struct_params(tree: ast.FunctionDef, params, clauses: ComputeClauses) -> dict:
    """Each parameter the function uses as a struct, and the member chains it reads of
    it, in source order (module docstring): a parameter with an attribute read that is
    not an ndarray attribute (``s.x``), or with a member named in a data clause."""
    inner = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)}
    chains: dict = {}
    for node in ast.walk(tree):
        chain = chain_of(node) if isinstance(node, ast.Attribute) and id(node) not in inner \
            else None
        if chain is not None and chain[0] in params:
            chains.setdefault(chain[0], []).append(((node.lineno, node.col_offset), chain[1]))
    candidates = {name for name, found in chains.items()
                  if any(attrs[0] not in _ARRAY_ATTRIBUTES for _, attrs in found)}
    candidates |= {name.split(".")[0] for name in clauses.member_names()}
    return {name: tuple(dict.fromkeys(attrs for _, attrs in sorted(chains.get(name, ()))))
            for name in params if name in candidates}


def checked_struct_params(source, params, clauses) -> dict:
    """:func:`struct_params`, with assignments to members refused (``s.n = 0``): a
    struct's scalars are firstprivate values and its arrays are written by element."""
    found = struct_params(source.tree, params, clauses)
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            chain = chain_of(node)
            if chain is not None and chain[0] in found:
                refuse_member_store(source, ".".join((chain[0], *chain[1])), node)
    return found


def refuse_member_store(source, spelled, node):
    raise source.error(
        f"assigns the member {spelled!r} of a struct parameter: in a compute region a "
        f"struct's members are its arrays (write their elements: {spelled}[i] = ...) and "
        f"firstprivate scalars (OpenACC 3.3 §2.5.14); compute into a local variable "
        f"instead", node)


def is_struct(value) -> bool:
    """True for the values a kernel takes as structs: a namedtuple, a dataclass instance
    or an object with attributes (``__dict__`` or ``__slots__``); not arrays (host or
    device), numbers, strings, containers, classes, modules or functions. (Decided by
    the value's type, remembered per type.)"""
    kind = type(value)
    found = _STRUCT_TYPES.get(kind)
    if found is None:
        found = _STRUCT_TYPES[kind] = _is_struct(value)
    return found


#: ``is_struct`` by type (a type's answer never changes: it reads type-level facts)
_STRUCT_TYPES: dict = {}


def _is_struct(value) -> bool:
    if isinstance(value, (np.ndarray, np.generic, numbers.Number, str, bytes, list, dict,
                          set, frozenset, range, type, pytypes.ModuleType,
                          pytypes.FunctionType, pytypes.BuiltinFunctionType,
                          pytypes.MethodType)) or value is None:
        return False
    if is_device_array(value):
        return False
    if isinstance(value, tuple):
        return hasattr(type(value), "_fields")  # a namedtuple; a plain tuple is a scalar
    if callable(value):
        return False
    return dataclasses.is_dataclass(value) or hasattr(value, "__dict__") or \
        bool(getattr(type(value), "__slots__", ()))


class StructLayout(NamedTuple):
    """The struct arguments of one call and the members their kernel takes (hashable:
    it keys the flattened ``KernelInfo``; a named tuple: made at every struct call).

    Attributes:
        structs: ``(index, name, members)`` per struct argument, in parameter order;
            ``members`` are attribute paths (``("x",)``, ``("a", "b")``), each ending at
            an array or a scalar of that call.
    """

    structs: tuple

    def flatten(self, args) -> tuple:
        """``args`` with each struct replaced by its members' values (what the
        flattened kernel takes); arguments past the parameters are kept."""
        flat, start = [], 0
        for index, _, members in self.structs:
            flat += args[start:index]
            value = args[index]
            flat += [_follow(value, path) for path in members]
            start = index + 1
        flat += args[start:]
        return tuple(flat)

    def rebuild(self, flat) -> list:
        """The inverse of :meth:`flatten` for plain-Python runs: each struct stands as a
        ``SimpleNamespace`` of its members' (device) values."""
        args, position, done = [], 0, 0
        for index, _, members in self.structs:
            count = index - done
            args += flat[position:position + count]
            position += count
            args.append(_namespace(members, flat[position:position + len(members)]))
            position += len(members)
            done = index + 1
        return args + list(flat[position:])

    def labels(self) -> list:
        """``(index, name, path, "s.x")`` per member, in flattened order."""
        return [(index, name, path, ".".join((name, *path)))
                for index, name, members in self.structs for path in members]


def _follow(value, path):
    for attr in path:
        value = getattr(value, attr)
    return value


def _namespace(members, values):
    root = pytypes.SimpleNamespace()
    for path, value in zip(members, values):
        node = root
        for attr in path[:-1]:
            node = node.__dict__.setdefault(attr, pytypes.SimpleNamespace())
        setattr(node, path[-1], value)
    return root


def struct_layout(info: KernelInfo, args) -> StructLayout | None:
    """The :class:`StructLayout` of a call with ``args`` (the user's arguments first),
    or None when no struct parameter gets a struct (nothing to flatten).

    Raises:
        MemberError: A member the kernel reads (or a clause names) is missing, or is a
            struct where the kernel reads it as a value.
    """
    structs = []
    for index, name in enumerate(info.params):
        chains = info.struct_params.get(name)
        if chains is None:
            continue
        value = args[index]
        if not is_struct(value):
            named = _clause_members(info).get(name)
            if named:
                spelled = ".".join((name, *named[0]))
                raise MemberError(
                    f"a data clause names the member {spelled!r}, but argument {name!r} is "
                    f"a {type(value).__name__}, not a struct (a namedtuple, a dataclass or "
                    f"an object with array attributes)", spelled)
            continue
        members = [_member_path(value, name, chain, strict=True) for chain in chains]
        members += [_member_path(value, name, chain, strict=False)
                    for chain in _clause_members(info).get(name, ())]
        structs.append((index, name, tuple(dict.fromkeys(m for m in members if m))))
    return StructLayout(tuple(structs)) if structs else None


def _clause_members(info) -> dict:
    """``{parameter: (member path, ...)}`` of the members the data clauses name (read
    once per info)."""
    found = info.__dict__.get("_clause_members")
    if found is None:
        found = {}
        for named in info.clauses.member_names():
            root, *path = named.split(".")
            found.setdefault(root, []).append(tuple(path))
        found = info.__dict__["_clause_members"] = {k: tuple(v) for k, v in found.items()}
    return found


def _member_path(value, name, chain, *, strict):
    """The prefix of ``chain`` that reaches an array or a scalar of struct ``value``
    (``("x",)`` of ``("x", "shape")``). ``strict`` (a chain the function reads): it must
    reach one; else (a clause's member) a struct reached covers the members under it
    (None)."""
    current = value
    for depth, attr in enumerate(chain):
        try:
            current = getattr(current, attr)
        except AttributeError:
            spelled = ".".join((name, *chain[:depth + 1]))
            raise MemberError(f"struct argument {name!r} ({type(value).__name__}) has no "
                              f"member {spelled!r}", spelled) from None
        if not is_struct(current):
            return chain if depth == len(chain) - 1 else chain[:depth + 1]
    if strict:
        spelled = ".".join((name, *chain))
        raise MemberError(f"the kernel uses {spelled!r} itself, a {type(current).__name__} "
                          f"(a struct): a kernel takes a struct's array and scalar members, "
                          f"so read them there ({spelled}.member[i]), or pass the member "
                          f"arrays as arguments", spelled)
    return None


def chain_of(node):
    """``(root, (attr, ...))`` of an attribute chain ``s.a.b``, or None."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return (node.id, tuple(reversed(attrs))) if isinstance(node, ast.Name) else None
