"""Compute calls on the cuda device made again from C: which drivers may be, and the
``Relaunch`` that does it (``compiler/_relaunch.c.h``).

A synchronous compute call on ``cuda`` runs its generated driver with the synchronous
queue's stream current, then waits for that stream (``SyncKernel``, ``mapping``). Through
prepared launches made from C (``cuda_plans``) the driver's launches cost ~1 µs of host
time each, but the driver itself, the stream made current, the lookups of each launch and
the wait through CuPy are Python: the issue-28 target of ≤ 10 µs a call (a trivial kernel
on 3 present arrays) is below what that path can take on the H100 host (RESULTS.md, "The
launch target"). A ``Relaunch`` in the express lane's place of ``SyncKernel`` makes the
launches of a call again from C and waits with the driver's ``cuStreamSynchronize``, when
the call's arguments have the facts of one recorded earlier (``_relaunch.c.h``). An
``async_`` call is made again the same way, with no wait, by a ``Relaunch`` of the driver
per queue (``pyacc._express.enqueuer``), inside the queue's bookkeeping
(``CudaQueue.submit_relaunch``).

**Which drivers** (:func:`only_launches`, decided when the module is generated, the
kernel's ``relaunchable``): those whose every statement is a parallel nest's launch as
``cuda_target`` generates it — its bounds, trip counts, launch shape and launches, nothing
else. So no reduction (its partials are read back), no private array (scratch rows), no
single-thread run, no array the region makes, no loop or ``if`` of the region around the
nests, no host statement of the user's; no call but ``cuda_runtime``'s shape functions
and launch and the builtins ``len``, ``range``, ``min``, ``max`` and ``abs``; an array read
only by its layout or handed to a launch (a bound read from an element, ``range(m[0])``,
would need its contents among the facts); no global's value. The launches of such a
driver are a function of its arguments' facts (a device array's pointer, shape, strides
and dtype; a scalar's type and value).

**Which calls**: a call is recorded (``cuda_plans.recorded``) when every launch it made
was a prepared launch from C; its launches are kept for its facts, and a later call with
the same facts is made again from C. Anything else (other facts, an argument of another
kind, a launch through the dispatcher, a call under ``sys.setprofile``, whose profiler
would miss the launcher's frames) runs through the launcher as before. After 16 calls in a
row that were not made again (a time step passed as a scalar), a ``Relaunch`` gives up
and sends every call to the launcher, reading nothing.

Invariants: a relaunched call makes exactly the launches, with exactly the words, of the
call it repeats, on the same stream, and (synchronous) waits for that stream before it
returns; a driver that could do anything else is never relaunched.
"""
from __future__ import annotations

import ast

from . import cuda_plans, cuda_runtime

try:
    from . import _launch  # optional: the C launch (compiler/_launch.c), absent when not built
except ImportError:
    _launch = None

__all__ = ["only_launches", "relaunching"]

#: the calls a driver that only launches makes (``cuda_target``'s nests)
_SHAPES = frozenset({"trip_count", "launch_shape", "launch_tiles", "launch"})
_BUILTINS = frozenset({"len", "range", "min", "max", "abs"})
#: what of an array a driver may read: its layout, a fact (never an element)
_LAYOUT = frozenset({"shape", "strides", "size", "ndim", "itemsize"})


def only_launches(body: list, launches: set, runtime_name: str, arrays: set) -> bool:
    """Whether the driver ``body`` (its statements) only launches parallel nests: each
    statement is one of a nest's (``launches``: their ids); it calls only ``runtime_name``'s
    (``cuda_runtime``'s name in the module) shape functions and launch, or a builtin of
    :data:`_BUILTINS`; it reads the ``arrays`` (the parameters that are arrays) only by
    their layout (``a.shape[0]``, ``len(a)``) or as a launch's arguments, never an element
    or a truth value; it subscripts only a layout or its own grid and block; and it reads no name the module injects
    (``_acc_g*``: a global's value at the call, which no fact covers)."""
    if not body or not all(id(statement) in launches for statement in body):
        return False
    module = ast.Module(body=body, type_ignores=[])
    parents = {id(child): node for node in ast.walk(module) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(module):
        if isinstance(node, (ast.Lambda, ast.Await, ast.Yield, ast.YieldFrom, ast.Global,
                             ast.Nonlocal, ast.Return, ast.IfExp, ast.BoolOp, ast.NamedExpr)):
            return False
        if isinstance(node, ast.Call) and not _allowed(node.func, runtime_name):
            return False
        if isinstance(node, ast.Subscript) and not (_layout(node.value, arrays) or
                                                    _generated(node.value)):
            return False
        if isinstance(node, ast.Name) and (node.id.startswith("_acc_g") or (
                node.id in arrays and not _array_use(node, parents, runtime_name))):
            return False
    return True


def _allowed(func, runtime_name: str) -> bool:
    if isinstance(func, ast.Name):
        return func.id in _BUILTINS
    return (isinstance(func, ast.Attribute) and func.attr in _SHAPES
            and isinstance(func.value, ast.Name) and func.value.id == runtime_name)


def _generated(node) -> bool:
    """Whether ``node`` names a driver's own local (a launch's grid or block tuple)."""
    return (isinstance(node, ast.Name) and node.id.startswith("_acc_")
            and not node.id.startswith("_acc_g"))


def _layout(node, arrays: set) -> bool:
    """Whether ``node`` is an array's layout attribute (``a.shape``)."""
    return (isinstance(node, ast.Attribute) and node.attr in _LAYOUT
            and isinstance(node.value, ast.Name) and node.value.id in arrays)


def _array_use(name, parents: dict, runtime_name: str) -> bool:
    """Whether the array ``name`` is read by its layout, by ``len``, or as an argument in a
    launch's tuple of arguments."""
    parent = parents.get(id(name))
    if isinstance(parent, ast.Attribute):
        return parent.attr in _LAYOUT
    if isinstance(parent, ast.Call):
        return isinstance(parent.func, ast.Name) and parent.func.id == "len"
    launch = parents.get(id(parent)) if isinstance(parent, ast.Tuple) else None
    return (isinstance(launch, ast.Call) and _allowed(launch.func, runtime_name)
            and isinstance(launch.func, ast.Attribute) and launch.func.attr == "launch"
            and launch.args[-1:] == [parent])


def relaunching(kernel, on_failure=None):
    """A ``Relaunch`` of ``kernel``: a synchronous queue's launcher (``SyncKernel``) of a
    relaunchable driver, whose failed waits call ``on_failure`` (the queue's
    ``synchronize``, which raises pyacc's error); or, ``on_failure`` None, the driver itself
    as an asynchronous queue runs it (its stream current), made again with no wait (the
    queue's waits wait). ``kernel`` itself where nothing can be made again from C: no C
    launch (``cuda_plans.driver_function``), or no CuPy array class (plans off)."""
    launch = cuda_plans.driver_function("cuLaunchKernel")
    synchronize = cuda_plans.driver_function("cuStreamSynchronize") if on_failure else 0
    array_class = cuda_runtime._array_class()  # (CuPy's, where plans are made)
    if _launch is None or launch is None or synchronize is None or array_class is None:
        return kernel
    return _launch.Relaunch(kernel, cuda_plans.recorded, array_class, cuda_plans.NUMBERS,
                            on_failure, cuda_plans.driver_error, synchronize)
