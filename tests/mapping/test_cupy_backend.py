"""``CupyBackend`` (mapping/devices/cuda_backend.py) over a stand-in CuPy module that keeps
what the CUDA runtime requires of the calling thread: a query of a pointer
(``cudaPointerGetAttributes``) fails without a current context (cupy#3991; CuPy makes its
device's context current first, cupy PR #4085). Stricter than the driver, the stand-in
also refuses the query of one GPU's memory with another GPU's context current. On a GPU
only a thread that has not touched CUDA yet shows it (``tests/gpu``)."""

from __future__ import annotations

import sys
import threading
from types import SimpleNamespace

import pytest

from pyacc.mapping.devices.cuda_backend import CupyBackend

_DEVICE_MEMORY = 2  # cudaMemoryTypeDevice
#: where each stand-in GPU's memory begins (64 GiB apart)
_BASE = {0: 0x7F00_0000_0000, 1: 0x7F10_0000_0000}


class _CUDARuntimeError(RuntimeError):
    pass


class _Runtime:
    """``cupy.cuda.runtime`` as far as the backend's pointer query goes."""

    CUDARuntimeError = _CUDARuntimeError

    def __init__(self, current):
        self._current = current

    def getDeviceCount(self):  # noqa: N802 - CuPy's spelling
        return len(_BASE)

    def pointerGetAttributes(self, address):  # noqa: N802 - CuPy's spelling
        device = getattr(self._current, "device", None)
        if device is None:
            raise _CUDARuntimeError("cudaErrorInvalidValue: no current context")
        owner = next(d for d, base in sorted(_BASE.items(), reverse=True) if address >= base)
        if owner != device:
            raise _CUDARuntimeError(f"cudaErrorInvalidValue: memory of GPU {owner} queried "
                                    f"with GPU {device}'s context current")
        return SimpleNamespace(type=_DEVICE_MEMORY, device=owner)


class _Device:
    """``cupy.cuda.Device(n)``: its with-block makes GPU ``n``'s context current."""

    def __init__(self, current, number):
        self._current, self.number = current, number

    def __enter__(self):
        self._before = getattr(self._current, "device", None)
        self._current.device = self.number
        return self

    def __exit__(self, *exc):
        self._current.device = self._before


@pytest.fixture
def cupy(monkeypatch):
    """The stand-in CuPy, imported by ``CupyBackend``; no thread has a current context."""
    current = threading.local()
    runtime = _Runtime(current)
    module = SimpleNamespace(cuda=SimpleNamespace(
        runtime=runtime, Device=lambda number=0: _Device(current, number)))
    monkeypatch.setitem(sys.modules, "cupy", module)
    return module


def test_device_memory_is_recognised_without_a_current_context(cupy):
    """A thread that has not touched CUDA (a queue's worker, a program's thread) has no
    current context: the backend makes its GPU's current for the query."""
    assert CupyBackend(0).is_device_memory(_BASE[0] + 4096)
    assert CupyBackend(1).is_device_memory(_BASE[1])


def test_device_memory_is_recognised_with_another_gpus_context_current(cupy):
    backend_1 = CupyBackend(1)
    with cupy.cuda.Device(0):
        assert backend_1.is_device_memory(_BASE[1] + 8)
        assert not CupyBackend(0).is_device_memory(_BASE[1] + 8)  # another GPU's memory
    assert getattr(cupy.cuda.runtime._current, "device", None) is None  # left as it was


class _Stream:
    """``cupy.cuda.Stream``: its with-block makes it the thread's current stream (the
    stand-in's ``fail_enter`` refuses the block, as a closed stream would)."""

    def __init__(self, current, fail_enter=False):
        self._current, self.fail_enter = current, fail_enter

    def __enter__(self):
        if self.fail_enter:
            raise RuntimeError("cudaErrorInvalidResourceHandle")
        self._before = getattr(self._current, "stream", None)
        self._current.stream = self
        return self

    def __exit__(self, *exc):
        self._current.stream = self._before


def test_use_stream_makes_the_gpu_and_the_stream_current_and_restores_both(cupy):
    """What ``with device, stream:`` does (``_StreamInUse``): both current inside, both
    restored after, after an exception of the block (which goes on), and the device also
    when the stream refuses to be entered."""
    current = cupy.cuda.runtime._current
    backend = CupyBackend(1)
    stream = _Stream(current)
    with backend.use_stream(stream) as used:
        assert used is stream and current.device == 1 and current.stream is stream
    assert current.device is None and current.stream is None
    with pytest.raises(ZeroDivisionError):
        with backend.use_stream(stream):
            1 / 0
    assert current.device is None and current.stream is None
    with pytest.raises(RuntimeError, match="InvalidResourceHandle"):
        with backend.use_stream(_Stream(current, fail_enter=True)):
            pass
    assert current.device is None and getattr(current, "stream", None) is None
