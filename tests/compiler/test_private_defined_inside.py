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


def test_only_private_names_that_may_hold_arrays_are_typed_for_the_gpu():
    """On the cuda target a private array the region makes needs its type (rows of
    scratch memory); typing the function costs ~40 ms, so names that can only be scalars
    (loop indices, element reads, arithmetic on them) are not typed."""
    import ast

    import numba

    from pyacc.compiler.typing_probe import may_be_arrays as _may_be_arrays

    tree = ast.parse(
        "def f(a, b):\n"
        "    s = 0.0\n    t = np.zeros(4)\n    row = b[1]\n    e = b[1, 2]\n"
        "    x = a[2] * 3 + e\n    alias = t\n    v = a * 2.0\n    w = b[:, 0]\n"
        "    for k in range(3):\n        pass\n").body[0]
    known = {"a": numba.typeof(np.zeros(3)), "b": numba.typeof(np.zeros((3, 3)))}
    names = {"s", "t", "row", "e", "x", "alias", "v", "w", "k"}
    assert _may_be_arrays(tree, names, known) == {"t", "row", "alias", "v", "w"}
