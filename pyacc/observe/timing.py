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
_KINDS = (EventKind.REGION_ENTER, EventKind.LAUNCH, EventKind.UPLOAD, EventKind.DOWNLOAD,
          EventKind.DEVICE_COPY, EventKind.DONE, EventKind.EVICT, EventKind.RESTORE)


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


class TimeReport:
    """Collects per-location counts and times from the event stream."""

    def __init__(self):
        self._lock = threading.Lock()
        # (section, location) -> {"calls": _Timer, "kernels": _Timer, "upload": ...}
        self._rows: dict = defaultdict(lambda: defaultdict(_Timer))

    def install(self) -> None:
        BUS.subscribe(self, _KINDS)

    def uninstall(self) -> None:
        BUS.unsubscribe(self, _KINDS)

    def __call__(self, event) -> None:
        kind = event.kind
        if kind is EventKind.DONE:
            return self._done(event)
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
        return "\n".join(lines)

    def print(self, file=None) -> None:
        print(self.report(), file=file or sys.stderr, flush=True)


def _transfer_label(kind) -> str:
    return {EventKind.UPLOAD: "uploads", EventKind.DOWNLOAD: "downloads",
            EventKind.DEVICE_COPY: "device copies", EventKind.EVICT: "evictions",
            EventKind.RESTORE: "restores"}[kind]
