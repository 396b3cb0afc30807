"""Kernels every compiler feature of the compute issue needs, with simulator-sized inputs.

Shared by ``test_cuda_ptx.py`` (each kernel compiled to PTX by NVVM, as for a real GPU)
and ``test_simulated_kernels.py`` (each kernel run in Numba's CUDA simulator and compared
with the function run as plain Python). The kernel functions are the ones of
``tests/compiler/test_kernels.py``, loaded from that file, so the CPU and the cuda
targets are held to the same programs.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pyacc.compiler import analyze, get_kernel, parse_clauses

_path = Path(__file__).resolve().parent.parent / "compiler" / "test_kernels.py"
_spec = importlib.util.spec_from_file_location("pyacc_cpu_kernel_tests", _path)
K = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(K)


@dataclass
class Case:
    """One kernel, its construct and clauses, and a factory of fresh arguments."""

    name: str
    func: object
    construct: str
    make_args: object
    clauses: dict = field(default_factory=dict)
    ignore: tuple = ()  # argument positions not compared (private arrays)

    def info(self):
        return analyze(self.func, parse_clauses(self.construct, **self.clauses))

    def run(self, target, device_type="cuda", info=None):
        """The kernel on fresh arguments: ``(value, arguments)``. On the cuda target the
        arrays go in as device arrays (a GPU kernel takes no host array) and the host
        arguments are returned with their device results copied back."""
        args = self.make_args()
        info = info or self.info()
        if target != "cuda":
            return get_kernel(info, args, target=target, device_type=device_type)(*args), args
        from numba import cuda  # the simulator's: these runs happen under it
        every = (*args, *info.free_values()) if info.free_params else args  # globals too
        device_args = tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in every)
        value = get_kernel(info, device_args, target=target, device_type=device_type)(*device_args)
        for host, device in zip(args, device_args):
            if isinstance(host, np.ndarray):
                host[...] = device.copy_to_host()
        return value, args


def _ints(n=300):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 1000, n)
    f = np.ones(n, dtype=np.int64)
    f[rng.choice(n, 7, replace=False)] = -1
    f[rng.choice(n, 3, replace=False)] = 3
    b = np.ones(n, dtype=np.bool_)
    b[17] = False
    return x, f, b


def private_scalar(x, y, t):
    for i in range(x.shape[0]):
        t = 2.0 * x[i]
        y[i] = t + 1.0


def gang_vector_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i]
    return s


def element_outside_loops(a, out):
    first = a[0] + a[1]          # a sequential read of device memory: a device run
    for i in range(out.shape[0]):
        out[i] = a[i] * first
    out[0] = first               # and a sequential write after the loop
    return first * 2.0


def sequential_loop_around_nests(u, steps):
    for t in range(steps):
        for i in range(1, u.shape[0] - 1):
            u[i] = u[i] + 1.0
        u[0] = u[0] + u[1]


# -- what real OpenACC programs need (API.md §6.1): globals, flags, array reductions ...

CASE_TABLE = np.arange(40.0)     # a module-level array read by a kernel (a C global)
CASE_ALPHA = 2.5                 # a module-level scalar, read at each call


def reads_globals(y):
    for i in range(y.shape[0]):
        y[i] = CASE_ALPHA * CASE_TABLE[i]


def histogram_and_max(x, hist, top):
    for i in range(x.shape[0]):
        b = int(x[i]) % hist.shape[0]
        hist[b] += 1
        top[b] = max(top[b], x[i])


def kernels_flag(x, limit):
    found = False
    for i in range(x.shape[0]):
        if x[i] > limit:
            found = True
    return found


def flat_rows(a, b):
    n = b.shape[1]
    for i in range(b.shape[0]):
        for j in range(n):
            a[i * n + j] = 2.0 * b[i, j]


def private_index(x):
    for i in range(x.shape[0]):
        x[i] = i * 0.5


def sums_of_list(x):
    mass = 0.0
    te = 0.0
    mx = -1.0
    for i in range(x.shape[0]):
        mass += x[i]
        te += x[i] * x[i]
        mx = max(mx, x[i])
    return mass, te, mx


def private_arrays_made_in_the_region(state, flux, hv):
    """miniWeather's ``compute_tendencies_x`` shape: small arrays made in the region's
    body, private to each iteration of a parallel loop (OpenACC 3.3 §2.5.13)."""
    stencil = np.zeros(4)
    vals = np.zeros(2)
    for i in range(flux.shape[0]):
        for s in range(4):
            stencil[s] = state[i + s]
        vals[0] = -stencil[0] / 12 + 7 * stencil[1] / 12 + 7 * stencil[2] / 12 - stencil[3] / 12
        vals[1] = -stencil[0] + 3 * stencil[1] - 3 * stencil[2] + stencil[3]
        flux[i] = vals[0] - hv * vals[1]


def array_made_in_the_region(x, y):
    """An array the region's own code makes on the host side and its loops read and
    write: on a GPU it lives in device memory."""
    w = np.zeros(3)
    w[0] = 0.25
    w[1] = 0.5
    w[2] = 0.25
    for i in range(1, x.shape[0] - 1):
        y[i] = w[0] * x[i - 1] + w[1] * x[i] + w[2] * x[i + 1]
    for k in range(3):
        w[k] = 2.0 * w[k]
    for i in range(1, x.shape[0] - 1):
        y[i] += w[1] * x[i]


def aliases_made_in_the_region(a, w):
    """A parameter given a new array, and an alias of it: one array on the device too."""
    w = v = np.zeros(3)
    w[0] = 1.0
    for i in range(a.shape[0]):
        a[i] = v[0] + i


def zero_d_arrays(x, s, found):
    """0-d arrays read (``s[()]``) and written (``found[()] = 1``, a search flag) in a
    parallel loop: the write goes through a one-element view of the same memory."""
    for i in range(x.shape[0]):
        if x[i] > s[()]:
            found[()] = 1


CASES = [
    Case("zero_d_arrays_read_and_written", zero_d_arrays, "parallel_loop",
         lambda: (np.arange(30.0), np.array(20.5), np.zeros((), np.int64))),
    Case("aliases_made_in_the_region_are_one_device_array", aliases_made_in_the_region,
         "kernels", lambda: (np.zeros(20), np.full(3, 7.0))),
    Case("private_arrays_made_in_the_region", private_arrays_made_in_the_region,
         "parallel_loop", lambda: (np.linspace(0.0, 1.0, 53), np.zeros(50), 0.25),
         {"private": "stencil vals"}),
    Case("array_made_in_the_region", array_made_in_the_region, "kernels",
         lambda: (np.linspace(0.0, 1.0, 40), np.zeros(40))),
    Case("global_array_and_scalar", reads_globals, "parallel_loop", lambda: (np.zeros(40),)),
    Case("array_reductions_plus_and_max", histogram_and_max, "parallel_loop",
         lambda: (np.arange(97.0), np.ones(5, dtype=np.int64), np.full(5, -1.0)),
         {"reduction": "+:hist max:top"}),
    Case("kernels_flag_is_an_or_reduction", kernels_flag, "kernels_loop",
         lambda: (np.arange(50.0), 30.0)),
    Case("kernels_loop_flat_index_is_parallel", flat_rows, "kernels_loop",
         lambda: (np.zeros(6 * 7), np.arange(42.0).reshape(6, 7))),
    Case("private_names_the_loop_index", private_index, "parallel_loop",
         lambda: (np.zeros(33),), {"private": "i"}),
    Case("reduction_list_as_c_writes_it", sums_of_list, "parallel_loop",
         lambda: (np.linspace(0.0, 2.0, 81),), {"reduction": "+:mass, +:te max:mx"}),

    Case("every_operator_on_ints", K.int_reductions, "parallel_loop", _ints,
         {"reduction": K.INT_CLAUSES}),
    Case("initial_value_participates_once_with_empty_loop", K.int_reductions,
         "parallel_loop", lambda: (np.zeros(0, np.int64), np.ones(0, np.int64),
                                   np.ones(0, np.bool_)), {"reduction": K.INT_CLAUSES}),
    Case("every_operator_on_floats", K.float_reductions, "parallel_loop",
         lambda: (np.random.default_rng(2).standard_normal(400),),
         {"reduction": ["+:s", "*:p", "max:mx", "min:mn"]}),
    Case("implicit_reduction_int_to_float", K.promoting_sum, "parallel_loop",
         lambda: (np.full(200, 0.5),)),
    Case("float32_reduction", K.float32_sum, "parallel_loop",
         lambda: (np.ones(100, dtype=np.float32),), {"reduction": "+:s"}),
    Case("collapse_2_with_max_reduction", K.stencil, "parallel_loop",
         lambda: (np.random.default_rng(3).random((9, 13)), np.zeros((9, 13))),
         {"collapse": 2, "reduction": "max:err"}),
    Case("collapse_3_negative_steps_nonzero_start", K.strided3, "parallel_loop",
         lambda: (np.zeros((9, 10, 7), dtype=np.int64), 1), {"collapse": 3}),
    Case("negative_runtime_step_and_global_constant", K.backwards, "parallel_loop",
         lambda: (np.arange(20.0), np.zeros(20), 19, -3)),
    Case("parallel_with_marked_loops", K.two_loops, "parallel",
         lambda: (np.arange(50.0), np.zeros(50))),
    Case("kernels_several_nests", K.kernels_nests, "kernels",
         lambda: (np.arange(40.0), np.zeros(40), np.zeros(40))),
    Case("kernels_loop_independent", K.shift, "kernels_loop",
         lambda: (np.arange(30.0),), {"independent": True}),
    Case("serial_runs_in_order", K.serial_scan, "serial", lambda: (np.ones(60),)),
    Case("private_array_and_firstprivate", K.with_private, "parallel_loop",
         lambda: (np.arange(100.0), np.zeros(3), 1.0),
         {"private": "tmp", "firstprivate": "k"}, ignore=(1,)),
    Case("private_scalar", private_scalar, "parallel_loop",
         lambda: (np.arange(64.0), np.zeros(64), 5.0), {"private": "t"}),
    Case("routines", K.call_routines, "parallel_loop",
         lambda: (np.linspace(-5, 15, 41), np.zeros(41))),
    Case("atomic_histogram", K.histogram, "parallel_loop",
         lambda: (np.arange(500), np.zeros(3, dtype=np.int64))),
    Case("atomics_on_floats_ints_and_tuples", K.atomics_2d, "parallel_loop",
         lambda: (np.random.default_rng(4).standard_normal(301),
                  np.array([[0.0, 0.0], [0.0, 0.0], [-np.inf, np.inf]]),
                  np.array([0, 0, 0xFFFFF], dtype=np.int64))),
    Case("on_device", K.where_am_i, "parallel_loop", lambda: (np.zeros(4),)),
    Case("view_taken_on_the_host", K.aliasing, "parallel_loop",
         lambda: (np.zeros((2, 30)), np.arange(30.0))),
    Case("num_gangs_and_vector_length", gang_vector_sum, "parallel_loop",
         lambda: (np.arange(300.0),), {"num_gangs": 2, "vector_length": 32}),
    Case("element_reads_and_writes_outside_loops", element_outside_loops, "parallel",
         lambda: (np.arange(1.0, 21.0), np.zeros(20))),
    Case("sequential_loop_around_parallel_loops", sequential_loop_around_nests, "parallel",
         lambda: (np.zeros(12), 3)),
]


# == local arrays: made in a loop body or a routine (issue 29 item 5) =======================
def local_arrays_in_the_loop_body(x, y):
    """Arrays made inside the loop are per-thread arrays on the GPU (OpenACC 3.3
    §2.5.13), filled as NumPy fills them."""
    for i in range(x.shape[0]):
        t = np.zeros(3)
        w = np.full((2, 2), 0.5)
        e = np.empty(4, dtype=np.int64)
        for k in range(3):
            t[k] = t[k] + x[i] + k
        for k in range(4):
            e[k] = k
        y[i] = t[0] + t[1] + t[2] + w[1, 1] + e[3]


def smooth3(a, i):
    w = np.ones(3)
    return (w[0] * a[i - 1] + w[1] * a[i] + w[2] * a[i + 1]) / 3.0


def routine_with_a_local_array(x, y):
    for i in range(1, x.shape[0] - 1):
        y[i] = smooth3(x, i)


CASES += [
    Case("local_arrays_in_the_loop_body", local_arrays_in_the_loop_body, "parallel_loop",
         lambda: (np.linspace(0.0, 1.0, 50), np.zeros(50))),
    Case("routine_with_a_local_array", routine_with_a_local_array, "parallel_loop",
         lambda: (np.linspace(0.0, 1.0, 40), np.zeros(40))),
]


# == structs of arrays and record arrays (issue 29 item 4) =================================
class StructCase(Case):
    """A case whose arguments include structs (namedtuples, objects with attributes) or
    record arrays: on the cuda target the structs' array members go in as device arrays;
    the arrays compared are the structs' members, flattened in order, and the fields of
    record arrays."""

    def run(self, target, device_type="cuda", info=None):
        args = self.make_args()
        info = info or self.info()
        if target != "cuda":
            value = get_kernel(info, args, target=target, device_type=device_type)(*args)
            return value, _compared(args)
        from numba import cuda  # the simulator's: these runs happen under it
        device_args = tuple(_struct_on_device(a, cuda) for a in args)
        value = get_kernel(info, device_args, target=target, device_type=device_type)(*device_args)
        for host, device in zip(_members(args), _members(device_args)):
            if isinstance(host, np.ndarray):
                host[...] = device.copy_to_host()
        return value, _compared(args)


def _fields(value):
    """A struct's member names (None: not a struct; device arrays are not)."""
    if hasattr(type(value), "_fields"):
        return list(type(value)._fields)
    if isinstance(value, np.ndarray) or hasattr(value, "copy_to_host"):
        return None
    return list(vars(value)) if hasattr(value, "__dict__") else None


