"""The facts a compute call needs to keep device memory device memory (issue 29 item 2;
API.md §6.2; OpenACC 3.3 §2.7.4), at their level: ``Device.owns`` through the registry
(host: nothing is the device's own, memory is shared), and the deviceptr arrays of the
thread's open data regions (``RegionStack.deviceptrs``, innermost first;
``pyacc._devices.enclosing_deviceptr``, by range: a view counts), announced to the
express lane like the regions' ``default``. The end-to-end rule (kernels move nothing for
such arrays) is tests/pyacc/test_device_memory_stays_device_memory.py."""

import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc import _devices
from pyacc._devices import ICVS, current_runtime, enclosing_deviceptr


def _ranges():
    """The open regions' deviceptr ranges, as (low, high) pairs, innermost first."""
    return [(low, high) for low, high, _ in ICVS.region_stack.deviceptrs]


def _range_of(array):
    _, low, high = _devices._extent(array)
    return low, high


# == Device.owns on host (the emulated and cuda devices: tests/mapping) ====================
def test_host_owns_nothing_host_memory_is_shared(host_device):
    """OpenACC 3.3 §2.7.4: on shared memory every array is host data and every data
    clause a no-op, ``acc.malloc`` memory included."""
    device = current_runtime().device
    d = acc.malloc((10,), np.float64)
    assert not device.owns(d) and not device.owns(np.zeros(3)) and not device.owns(3.0)
    acc.free(d)


def test_the_current_devices_own_arrays_are_device_memory(separate_memory):
    """``acc.malloc``, ``acc.deviceptr`` and ``host_data`` give arrays the device owns."""
    device = current_runtime().device
    x = np.zeros(16)
    d = acc.malloc((16,), np.float64)
    with acc.data(copyin=[x]):
        with acc.host_data(use_device=x) as dx:
            assert device.owns(d) and device.owns(acc.deviceptr(x)) and device.owns(dx)
        assert not device.owns(x)
    acc.free(d)


# == deviceptr on a data construct applies to the constructs inside it (§2.7.4) =============
def test_deviceptr_arrays_of_an_open_data_region_and_their_views_are_enclosing_deviceptr(device):
    d = acc.malloc((100,), np.float64)
    x = np.zeros(100)
    assert not enclosing_deviceptr(d)
    with acc.data(deviceptr=[d], copyin=[x]):
        assert enclosing_deviceptr(d) and enclosing_deviceptr(d[10:20])
        assert enclosing_deviceptr(d[::-1]) and enclosing_deviceptr(d[100:100])
        assert not enclosing_deviceptr(3.0) and not enclosing_deviceptr("d")
        if device != "host":  # (on host, x is mapped nowhere else: its range is its own)
            assert not enclosing_deviceptr(x)
    assert not enclosing_deviceptr(d) and ICVS.region_stack.deviceptrs == ()
    acc.free(d)


def test_a_range_that_only_overlaps_a_deviceptr_array_is_not_enclosed(emulated):
    whole = acc.malloc((100,), np.float64)
    with acc.data(deviceptr=[whole[10:20]]):
        assert enclosing_deviceptr(whole[12:18])
        assert not enclosing_deviceptr(whole[5:15]) and not enclosing_deviceptr(whole)
    acc.free(whole)


def test_nested_regions_lend_their_deviceptr_arrays_innermost_first(emulated):
    a, b, c = (acc.malloc((8,), np.float64) for _ in range(3))
    with acc.data(deviceptr=[a]):
        with acc.data(copyin=[np.zeros(4)]):  # a region without deviceptr changes nothing
            with acc.data(deviceptr=[b, c]):
                assert _ranges() == [_range_of(b), _range_of(c), _range_of(a)]
            assert _ranges() == [_range_of(a)]
    for array in (a, b, c):
        acc.free(array)


def test_regions_left_out_of_order_lend_only_what_is_still_open(emulated):
    """Exits need not be LIFO (``RegionStack``): what stays open still applies."""
    a, b = acc.malloc((8,), np.float64), acc.malloc((8,), np.float64)
    outer, inner = acc.data(deviceptr=[a]), acc.data(deviceptr=[b])
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)
    assert _ranges() == [_range_of(b)] and not enclosing_deviceptr(a) and enclosing_deviceptr(b)
    inner.__exit__(None, None, None)
    assert _ranges() == []
    acc.free(a)
    acc.free(b)


def test_a_data_region_under_if_false_lends_no_deviceptr(emulated):
    """``if(false)``: the construct does nothing on the device (§2.6.5), its deviceptr
    clause included."""
    d = acc.malloc((8,), np.float64)
    with acc.data(deviceptr=[d], if_=False):
        assert not enclosing_deviceptr(d)
    acc.free(d)


def test_a_data_region_that_fails_at_entry_lends_nothing(emulated):
    """A deviceptr array that is not device memory is refused at entry; nothing stays
    on the thread's stack."""
    with pytest.raises(acc.InvalidArgumentError, match="is not memory of emulated device"):
        with acc.data(deviceptr=[np.zeros(4)]):
            pass
    assert ICVS.region_stack.deviceptrs == () and len(ICVS.region_stack) == 0


def test_enclosing_deviceptr_is_per_thread(emulated):
    """The open regions are the calling thread's (OpenACC 3.3 §2.3: per host thread)."""
    d = acc.malloc((8,), np.float64)
    seen = []
    with acc.data(deviceptr=[d]):
        thread = threading.Thread(target=lambda: seen.append(enclosing_deviceptr(d)))
        thread.start()
        thread.join()
        assert enclosing_deviceptr(d)
    assert seen == [False]
    acc.free(d)


def test_a_change_of_the_open_deviceptr_arrays_is_announced_like_default(emulated, monkeypatch):
    """The express lane remembers a thread's context between calls; every change of what
    a call inherits from its open regions is announced before and after
    (``watch_context``), a region that changes nothing of it is not."""
    calls = []
    monkeypatch.setattr(_devices, "_context_changed", lambda: calls.append(len(_ranges())))
    d = acc.malloc((8,), np.float64)
    with acc.data(copyin=[np.zeros(4)]):
        pass
    assert calls == []
    with acc.data(deviceptr=[d]):
        assert calls == [0, 1]
    assert calls == [0, 1, 1, 0]
    acc.free(d)
