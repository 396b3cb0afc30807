"""PYACC_OFFLOAD (like OMP_TARGET_OFFLOAD): unset, default, mandatory, disabled; unknown
values; the first use of a thread (ACC_DEVICE_TYPE) and explicit selections."""

import subprocess
import sys
import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc import _devices
from pyacc._devices import OffloadFallbackWarning

no_gpu = pytest.mark.skipif(acc.get_num_devices("cuda") > 0, reason="cuda is available here")


@pytest.fixture(autouse=True)
def fresh_policy(monkeypatch):
    """Fresh first-use values and fallback warning; back to host, no policy, afterwards."""
    for name in ("PYACC_OFFLOAD", "ACC_DEVICE_TYPE", "ACC_DEVICE_NUM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_devices._Initial, "values", None)
    monkeypatch.setattr(_devices._Fallback, "warned", False)
    yield
    monkeypatch.delenv("PYACC_OFFLOAD", raising=False)
    acc.set_device_type("host")


def in_new_thread(function):
    """``function()`` on a fresh host thread (fresh ICVs): its result, or the exception."""
    outcome = {}

    def body():
        try:
            outcome["value"] = function()
        except Exception as error:  # handed back to the test
            outcome["value"] = error

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return outcome["value"]


def first_use():
    return acc.get_device_type(), acc.get_device_num()


# == unknown values =========================================================================
@pytest.mark.parametrize("value", ["bogus", "on", "1"])
def test_an_unknown_policy_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("PYACC_OFFLOAD", value)
    with pytest.raises(acc.InvalidArgumentError) as raised:
        acc.set_device_type("emulated")
    message = str(raised.value)
    assert f"PYACC_OFFLOAD={value!r}" in message
    assert all(word in message for word in ("mandatory", "disabled", "default"))


def test_the_policy_is_case_insensitive_and_empty_means_unset(monkeypatch):
    monkeypatch.setenv("PYACC_OFFLOAD", " Disabled ")
    assert _devices.offload_policy() == "disabled"
    monkeypatch.setenv("PYACC_OFFLOAD", "")
    assert _devices.offload_policy() is None


# == unset: an explicit request of an unavailable type is an error ==========================
@no_gpu
def test_unset_explicit_cuda_is_an_error_that_suggests_the_fallback():
    acc.set_device_type("emulated")
    with pytest.raises(acc.DeviceTypeUnavailableError, match="PYACC_OFFLOAD=default") as raised:
        acc.set_device_type("cuda")
    assert _devices.unavailable_reason("cuda") in str(raised.value)
    assert acc.get_device_type() == "emulated"  # unchanged


@no_gpu
def test_unset_acc_device_type_cuda_fails_when_the_device_is_used(monkeypatch):
    monkeypatch.setenv("ACC_DEVICE_TYPE", "cuda")

    def use():
        kind = acc.get_device_type()
        with pytest.raises(acc.DeviceTypeUnavailableError):
            acc.copyin(np.ones(3))
        return kind

    assert in_new_thread(use) == "cuda"  # as before PYACC_OFFLOAD existed


def test_unset_implicit_default_is_host_without_a_gpu_silently(recwarn):
    expected = "cuda" if acc.get_num_devices("cuda") else "host"
    assert in_new_thread(first_use) == (expected, 0)
    assert not recwarn.list


# == default: fall back to host with one warning =============================================
@no_gpu
def test_default_falls_back_to_host_with_one_warning(monkeypatch):
    monkeypatch.setenv("PYACC_OFFLOAD", "default")
    with pytest.warns(OffloadFallbackWarning) as caught:
        acc.set_device_type("cuda")
        acc.set_device_type("nvidia")
        acc.set_device_num(0, "cuda")
    assert acc.get_device_type() == "host" and acc.get_device_num() == 0
    assert len(caught) == 1  # once per process
    warning = caught[0]
    assert issubclass(warning.category, RuntimeWarning)
    assert "'cuda' is not available" in str(warning.message)
    assert _devices.unavailable_reason("cuda") in str(warning.message)
    assert warning.filename == __file__  # points at the caller, not at pyacc


@no_gpu
def test_default_first_use_of_acc_device_type_cuda_runs_on_host(monkeypatch):
    monkeypatch.setenv("PYACC_OFFLOAD", "default")
    monkeypatch.setenv("ACC_DEVICE_TYPE", "cuda")
    monkeypatch.setenv("ACC_DEVICE_NUM", "1")
    with pytest.warns(OffloadFallbackWarning, match="PYACC_OFFLOAD=default"):
        assert in_new_thread(first_use) == ("host", 0)  # host has one device: number 0


def test_default_keeps_an_available_type_without_warning(monkeypatch, recwarn):
    monkeypatch.setenv("PYACC_OFFLOAD", "default")
    acc.set_device_type("emulated")
    assert acc.get_device_type() == "emulated"
    assert not recwarn.list


# == mandatory: an unavailable request (or default) is an error ==============================
@no_gpu
def test_mandatory_rejects_an_unavailable_type_and_keeps_the_current_one(monkeypatch):
    acc.set_device_type("emulated")
    monkeypatch.setenv("PYACC_OFFLOAD", "MANDATORY")
    with pytest.raises(acc.DeviceTypeUnavailableError, match="PYACC_OFFLOAD=mandatory") as raised:
        acc.set_device_type("cuda")
    assert _devices.unavailable_reason("cuda") in str(raised.value)
    assert acc.get_device_type() == "emulated"
    acc.set_device_type("default")  # the type set earlier (OpenACC 3.3 §4.1, API.md §6.2)
    assert acc.get_device_type() == "emulated" and acc.get_num_devices("default") == 1
    assert _devices.default_type() == "cuda"  # the implementation's default wants a GPU


def test_mandatory_allows_explicit_host_and_emulated(monkeypatch):
    monkeypatch.setenv("PYACC_OFFLOAD", "mandatory")
    acc.set_device_type("host")
    assert acc.get_device_type() == "host"
    acc.set_device_type("emulated")
    assert acc.get_device_type() == "emulated"


@no_gpu
def test_mandatory_first_use_without_a_gpu_fails(monkeypatch):
    monkeypatch.setenv("PYACC_OFFLOAD", "mandatory")
    error = in_new_thread(first_use)
    assert isinstance(error, acc.DeviceTypeUnavailableError)
    assert "ACC_DEVICE_TYPE unset" in str(error) and "'cuda'" in str(error)
    monkeypatch.setenv("ACC_DEVICE_TYPE", "nvidia")
    error = in_new_thread(first_use)
    assert isinstance(error, acc.DeviceTypeUnavailableError)
    assert "ACC_DEVICE_TYPE=nvidia" in str(error)
    monkeypatch.setenv("ACC_DEVICE_TYPE", "emulated")
    assert in_new_thread(first_use) == ("emulated", 0)


# == disabled: host is the only device =====================================================
def test_disabled_resolves_every_selection_to_host(monkeypatch, recwarn):
    monkeypatch.setenv("PYACC_OFFLOAD", "disabled")
    for request in ("emulated", "cuda", "not_host", "default"):
        acc.set_device_type(request)
        assert acc.get_device_type() == "host", request
    acc.set_device_num(0, "emulated")
    acc.init("emulated")
    assert (acc.get_device_type(), acc.get_device_num()) == ("host", 0)
    assert not recwarn.list  # the user asked for it: no warning
    a = np.ones(4)
    assert acc.copyin(a) is a  # shared memory: the host device


def test_disabled_reports_no_offload_devices(emulated, monkeypatch):
    acc.get_property("name")  # the emulated runtime exists before the policy changes
    monkeypatch.setenv("PYACC_OFFLOAD", "disabled")
    assert [acc.get_num_devices(t) for t in ("host", "emulated", "cuda")] == [1, 0, 0]
    assert acc.get_device_num("emulated") == -1
    with pytest.raises(acc.DeviceTypeUnavailableError, match="PYACC_OFFLOAD=disabled"):
        acc.get_property("memory", device_type="emulated")
    assert "PYACC_OFFLOAD=disabled" in _devices.unavailable_reason("emulated")


def test_disabled_first_use_of_acc_device_type_is_host(monkeypatch):
    monkeypatch.setenv("PYACC_OFFLOAD", "disabled")
    monkeypatch.setenv("ACC_DEVICE_TYPE", "emulated")
    monkeypatch.setenv("ACC_DEVICE_NUM", "3")
    assert in_new_thread(first_use) == ("host", 0)


def test_a_bad_acc_device_type_is_still_an_error_under_every_policy(monkeypatch):
    monkeypatch.setenv("ACC_DEVICE_TYPE", "gpu")
    for policy in ("default", "disabled", "mandatory"):
        monkeypatch.setenv("PYACC_OFFLOAD", policy)
        monkeypatch.setattr(_devices._Initial, "values", None)
        error = in_new_thread(first_use)
        assert isinstance(error, acc.DeviceTypeUnavailableError) and "did you mean 'cuda'" in str(error)


# == a whole program ========================================================================
PROGRAM = """
import numpy as np, pyacc as acc

@acc.parallel_loop
def twice(x):
    for i in range(x.shape[0]):
        x[i] *= 2.0

x = np.ones(8)
twice(x)
print(acc.get_device_type(), x.sum())
"""


def run_program(folder, **env):
    import os

    script = folder / "program.py"  # kernels need their source in a file
    script.write_text(PROGRAM)
    environment = dict(os.environ, PYACC_DISABLE_JIT="1", **env)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=environment)


@no_gpu
def test_a_program_with_acc_device_type_cuda_under_each_policy(tmp_path):
    fallback = run_program(tmp_path, ACC_DEVICE_TYPE="cuda", PYACC_OFFLOAD="default")
    assert fallback.returncode == 0, fallback.stderr
    assert fallback.stdout.split() == ["host", "16.0"]
    assert fallback.stderr.count("OffloadFallbackWarning") == 1
    for policy in ("mandatory", ""):
        failed = run_program(tmp_path, ACC_DEVICE_TYPE="cuda", PYACC_OFFLOAD=policy)
        assert failed.returncode == 1
        assert "DeviceTypeUnavailableError" in failed.stderr
    disabled = run_program(tmp_path, ACC_DEVICE_TYPE="emulated", PYACC_OFFLOAD="disabled")
    assert disabled.stdout.split() == ["host", "16.0"] and disabled.stderr == ""
