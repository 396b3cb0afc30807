"""Every cuda-target kernel of ``cases.py`` compiled to PTX for an H100 (compute
capability 9.0) by each CUDA kernel compiler pyacc supports (``compiler.cuda_compilers``:
numba-cuda-mlir and numba-cuda), in this one process beside Numba's CPU target — what the
compiler does at a kernel's first launch on a real GPU — without a GPU: the driver runs on
host arrays, and each launch compiles the kernel for the launch's argument types instead
of running it. Needs each compiler's CUDA toolkit wheels (``pip install 'pyacc[test]'``);
a compiler that cannot compile here is skipped, naming why.
"""
from __future__ import annotations

import dis
import importlib
import warnings

import numpy as np
import pytest

from cases import CASES

from pyacc.compiler import (CompileError, analyze, cuda_compilers, cuda_kernels, cuda_runtime, get_kernel,
                            kernel_for, parse_clauses)

if cuda_runtime.SIMULATED:  # pragma: no cover - conftest keeps this file out
    pytest.skip("compiles for a real GPU", allow_module_level=True)

CAPABILITY = (9, 0)
_PROBED: dict = {}


def _cannot_compile(name) -> str | None:
    """Why compiler ``name`` cannot compile PTX here (None: it can)."""
    if name not in _PROBED:
        compiler = cuda_compilers.COMPILERS[name]
        if not compiler.installed():
            _PROBED[name] = f"{compiler.distribution} is not installed (pip install 'pyacc[test]')"
            return _PROBED[name]
        cuda = cuda_compilers.load(compiler)

        def probe(a):
            a[0] = 1.0
        try:
            with _capability_of_an_h100(name):
                cuda.compile_ptx(probe, (compiler.typeof(np.zeros(1)),), cc=CAPABILITY)
            _PROBED[name] = None
        except Exception as error:  # noqa: BLE001 - any failure: no usable toolkit here
            _PROBED[name] = f"{compiler.label()} cannot compile PTX here: {error}"
    return _PROBED[name]


class _capability_of_an_h100:
    """Device functions (routines) are compiled for the current device's capability,
    which needs a GPU: name the H100's instead (numba-cuda asks its dispatcher,
    numba-cuda-mlir its ``tools``, even with ``cc`` given)."""

    def __init__(self, name):
        self.name, self.patches = name, []

    def __enter__(self):
        if self.name == "mlir":
            from numba_cuda_mlir import tools
            self._set(tools, "get_gpu_compute_capability", lambda *a, **k: CAPABILITY)
        else:
            from numba.cuda import dispatcher
            self._set(dispatcher, "get_current_device",
                      lambda: type("H100", (), {"compute_capability": CAPABILITY})())
        return self

    def _set(self, owner, attribute, value):
        self.patches.append((owner, attribute, getattr(owner, attribute)))
        setattr(owner, attribute, value)

    def __exit__(self, *exc):
        for owner, attribute, value in reversed(self.patches):
            setattr(owner, attribute, value)


COMPILER_NAMES = ["mlir", "numba-cuda"]


@pytest.fixture(params=COMPILER_NAMES)
def compiler_name(request, monkeypatch):
    """Each compiler in turn, as if ``PYACC_CUDA_COMPILER`` had chosen it."""
    reason = _cannot_compile(request.param)
    if reason:
        pytest.skip(reason)
    monkeypatch.setattr(cuda_compilers, "_choice",
                        [(cuda_compilers.COMPILERS[request.param], None, "the test")])
    return request.param


class _CompileInsteadOfLaunch:
    """Stands in for a kernel in the driver's module: ``kernel[grid, block, stream](*args)``
    compiles it to PTX for the types of ``args`` and records the result."""

    def __init__(self, dispatcher, compiled, compiler):
        self.dispatcher = dispatcher
        self.compiled = compiled
        self.compiler = compiler

    def __getitem__(self, configuration):
        self.compiled.configurations.append((self.dispatcher.py_func, configuration))

        def launch(*args):
            signature = tuple(self.compiler.typeof(a) for a in args)
            ptx, _ = cuda_compilers.load(self.compiler).compile_ptx(
                self.dispatcher.py_func, signature, cc=CAPABILITY)
            self.compiled.append((self.dispatcher.py_func.__name__, ptx))
        return launch


