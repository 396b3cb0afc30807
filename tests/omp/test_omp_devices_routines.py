"""OpenMP device numbering and device memory routines (API.md §9; OpenMP 5.2 §18.7,
§18.8), and OpenMP names on the event stream.

Sources: SOLLVE V&V ``tests/4.5/target_data/test_target_data_map_alloc.c`` (5.0 form:
omp_target_alloc + is_device_ptr + omp_target_memcpy), ``tests/4.5/target_enter_data/
test_target_enter_data_devices.c`` and ``tests/4.5/target_data/test_target_data_map_devices.c``
(every device gets its own copy), GCC libgomp's ``omp_target_memcpy_rect`` /
``omp_target_associate_ptr`` test (the ``q[128]`` program in
``libgomp/testsuite/libgomp.c``), LLVM ``offload/test/api/omp_target_memcpy*``.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyacc as acc
from pyacc import omp


def test_numbering_on_emulated(emulated):
    assert omp.get_num_devices() == acc.get_num_devices("emulated")
    assert omp.get_initial_device() == omp.get_num_devices()
    assert omp.get_device_num() == omp.get_initial_device()
    assert omp.is_initial_device()
    assert omp.get_default_device() == 0


def test_numbering_on_host(host_device):
    """The host device type has no non-host device: device 0 is the initial device."""
    assert omp.get_num_devices() == 0
    assert omp.get_initial_device() == 0
    a = np.zeros(4)
    omp.target_enter_data(map_to=[a])
    assert omp.target_is_present(a)
    omp.target_exit_data(map_delete=[a])


def test_default_device_initial_and_back(emulated):
    a = np.zeros(4)
    omp.set_default_device(omp.get_initial_device())
    try:
        assert omp.get_default_device() == omp.get_initial_device()
        omp.target_enter_data(map_to=[a])  # on the host: no data action
        assert not acc.is_present(a)
        assert omp.target_is_present(a)  # the host always has it
    finally:
        omp.set_default_device(0)
    assert omp.get_default_device() == 0
    with pytest.raises(acc.DeviceUnavailableError, match="host is device"):
        omp.set_default_device(omp.get_num_devices() + 1)
    with pytest.raises(acc.DeviceUnavailableError):
        omp.target_enter_data(map_to=[a], device=omp.invalid_device)


def test_target_alloc_memcpy_is_device_ptr(emulated):
    """SOLLVE 5.0 test_target_data_map_alloc: a device scalar from omp_target_alloc,
    written by a kernel through is_device_ptr, read back with omp_target_memcpy."""
    n = 1000
    h = np.ones(n, dtype=np.int64)
    d_sum = omp.target_alloc(8, omp.get_default_device()).view(np.int64)
    with omp.target_data(map_to=[h]):
        _device_sum(h, d_sum)
        total = np.zeros(1, dtype=np.int64)
        omp.target_memcpy(total, d_sum, 8, 0, 0, omp.get_initial_device(), omp.get_default_device())
    omp.target_free(d_sum, omp.get_default_device())
    assert total[0] == n


@omp.target("is_device_ptr(s)")
def _device_sum(h, s):
    s[0] = 0
    for i in range(h.shape[0]):
        s[0] += h[i]


def test_target_alloc_out_of_memory(emulated):
    with pytest.raises(acc.OutOfMemoryError):
        omp.target_alloc(1 << 50, omp.get_default_device())
    with pytest.raises(acc.InvalidArgumentError):
        omp.target_alloc(-1, 0)


def test_memcpy_rect_and_associate(emulated):
    """GCC libgomp's memcpy_rect/associate test: q[128] copied into a device block of
    130 ints, sub-blocks moved with omp_target_memcpy_rect, then associated."""
    d, host = omp.get_default_device(), omp.get_initial_device()
    q = np.arange(128, dtype=np.int32)
    p = omp.target_alloc(130 * 4, d)
    omp.target_memcpy(p, q, 128 * 4, 0, 0, d, host)
    back = np.zeros(128, dtype=np.int32)
    omp.target_memcpy(back, p, 128 * 4, 0, 0, host, d)
    np.testing.assert_array_equal(back, q)
    # a 2-D block: rows 1..2, columns 3..6 of an 8x16 int grid
    grid = np.arange(128, dtype=np.int32).reshape(8, 16)
    omp.target_memcpy_rect(p, grid, 4, 2, (2, 4), (0, 0), (1, 3), (8, 16), (8, 16), d, host)
    block = np.zeros((8, 16), dtype=np.int32)
    omp.target_memcpy_rect(block, p, 4, 2, (2, 4), (5, 10), (0, 0), (8, 16), (8, 16), host, d)
    np.testing.assert_array_equal(block[5:7, 10:14], grid[1:3, 3:7])
    assert block.sum() == grid[1:3, 3:7].sum()
    # 3-D, device to device
    cube = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    omp.target_memcpy(p, cube, cube.nbytes, 0, 0, d, host)
    omp.target_memcpy_rect(p, p, 4, 3, (1, 2, 2), (1, 1, 2), (0, 0, 0), (2, 3, 4), (2, 3, 4), d, d)
    out = np.zeros_like(cube)
    omp.target_memcpy(out, p, cube.nbytes, 0, 0, host, d)
    expected = cube.copy()
    expected[1:2, 1:3, 2:4] = cube[0:1, 0:2, 0:2]
    np.testing.assert_array_equal(out, expected)
    # associate q with p (+ 8 bytes), then the table maps q there
    omp.target_associate_ptr(q, p, d, device_offset=8)
    assert omp.target_is_present(q) and acc.refcounts(q) == (0, 1)
    omp.target_exit_data(map_delete=[q])  # associated data stays present
    assert omp.target_is_present(q)
    omp.target_update(to=[q])
    omp.target_disassociate_ptr(q, d)
    assert not omp.target_is_present(q)
    omp.target_free(p, d)
    with pytest.raises(acc.InvalidArgumentError, match="does not fit"):
        omp.target_memcpy_rect(back, q, 4, 1, (200,), (0,), (0,), (128,), (128,), host, host)


def test_get_mapped_ptr(emulated):
    a = np.arange(6.0)
    assert omp.get_mapped_ptr(a) is None
    with omp.target_data(map_to=[a]) as region:
        np.testing.assert_array_equal(omp.get_mapped_ptr(a), a)
        assert omp.get_mapped_ptr(a) is not a
        np.testing.assert_array_equal(region.device(a), a)


_DEVICES_PROGRAM = textwrap.dedent("""
    import numpy as np
    import pyacc as acc
    from pyacc import omp
    acc.set_device_type("emulated")
    n = omp.get_num_devices()
    assert n == 2 and omp.get_initial_device() == 2, n
    arrays = [np.full(16, float(d)) for d in range(n)]
    for d in range(n):
        omp.target_enter_data(map_to=[arrays[d]], device=d)
    for d in range(n):
        assert omp.target_is_present(arrays[d], d)
        assert not omp.target_is_present(arrays[d], 1 - d)
    for d in range(n):
        omp.target_exit_data(map_from=[arrays[d]], device=d)
        assert not omp.target_is_present(arrays[d], d)
    a = np.zeros(8)
    with omp.target_data(map_tofrom=[a], device=1):
        assert omp.target_is_present(a, 1) and not omp.target_is_present(a, 0)
    omp.set_default_device(1)
    assert acc.get_device_num() == 1 and omp.get_default_device() == 1
    print("devices ok")
