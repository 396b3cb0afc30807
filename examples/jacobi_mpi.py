"""Jacobi/Laplace 2-D over MPI ranks: row blocks, device-resident fields, halos packed on
the device — the OpenACC + MPI pattern in Python.

The n × n grid of ``examples/laplace2d.py`` (top edge held at 1, zero elsewhere) is cut
into row blocks, one per rank; each rank's block carries one ghost row above and below.
Each rank:

1. binds itself to a device by its node-local rank (``pyacc.mpi.bind_device``);
2. keeps its block, the scratch block and four halo buffers on the device for the whole
   run (one ``acc.data`` region: one copy-in of the block, one copy-out at the end);
3. per iteration: packs its first and last interior rows into contiguous send buffers
   with a kernel, swaps them with its neighbours (``Sendrecv``), unpacks the received
   rows into its ghost rows with a kernel, then runs the stencil (with a max reduction)
   and the copy-back kernels — the same kernels, in the same order, as laplace2d.py;
4. the exchange hands MPI the device buffers through ``acc.host_data(use_device=...)``
   when MPI can use them (``pyacc.mpi.device_buffers_ok()``: the host device, or a
   CUDA-aware MPI), else stages them: ``acc.update(self=...)`` of the send buffers, MPI
   on the host copies, ``acc.update(device=...)`` of the receive buffers.

At the end the blocks are gathered on rank 0, which solves the whole grid in one process
with the same kernels and checks that the two results are **bit-identical** (each point's
update reads the same four neighbours in the same order, and max is exact, so the
decomposition must not change a single bit). Run::

    mpiexec -n 4 python examples/jacobi_mpi.py                   # 128² grid, 200 iterations
    mpiexec -n 2 python examples/jacobi_mpi.py --n 1024 --iterations 500 --device emulated
    mpiexec -n 2 python examples/jacobi_mpi.py --device emulated --exchange staged

Exit status 0 when the check passes (or ``--no-check``), 1 when it fails.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pyacc as acc
import pyacc.mpi
from pyacc.mpi import MPI

# == kernels (the stencil and copy-back are those of examples/laplace2d.py) ===============


@acc.parallel_loop(collapse=2, reduction="max:err", present="a anew")
def stencil(a, anew):
    n, m = a.shape
    err = 0.0
    for j in range(1, n - 1):
        for i in range(1, m - 1):
            anew[j, i] = 0.25 * (a[j, i + 1] + a[j, i - 1] + a[j - 1, i] + a[j + 1, i])
            err = max(err, abs(anew[j, i] - a[j, i]))
    return err


@acc.parallel_loop(collapse=2, present="a anew")
def copy_back(a, anew):
    n, m = a.shape
    for j in range(1, n - 1):
        for i in range(1, m - 1):
            a[j, i] = anew[j, i]


@acc.parallel_loop(present="a buf")
def pack_row(a, buf, row):
    """buf[:] = a[row, :] on the device (a contiguous send buffer)."""
    for i in range(buf.shape[0]):
        buf[i] = a[row, i]


@acc.parallel_loop(present="buf a")
def unpack_row(buf, a, row):
    """a[row, :] = buf[:] on the device (a received halo row into a ghost row)."""
    for i in range(buf.shape[0]):
        a[row, i] = buf[i]


# == the problem ============================================================================


def initial_grid(n: int) -> np.ndarray:
    """Zero interior, the top edge held at 1 (as laplace2d.py)."""
    grid = np.zeros((n, n))
    grid[0, :] = 1.0
    return grid


def row_blocks(n: int, size: int) -> list[tuple[int, int]]:
    """Interior rows 1 .. n-2 cut into ``size`` near-equal blocks: [(first, stop), ...]."""
    interior = n - 2
    base, extra = divmod(interior, size)
    blocks, first = [], 1
    for rank in range(size):
        stop = first + base + (1 if rank < extra else 0)
        blocks.append((first, stop))
        first = stop
    return blocks


def serial_solve(a: np.ndarray, iterations: int) -> float:
    """The single-process solve of laplace2d.py, fixed iteration count; returns the error."""
    anew = np.empty_like(a)
    error = 0.0
    with acc.data(copy=[a], create=[anew]):
        for _ in range(iterations):
            error = stencil(a, anew)
            copy_back(a, anew)
    return error


class HaloExchange:
    """The two halo swaps of one row block: up (with rank - 1) and down (with rank + 1).

    The four buffers are device-resident for the life of the enclosing data region; a
    missing neighbour is ``MPI.PROC_NULL`` (its swap is skipped).
    """

    def __init__(self, comm, block: np.ndarray, mode: str):
        self.comm = comm
        rank, size = comm.Get_rank(), comm.Get_size()
        self.up = rank - 1 if rank > 0 else MPI.PROC_NULL
        self.down = rank + 1 if rank < size - 1 else MPI.PROC_NULL
        m = block.shape[1]
        self.send_up, self.recv_up = np.zeros(m), np.zeros(m)
        self.send_down, self.recv_down = np.zeros(m), np.zeros(m)
        self.buffers = [self.send_up, self.recv_up, self.send_down, self.recv_down]
        # the buffers a staged exchange moves: only those of existing neighbours
        self.sends = [b for b, peer in ((self.send_up, self.up), (self.send_down, self.down))
                      if peer != MPI.PROC_NULL]
        self.recvs = [b for b, peer in ((self.recv_up, self.up), (self.recv_down, self.down))
                      if peer != MPI.PROC_NULL]
        self.block = block
        self.mode = mode  # "device": MPI gets device buffers; "staged": through the host

    def exchange(self) -> None:
        a, last = self.block, self.block.shape[0] - 1
        if self.up != MPI.PROC_NULL:
            pack_row(a, self.send_up, 1)
        if self.down != MPI.PROC_NULL:
            pack_row(a, self.send_down, last - 1)
        if self.mode == "device":
            with acc.host_data(use_device=self.buffers) as (s_up, r_up, s_down, r_down):
                self._swap(s_up, r_up, s_down, r_down)
        else:
            acc.update(self=self.sends)
            self._swap(self.send_up, self.recv_up, self.send_down, self.recv_down)
            acc.update(device=self.recvs)
        if self.up != MPI.PROC_NULL:
            unpack_row(self.recv_up, a, 0)
        if self.down != MPI.PROC_NULL:
            unpack_row(self.recv_down, a, last)

    def _swap(self, send_up, recv_up, send_down, recv_down) -> None:
        # first row up while the ghost row below arrives, then the other way round
        self.comm.Sendrecv(send_up, dest=self.up, sendtag=1,
                           recvbuf=recv_down, source=self.down, recvtag=1)
        self.comm.Sendrecv(send_down, dest=self.down, sendtag=2,
                           recvbuf=recv_up, source=self.up, recvtag=2)


def distributed_solve(comm, n: int, iterations: int, mode: str):
    """Solve on row blocks; returns (this rank's block with ghosts, global error, seconds)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    first, stop = row_blocks(n, size)[rank]
    block = np.ascontiguousarray(initial_grid(n)[first - 1:stop + 1])  # with ghost rows
    scratch = np.empty_like(block)
    halo = HaloExchange(comm, block, mode)
    comm.Barrier()
    start = time.perf_counter()
    local_error = 0.0
    with acc.data(copy=[block], create=[scratch] + halo.buffers):
        for _ in range(iterations):
            halo.exchange()
            local_error = stencil(block, scratch)
            copy_back(block, scratch)
    elapsed = time.perf_counter() - start
    error = comm.allreduce(local_error, op=MPI.MAX)
    return block, error, comm.allreduce(elapsed, op=MPI.MAX)


def gather(comm, n: int, block: np.ndarray):
    """The whole grid on rank 0 (boundary rows from the first and last blocks), else None."""
    rank, size = comm.Get_rank(), comm.Get_size()
    blocks = row_blocks(n, size)
    interior = np.ascontiguousarray(block[1:-1])
    counts = [(stop - first) * n for first, stop in blocks]
    grid = np.empty((n, n)) if rank == 0 else None
    receive = None
    if rank == 0:
        displacements = [first * n for first, _ in blocks]
        receive = [grid, counts, displacements, MPI.DOUBLE]
    comm.Gatherv(interior, receive, root=0)
    if rank == 0:
        grid[0] = block[0]
    if rank == size - 1:  # the bottom boundary row lives on the last rank
        if rank == 0:
            grid[n - 1] = block[-1]
        else:
            comm.Send(np.ascontiguousarray(block[-1]), dest=0, tag=9)
    if rank == 0 and size > 1:
        comm.Recv(grid[n - 1], source=size - 1, tag=9)
    return grid


def compile_kernels() -> None:
    """Call each kernel once on a tiny grid, so the timed solve excludes compilation."""
    a = initial_grid(4)
    anew, buf = np.empty_like(a), np.zeros(4)
    with acc.data(copy=[a], create=[anew, buf]):
        stencil(a, anew)
        copy_back(a, anew)
        pack_row(a, buf, 1)
        unpack_row(buf, a, 0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=128, help="grid size n × n (default 128)")
    parser.add_argument("--iterations", type=int, default=200, help="fixed iteration count")
    parser.add_argument("--device", default=None,
                        help="host or emulated (default: ACC_DEVICE_TYPE or the default device)")
    parser.add_argument("--exchange", choices=["auto", "device", "staged"], default="auto",
                        help="halo path: device buffers via host_data, staged via update, or "
                             "auto (device when pyacc.mpi.device_buffers_ok())")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                        help="compare with the single-process solve on rank 0 (default on)")
    args = parser.parse_args(argv)

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if args.n - 2 < size:
        if rank == 0:
            print(f"--n {args.n}: {args.n - 2} interior rows cannot be split over {size} ranks",
                  file=sys.stderr)
        return 2
    if args.device:
        acc.set_device_type(args.device)
    device_num = pyacc.mpi.bind_device(comm=comm)
    mode = args.exchange
    if mode == "auto":
        mode = "device" if pyacc.mpi.device_buffers_ok() else "staged"

    compile_kernels()  # before timing

    acc.reset_stats()
    block, error, elapsed = distributed_solve(comm, args.n, args.iterations, mode)
    stats = comm.gather(acc.stats(), root=0)
    places = comm.gather((pyacc.mpi.local_rank(comm), acc.get_device_type(), device_num), root=0)
    grid = gather(comm, args.n, block)

    status = 0
    if rank == 0:
        print(f"Jacobi {args.n}x{args.n}, {args.iterations} iterations, {size} rank(s) in row "
              f"blocks, halos {mode} (MPI CUDA-aware: {pyacc.mpi.cuda_aware()})")
        print("ranks: " + ", ".join(f"{r}→{t}:{d} (local {lr})"
                                    for r, (lr, t, d) in enumerate(places)))
        print(f"error: {error:.6e}  time: {elapsed:.3f} s")
        total = {key: sum(s[key] for s in stats) for key in ("h2d_count", "d2h_count", "launch_count")}
        print(f"transfers (all ranks): {total['h2d_count']} to device, {total['d2h_count']} to "
              f"host, {total['launch_count']} kernel launches")
        if args.check:
            reference = initial_grid(args.n)
            reference_error = serial_solve(reference, args.iterations)
            same = np.array_equal(grid, reference) and error == reference_error
            if same:
                print(f"bit-identical to the single-process solve: yes ({size} ranks)")
            else:
                diff = np.abs(grid - reference)
                print(f"bit-identical to the single-process solve: NO ({size} ranks): "
                      f"{np.count_nonzero(grid != reference)} points differ, max |Δ| "
                      f"{diff.max():.3e}; error {error!r} vs {reference_error!r}")
                status = 1
    return comm.bcast(status, root=0)


if __name__ == "__main__":
    sys.exit(main())