class _Compiled(list):
    """``(kernel name, PTX)`` of each launch, and ``configurations``: ``(Python function of
    the kernel, (grid, block, stream))`` of each."""

    def __init__(self):
        super().__init__()
        self.configurations = []


@pytest.fixture
def compile_only(monkeypatch, compiler_name):
    """Drivers run on host arrays and compile their kernels instead of launching them."""
    monkeypatch.setattr(cuda_runtime, "_empty", lambda shape, dtype: np.zeros(shape, dtype))
    monkeypatch.setattr(cuda_runtime, "on_device", lambda value, copies: value)
    monkeypatch.setattr(cuda_runtime, "refuse_host_arrays", lambda kernel, args: None)
    monkeypatch.setattr(cuda_runtime, "_multiprocessors", [132])
    monkeypatch.setattr(cuda_runtime, "_configured", {})
    compiler = cuda_compilers.COMPILERS[compiler_name]
    compiled = _Compiled()

    def run(info, args, scratch=None, for_device=False):
        if scratch is not None:  # a stand-in for cuda_runtime.scratch, to watch it
            monkeypatch.setattr(cuda_runtime, "scratch", scratch)
        kernel = kernel_for(info, args, "cuda") if for_device else \
            get_kernel(info, args, target="cuda", device_type="cuda")
        module = kernel.driver.__globals__
        if isinstance(module["_acc_cuda"], cuda_kernels.Deferred):  # (a new module)
            cuda_kernels.realise(module, compiler_name)  # what a first launch does
        assert module["_acc_cuda"] is cuda_compilers.load(compiler)
        for name, value in list(module.items()):
            if name.startswith(("_acc_k", "_acc_s")) and hasattr(value, "py_func"):
                monkeypatch.setitem(module, name, _CompileInsteadOfLaunch(value, compiled, compiler))
        with _capability_of_an_h100(compiler_name):
            kernel(*args)
        return compiled

    return run


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_kernel_compiles_to_ptx(case, compile_only):
    compiled = compile_only(case.info(), case.make_args())
    if case.name != "initial_value_participates_once_with_empty_loop":
        assert compiled, "no kernel was launched"
    for name, ptx in compiled:
        assert ".entry" in ptx and f".target sm_{CAPABILITY[0]}{CAPABILITY[1]}" in ptx, name


def test_reductions_use_shared_memory_and_one_partial_per_block(compile_only):
    case = next(c for c in CASES if c.name == "every_operator_on_floats")
    (name, ptx), = compile_only(case.info(), case.make_args())
    assert ".shared" in ptx and "bar.sync" in ptx


def test_atomics_are_hardware_atomics(compile_only):
    case = next(c for c in CASES if c.name == "atomic_histogram")
    (name, ptx), = compile_only(case.info(), case.make_args())
    assert "atom.global.add" in ptx or "red.global.add" in ptx


def untypable(a):
    for i in range(a.shape[0]):
        a[i] = "text"


def test_typing_errors_point_at_the_user_loop(compile_only):
    info = analyze(untypable, parse_clauses("parallel_loop"))
    with pytest.raises(CompileError) as raised:
        compile_only(info, (np.zeros(4),))
    first = untypable.__code__.co_firstlineno
    assert raised.value.lineno in (first + 1, first + 2)  # the loop, or the statement
    assert raised.value.filename == __file__
    assert "_acc_k" not in str(raised.value).split("\n")[0]


def test_launch_shape_follows_the_clauses(monkeypatch):
    monkeypatch.setattr(cuda_runtime, "_multiprocessors", [132])
    assert cuda_runtime.launch_shape(1000, 128, None, False) == (8, 128)
    assert cuda_runtime.launch_shape(10**9, 256, None, True) == (8 * 132, 256)
    assert cuda_runtime.launch_shape(10**9, 64, 7, False) == (7, 64)
    assert cuda_runtime.launch_shape(1, 128, None, False) == (1, 128)


