"""Selection of the cuda device type without a GPU (API.md §1, §5, §12): the probe names
what is missing (no CuPy, CuPy failing to import, no kernel compiler, the simulator on,
zero GPUs; without NVML: no driver or GPU), it counts GPUs with NVML under
``CUDA_VISIBLE_DEVICES`` and asks the driver nothing (detecting GPUs creates no CUDA
context), the driver's checks run when a cuda device is created, the default type and
``not_host`` avoid an unusable cuda, ``acc.get_cuda_stream`` needs a cuda device, and
``PYACC_TESTING_FAKE_CUDA`` (testing only) needs Numba's CUDA simulator. Also: the
launcher's target for cuda, and device arrays (``__cuda_array_interface__``) reaching
the device's ``extent_of``.

The probe's result is cached in the registry: each test that fakes the probe resets
``_REGISTRY._cuda`` through ``monkeypatch``, which puts the real result back afterwards,
and starts with no runtime in the registry (a real GPU's, if any, comes back after the
test). Nothing here creates a real cuda runtime.
"""

import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest

from pyacc import compiler
import pyacc as acc
from pyacc.mapping import EmulatedDevice
from pyacc import _compute, _cuda_probe, _devices, _replay

no_gpu = pytest.mark.skipif(acc.get_num_devices("cuda") > 0, reason="a GPU is usable here")


# == fakes for the probe =======================================================================
class CUDARuntimeError(RuntimeError):
    """Stands in for ``cupy_backends.cuda.api.runtime.CUDARuntimeError``."""


class NvmlError(RuntimeError):
    """Stands in for ``cuda.bindings.nvml.NvmlError`` (and a missing libnvidia-ml)."""


def fake_cupy(count=None, error=None):
    """A module shaped like ``cupy`` whose ``cuda.runtime.getDeviceCount()`` returns
    ``count`` or raises ``error``."""

    def get_device_count():
        if error is not None:
            raise error
        return count

    runtime = types.SimpleNamespace(getDeviceCount=get_device_count)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime), __name__="cupy")


def untouchable_cupy():
    """A ``cupy`` whose device count (which initialises CUDA) must not be asked for."""

    def get_device_count():
        raise AssertionError("the probe called cupy.cuda.runtime.getDeviceCount(): cuInit")

    runtime = types.SimpleNamespace(getDeviceCount=get_device_count)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime), __name__="cupy")


def fake_nvml(count=0, uuids=(), error=None, calls=None):
    """A module shaped like ``cuda.bindings.nvml``: ``count`` GPUs with ``uuids``;
    ``init_v2`` raises ``error``; ``calls`` records the calls."""
    calls = [] if calls is None else calls

    def init_v2():
        calls.append("init_v2")
        if error is not None:
            raise error

    def device_get_count_v2():
        calls.append("device_get_count_v2")
        return count

    return types.SimpleNamespace(
        init_v2=init_v2, device_get_count_v2=device_get_count_v2,
        shutdown=lambda: calls.append("shutdown"),
        device_get_handle_by_index_v2=lambda index: ("handle", index),
        device_get_uuid=lambda handle: uuids[handle[1]])


#: the kernel compiler the probe is told was chosen (``cuda_compilers.choice()``)
STUB_COMPILER = types.SimpleNamespace(name="numba-cuda", distribution="numba-cuda")


