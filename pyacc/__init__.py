"""pyacc: OpenACC for Python.

Add OpenACC directives to Python loop code: data regions and runtime routines keep arrays
resident on a device, decorated loops run on all CPU cores or a GPU (Numba).

Layout (DESIGN.md): this package is the surface — directives, routines, errors, ICVs —
over two layers it joins: ``pyacc.mapping`` (present tables, devices, transfers, events)
and ``pyacc.compiler`` (Python function + clauses → kernel). The two layers live in the
repository's top-level folders ``mapping/`` and ``compiler/`` and are installed inside
this package (``pyproject.toml``'s ``package-dir``), so that no file of a user's (a
``mapping.py`` or ``compiler.py`` beside a script) can shadow them; from a checkout they
are found in those folders (``_layers``). Public names are defined once, in the private
modules below, and re-exported here:

- ``_routines``   runtime routines (copyin, update_device, is_present, get_property, ...)
- ``_directives`` data, enter_data, exit_data, update, host_data
- ``_compute``    compute-region decorators and the launcher (where compiler meets mapping)
- ``_clauses``    clause validation, async values (``async_sync``, ``async_noval``)
- ``_devices``    device types and the per-thread ICVs
- ``_registry``   the device runtimes, one per device, created on first use; the program's end
- ``_errors``     error callbacks
- ``_placement``  acquire, prefetch, wont_use, set_oversubscribe (API.md §10)
- ``errors``      the public error tree (from ``mapping.errors``)
- ``openacc``     the C spellings (``acc_copyin``, ``acc_copyin_async`` ...)
- ``observe``     diagnostics on the event stream (PYACC_NOTIFY, _TIME, _TRACE, _CHECK,
                  _AUTOCOMPARE, _DEBUG); ``profiling``: the callback interface
- ``omp``         the OpenMP ``target`` spelling over the same runtime (API.md §9)
- ``mpi``         scale-out helpers under mpi4py (a device per rank, halo exchange)
- ``testing``     held queues, injected device faults and on-demand checks for tests

and the private modules behind them:

- ``_call_inputs`` what a compute call reads besides its arguments (free values, clauses)
- ``_directive_text`` data directives written as clause strings, read in the caller's frame
- ``_arguments``  how a compute call's arguments are sorted (implicit data attributes)
- ``_direct_calls`` the Python launcher's entry (``_call_slow``) and its direct paths
- ``_attach``     ``acc.attach``/``acc.detach``: a struct's attachment counter per device
- ``_d2d``        ``acc.memcpy_d2d``: copies between two devices' copies of host arrays
- ``_sections``   sections and structs of a compute call (``_special_call``, variants)
- ``_region``     the single-use region state machine of ``data``, ``acquire`` and
                  ``omp.target_data``
- ``_outcome``    what a compute call gives back: ``AsyncResult``, a kernel's failure
- ``_replay``     ``CallPlan``: what a recent compute call decided, repeated cheaply
- ``_express``    the express lane's Python side (its C half: ``_fastcall.c``, with its express plan in
  ``_express_plan.c.h``, an async call run at once in ``_at_once.c.h``, its queue taken and
  held for the kernel's run in ``_queue_take.c.h``, a wait of settled queues in
  ``_queue_settled.c.h``, a call's queue and its wait clause's waits in ``_call_queue.c.h``,
  its arguments bound to the parameters and its keywords read in ``_call_binding.c.h``,
  the values of the names a kernel reads besides its parameters in ``_free_values.c.h``,
  a vectorcall's arguments handed to a ``tp_call`` in ``_vectorcall_args.h``, and what a region
  sets once for its calls in ``_region_fields.c.h``)
- ``_async_inline`` the async crossover's store (the signed machine record) and its
                  ``PYACC_INFO``/``acc.explain`` line
- ``_offload``    the offload policy ``PYACC_OFFLOAD`` and its fallback warning
- ``_cuda_probe`` how many GPUs the cuda device type has (or why none), the fork guard
- ``_names``      the user's variable names and source lines, for messages and events
- ``_layers``     where ``pyacc.mapping`` and ``pyacc.compiler`` are found
- ``_cli``        the command line ``python -m pyacc`` (``info``, ``run``); ``__main__``
                  its entry

Quick start::

    import numpy as np
    import pyacc as acc

    a = np.ones(1000)
    with acc.data(copy=[a]) as region:
        region.device(a)[:] *= 2     # "device code"
    # a is 2.0 again on the host after the region (copy clause)
"""

import logging
import warnings

from . import _layers  # before any import of pyacc.mapping or pyacc.compiler

_layers.find_in_checkout()

from pyacc.compiler.errors import CompileError, PerformanceWarning
from pyacc.compiler.markers import atomic, cache, loop, on_device

from ._clauses import async_noval, async_sync
from ._compute import explain, kernels, kernels_loop, parallel, parallel_loop, routine, serial
from ._express import express_lane
from ._directives import data, declare, enter_data, exit_data, host_data, update
from ._devices import OffloadFallbackWarning
from ._errors import register_error_callback, unregister_error_callback
from ._placement import acquire, get_oversubscribe, prefetch, set_oversubscribe, wont_use
from ._routines import *  # noqa: F401,F403
from ._routines import __all__ as _routine_names
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _error_names

import pyacc.mapping.ranges as _mapping_ranges

from . import _async_inline, _names, observe, profiling
from . import omp

__version__ = "0.1.0"

# error messages about host data name the user's variable
_mapping_ranges.namer = _names.variable_name
# the async crossover is kept in the signed cache record and told by PYACC_INFO
_async_inline.install()

# the "pyacc" logger prints nothing unless the program configures logging (or PYACC_DEBUG)
logging.getLogger("pyacc").addHandler(logging.NullHandler())
try:  # PYACC_NOTIFY, PYACC_TIME, PYACC_TRACE, PYACC_CHECK, PYACC_AUTOCOMPARE
    observe.configure()
except ValueError as _error:  # a bad value must not make ``import pyacc`` (or the CLI) fail
    warnings.warn(f"pyacc diagnostics not enabled: {_error}", RuntimeWarning, stacklevel=2)

__all__ = (
    ["CompileError", "PerformanceWarning", "explain", "atomic", "cache", "loop", "on_device", "async_noval", "async_sync",
     "parallel", "parallel_loop", "kernels", "kernels_loop", "serial", "routine", "data", "declare", "enter_data", "exit_data", "host_data", "update",
     "register_error_callback", "unregister_error_callback", "observe", "profiling", "omp", "OffloadFallbackWarning", "__version__",
     "acquire", "prefetch", "wont_use", "set_oversubscribe", "get_oversubscribe", "express_lane"]
    + list(_routine_names)
    + list(_error_names)
)
