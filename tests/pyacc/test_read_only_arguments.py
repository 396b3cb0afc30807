"""A read-only host array given to a kernel that may write it (API.md §7: a clear error
naming the array, before anything runs; the same at every call and on every path).

On ``host`` the kernel writes the host array itself: the launcher refuses it
(``ArgumentSorting._refuse_read_only``), and neither the express lane's plan nor a call
plan's memo takes a read-only array where they were made with a writeable one. On a
device with its own memory the kernel writes the device copy: an absent array would be
copied back into the read-only one, so the entry refuses it (``copy: ... is read-only``);
a present one is used in place, and nothing is copied back into it by the call.
"""
from __future__ import annotations

import numpy as np
import pytest

import pyacc as acc

# the fixtures ``device`` (host, emulated) and ``lane`` (the express lane on, or off)
from test_async_at_once import device, lane  # noqa: F401

N = 4


@acc.parallel_loop
def fill(y):
    for i in range(y.shape[0]):
        y[i] = 5.0


@acc.parallel_loop(reduction="+:s")
def total(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return s


def _read_only(array):
    array.flags.writeable = False
    return array


def _refusal(device):
    return (r"the kernel writes argument 'y' .* read-only; on host" if device == "host"
            else r"copy: 'y' .* is read-only, so its device data could not be copied back")


@pytest.mark.parametrize("warm", ["first call", "after calls with a writeable array",
                                  "the same array made read-only"])
def test_a_read_only_array_a_kernel_writes_is_refused_at_every_call(device, lane, warm):
    y = np.zeros(N)
    if warm != "first call":
        for _ in range(5):
            fill(y)
    frozen = _read_only(y if warm == "the same array made read-only" else np.zeros(N))
    before = frozen.copy()
    for _ in range(3):  # the same error each time, by whichever path the call takes
        with pytest.raises(acc.InvalidArgumentError, match=_refusal(device)):
            fill(frozen)
    np.testing.assert_array_equal(frozen, before)
    assert acc.refcounts(frozen) == (0, 0)


def test_a_read_only_array_a_kernel_only_reads_is_fine(device, lane):
    x = _read_only(np.ones(N))
    assert [total(x) for _ in range(5)] == [float(N)] * 5


def test_a_present_read_only_array_is_written_on_the_device_only(emulated, lane):
    frozen = _read_only(np.zeros(N))
    with acc.data(copyin=[frozen]):
        for _ in range(3):
            fill(frozen)
        np.testing.assert_array_equal(acc.deviceptr(frozen), 5.0)
    np.testing.assert_array_equal(frozen, 0.0)


def test_a_copy_clause_on_present_read_only_data_is_accepted(emulated):
    """The entry of a present array copies nothing and its exit copies back only if it
    ends the mapping: refused only where a copy would land (``plan_entry``)."""
    frozen = _read_only(np.zeros(N))
    with acc.data(copyin=[frozen]):
        with acc.data(copy=[frozen]):
            assert acc.refcounts(frozen) == (2, 0)
    assert acc.refcounts(frozen) == (0, 0)
