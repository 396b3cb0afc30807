"""Bad input (issue 2, item 5; API.md §2, §3, §4, §7).

Every bad call raises its documented error and leaves the runtime exactly as it was:
the present table (ranges, counters, kinds), the counters of every array involved, the
device contents of every mapping and the device memory in use are compared before and
after. Error messages name the array's shape and dtype and its host range in the
notation ``[0x…,+nbytes]``; presence errors name the overlapping mapping's range too.
"""

import re
from contextlib import contextmanager

import numpy as np
import pytest

import pyacc as acc


# --------------------------------------------------------------------------- helpers


def addr(x):
    return x.__array_interface__["data"][0]


def snapshot(*arrays):
    """Everything a failed call must not change."""
    table = [
        (r.host_begin, r.host_end, r.nbytes, tuple(r.shape), np.dtype(r.dtype).str,
         r.structured, r.dynamic, r.kind)
        for r in acc.present_table()
    ]
    counts = [tuple(acc.refcounts(a)) for a in arrays]
    present = [acc.is_present(a) for a in arrays]
    contents = []
    for a in arrays:
        d = acc.deviceptr(a) if acc.is_present(a) else None
        contents.append(None if d is None else np.array(d, copy=True))
    hosts = [np.array(a, copy=True) for a in arrays]
    st = acc.stats()
    traffic = {k: st[k] for k in ("h2d_count", "d2h_count", "alloc_count", "free_count")}
    return table, counts, present, contents, hosts, st["memory_in_use"], traffic


def assert_same(before, after, traffic=True):
    tb, cb, pb, db, hb, mb, sb = before
    ta, ca, pa, da, ha, ma, sa = after
    assert ta == tb, "present table changed"
    assert ca == cb, "refcounts changed"
    assert pa == pb, "presence changed"
    for x, y in zip(db, da):
        if x is None:
            assert y is None
        else:
            np.testing.assert_array_equal(x, y, err_msg="device contents changed")
    for x, y in zip(hb, ha):
        np.testing.assert_array_equal(x, y, err_msg="host contents changed")
    assert ma == mb, "device memory in use changed"
    if traffic:
        assert sa == sb, "transfers/allocations happened"


@contextmanager
def unchanged(exc, *arrays, code=None, traffic=True):
    """``with unchanged(Err, a, b): bad_call()`` -- raises Err and changes nothing."""
    before = snapshot(*arrays)
    with pytest.raises(exc) as ei:
        yield ei
    assert isinstance(ei.value, acc.AccError)
    if code is not None:
        assert ei.value.code == code
    assert_same(before, snapshot(*arrays), traffic=traffic)


def range_pattern(a):
    """Regex for ``[0x<addr>,+<nbytes>]`` of a host array (hex case and zero-padding free)."""
    return r"\[0x0*%x\s*,\s*\+%d\]" % (addr(a), a.nbytes)


def assert_message_names(err, a, overlapping=None):
    msg = str(err)
    assert re.search(range_pattern(a), msg, re.IGNORECASE), msg
    assert str(a.dtype) in msg, msg
    shape_forms = {str(a.shape), str(tuple(a.shape)), "x".join(map(str, a.shape)),
                   "[" + ", ".join(map(str, a.shape)) + "]"}
    assert any(f in msg for f in shape_forms), msg
    if overlapping is not None:
        assert re.search(range_pattern(overlapping), msg, re.IGNORECASE), msg


def _obj_array():
    return np.array([1, "x", None], dtype=object)


# --------------------------------------------------------------------------- error tree


def test_error_classes_and_codes():
    expect = {
        acc.NotPresentError: ("not_present", LookupError),
        acc.PartlyPresentError: ("partly_present", None),
        acc.PresentError: ("present", None),
        acc.OutOfMemoryError: ("out_of_memory", MemoryError),
        acc.InvalidArgumentError: ("invalid_argument", ValueError),
        acc.InvalidAsyncError: ("invalid_async", ValueError),
        acc.InvalidDataSectionError: ("invalid_data_section", ValueError),
        acc.DeviceUnavailableError: ("device_unavailable", None),
        acc.DeviceTypeUnavailableError: ("device_type_unavailable", None),
        acc.ExecutionError: ("execution", None),
    }
    assert issubclass(acc.AccError, RuntimeError)
    for cls, (code, also) in expect.items():
        assert issubclass(cls, acc.AccError), cls
        if also is not None:
            assert issubclass(cls, also), cls
    assert issubclass(acc.ClauseError, acc.InvalidArgumentError)
    assert issubclass(acc.ClauseError, TypeError)
    assert not issubclass(acc.CompileError, acc.AccError)


