"""``acc.declare`` (OpenACC 3.3 §2.13; API.md §6.1): module-level data present for the
whole program, pinned like ``map_data``, ended (``copy``: copied back) by
``acc.shutdown()`` or interpreter exit."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyacc as acc


def _run(script: str, **environment) -> subprocess.CompletedProcess:
    env = dict(os.environ, **environment)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, env=env, timeout=240,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_declare_is_exported_as_a_directive():
    assert "declare" in acc.__all__
    assert acc.declare.__doc__ and "2.13" in acc.declare.__doc__


def test_declared_data_is_present_with_refcounts_0_1(emulated):
    """§2.13 / API.md §6.1: declared data is present; ``refcounts`` shows (0, 1)."""
    g, h, r = np.arange(8.0), np.zeros(4), np.zeros(3)
    stats_before = acc.stats()["h2d_count"]
    acc.declare(copyin=g, create=[h], device_resident=[r])
    for array in (g, h, r):
        assert acc.is_present(array)
        assert acc.refcounts(array) == (0, 1)
    assert np.array_equal(acc.deviceptr(g), g)  # copyin copied in
    assert acc.stats()["h2d_count"] == stats_before + 1  # create/device_resident: no copy
    assert [record.kind for record in acc.present_table()] == ["declare"] * 3


def test_exit_operations_leave_declared_data_present(emulated):
    """S9 of the semantics reference (pr92843-1.c test_acc_declare): copyout, delete,
    exit_data, with or without finalize, leave declared data present and copy nothing."""
    g = np.arange(6.0)
    acc.declare(create=g)
    acc.deviceptr(g)[:] = -1.0
    acc.copyout(g)
    acc.copyout(g, finalize=True)
    acc.delete(g, finalize=True)
    acc.exit_data(copyout=[g], delete=[g], finalize=True)
    acc.exit_data(copyout=[g], async_=1)
    acc.wait(1)
    assert acc.refcounts(g) == (0, 1)
    assert np.array_equal(g, np.arange(6.0))  # never copied back
    assert acc.copyin(g) is not None and acc.copyin(g) is not None
    assert acc.refcounts(g) == (0, 3)
    acc.copyout(g, finalize=True)
    assert acc.refcounts(g) == (0, 1)


def test_update_works_on_declared_data(emulated):
    g = np.arange(5.0)
    acc.declare(create=g)
    acc.update_device(g)
    assert np.array_equal(acc.deviceptr(g), g)
    acc.deviceptr(g)[:] = 9.0
    acc.update(self=[g[1:3]])
    assert g.tolist() == [0.0, 9.0, 9.0, 3.0, 4.0]
    acc.update_self(g)
    assert g.tolist() == [9.0] * 5


def test_structured_region_over_declared_data_does_not_copy(emulated):
    """Declared data is present: a data region joins it (S+1), copies nothing, and its
    exit leaves the declaration in place."""
    g = np.arange(4.0)
    acc.declare(copy=g)
    acc.deviceptr(g)[:] = 5.0
    with acc.data(copy=[g]):
        assert acc.refcounts(g) == (1, 1)
    assert acc.refcounts(g) == (0, 1)
    assert g.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_compute_region_uses_declared_data_in_place(emulated):
    g = np.arange(16.0)
    acc.declare(copyin=g)

    @acc.parallel_loop
    def double(x):
        for i in range(x.shape[0]):
            x[i] = 2.0 * x[i]

    acc.reset_stats()
    double(g)
    stats = acc.stats()
    assert stats["h2d_count"] == 0 and stats["d2h_count"] == 0
    assert np.array_equal(acc.deviceptr(g), 2.0 * np.arange(16.0))
    assert np.array_equal(g, np.arange(16.0))  # in place on the device only


def test_shutdown_copies_declared_copy_data_back_and_ends_every_declaration(emulated):
    """§2.13: ``copy`` data is copied back when the declaration ends (acc.shutdown);
    copyin/create data is not; everything is freed."""
    g, h = np.zeros(4), np.zeros(4)
    acc.declare(copy=[g], copyin=[h])
    acc.deviceptr(g)[:] = 3.0
    acc.deviceptr(h)[:] = 4.0
    acc.shutdown("emulated")
    assert g.tolist() == [3.0] * 4
    assert h.tolist() == [0.0] * 4
    acc.set_device_type("emulated")
    assert not acc.is_present(g) and not acc.is_present(h)
    assert acc.stats()["memory_in_use"] == 0


def test_shutdown_waits_for_queued_work_before_copying_declared_data_back(emulated):
    g = np.zeros(1000)
    acc.declare(copy=g)
    source = np.full(1000, 2.0)
    device = acc.malloc(1000, np.float64)
    acc.memcpy_to_device(device, source)
    from pyacc.testing import hold_queue

    with hold_queue(1):
        acc.memcpy_device(acc.deviceptr(g), device, async_=1)
    acc.shutdown("emulated")
    assert g.tolist() == [2.0] * 1000


def test_declaring_the_same_array_twice_is_a_present_error(emulated):
    """A second declare of the same data is an error (as in C); the first declaration
    is unchanged."""
    g = np.zeros(4)
    acc.declare(create=g)
    with pytest.raises(acc.PresentError, match=r"declared already.*\[0x[0-9a-f]+,\+32\]"):
        acc.declare(copyin=g)
    with pytest.raises(acc.PresentError):
        acc.declare(copy=g[1:3])  # a section of declared data
    assert acc.refcounts(g) == (0, 1)


def test_declaring_data_mapped_by_another_directive_is_a_present_error(emulated):
    g = np.zeros(4)
    acc.copyin(g)
    with pytest.raises(acc.PresentError, match="mapped by another directive"):
        acc.declare(create=g)
    assert acc.refcounts(g) == (0, 1)
    assert [r.kind for r in acc.present_table()] == ["normal"]


def test_declare_overlapping_a_mapping_is_partly_present(emulated):
    """Same presence rules as copyin (§2.7.3): an overlap that is not containment is
    partly present."""
    a = np.zeros(10)
    acc.copyin(a[2:6])
    with pytest.raises(acc.PartlyPresentError):
        acc.declare(create=a[4:8])
    assert acc.refcounts(a[2:6]) == (0, 1)


def test_declare_is_all_or_nothing(emulated):
    """API.md §4: a declare that fails on its third array declares none of them."""
    a, b, c = np.zeros(4), np.zeros(4), np.zeros(4)
    acc.copyin(c)
    before = acc.stats()["memory_in_use"]
    with pytest.raises(acc.PresentError):
        acc.declare(copyin=[a, b], create=c)
    assert not acc.is_present(a) and not acc.is_present(b)
    assert acc.stats()["memory_in_use"] == before


def test_declare_out_of_memory_declares_nothing(emulated):
    a, b = np.zeros(4), np.zeros(4)
    with acc.testing.inject_faults(alloc=2):
        with pytest.raises(acc.OutOfMemoryError):
            acc.declare(copyin=[a, b])
    assert acc.present_table() == []
    assert acc.stats()["memory_in_use"] == 0


def test_declare_copy_of_a_read_only_array_is_an_invalid_argument(emulated):
    g = np.zeros(4)
    g.flags.writeable = False
    with pytest.raises(acc.InvalidArgumentError, match="read-only"):
        acc.declare(copy=g)
    assert not acc.is_present(g)


def test_declare_unknown_clause_and_empty_call(emulated):
    with pytest.raises(acc.ClauseError, match="copyout"):
        acc.declare(copyout=np.zeros(2))
    with pytest.raises(acc.ClauseError):
        acc.declare()


def test_unmap_data_refuses_declared_data(emulated):
    g = np.zeros(4)
    acc.declare(create=g)
    with pytest.raises(acc.PresentError):
        acc.unmap_data(g)
    assert acc.refcounts(g) == (0, 1)


def test_declare_on_host_is_a_no_op(host_device):
    g = np.zeros(4)
    acc.declare(copy=g, create=np.zeros(2))
    assert acc.is_present(g)
    assert acc.deviceptr(g) is g


def test_declared_entries_pass_the_consistency_checker(emulated, monkeypatch):
    monkeypatch.setenv("PYACC_CHECK", "1")
    acc.observe.configure()
    try:
        g = np.zeros(4)
        acc.declare(copy=g)
        acc.delete(g, finalize=True)
        acc.testing.check_consistency()
        acc.shutdown("emulated")
        acc.set_device_type("emulated")
        acc.testing.check_consistency()
    finally:
        monkeypatch.delenv("PYACC_CHECK")
        acc.observe.configure()


def test_program_exit_copies_declared_copy_data_back():
    """§2.13: the implicit data region of the program ends at exit: ``copy`` data is
    copied back, after queued work has completed. (A handler registered before pyacc's
    runs after it and sees the host array.)"""
    result = _run("""
        import atexit
        import numpy as np
        g = np.zeros(1000)
        atexit.register(lambda: print("at exit:", g[0], g[-1]))
        import pyacc as acc
        acc.set_device_type("emulated")
        acc.declare(copy=g)
        acc.deviceptr(g)[:] = 1.5
        acc.update_device(np.ones(0))
        d = acc.malloc(1000, np.float64)
        acc.memcpy_to_device(d, np.full(1000, 2.5))
        acc.memcpy_device(acc.deviceptr(g), d, async_=3)
    """)
    assert result.returncode == 0, result.stderr
    assert "at exit: 2.5 2.5" in result.stdout
