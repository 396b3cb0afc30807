"""``private``/``firstprivate`` arrays are the region's or the loop's own wherever the code
that uses them runs (OpenACC 3.3 §2.5.13, 2.5.14, 2.9.10): in a ``serial`` region, around a
``parallel`` region's loops, in loops that run as written, and in inner loops of a
parallel nest. The program's array (host or device copy) is never written through them.
"""
from __future__ import annotations

import numpy as np
import pytest
import pyacc as acc


@acc.serial(private="c")
def serial_private(c, d):
    for y in range(c.shape[0]):
        c[y] = 5.0 + y
    for y in range(c.shape[0]):
        d[y] = c[y]


@acc.serial(firstprivate="c")
def serial_firstprivate(c, d):
    for y in range(c.shape[0]):
        c[y] += 1.0
    for y in range(c.shape[0]):
        d[y] = c[y]


@acc.parallel(private="tmp")
def parallel_private_around_loops(a, tmp):
    tmp[0] = -1.0  # the gang's copy, not the program's
    for i in acc.loop(range(a.shape[0])):
        for k in range(tmp.shape[0]):
            tmp[k] = i + k
        a[i] = tmp[0] + tmp[tmp.shape[0] - 1]


@acc.serial
def loop_private_in_serial(c, d):
    for x in acc.loop(range(d.shape[0]), private="c"):
        for y in range(c.shape[0]):
            c[y] = 10.0 * x + y
        d[x] = c[0] + c[c.shape[0] - 1]


@acc.kernels
def loop_private_in_seq_kernels_loop(c, d):
    for x in acc.loop(range(d.shape[0]), seq=True, private="c"):
        for y in range(c.shape[0]):
            c[y] = 10.0 * x + y
        d[x] = c[0] + c[c.shape[0] - 1]


@acc.parallel
def inner_loop_private(a, tmp):
    n, m = a.shape
    for i in acc.loop(range(n), gang=True):
        for j in acc.loop(range(m), vector=True, private="tmp"):
            for k in range(4):
                tmp[k] = i * 1000.0 + j + k
            s = 0.0
            for k in range(4):
                s += tmp[k]
            a[i, j] = s


@acc.parallel_loop(gang=True)
def inner_loop_private_of_a_combined_construct(a, tmp):
    n, m = a.shape
    for i in range(n):
        for j in acc.loop(range(m), vector=True, private="tmp"):
            for k in range(4):
                tmp[k] = i * 1000.0 + j + k
            a[i, j] = tmp[0] + tmp[1] + tmp[2] + tmp[3]


def test_construct_private_array_of_serial_is_the_regions_own(device):
    c, d = np.full(3, 7.0), np.zeros(3)
    serial_private(c, d)
    assert list(d) == [5.0, 6.0, 7.0] and list(c) == [7.0, 7.0, 7.0]


def test_construct_firstprivate_array_of_serial_starts_as_a_copy(device):
    c, d = np.full(3, 7.0), np.zeros(3)
    serial_firstprivate(c, d)
    assert list(d) == [8.0, 8.0, 8.0] and list(c) == [7.0, 7.0, 7.0]


def test_construct_firstprivate_of_present_data_leaves_the_device_copy(separate_memory):
    c, d = np.full(3, 7.0), np.zeros(3)
    with acc.data(copyin=[c]):
        serial_firstprivate(c, d)
        serial_private(c, d)
        c[:] = 0.0
        acc.update_self(c)
    assert list(c) == [7.0, 7.0, 7.0] and list(d) == [5.0, 6.0, 7.0]


def test_construct_private_array_of_parallel_outside_its_loops(device):
    a, tmp = np.zeros(500), np.full(4, 7.0)
    parallel_private_around_loops(a, tmp)
    assert np.array_equal(a, 2 * np.arange(500.0) + 3) and list(tmp) == [7.0] * 4


def test_loop_private_array_in_a_serial_region(device):
    c, d = np.full(3, 7.0), np.zeros(4)
    loop_private_in_serial(c, d)
    assert list(d) == [20.0 * x + 2 for x in range(4)] and list(c) == [7.0] * 3


def test_loop_private_array_on_a_seq_loop_of_kernels(device):
    c, d = np.full(3, 7.0), np.zeros(4)
    loop_private_in_seq_kernels_loop(c, d)
    assert list(d) == [20.0 * x + 2 for x in range(4)] and list(c) == [7.0] * 3


