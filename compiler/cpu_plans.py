"""Prepared calls: a compiled CPU kernel called without Numba's dispatcher.

Owns :func:`prepare`. A Numba CPU dispatcher called from Python types each argument
(``typeof``), selects the overload, makes an NRT meminfo for each array and unboxes it,
then calls the compiled function: about 4,000 machine instructions for three arrays,
more than the express lane's own checks of a repeated call (``pyacc/_fastcall.c``). The
lane's checks already prove what the dispatcher would find out again: the same argument
types, dtypes, dimensions and layouts as the call that armed it. So, as a GPU launch
goes through a prepared plan and one driver call (issue 28), a CPU call on present data
goes through a prepared call: plain words and one C call.

``prepare(kernel, args)`` returns ``(trampoline, holding, function, environment,
kinds)`` for a Numba CPU dispatcher already compiled for ``args``' types, or None (the
lane then calls the dispatcher, as before):

- ``trampoline``: the address of ``PyObject *call(const int64_t *words)``, compiled once
  per overload *shape* (argument types, return type, whether the GIL is released) and
  shared by every kernel of that shape. ``words[0]`` is the overload's native function,
  ``words[1]`` its ``Environment``, then one group of words per argument:
  an array's data pointer, its dimensions, its strides; a scalar's bits (an ``int`` as
  int64, a ``float`` as float64, a ``bool`` as 0/1). The trampoline builds each
  argument's native value (an array without meminfo or parent: the caller keeps it alive
  for the call), calls the function by Numba's calling convention, the GIL released as
  the dispatcher's ``nogil`` asks, and returns the boxed result, or NULL with the
  kernel's exception set, both as Numba's own CPython wrapper does (``numba.core.
  callwrapper``: the same ``call_conv.raise_error`` and ``from_native_return``).
- ``holding``: the same shape's trampoline that keeps the GIL (``trampoline`` itself
  when the kernel is not ``nogil``): the caller uses it for a call with the very words
  of the kernel's last call, which was short, where giving the GIL back and taking it
  again would cost more than another thread gains (``pyacc/_prepared_call.c.h``).
- ``function``, ``environment``: ``words[0]`` and ``words[1]`` (kept alive by the
  dispatcher's overload, which the dispatcher keeps).
- ``kinds``: one byte per argument: an array's ``ndim`` (0–32), or ``b"i"``, ``b"f"``,
  ``b"b"`` for a Python ``int``, ``float``, ``bool``.

A trampoline that cannot be built (a Numba whose internals differ) is said once per
kernel through ``PYACC_INFO``, and the kernel is called by its dispatcher.

A prepared call is asked for again whenever the lane makes a new plan, which on a device
with separate memory is at every data region that maps the arrays anew (new device
arrays). Each answer is kept per kernel and per what Numba's ``typeof`` reads of the
arguments (an array's dtype, dimensions and typing flags: layout, alignment,
writability; a scalar's type), so that asking again costs a lookup, not ``typeof`` of
every argument (~4 µs an array) and the overload's function address: ~3 µs instead of
~19 µs for four arguments. A kept answer is given only while the kernel's overload for
those types is still the one it was made from (``Dispatcher.recompile`` replaces it).

Invariants: only exact ``numpy.ndarray`` arguments of numbers or bools and exact ``int``/``float``/``bool``
scalars whose Numba types are the overload's own (``typeof`` at preparation) are
prepared, and only kernels returning nothing, a number, a bool or a tuple of those; the
caller (``pyacc/_prepared_call.c.h``) calls through the words only while its own checks
hold the argument types fixed, and falls back to the dispatcher for an ``int`` outside
int64 (the dispatcher would choose another overload) or any argument of another kind.
"""

from __future__ import annotations

import weakref

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import CPUDispatcher

try:  # Numba's internals the trampoline is built from (numba 0.60 to 0.68 have them)
    from numba.core.callconv import excinfo_t
    from numba.core.environment import Environment
    from numba.np.arrayobj import populate_array
    _MISSING = None
except ImportError as missing:  # a Numba that moved them: every kernel keeps its dispatcher
    excinfo_t = Environment = populate_array = None
    _MISSING = missing

from .feedback import info_enabled, log_info

#: the most words a prepared call takes (the C caller's buffer on the stack)
MOST_WORDS = 256
#: the most dimensions an array argument's kind byte stands for
_MOST_NDIM = 32
_SCALARS = {int: (types.int64, b"i"), float: (types.float64, b"f"), bool: (types.boolean, b"b")}
_RETURNED = (types.NoneType, types.Number, types.Boolean)
_ITEMS = (types.Number, types.Boolean)

