"""Conformance scenarios of openacc-semantics.md §4 that need neither compute nor async.

Each scenario is one named test, run on the emulated device (separate device memory).
Device contents are observed and "written by device code" through ``acc.deviceptr(a)``,
which on the emulated device is a numpy array living in the device's own memory: reading
it shows what the device holds, writing to it stands in for a kernel writing the data.
``acc.memcpy_*`` and ``acc.update_*`` are used as the other observation paths.

Counters are checked with ``acc.refcounts(a) -> (structured, dynamic)``.
"""

import numpy as np
import pytest

import pyacc as acc


# --------------------------------------------------------------------------- helpers


def addr(x):
    """Address of the first byte of a numpy (host or emulated device) array."""
    return x.__array_interface__["data"][0]


def dev(a):
    """A *copy* of what the device holds for ``a`` (read through deviceptr)."""
    d = acc.deviceptr(a)
    assert d is not None, "expected a to be present"
    return np.array(d, copy=True)


def dev_read_memcpy(a):
    """What the device holds for ``a``, read through memcpy_from_device."""
    out = np.empty_like(a)
    acc.memcpy_from_device(out, acc.deviceptr(a))
    return out


def dev_write(a, values):
    """Stand-in for device code writing ``values`` into the device copy of ``a``."""
    d = acc.deviceptr(a)
    assert d is not None, "expected a to be present"
    d[...] = values


def rc(a):
    return tuple(acc.refcounts(a))


def table_len():
    return len(acc.present_table())


# --------------------------------------------------------------------------- S1


def test_s1_structured_region_between_dynamic_copies(emulated):
    a = np.arange(8, dtype=np.float64)
    host0 = a.copy()

    acc.copyin(a)
    assert rc(a) == (0, 1)
    np.testing.assert_array_equal(dev(a), host0)  # the copyin transferred
    acc.copyin(a)
    assert rc(a) == (0, 2)

    with acc.data(copy=a):
        assert rc(a) == (1, 2)
        acc.copyin(a)
        assert rc(a) == (1, 3)
        dev_write(a, 100.0 + host0)
    # structured exit: S -> 0 but D == 3, so no copy back
    assert rc(a) == (0, 3)
    assert acc.is_present(a)
    np.testing.assert_array_equal(a, host0)

    acc.copyout(a)
    assert rc(a) == (0, 2)
    assert acc.is_present(a)
    np.testing.assert_array_equal(a, host0)
    acc.copyout(a)
    assert rc(a) == (0, 1)
    assert acc.is_present(a)
    np.testing.assert_array_equal(a, host0)
    acc.copyout(a)
    assert rc(a) == (0, 0)
    assert not acc.is_present(a)
    assert acc.deviceptr(a) is None
    # the host receives the device data
    np.testing.assert_array_equal(a, 100.0 + host0)
    assert table_len() == 0


# --------------------------------------------------------------------------- S2


def test_s2_dynamic_count_falling_to_zero_inside_region_keeps_lifetime(emulated):
    a = np.arange(6, dtype=np.float64)
    host0 = a.copy()
    acc.copyin(a)
    assert rc(a) == (0, 1)
    with acc.data(copy=a):
        assert rc(a) == (1, 1)
        dev_write(a, -1.0)
        acc.copyout(a)
        assert rc(a) == (1, 0)
        assert acc.is_present(a)
        # no copy until both counters are 0: host unchanged
        np.testing.assert_array_equal(a, host0)
        np.testing.assert_array_equal(dev(a), -1.0)
    # the copy clause's exit copies back
    assert rc(a) == (0, 0)
    assert not acc.is_present(a)
    np.testing.assert_array_equal(a, -1.0)
    assert table_len() == 0


# --------------------------------------------------------------------------- S3


def test_s3_reentering_dynamic_lifetime_inside_region(emulated):
    a = np.arange(5, dtype=np.float64)
    host0 = a.copy()
    acc.copyin(a)
    with acc.data(copy=a):
        assert rc(a) == (1, 1)
        dev_write(a, 7.0)
        acc.copyout(a)
        assert rc(a) == (1, 0)
        np.testing.assert_array_equal(a, host0)  # no copy
        a[:] = 3.0  # the host changes its copy
        acc.copyin(a)
        assert rc(a) == (1, 1)
        assert acc.is_present(a)
        # present: the copyin is only an increment, no transfer
        np.testing.assert_array_equal(dev(a), 7.0)
    assert rc(a) == (0, 1)
    assert acc.is_present(a)
    np.testing.assert_array_equal(a, 3.0)  # no copy at region exit (D == 1)
    acc.copyout(a)
    assert not acc.is_present(a)
    assert rc(a) == (0, 0)
    np.testing.assert_array_equal(a, 7.0)


# --------------------------------------------------------------------------- S4


def test_s4_one_variable_of_multi_variable_region_escapes(emulated):
    b1 = np.full(4, 1.0)
    b2 = np.full(4, 2.0)
    b3 = np.full(4, 3.0)
    with acc.data(copy=[b1, b2, b3]):
        assert rc(b1) == rc(b2) == rc(b3) == (1, 0)
        acc.copyin(b2)
        assert rc(b2) == (1, 1)
        dev_write(b1, 10.0)
        dev_write(b2, 20.0)
        dev_write(b3, 30.0)
    assert not acc.is_present(b1)
    assert acc.is_present(b2)
    assert not acc.is_present(b3)
    assert rc(b2) == (0, 1)
    # b1 and b3 were copied back by the region's exit; b2 was not
    np.testing.assert_array_equal(b1, 10.0)
    np.testing.assert_array_equal(b2, 2.0)
    np.testing.assert_array_equal(b3, 30.0)
    assert table_len() == 1
    acc.copyout(b2)
    assert not acc.is_present(b2)
    np.testing.assert_array_equal(b2, 20.0)
    assert table_len() == 0


