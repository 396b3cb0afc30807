"""Scale-out with MPI: ``pyacc.mpi`` and ``examples/jacobi_mpi.py`` under ``mpiexec``, and
the launch check that refuses a launcher of another MPI than mpi4py's.

Each run starts ``mpiexec -n N python ...`` in a subprocess, through a launcher of the MPI
that mpi4py is bound to (``MPI.Get_library_version()``): of the ``mpiexec`` beside this
interpreter (where the MPICH wheel of the ``mpi`` extra puts it) and the ``mpiexec``/
``mpirun`` on PATH, the first whose ``--version`` names that MPI, one of the library's own
release first. Open MPI's gets ``--oversubscribe`` (more ranks than cores) and, as root,
``OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``. Skipped, saying why (both
libraries named), when mpi4py is missing or no launcher of its MPI is found (install both
with ``pip install -e ".[mpi]"``).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.mpi_launcher import (LAUNCH_SIZES, Launcher, _launcher, _mpi4py_library,
                                _mpi4py_library_version)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "jacobi_mpi.py"
TIMEOUT = 180  # seconds per mpiexec run (a cold kernel cache on a loaded 2-core machine)

# the launcher sizes pyacc.mpi reads (and Slurm's counts) are removed from every test's
# environment, so that each test sets exactly the ones it is about (MCA settings stay)


def _env(**extra) -> dict:
    """This environment without launcher sizes, pyacc's settings reset, ROOT importable,
    and ``extra`` set."""
    env = dict(os.environ)
    for name in ("ACC_DEVICE_TYPE", "ACC_DEVICE_NUM", "PYACC_MPI_CUDA_AWARE",
                 "PYACC_MPI_LAUNCH_CHECK", "PYACC_EMULATED_DEVICES", "NUMBA_NUM_THREADS",
                 *LAUNCH_SIZES):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update({key: str(value) for key, value in extra.items()})
    return env


@pytest.fixture
def launcher() -> Launcher:
    found = _launcher()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture
def library() -> str:
    """The MPI library mpi4py is bound to (skips when there is none)."""
    found = _mpi4py_library()
    if found is None:
        pytest.skip('mpi4py is not installed or cannot load its MPI (pip install -e ".[mpi]")')
    return found


needs_mpi = pytest.mark.usefixtures("launcher")

def mpirun(ranks: int, *args: str, env: dict | None = None) -> str:
    found = _launcher()
    assert isinstance(found, Launcher), found
    command = [*found.command(ranks), sys.executable, *args]
    env = {**(env or _env()), **found.env}
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                          env=env, cwd=ROOT)
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done.stdout


@functools.cache
def _cuda_aware() -> bool:
    """What ``pyacc.mpi.cuda_aware()`` says in a 1-rank run of mpi4py's MPI."""
    out = mpirun(1, "-c", "import pyacc.mpi as pm; print('aware', pm.cuda_aware())")
    return "aware True" in out


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
    aware = _cuda_aware()  # False with the MPICH wheel
    mode = ("device" if aware else "staged") if exchange == "auto" else exchange
    assert f"halos {mode} (MPI CUDA-aware: {aware})" in out, out
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

    aware = os.environ["EXPECT_CUDA_AWARE"] == "True"  # False with the MPICH wheel
    assert pm.cuda_aware() is aware
    assert pm.device_buffers_ok("host") is True
    assert pm.device_buffers_ok("emulated") is aware
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
    out = mpirun(2, str(script), env=_env(PYACC_EMULATED_DEVICES=2,
                                          EXPECT_CUDA_AWARE=_cuda_aware()))
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


@needs_mpi
def test_the_mpich_wheel_is_not_cuda_aware():
    if "pypi.org/p/mpich" not in _mpi4py_library_version():
        pytest.skip(f"mpi4py is bound to {_mpi4py_library()!r}, not the MPICH wheel")
    assert _cuda_aware() is False


# == the launch check: a launcher of another MPI than mpi4py's ============================


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(**env), cwd=ROOT, timeout=TIMEOUT)


_IMPORT = "import pyacc.mpi; print('imported')"
# as srun starts a task: SLURM_TASK_PID is the task's own pid
_AS_SRUN_TASK = "import os; os.environ['SLURM_TASK_PID'] = str(os.getpid()); " + _IMPORT


