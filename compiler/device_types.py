"""The ``device_type`` clause (OpenACC 3.3 §2.4): clauses that apply on some device types.

Owns :data:`GROUP_CLAUSES` (what may follow ``device_type`` in pyacc),
:func:`device_type_names` (a ``device_type(...)`` list → pyacc's device-type names) and
:func:`for_device_type` (a construct's clauses on one device type).

Invariants:
    * A clause after ``device_type(list)`` applies on the listed device types only, up to
      the next ``device_type``; ``device_type(*)`` applies on every type no group names
      (§2.4). Names are OpenACC's (``nvidia``, ``acc_device_nvidia``, ``host``,
      ``multicore``, ``radeon`` ...) or pyacc's (``cuda``, ``emulated``); ``nvidia`` is
      ``cuda``, and a name of a device pyacc lacks is valid and never applies.
    * Only the clauses that tune a launch may follow ``device_type``: ``num_gangs``,
      ``num_workers``, ``vector_length`` and ``gang``/``worker``/``vector`` with their
      counts. They never change which loops run in parallel, nor the data, so one plan
      serves every device type; they are resolved where a kernel is chosen for a device
      (``kernel.kernel_for``). Another clause after ``device_type`` (``async``, ``wait``,
      ``seq``, ``independent``, ``collapse``, ``tile``, data clauses ...) is a
      ``CompileError`` saying what to write.
"""
from __future__ import annotations

import dataclasses
import re

from .clause_text import ArgError

__all__ = ["GROUP_CLAUSES", "device_type_names", "for_device_type"]

#: the clauses that may follow device_type here (fields of ``ComputeClauses``)
GROUP_CLAUSES = ("num_gangs", "num_workers", "vector_length", "gang", "worker", "vector")

#: OpenACC's device-type names (§2.4; NVHPC's) → pyacc's
_NAMES = {"nvidia": "cuda", "acc_device_nvidia": "cuda", "acc_device_host": "host",
          "multicore": "host", "acc_device_not_host": "not_host"}


def device_type_names(args) -> tuple[str, ...]:
    """The device types of ``device_type(args)``, as pyacc names them (``*``: any other)."""
    if args is None or not args.strip():
        raise ArgError("device_type needs a list of device types: device_type(nvidia) "
                       "or device_type(*)", 0)
    names = []
    for match in re.finditer(r"[^\s,]+", args):
        word = match.group().lower()
        if word != "*" and not word.isidentifier():
            raise ArgError(f"{match.group()!r} is not a device type", match.start())
        names.append(_NAMES.get(word, word))
    return tuple(dict.fromkeys(names))


def for_device_type(clauses, device_type: str):
    """``clauses`` on a device of ``device_type`` (``host``, ``emulated``, ``cuda``): the
    values of the group naming it, else of ``device_type(*)``, replace the construct's."""
    groups = clauses.device_types
    if not groups:
        return clauses
    chosen = next((values for names, values in groups if device_type in names or (
        device_type != "host" and "not_host" in names)), None)
    if chosen is None:
        chosen = next((values for names, values in groups if "*" in names), ())
    return dataclasses.replace(clauses, device_types=(), **dict(chosen))
