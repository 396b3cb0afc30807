"""Reductions (OpenACC 3.3 §2.5.15, §2.9.11): how a statement updates a reduction
variable, and the values generated code needs for one.

Owns the recognition of reduction updates in a loop body (:func:`reduction_pattern`,
:func:`scalar_updates`), the operators' identities typed like the variable
(:func:`reduction_identity`), the combination of two partial values (:data:`COMBINE`)
and :class:`ReductionSlots`, the placeholders of partial dtypes and identities that the
typing probe fills.

Invariants:
    * ``-`` accumulates into ``+`` (``s -= x`` is a ``+`` reduction of ``-x``).
    * ``and``/``or`` updates keep Python's operand order (``s = s or x``, never
      ``x or s``); a plain store of ``True`` into an ``or`` variable (``False`` into an
      ``and`` variable) is the update ``s = s or True`` (``s and False``), so
      ``reduction(or:stop)`` accepts ``stop = True`` as C codes write it.
    * Identities are those of §2.5.15, typed like the variable (or the array element).
    * ``if e > m: m = e`` is the update ``m = max(m, e)`` (``<``: ``min``), as C codes
      write a ``reduction(max:m)`` (:func:`with_extremum_updates`): the same value as
      Python's ``max(m, e)``, which keeps ``m`` unless ``e > m``.
"""
from __future__ import annotations

import ast
import copy

import numpy as np
from numba import types as nbtypes

from .frontend import loaded_names

__all__ = ["reduction_pattern", "scalar_updates", "same_op", "canonical", "COMBINE",
           "with_extremum_updates",
           "is_absorbing_store", "element_update", "array_updates",
           "ReductionSlots", "reduction_identity", "numpy_dtype", "NP", "PLACEHOLDER"]

#: Name of numpy in generated modules.
NP = "_acc_np"
#: Prefix of the placeholders of reduction types in generated text.
PLACEHOLDER = "_ACC_RTYPE_"

# Reduction operators by AST operator (OpenACC 3.3 §2.5.15); "-" accumulates into "+".
_AUG_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.BitAnd: "&", ast.BitOr: "|",
            ast.BitXor: "^"}
_BIN_OPS = {ast.Add: "+", ast.Mult: "*", ast.BitAnd: "&", ast.BitOr: "|",
            ast.BitXor: "^"}
_BOOL_OPS = {ast.And: "and", ast.Or: "or"}


def same_op(declared, found):
    return canonical(found) == declared


def canonical(op):
    return "+" if op == "-" else op


