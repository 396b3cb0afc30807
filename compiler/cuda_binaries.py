"""GPU kernels compiled once per machine: a kernel's cubin kept on disk, loaded in later
processes without numba-cuda's compiler.

numba-cuda's own disk cache (``cache=True`` on a generated module's kernels, signed by
``caches``) keeps a kernel's machine code, but loading from it still builds numba-cuda's
typing and target contexts and types every argument: ~0.8 s for the first call of a cached
kernel in a fresh process on an H100 (issue 28). A *kernel binary* keeps what a launch
needs and nothing a compiler must rebuild: the cubin numba-cuda linked the kernel to for
the device, the kernel's entry name, and how each parameter is spelled in words.

**Saved** (:func:`save`) after the first launch, through numba-cuda's dispatcher, of a
kernel of a generated module stored in the kernel cache, for the kinds of that launch's
arguments (:func:`kinds`), when

- the words :func:`spell` makes for that launch's arguments are exactly the words
  numba-cuda's launch passed (``_Kernel._prepare_args``; compared word by word, type and
  value: what ``cuda.core.launch`` packs for the driver), and
- numba-cuda compiled the kernel for exactly the types of these kinds (its dispatcher may
  run one compiled for types they convert to, which would fix that choice for every
  later process), and
- the kernel needs nothing a load does not do: no module setup functions, no NRT, not
  cooperative, no debug error word, no dispatcher extensions, no shared-memory carveout,
  not launch-config sensitive (``cuda_plans`` refuses the same for plans).

**Loaded** (:func:`lookup`) at the first launch, in a process, of a kernel for argument
kinds whose configuration has no plan: the binary of (module, kernel, kinds, compiler,
compute capability) is read, its signature checked (``caches.verified_bytes``: a binary
another user could have written is never loaded), its cubin loaded with ``cuda.core``
(``ObjectCode.from_cubin``, ``get_kernel``), and it becomes a prepared launch
(``cuda_plans.PreparedLaunch``) whose words :func:`spell` makes: the dispatcher never
compiles, types or loads anything for it.

**The key** of a binary (its file name): the generated module's file name (its digest
covers pyacc's code generator, Numba's version, the text and the kernel's key material:
``kernel.py``), the kernel's name, the argument kinds (an array's dtype, dimensions and
layout, C, F or A, as numba-cuda types it; a scalar's type), the compiler and its version
(``cuda_compilers``), the device's compute capability, Numba's settings from the
environment (``NUMBA_*``) and the versions of the toolkit that compiled and linked it.

Invariants: a binary is written whole or not at all (``caches.replace_signed``); a loaded kernel's words for any arguments of the binary's kinds are the words
numba-cuda's launch would pass (the rule :func:`spell` follows, checked at every save and
by ``tests/cuda/test_cuda_binaries.py`` against numba-cuda's own marshaller); anything
unexpected (no cache, an unreadable, refused or foreign binary, a load or a launch of a
loaded kernel that fails) means the dispatcher's path and a compile, never an error of
the call.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import json
import os
import sys
import threading
from pathlib import Path

import numpy as np

from . import caches, cuda_compilers
from .feedback import info_enabled, log_info

__all__ = ["lookup", "save", "refuse", "spell", "kinds", "prepare", "counts", "Binary", "DUE",
           "FOLDER", "FORMAT", "KEPT"]

#: the binaries' folder inside the kernel cache
FOLDER = "gpu"
#: the layout of a binary; a binary of another layout is not loaded
FORMAT = 1
#: (kernel, kinds, capability) whose lookups are remembered; the oldest go first
KEPT = 1024
#: :func:`lookup`'s answer when no binary exists yet and one can be saved after this launch
DUE = "due"
#: a scalar's ctypes word by its numba type's name (``_Kernel._prepare_args``)
_SCALARS = {"float64": ctypes.c_double, "float32": ctypes.c_float,
            **{name: getattr(ctypes, f"c_{name}") for name in
               ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")}}
_COMPLEX = {"complex128": ctypes.c_double, "complex64": ctypes.c_float}
_ARRAY = "array"
#: a Python scalar's kind (``kinds``) as the dtype numba-cuda types it with
_SCALAR_KINDS = {"int": np.dtype(np.int64).str, "float": np.dtype(np.float64).str,
                 "bool": np.dtype(np.bool_).str}

#: the toolkit's parts a cubin depends on (NVVM compiles, nvJitLink links)
_TOOLKIT = ("nvidia-nvvm", "nvidia-nvjitlink", "nvidia-nvjitlink-cu12", "cuda-bindings")
_toolkit: list = []  # [their versions], read once
_looked: dict[tuple, object] = {}  # (dispatcher, kinds, capability) → Binary, DUE or None
_lock = threading.Lock()
_counts = {"loaded": 0, "saved": 0}  # binaries loaded and saved by this process


def counts() -> dict:
    """Binaries this process loaded and saved: ``{"loaded": n, "saved": m}``."""
    return dict(_counts)


def prepare() -> None:
    """Import what loading and launching a saved binary needs (cuda.core), ahead of the
    first compute call (``acc.init`` on cuda, OpenACC 3.3 §3.2.7: initialisation paid
    there). The compiler is not imported: a process whose kernels all load never needs
    it (``cuda_kernels``). A failure is left to the first launch to report."""
    if cuda_compilers.simulated():
        return
    try:
        import cuda.core  # noqa: F401 - ObjectCode, launch, LaunchConfig, Stream
    except ImportError:
        pass


class Binary:
    """A loaded binary: the driver's kernel and each parameter's spelling."""

    __slots__ = ("handle", "code", "parameters", "path")

    def __init__(self, loaded: tuple, parameters: tuple, path: Path):
        self.handle, self.code = loaded  # (the kernel launches from its object code)
        self.parameters, self.path = parameters, path


# -- kinds and words --------------------------------------------------------------------------
def kinds(found) -> tuple:
    """Each argument's kind, from its launch facts (``cuda_plans.facts``): an array's
    ``(dtype, ndim, layout)``, a scalar's type name."""
    named = []
    for fact in found:
        if type(fact) is tuple:  # an array's (pointer, shape, strides, dtype)
            _, shape, strides, dtype = fact
            named.append((dtype.str, len(shape), _layout(shape, strides, dtype.itemsize)))
        else:  # a scalar's type: Python's, or a NumPy number's
            named.append(fact.__name__ if fact in (float, bool, int) else np.dtype(fact).str)
    return tuple(named)


