"""Counter transitions of one entry (OpenACC 3.3 §2.6.7, §2.7.2, §3.2.21)."""

import numpy as np
import pytest

from pyacc.mapping import Counter, EntryKind, MappingEntry
from pyacc.mapping.entry import leave_all_structured, structured_exit_ends


def _entry(kind=EntryKind.NORMAL, structured=0, dynamic=0):
    return MappingEntry(0, 8, np.zeros(1), 0, kind=kind, structured=structured, dynamic=dynamic)


@pytest.mark.parametrize(
    "counters, counter, finalize, expected",
    [
        ((0, 1), Counter.DYNAMIC, False, (0, 0)),
        ((0, 3), Counter.DYNAMIC, True, (0, 0)),
        ((1, 0), Counter.DYNAMIC, False, (1, 0)),  # present decrement never below 0
        ((1, 0), Counter.DYNAMIC, True, (1, 0)),
        ((2, 1), Counter.STRUCTURED, False, (1, 1)),
        ((0, 1), Counter.STRUCTURED, False, (0, 1)),
    ],
)
def test_decrement(counters, counter, finalize, expected):
    entry = _entry(structured=counters[0], dynamic=counters[1])
    entry.decrement(counter, finalize=finalize)
    assert entry.counters == expected


def test_map_data_dynamic_count_is_pinned_at_one():
    entry = _entry(EntryKind.MAP_DATA, dynamic=1)
    entry.decrement(Counter.DYNAMIC)
    assert entry.counters == (0, 1)
    entry.increment(Counter.DYNAMIC)
    entry.increment(Counter.DYNAMIC)
    entry.decrement(Counter.DYNAMIC, finalize=True)
    assert entry.counters == (0, 1)
    assert entry.is_present and not entry.owns_memory


def test_present_iff_a_counter_is_positive():
    entry = _entry()
    assert not entry.is_present
    entry.increment(Counter.STRUCTURED)
    assert entry.is_present
    entry.restore((0, 0))
    assert not entry.is_present


def test_host_bytes_of_fortran_ordered_array_share_memory():
    array = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    entry = MappingEntry(0, array.nbytes, array, 0)
    view = entry.host_bytes()
    assert view.nbytes == array.nbytes and np.shares_memory(view, array)


@pytest.mark.parametrize(
    "kind, counters, counter, finalize, times, expected",
    [
        (EntryKind.NORMAL, (0, 1), Counter.DYNAMIC, False, 1, True),
        (EntryKind.NORMAL, (0, 2), Counter.DYNAMIC, False, 1, False),
        (EntryKind.NORMAL, (0, 2), Counter.DYNAMIC, True, 1, True),
        (EntryKind.NORMAL, (1, 1), Counter.DYNAMIC, True, 1, False),
        (EntryKind.NORMAL, (1, 0), Counter.STRUCTURED, False, 1, True),
        (EntryKind.NORMAL, (2, 0), Counter.STRUCTURED, False, 1, False),
        (EntryKind.NORMAL, (2, 0), Counter.STRUCTURED, False, 2, True),
        (EntryKind.NORMAL, (1, 1), Counter.STRUCTURED, False, 1, False),
        (EntryKind.MAP_DATA, (0, 1), Counter.DYNAMIC, True, 1, False),
        (EntryKind.DECLARE, (0, 1), Counter.DYNAMIC, False, 1, False),
    ],
)
def test_would_end_answers_before_the_decrement_does(kind, counters, counter, finalize, times, expected):
    entry = _entry(kind=kind, structured=counters[0], dynamic=counters[1])
    assert entry.would_end(counter, finalize=finalize, times=times) is expected
    assert entry.counters == counters  # the question changes nothing
    for _ in range(times):
        entry.decrement(counter, finalize=finalize)
    assert (not entry.is_present) is expected


def test_structured_exit_ends_counts_an_entry_listed_twice_twice():
    shared, other = _entry(structured=2), _entry(structured=2, dynamic=1)
    assert structured_exit_ends([shared, shared, other])
    assert not structured_exit_ends([shared, other])
    assert (shared.counters, other.counters) == ((2, 0), (2, 1))


def test_reset_ends_the_lifetime():
    entry = _entry(kind=EntryKind.MAP_DATA, structured=0, dynamic=1)
    entry.reset()
    assert entry.counters == (0, 0) and not entry.is_present


def test_leave_all_structured_changes_nothing_when_a_lifetime_would_end():
    ending, staying = _entry(structured=1), _entry(structured=2)
    assert not leave_all_structured([staying, ending])
    assert (staying.counters, ending.counters) == ((2, 0), (1, 0))
    assert leave_all_structured([staying])
    assert staying.counters == (1, 0)
