"""PYACC_AUTOCOMPARE, the profiling callbacks, PYACC_DEBUG and presence-error context."""

import os
import subprocess
import sys

import numpy as np
import pytest

import pyacc as acc
from pyacc._devices import current_runtime


@acc.parallel_loop
def scale(x, factor):
    for i in range(x.shape[0]):
        x[i] = x[i] * factor


@acc.parallel_loop
def differs_on_purpose(x):
    for i in range(x.shape[0]):
        if acc.on_device("host"):
            x[i] = x[i] + 1.0
        else:
            x[i] = x[i] + (2.0 if i % 10 == 3 else 1.0)


# == autocompare ===========================================================================
def test_autocompare_agrees_when_device_and_host_agree(separate_memory, observe):
    compare = observe(PYACC_AUTOCOMPARE=1)["autocompare"]
    x = np.arange(50.0)
    with acc.data(copy=[x]):
        scale(x, 2.0)
        scale(x, 0.5)
        acc.update_self(x[::7])
    assert compare.compared == 2 and compare.differences == []
    assert "2 copies back compared, 0 differed" in compare.summary()


def test_autocompare_catches_a_kernel_made_to_differ(separate_memory, observe, capfd):
    compare = observe(PYACC_AUTOCOMPARE=1, PYACC_AUTOCOMPARE_RTOL="1e-9")["autocompare"]
    x = np.zeros(40)
    with acc.data(copy=[x]):
        differs_on_purpose(x)
    (report,) = compare.differences
    assert "'x'" in report and "4 of 40 elements" in report
    assert "first: 3: device=2.0 host=1.0; 13: device=2.0 host=1.0" in report
    assert report in capfd.readouterr().err


MODULE_FIELD = np.zeros(40)


def _region_in_a_function():
    with acc.data(copy=[MODULE_FIELD]):  # a global array, named in a function's frame
        differs_on_purpose(MODULE_FIELD)


def test_autocompare_names_every_array_it_reports(separate_memory, observe):
    """API.md §11: the report names the array: one copied back by ``update self`` (a
    section or the whole: the mapping's name) and a module-level array mapped inside a
    function (before, both were reported as '?')."""
    compare = observe(PYACC_AUTOCOMPARE=1)["autocompare"]
    x = np.zeros(40)
    acc.copyin(x)
    differs_on_purpose(x)
    acc.update_self(x[0:20])
    acc.update_self(x)
    acc.delete(x)
    _region_in_a_function()
    assert [report.split(" copied")[0] for report in compare.differences] == \
        ["pyacc autocompare: 'x'"] * 2 + ["pyacc autocompare: 'MODULE_FIELD'"]


def test_autocompare_follows_update_device_and_async_queues(separate_memory, observe):
    compare = observe(PYACC_AUTOCOMPARE=1)["autocompare"]
    x = np.ones(30)
    acc.copyin(x)
    x[10:20] = 4.0  # the host change is sent: a correct program (API.md §11)
    acc.update_device(x[10:20])  # the shadow follows the upload
    scale(x, 3.0, async_=1)
    acc.update_self(x, async_=1)
    acc.wait(1)
    acc.delete(x)
    assert compare.differences == [] and compare.compared == 1
    assert x[0] == 3.0 and x[15] == 12.0


def test_autocompare_tolerance_variables_are_checked(observe):
    with pytest.raises(ValueError, match="PYACC_AUTOCOMPARE_RTOL='x' is not a number"):
        observe(PYACC_AUTOCOMPARE=1, PYACC_AUTOCOMPARE_RTOL="x")


def test_autocompare_ignores_the_host_device(host_device, observe):
    compare = observe(PYACC_AUTOCOMPARE=1)["autocompare"]
    x = np.ones(8)
    with acc.data(copy=[x]):
        differs_on_purpose(x)
    assert compare.compared == 0


# == profiling callbacks ======================================================================
def test_profiling_callbacks_receive_info_records(emulated):
    seen = []
    names = ("enter_data", "exit_data", "compute_construct_start", "compute_construct_end",
             "data_construct_start", "enqueue_launch", "enqueue_upload", "enqueue_download",
             "operation_end", "alloc", "free", "wait")
    for name in names:
        acc.profiling.register(name, seen.append)
    try:
        x = np.ones(16)
        with acc.data(copy=[x]):
            scale(x, 2.0, async_=1)
            acc.wait(1)
    finally:
        for name in names:
            acc.profiling.unregister(name, seen.append)
    events = [info.event for info in seen]
    for name in names:
        assert name in events, name
    created = next(info for info in seen if info.event == "enter_data")
    assert created.created and created.variable == "x" and created.bytes == 128
    assert created.construct == "structured" and created.file == __file__
    assert created.device_type == "emulated" and created.device_num == 0
    launch = next(info for info in seen if info.event == "enqueue_launch")
    assert launch.queue == 1 and launch.variable == "scale" and launch.line == scale.info.lineno
    done = [info for info in seen if info.event == "operation_end"]
    assert {info.construct for info in done} == {"kernel", "upload", "download"}
    assert all(info.start <= info.end for info in done)
    wait = next(info for info in seen if info.event == "wait")
    assert wait.queue == 1 and wait.start <= wait.end
    seen.clear()
    acc.copyin(x)  # unregistered: nothing more arrives
    acc.delete(x)
    assert seen == []


