"""OpenMP constructs all or nothing, and a target region's ``if`` clause over its
``always`` maps (API.md §4, §9; OpenMP 5.2 §5.8.3, §3.4).

A read-only array that device data would be copied into is refused by name before the
construct changes anything (``_maps.check_copy_targets``): an exit's ``always from`` copy,
a ``from`` map whose lifetime ends, the entry of an absent ``from``/``tofrom`` map (as
``acc.data(copy=...)`` refuses it); before, ``target_exit_data`` ended some maps before it
raised, and ``target_data`` raised at its exit with the mapping left behind. A region's
``if`` clause written on the decorator governs its ``always`` maps as ``if_`` at the call
does: false runs the region on the host on host data, with no data action.
"""
from __future__ import annotations

import numpy as np
import pytest

import pyacc as acc
from pyacc import omp


@pytest.fixture(autouse=True)
def emulated():
    acc.shutdown("emulated")
    acc.set_device_type("emulated")
    yield
    acc.shutdown("emulated")
    acc.set_device_type("host")


def _read_only(n=3):
    array = np.zeros(n)
    array.flags.writeable = False
    return array


def test_target_exit_data_that_would_copy_into_a_read_only_array_changes_nothing():
    x, ro = np.ones(3), _read_only()
    omp.target_enter_data(map_to=[x, ro])
    acc.deviceptr(x)[:] = 9.0
    for exit_maps in (dict(map_release=[x], map_from=[ro], map_delete=[ro]),
                      dict(map_always_from=[x], map_from=[ro])):
        with pytest.raises(acc.InvalidArgumentError, match="'ro'.*read-only"):
            omp.target_exit_data(**exit_maps)
        assert acc.refcounts(x) == (0, 1) and acc.refcounts(ro) == (0, 1)
        assert x.tolist() == [1.0] * 3  # (the always-from copy was not made either)
    omp.target_exit_data(map_release=[x, ro])  # no copy: fine
    assert acc.refcounts(x) == acc.refcounts(ro) == (0, 0)


def test_target_data_refuses_a_read_only_tofrom_map_at_its_entry():
    ro = _read_only()
    for maps in (dict(map_tofrom=[ro]), dict(map_from=[ro])):
        with pytest.raises(acc.InvalidArgumentError, match="'ro'.*read-only"):
            with omp.target_data(**maps):
                pytest.fail("the body ran")  # pragma: no cover
        assert acc.refcounts(ro) == (0, 0)
    assert acc.stats()["memory_in_use"] == 0
    with omp.target_data(map_to=[ro]):  # reading it is fine
        assert acc.is_present(ro)


@omp.target_teams_distribute_parallel_for("map(always, tofrom: y) if(n > 100)")
def add_one_if_long(y, n):
    for i in range(y.shape[0]):
        y[i] += 1.0


@pytest.mark.parametrize("spelling", ["the decorator's if clause", "if_ at the call"])
def test_a_false_if_clause_makes_no_always_copy(spelling):
    y = np.zeros(4)
    acc.copyin(y)
    acc.deviceptr(y)[:] = 50.0
    acc.reset_stats()
    if spelling == "if_ at the call":
        add_one_if_long(y, 1000, if_=False)
    else:
        add_one_if_long(y, 4)
    assert y.tolist() == [1.0] * 4  # the host's run, on host data
    np.testing.assert_array_equal(acc.deviceptr(y), 50.0)  # device data untouched
    assert acc.stats()["h2d_count"] == acc.stats()["d2h_count"] == 0
    add_one_if_long(y, 1000)  # true: the always copies around the device run
    assert y.tolist() == [2.0] * 4
    acc.delete(y)
