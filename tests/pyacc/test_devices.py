"""Device selection, per-thread ICVs, the environment, properties, stats and the table
dump (API.md §1, §3; OpenACC 3.3 §2.3, §3.2.1–3.2.8, ch. 4)."""

import io
import json
import subprocess
import sys
import threading

import numpy as np
import pytest

import pyacc as acc


def _run(code, **env):
    """Run ``code`` in a fresh interpreter with extra environment; return its stdout."""
    import os

    environment = dict(os.environ, **env)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


_CUDA = acc.get_num_devices("cuda") > 0
without_cuda = pytest.mark.skipif(_CUDA, reason="a cuda device is usable here")


@without_cuda
def test_default_device_type_is_host_without_a_gpu():
    out = _run("import pyacc as acc; print(acc.get_device_type(), acc.get_num_devices('cuda'))",
               ACC_DEVICE_TYPE="")
    assert out == "host 0"


def test_acc_device_type_and_num_are_read_at_first_use():
    code = "import pyacc as acc; print(acc.get_device_type(), acc.get_device_num())"
    assert _run(code, ACC_DEVICE_TYPE="emulated", ACC_DEVICE_NUM="1", PYACC_EMULATED_DEVICES="2") == "emulated 1"
    assert _run(code, ACC_DEVICE_TYPE="MultiCore") == "host 0"
    assert _run(code, ACC_DEVICE_TYPE="not_host") == ("cuda 0" if _CUDA else "emulated 0")


def test_emulated_devices_have_separate_tables_and_memory():
    code = """
import numpy as np, pyacc as acc, json
acc.set_device_type("emulated")
a = np.ones(4)
acc.set_device_num(1)
acc.copyin(a)
on1 = acc.is_present(a)
acc.set_device_num(0)
on0 = acc.is_present(a)
print(json.dumps([acc.get_num_devices("emulated"), on1, on0,
                  acc.get_property("memory", device_num=1), acc.get_property("free_memory", device_num=0)]))
"""
    count, on1, on0, memory, free0 = json.loads(_run(code, PYACC_EMULATED_DEVICES="3",
                                                     PYACC_EMULATED_MEMORY="1M"))
    assert (count, on1, on0) == (3, True, False)
    assert memory == free0 == 1 << 20


def test_device_type_and_number_are_per_thread(emulated):
    seen = {}

    def worker():
        seen["initial"] = acc.get_device_type()
        acc.set_device_type("host")
        seen["set"] = acc.get_device_type()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert acc.get_device_type() == "emulated"  # the other thread's choice did not leak
    assert seen["set"] == "host"


def test_default_async_is_per_thread(emulated):
    acc.set_default_async(5)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(acc.get_default_async()))
    thread.start()
    thread.join()
    assert acc.get_default_async() == 5 and seen == [0]
    acc.set_default_async(acc.async_noval)
    assert acc.get_default_async() == 0
    with pytest.raises(acc.InvalidAsyncError):
        acc.set_default_async(acc.async_sync)


@without_cuda
def test_get_device_num_is_minus_one_for_a_type_without_devices(emulated):
    assert acc.get_device_num("cuda") == -1
    assert acc.get_device_num("emulated") == 0


def test_properties_of_the_emulated_device(emulated):
    assert acc.get_property("shared_memory_support") == 0
    assert acc.get_property("vendor") == "pyacc"
    assert "emulated" in acc.get_property("name")
    before = acc.get_property("free_memory")
    a = np.zeros(1000)
    acc.copyin(a)
    assert acc.get_property("free_memory") <= before - a.nbytes
    with pytest.raises(acc.InvalidArgumentError, match="unknown device property"):
        acc.get_property("colour")


def test_init_selects_the_type_and_shutdown_ends_every_lifetime(emulated):
    acc.init("emulated")
    a, b = np.ones(3), np.ones(5)
    acc.copyin(a)
    acc.enter_data(create=[b])
    acc.shutdown("emulated")
    assert not acc.is_present(a) and not acc.is_present(b)
    assert acc.present_table() == [] and acc.stats()["memory_in_use"] == 0


