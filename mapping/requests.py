"""What a directive asks of the runtime, as values: ``MapKind``, ``MapRequest``, ``Mapped``.

Owns: the vocabulary between ``pyacc`` (which turns user clauses into requests, in
``pyacc/_clauses.py``) and the runtime verbs (which turn requests into table changes).
Clause kinds are enum members, never boolean flags.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import numpy as np

__all__ = ["MapKind", "MapRequest", "Mapped", "UpdateDirection"]


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
