"""Calls go one way, runtime → device → helpers → backend (``mapping/devices/__init__.py``):
a copyin of absent data, an update and a delete on a ``cuda`` device with the fake backend,
run under ``sys.setprofile``, never call from a lower level of files up to a higher one
except to run what was handed down (an operation's ``__call__`` or ``skipped``, a closure).

The hops (calls from one file of ``mapping/`` into another) are counted too: before the
room (the helpers called the device back for memory, ``interface_of``, the synchronous
queue, the backend), a synchronous copyin of 1000 float64 took 48 hops, 4 of them back into
a file still waiting on the stack (issue 31); the tests keep those re-entries at most 2."""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

import pyacc.mapping as mapping
from pyacc.mapping import (BUS, Counter, DeviceRuntime, EventKind, MapKind, MapRequest, UpdateDirection,
                           UpdateItem)
from pyacc.mapping.devices.cuda import CudaDevice
from pyacc.mapping.devices.cuda_fake import FakeCudaBackend
from tests.test_layering import BACKENDS, DEVICES, HELPERS, LEAVES, ROOM_FLOOR
from tests.mapping.fakes import close_streams

ROOT = Path(mapping.__file__).resolve().parent
#: level of each file (lower number: higher level); the floor (``ROOM_FLOOR``) has none
LEVELS = {**{f"devices/{name}.py": 1 for name in DEVICES}, **{f"devices/{name}.py": 2 for name in HELPERS},
          **{f"devices/{name}.py": 3 for name in BACKENDS}, **{f"devices/{name}.py": 4 for name in LEAVES}}
#: what a lower level may run of what it was handed
HANDED_DOWN = {"__call__", "skipped"}


def _file(code) -> str | None:
    """``code``'s file relative to ``mapping/``, None outside it."""
    path = Path(code.co_filename).resolve()
    return str(path.relative_to(ROOT)) if ROOT in path.parents else None


def _qualname(code) -> str:
    """``code``'s name as the checks read it: its qualified name, with ``<locals>`` for a
    function defined inside another (a closure handed down), on every Python (3.10 has no
    ``co_qualname``; its ``CO_NESTED`` flag tells the closure)."""
    name = getattr(code, "co_qualname", None)
    if name is None:
        name = ("<locals>." if code.co_flags & inspect.CO_NESTED else "") + code.co_name
    return name


def _level(file: str):
    """0 for the runtime side, 1–4 in the room, None for the floor every level shares."""
    if file.removesuffix(".py") in ROOM_FLOOR:
        return None
    return LEVELS.get(file, 0)


def _hops(action):
    """``(caller file, callee file, callee qualname, callee file on the stack)`` of each
    call between two files of ``mapping/`` made on this thread while ``action`` runs."""
    hops = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        callee, caller = _file(frame.f_code), _file(frame.f_back.f_code)
        if callee is None or caller is None or callee == caller:
            return
        stack, outer = set(), frame.f_back
        while outer is not None:
            stack.add(_file(outer.f_code))
            outer = outer.f_back
        hops.append((caller, callee, _qualname(frame.f_code), callee in stack))

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return hops


def _upward(hops):
    """The hops from a lower level up to a higher one that run nothing handed down."""
    found = []
    for caller, callee, name, _ in hops:
        low, high = _level(caller), _level(callee)
        if low is None or high is None or high >= low:
            continue  # the floor runs what it is handed; calls down or level are fine
        if name.rsplit(".", 1)[-1] in HANDED_DOWN or "<locals>" in name or "<lambda>" in name:
            continue
        found.append((caller, callee, name))
    return found


@pytest.fixture
def runtime():
    device = CudaDevice(0, backend=FakeCudaBackend())
    yield DeviceRuntime(device)
    device.synchronize()
    close_streams(device)


@pytest.fixture(params=[False, True], ids=["quiet", "observed"])
def observed(request):
    """With a subscriber to the transfer and DONE events, transfers are ``Timed``."""
    if not request.param:
        yield
        return
    kinds = (EventKind.ALLOC, EventKind.FREE, EventKind.UPLOAD, EventKind.DOWNLOAD, EventKind.DONE)
    seen = []
    BUS.subscribe(seen.append, kinds)
    yield
    BUS.unsubscribe(seen.append, kinds)


def _verbs(runtime, array, queue):
    return {
        "copyin": lambda: runtime.enter([MapRequest(MapKind.COPYIN, array)], Counter.DYNAMIC, queue),
        "update": lambda: runtime.update([UpdateItem(UpdateDirection.SELF, array, "a")], queue),
        "delete": lambda: runtime.exit_dynamic([MapRequest(MapKind.DELETE, array)], queue),
    }


@pytest.mark.parametrize("queue_number", [None, 1], ids=["sync", "async"])
@pytest.mark.parametrize("array", [np.arange(1000.0), np.arange(1 << 18, dtype=np.float64),
                                   np.arange(3000.0).reshape(100, 30)[:, ::3]],
                         ids=["small", "page-locked", "strided"])
def test_calls_go_down(runtime, observed, monkeypatch, queue_number, array):
    monkeypatch.setenv("PYACC_PIN", "1M")
    runtime.device.pins.unpin_all()  # reads PYACC_PIN again
    queue = runtime.device.queue(queue_number)
    for action in _verbs(runtime, array, queue).values():
        action()  # once unobserved: first-use work (compiling, measuring) is not traced
    for verb, action in _verbs(runtime, array, queue).items():
        hops = _hops(action)
        assert any(callee.startswith("devices/cuda_fake") for _, callee, _, _ in hops) or verb == "delete"
        assert _upward(hops) == [], verb


def test_the_helpers_never_call_the_device(runtime):
    """The device's own files are entered from the runtime side, the device, or the floor
    running what it was handed (``QueueSet.release`` frees through ``device.free``); never
    from a helper, a backend or a leaf."""
    hops = []
    for action in _verbs(runtime, np.arange(1000.0), runtime.device.sync_queue).values():
        hops += _hops(action)
    into_device = {(caller, callee) for caller, callee, _, _ in hops if _level(callee) == 1}
    assert into_device and not [hop for hop in into_device if _level(hop[0]) in (2, 3, 4)]


def test_a_copyin_goes_back_into_a_waiting_file_at_most_twice(runtime):
    """Measured: 48 hops before the room, 4 of them back into a file on the stack
    (``cuda_transfers`` → ``cuda.interface_of``, ``cuda`` ↔ ``device`` for the transfer, and
    the synchronous queue's wait); now 2 (``cuda`` → ``base.submit_transfer``, the wait)."""
    hops = _hops(_verbs(runtime, np.arange(1000.0), runtime.device.sync_queue)["copyin"])
    assert sum(back for *_, back in hops) <= 2, hops