""")


def test_sollve_devices_in_a_subprocess():
    """SOLLVE 4.5 test_target_enter_data_devices.c / test_target_data_map_devices.c with
    two emulated devices; OMP_DEFAULT_DEVICE and OMP_TARGET_OFFLOAD are read from the
    environment."""
    env = dict(os.environ, PYACC_EMULATED_DEVICES="2")
    env.pop("PYACC_OFFLOAD", None)
    result = subprocess.run([sys.executable, "-c", _DEVICES_PROGRAM], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "devices ok" in result.stdout
    program = ("import pyacc as acc\nfrom pyacc import omp\nacc.set_device_type('emulated')\n"
               "print(omp.get_default_device(), omp.get_num_devices())\n")
    env["OMP_DEFAULT_DEVICE"] = "1"
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.stdout.split() == ["1", "2"], result.stderr
    env.pop("OMP_DEFAULT_DEVICE")
    env["OMP_TARGET_OFFLOAD"] = "disabled"
    result = subprocess.run([sys.executable, "-c", "from pyacc import omp; import pyacc as acc\n"
                             "print(omp.get_num_devices(), acc.get_device_type())"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["0", "host"], result.stderr


# == observability =================================================================================
def test_region_events_name_openmp_constructs(emulated):
    seen = []

    def callback(info):
        seen.append((info.event, str(info.construct)))

    for event in ("data_construct_start", "compute_construct_start"):
        acc.profiling.register(event, callback)
    try:
        a = np.zeros(8)
        with omp.target_data(map_tofrom=[a]):
            _fill_one(a)
    finally:
        for event in ("data_construct_start", "compute_construct_start"):
            acc.profiling.unregister(event, callback)
    assert ("data_construct_start", "target_data") in seen
    assert ("compute_construct_start", "target_teams_distribute_parallel_for") in seen
    construct = _fill_one.info.clauses.construct
    assert construct == "parallel_loop" and f"{construct}" == "target_teams_distribute_parallel_for"


@omp.target_teams_distribute_parallel_for
def _fill_one(a):
    for i in range(a.shape[0]):
        a[i] = 1.0


def test_notify_names_openmp_constructs(tmp_path):
    program = tmp_path / "prog.py"
    program.write_text(textwrap.dedent("""
        import numpy as np
        import pyacc as acc
        from pyacc import omp
        acc.set_device_type("emulated")

        @omp.target_teams_distribute_parallel_for("map(tofrom: a)")
        def kernel(a):
            for i in range(a.shape[0]):
                a[i] += 1.0

        a = np.zeros(4)
        with omp.target_data(map_tofrom=[a]):
            kernel(a)
    """))
    env = dict(os.environ, PYACC_NOTIFY="7")
    result = subprocess.run([sys.executable, str(program)], env=env, capture_output=True,
                            text=True, timeout=120, cwd=os.getcwd())
    assert result.returncode == 0, result.stderr
    text = result.stdout + result.stderr
    assert "construct=target_data" in text, text
    assert "construct=target_teams_distribute_parallel_for" in text, text


@pytest.mark.parametrize("offset", [-16, 1.5, True])
def test_target_associate_ptr_refuses_a_device_offset_that_is_not_a_size(emulated, offset):
    """``device_offset`` is a ``size_t`` (OpenMP 5.2 §18.8.9): a negative one was taken as
    Python's negative slice (mapping the host array at the block's end), and the error
    named ``omp.target_memcpy``."""
    d = omp.target_alloc(64, 0)
    a = np.zeros(2)
    with pytest.raises(acc.InvalidArgumentError, match="omp.target_associate_ptr: device_offset"):
        omp.target_associate_ptr(a, d, 0, device_offset=offset)
    assert not acc.is_present(a)
    omp.target_free(d, 0)


@pytest.mark.parametrize("value", ["5", "abc"])
def test_an_invalid_omp_default_device_is_said_at_every_call(emulated, monkeypatch, value):
    """``OMP_DEFAULT_DEVICE`` naming no device (or no number) raised at a thread's first
    OpenMP call only, then every call ran on device 0; now each call raises, naming the
    variable, until it is fixed."""
    import threading

    monkeypatch.setenv("OMP_DEFAULT_DEVICE", value)
    errors = []

    def first_calls():  # (a thread's own OpenMP state: a fresh start)
        for _ in range(3):
            try:
                omp.get_num_devices()
            except acc.AccError as error:
                errors.append(str(error))

    worker = threading.Thread(target=first_calls)
    worker.start()
    worker.join()
    assert len(errors) == 3 and all(error.startswith("OMP_DEFAULT_DEVICE") for error in errors)


LOOKUP_TABLE = np.arange(4.0)


@omp.declare_target
def _looks_up(i):
    return LOOKUP_TABLE[i] * 2.0


@omp.target_teams_distribute_parallel_for("map(from: y)")
def fills_from_table(y):
    for i in range(y.shape[0]):
        y[i] = _looks_up(i)


def test_a_declare_target_function_reads_a_declared_global_array(device):
    """OpenMP 5.2 declare target (``declare target enter(T)`` and a function using ``T``): the
    function reads the device copy the declaration made (before: refused)."""
    omp.declare_target(enter=[LOOKUP_TABLE])
    try:
        y = np.zeros(4)
        fills_from_table(y)
        np.testing.assert_array_equal(y, 2.0 * np.arange(4.0))
    finally:
        acc.shutdown()
