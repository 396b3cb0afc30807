"""pyacc's diagnostics, all built on the runtime's one event stream (``mapping.events``).

Owns: ``configure()``, which reads the environment and installs the subscribers, and
what happens at interpreter exit. Each diagnostic is one module:

- ``notify``       ``PYACC_NOTIFY=<bitmask>``: a line per event on stderr
- ``timing``       ``PYACC_TIME=1``: a per-location timing report at exit
- ``trace``        ``PYACC_TRACE=<file>.json``: a Chrome/Perfetto timeline, written at exit
- ``checking``     ``PYACC_CHECK=<modes>``, a comma list (API.md §11): ``counters`` (or
  ``1``) the consistency checker after every directive; ``memory`` (``memcheck``)
  guard zones and poisoned freed blocks on ``emulated``; ``stale`` (``stale``)
  missing ``update device`` and lost host updates, ``stale:error`` raising instead of
  warning; ``race`` (``race``) work on shared data that no wait orders (async queues),
  ``race:error`` raising instead of warning. Each mode also on demand:
  ``enable_check(mode)`` / ``disable_check(mode)`` (``pyacc.testing.check(mode)``)
- ``autocompare``  ``PYACC_AUTOCOMPARE=1``: host re-runs compared at every copy back
- ``PYACC_DEBUG=1``: presence errors come with a dump of the whole present table, the
  mappings still live at exit are listed, and every event is a debug record on the
  ``pyacc.events`` logger, printed to stderr with the ``pyacc`` logger's other debug
  records (here; without it the ``pyacc`` logger prints nothing unless the program
  configures logging)
- ``pyacc.profiling``: the callback interface (registered by the program itself)

and the helpers: ``_entries`` (the mappings by device address, followed from the event
stream: the host data behind a device array) and ``_locate`` (the user's source line of
an event), which the diagnostics share, and ``_footprint`` (the bytes a transfer or a
kernel launch may touch: ``race``'s accesses and kernel footprints).

Nothing is subscribed, and nothing costs more than one flag test per action, unless
asked for. ``configure()`` runs when pyacc is imported; call it again after changing the
variables (``python -m pyacc run`` and the tests do).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading

from pyacc.mapping import BUS, EventKind

from .autocompare import AutoCompare, tolerances_from_environment
from .checking import Checker, live_runtimes, verify_all
from .memcheck import MemoryChecker
from .race import RaceChecker
from .stale import StaleChecker
from .notify import Notifier, parse_mask
from .timing import TimeReport
from .trace import TraceWriter

__all__ = ["configure", "flush", "active", "debug_enabled", "verify_all", "parse_check",
           "enable_check", "disable_check", "CHECK_MODES"]

_LOG = logging.getLogger("pyacc")
_LOCK = threading.RLock()
#: what ``configure`` installed: name -> subscriber object
_ACTIVE: dict = {}
_EXIT_HOOK = []
#: PYACC_CHECK modes -> the name of their diagnostic in ``active()``
CHECK_MODES = {"counters": "check", "memory": "memory", "stale": "stale", "race": "race"}
#: the modes that take ``:error`` (raise instead of warning)
_ERROR_MODES = ("stale", "race")
#: modes switched on by the program (``enable_check``): mode -> [count, settings]
_DEMANDED: dict = {}


def parse_check(text: str) -> dict:
    """The modes of a ``PYACC_CHECK`` value: ``{mode: settings}`` (settings: True, or
    ``"error"`` for ``stale:error`` and ``race:error``). ``""`` and ``"0"`` are no mode,
    ``"1"`` is ``counters``.

    Raises:
        ValueError: an unknown mode (the message lists the valid ones).
    """
    text = text.strip()
    if text in ("", "0"):
        return {}
    modes = {}
    for part in text.split(","):
        word = part.strip().lower()
        if not word:
            continue
        mode, _, option = word.partition(":")
        mode = {"1": "counters", "true": "counters", "yes": "counters", "on": "counters",
                "memcheck": "memory"}.get(mode, mode)
        if mode not in CHECK_MODES or (option and (option != "error" or mode not in _ERROR_MODES)):
            raise ValueError(
                f"PYACC_CHECK={text!r}: unknown mode {part.strip()!r}; use a comma list of "
                "counters (or 1), memory, stale, stale:error, race, race:error, e.g. "
                "PYACC_CHECK=counters,memory,stale,race")
        modes[mode] = option or True
    return modes


def enable_check(mode: str, *, error: bool = False) -> None:
    """Switch a ``PYACC_CHECK`` mode on now (``counters``, ``memory``, ``stale``,
    ``race``; ``error=True`` with ``stale`` or ``race`` raises instead of warning),
    whatever the environment says; calls nest with ``disable_check``."""
    settings = parse_check(f"{mode}:error" if error else mode)
    with _LOCK:
        for name, value in settings.items():
            record = _DEMANDED.setdefault(name, [0, value])
            record[0] += 1
            record[1] = value
        configure()


def disable_check(mode: str) -> None:
    """Undo one ``enable_check(mode)`` (the mode stays on while the environment asks
    for it or other ``enable_check`` calls are still open)."""
    settings = parse_check(mode)
    with _LOCK:
        for name in settings:
            record = _DEMANDED.get(name)
            if record is not None:
                record[0] -= 1
                if record[0] <= 0:
                    del _DEMANDED[name]
        configure()


def _flag(environ, name: str) -> bool:
    return environ.get(name, "").strip() not in ("", "0")


def debug_enabled() -> bool:
    """``PYACC_DEBUG`` is set (read at each use)."""
    return _flag(os.environ, "PYACC_DEBUG")


class EventLog:
    """Debug records of every runtime event on the ``pyacc.events`` logger (installed
    with ``PYACC_DEBUG=1``, which also sends the ``pyacc`` logger's debug records to
    stderr, or when the program set that logger to DEBUG before ``configure()``)."""

    def __init__(self):
        self._logger = logging.getLogger("pyacc.events")

    def install(self) -> None:
        BUS.subscribe(self)

    def uninstall(self) -> None:
        BUS.unsubscribe(self)

    def __call__(self, event) -> None:
        self._logger.debug("%r", event)


class _StderrHandler(logging.StreamHandler):
    """A handler writing to ``sys.stderr`` as it is at each record (not at import)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