def _compared(args):
    """The structs' members, each record array as its fields (numbers to compare)."""
    return [field for value in _members(args) for field in (
        [value[name] for name in value.dtype.names]
        if isinstance(value, np.ndarray) and value.dtype.names else [value])]


def _members(args):
    """The arrays and scalars of ``args``, structs' members in their place."""
    out = []
    for value in args:
        names = _fields(value)
        out += [value] if names is None else _members([getattr(value, n) for n in names])
    return out


def _struct_on_device(value, cuda):
    """``value`` with every host array (a struct's members too) as a device array."""
    if isinstance(value, np.ndarray):
        return cuda.to_device(value)
    names = _fields(value)
    if names is None:
        return value
    members = {n: _struct_on_device(getattr(value, n), cuda) for n in names}
    if hasattr(value, "_replace"):
        return value._replace(**members)
    import types
    return types.SimpleNamespace(**members)


def struct_of_arrays(s, out):
    """OpenACC 2.6 structs: members read (``s.x[i]``, ``s.inner.w[i]``), written
    (``s.y[i]``) and scalar (``s.n``); a reduction over a member."""
    t = 0.0
    for i in range(out.shape[0]):
        out[i] = s.x[i] * s.n + s.inner.w[i]
        s.y[i] = 2.0 * s.x[i]
        t += s.x[i]
    return t


