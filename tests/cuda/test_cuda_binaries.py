"""GPU kernels compiled once per machine (``compiler.cuda_binaries``), against numba-cuda's
real launch path without a GPU.

numba-cuda's dispatcher, typing, compiler (PTX for an H100), linker (nvJitLink: a real
cubin) and marshaller run; the driver's leaves stand in (``numba_cuda_leaves``), and so
does the driver's load of a cubin, which records what it was given. "A new process" is a
new dispatcher over the same generated file with every table of this process emptied:
what a second process has.
"""
from __future__ import annotations

import logging
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pyacc.compiler import caches, cuda_binaries, cuda_compilers, cuda_kernels, cuda_plans, cuda_runtime

if cuda_runtime.SIMULATED:  # pragma: no cover - conftest keeps this file out
    pytest.skip("numba-cuda's launch path, not the simulator's", allow_module_level=True)
if not cuda_plans.enabled(cuda_compilers.COMPILERS["numba-cuda"]):
    pytest.skip("binaries are saved from numba-cuda 0.30's launch", allow_module_level=True)

from numba import cuda  # noqa: E402 - numba-cuda is installed (above)
from numba.cuda import dispatcher  # noqa: E402

from numba_cuda_leaves import DeviceArray, stand_in, watch  # noqa: E402

KERNELS = '''
from numba import cuda

def fill(a, n, x):
    i = cuda.grid(1)
    if i < n:
        a[i, 0] = x

def scale(a, b, factor, flag, z):
    i = cuda.grid(1)
    if i < a.shape[0] and flag:
        a[i] = b[i] * factor + z.real
'''


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """numba-cuda's launch path (``stand_in``), a kernel cache in ``tmp_path``, a device of
    compute capability 9.0 whose loads are recorded in ``machine.loads``."""
    watched = stand_in(monkeypatch)
    monkeypatch.setenv("PYACC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_binaries, "_looked", {})
    monkeypatch.setattr(cuda_binaries, "_capability", lambda: "90")
    watched.loads = []

    def load(cubin, entry):
        watched.loads.append((cubin, entry))
        return ("loaded", entry), "its object code"
    monkeypatch.setattr(cuda_binaries, "_load_kernel", load)
    return watched


def _module(name="kernels_0123456789abcdef01234567"):
    """The generated module's file in the kernel cache, run (a new process runs it again)."""
    path = caches.cache_dir() / f"{name}.py"
    if not path.exists():
        path.write_text(KERNELS)
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 - the test's text
    return namespace


def _kernel(name="fill", **options):
    return cuda.jit(**options)(_module()[name])


def _new_process(monkeypatch):
    """A second process's tables: nothing compiled, configured, prepared or looked up."""
    for table in (cuda_binaries._looked, cuda_plans._plans, cuda_plans._sightings,
                  cuda_runtime._configured):
        table.clear()


def _binaries():
    return sorted((caches.cache_dir() / cuda_binaries.FOLDER).glob("*.cubin"))


def _launches(start=0):
    return [(stream, repr(config), cuda_binaries.comparable(words))
            for stream, config, _, words in watch.launches[start:]]


def test_a_kernels_first_launch_saves_its_binary(machine):
    kernel, a = _kernel(), DeviceArray((100, 3))
    cuda_runtime.launch(kernel, 4, 32, (a, 100, 1.5))
    [binary] = _binaries()
    assert binary.name.startswith("kernels_0123456789abcdef01234567.fill.")
    content = caches.verified_bytes(binary.read_bytes(), binary)
    header, _, cubin = content.partition(b"\0")
    assert cubin.startswith(b"\x7fELF")  # nvJitLink's cubin for the device
    assert b'"parameters": ["array", "int64", "float64"]' in header
    cuda_runtime.launch(kernel, 4, 32, (a, 100, 2.5))
    assert len(_binaries()) == 1 and watch.calls == 2


def test_a_new_process_loads_the_kernel_and_never_compiles_it(machine, monkeypatch):
    a = DeviceArray((100, 3))
    cuda_runtime.launch(_kernel(), 4, 32, (a, 7, -2.0))
    _new_process(monkeypatch)
    kernel = _kernel()
    for _ in range(3):
        cuda_runtime.launch(kernel, 4, 32, (a, 7, -2.0))
    assert watch.calls == 1  # the first process's launch only
    assert not kernel.overloads  # never compiled, typed or loaded by numba-cuda
    [(cubin, entry)] = machine.loads
    assert cubin.startswith(b"\x7fELF") and "fill" in entry
    assert [handle for _, _, handle, _ in watch.launches[1:]] == [("loaded", entry)] * 3
    assert _launches(1) == [_launches(0)[0]] * 3  # numba-cuda's words, stream and config


@pytest.fixture
def scale_pool():
    return (DeviceArray((8,), ptr=0x1000), DeviceArray((8,), ptr=0x2000),
            DeviceArray((16,), ptr=0x3000), DeviceArray((8,), np.float32, ptr=0x4000))


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2),
                          st.sampled_from([1.5, -2.0, np.float64(0.25)]),
                          st.sampled_from([True, False]),
                          st.sampled_from([np.complex128(1j), np.complex128(2 - 1j)])),
                min_size=1, max_size=8))
