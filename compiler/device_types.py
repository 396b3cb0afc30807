"""The ``device_type`` clause (OpenACC 3.3 §2.4): clauses that apply on some device types.

Owns :data:`GROUP_CLAUSES` (what may follow ``device_type`` in pyacc) and
:func:`check_in_group` (the refusal of anything else), :func:`device_type_names` (a
``device_type(...)`` list → pyacc's device-type names) and :func:`for_device_type` (a
construct's clauses on one device type).

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
      ``CompileError`` saying what to write. A routine takes no ``device_type`` (its one
      level of parallelism is its own, §2.15.1); on an ``acc.loop`` marker the groups are
      checked and, as the marker's own counts, leave the launch to the construct's.
"""
from __future__ import annotations

import dataclasses
import re

from .clause_text import ArgError
from .errors import CompileError

__all__ = ["GROUP_CLAUSES", "check_in_group", "device_type_names", "for_device_type"]

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


def check_in_group(construct: str, name: str) -> None:
    """Refuse clause ``name`` after a ``device_type`` unless it only tunes the launch."""
    if name not in GROUP_CLAUSES:
        spelled = {"async_": "async", "if_": "if"}.get(name, name)
        raise CompileError(
            f"{construct}: {spelled} after device_type is not supported: pyacc tunes only "
            f"the launch per device type ({', '.join(GROUP_CLAUSES)}); write {spelled} "
            f"before the first device_type, where it applies on every device type")


def for_device_type(clauses, device_type: str):
    """``clauses`` on a device of ``device_type`` (``host``, ``emulated``, ``cuda``): the
    values of the groups naming it (in order), else of the ``device_type(*)`` ones,
    replace the construct's."""
    groups = clauses.device_types
    if not groups:
        return clauses
    named = [values for names, values in groups if device_type in names or (
        device_type != "host" and "not_host" in names)]
    chosen = {}  # (every group naming the type, in order; else every device_type(*) one)
    for values in named or [values for names, values in groups if "*" in names]:
        chosen.update(values)
    return dataclasses.replace(clauses, device_types=(), **chosen)