def reduction_pattern(stmt, scope):
    """``(var, op, var_node)`` when ``stmt`` is a reduction update, else None."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        op = _AUG_OPS.get(type(stmt.op))
        var = stmt.target.id
        if op and var not in loaded_names(stmt.value):
            return var, op, stmt.target
        return None
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and
            isinstance(stmt.targets[0], ast.Name)):
        return None
    var, value = stmt.targets[0].id, stmt.value
    operands, op = None, None
    if isinstance(value, ast.BinOp) and type(value.op) in _BIN_OPS:
        operands, op = [value.left, value.right], _BIN_OPS[type(value.op)]
    elif isinstance(value, ast.BoolOp) and len(value.values) == 2:
        operands, op = value.values, _BOOL_OPS[type(value.op)]
    elif isinstance(value, ast.Call) and len(value.args) >= 2 and not value.keywords:
        target = scope.resolve(value.func)  # (Fortran's MIN(m, a, b): any number of values)
        if target is max or target is min:
            operands, op = value.args, target.__name__
    if operands is None:
        return None
    mine = [o for o in operands if isinstance(o, ast.Name) and o.id == var]
    others = [o for o in operands if o not in mine]
    if len(mine) != 1 or not others or any(var in loaded_names(o) for o in others):
        return None
    if op in ("and", "or") and operands[0] is not mine[0]:
        return None  # `x and s` is not `s and x` in Python
    return var, op, mine[0]


#: The constant a plain store may assign to a variable of each operator and still be
#: one of its updates: ``stop = True`` is ``stop = stop or True`` (C codes write
#: ``reduction(||:stop)`` with ``stop = 1``).
_ABSORBING = {"or": True, "|": True, "and": False, "&": False}


def is_absorbing_store(stmt, var: str, op: str) -> bool:
    """True when ``stmt`` is ``var = True`` for an ``or``/``|`` reduction (``False``
    for ``and``/``&``): the update ``var = var op constant``, whatever ``var`` held."""
    return (op in _ABSORBING and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == var
            and isinstance(stmt.value, ast.Constant)
            and stmt.value.value is _ABSORBING[op])


#: The operator an ``if e OP m: m = e`` computes, by the comparison with ``e`` on its left.
_EXTREMA = {ast.Gt: "max", ast.Lt: "min"}  # (>= takes e on ties: -0.0 against 0.0)
_FLIPPED = {"max": "min", "min": "max"}
#: The nodes of an expression that reads and computes only (no call, no walrus).
_PURE = (ast.Name, ast.Constant, ast.Subscript, ast.Attribute, ast.BinOp, ast.UnaryOp,
         ast.Tuple, ast.Slice, ast.operator, ast.unaryop, ast.expr_context)


def _extremum_update(stmt, scope):
    """``m = max(m, e)`` for ``if e > m: m = e`` (``m < e`` too; ``min`` for ``<``;
    not ``>=``, which keeps ``e`` on a tie, ``-0.0`` against ``0.0``), when ``e`` only
    reads and computes and ``max``/``min`` are the builtins; else None."""
    if not (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1 and
            isinstance(stmt.test, ast.Compare) and len(stmt.test.ops) == 1):
        return None
    assign = stmt.body[0]
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and
            isinstance(assign.targets[0], ast.Name)):
        return None
    var, value = assign.targets[0].id, assign.value
    op = _EXTREMA.get(type(stmt.test.ops[0]))
    left, right = stmt.test.left, stmt.test.comparators[0]
    if isinstance(left, ast.Name) and left.id == var:
        left, right, op = right, left, _FLIPPED.get(op)
    if op is None or not (isinstance(right, ast.Name) and right.id == var) or \
            ast.dump(left) != ast.dump(value) or var in loaded_names(value) or \
            not all(isinstance(n, _PURE) for n in ast.walk(value)) or \
            scope.resolve(ast.Name(id=op, ctx=ast.Load())) is not {"max": max, "min": min}[op]:
        return None
    call = ast.Call(func=ast.Name(id=op, ctx=ast.Load()),
                    args=[ast.Name(id=var, ctx=ast.Load()), value], keywords=[])
    return ast.fix_missing_locations(ast.copy_location(
        ast.Assign(targets=[assign.targets[0]], value=call), stmt))


def with_extremum_updates(tree, scope):
    """``tree`` with each ``if e > m: m = e`` written ``m = max(m, e)`` (a copy; ``tree``
    itself when it has none): then a ``reduction(max:m)`` loop accepts it and a
    ``kernels`` loop finds the reduction (OpenACC 3.3 §2.5.15 leaves the spelling of the
    update free; the value is the same)."""
    if not any(_extremum_update(n, scope) for n in ast.walk(tree)):
        return tree

    class Rewrite(ast.NodeTransformer):
        def visit_If(self, node):
            return _extremum_update(node, scope) or self.generic_visit(node)

    return Rewrite().visit(copy.deepcopy(tree))


def element_update(stmt, scope):
    """``(var, op, index, value)`` when ``stmt`` updates one element of an array with a
    reduction operator (``a[k] += v``, ``a[k] = a[k] * v``, ``a[k] = max(a[k], v)``,
    ``a[k] = a[k] and v``),
    else None. The array reductions of OpenACC 3.3 §2.5.15 are made of these."""
    if isinstance(stmt, ast.AugAssign) and _is_element(stmt.target):
        op = _AUG_OPS.get(type(stmt.op))
        var = stmt.target.value.id
        if op and var not in loaded_names(stmt.value):
            return var, op, stmt.target.slice, stmt.value
        return None
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and
            _is_element(stmt.targets[0])):
        return None
    target, value = stmt.targets[0], stmt.value
    var, key = target.value.id, ast.dump(target.slice)
    operands, op = None, None
    if isinstance(value, ast.BinOp) and type(value.op) in _BIN_OPS:
        operands, op = [value.left, value.right], _BIN_OPS[type(value.op)]
    elif isinstance(value, ast.BoolOp) and len(value.values) == 2:  # a[k] = a[k] and v
        operands, op = list(value.values), _BOOL_OPS[type(value.op)]
    elif isinstance(value, ast.Call) and len(value.args) >= 2 and not value.keywords:
        function = scope.resolve(value.func) if scope is not None else \
            {"max": max, "min": min}.get(getattr(value.func, "id", None))
        if function is max or function is min:
            operands, op = value.args, function.__name__
    if operands is None:
        return None
    mine = [o for o in operands if _is_element(o) and o.value.id == var
            and ast.dump(o.slice) == key]
    others = [o for o in operands if o not in mine]
    if len(mine) != 1 or not others or any(var in loaded_names(o) for o in others):
        return None
    value = others[0] if len(others) == 1 else ast.copy_location(  # max(a[k], v, w): max(v, w)
        ast.Call(func=value.func, args=others, keywords=[]), value)
    return var, op, target.slice, value


_SHAPE_ATTRS = frozenset({"shape", "size", "ndim", "dtype", "itemsize", "nbytes"})


def _is_element(node) -> bool:
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)


def array_updates(body, scope, var):
    """Every statement of ``body`` that stores into elements of ``var``, as
    ``[(op or None, stmt)]`` (None: not a reduction update), and the lines where ``var``
    is used otherwise (read, passed, stored as a whole)."""
    updates, pattern_nodes, targets = [], set(), set()
    for stmt in body:
        for node in ast.walk(stmt):
            found = element_update(node, scope) if isinstance(node, ast.stmt) else None
            if found and found[0] == var:
                updates.append((found[1], node))
                pattern_nodes.update(id(n) for n in ast.walk(node)
                                     if isinstance(n, ast.Name) and n.id == var)
                targets.add(id(node.target if isinstance(node, ast.AugAssign)
                               else node.targets[0]))
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id == var and \
                    id(node) not in targets:
                updates.append((None, node))
                pattern_nodes.add(id(node.value))
    for stmt in body:  # its shape is the private copy's: reading it is fine
        for node in ast.walk(stmt):
            if isinstance(node, ast.Attribute) and node.attr in _SHAPE_ATTRS:
                pattern_nodes.add(id(node.value))
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "len":
                pattern_nodes.update(id(arg) for arg in node.args)
    other_uses = [node.lineno for stmt in body for node in ast.walk(stmt)
                  if isinstance(node, ast.Name) and node.id == var
                  and id(node) not in pattern_nodes]
    return updates, other_uses


def scalar_updates(body, scope):
    """Map each stored name to [(op or None, node)], and the set read elsewhere."""
    updates: dict[str, list] = {}
    pattern_nodes = set()
    for stmt in body:
        for node in ast.walk(stmt):
            found = reduction_pattern(node, scope) if isinstance(node, ast.stmt) \
                else None
            if found:
                var, op, var_node = found
                updates.setdefault(var, []).append((op, node))
                pattern_nodes.add(id(var_node))
                if isinstance(node, ast.AugAssign):
                    pattern_nodes.add(id(node.target))
                else:
                    pattern_nodes.add(id(node.targets[0]))
    reads = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and id(node) not in pattern_nodes:
                if isinstance(node.ctx, ast.Store):
                    updates.setdefault(node.id, []).append((None, node))
                else:
                    reads.add(node.id)
    return updates, reads


COMBINE = {"+": "{a} + {b}", "*": "{a} * {b}", "max": "max({a}, {b})",
            "min": "min({a}, {b})", "&": "{a} & {b}", "|": "{a} | {b}", "^": "{a} ^ {b}",
            "and": "{a} and {b}", "or": "{a} or {b}"}


class ReductionSlots:
    """Sources of reduction partial dtypes and identities, and of the dtypes of the
    arrays a loop interchange expands scalars into: placeholders in the generated text,
    filled once the typing probe has given each variable its Numba type (``fill``).
    """

    def __init__(self):
        self.slots: dict[str, tuple[str, str, str]] = {}

    def reductions(self) -> set:
        """Reduction variables whose types are still placeholders."""
        return {var for kind, _, var in self.slots.values() if kind != "accumulator"}

    def accumulators(self) -> set:
        """Scalars a loop interchange expands, whose types are still placeholders."""
        return {var for kind, _, var in self.slots.values() if kind == "accumulator"}

    @staticmethod
    def is_scalar(numba_type) -> bool:
        """True for the types a reduction partial or an expanded scalar may have."""
        return isinstance(numba_type, (nbtypes.Number, nbtypes.Boolean))

    @classmethod
    def is_reducible(cls, numba_type) -> bool:
        """True for the types a reduction variable may have: a numeric or boolean
        scalar, or an array of them (an array reduction, OpenACC 3.3 §2.5.15)."""
        if isinstance(numba_type, nbtypes.Array):
            numba_type = numba_type.dtype
        return cls.is_scalar(numba_type)

    def refused_accumulators(self, types: dict) -> str:
        """Why the interchange cannot expand its scalars (some type is not a number
        or a boolean), or '' when it can."""
        return ", ".join(f"{var!r} has type {types[var]}" for var in sorted(self.accumulators())
                         if not self.is_scalar(types[var]))

    def accumulator(self, prefix, var):
        """Source of the dtype of the array a loop interchange expands ``var`` into."""
        return self._get("accumulator", prefix, None, var)

    def dtype(self, prefix, op, var):
        """Source of the dtype of ``var``'s partials."""
        return self._get("dtype", prefix, op, var)

    def identity(self, prefix, op, var):
        """Source of ``op``'s identity typed like ``var``."""
        return self._get("identity", prefix, op, var)

    def _get(self, kind, prefix, op, var):
        placeholder = f"{PLACEHOLDER}{kind}_{len(self.slots)}"
        self.slots[placeholder] = (kind, op, var)
        return placeholder

    def fill(self, text: str, types: dict) -> str:
        """Replace every placeholder of ``text`` using ``types``."""
        for placeholder in sorted(self.slots, key=len, reverse=True):
            kind, op, var = self.slots[placeholder]
            text = text.replace(placeholder, _slot_value(kind, op, types[var]))
        return text


