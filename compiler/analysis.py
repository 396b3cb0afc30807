"""Analysis of a compute-region function at decoration time.

Owns :class:`KernelInfo` and :func:`analyze`, the checks every kernel passes (no
``global`` statements, generators, reserved names; clause names that name variables) and
the resolution of the module-level names a kernel reads (:func:`free_params`), and the
function flattened for a struct call (:func:`flattened`: OpenACC 2.6 structs of arrays,
members in data clauses, OpenACC 3.3 §2.7.1-2.7.2). The work is done by concept in other
modules: ``structs`` (which parameters are structs, a call's ``StructLayout``; its names
are re-exported here), ``planner`` (loop nests), ``dependence`` (kernels loops),
``reductions``, ``access`` (written/read sets).

Invariants:
    * A module-level or closure array, or numeric scalar, that a kernel reads is a
      *free parameter*: the kernel takes it after its own parameters, and the launcher
      reads its current value at each call (API.md §6.1: never frozen at the first
      compile). Functions, modules and other objects are bound at compile time.
    * ``KernelInfo.written`` over-approximates the parameters (and free parameters) whose
      elements the kernel may write (``access``).
    * A *struct parameter* is one the function reads members of (``s.x[i]``, ``s.n``:
      attributes that are not ``ndarray``'s) or one whose members a data clause names
      (``copyin(s.x)``). When a call passes a struct there (a namedtuple, a dataclass, an
      object with attributes; :func:`is_struct`), the kernel compiled is the function
      *flattened* for the call's :class:`StructLayout`: each member the kernel uses (or a
      clause names) becomes a parameter of its own (``s.x`` → ``s__x``) in the struct's
      place, so members are mapped, typed and written (``KernelInfo.written``) like
      arrays and scalars. One flattened ``KernelInfo`` per layout (``flattened``), each
      with its own kernels: a struct whose members change kind gets its own kernel.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import logging
import threading
import types as pytypes
from dataclasses import dataclass, field


from .access import access_sets
from .clauses import DATA_CLAUSES, ComputeClauses
from .frontend import (MISSING, RESERVED_PREFIX, FunctionSource, Scope, load_function,
                       local_names)
from .free_names import (chain_value, free_chains, free_params, is_array_like, is_free_value,
                         with_params, with_routine_arrays)
from .planner import NestPlan, LoopPlan, Planner
from .clause_names import check_clause_names, present_routine_arrays, without_copied_results
from .reductions import with_extremum_updates
# (MemberError, StructLayout, is_struct and struct_layout are re-exported: the launcher reads them here)
from .structs import (MemberError, StructLayout, chain_of, checked_struct_params, is_struct,
                      refuse_member_store, struct_layout)

__all__ = ["KernelInfo", "analyze", "bind_free_names", "free_params", "Planner", "LoopPlan",
           "NestPlan", "check_free_names", "StructLayout", "MemberError", "is_struct",
           "struct_layout", "flattened", "flat_clauses"]

log = logging.getLogger("pyacc")



# ----------------------------------------------------------------------------- results


@dataclass(eq=False)
class KernelInfo:
    """What ``analyze`` learned about a decorated function.

    Attributes:
        name: The function's name.
        filename: Its source file.
        lineno: Line of its ``def``.
        params: Parameter names, in order (what the user passes).
        clauses: Its :class:`ComputeClauses`.
        written: Parameters and free parameters whose elements the kernel may write
            (over-approximation).
        read: Parameters and free parameters the kernel reads (any use of the name).
        reductions: ``(op, var)`` reductions of its parallel loops, in order.
        func: The Python function itself.
        free_params: Module-level and closure names the kernel reads whose value is an
            array or a numeric scalar, and attributes of modules that are
            (``free_names``); the kernel takes them after ``params``, and the launcher
            passes their values at the call (:meth:`free_values`).
        chains: Of those, the attributes of modules: ``{parameter: (root, attr, ...)}``.
        source: The function's source, its tree extended with ``free_params`` as
            parameters (what code generation compiles).
        struct_params: Each struct parameter (module docstring) and the member chains
            the function reads of it (``("x",)`` for ``s.x[i]``, ``("a", "b")`` for
            ``s.a.b``), in source order; empty for most kernels.
        layout: For a flattened info (:func:`flattened`): the :class:`StructLayout` it
            was made for; None otherwise.
        labels: For a flattened info: each member parameter's name as the program
            spells it (``{"s__x": "s.x"}``), for messages.
    """

    name: str
    filename: str
    lineno: int
    params: tuple[str, ...]
    clauses: ComputeClauses
    written: frozenset
    read: frozenset
    reductions: tuple[tuple[str, str], ...]
    func: pytypes.FunctionType = field(repr=False)
    source: FunctionSource = field(repr=False)
    kernels: dict = field(default_factory=dict, repr=False)
    free_params: tuple[str, ...] = ()
    chains: dict = field(default_factory=dict, repr=False)
    #: the planner's decisions (``LoopPlan``), made once: at decoration, again only when the
    #: first call adds free parameters (``bind_free_names``); code generation and
    #: ``acc.explain`` use it
    plan: object = field(default=None, repr=False)
    #: set at the first compile: the planner's notes and the argument types (feedback)
    notes: list | None = field(default=None, repr=False)
    arg_types: dict | None = field(default=None, repr=False)
    struct_params: dict = field(default_factory=dict, repr=False)
    layout: object = field(default=None, repr=False)
    labels: dict = field(default_factory=dict, repr=False)
    #: the free parameters read in a routine's scope, not the kernel's (a routine's
    #: arrays: ``free_names.routine_arrays``): ``{name: that routine}``
    owners: dict = field(default_factory=dict, repr=False)
    #: the flattened infos of this one, by layout (:func:`flattened`)
    variants: dict = field(default_factory=dict, repr=False)
    #: ``bind_free_names`` has run for this code (a decoration of the same code again
    #: shares the result: the same module, the same names)
    names_bound: bool = field(default=False, repr=False)

    @property
    def where(self) -> str:
        """``"name (file:line)"``."""
        return f"{self.name} ({self.filename}:{self.lineno})"

    @property
    def kernel_params(self) -> tuple[str, ...]:
        """The compiled kernel's parameters: ``params`` then ``free_params``."""
        return self.params + self.free_params

    @functools.cached_property
    def loop_private(self) -> frozenset:
        """The parameters used only inside loops whose ``acc.loop`` lists them ``private``
        (TeaLeaf's ``dp_l``): their accesses are not exposed to the construct (OpenACC 3.3
        §2.6.2), so they take no implicit data clause; the launcher gives them device
        memory of their own and copies nothing, as for the construct's ``private``."""
        loops = self.plan.loop_private if self.plan is not None else {}
        if not loops:
            return frozenset()
        inside = {}  # (name: its Name nodes inside the loops that make it private)
        for loop in (n for n in ast.walk(self.source.tree) if isinstance(n, ast.For)):
            for name in loops.get((loop.lineno, loop.col_offset), ()):
                inside.setdefault(name, set()).update(
                    id(n) for n in ast.walk(loop) if isinstance(n, ast.Name) and n.id == name)
        return frozenset(name for name, ids in inside.items() if name in self.params and all(
            id(n) in ids for n in ast.walk(self.source.tree)
            if isinstance(n, ast.Name) and n.id == name))

    @functools.cached_property
    def may_return_arrays(self) -> bool:
        """Whether what the function returns may be (or hold, or view) an array it was
        given. False when every ``return`` gives back only *fresh* values (``_fresh``):
        constants, arithmetic (a new value, never a view), ``abs``/``float``/``int``/
        ``complex``/``round`` of anything, ``min``/``max`` of a fresh value and others,
        tuples and conditional expressions of fresh values, and reduction variables (not
        parameters) every binding of which is fresh; True, conservatively, otherwise
        (``return x``, ``return x[1:]``, ``return x[0]``: a row of a 2-d ``x``). The
        launcher lends a kernel that may return its arrays no device array it keeps
        between calls (``mapping.compute.ComputeMemo``): one returned to the program
        would outlive the memory it views."""
        nodes = list(_own_nodes(self.source.tree))
        names = _fresh_names(nodes, {var for _, var in self.reductions} - set(self.source.params))
        returns = [node.value for node in nodes if isinstance(node, ast.Return)]
        return not all(value is None or _fresh(value, names) for value in returns)

    def free_values(self) -> tuple:
        """The current values of the free parameters, read now (API.md §6.1: a global
        or closure name is read at each call, never frozen at the first compile).

        Raises:
            NameError: A global was deleted since (the message names the kernel).
        """
        scope = Scope(self.func, set())
        values = []
        for name in self.free_params:
            chain = self.chains.get(name)
            value = Scope(self.owners[name], set()).lookup(name) if name in self.owners else \
                scope.lookup(name) if chain is None else chain_value(self.func, chain)
            if value is MISSING:
                spelled = name if chain is None else ".".join(chain)
                raise NameError(f"{self.where} reads the module-level name {spelled!r}, "
                                f"which is no longer defined")
            values.append(value)
        return tuple(values)