def test_async_constants():
    assert acc.async_sync == -2
    assert acc.async_noval == -1


# --------------------------------------------------------------------------- object dtype


@pytest.mark.parametrize(
    "call",
    [
        lambda o: acc.copyin(o),
        lambda o: acc.create(o),
        lambda o: acc.enter_data(copyin=o),
        lambda o: acc.enter_data(create=[o]),
        lambda o: acc.data(copy=o).__enter__(),
        lambda o: acc.data(copyin=[o]).__enter__(),
        lambda o: acc.update_device(o),
        "map_data",
    ],
    ids=["copyin", "create", "enter_copyin", "enter_create", "data_copy", "data_copyin",
         "update_device", "map_data"],
)
def test_object_dtype_is_invalid_argument(emulated, call):
    o = _obj_array()
    keep = np.arange(4.0)
    acc.copyin(keep)
    if call == "map_data":
        d = acc.malloc((64,), np.uint8)
        call = lambda o: acc.map_data(o, d)  # noqa: E731
    with unchanged(acc.InvalidArgumentError, keep, code="invalid_argument"):
        call(o)
    assert len(acc.present_table()) == 1


def test_object_dtype_in_a_list_rolls_back_the_others(emulated):
    a = np.arange(4.0)
    o = _obj_array()
    with unchanged(acc.InvalidArgumentError, a):
        acc.enter_data(copyin=[a, o])
    assert not acc.is_present(a)
    with unchanged(acc.InvalidArgumentError, a):
        with acc.data(copy=a, create=o):
            pass
    assert not acc.is_present(a)


# --------------------------------------------------------------------------- non-arrays


NON_ARRAYS = [[1.0, 2.0], 3.0, 7, None, "abc", (1, 2)]


@pytest.mark.parametrize("bad", NON_ARRAYS, ids=["list", "float", "int", "None", "str", "tuple"])
@pytest.mark.parametrize(
    "routine",
    ["copyin", "create", "copyout", "delete", "update_device", "update_self", "is_present"],
)
def test_non_array_argument_in_routines(emulated, bad, routine):
    if routine == "is_present" and bad is None:
        pytest.skip("is_present(None): the spec's null pointer is 'always present'")
    keep = np.arange(4.0)
    acc.copyin(keep)
    with unchanged(acc.InvalidArgumentError, keep):
        getattr(acc, routine)(bad)


@pytest.mark.parametrize("bad", [[1.0, 2.0], 3.0, "abc"], ids=["list_of_floats", "float", "str"])
def test_non_array_in_directive_clauses(emulated, bad):
    a = np.arange(4.0)
    with unchanged(acc.InvalidArgumentError, a):
        acc.enter_data(copyin=[a, bad])
    with unchanged(acc.InvalidArgumentError, a):
        with acc.data(copy=[a], copyin=bad):
            pass
    acc.copyin(a)
    with unchanged(acc.InvalidArgumentError, a):
        acc.exit_data(copyout=[a, bad])
    with unchanged(acc.InvalidArgumentError, a):
        acc.update(device=[a, bad])
    with unchanged(acc.InvalidArgumentError, a):
        with acc.host_data(use_device=[a, bad]):
            pass


def test_map_data_non_array_arguments(emulated):
    a = np.zeros(8)
    d = acc.malloc((8,), np.float64)
    with unchanged(acc.InvalidArgumentError, a):
        acc.map_data(None, d)
    with unchanged(acc.InvalidArgumentError, a):
        acc.map_data(a, None)
    with unchanged(acc.InvalidArgumentError, a):
        acc.map_data([0.0] * 8, d)
    with unchanged(acc.InvalidArgumentError, a):
        acc.unmap_data(None)
    acc.free(d)


# --------------------------------------------------------------------------- non-contiguous


def test_transpose_of_c_array_is_fine(emulated):
    a = np.arange(12.0).reshape(3, 4)
    t = a.T
    assert t.flags.f_contiguous
    acc.copyin(t)
    assert acc.is_present(t)
    assert acc.is_present(a)  # same byte range
    assert tuple(acc.refcounts(a)) == (0, 1)
    acc.delete(t)
    assert not acc.is_present(a)