def test_s4_variant_b1_copied_in_twice_before_region(emulated):
    b1 = np.full(4, 1.0)
    b2 = np.full(4, 2.0)
    b3 = np.full(4, 3.0)
    acc.copyin(b1)
    acc.copyin(b1)
    with acc.data(copy=[b1, b2, b3]):
        assert rc(b1) == (1, 2)
        acc.copyin(b2)
        dev_write(b1, 10.0)
    assert rc(b1) == (0, 2)
    assert acc.is_present(b1)
    np.testing.assert_array_equal(b1, 1.0)
    acc.copyout(b1)
    assert acc.is_present(b1)
    assert rc(b1) == (0, 1)
    np.testing.assert_array_equal(b1, 1.0)
    acc.copyout(b1)
    assert not acc.is_present(b1)
    np.testing.assert_array_equal(b1, 10.0)
    acc.copyout(b2)
    assert not acc.is_present(b2)
    assert table_len() == 0


# --------------------------------------------------------------------------- S5


def test_s5_balanced_dynamic_operations_inside_region(emulated):
    a = np.arange(4, dtype=np.float64)
    host0 = a.copy()
    with acc.data(copy=a):
        acc.copyin(a)
        acc.copyin(a)
        assert rc(a) == (1, 2)
        dev_write(a, 9.0)
        acc.copyout(a)
        acc.copyout(a)
        assert rc(a) == (1, 0)
        assert acc.is_present(a)
        # the structured count is 1: the copyouts did not copy to the host
        np.testing.assert_array_equal(a, host0)
    assert not acc.is_present(a)
    assert rc(a) == (0, 0)
    np.testing.assert_array_equal(a, 9.0)


# --------------------------------------------------------------------------- S6


def test_s6_nested_regions_mixed_with_dynamic_operations(emulated):
    a = np.arange(4, dtype=np.float64)
    host0 = a.copy()
    acc.copyin(a)
    assert rc(a) == (0, 1)
    with acc.data(copy=a):
        assert rc(a) == (1, 1)
        acc.copyin(a)
        assert rc(a) == (1, 2)
        with acc.data(copy=a):
            assert rc(a) == (2, 2)
            with acc.data(copy=a):
                assert rc(a) == (3, 2)
                dev_write(a, 5.0)
            assert rc(a) == (2, 2)
        assert rc(a) == (1, 2)
        acc.copyout(a)
        assert rc(a) == (1, 1)
    assert rc(a) == (0, 1)
    np.testing.assert_array_equal(a, host0)
    acc.copyout(a)
    assert not acc.is_present(a)
    np.testing.assert_array_equal(a, 5.0)


# --------------------------------------------------------------------------- S7


def test_s7_members_mapped_as_separate_sections(emulated):
    # a "struct" whose two members are adjacent sections of one buffer
    s = np.arange(16, dtype=np.float64)
    sa, sb = s[:8], s[8:]
    acc.enter_data(create=[sa, sb])
    assert acc.is_present(sa) and acc.is_present(sb)
    assert rc(sa) == (0, 1) and rc(sb) == (0, 1)
    # adjacent mappings are two entries, never merged
    assert table_len() == 2
    assert not acc.is_present(s)  # the whole spans two mappings: not one present section
    acc.delete(sa)
    assert not acc.is_present(sa)
    assert acc.is_present(sb)
    assert table_len() == 1
    acc.delete(sb)
    assert not acc.is_present(sb)
    assert table_len() == 0


def test_s7_exit_data_directive_form(emulated):
    s = np.arange(16, dtype=np.int32)
    sa, sb = s[:8], s[8:]
    acc.enter_data(create=[sa, sb])
    acc.exit_data(delete=[sa])
    assert not acc.is_present(sa) and acc.is_present(sb)
    acc.exit_data(delete=sb)
    assert not acc.is_present(sb)
    assert table_len() == 0


# --------------------------------------------------------------------------- S8


def test_s8_exit_operations_while_only_structured_count_is_held(emulated):
    c0, c1 = 1.0, 2.0
    h = np.full(8, c0)
    with acc.data(copyin=h):
        assert rc(h) == (1, 0)
        h[:] = c1  # host writes c1
        acc.copyout(h, finalize=True)
        assert acc.is_present(h)
        assert rc(h) == (1, 0)
        np.testing.assert_array_equal(h, c1)  # no copy
        acc.copyout(h)
        assert acc.is_present(h)
        assert rc(h) == (1, 0)
        np.testing.assert_array_equal(h, c1)
        acc.copyin(h)
        assert rc(h) == (1, 1)
        np.testing.assert_array_equal(dev(h), c0)  # present: no transfer
        acc.copyout(h)
        assert rc(h) == (1, 0)
        assert acc.is_present(h)
        np.testing.assert_array_equal(h, c1)
        acc.copyin(h)
        acc.copyin(h)
        assert rc(h) == (1, 2)
        acc.copyout(h, finalize=True)
        assert rc(h) == (1, 0)
        assert acc.is_present(h)
        np.testing.assert_array_equal(h, c1)  # no copy
        acc.copyout(h)  # D == 0: no-op
        assert rc(h) == (1, 0)
        np.testing.assert_array_equal(h, c1)
        np.testing.assert_array_equal(dev(h), c0)
    # the copyin clause's exit deletes without copying back
    assert not acc.is_present(h)
    np.testing.assert_array_equal(h, c1)
    assert table_len() == 0


# --------------------------------------------------------------------------- S10