def _slot_value(kind, op, numba_type):
    if isinstance(numba_type, nbtypes.Array):  # an array reduction: per element
        numba_type = numba_type.dtype
    if kind in ("dtype", "accumulator"):
        return f"{NP}.{np.dtype(numpy_dtype(numba_type)).name}"
    return reduction_identity(op, numba_type)


def numpy_dtype(numba_type):
    if isinstance(numba_type, nbtypes.Boolean):
        return np.bool_
    return np.dtype(str(numba_type))


def reduction_identity(op: str, numba_type) -> str:
    """Source of the identity of ``op`` typed as ``numba_type`` (OpenACC 3.3 §2.5.15)."""
    if isinstance(numba_type, nbtypes.Boolean):
        return {"and": "True", "&": "True"}.get(op, "False")
    dtype = numpy_dtype(numba_type)
    ctor = f"{NP}.{dtype.name}"
    if op in ("+", "|", "^", "or"):
        return f"{ctor}(0)"
    if op in ("*", "and"):
        return f"{ctor}(1)"
    if op == "&":
        return f"{ctor}({np.iinfo(dtype).max if dtype.kind == 'u' else -1})"
    if dtype.kind == "f":
        return f"{ctor}({'-' if op == 'max' else ''}{NP}.inf)"
    info = np.iinfo(dtype)
    return f"{ctor}({info.min if op == 'max' else info.max})"