def _warning_classes():
    """Each installed compiler's own low-occupancy warning class: neither derives from
    Numba's ``numba.core.errors.NumbaPerformanceWarning``."""
    classes = []
    for compiler in cuda_compilers.COMPILERS.values():
        if compiler.installed():
            errors = importlib.import_module(compiler.errors_module)
            classes.append(pytest.param(errors.NumbaPerformanceWarning, id=compiler.name))
    return classes


class _WarnsLikeTheCompilers:
    """A kernel whose launch configuration warns as both compilers' do for small grids:
    at ``kernel[grid, block, stream]``, with the compiler's own warning class."""

    def __init__(self, category, colour):
        self.category, self.colour = category, colour
        self.configured = 0
        self.launched = []

    def __getitem__(self, configuration):
        self.configured += 1
        grid = configuration[0]
        if grid < 128:
            reset = "\x1b[0m" if self.colour else ""
            warnings.warn(self.category(f"{self.colour}Grid size {grid} will likely result in GPU "
                                        f"under-utilization due to low occupancy.{reset}"))
        return lambda *args: self.launched.append((configuration, args))


@pytest.mark.parametrize("colour", ["", "\x1b[1m"], ids=["plain", "colorama"])
@pytest.mark.parametrize("category", _warning_classes())
def test_no_warning_names_a_launch_configuration_pyacc_chose(category, colour, monkeypatch, recwarn):
    """API.md §12: a grid pyacc chose (a single-thread run, a small problem) never warns,
    whatever class the compiler's warning has, and each configuration is made once.
    With colorama installed (as on the H100 image) Numba's message starts with a colour
    code: the filter matched from the message's start and let every warning through."""
    warnings.simplefilter("always")
    monkeypatch.setattr(cuda_runtime, "_configured", {})
    kernel = _WarnsLikeTheCompilers(category, colour)
    for _ in range(3):
        cuda_runtime.launch(kernel, 1, 1, (1.0,))      # a single-thread run
        cuda_runtime.launch(kernel, 3, 128, ())        # a small problem
    assert not [w for w in recwarn.list if "Grid size" in str(w.message)]
    assert kernel.configured == 2
    assert kernel.launched[:2] == [((1, 1, 0), (1.0,)), ((3, 128, 0), ())]


def test_a_small_num_gangs_the_program_gave_is_reported_once_through_pyacc_info(
        monkeypatch, capsys):
    """The program's own ``num_gangs`` under 128 is its choice: one ``PYACC_INFO`` line
    (never a warning), once per value."""
    monkeypatch.setenv("PYACC_INFO", "1")
    monkeypatch.setattr(cuda_runtime, "_reported_gangs", set())
    monkeypatch.setattr(cuda_runtime, "_multiprocessors", [132])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            assert cuda_runtime.launch_shape(10_000, 128, 4, False) == (4, 128)
    assert capsys.readouterr().err.count("num_gangs(4)") == 1


def test_a_host_array_is_never_a_gpu_kernel_argument():
    """The real stacks refuse a NumPy array on an asynchronous stream ("NumPy only
    supports stream=None") and copy it in and out silently on the default one: pyacc's
    launch refuses it on every stream, naming the kernel's parameter."""

    class Kernel:
        def py_func(flux, stencil):  # noqa: N805 - stands for a generated kernel
            pass

        def __getitem__(self, configuration):
            raise AssertionError("launched")

    with pytest.raises(TypeError, match=r"host NumPy array for parameter 'stencil'"):
        cuda_runtime.launch(Kernel(), 1, 32, (object(), np.zeros(4)))


def local_array_of_run_time_size(x, n):
    for i in range(x.shape[0]):
        t = np.zeros(n)
        t[0] = x[i]
        x[i] = t[0]


def local_array_in_an_expression(x):
    for i in range(x.shape[0]):
        x[i] = (np.zeros(3) + 1.0)[0]


def full_of_a_variable(x, v):
    for i in range(x.shape[0]):
        t = np.full(3, v)
        x[i] = t[0]


