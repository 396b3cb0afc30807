"""Replay of a compute call: what a recent call decided, to repeat it cheaply.

Owns :class:`CallPlan`: what chose a recent call's kernel (the runtime, the kernel
environment ``compiler.kernel_env()``, the enclosing ``default``, the kinds of the
arguments that are not mapped), that kernel, and the mapping runtime's
``ComputeMemo`` of its data (``mapping.compute``). The launcher tries its plans before
anything else; ``enter_compute`` replays the memo while the present table is unchanged.

Invariants:
    * A plan keeps nothing alive but its kernel: the memo holds arrays, entries and
      device arrays by weak reference.
    * A plan applies only while everything that chose its kernel is the same (the
      argument kinds of its mapped arrays are covered by ``ComputeMemo.matches``: the
      same objects with the same dtype and shape).
"""

from __future__ import annotations

import weakref

from pyacc.compiler.arguments import argument_kind

from ._devices import enclosing_deviceptr

__all__ = ["CallPlan"]


class CallPlan:
    """What a recent call of a compute region decided, for the next calls (module
    docstring). It holds for a call on the same runtime under the same key (kernel
    environment, enclosing default, launch shape) whose unmapped arguments
    ``scalars_match`` and whose mapped ones the memo ``matches``: the launcher's one
    check of that is ``ComputeRegion._matching_call_plan``. Its ``kernel`` is then the one
    to launch and its ``memo`` the data to replay."""

    __slots__ = ("runtime", "key", "scalars", "devices", "kernel", "memo")

    def __init__(self, runtime, key, args, memo, kernel):
        self.runtime = runtime
        self.key = key
        self.memo = memo
        self.kernel = kernel
        mapped = set(memo.slots)
        # arguments the kernel gets as they are (scalars, deviceptr arrays), with their kinds
        self.scalars = tuple((slot, argument_kind(args[slot])) for slot in range(len(args))
                             if slot not in mapped)
        #: arrays the kernel got as they are (device memory, API.md §6.2), by identity:
        #: another object of the same kind in such a slot may be host data
        self.devices = tuple((slot, _reference(args[slot])) for slot, kind in self.scalars
                             if type(kind) is tuple)

    def scalars_match(self, args) -> bool:
        """Whether the arguments the kernel gets as they are have the plan's kinds."""
        for slot, kind in self.scalars:
            value = args[slot]
            if type(value) is not kind and argument_kind(value) != kind:
                return False
        for slot, reference in self.devices:
            if reference() is not args[slot]:
                return False
        return True

    def follow(self, runtime, args):
        """This plan moved to the present table as it is now, for ``args``: the memo's
        arrays themselves, or other host arrays of the same type, dtype and layout (the
        express lane asks when no plan of the region matches a call exactly; its
        ``follow_table``). For other arrays, each must be sorted as the plan's were:
        taken for host data, not passed as device memory (``Device.owns``, an enclosing
        ``deviceptr``: ``ArgumentSorting.sort``), which the other sorting rules decide by
        parameter name and dtype, the same here. Then the memo ``ComputeMemo.followed``
        becomes the plan's: ``(version, device arrays)``, as ``ComputeMemo.express`` gives
        them for the lane, or None (nothing changed) when the launcher must decide."""
        memo = self.memo
        if not memo.matches(args):
            owns = runtime.device.owns
            for slot in memo.slots:
                if owns(args[slot]) or enclosing_deviceptr(args[slot]):
                    return None
        memo = memo.followed(runtime, args)
        guard = None if memo is None else memo.express(runtime, args)
        if guard is None:
            return None
        self.memo = memo  # (one store: a launcher that read the old memo keeps using it)
        _, _, version, arrays, _ = guard
        return version, tuple([view for _, _, view in arrays])


def _reference(value):
    """A weak reference to a device array, or one that never matches (an object that
    takes none: its slot is sorted again at each call)."""
    try:
        return weakref.ref(value)
    except TypeError:
        return _never


def _never():
    return None
