"""``mapping.compute``: the one entry and the one exit of a compute call's data.

Each test names the path it checks (replay, join, full entry, held replay) and the rule
that makes the path exact: counters, presence and device arrays as the full path would
give them (API.md §6; OpenACC 3.3 §2.6.2, §2.7).
"""

import threading

import numpy as np
import pytest

from pyacc.mapping import (Counter, DeviceRuntime, EmulatedDevice, HostDevice, MapKind, MapRequest,
                     SharedMemoryRuntime, UpdateDirection, UpdateItem)
from pyacc.mapping.compute import ComputeMemo, ComputeTicket, enter_compute, exit_compute
from tests.relayout import relayout


class CopyEverything:
    """The ArgumentSorter of a region whose array parameters are all ``copy`` (or the
    kinds given by slot), holding the structured count, or the dynamic one for the
    parameters named in ``dynamic`` (OpenMP maps)."""

    def __init__(self, dynamic=(), kinds=None):
        self.sorted = 0
        self.dynamic = frozenset(dynamic)
        self.kinds = kinds or {}

    def counter_of(self, name):
        return Counter.DYNAMIC if name in self.dynamic else Counter.STRUCTURED

    def sort(self, runtime, args):
        self.sorted += 1
        slots = [slot for slot, value in enumerate(args) if isinstance(value, np.ndarray)]
        return slots, [(self.kinds.get(slot, MapKind.COPY), f"arg{slot}") for slot in slots]

    def requests(self, runtime, arrays, map_kinds):
        return [MapRequest(kind, array, name) for array, (kind, name) in zip(arrays, map_kinds)]


@pytest.fixture
def runtime():
    runtime = DeviceRuntime(EmulatedDevice(0, capacity=1 << 20))
    yield runtime
    runtime.shutdown()


def _present(runtime, *arrays):
    runtime.enter([MapRequest(MapKind.COPYIN, array) for array in arrays], Counter.DYNAMIC,
                  runtime.device.sync_queue)


def _call(runtime, args, sorter, memo=None, hold=False):
    queue = runtime.device.sync_queue
    ticket = enter_compute(runtime, args, queue, sorter, memo, hold=hold)
    return ticket, lambda copy_back=True: exit_compute(runtime, ticket, queue, copy_back=copy_back)


def test_absent_data_takes_the_full_entry_and_its_exit_copies_back(runtime):
    x = np.arange(4.0)
    ticket, leave = _call(runtime, (x, 2.0), CopyEverything())
    assert isinstance(ticket, ComputeTicket) and ticket.mapped is not None and ticket.memo is None
    assert runtime.refcounts(x) == (1, 0)
    ticket.device_args[0][:] = 7.0
    assert ticket.device_args[1] == 2.0  # scalars pass as they are
    leave()
    assert not runtime.is_present(x)
    np.testing.assert_array_equal(x, 7.0)


def test_present_data_is_joined_counts_change_at_once_and_a_memo_is_made(runtime):
    x = np.zeros(4)
    _present(runtime, x)
    ticket, leave = _call(runtime, (x,), CopyEverything())
    assert ticket.entries is not None and not ticket.replayed
    assert isinstance(ticket.memo, ComputeMemo)
    assert runtime.refcounts(x) == (1, 1)
    leave()
    assert runtime.refcounts(x) == (0, 1)


def test_a_matching_memo_replays_without_sorting_the_arguments(runtime):
    x, y = np.zeros(4), np.ones(4)
    _present(runtime, x, y)
    sorter = CopyEverything()
    first, leave = _call(runtime, (x, y), sorter)
    leave()
    assert first.memo.matches((x, y)) and not first.memo.matches((y, x))
    ticket, leave = _call(runtime, (x, y), sorter, first.memo)
    assert ticket.replayed and sorter.sorted == 1
    assert runtime.refcounts(x) == (1, 1)
    assert ticket.device_args[0].__array_interface__["data"][0] == \
        runtime.deviceptr(x).__array_interface__["data"][0]
    leave()
    assert runtime.refcounts(x) == (0, 1)


