"""A generated module's GPU kernels before the compiler has seen them.

Creating a numba-cuda (or numba-cuda-mlir) dispatcher builds the compiler's typing and
target contexts, and importing the compiler costs more again: work a process whose
kernels all load from their saved binaries (``cuda_binaries``) never needs. So a
generated cuda module (outside the simulator) binds its ``cuda`` name to
:func:`deferred` of its compiler, whose ``jit`` decorator makes a :class:`Kernel`: the
Python function and the decorator's options, nothing compiled or imported.

A kernel becomes the compiler's dispatcher when something asks for one
(:meth:`Kernel.dispatcher`: the launch configuration ``kernel[grid, block, stream]`` of a
launch that no saved binary serves). Then the whole module is *realised* at once
(:func:`realise`): its ``cuda`` name becomes the compiler's module (kernel bodies call
``cuda.grid``, ``cuda.atomic`` ... through it), and every deferred kernel and device
function its dispatcher, device functions also under their own names (kernels call them
by name, and the compiler types only its own dispatchers). A dispatcher whose disk cache
the module asked for has that cache signed (``caches.sign_dispatcher_cache``); where the
compiler finds no folder it can write for it, the kernel is compiled in memory (one
warning, as for a module run from memory).

Invariants: a module is realised once (under :data:`_lock`), before any of its kernels
is compiled; a :class:`Kernel` keeps its identity (launches are keyed by it) and its
``py_func`` (the saved binaries' key); the simulator's modules are never deferred (their
``cuda`` is the simulator's, swapped in while a kernel runs).
"""
from __future__ import annotations

import threading

from . import caches, cuda_compilers

__all__ = ["deferred", "Deferred", "Kernel", "realise"]

#: the name generated modules give the compiler's ``cuda`` (``cuda_arrays.CUDA``)
CUDA = "_acc_cuda"

_lock = threading.RLock()


class Deferred:
    """A generated module's ``cuda`` until the module is realised: ``jit`` only."""

    __slots__ = ("compiler",)

    def __init__(self, compiler: str):
        self.compiler = compiler  # a ``cuda_compilers.COMPILERS`` name

    def jit(self, device: bool = False, cache: bool = False):
        """The decorator: the function kept as a :class:`Kernel` (module docstring)."""
        return lambda func: Kernel(func, self.compiler, device, cache)


def deferred(compiler: str) -> Deferred:
    """The ``cuda`` of a generated module whose kernels ``compiler`` compiles."""
    return Deferred(compiler)


class Kernel:
    """A kernel (or device function) of a generated module, its dispatcher made when the
    module is realised (module docstring)."""

    __slots__ = ("py_func", "compiler", "device", "cache", "_dispatcher", "__weakref__")

    def __init__(self, py_func, compiler: str, device: bool, cache: bool):
        self.py_func, self.compiler, self.device, self.cache = py_func, compiler, device, cache
        self._dispatcher = None

    def dispatcher(self):
        """The compiler's dispatcher of this kernel (its module realised first)."""
        if self._dispatcher is None:
            namespace = self.py_func.__globals__
            realise(namespace, self.compiler)
            with _lock:
                if self._dispatcher is None:  # not in its module's namespace (moved out)
                    self._dispatcher = _jit(namespace[CUDA], self)
        return self._dispatcher

    def __getitem__(self, configuration):
        """``kernel[grid, block, stream]``: the dispatcher's launch configuration."""
        return self.dispatcher()[configuration]

    def __repr__(self):
        state = "compiled" if self._dispatcher is not None else "deferred"
        return f"<pyacc GPU kernel {self.py_func.__name__} ({state})>"


def realise(namespace: dict, compiler: str) -> None:
    """Make ``namespace`` (a generated module's) the compiler's: its ``cuda`` the
    compiler's module, each deferred kernel a dispatcher (module docstring)."""
    with _lock:
        if not isinstance(namespace.get(CUDA), Deferred):
            return  # realised by another kernel of the module
        module = cuda_compilers.load(cuda_compilers.COMPILERS[compiler])
        for name, value in list(namespace.items()):
            if type(value) is Kernel and value._dispatcher is None:
                value._dispatcher = _jit(module, value)
                if value.device:  # called by name from kernels: the compiler's own
                    namespace[name] = value._dispatcher
        namespace[CUDA] = module


def _jit(module, kernel: Kernel):
    """The compiler's dispatcher of ``kernel``, its disk cache signed; in memory where
    the compiler cannot cache it."""
    options = {"device": True} if kernel.device else {}
    if kernel.cache:
        try:
            dispatcher = module.jit(cache=True, **options)(kernel.py_func)
        except RuntimeError as error:  # no folder the compiler can write for its cache
            if "cannot cache" not in str(error):
                raise
            filename = kernel.py_func.__code__.co_filename
            caches.warn_once(filename, f"pyacc: the GPU compiler cannot cache {filename} "
                                       f"({error}); it is compiled in memory")
        else:
            caches.sign_dispatcher_cache(dispatcher)
            return dispatcher
    return module.jit(cache=False, **options)(kernel.py_func)
