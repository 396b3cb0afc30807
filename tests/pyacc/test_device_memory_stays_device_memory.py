"""Device memory stays device memory, end to end (issue 29 item 2; API.md §6.2; OpenACC 3.3
§2.7.4): an array pyacc allocated on the device (``acc.malloc``, ``acc.deviceptr``,
``host_data``) is passed to a kernel as it is, on every device type, and ``deviceptr(...)``
on a data construct applies to the compute constructs inside it. Transfers are counted
with ``acc.stats()``: the device array moves 0 bytes.

EXPECTED TO FAIL on ``emulated`` until ``ComputeRegion.sort`` (pyacc/_compute.py) asks
``Device.owns`` and ``pyacc._devices.enclosing_deviceptr`` (the facts of
tests/mapping and tests/pyacc/test_device_memory.py), and until a replayed call plan
(``pyacc._replay.CallPlan``) checks that an array it passed as device memory is the same
object (``test_a_host_array_in_a_slot_that_held_device_memory_is_still_copied``). Nothing
here is marked xfail: the lead runs this file after wiring them. The reproduction printed
8000 bytes each way for ``d`` on ``emulated``; ``host`` and ``cuda`` (the fake GPU:
``NUMBA_ENABLE_CUDASIM=1 PYACC_TESTING_FAKE_CUDA=1``, or the subprocess test below) pass
already and guard the rule there — except the replayed plan on ``cuda``, which today
hands a later host array in a CuPy array's slot to the GPU kernel (the same fix).
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyacc as acc


@acc.parallel_loop
def scale_into(d, x):
    for i in range(x.shape[0]):
        d[i] = 2.0 * x[i]


@acc.parallel_loop
def add_one(v):
    for i in range(v.shape[0]):
        v[i] += 1.0


# the multigrid-like cycle: smoothing, residual, restriction, prolongation
@acc.parallel_loop
def smooth(u, r):
    for i in range(u.shape[0]):
        u[i] = 0.5 * (u[i] + r[i])


@acc.parallel_loop
def residual(u, f, r):
    for i in range(u.shape[0]):
        r[i] = f[i] - 0.25 * u[i]


@acc.parallel_loop
def restrict(fine, coarse):
    for i in range(coarse.shape[0]):
        coarse[i] = 0.5 * (fine[2 * i] + fine[2 * i + 1])


@acc.parallel_loop
def prolong(coarse, fine):
    for i in range(coarse.shape[0]):
        fine[2 * i] += coarse[i]
        fine[2 * i + 1] += coarse[i]


def _moved():
    """Bytes moved each way and blocks allocated since the last ``reset_stats``."""
    stats = acc.stats()
    return stats["h2d_bytes"], stats["d2h_bytes"], stats["alloc_count"]


def _host_copy(d, like):
    out = np.empty_like(like)
    acc.memcpy_from_device(out, d)
    return out


def _n(device, n):
    """Fewer elements on cuda: the fake GPU simulates every thread (~100 µs each)."""
    return max(n // 16, 8) if device == "cuda" else n


def test_malloc_memory_in_a_data_regions_deviceptr_is_not_copied_by_a_kernel(device):
    """The issue's reproduction: ``f(d, x)`` inside ``acc.data(deviceptr=[d],
    present=[x])`` moves nothing (it moved 8000 B each way on ``emulated``)."""
    n = _n(device, 1000)
    d = acc.malloc((n,), np.float64)
    x = np.arange(float(n))
    acc.copyin(x)
    with acc.data(deviceptr=[d], present=[x]):
        acc.reset_stats()
        scale_into(d, x)
        assert _moved() == (0, 0, 0)
    assert np.array_equal(_host_copy(d, x), 2.0 * x)
    acc.delete(x)
    acc.free(d)


def test_malloc_memory_is_device_memory_wherever_it_is_passed(device):
    """No ``deviceptr`` clause anywhere: memory from ``acc.malloc`` is still device
    memory (API.md §6.2), never copied in or out as if it were host data."""
    n = _n(device, 1000)
    d = acc.malloc((n,), np.float64)
    x = np.ones(n)
    with acc.data(copyin=[x]):
        acc.reset_stats()
        for _ in range(3):  # the first call, a join and the replays
            scale_into(d, x)
        assert _moved() == (0, 0, 0)
    assert np.array_equal(_host_copy(d, x), np.full(n, 2.0))
    acc.free(d)


def test_a_view_of_device_memory_is_device_memory(device):
    """A section of an ``acc.malloc`` array (``d[lo:hi]``) is device memory too."""
    n = _n(device, 1000)
    d = acc.malloc((n,), np.float64)
    acc.memcpy_to_device(d, np.zeros(n))
    x = np.ones(n // 2)
    with acc.data(copyin=[x], deviceptr=[d]):
        acc.reset_stats()
        scale_into(d[n // 4:n // 4 + n // 2], x)
        assert _moved() == (0, 0, 0)
    expected = np.zeros(n)
    expected[n // 4:n // 4 + n // 2] = 2.0
    assert np.array_equal(_host_copy(d, expected), expected)
    acc.free(d)


def test_the_device_array_of_acc_deviceptr_is_used_in_place_by_a_kernel(device):
    """``acc.deviceptr(x)`` is the device copy of present ``x``: a kernel given it
    writes that copy, and ``update self`` brings the change to the host."""
    n = _n(device, 1000)
    x = np.zeros(n)
    with acc.data(copyin=[x]):
        acc.reset_stats()
        add_one(acc.deviceptr(x))
        assert _moved() == (0, 0, 0)
        acc.update_self(x)
    assert np.array_equal(x, np.ones(n))


def test_host_data_device_arrays_are_used_in_place_by_a_kernel(device):
    """``host_data use_device`` gives device arrays (OpenACC 3.3 §2.8): a kernel called
    with them inside the block moves nothing."""
    n = _n(device, 1000)
    x = np.zeros(n)
    with acc.data(copy=[x]):
        with acc.host_data(use_device=x) as dx:
            acc.reset_stats()
            add_one(dx)
            add_one(dx)
            assert _moved() == (0, 0, 0)
    assert np.array_equal(x, np.full(n, 2.0))


def test_a_host_array_in_a_slot_that_held_device_memory_is_still_copied(device):
    """A replayed call plan must not take a host array for the device array an earlier
    call passed in the same slot: ``scale_into(y, x)`` after ``scale_into(d, x)`` copies
    ``y`` back (it is host data, absent: present-or-copy, OpenACC 3.3 §2.6.2)."""
    n = _n(device, 1000)
    d = acc.malloc((n,), np.float64)
    x, y = np.ones(n), np.zeros(n)
    with acc.data(copyin=[x]):
        for _ in range(3):
            scale_into(d, x)
        acc.reset_stats()
        scale_into(y, x)
        copied = _moved()
    assert np.array_equal(y, np.full(n, 2.0))
    if device != "host":  # (on shared memory nothing is ever copied)
        assert copied == (y.nbytes, y.nbytes, 1)  # (a kernel writing the host array in
        # place would give the same values on the CPU, and fault on a GPU)
    acc.free(d)


def _levels(device):
    sizes, n = [], _n(device, 512)
    while n >= 8:
        sizes.append(n)
        n //= 2
    return sizes


def _v_cycle(u, r, f, smooth, residual, restrict, prolong):
    """One V-cycle over the levels (finest first); the same code runs on the device and
    on numpy arrays (the reference)."""
    levels = len(u)
    for level in range(levels - 1):
        smooth(u[level], r[level])
        residual(u[level], f if level == 0 else r[level], r[level])
        restrict(r[level], r[level + 1])
    smooth(u[-1], r[-1])
    for level in range(levels - 2, -1, -1):
        prolong(u[level + 1], u[level])
        smooth(u[level], r[level])


def _numpy_kernels():
    def smooth_(u, r):
        u[:] = 0.5 * (u + r)

    def residual_(u, f, r):
        r[:] = f - 0.25 * u

    def restrict_(fine, coarse):
        coarse[:] = 0.5 * (fine[0::2] + fine[1::2])

    def prolong_(coarse, fine):
        fine[0::2] += coarse
        fine[1::2] += coarse

    return smooth_, residual_, restrict_, prolong_


def test_a_multigrid_loop_on_malloc_levels_moves_no_data(device):
    """The pattern that moved 33.4 MB up and 16.4 MB down instead of 0.63 MB and 0: the
    levels live in ``acc.malloc`` memory listed in ``deviceptr`` of a data region, the
    right-hand side is present, and many kernel calls move nothing."""
    sizes = _levels(device)
    cycles = 3 if device == "cuda" else 20
    f = np.linspace(0.0, 1.0, sizes[0])
    u = [acc.malloc((n,), np.float64) for n in sizes]
    r = [acc.malloc((n,), np.float64) for n in sizes]
    for array in u + r:
        acc.memcpy_to_device(array, np.zeros(array.shape[0]))
    acc.copyin(f)
    acc.reset_stats()
    with acc.data(deviceptr=u + r, present=[f]):
        for _ in range(cycles):
            _v_cycle(u, r, f, smooth, residual, restrict, prolong)
    stats = acc.stats()
    calls = cycles * (5 * (len(sizes) - 1) + 1)
    assert (stats["h2d_bytes"], stats["d2h_bytes"], stats["alloc_count"]) == (0, 0, 0)
    assert stats["launch_count"] == calls
    reference_u = [np.zeros(n) for n in sizes]
    reference_r = [np.zeros(n) for n in sizes]
    for _ in range(cycles):
        _v_cycle(reference_u, reference_r, f, *_numpy_kernels())
    assert np.allclose(_host_copy(u[0], f), reference_u[0])
    acc.delete(f)
    for array in u + r:
        acc.free(array)


_FAKE_GPU_REPRODUCTION = textwrap.dedent("""
    import numpy as np, pyacc as acc

    @acc.parallel_loop
    def scale_into(d, x):
        for i in range(x.shape[0]):
            d[i] = 2.0 * x[i]

    acc.set_device_type("cuda")
    d = acc.malloc((64,), np.float64)
    x = np.arange(64.0)
    acc.copyin(x)
    with acc.data(deviceptr=[d], present=[x]):
        acc.reset_stats()
        scale_into(d, x)
        stats = acc.stats()
    out = np.empty(64)
    acc.memcpy_from_device(out, d)
    print(stats["h2d_bytes"], stats["d2h_bytes"], bool((out == 2 * x).all()))
""")


@pytest.mark.skipif(acc.get_num_devices("cuda") > 0, reason="cuda is a device of this run")
def test_the_reproduction_on_the_fake_gpu_moves_nothing_for_malloc_memory(tmp_path):
    """The cuda target, where this run has none: the reproduction on the fake GPU (a
    script in a file: kernels need their source)."""
    script = tmp_path / "reproduction.py"
    script.write_text(_FAKE_GPU_REPRODUCTION)
    environment = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYACC_TESTING_FAKE_CUDA="1")
    environment.pop("ACC_DEVICE_TYPE", None)
    done = subprocess.run([sys.executable, str(script)], capture_output=True,
                          text=True, env=environment, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0", "True"]
