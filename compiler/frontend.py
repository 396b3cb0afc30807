"""Front end: a Python function's AST, its names, and what its calls refer to.

Owns :func:`load_function` (source → ``ast.FunctionDef`` with the file's real line
numbers), :class:`Scope` (resolution of free names through closure cells, globals and
builtins) and :func:`classify_call` (is a call a marker, an atomic, a routine, ...).

Invariants:
    * Line numbers in every tree returned are those of the user's file, so errors can
      name ``file:line``.
    * Resolution never evaluates user code: it only reads closure cells, globals,
      builtins and attributes of already-resolved objects. Unresolvable names yield
      :data:`MISSING` (a routine defined later in the module is resolved at first call).
"""
from __future__ import annotations

import ast
import builtins
import copy
import inspect
import textwrap
import types as pytypes
from dataclasses import dataclass

import numpy as np

from . import markers
from .errors import CompileError

__all__ = ["FunctionSource", "load_function", "Scope", "MISSING", "classify_call",
           "CallKind", "local_names", "root_name", "RESERVED_PREFIX", "in_library",
           "loaded_names", "stored_names", "without_cache_hints"]

#: Names starting with this prefix are reserved for generated code.
RESERVED_PREFIX = "_acc_"

#: Attribute name under which ``mark_routine`` stores a routine's KernelInfo.
ROUTINE_ATTR = "__acc_routine__"
#: set on a host function whose value in kernels is ``acc.on_device(<the attribute>)``
#: (``omp.is_initial_device``: ``"host"``; OpenMP 5.2 §18.7.6)
ON_DEVICE_ATTR = "__acc_on_device__"

#: Packages whose functions Numba compiles itself (never implicit routines).
LIBRARY_MODULES = frozenset({"numpy", "math", "cmath", "numba", "operator", "random",
                             "builtins", "scipy", "pyacc.compiler"})


def in_library(module: str) -> bool:
    """Whether ``module`` (a module's name) is one of the numeric libraries' (``LIBRARY_MODULES``)."""
    return any(module == name or module.startswith(name + ".") for name in LIBRARY_MODULES)


class _Missing:
    def __repr__(self):
        return "MISSING"


MISSING = _Missing()


@dataclass
class FunctionSource:
    """A function's parsed source.

    Attributes:
        func: The Python function.
        tree: Its ``FunctionDef`` (decorators removed, real line numbers).
        text: The dedented source text (hashed into cache keys).
        filename: The file it was defined in.
        lineno: Line of the ``def``.
        params: Parameter names in order.
        decorator_lineno: Line of the decorator nearest the ``def`` (where the clauses are
            written), or of the ``def`` when it has none.
    """

    func: pytypes.FunctionType
    tree: ast.FunctionDef
    text: str
    filename: str
    lineno: int
    params: tuple[str, ...]
    decorator_lineno: int = 0

    def error(self, reason: str, node: ast.AST | None = None) -> CompileError:
        """A ``CompileError`` located at ``node`` (or at the ``def``)."""
        line = getattr(node, "lineno", None) or self.lineno
        return CompileError(f"{self.func.__name__}: {reason}", self.filename, line)

    def clause_error(self, reason: str) -> CompileError:
        """A ``CompileError`` about a clause, located at the decorator that writes it."""
        return CompileError(f"{self.func.__name__}: {reason}", self.filename,
                            self.decorator_lineno or self.lineno)

    @property
    def where(self) -> str:
        """``"name (file:line)"``."""
        return f"{self.func.__name__} ({self.filename}:{self.lineno})"


