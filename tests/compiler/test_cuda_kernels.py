"""A generated module's GPU kernels before the compiler has seen them
(``compiler.cuda_kernels``), against a stand-in compiler that records what it is asked."""
from __future__ import annotations

import threading
import time
import warnings
from types import SimpleNamespace

import pytest

from pyacc.compiler import caches, cuda_compilers, cuda_kernels

TEXT = '''
_acc_cuda = deferred("numba-cuda")

@_acc_cuda.jit(device=True, cache=True)
def twice(v):
    return 2 * v

@_acc_cuda.jit(cache=True)
def _acc_k0(a):
    a[0] = twice(_acc_cuda.grid(1))
'''


class Compiler:
    """A compiler's ``cuda`` module: ``jit`` makes a dispatcher record, ``[...]`` a
    configuration; ``refuse_cache``: the compiler finds no folder for its cache."""

    def __init__(self, refuse_cache=False):
        self.jitted, self.refuse_cache = [], refuse_cache

    def jit(self, cache=False, device=False):
        if cache and self.refuse_cache:
            raise RuntimeError("cannot cache function 'f': no locator available for file")

        def decorate(func):
            self.jitted.append((func.__name__, cache, device))
            return SimpleNamespace(py_func=func)
        return decorate


@pytest.fixture
def compiler(monkeypatch):
    loads = []
    made = Compiler()

    def load(which=None):
        loads.append(which.name)
        time.sleep(0.01)  # (threads realising together overlap here)
        return made
    monkeypatch.setattr(cuda_compilers, "load", load)
    monkeypatch.setattr(caches, "sign_dispatcher_cache", lambda dispatcher: True)
    made.loads = loads
    return made


def _module(name="kernels_test_module.py"):
    namespace = {"deferred": cuda_kernels.deferred}
    exec(compile(TEXT, name, "exec"), namespace)  # noqa: S102 - the test's text
    return namespace


def test_a_module_is_made_without_the_compiler(compiler):
    module = _module()
    assert compiler.loads == [] and compiler.jitted == []
    assert isinstance(module["_acc_cuda"], cuda_kernels.Deferred)
    assert repr(module["_acc_k0"]) == "<pyacc GPU kernel _acc_k0 (deferred)>"
    assert module["_acc_k0"].py_func.__name__ == "_acc_k0"  # (a saved binary's key)


def test_realising_makes_every_kernel_the_compilers_and_device_functions_by_name(compiler):
    module = _module()
    kernel = module["_acc_k0"]
    dispatcher = kernel.dispatcher()
    assert compiler.loads == ["numba-cuda"]
    assert sorted(compiler.jitted) == [("_acc_k0", True, False), ("twice", True, True)]
    assert module["_acc_cuda"] is compiler  # kernel bodies call cuda.grid through it
    assert module["twice"].py_func.__name__ == "twice"  # the compiler's, for kernels' calls
    assert module["_acc_k0"] is kernel and kernel.dispatcher() is dispatcher  # launches' key
    assert repr(kernel) == "<pyacc GPU kernel _acc_k0 (compiled)>"


def test_a_module_is_realised_once_by_threads_launching_together(compiler):
    module = _module()
    kernel = module["_acc_k0"]
    found = []
    threads = [threading.Thread(target=lambda: found.append(kernel.dispatcher()))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(set(map(id, found))) == 1 and compiler.loads == ["numba-cuda"]
    assert len(compiler.jitted) == 2


def test_where_the_compiler_cannot_cache_the_kernel_is_compiled_in_memory(monkeypatch):
    made = Compiler(refuse_cache=True)
    monkeypatch.setattr(cuda_compilers, "load", lambda which=None: made)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _module("kernels_uncacheable.py")["_acc_k0"].dispatcher()
    assert sorted(made.jitted) == [("_acc_k0", False, False), ("twice", False, True)]
    assert any("cannot cache kernels_uncacheable.py" in str(w.message) for w in caught)


def test_another_error_of_the_compiler_is_raised(monkeypatch):
    def broken(which=None):
        raise RuntimeError("numba-cuda cannot compile with this NumPy")
    monkeypatch.setattr(cuda_compilers, "load", broken)
    module = _module()
    with pytest.raises(RuntimeError, match="this NumPy"):
        module["_acc_k0"].dispatcher()
    assert isinstance(module["_acc_cuda"], cuda_kernels.Deferred)  # nothing half done
