"""The launcher's replay plan and the runtime's present-increment fast paths must give
exactly the answers of the full path (API.md §2, §6): these are the cases where a stale
shortcut would go wrong."""

import gc
import weakref

import numpy as np
import pytest

import pyacc as acc
import pyacc.testing
from pyacc.mapping import BUS, EventKind
from tests.relayout import relayout


@acc.parallel_loop(reduction="+:total")
def total_of(x):
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i]
    return total


@acc.parallel_loop
def fill_first_dim(x):
    for i in range(x.shape[0]):
        x[i] = 1.0


@acc.parallel_loop
def scale(x, factor):
    for i in range(x.shape[0]):
        x[i] = x[i] * factor


def test_async_call_returns_a_handle_even_after_fast_synchronous_calls(emulated):
    x = np.ones(8)
    with acc.data(copyin=[x]):
        total_of(x)
        total_of(x)  # now replayed
        handle = total_of(x, async_=1)
        assert isinstance(handle, acc._compute.AsyncResult) and handle.result() == 8.0
        assert total_of(x) == 8.0


def test_in_place_reshape_of_a_mapped_array_is_seen_by_the_next_call(emulated):
    x = np.zeros(8)
    with acc.data(copy=[x]):
        fill_first_dim(x)
        fill_first_dim(x)
        acc.deviceptr(x)[:] = 0.0
        relayout(x, shape=(4, 2))  # same buffer, new shape: the kernel must see 4 rows
        acc.update(device=[x])
        fill_first_dim(x)
        assert acc.deviceptr(x).shape == (4, 2)
    assert (x == 1.0).all()  # plain Python semantics: x[i] = 1.0 fills whole rows


def test_shutdown_inside_a_region_ends_its_lifetimes_cleanly(emulated):
    a = np.arange(4.0)
    with acc.data(copy=[a]):
        acc.shutdown("emulated")
        assert not acc.is_present(a)
    assert list(a) == [0.0, 1.0, 2.0, 3.0]  # nothing copied back from freed memory
    assert acc.present_table() == []


def test_replayed_calls_publish_region_enter_and_exit(emulated):
    x = np.ones(4)
    seen = []
    BUS.subscribe(seen.append, kinds=(EventKind.REGION_ENTER, EventKind.REGION_EXIT))
    try:
        with acc.data(copy=[x]):
            for _ in range(3):
                scale(x, 2.0)
    finally:
        BUS.unsubscribe(seen.append, kinds=(EventKind.REGION_ENTER, EventKind.REGION_EXIT))
    kinds = [event.kind for event in seen]
    assert kinds.count(EventKind.REGION_ENTER) == kinds.count(EventKind.REGION_EXIT) == 4


def test_a_non_array_where_the_plan_had_an_array_takes_the_full_path(emulated):
    x = np.ones(4)
    with acc.data(copy=[x]):
        scale(x, 2.0)
        scale(x, 2.0)
        with pytest.raises((acc.CompileError, TypeError, acc.AccError)) as caught:
            scale([1.0, 2.0], 2.0)
        assert not isinstance(caught.value, AttributeError)


def test_a_new_scalar_type_gets_its_own_kernel(emulated):
    x = np.ones(4)
    with acc.data(copy=[x]):
        scale(x, 2.0)
        scale(x, 2.0)
        scale(x, 3)  # an int factor: another argument kind
    assert (x == 12.0).all()


def test_the_call_plan_keeps_no_array_alive(emulated):
    x = np.ones(16)
    reference = weakref.ref(x)
    with acc.data(copy=[x]):
        scale(x, 2.0)
        scale(x, 2.0)
    del x
    gc.collect()
    assert reference() is None


def test_keyword_arguments_and_defaults_bind_as_in_python(emulated):
    x = np.ones(4)
    scale(factor=3.0, x=x)
    assert (x == 3.0).all()
    with pytest.raises(TypeError):
        scale(x, 2.0, x=x)
    with pytest.raises(TypeError):
        scale(x)


def test_read_only_array_in_a_copy_clause_is_refused_at_entry(emulated):
    frozen = np.ones(4)
    frozen.flags.writeable = False
    other = np.zeros(4)
    with pytest.raises(acc.InvalidArgumentError, match="read-only"):
        acc.data(copy=[other, frozen]).__enter__()
    assert acc.present_table() == []
    with acc.data(copyin=[frozen]):  # reading it is fine
        assert acc.is_present(frozen)


@acc.parallel_loop
def copy_into(destination, source):
    for i in range(destination.shape[0]):
        destination[i] = source[i] + 1.0


