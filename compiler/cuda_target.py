"""The ``cuda`` target: a planned kernel → a plain-Python driver and GPU kernels (source for
numba-cuda-mlir or numba-cuda, ``cuda_compilers``).

Owns :class:`CudaTarget`. On the CPU a compute region becomes one ``njit`` function; on
a GPU the host and the device are separate, so the generated module holds:

* one ``@cuda.jit`` kernel per parallel nest (``_acc_k<N>``) over the nest's collapsed
  iteration space (OpenACC 3.3 §2.9.1: the collapsed levels form one space of
  ``prod(trip counts)`` iterations, innermost fastest: neighbouring threads, neighbouring
  elements). A nest of two or more levels
  without ``num_gangs`` is *tiled*: a 2-D grid of 2-D blocks (``cuda_runtime.tile``),
  x along the innermost level and y along the other levels' iterations (the rows), so
  that a block reuses its rows' and columns' cache lines and no element's index needs a
  division; without reductions or private arrays, one iteration a thread (more launches
  past CUDA's grid limits). Other nests (one level, or ``num_gangs``; 1-D, levels by
  divmod) and tiled ones with reductions or private arrays are grid-stride loops. Threads a
  block: ``vector_length`` (default ``cuda_runtime.DEFAULT_BLOCK``, a tile's 16 × 16); blocks:
  ``num_gangs`` or the problem size (§2.5.10, §2.5.12). Reductions (§2.9.11): each
  thread accumulates from the operator's identity, each block combines its threads in a
  shared-memory tree and writes one partial, and the driver combines the partials with
  the variable's value before the region (second pass), so that value participates once.
  ``private``/``firstprivate`` scalars are per-thread locals; private arrays get one
  row per thread of a scratch array (``firstprivate`` rows start as copies);
* one single-thread ``@cuda.jit`` kernel (``_acc_s<N>``) per run of sequential
  statements that touch device memory (array elements, routines, atomics): the code of
  ``serial`` regions and the sequential loops of ``kernels``/``parallel`` regions run
  on the device, as OpenACC requires, and the scalars they assign that are used later
  come back through one-element outputs;
* routines as ``@cuda.jit(device=True)`` functions (§2.15); ``acc.atomic.*`` as
  ``cuda.atomic.*`` (§2.12); outside the simulator the module's ``cuda`` is
  ``cuda_kernels.deferred``: no kernel is handed to the compiler (nor the compiler
  imported) before one must be compiled;
* the driver ``_acc_kernel`` (plain Python): each parallel nest replaced by its launch on
  the current queue's stream (``cuda_runtime.stream``), each device run by its
  single-thread launch; scalar code (sizes, bounds, tests on reduction results) and views
  of arrays run on the host. ``relaunchable`` when it only launches (``cuda_relaunch``).

Invariants:
    * The driver never reads an array element on the host: anything that does is in a
      device kernel (:meth:`CudaTarget._device_side` decides, conservatively).
    * A value leaves the device only as a reduction result or an output of a
      single-thread run, and only after the stream it was computed on has finished it.
    * Kernel parameters are the names a kernel reads that the driver defines
      (parameters and names assigned outside the kernel's lines), in sorted order, then
      the generated iteration-space, partial and scratch arguments.
"""
from __future__ import annotations

import ast
import copy
import dataclasses

import numpy as np

from . import cuda_compilers, cuda_runtime
from .codegen import RT, Target
from .cuda_arrays import CRT as _CRT, CUDA as _CUDA, DEVICE_COPIES as _DEVICE_COPIES
from .cuda_arrays import LOCAL_FILL as _LOCAL_FILL, LocalArrays as _LocalArrays, rebind_on_device
from .cuda_relaunch import only_launches
from .errors import CompileError
from .reductions import COMBINE, NP, element_update
from .templates import Renamer, fill_body, is_const, range_bounds

__all__ = ["CudaTarget"]