def test_s10_map_data_pins_the_dynamic_count(emulated):
    c0, c1 = 4.0, 5.0
    h = np.full(16, c0)
    d = acc.malloc(h.shape, h.dtype)
    acc.map_data(h, d)
    assert acc.is_present(h)
    assert rc(h) == (0, 1)
    rec = acc.present_table()
    assert len(rec) == 1 and rec[0].kind == "map_data"
    acc.update_device(h)
    np.testing.assert_array_equal(np.asarray(d), c0)  # the update landed in d itself
    h[:] = c1
    acc.exit_data(copyout=h)
    assert acc.is_present(h)
    assert rc(h) == (0, 1)
    np.testing.assert_array_equal(h, c1)  # no copy
    acc.copyout(h, finalize=True)
    assert acc.is_present(h)
    assert rc(h) == (0, 1)
    np.testing.assert_array_equal(h, c1)
    acc.copyin(h)
    acc.copyin(h)
    assert acc.is_present(h)
    assert rc(h) == (0, 3)
    np.testing.assert_array_equal(dev(h), c0)  # present: no transfer
    acc.copyout(h, finalize=True)
    assert acc.is_present(h)
    assert rc(h) == (0, 1)
    acc.copyout(h)
    assert acc.is_present(h)
    assert rc(h) == (0, 1)
    acc.delete(h)
    acc.delete(h, finalize=True)
    acc.exit_data(delete=h, finalize=True)
    assert acc.is_present(h)
    assert rc(h) == (0, 1)
    np.testing.assert_array_equal(h, c1)

    acc.reset_stats()
    in_use = acc.stats()["memory_in_use"]
    acc.unmap_data(h)
    assert not acc.is_present(h)
    assert rc(h) == (0, 0)
    assert table_len() == 0
    np.testing.assert_array_equal(h, c1)  # nothing copied
    # d is not freed: still allocated and still holding its contents
    st = acc.stats()
    assert st["free_count"] == 0
    assert st["d2h_count"] == 0
    assert st["memory_in_use"] == in_use
    out = np.empty_like(h)
    acc.memcpy_from_device(out, d)
    np.testing.assert_array_equal(out, c0)
    acc.free(d)
    assert acc.stats()["memory_in_use"] < in_use


# --------------------------------------------------------------------------- S11


def test_s11_unmap_ignores_dynamic_counts_and_interior_addresses(emulated):
    N = 256
    h = np.arange(N, dtype=np.uint8)
    d = acc.malloc((N,), np.uint8)
    acc.map_data(h, d)
    # acc_create(h+3, N-77)
    sub = h[3 : 3 + (N - 77)]
    ds = acc.create(sub)
    assert addr(ds) == addr(d) + 3
    assert ds.nbytes == N - 77
    assert addr(acc.deviceptr(sub)) == addr(d) + 3
    assert acc.hostptr(ds) is not None
    assert addr(acc.hostptr(ds)) == addr(h) + 3
    # acc_create(h, N)
    dh = acc.create(h)
    assert addr(dh) == addr(d)
    assert rc(h) == (0, 3)
    assert rc(sub) == (0, 3)
    acc.unmap_data(h)
    assert not acc.is_present(h)
    assert not acc.is_present(sub)
    assert rc(h) == (0, 0)
    assert table_len() == 0
    acc.free(d)


# --------------------------------------------------------------------------- S12


def test_s12a_unmap_after_create_is_an_error(emulated):
    h = np.zeros(98, dtype=np.uint8)
    acc.create(h)
    before = [(r.host_begin, r.host_end, r.structured, r.dynamic, r.kind) for r in acc.present_table()]
    with pytest.raises(acc.PresentError) as ei:
        acc.unmap_data(h)
    assert ei.value.code == "present"
    after = [(r.host_begin, r.host_end, r.structured, r.dynamic, r.kind) for r in acc.present_table()]
    assert before == after
    assert acc.is_present(h) and rc(h) == (0, 1)
    acc.delete(h)
    assert table_len() == 0


def test_s12b_unmap_after_enter_data_create_is_an_error(emulated):
    h = np.zeros(48, dtype=np.float32)
    acc.enter_data(create=h[0:24])
    with pytest.raises(acc.PresentError):
        acc.unmap_data(h[0:24])
    assert acc.is_present(h[0:24]) and rc(h[0:24]) == (0, 1)
    acc.exit_data(delete=h[0:24])
    assert table_len() == 0


def test_s12c_unmap_inside_data_create_region_is_an_error(emulated):
    h = np.zeros(64, dtype=np.float32)
    with acc.data(create=h[0:46]):
        with pytest.raises(acc.PresentError):
            acc.unmap_data(h[0:46])
        assert acc.is_present(h[0:46]) and rc(h[0:46]) == (1, 0)
    assert not acc.is_present(h[0:46])
    assert table_len() == 0


def test_s12d_unmap_of_map_data_under_structured_region_is_an_error(emulated):
    # CLACC caseUnmapAfterMapAndStructured: map_data, then a structured region on it
    h = np.zeros(32, dtype=np.float64)
    d = acc.malloc(h.shape, h.dtype)
    acc.map_data(h, d)
    with acc.data(present=h):
        assert rc(h) == (1, 1)
        with pytest.raises(acc.PresentError):
            acc.unmap_data(h)
        assert acc.is_present(h) and rc(h) == (1, 1)
    assert rc(h) == (0, 1)
    acc.unmap_data(h)  # fine once the structured count is back to 0
    assert not acc.is_present(h)
    acc.free(d)


# --------------------------------------------------------------------------- S13


def _table_snapshot():
    return [
        (r.host_begin, r.host_end, r.nbytes, r.structured, r.dynamic, r.kind)
        for r in acc.present_table()
    ]


def test_s13_map_data_twice_is_present_error(emulated):
    h = np.zeros(101, dtype=np.uint8)
    d1 = acc.malloc((101,), np.uint8)
    d2 = acc.malloc((101,), np.uint8)
    acc.map_data(h, d1)
    snap = _table_snapshot()
    with pytest.raises(acc.PresentError) as ei:
        acc.map_data(h, d2)
    assert ei.value.code == "present"
    assert _table_snapshot() == snap
    assert addr(acc.deviceptr(h)) == addr(d1)
    acc.unmap_data(h)
    acc.free(d1)
    acc.free(d2)


