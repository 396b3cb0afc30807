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


class StructuredMemo:
    """What ``join_structured`` remembers for ``rejoin_structured``: the table's version
    when it joined, and the entries it joined, weakly (it keeps nothing alive). Opaque to
    its holder (the launcher's per-call-site cache)."""

    __slots__ = ("version", "references", "entries")

    def __init__(self, version: int = -1, references=(), entries=None):
        self.version = version
        self.references = references  #: weak references to the entries (separate memory)
        self.entries = entries  #: the entries themselves (shared memory: all None)
