"""``python -m pyacc``: ``info`` (text and JSON, never a traceback), ``run`` (environment,
``sys.argv``, exit codes, exceptions) and bad usage (exit code 2)."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import types

import llvmlite
import numba
import numpy as np
import pytest

from pyacc.compiler import cuda_compilers
from pyacc import _cli, _devices

PROPERTIES = {"name", "vendor", "driver", "memory", "free_memory", "shared_memory_support"}
RUN_VARIABLES = ("PYACC_NOTIFY", "PYACC_TIME", "PYACC_TRACE", "PYACC_CHECK", "ACC_DEVICE_TYPE",
                 "PYACC_OFFLOAD")


def pyacc_cli(*args, **env):
    """``python -m pyacc args...`` in a fresh interpreter without ACC_*/PYACC_* settings
    other than ``env``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("ACC_", "PYACC_"))}
    environment.update(env)
    return subprocess.run([sys.executable, "-m", "pyacc", *args], capture_output=True,
                          text=True, env=environment, cwd=os.path.dirname(__file__))


def no_traceback(result):
    assert "Traceback" not in result.stderr, result.stderr
    return result


# == info =================================================================================
def test_info_lists_device_types_devices_versions_cache_and_settings(tmp_path):
    result = no_traceback(pyacc_cli("info", PYACC_CACHE_DIR=str(tmp_path), PYACC_TIME="1"))
    assert result.returncode == 0
    out = result.stdout
    assert "host (alias multicore): 1 device(s)" in out
    assert "emulated: 1 device(s)" in out
    assert "pyacc emulated device 0" in out and "host CPU" in out
    assert "shared_memory_support: 1" in out and "shared_memory_support: 0" in out
    assert "memory:                4.0 GiB (4294967296 bytes)" in out  # the emulated default
    if _devices.unavailable_reason("cuda"):
        assert f"cuda (alias nvidia): unavailable: {_devices.unavailable_reason('cuda')}" in out
    for name, version in (("numba", numba.__version__), ("llvmlite", llvmlite.__version__),
                          ("numpy", np.__version__)):
        assert f"  {name}" in out and version in out
    for name in ("cupy", "numba-cuda-mlir", "numba-cuda", "CUDA driver"):
        assert f"  {name} " in out
    if importlib.util.find_spec("cupy") is None:
        assert re.search(r"\n  cupy +not installed\n", out)
    # API.md §12: info names the CUDA kernel compiler and how it was chosen
    assert f"CUDA kernel compiler (PYACC_CUDA_COMPILER): {cuda_compilers.describe()}\n" in out
    assert f"Kernel cache: {tmp_path / 'kernels'}" in out
    assert re.search(r"\n  PYACC_TIME +1\n", out) and re.search(r"\n  ACC_DEVICE_TYPE +\(unset\)\n", out)
    assert "Current device: host 0" in out or "Current device: cuda 0" in out


def test_info_json_is_machine_readable(tmp_path):
    result = no_traceback(pyacc_cli("info", "--json", PYACC_EMULATED_DEVICES="2",
                                    PYACC_EMULATED_MEMORY="1M", PYACC_CACHE_DIR=str(tmp_path)))
    report = json.loads(result.stdout)
    types_ = report["device_types"]
    assert list(types_) == ["host", "emulated", "cuda"]
    host = types_["host"]["devices"][0]
    assert set(host) == PROPERTIES | {"number"} and host["memory"] > 0
    emulated = types_["emulated"]["devices"]
    assert [d["number"] for d in emulated] == [0, 1]
    assert all(d["memory"] == d["free_memory"] == 1 << 20 for d in emulated)
    if _devices.unavailable_reason("cuda"):
        assert types_["cuda"] == {"aliases": ["nvidia"], "available": False,
                                  "reason": _devices.unavailable_reason("cuda"), "devices": []}
    assert report["versions"]["numba"] == numba.__version__
    assert report["kernel_cache"] == str(tmp_path / "kernels")
    assert report["environment"]["PYACC_EMULATED_DEVICES"] == "2"
    assert report["offload"]["policy"] == "unset"


def test_info_reports_bad_settings_instead_of_failing():
    result = no_traceback(pyacc_cli("info", "--json", PYACC_OFFLOAD="sometimes",
                                    ACC_DEVICE_TYPE="gpu", PYACC_EMULATED_MEMORY="lots"))
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert "PYACC_OFFLOAD='sometimes'" in report["offload"]["meaning"]
    assert "did you mean 'cuda'" in report["current_device"]["error"]
    assert report["device_types"]["host"]["available"]


def test_info_under_each_offload_policy():
    disabled = no_traceback(pyacc_cli("info", PYACC_OFFLOAD="disabled")).stdout
    assert "emulated: unavailable: offload is disabled (PYACC_OFFLOAD=disabled)" in disabled
    if _devices.unavailable_reason("cuda") is None:
        return
    fallback = no_traceback(pyacc_cli("info", PYACC_OFFLOAD="default", ACC_DEVICE_TYPE="cuda"))
    assert "Current device: host 0\n  warning: device type 'cuda' is not available" in fallback.stdout
    mandatory = no_traceback(pyacc_cli("info", PYACC_OFFLOAD="mandatory"))
    assert "Current device: error: PYACC_OFFLOAD=mandatory" in mandatory.stdout


def test_cuda_driver_version_never_raises():
    version = _cli.cuda_driver_version()
    assert version.startswith("unavailable: ") or version.replace(".", "").isdigit()