def _a_struct(n=50):
    import types
    return (types.SimpleNamespace(x=np.linspace(0.0, 1.0, n), y=np.zeros(n), n=3,
                                  inner=types.SimpleNamespace(w=np.arange(float(n)))),
            np.zeros(n))


RECORD = np.dtype([("energy", "f8"), ("count", "i4")])
ALIGNED_RECORD = np.dtype([("energy", "f8"), ("count", "i4"), ("v", "f8", (3,))], align=True)


def record_fields(g, out):
    """Record arrays (NumPy structured dtypes) as Numba records: fields by attribute
    and by name, read and written (recarrays, so that plain Python reads them too)."""
    for i in range(g.shape[0]):
        out[i] = g[i].energy * g[i].count + g[i]["energy"]
        g[i].count = 7


def aligned_record_reduction(h):
    """An aligned record with a subarray field, written and reduced."""
    total = 0.0
    for i in range(h.shape[0]):
        h[i].v[2] = h[i].v[1] + 1.0
        total += h[i].energy + h[i].v[1]
    return total


def _records(n=40):
    g = np.zeros(n, RECORD).view(np.recarray)
    g.energy, g.count = np.linspace(0.0, 2.0, n), 2
    return g, np.zeros(n)


CASES += [
    StructCase("struct_of_arrays", struct_of_arrays, "parallel_loop", _a_struct),
    StructCase("record_fields", record_fields, "parallel_loop", _records),
    StructCase("aligned_record_reduction", aligned_record_reduction, "parallel_loop",
               lambda: (np.ones(30, ALIGNED_RECORD).view(np.recarray),)),
]