def test_alternating_argument_orders_each_keep_a_replay_plan(emulated, monkeypatch):
    """A Jacobi loop calls step(u, unew) and step(unew, u) in turn: both orders replay
    their own plan instead of taking the full path every other call."""
    u, unew = np.zeros(6), np.zeros(6)
    full_path = []
    sort = acc._compute.ComputeRegion.sort
    monkeypatch.setattr(acc._compute.ComputeRegion, "sort",
                        lambda self, *a: full_path.append(1) or sort(self, *a))
    with acc.data(copy=[u, unew]):
        for _ in range(5):
            copy_into(unew, u)
            copy_into(u, unew)
    assert len(full_path) == 2  # the first call of each order
    np.testing.assert_array_equal(u, np.full(6, 10.0))
    np.testing.assert_array_equal(unew, np.full(6, 9.0))


def test_a_kept_plan_is_not_replayed_after_its_arrays_left_the_device(emulated):
    """The plans of earlier calls stay exact when the present table changes under them:
    an array that was unmapped and mapped again (a new device copy) is seen anew."""
    a, b, c = np.zeros(4), np.ones(4), np.full(4, 5.0)
    acc.enter_data(copyin=[a, b, c])
    copy_into(a, b)
    copy_into(a, c)          # a second plan; the first is kept
    acc.exit_data(delete=[b])
    b[:] = 7.0
    acc.enter_data(copyin=[b])
    copy_into(a, b)          # must read the new device copy of b
    acc.exit_data(copyout=[a], delete=[b, c])
    np.testing.assert_array_equal(a, np.full(4, 8.0))


