"""Sections and structs of a compute call (API.md §6.2; OpenACC 3.3 §2.7.1, §2.7.2).

Owns :class:`SectionCalls`, the half of ``ComputeRegion`` (``_compute``) that a call of a
region with sections in its clauses or struct parameters takes first (``_special_call``):
the sections' bounds evaluated with the call's arguments, a proper section decided
against the enclosing mapping (``_section_kinds``; ``present`` when the whole array is),
and the struct layout whose flattened *variant* runs the call. Also owns
:class:`StructVariant` (what the variant region adds to a ``ComputeRegion``),
:class:`WholeSections` (whether a call's sections all cover their arrays, so that it may
take the direct path) and :class:`SectionSorter` (the ``ArgumentSorter`` of a call whose
sections decided some clause kinds).

Invariants:
    * The kernel always receives the whole parameter: a section only decides the kind of
      its array's clause, or is refused by name (``InvalidDataSectionError``,
      ``NotPresentError``) before any data action.
    * ``WholeSections`` answers True only when sure; any doubt sends the call to the
      full path, which decides (and reports).
"""

from __future__ import annotations

import collections

import numpy as np

from pyacc.mapping import (
    InvalidArgumentError,
    InvalidDataSectionError,
    MapKind,
    NotPresentError,
)
from pyacc.compiler import analysis as _structs
from pyacc.compiler.analysis import MemberError
from pyacc.compiler.clause_text import EXPR_BUILTINS

from pyacc.compiler.arguments import is_device_array
from ._devices import ICVS, current_runtime

__all__ = ["SectionCalls", "SectionSorter", "StructVariant", "WholeSections"]


