"""Scale-out with MPI: ``pyacc.mpi`` and ``examples/jacobi_mpi.py`` under ``mpiexec``.

Each test starts ``mpiexec -n N python ...`` (the ``mpiexec`` beside this interpreter, from
the MPICH wheel of the ``mpi`` extra) in a subprocess. Skipped, saying why, when mpi4py
or ``mpiexec`` is missing (install with ``pip install -e ".[mpi]"``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "jacobi_mpi.py"
TIMEOUT = 180  # seconds per mpiexec run (a cold kernel cache on a loaded 2-core machine)


def _mpiexec() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    return shutil.which("mpiexec")


def _skip_reason() -> str | None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return 'mpi4py is not installed (pip install -e ".[mpi]")'
    if _mpiexec() is None:
        return 'no mpiexec beside the interpreter or on PATH (pip install -e ".[mpi]" brings MPICH\'s)'
    return None


needs_mpi = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


def _env(**extra) -> dict:
    env = dict(os.environ)
    for name in ("ACC_DEVICE_TYPE", "ACC_DEVICE_NUM", "PYACC_MPI_CUDA_AWARE",
                 "PYACC_EMULATED_DEVICES", "NUMBA_NUM_THREADS"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update({key: str(value) for key, value in extra.items()})
    return env


def mpirun(ranks: int, *args: str, env: dict | None = None) -> str:
    command = [_mpiexec(), "-n", str(ranks), sys.executable, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                          env=env or _env(), cwd=ROOT)
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done.stdout


def _transfers(output: str) -> tuple[int, int]:
    found = re.search(r"transfers \(all ranks\): (\d+) to device, (\d+) to host", output)
    assert found, output
    return int(found.group(1)), int(found.group(2))


# == the example ==========================================================================


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_jacobi_mpi_host_bit_identical(ranks):
    out = mpirun(ranks, str(EXAMPLE), "--n", "64", "--iterations", "60", "--device", "host")
    assert f"bit-identical to the single-process solve: yes ({ranks} ranks)" in out, out
    assert f"{ranks} rank(s) in row blocks, halos device" in out, out  # host: device path


@needs_mpi
@pytest.mark.parametrize("exchange, ranks", [("staged", 2), ("device", 2), ("auto", 4)])
def test_jacobi_mpi_emulated_bit_identical(exchange, ranks):
    """Emulated device memory is separate: a missing update would show as a wrong bit."""
    iterations = 40
    env = _env(PYACC_EMULATED_DEVICES=2)
    out = mpirun(ranks, str(EXAMPLE), "--n", "48", "--iterations", str(iterations),
                 "--device", "emulated", "--exchange", exchange, env=env)
    assert f"bit-identical to the single-process solve: yes ({ranks} ranks)" in out, out
    mode = "staged" if exchange == "auto" else exchange  # the MPICH wheel is not CUDA-aware
    assert f"halos {mode} (MPI CUDA-aware: False)" in out, out
    # ranks bound round robin to the 2 emulated devices by local rank
    for rank in range(ranks):
        assert f"{rank}→emulated:{rank % 2} (local {rank})" in out, out
    to_device, to_host = _transfers(out)
    if mode == "device":  # fields resident: each rank copies its block in once and out once
        assert (to_device, to_host) == (ranks, ranks), out
    else:  # plus one halo row per neighbour each iteration, each way
        halos = iterations * 2 * (ranks - 1)
        assert (to_device, to_host) == (ranks + halos, ranks + halos), out


@needs_mpi
def test_jacobi_mpi_cuda_aware_override_takes_device_path():
    env = _env(PYACC_MPI_CUDA_AWARE=1)
    out = mpirun(2, str(EXAMPLE), "--n", "32", "--iterations", "20", "--device", "emulated",
                 env=env)
    assert "halos device (MPI CUDA-aware: True)" in out, out
    assert "bit-identical to the single-process solve: yes (2 ranks)" in out, out


# == pyacc.mpi ============================================================================

_UNIT = textwrap.dedent("""
    import os, sys
    import numba
    import pyacc as acc
    import pyacc.mpi as pm
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    assert pm.local_size() == size, (pm.local_size(), size)  # one node
    assert pm.local_rank() == rank, (pm.local_rank(), rank)
    assert pm.local_comm() is pm.local_comm()  # made once
    assert acc.get_num_devices("emulated") == 2

    number = pm.bind_device("emulated")
    assert number == rank % 2 and acc.get_device_num("emulated") == number
    assert acc.get_device_type() == "emulated"
    cores = len(os.sched_getaffinity(0))
    base, extra = divmod(cores, size)
    expected = min(max(1, base + (rank < extra)), numba.config.NUMBA_NUM_THREADS)
    assert numba.get_num_threads() == expected, (numba.get_num_threads(), expected)

    acc.set_device_type("host")
    assert pm.bind_device() == 0 and acc.get_device_type() == "host"

    assert pm.cuda_aware() is False  # the MPICH wheel is built without CUDA
    assert pm.device_buffers_ok("host") is True
    assert pm.device_buffers_ok("emulated") is False
    os.environ["PYACC_MPI_CUDA_AWARE"] = "1"
    assert pm.cuda_aware() is True and pm.device_buffers_ok("emulated") is True
    os.environ["PYACC_MPI_CUDA_AWARE"] = "0"
    assert pm.cuda_aware() is False

    # a device buffer through host_data goes straight to MPI (emulated device memory)
    acc.set_device_type("emulated")
    import numpy as np
    send, recv = np.full(4, float(rank)), np.zeros(4)
    with acc.data(copyin=[send], create=[recv]):
        with acc.host_data(use_device=[send, recv]) as (d_send, d_recv):
            other = (rank + 1) % size
            comm.Sendrecv(d_send, dest=other, recvbuf=d_recv, source=(rank - 1) % size)
        assert recv.sum() == 0.0  # the host copy is untouched until update
        acc.update(self=[recv])
    assert (recv == (rank - 1) % size).all(), recv
    print(f"unit ok rank {rank}", flush=True)
""")


@needs_mpi
def test_pyacc_mpi_binding_under_two_ranks(tmp_path):
    script = tmp_path / "unit_mpi.py"
    script.write_text(_UNIT)
    out = mpirun(2, str(script), env=_env(PYACC_EMULATED_DEVICES=2))
    assert "unit ok rank 0" in out and "unit ok rank 1" in out, out


def test_import_pyacc_does_not_import_mpi4py():
    code = "import sys, pyacc; assert 'mpi4py' not in sys.modules; print('clean')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=TIMEOUT)
    assert done.returncode == 0 and "clean" in done.stdout, done.stderr


def test_import_pyacc_mpi_without_mpi4py_says_how_to_install():
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "mpi4py" or name.startswith("mpi4py."):
                    raise ImportError(f"No module named {name!r} (blocked for the test)")
        sys.meta_path.insert(0, Block())
        import pyacc
        try:
            import pyacc.mpi
        except ImportError as error:
            print("ImportError:", error)
        else:
            print("imported")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert "ImportError:" in done.stdout and "pip install pyacc[mpi]" in done.stdout, done.stdout
