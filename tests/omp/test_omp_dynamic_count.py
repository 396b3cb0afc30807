"""Which count the maps of an OpenMP compute construct change (API.md §9).

API.md §9: OpenMP maps — of compute constructs too — change the entry's *dynamic* count;
``hold`` maps the structured count; an exit whose dynamic count is already 0 does
nothing (``TargetRegion.counter_of``, ``mapping.compute``). What a program can observe:

- the same as with OpenACC's structured count: counts and transfers before and after a
  kernel (inside ``target_data`` or not), ``nowait`` kernels and a later
  ``target_exit_data`` (a construct changes counts at once, on the calling thread),
  ``hold`` kernels;
- OpenMP's own: ``acc.refcounts`` and the ``enter_data``/``exit_data`` profiling events
  *during* the kernel show the dynamic count, and a
  ``target_exit_data(map_delete/map_release)`` made by another thread while the kernel
  runs unmaps the data at once; the kernel's exit, finding the dynamic count at 0, does
  nothing (a structured reference would have kept the data mapped and copied it back).

The tests run the other thread's action from an ``enqueue_launch`` profiling callback's
wait (the callback itself only waits: callbacks must not call pyacc), on ``emulated``,
where transfers are real.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc import omp

@omp.target_teams_distribute_parallel_for("map(tofrom: a)")
def fill(a):
    for i in range(a.shape[0]):
        a[i] = 1.0


@omp.target_teams_distribute_parallel_for
def fill_implicit(a):  # implicit map(tofrom: a) of an array (§5.8.1)
    for i in range(a.shape[0]):
        a[i] = 1.0


@omp.target_teams_distribute_parallel_for("map(ompx_hold, tofrom: a)")
def fill_held(a):
    for i in range(a.shape[0]):
        a[i] = 1.0


KERNELS = [fill, fill_implicit]


def during(kernel, action, *args):
    """Call ``kernel(*args)`` while another thread (on this thread's device type) runs
    ``action()`` once the kernel's launch has begun and before the kernel runs; returns
    what ``action`` returned."""
    device_type = acc.get_device_type()
    began, finished = threading.Event(), threading.Event()
    result, waited = [], []

    def at_launch(info):
        if info.variable == kernel.info.name and not began.is_set():
            began.set()
            waited.append(finished.wait(10))

    def other():
        acc.set_device_type(device_type)
        try:
            if began.wait(10):
                result.append(action())
        finally:
            finished.set()

    acc.profiling.register("enqueue_launch", at_launch)
    thread = threading.Thread(target=other)
    thread.start()
    try:
        kernel(*args)
    finally:
        acc.profiling.unregister("enqueue_launch", at_launch)
        thread.join(10)
    if waited != [True] or len(result) != 1:
        raise RuntimeError("the other thread's action did not run during the kernel")
    return result[0]


# == the same either way ======================================================================
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.info.name)
def test_counts_and_transfers_around_a_kernel(emulated, kernel):
    a = np.zeros(8)
    acc.reset_stats()
    kernel(a)
    assert not acc.is_present(a) and (a == 1.0).all()
    with omp.target_data(map_to=[a]):
        a[:] = 5.0  # not sent: the device keeps 1.0
        kernel(a)
        assert acc.refcounts(a) == (0, 1)
        assert (a == 5.0).all()  # the target_data map still holds it: no copy back
    assert (a == 5.0).all()  # map(to:) does not copy back either
    stats = acc.stats()
    assert (stats["h2d_count"], stats["d2h_count"]) == (2, 1)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.info.name)
def test_nowait_kernel_then_exit_data(emulated, kernel):
    a = np.zeros(8)
    omp.target_enter_data(map_to=[a])
    kernel(a, nowait=True)
    assert acc.refcounts(a) == (0, 1)  # the kernel's map came and went at the call
    omp.target_exit_data(map_release=[a])
    assert not acc.is_present(a)
    omp.taskwait()
    assert (a == 0.0).all()  # release copies nothing back


def test_hold_maps_are_structured_during_the_kernel(emulated):
    a = np.zeros(8)
    assert during(fill_held, lambda: acc.refcounts(a), a) == (1, 0)
    omp.target_enter_data(map_to=[a])
    assert during(fill_held, lambda: (omp.target_exit_data(map_delete=[a]), acc.is_present(a))[1], a)
    assert not acc.is_present(a) and (a == 1.0).all()  # the held map's exit copied back


# == OpenMP's one count: what the kernel's maps hold =====================================
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.info.name)
def test_refcounts_during_the_kernel_show_the_dynamic_count(emulated, kernel):
    a = np.zeros(8)
    assert during(kernel, lambda: acc.refcounts(a), a) == (0, 1)
    with omp.target_data(map_tofrom=[a]):
        assert during(kernel, lambda: acc.refcounts(a), a) == (0, 2)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.info.name)
def test_the_kernel_maps_are_dynamic_in_the_profiling_events(emulated, kernel):
    seen = []

    def note(info):
        seen.append((info.event, info.construct))

    a = np.zeros(8)
    acc.profiling.register("enter_data", note)
    acc.profiling.register("exit_data", note)
    try:
        kernel(a)
    finally:
        acc.profiling.unregister("enter_data", note)
        acc.profiling.unregister("exit_data", note)
    assert seen == [("enter_data", "dynamic"), ("exit_data", "dynamic")]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.info.name)
def test_a_delete_during_the_kernel_unmaps_at_once_and_the_kernel_exit_does_nothing(emulated, kernel):
    a = np.zeros(8)
    omp.target_enter_data(map_to=[a])

    def delete():
        omp.target_exit_data(map_delete=[a])
        return acc.is_present(a)

    assert during(kernel, delete, a) is False  # one count: delete sets it to 0
    assert not acc.is_present(a)
    assert (a == 0.0).all()  # the kernel's exit found the count at 0: no copy back


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.info.name)
def test_a_release_during_the_kernel_ends_the_kernels_own_map(emulated, kernel):
    a = np.zeros(8)

    def release():
        omp.target_exit_data(map_release=[a])
        return acc.is_present(a)

    assert during(kernel, release, a) is False  # the kernel's map was the only reference
    assert (a == 0.0).all()
