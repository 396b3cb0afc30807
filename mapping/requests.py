"""What a directive asks of the runtime, and what it keeps, as values.

Owns: the vocabulary between ``pyacc`` (which turns user clauses into requests, in
``pyacc/_clauses.py``) and the runtime verbs (which turn requests into table changes):
``MapKind``, ``MapRequest``, ``UpdateDirection``, ``UpdateItem`` (what directives ask),
``Mapped`` and ``StructuredMemo`` (what a region keeps for its exit or its next call).
Clause kinds are enum members, never boolean flags; records are typed, never positional
lists.
"""

from __future__ import annotations

import enum
import weakref
from typing import NamedTuple

import numpy as np

__all__ = ["MapKind", "MapRequest", "Mapped", "UpdateDirection", "UpdateItem", "StructuredMemo"]


class MapKind(enum.Enum):
    """A data clause (OpenACC 3.3 §2.7.4–2.7.13)."""

    COPY = "copy"
    COPYIN = "copyin"
    COPYOUT = "copyout"
    CREATE = "create"
    NO_CREATE = "no_create"
    PRESENT = "present"
    DELETE = "delete"

    @property
    def copies_in(self) -> bool:
        """Absent data gets a host→device copy at entry."""
        return self in (MapKind.COPY, MapKind.COPYIN)

    @property
    def copies_out(self) -> bool:
        """Data whose lifetime this clause ends gets a device→host copy."""
        return self in (MapKind.COPY, MapKind.COPYOUT)


class UpdateDirection(enum.Enum):
    """An ``update`` clause (OpenACC 3.3 §2.14.4)."""

    DEVICE = "device"  #: host → device
    SELF = "self"  #: device → host (``host`` is a synonym)


class MapRequest(NamedTuple):
    """One array named in one clause of one directive (a NamedTuple: cheap to build on
    the hot path of ``acc.copyin``)."""

    kind: MapKind
    array: np.ndarray
    name: str | None = None
    #: the create action sets the new device memory to 0 (``create(zero:)``,
    #: ``copyout(zero:)``: OpenACC 3.3 §2.7.8, 2.7.9); present data is left as it is
    zero: bool = False


class Mapped(NamedTuple):
    """The outcome of one entry request; kept by a structured region for its exit.

    Attributes:
        request: the clause and array.
        entry: the mapping the request joined or created; None when nothing was mapped
            (zero-size array, ``no_create`` of absent data, a shared-memory device).
        data: host address of the array's first element (None: not read yet).
    """

    request: MapRequest
    entry: object | None
    data: int | None = None


class UpdateItem(NamedTuple):
    """One array of an ``update`` directive: its direction, the (any strided) view and
    its name for messages."""

    direction: UpdateDirection
    array: np.ndarray
    name: str | None = None


class StructuredMemo(list):
    """What ``join_structured`` remembers for ``rejoin_structured`` (it appends one to
    the caller's memo list, which the caller treats as opaque): weak references to the
    entries it joined, in order (it keeps nothing alive; on shared memory, None for each
    array), and ``version``, the table's version when it joined. A list subclass with one
    named field, so that the compute-call hot path builds it for the cost of its list."""

    #: set by its maker, right after the list is built: the table's version, and the
    #: counter the joined call incremented (structured; dynamic for OpenMP maps)
    __slots__ = ("version", "counter")

    @classmethod
    def of(cls, entries, version, counter) -> StructuredMemo:
        """The memo of ``entries`` (held weakly) joined at table ``version`` on ``counter``."""
        memo = cls([weakref.ref(entry) for entry in entries])
        memo.version = version
        memo.counter = counter
        return memo
