"""OpenMP data constructs on the shared present table (API.md §9, OpenMP 5.2 §5.8.3,
§5.8.9, §13.5-13.9), translated from public OpenMP validation suites.

Each test names its source. LLVM tests are ``llvm/llvm-project:offload/test/mapping/...``
(CHECK lines become assertions; ``omp_target_is_present`` is ``omp.target_is_present``);
SOLLVE V&V tests are ``SOLLVE/sollve_vv:tests/<version>/<construct>/<file>.c``
(``OMPVV_TEST_AND_SET`` checks become assertions). Device contents are observed and
"written by device code" through ``acc.deviceptr(a)`` (a numpy array in the emulated
device's own memory), as tests/pyacc/test_scenarios.py does.
"""

import numpy as np
import pytest

import pyacc as acc
from pyacc import omp


def rc(a):
    return tuple(acc.refcounts(a))


def present(*arrays):
    return tuple(int(omp.target_is_present(a, omp.get_default_device())) for a in arrays)


def dev_write(a, values):
    acc.deviceptr(a)[...] = values


def dev(a):
    return np.array(acc.deviceptr(a), copy=True)


# == LLVM offload/test/mapping/ompx_hold/target-data.c ==============================================
def test_llvm_ompx_hold_target_data_dyn_only(emulated):
    """ompx_hold/target-data.c, "check: dyn>0, hold=0, dec/reset dyn=0": a structured
    exit whose dynamic count is already 0 does nothing."""
    m, r, d = np.zeros(1), np.zeros(1), np.zeros(1)
    assert present(m, r, d) == (0, 0, 0)
    with omp.target_data(map_tofrom=[m], map_alloc=[r, d]):
        assert present(m, r, d) == (1, 1, 1)
        with omp.target_data(map_tofrom=[m], map_alloc=[r, d]):
            assert present(m, r, d) == (1, 1, 1)
            assert rc(m) == (0, 2)  # one OpenMP count: structured maps count as dynamic
        assert present(m, r, d) == (1, 1, 1)
    assert present(m, r, d) == (0, 0, 0)
    # dynamic dec/reset of dyn
    with omp.target_data(map_tofrom=[m], map_alloc=[r, d]):
        with omp.target_data(map_tofrom=[m], map_alloc=[r, d]):
            omp.target_exit_data(map_from=[m], map_release=[r])
            assert present(m, r, d) == (1, 1, 1)
            omp.target_exit_data(map_from=[m], map_release=[r], map_delete=[d])
            assert present(m, r, d) == (0, 0, 0)
        assert present(m, r, d) == (0, 0, 0)
        omp.target_exit_data(map_from=[m], map_release=[r], map_delete=[d])
        assert present(m, r, d) == (0, 0, 0)
    assert present(m, r, d) == (0, 0, 0)
    assert acc.present_table() == []


def test_llvm_ompx_hold_target_data_hold_only(emulated):
    """ompx_hold/target-data.c, "check: dyn=0, hold>0": exit data cannot remove data
    held by ompx_hold maps (the structured count)."""
    m, r, d = np.zeros(1), np.zeros(1), np.zeros(1)
    with omp.target_data("map(ompx_hold, tofrom: m) map(ompx_hold, alloc: r, d)"):
        assert present(m, r, d) == (1, 1, 1)
        with omp.target_data(map_tofrom=[m], map_alloc=[r, d], hold=True):
            assert rc(m) == (2, 0)
            omp.target_exit_data(map_from=[m], map_release=[r])
            assert present(m, r, d) == (1, 1, 1)
            omp.target_exit_data(map_from=[m], map_release=[r], map_delete=[d])
            assert present(m, r, d) == (1, 1, 1)
        assert present(m, r, d) == (1, 1, 1)
        omp.target_exit_data(map_from=[m], map_release=[r], map_delete=[d])
        assert present(m, r, d) == (1, 1, 1)
    assert present(m, r, d) == (0, 0, 0)


