"""The command line, ``python -m pyacc``: ``info`` and ``run``.

Owns: the argument parser; ``info`` (like ``nvaccelinfo``), which gathers an installation
report as one dict (device types and their devices with their properties, the offload
policy, the current device, versions of the libraries pyacc uses and of the CUDA driver,
the kernel cache folder, the ACC_*/PYACC_* settings) and prints it as text or JSON; and
``run``, which sets the observability variables in ``os.environ``, calls
``pyacc.observe.configure()`` and runs a script as ``python script.py`` would.

``info`` never fails on a broken or missing piece: each one is reported as
``not installed`` or ``unavailable: reason`` (``error: ...`` for a bad setting).
Exit codes: 0; 2 for bad usage (argparse), for a script file that does not exist (as
Python) and for a value ``configure()`` rejects; ``run`` passes on the script's own exit
code and exceptions.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import runpy
import sys
import warnings

import pyacc as acc
from pyacc.compiler import cuda_compilers, threading_layer
from pyacc.compiler.kernel import cache_dir

from . import _devices

__all__ = ["main", "info_report"]

PROG = "python -m pyacc"

#: settings always listed by ``info`` (other ACC_*/PYACC_* variables that are set too)
_SETTINGS = (
    "ACC_DEVICE_TYPE", "ACC_DEVICE_NUM", "PYACC_OFFLOAD", "PYACC_NOTIFY", "PYACC_TIME",
    "PYACC_TRACE", "PYACC_CHECK", "PYACC_AUTOCOMPARE", "PYACC_DEBUG",
    "PYACC_EMULATED_MEMORY", "PYACC_EMULATED_DEVICES",
    "PYACC_CACHE_DIR", "PYACC_DISABLE_JIT", "PYACC_BOUNDSCHECK", "PYACC_CUDA_COMPILER",
    "PYACC_PIN", "PYACC_ASYNC_INLINE_BELOW",
)

#: (distribution, module) of the libraries whose versions ``info`` reports
_LIBRARIES = (
    ("numba", "numba"), ("llvmlite", "llvmlite"), ("numpy", "numpy"),
    ("cupy", "cupy"), ("numba-cuda-mlir", "numba_cuda_mlir"), ("numba-cuda", "numba_cuda"),
)

_PROPERTIES = ("name", "vendor", "driver", "memory", "free_memory", "shared_memory_support")

_ALIASES = {"host": "multicore", "cuda": "nvidia"}

_POLICY_MEANING = {
    None: "requesting an unavailable device type is an error; the default is cuda if usable, else host",
    "default": "an unavailable requested device type falls back to host, with a warning",
    "mandatory": "an unavailable requested (or default) device type is an error",
    "disabled": "everything runs on host",
}


# == info: gathering ==========================================================================
def _error(error: BaseException) -> str:
    return f"error: {error}"


def _offload() -> dict:
    try:
        policy = _devices.offload_policy()
    except Exception as error:
        return {"policy": os.environ.get("PYACC_OFFLOAD"), "meaning": _error(error)}
    return {"policy": policy or "unset", "meaning": _POLICY_MEANING[policy]}


def _current_device() -> dict:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            current = {"device_type": acc.get_device_type(), "device_num": acc.get_device_num()}
        except Exception as error:
            current = {"error": str(error)}
    if caught:
        current["warnings"] = [str(w.message) for w in caught]
    return current


def _device(device_type: str, number: int) -> dict:
    device = {"number": number}
    for prop in _PROPERTIES:
        try:
            device[prop] = acc.get_property(prop, device_num=number, device_type=device_type)
        except Exception as error:
            device[prop] = _error(error)
    return device


def _device_type(device_type: str) -> dict:
    summary = {"aliases": [_ALIASES[device_type]] if device_type in _ALIASES else []}
    try:
        count = acc.get_num_devices(device_type)
        reason = _devices.unavailable_reason(device_type) if count == 0 else None
    except Exception as error:
        return {**summary, "available": False, "reason": _error(error), "devices": []}
    if count == 0:
        return {**summary, "available": False, "reason": reason, "devices": []}
    return {**summary, "available": True,
            "devices": [_device(device_type, n) for n in range(count)]}


def _library_version(distribution: str, module_name: str) -> str:
    try:
        if importlib.util.find_spec(module_name) is None:
            return "not installed"
    except (ImportError, ValueError):
        return "not installed"
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # a broken install (CUDA libraries missing, ...)
        return f"unavailable: {type(error).__name__}: {error}"
    version = getattr(module, "__version__", None)
    if version is None:
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown version"
    return str(version)


def _driver_library():
    names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def cuda_driver_version() -> str:
    """The CUDA driver's version ("12.4"), or "unavailable: reason"; never raises."""
    library = _driver_library()
    if library is None:
        return "unavailable: no CUDA driver library (libcuda) found: no NVIDIA driver here"
    version = ctypes.c_int(0)
    try:
        status = library.cuDriverGetVersion(ctypes.byref(version))
    except Exception as error:  # pragma: no cover - a libcuda without the symbol
        return f"unavailable: {error}"
    if status != 0:
        return f"unavailable: cuDriverGetVersion returned CUDA error {status}"
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