@pytest.mark.parametrize(
    "how",
    ["data_create", "enter_data_create", "extends_before", "extends_after", "subsumes", "subsumed"],
)
def test_s13_map_data_over_present_data_variants(emulated, how):
    buf = np.zeros(32, dtype=np.float64)
    h = buf[8:24]
    if how == "data_create":
        region = acc.data(create=h)
        region.__enter__()
        target = h
    else:
        region = None
        if how == "enter_data_create":
            acc.enter_data(create=h)
            target = h
        elif how == "extends_before":  # the new range starts before the mapping
            acc.enter_data(create=h)
            target = buf[4:12]
        elif how == "extends_after":
            acc.enter_data(create=h)
            target = buf[20:28]
        elif how == "subsumes":  # the new range contains the mapping
            acc.enter_data(create=h)
            target = buf[0:32]
        else:  # subsumed: the new range lies inside the mapping
            acc.enter_data(create=h)
            target = buf[10:14]
    d = acc.malloc(target.shape, target.dtype)
    snap = _table_snapshot()
    with pytest.raises(acc.PresentError):
        acc.map_data(target, d)
    assert _table_snapshot() == snap
    if region is not None:
        region.__exit__(None, None, None)
    else:
        acc.exit_data(delete=h)
    assert table_len() == 0
    acc.free(d)


# --------------------------------------------------------------------------- S14


def test_s14_free_of_mapped_memory_is_refused(emulated):
    d = acc.malloc((98,), np.uint8)
    h = np.zeros(89, dtype=np.uint8)
    acc.map_data(h, d)
    snap = _table_snapshot()
    with pytest.raises(acc.PresentError):
        acc.free(d)
    assert _table_snapshot() == snap
    assert acc.is_present(h)
    acc.update_device(h)  # the mapping still works: d was not freed
    acc.unmap_data(h)
    acc.free(d)


# --------------------------------------------------------------------------- S15


def test_s15_exit_operations_on_never_mapped_data_are_noops(emulated):
    from pyacc import openacc as C

    a = np.arange(10, dtype=np.float64)
    host0 = a.copy()
    for fin in (False, True):
        for q in (None, 3):
            acc.exit_data(copyout=a, finalize=fin, async_=q)
            acc.exit_data(delete=a, finalize=fin, async_=q)
            acc.copyout(a, finalize=fin, async_=q)
            acc.delete(a, finalize=fin, async_=q)
    C.acc_copyout(a)
    C.acc_copyout_async(a, 1)
    C.acc_copyout_finalize(a)
    C.acc_copyout_finalize_async(a, 1)
    C.acc_delete(a)
    C.acc_delete_async(a, 1)
    C.acc_delete_finalize(a)
    C.acc_delete_finalize_async(a, 1)
    acc.wait_all()
    C.acc_wait_all()
    np.testing.assert_array_equal(a, host0)
    assert not acc.is_present(a)
    assert table_len() == 0
    st = acc.stats()
    for k in ("h2d_count", "d2h_count", "alloc_count", "free_count"):
        assert st[k] == 0, k


# --------------------------------------------------------------------------- S16


def test_s16_present_clause_on_absent_data(emulated):
    a = np.zeros(8)
    b = np.zeros(8)
    c = np.zeros(8)
    d = acc.malloc(c.shape, c.dtype)
    acc.map_data(c, d)
    snap = _table_snapshot()
    entered = False
    with pytest.raises(acc.NotPresentError) as ei:
        with acc.data(present=[a, c, b]):
            entered = True
    assert not entered
    assert ei.value.code == "not_present"
    assert isinstance(ei.value, LookupError)
    # all-or-nothing: c's structured count was not left incremented
    assert _table_snapshot() == snap
    assert rc(c) == (0, 1)
    acc.unmap_data(c)
    acc.free(d)


# --------------------------------------------------------------------------- S17


def test_s17_partly_present_copyin_extends_after(emulated):
    arr = np.zeros(2, dtype=np.int32)
    with acc.data(create=arr[0:1]):
        snap = _table_snapshot()
        with pytest.raises(acc.PartlyPresentError) as ei:
            acc.copyin(arr)
        assert ei.value.code == "partly_present"
        assert _table_snapshot() == snap
    assert table_len() == 0


@pytest.mark.parametrize("routine", ["copyin", "create", "enter_copyin", "data_copy", "data_present"])
@pytest.mark.parametrize("shape", ["before", "after", "subsumes", "concat2"])
def test_s17_partly_present_variants(emulated, routine, shape):
    arr = np.arange(4, dtype=np.int32)
    if shape == "before":  # request starts before the mapping
        mapped = [arr[1:3]]
        req = arr[0:2]
    elif shape == "after":
        mapped = [arr[1:3]]
        req = arr[2:4]
    elif shape == "subsumes":  # request fully contains the mapping
        mapped = [arr[1:3]]
        req = arr[0:4]
    else:  # spans two adjacent mappings
        mapped = [arr[0:1], arr[1:3]]
        req = arr[0:3]
    acc.enter_data(create=mapped)
    snap = _table_snapshot()
    with pytest.raises(acc.PartlyPresentError):
        if routine == "copyin":
            acc.copyin(req)
        elif routine == "create":
            acc.create(req)
        elif routine == "enter_copyin":
            acc.enter_data(copyin=req)
        elif routine == "data_copy":
            with acc.data(copy=req):
                pass
        else:
            with acc.data(present=req):
                pass
    assert _table_snapshot() == snap
    assert not acc.is_present(req)
    acc.exit_data(delete=mapped)
    assert table_len() == 0


