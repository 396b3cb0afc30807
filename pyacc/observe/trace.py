"""``PYACC_TRACE=<file>.json``: a Chrome / Perfetto trace-event timeline.

Owns: ``TraceWriter``. Written at exit (or by ``pyacc.observe.flush()``) in the Trace
Event Format (``{"traceEvents": [...]}``; open it in https://ui.perfetto.dev or
chrome://tracing):

- one process per device (``emulated:0``), with one track per queue: ``sync queue
  (thread N)`` for work the host thread ran itself, ``queue q`` for async queue q;
- kernels and transfers as complete slices (``ph: "X"``) on the track of the queue that
  ran them, with arguments: variable or kernel name, bytes, source file and line;
- compute and data regions and waits as slices on the host thread's track;
- the device memory in use as a counter track (``ph: "C"``) updated at every alloc/free.
Timestamps are microseconds from the start of the trace.
"""

from __future__ import annotations

import json
import os
import threading
import time

from pyacc.mapping import BUS, EventKind

from ._locate import location_of

__all__ = ["TraceWriter"]

_KINDS = (EventKind.LAUNCH, EventKind.UPLOAD, EventKind.DOWNLOAD, EventKind.DEVICE_COPY,
          EventKind.DONE, EventKind.WAIT, EventKind.ALLOC, EventKind.FREE,
          EventKind.REGION_ENTER, EventKind.REGION_EXIT, EventKind.EVICT, EventKind.RESTORE)

_CATEGORY = {EventKind.LAUNCH: "kernel", EventKind.UPLOAD: "upload",
             EventKind.DOWNLOAD: "download", EventKind.DEVICE_COPY: "device copy"}


class TraceWriter:
    """Collects trace events in memory; ``write()`` saves them to ``path``."""

    def __init__(self, path: str, memory_in_use=None):
        self.path = path
        self._lock = threading.Lock()
        self._origin = time.perf_counter()
        self._events: list[dict] = []
        self._tracks: dict = {}  # (device, track name) -> (pid, tid)
        self._pids: dict = {}
        self._memory: dict = dict(memory_in_use or {})  # device -> bytes in use
        self._open: dict = {}  # host thread -> stack of region begin events

    def install(self) -> None:
        BUS.subscribe(self, _KINDS)

    def uninstall(self) -> None:
        BUS.unsubscribe(self, _KINDS)

    # -- collecting --------------------------------------------------------------------
    def __call__(self, event) -> None:
        kind = event.kind
        if kind in _CATEGORY:
            location_of(event)  # on the enqueuing thread, for the slice's arguments
            return
        with self._lock:
            if kind is EventKind.DONE:
                self._slice(event)
            elif kind is EventKind.WAIT:
                self._wait(event)
            elif kind is EventKind.ALLOC or kind is EventKind.FREE:
                self._counter(event)
            elif kind is EventKind.EVICT or kind is EventKind.RESTORE:
                self._residency(event)
            else:
                self._region(event)

    def _us(self, seconds: float) -> float:
        return round((seconds - self._origin) * 1e6, 3)

    def _track(self, device, name: str) -> tuple[int, int]:
        key = (device, name)
        track = self._tracks.get(key)
        if track is None:
            pid = self._pids.get(device)
            if pid is None:
                pid = self._pids[device] = len(self._pids) + 1
                self._events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                     "args": {"name": "pyacc device {}:{}".format(*device)}})
            tid = len([k for k in self._tracks if k[0] == device]) + 1
            track = self._tracks[key] = (pid, tid)
            self._events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                 "args": {"name": name}})
        return track

    def _host_track(self, event):
        return self._track(event.device, f"sync queue (thread {event.thread})")

    def _slice(self, done) -> None:
        enqueued = done.info
        where = location_of(enqueued)
        if done.queue is None:
            pid, tid = self._host_track(done)
        else:
            pid, tid = self._track(done.device, f"queue {done.queue}")
        args = {"file": where.file, "line": where.line, "function": where.function}
        if enqueued.name is not None:
            args["kernel" if enqueued.kind is EventKind.LAUNCH else "variable"] = enqueued.name
        if enqueued.nbytes is not None:
            args["bytes"] = enqueued.nbytes
        category = _CATEGORY[enqueued.kind]
        name = f"{category} {enqueued.name}" if enqueued.name else category
        self._events.append({"ph": "X", "name": name, "cat": category, "pid": pid, "tid": tid,
                             "ts": self._us(done.start),
                             "dur": round((done.timestamp - done.start) * 1e6, 3), "args": args})

    def _wait(self, event) -> None:
        pid, tid = self._host_track(event)
        queue = "all queues" if event.queue is None else f"queue {event.queue}"
        self._events.append({"ph": "X", "name": f"wait {queue}", "cat": "wait", "pid": pid,
                             "tid": tid, "ts": self._us(event.start or event.timestamp),
                             "dur": round((event.timestamp - (event.start or event.timestamp)) * 1e6, 3)})

    def _counter(self, event) -> None:
        change = event.nbytes or 0
        in_use = self._memory.get(event.device, 0)
        in_use = in_use + change if event.kind is EventKind.ALLOC else max(0, in_use - change)
        self._memory[event.device] = in_use
        pid, _ = self._track(event.device, "memory")
        self._events.append({"ph": "C", "name": "device memory in use", "pid": pid,
                             "ts": self._us(event.timestamp), "args": {"bytes": in_use}})

    def _residency(self, event) -> None:
        """Oversubscription: an instant event on the device's memory track."""
        pid, tid = self._track(event.device, "memory")
        verb = "evict" if event.kind is EventKind.EVICT else "restore"
        self._events.append({"ph": "i", "s": "t", "name": f"{verb} {event.name or ''}".rstrip(),
                             "cat": verb, "pid": pid, "tid": tid, "ts": self._us(event.timestamp),
                             "args": {"bytes": event.nbytes or 0}})

    def _region(self, event) -> None:
        pid, tid = self._host_track(event)
        construct = event.info or "region"
        name = f"{construct} {event.name}" if event.name else construct
        phase = "B" if event.kind is EventKind.REGION_ENTER else "E"
        record = {"ph": phase, "name": name, "cat": "region", "pid": pid, "tid": tid,
                  "ts": self._us(event.timestamp)}
        if phase == "B":
            where = location_of(event)
            record["args"] = {"file": where.file, "line": where.line, "function": where.function}
        self._events.append(record)

    # -- writing -----------------------------------------------------------------------
    def events(self) -> list[dict]:
        with self._lock:
            return list(self._events)

    def write(self) -> None:
        """Save the trace (replacing the file): ``{"traceEvents": [...]}``."""
        document = {"traceEvents": self.events(), "displayTimeUnit": "ms",
                    "otherData": {"producer": "pyacc", "pid": os.getpid()}}
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        temporary = f"{self.path}.tmp{os.getpid()}"
        with open(temporary, "w") as stream:
            json.dump(document, stream)
        os.replace(temporary, self.path)
