"""pyacc's compiler layer: a Python function and its clauses → a compiled kernel.

Installed as ``pyacc.compiler`` (the repository's ``compiler/`` folder; ``pyacc._layers``).
This package knows nothing of present tables or data movement (it imports its own modules
relatively and never ``pyacc.mapping`` or the surface); it turns a compute-region function
into a callable that takes *device* arrays and scalars in the function's parameter order.

Interface used by the launcher (``pyacc/_compute.py``)::

    from pyacc.compiler import (ComputeClauses, parse_clauses, CompileError, KernelInfo,
                          analyze, get_kernel, markers, KernelIndexError)

    clauses = parse_clauses(construct, clause_string=None, **keyword_clauses)
    info = analyze(func, clauses)       # decoration time; raises CompileError
    kernel = get_kernel(info, args, target="cpu", device_type="host")
    kernel = kernel_for(info, args, device_type)   # the device's target (or "python")
    value = kernel(*args)               # None, a scalar, or a tuple of reduction values
    kernel_env()                        # what in the environment decides a kernel

* ``construct``: ``"parallel"``, ``"parallel_loop"``, ``"kernels"``, ``"kernels_loop"``,
  ``"serial"`` or ``"routine"``. Keyword clauses use ``async_``/``if_``; a clause string
  (``"collapse(2) reduction(max:err) present(u, unew)"``) gives the same value. A bare
  ``async`` in a string gives ``async_ == clauses.ASYNC_NOVAL`` (``"noval"``); a bare
  ``wait`` gives ``wait is True``; ``wait(1,2)`` and ``wait=[1, 2]`` give ``(1, 2)``.
* ``KernelInfo``: ``name, filename, lineno, params, clauses, written, read,
  reductions, func``. ``written`` over-approximates the parameters whose *elements* the
  kernel may write: an array not in ``written`` need not be copied back (OpenACC
  implicit present-or-copy of read-only arrays, API.md §6).
* ``get_kernel``: the only kernel cache, ``info.kernels``, keyed by ``kernel_key`` (target,
  device type, ``PYACC_BOUNDSCHECK``, ``argument_kind`` of each argument, the serial
  crossover; on cuda a launch shape evaluated at the call); cheap to call on every
  launch, or keep the kernel while ``kernel_env()`` and the argument kinds are the same.
  The loops are planned once, at ``analyze`` (``KernelInfo.plan``). Targets:
  ``"cpu"`` (Numba ``parallel=True``; the kernel *is* the Numba dispatcher),
  ``"cuda"`` (GPU kernels, compiled by numba-cuda-mlir or numba-cuda (``cuda_compilers``),
  launched by a plain-Python driver on CuPy's current stream; arguments are GPU arrays,
  see ``cuda_target``) and ``"python"`` (the function
  as written, for ``PYACC_DISABLE_JIT=1``).
* Errors: :class:`CompileError` (with ``filename``/``lineno``); under
  ``PYACC_BOUNDSCHECK=1`` an out-of-bounds index raises :class:`KernelIndexError`
  (``.kernel``, ``.array``), which the launcher turns into ``ExecutionError``.
* Markers (``markers.loop``, ``markers.atomic``, ``markers.on_device``) are the objects
  ``pyacc`` re-exports; kernels recognise them by identity.
* Routines: ``pyacc.routine`` should call :func:`mark_routine` (``analyze`` with the
  ``routine`` construct, stored on the function). Plain Python functions called from a
  kernel are compiled as implicit ``routine seq`` (OpenACC 3.3 §2.15.1).

Modules, from the function to the kernel:

- ``clauses``     clause values and parsing; ``clause_text``: clause expressions, counts,
  reduction lists, tile sizes, the shared text helpers; ``clause_kinds``: which clauses
  exist and where they are valid; ``clause_rules``: the rules between one construct's
  clauses (one data action per variable, disjoint private names, exclusive clauses);
  ``clause_names``: the names clauses give, against the function; ``device_types``: the
  ``device_type`` clause's groups and which applies on a device type
- ``markers``     the plain-Python markers (``loop``, ``atomic``, ``on_device``)
- ``frontend``    the function's source and name resolution; ``free_names``: the globals,
  closure values and module attributes a kernel reads (and the arrays its routines read),
  made parameters read at each call
- ``analysis``    ``analyze``: ``KernelInfo``, the flattened function of a struct call, the
  memo of decorations; ``structs``: which parameters are structs, a call's layout
- ``access``      which parameters a kernel writes and reads
- ``planner``     which loops run in parallel, and how; ``loop_plans``: what it decides
  (``LoopPlan``, ``NestPlan``, ``LoopNote``); ``nests``: a parallel nest's loops and
  their checks; ``liveness``: where a name is read after a loop
- ``dependence``  the dependence tests of ``kernels`` loops; ``affine``: subscripts as
  integer polynomials of the indices
- ``reductions``  reduction updates, identities and combining
- ``interchange`` loop interchange of matrix-product nests on the CPU
- ``codegen``     targets and module text; ``templates``: source templates of generated code;
  ``privates``: private copies outside a parallel nest's own (serial code, loops run as
  written, inner loops); ``bounds_checks``: the subscripts' checks of ``boundscheck``
- ``cpu_target``  parallel nests as Numba ``prange`` code; ``crossover``: below how many
  iterations a nest runs on one thread; ``threading_layer``: Numba's layer (oneTBB);
  ``cpu_plans``: prepared calls (a compiled kernel called without Numba's dispatcher)
- ``cuda_target`` / ``cuda_runtime``  the GPU code generator and its host-side helpers
  (imported only when a cuda kernel is built); ``cuda_arrays``: the arrays a region makes
  there; ``cuda_builtins``: builtins the GPU compilers lack, in forms they have; ``cuda_compilers``: which CUDA kernel compiler, and the NumPy 2.5 fix of numba-cuda;
  ``cuda_plans``: prepared launches (numba-cuda's launch without its dispatcher), made by
  one call of the driver's ``cuLaunchKernel`` from C where ``_launch`` (a C extension,
  optional) is built; ``cuda_relaunch``: calls (synchronous and ``async_``) of drivers
  that only launch, made again from C (``_launch``'s ``Relaunch``);
  ``cuda_binaries``: compiled GPU kernels saved on disk and loaded by later processes;
  ``cuda_kernels``: a generated module's GPU kernels, handed to the compiler only when one
  must be compiled
- ``atomics``     LLVM atomicrmw intrinsics; ``runtime``: jitted helpers
- ``arguments``   what a kernel argument is: ``is_device_array`` (the one test),
  ``argument_kind`` (its part of the kernel key), how a device array is typed
- ``kernel``      ``get_kernel``: the kernel cache, building; ``typing_probe``: the types
  Numba infers, before a module's text is final; ``kernel_errors``: Numba's errors and
  bounds errors in the user's terms
- ``caches``      the disk caches: where, the key, signing and checking (only files pyacc
  wrote for this user run)
- ``feedback``    how each loop was compiled (``acc.explain``, ``PYACC_INFO``)
- ``errors``      ``CompileError``, ``KernelIndexError``
"""
from __future__ import annotations