def load_function(func) -> FunctionSource:
    """Parse ``func``'s source into a :class:`FunctionSource`.

    Raises:
        CompileError: No source, not a plain ``def``, or an unsupported signature.
    """
    func = getattr(func, "py_func", func)  # a Numba dispatcher
    if not isinstance(func, pytypes.FunctionType):
        raise CompileError(f"{func!r} is not a Python function")
    filename = func.__code__.co_filename
    try:
        lines, start = inspect.getsourcelines(func)
    except (OSError, TypeError) as exc:
        raise CompileError(f"{func.__name__}: source code not available ({exc}); "
                           f"kernels must be defined in a file", filename,
                           func.__code__.co_firstlineno) from None
    text = textwrap.dedent("".join(lines))
    try:
        module = ast.parse(text)
    except SyntaxError as exc:
        raise CompileError(f"{func.__name__}: cannot parse source: {exc.msg}", filename,
                           start) from None
    tree = module.body[0] if module.body else None
    defined = func.__code__.co_name  # (the def's name: __name__ may have been changed)
    if defined != "<lambda>" and not (isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
                                      and tree.name == defined):
        why = (f"a wrapper of {func.__wrapped__.__name__} (functools.wraps): decorate the "
               f"function itself") if hasattr(func, "__wrapped__") else (
            "made by exec or compile with another file's name, or the file changed since: "
            "define kernels in the file Python reads them from")
        raise CompileError(f"{func.__name__}: the source at {filename}:{start} is not this "
                           f"function's definition ({why})", filename, start)
    if not isinstance(tree, ast.FunctionDef):
        raise CompileError(f"{func.__name__}: a kernel must be a plain 'def' function "
                           f"(not a lambda or async def)", filename, start)
    ast.increment_lineno(module, start - 1)
    decorator_lineno = tree.decorator_list[-1].lineno if tree.decorator_list else tree.lineno
    tree.decorator_list = []
    # the defaults were evaluated once, when Python made the function: a call binds every
    # argument (the launcher's and the lane's binding), so the kernel takes none (their
    # expressions read names a kernel module does not have)
    tree.args.defaults = []
    tree = without_cache_hints(tree, Scope(func, local_names(tree)))  # (a hint: §2.10)
    source = FunctionSource(func, tree, text, filename, tree.lineno,
                            _params(tree, filename), decorator_lineno)
    return source


def _params(tree: ast.FunctionDef, filename: str) -> tuple[str, ...]:
    args = tree.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise CompileError(f"{tree.name}: kernels take plain positional parameters "
                           f"(no *args, **kwargs, keyword-only or positional-only)",
                           filename, tree.lineno)
    return tuple(a.arg for a in args.args)


def local_names(tree: ast.FunctionDef) -> set[str]:
    """Names bound anywhere in the function (parameters, assignments, loop targets)."""
    names = {a.arg for a in tree.args.args}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not tree:
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
    return names