# == usage ================================================================================
def test_no_arguments_prints_help_and_a_bad_command_exits_2():
    result = pyacc_cli()
    assert result.returncode == 0
    assert "usage: python -m pyacc" in result.stdout
    assert "info" in result.stdout and "run" in result.stdout
    result = no_traceback(pyacc_cli("frob"))
    assert result.returncode == 2 and "invalid choice: 'frob'" in result.stderr
    result = no_traceback(pyacc_cli("run", "missing.py"))
    assert result.returncode == 2 and "can't open file" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["run"], "the following arguments are required: SCRIPT"),
    (["run", "--device", "gpu", "x.py"], "did you mean 'cuda'"),
    (["run", "--notify", "loud", "x.py"], "'loud' is not an integer bitmask"),
    (["run", "--offload", "sometimes", "x.py"], "invalid choice: 'sometimes'"),
    (["info", "--yaml"], "unrecognized arguments: --yaml"),
])
def test_bad_usage_exits_2_with_a_message(args, message, capsys):
    with pytest.raises(SystemExit) as exited:
        _cli.main(args)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


# == run (in process, with a stand-in for pyacc.observe) ==================================
SCRIPT = """
import os, sys
seen = {"argv": list(sys.argv), "name": __name__, "path0": sys.path[0],
        "env": {name: os.environ.get(name) for name in RUN_VARIABLES}}
RESULTS.append(seen)
if len(sys.argv) > 1 and sys.argv[1] == "exit":
    sys.exit(int(sys.argv[2]))
if len(sys.argv) > 1 and sys.argv[1] == "raise":
    raise KeyError("from the script")
"""


@pytest.fixture
def observe(monkeypatch):
    """A stand-in ``pyacc.observe`` recording the variables ``configure()`` sees."""
    saved = dict(os.environ)
    for name in RUN_VARIABLES:
        os.environ.pop(name, None)
    calls = []
    fake = types.SimpleNamespace(
        configure=lambda: calls.append({name: os.environ.get(name) for name in RUN_VARIABLES}))
    monkeypatch.setitem(sys.modules, "pyacc.observe", fake)
    yield calls
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def script(tmp_path, monkeypatch):
    results = []
    monkeypatch.setattr("builtins.RESULTS", results, raising=False)
    monkeypatch.setattr("builtins.RUN_VARIABLES", RUN_VARIABLES, raising=False)
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    return str(path), results


def test_run_sets_the_variables_configures_then_runs_the_script(observe, script):
    path, results = script
    argv = sys.argv[:]
    code = _cli.main(["run", "--notify", "0x3", "--time", "--trace", "t.json", "--check",
                      "--device", "emulated", "--offload", "Default", path, "a", "--time", "-x"])
    assert code == 0
    expected = {"PYACC_NOTIFY": "3", "PYACC_TIME": "1", "PYACC_TRACE": "t.json",
                "PYACC_CHECK": "1", "ACC_DEVICE_TYPE": "emulated", "PYACC_OFFLOAD": "default"}
    assert observe == [expected]  # configure() ran once, after the variables were set
    (seen,) = results
    assert seen["argv"] == [path, "a", "--time", "-x"]  # options after SCRIPT are its own
    assert seen["name"] == "__main__"
    assert seen["path0"] == os.path.dirname(path)
    assert seen["env"] == expected
    assert sys.argv == argv  # restored


def test_run_check_modes_sets_the_checker_modes(observe, script):
    """``--check-modes memory,stale`` sets ``PYACC_CHECK`` to those modes (API.md §11)."""
    path, _ = script
    assert _cli.main(["run", "--check-modes", "memory,stale", path]) == 0
    assert observe[-1]["PYACC_CHECK"] == "memory,stale"


def test_run_without_options_sets_nothing(observe, script):
    path, results = script
    assert _cli.main(["run", path]) == 0
    assert results[0]["env"] == dict.fromkeys(RUN_VARIABLES)
    assert results[0]["argv"] == [path]


def test_run_passes_on_the_scripts_exit_code_and_exceptions(observe, script):
    path, _ = script
    with pytest.raises(SystemExit) as exited:
        _cli.main(["run", path, "exit", "3"])
    assert exited.value.code == 3
    with pytest.raises(KeyError, match="from the script"):
        _cli.main(["run", path, "raise"])


def test_run_of_a_missing_file_exits_2_before_configuring(observe, capsys):
    assert _cli.main(["run", "no/such/script.py"]) == 2
    assert "can't open file" in capsys.readouterr().err
    assert observe == []


def test_run_reports_a_value_configure_rejects_and_exits_2(observe, script, monkeypatch, capsys):
    def reject():
        raise ValueError("PYACC_NOTIFY='99' is out of range")

    monkeypatch.setattr(sys.modules["pyacc.observe"], "configure", reject)
    path, results = script
    assert _cli.main(["run", "--notify", "99", path]) == 2
    assert "PYACC_NOTIFY='99' is out of range" in capsys.readouterr().err
    assert results == []  # the script did not run


# == run (end to end, once pyacc.observe.configure exists) ================================
def _has_configure():
    try:
        import pyacc.observe as real
    except ImportError:
        return False
    return hasattr(real, "configure")


@pytest.mark.skipif(not _has_configure(), reason="pyacc.observe.configure() is not there yet")
def test_run_end_to_end(tmp_path):
    path = tmp_path / "end.py"
    path.write_text("import os, sys\nprint(sys.argv[1:], os.environ['ACC_DEVICE_TYPE'])\n"
                    "sys.exit(int(sys.argv[1]))\n")
    result = pyacc_cli("run", "--device", "host", str(path), "5")
    assert result.returncode == 5, result.stderr
    assert result.stdout.strip() == "['5'] host"
    path.write_text("raise ZeroDivisionError('boom')\n")
    failed = pyacc_cli("run", str(path))
    assert failed.returncode == 1
    assert "ZeroDivisionError: boom" in failed.stderr