def test_loaded_kernels_launch_exactly_what_numba_cuda_launches(machine, monkeypatch,
                                                                scale_pool, program):
    """Any launches of a kernel of arrays, a float, a bool and a complex: a process that
    loads the binaries launches exactly what numba-cuda's dispatcher launches."""
    recorded, watch.launches = {}, []
    for binary in _binaries():  # (the cache outlives an example)
        binary.unlink()
    for way in ("compiled", "loaded"):
        _new_process(monkeypatch)
        kernel, start = _kernel("scale"), len(watch.launches)
        for first, second, factor, flag, z in program:
            cuda_runtime.launch(kernel, 2, 8, (scale_pool[first], scale_pool[second],
                                               factor, flag, z))
        recorded[way] = _launches(start)
        assert bool(kernel.overloads) == (way == "compiled")
    assert recorded["loaded"] == recorded["compiled"]


def test_each_kind_of_arguments_has_its_binary(machine, monkeypatch):
    kernel = _kernel()
    cuda_runtime.launch(kernel, 1, 8, (DeviceArray((8, 2)), 8, 1.0))
    cuda_runtime.launch(kernel, 1, 8, (DeviceArray((8, 2), order="F"), 8, 1.0))
    cuda_runtime.launch(kernel, 1, 8, (DeviceArray((8, 2), np.float32), 8, np.float32(1.0)))
    cuda_runtime.launch(kernel, 1, 8, (DeviceArray((8, 4)).view_of_rows(3), 8, 1.0))  # C too
    strided = DeviceArray.__new__(DeviceArray)  # every other column: layout A
    strided._take(np.empty((8, 4))[:, ::2], SimpleNamespace(ptr=0x9000))
    cuda_runtime.launch(kernel, 1, 8, (strided, 8, 1.0))
    assert len(_binaries()) == 4


def test_a_binary_of_another_compute_capability_is_not_loaded(machine, monkeypatch):
    a = DeviceArray((10, 1))
    cuda_runtime.launch(_kernel(), 1, 8, (a, 10, 1.0))
    _new_process(monkeypatch)
    monkeypatch.setattr(cuda_binaries, "_capability", lambda: "80")
    kernel = _kernel()
    cuda_runtime.launch(kernel, 1, 8, (a, 10, 1.0))
    assert not machine.loads and kernel.overloads and len(_binaries()) == 2


def test_a_binary_of_another_compiler_version_is_not_loaded(machine, monkeypatch):
    a = DeviceArray((10, 1))
    cuda_runtime.launch(_kernel(), 1, 8, (a, 10, 1.0))
    _new_process(monkeypatch)
    compiler = cuda_compilers.chosen()
    monkeypatch.setattr(type(compiler), "label", lambda self: "numba-cuda 0.31.0")
    cuda_runtime.launch(_kernel(), 1, 8, (a, 10, 1.0))
    assert not machine.loads and len(_binaries()) == 2


def test_a_tampered_binary_is_refused_compiled_and_saved_again(machine, monkeypatch, caplog):
    a = DeviceArray((10, 1))
    cuda_runtime.launch(_kernel(), 1, 8, (a, 10, 1.0))
    [binary] = _binaries()
    data = bytearray(binary.read_bytes())
    data[-1] ^= 0xFF  # one bit of the cubin
    binary.write_bytes(bytes(data))
    _new_process(monkeypatch)
    kernel = _kernel()
    with warnings.catch_warnings(record=True), caplog.at_level(logging.CRITICAL, "pyacc.cache"):
        warnings.simplefilter("always")  # (the refusal is named once per process)
        cuda_runtime.launch(kernel, 1, 8, (a, 10, 1.0))
    assert not machine.loads and kernel.overloads  # compiled, not loaded
    assert caches.verified_bytes(binary.read_bytes(), binary) is not None  # saved anew