def test_stats_count_transfers_allocations_and_frees(emulated):
    a = np.ones(16)
    with acc.data(copy=[a]):
        acc.update(device=[a], self=[a[:4]])
    stats = acc.stats()
    assert (stats["h2d_count"], stats["h2d_bytes"]) == (2, 2 * a.nbytes)
    assert (stats["d2h_count"], stats["d2h_bytes"]) == (2, a.nbytes + 32)
    assert (stats["alloc_count"], stats["free_count"]) == (1, 1)
    assert stats["alloc_bytes"] == stats["free_bytes"] == a.nbytes
    acc.reset_stats()
    assert acc.stats()["h2d_count"] == 0


def test_stats_count_the_frees_of_shutdown(emulated):
    """OpenACC 3.3 §3.2.8: shutdown frees every block; the statistics balance."""
    a, b = np.ones(100), np.ones(7)
    acc.enter_data(copyin=[a])
    acc.declare(create=[b])
    acc.malloc(64)
    acc.reset_stats()  # the count is of blocks still allocated, whatever the baseline
    acc.shutdown("emulated")
    stats = acc.stats()
    assert (stats["alloc_count"], stats["free_count"]) == (0, 3)
    assert stats["free_bytes"] == a.nbytes + b.nbytes + 64 and stats["memory_in_use"] == 0
    acc.copyin(a)
    acc.delete(a)
    acc.shutdown("emulated")  # nothing left: nothing more counted
    stats = acc.stats()
    assert (stats["alloc_count"], stats["free_count"]) == (1, 4)


def test_present_table_names_variables_and_dump_prints_them(emulated):
    temperature = np.zeros((4, 4))
    acc.enter_data(copyin=[temperature])
    (record,) = acc.present_table()
    assert record.name == "temperature"
    assert (record.shape, record.dtype, record.structured, record.dynamic) == ((4, 4), np.float64, 0, 1)
    assert record.nbytes == record.host_end - record.host_begin == temperature.nbytes
    out = io.StringIO()
    acc.dump_present_table(file=out)
    assert "temperature" in out.getvalue() and "dynamic=1" in out.getvalue()


def test_region_device_is_the_device_array(emulated):
    a = np.arange(6.0)
    with acc.data(copyin=[a]) as region:
        device_a = region.device(a)
        assert not np.shares_memory(device_a, a)
        assert np.array_equal(region.device(a[2:4]), [2.0, 3.0])
        assert acc.hostptr(device_a[2:4]).base is not None
        assert np.shares_memory(acc.hostptr(device_a), a)


def test_error_callback_registered_twice_runs_twice_and_sees_the_error(emulated):
    seen = []

    def callback(error):
        seen.append(error.code)

    acc.register_error_callback(callback)
    acc.register_error_callback(callback)
    try:
        with pytest.raises(acc.NotPresentError):
            acc.update_self(np.zeros(2))
    finally:
        acc.unregister_error_callback(callback)
        acc.unregister_error_callback(callback)
    assert seen == ["not_present", "not_present"]
    with pytest.raises(ValueError):
        acc.unregister_error_callback(callback)


def test_error_callback_may_replace_the_error(emulated):
    class Halt(Exception):
        pass

    def halt(error):
        raise Halt(error.code)

    acc.register_error_callback(halt)
    try:
        with pytest.raises(Halt):
            acc.data(present=[np.zeros(2)]).__enter__()
    finally:
        acc.unregister_error_callback(halt)


def test_errors_pickle_with_their_facts(emulated):
    import pickle

    a = np.zeros(4)
    acc.create(a[:2])
    with pytest.raises(acc.PartlyPresentError) as caught:
        acc.copyin(a)
    clone = pickle.loads(pickle.dumps(caught.value))
    assert type(clone) is acc.PartlyPresentError and str(clone) == str(caught.value)
    assert clone.host_range == caught.value.host_range


def test_is_present_stays_exact_while_other_threads_map_and_unmap(emulated):
    """The lock-free lookup (sequence lock) never answers wrongly during mutations."""
    keep = np.zeros(8)
    acc.copyin(keep)
    stop = threading.Event()
    failures = []

    def churn():
        acc.set_device_type("emulated")  # ICVs are per thread
        arrays = [np.zeros(4) for _ in range(50)]
        while not stop.is_set():
            acc.enter_data(create=arrays)
            acc.exit_data(delete=arrays)

    def check():
        acc.set_device_type("emulated")
        absent = np.zeros(8)
        for _ in range(20000):
            if not acc.is_present(keep) or acc.is_present(absent):
                failures.append("wrong answer")

    workers = [threading.Thread(target=churn) for _ in range(2)]
    checker = threading.Thread(target=check)
    for thread in workers + [checker]:
        thread.start()
    checker.join()
    stop.set()
    for thread in workers:
        thread.join()
    assert failures == []


