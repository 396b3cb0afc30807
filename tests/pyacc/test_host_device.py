"""The ``host`` device shares memory with the host (API.md §1, openacc-semantics §1.1, §5.14):
every data clause and data routine is a no-op, ``is_present`` is always true,
``deviceptr(a) is a``, and nothing is allocated or transferred.
"""

import numpy as np
import pytest

import pyacc as acc


def addr(x):
    return x.__array_interface__["data"][0]


def assert_no_traffic():
    st = acc.stats()
    for k in ("h2d_count", "h2d_bytes", "d2h_count", "d2h_bytes", "alloc_count", "alloc_bytes",
              "free_count", "free_bytes"):
        assert st[k] == 0, (k, st[k])


def test_host_device_type_is_current(host_device):
    assert acc.get_device_type() == "host"
    assert acc.get_num_devices("host") >= 1


@pytest.mark.parametrize("alias", ["multicore", "HOST", "Multicore"])
def test_host_aliases(host_device, alias):
    acc.set_device_type(alias)
    assert acc.get_device_type() == "host"


def test_is_present_always_true(host_device):
    a = np.arange(10.0)
    assert acc.is_present(a)
    assert acc.is_present(a[::3])  # any view
    assert acc.is_present(np.zeros((3, 4))[:, ::2])
    assert acc.is_present(np.zeros(0))
    assert acc.present_table() == [] or len(acc.present_table()) == 0


def test_deviceptr_is_the_host_array(host_device):
    a = np.arange(10.0)
    assert acc.deviceptr(a) is a
    v = a[2:5]
    assert acc.deviceptr(v) is v


def test_hostptr_is_identity(host_device):
    a = np.arange(4.0)
    assert acc.hostptr(a) is a


def test_data_routines_are_noops(host_device):
    a = np.arange(10.0)
    host0 = a.copy()
    d = acc.copyin(a)
    assert addr(d) == addr(a) and np.shares_memory(d, a)
    d2 = acc.create(a)
    assert addr(d2) == addr(a)
    acc.copyin(a)
    acc.update_device(a)
    a[:] = 5.0  # "device" writes are host writes
    acc.update_self(a)
    np.testing.assert_array_equal(a, 5.0)
    acc.copyout(a)
    acc.copyout(a, finalize=True)
    acc.delete(a)
    acc.delete(a, finalize=True)
    np.testing.assert_array_equal(a, 5.0)
    assert acc.is_present(a)
    assert tuple(acc.refcounts(a)) == (0, 0)
    assert len(acc.present_table()) == 0
    assert host0 is not a
    assert_no_traffic()


def test_update_on_never_mapped_data_does_not_raise(host_device):
    a = np.arange(6.0)
    acc.update_device(a)
    acc.update_self(a)
    acc.update(self=[a], device=[a])
    acc.update(host=a)
    acc.update_device(a[::2])
    assert_no_traffic()


def test_directives_are_noops(host_device):
    a = np.arange(8.0)
    b = np.arange(8.0)
    c = np.zeros(8)
    acc.enter_data(copyin=[a], create=b)
    assert len(acc.present_table()) == 0
    with acc.data(copy=a, copyin=b, copyout=c, create=np.zeros(3), present=a, no_create=b) as r:
        assert r.device(a) is a
        c[:] = a + b  # writes go straight to host memory
        assert tuple(acc.refcounts(a)) == (0, 0)
    np.testing.assert_array_equal(c, 2 * np.arange(8.0))
    acc.exit_data(copyout=a, delete=b, finalize=True)
    np.testing.assert_array_equal(a, np.arange(8.0))
    assert len(acc.present_table()) == 0
    assert_no_traffic()


def test_present_clause_never_fails(host_device):
    a = np.arange(4.0)
    with acc.data(present=a):
        pass
    with acc.host_data(use_device=a) as da:
        assert da is a
    with acc.host_data(use_device=[a, a[1:]]) as (da, db):
        assert da is a
        assert addr(db) == addr(a) + 8


def test_data_region_write_inside_is_visible_at_once(host_device):
    a = np.zeros(4)
    with acc.data(copyin=a):
        acc.deviceptr(a)[:] = 3.0
        np.testing.assert_array_equal(a, 3.0)
    np.testing.assert_array_equal(a, 3.0)


def test_memcpy_and_malloc_on_host(host_device):
    d = acc.malloc((4,), np.float64)
    a = np.arange(4.0)
    acc.memcpy_to_device(d, a)
    out = np.zeros(4)
    acc.memcpy_from_device(out, d)
    np.testing.assert_array_equal(out, a)
    acc.free(d)


def test_shared_memory_support_property(host_device):
    assert acc.get_property("shared_memory_support") not in (0, False, None)


def test_device_fixture_roundtrip(device):
    """End to end on every available device: a copy region round-trips the data."""
    a = np.arange(16.0)
    with acc.data(copy=a):
        assert acc.is_present(a)
        acc.update_self(a)
    np.testing.assert_array_equal(a, np.arange(16.0))
    assert acc.is_present(a) == (device == "host")