@pytest.mark.parametrize("func, args, words", [
    (local_array_of_run_time_size, (np.zeros(4), 3),
     ["array 't'", "np.zeros(n)", "size fixed when compiling", 'private="t"']),
    (local_array_in_an_expression, (np.zeros(4),), ["assigned to a name of its own"]),
    (full_of_a_variable, (np.zeros(4), 2.0), ["array 't'", "needs dtype="]),
])
def test_a_local_array_the_gpu_cannot_size_is_a_compile_error(func, args, words):
    """OpenACC 3.3 §2.5.13: an array made in a GPU kernel is per-thread memory of a size
    fixed when compiling; anything else is a CompileError naming the array and the fix,
    at the kernel's line — never Numba's "No implementation of function empty"."""
    info = analyze(func, parse_clauses("parallel_loop"))
    with pytest.raises(CompileError) as raised:
        get_kernel(info, args, target="cuda", device_type="cuda")
    message = str(raised.value)
    assert all(word in message for word in words), message
    assert raised.value.filename == __file__ and raised.value.lineno > func.__code__.co_firstlineno


# == tiled nests (cuda_target: 2-D grids for nests of two or more levels) ===================
def _floor_divisions(function) -> int:
    """How many ``//`` a function's code computes."""
    return sum(1 for instruction in dis.get_instructions(function)
               if instruction.opname == "BINARY_FLOOR_DIVIDE" or instruction.argrepr == "//")


def _case(name):
    return next(c for c in CASES if c.name == name)


def test_a_nest_of_two_levels_runs_on_a_2d_grid_with_no_division_per_element(compile_only):
    """The naive matmul, collapsed: 16 × 16 blocks (as hand-written numba-cuda), x along
    the innermost level, its index found with no division; the PTX reads y's block index
    and no grid size (an uncapped tile's threads never stride)."""
    case = _case("tiled_collapse_2_matmul")
    compiled = compile_only(case.info(), case.make_args())
    (function, (grid, block, _stream)), = compiled.configurations
    assert block == (16, 16) and grid == (1, 1)
    assert _floor_divisions(function) == 0
    (_name, ptx), = compiled
    assert "%ctaid.y" in ptx and "%nctaid" not in ptx


@pytest.mark.parametrize("name", ["widened_gang_vector_matmul", "widened_independent_column_major",
                                  "widened_proved_kernels_nest",
                                  "widened_private_scalars_of_the_inner_loop",
                                  "widened_reduction_of_both_loops",
                                  "widened_private_array_of_the_inner_loop",
                                  "widened_kernels_gang_in_gang"])
def test_a_parallel_inner_loop_is_collapsed_into_the_nest_on_a_gpu(compile_only, name):
    """OpenACC 3.3 §2.9: a gang loop around a vector loop (or two independent loops, or
    two proved independent) is one space of threads on a GPU, as NVHPC maps them: a 2-D
    grid of 2-D blocks (a tile), x along the inner loop. Before, each iteration of the
    outer loop ran the inner loop on one thread: rows threads for rows × columns elements."""
    case = _case(name)
    compiled = compile_only(case.info(), case.make_args())
    (_function, (_grid, block, _stream)), = compiled.configurations
    assert len(block) == 2 and block[0] * block[1] == 256
    (_name, ptx), = compiled
    assert "%ctaid.y" in ptx


def test_an_element_update_of_several_values_stays_one_atomic_update():
    """``p[k] = max(p[k], a, b)`` under ``reduction(max:p)``: one atomic max of
    ``max(a, b)`` (the pairwise rewrite of three-value calls comes after the atomic form;
    before, the update became a plain read-modify-write: a race between threads)."""
    from pathlib import Path
    case = _case("element_max_update_of_several_values")
    kernel = get_kernel(case.info(), case.make_args(), target="cuda", device_type="cuda")
    text = Path(kernel.driver.__code__.co_filename).read_text()
    assert "_acc_cuda.atomic.max(peak, i % 3, max(a[i], b[i]))" in text


@pytest.mark.parametrize("name", ["not_widened_running_rows", "not_widened_triangle",
                                  "not_widened_carried_first_inside",
                                  "not_widened_outer_private_array",
                                  "not_widened_bound_from_an_element",
                                  "not_widened_store_of_a_loop_that_may_not_run",
                                  "not_widened_element_every_iteration_writes"])
