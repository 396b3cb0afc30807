"""private(t) on a scalar first assigned inside the loop (regression: the chunk copy of
``t`` was emitted before ``t`` existed, a NameError at compile time)."""

import numpy as np

import pyacc as acc


@acc.parallel_loop(private="t")
def double_through_private(x):
    for i in range(x.shape[0]):
        t = x[i] * 2
        x[i] = t


@acc.parallel
def double_through_loop_private(x):
    t = 0.0
    for i in acc.loop(range(x.shape[0]), private="t"):
        t = x[i] * 2
        x[i] = t


def test_private_scalar_defined_only_inside_the_loop(host_device):
    x = np.arange(5.0)
    double_through_private(x)
    assert (x == 2 * np.arange(5.0)).all()


def test_loop_private_scalar_also_assigned_before_the_loop(host_device):
    x = np.arange(5.0)
    double_through_loop_private(x)
    assert (x == 2 * np.arange(5.0)).all()
