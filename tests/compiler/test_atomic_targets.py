"""What an ``acc.atomic`` update may update (OpenACC 3.3 §2.12): an element of an array,
a 0-d array's included, in parallel loops too; anything else is a CompileError that says
what to write."""
from __future__ import annotations

import numpy as np
import pytest

import pyacc as acc


@acc.parallel_loop
def total_into_zero_d(t, v):
    for x in range(v.shape[0]):
        acc.atomic.add(t, (), v[x])


@acc.parallel_loop
def capture_into_zero_d(t, v, olds):
    for x in range(v.shape[0]):
        olds[x] = acc.atomic.max(t, (), v[x])


def test_atomic_update_of_a_zero_d_array_in_a_parallel_loop(device, monkeypatch):
    monkeypatch.setenv("PYACC_SERIAL_BELOW", "0")  # the parallel form at any size
    t = np.zeros(())
    total_into_zero_d(t, np.ones(100_000))
    assert t[()] == 100_000.0
    top, v = np.zeros(()), np.arange(1000.0)
    olds = np.full(1000, -1.0)
    capture_into_zero_d(top, v, olds)
    assert top[()] == 999.0 and olds.min() == 0.0 and olds.max() <= 999.0  # old values


@acc.parallel_loop
def multiplies(t, v):
    for x in range(v.shape[0]):
        acc.atomic.mul(t, x % 3, v[x])


@acc.parallel_loop
def adds_to_a_scalar(s, v):
    for x in range(v.shape[0]):
        acc.atomic.add(s, 0, v[x])


@acc.parallel_loop
def bitwise_on_floats(t, v):
    for x in range(v.shape[0]):
        acc.atomic.xor(t, 0, v[x])


@acc.parallel_loop
def adds_to_an_element(t, v):
    for x in range(v.shape[0]):
        acc.atomic.add(t[0], 0, v[x])


@pytest.mark.parametrize("region, args, message", [
    (adds_to_an_element, (np.ones(3), np.ones(9)), r"takes the array and the index of its "
                                                   r"element: write acc.atomic.add\(t, <index>"),
    (multiplies, (np.ones(3), np.ones(9)), r"acc.atomic.mul is not an atomic operation; "
                                          r"the atomic updates are acc.atomic.add"),
    (adds_to_a_scalar, (1.0, np.ones(9)), r"updates an element of an array, not 's'"),
    (bitwise_on_floats, (np.ones(3), np.ones(9)), r"bitwise update: 't' holds float64"),
])
def test_a_bad_atomic_update_says_what_to_write(host_device, region, args, message):
    with pytest.raises(acc.CompileError, match=message):
        region(*args)