def test_an_inner_loop_that_carries_a_value_or_reads_the_outer_index_stays_inside(
        compile_only, name):
    """An inner loop that is not independent or cannot join keeps the 1-D launch, a
    thread per outer iteration: a sequential one (a running sum), bounds reading the
    outer index (a triangle) or an array element (computed on the device), a scalar
    first assigned in the body but carried (``prev``; ``t`` stored by a loop that may not
    run), an outer loop's private array (one per outer iteration, shared by the inner
    iterations), an element every inner iteration writes (``out[i]``)."""
    case = _case(name)
    compiled = compile_only(case.info(), case.make_args())
    (_function, (_grid, block, _stream)), = compiled.configurations
    assert isinstance(block, int) or len(block) == 1


def test_an_uncapped_tiled_nest_leaves_room_for_eight_blocks_a_multiprocessor(compile_only):
    """matmul, collapsed, linked for an H100 by nvJitLink: its threads stride along y only
    (its grid covers the columns), so it needs at most 32 registers, and 8 blocks of
    16 × 16 threads fit a multiprocessor's 65,536 (hand-written numba-cuda's: 28). Its
    threads striding both ways took 46: 5 blocks, 62% of the threads' slots."""
    from cubin_registers import LinkerUnavailable, registers

    case = _case("tiled_collapse_2_matmul")
    (_name, ptx), = compile_only(case.info(), case.make_args())
    try:
        counts = registers(ptx)
    except LinkerUnavailable as why:
        pytest.skip(str(why))
    assert max(counts) <= 32


def test_outer_levels_of_a_tiled_nest_are_recovered_once_per_row(compile_only):
    """Four collapsed levels: the three outer ones from the row (two divisions: the middle
    levels), the fourth along x."""
    case = _case("tiled_collapse_4_levels")
    compiled = compile_only(case.info(), case.make_args())
    (function, (grid, block, _stream)), = compiled.configurations
    assert block == (16, 16) and grid == (1, 4)  # 9 columns, 3 * 4 * 5 = 60 rows
    assert _floor_divisions(function) == 2


def test_a_tile_holds_vector_length_threads(compile_only):
    """OpenACC 3.3 §2.5.12: ``vector_length(32)`` threads per block, as two rows of 16."""
    case = _case("tiled_continue_private_scalar_vector_length_32")
    compiled = compile_only(case.info(), case.make_args())
    (_function, (grid, block, _stream)), = compiled.configurations
    assert block == (16, 2) and grid == (1, 3)  # 9 columns, 6 rows


def test_a_reduction_over_a_tiled_nest_is_one_partial_per_block_of_a_capped_grid(compile_only):
    """The stencil with its ``max`` error: tiled, the block's threads combined in shared
    memory row by row, one partial per block; a large grid capped as 1-D reductions are
    (8 blocks per multiprocessor, 132 here)."""
    case = _case("collapse_2_with_max_reduction")
    compiled = compile_only(case.info(), case.make_args())
    (_function, (grid, block, _stream)), = compiled.configurations
    assert block == (32, 8) and grid == (1, 1)  # 9 × 13 array: 11 columns, 7 rows
    (_name, ptx), = compiled
    assert ".shared" in ptx and "bar.sync" in ptx and "%tid.y" in ptx
    assert cuda_runtime.launch_tiles(4096, 4096, (16, 16), True) == ((256, 4), (16, 16))
    assert cuda_runtime.launch_tiles(10**6, 8, (16, 16), True) == ((1056, 1), (32, 8))


def test_private_arrays_of_a_tiled_nest_have_one_scratch_row_per_thread(compile_only):
    """The scratch array has a row for every thread of the (capped) 2-D launch, and each
    thread finds its own row from its block and thread indices in both directions."""
    case = _case("private_array_over_two_levels")
    scratch = []
    real = cuda_runtime.scratch
    compiled = compile_only(case.info(), case.make_args(), scratch=lambda grid, block, like: (
        scratch.append(grid[0] * grid[1] * block[0] * block[1]), real(grid, block, like))[1])
    (function, (grid, block, _stream)), = compiled.configurations
    assert block == (32, 8) and grid == (1, 1) and scratch == [256]  # 10 columns, 6 rows
    (_name, ptx), = compiled
    assert "%ctaid.y" in ptx and "%tid.y" in ptx and "%nctaid.x" in ptx