@pytest.fixture
def probe(monkeypatch):
    """Fake the pieces the probe looks at; returns a setter ``probe(cupy=..., nvml=...)``.

    ``cupy``: a module, or an exception that importing it raises. ``compiler``: True (one
    is chosen) or the reason ``cuda_compilers.choice()`` gives for none. ``simulator``:
    NUMBA_ENABLE_CUDASIM. ``numba_gpu``: True (the compiler's ``is_available()``), its
    ``cuda_error()`` text, or an exception loading it raises. ``nvml``: a module (see
    ``fake_nvml``), a GPU count, or None (not installed: the probe falls back to CuPy's
    count). The registry forgets its cached probe and its runtimes, and the process its
    fork state, until the test ends.
    """
    monkeypatch.setattr(_devices._REGISTRY, "_cuda", None)
    monkeypatch.setattr(_devices._REGISTRY, "_runtimes", {})
    monkeypatch.setattr(_devices._Initial, "values", None)
    monkeypatch.setattr(_cuda_probe._Fork, "cause", None)  # CUDA not initialised yet
    for name in ("PYACC_TESTING_FAKE_CUDA", "PYACC_OFFLOAD", "ACC_DEVICE_TYPE",
                 "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)

    def configure(*, cupy, compiler=True, simulator=False, numba_gpu=True, nvml=None):
        if isinstance(nvml, int):
            nvml = fake_nvml(count=nvml)

        def import_module(name):
            modules = {"cupy": cupy, "cuda.bindings.nvml": nvml}
            assert name in modules, f"unexpected import of {name}"
            module = modules[name]
            if module is None:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            if isinstance(module, BaseException):
                raise module
            return module

        def load_compiler(chosen):
            assert chosen is STUB_COMPILER
            if isinstance(numba_gpu, BaseException):
                raise numba_gpu
            return types.SimpleNamespace(
                is_available=lambda: numba_gpu is True,
                cuda_error=lambda: None if numba_gpu is True else numba_gpu)

        def find_spec(name):
            assert name == "numba.cuda", f"unexpected find_spec({name!r})"
            return object()

        choice = (STUB_COMPILER, None, "stub") if compiler is True else (None, compiler, "stub")
        monkeypatch.setattr(_cuda_probe, "_import_module", import_module)
        monkeypatch.setattr(_cuda_probe, "_find_spec", find_spec)
        monkeypatch.setattr(_cuda_probe, "_simulated", lambda: simulator)
        monkeypatch.setattr(_cuda_probe, "_compiler_choice", lambda: choice)
        monkeypatch.setattr(_cuda_probe, "_load_compiler", load_compiler)
        monkeypatch.setattr(_devices._REGISTRY, "_cuda", None)

    yield configure
    _devices._REGISTRY._cuda = None  # monkeypatch restores the real probe's result


def assert_unavailable(*fragments):
    """cuda has no device, and selecting it raises an error naming every fragment."""
    assert acc.get_num_devices("cuda") == 0
    assert acc.get_num_devices("nvidia") == 0
    assert acc.get_device_num("cuda") == -1
    with pytest.raises(acc.DeviceTypeUnavailableError) as raised:
        acc.set_device_type("cuda")
    message = str(raised.value)
    assert raised.value.code == "device_type_unavailable"
    assert "device type 'cuda' is not available" in message
    for fragment in fragments:
        assert fragment in message, message
    reason = _devices.unavailable_reason("cuda")
    assert reason and reason in message
    return message


# == without a GPU, as it is ===================================================================
@no_gpu
def test_no_cuda_device_without_a_gpu(host_device):
    assert acc.get_num_devices("cuda") == 0
    assert acc.get_num_devices("NVIDIA") == 0
    with pytest.raises(acc.DeviceTypeUnavailableError) as raised:
        acc.set_device_type("cuda")
    assert _devices.unavailable_reason("cuda") in str(raised.value)
    assert acc.get_device_type() == "host"


@no_gpu
def test_default_type_is_host_and_not_host_is_emulated_without_a_gpu():
    assert _devices.default_type() == "host"
    assert _devices.canonical_type("default") == "host"
    assert _devices.canonical_type("not_host") == "emulated"


def test_default_device_type_of_a_new_process_without_a_gpu():
    code = "import pyacc as acc; print(acc.get_device_type(), acc.get_num_devices('cuda'))"
    out = run_python(code, ACC_DEVICE_TYPE="", PYACC_TESTING_FAKE_CUDA="",
                     NUMBA_ENABLE_CUDASIM="")
    if out.stdout.split()[-1] != "0":
        pytest.skip("a GPU is usable here")
    assert out.stdout.split() == ["host", "0"]


# == each missing piece, named ==================================================================
def test_cupy_not_installed(probe, host_device):
    probe(cupy=ModuleNotFoundError("No module named 'cupy'", name="cupy"))
    assert_unavailable("CuPy is not installed", "pip install 'pyacc[cuda]'")


def test_cupy_failing_to_import_gives_its_message(probe, host_device):
    probe(cupy=ImportError("libcudart.so.12: cannot open shared object file",
                           name="cupy_backends.cuda.api.runtime"))
    assert_unavailable("CuPy failed to import", "libcudart.so.12: cannot open shared object file")


def test_cupy_raising_something_else_at_import(probe, host_device):
    probe(cupy=RuntimeError("CUDA path could not be detected"))
    assert_unavailable("CuPy failed to import", "RuntimeError", "CUDA path could not be detected")


def test_no_kernel_compiler_gives_the_compilers_reason(probe, host_device):
    reason = ("no CUDA kernel compiler is installed (numba-cuda-mlir or numba-cuda): "
              "pip install 'pyacc[cuda]'")
    probe(cupy=fake_cupy(count=1), compiler=reason, nvml=1)
    assert_unavailable(reason)


def test_no_cuda_driver_without_nvml(probe, host_device):
    """Without NVML the probe falls back to CuPy's count, and names the driver's error."""
    error = CUDARuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient "
                             "for CUDA runtime version")
    probe(cupy=fake_cupy(error=error), nvml=None)
    assert_unavailable("no usable CUDA driver or GPU", "CUDARuntimeError",
                       "cudaErrorInsufficientDriver")