_refused = weakref.WeakSet()  # dispatchers whose prepared call could not be built
_trampolines: dict = {}  # (argtypes, restype, release_gil) -> (library, address)
#: kernel -> {typing key of the arguments (_typing_key): (overload, answer)}
_answers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: the array flags Numba's typeof reads: NumPy's C_CONTIGUOUS, F_CONTIGUOUS, ALIGNED,
#: WRITEABLE (``pyacc/_prepared_call.c.h``'s PREPARED_TYPING_FLAGS)
_TYPING_FLAGS = 0x1 | 0x2 | 0x100 | 0x400


def prepare(kernel, args):
    """The prepared call of ``kernel`` for arguments like ``args`` (see the module's
    docstring), or None where the dispatcher must be called."""
    if not isinstance(kernel, CPUDispatcher) or not isinstance(args, tuple):
        return None
    key = _typing_key(args)
    if key is None:
        return None
    kept = _answers.get(kernel, {}).get(key)
    if kept is not None and kernel.overloads.get(kept[0].signature.args) is kept[0]:
        return kept[1]
    found = _prepare(kernel, args, key)
    if found is not None:
        _answers.setdefault(kernel, {})[key] = found
        return found[1]
    return None


def _typing_key(args) -> tuple | None:
    """What Numba's ``typeof`` reads of each argument (an exact array's dtype, dimensions
    and typing flags; an exact scalar's type), or None for an argument not prepared."""
    key = []
    for arg in args:
        if type(arg) is np.ndarray and arg.ndim <= _MOST_NDIM:
            key.append((arg.dtype, arg.ndim, arg.flags.num & _TYPING_FLAGS))
        elif type(arg) is int and not -2**63 <= arg < 2**63:
            return None  # typed otherwise (uint64) or refused: never prepared
        elif type(arg) in _SCALARS:
            key.append(type(arg))
        else:
            return None
    return tuple(key)


def _prepare(kernel, args, key):
    """``prepare``'s answer made for ``args`` of typing key ``key``: ``(overload,
    answer)``, or None."""
    kinds = _kinds(key)
    try:
        argtypes = tuple(kernel.typeof_pyval(a) for a in args)
    except Exception:  # an argument Numba cannot type: the dispatcher says so
        return None
    cres = kernel.overloads.get(argtypes)
    if cres is None or cres.objectmode or not _returns_plain(cres.signature.return_type):
        return None
    if tuple(cres.signature.args) != argtypes or not _types_match(argtypes, args):
        return None
    if 2 + sum(_words_of(kind) for kind in kinds) > MOST_WORDS:
        return None
    nogil = bool(kernel.targetoptions.get("nogil"))
    try:
        trampoline = _trampoline(cres, nogil)
        holding = _trampoline(cres, False) if nogil else trampoline
    except Exception as error:  # noqa: BLE001 - the dispatcher is a correct way to call
        _report(kernel, error)
        return None
    function = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    return cres, (trampoline, holding, function, id(cres.environment), kinds)


def _report(kernel, error) -> None:
    """Say once per kernel, through ``PYACC_INFO``, why its calls are not prepared."""
    if not info_enabled() or kernel in _refused:
        return
    _refused.add(kernel)
    name = getattr(getattr(kernel, "py_func", None), "__name__", "a kernel")
    log_info(f"kernel {name} is called through Numba's dispatcher: its prepared call "
             f"could not be built ({type(error).__name__}: {error})")


def _kinds(key) -> bytes:
    """One kind byte per argument of typing key ``key``: an array's ndim, a scalar's letter."""
    return bytes(item[1] if type(item) is tuple else _SCALARS[item][1][0] for item in key)


def _types_match(argtypes, args) -> bool:
    """Arrays typed as arrays, scalars as the type the words carry (an ``int`` beyond
    int64 is typed otherwise: not prepared)."""
    for numba_type, arg in zip(argtypes, args):
        expected = _SCALARS.get(type(arg))
        if expected is None:  # arrays of numbers and bools (a record's layout is not read)
            if not isinstance(numba_type, types.Array) or not isinstance(numba_type.dtype, _ITEMS):
                return False
        elif numba_type != expected[0]:
            return False
    return True


def _returns_plain(restype) -> bool:
    if isinstance(restype, types.BaseTuple):
        return all(_returns_plain(t) for t in restype.types)
    return isinstance(restype, _RETURNED)