def test_no_binary_when_pyaccs_words_are_not_numba_cudas(machine, monkeypatch, capsys):
    monkeypatch.setenv("PYACC_INFO", "1")
    real = cuda_binaries.word
    monkeypatch.setattr(cuda_binaries, "word",
                        lambda kind, value: real(kind, value)[:-1] if kind == "array"
                        else real(kind, value))
    cuda_runtime.launch(_kernel(), 1, 8, (DeviceArray((10, 1)), 10, 1.0))
    assert not _binaries()
    assert "not saved: pyacc's words for its arguments are not numba-cuda's" in capsys.readouterr().err


def test_no_binary_of_a_debug_kernel(machine, monkeypatch, capsys):
    monkeypatch.setenv("PYACC_INFO", "1")
    monkeypatch.setattr(dispatcher._Kernel, "launch",
                        lambda self, args, griddim, blockdim, stream=0, sharedmem=0:
                        watch.launches.append(args))  # a debug launch reads an error word
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba-cuda's own warning of debug without opt
        cuda_runtime.launch(_kernel(debug=True, opt=False), 1, 8,
                            (DeviceArray((10, 1)), 10, 1.0))
    assert not _binaries() and "not saved: a debug" in capsys.readouterr().err


def test_no_binary_of_a_module_run_from_memory(machine):
    namespace = {}
    exec(compile(KERNELS, "<pyacc kernel in memory>", "exec"), namespace)  # noqa: S102
    cuda_runtime.launch(cuda.jit(namespace["fill"]), 1, 8, (DeviceArray((10, 1)), 10, 1.0))
    assert not _binaries()


def test_a_binary_that_does_not_load_means_a_compile(machine, monkeypatch, capsys):
    a = DeviceArray((10, 1))
    cuda_runtime.launch(_kernel(), 1, 8, (a, 10, 1.0))
    _new_process(monkeypatch)

    def fails(cubin, entry):
        raise RuntimeError("CUDA_ERROR_NO_BINARY_FOR_GPU")
    monkeypatch.setattr(cuda_binaries, "_load_kernel", fails)
    monkeypatch.setenv("PYACC_INFO", "1")
    kernel = _kernel()
    cuda_runtime.launch(kernel, 1, 8, (a, 10, 1.0))
    assert kernel.overloads and "CUDA_ERROR_NO_BINARY_FOR_GPU" in capsys.readouterr().err


@pytest.mark.parametrize("shape, strides, layout", [
    ((4, 3), (24, 8), "C"), ((4, 3), (8, 32), "F"), ((4, 3), (48, 8), "A"),
    ((1, 5), (999, 8), "C"), ((5, 1), (8, 999), "C"), ((0, 3), (0, 0), "C"), ((7,), (16,), "A")])
def test_kinds_name_the_layout_numpy_names(shape, strides, layout):
    found = ((0x1000, shape, strides, np.dtype(np.float64)), int, float, np.float32, bool)
    assert cuda_binaries.kinds(found) == (("<f8", len(shape), layout), "int", "float", "<f4",
                                          "bool")
    if 0 not in shape:
        view = np.lib.stride_tricks.as_strided(np.empty(64), shape, strides)
        flags = view.flags
        assert layout == ("C" if flags.c_contiguous else "F" if flags.f_contiguous else "A")


def test_binaries_live_in_the_kernel_cache(machine):
    cuda_runtime.launch(_kernel(), 1, 8, (DeviceArray((10, 1)), 10, 1.0))
    [binary] = _binaries()
    assert binary.parent == Path(caches.cache_dir()) / "gpu"
    assert binary.parent.stat().st_mode & 0o077 == 0