def test_num_gangs_keeps_the_1d_grid_of_exactly_that_many_blocks(compile_only):
    """OpenACC 3.3 §2.5.10: gangs are blocks, ``num_gangs(4)`` a grid of 4."""
    case = _case("tiled_collapse_2_matmul")
    info = analyze(case.func, parse_clauses(case.construct, **case.clauses, num_gangs=4))
    compiled = compile_only(info, case.make_args())
    (_function, (grid, block, _stream)), = compiled.configurations
    assert grid == 4 and block == 128


@pytest.mark.parametrize("clauses, gangs", [
    ("num_gangs(2) device_type(nvidia) num_gangs(4) device_type(*) num_gangs(9)", 4),
    ("num_gangs(2) device_type(radeon) num_gangs(4) device_type(*) num_gangs(9)", 9),
    ("num_gangs(2) device_type(host, multicore) num_gangs(4)", 2),
], ids=["nvidia's group", "the * group", "no group names cuda"])
def test_a_device_type_group_sets_the_launch_on_its_device_type(compile_only, clauses, gangs):
    """OpenACC 3.3 §2.4: the clauses after ``device_type(nvidia)`` apply on cuda, those
    after ``device_type(*)`` on every type no group names, the others everywhere else
    (before: ``device_type`` was an unknown clause)."""
    case = _case("tiled_collapse_2_matmul")
    info = analyze(case.func, parse_clauses(case.construct, "collapse(2) " + clauses))
    compiled = compile_only(info, case.make_args(), for_device=True)
    (_function, (grid, _block, _stream)), = compiled.configurations
    assert grid == gangs


def test_tile_shapes_follow_vector_length():
    assert cuda_runtime.tile(None) == (16, 16)
    assert cuda_runtime.tile(128) == (16, 8)
    assert cuda_runtime.tile(1024) == (16, 64)
    assert cuda_runtime.tile(16) == (16, 1)   # one row: fewer than two rows of 16
    assert cuda_runtime.tile(100) == (100, 1)  # not a multiple of 16


def test_tiled_grids_cover_the_space_within_cuda_limits(monkeypatch):
    """One thread per iteration, up to CUDA's 65,535 blocks in y and 2³¹−1 in x: past
    them the driver launches again, the launches even (no last launch of idle blocks:
    625,000 rows of blocks are 10 launches of 62,500, not 9 full ones and one of 10,185)."""
    assert cuda_runtime.launch_tiles(4096, 4096, (16, 16)) == ((256, 256), (16, 16))
    assert cuda_runtime.launch_tiles(4096, 10**7, (16, 16)) == ((256, 62500), (16, 16))
    assert cuda_runtime.launch_tiles(16, 65535 * 16 + 1, (16, 16)) == ((1, 32768), (16, 16))
    assert cuda_runtime.launch_tiles(10**12, 1, (16, 1)) == ((2083333334, 1), (16, 1))
    monkeypatch.setattr(cuda_runtime, "_multiprocessors", [132])
    assert cuda_runtime.launch_tiles(4096, 10**7, (16, 16), True) == ((256, 4), (16, 16))


def test_a_tile_narrows_to_few_columns_or_rows_and_keeps_its_threads():
    """Three columns (a vector's components): 4-wide tiles of 64 rows, not 16-wide ones
    with 13 threads in 16 idle; two rows: 2-high tiles, 128 wide; never more threads
    than the tile has (a reduction's shared array is that size)."""
    assert cuda_runtime.launch_tiles(3, 10**6, (16, 16)) == ((1, 15625), (4, 64))
    assert cuda_runtime.launch_tiles(10**6, 2, (16, 16)) == ((7813, 1), (128, 2))
    assert cuda_runtime.launch_tiles(1, 10**6, (16, 2)) == ((1, 31250), (1, 32))
    assert cuda_runtime.launch_tiles(17, 1, (16, 16)) == ((1, 1), (256, 1))
    for columns in range(1, 40):
        for rows in range(1, 40):
            (gx, gy), (x, y) = cuda_runtime.launch_tiles(columns, rows, (16, 16))
            assert x * y <= 256 and gx * x >= columns and gy * y >= rows