# == acc_device_default is the default device type (issue 29 item 3; API.md §6.2) =========
# OpenACC 3.3 §4.1: ACC_DEVICE_TYPE sets the default device type; §2.3, §3.2.2, §3.2.7:
# acc_set_device_type sets acc-current-device-type-var, which acc_init(acc_device_default)
# and every routine given "default" then mean. Each case runs in a new interpreter: the
# environment is read once, at first use.
_INIT_DEFAULT = ("import pyacc as acc; from pyacc.openacc import *; {before}"
                 "acc_init(acc_device_default); "
                 "print(acc.get_device_type(), acc.get_device_num(), acc._devices.default_type())")


def _init_default(before="", **env):
    return _run(_INIT_DEFAULT.format(before=before), **env).split()


def test_acc_init_default_selects_the_type_acc_device_type_names():
    """§4.1: the issue's reproduction printed ``host``; the device number the
    environment chose (ACC_DEVICE_NUM) is kept too."""
    assert _init_default(ACC_DEVICE_TYPE="emulated")[:2] == ["emulated", "0"]
    assert _init_default(ACC_DEVICE_TYPE="emulated", ACC_DEVICE_NUM="1",
                         PYACC_EMULATED_DEVICES="2")[:2] == ["emulated", "1"]


def test_acc_init_default_without_acc_device_type_selects_the_implementation_default():
    """ACC_DEVICE_TYPE unset, empty or ``default``: the implementation's default type
    (cuda with a usable GPU, else host; API.md §1)."""
    for value in ("", "default", "DEFAULT"):
        selected, number, implementation = _init_default(ACC_DEVICE_TYPE=value)
        assert (selected, number) == (implementation, "0"), value


def test_acc_init_default_keeps_a_type_set_earlier_over_acc_device_type():
    """§3.2.2: ``set_device_type`` sets the thread's device type, which is then the
    default: ``acc_init(acc_device_default)`` does not switch back to ACC_DEVICE_TYPE's."""
    before = "acc.set_device_type('emulated'); "
    assert _init_default(before, ACC_DEVICE_TYPE="host")[:2] == ["emulated", "0"]
    assert _init_default(before, ACC_DEVICE_TYPE="")[:2] == ["emulated", "0"]
    before = "acc.set_device_type('emulated'); acc.set_device_type('host'); "
    assert _init_default(before, ACC_DEVICE_TYPE="emulated")[:2] == ["host", "0"]


def test_set_device_type_default_keeps_the_current_type_and_device(emulated):
    """``set_device_type("default")`` / ``init("default")`` select the current default
    type (the type set earlier) and keep its device number (§3.2.2, §3.2.4)."""
    from pyacc.openacc import acc_device_default

    acc.set_device_type("default")
    assert acc.get_device_type() == "emulated"
    acc.init(acc_device_default)
    assert acc.get_device_type() == "emulated" and acc.get_device_num() == 0


def test_a_new_thread_starts_from_the_environments_default_type():
    """§2.3: the ICVs are per thread; a thread that has not selected a type has the
    environment's, whatever other threads selected."""
    code = ("import threading, pyacc as acc; acc.set_device_type('host'); seen = []; "
            "t = threading.Thread(target=lambda: seen.append(acc._devices.canonical_type('default'))); "
            "t.start(); t.join(); print(acc._devices.canonical_type('default'), seen[0])")
    assert _run(code, ACC_DEVICE_TYPE="emulated").split() == ["host", "emulated"]


def test_get_num_devices_default_counts_the_default_types_devices():
    """``acc_get_num_devices(acc_device_default)``: the devices of the default type."""
    code = ("import pyacc as acc; from pyacc.openacc import *; "
            "print(acc_get_num_devices(acc_device_default), end=' '); "
            "acc.set_device_type('host'); print(acc_get_num_devices(acc_device_default))")
    assert _run(code, ACC_DEVICE_TYPE="emulated", PYACC_EMULATED_DEVICES="3").split() == ["3", "1"]