def test_llvm_ompx_hold_target_data_dyn_and_hold(emulated):
    """ompx_hold/target-data.c, "check: dyn>0, hold>0" (both orders): present while
    either count is > 0; deleting the dynamic count leaves held data present."""
    m, r, d = np.zeros(1), np.zeros(1), np.zeros(1)
    with omp.target_data(map_tofrom=[m], map_alloc=[r, d], hold=True):
        with omp.target_data(map_tofrom=[m], map_alloc=[r, d]):
            assert rc(m) == (1, 1)
            assert present(m, r, d) == (1, 1, 1)
        assert present(m, r, d) == (1, 1, 1)
    assert present(m, r, d) == (0, 0, 0)
    omp.target_enter_data(map_to=[m], map_alloc=[r, d])
    omp.target_enter_data(map_to=[m], map_alloc=[r, d])
    with omp.target_data(map_tofrom=[m], map_alloc=[r, d], hold=True):
        omp.target_exit_data(map_from=[m], map_release=[r])
        omp.target_exit_data(map_from=[m], map_release=[r], map_delete=[d])
        assert present(m, r, d) == (1, 1, 1)
        assert rc(m) == (1, 0)
    assert present(m, r, d) == (0, 0, 0)
    # dec hold=0 first, then dec/reset dyn=0
    omp.target_enter_data(map_to=[m], map_alloc=[r, d])
    omp.target_enter_data(map_to=[m], map_alloc=[r, d])
    with omp.target_data(map_tofrom=[m], map_alloc=[r, d], hold=True):
        pass
    assert present(m, r, d) == (1, 1, 1)
    omp.target_exit_data(map_from=[m], map_release=[r])
    assert present(m, r, d) == (1, 1, 1)
    omp.target_exit_data(map_from=[m], map_release=[r], map_delete=[d])
    assert present(m, r, d) == (0, 0, 0)


def test_llvm_ompx_hold_disassociate_ptr(emulated):
    """ompx_hold/omp_target_disassociate_ptr.c: disassociating a pointer with a
    non-zero hold reference count fails (here: PresentError)."""
    x = np.zeros(1, dtype=np.int32)
    d = omp.target_alloc(x.nbytes, omp.get_default_device())
    omp.target_associate_ptr(x, d, omp.get_default_device())
    with omp.target_data("map(ompx_hold, alloc: x)"):
        with pytest.raises(acc.PresentError, match="structured"):
            omp.target_disassociate_ptr(x, omp.get_default_device())
    omp.target_disassociate_ptr(x, omp.get_default_device())
    assert not omp.target_is_present(x)
    omp.target_free(d, omp.get_default_device())


def test_hold_is_not_allowed_on_enter_data():
    """LLVM: ompx_hold is permitted only on target and target data."""
    x = np.zeros(4)
    with pytest.raises(acc.ClauseError, match="ompx_hold"):
        omp.target_enter_data("map(ompx_hold, to: x)")
    with pytest.raises(acc.ClauseError, match="ompx_hold map-type modifier is allowed only"):
        omp.target_enter_data(map_hold_to=[x])


# == LLVM offload/test/mapping/present/*.c ==========================================================
def test_llvm_present_target_data(emulated):
    """present/target_data.c: map(present, ...) of absent data is an error; of present
    data a no-op."""
    i = np.zeros(1, dtype=np.int32)
    omp.target_enter_data(map_alloc=[i])
    with omp.target_data(map_present_tofrom=[i]):
        assert rc(i) == (0, 2)
    omp.target_exit_data(map_delete=[i])
    with pytest.raises(acc.NotPresentError, match="present modifier"):
        with omp.target_data("map(present, alloc: i)"):
            pass  # pragma: no cover
    assert acc.present_table() == []


def test_llvm_present_target_enter_data_partial(emulated):
    """present/target_enter_data.c and target_data_array_extension.c: an array that
    extends past a mapping is partly present."""
    a = np.zeros(100)
    omp.target_enter_data(map_alloc=[a[10:20]])
    with pytest.raises(acc.PartlyPresentError):
        omp.target_enter_data(map_present_alloc=[a[5:20]])
    with pytest.raises(acc.NotPresentError):
        omp.target_enter_data(map_present_to=[a[30:40]])
    omp.target_enter_data(map_present_to=[a[12:15]])
    assert rc(a[10:20]) == (0, 2)
    omp.target_exit_data(map_delete=[a[10:20]])