@pytest.mark.parametrize("view", ["every_other", "column_stride", "reversed_2d_cols"])
@pytest.mark.parametrize(
    "routine",
    ["copyin", "create", "enter_copyin", "enter_create", "data_copy", "data_copyout",
     "data_create", "map_data"],
)
def test_non_contiguous_view_in_entry_is_invalid_data_section(emulated, view, routine):
    a = np.arange(24.0).reshape(4, 6)
    v = {"every_other": a.reshape(-1)[::2], "column_stride": a[:, ::2],
         "reversed_2d_cols": a[:, ::-2]}[view]
    assert not (v.flags.c_contiguous or v.flags.f_contiguous)
    calls = {
        "copyin": lambda: acc.copyin(v),
        "create": lambda: acc.create(v),
        "enter_copyin": lambda: acc.enter_data(copyin=v),
        "enter_create": lambda: acc.enter_data(create=[v]),
        "data_copy": lambda: acc.data(copy=v).__enter__(),
        "data_copyout": lambda: acc.data(copyout=[v]).__enter__(),
        "data_create": lambda: acc.data(create=v).__enter__(),
        "map_data": lambda: acc.map_data(v, d),
    }
    d = acc.malloc((a.nbytes,), np.uint8)
    with unchanged(acc.InvalidDataSectionError, a, code="invalid_data_section"):
        calls[routine]()
    assert len(acc.present_table()) == 0


@pytest.mark.parametrize("routine", ["copyout", "delete", "exit_copyout", "exit_delete",
                                     "data_present"])
def test_non_contiguous_view_of_present_data_in_exit_is_invalid_data_section(emulated, routine):
    a = np.arange(16.0)
    acc.copyin(a)
    v = a[::2]
    calls = {
        "copyout": lambda: acc.copyout(v),
        "delete": lambda: acc.delete(v, finalize=True),
        "exit_copyout": lambda: acc.exit_data(copyout=v),
        "exit_delete": lambda: acc.exit_data(delete=[v], finalize=True),
        "data_present": lambda: acc.data(present=v).__enter__(),
    }
    with unchanged(acc.InvalidDataSectionError, a):
        calls[routine]()
    assert tuple(acc.refcounts(a)) == (0, 1)


def test_non_contiguous_in_list_rolls_back(emulated):
    a = np.arange(8.0)
    b = np.arange(16.0).reshape(4, 4)
    with unchanged(acc.InvalidDataSectionError, a, b):
        acc.enter_data(copyin=[a, b[:, ::2]])
    assert not acc.is_present(a)


def test_update_accepts_strided_view_of_present_data(emulated):
    a = np.arange(16.0).reshape(4, 4)
    acc.copyin(a)
    acc.deviceptr(a)[...] = 0.0
    acc.update_device(a[:, ::2])  # only the view's elements move
    exp = np.zeros((4, 4))
    exp[:, ::2] = a[:, ::2]
    np.testing.assert_array_equal(np.array(acc.deviceptr(a)), exp)
    acc.deviceptr(a)[...] = -1.0
    acc.update_self(a[1::2, :])
    exp_h = np.arange(16.0).reshape(4, 4)
    exp_h[1::2, :] = -1.0
    np.testing.assert_array_equal(a, exp_h)
    acc.update(self=a[::-1, 1], device=a[0, ::3])  # negative strides too
    acc.delete(a)


# --------------------------------------------------------------------------- partly present


def _partly_cases():
    """(name, mapped views, request) over one buffer of 32 float64."""
    return {
        "extends_before": ([(8, 16)], (4, 12)),
        "extends_after": ([(8, 16)], (12, 20)),
        "covers_one": ([(8, 16)], (4, 20)),
        "covers_exactly_two_adjacent": ([(8, 16), (16, 24)], (8, 24)),
        "spans_two_adjacent": ([(8, 16), (16, 24)], (12, 20)),
        "starts_at_begin_extends_after": ([(8, 16)], (8, 20)),
    }


PARTLY_ROUTINES = {
    "copyin": lambda r: acc.copyin(r),
    "create": lambda r: acc.create(r),
    "copyout": lambda r: acc.copyout(r),
    "delete": lambda r: acc.delete(r),
    "delete_finalize": lambda r: acc.delete(r, finalize=True),
    "enter_copyin": lambda r: acc.enter_data(copyin=r),
    "enter_create": lambda r: acc.enter_data(create=[r]),
    "exit_copyout": lambda r: acc.exit_data(copyout=r),
    "exit_delete": lambda r: acc.exit_data(delete=r, finalize=True),
    "data_copy": lambda r: acc.data(copy=r).__enter__(),
    "data_copyin": lambda r: acc.data(copyin=r).__enter__(),
    "data_copyout": lambda r: acc.data(copyout=r).__enter__(),
    "data_create": lambda r: acc.data(create=r).__enter__(),
    "data_no_create": lambda r: acc.data(no_create=r).__enter__(),
    "data_present": lambda r: acc.data(present=r).__enter__(),
    "update_device": lambda r: acc.update_device(r),
    "update_self": lambda r: acc.update_self(r),
    "update_directive": lambda r: acc.update(device=r),
}