class SectionCalls:
    """What a call of a region with sections or struct parameters runs first, mixed into
    ``ComputeRegion`` (the module docstring); ``_variant`` is the region's own."""

    __slots__ = ()

    def _route_direct(self, args):
        """``(region, arguments)`` of a direct call of a region with sections or struct
        parameters (its clauses otherwise constant, the call synchronous and silent):
        its own, when its sections cover their whole arrays at this call; a struct
        layout's variant with the members, when it has no sections. None: anything
        else (a proper section, a member error ...), for the full path to decide."""
        full = args if self._read_free is None else (*args, *self._read_free())
        if self._whole is not None:
            return (self, full) if self._whole.covers(full, self.info.func.__globals__) else None
        try:
            layout = _structs.struct_layout(self.info, args)
        except MemberError:
            return None
        if layout is None:
            return self, full
        variant = self._last_variant = self._variant(ICVS.runtime or current_runtime(), layout, args)
        return variant, layout.flatten(full)

    def _special_call(self, args, values):
        """What a call of a region with sections in its clauses or struct parameters
        runs: ``(region, args, values, sections)`` — this region, or the variant for
        the call's struct layout (``_variant``) with the structs' members as arguments
        and its clauses; ``sections``: ``(slot, clause, view, text)`` of each *proper*
        section (not the whole array) the clauses map. The bounds are evaluated with
        this call's arguments (names of the parameters and globals, API.md §6.2)."""
        info = self.info
        free = tuple(self._read_free()) if self._read_free is not None else ()
        try:
            layout = _structs.struct_layout(info, args) if self._struct_params else None
        except MemberError as error:
            raise InvalidArgumentError(f"{info.where}: {error}", name=error.name) from None
        full = (*args, *free)
        found = self._evaluate_sections(full) if values[0] and self._sections else ()
        if layout is None:
            params = info.kernel_params
            return self, full, values, [(params.index(name), *rest) for name, *rest in found]
        variant = self._last_variant = self._variant(current_runtime(), layout, args)
        flat = layout.flatten(full)
        if len(values) > 3:  # the evaluated clauses, for the flattened kernel
            values = values[:3] + (_structs.flat_clauses(values[3], variant.info),)
        if not found:
            return variant, flat, values, ()
        slots = {variant._label(name): slot for slot, name in enumerate(variant.info.kernel_params)}
        return variant, flat, values, [(slots[name], *rest) for name, *rest in found]

    def _evaluate_sections(self, full):
        """``(name, clause, view, text)`` of each proper section of a mapping clause,
        its bounds evaluated for this call; whole-array sections (``a[0:n]`` with ``n ==
        len(a)``) need nothing more (the clause applies to the array).

        Raises:
            InvalidArgumentError: A bound cannot be evaluated or reaches outside the
                array, or the section's variable is not an array.
            InvalidDataSectionError: The section is not contiguous (§2.7.1).
        """
        info = self.info
        namespace = collections.ChainMap(dict(zip(info.kernel_params, full)), info.func.__globals__)
        found = []
        params = info.kernel_params
        for clause, section in self._sections:
            if section.name not in params and "." not in section.name:
                continue  # a local variable's private section: its own shape (§2.5.13)
            array = _section_array(namespace, section.name)
            if is_device_array(array) and not isinstance(array, np.ndarray):
                continue  # device data: the clause itself is refused by name (sort)
            view = self._section_view(clause, section, array, namespace)
            if clause in ("private", "firstprivate") or view.shape == array.shape:
                continue  # a private copy is of the whole variable; a whole section
            found.append((section.name, clause, view, section.text))
        return found

    def _section_view(self, clause, section, array, namespace):
        """The view of ``array`` that ``section`` of ``clause`` maps (checked; a whole
        section is the array, a strided argument included, API.md §2)."""
        where, text = self.info.where, f"{clause}({section.text})"
        if not isinstance(array, np.ndarray):
            raise InvalidArgumentError(
                f"{where}: {text}: {section.name!r} is a {type(array).__name__}, not an "
                f"array: a section takes an array parameter or member", name=section.name)
        try:
            view = array[section.index(namespace, array.shape)]
        except Exception as error:  # noqa: BLE001 - a bound may raise anything
            raise InvalidArgumentError(
                f"{where}: {text} does not fit {section.name!r} (shape {array.shape}) at "
                f"this call: {error}; give bounds inside the array (OpenACC 3.3 §2.7.1: "
                f"C a[start:length], Fortran a(lo:hi), 1-based)", name=section.name) from None
        if view.shape != array.shape and view.size and not (
                view.flags.c_contiguous or view.flags.f_contiguous):
            raise InvalidDataSectionError(
                f"{where}: {text} is not contiguous in {section.name!r} (shape "
                f"{array.shape}, strides {view.strides}): a data clause maps a contiguous "
                f"section (OpenACC 3.3 §2.7.1; a C section of the leading dimension is "
                f"one): map the whole array, or a section of its leading dimension",
                name=section.name)
        return view

    def _section_kinds(self, runtime, args, sections):
        """The clause kinds of this call with its proper sections decided (OpenACC 3.3
        §2.7.1): the kernel receives the whole parameter, so a section helps it only
        where the whole array is present (then it acts on the enclosing mapping:
        ``present``); a section mapped alone cannot stand for the whole array (pyacc
        passes arrays, not pointers): a clear error naming both fixes."""
        explicit = dict(self._explicit)
        params = self.info.kernel_params
        for slot, clause, view, text in sections:
            whole, name = args[slot], params[slot]
            if runtime.is_present(whole):
                explicit[name] = MapKind.PRESENT
                continue
            present = view.size == 0 or runtime.is_present(view)
            if clause == "no_create" and not present:
                continue  # the whole array follows no_create (§2.7.10)
            raise self._section_error(clause, text, self._label(name), whole, view, present)
        return explicit

    def _section_error(self, clause, text, label, whole, view, present):
        where = self.info.where
        whole_clause = "" if clause == "present" else f"name the whole array ({clause}({label})) or "
        fix = (f"{whole_clause}map the whole array around the call (acc.data/acc.enter_data"
               f"(copyin=[{label}])), or pass the section as the argument ({label}[lo:hi]) "
               f"and index it from 0")
        if clause == "present" and not present:
            return NotPresentError(
                f"{where}: present({text}): the section ({view.size} of the {whole.size} "
                f"elements of {label!r}) is not present on the device: {fix}", name=label)
        return InvalidDataSectionError(
            f"{where}: {clause}({text}) maps {view.size} of the {whole.size} elements of "
            f"{label!r} (shape {whole.shape}), but the kernel receives the whole array and "
            f"{label!r} is not present as a whole: a device copy of a section cannot stand "
            f"for the array (pyacc passes arrays, not pointers; OpenACC 3.3 §2.7.1): {fix}",
            name=label)


class StructVariant:
    """What the region a struct call runs adds to a ``ComputeRegion`` (``_compute``'s
    ``_StructVariant``, made by ``ComputeRegion._variant``): the function flattened for
    one struct layout (``compiler.analysis.flattened``), whose arguments are the structs'
    members. It is entered by its parent with everything read (``_run``): arguments,
    free values and clause values, evaluated with the structs."""

    __slots__ = ()


    def __init__(self, function, info):
        super().__init__(function, info)
        self._special = False  # the parent evaluated the sections
        self._bound = True
        self._read_free = None  # the parent read them
        self._uses_default = self._default is None and any(
            name not in self._explicit and name not in self._deviceptr for name in info.kernel_params)
        self._attached: dict = {}  # member parameter -> struct, of attached structs

    def _attach(self, name):
        """Struct parameter ``name`` is attached (``acc.attach``): its members without a
        clause of their own are ``present`` (OpenACC 3.3 §2.7.2: the device struct
        refers to their device copies; nothing is copied implicitly)."""
        for flat, label in self.info.labels.items():
            if label.split(".")[0] == name and flat not in self._explicit:
                self._explicit[flat] = MapKind.PRESENT
                self._attached[flat] = name
        self._uses_default = self._default is None and any(
            n not in self._explicit and n not in self._deviceptr for n in self.info.kernel_params)

    def __call__(self, *args, **kwargs):
        raise TypeError("a struct variant is run by its region, not called")

    _call_slow = __call__

    def _launch(self, *launch, **options):
        try:
            return super()._launch(*launch, **options)
        except NotPresentError as error:
            name = getattr(error, "name", None)
            struct = next((s for flat, s in self._attached.items() if self._label(flat) == name), None)
            if struct is not None:
                error.args = (f"{error.args[0]}; {struct!r} is attached (acc.attach), so the "
                              f"kernel uses its members' device copies: map {name} again, "
                              f"or acc.detach({struct}) to let the implicit rules copy it",)
            raise