def _layout(shape, strides, itemsize) -> str:
    """C, F or A, by NumPy's (and CuPy's) contiguity rules: extents of 1 are skipped, an
    empty array is both."""
    if 0 in shape:
        return "C"
    dimensions = tuple(zip(shape, strides))
    for layout, order in (("C", dimensions[::-1]), ("F", dimensions)):
        expected, contiguous = itemsize, True
        for extent, stride in order:
            if extent != 1:
                contiguous = contiguous and stride == expected
                expected *= extent
        if contiguous:
            return layout
    return "A"


def spell(parameters: tuple, args) -> list:
    """The kernel-parameter words of ``args`` for ``parameters`` (:func:`parameter` of
    each), as numba-cuda 0.30's ``_Kernel._prepare_args`` makes them: an array's
    ``meminfo, parent, size, itemsize, pointer, *shape, *byte strides`` as ints; an
    integer or float as its ctypes scalar; a bool as itself; a complex as two floats."""
    words = []
    for parameter, value in zip(parameters, args):
        words.extend(word(parameter, value))
    return words


def word(parameter: str, value) -> tuple:
    """The words of one argument (:func:`spell`)."""
    if parameter == _ARRAY:
        return (0, 0, value.size, value.dtype.itemsize, value.data.ptr, *value.shape,
                *value.strides)
    scalar = _SCALARS.get(parameter)
    if scalar is not None:
        return (scalar(value),)
    if parameter == "bool":
        return (value,)
    part = _COMPLEX[parameter]
    return (part(value.real), part(value.imag))


def parameter(numba_type) -> str | None:
    """How a parameter of ``numba_type`` is spelled (:func:`word`), or None: not by pyacc."""
    name = str(numba_type)
    if type(numba_type).__name__ == "Array":
        return _ARRAY
    return name if name in _SCALARS or name in _COMPLEX or name == "bool" else None


