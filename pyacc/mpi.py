"""Scale-out helpers for running pyacc under MPI (mpi4py), the OpenACC + MPI pattern.

The usual OpenACC + MPI program (peers.md §9) binds each rank to one device by its
node-local rank, keeps its fields resident with ``enter data``/``data``, packs halos on the
device, and hands MPI either device buffers (``host_data use_device``, when the MPI is
CUDA-aware) or host copies staged with ``update self`` / ``update device``::

    from mpi4py import MPI  # optional dependency (pyacc[mpi]): a clear error below
    import pyacc as acc
    import pyacc.mpi

    device = pyacc.mpi.bind_device()          # local rank % number of devices
    if pyacc.mpi.device_buffers_ok():         # MPI may read/write device memory
        with acc.host_data(use_device=[send, recv]) as (d_send, d_recv):
            comm.Sendrecv(d_send, dest, recvbuf=d_recv, source=source)
    else:                                     # stage through the host copies
        acc.update(self=[send])
        comm.Sendrecv(send, dest, recvbuf=recv, source=source)
        acc.update(device=[recv])

mpi4py is optional: ``import pyacc`` never imports it, and importing this module without
it raises ``ImportError`` saying how to install it (``pip install pyacc[mpi]``).

The module also owns the launch check: a program started by a launcher for N > 1
processes whose MPI world is one process was started by the ``mpiexec`` of another MPI
than the one mpi4py is bound to, and every process would run the whole program alone.
Importing this module (once mpi4py has initialised MPI), and every helper here before it
acts, raises :class:`MPILaunchError` then, naming the launcher's variable, both sizes,
mpi4py's MPI and the fix. ``PYACC_MPI_LAUNCH_CHECK=0`` turns the check off.
"""

from __future__ import annotations

import ctypes
import os
import sys

import numba

try:
    from mpi4py import MPI  # optional dependency (pyacc[mpi]): a clear error below
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "pyacc.mpi needs mpi4py and an MPI library: install them with "
        "`pip install pyacc[mpi]` (mpi4py and the MPICH wheel), or `pip install mpi4py` "
        f"against your system MPI ({error})"
    ) from error

from ._devices import canonical_type
from ._routines import get_device_type, get_num_devices, set_device_num

__all__ = ["MPI", "MPILaunchError", "local_comm", "local_rank", "local_size", "bind_device",
           "share_cores", "cuda_aware", "device_buffers_ok"]

_ENV_CUDA_AWARE = "PYACC_MPI_CUDA_AWARE"
_ENV_LAUNCH_CHECK = "PYACC_MPI_LAUNCH_CHECK"

# The variables a launcher sets, in each process it starts, to the number of processes it
# started (its MPI_COMM_WORLD size), and who sets them. PMIx alone (PMIX_RANK, no size) and
# the local counts (MPI_LOCALNRANKS, OMPI_COMM_WORLD_LOCAL_SIZE) say nothing of the world.
_LAUNCHER_SIZES = (
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpiexec/mpirun"),
    ("PMI_SIZE", "a PMI launcher (the Hydra mpiexec of MPICH, Intel MPI or MVAPICH)"),
    ("MV2_COMM_WORLD_SIZE", "MVAPICH's mpirun_rsh"),
)
_SLURM_SIZE = ("SLURM_STEP_NUM_TASKS", "Slurm's srun")


# == the launch check =====================================================================


class MPILaunchError(RuntimeError):
    """A launcher started several processes, but mpi4py's MPI sees a world of one.

    The launcher belongs to another MPI than the one mpi4py is bound to, so its processes
    did not join one job: each would run the whole program alone. Attributes: ``variable``
    (the launcher's variable that gave its size), ``launched`` (that size), ``world``
    (``MPI.COMM_WORLD.Get_size()``), ``library`` (first line of
    ``MPI.Get_library_version()``), ``launcher`` (who sets ``variable``).
    """

    def __init__(self, variable: str, launched: int, world: int, library: str,
                 launcher: str = "a launcher"):
        self.variable, self.launched, self.world = variable, launched, world
        self.library, self.launcher = library, launcher
        super().__init__(
            f"this process was started by {launcher} for {launched} processes "
            f"({variable}={launched}), but MPI.COMM_WORLD has {world} process: mpi4py is "
            f"bound to another MPI ({library!r}), so the processes did not join one job and "
            f"each would run the whole program alone. {_launch_fix()} "
            f"({_ENV_LAUNCH_CHECK}=0 turns this check off.)")

    def __reduce__(self):
        return (type(self), (self.variable, self.launched, self.world, self.library,
                             self.launcher))