@pytest.mark.parametrize("case", sorted(_partly_cases()))
@pytest.mark.parametrize("routine", sorted(PARTLY_ROUTINES))
def test_partly_present(emulated, case, routine):
    buf = np.arange(32.0)
    mapped_ranges, (lo, hi) = _partly_cases()[case]
    mapped = [buf[i:j] for i, j in mapped_ranges]
    acc.enter_data(copyin=mapped)
    for m in mapped:  # give the device distinct contents
        acc.deviceptr(m)[...] = -m
    req = buf[lo:hi]
    with unchanged(acc.PartlyPresentError, buf, req, *mapped, code="partly_present") as ei:
        PARTLY_ROUTINES[routine](req)
    assert not acc.is_present(req)
    # the message names the request and (one of) the overlapping mappings
    msg = str(ei.value)
    assert re.search(range_pattern(req), msg, re.IGNORECASE), msg
    assert any(re.search(range_pattern(m), msg, re.IGNORECASE) for m in mapped), msg
    acc.exit_data(delete=mapped)
    assert len(acc.present_table()) == 0


def test_partly_present_message_names_shape_dtype_and_both_ranges(emulated):
    buf = np.zeros(40, dtype=np.float32)
    m = buf[10:20]
    acc.create(m)
    req = buf[15:25]
    with pytest.raises(acc.PartlyPresentError) as ei:
        acc.copyin(req)
    assert_message_names(ei.value, req, overlapping=m)
    acc.delete(m)


def test_partly_present_in_multi_array_directive_rolls_back(emulated):
    buf = np.arange(32.0)
    other = np.arange(8.0)
    fresh = np.arange(5.0)
    acc.copyin(buf[0:8])
    acc.copyin(other)
    with unchanged(acc.PartlyPresentError, buf, other, fresh):
        acc.enter_data(copyin=[other, fresh, buf[4:12]])
    assert tuple(acc.refcounts(other)) == (0, 1)
    assert not acc.is_present(fresh)
    with unchanged(acc.PartlyPresentError, buf, other, fresh):
        with acc.data(copy=[other, fresh], present=buf[6:10]):
            pass
    with unchanged(acc.PartlyPresentError, buf, other, fresh):
        acc.exit_data(delete=[other, buf[6:10]], finalize=True)
    assert tuple(acc.refcounts(other)) == (0, 1)


def test_is_present_of_partly_present_range_is_false(emulated):
    buf = np.arange(16.0)
    acc.create(buf[4:8])
    assert not acc.is_present(buf[2:6])
    assert not acc.is_present(buf)
    assert acc.is_present(buf[5:7])
    acc.delete(buf[4:8])


# --------------------------------------------------------------------------- not present


def test_update_of_absent_data_is_not_present(emulated):
    a = np.arange(4.0)
    b = np.arange(6.0)
    acc.copyin(b)
    acc.deviceptr(b)[...] = 9.0
    for call in (lambda: acc.update_device(a), lambda: acc.update_self(a),
                 lambda: acc.update(self=a), lambda: acc.update(host=[a]),
                 lambda: acc.update(device=a)):
        with unchanged(acc.NotPresentError, a, b, code="not_present") as ei:
            call()
        assert_message_names(ei.value, a)
    # all-or-nothing: b's update does not happen when a is absent, whatever the order
    with unchanged(acc.NotPresentError, a, b):
        acc.update(self=[b, a])
    with unchanged(acc.NotPresentError, a, b):
        acc.update(device=[b], self=[a])
    acc.update_device(a, if_present=True)
    acc.update_self(a, if_present=True)
    acc.update(self=[b, a], if_present=True)
    np.testing.assert_array_equal(b, 9.0)


def test_present_clause_on_absent_data(emulated):
    a = np.arange(4.0)
    with unchanged(acc.NotPresentError, a) as ei:
        with acc.data(present=a):
            pass
    assert_message_names(ei.value, a)


def test_host_data_on_absent_data(emulated):
    a = np.arange(4.0)
    b = np.arange(3.0)
    acc.copyin(b)
    with unchanged(acc.NotPresentError, a, b):
        with acc.host_data(use_device=[b, a]):
            pass
    with acc.host_data(use_device=[b, a], if_present=True) as (db, da):
        assert da is a or np.shares_memory(da, a)
        assert addr(db) == addr(acc.deviceptr(b))
    with acc.host_data(use_device=b) as db:
        assert addr(db) == addr(acc.deviceptr(b))