def comparable(words) -> tuple:
    """Words as ``(type, value)``: ``cuda.core.launch`` packs a word by its type, and ctypes
    objects compare by identity."""
    return tuple((type(w), w.value if isinstance(w, ctypes._SimpleCData) else w) for w in words)


# -- binaries ----------------------------------------------------------------------------------
def _path(dispatcher, found, capability: str) -> Path | None:
    """The binary's file of ``dispatcher`` for kinds ``found`` (module docstring), or None:
    its module is not in the kernel cache."""
    function = getattr(dispatcher, "py_func", None)
    module = Path(getattr(getattr(function, "__code__", None), "co_filename", "") or "<none>")
    try:
        folder = caches.cache_dir()
    except OSError:
        return None
    if module.parent != folder or not module.is_file():
        return None
    material = repr((module.name, function.__name__, found, cuda_compilers.chosen().label(),
                     capability, FORMAT, _settings()))
    digest = hashlib.sha256(material.encode()).hexdigest()[:24]
    return folder / FOLDER / f"{module.stem}.{function.__name__}.{digest}.cubin"


def _settings() -> tuple:
    """What else decides a cubin: Numba's settings from the environment (``NUMBA_OPT``,
    ``NUMBA_CUDA_DEBUGINFO``, ...) and the CUDA toolkit that compiled and linked it."""
    if not _toolkit:
        versions = []
        for distribution in _TOOLKIT:
            try:
                versions.append(importlib.metadata.version(distribution))
            except importlib.metadata.PackageNotFoundError:
                versions.append(None)
        _toolkit.append(tuple(versions))
    numba = tuple(sorted((name, value) for name, value in os.environ.items()
                         if name.startswith("NUMBA_")))
    return numba, _toolkit[0]