# == tiled nests: 2-D grids for nests of two or more levels (issue 28, matmul) ==============
def matmul(a, b, c):
    """The naive triple loop, its two outer levels collapsed: a tiled nest."""
    for i in range(c.shape[0]):
        for j in range(c.shape[1]):
            s = 0.0
            for k in range(a.shape[1]):
                s += a[i, k] * b[k, j]
            c[i, j] = s


def skips_and_private_scalar(x, y, t):
    """``continue`` in a tiled body still steps on; a private scalar per thread; run-time
    starts and steps on both levels (a reversed inner level)."""
    for i in range(1, x.shape[0], 2):
        for j in range(x.shape[1] - 1, 0, -1):
            if (i + j) % 3 == 0:
                continue
            t = x[i, j] * 2.0
            y[i, j] = t + i - j


def four_levels(a):
    """Three outer levels recovered from a row by divmod, the fourth along x."""
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                for m in range(a.shape[3]):
                    a[i, j, k, m] = 1000 * i + 100 * j + 10 * k + m


def private_array_over_two_levels(x, tmp):
    """Two collapsed levels with a private array: a tiled nest whose threads each take
    their scratch row (blocks, then threads, numbered row by row)."""
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            for k in range(3):
                tmp[k] = x[i, j] + k
            x[i, j] = tmp[0] + tmp[1] + tmp[2]


