"""Kernel footprints and accesses: the bytes an operation may touch, for ``race``.

Owns:
- ``Access`` — the bytes one operation touches in one array: the byte hull
  ``[low, high)`` in one address space (the host's memory, also the ``host`` device's,
  or one other device's), the elements' layout and whether it writes; ``overlap`` tells
  whether two accesses share bytes: their hulls overlap and — when either is strided —
  their element sets do (``numpy.shares_memory`` on address-only views that are never
  read; the hulls when that is too costly to decide);
- ``whole`` — the access of every element of an array (a transfer's source and
  destination, an argument the analysis cannot bound);
- ``footprint`` — the accesses of one kernel launch: per array argument, the index box
  its loads and its stores may reach (the range of each subscript, evaluated at the
  launch with the call's integer scalars and shapes: loop variables over their
  ``range``s, plain locals over all their values, interval arithmetic of ``+ - * // %``,
  ``min``/``max``/``len``/``shape``), what it writes only in the arrays
  ``KernelInfo.written`` names; the whole array where a subscript cannot be bounded.

Invariants: the analysis only ever widens (an unknown bound is the whole dimension, an
element passed to a call that may write it is written), so a footprint contains every
byte the launch touches. What the source says is worked out once per kernel
(``_KernelUses``, cached per ``KernelInfo`` and its source, under ``_cache_lock``), the
index boxes once per (integer scalars, shapes) of its calls (at most ``_BOXES_KEPT``
kept per kernel). Nothing here reads array contents or holds a lock across calls.
"""

from __future__ import annotations

import ast
import threading

import numpy as np

from ._entries import array_layout

__all__ = ["Access", "footprint", "whole"]

_TOO_HARD = getattr(getattr(np, "exceptions", np), "TooHardError", ArithmeticError)


class Access:
    """Bytes one operation touches in one array: the hull ``[low, high)`` in address
    space ``space``, the elements' layout (for strided overlap) and whether it writes."""

    __slots__ = ("space", "low", "high", "layout", "dense", "name", "writes")

    def __init__(self, space, data, shape, strides, itemsize, name, writes):
        self.space, self.name, self.writes = space, name, writes
        self.layout = (data, shape, strides, itemsize)
        low = high = data
        count = 1
        for extent, stride in zip(shape, strides):
            step = (extent - 1) * stride
            low, high = (low + step, high) if step < 0 else (low, high + step)
            count *= extent
        self.low, self.high = low, high + itemsize
        self.dense = self.high - self.low == count * itemsize

    def overlap(self, other: "Access"):
        """``(begin, nbytes)`` of the bytes both may touch, or None."""
        if self.space != other.space or not (self.low < other.high and other.low < self.high):
            return None
        if not (self.dense and other.dense):
            try:
                if not np.shares_memory(_address_view(self), _address_view(other), max_work=10_000):
                    return None
            except _TOO_HARD:
                pass  # too costly to decide: the hulls overlap
        low, high = max(self.low, other.low), min(self.high, other.high)
        return low, high - low


class _View:
    """An object numpy can wrap as an array at any address (never read: overlap tests)."""

    def __init__(self, data, shape, strides, itemsize):
        self.__array_interface__ = {"data": (data, True), "shape": tuple(shape),
                                    "strides": tuple(strides), "typestr": f"|V{itemsize}",
                                    "version": 3}


def _address_view(access: Access) -> np.ndarray:
    return np.asarray(_View(*access.layout))




def whole(space, array, name, writes) -> list:
    """The access of every element of ``array`` (none for what is not an array)."""
    layout = array_layout(array)
    if layout is None:
        return []
    data, shape, dtype, strides = layout
    if 0 in shape:
        return []
    return [Access(space, data, shape, strides, dtype.itemsize, name, writes)]



#: calls whose arguments they only read (an element passed to anything else may be written)
_PURE_CALLS = frozenset({"min", "max", "abs", "float", "int", "bool", "round", "complex", "len",
                         "range"})