# --------------------------------------------------------------------------- map_data / unmap_data / free


def test_map_data_over_present_data(emulated):
    buf = np.arange(32.0)
    acc.copyin(buf[8:16])
    for lo, hi in [(8, 16), (4, 12), (12, 20), (0, 32), (10, 12)]:
        h = buf[lo:hi]
        d = acc.malloc(h.shape, h.dtype)
        acc.memcpy_to_device(d, np.full(h.shape, 77.0))
        with unchanged(acc.PresentError, buf, h, code="present") as ei:
            acc.map_data(h, d)
        assert_message_names(ei.value, h, overlapping=buf[8:16])
        out = np.empty(h.shape)
        acc.memcpy_from_device(out, d)
        np.testing.assert_array_equal(out, 77.0)  # d untouched
        acc.free(d)


def test_map_data_over_map_data(emulated):
    h = np.zeros(16)
    d1 = acc.malloc((16,), np.float64)
    d2 = acc.malloc((16,), np.float64)
    acc.map_data(h, d1)
    with unchanged(acc.PresentError, h):
        acc.map_data(h, d2)
    with unchanged(acc.PresentError, h):
        acc.map_data(h[4:8], d2)
    acc.unmap_data(h)
    acc.free(d1)
    acc.free(d2)


def test_map_data_device_array_too_small(emulated):
    h = np.zeros(16)
    d = acc.malloc((8,), np.float64)
    with unchanged(acc.InvalidArgumentError, h):
        acc.map_data(h, d)
    acc.free(d)


def test_unmap_data_of_normal_mappings(emulated):
    a = np.arange(8.0)
    acc.copyin(a)
    with unchanged(acc.PresentError, a, code="present"):
        acc.unmap_data(a)
    acc.delete(a)
    b = np.arange(8.0)
    with acc.data(create=b):
        with unchanged(acc.PresentError, b):
            acc.unmap_data(b)


def test_unmap_data_of_absent_data(emulated):
    a = np.arange(8.0)
    with unchanged(acc.PresentError, a):
        acc.unmap_data(a)


def test_unmap_data_with_structured_count(emulated):
    h = np.zeros(8)
    d = acc.malloc((8,), np.float64)
    acc.map_data(h, d)
    for clause in ("copy", "present", "copyin", "create", "no_create", "copyout"):
        with acc.data(**{clause: h}):
            assert tuple(acc.refcounts(h)) == (1, 1)
            with unchanged(acc.PresentError, h):
                acc.unmap_data(h)
        assert tuple(acc.refcounts(h)) == (0, 1)
    acc.unmap_data(h)
    assert not acc.is_present(h)
    acc.free(d)


def test_free_of_mapped_memory(emulated):
    h = np.zeros(8)
    d = acc.malloc((8,), np.float64)
    acc.map_data(h, d)
    with unchanged(acc.PresentError, h, code="present"):
        acc.free(d)
    acc.unmap_data(h)
    acc.free(d)


def test_free_of_a_block_mapped_beyond_the_array_given(emulated):
    """``acc.free`` of an array that starts a malloc'd block frees the whole block
    (``acc_free`` of its pointer), so it is refused while any part of the block is
    mapped, not only the part the array spans."""
    h = np.zeros(50)
    d = acc.malloc((100,), np.float64)
    acc.map_data(h, d[50:])
    with unchanged(acc.PresentError, h, code="present"):
        acc.free(d[:10])
    assert acc.is_present(h)
    acc.unmap_data(h)
    acc.free(d[:10])


# --------------------------------------------------------------------------- out of memory


@pytest.fixture
def small_emulated(monkeypatch):
    cap = 10 * 1024
    monkeypatch.setenv("PYACC_EMULATED_MEMORY", str(cap))
    acc.shutdown("emulated")
    acc.init("emulated")
    acc.set_device_type("emulated")
    acc.set_device_num(0, "emulated")
    acc.reset_stats()
    yield cap
    acc.shutdown("emulated")
    monkeypatch.delenv("PYACC_EMULATED_MEMORY")
    acc.shutdown("emulated")


def test_capacity_is_reported(small_emulated):
    assert acc.get_property("memory") == small_emulated
    assert acc.get_property("free_memory") == small_emulated
    assert acc.stats()["memory_in_use"] == 0