def sums_and_minimum_over_three_levels(a):
    """Two reductions over a tiled 3-level nest larger than the simulator's grid in both
    directions: each thread's share, the blocks' trees, the partials."""
    total = 0.0
    low = 10**9
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                total += a[i, j, k]
                low = min(low, (i * 7 + j * 5 + k * 3) % 23 - 4)
    return total, low


def firstprivate_array_over_two_levels(x, w):
    """A firstprivate array in a tiled nest: each thread's row starts as a copy of ``w``
    (its first two elements read, the third written and never read back)."""
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = w[0] * x[i, j] + w[1] + i - j
            w[2] = x[i, j]


CASES += [
    Case("tiled_firstprivate_array", firstprivate_array_over_two_levels, "parallel_loop",
         lambda: (np.arange(99.0).reshape(11, 9), np.array([2.0, 0.5, 0.0])),
         {"collapse": 2, "firstprivate": "w"}, ignore=(1,)),
    Case("tiled_reductions_sum_and_min_3_levels", sums_and_minimum_over_three_levels,
         "parallel_loop", lambda: (np.arange(330.0).reshape(5, 6, 11),),
         {"collapse": 3, "reduction": ["+:total", "min:low"]}),
    Case("private_array_over_two_levels", private_array_over_two_levels, "parallel_loop",
         lambda: (np.arange(60.0).reshape(6, 10), np.zeros(3)),
         {"collapse": 2, "private": "tmp"}, ignore=(1,)),
    Case("tiled_collapse_2_matmul", matmul, "parallel_loop",
         lambda: (np.arange(63.0).reshape(9, 7) / 10, np.arange(77.0).reshape(7, 11) / 7,
                  np.zeros((9, 11))), {"collapse": 2}),
    Case("tiled_continue_private_scalar_vector_length_32", skips_and_private_scalar,
         "parallel_loop", lambda: (np.arange(130.0).reshape(13, 10), np.zeros((13, 10)), 0.0),
         {"collapse": 2, "private": ["t"], "vector_length": 32}),
    Case("tiled_collapse_4_levels", four_levels, "parallel_loop",
         lambda: (np.zeros((3, 4, 5, 9), dtype=np.int64),), {"collapse": 4}),
]


def summed_in_order(a, s):
    """A serial region's scalar updated by ``s += x`` and returned: the single-thread
    kernel reads ``s``'s value from before the region (an augmented assignment reads its
    target; before, ``s`` never reached the kernel: unbound on the GPU)."""
    for i in range(a.shape[0]):
        s += a[i]
    return s


def running_sum_and_total(a, n):
    """A kernels loop that must run in order (``a[i - 1]``), on the device, accumulating
    into a scalar the region returns."""
    t = 0.0
    for i in range(1, n):
        a[i] = a[i - 1] + a[i]
        t += a[i]
    return t


CASES += [
    Case("augmented_scalar_of_a_serial_region", summed_in_order, "serial",
         lambda: (np.arange(10.0), 2.5)),
    Case("augmented_scalar_of_a_sequential_kernels_loop", running_sum_and_total, "kernels",
         lambda: (np.ones(6), 6)),
]


def smallest_of_three(a, b):
    """``m = min(m, a, b)``: Fortran's ``MIN`` of several values, a ``min`` reduction."""
    m = 1e30
    for i in range(a.shape[0]):
        m = min(m, a[i], b[i] * 2.0, 7.5)
    return m


