"""``PYACC_TIME=1``: a timing report per source location, printed at exit (NVHPC's
``NV_ACC_TIME`` "Accelerator Kernel Timing data").

Owns: ``TimeReport``. Compute regions are listed under their construct (file:line of the
decorated function): calls, kernel launches, and kernel time (total/min/max/mean).
Data regions and transfers are listed under the user's line that caused them: regions
entered, uploads and downloads with their count, bytes and time. Times are measured
where the work runs (the calling thread, or the queue's worker for async work): kernel
time is the kernel's execution, transfer time the copy's.

The counts agree with ``acc.stats()``: every launch, upload and download the statistics
count since the report started appears in exactly one row.

It also names the arrays a compute region copies at each of its calls inside a data
region (issue 29 item 2: an array left out of the enclosing data region, or device
memory passed as if it were host data): per (region, array), once, how many of its
calls inside data regions copied the array in and out, and how to keep it on the
device. A call is inside a data region when a structured data region (``acc.data``,
``omp.target_data``) is open on its thread, or when it found another of its arrays
present (data entered by ``enter_data``). The copies of a call are the uploads before
its launch and the downloads after it, published on its thread between its
REGION_ENTER and REGION_EXIT. Listed when an array was copied at two calls or more.
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict

from pyacc.mapping import BUS, EventKind

from ._locate import location_of

__all__ = ["TimeReport"]

_COMPUTE = "compute"
_DATA = "data"
_KINDS = (EventKind.REGION_ENTER, EventKind.REGION_EXIT, EventKind.ENTER_DATA, EventKind.LAUNCH,
          EventKind.UPLOAD, EventKind.DOWNLOAD, EventKind.DEVICE_COPY, EventKind.DONE,
          EventKind.EVICT, EventKind.RESTORE)
#: REGION_ENTER/EXIT ``info`` of structured data regions (``omp.target_data`` publishes a
#: construct name equal to ``"data"``); any other is a compute construct
_DATA_REGIONS = ("data",)


class _Timer:
    """count / total / min / max of one kind of timed action."""

    __slots__ = ("count", "total", "low", "high", "nbytes")

    def __init__(self):
        self.count = 0
        self.total = 0.0
        self.low = float("inf")
        self.high = 0.0
        self.nbytes = 0

    def add(self, seconds: float) -> None:
        self.total += seconds
        self.low = min(self.low, seconds)
        self.high = max(self.high, seconds)

    def describe(self, what: str) -> str:
        timed = self.high > 0 or self.total > 0
        text = f"{what}: {self.count}"
        if self.nbytes:
            text += f", {self.nbytes} bytes"
        if timed:
            mean = self.total / self.count if self.count else 0.0
            text += (f", time total={_us(self.total)} min={_us(self.low)} "
                     f"max={_us(self.high)} mean={_us(mean)}")
        return text


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f}us"


class _Call:
    """One compute call in progress on a thread: its region, whether it runs inside a
    data region, the mappings it created, and the bytes it copied per array."""

    __slots__ = ("where", "device", "inside", "created", "copies")

    def __init__(self, where, device, inside):
        self.where, self.device, self.inside = where, device, inside
        self.created: set = set()  # id() of the mappings this call created
        self.copies: dict = {}  # array name -> [bytes in, bytes out, first copy's Location]


class _Copied:
    """Per (region, array): the calls inside data regions that copied it, and the bytes."""

    __slots__ = ("calls", "copied_in", "copied_out", "bytes_in", "bytes_out", "site")

    def __init__(self):
        self.calls = self.copied_in = self.copied_out = self.bytes_in = self.bytes_out = 0
        self.site = None  # the user's line of the first call that copied it


class TimeReport:
    """Collects per-location counts and times from the event stream."""

    def __init__(self):
        self._lock = threading.Lock()
        # (section, location) -> {"calls": _Timer, "kernels": _Timer, "upload": ...}
        self._rows: dict = defaultdict(lambda: defaultdict(_Timer))
        self._data_depth: dict = defaultdict(int)  # thread -> data regions open on it
        self._calls: dict = {}  # thread -> _Call in progress
        self._inside: dict = defaultdict(int)  # (region, device) -> calls inside data regions
        self._copied: dict = defaultdict(_Copied)  # (region, device, array) -> _Copied

    def install(self) -> None:
        BUS.subscribe(self, _KINDS)

    def uninstall(self) -> None:
        BUS.unsubscribe(self, _KINDS)

    def __call__(self, event) -> None:
        kind = event.kind
        if kind is EventKind.DONE:
            return self._done(event)
        if kind is EventKind.ENTER_DATA or kind is EventKind.REGION_EXIT:
            with self._lock:
                self._follow_call(event)
            return
        where = location_of(event)
        with self._lock:
            if kind is EventKind.REGION_ENTER:
                section = _DATA if event.info == "data" else _COMPUTE
                row = self._rows[(section, where, event.device)]
                row["data regions" if section == _DATA else "calls"].count += 1
            elif kind is EventKind.LAUNCH:
                self._rows[(_COMPUTE, where, event.device)]["kernel launches"].count += 1
            else:
                timer = self._rows[(_DATA, where, event.device)][_transfer_label(kind)]
                timer.count += 1
                timer.nbytes += event.nbytes or 0
            self._follow_call(event, where)

    # -- copies at every call (lock held) -------------------------------------------------
    def _follow_call(self, event, where=None) -> None:
        """Region nesting per thread, and what the compute call in progress copies."""
        kind, thread = event.kind, event.thread
        call = self._calls.get(thread)
        if kind is EventKind.REGION_ENTER:
            if event.info in _DATA_REGIONS:
                self._data_depth[thread] += 1
            else:
                self._calls[thread] = _Call(event.where, event.device, self._data_depth[thread] > 0)
        elif kind is EventKind.REGION_EXIT:
            if event.info in _DATA_REGIONS:
                self._data_depth[thread] = max(self._data_depth[thread] - 1, 0)
            elif call is not None:
                del self._calls[thread]
                self._count_call(call)
        elif call is None:
            return
        elif kind is EventKind.ENTER_DATA:
            if event.counters[0] == (0, 0):
                call.created.add(id(event.info))
            elif id(event.info) not in call.created:
                call.inside = True  # found present: data entered before the call
        elif kind is EventKind.UPLOAD or kind is EventKind.DOWNLOAD:
            copied = call.copies.setdefault(event.name or "?", [0, 0, where])
            copied[kind is EventKind.DOWNLOAD] += event.nbytes or 0

    def _count_call(self, call: _Call) -> None:
        if not call.inside or call.where is None:
            return
        self._inside[(call.where, call.device)] += 1
        for name, (copied_in, copied_out, site) in call.copies.items():
            record = self._copied[(call.where, call.device, name)]
            record.site = record.site or site
            record.calls += 1
            record.copied_in += copied_in > 0
            record.copied_out += copied_out > 0
            record.bytes_in += copied_in
            record.bytes_out += copied_out

    def copied_every_call(self) -> list[tuple]:
        """``(region Location, device, array name, _Copied, calls inside data
        regions)`` of each array a compute region copied at two or more of its calls
        inside data regions (module docstring)."""
        with self._lock:
            return [(where, device, name, record, self._inside[(where, device)])
                    for (where, device, name), record in sorted(
                        self._copied.items(), key=lambda item: (item[0][0], item[0][2]))
                    if record.calls >= 2]

    def _done(self, event) -> None:
        enqueued = event.info
        where = location_of(enqueued)
        seconds = event.timestamp - event.start
        with self._lock:
            if enqueued.kind is EventKind.LAUNCH:
                self._rows[(_COMPUTE, where, event.device)]["kernel launches"].add(seconds)
            else:
                self._rows[(_DATA, where, event.device)][_transfer_label(enqueued.kind)].add(seconds)

    def totals(self) -> dict:
        """Counts and bytes summed over every location: ``{"kernel launches": n,
        "uploads": n, "upload bytes": b, ...}`` (what tests compare with ``acc.stats``)."""
        totals: dict = defaultdict(int)
        with self._lock:
            for row in self._rows.values():
                for label, timer in row.items():
                    totals[label] += timer.count
                    if timer.nbytes:
                        totals[label + " bytes"] += timer.nbytes
        return dict(totals)

    def report(self) -> str:
        """The report's text."""
        lines = ["", "pyacc timing report (PYACC_TIME=1)"]
        with self._lock:
            rows = sorted(self._rows.items(), key=lambda item: (item[0][0], item[0][1]))
            for (section, where, device), row in rows:
                title = "compute region" if section == _COMPUTE else "data"
                lines.append(f"  {where.file}:{where.line} {where.function}  [{title}, "
                             "device {}:{}]".format(*device))
                for label, timer in sorted(row.items()):
                    lines.append(f"      {timer.describe(label)}")
        if len(lines) == 2:
            lines.append("  (no compute regions or transfers)")
        return "\n".join(lines + self._copies_report())

    def _copies_report(self) -> list[str]:
        found = self.copied_every_call()
        if not found:
            return []
        lines = ["", "  copied at every call inside a data region (keep these arrays on the device):"]
        for where, device, name, record, calls in found:
            lines.append("    " + _copied_line(where, device, name, record, calls))
        return lines

    def print(self, file=None) -> None:
        print(self.report(), file=file or sys.stderr, flush=True)