def _versions() -> dict:
    versions = {dist: _library_version(dist, module) for dist, module in _LIBRARIES}
    versions["CUDA driver"] = cuda_driver_version()
    return versions


def _cuda_compiler() -> str:
    """The CUDA kernel compiler in use, its version and how it was chosen (API.md §12)."""
    try:
        return cuda_compilers.describe()
    except Exception as error:
        return _error(error)


def _threading_layer() -> str:
    """Numba's threading layer of the CPU kernels, and what to know of it."""
    try:
        caveat = threading_layer.caveat()
        return threading_layer.layer() + ("" if caveat is None else f" (warning: {caveat})")
    except Exception as error:
        return _error(error)


def _kernel_cache() -> str:
    try:
        return str(cache_dir())
    except Exception as error:
        return f"unavailable: {error}"


def _settings() -> dict:
    names = set(_SETTINGS) | {
        name for name in os.environ if name.startswith(("PYACC_", "ACC_"))
    }
    ordered = list(_SETTINGS) + sorted(names - set(_SETTINGS))
    return {name: os.environ.get(name) for name in ordered}


def info_report() -> dict:
    """Everything ``python -m pyacc info`` prints, as a JSON-serialisable dict."""
    return {
        "pyacc": {"version": acc.__version__, "path": os.path.dirname(acc.__file__)},
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "offload": _offload(),
        "current_device": _current_device(),
        "device_types": {name: _device_type(name) for name in _devices.DEVICE_TYPES},
        "versions": _versions(),
        "cuda_compiler": _cuda_compiler(),
        "threading_layer": _threading_layer(),
        "kernel_cache": _kernel_cache(),
        "environment": _settings(),
    }


# == info: text ===============================================================================
def _size(value) -> str:
    if not isinstance(value, int):
        return str(value)
    return f"{value / (1 << 30):.1f} GiB ({value} bytes)"


def _device_lines(device: dict) -> list[str]:
    lines = [f"  device {device['number']}"]
    for prop in _PROPERTIES:
        value = device[prop]
        shown = _size(value) if prop in ("memory", "free_memory") else value
        lines.append(f"    {prop + ':':<23}{shown}")
    return lines


def _type_lines(device_type: str, summary: dict) -> list[str]:
    title = device_type + (f" (alias {', '.join(summary['aliases'])})"
                           if summary["aliases"] else "")
    if not summary["available"]:
        return [f"{title}: unavailable: {summary['reason']}"]
    lines = [f"{title}: {len(summary['devices'])} device(s)"]
    for device in summary["devices"]:
        lines += _device_lines(device)
    return lines


def _table(title: str, rows: dict, unset: str = "(unset)") -> list[str]:
    width = max(map(len, rows), default=0) + 2
    return [title] + [f"  {name:<{width}}{unset if value is None else value}"
                      for name, value in rows.items()]


def _current_line(current: dict) -> list[str]:
    if "error" in current:
        line = f"Current device: error: {current['error']}"
    else:
        line = f"Current device: {current['device_type']} {current['device_num']}"
    return [line] + [f"  warning: {text}" for text in current.get("warnings", [])]


def render(report: dict) -> str:
    """The text form of ``info_report()``."""
    lines = [
        f"pyacc {report['pyacc']['version']} ({report['pyacc']['path']})",
        f"Python {report['python']}",
        f"Platform: {report['platform']}",
        "",
        f"Offload policy (PYACC_OFFLOAD): {report['offload']['policy']}: {report['offload']['meaning']}",
        *_current_line(report["current_device"]),
        "",
        "Device types",
    ]
    for device_type, summary in report["device_types"].items():
        lines += _type_lines(device_type, summary)
    lines += ["", *_table("Versions", report["versions"]), ""]
    lines += [f"CUDA kernel compiler (PYACC_CUDA_COMPILER): {report['cuda_compiler']}"]
    lines += [f"CPU threading layer (NUMBA_THREADING_LAYER): {report['threading_layer']}"]
    lines += [f"Kernel cache: {report['kernel_cache']}", ""]
    lines += _table("Environment", report["environment"])
    return "\n".join(lines)


