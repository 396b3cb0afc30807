"""How a compute call's arguments are sorted: the ``ArgumentSorter`` of
``mapping.compute.enter_compute`` (OpenACC 3.3 §2.6.2 implicit data attributes).

Owns :class:`ArgumentSorting`, the half of ``ComputeRegion`` (``_compute``) that tells,
before any data action, what each argument of a call is: an array to map with its
``MapKind`` (an explicit clause as written; otherwise ``copy`` when the kernel may write
it, ``copyin`` when it only reads it, ``present`` under ``default(present)``), device
memory passed as it is (``deviceptr``, memory of the device, a CuPy array), or a
firstprivate scalar; anything else is refused by name. It also stages the implicit copy
of a non-contiguous view (``_stage_strided``/:func:`unstage`), and owns the clause →
``MapKind`` table (:data:`KIND_OF_CLAUSE`) and the enclosing ``default`` lookup
(:func:`enclosing_default`).

Invariants:
    * Sorting changes nothing: every refusal happens before the region's first data action
      (a dtype no kernel takes; a read-only array the kernel may write where it writes the
      host array itself).
    * The mixin keeps no state of its own (``__slots__ = ()``); it reads the region's
      ``info``, ``_explicit``, ``_deviceptr``, ``_default`` and ``_labels``.
"""

from __future__ import annotations

import numpy as np

from pyacc.mapping import (
    ClauseError,
    Counter,
    InvalidArgumentError,
    InvalidDataSectionError,
    MapKind,
    MapRequest,
    check_array,
)
from pyacc.mapping.ranges import Relation
from pyacc.mapping.runtime import partly_present
from pyacc.compiler import analysis as _structs
from pyacc.compiler.arguments import SCALAR_TYPES, is_device_array

from ._devices import ICVS, enclosing_deviceptr

__all__ = ["ArgumentSorting", "KIND_OF_CLAUSE", "enclosing_default", "unstage"]

_STRUCTURED = Counter.STRUCTURED

KIND_OF_CLAUSE = {
    "copy": MapKind.COPY,
    "copyin": MapKind.COPYIN,
    "copyout": MapKind.COPYOUT,
    "create": MapKind.CREATE,
    "no_create": MapKind.NO_CREATE,
    "present": MapKind.PRESENT,
    # private arrays: each execution gets scratch device memory; firstprivate: a copy of
    # the host values (the compiler makes the per-gang copies from it)
    "private": MapKind.CREATE,
    "firstprivate": MapKind.COPYIN,
}

#: dtype characters of the arrays a kernel can take (bool, signed and unsigned integers,
#: float32/64, complex64/128; not float16, long double, objects, strings, records)
_KERNEL_DTYPES = frozenset("?bBhHiIlLqQfdFD")


def enclosing_default():
    """``default(...)`` of the innermost open ``acc.data`` region of this thread that has
    one (the regions push themselves on ``ICVS.region_stack``, a ``RegionStack``)."""
    return ICVS.region_stack.innermost_default