def saxpy(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


def test_a_generated_kernel_is_loaded_by_the_next_process(machine, monkeypatch):
    """The whole chain on pyacc's own code: the driver generated for a ``parallel_loop``,
    stored in the kernel cache, launches through numba-cuda once and saves its binary; a
    new process builds the same driver from the cache and launches the loaded kernel,
    with the words numba-cuda passed."""
    from numba.cuda import codegen

    from pyacc.compiler import analyze, get_kernel, kernel as kernels, parse_clauses

    # numba-cuda's own cache of the stored module keys its files by the device's
    monkeypatch.setattr(codegen.JITCUDACodegen, "magic_tuple", lambda self: ((13, 0), (9, 0)))
    x, y = DeviceArray((1000,), ptr=0x10000), DeviceArray((1000,), ptr=0x20000)
    launched, modules = {}, {}
    for process in ("first", "second"):
        _new_process(monkeypatch)
        monkeypatch.setattr(kernels, "_modules", {})
        info = analyze(saxpy, parse_clauses("parallel_loop"))
        info.kernels.clear()  # (analyze keeps one KernelInfo per function)
        driver = get_kernel(info, (2.0, x, y), target="cuda", device_type="cuda")
        start = len(watch.launches)
        driver(2.0, x, y)
        launched[process], modules[process] = _launches(start), driver.driver.__globals__
    assert watch.calls == 1 and len(machine.loads) == 1
    [binary] = _binaries()
    assert binary.name.startswith("saxpy_")
    assert launched["second"] == launched["first"] and len(launched["first"]) == 1
    # the second process never handed the kernel to the compiler (cuda_kernels)
    assert type(modules["first"]["_acc_cuda"]) is type(cuda)
    assert isinstance(modules["second"]["_acc_cuda"], cuda_kernels.Deferred)
    assert repr(modules["second"]["_acc_k0"]) == "<pyacc GPU kernel _acc_k0 (deferred)>"


def test_preparing_imports_the_loader_and_not_the_compiler():
    """``acc.init`` on cuda (``cuda_binaries.prepare``) imports cuda.core, what loading and
    launching a saved binary needs, and not the compiler, which such a process never
    needs (``cuda_kernels``)."""
    import subprocess
    import sys

    code = ("import sys; from pyacc.compiler import cuda_binaries; "
            "assert 'cuda.core' not in sys.modules; cuda_binaries.prepare(); "
            "print(sorted(m for m in ('cuda.core', 'numba.cuda', 'numba_cuda_mlir') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['cuda.core']"]


def test_a_process_with_gpus_of_two_capabilities_loads_each_its_own(machine, monkeypatch):
    """A cubin runs on the capability it was linked for: the lookup is remembered per
    capability, so the second GPU's launch compiles (and saves) its own."""
    a = DeviceArray((10, 1))
    cuda_runtime.launch(_kernel(), 1, 8, (a, 10, 1.0))  # saved for 9.0
    _new_process(monkeypatch)
    kernel = _kernel()
    cuda_runtime.launch(kernel, 1, 8, (a, 10, 1.0))  # loaded on the 9.0 GPU
    assert len(machine.loads) == 1 and not kernel.overloads
    monkeypatch.setattr(cuda_binaries, "_capability", lambda: "80")
    cuda_plans._plans.clear()  # (another device's stream: another configuration)
    cuda_runtime.launch(kernel, 1, 8, (a, 10, 1.0))
    assert len(machine.loads) == 1 and kernel.overloads and len(_binaries()) == 2


def test_a_binary_holds_only_a_kernel_compiled_for_exactly_its_kinds():
    """A dispatcher may run a kernel compiled for types the arguments convert to (an A
    layout for a C array, float64 for a float32 scalar): saved under the arguments'
    kinds, it would fix that choice for every later process; such a kernel is not saved."""
    from numba import types

    c2, a2 = types.Array(types.float64, 2, "C"), types.Array(types.float64, 2, "A")
    kinds = (("<f8", 2, "C"), "int", "<f4", "bool")
    exact = (c2, types.int64, types.float32, types.boolean)
    assert cuda_binaries._compiled_for(exact, kinds)
    assert not cuda_binaries._compiled_for((a2, *exact[1:]), kinds)
    assert not cuda_binaries._compiled_for((c2, types.int64, types.float64, types.boolean), kinds)
    assert not cuda_binaries._compiled_for((types.Array(types.float32, 2, "C"), *exact[1:]), kinds)
    assert not cuda_binaries._compiled_for(exact[:3], kinds)


def test_a_loaded_kernel_whose_launch_fails_is_compiled(machine, monkeypatch, capsys):
    a = DeviceArray((10, 1))
    cuda_runtime.launch(_kernel(), 1, 8, (a, 10, 1.0))
    _new_process(monkeypatch)
    monkeypatch.setenv("PYACC_INFO", "1")
    calls = []

    def launch(stream, config, handle, *words):
        calls.append(handle)
        if handle[0] == "loaded":
            raise RuntimeError("CUDA_ERROR_INVALID_HANDLE")
        watch.launches.append((stream, config, handle, words))
    monkeypatch.setattr(dispatcher, "launch", launch)
    kernel = _kernel()
    for _ in range(3):
        cuda_runtime.launch(kernel, 1, 8, (a, 10, 1.0))
    assert [handle[0] for handle in calls].count("loaded") == 1  # then numba-cuda's
    assert kernel.overloads and len(watch.launches) == 1 + 3
    assert "its launch failed (RuntimeError: CUDA_ERROR_INVALID_HANDLE)" in capsys.readouterr().err


def test_a_loaded_kernel_launches_from_c_the_bytes_numba_cuda_packs(machine, monkeypatch):
    """Where the driver's ``cuLaunchKernel`` is known (``cuda_plans.driver_launch``), a
    loaded kernel's plan launches from C (``compiler/_launch.c``): the loaded handle, the
    configuration's grid, block and stream, and the bytes ``cuda.core`` packs of the words
    numba-cuda passed in the first process; a new scalar value's bytes at its launch."""
    pytest.importorskip("pyacc.compiler._launch", reason="the C launch is not built")
    pytest.importorskip("cuda.core._kernel_arg_handler", reason="no cuda.core packing")
    from numba_cuda_leaves import STREAM, Driver, launched_bytes, packed

    a = DeviceArray((100, 3))
    cuda_runtime.launch(_kernel(), (4, 1), 32, (a, 7, -2.0))
    _new_process(monkeypatch)
    monkeypatch.setattr(cuda_binaries, "_load_kernel", lambda cubin, entry: (
        SimpleNamespace(handle=0xbeef), "its object code"))
    driver = Driver(11)
    monkeypatch.setattr(cuda_plans, "_driver", {"cuLaunchKernel": driver.address})
    kernel = _kernel()
    for x in (-2.0, -2.0, 0.5):
        cuda_runtime.launch(kernel, (4, 1), 32, (a, 7, x))
    assert len(watch.launches) == 1 and not kernel.overloads  # the first process's only
    first = watch.launches[0][3]
    for (handle, grid, block, shared, stream, slots, _), x in zip(driver.launches,
                                                                 (-2.0, -2.0, 0.5)):
        assert (handle, grid, block, shared, stream) == (0xbeef, (4, 1, 1), (32, 1, 1), 0,
                                                         STREAM.handle)
        words = first[:-1] + (cuda_binaries.word("float64", x)[0],)
        assert launched_bytes(words, slots) == packed(first[:-1] + (type(first[-1])(x),))
    assert len(driver.launches) == 3


def test_a_loaded_plan_is_kept_from_the_second_sight_of_its_facts(machine, monkeypatch):
    """Arrays made afresh for each launch (partials, scratch rows) push no plan out."""
    cuda_runtime.launch(_kernel(), 1, 8, (DeviceArray((10, 1)), 10, 1.0))
    _new_process(monkeypatch)
    kernel = _kernel()
    for pointer in range(1, 20):  # a new array each time: facts never seen twice
        cuda_runtime.launch(kernel, 1, 8, (DeviceArray((10, 1), ptr=pointer << 12), 10, 1.0))
    assert not cuda_plans._plans and len(machine.loads) == 1 and not kernel.overloads
    a = DeviceArray((10, 1), ptr=0x5000)
    for _ in range(3):
        cuda_runtime.launch(kernel, 1, 8, (a, 10, 1.0))
    assert [len(plans) for plans in cuda_plans._plans.values()] == [1]


def test_a_negative_zero_scalar_keeps_its_sign(machine, monkeypatch):
    kernel, a = _kernel(), DeviceArray((10, 1))
    for x in (0.0, 0.0, 0.0, -0.0, 0.0):  # the third through a plan
        cuda_runtime.launch(kernel, 1, 8, (a, 10, x))
    signs = [np.copysign(1.0, words[-1].value) for *_, words in watch.launches]
    assert signs == [1.0, 1.0, 1.0, -1.0, 1.0]


def test_numbas_settings_are_part_of_a_binarys_key(machine, monkeypatch):
    """``NUMBA_OPT``, ``NUMBA_CUDA_DEBUGINFO``, ... change what numba-cuda compiles: a
    binary saved under other settings is not loaded."""
    a = DeviceArray((10, 1))
    cuda_runtime.launch(_kernel(), 1, 8, (a, 10, 1.0))
    _new_process(monkeypatch)
    monkeypatch.setenv("NUMBA_OPT", "0")
    kernel = _kernel()
    cuda_runtime.launch(kernel, 1, 8, (a, 10, 1.0))
    assert not machine.loads and kernel.overloads and len(_binaries()) == 2