from . import threading_layer
from . import markers

threading_layer.select()  # oneTBB when installed: thread and fork safe (threading_layer)
from .analysis import KernelInfo, analyze, bind_free_names
from .clauses import ASYNC_NOVAL, ClauseExpr, ComputeClauses, parse_clauses
from .errors import CompileError, KernelIndexError, PerformanceWarning
from .feedback import explain
from .frontend import ROUTINE_ATTR
from .arguments import argument_kind
from .kernel import cache_dir, get_kernel, kernel_env, kernel_for

__all__ = ["ComputeClauses", "parse_clauses", "CompileError", "KernelInfo", "analyze",
           "bind_free_names", "ClauseExpr", "PerformanceWarning", "explain",
           "get_kernel", "kernel_for", "kernel_env", "argument_kind", "markers", "KernelIndexError", "mark_routine", "cache_dir",
           "ASYNC_NOVAL"]


def mark_routine(func, clauses: ComputeClauses | None = None):
    """Analyse ``func`` as an ``acc.routine`` and tag it; returns ``func`` itself.

    The tag (``func.__acc_routine__``, a :class:`KernelInfo`) makes kernels that call
    ``func`` compile it as a device function. ``func`` stays callable from Python.
    """
    clauses = clauses or parse_clauses("routine", seq=True)
    info = analyze(func, clauses)
    setattr(func, ROUTINE_ATTR, info)
    return func