def _copied_line(where, device, name, record, calls) -> str:
    """One finding of ``copied_every_call``, with how to keep the array resident."""
    ways = [way for way, count in (("in", record.copied_in), ("out", record.copied_out)) if count]
    how_often = (f"at every call ({record.calls})" if record.calls == calls
                 else f"at {record.calls} of its {calls} calls")
    moved = ", ".join(f"{amount} bytes {way}" for way, amount in
                      (("up", record.bytes_in), ("down", record.bytes_out)) if amount)
    site = "" if record.site is None else f", called at {record.site.file}:{record.site.line}"
    return (f"{where.file}:{where.line} {where.function} [device {device[0]}:{device[1]}]: "
            f"'{name}' is copied {' and '.join(ways)} {how_often} inside a data region "
            f"({moved}{site}). Keep it resident: add it to the enclosing data region "
            f"(acc.data(copy=[...]), copyin/create as the region uses it, or acc.enter_data); "
            f"if it already is device memory (acc.malloc, a device array), pass it with "
            f"deviceptr= on the region or the data region; present= on the region makes a "
            f"missing mapping an error instead of a copy")


def _transfer_label(kind) -> str:
    return {EventKind.UPLOAD: "uploads", EventKind.DOWNLOAD: "downloads",
            EventKind.DEVICE_COPY: "device copies", EventKind.EVICT: "evictions",
            EventKind.RESTORE: "restores"}[kind]