def element_peaks(a, b, peak):
    """An array reduction's element update of several values (atomic max of their max)."""
    for i in range(a.shape[0]):
        peak[i % 3] = max(peak[i % 3], a[i], b[i])


CASES += [
    Case("min_update_of_several_values", smallest_of_three, "parallel_loop",
         lambda: (np.arange(5.0, 45.0), np.arange(40.0)[::-1] + 3), {"reduction": "min:m"}),
    Case("element_max_update_of_several_values", element_peaks, "parallel_loop",
         lambda: (np.sin(np.arange(40.0)), np.cos(np.arange(40.0)), np.full(3, 0.5)),
         {"reduction": "max:peak"}),
]


# -- inner loops a GPU collapses into the nest (NestPlan.widen): gang outer, vector inner

_loop = K.acc.markers.loop


def gang_vector_matmul(a, b, c):
    """``parallel``: a gang loop around a vector loop, one thread per element of ``c``."""
    for i in _loop(range(a.shape[0]), gang=True):
        for j in _loop(range(b.shape[1]), vector=True):
            s = 0.0
            for k in range(a.shape[1]):
                s += a[i, k] * b[k, j]
            c[i, j] = s


def independent_columns(a, b):
    """``kernels``: CloverLeaf's ``LOOP INDEPENDENT`` k around ``LOOP INDEPENDENT`` j on a
    column-major array."""
    for k in _loop(range(a.shape[1]), independent=True):
        for j in _loop(range(a.shape[0]), independent=True):
            b[j, k] = 0.5 * a[j, k] + k


def proved_rows(a, b):
    """``kernels``: two bare loops, both proved independent."""
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            b[i, j] = a[i, j] * 2.0 - j


def running_rows(a, b):
    """A ``seq`` loop after a statement (a running sum per row, in order): neither
    tightly nested nor independent, never collapsed: each row one thread."""
    for i in _loop(range(a.shape[0]), gang=True):
        t = 0.0
        for j in _loop(range(a.shape[1]), seq=True):
            t += a[i, j]
            b[i, j] = t


def triangle(a):
    """A vector loop whose bounds read the gang index: not rectangular, not collapsed."""
    for i in _loop(range(a.shape[0]), gang=True):
        for j in _loop(range(i + 1), vector=True):
            a[i, j] = i * 10 + j


CASES += [
    Case("widened_gang_vector_matmul", gang_vector_matmul, "parallel",
         lambda: (np.arange(63.0).reshape(9, 7) / 10, np.arange(77.0).reshape(7, 11) / 7,
                  np.zeros((9, 11)))),
    Case("widened_independent_column_major", independent_columns, "kernels",
         lambda: (np.asfortranarray(np.arange(60.0).reshape(12, 5)),
                  np.zeros((12, 5), order="F"))),
    Case("widened_proved_kernels_nest", proved_rows, "kernels",
         lambda: (np.arange(60.0).reshape(6, 10), np.zeros((6, 10)))),
    Case("not_widened_running_rows", running_rows, "parallel",
         lambda: (np.arange(60.0).reshape(6, 10), np.zeros((6, 10)))),
    Case("not_widened_triangle", triangle, "parallel", lambda: (np.zeros((7, 7)),)),
]


def differences_along_rows(a, b):
    """``prev`` is first assigned inside the inner loop and carried to its next
    iteration: the loop is not independent (on a GPU each (i, j) would read an unset
    ``prev``)."""
    for i in _loop(range(a.shape[0]), gang=True):
        for j in range(a.shape[1]):
            if j == 0:
                prev = 0.0
            b[i, j] = a[i, j] - prev
            prev = a[i, j]


def shifted_through_private(a, b, tmp):
    """``tmp`` is private to each outer iteration and shared by its inner ones (§2.5.1
    vector-single code): the inner loop must not get a copy per (i, j)."""
    for i in _loop(range(a.shape[0]), gang=True, private="tmp"):
        for j in range(a.shape[1]):
            tmp[j] = a[i, j] * 2.0
            if j > 0:
                b[i, j] = tmp[j - 1]


def bounded_by_an_element(a, m):
    """Inner bounds from an array element: evaluated on the device, not by the driver."""
    for i in _loop(range(a.shape[0]), gang=True):
        for j in _loop(range(m[0]), vector=True):
            a[i, j] = 1.0