def test_llvm_present_target_exit_data_release(emulated):
    """present/target_exit_data_release.c."""
    i = np.zeros(1, dtype=np.int32)
    omp.target_enter_data(map_alloc=[i])
    omp.target_exit_data("map(present, release: i)")
    with pytest.raises(acc.NotPresentError):
        omp.target_exit_data("map(present, release: i)")


def test_llvm_present_target_update(emulated):
    """present/target_update.c: to(present: i) of absent data is an error; a plain
    target update of absent data does nothing (OpenMP 5.1)."""
    i = np.ones(4)
    omp.target_update(to=[i], from_=[i])  # absent: nothing
    with pytest.raises(acc.NotPresentError):
        omp.target_update("to(present: i)")
    with pytest.raises(acc.NotPresentError):
        omp.target_update(present_from=[i])
    omp.target_enter_data(map_alloc=[i])
    omp.target_update("to(present: i)")
    np.testing.assert_array_equal(dev(i), 1.0)
    omp.target_exit_data(map_delete=[i])


# == LLVM map ordering and absent-at-exit tests =====================================================
def test_llvm_map_ordering_exit_data_always_always(emulated):
    """map_ordering_tgt_exit_data_always_always.c: the enter data's `to` does not copy
    (x already present), and two always-from maps copy out once."""
    x = np.array([111.0])
    with omp.target_data(map_alloc=[x]):
        omp.target_enter_data(map_alloc=[x], map_to=[x])
        assert dev(x)[0] != 111.0 or acc.stats()["h2d_count"] == 0
        assert acc.stats()["h2d_count"] == 0
        dev_write(x, 222.0)  # the target region writes x
        acc.reset_stats()
        omp.target_exit_data("map(always, from: x) map(always, from: x)")
        assert acc.stats()["d2h_count"] == 1
    assert x[0] == 222.0


def test_llvm_map_ordering_exit_data_delete_from(emulated):
    """map_ordering_tgt_exit_data_delete_from.c / the present-alloc ordering test:
    `map(from: x) map(delete: x)` zeroes the count and copies out."""
    x = np.array([111.0])
    with omp.target_data(map_alloc=[x]):
        omp.target_enter_data(map_alloc=[x], map_to=[x])
        assert rc(x) == (0, 2)
        dev_write(x, 222.0)
        omp.target_exit_data("map(from: x) map(delete: x)")
        assert rc(x) == (0, 0)
    assert x[0] == 222.0


def test_llvm_map_ordering_alloc_to_from_combine(emulated):
    """map_ordering_tgt_data_alloc_to_from.c: alloc + to + from on one array maps once,
    copies in and out."""
    x = np.array([1.0, 2.0])
    with omp.target_data(map_alloc=[x], map_to=[x], map_from=[x]):
        assert rc(x) == (0, 1)
        assert acc.stats()["h2d_count"] == 1
        np.testing.assert_array_equal(dev(x), [1.0, 2.0])
        dev_write(x, 7.0)
    np.testing.assert_array_equal(x, 7.0)
    assert acc.stats()["d2h_count"] == 1


def test_llvm_data_absent_at_exit(emulated):
    """data_absent_at_exit.c: a list item not present at the exit is ignored."""
    f, af = np.array([5.0]), np.array([8.0])
    with omp.target_data(map_from=[f], map_always_from=[af]):
        dev_write(f, 1.0)
        dev_write(af, 1.0)
        omp.target_exit_data(map_delete=[f, af])
    assert (f[0], af[0]) == (5.0, 8.0)
    r = np.array([6.0])
    omp.target_exit_data(map_from=[r], map_release=[r], map_delete=[r])
    assert r[0] == 6.0


# == SOLLVE V&V 4.5 target data / enter data / update ===============================================
@omp.target_teams_distribute_parallel_for
def _fill(a, value):
    for i in range(a.shape[0]):
        a[i] = value + i


@omp.target_teams_distribute_parallel_for
def _sum_into(a, b, c):
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]