_SHAPE_ATTRS = frozenset({"shape", "size", "ndim", "dtype", "itemsize", "nbytes", "strides"})
_SCOPES = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)
_VALUE_PARENTS = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp)
_WHOLE = None  # a use of the whole array


def footprint(info, args, space) -> list:
    """The accesses of one launch of kernel ``info`` with device arguments ``args``
    (``info.kernel_params`` order): per array argument, the index box (per dimension,
    the range of the subscripts its loads and its stores may take, evaluated with this
    call's scalars and shapes) of what it reads, and of what it writes if
    ``info.written`` names it; the whole array where a subscript cannot be bounded."""
    uses = _KernelUses.of(info)
    values = dict(zip(info.kernel_params, args))
    layouts = {name: array_layout(value) for name, value in values.items()}
    boxes = uses.boxes(values, layouts)
    accesses = []
    for name, value in values.items():
        layout = layouts[name]
        if layout is not None:
            data, _, dtype, strides = layout
            for writes, box in boxes.get(name, ()):
                start = data + sum(low * stride for (low, _), stride in zip(box, strides))
                extents = tuple(high - low + 1 for low, high in box)
                accesses.append(Access(space, start, extents, strides, dtype.itemsize, name, writes))
        elif isinstance(value, (tuple, list)):  # a struct of arrays: each member, whole
            for member in value:
                accesses += whole(space, member, name, False)
                if name in info.written:
                    accesses += whole(space, member, name, True)
    return accesses


def _param_boxes(shape, uses, evaluator) -> list:
    """``[(writes, box)]``: the hull of the index boxes an array parameter's uses read,
    and of those they write."""
    if 0 in shape:
        return []
    boxes = {False: None, True: None}  # writes? -> hull box
    for use in uses:
        env = evaluator.loop_env(use.loops)
        if env is _NEVER:
            continue
        box = _box(use.indices, shape, env, evaluator)
        if box is None:
            continue  # touches nothing (an empty slice, an index out of bounds)
        for writes in (False, True):
            if (use.writes if writes else use.reads):
                boxes[writes] = box if boxes[writes] is None else _hull(boxes[writes], box)
    return [(writes, box) for writes, box in boxes.items() if box is not None]


def _hull(one, two):
    return [(min(a[0], b[0]), max(a[1], b[1])) for a, b in zip(one, two)]


def _box(indices, shape, env, evaluator):
    """Per dimension ``(low, high)`` of the elements a subscript may reach (the whole
    dimension where it cannot be bounded), or None when it reaches none."""
    full = [(0, n - 1) for n in shape]
    if indices is _WHOLE:
        return full
    items = list(indices.elts) if isinstance(indices, ast.Tuple) else [indices]
    if len(items) > len(shape) or any(isinstance(item, ast.Starred) or (
            isinstance(item, ast.Constant) and item.value in (None, Ellipsis)) for item in items):
        return full
    box = list(full)
    for axis, item in enumerate(items):
        n = shape[axis]
        span = _slice_span(item, n, env, evaluator) if isinstance(item, ast.Slice) else \
            _point_span(item, n, env, evaluator)
        if span is False:
            return None
        if span is not None:
            box[axis] = span
    return box


def _point_span(item, n, env, evaluator):
    """An index's ``(low, high)`` in ``[0, n)``; None: unknown (or it may wrap around);
    False: always out of bounds (touches nothing of this array)."""
    value = evaluator.value(item, env)
    if value is None or value[0] < 0:
        return None
    if value[0] > n - 1:
        return False
    return value[0], min(value[1], n - 1)


def _slice_span(item, n, env, evaluator):
    """A slice's ``(low, high)``; None: the whole dimension; False: empty."""
    step = item.step
    if step is not None and not (isinstance(step, ast.Constant) and isinstance(step.value, int)
                                 and step.value > 0):
        return None
    lower = (0, 0) if item.lower is None else evaluator.value(item.lower, env)
    upper = (n, n) if item.upper is None else evaluator.value(item.upper, env)
    if lower is None or upper is None or lower[0] < 0 or upper[0] < 0:
        return None
    low, high = lower[0], min(upper[1], n) - 1
    return False if high < low else (low, high)


