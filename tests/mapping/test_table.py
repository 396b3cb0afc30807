"""The present table alone: relations of lookups, ordering, copy-on-write snapshots."""

import numpy as np
import pytest

from pyacc.mapping import MappingEntry, PresentTable, Relation
from pyacc.mapping.ranges import HostRange


@pytest.fixture
def table_with_two():
    """A table mapping buf[4:8] and buf[8:12] (adjacent) of a 16-element float64 buffer."""
    buf = np.zeros(16)
    table = PresentTable()
    for lo, hi in ((4, 8), (8, 12)):
        view = buf[lo:hi]
        begin = view.__array_interface__["data"][0]
        table.insert(MappingEntry(begin, begin + view.nbytes, view, 0x1000 * lo))
    return buf, table


@pytest.mark.parametrize(
    "lo, hi, relation",
    [
        (4, 8, Relation.CONTAINED),
        (5, 7, Relation.CONTAINED),
        (8, 12, Relation.CONTAINED),
        (0, 4, Relation.DISJOINT),
        (12, 16, Relation.DISJOINT),
        (2, 6, Relation.EXTENDS_BEFORE),
        (10, 14, Relation.EXTENDS_AFTER),
        (6, 10, Relation.SPANS),
        (4, 12, Relation.SPANS),
        (2, 14, Relation.SPANS),
    ],
)
def test_lookup_relation_of_views(table_with_two, lo, hi, relation):
    buf, table = table_with_two
    assert table.lookup(buf[lo:hi]).relation is relation


def test_lookup_covers_one_mapping():
    buf = np.zeros(16)
    table = PresentTable()
    view = buf[4:8]
    begin = view.__array_interface__["data"][0]
    table.insert(MappingEntry(begin, begin + view.nbytes, view, 0))
    found = table.lookup(buf[2:10])
    assert found.relation is Relation.COVERS
    assert found.entries[0].host_array is view


def test_lookup_of_strided_view_uses_element_extent(table_with_two):
    buf, table = table_with_two
    assert table.lookup(buf[4:8:2]).relation is Relation.CONTAINED
    assert table.lookup(buf[2:8:2]).relation is Relation.EXTENDS_BEFORE
    assert table.lookup(buf[7:3:-1]).relation is Relation.CONTAINED  # negative stride


def test_lookup_of_2d_column_view():
    grid = np.zeros((4, 5))
    table = PresentTable()
    begin = grid.__array_interface__["data"][0]
    table.insert(MappingEntry(begin, begin + grid.nbytes, grid, 0))
    assert table.lookup(grid[:, 2]).relation is Relation.CONTAINED
    assert table.containing(grid[1:3, 1:4]) is table.entries()[0]


def test_entries_are_kept_in_address_order():
    arrays = [np.zeros(8) for _ in range(20)]
    table = PresentTable()
    for array in reversed(arrays):
        begin = array.__array_interface__["data"][0]
        table.insert(MappingEntry(begin, begin + array.nbytes, array, 0))
    begins = [entry.host_begin for entry in table.entries()]
    assert begins == sorted(begins)
    for array in arrays:
        assert table.containing(array).host_array is array


def test_remove_keeps_other_entries_and_bumps_the_version(table_with_two):
    buf, table = table_with_two
    version = table._ranges.version
    first = table.entries()[0]
    table.remove(first)
    assert len(table) == 1
    assert table.containing(buf[4:8]) is None
    assert table.containing(buf[8:12]) is not None
    assert table._ranges.version > version and table._ranges.version % 2 == 0


def test_many_inserts_grow_the_arrays_and_stay_sorted():
    arrays = [np.zeros(2) for _ in range(300)]
    table = PresentTable()
    for array in arrays[::2] + arrays[1::2]:
        begin = array.__array_interface__["data"][0]
        table.insert(MappingEntry(begin, begin + array.nbytes, array, 0))
    for array in arrays[::3]:
        table.remove(table.containing(array))
    live = [a for i, a in enumerate(arrays) if i % 3]
    assert len(table) == len(live)
    assert all(table.containing(a).host_array is a for a in live)
    assert all(table.containing(a) is None for a in arrays[::3])


def test_lookup_range_of_zero_length_is_disjoint(table_with_two):
    buf, table = table_with_two
    begin = buf[5:6].__array_interface__["data"][0]
    assert table.lookup_range(HostRange(begin, begin)).relation is Relation.DISJOINT


def test_non_native_byte_order_takes_the_python_fallback():
    array = np.zeros(8, dtype=">f8")
    table = PresentTable()
    begin = array.__array_interface__["data"][0]
    table.insert(MappingEntry(begin, begin + array.nbytes, array, 0))
    assert table.lookup(array[2:4]).relation is Relation.CONTAINED
    assert table.containing(array[2:4]) is not None


@pytest.mark.parametrize(
    "lo, hi, expected",
    [(5, 7, "entry"), (0, 4, "absent"), (12, 16, "absent"), (2, 6, "partial"),
     (6, 10, "partial"), (0, 16, "partial"), (3, 3, "absent")],
)
def test_probe_tells_contained_from_absent_from_partly_present(table_with_two, lo, hi, expected):
    from pyacc.mapping.table import PARTIAL

    buf, table = table_with_two
    view = buf[lo:hi]
    with table.locked():
        found = table.probe(view)
    assert {"entry": isinstance(found, MappingEntry), "absent": found is None,
            "partial": found is PARTIAL}[expected]
    if expected == "entry":
        assert found is table.containing(view)