def test_sollve_target_data_map_to_from(device):
    """SOLLVE tests/4.5/target_data/test_target_data_map_to.c, _map_from.c,
    _map_tofrom.c and _map_to_from.c."""
    n = 1000
    h_a, h_b, h_c = np.ones(n), np.full(n, 2.0), np.zeros(n)
    with omp.target_data(map_to=[h_a, h_b], map_from=[h_c]):
        _sum_into(h_a, h_b, h_c)
        h_a[:] = 10.0  # host change after the to-map: not seen by later kernels
        _sum_into(h_a, h_b, h_c)
    np.testing.assert_array_equal(h_c, 12.0 if device == "host" else 3.0)
    t = np.zeros(n)
    with omp.target_data(map_tofrom=[t]):
        _fill(t, 5.0)
    np.testing.assert_array_equal(t, 5.0 + np.arange(n))


def test_sollve_target_data_map_alloc(device):
    """SOLLVE tests/4.5/target_data/test_target_data_map_alloc.c (the 5.0 version uses
    omp_target_alloc + is_device_ptr + omp_target_memcpy for the sum)."""
    n = 1000
    h = np.zeros(n, dtype=np.int64)
    with omp.target_data(map_alloc=[h]):
        _fill(h, 1)
        total = _total(h)
    assert total == n + n * (n - 1) // 2
    if device != "host":
        np.testing.assert_array_equal(h, 0)  # alloc: never copied back


@omp.target_teams_distribute_parallel_for("reduction(+: s)")
def _total(a):
    s = 0
    for i in range(a.shape[0]):
        s += a[i]
    return s


def test_sollve_target_data_if(emulated):
    """SOLLVE tests/4.5/target_data/test_target_data_if.c: if(false) maps nothing and
    the region's kernels run on host data."""
    a = np.zeros(64)
    for use_device in (True, False):
        with omp.target_data(map_tofrom=[a], if_=use_device):
            assert omp.target_is_present(a) == use_device
            _fill(a, 1.0)
        np.testing.assert_array_equal(a, 1.0 + np.arange(64))


def test_sollve_target_enter_data_if_and_exit(emulated):
    """SOLLVE tests/4.5/target_enter_data/test_target_enter_data_if.c and
    tests/4.5/target_exit_data (map from / delete)."""
    a = np.arange(32, dtype=np.float64)
    omp.target_enter_data(map_to=[a], if_=False)
    assert not omp.target_is_present(a)
    omp.target_enter_data(map_to=[a], if_=True)
    assert rc(a) == (0, 1)
    _fill(a, 3.0)
    omp.target_exit_data(map_from=[a], if_=False)
    assert rc(a) == (0, 1)
    omp.target_exit_data(map_from=[a])
    np.testing.assert_array_equal(a, 3.0 + np.arange(32))
    assert acc.present_table() == []


def test_sollve_target_update_to_from_if(emulated):
    """SOLLVE tests/4.5/target_update/test_target_update_to.c, _from.c, _if.c."""
    a = np.zeros(16)
    with omp.target_data(map_to=[a]):
        a[:] = 4.0
        omp.target_update(to=[a], if_=False)
        np.testing.assert_array_equal(dev(a), 0.0)
        omp.target_update(to=[a])
        np.testing.assert_array_equal(dev(a), 4.0)
        dev_write(a, 9.0)
        omp.target_update(from_=[a])
        np.testing.assert_array_equal(a, 9.0)
        omp.target_update(f"to(a) from(a)")  # clause string: the caller's variables
    np.testing.assert_array_equal(a, 9.0)


def test_sollve_target_update_depend_nowait(emulated):
    """SOLLVE tests/4.5/target_update/test_target_update_depend.c and
    tests/4.5/target_enter_data/test_target_enter_data_depend.c: nowait constructs with
    depend clauses run in order on the thread's queue; taskwait completes them."""
    n = 4096
    a, b = np.ones(n), np.zeros(n)
    omp.target_enter_data(map_to=[a], map_alloc=[b], nowait=True, depend="out: a, b")
    _sum_into(a, a, b, nowait=True, depend="inout: b")
    omp.target_update(from_=[b], nowait=True, depend=["in: b"])
    omp.taskwait()
    np.testing.assert_array_equal(b, 2.0)
    omp.target_exit_data(map_delete=[a, b], depend="in: a")  # synchronous: waits first
    assert acc.present_table() == []