class _Use:
    """One use of an array parameter: its subscript (``_WHOLE``: the whole array),
    whether it may read and write the elements, the ``for`` loops around it."""

    __slots__ = ("indices", "reads", "writes", "loops")

    def __init__(self, indices, reads, writes, loops):
        self.indices, self.reads, self.writes, self.loops = indices, reads, writes, loops


class _KernelUses:
    """What the source says, once per kernel: each array parameter's uses
    (``by_param``), the names bound only by plain assignments (``defs``: name ->
    [(value, loops)]), the names bound only as ``for`` variables (``loop_names``: a
    loop's range bounds them inside it), and the parameters the body rebinds."""

    _cache: dict = {}  # KernelInfo -> (source, _KernelUses)
    _cache_lock = threading.Lock()
    _BOXES_KEPT = 256  # index boxes kept per kernel, by the call's scalars and shapes

    @classmethod
    def of(cls, info) -> "_KernelUses":
        with cls._cache_lock:
            cached = cls._cache.get(info)
            if cached is None or cached[0] is not info.source:
                cached = cls._cache[info] = (info.source, cls(info))
        return cached[1]

    def __init__(self, info):
        tree = info.source.tree
        self.params = set(info.kernel_params)
        self.parents: dict = {}
        self.places: dict = {}  # id(node) -> (loops, inside a nested scope)
        self._walk(tree, (), False)
        self.defs, self.loop_names, self.rebound = self._bindings(tree)
        self.by_param: dict = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in self.params and node is not tree:
                self._note(node, info.written)
        for name in info.written:  # a write the uses above did not show: the whole array
            uses = self.by_param.setdefault(name, [])
            if not any(use.writes for use in uses):
                uses.append(_Use(_WHOLE, True, True, ()))
        self._boxes: dict = {}

    def boxes(self, values: dict, layouts: dict) -> dict:
        """``{array parameter: [(writes, box)]}`` for a call with these values (the
        boxes depend only on the integer scalars and the shapes: kept per both)."""
        key = tuple(layout[1] if layout is not None else
                    int(value) if isinstance(value, (int, np.integer)) else None
                    for value, layout in zip(values.values(), layouts.values()))
        found = self._boxes.get(key)
        if found is None:
            evaluator = _Evaluator(self, values)
            found = {name: _param_boxes(layout[1], self.by_param.get(name, ()), evaluator)
                     for name, layout in layouts.items() if layout is not None}
            if len(self._boxes) >= self._BOXES_KEPT:
                self._boxes.clear()
            self._boxes[key] = found
        return found

    def _walk(self, node, loops, nested) -> None:
        for field, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            inner = loops + (node,) if isinstance(node, ast.For) and field in ("body", "orelse") \
                else loops
            for child in children:
                if isinstance(child, ast.AST):
                    self.parents[child] = node
                    deeper = nested or (isinstance(child, _SCOPES) and node is not None)
                    self.places[id(child)] = (inner, deeper)
                    self._walk(child, inner, deeper)

    def _bindings(self, tree):
        """``(defs, loop_names, rebound)``: the names every binding of which is
        ``name = value`` (with their values and loops), the names bound only as a
        ``for`` loop's variable, and the parameters bound anywhere in the body."""
        defs, loop_names, other = {}, set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                parent = self.parents.get(node)
                if isinstance(parent, ast.Assign) and node in parent.targets:
                    loops = self.places[id(parent)][0]
                    defs.setdefault(node.id, []).append((parent.value, loops))
                elif isinstance(parent, ast.For) and parent.target is node:
                    loop_names.add(node.id)
                else:
                    other.add(node.id)
            elif isinstance(node, ast.arg) and self.parents.get(node) is not tree.args:
                other.add(node.arg)  # a nested function's or lambda's parameter
        assigned = set(defs)
        rebound = (assigned | loop_names | other) & self.params
        other |= self.params
        defs = {name: values for name, values in defs.items() if name not in other | loop_names}
        return defs, loop_names - other - assigned, rebound

    def _note(self, node, written) -> None:
        name = node.id
        loops, nested = self.places[id(node)]
        parent = self.parents.get(node)
        may_write = name in written
        if nested or name in self.rebound or isinstance(node.ctx, (ast.Store, ast.Del)):
            use = _Use(_WHOLE, True, may_write, ())
        elif isinstance(parent, ast.Attribute) and parent.attr in _SHAPE_ATTRS:
            return
        elif isinstance(parent, ast.Call) and getattr(parent.func, "id", None) == "len" \
                and node in parent.args:
            return
        elif isinstance(parent, ast.Subscript) and parent.value is node:
            reads, writes = self._element_use(parent)
            use = _Use(parent.slice, reads, writes and may_write, loops)
        else:
            use = _Use(_WHOLE, True, may_write, loops)
        self.by_param.setdefault(name, []).append(use)

    def _element_use(self, subscript):
        """``(reads, writes)`` of ``a[...]`` (and of what chains on it: ``a[i][j]``,
        ``a[i].x``): a store writes, ``a[i] += v`` both; a load only reads where its
        value is used as a value, else (passed to a call, bound to a name: a view that
        may be written through) both."""
        top = subscript
        while isinstance(self.parents.get(top), (ast.Subscript, ast.Attribute)) and \
                self.parents[top].value is top:
            top = self.parents[top]
        parent = self.parents.get(top)
        if isinstance(top.ctx, (ast.Store, ast.Del)):
            return isinstance(parent, ast.AugAssign), True
        if isinstance(top, ast.Attribute) and top.attr in _SHAPE_ATTRS:
            return False, False
        if isinstance(parent, _VALUE_PARENTS) or (isinstance(parent, ast.AugAssign) and parent.value is top):
            return True, False
        if isinstance(parent, ast.Assign) and parent.value is top and all(
                isinstance(target, (ast.Subscript, ast.Attribute)) for target in parent.targets):
            return True, False  # an element copied into another array: a value
        if isinstance(parent, ast.Subscript) and parent.slice is top:
            return True, False
        if isinstance(parent, ast.Call) and top in parent.args and (
                getattr(parent.func, "id", None) in _PURE_CALLS
                or getattr(getattr(parent.func, "value", None), "id", None) == "math"):
            return True, False
        return True, True