class ArgumentSorting:
    """The ``ArgumentSorter`` of ``enter_compute``, mixed into ``ComputeRegion``: sort,
    validate and map-request the arguments of a call (the module docstring)."""

    __slots__ = ()

    def sort(self, runtime, args, explicit=None):
        """Sort the arguments (OpenACC 3.3 §2.6.2): the slots of the arrays to map and
        their ``(MapKind, name)``. Scalars are firstprivate; ``deviceptr`` arrays and
        device arrays are passed as they are (after the device has checked that they are
        its memory); anything else is refused here, before any data action.
        ``explicit``: the clause kinds by parameter, when sections decided some at this
        call (``_SectionSorter``)."""
        map_kinds, slots = [], []
        default = None
        params = self.info.kernel_params
        explicit = explicit or self._explicit
        owns = runtime.device.owns
        for slot, value in enumerate(args):
            if type(value) is not np.ndarray and not isinstance(value, np.ndarray):
                if type(value) not in SCALAR_TYPES:
                    if is_device_array(value):
                        self._check_device_argument(runtime, params[slot], value)
                    else:
                        self._check_scalar_argument(params[slot], value)
                continue
            name = params[slot]
            if value.dtype.char not in _KERNEL_DTYPES or not value.dtype.isnative:
                self._refuse_dtype(name, value)
            if not value.flags.writeable and runtime.device.shares_host_memory and name in self.info.written:
                self._refuse_read_only(runtime, name, value)
            kind = explicit.get(name)
            if kind is None:
                # deviceptr arrays, memory of the device (acc.malloc, acc.deviceptr,
                # host_data) and arrays an enclosing acc.data names in deviceptr are passed
                # as they are (API.md §6.2; OpenACC 3.3 §2.7.4)
                if name in self._deviceptr or owns(value) or enclosing_deviceptr(value):
                    runtime.device.extent_of(value)  # must be memory of this device
                    continue
                if default is None:
                    default = self._default or enclosing_default() or ""
                kind = self._kind_of(name, default)
            label = self._labels.get(name, name) if self._labels else name
            if kind is MapKind.PRESENT and name in self.info.owners:  # (says whose it is)
                label = (f"{label}, which routine {self.info.owners[name].__name__} reads "
                         f"(acc.declare it: OpenACC 3.3 §2.15.1)")
            map_kinds.append((kind, label))
            slots.append(slot)
        return slots, map_kinds

    def counter_of(self, name):
        """OpenACC data clauses hold the structured count (OpenACC 3.3 §2.6.7);
        ``pyacc.omp`` regions override this (API.md §9)."""
        return _STRUCTURED

    def requests(self, runtime, arrays, map_kinds):
        """Validated map requests, for the full entry."""
        requests, zeroed = [], self.info.clauses.zero  # create(zero: b): OpenACC 3.3 §2.7.9
        for array, (kind, name) in zip(arrays, map_kinds):
            check_array(array, name=name, contiguous=False)
            if not (array.flags.c_contiguous or array.flags.f_contiguous):
                kind = self._strided_kind(runtime, array, name)
            requests.append(MapRequest(kind, array, name, name in zeroed))
        return requests

    def _check_scalar_argument(self, name, value) -> None:
        """Anything but an array must be a number, a boolean or a tuple of them (kernel
        scalars are firstprivate, OpenACC 3.3 §2.6.2): a list or another object is
        refused here, before any data action, instead of failing inside Numba."""
        if isinstance(value, (bool, int, float, complex, np.generic)) or (
                isinstance(value, tuple) and all(isinstance(v, (bool, int, float, complex, np.generic))
                                                 for v in value)):
            return
        name = self._label(name)
        if _structs.is_struct(value):  # not read as a struct by this function
            hint = (f"; the function does not read members of {name!r} (s.x), so it is not "
                    f"taken as a struct: read its members in the region, or pass its arrays")
        elif isinstance(value, (list, tuple, range)):
            hint = " (convert it with np.asarray)"
        else:
            hint = ""
        raise InvalidArgumentError(
            f"{self.info.where}: argument {name!r} is a {type(value).__name__}{hint}; a compute "
            "region takes NumPy arrays (or device arrays), numeric or boolean scalars and "
            "structs of them", name=name)

    def _refuse_read_only(self, runtime, name, value) -> None:
        """On a device that shares host memory the kernel writes the host array itself: one
        it may write (``info.written``) that is read-only is refused before the kernel is
        compiled or run (elsewhere its device copy is written, and a copy back into it is
        refused by the mapping)."""
        name = self._label(name)
        raise InvalidArgumentError(
            f"{self.info.where}: the kernel writes argument {name!r} (shape {value.shape}, dtype "
            f"{value.dtype}), which is read-only; on {runtime.device.type_name} a kernel writes "
            "the host array itself: pass a writeable array (x.copy(), or set "
            "x.flags.writeable = True when you own its memory)", name=name)

    def _refuse_dtype(self, name, value) -> None:
        """Numba compiles kernels for native-endian booleans, integers, floats and
        complex numbers, and records (structured dtypes) of them; anything else is
        refused before any data action."""
        problem = _record_problem(value.dtype)
        if problem is None:
            return  # a record array: Numba's records (API.md §6.2)
        name = self._label(name)
        fix = ("x.astype(x.dtype.newbyteorder('=')) for byte-swapped fields; a dtype without "
               "its string or object fields" if value.dtype.fields else "e.g. x.astype(np.float64)")
        raise InvalidArgumentError(
            f"{self.info.where}: argument {name!r} (shape {value.shape}, dtype {value.dtype}) "
            f"has a dtype kernels cannot use{problem}: they take native-endian bool, int8-64, "
            "uint8-64, float32/64 and complex64/128 arrays, and records (structured dtypes) of "
            f"those; convert it first ({fix})", name=name)

    def _check_device_argument(self, runtime, name, value) -> None:
        """A device array (``__cuda_array_interface__``: a CuPy or numba-cuda array) is
        device data: passed to the kernel as it is, like a ``deviceptr`` argument, after
        the device has checked that it is its memory (``extent_of``). Host data clauses
        cannot take it."""
        clauses = self.info.clauses
        clause = next((c for c in KIND_OF_CLAUSE if name in getattr(clauses, c)), None)
        if clause is not None:
            raise InvalidArgumentError(
                f"{self.info.where}: argument {name!r} is a device array ({type(value).__name__} "
                f"with __cuda_array_interface__), but the {clause} clause takes host (numpy) "
                "arrays: name it in deviceptr=... instead, or pass the host array", name=name)
        runtime.device.extent_of(value)  # must be memory of this device

    def _kind_of(self, name, default) -> MapKind:
        """The implicit data attribute of an array parameter without a clause (§2.6.2)."""
        if default == "present":
            return MapKind.PRESENT
        if default == "none":
            raise ClauseError(
                f"{self.info.where}: array argument {name!r} has no data clause and the "
                "region has default(none); name it in copy/copyin/copyout/create/present "
                "(OpenACC 3.3 §2.6.2)", clause="default")
        # implicit present-or-copy; arrays the kernel never writes are not copied back
        return MapKind.COPY if name in self.info.written else MapKind.COPYIN

    def _stage_strided(self, runtime, args, sorter, queue):
        """A non-contiguous view (``a[::-1]``, ``a[:, 0]``) of data that is not present,
        passed without a data clause on a device with memory of its own: its implicit
        copy (OpenACC 3.3 §2.6.2) maps a contiguous copy of it instead, as Fortran passes
        a non-contiguous actual argument, and the copy's values go back into the view
        after the region when the kernel writes it (:func:`unstage`), so the call does
        what it does on ``host``. A data clause takes contiguous arrays only (API.md §2:
        the view is no contiguous section, OpenACC 3.3 §2.7.1), so a view named in one,
        or under ``default(present)``/``default(none)``, is left to ``_strided_kind``'s
        error. A view that may share memory with another array argument is refused
        (separate copies would not see each other's writes). On an async queue the
        queue's earlier work (and its write-backs) completes first: the copy is taken
        in order. ``(args, [(view, copy)])``."""
        staged = None
        for slot, value in enumerate(args):
            if not isinstance(value, np.ndarray) or value.flags.c_contiguous or value.flags.f_contiguous:
                continue
            name = self.info.kernel_params[slot]
            if name in self._deviceptr or runtime.device.owns(value) or enclosing_deviceptr(value):
                continue  # device memory is passed as it is (sort)
            if runtime.table.lookup(value).relation is not Relation.DISJOINT:
                continue  # present (or partly: an error) data: _strided_kind decides
            if name in getattr(sorter, "explicit", self._explicit) or \
                    (self._default or enclosing_default()) in ("present", "none"):
                continue  # data clauses take contiguous arrays (API.md §2): the error says so
            self._refuse_aliased_view(args, slot, name)
            if staged is None:
                if queue is not runtime.device.sync_queue:
                    queue.synchronize()  # earlier calls' write-backs into this view
                args, staged = list(args), []
            args[slot] = np.ascontiguousarray(value)
            if name in self.info.written:
                staged.append((value, args[slot]))
        return args, staged

    def _refuse_aliased_view(self, args, slot, name) -> None:
        view = args[slot]
        for other, value in enumerate(args):
            if other != slot and isinstance(value, np.ndarray) and np.may_share_memory(view, value):
                other_name = self._label(self.info.kernel_params[other])
                raise InvalidDataSectionError(
                    f"{self.info.where}: argument {self._label(name)!r} is a non-contiguous view "
                    f"(strides {view.strides}) of data that is not present, and it shares memory "
                    f"with argument {other_name!r}: a copy of the view would not see the "
                    "other's writes. Map the whole array first (acc.data / acc.enter_data), "
                    "then pass the views", name=name)

    @staticmethod
    def _strided_kind(runtime, array, name) -> MapKind:
        """A strided view can only use data already present (it is not a contiguous
        section that could be mapped on its own, OpenACC 3.3 §2.7.1); one that lies partly
        in a mapping is ``PartlyPresentError`` (§2.7.3), as a contiguous one is."""
        if runtime.is_present(array):
            return MapKind.PRESENT
        found = runtime.table.lookup(array)
        if found.relation.is_partial:
            raise partly_present(array, name, found)
        raise InvalidDataSectionError(
            f"argument {name!r} is a non-contiguous view (strides {array.strides}) of data "
            "that is not present: map the whole array first (acc.data / acc.enter_data), "
            "then pass the view", name=name)


def unstage(staged, queue) -> None:
    """Write each staged copy back into its view (``ComputeRegion._stage_strided``), in
    the queue's order: after the region's copy-backs."""
    def write_back():
        for view, copy in staged:
            view[...] = copy
    queue.defer(write_back)  # on the host, once the queue has passed the copy-backs


def _record_problem(dtype):
    """None for a record dtype kernels can take (fields of kernel dtypes, native byte
    order, nested records and fixed-size subarrays of them); else what is wrong, for
    the message."""
    if dtype.fields is None:
        return ""
    for field, (field_type, *_rest) in dtype.fields.items():
        base = field_type.base
        if base.fields is not None:
            inner = _record_problem(base)
            if inner is not None:
                return inner
        elif base.char not in _KERNEL_DTYPES or not base.isnative:
            return f" (its field {field!r} is {field_type})"
    return None