def test_inner_loop_private_array_is_each_iterations_own(device):
    n, m = 3000, 48
    expected = 4 * (1000.0 * np.arange(n)[:, None] + np.arange(m)[None, :]) + 6
    for region in (inner_loop_private, inner_loop_private_of_a_combined_construct):
        a, tmp = np.zeros((n, m)), np.full(4, 7.0)
        region(a, tmp)
        assert np.array_equal(a, expected), region.__name__
        assert list(tmp) == [7.0] * 4, region.__name__


def test_private_array_that_is_present_is_not_written(separate_memory):
    a, tmp = np.zeros((200, 8)), np.full(4, 7.0)
    with acc.data(copyin=[tmp], copyout=[a]):
        inner_loop_private(a, tmp)
        parallel_private_around_loops(a[:, 0].copy(), tmp)
        tmp[:] = 0.0
        acc.update_self(tmp)
    assert list(tmp) == [7.0] * 4


@acc.parallel(private="c")
def private_set_before_the_loop(c, d):
    for y in range(c.shape[0]):
        c[y] = 5.0 + y
    for x in acc.loop(range(d.shape[0])):
        d[x] = c[x % c.shape[0]]


@acc.parallel(firstprivate="c")
def firstprivate_set_before_the_loop(c, d):
    c[0] = 5.0
    for x in acc.loop(range(d.shape[0])):
        d[x] = c[x % c.shape[0]]


def test_what_the_region_stores_in_its_private_copy_is_what_its_loop_reads(device):
    """OpenACC 3.3 §2.5.13: one copy per gang; the gang's loop reads what the gang's
    redundant code stored in it (each chunk's copy starts from the region's)."""
    c, d = np.full(4, 7.0), np.zeros(1000)
    private_set_before_the_loop(c, d)
    assert list(d[:4]) == [5.0, 6.0, 7.0, 8.0] and (d[4:8] == d[:4]).all()
    assert list(c) == [7.0] * 4
    firstprivate_set_before_the_loop(c, d)
    assert list(d[:4]) == [5.0, 7.0, 7.0, 7.0] and list(c) == [7.0] * 4


@acc.kernels_loop(private="t")
def private_of_a_kernels_loop_run_as_written(b, t):
    for i in range(1, b.shape[0]):  # a dependence: the loop runs as written
        t[0] = 2.0
        b[i] = b[i - 1] + t[0]


@acc.serial(private="t")
def private_zero_d(a, t):
    t[()] = 5.0
    a[0] = t[()]


def test_private_of_a_kernels_loop_that_runs_as_written_is_the_loops_own(device):
    b, t = np.zeros(5), np.full(1, -1.0)
    with pytest.warns(acc.PerformanceWarning):
        private_of_a_kernels_loop_run_as_written(b, t)
    assert list(b) == [0.0, 2.0, 4.0, 6.0, 8.0] and list(t) == [-1.0]


def test_a_zero_d_private_array_is_the_regions_own(device):
    a, t = np.zeros(1), np.array(-1.0)
    private_zero_d(a, t)
    assert a[0] == 5.0 and t[()] == -1.0


def test_a_read_only_private_array_is_accepted_everywhere(device):
    """Its writes go to the region's copy: nothing lands in the read-only array."""
    c, d = np.full(3, 7.0), np.zeros(3)
    c.flags.writeable = False
    serial_private(c, d)
    assert list(d) == [5.0, 6.0, 7.0] and list(c) == [7.0] * 3


def test_a_private_name_the_function_never_makes_says_how_to_make_it():
    """Bad input: C declares a private array (``double stencil[4];``) outside the pragma;
    in Python the function makes it before the loop. A clause naming a name the function
    never binds is a CompileError saying so (miniWeather's ``private(stencil)``)."""
    with pytest.raises(acc.CompileError, match=r"private\(stencil\) does not name a "
                       r"parameter or a local variable: a private array is made in the "
                       r"function before the loop, .*stencil = np.empty\(4\)"):
        @acc.parallel_loop("private(stencil)")
        def uses_stencil(a):
            for i in range(a.shape[0]):
                a[i] = 0.0