def stored_names(stmts) -> set:
    """Names a list of statements assigns (``Store`` context), anywhere inside."""
    return {n.id for s in stmts for n in ast.walk(s)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def loaded_names(node) -> set:
    """Names an expression or statement reads (``Load`` context), anywhere inside."""
    return {n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def root_name(node: ast.AST) -> str | None:
    """The variable at the root of ``a[i].b[j]`` (``"a"``), or None."""
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


class Scope:
    """Resolves a function's free names: closure cells, then globals, then builtins."""

    def __init__(self, func: pytypes.FunctionType, local: set[str]):
        self.func = func
        self.local = local
        cells = func.__closure__ or ()
        self.closure = dict(zip(func.__code__.co_freevars, cells))

    def lookup(self, name: str):
        """The value bound to free name ``name``, or :data:`MISSING`."""
        if name in self.local:
            return MISSING
        if name in self.closure:
            try:
                return self.closure[name].cell_contents
            except ValueError:
                return MISSING
        if name in self.func.__globals__:
            return self.func.__globals__[name]
        return getattr(builtins, name, MISSING)

    def is_closure(self, name: str) -> bool:
        """True when ``name`` is a closure variable of the function."""
        return name in self.closure and name not in self.local

    def resolve(self, node: ast.AST):
        """The object a ``Name``/``Attribute`` chain refers to, or :data:`MISSING`."""
        if isinstance(node, ast.Name):
            return self.lookup(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base is MISSING:
                return MISSING
            try:
                return getattr(base, node.attr)
            except Exception:  # noqa: BLE001 - any failing attribute is just unknown
                return MISSING
        return MISSING


class CallKind:
    """What a call in a kernel refers to (the ``kind`` of :func:`classify_call`)."""

    LOOP = "loop"
    ATOMIC = "atomic"
    ON_DEVICE = "on_device"
    ROUTINE = "routine"          # acc.routine or an implicit routine (§2.15.1)
    RANGE = "range"
    LIBRARY = "library"          # numpy, math, builtins, Numba dispatchers ...
    METHOD = "method"            # x.method(...) on a local value
    HOST = "host"                # a routine of pyacc's host runtime (acc.copyin ...)
    CACHE = "cache"              # acc.cache(...): a hint, removed (``without_cache_hints``)
    UNKNOWN = "unknown"          # not resolvable yet


def classify_call(call: ast.Call, scope: Scope):
    """Classify a call: returns ``(kind, detail)``.

    ``detail`` is the atomic op name for ATOMIC, the function for ROUTINE, the object
    for LIBRARY, None otherwise.
    """
    target = scope.resolve(call.func)
    if target is MISSING:
        if isinstance(call.func, ast.Attribute) and root_name(call.func) in scope.local:
            return CallKind.METHOD, None
        if isinstance(call.func, ast.Attribute) and \
                scope.resolve(call.func.value) is markers.atomic:
            return CallKind.ATOMIC, call.func.attr  # not an operation: the rewrite says so
        return CallKind.UNKNOWN, None
    if target is markers.loop:
        return CallKind.LOOP, None
    if target is markers.cache:
        return CallKind.CACHE, None
    if target is markers.on_device:
        return CallKind.ON_DEVICE, None
    if getattr(target, ON_DEVICE_ATTR, None) is not None:  # omp.is_initial_device: on "host"
        return CallKind.ON_DEVICE, getattr(target, ON_DEVICE_ATTR)
    if _of_host_runtime(target):
        return CallKind.HOST, target
    op = markers.ATOMIC_OPS.get(id(target))
    if op is not None and getattr(markers.atomic, op) is target:
        return CallKind.ATOMIC, op
    if target is range:
        return CallKind.RANGE, None
    if getattr(target, ROUTINE_ATTR, None) is not None:
        try:
            return CallKind.ROUTINE, routine_function(target)
        except CompileError:  # a bind(name) defined later: resolved (or refused) when compiling
            return CallKind.ROUTINE, None
    if routine_function(target) is not None:
        return CallKind.ROUTINE, routine_function(target)
    return CallKind.LIBRARY, target


def _of_host_runtime(obj) -> bool:
    """A function of pyacc's runtime (``acc.copyin``, ``omp.get_device_num`` ...): host
    code, never a routine; the compiler's own (markers, atomics) are kernel code."""
    module = getattr(obj, "__module__", None) or ""
    return callable(obj) and (module == "pyacc" or module.startswith("pyacc.")) and \
        not module.startswith("pyacc.compiler") and getattr(obj, ROUTINE_ATTR, None) is None


def routine_function(obj):
    """The Python function to compile as a routine for ``obj``, or None.

    ``obj`` is a routine when ``mark_routine`` tagged it, or when it is a plain Python
    function outside the numeric libraries: OpenACC 3.3 §2.15.1 applies an implied
    ``routine seq`` to procedures called in a compute region.
    """
    info = getattr(obj, ROUTINE_ATTR, None)
    if info is not None:
        return _bound(info) if info.clauses.bind is not None else info.func
    if isinstance(obj, pytypes.FunctionType):
        if not in_library(getattr(obj, "__module__", None) or ""):
            return obj
    return None


def _bound(info, seen=()):
    """The function a ``routine`` with ``bind`` runs on the device (OpenACC 3.3 §2.15.1): the
    one given, or the function of that name in the routine's module (followed through the
    binds of the functions it names; a cycle is a CompileError)."""
    if info.func in seen:
        raise CompileError(f"{info.where}: routine bind(...) cycles back to "
                           f"{info.func.__name__}: bind the chain to a function that runs")
    bound = info.clauses.bind
    if isinstance(bound, str):
        bound = info.func.__globals__.get(bound, None)
        if bound is None:
            raise CompileError(f"{info.where}: routine bind({info.clauses.bind}) names no "
                               f"function of module {info.func.__module__!r}")
    further = getattr(bound, ROUTINE_ATTR, None)
    found = info.func if bound is info.func else _bound(further, (*seen, info.func)) if \
        further is not None and further.clauses.bind is not None else routine_function(bound)
    if found is None:
        raise CompileError(f"{info.where}: routine bind(...) must name a Python function, got "
                           f"{bound!r}")
    return found


def is_numeric_constant(value) -> bool:
    """True for values that are inlined into kernels as literals."""
    if isinstance(value, (bool, int, float, complex, np.bool_, np.number)):
        return True
    if isinstance(value, tuple):
        return all(is_numeric_constant(v) for v in value)
    return False


def without_cache_hints(tree: ast.FunctionDef, scope: Scope) -> ast.FunctionDef:
    """``tree`` without its ``acc.cache(...)`` statements (a copy; ``tree`` itself when it
    has none): a hint (OpenACC 3.3 §2.10) whose sections would otherwise read as array
    uses to the dependence tests; ``load_function`` gives every function without them.
    A body left empty gets ``pass``."""
    def hint(node):
        return isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
            classify_call(node.value, scope)[0] == CallKind.CACHE
    if not any(hint(node) for node in ast.walk(tree)):
        return tree
    tree = copy.deepcopy(tree)
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and any(hint(stmt) for stmt in block):
                kept = [stmt for stmt in block if not hint(stmt)]
                setattr(node, field, kept or [ast.copy_location(ast.Pass(), block[0])])
    return tree