def test_out_of_memory_on_third_of_five_enter_data(small_emulated):
    # 4 KiB each: two fit in 10 KiB, the third does not
    arrs = [np.full(512, float(k)) for k in range(5)]
    free0 = acc.get_property("free_memory")
    before = snapshot(*arrs)
    with pytest.raises(acc.OutOfMemoryError) as ei:
        acc.enter_data(copyin=arrs)
    assert ei.value.code == "out_of_memory"
    assert isinstance(ei.value, MemoryError)
    assert_same(before, snapshot(*arrs), traffic=False)
    assert not acc.is_present(arrs[0]) and not acc.is_present(arrs[1])
    assert acc.get_property("free_memory") == free0
    assert acc.stats()["memory_in_use"] == 0
    assert len(acc.present_table()) == 0
    # the allocator is still usable afterwards
    acc.enter_data(copyin=arrs[:2])
    assert acc.is_present(arrs[0]) and acc.is_present(arrs[1])
    np.testing.assert_array_equal(np.array(acc.deviceptr(arrs[1])), 1.0)
    acc.exit_data(delete=arrs[:2])
    assert acc.stats()["memory_in_use"] == 0


@pytest.mark.parametrize("form", ["enter_data", "data", "create then copyin"])
def test_out_of_memory_names_the_array_that_did_not_fit(small_emulated, form):
    """API.md §7: the message names the array whose allocation failed — not the one
    allocated before it (the rollback loop rebound the failing step)."""
    small, fits, huge = np.ones(16), np.ones(256), np.zeros(4096)  # 32 KiB > 10 KiB
    with pytest.raises(acc.OutOfMemoryError, match=r"cannot map 'huge' \(shape \(4096,\)") as raised:
        if form == "enter_data":
            acc.enter_data(copyin=[small, fits, huge])
        elif form == "data":
            with acc.data(copyin=[small, fits, huge]):
                pass
        else:
            acc.enter_data(create=[fits], copyin=[huge])
    assert raised.value.name == "huge" and raised.value.nbytes == huge.nbytes
    assert acc.stats()["memory_in_use"] == 0


def test_out_of_memory_rolls_back_present_increments_too(small_emulated):
    p = np.full(256, 5.0)  # 2 KiB, already present
    acc.copyin(p)
    arrs = [p] + [np.full(512, float(k)) for k in range(4)]
    before = snapshot(*arrs)
    with pytest.raises(acc.OutOfMemoryError):
        acc.enter_data(create=arrs)
    assert_same(before, snapshot(*arrs), traffic=False)
    assert tuple(acc.refcounts(p)) == (0, 1)
    with pytest.raises(acc.OutOfMemoryError):
        with acc.data(copy=arrs[:1], copyin=arrs[1:]):
            pass
    assert_same(before, snapshot(*arrs), traffic=False)
    acc.delete(p)


def test_out_of_memory_single_array_and_malloc(small_emulated):
    big = np.zeros(2048)  # 16 KiB > 10 KiB
    with unchanged(acc.OutOfMemoryError, big, traffic=False):
        acc.copyin(big)
    with unchanged(acc.OutOfMemoryError, big, traffic=False) as ei:
        acc.create(big)
    assert_message_names(ei.value, big)
    with pytest.raises(acc.OutOfMemoryError):
        acc.malloc((16 * 1024,), np.uint8)
    assert acc.stats()["memory_in_use"] == 0


# --------------------------------------------------------------------------- devices


def test_unknown_device_type(emulated):
    for bad in ("gpu", "opencl"):
        with pytest.raises(acc.DeviceTypeUnavailableError) as ei:
            acc.set_device_type(bad)
        assert ei.value.code == "device_type_unavailable"
        assert acc.get_device_type() == "emulated"
    with pytest.raises(acc.DeviceTypeUnavailableError):
        acc.init("gpu")
    with pytest.raises(acc.DeviceTypeUnavailableError):
        acc.set_device_num(0, "gpu")


def test_cuda_without_gpu(emulated):
    if acc.get_num_devices("cuda") > 0:
        pytest.skip("a GPU is usable here")
    assert acc.get_num_devices("cuda") == 0
    assert acc.get_num_devices("nvidia") == 0
    with pytest.raises(acc.DeviceTypeUnavailableError):
        acc.set_device_type("cuda")
    assert acc.get_device_type() == "emulated"


def test_device_number_out_of_range(emulated):
    n = acc.get_num_devices("emulated")
    assert n >= 1
    for bad in (n, n + 5):
        with pytest.raises(acc.DeviceUnavailableError) as ei:
            acc.set_device_num(bad, "emulated")
        assert ei.value.code == "device_unavailable"
        assert acc.get_device_num("emulated") == 0
    with pytest.raises(acc.DeviceUnavailableError):
        acc.set_device_num(n)