def _info(args) -> int:
    report = info_report()
    try:
        print(json.dumps(report, indent=2, default=str) if args.json else render(report))
        sys.stdout.flush()
    except BrokenPipeError:  # `python -m pyacc info | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


# == run ======================================================================================
def _bitmask(text: str) -> str:
    try:
        return str(int(text, 0))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer bitmask (e.g. 3 or 0x3)") from None


def _device_type_name(text: str) -> str:
    if text.strip().lower() in _devices.TYPE_NAMES:
        return text
    try:
        _devices.canonical_type(text)  # raises with the list of types and a hint
    except Exception as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text  # pragma: no cover - canonical_type accepts only TYPE_NAMES


def _set_environment(args) -> None:
    """The options of ``run`` as the environment variables pyacc reads."""
    values = {
        "PYACC_NOTIFY": args.notify,
        "PYACC_TIME": "1" if args.time else None,
        "PYACC_TRACE": args.trace,
        "PYACC_CHECK": args.check_modes or ("1" if args.check else None),
        "ACC_DEVICE_TYPE": args.device,
        "PYACC_OFFLOAD": args.offload,
    }
    for name, value in values.items():
        if value is not None:
            os.environ[name] = value


def run_script(path: str, arguments: list[str]) -> None:
    """Run ``path`` as ``__main__`` with ``sys.argv = [path, *arguments]`` and the script's
    folder as ``sys.path[0]``, as ``python path arguments...`` does; ``sys.argv`` and
    ``sys.path`` are restored afterwards. SystemExit and exceptions propagate."""
    saved_argv, saved_path = sys.argv, sys.path[:]
    sys.argv = [path, *arguments]
    sys.path[0:1] = [os.path.dirname(os.path.abspath(path))]  # -m put the cwd there
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def _run(args) -> int:
    if not os.path.exists(args.script):
        print(f"{PROG} run: can't open file {os.path.abspath(args.script)!r}: "
              "[Errno 2] No such file or directory", file=sys.stderr)
        return 2
    _set_environment(args)
    try:
        importlib.import_module("pyacc.observe").configure()
    except ValueError as error:  # a variable it cannot take: the message names it
        print(f"{PROG} run: {error}", file=sys.stderr)
        return 2
    run_script(args.script, args.args)
    return 0


# == parser ===================================================================================
def _add_info(commands) -> None:
    info = commands.add_parser(
        "info", help="show device types, devices, versions and settings (like nvaccelinfo)",
        description="Show device types and devices with their properties, the offload "
        "policy, versions of numba, llvmlite, numpy, CuPy, numba-cuda-mlir, numba-cuda and "
        "the CUDA driver, the CUDA kernel compiler in use and why, the kernel cache folder "
        "and the ACC_*/PYACC_* settings.")
    info.add_argument("--json", action="store_true", help="print the report as JSON")
    info.set_defaults(handler=_info)


def _add_run(commands) -> None:
    run = commands.add_parser(
        "run", help="run a script with pyacc's observability switched on",
        description="Set the PYACC_* variables from the options, configure pyacc's "
        "observability, then run SCRIPT as 'python SCRIPT ARGS...' would.")
    run.add_argument("--notify", type=_bitmask, metavar="N",
                     help="PYACC_NOTIFY=N: one stderr line per event (1 launches, 2 transfers, ...)")
    run.add_argument("--time", action="store_true", help="PYACC_TIME=1: timing report at exit")
    run.add_argument("--trace", metavar="FILE", help="PYACC_TRACE=FILE: write a trace to FILE")
    run.add_argument("--check", action="store_true", help="PYACC_CHECK=1: the counters check")
    run.add_argument("--check-modes", metavar="MODES",
                     help="PYACC_CHECK=MODES: a comma list of counters, memory, stale, race (each may end in :error)")
    run.add_argument("--device", type=_device_type_name, metavar="TYPE",
                     help="ACC_DEVICE_TYPE=TYPE (host, emulated, cuda, ...)")
    run.add_argument("--offload", choices=_devices.OFFLOAD_POLICIES, type=str.lower,
                     help="PYACC_OFFLOAD: what to do when the device type is unavailable")
    run.add_argument("script", metavar="SCRIPT", help="the Python file to run")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                     help="arguments for the script (its sys.argv[1:])")
    run.set_defaults(handler=_run)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=PROG, description="pyacc, OpenACC for Python: "
                                  "installation report and script runner.")
    top.add_argument("--version", action="version", version=f"pyacc {acc.__version__}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND")
    _add_info(commands)
    _add_run(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m pyacc``; returns the exit code (no command: help, 0)."""
    top = parser()
    args = top.parse_args(argv)
    if args.command is None:
        top.print_help()
        return 0
    return args.handler(args)