# --------------------------------------------------------------------------- S18


def test_s18_dynamic_routines_inside_structured_only_lifetime(emulated):
    ci = np.array([10], dtype=np.int64)
    cr = np.array([20], dtype=np.int64)
    co = np.array([30], dtype=np.int64)
    dl = np.array([50], dtype=np.int64)
    with acc.data(create=[ci, cr, co, dl]):
        dev_write(ci, 11)
        dev_write(cr, 21)
        dev_write(co, 31)
        dev_write(dl, 51)
        dci = acc.copyin(ci)
        assert addr(dci) == addr(acc.deviceptr(ci))  # the existing device copy
        assert dev(ci)[0] == 11  # no transfer
        assert ci[0] == 10
        dcr = acc.create(cr)
        assert addr(dcr) == addr(acc.deviceptr(cr))
        assert dev(cr)[0] == 21
        acc.copyout(co)
        acc.delete(dl)
        assert rc(co) == (1, 0) and rc(dl) == (1, 0)
        assert co[0] == 30
        assert rc(ci) == (1, 1) and rc(cr) == (1, 1)
    assert acc.is_present(ci) and acc.is_present(cr)
    assert rc(ci) == (0, 1) and rc(cr) == (0, 1)
    assert not acc.is_present(co) and not acc.is_present(dl)
    assert co[0] == 30 and dl[0] == 50  # host values unchanged
    assert ci[0] == 10 and cr[0] == 20
    acc.exit_data(delete=[ci, cr])
    assert not acc.is_present(ci) and not acc.is_present(cr)
    assert ci[0] == 10 and cr[0] == 20
    assert table_len() == 0


# --------------------------------------------------------------------------- S19


def test_s19_subranges_share_the_enclosing_mappings_counters(emulated):
    dyn = np.arange(4, dtype=np.int32)
    sec = dyn[1:3]  # C: dyn[1:2] (start 1, length 2)
    acc.enter_data(create=sec)
    assert rc(sec) == (0, 1)
    d2 = acc.copyin(dyn[2:3])  # acc_copyin(dyn+2, 1 element)
    assert addr(d2) == addr(acc.deviceptr(dyn[1:2])) + 4
    assert addr(d2) == addr(acc.deviceptr(sec)) + 4
    assert rc(sec) == (0, 2)
    assert rc(dyn[2:3]) == (0, 2)
    assert rc(dyn[1:2]) == (0, 2)
    assert table_len() == 1
    acc.delete(dyn[2:3])
    assert rc(sec) == (0, 1)
    assert acc.is_present(sec)
    assert not acc.is_present(dyn[0:1])
    assert not acc.is_present(dyn[3:4])
    acc.exit_data(delete=sec)
    assert not acc.is_present(sec)
    assert table_len() == 0


def test_s19_contained_view_device_offset_and_update(emulated):
    a = np.arange(10, dtype=np.float64)
    acc.copyin(a)
    v = a[3:7]
    dv = acc.deviceptr(v)
    assert addr(dv) == addr(acc.deviceptr(a)) + 3 * 8
    assert dv.shape == (4,)
    dev_write(a, 0.0)
    a[3:7] = 42.0
    a[0] = -5.0
    acc.update_device(v)  # only the view's elements move
    expect = np.zeros(10)
    expect[3:7] = 42.0
    np.testing.assert_array_equal(dev(a), expect)
    np.testing.assert_array_equal(dev_read_memcpy(a), expect)
    acc.delete(a)


# --------------------------------------------------------------------------- S25


def test_s25_present_region_can_end_a_lifetime(emulated):
    i = np.array([7.0, 8.0])
    host0 = i.copy()
    acc.enter_data(create=i)
    assert rc(i) == (0, 1)
    with acc.data(present=i):
        assert rc(i) == (1, 1)
        dev_write(i, 99.0)
        acc.exit_data(delete=i)
        assert rc(i) == (1, 0)
        assert acc.is_present(i)
    # the present clause's exit is a delete action: absent, nothing copied, no error
    assert rc(i) == (0, 0)
    assert not acc.is_present(i)
    np.testing.assert_array_equal(i, host0)
    assert acc.stats()["d2h_count"] == 0
    assert table_len() == 0


# --------------------------------------------------------------------------- S27


def test_s27_zero_size_arrays_are_always_present_and_inert(emulated):
    z = np.zeros(0, dtype=np.float64)
    assert acc.is_present(z)
    assert rc(z) == (0, 0)
    acc.copyin(z)
    acc.create(z)
    acc.update_device(z)
    acc.update_self(z)
    acc.copyout(z)
    acc.copyout(z, finalize=True)
    acc.delete(z)
    acc.enter_data(copyin=z, create=np.zeros((3, 0)))
    acc.exit_data(copyout=z, delete=np.zeros((3, 0)))
    acc.update(self=z, device=z)
    with acc.data(copy=z, present=np.zeros(0, dtype=np.int8)):
        assert acc.is_present(z)
    assert rc(z) == (0, 0)
    assert table_len() == 0
    st = acc.stats()
    for k in ("h2d_count", "d2h_count", "alloc_count", "free_count", "h2d_bytes", "d2h_bytes"):
        assert st[k] == 0, k


def test_s27_zero_size_view_of_mapped_data(emulated):
    a = np.arange(6, dtype=np.float64)
    acc.copyin(a)
    acc.reset_stats()
    e = a[3:3]
    assert acc.is_present(e)
    acc.update_device(e)  # bytes == 0: no action
    acc.update_self(e)
    acc.copyin(e)
    acc.delete(e, finalize=True)
    assert rc(a) == (0, 1)
    assert table_len() == 1
    st = acc.stats()
    assert st["h2d_count"] == 0 and st["d2h_count"] == 0
    acc.delete(a)
    # zero-size arrays stay present when nothing is mapped at all
    assert acc.is_present(a[2:2])