def test_set_device_num_error_leaves_table_alone(emulated):
    a = np.arange(4.0)
    acc.copyin(a)
    with unchanged(acc.DeviceUnavailableError, a):
        acc.set_device_num(99, "emulated")
    assert acc.is_present(a)
    acc.delete(a)


# --------------------------------------------------------------------------- clauses and async


@pytest.mark.parametrize(
    "call",
    [
        lambda a: acc.data(copyinn=[a]).__enter__(),
        lambda a: acc.data(copy=[a], pcopyinn=[a]).__enter__(),  # (pcopy is copy's alias)
        lambda a: acc.enter_data(copy=[a]),
        lambda a: acc.enter_data(copyin=[a], delete=[a]),
        lambda a: acc.exit_data(copyin=[a]),
        lambda a: acc.exit_data(copyout=[a], create=[a]),
        lambda a: acc.update(copy=[a]),
        lambda a: acc.update(devices=[a]),
        lambda a: acc.host_data(use_devices=[a]).__enter__(),
    ],
    ids=["data_copyinn", "data_pcopyinn", "enter_copy", "enter_delete", "exit_copyin",
         "exit_create", "update_copy", "update_devices", "host_data_use_devices"],
)
def test_unknown_clause_keywords(emulated, call):
    a = np.arange(4.0)
    b = np.arange(4.0)
    acc.copyin(b)
    before = snapshot(a, b)
    with pytest.raises(acc.ClauseError) as ei:
        call(a)
    assert isinstance(ei.value, TypeError)
    assert isinstance(ei.value, acc.InvalidArgumentError)
    assert ei.value.code == "invalid_argument"
    assert_same(before, snapshot(a, b))
    assert not acc.is_present(a)


@pytest.mark.parametrize("bad", [-3, -100, 1.5, "q"])
def test_invalid_async_values(emulated, bad):
    a = np.arange(4.0)
    for call in (lambda: acc.copyin(a, async_=bad),
                 lambda: acc.enter_data(copyin=a, async_=bad),
                 lambda: acc.update_device(a, async_=bad)):
        with unchanged(acc.InvalidAsyncError, a, code="invalid_async"):
            call()
    assert len(acc.present_table()) == 0


def test_valid_async_values_behave_as_sync(emulated):
    a = np.arange(4.0)
    for q in (None, acc.async_sync, acc.async_noval, 0, 7):
        acc.copyin(a, async_=q)
    acc.wait_all()
    assert tuple(acc.refcounts(a)) == (0, 5)
    acc.copyout(a, finalize=True, async_=acc.async_noval)
    acc.wait_all()
    assert not acc.is_present(a)


def test_region_entered_twice(emulated):
    a = np.arange(4.0)
    r = acc.data(copy=a)
    with r:
        with unchanged(acc.InvalidArgumentError, a):
            r.__enter__()
    assert not acc.is_present(a)
    with pytest.raises(acc.InvalidArgumentError):
        with r:
            pass
    assert not acc.is_present(a)


# --------------------------------------------------------------------------- exceptions in regions


def test_exception_in_region_runs_exit_actions_and_copies_back(emulated):
    a = np.zeros(4)
    with pytest.raises(KeyError):
        with acc.data(copy=a):
            acc.deviceptr(a)[...] = 3.0
            raise KeyError("boom")
    assert not acc.is_present(a)
    np.testing.assert_array_equal(a, 3.0)


def _execution_error():
    for args in (("kernel failed",), ()):
        try:
            return acc.ExecutionError(*args)
        except TypeError:
            continue
    pytest.skip("cannot construct ExecutionError by hand")


def test_execution_error_in_region_skips_copy_back(emulated):
    a = np.zeros(4)
    with pytest.raises(acc.ExecutionError):
        with acc.data(copy=a, copyout=np.zeros(2)):
            acc.deviceptr(a)[...] = 3.0
            raise _execution_error()
    assert not acc.is_present(a)
    np.testing.assert_array_equal(a, 0.0)
    assert len(acc.present_table()) == 0


# --------------------------------------------------------------------------- error callbacks


def test_error_callbacks_run_in_order_before_raise(emulated):
    seen = []

    def cb1(err):
        seen.append(("cb1", type(err)))

    def cb2(err):
        seen.append(("cb2", type(err)))

    a = np.arange(4.0)
    acc.register_error_callback(cb1)
    acc.register_error_callback(cb2)
    try:
        with pytest.raises(acc.NotPresentError):
            acc.update_device(a)
    finally:
        acc.unregister_error_callback(cb1)
        acc.unregister_error_callback(cb2)
    assert seen == [("cb1", acc.NotPresentError), ("cb2", acc.NotPresentError)]
    with pytest.raises(acc.NotPresentError):
        acc.update_device(a)
    assert len(seen) == 2