class WholeSections:
    """Tells fast whether every mapping section of a region covers its whole array at
    a call (``a[0:n]`` with ``n == len(a)``, ``a(1:n)``, ``a[:]``): such a call is an
    ordinary call (OpenACC 3.3 §2.7.1), which takes the direct path. The bounds of all
    the sections are one compiled tuple expression, evaluated once per call with the
    names it reads; any doubt (a bound that fails, a section that is not whole, an
    argument that is not an array) answers False, and the full path decides."""

    __slots__ = ("code", "sources", "sections")

    def __init__(self, info, sections):
        params = info.kernel_params
        exprs, checked = [], []
        for clause, section in sections:
            if clause in ("private", "firstprivate") or section.name not in params:
                continue  # (a private copy is of the whole variable)
            dims = tuple((_operand(first, exprs), _operand(second, exprs))
                         for first, second in section.bounds)
            checked.append((params.index(section.name), section.fortran, dims))
        names = sorted({name for expr in exprs for name in expr.names})
        self.sources = tuple((name, params.index(name) if name in params else None)
                             for name in names)
        self.code = compile("(" + "".join(f"({expr.text}), " for expr in exprs) + ")",
                            "<pyacc sections>", "eval") if exprs else None
        #: ``(argument slot, Fortran bounds?, the bounds' operands)`` per section checked
        self.sections = tuple(checked)

    def covers(self, full, module_globals) -> bool:
        values = ()
        if self.code is not None:
            try:
                namespace = {name: full[slot] if slot is not None else module_globals[name]
                             for name, slot in self.sources}
                values = eval(self.code, _BOUND_GLOBALS, namespace)  # noqa: S307 - checked text
            except Exception:  # noqa: BLE001 - the full path reports it
                return False
        for slot, fortran, dims in self.sections:
            array = full[slot]
            if type(array) is not np.ndarray or len(dims) > array.ndim:
                return False
            for (first, second), extent in zip(dims, array.shape):
                low = values[first[1]] if type(first) is tuple else first
                high = values[second[1]] if type(second) is tuple else second
                if fortran:
                    if not ((low is None or low == 1) and (high is None or high == extent)):
                        return False
                elif not ((low is None or low == 0) and (high is None or high == extent)):
                    return False
        return True


#: what a section bound sees besides its names (the builtins a clause expression may call)
_BOUND_GLOBALS = {"__builtins__": EXPR_BUILTINS}


def _operand(bound, exprs):
    """A bound for ``WholeSections``: None, an int, or ``("expr", index)``."""
    if bound is None or not hasattr(bound, "text"):
        return bound
    exprs.append(bound)
    return ("expr", len(exprs) - 1)


class SectionSorter:
    """The ``ArgumentSorter`` of a call whose proper sections decided some clause kinds
    (``ComputeRegion._section_kinds``): its region's, with those kinds."""

    __slots__ = ("region", "explicit")

    def __init__(self, region, explicit):
        self.region = region
        self.explicit = explicit

    def sort(self, runtime, args):
        return self.region.sort(runtime, args, self.explicit)

    def requests(self, runtime, arrays, map_kinds):
        return self.region.requests(runtime, arrays, map_kinds)

    def counter_of(self, name):
        return self.region.counter_of(name)


def _section_array(namespace, name):
    """The variable a section names: a parameter (or global), or a member ``s.x``."""
    root, *path = name.split(".")
    value = namespace[root]
    for depth, attr in enumerate(path):
        try:
            value = getattr(value, attr)
        except AttributeError:
            spelled = ".".join([root, *path[:depth + 1]])
            raise InvalidArgumentError(f"a data clause names {spelled!r}, but {root!r} "
                                       f"({type(namespace[root]).__name__}) has no such "
                                       f"member at this call", name=spelled) from None
    return value
