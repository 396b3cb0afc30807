"""The offload policy, ``PYACC_OFFLOAD`` (like OpenMP's ``OMP_TARGET_OFFLOAD``).

Owns: ``offload_policy`` (the policy, read each time it is needed), ``OFFLOAD_POLICIES``,
``OffloadFallbackWarning`` and the once-per-process fallback flag. ``_devices`` applies the
policy when it resolves a selection.

What happens when the requested device type has no usable device here. It is read each
time a selection is resolved (first use of a thread, ``set_device_type``,
``set_device_num``, ``init``) and by ``get_num_devices``; values are case-insensitive:

- unset or empty: an explicit request (``ACC_DEVICE_TYPE``, ``set_device_type``) of an
  unavailable type is an error (``DeviceTypeUnavailableError``: ``set_device_type`` raises
  at once, ``ACC_DEVICE_TYPE`` when the device is first used); the implicit default is
  cuda when a usable GPU is found, else host, silently. This keeps the behaviour of pyacc
  without the variable, so that a typo or a missing GPU is never hidden.
- ``default``: a request of an unavailable non-host type falls back to host; the first
  fallback of the process warns (``OffloadFallbackWarning``). The implicit default is as
  when unset (not a request, so no warning).
- ``mandatory``: a request of an unavailable type raises at once, and so does the implicit
  default without a usable GPU (the default search wants cuda; ``emulated`` is used only
  when asked for). An explicit ``host`` is allowed.
- ``disabled``: offload is off; host is the only device. Every selection resolves to host
  (``set_device_type("emulated")`` and ``ACC_DEVICE_TYPE=cuda`` select host, silently:
  the user asked for it), ``get_device_type()`` is ``"host"``, ``get_num_devices`` of
  emulated and cuda is 0, and their properties raise ``DeviceTypeUnavailableError``.

When a type falls back to host, the device number becomes 0 (host has one device).
A selection already resolved is not re-resolved when the variable changes later.
"""

from __future__ import annotations

import os
import sys
import threading

from pyacc.mapping import InvalidArgumentError

from . import _layers

__all__ = ["OFFLOAD_POLICIES", "OffloadFallbackWarning", "offload_policy"]

OFFLOAD_POLICIES = ("mandatory", "disabled", "default")

#: pyacc/, mapping/, compiler/: frames skipped when a warning points at the user's code
_INTERNAL = _layers.folders()


class OffloadFallbackWarning(RuntimeWarning):
    """A requested device type is unavailable; ``PYACC_OFFLOAD=default`` runs on host."""


def offload_policy() -> str | None:
    """``PYACC_OFFLOAD`` in lower case, or None when it is unset or empty.

    Raises:
        InvalidArgumentError: any other value than mandatory, disabled, default.
    """
    text = os.environ.get("PYACC_OFFLOAD", "").strip()
    if not text:
        return None
    if text.lower() not in OFFLOAD_POLICIES:
        raise InvalidArgumentError(
            f"PYACC_OFFLOAD={text!r} is not an offload policy: use mandatory, disabled or "
            "default (case-insensitive), or leave PYACC_OFFLOAD unset"
        )
    return text.lower()


class _Fallback:
    """The once-per-process fallback warning."""

    lock = threading.Lock()
    warned = False


def _user_stacklevel() -> int:
    """``stacklevel`` for a ``warnings.warn`` made by our caller: the first frame outside
    pyacc, mapping and compiler (1 when there is none)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1
