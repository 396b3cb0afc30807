"""The one event stream: every runtime action publishes one record (DESIGN.md)."""

import gc

import numpy as np
import pytest

import pyacc as acc
from pyacc.mapping import BUS, EventKind


#: the actions themselves (DONE completes a timed action; DIRECTIVE_END is a checkpoint)
ACTIONS = tuple(kind for kind in EventKind if kind not in (EventKind.DONE, EventKind.DIRECTIVE_END))


@pytest.fixture
def events():
    seen = []
    BUS.subscribe(seen.append, ACTIONS)
    yield seen
    BUS.unsubscribe(seen.append, ACTIONS)


def test_timed_actions_publish_done_after_they_ran(emulated):
    """DONE follows each transfer and kernel, with its start and end, and points at the
    enqueue event it completes."""
    seen = []
    BUS.subscribe(seen.append, (EventKind.UPLOAD, EventKind.DOWNLOAD, EventKind.DONE))
    try:
        a = np.ones(4)
        with acc.data(copy=[a]):
            pass
    finally:
        BUS.unsubscribe(seen.append, (EventKind.UPLOAD, EventKind.DOWNLOAD, EventKind.DONE))
    kinds = [event.kind for event in seen]
    assert kinds == [EventKind.UPLOAD, EventKind.DONE, EventKind.DOWNLOAD, EventKind.DONE]
    upload, done = seen[0], seen[1]
    assert done.info is upload and done.start <= done.timestamp and done.nbytes == a.nbytes
    assert upload.timestamp <= done.start


def test_directive_end_marks_each_public_call(emulated):
    seen = []
    BUS.subscribe(seen.append, (EventKind.DIRECTIVE_END,))
    try:
        a = np.ones(4)
        acc.copyin(a)
        acc.create(a)
        acc.delete(a, finalize=True)
        with pytest.raises(acc.NotPresentError):
            acc.update_self(a)
    finally:
        BUS.unsubscribe(seen.append, (EventKind.DIRECTIVE_END,))
    assert [event.info for event in seen] == ["acc.copyin", "acc.create", "acc.delete", "acc.update_self"]


def test_a_data_region_publishes_each_action_once(emulated, events):
    a = np.ones(4)
    with acc.data(copy=[a]):
        pass
    kinds = [event.kind for event in events]
    # a new entry's ENTER_DATA precedes its copy-in (a failed copy rolls back a change
    # observers have seen)
    assert kinds == [EventKind.ALLOC, EventKind.ENTER_DATA, EventKind.UPLOAD, EventKind.REGION_ENTER,
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



def _host_device():
    from pyacc.mapping.devices.host import HostDevice
    return HostDevice(0)


def _emulated_device():
    from pyacc.mapping.devices.emulated import EmulatedDevice
    return EmulatedDevice(0, capacity=1 << 20)


def _fake_cuda_device():
    from pyacc.mapping.devices.cuda import CudaDevice
    from pyacc.mapping.devices.cuda_fake import FakeCudaBackend
    return CudaDevice(0, backend=FakeCudaBackend())


@pytest.mark.parametrize("make_device", [_host_device, _emulated_device, _fake_cuda_device],
                         ids=["host", "emulated", "cuda-fake"])
def test_free_is_published_while_the_block_is_still_held(make_device):
    """A deferred free runs on a queue's worker thread while another thread may allocate:
    FREE must reach subscribers before the address can be handed out again, or the
    PYACC_CHECK ledger sees ALLOC(x) (new owner), then FREE(x) (old owner), and later
    reports the new owner's free as a double free (seen in CI under threads)."""
    device = make_device()
    address = device.allocate(4096)
    handed_out = []

    def allocate_during_free(event):
        handed_out.append(device.allocate(4096))

    BUS.subscribe(allocate_during_free, (EventKind.FREE,))
    try:
        device.free(address)
    finally:
        BUS.unsubscribe(allocate_during_free, (EventKind.FREE,))
    assert len(handed_out) == 1 and handed_out[0] != address
    device.free(handed_out[0])
    assert device.memory_in_use == 0


@pytest.mark.parametrize("make_device", [_host_device, _emulated_device, _fake_cuda_device],
                         ids=["host", "emulated", "cuda-fake"])
def test_free_gives_the_block_back_even_when_a_subscriber_raises(make_device):
    device = make_device()
    address = device.allocate(4096)

    def broken(event):
        raise RuntimeError("subscriber bug")

    BUS.subscribe(broken, (EventKind.FREE,))
    try:
        with pytest.raises(RuntimeError, match="subscriber bug"):
            device.free(address)
    finally:
        BUS.unsubscribe(broken, (EventKind.FREE,))
    assert device.memory_in_use == 0 and device.allocation_of(address) is None