def _launch_fix() -> str:
    """What to do about a mismatched launch, naming the mpiexec beside Python if any."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    where = (f"here {beside}, beside the Python executable" if os.path.exists(beside)
             else "e.g. the one the `mpich` wheel puts beside the Python executable")
    return (f"Launch with the mpiexec of the MPI that mpi4py was built against ({where}), "
            "or reinstall mpi4py against the launcher's MPI, with that MPI's mpicc on PATH: "
            "`pip install --no-binary mpi4py mpi4py`.")


def _count(value) -> int | None:
    """A process count from a launcher variable; None when unset or not a count."""
    try:
        count = int(str(value).strip())
    except ValueError:
        return None
    return count if count >= 1 else None


def _slurm_step_tasks(environ) -> int | None:
    """``SLURM_STEP_NUM_TASKS`` when this process is itself a task of an srun step.

    Inside an ``sbatch`` script or a ``salloc`` shell the ``SLURM_*`` counts describe the
    allocation (or the shell's step), not a launch of this process: they count only when
    ``SLURM_TASK_PID``, the pid slurmstepd started the task as, is this process's pid.
    """
    if str(environ.get("SLURM_TASK_PID", "")).strip() != str(os.getpid()):
        return None
    return _count(environ.get(_SLURM_SIZE[0]))


def _launched_by(environ=None) -> tuple[str, int, str] | None:
    """``(variable, size, launcher)`` of the launcher that started this process with
    others, or None: no launcher variable, or one saying this is a 1-process launch."""
    environ = os.environ if environ is None else environ
    found = [(name, _count(environ.get(name)), who) for name, who in _LAUNCHER_SIZES]
    found.append((_SLURM_SIZE[0], _slurm_step_tasks(environ), _SLURM_SIZE[1]))
    found = [item for item in found if item[1] is not None]
    if not found or min(size for _, size, _ in found) <= 1:
        return None
    return found[0]


def _library() -> str:
    """The first line of ``MPI.Get_library_version()``: the MPI mpi4py is bound to."""
    lines = MPI.Get_library_version().replace("\x00", "").strip().splitlines()
    return " ".join(lines[0].split()) if lines else "an unknown MPI library"


_LAUNCH_CHECKED = False


def _check_launch() -> None:
    """Raise :class:`MPILaunchError` when a launcher started this process with others but
    ``MPI.COMM_WORLD`` has one process. Passes once per process; waits (passes without
    checking) while MPI is not initialised, as with ``mpi4py.rc.initialize = False``."""
    global _LAUNCH_CHECKED
    if _LAUNCH_CHECKED or not MPI.Is_initialized() or MPI.Is_finalized():
        return
    if os.environ.get(_ENV_LAUNCH_CHECK, "").strip().lower() not in ("0", "false", "no", "off"):
        launched = _launched_by()
        world = MPI.COMM_WORLD.Get_size()
        if launched is not None and world == 1:
            variable, size, launcher = launched
            raise MPILaunchError(variable, size, world, _library(), launcher)
    _LAUNCH_CHECKED = True


# == ranks and devices ====================================================================


def local_comm(comm=None):
    """The ranks of ``comm`` (default ``MPI.COMM_WORLD``) that share this node's memory.

    Made once per communicator with ``Split_type(MPI.COMM_TYPE_SHARED)`` (ranks keep
    their order); the result is cached by the communicator's MPI handle, so repeated calls
    don't create new communicators.
    """
    _check_launch()
    comm = MPI.COMM_WORLD if comm is None else comm
    key = comm.handle if hasattr(comm, "handle") else MPI._handleof(comm)
    cached = _LOCAL.get(key)
    if cached is None:
        cached = _LOCAL[key] = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    return cached


_LOCAL: dict = {}


def local_rank(comm=None) -> int:
    """This rank's number among the ranks of its node (0 .. local_size - 1)."""
    return local_comm(comm).Get_rank()


def local_size(comm=None) -> int:
    """How many ranks of ``comm`` run on this node."""
    return local_comm(comm).Get_size()


def bind_device(device_type=None, comm=None, *, limit_threads: bool = True) -> int:
    """Bind the calling thread to device ``local_rank % get_num_devices(type)``.

    ``device_type``: default the current device type (``acc.get_device_type()``). Ranks on
    one node get devices round robin; with more ranks than devices some share one. Returns
    the device number chosen. A type with no device raises
    ``DeviceTypeUnavailableError`` (from ``acc.set_device_num``), as selecting it would.

    On the CPU device types (``host``, ``emulated``) kernels run on the node's cores, so
    the cores are the device: with ``limit_threads`` (default) each rank's kernels also get
    their share of them (:func:`share_cores`) — otherwise every rank starts one kernel
    thread per core and, with MPI ranks busy-waiting beside them, a 2-rank run on 2 cores
    is ~100× slower than it should be.
    """
    _check_launch()
    device_type = canonical_type(device_type) if device_type is not None else get_device_type()
    count = get_num_devices(device_type)
    number = local_rank(comm) % count if count > 0 else 0
    set_device_num(number, device_type)
    if limit_threads and device_type in ("host", "emulated"):
        share_cores(comm)
    return number


def share_cores(comm=None) -> int:
    """Limit this rank's kernel threads to its share of the node's cores:
    ``max(1, cores // local_size)``, the remainder going to the lowest local ranks.

    ``cores`` is this process's CPU affinity. Leaves the thread count alone when the user
    set ``NUMBA_NUM_THREADS``. Returns the number of threads kernels now use.
    """
    _check_launch()
    if "NUMBA_NUM_THREADS" in os.environ:
        return numba.get_num_threads()
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    base, extra = divmod(cores, local_size(comm))
    threads = max(1, base + (1 if local_rank(comm) < extra else 0))
    threads = min(threads, numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(threads)
    return threads


def _libmpi_handles():
    """ctypes handles of the MPI libraries loaded in this process (Linux: from
    /proc/self/maps; elsewhere the global namespace only)."""
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                name = os.path.basename(path)
                if name.startswith(("libmpi.", "libmpi_abi.", "libmpich.")) and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    handles = []
    mode = os.RTLD_LAZY | getattr(os, "RTLD_NOLOAD", 0)  # already loaded: don't load another
    for path in paths:
        try:
            handles.append(ctypes.CDLL(path, mode=mode))
        except OSError:
            continue
    try:
        handles.append(ctypes.CDLL(None))
    except OSError:  # pragma: no cover
        pass
    return handles


def cuda_aware() -> bool:
    """Whether this MPI can send and receive CUDA device buffers.

    ``PYACC_MPI_CUDA_AWARE=1``/``0`` decides when set (as MPAS's ``config_gpu_aware_mpi``
    toggle: some transports claim support and crash). Otherwise asks the MPI library with
    ``MPIX_Query_cuda_support()`` (an extension of MPICH ≥ 4 and Open MPI ≥ 2; mpi4py does
    not wrap it, so it is looked up in the loaded ``libmpi``). False when the library has
    no such query, or MPI is not initialised. The MPICH wheel from PyPI is built without
    CUDA: False.
    """
    forced = os.environ.get(_ENV_CUDA_AWARE, "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    if not MPI.Is_initialized() or MPI.Is_finalized():
        return False
    for handle in _libmpi_handles():
        query = getattr(handle, "MPIX_Query_cuda_support", None)
        if query is None:
            continue
        query.restype, query.argtypes = ctypes.c_int, []
        try:
            return bool(query())
        except Exception:  # pragma: no cover - a foreign-function failure means "unknown"
            return False
    return False


def device_buffers_ok(device_type=None) -> bool:
    """Whether MPI calls may be given the device arrays of ``acc.host_data`` directly.

    ``host``: device arrays are the host arrays — always. ``cuda``: when the MPI is
    CUDA-aware (:func:`cuda_aware`). ``emulated`` behaves like a GPU here (its device memory
    is host RAM that MPI *could* read, but passing it would hide the missing-``update``
    bugs the emulated device exists to find): only when :func:`cuda_aware` says so, which
    ``PYACC_MPI_CUDA_AWARE=1`` forces to exercise that path without a GPU.
    """
    device_type = canonical_type(device_type) if device_type is not None else get_device_type()
    if device_type == "host":
        return True
    return cuda_aware()


_check_launch()  # at import, once mpi4py has initialised MPI (its default)