@acc.parallel_loop
def add_one(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1.0


def test_a_mapped_array_whose_strides_changed_in_place_is_looked_up_again(emulated):
    """NumPy (deprecated since 2.4) still lets ``x.strides`` be set in place: the same
    array object then covers other bytes. A replayed plan must not run the kernel on
    device memory outside x's mapping; the full path refuses the view (partly present:
    OpenACC 3.3 §2.7.3), changing nothing."""
    big = np.zeros(8)
    x = big[:4]
    with acc.data(copy=[x]):
        add_one(x)
        add_one(x)  # replayed
        relayout(x, strides=(16,))  # now big[0:8:2]: half of it outside the mapping
        with pytest.raises(acc.PartlyPresentError, match="'x'.*partly present"):
            add_one(x)
        assert acc.refcounts(big[:4]) == (1, 0)
        relayout(x, strides=(8,))
        add_one(x)
    np.testing.assert_array_equal(big, [3.0, 3.0, 3.0, 3.0, 0.0, 0.0, 0.0, 0.0])


def test_the_call_plan_keeps_no_device_array_alive(emulated):
    """The plan reuses the device arrays of its call by weak reference only: once the
    data region ends, the device array of x is gone."""
    x = np.ones(16)
    with acc.data(copy=[x]):
        scale(x, 2.0)
        scale(x, 2.0)
        device_array = weakref.ref(acc.deviceptr(x))
        scale(x, 2.0)  # replayed with the kept device array
    gc.collect()
    assert device_array() is None
    np.testing.assert_array_equal(x, 8.0)


def test_a_strided_view_of_present_data_replays_with_a_fresh_device_view(emulated):
    x = np.zeros(8)
    evens = x[::2]
    with acc.data(copy=[x]):
        for _ in range(3):
            add_one(evens)
    np.testing.assert_array_equal(x, [3.0, 0.0] * 4)


def test_a_launch_fault_hits_a_replayed_call_and_leaves_no_trace_after_the_plan(emulated):
    x = np.zeros(4)
    device = acc._devices.current_runtime().device
    with acc.data(copy=[x]):
        add_one(x)
        add_one(x)  # replayed from now on
        with acc.testing.inject_faults(launch=1) as plan:
            with pytest.raises(acc.ExecutionError, match="injected fault"):
                add_one(x)
        assert plan.fired
        assert "launch" not in vars(device)  # launches without a plan pay nothing for it
        assert acc.refcounts(x) == (1, 0)
        add_one(x)
    np.testing.assert_array_equal(x, 3.0)


@acc.parallel_loop
def iota(x):
    for i in range(x.shape[0]):
        x[i] = i


def test_a_device_array_reshaped_in_place_by_the_program_is_not_reused(emulated):
    """``acc.deviceptr`` hands out the device array the plan keeps; a program that
    reshapes it in place must not change what the next replayed call sees."""
    x = np.zeros(8)
    with acc.data(copy=[x]):
        iota(x)
        iota(x)  # replayed
        device_x = acc.deviceptr(x)
        device_x[:] = -1.0
        relayout(device_x, shape=(4, 2))  # the program's own business: x is still 8 long
        iota(x)
        assert device_x.shape == (4, 2)
    np.testing.assert_array_equal(x, np.arange(8.0))


def test_a_silent_synchronous_replay_holds_the_table_instead_of_counting(emulated, monkeypatch,
                                                                         python_launcher):
    """With nobody subscribed to events, a replayed synchronous call holds the table lock
    for its kernel (``hold_structured``) and counts nothing; the counts seen before and
    after are those of the full path. (The express lane holds it the same way, in C:
    tests/pyacc/test_express.py.)"""
    x = np.zeros(8)
    runtime = acc._devices.current_runtime()
    held, counted = [], []
    hold, rejoin = runtime.hold_structured, runtime.rejoin_structured
    monkeypatch.setattr(runtime, "hold_structured", lambda record: held.append(1) or hold(record))
    monkeypatch.setattr(runtime, "rejoin_structured", lambda record: counted.append(1) or rejoin(record))
    with acc.data(copy=[x]):
        for _ in range(3):
            add_one(x)
        assert acc.refcounts(x) == (1, 0)
    assert len(held) == 2 and not counted
    np.testing.assert_array_equal(x, 3.0)


def test_an_observed_replay_counts_and_publishes_each_increment(emulated):
    """A subscriber to ENTER_DATA sees the compute call's structured increment at every
    call, replayed or not (the held form is for calls nobody observes)."""
    x = np.zeros(8)
    seen = []

    def listener(event):
        seen.append(event.counters)

    with acc.data(copy=[x]):
        add_one(x)
        add_one(x)  # a plan exists now
        BUS.subscribe(listener, (EventKind.ENTER_DATA,))
        try:
            add_one(x)
            add_one(x)
        finally:
            BUS.unsubscribe(listener, (EventKind.ENTER_DATA,))
    assert [after for _, after in seen] == [(2, 0), (2, 0)]
    np.testing.assert_array_equal(x, 4.0)


def test_an_enclosing_default_none_is_seen_by_a_replayed_call(emulated):
    """The plan of a call made outside ``default(none)`` does not apply inside it: the
    call without a data clause for its array is refused (OpenACC 3.3 §2.6.2)."""
    x = np.zeros(4)
    with acc.data(copy=[x]):
        add_one(x)
        add_one(x)
        with acc.data(present=[x], default="none"):
            with pytest.raises(acc.ClauseError, match="default"):
                add_one(x)
        add_one(x)
    np.testing.assert_array_equal(x, 3.0)


def test_a_serial_crossover_set_between_calls_takes_effect_at_the_next_call(emulated, monkeypatch):
    """PYACC_SERIAL_BELOW decides the kernel (compiler.kernel_env): a replayed call made
    after it changed compiles the kernel for the new value."""
    x = np.zeros(4)
    with acc.data(copy=[x]):
        add_one(x)
        add_one(x)
        before = set(add_one.info.kernels)
        monkeypatch.setenv("PYACC_SERIAL_BELOW", "0")
        add_one(x)
        added = set(add_one.info.kernels) - before
    assert len(added) == 1 and next(iter(added))[4] == 0
    np.testing.assert_array_equal(x, 3.0)


def test_a_kernel_failing_in_a_held_replay_lets_other_threads_at_the_table(emulated):
    """The held replay's exit runs when the kernel raises too: another thread can map
    data right after the failed call."""
    import threading
    x = np.zeros(4)
    with acc.data(copy=[x]):
        add_one(x)
        add_one(x)
        with acc.testing.inject_faults(launch=1):
            with pytest.raises(acc.ExecutionError):
                add_one(x)
        done = []

        def other():
            acc.set_device_type("emulated")  # device selection is per thread
            done.append(acc.refcounts(x))

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(5)
        assert done == [(1, 0)]


@acc.parallel_loop("num_gangs((n + 127) / 128)")
def add_n(x, n):
    for i in range(x.shape[0]):
        x[i] = x[i] + n


def test_a_launch_shape_evaluated_at_the_call_is_part_of_the_plan(emulated):
    """On cuda a launch shape is part of the kernel: a call whose clause expression
    evaluates to another shape does not replay the plan of the first (API.md §6.1)."""
    x = np.zeros(4)
    with acc.data(copy=[x]):
        add_n(x, 1)
        add_n(x, 1)  # replayed: the same shape
        assert len(add_n._call_plans) == 1
        add_n(x, 1000)  # 8 gangs instead of 1: its own plan
        assert len(add_n._call_plans) == 2
    np.testing.assert_array_equal(x, 1002.0)


@acc.kernels
def numbered(x):
    for i in range(x.shape[0]):
        x[i] = i
    return x


def test_a_returned_device_array_changed_in_place_changes_no_later_call(emulated):
    """A region that returns its array hands the program the entry's device array (what
    ``acc.deviceptr`` gives), never a view its replays keep: reshaping it in place does
    not reshape what later calls launch with."""
    x = np.zeros(8)
    with acc.data(copy=[x]):
        for _ in range(3):
            x[:] = -1.0
            acc.update_device(x)
            returned = numbered(x)
            relayout(returned, shape=(2, 4))  # (as a kernel given it would number its 2 rows)
    np.testing.assert_array_equal(x, np.arange(8.0))