CASES += [
    Case("not_widened_carried_first_inside", differences_along_rows, "parallel",
         lambda: (np.arange(30.0).reshape(5, 6) ** 2, np.zeros((5, 6)))),
    Case("not_widened_outer_private_array", shifted_through_private, "parallel",
         lambda: (np.arange(30.0).reshape(5, 6), np.zeros((5, 6)), np.zeros(6)), ignore=(2,)),
    Case("not_widened_bound_from_an_element", bounded_by_an_element, "parallel",
         lambda: (np.zeros((4, 5)), np.array([3]))),
]


def ideal_gas(d, e, p):
    """CloverLeaf's ideal_gas: ``LOOP INDEPENDENT PRIVATE(v, pe)`` j inside ``LOOP
    INDEPENDENT`` k (``kernels``): the inner loop's private scalars are each thread's."""
    for k in _loop(range(d.shape[1]), independent=True):
        for j in _loop(range(d.shape[0]), independent=True, private=["v", "pe"]):
            v = 1.0 / d[j, k]
            pe = 0.4 * d[j, k]
            p[j, k] = pe * e[j, k] + v


def calc_dt(d):
    """CloverLeaf's calc_dt: ``reduction(min:dt)`` on both loops, one reduction over the
    collapsed space."""
    dt = 1e30
    for k in _loop(range(d.shape[1]), independent=True, reduction="min:dt"):
        for j in _loop(range(d.shape[0]), independent=True, reduction="min:dt"):
            dt = min(dt, d[j, k] * 0.5 + j)
    return dt


def scratch_per_element(a, b, tmp):
    """A vector loop's private array: each (i, j) thread's own row of scratch."""
    for i in _loop(range(a.shape[0]), gang=True):
        for j in _loop(range(a.shape[1]), vector=True, private="tmp"):
            tmp[0] = a[i, j]
            tmp[1] = 2.0 * a[i, j]
            b[i, j] = tmp[0] + tmp[1]


def gang_in_gang(a):
    """Rodinia lud's PGI-era ``kernels``: a gang vector loop in a gang vector loop (the
    compiler picks the levels in kernels), proved independent: one 2-D space."""
    for i in _loop(range(a.shape[0]), "independent gang vector(8)"):
        for j in _loop(range(a.shape[1]), "gang vector(32)"):
            a[i, j] = i * 10 + j


CASES += [
    Case("widened_private_scalars_of_the_inner_loop", ideal_gas, "kernels",
         lambda: (np.arange(1.0, 31.0).reshape(6, 5), np.ones((6, 5)), np.zeros((6, 5)))),
    Case("widened_reduction_of_both_loops", calc_dt, "kernels",
         lambda: (np.arange(1.0, 31.0).reshape(6, 5),)),
    Case("widened_private_array_of_the_inner_loop", scratch_per_element, "parallel",
         lambda: (np.arange(20.0).reshape(4, 5), np.zeros((4, 5)), np.zeros(2)), ignore=(2,)),
    Case("widened_kernels_gang_in_gang", gang_in_gang, "kernels",
         lambda: (np.zeros((5, 7)),)),
]


def last_of_a_loop_that_may_not_run(a, m, b):
    """``t`` is stored by a loop that runs ``m[j]`` times: where ``m[j] == 0`` the column
    reads the previous column's ``t`` (Python's), so the j loop is not independent."""
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(m[j]):
                t = a[i, j] + k
            b[i, j] = t


def row_maxima(a, out):
    """``out[i]`` written by every j of a vector loop (the program's race in OpenACC):
    never collapsed, each row's j loop in order on its thread."""
    for i in _loop(range(a.shape[0]), gang=True):
        for j in _loop(range(a.shape[1]), vector=True):
            out[i] = max(out[i], a[i, j])


CASES += [
    Case("not_widened_store_of_a_loop_that_may_not_run", last_of_a_loop_that_may_not_run,
         "parallel_loop", lambda: (np.arange(12.0).reshape(3, 4), np.array([2, 0, 3, 0]),
                                   np.zeros((3, 4)))),
    Case("not_widened_element_every_iteration_writes", row_maxima, "parallel",
         lambda: (np.sin(np.arange(35.0)).reshape(5, 7), np.full(5, -9.0))),
]
