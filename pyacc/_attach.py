"""Attach and detach of structs (API.md §6.2; OpenACC 3.3 §2.7.2, §3.2.34-3.2.35).

Owns ``acc.attach``/``acc.detach`` and the attachment counter of a struct on a device
(``attachment_count``, which ``ComputeRegion._variant`` asks): the routines' module
(``_routines``) re-exports them.

Invariants: a struct's counter lives in its device's runtime (``runtime.attachments``,
keyed by the struct's id, the struct kept alive while attached) and ends with the
device's data lifetimes (``acc.shutdown``); on ``host`` nothing is ever counted.
"""

from __future__ import annotations

import threading

import numpy as np

from pyacc.mapping import InvalidArgumentError, NotPresentError
from pyacc.compiler.analysis import is_struct

from ._clauses import queue_of
from ._devices import current_runtime
from ._errors import reported
from ._names import variable_name

__all__ = ["attach", "detach", "attachment_count", "checked_struct", "structs_of"]

_NDARRAY = np.ndarray

# A Python struct holds references to arrays, not pointers: there is no device copy of
# the struct to patch. Attaching a struct on a device records that kernels taking it
# use its members' device copies (members without a data clause are ``present``, never
# copied implicitly); the attachment counter counts attaches less detaches, per device,
# and ends with the device's data lifetimes (``acc.shutdown``).
_ATTACH_LOCK = threading.Lock()


def _struct_members(value, prefix):
    """``(spelled name, array)`` of every host array member of struct ``value``, nested
    structs included (``s.x``, ``s.inner.y``)."""
    if hasattr(type(value), "_fields"):
        names = list(type(value)._fields)
    else:
        names = list(getattr(value, "__dict__", {}))
        names += [n for n in getattr(type(value), "__slots__", ()) if n not in names]
    for name in names:
        member = getattr(value, name, None)
        spelled = f"{prefix}.{name}"
        if isinstance(member, _NDARRAY):
            yield spelled, member
        elif is_struct(member):
            yield from _struct_members(member, spelled)


def checked_struct(routine, s):
    if not is_struct(s):
        raise InvalidArgumentError(
            f"acc.{routine} takes a struct (a namedtuple, a dataclass or an object whose "
            f"attributes are arrays), got {type(s).__name__}; an array has no pointers to "
            f"attach: map it with acc.copyin/acc.create (OpenACC 3.3 §2.7.2)")
    return s


def structs_of(value) -> list:
    """An ``attach``/``detach`` clause's value as a list: one struct (a namedtuple is one,
    not a list of its members), or a list of them; None is empty."""
    if value is None:
        return []
    return [value] if is_struct(value) or not isinstance(value, (list, tuple)) else list(value)


def attachment_count(runtime, s) -> int:
    """The attachment counter of struct ``s`` on ``runtime``'s device (0: not attached;
    always 0 on ``host``, whose memory is the host's)."""
    attachments = getattr(runtime, "attachments", None)
    if not attachments:
        return 0
    held = attachments.get(id(s))
    return held[1] if held is not None and held[0] is s else 0


@reported
def attach(s, *, async_=None) -> None:
    """Attach struct ``s`` on the current device (OpenACC 3.3 §2.7.2, ``acc_attach``):
    each of its array members (nested structs' too) must be present; its attachment
    counter goes up by one. While attached, a compute region taking ``s`` uses the
    members' device copies: members without a data clause of their own are
    ``present`` (a member no longer present raises ``NotPresentError``) instead of
    present-or-copy. Counters change at once, with ``async_`` too (nothing is queued:
    there is no device struct to write).

    Raises:
        InvalidArgumentError: ``s`` is not a struct.
        NotPresentError: A member array is not present (naming it and the fix).
    """
    checked_struct("attach", s)
    runtime = current_runtime()
    queue_of(runtime, async_)  # a bad async value is an error here as everywhere
    label = _variable_name(s)
    for spelled, member in _struct_members(s, label):
        if member.size and not runtime.is_present(member):
            raise NotPresentError(
                f"acc.attach({label}): member {spelled!r} (shape {member.shape}, dtype "
                f"{member.dtype}) is not present on the device: map it first "
                f"(acc.copyin({spelled}), or a data region), then attach (OpenACC 3.3 §2.7.2)",
                name=spelled)
    attachments = getattr(runtime, "attachments", None)
    if attachments is None:
        return  # host: nothing is ever copied, the members are the device's data
    with _ATTACH_LOCK:
        held = attachments.get(id(s))
        if held is None or held[0] is not s:
            attachments[id(s)] = [s, 1]  # (the runtime keeps s alive while it is attached)
        else:
            held[1] += 1


@reported
def detach(s, *, finalize=False, async_=None) -> None:
    """Detach struct ``s`` on the current device (OpenACC 3.3 §2.7.2, ``acc_detach``):
    its attachment counter goes down by one (``finalize``: to 0); at 0 kernels taking
    ``s`` apply the implicit rules to its members again. A struct that is not attached:
    nothing (as exits of absent data, API.md §8)."""
    checked_struct("detach", s)
    runtime = current_runtime()
    queue_of(runtime, async_)
    attachments = getattr(runtime, "attachments", None)
    if not attachments:
        return
    with _ATTACH_LOCK:
        held = attachments.get(id(s))
        if held is None or held[0] is not s:
            return
        held[1] = 0 if finalize else held[1] - 1
        if held[1] <= 0:
            del attachments[id(s)]


def _variable_name(s) -> str:
    """The name the caller binds struct ``s`` to (for messages), else its type's."""
    return variable_name(s) or type(s).__name__
