"""The one event stream: every runtime action publishes one record (DESIGN.md)."""

import gc

import numpy as np
import pytest

import pyacc as acc
from mapping import BUS, EventKind


@pytest.fixture
def events():
    seen = []
    BUS.subscribe(seen.append)
    yield seen
    BUS.unsubscribe(seen.append)


def test_a_data_region_publishes_each_action_once(emulated, events):
    a = np.ones(4)
    with acc.data(copy=[a]):
        pass
    kinds = [event.kind for event in events]
    assert kinds == [EventKind.ALLOC, EventKind.UPLOAD, EventKind.ENTER_DATA, EventKind.REGION_ENTER,
                     EventKind.EXIT_DATA, EventKind.DOWNLOAD, EventKind.FREE, EventKind.REGION_EXIT]
    enter = next(e for e in events if e.kind is EventKind.ENTER_DATA)
    assert enter.counters == ((0, 0), (1, 0)) and enter.name == "a" and enter.nbytes == a.nbytes
    assert all(e.device == ("emulated", 0) for e in events)


def test_present_increments_and_errors_are_published(emulated, events):
    a = np.ones(4)
    acc.copyin(a)
    acc.copyin(a)
    with pytest.raises(acc.NotPresentError):
        acc.update_self(np.ones(2))
    counters = [e.counters for e in events if e.kind is EventKind.ENTER_DATA]
    assert counters == [((0, 0), (0, 1)), ((0, 1), (0, 2))]
    (error,) = [e for e in events if e.kind is EventKind.ERROR]
    assert isinstance(error.info, acc.NotPresentError)


def test_compute_regions_and_waits_are_published(emulated, events):
    @acc.parallel_loop
    def fill(x):
        for i in range(x.shape[0]):
            x[i] = 1.0

    fill(np.zeros(4))
    acc.wait(1)
    kinds = [e.kind for e in events]
    assert EventKind.LAUNCH in kinds and EventKind.WAIT in kinds
    assert [e.info for e in events if e.kind is EventKind.REGION_ENTER] == ["parallel_loop"]


def test_nobody_listening_means_no_records_are_built(emulated):
    assert not BUS.wants(EventKind.ENTER_DATA)


def test_mapped_buffer_is_kept_alive_without_user_references(emulated):
    acc.copyin(np.arange(1000.0))  # the only reference is the mapping's
    gc.collect()
    (record,) = acc.present_table()
    fresh = [np.arange(1000.0) for _ in range(20)]  # would reuse a freed address
    assert not any(acc.is_present(f) for f in fresh)
    assert record.nbytes == 8000

