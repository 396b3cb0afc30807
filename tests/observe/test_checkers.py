"""PYACC_CHECK modes (API.md §11): ``counters``, ``memory``, ``stale``; the planted bug
classes each checker must find (out of bounds, use after free, free under queued work,
missing update device, lost host update), silence on correct programs and on every
example, and PYACC_AUTOCOMPARE running its host twin on the program's host data."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import pyacc as acc
from pyacc.mapping.devices.emulated import EmulatedDevice, memcheck_enabled
from pyacc._devices import current_runtime
from pyacc.observe import active, parse_check
from pyacc.testing import check, hold_queue

from ..test_examples import CASES, EXAMPLES, ROOT, _environment


@acc.parallel_loop
def double(a, b):
    for i in range(a.shape[0]):
        b[i] = 2.0 * a[i]


@acc.parallel_loop
def shift_right(a):
    """Writes a[1..n]: one element past the end (the planted out-of-bounds bug)."""
    for i in range(a.shape[0]):
        a[i + 1] = 5.0


@acc.parallel_loop
def fill(a, value):
    for i in range(a.shape[0]):
        a[i] = value


@acc.parallel_loop(deviceptr="d")
def fill_raw(d, value):
    for i in range(d.shape[0]):
        d[i] = value


# == the modes and their switches ==========================================================
def test_check_modes_parse_as_a_comma_list():
    assert parse_check("1") == {"counters": True}
    assert parse_check("") == {} and parse_check("0") == {}
    assert parse_check("counters, memory,stale") == {"counters": True, "memory": True, "stale": True}
    assert parse_check("stale:error") == {"stale": "error"}
    for bad in ("memroy", "stale:warn", "counters:error", "2"):
        with pytest.raises(ValueError, match="PYACC_CHECK=.*unknown mode.*counters.*memory.*stale"):
            parse_check(bad)


def test_bad_check_value_is_a_clear_error_and_a_warning_at_import(observe):
    with pytest.raises(ValueError, match="unknown mode 'memroy'"):
        observe(PYACC_CHECK="counters,memroy")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYACC_")}
    environ.update(PYACC_CHECK="memroy", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", "import pyacc"], env=environ, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "unknown mode 'memroy'" in done.stderr


def test_environment_modes_install_their_checkers(emulated, observe):
    installed = observe(PYACC_CHECK="counters,memory,stale")
    assert set(installed) >= {"check", "memory", "stale"} and memcheck_enabled()
    assert not active("stale").error
    assert observe(PYACC_CHECK="stale:error")["stale"].error
    assert active("memory") is None and active("check") is None and not memcheck_enabled()


def test_testing_check_switches_modes_on_for_a_block(emulated, observe):
    observe()
    assert active("memory") is None
    with check("memory", "stale"):
        assert active("memory") is not None and active("stale") is not None
        with check("memory"):  # nested: still on after the inner block
            pass
        assert active("memory") is not None
        acc.observe.configure()  # re-reading the environment keeps what the program asked
        assert active("memory") is not None
    assert active("memory") is None and active("stale") is None and not memcheck_enabled()
    with check("counters,stale", error=True):
        assert active("check") is not None and active("stale").error
    with pytest.raises(acc.InvalidArgumentError, match="unknown mode"):
        with check("memroy"):
            pass
    assert active("check") is None


# == memory: the planted bug classes =======================================================
def test_out_of_bounds_write_by_a_kernel_raises_memory_check_error(emulated):
    a = np.zeros(10)
    with check("memory"):
        with pytest.raises(acc.MemoryCheckError) as raised:
            with acc.data(copy=[a]):
                shift_right(a)
    error = raised.value
    assert isinstance(error, acc.ExecutionError) and error.name == "a" and error.kind == "out of bounds"
    begin, nbytes = error.block
    assert nbytes == 80 and error.touched == (begin + 80, 8)
    message = str(error)
    assert "kernel 'shift_right'" in message and "'a'" in message
    assert f"[{begin:#x},+80]" in message and f"[{begin + 80:#x},+8]" in message
    assert "offsets 80..87, past the end" in message


def test_out_of_bounds_write_is_found_by_no_one_without_the_checker(emulated):
    a = np.zeros(10)
    with acc.data(copy=[a]):
        shift_right(a)  # silently writes a byte range outside 'a' (the bug goes unseen)
    assert a[1] == 5.0


def test_use_after_free_through_a_stale_device_array(emulated):
    a = np.zeros(16)
    with check("memory"):
        acc.copyin(a)
        stale = acc.deviceptr(a)
        acc.delete(a)
        stale[3] = 1.0  # a write through the device array of a mapping that has ended
        with pytest.raises(acc.MemoryCheckError) as raised:
            acc.wait_all()
    error = raised.value
    assert error.kind == "use after free" and error.name == "a"
    assert error.touched == (error.block[0] + 24, 8)
    assert "offsets 24..31" in str(error) and "freed block of 'a'" in str(error)


def test_use_after_free_of_acc_malloc_memory_passed_to_a_kernel(emulated):
    with check("memory"):
        raw = acc.malloc(32, np.float64)
        acc.free(raw)
        with pytest.raises(acc.MemoryCheckError, match="argument 'd' of kernel 'fill_raw'.*lies in the "
                                                       "freed block of acc.malloc memory"):
            fill_raw(raw, 1.0)


def test_free_under_queued_work_is_found_when_the_queue_runs(emulated, monkeypatch):
    """The runtime planted back to the bug of issue 16 item 1: a free that does not wait
    for the queues (the kernel then writes a freed block)."""
    monkeypatch.setattr(EmulatedDevice, "release", lambda self, address, queue=None: self.free(address))
    a = np.zeros(64)
    with check("memory"):
        acc.copyin(a)
        with hold_queue(1):
            fill(a, 3.0, async_=1)
            acc.delete(a)  # freed at once, with the kernel still queued
        with pytest.raises(acc.MemoryCheckError) as raised:
            acc.wait(1)
    message = str(raised.value)
    assert "use after free" in message and "kernel 'fill'" in message and "on queue 1" in message
    assert "'a'" in message


def test_memory_checker_is_silent_and_keeps_the_books_on_a_correct_program(emulated):
    a, b = np.arange(100.0), np.zeros(100)
    with check("memory", "counters"):
        for _ in range(3):
            with acc.data(copyin=[a], copyout=[b]):
                double(a, b)
            acc.copyin(a, async_=2)
            double(a, b, async_=2)
            acc.delete(a, async_=2)
            raw = acc.malloc(7, np.int32)
            acc.free(raw)
        acc.wait_all()
        acc.testing.check_consistency()
        device = current_runtime().device
        assert device.check_memory() == [] and device.memory_in_use == 0
    assert (b == 2 * a).all()


def test_quarantine_never_causes_out_of_memory(monkeypatch):
    monkeypatch.setenv("PYACC_EMULATED_MEMORY", "1M")
    acc.shutdown("emulated")
    acc.set_device_type("emulated")
    try:
        with check("memory"):
            for _ in range(20):  # 20 × 600 KB through a 1 MB device
                a = np.zeros(75_000)
                with acc.data(copy=[a]):
                    fill(a, 1.0)
    finally:
        monkeypatch.delenv("PYACC_EMULATED_MEMORY")
        acc.shutdown("emulated")


# == stale: the planted bug classes ========================================================
def test_missing_update_device_warns_naming_array_region_and_last_transfer(emulated):
    a, b = np.ones(10), np.zeros(10)
    with check("stale"):
        with acc.data(copyin=[a], copyout=[b]):
            a[4] = 3.0  # a host change never sent to the device
            with pytest.warns(acc.StaleDataWarning) as caught:
                double(a, b)
    (warning,) = caught
    message = str(warning.message)
    this = os.path.basename(__file__)
    assert "kernel 'double'" in message and "reads 'a'" in message and "missing 'update device'" in message
    assert "1 of 10 element(s) (the first at index 4)" in message
    assert f"{this}:{double.info.lineno}" in message  # the region's file:line
    assert "copied to the device at" in message and this in message  # the last transfer's
    assert warning.filename == __file__  # reported at the call
    assert b[4] == 2.0  # the device read its stale copy


def test_missing_update_device_raises_with_stale_error(emulated):
    a, b = np.ones(10), np.zeros(10)
    with check("stale", error=True):
        with acc.data(copyin=[a], copyout=[b]):
            a[:] = 2.0
            with pytest.raises(acc.StaleDataError) as raised:
                double(a, b)
    assert raised.value.problem == "missing update device" and raised.value.name == "a"
    assert raised.value.code == "stale_data"


def test_lost_host_update_warns_at_the_copy_back(emulated):
    a = np.ones(10)
    with check("stale"):
        with pytest.warns(acc.StaleDataWarning) as caught:
            with acc.data(copy=[a]):
                fill(a, 2.0)
                a[7] = 9.0  # host change, then overwritten by the copy back
    (warning,) = caught
    message = str(warning.message)
    assert "copying 'a' back to the host" in message and "lost host update" in message
    assert "index 7" in message and "both copies changed" in message
    assert a[7] == 2.0


def test_lost_host_update_at_update_self_raises_with_stale_error(emulated):
    a = np.ones(10)
    acc.copyin(a)
    try:
        with check("stale", error=True):
            a[0] = 5.0
            with pytest.raises(acc.StaleDataError) as raised:
                acc.update_self(a)
        assert raised.value.problem == "lost host update"
    finally:
        acc.delete(a)


def test_stale_checker_is_silent_on_correct_programs(emulated):
    a, b = np.ones(40), np.zeros(40)
    with check("stale", error=True):
        with acc.data(copyin=[a], copyout=[b]):
            a[5:9] = 3.0
            acc.update_device(a[5:9])  # the change is sent: no finding
            double(a, b)
            acc.update_self(b)
            double(a, b)
        assert b[6] == 6.0
        acc.copyin(a)
        fill(a, 4.0, async_=1)
        acc.update_self(a, async_=1)
        double(a, b, async_=1)  # the copy back is queued: not compared meanwhile
        acc.wait(1)
        a[0] = 1.0
        acc.update_device(a)
        double(a, b)
        acc.delete(a)
    assert b[0] == 2.0 and b[1] == 8.0


def test_stale_checker_ignores_the_host_device(host_device):
    a, b = np.ones(4), np.zeros(4)
    with check("stale", error=True):
        with acc.data(copyin=[a], copyout=[b]):
            a[:] = 2.0
            double(a, b)


# == every example runs clean under every checker ==========================================
@pytest.mark.parametrize("name", list(CASES))
def test_example_runs_clean_under_every_checker(name):
    args, success = CASES[name]
    if name == "mandelbrot_async.py":
        args = [*args, "--device", "emulated"]
    environ = _environment("emulated")
    environ["PYACC_CHECK"] = "counters,memory,stale:error,race:error"
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", str(EXAMPLES / name), *args],
                          cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert success in done.stdout.splitlines(), done.stdout
    for word in ("StaleData", "MemoryCheck", "ConsistencyError", "Race", "Warning"):
        assert word not in done.stderr, done.stderr


# == autocompare on the program's host data (issue 16 item 7) ==============================
def test_autocompare_finds_a_missing_update_device(emulated, observe, capfd):
    compare = observe(PYACC_AUTOCOMPARE=1)["autocompare"]
    a, b = np.ones(20), np.zeros(20)
    with acc.data(copyin=[a], copyout=[b]):
        a[3:6] = 4.0  # never sent: the device computes with ones
        double(a, b)
    (report,) = compare.differences
    assert "'b'" in report and "3 of 20 elements" in report
    assert "3: device=2.0 host=8.0" in report
    assert report in capfd.readouterr().err
    assert b[3] == 2.0  # the device's values are copied back as usual


def test_autocompare_host_twin_follows_the_host_arrays_across_regions(emulated, observe):
    compare = observe(PYACC_AUTOCOMPARE=1)["autocompare"]
    a, b = np.arange(30.0), np.zeros(30)
    with acc.data(copyin=[a], create=[b]):
        double(a, b)
        fill(a, 7.0)
        double(a, b)
        acc.update_self(b)
    assert compare.differences == [] and compare.compared == 1 and (b == 14.0).all()


# == every checker at once, on each device with memory of its own ==========================
def test_every_checker_at_once_is_silent_on_a_correct_program(separate_memory, observe, capfd):
    """``PYACC_CHECK=counters,memory,stale:error`` and ``PYACC_AUTOCOMPARE=1`` together, as
    tests/test_benchmarks_checked.py runs the benchmarks: silent on a correct program on
    ``emulated`` and on ``cuda`` (a real GPU, or in the simulator run the fake one, whose
    device arrays refuse a host read as CuPy's do: a checker that reads one on the host
    fails here as it would on a GPU). On cuda ``memory`` and ``stale`` stand aside (they
    are ``emulated``'s, API.md §11)."""
    installed = observe(PYACC_CHECK="counters,memory,stale:error", PYACC_AUTOCOMPARE=1)
    compare = installed["autocompare"]
    a, b = np.arange(64.0), np.zeros(64)
    with acc.data(copyin=[a], copyout=[b]):
        double(a, b)
        acc.update(self=[b[::4]])              # a strided copy back
        a[:8] = 1.0
        acc.update(device=[a[:8]])             # a host change, sent
        double(a, b, async_=1)
        acc.update(self=[b], async_=1)
        acc.wait(1)
        fill(a, 3.0)
    assert compare.differences == [] and compare.host_failures == []
    assert compare.compared >= 2
    expected = 2.0 * np.arange(64.0)
    expected[:8] = 2.0
    np.testing.assert_array_equal(b, expected)
    err = capfd.readouterr().err
    for word in ("Error", "Warning", "Traceback", "failed"):
        assert word not in err, err