_DEBUG_HANDLER = _StderrHandler()
_DEBUG_HANDLER.setFormatter(logging.Formatter("pyacc debug: %(name)s: %(message)s"))


def _debug_logging(enabled: bool) -> None:
    """``PYACC_DEBUG``: the ``pyacc`` logger's debug records go to stderr."""
    logger = logging.getLogger("pyacc")
    if enabled and _DEBUG_HANDLER not in logger.handlers:
        logger.addHandler(_DEBUG_HANDLER)
        logger.setLevel(logging.DEBUG)
    elif not enabled and _DEBUG_HANDLER in logger.handlers:
        logger.removeHandler(_DEBUG_HANDLER)
        logger.setLevel(logging.NOTSET)


def _wanted(environ) -> dict:
    """The subscribers the environment asks for: name -> (settings, factory)."""
    wanted = {}
    debug = _flag(environ, "PYACC_DEBUG")
    _debug_logging(debug)
    if debug or logging.getLogger("pyacc.events").isEnabledFor(logging.DEBUG):
        wanted["log"] = (True, EventLog)
    notify = environ.get("PYACC_NOTIFY", "").strip()
    if notify:
        mask = parse_mask(notify)
        if mask:
            wanted["notify"] = (mask, lambda: Notifier(mask))
    if _flag(environ, "PYACC_TIME"):
        wanted["time"] = (True, TimeReport)
    trace = environ.get("PYACC_TRACE", "").strip()
    if trace:
        wanted["trace"] = (trace, lambda: TraceWriter(trace, _memory_in_use()))
    modes = parse_check(environ.get("PYACC_CHECK", ""))
    for mode, (_, settings) in _DEMANDED.items():
        if settings == "error" or mode not in modes:
            modes[mode] = settings  # stale:error (race:error) if either asks for it
    if "counters" in modes:
        wanted["check"] = (True, Checker)
    if "memory" in modes:
        wanted["memory"] = (True, MemoryChecker)
    if "stale" in modes:
        error = modes["stale"] == "error"
        wanted["stale"] = (error, lambda: StaleChecker(error=error))
    if "race" in modes:
        race_error = modes["race"] == "error"
        wanted["race"] = (race_error, lambda: RaceChecker(error=race_error))
    if _flag(environ, "PYACC_AUTOCOMPARE"):
        tolerances = tolerances_from_environment()
        wanted["autocompare"] = (tolerances, lambda: AutoCompare(*tolerances))
    return wanted