def test_a_memo_does_not_match_an_array_changed_in_place(runtime):
    x = np.zeros(8)
    _present(runtime, x)
    ticket, leave = _call(runtime, (x,), CopyEverything())
    leave()
    relayout(x, shape=(4, 2))
    assert not ticket.memo.matches((x,))
    relayout(x, shape=(8,))
    assert ticket.memo.matches((x,))
    relayout(x, dtype=np.int64)
    assert not ticket.memo.matches((x,))


@pytest.mark.parametrize("hold", [False, True])
def test_a_memo_follows_its_array_to_a_new_mapping(runtime, hold):
    """Unmapped and mapped again: a new device copy, so the memo's device arrays are
    stale; the memo follows x to its new entry (``ComputeMemo.followed``: what a join would
    find) and replays from there, with the new entry's device array and its count."""
    x = np.zeros(4)
    _present(runtime, x)
    first, leave = _call(runtime, (x,), CopyEverything())
    leave()
    runtime.exit_dynamic([MapRequest(MapKind.DELETE, x)], runtime.device.sync_queue)
    _present(runtime, np.zeros(64))  # takes the freed block
    _present(runtime, x)
    sorter = CopyEverything()
    ticket, leave = _call(runtime, (x,), sorter, first.memo, hold=hold)
    assert ticket.replayed and sorter.sorted == 0, "replayed, not sorted and joined"
    assert ticket.memo is not first.memo and ticket.memo.matches((x,))  # the memo followed
    assert runtime.refcounts(x) == ((0, 1) if hold else (1, 1))
    ticket.device_args[0][:] = 5.0
    leave()
    assert runtime.refcounts(x) == (0, 1)
    runtime.update([UpdateItem(UpdateDirection.SELF, x, "x")], runtime.device.sync_queue)
    np.testing.assert_array_equal(x, 5.0)


def test_a_memo_whose_array_left_the_table_is_not_replayed(runtime):
    """Unmapped and not mapped again: nothing to follow; the full entry maps x for the
    call (``copy``) and its exit copies back and unmaps it."""
    x = np.zeros(4)
    _present(runtime, x)
    first, leave = _call(runtime, (x,), CopyEverything())
    leave()
    runtime.exit_dynamic([MapRequest(MapKind.DELETE, x)], runtime.device.sync_queue)
    ticket, leave = _call(runtime, (x,), CopyEverything(), first.memo)
    assert not ticket.replayed and ticket.mapped is not None
    ticket.device_args[0][:] = 5.0
    leave()
    assert runtime.refcounts(x) == (0, 0)
    np.testing.assert_array_equal(x, 5.0)


def test_a_held_replay_counts_nothing_and_other_threads_wait_for_it(runtime):
    """The held form of the replay (a synchronous call nobody observes) holds the table
    lock instead of counting: another thread's ``refcounts`` waits until the exit, so it
    never sees the call's missing increment."""
    x = np.zeros(4)
    _present(runtime, x)
    first, leave = _call(runtime, (x,), CopyEverything())
    leave()
    ticket, leave = _call(runtime, (x,), CopyEverything(), first.memo, hold=True)
    assert ticket.replayed and ticket.held
    seen, done = [], threading.Event()

    def query():
        seen.append(runtime.refcounts(x))
        done.set()

    other = threading.Thread(target=query)
    other.start()
    assert not done.wait(0.2), "refcounts read the table while a held call was running"
    leave()
    other.join(5)
    assert seen == [(0, 1)]


def test_a_held_replay_follows_a_changed_table(runtime):
    x = np.zeros(4)
    _present(runtime, x)
    first, leave = _call(runtime, (x,), CopyEverything())
    leave()
    _present(runtime, np.zeros(2))  # a new entry: the table's version moves
    stale = first.memo._structured_memo
    assert not runtime.hold_structured(stale)  # the runtime declines the old version
    ticket, leave = _call(runtime, (x,), CopyEverything(), first.memo, hold=True)
    assert ticket.held and ticket.replayed  # followed (x is where it was), then held
    assert ticket.memo is not first.memo and first.memo._structured_memo is stale  # a new memo
    assert runtime.refcounts(x) == (0, 1) and not _lock_is_free(runtime)
    leave()
    assert _lock_is_free(runtime)


