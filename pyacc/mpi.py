"""Scale-out helpers for running pyacc under MPI (mpi4py), the OpenACC + MPI pattern.

The usual OpenACC + MPI program (peers.md §9) binds each rank to one device by its
node-local rank, keeps its fields resident with ``enter data``/``data``, packs halos on the
device, and hands MPI either device buffers (``host_data use_device``, when the MPI is
CUDA-aware) or host copies staged with ``update self`` / ``update device``::

    from mpi4py import MPI
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
"""

from __future__ import annotations

import ctypes
import os

try:
    from mpi4py import MPI
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "pyacc.mpi needs mpi4py and an MPI library: install them with "
        "`pip install pyacc[mpi]` (mpi4py and the MPICH wheel), or `pip install mpi4py` "
        f"against your system MPI ({error})"
    ) from error

from ._devices import canonical_type
from ._routines import get_device_type, get_num_devices, set_device_num

__all__ = ["MPI", "local_comm", "local_rank", "local_size", "bind_device", "share_cores",
           "cuda_aware", "device_buffers_ok"]

_ENV_CUDA_AWARE = "PYACC_MPI_CUDA_AWARE"


def local_comm(comm=None):
    """The ranks of ``comm`` (default ``MPI.COMM_WORLD``) that share this node's memory.

    Made once per communicator with ``Split_type(MPI.COMM_TYPE_SHARED)`` (ranks keep
    their order); the result is cached by the communicator's MPI handle, so repeated calls
    don't create new communicators.
    """
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
    kind = canonical_type(device_type) if device_type is not None else get_device_type()
    count = get_num_devices(kind)
    number = local_rank(comm) % count if count > 0 else 0
    set_device_num(number, kind)
    if limit_threads and kind in ("host", "emulated"):
        share_cores(comm)
    return number


def share_cores(comm=None) -> int:
    """Limit this rank's kernel threads to its share of the node's cores:
    ``max(1, cores // local_size)``, the remainder going to the lowest local ranks.

    ``cores`` is this process's CPU affinity. Leaves the thread count alone when the user
    set ``NUMBA_NUM_THREADS``. Returns the number of threads kernels now use.
    """
    import numba

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
    kind = canonical_type(device_type) if device_type is not None else get_device_type()
    if kind == "host":
        return True
    return cuda_aware()