_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _own_nodes(tree):
    """The nodes of a function's body, not those of functions, lambdas or classes
    defined inside it (their returns and bindings are their own)."""
    stack = [node for node in tree.body if not isinstance(node, _SCOPES)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, _SCOPES))


def _fresh_names(nodes, names) -> set:
    """The ``names`` every binding of which among ``nodes`` (a function's own) is a
    fresh value (``_fresh``, with these names fresh): ``s = 0.0``, ``lo, hi = 1e300,
    -1e300``, ``lo = min(lo, x[i])``, ``s = t * t + s`` (an augmented assignment binds
    nothing new: ``s += x[i]`` keeps ``s`` what it was); a name bound any other way (a
    loop or ``with`` target, unpacked from anything but a tuple display, ``h = hist``)
    is dropped, until none changes."""
    fresh = set(names)
    while True:
        dropped = {name for node in nodes for name, value in _bindings(node)
                   if name in fresh and (value is None or not _fresh(value, fresh))}
        if not dropped:
            return fresh
        fresh -= dropped


def _bindings(node):
    """``(name, value)`` for each name ``node`` binds: ``value`` the expression it gets,
    or None when it is not one expression (loop targets, unpacking of other values)."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _targets(target, node.value)
    elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)):
        yield from _targets(node.target, node.value)
    elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        yield from _targets(node.target, None)
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        yield from _targets(node.optional_vars, None)


def _targets(target, value):
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, (ast.Tuple, ast.List)):
        values = value.elts if isinstance(value, ast.Tuple) and len(value.elts) == len(target.elts) \
            else [None] * len(target.elts)
        for item, item_value in zip(target.elts, values):
            yield from _targets(item, item_value)
    elif isinstance(target, ast.Starred):
        yield from _targets(target.value, None)


_NEW_VALUE_FUNCTIONS = frozenset({"abs", "float", "int", "complex", "round"})


def _fresh(node, names) -> bool:
    """Whether expression ``node`` gives a number or a new value, never an array the
    kernel was given nor a view of one (``KernelInfo.may_return_arrays``); ``names``:
    the local names known to hold such values."""
    if isinstance(node, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare)):
        return True  # (arithmetic and comparisons make new values)
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Tuple):
        return all(_fresh(item, names) for item in node.elts)
    if isinstance(node, ast.IfExp):
        return _fresh(node.body, names) and _fresh(node.orelse, names)
    if isinstance(node, ast.BoolOp):  # (gives one of its operands)
        return all(_fresh(value, names) for value in node.values)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id in _NEW_VALUE_FUNCTIONS:
            return True
        # min/max beside a number: the others are numbers too (Numba types no mix)
        return node.func.id in ("min", "max") and any(_fresh(arg, names) for arg in node.args)
    return False


# ------------------------------------------------------------------------------ analyze


#: analyses by the code they came from (``analyze``): a kernel defined inside a function
#: or method is decorated again at each call of it
_ANALYSES: dict = {}
_ANALYSES_KEPT = 1024


def analyze(func, clauses: ComputeClauses) -> KernelInfo:
    """The analysis of a compute-region function (or a routine), made once per code,
    clauses and bound closure values (``_analysis_key``): decorating the same code again
    (a kernel defined inside a method, issue 29 item 7) costs a lookup and shares the
    compiled kernels. Each decoration gets its own :class:`KernelInfo` (its ``func``:
    free values are read from its own closure at each call)."""
    key = _analysis_key(func, clauses)
    found = _ANALYSES.get(key) if key is not None else None
    if found is None:
        found = _analyze(func, clauses)
        if key is not None:
            if len(_ANALYSES) >= _ANALYSES_KEPT:
                del _ANALYSES[next(iter(_ANALYSES))]
            _ANALYSES[key] = found
        return found
    return dataclasses.replace(found, func=func)  # the same kernels dict: compiled once


def _analysis_key(func, clauses):
    """What an analysis depends on besides the code: the clauses, the module, and the
    closure values that are bound when a kernel is compiled (functions, tuples,
    strings...; arrays and numeric scalars are read at each call, so only their kinds
    matter, which the kernel cache keys on). None when a value cannot be keyed."""
    code = getattr(func, "__code__", None)
    if code is None:
        return None
    cells = []
    for cell in func.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            value = None
        cells.append(type(value) if is_free_value(value) else _bound(value))
    try:
        key = (code, repr(clauses), id(func.__globals__), tuple(cells))
        hash(key)
    except TypeError:
        return None
    return key


def _bound(value):
    """A closure value compiled into the kernel, as a key: by value when hashable and not
    mutable in place, else by identity."""
    if isinstance(value, (str, bytes, tuple, frozenset, type(None), bool, int, float, complex)):
        return ("value", value)
    return ("object", id(value), value)  # the object itself: kept alive while keyed


def _analyze(func, clauses: ComputeClauses) -> KernelInfo:
    """Analyse a compute-region function (or a routine) at decoration time.

    Args:
        func: The undecorated Python function.
        clauses: Its clauses (``parse_clauses``).

    Returns:
        The :class:`KernelInfo` that ``get_kernel`` compiles.

    Raises:
        CompileError: Unsupported constructs, clauses naming unknown variables, global or
            closure arrays; the message names ``file:line``.
    """
    source = load_function(func)
    check_function(source)
    user_params = source.params
    chains = free_chains(source)
    source = with_params(source, free_params(source), chains)
    source, owners = with_routine_arrays(source, Scope(source.func, local_names(source.tree)))
    scope = Scope(source.func, local_names(source.tree))
    source = dataclasses.replace(source, tree=with_extremum_updates(source.tree, scope))
    clauses = present_routine_arrays(clauses, owners)
    check_clause_names(source, clauses, scope, user_params)
    check_free_names(source, scope, strict=False)
    plan = Planner(source, clauses, scope).plan()
    clauses = without_copied_results(source, clauses, scope, user_params, plan)
    written, read = access_sets(source, scope, clauses.private + clauses.firstprivate)
    reductions = tuple(dict.fromkeys(clauses.reductions + plan.reductions()))
    return KernelInfo(name=source.func.__name__, filename=source.filename,
                      lineno=source.lineno, params=user_params, clauses=clauses,
                      written=frozenset(written), read=frozenset(read),
                      reductions=reductions, func=source.func, source=source,
                      free_params=source.params[len(user_params):], plan=plan, chains=chains,
                      labels={name: ".".join(chain) for name, chain in chains.items()},
                      struct_params=checked_struct_params(source, user_params, clauses),
                      owners=owners)


def bind_free_names(info: KernelInfo) -> None:
    """Complete ``info.free_params`` at the first call: names that could not be resolved
    at decoration (a global array defined after the function) are looked up again.

    Raises:
        CompileError: A name in a data clause is not an array or scalar at the call, or
            a clause expression reads a name that is not defined.
    """
    if info.names_bound:
        return
    source, late = with_routine_arrays(info.source, Scope(info.func, local_names(info.source.tree)),
                                       info.owners)
    if late:  # (routines, or their arrays, defined after the decorator)
        info.source, info.owners, info.free_params = source, {**info.owners, **late}, \
            info.free_params + tuple(late)
        info.clauses = present_routine_arrays(info.clauses, late)
    new, chains = free_params(info.source), free_chains(info.source)
    if new or chains:
        info.source = with_params(info.source, new, chains)
        info.free_params += (*new, *chains)
        info.chains = {**info.chains, **chains}
        info.labels = {**info.labels, **{name: ".".join(chain) for name, chain in chains.items()}}
        scope = Scope(info.func, local_names(info.source.tree))
        written, read = access_sets(info.source, scope,
                                    info.clauses.private + info.clauses.firstprivate)
        info.written, info.read = frozenset(written), frozenset(read)
        info.plan = Planner(info.source, info.clauses, scope).plan()
    clauses, scope = info.clauses, Scope(info.func, set(info.params))
    for name in sorted(clauses.expression_names()):
        if name not in info.params and scope.lookup(name) is MISSING:
            texts = ", ".join(f"{field}({expr.text})" for field, expr in
                              clauses.expressions().items() if name in expr.names)
            raise info.source.clause_error(f"the clause value {texts} reads {name!r}, which is "
                                           f"neither a parameter nor a module-level name")
    for name in sorted(clauses.section_names()):
        if name not in info.params and scope.lookup(name) is MISSING:
            texts = ", ".join(f"{kind}({section.text})" for kind, section in
                              clauses.sections if name in section.names())
            raise info.source.clause_error(f"the bounds of {texts} read {name!r}, which is "
                                           f"neither a parameter nor a module-level name")
    known = set(info.kernel_params)
    for name, kind in info.clauses.data_names().items():
        if name not in known and "." not in name:  # (a member's root: checked by analyze)
            value = scope.lookup(name)
            now = "undefined" if value is MISSING else f"{type(value).__name__} {value!r:.40}"
            raise info.source.clause_error(f"{kind}({name}): {name!r} is neither a parameter nor "
                                           f"a module-level array (at this call it is {now}): "
                                           f"assign the array before the first call")
    info.names_bound = True


def check_function(source: FunctionSource) -> None:
    """Reject statements no kernel may contain (anywhere in the function)."""
    for node in ast.walk(source.tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            raise source.error("'global'/'nonlocal' statements are not allowed in "
                               "kernels; pass the value as an argument", node)
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise source.error("generators and coroutines cannot be kernels", node)
        if isinstance(node, (ast.With, ast.AsyncWith)):
            raise source.error("a 'with' statement cannot be in a kernel (a context manager "
                               "runs Python code on the host): move it around the call", node)
        if isinstance(node, ast.Name) and node.id.startswith(RESERVED_PREFIX):
            raise source.error(f"names starting with {RESERVED_PREFIX!r} are reserved "
                               f"for generated code ({node.id!r})", node)


def check_free_names(source: FunctionSource, scope: Scope, *, strict: bool) -> None:
    """Reject global/closure arrays that are not parameters of ``source`` (a routine's
    free arrays: a kernel's are free parameters, see :func:`free_params`); with
    ``strict``, also undefined names. ``strict`` is used at first call, when every name
    must resolve.
    """
    for name, chain in free_chains(source).items():  # (a kernel's are parameters already)
        if is_array_like(chain_value(source.func, chain)):
            raise source.error(f"uses the module array {'.'.join(chain)!r}; a routine (a function "
                               f"called from a kernel) may not read module arrays: pass it as an "
                               f"argument (kernels themselves may)")
    for node in ast.walk(source.tree):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            continue
        if node.id in scope.local:
            continue
        value = scope.lookup(node.id)
        if is_array_like(value):
            kind = "closure" if scope.is_closure(node.id) else "global"
            raise source.error(f"uses the {kind} array {node.id!r}; a routine (a function "
                               f"called from a kernel) may not read {kind} arrays: pass it "
                               f"as an argument (kernels themselves may)", node)
        if strict and value is MISSING:
            raise source.error(f"name {node.id!r} is not defined", node)


# ------------------------------------------------------------------------- flattening
# A struct call's kernel is the function flattened for the call's ``StructLayout``
# (``structs``): each member the kernel uses becomes a parameter of its own.

_variants_lock = threading.Lock()


def flattened(info: KernelInfo, layout: StructLayout) -> KernelInfo:
    """``info`` flattened for ``layout`` (module docstring), made once per layout.

    Raises:
        CompileError: The function assigns a member (``s.x = ...``) or uses the struct
            itself (``g(s)``) where only its members can be passed.
    """
    variant = info.variants.get(layout)
    if variant is None:
        with _variants_lock:
            variant = info.variants.get(layout)
            if variant is None:
                variant = info.variants[layout] = _flatten(info, layout)
    return variant


def _flatten(info, layout):
    source = info.source
    tree = copy.deepcopy(source.tree)
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | set(source.params)
    flat_names, labels = {}, {}
    for _, name, path, label in layout.labels():
        flat = f"{name}__{'__'.join(path)}"
        while flat in taken:
            flat += "_"
        taken.add(flat)
        flat_names[(name, path)] = flat
        labels[flat] = label
    _Flattener(source, flat_names).visit(tree)
    structs = {name for _, name, _ in layout.structs}
    _check_no_struct_left(source, tree, structs)
    args = []
    for arg in tree.args.args:
        if arg.arg in structs:
            args += [ast.arg(arg=flat, lineno=arg.lineno, col_offset=arg.col_offset)
                     for (name, _), flat in flat_names.items() if name == arg.arg]
        else:
            args.append(arg)
    tree.args.args = args
    params = tuple(a.arg for a in args)
    flat_source = dataclasses.replace(source, tree=tree, params=params)
    scope = Scope(source.func, local_names(tree))
    clauses = _flat_clauses(info.clauses, layout, flat_names)
    plan = Planner(flat_source, clauses, scope).plan()
    written, read = access_sets(flat_source, scope, clauses.private + clauses.firstprivate)
    user = params[:len(params) - len(info.free_params)]
    return KernelInfo(name=info.name, filename=info.filename, lineno=info.lineno,
                      params=user, clauses=clauses, written=frozenset(written),
                      read=frozenset(read),
                      reductions=tuple(dict.fromkeys(clauses.reductions + plan.reductions())),
                      func=info.func, source=flat_source, free_params=info.free_params,
                      chains=info.chains, plan=plan, layout=layout, labels=labels)


class _Flattener(ast.NodeTransformer):
    """``s.x`` → ``s__x`` for each member of the layout (the outermost chain that is a
    member: ``s.x.shape`` → ``s__x.shape``)."""

    def __init__(self, source, flat_names):
        self.source = source
        self.flat_names = flat_names

    def visit_Attribute(self, node):
        chain = chain_of(node)
        flat = self.flat_names.get(chain) if chain is not None else None
        if flat is None:
            return self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            refuse_member_store(self.source, ".".join((chain[0], *chain[1])), node)
        return ast.copy_location(ast.Name(id=flat, ctx=node.ctx), node)


def _check_no_struct_left(source, tree, structs):
    """After flattening, a struct parameter may no longer be named: the kernel does not
    take it (only its members)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in structs:
            raise source.error(
                f"uses the struct parameter {node.id!r} itself (not one of its members): a "
                f"kernel takes a struct's array and scalar members, not the struct; pass "
                f"the members a routine needs ({node.id}.x) instead of {node.id!r}", node)


def flat_clauses(clauses: ComputeClauses, variant: KernelInfo) -> ComputeClauses:
    """``clauses`` (the original's, evaluated for a call) for the flattened ``variant``
    (see :func:`_flat_clauses`)."""
    flat_names = {(label.split(".")[0], tuple(label.split(".")[1:])): flat
                  for flat, label in variant.labels.items()}
    return _flat_clauses(clauses, variant.layout, flat_names)


def _flat_clauses(clauses, layout, flat_names) -> ComputeClauses:
    """``clauses`` for the flattened kernel of ``layout``: each member takes the clause
    of the longest name written that covers it (``copyin(s.x[0:n])`` beats
    ``copyin(s)``; a clause naming the struct applies to every member the kernel takes
    that has none of its own); sections are renamed with their members."""
    structs = {name for _, name, _ in layout.structs}
    clause_of = {name: kind for kind in DATA_CLAUSES for name in getattr(clauses, kind)}
    fields = {kind: [n for n in getattr(clauses, kind) if n.split(".")[0] not in structs]
              for kind in DATA_CLAUSES}
    for (name, path), flat in flat_names.items():
        for depth in range(len(path), -1, -1):
            kind = clause_of.get(".".join((name, *path[:depth])))
            if kind is not None:
                fields[kind].append(flat)
                break
    by_label = {".".join((name, *path)): flat for (name, path), flat in flat_names.items()}
    sections = tuple((kind, dataclasses.replace(section, name=by_label.get(section.name,
                                                                           section.name)))
                     for kind, section in clauses.sections)
    return dataclasses.replace(clauses, sections=sections,
                               **{kind: tuple(names) for kind, names in fields.items()})