def _lock_is_free(runtime) -> bool:
    """Whether another thread can take the table lock at once (the lock is re-entrant:
    asking from this thread would say yes even while this thread holds it)."""
    answer = []

    def probe():
        lock = runtime.table.locked()
        answer.append(lock.acquire(blocking=False))
        if answer[0]:
            lock.release()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(5)
    return answer == [True]


def test_a_held_replay_whose_kernel_failed_lets_go_of_the_table(runtime):
    x = np.zeros(4)
    _present(runtime, x)
    first, leave = _call(runtime, (x,), CopyEverything())
    leave()
    ticket, leave = _call(runtime, (x,), CopyEverything(), first.memo, hold=True)
    assert ticket.held and not _lock_is_free(runtime)
    leave(copy_back=False)
    assert _lock_is_free(runtime) and runtime.refcounts(x) == (0, 1)


def test_a_replay_keeps_its_own_device_views_on_emulated(runtime):
    """The emulated device's views are windows on its pool: the memo keeps its own, so a
    device array the program reshapes in place does not change what a replay passes."""
    x = np.zeros(8)
    _present(runtime, x)
    first, leave = _call(runtime, (x,), CopyEverything())
    leave()
    handed_out = runtime.deviceptr(x)
    relayout(handed_out, shape=(4, 2))
    ticket, leave = _call(runtime, (x,), CopyEverything(), first.memo, hold=True)
    assert ticket.device_args[0].shape == (8,)
    leave()


@pytest.mark.parametrize("hold", [False, True])
def test_a_memo_that_lends_nothing_makes_the_entries_device_arrays_at_each_replay(runtime, hold):
    """``lend=False`` (a kernel that may return its arrays to the program): each replay
    passes the entries' device arrays, as the join does (``device_array_of``: what
    ``acc.deviceptr`` gives, holding its memory on cuda; made anew once the program
    changed one in place), never one the memo keeps; such a memo has no express plan."""
    x = np.zeros(8)
    _present(runtime, x)
    queue = runtime.device.sync_queue
    first = enter_compute(runtime, (x,), queue, CopyEverything(), lend=False)
    exit_compute(runtime, first, queue)
    seen = []
    for _ in range(3):
        ticket = enter_compute(runtime, (x,), queue, CopyEverything(), first.memo, hold=hold, lend=False)
        assert ticket.replayed and ticket.device_args[0].shape == (8,)
        seen.append(ticket.device_args[0])
        exit_compute(runtime, ticket, queue)
        relayout(seen[-1], shape=(4, 2))  # the program reshapes what the kernel returned
    assert seen[0] is first.device_args[0] and len({id(array) for array in seen}) == 3
    assert first.memo.express(runtime, (x,)) is None


def test_a_failed_kernel_exit_does_not_copy_back(runtime):
    x = np.zeros(4)
    ticket, leave = _call(runtime, (x,), CopyEverything())
    ticket.device_args[0][:] = 9.0
    leave(copy_back=False)
    assert not runtime.is_present(x)
    np.testing.assert_array_equal(x, 0.0)


def test_an_exit_that_ends_a_lifetime_after_a_join_copies_back(runtime):
    """Joined with the dynamic count, which another thread then drops: the exit's
    decrement ends the lifetime, so the full exit runs (copy-back, free)."""
    x = np.zeros(4)
    _present(runtime, x)
    ticket, leave = _call(runtime, (x,), CopyEverything())
    ticket.device_args[0][:] = 3.0
    runtime.exit_dynamic([MapRequest(MapKind.DELETE, x)], runtime.device.sync_queue)
    assert runtime.refcounts(x) == (1, 0)
    leave()
    assert not runtime.is_present(x)
    np.testing.assert_array_equal(x, 3.0)


def test_shared_memory_replays_count_nothing_and_pass_the_host_arrays():
    device = HostDevice(0)
    runtime = SharedMemoryRuntime(device)
    x = np.zeros(4)
    first, leave = _call(runtime, (x, 1.5), CopyEverything())
    leave()
    ticket, leave = _call(runtime, (x, 1.5), CopyEverything(), first.memo, hold=True)
    assert ticket.replayed and ticket.device_args[0] is x and ticket.entries is None
    leave()
    assert runtime.refcounts(x) == (0, 0)