def configure(environ=None) -> dict:
    """(Re)read ``PYACC_NOTIFY``, ``PYACC_TIME``, ``PYACC_TRACE``, ``PYACC_CHECK``,
    ``PYACC_AUTOCOMPARE`` (with ``_RTOL``/``_ATOL``) and ``PYACC_DEBUG``, and install what they ask for,
    removing what they no longer ask for. Returns the installed diagnostics by name.

    Raises:
        ValueError: a variable has a value it cannot take (the message says which).
    """
    environ = os.environ if environ is None else environ
    wanted = _wanted(environ)
    with _LOCK:
        for name in list(_ACTIVE):
            settings, subscriber = _ACTIVE[name]
            if name not in wanted or wanted[name][0] != settings:
                _finish(name, subscriber)
                subscriber.uninstall()
                del _ACTIVE[name]
        for name, (settings, factory) in wanted.items():
            if name not in _ACTIVE:
                subscriber = factory()
                subscriber.install()
                _ACTIVE[name] = (settings, subscriber)
        compare, stale = _ACTIVE.get("autocompare"), _ACTIVE.get("stale")
        if compare is not None:  # the host runs' writes are not host changes never sent
            compare[1].stale = None if stale is None else stale[1]
        if not _EXIT_HOOK:
            atexit.register(_at_exit)
            _EXIT_HOOK.append(True)
        return {name: subscriber for name, (_, subscriber) in _ACTIVE.items()}


def active(name: str):
    """The installed diagnostic called ``name`` ("notify", "time", "trace", "check",
    "memory", "stale", "race", "autocompare"), or None."""
    with _LOCK:
        installed = _ACTIVE.get(name)
    return None if installed is None else installed[1]


def flush() -> None:
    """Write the trace file now (it is also written at exit)."""
    trace = active("trace")
    if trace is not None:
        trace.write()


def _finish(name: str, subscriber) -> None:
    """What a diagnostic leaves behind when it ends (at exit, or when switched off)."""
    try:
        if name == "time":
            subscriber.print()
        elif name == "trace":
            subscriber.write()
            print(f"pyacc: trace written to {subscriber.path}", file=sys.stderr, flush=True)
        elif name == "autocompare":
            print(subscriber.summary(), file=sys.stderr, flush=True)
    except Exception as error:  # never let a report hide the program's own outcome
        print(f"pyacc: could not finish the {name} report: {error}", file=sys.stderr)


def _at_exit() -> None:
    with _LOCK:
        for name, (_, subscriber) in list(_ACTIVE.items()):
            _finish(name, subscriber)
    if debug_enabled():
        _list_live_mappings()


def _memory_in_use() -> dict:
    return {runtime.device.identity: runtime.device.memory_in_use for runtime in live_runtimes()}


def _list_live_mappings() -> None:
    """``PYACC_DEBUG``: the mappings still present at exit (data entered and never
    exited: usually a missing ``exit_data``/``acc.delete``)."""
    lines = []
    for runtime in live_runtimes():
        records = runtime.records()
        if records:
            lines.append("pyacc: {} mapping(s) still present on device {}:{} at exit:".format(
                len(records), *runtime.device.identity))
            lines += [f"pyacc:   {record}" for record in records]
    if lines:
        print("\n".join(lines), file=sys.stderr, flush=True)
    else:
        print("pyacc: no mappings present at exit", file=sys.stderr, flush=True)


def describe_table(runtime) -> str:
    """The whole present table of a device, one line per mapping (``PYACC_DEBUG``)."""
    records = runtime.records()
    header = "present table of device {}:{} ({} mappings)".format(*runtime.device.identity, len(records))
    return "\n".join([header] + [f"  {record}" for record in records])
