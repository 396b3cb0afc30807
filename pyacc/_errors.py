"""Error callbacks (OpenACC 3.3 §5.1.11) and the wrapper that runs them.

Owns: the registered callbacks and ``reported``, the decorator every public routine and
directive is wrapped in. When an ``AccError`` leaves a public call, the callbacks run in
registration order with the error, an ERROR event is published, and the error is raised.
Each error is reported once, however many public calls it passes through.

Unlike C, the error does not halt the program: it is a Python exception the caller may
catch. A callback may raise to replace the error (its exception propagates, chained).
"""

from __future__ import annotations

import functools
import sys
import threading

from pyacc.mapping import BUS, AccError, EventKind

from ._devices import ICVS

__all__ = ["register_error_callback", "unregister_error_callback", "reported", "report"]

_ACTIVE = BUS.active
_DIRECTIVE_END = int(EventKind.DIRECTIVE_END)
_LOCK = threading.Lock()
_CALLBACKS: tuple = ()


def register_error_callback(callback) -> None:
    """Run ``callback(error)`` before every pyacc runtime error is raised. A callback
    registered n times runs n times and must be unregistered n times (§5.4)."""
    global _CALLBACKS
    if not callable(callback):
        raise TypeError(f"error callback must be callable, got {callback!r}")
    with _LOCK:
        _CALLBACKS = _CALLBACKS + (callback,)


def unregister_error_callback(callback) -> None:
    """Remove one registration of ``callback``.

    Raises:
        ValueError: it is not registered.
    """
    global _CALLBACKS
    with _LOCK:
        callbacks = list(_CALLBACKS)
        if callback not in callbacks:  # (a ValueError, as list.remove's, that says which)
            raise ValueError(f"acc.unregister_error_callback: {callback!r} is not registered "
                             "(acc.register_error_callback adds one; each registration is "
                             "removed once)")
        callbacks.remove(callback)
        _CALLBACKS = tuple(callbacks)


def report(error: AccError) -> None:
    """Run the callbacks and publish the error, once per error object. Under
    ``PYACC_DEBUG`` the whole present table of the current device goes to stderr first."""
    if getattr(error, "_acc_reported", False):
        return
    error._acc_reported = True
    from .observe import debug_enabled  # here: pyacc.observe imports modules that import this one

    if debug_enabled():
        _dump_table(error)
    if BUS.wants(EventKind.ERROR):
        runtime = ICVS.runtime
        device = runtime.device.identity if runtime is not None else ("none", -1)
        BUS.publish(EventKind.ERROR, device, name=getattr(error, "name", None), info=error)
    for callback in _CALLBACKS:
        callback(error)


def _dump_table(error) -> None:
    from .observe import describe_table  # here: pyacc.observe imports modules that import this one

    runtime = ICVS.runtime
    if runtime is not None:
        print(f"pyacc: {type(error).__name__}: {error}\npyacc: {describe_table(runtime)}",
              file=sys.stderr, flush=True)


def directive_end(name: str) -> None:
    """Publish the end of a public directive or routine (a checkpoint for PYACC_CHECK)."""
    runtime = ICVS.runtime
    if runtime is not None:
        BUS.publish(EventKind.DIRECTIVE_END, runtime.device.identity, info=name)


def reported(function, prefix: str = "acc"):
    """Wrap a public routine so its ``AccError`` goes through ``report`` first, and its
    end is published (DIRECTIVE_END, named ``<prefix>.<function>``) when someone listens,
    whether it raised or not."""
    name = f"{prefix}.{function.__name__}"

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except AccError as error:
            report(error)
            raise
        finally:
            if _ACTIVE[_DIRECTIVE_END]:
                directive_end(name)

    return wrapper
