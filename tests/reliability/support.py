"""Helpers shared by the reliability tests (issue 8): snapshots of the runtime's whole
observable state, the baseline check, and the consistency checker when it exists.

A *snapshot* holds everything a failed call must leave as it was: the present table
(host range, counters, kind, device address of every mapping), the ``refcounts`` of the
scenario's arrays, the device memory in use and the number of live device blocks, the
device contents of every mapping, and copies of the scenario's host arrays.
"""

from __future__ import annotations

import numpy as np

import pyacc as acc
import pyacc.testing  # noqa: F401 - makes acc.testing available


def device():
    """The device object of the calling thread's current device."""
    from pyacc._devices import current_runtime

    return current_runtime().device


def table():
    return [(r.host_begin, r.host_end, r.structured, r.dynamic, r.kind, r.device_begin)
            for r in acc.present_table()]


def memory_in_use() -> int:
    return acc.stats()["memory_in_use"]


def device_contents():
    """Bytes of the device copy of every mapping, by host range."""
    from pyacc._devices import current_runtime

    runtime = current_runtime()
    contents = {}
    for entry in runtime.table.entries():
        view = runtime.device.view(entry.device_address, entry.host_bytes())
        contents[(entry.host_begin, entry.host_end)] = bytes(view)
    return contents


def snapshot(arrays) -> dict:
    """Everything a failed call must leave unchanged (see the module docstring)."""
    dev = device()
    return {
        "table": table(),
        "refcounts": [tuple(acc.refcounts(a)) for a in arrays],
        "memory_in_use": dev.memory_in_use,
        "live_blocks": dev._arena.live_blocks,
        "device_contents": device_contents(),
        "host": [a.tobytes() for a in arrays],
    }


def differences(before: dict, after: dict) -> list[str]:
    """What changed between two snapshots, in words."""
    changed = []
    for key in before:
        if before[key] != after[key]:
            if key == "host":
                which = [i for i, (x, y) in enumerate(zip(before[key], after[key])) if x != y]
                changed.append(f"host arrays {which} changed")
            else:
                changed.append(f"{key}: {before[key]!r} -> {after[key]!r}")
    return changed


def check_allocator() -> None:
    """The emulated device's allocator invariants hold."""
    problems = device().check_memory()
    assert not problems, "allocator invariants broken: " + "; ".join(problems)


def checker_on() -> bool:
    """The consistency checker (``PYACC_CHECK``) is installed."""
    return acc.observe.active("check") is not None


def check_consistency() -> None:
    """The full consistency check (``acc.testing.check_consistency``) when the checker
    is on, and the allocator invariants."""
    if checker_on():
        acc.testing.check_consistency()
    check_allocator()


def assert_baseline(baseline_memory: int = 0) -> None:
    """Nothing is mapped, no queued work is pending, device memory is back to
    ``baseline_memory`` and the allocator is consistent."""
    acc.wait_all()
    assert acc.present_table() == [], f"mappings left: {acc.present_table()}"
    assert memory_in_use() == baseline_memory, \
        f"device memory in use {memory_in_use()} != baseline {baseline_memory}"
    check_consistency()


def filled(n: int, start: float, dtype=np.float64) -> np.ndarray:
    return (np.arange(n) + start).astype(dtype)


def scribble_device_memory(nbytes: int = 1 << 16, value: int = 0x5A) -> None:
    """Fill the start of the current device's memory with a byte pattern (allocate,
    write, free), so that newly allocated blocks hold garbage rather than zeros and a
    copy-back of data that was never written shows up."""
    junk = acc.malloc(nbytes, np.uint8)
    junk[:] = value
    acc.free(junk)


# kernels shared by the exceptional-exit and stress tests
@acc.parallel_loop(present="v")
def add_one_present(v):
    for i in range(v.shape[0]):
        v[i] += 1.0


@acc.parallel_loop
def add_one(v):
    for i in range(v.shape[0]):
        v[i] += 1.0