# --------------------------------------------------------------------------- S28


def test_s28_copy_region_then_copyin_is_present_or(emulated):
    i = np.array([1.0])
    with acc.data(copy=i):
        acc.copyin(i)
        assert rc(i) == (1, 1)
    assert rc(i) == (0, 1)
    assert acc.is_present(i)
    acc.delete(i)
    assert not acc.is_present(i)


def test_s28_copyin_twice_and_copyin_then_copy_region(emulated):
    i = np.array([1.0, 2.0])
    acc.copyin(i)
    acc.copyin(i)
    assert rc(i) == (0, 2)
    # OpenACC >= 2.5: copy on present data is a present increment, not an error
    with acc.data(copy=i):
        assert rc(i) == (1, 2)
    assert rc(i) == (0, 2)
    with acc.data(copyin=i):
        assert rc(i) == (1, 2)
    acc.copyout(i, finalize=True)
    assert not acc.is_present(i)


# --------------------------------------------------------------------------- S29


def test_s29_present_or_aliases_and_finalize_round_trip(emulated):
    h = np.arange(12, dtype=np.float64)
    host0 = h.copy()
    d = acc.create(h)  # present_or_create on absent data
    assert rc(h) == (0, 1)
    dev_write(h, -3.0)  # the device has its own values
    for f in (acc.create, acc.copyin, acc.create, acc.copyin):
        dd = f(h)
        assert addr(dd) == addr(d)
    assert rc(h) == (0, 5)
    np.testing.assert_array_equal(dev(h), -3.0)  # no transfer happened
    np.testing.assert_array_equal(h, host0)
    acc.copyout(h, finalize=True)
    assert not acc.is_present(h)
    np.testing.assert_array_equal(h, -3.0)  # the host gets the device values
    h[:] = host0
    acc.copyin(h)  # a new mapping initialised from the host
    np.testing.assert_array_equal(dev(h), host0)
    dev_write(h, 8.0)
    acc.update_self(h)
    np.testing.assert_array_equal(h, 8.0)
    assert acc.is_present(h)
    assert rc(h) == (0, 1)
    acc.delete(h, finalize=True)
    assert not acc.is_present(h)
    assert table_len() == 0


def test_s29_c_spellings_are_the_same_objects(emulated):
    from pyacc import openacc as C

    assert C.acc_copyin is acc.copyin
    assert C.acc_create is acc.create
    assert C.acc_copyout is acc.copyout
    assert C.acc_is_present is acc.is_present
    assert C.acc_deviceptr is acc.deviceptr
    assert C.acc_async_sync == acc.async_sync == -2
    assert C.acc_async_noval == acc.async_noval == -1
    h = np.arange(4.0)
    C.acc_copyin(h)
    C.acc_copyin_async(h, 2)
    acc.wait_all()
    assert rc(h) == (0, 2)
    C.acc_delete_finalize(h)
    assert not C.acc_is_present(h)


# =========================================================================== beyond §4
# Contract points of API.md §3–4 and the lead's decisions that the scenarios above do not
# reach: stats, present_table records, update ordering, if_=False, region.device,
# memcpy_device, shutdown, properties.


def test_stats_count_transfers_and_allocations(emulated):
    st = acc.stats()
    for k in ("h2d_count", "h2d_bytes", "d2h_count", "d2h_bytes", "alloc_count", "alloc_bytes",
              "free_count", "free_bytes", "launch_count", "memory_in_use"):
        assert k in st, k
        assert st[k] == 0, k
    a = np.arange(10, dtype=np.float64)  # 80 bytes
    acc.copyin(a)
    st = acc.stats()
    assert (st["h2d_count"], st["h2d_bytes"]) == (1, 80)
    assert st["alloc_count"] == 1 and st["alloc_bytes"] >= 80
    assert st["memory_in_use"] >= 80
    acc.copyin(a)  # present: no transfer, no allocation
    acc.update_device(a[2:4])
    st = acc.stats()
    assert (st["h2d_count"], st["h2d_bytes"]) == (2, 96)
    assert st["alloc_count"] == 1
    acc.reset_stats()
    st = acc.stats()
    assert st["h2d_count"] == 0 and st["alloc_count"] == 0
    assert st["memory_in_use"] >= 80  # reset_stats does not zero memory_in_use
    acc.copyout(a, finalize=True)
    st = acc.stats()
    assert (st["d2h_count"], st["d2h_bytes"]) == (1, 80)
    assert st["free_count"] == 1 and st["free_bytes"] >= 80
    assert st["memory_in_use"] == 0
    assert st["launch_count"] == 0


def test_create_transfers_nothing(emulated):
    a = np.arange(10.0)
    acc.create(a)
    acc.delete(a)
    with acc.data(create=a):
        pass
    acc.enter_data(create=a)
    acc.exit_data(delete=a)
    st = acc.stats()
    assert st["h2d_count"] == 0 and st["d2h_count"] == 0
    assert st["alloc_count"] == 3 and st["free_count"] == 3


def test_present_table_records(emulated):
    buf = np.zeros((4, 6), dtype=np.float32)
    v = buf[1:3]
    acc.copyin(v)
    with acc.data(copy=v):
        (r,) = acc.present_table()
        assert r.host_begin == addr(v)
        assert r.host_end == addr(v) + v.nbytes
        assert r.nbytes == v.nbytes == 48
        assert tuple(r.shape) == (2, 6)
        assert np.dtype(r.dtype) == np.float32
        assert (r.structured, r.dynamic) == (1, 1)
        assert r.kind == "normal"
        assert hasattr(r, "name")
    acc.delete(v)
    assert acc.present_table() == [] or len(acc.present_table()) == 0