_NEVER = object()  # a loop nest that never runs


class _Evaluator:
    """Integer intervals of index expressions at one launch: loop variables over their
    ranges, parameters at this call's values, plain locals over all their values."""

    def __init__(self, uses: _KernelUses, values: dict):
        self._uses = uses
        self._values = values
        self._envs: dict = {}
        self._locals: dict = {}
        self._busy: set = set()

    def loop_env(self, loops):
        """``{loop variable: (low, high)}`` of the loops (outermost first), or
        ``_NEVER`` when one of them runs no iteration for any value."""
        key = tuple(id(loop) for loop in loops)
        env = self._envs.get(key)
        if env is None:
            env = {}
            for loop in loops:
                if not isinstance(loop.target, ast.Name) or loop.target.id not in self._uses.loop_names:
                    continue  # bound elsewhere too: its range does not bound it
                span = self._range(loop.iter, env)
                if span is _NEVER:
                    env = _NEVER
                    break
                env = {**env, loop.target.id: span}
            self._envs[key] = env
        return env

    def _range(self, node, env):
        """The values ``range(...)`` (maybe inside ``acc.loop``) takes, None when unknown."""
        if isinstance(node, ast.Call) and node.args and (
                getattr(node.func, "attr", None) == "loop" or getattr(node.func, "id", None) == "loop"):
            node = node.args[0]
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("range", "prange")
                and 1 <= len(node.args) <= 3 and not node.keywords):
            return None
        bounds = [self.value(arg, env) for arg in node.args]
        start, stop = ((0, 0), bounds[0]) if len(bounds) == 1 else bounds[:2]
        step = bounds[2] if len(bounds) == 3 else (1, 1)
        if start is None or stop is None or step is None:
            return None
        if step[0] > 0:
            low, high = start[0], stop[1] - 1
        elif step[1] < 0:
            low, high = stop[0] + 1, start[1]
        else:
            return None
        return _NEVER if high < low else (low, high)

    def value(self, node, env):
        """``(low, high)`` bounding the integer ``node`` can take, or None."""
        if isinstance(node, ast.Constant):
            value = node.value
            return (int(value), int(value)) if isinstance(value, int) else None
        if isinstance(node, ast.Name):
            return self._name(node.id, env)
        if isinstance(node, ast.BinOp):
            return _binary(node.op, self.value(node.left, env), self.value(node.right, env))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.value(node.operand, env)
            if inner is None:
                return None
            return inner if isinstance(node.op, ast.UAdd) else (-inner[1], -inner[0])
        if isinstance(node, ast.IfExp):
            return _union(self.value(node.body, env), self.value(node.orelse, env))
        if isinstance(node, ast.Call):
            return self._call(node, env)
        return self._shape(node)

    def _name(self, name, env):
        if env is not _NEVER and name in env:
            return env[name]
        uses = self._uses
        if name in uses.params and name not in uses.rebound:
            value = self._values.get(name)
            if isinstance(value, (int, np.integer)):
                return int(value), int(value)
            return None
        if name in uses.defs and name not in self._busy:
            if name not in self._locals:
                self._busy.add(name)
                spans = []
                for value, loops in uses.defs[name]:
                    where = self.loop_env(loops)
                    if where is not _NEVER:
                        spans.append(self.value(value, where))
                self._busy.discard(name)
                self._locals[name] = None if not spans or None in spans else \
                    (min(s[0] for s in spans), max(s[1] for s in spans))
            return self._locals[name]
        return None

    def _call(self, node, env):
        function = getattr(node.func, "id", None)
        if node.keywords:
            return None
        if function == "len" and len(node.args) == 1:
            return self._extent(node.args[0], 0)
        spans = [self.value(arg, env) for arg in node.args]
        if not spans or None in spans:
            return None
        if function == "min":
            return min(s[0] for s in spans), min(s[1] for s in spans)
        if function == "max":
            return max(s[0] for s in spans), max(s[1] for s in spans)
        if function == "int" and len(spans) == 1:
            return spans[0]
        return None

    def _shape(self, node):
        """``x.shape[k]``, ``x.size`` of an array parameter."""
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and \
                node.value.attr == "shape" and isinstance(node.slice, ast.Constant) and \
                isinstance(node.slice.value, int):
            return self._extent(node.value.value, node.slice.value)
        if isinstance(node, ast.Attribute) and node.attr == "size" and isinstance(node.value, ast.Name):
            layout = self._layout(node.value)
            return None if layout is None else (int(np.prod(layout[1])),) * 2
        return None

    def _extent(self, node, axis):
        layout = self._layout(node)
        if layout is None:
            return None
        shape = layout[1]
        if not -len(shape) <= axis < len(shape):
            return None
        return shape[axis], shape[axis]

    def _layout(self, node):
        if not isinstance(node, ast.Name) or node.id not in self._uses.params or \
                node.id in self._uses.rebound:
            return None
        return array_layout(self._values.get(node.id))


def _binary(op, left, right):
    """Interval arithmetic of ``+ - * // %`` (None when unknown)."""
    if left is None or right is None:
        return None
    (a, b), (c, d) = left, right
    if isinstance(op, ast.Add):
        return a + c, b + d
    if isinstance(op, ast.Sub):
        return a - d, b - c
    if isinstance(op, ast.Mult):
        products = (a * c, a * d, b * c, b * d)
        return min(products), max(products)
    if isinstance(op, ast.FloorDiv) and c > 0:
        quotients = (a // c, a // d, b // c, b // d)
        return min(quotients), max(quotients)
    if isinstance(op, ast.Mod) and c > 0:
        return (a, b) if a >= 0 and b < c else (0, d - 1)
    return None


def _union(one, two):
    if one is None or two is None:
        return None
    return min(one[0], two[0]), max(one[1], two[1])