def _capability() -> str | None:
    """The current device's compute capability (CuPy's, e.g. ``"90"``), or None."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    try:
        return str(cupy.cuda.Device().compute_capability)
    except Exception:  # noqa: BLE001 - no device: no binaries
        return None


def _load_kernel(cubin: bytes, entry: str):
    """``(kernel, object code)``: the driver's kernel ``entry`` of ``cubin`` (``cuda.core``,
    as numba-cuda loads one), and the object code it launches from."""
    from cuda.core import ObjectCode  # here: only where a binary is loaded (a GPU)

    code = ObjectCode.from_cubin(cubin)
    return code.get_kernel(entry), code


def lookup(dispatcher, found):
    """For ``dispatcher``'s launch with argument kinds ``found`` (:func:`kinds`): its
    loaded :class:`Binary`; :data:`DUE` when it has no binary yet, or one that is refused
    or of other kernels, and one can be saved after this launch (:func:`save`); None
    otherwise. Asked once per process, kernel, kinds and compute capability (a process
    may drive GPUs of two capabilities: a cubin runs on its own)."""
    capability = _capability()
    memo = (dispatcher, found, capability)
    answer = _looked.get(memo, _lock)
    if answer is not _lock:
        return answer
    answer = _look(dispatcher, found, capability)
    with _lock:
        if len(_looked) >= KEPT:
            del _looked[next(iter(_looked))]
        _looked[memo] = answer
    return answer


def _look(dispatcher, found, capability):
    path = _path(dispatcher, found, capability) if capability is not None else None
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return DUE
    except OSError:
        return None
    content = caches.verified_bytes(data, path)
    header, _, cubin = (content or b"").partition(b"\0")
    try:
        fields = json.loads(header)
        if fields["format"] != FORMAT or fields["kinds"] != repr(found) or \
                fields["capability"] != capability:
            raise ValueError("the binary is of other kernels")
    except (ValueError, KeyError, TypeError):  # refused (named already), or foreign
        return DUE  # replaced after this launch
    try:
        binary = Binary(_load_kernel(cubin, fields["entry"]), tuple(fields["parameters"]), path)
    except Exception as why:  # noqa: BLE001 - a binary that cannot be loaded: compile
        _report(path, f"it was not loaded ({type(why).__name__}: {why}); the kernel is compiled")
        return None
    _report(path, "loaded: the kernel is not compiled in this process")
    _counts["loaded"] += 1
    return binary


def refuse(dispatcher, found, why: str) -> None:
    """Forget a loaded binary of ``dispatcher`` for kinds ``found`` that failed: this
    process compiles the kernel from now on (said through ``PYACC_INFO``)."""
    capability = _capability()
    with _lock:
        binary = _looked.get((dispatcher, found, capability))
        _looked[(dispatcher, found, capability)] = None
    if type(binary) is Binary:
        _report(binary.path, f"{why}; the kernel is compiled")


def save(dispatcher, kernel, found, args, words) -> None:
    """Write the binary of ``dispatcher``'s compiled ``kernel`` (numba-cuda's ``_Kernel``)
    for kinds ``found``, given the ``words`` numba-cuda's launch passed for ``args``; say
    through ``PYACC_INFO`` why not when it cannot be (module docstring). Never raises; once
    per process, kernel, kinds and capability (later lookups answer None)."""
    capability = _capability()
    with _lock:
        _looked[(dispatcher, found, capability)] = None
    path = _path(dispatcher, found, capability) if capability is not None else None
    if path is None or kernel is None:
        return
    try:
        parameters = tuple(map(parameter, kernel.argument_types))
        why = _unsavable(kernel, parameters, args, words, found)
        if why:
            _report(path, f"not saved: {why}")
            return
        header = json.dumps({"format": FORMAT, "kinds": repr(found), "capability": capability,
                             "entry": kernel._codelibrary._entry_name,
                             "parameters": parameters,
                             "types": [str(t) for t in kernel.argument_types],
                             "compiler": cuda_compilers.chosen().label()})
        content = header.encode() + b"\0" + bytes(kernel._codelibrary.get_cubin().code)
        caches.private_folder(path.parent)
        caches.replace_signed(path, content)
        _counts["saved"] += 1
    except Exception as why:  # noqa: BLE001 - the kernel ran; a binary is a saving only
        _report(path, f"not saved ({type(why).__name__}: {why})")


def _compiled_for(types, found) -> bool:
    """Whether numba-cuda's compiled ``types`` are exactly those of arguments of kinds
    ``found`` (its dispatcher also runs a kernel compiled for types the arguments convert
    to: an A-layout kernel for a C array, float64 for a float32 scalar)."""
    if len(types) != len(found):
        return False
    for numba_type, kind in zip(types, found):
        if type(kind) is tuple:
            dtype, ndim, layout = kind
            if type(numba_type).__name__ != "Array" or numba_type.ndim != ndim or \
                    numba_type.layout != layout or _dtype(numba_type.dtype) != dtype:
                return False
        elif _dtype(numba_type) != _SCALAR_KINDS.get(kind, kind):
            return False
    return True


def _dtype(numba_type) -> str | None:
    """The NumPy dtype string of a numeric numba type, or None."""
    try:
        return np.dtype(str(numba_type)).str
    except TypeError:
        return None


def _unsavable(kernel, parameters, args, words, found) -> str | None:
    """Why ``kernel`` cannot be saved, or None (module docstring)."""
    library = kernel._codelibrary
    if None in parameters:
        return "a parameter pyacc does not spell"
    if kernel.debug or kernel.cooperative or getattr(kernel, "extensions", ()) or \
            getattr(kernel, "launch_config_sensitive", False):
        return "a debug, cooperative, extended or launch-config sensitive kernel"
    if library._setup_functions or getattr(kernel, "shared_memory_carveout", None) is not None:
        return "its module is set up at load"
    if getattr(getattr(kernel, "target_context", None), "enable_nrt", False):
        return "it uses numba-cuda's runtime (NRT)"
    if not _compiled_for(kernel.argument_types, found):
        return (f"numba-cuda ran a kernel compiled for other argument types "
                f"({', '.join(map(str, kernel.argument_types))})")
    if comparable(spell(parameters, args)) != comparable(words):
        return "pyacc's words for its arguments are not numba-cuda's"
    return None


def _report(path, what) -> None:
    if info_enabled():
        log_info(f"GPU kernel binary {path.name}: {what}")