def test_present_table_is_ordered_list_of_all_mappings(emulated):
    arrs = [np.zeros(k + 1) for k in range(5)]
    for x in arrs:
        acc.create(x)
    recs = acc.present_table()
    assert len(recs) == 5
    assert sorted((r.host_begin, r.host_end) for r in recs) == sorted(
        (addr(x), addr(x) + x.nbytes) for x in arrs
    )
    acc.exit_data(delete=arrs)


def test_dump_present_table_prints(emulated, capsys):
    a = np.zeros(5)
    acc.create(a)
    acc.dump_present_table()
    cap = capsys.readouterr()
    out = cap.out + cap.err  # "prints it": stdout or stderr
    assert ("%x" % addr(a)) in out.lower()
    acc.delete(a)


def test_update_runs_in_keyword_order(emulated):
    a = np.full(4, 1.0)
    acc.copyin(a)
    dev_write(a, 2.0)
    acc.update(self=a, device=a)  # host <- 2, then device <- 2
    np.testing.assert_array_equal(a, 2.0)
    np.testing.assert_array_equal(dev(a), 2.0)
    a[:] = 1.0
    dev_write(a, 3.0)
    acc.update(device=a, self=a)  # device <- 1, then host <- 1
    np.testing.assert_array_equal(a, 1.0)
    np.testing.assert_array_equal(dev(a), 1.0)
    a[:] = 5.0
    dev_write(a, 6.0)
    acc.update(host=a[:2])  # host is a synonym of self
    np.testing.assert_array_equal(a, [6.0, 6.0, 5.0, 5.0])
    acc.delete(a)


def test_update_several_subarrays_of_one_array(emulated):
    a = np.arange(8.0)
    acc.copyin(a)
    dev_write(a, 0.0)
    acc.update(device=[a[0:2], a[6:8]])
    np.testing.assert_array_equal(dev(a), [0, 1, 0, 0, 0, 0, 6, 7])
    acc.delete(a)


def test_if_false_does_nothing(emulated):
    a = np.arange(4.0)
    with acc.data(copy=a, present=np.zeros(3), if_=False):
        assert not acc.is_present(a)
    acc.enter_data(copyin=a, if_=False)
    assert not acc.is_present(a)
    acc.update(device=a, if_=False)  # absent, but if_=False: no action, no error
    acc.copyin(a)
    acc.exit_data(delete=a, finalize=True, if_=False)
    assert acc.is_present(a)
    dev_write(a, 9.0)
    acc.update(self=a, if_=False)
    np.testing.assert_array_equal(a, np.arange(4.0))
    acc.delete(a)
    st = acc.stats()
    assert st["alloc_count"] == 1 and st["h2d_count"] == 1 and st["d2h_count"] == 0


