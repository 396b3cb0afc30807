"""fork and the cuda device (API.md §12): "in a child forked after the parent used the
GPU, selecting or using `cuda` raises `DeviceTypeUnavailableError` naming the cause and
the fix (`spawn`/`forkserver`); detecting GPUs creates no CUDA context."

Each test runs a program in a new interpreter with a fake GPU (``NUMBA_ENABLE_CUDASIM=1
PYACC_TESTING_FAKE_CUDA=1``: the cuda device on host memory, kernels in Numba's CUDA
simulator, cuda the default device type). The fake device survives a fork, so a child
that is not stopped would run its kernels: these tests see the rule, not CUDA's own
failure. That detecting GPUs asks NVML and never the CUDA driver is tested with the
probe's seams in ``test_cuda_selection.py``
(``test_detecting_gpus_asks_nvml_and_never_the_cuda_driver``).
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: the program's start: a kernel, and a child's report of what raised
_PRELUDE = """
import multiprocessing, os, signal, sys, threading, warnings
import numpy as np
import pyacc as acc

@acc.parallel_loop
def bump(x):
    for i in range(x.shape[0]):
        x[i] += 1.0

def work(n):
    z = np.zeros(n)
    bump(z)
    return acc.get_device_type(), float(z.sum())

def attempt(label, action):
    try:
        print(label, "ok", action(), flush=True)
    except acc.DeviceTypeUnavailableError as error:
        print(label, "DeviceTypeUnavailableError", str(error).replace(chr(10), " "), flush=True)