_HOST_ATTRIBUTES = ("shape", "strides", "ndim", "size", "dtype")


def _reads(n) -> bool:
    """Whether node ``n`` reads a name: a ``Load``, or the target of ``s += x``."""
    return isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) or \
        isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)


def _loaded(nodes, where=lambda n: True) -> set:
    """The names ``nodes`` read (for which ``where(node)`` holds)."""
    return {getattr(n, "target", n).id for node in nodes for n in ast.walk(node)
            if _reads(n) and where(n)}


def _stored(nodes, where=lambda n: True) -> set:
    return {n.id for node in nodes for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and where(n)}


class CudaTarget(Target):
    """GPU kernels launched by a plain-Python driver (one instance per build)."""

    #: the driver's host/device split does not handle a guarded nest: such ``kernels``
    #: loops run as written (sequentially, on the device)
    runtime_conditions = False
    name = "cuda"
    copies = _CRT  # private copies outside nests: device arrays (cuda_runtime)

    def __init__(self):
        self.builder = None
        self.launches: set[int] = set()  # ids of driver statements that launch kernels
        self.kernel_count = 0
        self.island_count = 0
        self.relaunchable = False  # the driver only launches (``finish_kernel``)
        # kernels whose parameter lists are final only once the driver is: (tree, launch)
        self.pending: list[tuple[ast.FunctionDef, list]] = []

    def attach(self, builder) -> None:
        self.builder = builder

    # -- the module ---------------------------------------------------------------------
    def imports(self):
        """The module's imports; outside the simulator its ``cuda`` is the chosen
        compiler's, deferred until a kernel is compiled (``cuda_kernels``)."""
        compiler = cuda_compilers.chosen()
        cuda = [compiler.import_line(_CUDA)] if cuda_runtime.SIMULATED else [
            f"from pyacc.compiler.cuda_kernels import deferred as {_CUDA}_deferred",
            f"{_CUDA} = {_CUDA}_deferred({compiler.name!r})"]
        return [f"import numpy as {NP}", *cuda, f"from pyacc.compiler import runtime as {RT}",
                f"from pyacc.compiler import cuda_runtime as {_CRT}"]

    def atomic_function(self, op):
        # ``cuda.atomic.<op>`` spelled out: the simulator resolves ``cuda`` only in kernels
        attribute = ast.Attribute(value=ast.Name(id=_CUDA, ctx=ast.Load()), attr="atomic",
                                  ctx=ast.Load())
        return ast.Attribute(value=attribute, attr=op, ctx=ast.Load())

    def _jit(self, device: bool = False) -> str:
        cache = "False" if cuda_runtime.SIMULATED else self.builder.cache_flag
        return f"@{_CUDA}.jit({'device=True, ' if device else ''}cache={cache})"

    def decorator(self, *, kind, parallel, boundscheck, cache):
        if kind == "routine":
            return self._jit(device=True)
        return "# the driver: plain Python, runs on the host"

    def widened(self, nest):  # gang outer, vector inner: one space of threads
        return nest.widen

    def _block_size(self) -> int:
        """Threads per block: ``vector_length``, else ``cuda_runtime.DEFAULT_BLOCK``
        (also the size of a reduction's shared-memory array)."""
        clauses = self.builder.clauses
        if clauses is not None and clauses.vector_length:
            return clauses.vector_length
        return cuda_runtime.DEFAULT_BLOCK

    def _array_ndim(self, name):
        numba_type = self.builder.arg_types.get(name)
        return getattr(numba_type, "ndim", None) if hasattr(numba_type, "layout") else None

    # -- parallel nests -------------------------------------------------------------------
    def parallel_nest(self, nest, body, prefix, slots):
        p = prefix
        if nest.array_reductions:  # (before the rewrite: it nests max(a[k], v, w) in two)
            body = _atomic_array_updates(nest, body, p)
            nest = dataclasses.replace(nest, reductions=tuple(
                (op, var) for op, var in nest.reductions if var not in nest.array_reductions))
        body = _LocalArrays(self, self.builder.current_source).rewrite(body)
        name = f"_acc_k{self.kernel_count}"
        self.kernel_count += 1
        outside = self.builder.names_outside(nest.levels[0])
        copies = nest.private + nest.firstprivate
        loop_vars = {level.target.id for level in nest.levels}
        private_arrays = [n for n in copies if self._array_ndim(n) is not None]
        # a private array's rows come from scratch memory: its original is not read
        # (and may be a host array the driver made, which no GPU kernel may take)
        unread = {n for n in private_arrays if n not in nest.firstprivate}
        live = sorted(((_loaded(body) & outside) - loop_vars) | (set(copies) - unread))
        levels = self._level_names(nest, p)
        setup, exprs = self._bounds(nest, levels)
        kernel_params = list(live)
        for depth, (s, _e, t, n) in enumerate(levels):
            kernel_params += [v for v in (s, t) if not v[0].isdigit() and not v.startswith("-")]
            if depth:
                kernel_params.append(n)
        tile = self._tile(nest)
        capped = bool(nest.reductions or private_arrays)
        kernel_params.append(f"{p}rows" if tile else f"{p}total")
        kernel_params += [f"{p}pv_{var}" for _, var in nest.reductions]
        kernel_params += [f"{p}pa_{n}" for n in private_arrays]
        if tile and not capped:
            kernel_params += [f"{p}cb", f"{p}rb"]  # the launch's first column and row
        driver = self._launch_lines(nest, p, name, kernel_params, tile, capped, private_arrays,
                                    slots)
        if tile:
            kernel = self._tiled_kernel_text(nest, p, name, kernel_params, levels, tile, capped,
                                             private_arrays, slots)
        else:
            kernel = self._kernel_text(nest, p, name, kernel_params, levels, private_arrays,
                                       slots)
        stmts = fill_body(setup + "\n" + driver, exprs, [], nest.levels[0])
        self.launches.update(id(s) for s in stmts)
        tree = fill_body(kernel, {}, body, nest.levels[0])[0]
        self.pending.append((tree, stmts))
        return stmts

    @staticmethod
    def _level_names(nest, p):
        """``(start, stop, step, trips)`` source per level; literal starts and steps
        stay literals (LLVM then sees unit strides)."""
        names = []
        for depth, level in enumerate(nest.levels):
            start, _stop, step = range_bounds(level)
            s = repr(start.value) if is_const(start) else f"{p}s{depth}"
            t = repr(step.value) if is_const(step) else f"{p}t{depth}"
            names.append((s, f"{p}e{depth}", t, f"{p}n{depth}"))
        return names

    @staticmethod
    def _bounds(nest, levels):
        exprs, lines = {}, []
        for depth, level in enumerate(nest.levels):
            start, stop, step = range_bounds(level)
            s, e, t, n = levels[depth]
            exprs.update({f"START{depth}": start, f"STOP{depth}": stop, f"STEP{depth}": step})
            if not is_const(start):
                lines.append(f"{s} = START{depth}")
            lines.append(f"{e} = STOP{depth}")
            if not is_const(step):
                lines.append(f"{t} = STEP{depth}")
            lines.append(f"{n} = {_CRT}.trip_count({s}, {e}, {t})")
        return "\n".join(lines), exprs

    def _launch_lines(self, nest, p, name, params, tile, capped, private_arrays, slots):
        """The driver's launch of a nest: its grid and block (a ``tile``'s: x over the
        innermost level's trips, y over the rows, the outer levels' iterations collapsed;
        else 1-D), ``capped`` for reductions and private arrays; one partial per block and
        one scratch row per thread; the launch; the reductions combined. An uncapped
        tile's threads never stride (``_tiled_kernel_text``): past CUDA's grid limits,
        one launch per grid's worth of columns and rows, each given its first column and
        row (``{p}cb``, ``{p}rb``), in stream order."""
        launch = f"{_CRT}.launch({name}, {p}grid, {p}block, ({_args(params)}))"
        if tile and not capped:
            inner = f"{p}n{len(nest.levels) - 1}"
            launch = (f"for {p}rb in range(0, {p}rows, {p}grid[1] * {p}block[1]):\n"
                      f"        for {p}cb in range(0, {inner}, {p}grid[0] * {p}block[0]):\n"
                      f"            {launch}")
        if tile:
            inner = f"{p}n{len(nest.levels) - 1}"
            rows = " * ".join(f"{p}n{d}" for d in range(len(nest.levels) - 1))
            lines = [f"{p}rows = {rows}", f"if {p}rows * {inner} > 0:",
                     f"    {p}grid, {p}block = {_CRT}.launch_tiles({inner}, {p}rows, {tile!r}, "
                     f"{capped})"]
        else:
            clauses = self.builder.clauses
            gangs = clauses.num_gangs if clauses is not None else None
            total = " * ".join(f"{p}n{d}" for d in range(len(nest.levels)))
            lines = [f"{p}total = {total}", f"if {p}total > 0:",
                     f"    {p}grid, {p}block = {_CRT}.launch_shape({p}total, "
                     f"{self._block_size()}, {gangs}, {capped})"]
        lines += [f"    {p}pv_{var} = {_CRT}.partials({p}grid, {slots.dtype(p, op, var)})"
                  for op, var in nest.reductions]
        lines += [f"    {p}pa_{n} = {_CRT}.scratch({p}grid, {p}block, {n})" for n in private_arrays]
        lines.append(f"    {launch}")
        lines += [f"    {var} = " + COMBINE[op].format(a=var, b=f"{_CRT}.finish({p}pv_{var}, {op!r})")
                  for op, var in nest.reductions]
        return "\n".join(lines)

    def _tile(self, nest):
        """The block shape of a nest launched on a 2-D grid (``cuda_runtime.tile``), or
        None for the 1-D grid-stride form. Tiled: nests of two or more levels with no
        ``num_gangs`` (gangs are blocks: a 1-D grid of exactly that many, §2.5.10). A tile
        of ``vector_length`` threads (§2.5.12) or 16 × 16."""
        clauses = self.builder.clauses
        if len(nest.levels) < 2:
            return None
        if clauses is not None and clauses.num_gangs:
            return None
        return cuda_runtime.tile(clauses.vector_length if clauses is not None else None)

    def _tiled_kernel_text(self, nest, p, name, params, levels, tile, capped, private_arrays,
                           slots):
        """A 2-D grid-stride loop (OpenACC 3.3 §2.9.1: the collapsed space, innermost level
        along x, as a hand-written 2-D kernel): the outer levels from the row by divmod
        once per row, the innermost index from x. ``while`` loops that step before the
        body (a ``continue`` still steps), no ``range`` (a run-time step: a division).

        Only a ``capped`` grid (reductions, private arrays) strides. An uncapped one
        covers the launch's part of the space (from its first column and row, ``{p}cb``,
        ``{p}rb``: ``_launch_lines``), one iteration a thread, as hand-written kernels do:
        two nested grid-stride loops kept ~16 more registers live (matmul, ``sm_90``: 46
        against hand-written 28), so 5 blocks of 256 threads fitted a multiprocessor, not 8."""
        if not capped:
            return self._covering_kernel_text(nest, p, name, params, levels, slots)
        last = len(nest.levels) - 1
        lines = [f"def {name}({', '.join(params)}):",
                 f"    {p}col0, {p}row = {_CUDA}.grid(2)",
                 f"    {p}colstep, {p}rowstep = {_CUDA}.gridsize(2)"]
        if private_arrays:  # the thread's scratch row: blocks, then threads, row by row
            c = _CUDA
            lines.append(f"    {p}tid = ({c}.blockIdx.y * {c}.gridDim.x + {c}.blockIdx.x) * "
                         f"{c}.blockDim.x * {c}.blockDim.y + {c}.threadIdx.y * {c}.blockDim.x"
                         f" + {c}.threadIdx.x")
        lines += self._thread_locals(nest, p, private_arrays, slots)
        lines += [f"    while {p}row < {p}rows:", f"        {p}q = {p}row",
                  f"        {p}row += {p}rowstep"]
        lines += _levels_of_flat_index(nest, p, levels, last - 1)
        s, _e, t, n = levels[last]
        lines += [f"        {p}col = {p}col0",
                  f"        while {p}col < {n}:",
                  f"            {nest.levels[last].target.id} = {s} + {p}col * {t}",
                  f"            {p}col += {p}colstep",
                  "            BODY"]
        if nest.reductions:
            lines += self._block_reduction(nest, p, slots, tile)
        return "\n".join(lines)

    def _covering_kernel_text(self, nest, p, name, params, levels, slots):
        """An uncapped tiled nest's kernel (``_tiled_kernel_text``): one iteration a
        thread, in a ``while`` that runs once (a ``continue`` in the body ends it; a
        loop that runs once costs no register)."""
        last = len(nest.levels) - 1
        s, _e, t, n = levels[last]
        lines = [f"def {name}({', '.join(params)}):",
                 f"    {p}col, {p}row = {_CUDA}.grid(2)",
                 f"    {p}col += {p}cb",
                 f"    {p}row += {p}rb",
                 f"    if {p}col >= {n}:",
                 "        return"]
        lines += self._thread_locals(nest, p, [], slots)
        lines += [f"    while {p}row < {p}rows:", f"        {p}q = {p}row",
                  f"        {p}row = {p}rows"]
        lines += _levels_of_flat_index(nest, p, levels, last - 1)
        return "\n".join(lines + [f"        {nest.levels[last].target.id} = {s} + {p}col * {t}",
                                   "        BODY"])

    def _thread_locals(self, nest, p, private_arrays, slots):
        """A thread's own values: each reduction's identity, each private scalar, each
        private array's scratch row (``{p}tid``; ``firstprivate`` rows copied in)."""
        lines = [f"    {p}rv_{var} = {slots.identity(p, op, var)}" for op, var in nest.reductions]
        for n in nest.private + nest.firstprivate:
            if n in private_arrays:
                lines.append(f"    {p}pp_{n} = {p}pa_{n}[{p}tid]")
                if n in nest.firstprivate:
                    lines += _copy_loops(f"{p}pp_{n}", n, self._array_ndim(n), p, 1)
            else:
                lines.append(f"    {p}pp_{n} = {n}")
        return lines

    def _kernel_text(self, nest, p, name, params, levels, private_arrays, slots):
        lines = [f"def {name}({', '.join(params)}):", f"    {p}tid = {_CUDA}.grid(1)"]
        lines += self._thread_locals(nest, p, private_arrays, slots)
        lines.append(f"    for {p}k in range({p}tid, {p}total, {_CUDA}.gridsize(1)):")
        lines.append(f"        {p}q = {p}k")
        lines += _levels_of_flat_index(nest, p, levels, len(nest.levels) - 1)
        lines.append("        BODY")
        if nest.reductions:
            lines += self._block_reduction(nest, p, slots)
        return "\n".join(lines)

    def _block_reduction(self, nest, p, slots, tile=None):
        """Shared-memory tree over the block's threads, then one partial per block (of a
        1-D block, or of a ``tile``: threads and blocks numbered row by row)."""
        c = _CUDA
        if tile is None:
            block, at = self._block_size(), f"{c}.blockIdx.x"
            lines = [f"    {p}tx = {c}.threadIdx.x", f"    {p}nt = {c}.blockDim.x"]
        else:
            block, at = tile[0] * tile[1], f"{c}.blockIdx.y * {c}.gridDim.x + {c}.blockIdx.x"
            lines = [f"    {p}tx = {c}.threadIdx.y * {c}.blockDim.x + {c}.threadIdx.x",
                     f"    {p}nt = {c}.blockDim.x * {c}.blockDim.y"]
        for op, var in nest.reductions:
            lines += [f"    {p}sm_{var} = {_CUDA}.shared.array({block}, {slots.dtype(p, op, var)})",
                      f"    {p}sm_{var}[{p}tx] = {p}rv_{var}"]
        lines += [f"    {_CUDA}.syncthreads()", f"    {p}h = 1",
                  f"    while {p}h < {p}nt:", f"        {p}h *= 2", f"    {p}h //= 2",
                  f"    while {p}h > 0:",
                  f"        if {p}tx < {p}h and {p}tx + {p}h < {p}nt:"]
        for op, var in nest.reductions:
            sm = f"{p}sm_{var}"
            lines.append(f"            {sm}[{p}tx] = " + COMBINE[op].format(
                a=f"{sm}[{p}tx]", b=f"{sm}[{p}tx + {p}h]"))
        lines += [f"        {_CUDA}.syncthreads()", f"        {p}h //= 2",
                  f"    if {p}tx == 0:"]
        lines += [f"        {p}pv_{var}[{at}] = {p}sm_{var}[0]" for _, var in nest.reductions]
        return lines

    # -- sequential code: host or single-thread device runs ----------------------------------
    def finish_routine(self, tree, source):
        """A routine's local arrays become per-thread arrays (``cuda_arrays.LocalArrays``)."""
        tree.body = _LocalArrays(self, source).rewrite(tree.body)
        return tree

    def numpy_maker(self, call) -> str | None:
        """``"zeros"``, ``"ones"``, ``"empty"`` or ``"full"`` when ``call`` makes a NumPy
        array with that function (``np.zeros(...)``, ``from numpy import zeros``)."""
        if not isinstance(call, ast.Call):
            return None
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                func.attr in _LOCAL_FILL and self._is_numpy(func.value.id):
            return func.attr
        if isinstance(func, ast.Name):
            value = self.builder.injected.get(func.id)
            return next((name for name in _LOCAL_FILL if value is getattr(np, name)), None)
        return None

    def _is_numpy(self, name: str) -> bool:
        return name == NP or f"import numpy as {name}" in self.builder.lines

    def finish_kernel(self, tree, source):
        """Move each run of sequential statements that touch device memory into a
        single-thread kernel; everything else stays in the driver."""
        self._driver = tree
        self._source = source
        tree.body = self._split(tree.body) or [ast.Pass()]
        defined = {a.arg for a in tree.args.args} | _stored([tree])
        passed = set()
        for kernel, launch in self.pending:
            _drop_undefined(kernel, launch, defined)
            passed.update(a.arg for a in kernel.args.args)
            self.builder.add_block(self._jit(), kernel, source)
        self.pending = []
        names = {n for n in passed if not n.startswith("_acc_")}
        if rebind_on_device(tree.body, names):  # one device copy per host array and call
            tree.body.insert(0, ast.parse(f"{_DEVICE_COPIES} = {{}}").body[0])
        self.relaunchable = only_launches(tree.body, self.launches, _CRT, {  # cuda_relaunch
            a.arg for a in tree.args.args if self._array_ndim(a.arg) is not None})
        return tree

    def _split(self, stmts):
        out, run = [], []
        for stmt in stmts:
            if id(stmt) in self.launches:
                out += self._island(run)
                out.append(stmt)
            elif any(id(node) in self.launches for node in ast.walk(stmt)):
                out += self._island(run)
                out.append(self._host_compound(stmt))
            elif self._device_side(stmt):
                run.append(stmt)
            else:
                out += self._island(run)
                out.append(stmt)
        out += self._island(run)
        return out

    def _host_compound(self, stmt):
        """A loop or ``if`` around launches stays on the host; its parts are split."""
        headers = {ast.For: ("target", "iter"), ast.While: ("test",), ast.If: ("test",)}
        fields = headers.get(type(stmt))
        if fields is None:
            raise self._source.error(
                f"the cuda target cannot run a {type(stmt).__name__.lower()} statement "
                "around parallel loops; use a plain for/while/if", stmt)
        if any(self._device_side(getattr(stmt, f)) for f in fields):
            raise self._source.error(
                "on the cuda target the condition or range of a loop around parallel "
                "loops runs on the host and cannot read array elements; compute it into a "
                "scalar (for instance with a reduction) first", stmt)
        stmt.body = self._split(stmt.body) or [ast.Pass()]
        stmt.orelse = self._split(stmt.orelse)
        return stmt

    def _device_side(self, node) -> bool:
        """True when ``node`` reads or writes array elements, or calls a routine or an
        atomic: it must run on the device. Views (``a[i]`` of a 2-d array, slices) and
        ``a.shape[...]`` are host operations."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Subscript) and not self._host_subscript(sub):
                return True
            if isinstance(sub, ast.Call) and (_is_atomic(sub.func) or (
                    isinstance(sub.func, ast.Name) and sub.func.id.startswith("_acc_r"))):
                return True
        return False

    def _host_subscript(self, node) -> bool:
        value = node.value
        if isinstance(value, ast.Attribute) and value.attr in _HOST_ATTRIBUTES:
            return True
        ndim = self._array_ndim(value.id) if isinstance(value, ast.Name) else None
        if ndim is None:
            return False
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return len(elts) < ndim or any(isinstance(e, ast.Slice) for e in elts)

    def _island(self, run):
        """A single-thread kernel for ``run`` (consumed) and the driver lines that
        launch it and read back the scalars it assigns that are used later."""
        if not run:
            return []
        stmts, run[:] = list(run), []
        for stmt in stmts:
            for node in ast.walk(stmt):
                if isinstance(node, (ast.Return, ast.Yield)):
                    raise self._source.error(
                        "on the cuda target a return value that reads array elements must "
                        "be computed into a variable first (assign it, then return the "
                        "variable)", node)
        first = min(s.lineno for s in stmts)
        last = max(s.end_lineno for s in stmts)
        driver = self._driver
        off_run = lambda n: not first <= n.lineno <= last  # noqa: E731 - (the run's lines)
        defined = {a.arg for a in driver.args.args} | _stored([driver], off_run)
        live_in = sorted(_loaded(stmts) & defined)
        stored = _stored(stmts)
        used_after = _loaded([driver], off_run)
        live_out = sorted(stored & (used_after | set(live_in)))
        index = self.island_count
        self.island_count += 1
        name, p = f"_acc_s{index}", f"_acc_s{index}_"
        outputs = [f"{p}o_{v}" for v in live_out]
        slots = self.builder.slots
        text = "\n".join([f"def {name}({', '.join(live_in + outputs)}):", "    BODY"]
                         + [f"    {p}o_{v}[0] = {v}" for v in live_out])
        body = _LocalArrays(self, self._source).rewrite([copy.deepcopy(s) for s in stmts])
        tree = fill_body(text, {}, body, stmts[0])[0]
        lines = [f"{p}o_{v} = {_CRT}.partials(1, {slots.dtype(p, '+', v)})" for v in live_out]
        lines.append(f"{_CRT}.launch({name}, 1, 1, ({_args(live_in + outputs)}))")
        lines += [f"{v} = {_CRT}.scalar({p}o_{v})" for v in live_out]
        launch = fill_body("\n".join(lines), {}, [], stmts[0])
        self.pending.append((tree, launch))
        return launch


#: numba-cuda atomics for the element updates of an array reduction (OpenACC 3.3
#: §2.5.15): each thread updates the array in place, atomically
_ATOMIC_OF = {"+": "add", "-": "sub", "max": "max", "min": "min", "&": "and_", "|": "or_",
              "^": "xor"}


def _atomic_array_updates(nest, body, p):
    """The body with each element update of an array reduction variable made an atomic
    update of the array itself (the private copies of the CPU are not needed on a GPU,
    whose atomics combine in place; the array's values before the loop participate once
    as its starting values)."""
    renamed = {var: var for var in nest.array_reductions}
    body = [Renamer({f"{p}rv_{var}": var for var in renamed}).visit(copy.deepcopy(stmt))
            for stmt in body]

    class Atomics(ast.NodeTransformer):
        def visit_stmt(self, node):
            found = element_update(node, None) if isinstance(node, (ast.Assign, ast.AugAssign)) \
                else None
            if found and found[0] in renamed:
                var, op, index, value = found
                if op not in _ATOMIC_OF:
                    raise CompileError(
                        f"reduction({op}:{renamed[var]}): array reductions with {op!r} have no "
                        f"atomic update on the cuda target; use + - max min & | ^ there")
                call = ast.Call(func=ast.Attribute(value=ast.Attribute(
                    value=ast.Name(id=_CUDA, ctx=ast.Load()), attr="atomic", ctx=ast.Load()),
                    attr=_ATOMIC_OF[op], ctx=ast.Load()),
                    args=[ast.Name(id=renamed[var], ctx=ast.Load()), index, value], keywords=[])
                return ast.copy_location(ast.Expr(value=call), node)
            return self.generic_visit(node)

        visit_Assign = visit_AugAssign = visit_stmt

    return [Atomics().visit(stmt) for stmt in body]


def _args(names) -> str:
    """A tuple display of ``names`` (a trailing comma for one)."""
    return ", ".join(names) + ("," if len(names) == 1 else "")


def _drop_undefined(kernel: ast.FunctionDef, launch: list, defined: set) -> None:
    """Remove from ``kernel``'s parameters, and from the arguments of its launch, the
    names the driver never defines (loop variables and temporaries that other kernels
    keep to themselves); the kernel defines those itself."""
    keep = [i for i, a in enumerate(kernel.args.args)
            if a.arg in defined or a.arg.startswith("_acc_")]
    kernel.args.args = [kernel.args.args[i] for i in keep]
    for node in ast.walk(ast.Module(body=launch, type_ignores=[])):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "launch" and isinstance(node.args[0], ast.Name) and \
                node.args[0].id == kernel.name:
            node.args[3].elts = [node.args[3].elts[i] for i in keep]


def _is_atomic(func) -> bool:
    """``_acc_cuda.atomic.<op>``, as :meth:`CudaTarget.atomic_function` spells it."""
    return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute)
            and func.value.attr == "atomic" and isinstance(func.value.value, ast.Name)
            and func.value.value.id == _CUDA)


def _levels_of_flat_index(nest, p, levels, deepest: int) -> list[str]:
    """Kernel lines setting the loop variables of levels ``0 … deepest`` from ``{p}q``,
    their flat index with level ``deepest`` fastest (divmod by each inner level's trips;
    OpenACC 3.3 §2.9.1)."""
    lines = []
    for depth in range(deepest, 0, -1):
        s, _e, t, n = levels[depth]
        var = nest.levels[depth].target.id
        lines += [f"        {p}x = {p}q // {n}",
                  f"        {var} = {s} + ({p}q - {p}x * {n}) * {t}",
                  f"        {p}q = {p}x"]
    s, _e, t, _n = levels[0]
    return lines + [f"        {nest.levels[0].target.id} = {s} + {p}q * {t}"]


def _copy_loops(target, source, ndim, p, indent):
    """Lines copying array ``source`` into ``target`` element by element (ndim loops)."""
    pad = "    " * indent
    index = ", ".join(f"{p}c{d}" for d in range(ndim))
    lines = []
    for d in range(ndim):
        lines.append(pad + "    " * d + f"for {p}c{d} in range({source}.shape[{d}]):")
    lines.append(pad + "    " * ndim + f"{target}[{index}] = {source}[{index}]")
    return lines

