"""Kernels: compile a ``KernelInfo`` for a target and hand back a callable.

Owns :func:`get_kernel` (in-process memo, disk cache, targets) and the build of a
module: the text (``codegen``), completed by the typing probe that finds the types of
reduction variables (``typing_probe``), loaded and compiled; Numba's errors become
:class:`CompileError`, and under bounds checking :class:`KernelIndexError`
(``kernel_errors``).

Invariants:
    * ``info.kernels`` is the only kernel cache: keyed by ``kernel_key`` (target, device
      type, bounds checking, argument kinds — an array's ``(dtype, ndim)``, a record
      dtype whole, a scalar's Python type —, the serial crossover, on cuda a launch
      shape evaluated at the call); a repeated call costs a tuple build and a dict
      lookup. A call with struct arguments takes the kernel of the function flattened
      for its layout (``analysis.flattened``: one ``KernelInfo``, with its own cache,
      per layout).
    * The loops are planned once (``KernelInfo.plan``, made by ``analyze``); every build
      of a region generates code from that plan.
    * The kernel returned for ``target="cpu"`` is the Numba dispatcher itself (without
      bounds checking), so ``kernel(*args)`` goes straight into Numba.
    * A generated module is named by the hash of its text and the key material, stored
      signed (atomically; replaced only when refused) under ``cache_dir()``, and run
      from its verified text, never imported (``caches``): only code pyacc wrote for this
      user runs. Its dispatchers' Numba caches beside it are signed too, so later
      processes load machine code without compiling. Where the cache cannot be used
      (no key, a folder that cannot be written) the module runs from memory.
    * Under ``PYACC_BOUNDSCHECK=1`` kernels run their loops on one thread (Numba drops
      exceptions raised inside ``prange``), with named index checks on parameter arrays
      and Numba's own bounds checking for the rest.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import linecache
import os
import sys
import threading
import traceback
import warnings
from pathlib import Path
from types import ModuleType

import numba
import numpy as np
from numba.core import types as nbtypes

from . import caches, crossover, cuda_compilers, feedback, markers, threading_layer
from .arguments import argument_kind, device_dtype_ndim, is_device_array
from .analysis import KernelInfo, check_free_names, flat_clauses, flattened, struct_layout
from .caches import cache_dir
from .clauses import DATA_CLAUSES
from .device_types import for_device_type
from .codegen import CACHE_FLAG, KERNEL_NAME, ModuleBuilder, add_function
from .cpu_target import CpuTarget
from .errors import CompileError, KernelIndexError
from .kernel_errors import bounds_checked, compile_error
from .frontend import Scope, local_names
from .planner import Planner
from .typing_probe import private_local_types
from .typing_probe import probe_types as _probe_types  # a module global: tests replace it

__all__ = ["get_kernel", "kernel_for", "kernel_key", "kernel_env", "KERNEL_ENV_KEYS",
           "feedback_view",
           "jit_disabled",
           "cache_dir", "TARGETS", "boundscheck_enabled"]

#: Code-generating targets by name; ``"python"`` is handled separately (no codegen).
TARGETS = {"cpu": CpuTarget()}

_lock = threading.RLock()
_modules: dict = {}
_generator_version: str | None = None


_environ = os.environ
#: the bytes-keyed dict behind ``os.environ`` (kept in step by it; ~0.05 µs a read instead
#: of ~0.5 µs), where the platform has one
_environ_data_get = getattr(os.environ, "_data", {}).get if os.name == "posix" else \
    (lambda name: os.environ.get(name.decode()))


def boundscheck_enabled() -> bool:
    """True when ``PYACC_BOUNDSCHECK`` is set to something other than ``""``/``"0"``."""
    return _environ.get("PYACC_BOUNDSCHECK", "0") not in ("", "0")


def get_kernel(info: KernelInfo, args, target: str = "cpu", device_type: str = "host",
               clauses=None):
    """The compiled kernel of ``info`` for these arguments, target and device.

    The only kernel cache there is: ``info.kernels``, keyed by :func:`kernel_key`.

    Args:
        info: From :func:`analyze`.
        args: Device arrays and scalars in parameter order (numpy arrays on the CPU).
        target: ``"cpu"`` (Numba, parallel), ``"cuda"`` or ``"python"`` (the function as
            written).
        device_type: ``"host"``, ``"emulated"``, ... (decides ``on_device``).
        clauses: The clauses evaluated for this call when some are expressions
            (``"vector((n+31)/32*32)"``); on the cuda target the launch shape is part of
            the code, so each evaluated shape gets its kernel (the CPU ignores them).

    Returns:
        A callable ``kernel(*args)`` returning what the function returns (None, a
        reduction value or a tuple of them).

    Raises:
        CompileError: The kernel cannot be compiled (location and Numba's reason).
    """
    if info.free_params and len(args) == len(info.params):
        # called with the user's arguments only: the kernel reads its free parameters
        # (globals, closure variables) itself at each call
        return _reading_free_values(get_kernel(info, (*args, *info.free_values()), target,
                                               device_type, clauses), info)
    if info.struct_params and target != "python":  # (plain Python takes the structs)
        layout = struct_layout(info, args)
        if layout is not None:
            return _flattening(info, layout, args, target, device_type, clauses)
    key = kernel_key(info, args, target, device_type, clauses)
    kernel = info.kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = info.kernels.get(key)
            if kernel is None:
                built = info
                if target == "cuda" and clauses is not None:  # a launch shape evaluated at the call
                    built = dataclasses.replace(info, clauses=clauses, kernels={}, plan=None)
                kernel = _build(built, tuple(args), target, device_type, key[2], key[3], key[4])
                info.kernels[key] = kernel
    return kernel


def kernel_for(info: KernelInfo, args, device_type: str, clauses=None):
    """The kernel a compute call on a device of ``device_type`` runs with ``args``: the
    device's target (``host`` and ``emulated`` kernels run on CPU threads, ``cuda`` on
    the GPU), or the function as written under ``PYACC_DISABLE_JIT=1``."""
    target = "python" if jit_disabled() else _TARGET_OF.get(device_type, "cpu")
    if (clauses or info.clauses).device_types:  # OpenACC 3.3 §2.4: this type's group
        clauses = for_device_type(clauses or info.clauses, device_type)
    return get_kernel(info, args, target=target, device_type=device_type, clauses=clauses)


def kernel_key(info: KernelInfo, args, target: str, device_type: str, clauses=None) -> tuple:
    """What decides which kernel ``get_kernel`` returns: the target, the device type,
    bounds checking, the arguments' kinds (:func:`argument_kind`) and the serial
    crossover; on the cuda target also the compiler and a launch shape evaluated at the
    call."""
    key = (target, device_type, boundscheck_enabled(), tuple(map(argument_kind, args)),
           crossover.serial_below() if target == "cpu" else 0)
    if target == "cuda":
        compiler = cuda_compilers.choice()[0]  # chosen once per process
        key += (compiler and compiler.name,)
        if clauses is not None:  # (given only when they were evaluated)
            key += ((clauses.num_gangs, clauses.num_workers, clauses.vector_length),)
    return key


#: the environment variables that decide a kernel, as ``os.environ._data`` keys them
KERNEL_ENV_KEYS = (b"PYACC_DISABLE_JIT", b"PYACC_BOUNDSCHECK", b"PYACC_SERIAL_BELOW")
_JIT_KEY, _BOUNDSCHECK_KEY, _SERIAL_KEY = KERNEL_ENV_KEYS  # (read without a loop: a hot path)


def kernel_env() -> tuple:
    """The raw values of the environment variables that decide a kernel
    (``KERNEL_ENV_KEYS``: ``PYACC_DISABLE_JIT``, ``PYACC_BOUNDSCHECK``,
    ``PYACC_SERIAL_BELOW``): a caller that keeps a kernel compares them to know it still
    applies (~0.1 µs)."""
    get = _environ_data_get
    return (get(_JIT_KEY), get(_BOUNDSCHECK_KEY), get(_SERIAL_KEY))


def jit_disabled() -> bool:
    """True when ``PYACC_DISABLE_JIT`` is set to something other than ``""``/``"0"``."""
    return _environ.get("PYACC_DISABLE_JIT", "0") not in ("", "0")


#: the compiler target of each device type (host and emulated kernels run on CPU threads)
_TARGET_OF = {"host": "cpu", "emulated": "cpu", "cuda": "cuda"}


def feedback_view(info: KernelInfo, arg_types):
    """``(info, arg_types)`` for compiler feedback (``acc.explain``, ``PYACC_INFO``): a
    flattened info's members, and a module's attributes, named as the program spells them
    (``s.x``, ``gmod.G``; not ``s__x``, ``gmod__G``)."""
    if not info.labels:
        return info, arg_types
    name = info.labels.get
    clauses = dataclasses.replace(info.clauses, **{
        kind: tuple(name(n, n) for n in getattr(info.clauses, kind)) for kind in DATA_CLAUSES})
    shown = dataclasses.replace(info, params=tuple(name(n, n) for n in info.params),
                                free_params=tuple(name(n, n) for n in info.free_params),
                                written=frozenset(name(n, n) for n in info.written),
                                read=frozenset(name(n, n) for n in info.read), clauses=clauses)
    types = None if arg_types is None else {name(n, n): t for n, t in arg_types.items()}
    return shown, types


def _flattening(info, layout, args, target, device_type, clauses):
    """The kernel of ``info`` flattened for ``layout`` (struct arguments), taking the
    call's own arguments: each call passes the structs' members (the layout must stay
    the same: the launcher looks it up at each call)."""
    variant = flattened(info, layout)
    if clauses is not None:
        clauses = flat_clauses(clauses, variant)
    kernel = get_kernel(variant, layout.flatten(tuple(args)), target, device_type, clauses)

    def call(*args):
        return kernel(*layout.flatten(args))

    call.kernel = kernel
    for name in ("driver", "dispatcher"):
        if hasattr(kernel, name):
            setattr(call, name, getattr(kernel, name))
    return call


def _reading_free_values(kernel, info):
    """``kernel`` taking the user's arguments: the free parameters' values are read at
    each call (the launcher passes them itself and calls the kernel directly)."""

    def call(*args):
        return kernel(*args, *info.free_values())

    call.kernel = kernel
    for name in ("driver", "dispatcher"):  # what callers inspect on the kernel itself
        if hasattr(kernel, name):
            setattr(call, name, getattr(kernel, name))
    return call


# -------------------------------------------------------------------------------- build


def _build(info, args, target, device_type, boundscheck, kinds, serial_below=0):
    device = markers.normalise_device_type(device_type)
    if len(args) != len(info.kernel_params):
        raise TypeError(f"{info.where} takes {len(info.kernel_params)} arguments "
                        f"({', '.join(info.kernel_params)}), got {len(args)}")
    if target == "python":
        return _python_kernel(info, device, boundscheck)
    if target == "cuda" and info.clauses.construct == "routine":
        target = "cpu"  # a routine called from the host runs on the host
    if target not in TARGETS and target != "cuda":
        raise CompileError(f"unknown target {target!r}; expected one of "
                           f"{', '.join(['python', *TARGETS, 'cuda'])}")
    if target == "cuda":
        _warn_boundscheck_on_cuda(boundscheck)
        boundscheck = False
    arg_types = _numba_types(info, args)
    source = info.source
    scope = Scope(source.func, local_names(source.tree))
    check_free_names(source, scope, strict=True)
    plan = info.plan
    if plan is None:  # a copy with clauses evaluated at the call (kernel_key)
        plan = info.plan = Planner(source, info.clauses, scope).plan()
    feedback.log_decisions(info, plan.notes)
    header = (f"# pyacc generated kernel for {info.where}; target={target} "
              f"device={device} boundscheck={boundscheck}; do not edit")

    known_types = dict(zip(info.kernel_params, arg_types))
    if target == "cuda":  # a private array the region makes gets per-thread rows there
        known_types.update(private_local_types(info, plan, device, arg_types, TARGETS["cpu"]))

    def generate(interchange):
        builder = ModuleBuilder(_target(target), device_type=device,
                                boundscheck=boundscheck,
                                arg_types=known_types,
                                interchange=interchange, serial_below=serial_below)
        builder.clauses = info.clauses
        add_function(builder, info, plan)
        return (builder, *builder.text(header))

    builder, text, linemap = generate(True)
    material = "|".join([_version(), numba.__version__, target, device, str(boundscheck),
                         repr(kinds), repr(info.clauses), text])
    digest = hashlib.sha256(material.encode()).hexdigest()[:24]
    name = f"{info.name}_{digest}.py"
    folder = _cache_folder()
    path = folder / name if folder is not None else None
    stored = caches.read_module(path) if path is not None else None
    if stored is None:
        if builder.slots.slots:
            types = _probe_types(info, plan, device, arg_types, builder.slots, TARGETS["cpu"])
            refused = builder.slots.refused_accumulators(types)
            if refused:  # same line count: the header line only gets longer
                builder, text, linemap = generate(False)
                text = text.replace(header, header + _NO_INTERCHANGE + refused, 1)
            text = builder.slots.fill(text, types)
        on_disk = path is not None and caches.write_module(path, text, replace=path.exists())
    else:
        text, on_disk = stored, True
        if builder.slots.accumulators() and _NO_INTERCHANGE in text.partition("\n")[0]:
            builder, _, linemap = generate(False)  # the file was written that way
    for note in plan.notes:
        note.interchange = note.line in builder.interchanged
        note.serial_below = builder.serial_twins.get(note.line, 0)
    info.notes, info.arg_types = plan.notes, dict(zip(info.kernel_params, arg_types))
    shown, shown_types = feedback_view(info, info.arg_types)
    feedback.report_build(shown, plan.notes, shown_types)
    filename = str(path) if on_disk else f"<pyacc kernel {name}>"
    module = _load_module(text, filename, f"_pyacc_kernel_{digest}", builder.injected, on_disk)
    dispatcher = getattr(module, KERNEL_NAME)
    if target == "cuda":  # the compiler compiles each kernel at its first launch
        return _cuda_driver(dispatcher, info, filename, linemap, builder.target.relaunchable)
    try:
        dispatcher.compile(arg_types)
    except Exception as exc:  # noqa: BLE001 - every compile failure is a CompileError
        raise compile_error(info, exc, filename, linemap) from None
    kernel = bounds_checked(dispatcher, info.where) if boundscheck else dispatcher
    return threading_layer.one_at_a_time(kernel) if threading_layer.serialized() else kernel


#: Header note of a module built without loop interchange because an expanded scalar's
#: type was not a number (``ReductionSlots.refused_accumulators``).
_NO_INTERCHANGE = "; loop interchange off: "


def _target(name):
    """The code generator of target ``name`` (the cuda one keeps per-module state and
    imports numba.cuda, so it is created per build and only when asked for)."""
    if name == "cuda":
        from .cuda_target import CudaTarget  # only when a cuda kernel is built: it loads numba.cuda
        return CudaTarget()
    return TARGETS[name]


_warned_boundscheck = []


def _warn_boundscheck_on_cuda(boundscheck):
    if boundscheck and not _warned_boundscheck:
        _warned_boundscheck.append(True)
        warnings.warn("PYACC_BOUNDSCHECK has no effect on the cuda target (GPU kernels "
                      "cannot raise); check indices on 'host' or 'emulated'", RuntimeWarning,
                      stacklevel=4)


def _cuda_driver(driver, info, generated_file, linemap, relaunchable: bool):
    """The driver of a cuda kernel; Numba's typing or lowering failures, which happen at
    a kernel's first launch, become ``CompileError`` located in the user's source. (The
    compiler's own classes are looked up at the first failure: a process whose kernels
    all load from saved binaries never imports the compiler, ``cuda_kernels``.) Its
    ``relaunchable``: the driver only launches (``cuda_relaunch``)."""

    def kernel(*args):
        try:
            return driver(*args)
        except Exception as exc:
            compiler = cuda_compilers.chosen()
            if not compiler.imported() or not isinstance(exc, compiler.errors()):
                raise  # (not the compiler's: it failed to load, or is not the cause)
            raise compile_error(info, exc, generated_file, linemap,
                                 _launch_origin(exc, generated_file, linemap)) from None

    kernel.driver, kernel.relaunchable = driver, relaunchable
    kernel.__name__ = f"cuda_{info.name}"
    return kernel


def _launch_origin(exc, generated_file, linemap):
    """``(file, line)`` of the user loop whose launch raised ``exc`` (the driver line
    in the generated file that was running), or None."""
    origin = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == generated_file and 0 < line < len(linemap):
            origin = linemap[line] or origin
    return origin


def _numba_types(info, args):
    types = []
    for name, value in zip(info.kernel_params, args):
        if is_device_array(value):  # typed like the host array it stands for
            dtype, ndim = device_dtype_ndim(value)
            types.append(nbtypes.Array(numba.from_dtype(dtype), ndim, "A"))
            continue
        try:
            types.append(numba.typeof(value))
        except (ValueError, TypeError) as exc:
            raise CompileError(f"{info.name}: argument {name!r} of type "
                               f"{type(value).__name__} cannot be passed to a kernel "
                               f"({exc})", info.filename, info.lineno) from None
    return tuple(types)


def _cache_folder() -> Path | None:
    """The kernel cache folder, or None (one warning) when it cannot be used: its key
    cannot be read or made, or the folder cannot be made (kernels then run from memory)."""
    try:
        caches.key()
        folder = caches.cache_dir()
    except OSError as error:
        caches.warn_once("<the kernel cache>", f"pyacc: the kernel cache cannot be used ({error}); "
                         "kernels are compiled in memory in this process. Set PYACC_CACHE_DIR "
                         "to a folder you can write")
        return None
    with contextlib.suppress(OSError):  # where Numba caches the modules' machine code
        caches.private_folder(folder / "__pycache__")
    return folder


def _load_module(text: str, filename: str, module_name: str, injected: dict, cache: bool):
    """Run a generated module's (verified) text: from its file in the kernel cache
    (``cache``: Numba caches its machine code beside it, signed) or from memory.

    Never imported through importlib: no ``.pyc`` is written or believed, and only the
    text pyacc generated or verified runs."""
    ident = (filename, tuple(sorted((k, id(v)) for k, v in injected.items())))
    module = _modules.get(ident)
    if module is not None:
        return module
    if not cache:
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    module = ModuleType(module_name)
    module.__file__ = filename
    namespace = vars(module)
    namespace[CACHE_FLAG] = cache
    sys.modules.setdefault(module_name, module)
    try:
        exec(compile(text, filename, "exec"), namespace)  # noqa: S102 - pyacc's own text
    except RuntimeError as error:  # Numba finds no folder it can write for its cache
        if not cache or "cannot cache" not in str(error):
            raise
        caches.warn_once(filename, f"pyacc: Numba cannot cache {filename} ({error}); it is "
                                   "compiled in memory")
        return _load_module(text, f"<pyacc kernel {Path(filename).name}>", module_name,
                            injected, False)
    for value in list(namespace.values()):
        if getattr(getattr(value, "py_func", None), "__code__", None) is not None \
                and value.py_func.__code__.co_filename == filename:
            caches.sign_dispatcher_cache(value)
    namespace.update(injected)
    _modules[ident] = module
    return module


def _version() -> str:
    """Hash of the compiler's own sources: generated code changes when they do."""
    global _generator_version
    if _generator_version is None:
        digest = hashlib.sha256()
        for file in sorted(Path(__file__).parent.glob("*.py")):
            digest.update(file.read_bytes())
        _generator_version = digest.hexdigest()[:16]
    return _generator_version


# ------------------------------------------------------------------------------ python


def _python_kernel(info, device, boundscheck):
    """The function itself, run as plain Python (``PYACC_DISABLE_JIT=1``)."""
    func = info.func
    count = len(info.params)  # the function reads its free parameters itself
    layout = info.layout  # a flattened info: the function takes the structs again
    if device == "host" and not boundscheck and not info.free_params and layout is None:
        return func

    def kernel(*args):
        with markers.device_scope(device):
            try:
                if layout is not None:
                    return func(*layout.rebuild(args[:count]))
                return func(*args[:count])
            except KernelIndexError:
                raise
            except IndexError as exc:
                if boundscheck:
                    raise KernelIndexError(info.where, None, detail=str(exc)) from exc
                raise

    kernel.__wrapped__ = func
    return kernel