def in_child(body):
    pid = os.fork()
    if pid == 0:
        signal.alarm(120)  # a hang fails the test instead of blocking it
        code = 0
        try:
            body()
        except BaseException as error:
            print("child raised", type(error).__name__, error, flush=True)
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print("child exit", os.waitstatus_to_exitcode(status), flush=True)
"""


def run_fake_gpu(tmp_path, body: str, **env) -> dict[str, str]:
    """Run ``_PRELUDE + body`` (a file: kernels must live in one) with a fake GPU; the
    lines it prints, as ``{first word: the rest}`` (a label printed twice fails)."""
    script = tmp_path / "program.py"
    script.write_text(_PRELUDE + textwrap.dedent(body))
    environment = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYACC_TESTING_FAKE_CUDA="1",
                       PYACC_CACHE_DIR=str(tmp_path / "cache"), **env)
    for name in ("ACC_DEVICE_TYPE", "PYACC_OFFLOAD"):
        if name not in env:
            environment.pop(name, None)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            env=environment, cwd=_ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = {}
    for line in result.stdout.splitlines():
        label, _, rest = line.partition(" ")
        assert label not in lines, result.stdout
        lines[label] = rest
    return lines


def assert_fork_error(text: str) -> None:
    """The error names the type, the cause and the fixes."""
    assert text.startswith("DeviceTypeUnavailableError"), text
    assert "device type 'cuda' is not available" in text, text
    assert "forked" in text and "after its parent used the GPU" in text, text
    assert "CUDA does not support fork" in text, text
    assert "multiprocessing.get_context('spawn')" in text and "'forkserver'" in text, text
    assert "acc.set_device_type('host')" in text, text


def test_a_child_forked_after_the_parent_used_cuda_cannot_select_or_use_it(tmp_path):
    """API.md §12: in the child, ``get_num_devices("cuda")`` is 0 with the fork's reason;
    a kernel on the default device (cuda, with an express plan armed in the parent), a new
    thread's first kernel, ``set_device_type("cuda")``, ``"default"`` and ``"not_host"`` raise
    ``DeviceTypeUnavailableError`` naming the cause and the fixes; the child still runs
    kernels after ``set_device_type("host")``; the parent keeps its GPU."""
    lines = run_fake_gpu(tmp_path, """
        print("parent", acc.get_device_type(), [work(64) for _ in range(3)][-1], flush=True)

        def child():
            print("count", acc.get_num_devices("cuda"), "device", acc.get_device_type(), flush=True)
            print("reason", acc._devices.unavailable_reason("cuda"), flush=True)
            attempt("kernel", lambda: work(64))
            thread = threading.Thread(target=lambda: attempt("thread", lambda: work(64)))
            thread.start(); thread.join()
            attempt("select", lambda: acc.set_device_type("cuda"))
            attempt("default", lambda: acc.set_device_type("default"))
            attempt("not_host", lambda: acc.set_device_type("not_host"))
            attempt("host", lambda: (acc.set_device_type("host"), work(64))[1])

        in_child(child)
        print("after", work(64), flush=True)
    """)
    assert lines["parent"] == "cuda ('cuda', 64.0)"
    assert lines["count"] == "0 device cuda"
    assert "multiprocessing.get_context('spawn')" in lines["reason"]
    for label in ("kernel", "thread", "select", "default", "not_host"):
        assert_fork_error(lines[label])
    assert lines["host"] == "ok ('host', 64.0)"
    assert lines["child"] == "exit 0"
    assert lines["after"] == "('cuda', 64.0)"


def test_a_fork_pool_after_the_parent_used_cuda_gets_the_error_not_cudas(tmp_path):
    """API.md §12, the case seen on a GPU: ``multiprocessing``'s fork pool (the default
    start method on Linux before Python 3.14) after a kernel ran on cuda in the parent."""
    lines = run_fake_gpu(tmp_path, """
        def pooled(n):
            try:
                return "ok " + repr(work(n))
            except acc.DeviceTypeUnavailableError as error:
                return "DeviceTypeUnavailableError " + str(error).replace(chr(10), " ")

        work(64)
        with multiprocessing.get_context("fork").Pool(2) as pool:
            for number, text in enumerate(pool.map(pooled, [64, 64])):
                print(f"worker{number}", text, flush=True)
    """)
    assert_fork_error(lines["worker0"])
    assert_fork_error(lines["worker1"])


def test_a_fork_child_under_offload_default_falls_back_to_host_with_a_warning(tmp_path):
    """API.md §12 with PYACC_OFFLOAD=default: cuda is unavailable in the child like any
    unavailable type, so the child's kernels run on host after an OffloadFallbackWarning
    that names the fork."""
    lines = run_fake_gpu(tmp_path, """
        work(64)

        def child():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                print("kernel", work(64), flush=True)
            print("warning", *[f"{w.category.__name__}: {w.message}" for w in caught], flush=True)

        in_child(child)
    """, PYACC_OFFLOAD="default")
    assert lines["kernel"] == "('host', 64.0)"
    assert lines["warning"].startswith("OffloadFallbackWarning: device type 'cuda' is not available")
    assert "CUDA does not support fork" in lines["warning"]
    assert lines["child"] == "exit 0"


def test_a_child_forked_after_the_parent_only_detected_gpus_uses_cuda(tmp_path):
    """API.md §12: detecting GPUs (``get_num_devices``, the default device type) creates no
    CUDA context, so a child forked after it uses cuda."""
    lines = run_fake_gpu(tmp_path, """
        print("parent", acc.get_num_devices("cuda"), acc.get_device_type(), flush=True)
        in_child(lambda: print("kernel", work(64), flush=True))
    """)
    assert lines["parent"] == "1 cuda"
    assert lines["kernel"] == "('cuda', 64.0)"
    assert lines["child"] == "exit 0"


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawn_and_forkserver_children_use_cuda_after_the_parent_did(tmp_path, method):
    """API.md §12: the fixes the error names work — children started by ``spawn`` or
    ``forkserver`` after the parent ran kernels on cuda run theirs on cuda."""
    lines = run_fake_gpu(tmp_path, f"""
        if __name__ == "__main__":
            work(64)
            with multiprocessing.get_context("{method}").Pool(2) as pool:
                print("children", pool.map(work, [64, 64]), flush=True)
    """)
    assert lines["children"] == "[('cuda', 64.0), ('cuda', 64.0)]"