# == mixed OpenACC / OpenMP programs (API.md §9) =====================================================
def test_mixed_acc_copyin_then_omp_release(emulated):
    a = np.arange(8.0)
    acc.copyin(a)
    assert rc(a) == (0, 1)
    omp.target_exit_data(map_release=[a])
    assert not acc.is_present(a)


def test_mixed_omp_enter_then_acc(emulated):
    a = np.arange(8.0)
    omp.target_enter_data(map_to=[a])
    assert acc.is_present(a) and rc(a) == (0, 1)
    with acc.data(present=[a]):
        with omp.target_data(map_tofrom=[a]):
            assert rc(a) == (1, 2)
        omp.target_exit_data(map_delete=[a])
        assert acc.is_present(a) and rc(a) == (1, 0)  # the acc region's reference holds it
    assert not acc.is_present(a)
    records = acc.present_table()
    assert records == []


def test_all_or_nothing(emulated):
    a, b = np.zeros(10), np.zeros(100)
    omp.target_enter_data(map_alloc=[b[:50]])
    with pytest.raises(acc.PartlyPresentError):
        omp.target_enter_data(map_to=[a, b[40:60]])
    assert not acc.is_present(a)
    assert rc(b[:50]) == (0, 1)
    with pytest.raises(acc.PartlyPresentError):
        with omp.target_data(map_to=[a], map_tofrom=[b[40:60]], hold=True):
            pass  # pragma: no cover
    assert not acc.is_present(a)
    omp.target_exit_data(map_delete=[b[:50]])


def test_exception_in_target_data_still_exits(emulated):
    a = np.zeros(4)
    with pytest.raises(ZeroDivisionError):
        with omp.target_data(map_tofrom=[a]):
            dev_write(a, 3.0)
            1 / 0
    np.testing.assert_array_equal(a, 3.0)
    assert acc.present_table() == []


def test_region_is_single_use(emulated):
    region = omp.target_data(map_to=[np.zeros(2)])
    with region:
        pass
    with pytest.raises(acc.InvalidArgumentError, match="already entered"):
        with region:
            pass  # pragma: no cover


# == errors ==========================================================================================
def test_keyword_errors_suggest_the_closest():
    a = np.zeros(2)
    with pytest.raises(acc.ClauseError, match="did you mean 'map_to'"):
        omp.target_enter_data(map_too=[a])
    with pytest.raises(acc.ClauseError, match="OpenACC"):
        omp.target_enter_data(copyin=[a])
    with pytest.raises(acc.ClauseError, match=r"map type 'from' is not allowed"):
        omp.target_enter_data("map(from: a)")
    with pytest.raises(acc.ClauseError) as info:
        omp.target_exit_data("map(release: a) nowiat")
    assert "did you mean 'nowait'" in str(info.value) and "^" in str(info.value)


def test_clause_string_caret_under_the_bad_modifier():
    a = np.zeros(2)
    with pytest.raises(acc.ClauseError) as info:
        omp.target_data("map(to: a) map(alwys, tofrom: a)")
    text = str(info.value)
    assert "unknown map-type modifier 'alwys'" in text and "did you mean 'always'" in text
    lines = text.splitlines()
    assert lines[-1].index("^") - lines[-2].index("m") == "map(to: a) map(".__len__()


def test_clause_values_given_as_text_keywords_are_evaluated_in_the_callers_frame(emulated):
    """``if_="n > 3"`` or ``device="dev"`` given as keywords mean what the same text means
    in a clause string (``"map(to: a) if(n > 3)"``): evaluated with the caller's names. The
    keyword form was never evaluated (an unevaluated expression is truthy: ``if_`` mapped)."""
    a = np.ones(3)
    n, dev = 1, 0
    omp.target_enter_data(map_to=[a], if_="n > 3")
    assert rc(a) == (0, 0)
    omp.target_enter_data(map_to=[a], device="dev", if_="n > 0")
    assert rc(a) == (0, 1)
    omp.target_exit_data(map_release=[a], if_="n == 1")
    assert rc(a) == (0, 0)
