"""Holding a real CUDA stream (``StreamHolds`` of mapping/devices/cuda_backend.py), the GPU side of
``pyacc.testing.hold_queue``: without a GPU, its kernel is compiled by NVRTC (the
compiler CuPy's ``RawKernel`` uses) and its bookkeeping runs against a stand-in for the
CuPy calls it makes; tests/gpu runs the race and order tests through it on a GPU."""

from __future__ import annotations

import contextlib
import ctypes
import types

import pytest

from pyacc.mapping.devices import cuda_backend


class _Event:
    def __init__(self):
        self.done = False
        self.stream = None

    def record(self, stream):
        self.stream = stream


class _CupyStandIn:
    """hostAlloc / hostGetDevicePointer / freeHost over ctypes buffers, a RawKernel that
    records its launches (the flag's value when enqueued), and events."""

    def __init__(self):
        self.buffers, self.freed, self.launches, self.events = {}, [], [], []
        stand_in = self

        def host_alloc(nbytes, flags):
            assert flags & 2, "the flag must be mapped for the device (cudaHostAllocMapped)"
            buffer = ctypes.create_string_buffer(b"\x7f" * nbytes)  # not zero: hold must clear it
            stand_in.buffers[ctypes.addressof(buffer)] = buffer
            return ctypes.addressof(buffer)

        def free_host(address):
            assert address in stand_in.buffers, "freed twice or never allocated"
            stand_in.freed.append(stand_in.buffers.pop(address))

        class Kernel:
            def __init__(self, source, name):
                assert name in source

            def __call__(self, grid, block, args, stream=None):
                address = int(args[0])
                stand_in.launches.append((grid, block, ctypes.c_int.from_address(address).value, stream))

        def event(disable_timing):
            stand_in.events.append(_Event())
            return stand_in.events[-1]

        runtime = types.SimpleNamespace(hostAlloc=host_alloc, freeHost=free_host)
        self.cuda = types.SimpleNamespace(runtime=runtime, Event=event)
        self.RawKernel = Kernel
        self.uint64 = int


def _holds():
    cupy = _CupyStandIn()
    return cupy, cuda_backend.StreamHolds(cupy, contextlib.nullcontext)  # (no device to make current)


def test_a_hold_enqueues_one_waiting_kernel_and_releases_it_when_the_block_ends():
    cupy, holds = _holds()
    stream = object()
    with holds.hold(stream) as held:
        assert held is stream
        (grid, block, flag_at_launch, on), = cupy.launches
        assert (grid, block, flag_at_launch, on) == ((1,), (1,), 0, stream)
        address, = cupy.buffers
        assert ctypes.c_int.from_address(address).value == 0
    assert ctypes.c_int.from_address(address).value == 1  # released: the kernel returns
    assert cupy.events[0].stream is stream and not cupy.freed


def test_a_flag_is_freed_only_once_its_kernel_has_returned():
    cupy, holds = _holds()
    with holds.hold("s1"):
        pass
    with holds.hold("s2"):  # the first kernel has not returned: its flag stays
        assert len(cupy.buffers) == 2 and not cupy.freed
    cupy.events[0].done = True
    with holds.hold("s3"):
        assert len(cupy.freed) == 1 and len(cupy.buffers) == 2


def test_an_exception_in_the_block_still_releases_the_stream():
    cupy, holds = _holds()
    with pytest.raises(RuntimeError, match="the test failed"):
        with holds.hold("s"):
            raise RuntimeError("the test failed")
    address, = cupy.buffers
    assert ctypes.c_int.from_address(address).value == 1


def test_a_hold_that_ran_out_before_its_block_ended_says_so():
    """A block that waits for its held queue would wait for ever on the fake; on a GPU the
    kernel gives up after ``HOLD_LIMIT_S`` and the block's end raises, naming why."""
    from pyacc.mapping import ExecutionError

    cupy, holds = _holds()
    with pytest.raises(ExecutionError, match=r"ran out after 20 s.*waited for the held queue"):
        with holds.hold("s"):
            cupy.events[0].done = True  # the kernel returned while the block still ran
    address, = cupy.buffers
    assert ctypes.c_int.from_address(address).value == 1


def test_a_launch_that_fails_frees_its_flag():
    cupy, holds = _holds()

    def refuse(*args, **kwargs):
        raise RuntimeError("cudaErrorLaunchFailure")

    holds._kernel = refuse
    with pytest.raises(RuntimeError, match="LaunchFailure"):
        with holds.hold("s"):
            pass
    assert not cupy.buffers and len(cupy.freed) == 1


def test_the_hold_kernel_compiles_for_the_gpus_pyacc_supports():
    """The source CuPy's RawKernel compiles on a GPU, compiled here by NVRTC (no GPU
    needed): its inline PTX (``%globaltimer``) and ``__nanosleep`` included."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    for arch in (b"compute_75", b"compute_90"):
        error, program = nvrtc.nvrtcCreateProgram(cuda_backend._HOLD_SOURCE.encode(), b"hold.cu", 0, [], [])
        assert error == nvrtc.nvrtcResult.NVRTC_SUCCESS
        error, = nvrtc.nvrtcCompileProgram(program, 1, [b"--gpu-architecture=" + arch])
        assert error == nvrtc.nvrtcResult.NVRTC_SUCCESS, arch