def _words_of(kind: int) -> int:
    return 1 if kind > _MOST_NDIM else 1 + 2 * kind


def _trampoline(cres, release_gil: bool) -> int:
    fndesc = cres.fndesc
    key = (tuple(fndesc.argtypes), fndesc.restype, release_gil)
    with global_compiler_lock:  # Numba's: its code generation and libraries need it
        built = _trampolines.get(key)
        if built is None:
            built = _trampolines[key] = _build(cres.target_context, fndesc, release_gil)
    return built[1]


def _build(context, fndesc, release_gil: bool):
    """Compile the trampoline for ``fndesc``'s shape: ``(library, address)``."""
    if _MISSING is not None:
        raise _MISSING
    codegen = context.codegen()
    library = codegen.create_library("pyacc_prepared_call")
    module = library.create_ir_module("pyacc_prepared_call")
    word = ir.IntType(64)
    pyobject = context.get_argument_type(types.pyobject)
    name = "pyacc_prepared_call"
    function = ir.Function(module, ir.FunctionType(pyobject, [word.as_pointer()]), name)
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    words = function.args[0]
    reader = _WordReader(builder, words)
    callee_type = context.call_conv.get_function_type(fndesc.restype, fndesc.argtypes)
    callee = builder.inttoptr(reader.next(), callee_type.as_pointer())
    envptr = builder.inttoptr(reader.next(), cgutils.voidptr_t)
    values = [_argument(context, builder, reader, t) for t in fndesc.argtypes]

    api = context.get_python_api(builder)
    retty = context.call_conv.get_return_type(fndesc.restype).pointee
    retvaltmp = cgutils.alloca_once_value(builder, cgutils.get_null_value(retty))
    excinfoptr = cgutils.alloca_once(builder, ir.PointerType(excinfo_t), name="excinfo")
    packed = list(context.call_conv._get_arg_packer(fndesc.argtypes).as_arguments(builder, values))
    thread_state = api.save_thread() if release_gil else None
    code = builder.call(callee, [retvaltmp, excinfoptr] + packed, attrs=("noinline",))
    if release_gil:
        api.restore_thread(thread_state)
    status = context.call_conv._get_return_status(builder, code, builder.load(excinfoptr))
    retval = context.get_returned_value(builder, fndesc.restype, builder.load(retvaltmp))
    with builder.if_then(status.is_ok, likely=True):
        with builder.if_then(status.is_none):
            api.return_none()
        compile_env = Environment({})  # what boxing would add constants to: none (checked)
        env_manager = api.get_env_manager(compile_env, context.get_env_body(builder, envptr), envptr)
        builder.ret(api.from_native_return(fndesc.restype, retval, env_manager))  # (plain: prepare)
    context.call_conv.raise_error(builder, api, status)
    builder.ret(api.get_null_object())
    if compile_env.consts:  # boxing that reads the environment: the caller's is another
        raise TypeError(f"{fndesc.restype} is boxed through the environment")

    library.add_ir_module(module)
    library.finalize()
    return library, library.get_pointer_to_function(name)


class _WordReader:
    """The words of the trampoline's buffer, read in order."""

    def __init__(self, builder, words):
        self.builder, self.words, self.index = builder, words, 0

    def next(self):
        pointer = self.builder.gep(self.words, [ir.Constant(ir.IntType(32), self.index)])
        self.index += 1
        return self.builder.load(pointer)


def _argument(context, builder, reader, numba_type):
    """One argument's native value from its words."""
    if isinstance(numba_type, types.Array):
        array = context.make_array(numba_type)(context, builder)
        data = builder.inttoptr(reader.next(), array.data.type)
        shape = [reader.next() for _ in range(numba_type.ndim)]
        strides = [reader.next() for _ in range(numba_type.ndim)]
        itemsize = context.get_abi_sizeof(context.get_data_type(numba_type.dtype))
        populate_array(array, data=data, shape=cgutils.pack_array(builder, shape, ir.IntType(64)),
                       strides=cgutils.pack_array(builder, strides, ir.IntType(64)),
                       itemsize=context.get_constant(types.intp, itemsize), meminfo=None)
        return array._getvalue()
    value = reader.next()
    if numba_type == types.float64:
        return builder.bitcast(value, ir.DoubleType())
    if numba_type == types.boolean:
        return builder.icmp_unsigned("!=", value, ir.Constant(value.type, 0))
    return value  # int64