def test_region_device_and_host_data(emulated):
    a = np.arange(6.0)
    b = np.arange(3.0)
    with acc.data(copyin=a, copy=b) as r:
        assert addr(r.device(a)) == addr(acc.deviceptr(a))
        assert addr(r.device(a[2:4])) == addr(acc.deviceptr(a)) + 16
        with acc.host_data(use_device=a) as da:
            assert addr(da) == addr(acc.deviceptr(a))
            assert not np.shares_memory(da, a)
        with acc.host_data(use_device=[a, b]) as pair:
            assert isinstance(pair, tuple) and len(pair) == 2
            da, db = pair
            db[...] = da[:3] * 2  # "an external device library" writes device memory
    np.testing.assert_array_equal(b, [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(a, np.arange(6.0))


def test_copyout_clause_region_creates_then_copies_back(emulated):
    c = np.zeros(5)
    with acc.data(copyout=c):
        assert rc(c) == (1, 0)
        assert acc.stats()["h2d_count"] == 0  # create action: no copy in
        dev_write(c, 4.0)
    np.testing.assert_array_equal(c, 4.0)
    assert not acc.is_present(c)


def test_no_create_clause(emulated):
    a = np.arange(4.0)
    b = np.arange(4.0)
    acc.copyin(b)
    with acc.data(no_create=[a, b]):
        assert not acc.is_present(a)
        assert rc(b) == (1, 1)
    assert rc(b) == (0, 1)
    assert not acc.is_present(a)
    acc.delete(b)


def test_memcpy_routines(emulated):
    a = np.arange(6.0)
    d1 = acc.malloc((6,), np.float64)
    d2 = acc.malloc(a.shape, a.dtype)
    assert not np.shares_memory(d1, a)
    assert acc.hostptr(d1) is None  # raw memory is not in the table
    acc.memcpy_to_device(d1, a)
    acc.memcpy_device(d2, d1)
    out = np.zeros(6)
    acc.memcpy_from_device(out, d2)
    np.testing.assert_array_equal(out, a)
    assert len(acc.present_table()) == 0
    big = acc.malloc((10,), np.float64)
    acc.memcpy_to_device(big, a)  # d.nbytes >= a.nbytes
    np.testing.assert_array_equal(np.asarray(big)[:6], a)
    for d in (d1, d2, big):
        acc.free(d)
    assert acc.stats()["memory_in_use"] == 0


def test_free_memory_property_tracks_allocations(emulated):
    cap = acc.get_property("memory")
    free0 = acc.get_property("free_memory")
    assert 0 < free0 <= cap
    a = np.zeros(1 << 16)
    acc.create(a)
    assert acc.get_property("free_memory") <= free0 - a.nbytes
    acc.delete(a)
    assert acc.get_property("free_memory") == free0


def test_shutdown_ends_every_lifetime(emulated):
    a = np.arange(4.0)
    b = np.arange(4.0)
    acc.copyin(a)
    acc.copyin(a)
    acc.create(b)
    acc.shutdown("emulated")
    acc.set_device_type("emulated")
    assert not acc.is_present(a) and not acc.is_present(b)
    assert len(acc.present_table()) == 0
    assert acc.stats()["memory_in_use"] == 0
    np.testing.assert_array_equal(a, np.arange(4.0))  # nothing copied back


def test_routines_accept_async_as_sync(emulated):
    a = np.arange(4.0)
    d = acc.copyin(a, async_=1)
    acc.wait(1)
    np.testing.assert_array_equal(np.asarray(d), a)
    dev_write(a, 7.0)
    acc.update_self(a, async_=acc.async_noval)
    acc.wait()
    np.testing.assert_array_equal(a, 7.0)
    with pytest.raises(acc.InvalidAsyncError):
        acc.copyout(a, async_=-7)
    assert rc(a) == (0, 1)
    acc.copyout(a, async_=2)
    acc.wait_all()
    assert not acc.is_present(a)


def test_f_contiguous_and_multidim_round_trip(emulated):
    a = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    d = acc.copyin(a)
    assert d.shape == (3, 4)
    np.testing.assert_array_equal(np.asarray(d), a)
    dev_write(a, np.asarray(d) * 10)
    acc.copyout(a)
    np.testing.assert_array_equal(a, np.arange(12.0).reshape(3, 4) * 10)
    b = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    acc.copyin(b)
    np.testing.assert_array_equal(dev(b[1]), b[1])
    assert acc.is_present(b[1, 2])
    acc.delete(b)


def test_presence_is_by_byte_range_not_identity(emulated):
    a = np.arange(8, dtype=np.float64)
    acc.copyin(a)
    alias = a.view(np.uint8)  # same bytes, another object and dtype
    assert acc.is_present(alias)
    assert rc(alias) == (0, 1)
    np.testing.assert_array_equal(dev(alias), alias)
    assert dev(alias).dtype == np.uint8
    ints = a.view(np.int32)[4:8]  # bytes 16..32: inside the mapping
    acc.copyin(ints)
    assert rc(a) == (0, 2)
    assert addr(acc.deviceptr(ints)) == addr(acc.deviceptr(a)) + 16
    acc.delete(alias, finalize=True)
    assert not acc.is_present(a)


def test_zero_dim_array(emulated):
    x = np.array(3.5)
    acc.copyin(x)
    assert acc.is_present(x)
    assert rc(x) == (0, 1)
    acc.deviceptr(x)[...] = 4.5
    acc.copyout(x)
    assert float(x) == 4.5


def test_mapped_buffer_is_kept_alive(emulated):
    import gc

    a = np.zeros(4096)
    acc.copyin(a[8:16])
    begin = addr(a) + 64
    del a
    gc.collect()
    (r,) = acc.present_table()
    assert r.host_begin == begin
    # the buffer cannot be reused while mapped: new arrays never look present
    fresh = [np.ones(4096) for _ in range(20)]
    for f in fresh:
        assert not acc.is_present(f)
        assert not (addr(f) <= begin < addr(f) + f.nbytes)
    acc.shutdown("emulated")


_TWO_DEVICES = r"""
import numpy as np
import pyacc as acc
acc.set_device_type("emulated")
assert acc.get_num_devices("emulated") == 2, acc.get_num_devices("emulated")
acc.set_device_num(0, "emulated")
a = np.arange(4.0)
acc.copyin(a)
assert acc.is_present(a)
acc.set_device_num(1, "emulated")
assert acc.get_device_num("emulated") == 1
assert not acc.is_present(a)
assert len(acc.present_table()) == 0
acc.create(a)  # its own mapping on device 1
assert tuple(acc.refcounts(a)) == (0, 1)
acc.set_device_num(0, "emulated")
acc.copyin(a)
assert tuple(acc.refcounts(a)) == (0, 2)
acc.delete(a, finalize=True)
acc.set_device_num(1, "emulated")
assert acc.is_present(a)
acc.delete(a)
assert not acc.is_present(a)
print("OK")
"""


def test_one_table_per_device():
    """PYACC_EMULATED_DEVICES=2 gives two emulated devices, each with its own table
    (run in a fresh process: the variable is read when the runtime starts)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYACC_EMULATED_DEVICES="2")
    env.pop("ACC_DEVICE_TYPE", None)
    env.pop("ACC_DEVICE_NUM", None)
    p = subprocess.run([sys.executable, "-c", _TWO_DEVICES], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "OK" in p.stdout, p.stdout + p.stderr


def test_hostptr_of_host_memory_is_none(emulated):
    """OpenACC 3.3 §3.2.24: ``acc_hostptr`` of an address in no mapping is NULL; a NumPy
    array that is not the device's memory has no device address: None, not an error.
    Something that is not an array at all is refused."""
    a = np.zeros(3)
    assert acc.hostptr(a) is None
    acc.copyin(a)
    assert acc.hostptr(a) is None  # the host array itself, not its device copy
    assert acc.hostptr(acc.deviceptr(a)) is a or np.shares_memory(acc.hostptr(acc.deviceptr(a)), a)
    acc.delete(a)
    with pytest.raises(acc.InvalidArgumentError):
        acc.hostptr("not an array")


def test_finalize_and_if_present_may_be_given_by_position(emulated):
    """API.md §3 writes ``copyout(a, finalize=False)``, ``update_device(a, if_present=False)``:
    only ``async_`` is keyword-only."""
    a, b = np.ones(3), np.ones(3)
    acc.copyin(a)
    acc.copyin(a)
    acc.update_device(a, False)
    acc.update_self(b, True)  # absent: skipped
    acc.copyout(a, True)  # finalize
    assert acc.refcounts(a) == (0, 0)
    acc.create(b)
    acc.delete(b, True)
    assert acc.refcounts(b) == (0, 0)
    with pytest.raises(TypeError):
        acc.copyout(a, True, 1)  # async_ stays keyword-only
