"""Host byte ranges, the relation of a range to the mappings it meets, and array checks.

Owns: ``HostRange`` (a half-open ``[begin, end)`` byte range), ``Relation`` (what a lookup
found), and ``check_array`` — the one place that decides which Python objects are valid
host data (API.md §2): a numpy array of any dtype but object, C- or F-contiguous when a
data clause needs a contiguous section (OpenACC 3.3 §2.7.1).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import numpy as np

from . import _probe
from .errors import InvalidArgumentError, InvalidDataSectionError, describe_array, format_range

__all__ = ["HostRange", "Relation", "check_array"]


class Relation(enum.IntEnum):
    """How a requested range relates to the mappings it overlaps (LLVM ``lookupMapping``)."""

    DISJOINT = _probe.DISJOINT  #: overlaps no mapping
    CONTAINED = _probe.CONTAINED  #: lies inside one mapping
    EXTENDS_BEFORE = _probe.EXTENDS_BEFORE  #: starts before one mapping, ends inside it
    EXTENDS_AFTER = _probe.EXTENDS_AFTER  #: starts inside one mapping, ends after it
    COVERS = _probe.COVERS  #: strictly contains one mapping
    SPANS = _probe.SPANS  #: overlaps two or more mappings

    @property
    def is_partial(self) -> bool:
        """True for every overlap that is not containment (OpenACC ``partly_present``)."""
        return self not in (Relation.DISJOINT, Relation.CONTAINED)

    def describe(self) -> str:
        return _RELATION_TEXT[self]


#: relation by code, indexed without the cost of an Enum call
RELATIONS = tuple(sorted(Relation, key=int))


_RELATION_TEXT = {
    Relation.DISJOINT: "is not mapped",
    Relation.CONTAINED: "lies inside",
    Relation.EXTENDS_BEFORE: "starts before and ends inside",
    Relation.EXTENDS_AFTER: "starts inside and extends past the end of",
    Relation.COVERS: "covers all of and extends beyond",
    Relation.SPANS: "spans several mappings:",
}


class HostRange(NamedTuple):
    """A half-open byte range ``[begin, end)`` of host (or device) memory."""

    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    def contains(self, other: "HostRange") -> bool:
        return self.begin <= other.begin and other.end <= self.end

    def overlaps(self, other: "HostRange") -> bool:
        return self.begin < other.end and other.begin < self.end

    def __str__(self) -> str:
        return format_range(self.begin, self.nbytes)


#: finds the variable name of an array for an error message when the caller gave none
#: (pyacc sets it to its caller-frame search; called only when an error is raised)
namer = lambda array: None  # noqa: E731


def check_array(array, *, name: str | None = None, contiguous: bool = True) -> np.ndarray:
    """Validate host data and return it.

    Args:
        array: the object a user passed as host data.
        name: its variable name, for the message.
        contiguous: require a C- or F-contiguous view (data clauses and data routines).

    Raises:
        InvalidArgumentError: not a numpy array, or an object dtype (pointers cannot be
            copied by bytes).
        InvalidDataSectionError: ``contiguous`` and the view is neither C- nor F-contiguous.
    """
    if type(array) is not np.ndarray and not isinstance(array, np.ndarray):
        name = name or namer(array)
        raise InvalidArgumentError(
            f"{describe_array(array, name)} is not a numpy array: OpenACC data must be host "
            "arrays (np.asarray(x) converts lists; scalars are passed to kernels by value)",
            name=name,
        )
    if array.dtype.hasobject:
        name = name or namer(array)
        raise InvalidArgumentError(
            f"{_describe(array, name)} has an object dtype: its elements are Python pointers "
            "that cannot be copied to a device; use a numeric or structured dtype",
            name=name,
        )
    if contiguous and not (array.flags.c_contiguous or array.flags.f_contiguous):
        name = name or namer(array)
        raise InvalidDataSectionError(
            f"{_describe(array, name)} is not contiguous (strides {array.strides}): data "
            "clauses need a contiguous section (OpenACC 3.3 §2.7.1). Map the whole array "
            "(or a contiguous slice of it) and use acc.update on the strided view",
            name=name,
        )
    return array


def _describe(array: np.ndarray, name: str | None) -> str:
    _, low, _ = _probe.extent(array)
    return describe_array(array, name, begin=low)