def narrowed_returns(tree: ast.FunctionDef, reductions, arg_types: dict) -> None:
    """Make each ``return`` of a reduction variable that is a parameter of a narrow
    integer or bool type (``np.int8(10)`` passed in) give an integer result in that type,
    wrapped as NumPy's arithmetic on it and C's variable keep it (Numba's typing widens it
    to int64; a float result stays a float: ``runtime.narrowed``); ``tree`` is changed in
    place (OpenACC 3.3 §2.5.15: the variable's own type)."""
    narrow = {}
    for _, var in reductions:
        numba_type = arg_types.get(var)
        if isinstance(numba_type, (nbtypes.Integer, nbtypes.Boolean)) and \
                getattr(numba_type, "bitwidth", 1) < 64:
            narrow[var] = "bool_" if isinstance(numba_type, nbtypes.Boolean) else str(numba_type)
    if not narrow:
        return

    def cast(node):
        if isinstance(node, ast.Name) and node.id in narrow:
            return ast.copy_location(ast.parse(f"_acc_rt.narrowed({node.id}, "
                                               f"{NP}.{narrow[node.id]})", mode="eval").body,
                                     node)
        return node

    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Tuple):
                node.value.elts = [cast(e) for e in node.value.elts]
            else:
                node.value = cast(node.value)