def _assert_refused(done, variable: str, launched: int, library: str) -> None:
    assert done.returncode != 0 and "imported" not in done.stdout, done.stdout + done.stderr
    message = done.stderr
    assert "MPILaunchError" in message, message
    assert f"for {launched} processes ({variable}={launched})" in message, message
    assert "MPI.COMM_WORLD has 1 process" in message, message
    assert repr(library) in message, message  # the MPI mpi4py is bound to
    assert "mpiexec of the MPI that mpi4py was built against" in message, message
    assert "pip install --no-binary mpi4py mpi4py" in message, message


@pytest.mark.parametrize("variable", ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"])
def test_a_launcher_with_several_processes_and_a_world_of_one_is_refused(variable, library):
    _assert_refused(_python(_IMPORT, **{variable: 2}), variable, 2, library)


def test_an_srun_task_of_a_multi_task_step_with_a_world_of_one_is_refused(library):
    done = _python(_AS_SRUN_TASK, SLURM_STEP_NUM_TASKS=4, SLURM_NTASKS=4, SLURM_NPROCS=4)
    _assert_refused(done, "SLURM_STEP_NUM_TASKS", 4, library)


def test_a_plain_run_without_a_launcher_is_not_refused(library):
    done = subprocess.run([sys.executable, str(EXAMPLE), "--n", "32", "--iterations", "10",
                           "--device", "host"], capture_output=True, text=True, env=_env(),
                          cwd=ROOT, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bit-identical to the single-process solve: yes (1 ranks)" in done.stdout, done.stdout


def test_a_plain_run_inside_a_slurm_allocation_is_not_refused(library):
    """sbatch and salloc export the allocation's counts to the script or shell; a python
    it starts is no task of theirs (SLURM_TASK_PID is the shell's pid, not its own)."""
    done = _python(_IMPORT, SLURM_NTASKS=4, SLURM_NPROCS=4, SLURM_STEP_NUM_TASKS=4,
                   SLURM_TASK_PID=os.getpid())
    assert done.returncode == 0 and "imported" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("variables", [
    {"OMPI_COMM_WORLD_SIZE": 1},
    {"PMI_SIZE": 1},
    {"SLURM_STEP_NUM_TASKS": 1},
    {"PMI_SIZE": 2, "OMPI_COMM_WORLD_SIZE": 1},  # nested launchers: one says one process
], ids=lambda variables: ",".join(f"{name}={value}" for name, value in variables.items()))
def test_a_one_process_launch_is_not_refused(variables, library):
    done = _python(_AS_SRUN_TASK, **variables)
    assert done.returncode == 0 and "imported" in done.stdout, done.stdout + done.stderr


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_launch_through_the_launcher_of_mpi4pys_mpi_is_not_refused(ranks):
    out = mpirun(ranks, "-c", "import pyacc.mpi; from mpi4py import MPI; "
                              "sizes = MPI.COMM_WORLD.gather(MPI.COMM_WORLD.Get_size()); "
                              "sizes and print('worlds', sizes)")
    assert f"worlds {[ranks] * ranks}" in out, out


def test_the_launch_check_can_be_turned_off(library):
    done = _python(_IMPORT, PMI_SIZE=2, PYACC_MPI_LAUNCH_CHECK=0)
    assert done.returncode == 0 and "imported" in done.stdout, done.stdout + done.stderr


_DEFERRED = textwrap.dedent("""
    import pickle
    import mpi4py
    mpi4py.rc.initialize = False
    import pyacc as acc
    import pyacc.mpi as pm  # MPI not initialised yet: nothing to check
    from mpi4py import MPI
    MPI.Init()
    before = acc.get_device_type()
    try:
        {call}
    except pm.MPILaunchError as error:
        copy = pickle.loads(pickle.dumps(error))
        assert (copy.variable, copy.launched, copy.world) == ("PMI_SIZE", 2, 1), vars(copy)
        assert str(copy) == str(error) and isinstance(error, RuntimeError)
        assert acc.get_device_type() == before, (acc.get_device_type(), before)
        print("refused before acting")
    MPI.Finalize()
""")


@pytest.mark.parametrize("call", ["pm.bind_device('emulated')", "pm.share_cores()",
                                  "pm.local_rank()"])
def test_a_late_mpi_init_is_checked_before_the_helpers_act(call, library):
    """With ``mpi4py.rc.initialize = False`` the import cannot check; each helper does,
    before it binds a device or limits threads."""
    done = _python(_DEFERRED.format(call=call), PMI_SIZE=2, NUMBA_NUM_THREADS=1)
    assert done.returncode == 0 and "refused before acting" in done.stdout, (
        done.stdout + done.stderr)