def test_profiling_error_event_and_bad_registrations(emulated):
    errors = []
    acc.profiling.register("error", errors.append)
    try:
        with pytest.raises(acc.NotPresentError):
            acc.update_self(np.ones(4))
    finally:
        acc.profiling.unregister("error", errors.append)
    assert isinstance(errors[0].error, acc.NotPresentError) and errors[0].file == __file__
    with pytest.raises(ValueError, match="unknown profiling event 'launch'; the events are"):
        acc.profiling.register("launch", print)
    with pytest.raises(TypeError, match="must be callable"):
        acc.profiling.register("alloc", 42)
    with pytest.raises(ValueError, match="is not registered"):
        acc.profiling.unregister("alloc", print)


# == PYACC_DEBUG and presence errors ============================================================
def test_absent_data_errors_name_the_nearest_mappings(emulated):
    block = np.zeros(100)
    acc.copyin(block[:40])
    acc.copyin(block[60:])
    with pytest.raises(acc.NotPresentError) as raised:
        acc.update_self(block[45:50])
    message = str(raised.value)
    assert "Nearest mappings (2 in the table)" in message
    assert "ends 40 bytes before it" in message and "starts 80 bytes after it" in message
    acc.delete(block[:40])
    acc.delete(block[60:])
    with pytest.raises(acc.NotPresentError, match="The present table is empty"):
        acc.update_self(block)


def test_debug_dumps_the_table_with_each_error(emulated, monkeypatch, capfd):
    monkeypatch.setenv("PYACC_DEBUG", "1")
    kept = np.ones(4)
    acc.copyin(kept)
    with pytest.raises(acc.NotPresentError):
        acc.update_self(np.ones(3))
    err = capfd.readouterr().err
    assert "pyacc: NotPresentError: update self" in err
    assert "present table of device emulated:0 (1 mappings)" in err and "kept" in err
    acc.delete(kept)


LEAKY = """
import numpy as np, pyacc as acc
leaked = np.ones(10)
acc.copyin(leaked)
"""


@pytest.mark.parametrize("debug", ["1", ""])
def test_debug_lists_mappings_live_at_exit(debug):
    environ = dict(os.environ, ACC_DEVICE_TYPE="emulated", PYACC_DEBUG=debug)
    done = subprocess.run([sys.executable, "-c", LEAKY], env=environ, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    if debug:
        assert "pyacc: 1 mapping(s) still present on device emulated:0 at exit:" in done.stderr
        assert "leaked shape=(10,) dtype=float64  structured=0 dynamic=1" in done.stderr
    else:
        assert done.stderr == ""


def test_debug_sends_event_records_to_the_pyacc_logger(emulated, observe, capfd):
    installed = observe(PYACC_DEBUG=1)
    assert "log" in installed
    x = np.ones(4)
    acc.copyin(x)
    acc.delete(x)
    err = capfd.readouterr().err
    assert "pyacc debug: pyacc.events: Event(ENTER_DATA, ('emulated', 0)" in err
    assert "pyacc debug: pyacc.events: Event(FREE" in err


@acc.parallel_loop(deviceptr="d")
def add_into(d, x):
    for i in range(x.shape[0]):
        x[i] += d[i]


def _other_librarys_device_array(n):
    """Device memory pyacc did not allocate: CuPy's own on a GPU, the backend's on the
    fake one (no ALLOC event, so autocompare has no shadow of it)."""
    backend = current_runtime().device.backend
    if not hasattr(backend, "memcpys"):  # a real GPU
        import cupy
        return cupy.ones(n), None
    address, handle = backend.allocate(8 * n)
    array = backend.view(handle, 0, (n,), np.float64, None)
    array[...] = 1.0
    return array, handle


@pytest.mark.skipif(acc.get_num_devices("cuda") == 0,
                    reason="device memory of other libraries exists on cuda only (a GPU, "
                           "or the fake one of tests/cuda/test_simulator_run.py)")
def test_autocompare_skips_a_region_on_another_librarys_device_memory_once(observe, capfd):
    """Its host values are unknown, so the region is not run on the host, said once per
    region and argument, counted apart from failed host runs, and what the region writes
    is not compared afterwards (no false difference)."""
    acc.shutdown("cuda")
    acc.set_device_type("cuda")
    compare = observe(PYACC_AUTOCOMPARE=1)["autocompare"]
    d, keep = _other_librarys_device_array(16)
    x = np.zeros(16)
    with acc.data(copy=[x]):
        add_into(d, x)
        add_into(d, x)
    np.testing.assert_array_equal(x, np.full(16, 2.0))
    assert compare.differences == [] and compare.host_failures == []
    assert len(compare.skipped) == 1 and "'d'" in compare.skipped[0]
    assert capfd.readouterr().err.count("no host run of") == 1
    assert "1 regions not run on the host" in compare.summary()
    acc.shutdown("cuda")