def test_no_gpu_behind_the_driver_without_nvml(probe, host_device):
    probe(cupy=fake_cupy(error=CUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")))
    assert_unavailable("no usable CUDA driver or GPU", "cudaErrorNoDevice")


def test_zero_gpus_without_nvml(probe, host_device):
    probe(cupy=fake_cupy(count=0))
    assert_unavailable("0 GPUs", "CUDA_VISIBLE_DEVICES")


def test_zero_gpus_counted_by_nvml(probe, host_device):
    probe(cupy=untouchable_cupy(), nvml=0)
    assert_unavailable("NVML reports 0 GPUs", "CUDA_VISIBLE_DEVICES")


def test_a_failing_nvml_falls_back_to_the_cuda_runtime(probe, host_device):
    """No libnvidia-ml.so.1 (or an NVML error): CuPy's count answers instead."""
    probe(cupy=fake_cupy(count=2), nvml=fake_nvml(error=NvmlError('"nvml" ... not found')))
    assert acc.get_num_devices("cuda") == 2


def test_the_simulator_cannot_drive_a_real_gpu(probe, host_device):
    probe(cupy=fake_cupy(count=1), simulator=True, nvml=1)
    assert_unavailable("NUMBA_ENABLE_CUDASIM=1", "simulator", "PYACC_TESTING_FAKE_CUDA")


# == detecting GPUs creates no CUDA context (API.md §12) =========================================
def test_detecting_gpus_asks_nvml_and_never_the_cuda_driver(probe, monkeypatch):
    """The probe counts with NVML (init, count, shutdown) and never calls what initialises
    CUDA: CuPy's device count or the compiler's ``is_available()`` (both raise here)."""
    calls = []
    probe(cupy=untouchable_cupy(), nvml=fake_nvml(count=2, calls=calls),
          numba_gpu=AssertionError("the probe loaded the compiler: is_available() inits CUDA"))
    assert acc.get_num_devices("cuda") == 2
    assert _devices.unavailable_reason("cuda") is None
    assert _devices.default_type() == "cuda" and _devices.canonical_type("not_host") == "cuda"
    assert calls == ["init_v2", "device_get_count_v2", "shutdown"]
    assert _cuda_probe._Fork.cause is None  # a child forked now may use the GPU


@pytest.mark.parametrize("visible, count", [
    (None, 4), ("", 0), ("1,0", 2), ("2", 1), ("0,7,1", 1), ("x", 0), ("-1,0", 0),
    ("0,0", 0), (" 1 , 3", 2), ("GPU-bb", 1), ("GPU-a,GPU-bb", 2), ("GPU-zz,GPU-a", 0),
    ("GPU-b", 0)])
def test_nvml_counts_the_gpus_cuda_visible_devices_leaves(probe, monkeypatch, visible, count):
    """CUDA's reading: ordinals (or unique GPU UUID prefixes) up to the first that names no
    GPU; a GPU named twice hides all of them."""
    uuids = ("GPU-aaaa", "GPU-bbbb", "GPU-bccc", "GPU-dddd")
    probe(cupy=untouchable_cupy(), nvml=fake_nvml(count=4, uuids=uuids))
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert acc.get_num_devices("cuda") == count


def test_mig_instances_are_counted_by_the_cuda_runtime(probe, monkeypatch):
    """NVML does not count MIG instances: the fallback (which initialises CUDA, so a child
    forked later is told why it cannot use the GPU)."""
    probe(cupy=fake_cupy(count=1), nvml=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1234")
    assert acc.get_num_devices("cuda") == 1
    assert "counted the GPUs with the CUDA runtime" in _cuda_probe._Fork.cause
    assert "MIG" in _cuda_probe._Fork.cause


# == the driver's checks, when a cuda device is created ==========================================
def test_no_cuda_driver_behind_nvml_is_reported_at_creation(probe, monkeypatch):
    """NVML counts a GPU, but CuPy (CUDA) cannot use it: creating the device raises the
    driver's reason, and cuda has no device from then on."""
    broken = fake_cupy(error=CUDARuntimeError("cudaErrorInsufficientDriver: driver too old"))
    probe(cupy=broken, nvml=1)
    monkeypatch.setitem(sys.modules, "cupy", broken)  # what CupyBackend imports
    assert acc.get_num_devices("cuda") == 1
    with pytest.raises(acc.DeviceTypeUnavailableError, match="cudaErrorInsufficientDriver") as raised:
        _devices.runtime_of("cuda", 0)
    assert "device type 'cuda' is not available: no usable CUDA driver or GPU" in str(raised.value)
    assert acc.get_num_devices("cuda") == 0
    assert "cudaErrorInsufficientDriver" in _devices.unavailable_reason("cuda")
    assert _devices.default_type() == "host"


def test_numba_cuda_unable_to_use_the_gpu(probe, monkeypatch, host_device):
    stub_modules(monkeypatch)
    probe(cupy=fake_cupy(count=1), numba_gpu="CUDA driver library cannot be found", nvml=1)
    with pytest.raises(acc.DeviceTypeUnavailableError, match="numba-cuda cannot use the GPU"):
        _devices.runtime_of("cuda", 0)
    assert_unavailable("numba-cuda cannot use the GPU", "CUDA driver library cannot be found")


def test_numba_cuda_failing_to_import(probe, monkeypatch, host_device):
    stub_modules(monkeypatch)
    probe(cupy=fake_cupy(count=1), numba_gpu=ImportError("NVIDIA CUDA Python bindings not found"),
          nvml=1)
    with pytest.raises(acc.DeviceTypeUnavailableError, match="numba-cuda cannot use the GPU"):
        _devices.runtime_of("cuda", 0)
    assert_unavailable("numba-cuda cannot use the GPU", "NVIDIA CUDA Python bindings not found")


def test_without_cuda_the_defaults_avoid_it(probe, host_device):
    probe(cupy=fake_cupy(count=0))
    assert _devices.default_type() == "host"
    assert _devices.canonical_type("not_host") == "emulated"
    assert in_new_thread(acc.get_device_type) == "host"  # a new thread's first use


def test_mandatory_without_a_gpu_names_the_missing_piece(probe, monkeypatch, host_device):
    probe(cupy=fake_cupy(count=0))
    monkeypatch.setenv("PYACC_OFFLOAD", "mandatory")
    with pytest.raises(acc.DeviceTypeUnavailableError, match="0 GPUs"):
        acc.set_device_type("cuda")


def test_a_usable_gpu_is_counted_and_becomes_the_default(probe):
    probe(cupy=untouchable_cupy(), nvml=3)
    assert _devices.unavailable_reason("cuda") is None
    assert acc.get_num_devices("cuda") == acc.get_num_devices("nvidia") == 3
    assert _devices.default_type() == "cuda"
    assert _devices.canonical_type("not_host") == "cuda"
    # "default" is the thread's current type (OpenACC 3.3 §4.1): a new thread's, here cuda
    assert in_new_thread(lambda: _devices.canonical_type("default")) == "cuda"


def test_the_probe_runs_once(probe, monkeypatch):
    probe(cupy=untouchable_cupy(), nvml=1)
    calls = []
    real = _cuda_probe.probe
    monkeypatch.setattr(_cuda_probe, "probe", lambda: calls.append(1) or real())
    for _ in range(3):
        acc.get_num_devices("cuda")
        _devices.unavailable_reason("cuda")
    assert calls == [1]


# == the registry builds CudaDevice(number, backend=...) ======================================
class _StubCudaDevice(EmulatedDevice):
    """An emulated device that calls itself cuda and has streams: enough to select it and
    to ask for its streams without CuPy."""

    type_name = "cuda"

    def __init__(self, number, backend=None):
        super().__init__(number)
        self.backend = backend
        self.sync_queue.stream = ("stream", None)

    def _new_queue(self, async_value):
        queue = super()._new_queue(async_value)
        queue.stream = ("stream", async_value)
        return queue


def stub_modules(monkeypatch):
    """``mapping.devices.cuda`` and ``mapping.devices.cuda_fake`` replaced by stubs; returns the fake
    backend class."""

    class FakeCudaBackend:
        pass

    monkeypatch.setitem(sys.modules, "pyacc.mapping.devices.cuda",
                        types.SimpleNamespace(CudaDevice=_StubCudaDevice))
    monkeypatch.setitem(sys.modules, "pyacc.mapping.devices.cuda_fake",
                        types.SimpleNamespace(FakeCudaBackend=FakeCudaBackend))
    return FakeCudaBackend


def test_the_registry_builds_cuda_devices_with_the_real_backend(probe, monkeypatch):
    stub_modules(monkeypatch)
    probe(cupy=untouchable_cupy(), nvml=2)
    runtime = _devices.runtime_of("cuda", 1)
    assert isinstance(runtime.device, _StubCudaDevice)
    assert runtime.device.number == 1 and runtime.device.backend is None
    assert runtime.namer is acc._names.variable_name
    assert _devices.runtime_of("cuda", 1) is runtime  # one runtime per device
    with pytest.raises(acc.DeviceUnavailableError, match="numbers 0..1"):
        _devices.runtime_of("cuda", 2)


def test_the_fake_switch_builds_a_fake_backend(probe, monkeypatch):
    fake_backend = stub_modules(monkeypatch)
    probe(cupy=ModuleNotFoundError("No module named 'cupy'", name="cupy"), simulator=True)
    monkeypatch.setenv("PYACC_TESTING_FAKE_CUDA", "1")
    assert acc.get_num_devices("cuda") == 1
    assert _devices.default_type() == "cuda"
    runtime = _devices.runtime_of("cuda", 0)
    assert isinstance(runtime.device.backend, fake_backend)


def test_the_fake_switch_without_the_simulator_is_a_clear_error(probe, monkeypatch, host_device):
    probe(cupy=fake_cupy(count=1), simulator=False)
    monkeypatch.setenv("PYACC_TESTING_FAKE_CUDA", "1")
    message = assert_unavailable("PYACC_TESTING_FAKE_CUDA=1 needs", "NUMBA_ENABLE_CUDASIM=1")
    assert "simulator" in message
    assert _devices.default_type() == "host"


def test_the_fake_switch_without_the_simulator_in_a_new_process():
    code = textwrap.dedent("""
        import pyacc as acc
        print(acc.get_device_type(), acc.get_num_devices("cuda"))
        try:
            acc.set_device_type("cuda")
        except acc.DeviceTypeUnavailableError as error:
            print(error)
    """)
    result = run_python(code, PYACC_TESTING_FAKE_CUDA="1", NUMBA_ENABLE_CUDASIM="",
                        ACC_DEVICE_TYPE="")
    first, message = result.stdout.splitlines()[:2]
    assert first == "host 0"
    assert "PYACC_TESTING_FAKE_CUDA=1 needs NUMBA_ENABLE_CUDASIM=1" in message


def _module_exists(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.mark.skipif(not (_module_exists("pyacc.mapping.devices.cuda") and _module_exists("pyacc.mapping.devices.cuda_fake")),
                    reason="mapping/devices/cuda.py or mapping/devices/cuda_fake.py is not there yet")
def test_the_fake_switch_runs_pyacc_on_cuda_in_the_simulator(tmp_path):
    code = textwrap.dedent("""
        import numpy as np
        import pyacc as acc

        @acc.parallel_loop
        def saxpy(a, x, y):
            for i in range(x.shape[0]):
                y[i] = a * x[i] + y[i]

        print(acc.get_device_type(), acc.get_num_devices("cuda"))
        x, y = np.arange(64.0), np.ones(64)
        with acc.data(copyin=[x], copy=[y]):
            saxpy(2.0, x, y)
            stream = acc.get_cuda_stream(1)
        assert np.array_equal(y, 2.0 * np.arange(64.0) + 1.0), y
        stats = acc.stats()
        print(stats["h2d_count"], stats["d2h_count"], stats["launch_count"], stream is not None)
    """)
    script = tmp_path / "fake_cuda_saxpy.py"  # kernels must live in a file
    script.write_text(code)
    result = run_python(code, script=script, PYACC_TESTING_FAKE_CUDA="1",
                        NUMBA_ENABLE_CUDASIM="1", ACC_DEVICE_TYPE="", PYACC_OFFLOAD="",
                        PYACC_CACHE_DIR=str(tmp_path / "cache"))
    assert result.stdout.split() == ["cuda", "1", "2", "1", "1", "True"]


# == acc.get_cuda_stream =======================================================================
@pytest.mark.parametrize("device_type", ["host", "emulated"])
def test_get_cuda_stream_needs_a_cuda_device(device_type):
    acc.set_device_type(device_type)
    try:
        for q in (1, acc.async_noval, acc.async_sync):
            with pytest.raises(acc.DeviceTypeUnavailableError) as raised:
                acc.get_cuda_stream(q)
            message = str(raised.value)
            assert f"the current device is {device_type} device 0" in message
            assert "acc.set_device_type('cuda')" in message
        from pyacc.openacc import acc_get_cuda_stream

        assert acc_get_cuda_stream is acc.get_cuda_stream
        with pytest.raises(acc.InvalidAsyncError):
            acc.get_cuda_stream(-7)
    finally:
        acc.set_device_type("host")


def test_get_cuda_stream_resolves_async_values(probe, monkeypatch):
    stub_modules(monkeypatch)
    probe(cupy=untouchable_cupy(), nvml=1)

    def on_cuda():
        acc.set_device_type("cuda")
        acc.set_default_async(4)
        try:
            return [acc.get_cuda_stream(q) for q in (1, 0, acc.async_noval, acc.async_sync, None)]
        finally:
            acc.set_device_type("host")

    streams = in_new_thread(on_cuda)
    assert streams == [("stream", 1), ("stream", 0), ("stream", 4), ("stream", None), ("stream", None)]
    _devices._REGISTRY._runtimes[("cuda", 0)].device.synchronize()


# == the launcher's target ======================================================================
@acc.parallel_loop
def _double(x):
    for i in range(x.shape[0]):
        x[i] = 2.0 * x[i]


@pytest.mark.parametrize("device_type, disable_jit, target", [
    ("cuda", "", "cuda"), ("cuda", "1", "python"),
    ("emulated", "", "cpu"), ("host", "", "cpu"), ("emulated", "1", "python"),
])
def test_kernel_target_follows_the_device_type(monkeypatch, device_type, disable_jit, target):
    seen = []
    monkeypatch.setattr(compiler.kernel, "get_kernel",
                        lambda info, args, target, device_type, clauses: seen.append((target, device_type)) or "k")
    monkeypatch.setenv("PYACC_DISABLE_JIT", disable_jit)
    assert compiler.kernel_for(_double.info, [np.zeros(3)], device_type) == "k"
    assert seen == [(target, device_type)]


# == device arrays reach the device's extent_of ================================================
class CudaArrayLike:
    """Any object with ``__cuda_array_interface__`` (here over host memory, indexable so
    that the kernel can run as plain Python)."""

    def __init__(self, array):
        self.array = array
        self.shape, self.dtype, self.ndim = array.shape, array.dtype, array.ndim
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str, "strides": None,
            "data": (array.ctypes.data, False), "version": 3}

    def __getitem__(self, index):
        return self.array[index]


@pytest.fixture
def extents(emulated, monkeypatch):
    """The emulated device's ``extent_of`` accepts CudaArrayLike objects and records them."""
    device = _devices.current_runtime().device
    seen = []
    real = device.extent_of

    def extent_of(device_array):
        seen.append(device_array)
        if isinstance(device_array, CudaArrayLike):
            return (0, 0, 0)
        return real(device_array)

    monkeypatch.setattr(device, "extent_of", extent_of)
    return seen


@acc.parallel_loop(deviceptr="d")
def _gather(d, out):
    for i in range(out.shape[0]):
        out[i] = d[i] + 1.0


@acc.parallel_loop
def _gather_implicit(d, out):
    for i in range(out.shape[0]):
        out[i] = d[i] + 1.0


@acc.parallel_loop(copyin="d")
def _gather_copyin(d, out):
    for i in range(out.shape[0]):
        out[i] = d[i] + 1.0


@pytest.mark.parametrize("region", [_gather, _gather_implicit])
def test_compute_regions_pass_device_arrays_to_the_kernel(extents, monkeypatch, region):
    monkeypatch.setenv("PYACC_DISABLE_JIT", "1")  # the kernel runs as Python over the stand-in
    d, out = CudaArrayLike(np.arange(4.0)), np.zeros(4)
    region(d, out)
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0, 4.0])
    assert d in extents  # the device checked it was its memory


def test_a_data_clause_refuses_a_device_array(extents, monkeypatch):
    monkeypatch.setenv("PYACC_DISABLE_JIT", "1")
    with pytest.raises(acc.InvalidArgumentError, match="deviceptr"):
        _gather_copyin(CudaArrayLike(np.arange(4.0)), np.zeros(4))


def test_a_foreign_device_array_is_refused_by_the_device(emulated, monkeypatch):
    monkeypatch.setenv("PYACC_DISABLE_JIT", "1")
    with pytest.raises(acc.InvalidArgumentError, match="not a device array of emulated device"):
        _gather(CudaArrayLike(np.arange(4.0)), np.zeros(4))


def test_device_arrays_of_other_dtypes_get_their_own_kernel():
    one = CudaArrayLike(np.zeros(3))
    two = CudaArrayLike(np.zeros(3, np.float32))
    three = CudaArrayLike(np.zeros((3, 3)))
    kinds = {compiler.argument_kind(x) for x in (one, two, three, CudaArrayLike(np.ones(5)))}
    assert len(kinds) == 3
    assert compiler.argument_kind(1.5) is float and compiler.argument_kind(np.float32(1)) is np.float32


def test_routines_hand_device_arrays_to_extent_of(extents):
    d = CudaArrayLike(np.zeros(4))
    with acc.data(deviceptr=[d]):
        pass
    for call in (lambda: acc.memcpy_to_device(d, np.ones(4)),
                 lambda: acc.memcpy_from_device(np.ones(4), d),
                 lambda: acc.memcpy_device(d, d),
                 lambda: acc.map_data(np.ones(4), d),
                 lambda: acc.hostptr(d),
                 lambda: acc.free(d)):
        before = len(extents)
        try:
            call()
        except (acc.AccError, AttributeError, TypeError):
            pass  # what follows extent_of is the device's business (stand-in memory)
        assert len(extents) > before and extents[before] is d
    assert extents[0] is d


# == helpers ===================================================================================
def in_new_thread(function):
    outcome = {}

    def body():
        try:
            outcome["value"] = function()
        except BaseException as error:  # handed back to the test
            outcome["value"] = error

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if isinstance(outcome["value"], BaseException):
        raise outcome["value"]
    return outcome["value"]


def run_python(code, script=None, **env):
    """Run ``code`` (or the file ``script``) in a new interpreter, with ``env`` added to
    the environment (an empty value removes the variable)."""
    import os

    environment = dict(os.environ)
    for name, value in env.items():
        if value:
            environment[name] = value
        else:
            environment.pop(name, None)
    command = [sys.executable, str(script)] if script else [sys.executable, "-c", code]
    result = subprocess.run(command, capture_output=True, text=True, env=environment,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result