def test_non_contiguous_data_clause_error_names_the_variable(emulated):
    base = np.arange(20.0)
    every_other = base[::2]
    with pytest.raises(acc.InvalidDataSectionError) as raised:
        acc.copyin(every_other)
    assert str(raised.value).startswith("'every_other' (shape (10,), dtype float64")
    assert acc.present_table() == []


@acc.parallel_loop("if(x)")
def _if_array(x):
    for i in range(x.shape[0]):
        x[i] = 1.0


@acc.parallel_loop("async(x)")
def _async_array(x):
    for i in range(x.shape[0]):
        x[i] = 1.0


@acc.parallel_loop
def _plain(x):
    for i in range(x.shape[0]):
        x[i] = 1.0


@pytest.mark.parametrize("call", ["if clause", "if_ at the call", "async clause", "async_ at the call"])
def test_a_clause_value_of_the_wrong_kind_is_named_not_numpys_error(call):
    """An array where the if clause wants a truth value, or the async clause a queue:
    ``InvalidArgumentError`` / ``InvalidAsyncError`` naming the clause (NumPy's "truth value
    of an array is ambiguous" named nothing), before any data action."""
    x = np.zeros(4)
    expected = acc.InvalidAsyncError if "async" in call else acc.InvalidArgumentError
    match = "invalid async value" if "async" in call else "if clause's value .ndarray. has no truth value"
    with pytest.raises(expected, match=match):
        if call == "if clause":
            _if_array(x)
        elif call == "if_ at the call":
            _plain(x, if_=x)
        elif call == "async clause":
            _async_array(x)
        else:
            _plain(x, async_=x)
    assert x.tolist() == [0.0] * 4


def test_unregistering_a_callback_never_registered_says_which():
    def never(error):
        pass

    with pytest.raises(ValueError, match=r"unregister_error_callback: .*never.* is not registered"):
        acc.unregister_error_callback(never)


@acc.parallel_loop
def _increment(x):
    for i in range(x.shape[0]):
        x[i] += 1.0


def test_a_strided_view_of_partly_present_data_is_partly_present(emulated):
    """A non-contiguous view whose elements lie partly in a mapping: ``PartlyPresentError``
    (OpenACC 3.3 §2.7.3), as for a contiguous one; it said "not present"."""
    b = np.zeros(10)
    acc.copyin(b[0:5])
    with pytest.raises(acc.PartlyPresentError, match="partly present"):
        _increment(b[::3])
    assert acc.refcounts(b[0:5]) == (0, 1) and b.tolist() == [0.0] * 10
    acc.delete(b[0:5])


@pytest.mark.parametrize("device_type", ["host", "emulated"])
def test_is_present_of_an_object_array_is_refused_as_the_other_routines_refuse_it(device_type):
    """API.md §2: host data is a NumPy array of any dtype but object. ``is_present``
    answered True on host and False on emulated, while ``deviceptr`` and ``refcounts``
    raised: now all refuse it, by name."""
    acc.set_device_type(device_type)
    try:
        objects = np.array([1, "a"], dtype=object)
        for routine in (acc.is_present, acc.deviceptr, acc.refcounts):
            with pytest.raises(acc.InvalidArgumentError, match="object dtype"):
                routine(objects)
    finally:
        acc.set_device_type("host")


def test_host_data_without_arrays_is_a_clause_error():
    """``acc.host_data(use_device=None)`` gave Python's IndexError (no AccError, no error
    callback): the construct needs its use_device clause (OpenACC 3.3 §2.8)."""
    with pytest.raises(acc.ClauseError, match="use_device"):
        with acc.host_data(use_device=None):
            pytest.fail("the block ran")  # pragma: no cover


def test_null_and_none_device_type_answers_as_the_spec_says():
    """C's NULL and ``acc_device_none``: ``acc_deviceptr(NULL)``/``acc_hostptr(NULL)`` are
    NULL (OpenACC 3.3 §3.2.23-24); ``acc_get_num_devices(acc_device_none)`` is 0 and
    ``acc_get_device_num(acc_device_none)`` -1 (§3.2.1, §3.2.5); no code runs on
    ``acc_device_none`` (§3.2.17)."""
    from pyacc.openacc import acc_device_none

    assert acc.deviceptr(None) is None and acc.hostptr(None) is None
    assert acc.get_num_devices(acc_device_none) == 0
    assert acc.get_device_num(acc_device_none) == -1
    assert acc.on_device(acc_device_none) is False