def test_openmp_maps_take_the_dynamic_count_and_copy_out_at_the_last_release(runtime):
    """API.md §9 (OpenMP 5.2 §5.8.3): a compute construct's OpenMP maps change the one
    (dynamic) count; ``ompx_hold`` maps the structured one."""
    x, y = np.zeros(4), np.zeros(4)
    ticket, leave = _call(runtime, (x, y), CopyEverything(dynamic={"arg0"}))
    assert ticket.memo is None  # not replayed: the fast paths count the structured reference
    assert runtime.refcounts(x) == (0, 1) and runtime.refcounts(y) == (1, 0)
    ticket.device_args[0][:] = 2.0
    ticket.device_args[1][:] = 3.0
    leave()
    assert not runtime.is_present(x) and not runtime.is_present(y)
    np.testing.assert_array_equal(x, 2.0)
    np.testing.assert_array_equal(y, 3.0)


def test_an_openmp_map_deleted_during_the_kernel_is_left_alone_by_its_exit(runtime):
    """``target exit data map(delete:)`` while the kernel runs sets the one count to 0:
    the data is unmapped at once and the kernel's exit does nothing (no copy back)."""
    x = np.zeros(4)
    _present(runtime, x)
    ticket, leave = _call(runtime, (x,), CopyEverything(dynamic={"arg0"}))
    assert runtime.refcounts(x) == (0, 2)
    ticket.device_args[0][:] = 9.0
    runtime.exit_dynamic([MapRequest(MapKind.DELETE, x)], runtime.device.sync_queue, finalize=True)
    assert not runtime.is_present(x)
    leave()
    np.testing.assert_array_equal(x, 0.0)


def test_a_failed_held_map_releases_the_openmp_maps_already_entered(runtime):
    """All or nothing: the ``ompx_hold`` part of the entry fails (``present`` of absent
    data), so the dynamic part entered first is released again."""
    x, y = np.zeros(4), np.zeros(4)
    sorter = CopyEverything(dynamic={"arg0"}, kinds={1: MapKind.PRESENT})
    with pytest.raises(Exception, match="not present|present"):
        _call(runtime, (x, y), sorter)
    assert not runtime.is_present(x) and not runtime.is_present(y)
    assert runtime.records() == []


def test_openmp_maps_of_present_data_join_and_replay_on_the_dynamic_count(runtime):
    """A region whose maps are all OpenMP maps joins present data on the dynamic count
    and replays it, counted or held, the same way."""
    x = np.zeros(4)
    _present(runtime, x)
    sorter = CopyEverything(dynamic={"arg0"})
    first, leave = _call(runtime, (x,), sorter)
    assert first.memo is not None and first.memo.counter is Counter.DYNAMIC
    assert runtime.refcounts(x) == (0, 2)
    leave()
    assert runtime.refcounts(x) == (0, 1)
    ticket, leave = _call(runtime, (x,), sorter, first.memo)
    assert ticket.replayed and runtime.refcounts(x) == (0, 2)
    leave()
    ticket, leave = _call(runtime, (x,), sorter, first.memo, hold=True)
    assert ticket.held
    leave()
    assert runtime.refcounts(x) == (0, 1) and sorter.sorted == 1


def test_a_replayed_openmp_map_deleted_meanwhile_is_left_alone_by_its_exit(runtime):
    x = np.zeros(4)
    _present(runtime, x)
    sorter = CopyEverything(dynamic={"arg0"})
    first, leave = _call(runtime, (x,), sorter)
    leave()
    ticket, leave = _call(runtime, (x,), sorter, first.memo)
    ticket.device_args[0][:] = 4.0
    runtime.exit_dynamic([MapRequest(MapKind.DELETE, x)], runtime.device.sync_queue, finalize=True)
    _present(runtime, x)  # mapped again by the other thread: a new entry, not the kernel's
    leave()
    assert runtime.refcounts(x) == (0, 1)
    np.testing.assert_array_equal(x, 0.0)
