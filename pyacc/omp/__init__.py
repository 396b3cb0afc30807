"""``pyacc.omp``: the OpenMP target-offload spelling of pyacc (API.md §9).

The same devices and the same present table as the OpenACC API, spelled as OpenMP 5.2
offload, so that OpenMP-ported code runs on pyacc and OpenMP and OpenACC code share
device data::

    import numpy as np
    from pyacc import omp

    @omp.target_teams_distribute_parallel_for("map(to: x) map(tofrom: y)")
    def saxpy(a, x, y):
        for i in range(x.shape[0]):
            y[i] = a * x[i] + y[i]

    with omp.target_data(map_to=[x], map_tofrom=[y]):
        saxpy(2.0, x, y)

Modules: ``_clause_model`` (the values of OpenMP clauses: map types, ``MapSpec``,
``OmpClauses``, which clauses each construct takes), ``_clauses`` (OpenMP clause strings
and keywords, parsed into those values), ``_clause_args`` (the argument lists of the
clauses: map types and modifiers, lists with sections, dependence types), ``_maps`` (map types and
modifiers → runtime requests, one reference count per mapping), ``_constructs``
(``target_data``, ``target_enter_data``, ``target_exit_data``, ``target_update``,
``taskwait``), ``_compute`` (the compute decorators, over pyacc's compute machinery),
``_devices`` (device numbering, ``OMP_TARGET_OFFLOAD``, ``OMP_DEFAULT_DEVICE``, nowait
queues), ``_routines`` (device memory routines), ``_names`` (OpenMP names on the event
stream). docs/openmp.md is the user's guide.
"""

from pyacc.compiler.markers import atomic, loop

from .._compute import explain
from ._compute import (
    declare_target,
    target,
    target_parallel,
    target_parallel_for,
    target_parallel_loop,
    target_teams,
    target_teams_distribute,
    target_teams_distribute_parallel_for,
    target_teams_distribute_parallel_for_simd,
    target_teams_loop,
)
from ._constructs import target_data, target_enter_data, target_exit_data, target_update, taskwait
from ._devices import (
    get_default_device,
    get_device_num,
    get_initial_device,
    get_num_devices,
    initial_device,
    invalid_device,
    is_initial_device,
    nowait_queue,
    set_default_device,
    sync_offload_environment as _sync_offload_environment,
)
from ._routines import (
    get_mapped_ptr,
    target_alloc,
    target_associate_ptr,
    target_disassociate_ptr,
    target_free,
    target_is_present,
    target_memcpy,
    target_memcpy_rect,
)

#: loop markers inside ``@omp.target`` (the very object ``acc.loop`` is: the compiler
#: recognises it by identity): ``for i in omp.loop(range(n)):``
distribute_parallel_for = parallel_for = teams_distribute_parallel_for = distribute = loop

_sync_offload_environment()  # OMP_TARGET_OFFLOAD, when PYACC_OFFLOAD is unset

__all__ = [
    "target", "target_teams_distribute_parallel_for", "target_teams_distribute_parallel_for_simd",
    "target_parallel_for", "target_teams_loop", "target_parallel_loop", "declare_target",
    "target_teams_distribute", "target_teams", "target_parallel",
    "loop", "distribute_parallel_for", "parallel_for", "teams_distribute_parallel_for",
    "distribute",
    "atomic", "explain",
    "target_data", "target_enter_data", "target_exit_data", "target_update", "taskwait",
    "get_num_devices", "get_initial_device", "get_default_device", "set_default_device",
    "get_device_num", "is_initial_device", "initial_device", "invalid_device", "nowait_queue",
    "target_is_present", "target_alloc", "target_free", "target_memcpy", "target_memcpy_rect",
    "target_associate_ptr", "target_disassociate_ptr", "get_mapped_ptr",
]
