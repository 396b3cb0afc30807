"""The cuda device type's probe (how many GPUs, or why none) and its fork guard.

Owns: ``probe()``, the ``(reason, count)`` of the cuda device type; ``driver_reason()``,
the checks that need the CUDA driver, run when the first cuda device is created; and
the process's fork state: ``note_cuda_initialised`` (pyacc has initialised CUDA in this
process), ``after_fork_in_child`` and ``fork_reason`` (this process is a child forked
after that). ``pyacc._devices`` caches the probe, creates the devices and applies the
rules; this module holds the facts.

The probe (API.md §1: the default device type is cuda when a usable GPU is found; §12:
detecting GPUs creates no CUDA context). cuda is usable when
- CuPy imports (``import cupy`` loads no driver library, so it neither calls ``cuInit``
  nor creates a context: CuPy loads CUDA at first use);
- a CUDA kernel compiler can be used (``compiler.cuda_compilers.choice()``, which never
  touches the driver; its reason otherwise);
- Numba's CUDA simulator is off (``cuda_compilers.simulated()``);
- NVML (``cuda.bindings.nvml`` over the driver's ``libnvidia-ml.so.1``) counts at least
  one GPU that ``CUDA_VISIBLE_DEVICES`` leaves visible (read as CUDA reads it: ordinals up
  to the first invalid one, or GPU UUID prefixes). NVML is not CUDA: a child forked after
  the count may still use the GPU (PyTorch counts GPUs the same way).
Only where NVML cannot answer (``cuda.bindings.nvml`` missing, ``libnvidia-ml.so.1``
missing or failing, ``CUDA_VISIBLE_DEVICES`` naming MIG instances) does the probe fall
back to ``cupy.cuda.runtime.getDeviceCount()``, which initialises CUDA in this process
(``cuInit``, no context): when it finds GPUs, that counts as initialising CUDA for the
fork guard.
``PYACC_TESTING_FAKE_CUDA=1`` (testing only, see ``pyacc.testing``) replaces the probe:
one cuda device on ``mapping.devices.cuda_fake.FakeCudaBackend`` (host memory), usable only when
``NUMBA_ENABLE_CUDASIM=1`` puts the kernels in Numba's CUDA simulator.

The driver's own answers — CuPy's device count and the compiler's ``is_available()`` —
are asked when a cuda device is first created (``pyacc._registry._cuda_device``): that is
when pyacc initialises CUDA, and a failure there is reported as the device type being
unavailable, with these reasons.

The fork guard (API.md §12; CUDA does not support ``fork``: a child forked after its
parent initialised CUDA can neither use the parent's CUDA state nor start its own, and
CuPy then raises a bare ``cudaErrorInitializationError``). ``note_cuda_initialised`` is
called when pyacc creates a cuda device (the fake one included, so that CI tests the
rule) and when the fallback count above initialises CUDA. In a child forked after that
(``after_fork_in_child`` returns True), ``fork_reason()`` names the cause and the fixes
(``multiprocessing.get_context("spawn")`` or ``"forkserver"``, or ``host`` in the child)
and ``pyacc._devices`` makes cuda unavailable with it. A child of a parent that only
detected GPUs is not affected.

Invariants: ``probe()`` creates no CUDA context and calls ``cuInit`` only in the fallback
count (which then records it); ``driver_reason()`` asks the driver and is called only
when a cuda device is created, after ``note_cuda_initialised``; once set in a process,
the fork state is never cleared (a grandchild of a parent that initialised CUDA is a bad
fork too). The tests replace the seams at the end (``_import_module`` also hands out
``cupy`` and ``cuda.bindings.nvml``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys

from pyacc.compiler import cuda_compilers

__all__ = ["probe", "driver_reason", "fake_cuda_requested", "note_cuda_initialised",
           "after_fork_in_child", "forked_after_cuda", "fork_reason", "visible_count"]


# == the probe ================================================================================
def probe() -> tuple[str | None, int]:
    """``(reason, count)``: why cuda is unusable (None when usable) and its number of
    devices (NVML's visible GPUs; 1 under PYACC_TESTING_FAKE_CUDA). Creates no CUDA
    context (module docstring)."""
    if fake_cuda_requested():
        reason = _fake_cuda_reason()
        return reason, 0 if reason else 1
    cupy, reason = _cupy()
    if reason is None:
        reason = _compiler_choice()[1]
    if reason is None and _simulated():
        reason = ("NUMBA_ENABLE_CUDASIM=1: numba.cuda is Numba's CUDA simulator, which cannot "
                  "run kernels on GPU memory; unset it to use the GPU (tests without a GPU "
                  "add PYACC_TESTING_FAKE_CUDA=1, see pyacc.testing)")
    if reason is not None:
        return reason, 0
    count, why_not = _nvml_count()
    if count is None:
        return _runtime_count(cupy, why_not)
    if count <= 0:
        return _zero_gpus("NVML"), 0
    return None, count


def _cupy():
    """``(cupy module, None)``, or ``(None, why it does not import)``."""
    try:
        return _import_module("cupy"), None
    except ImportError as error:
        if getattr(error, "name", None) == "cupy":
            return None, "CuPy is not installed (pip install 'pyacc[cuda]')"
        return None, f"CuPy failed to import: {error}"
    except Exception as error:  # a broken CUDA install raises more than ImportError
        return None, f"CuPy failed to import: {type(error).__name__}: {error}"


def _zero_gpus(who: str) -> str:
    return (f"{who} reports 0 GPUs (is CUDA_VISIBLE_DEVICES empty, or are the GPUs hidden "
            "from this container?)")


def _runtime_count(cupy, why_not: str) -> tuple[str | None, int]:
    """The fallback count: ``cupy.cuda.runtime.getDeviceCount()`` (it calls ``cuInit``)."""
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as error:  # CUDARuntimeError: no driver, no GPU, driver too old
        return f"no usable CUDA driver or GPU: {type(error).__name__}: {error}; {why_not}", 0
    if count <= 0:
        return _zero_gpus("the CUDA driver"), 0
    note_cuda_initialised(f"initialised CUDA (pyacc counted the GPUs with the CUDA runtime "
                          f"because {why_not})")
    return None, count


def driver_reason() -> str | None:
    """Why the chosen kernel compiler cannot use the GPU (its driver bindings or NVVM
    missing or broken), or None. Asks the driver: called when a cuda device is created."""
    compiler, reason, _ = _compiler_choice()
    if compiler is None:
        return reason
    try:
        cuda = _load_compiler(compiler)
        if cuda.is_available():
            return None
        error = cuda.cuda_error() if hasattr(cuda, "cuda_error") else None
    except Exception as failure:  # a broken install raises more than ImportError
        error = f"{type(failure).__name__}: {failure}"
    return (f"{compiler.distribution} cannot use the GPU: "
            f"{error or 'its cuda.is_available() is False'}")


# == NVML: counting GPUs without CUDA ==========================================================
def _nvml_count() -> tuple[int | None, str]:
    """``(count, "")``: the GPUs NVML counts that CUDA_VISIBLE_DEVICES leaves visible; or
    ``(None, why NVML cannot answer)``."""
    try:
        nvml = _import_module("cuda.bindings.nvml")
    except Exception as error:  # older cuda-bindings, or none
        return None, f"NVML is unavailable (cuda.bindings.nvml: {type(error).__name__}: {error})"
    try:
        nvml.init_v2()
    except Exception as error:  # no libnvidia-ml.so.1, driver not loaded, version mismatch
        return None, f"NVML is unavailable ({type(error).__name__}: {error})"
    try:
        total = int(nvml.device_get_count_v2())
        visible = visible_count(os.environ.get("CUDA_VISIBLE_DEVICES"), total,
                                lambda: _nvml_uuids(nvml, total))
    except Exception as error:
        return None, f"NVML failed ({type(error).__name__}: {error})"
    finally:
        _quietly(nvml.shutdown)
    if visible is None:
        return None, "CUDA_VISIBLE_DEVICES names MIG instances, which NVML does not count"
    return visible, ""


def _nvml_uuids(nvml, total: int) -> list[str]:
    return [str(nvml.device_get_uuid(nvml.device_get_handle_by_index_v2(index)))
            for index in range(total)]


def _quietly(function) -> None:
    try:
        function()
    except Exception:  # noqa: BLE001 - releasing NVML cannot change the count
        pass


def visible_count(text: str | None, total: int, uuids=lambda: []) -> int | None:
    """How many of ``total`` GPUs CUDA shows under ``CUDA_VISIBLE_DEVICES=text`` (None:
    unset, all of them), or None where only CUDA can tell (MIG instances). As CUDA reads
    it: ordinals or GPU UUID prefixes (``uuids()``: each GPU's, by ordinal), up to the
    first item that names no GPU; a GPU named twice hides them all."""
    if text is None:
        return total
    items = [item.strip() for item in text.split(",")]
    if items[0].startswith("MIG-"):
        return None
    if items[0].startswith("GPU-"):
        ordinals = _ordinals_of_uuids(items, uuids())
    else:
        ordinals = _leading_ordinals(items, total)
    return 0 if len(set(ordinals)) < len(ordinals) else len(ordinals)


def _leading_ordinals(items: list[str], total: int) -> list[int]:
    ordinals = []
    for item in items:
        digits = re.match(r"\d+", item)  # CUDA reads each item's leading digits
        if digits is None or int(digits.group()) >= total:
            break
        ordinals.append(int(digits.group()))
    return ordinals


def _ordinals_of_uuids(items: list[str], uuids: list[str]) -> list[int]:
    ordinals = []
    for item in items:
        matches = [index for index, uuid in enumerate(uuids) if item and uuid.startswith(item)]
        if len(matches) != 1:
            break
        ordinals.append(matches[0])
    return ordinals


# == PYACC_TESTING_FAKE_CUDA: the cuda device type without a GPU (testing only) ===============
def fake_cuda_requested() -> bool:
    return os.environ.get("PYACC_TESTING_FAKE_CUDA", "").strip() not in ("", "0")


def _fake_cuda_reason() -> str | None:
    """Under PYACC_TESTING_FAKE_CUDA=1: what is missing for the fake cuda device."""
    if not _simulated():
        if "numba.cuda" in sys.modules:
            return ("PYACC_TESTING_FAKE_CUDA=1 needs Numba's CUDA simulator, but numba.cuda "
                    "was already imported without it: set NUMBA_ENABLE_CUDASIM=1 before the "
                    "program (or the test run) starts")
        return ("PYACC_TESTING_FAKE_CUDA=1 needs NUMBA_ENABLE_CUDASIM=1 (kernels of the fake "
                "cuda device run in Numba's CUDA simulator); set both before the program "
                "starts")
    if _find_spec("numba.cuda") is None:
        return ("PYACC_TESTING_FAKE_CUDA=1 needs numba-cuda for Numba's CUDA simulator "
                "(pip install 'pyacc[test]')")
    return None


# == the fork guard (API.md §12) ===============================================================
class _Fork:
    """The process's fork state (module docstring)."""

    cause: str | None = None  # what this process (or an ancestor) did: "used the GPU (...)"
    bad: bool = False  # this process is a child forked after ``cause``


def note_cuda_initialised(cause: str) -> None:
    """From now on CUDA may be initialised in this process: ``cause`` says how ("used the
    GPU (pyacc created cuda device 0)"). A child forked later is a bad fork."""
    if _Fork.cause is None:
        _Fork.cause = cause


def after_fork_in_child() -> bool:
    """In the child of ``os.fork`` (called by ``pyacc._devices``' at-fork handler):
    whether this child is a bad fork (its parent had initialised CUDA)."""
    if _Fork.cause is not None:
        _Fork.bad = True
    return _Fork.bad


def forked_after_cuda() -> bool:
    """Whether this process is a child forked after its parent initialised CUDA."""
    return _Fork.bad


def fork_reason() -> str | None:
    """Why cuda is unusable in a bad fork (cause and fixes), or None in any other process."""
    if not _Fork.bad:
        return None
    return (f"this process was forked (os.fork, or multiprocessing's 'fork' start method, "
            f"the default on Linux before Python 3.14) after its parent {_Fork.cause}, and "
            "CUDA does not support fork: a forked child can neither use its parent's CUDA "
            "state nor initialise its own. Start the processes that use the GPU with "
            "multiprocessing.get_context('spawn') (or 'forkserver'), or run this child on "
            "the CPU: acc.set_device_type('host') in the child (ACC_DEVICE_TYPE=host for a "
            "program that never uses the GPU)")


# == seams (replaced by the tests) ============================================================
def _import_module(name: str):
    """``importlib.import_module``."""
    return importlib.import_module(name)


def _find_spec(name: str):
    """``importlib.util.find_spec`` without importing the package."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _compiler_choice():
    """``compiler.cuda_compilers.choice()``: ``(compiler or None, reason or None, how)``."""
    return cuda_compilers.choice()


def _simulated() -> bool:
    """Whether Numba's CUDA simulator is (or, once imported, will be) on."""
    return cuda_compilers.simulated()


def _load_compiler(compiler):
    """The compiler's ``cuda`` module (``cuda_compilers.load``: it may init the driver)."""
    return cuda_compilers.load(compiler)
