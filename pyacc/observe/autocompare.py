"""``PYACC_AUTOCOMPARE=1``: run every compute region on the host too, and compare the
device's results with the host's whenever data comes back (NVHPC PCAST's redundant
execution with autocompare).

Owns: ``AutoCompare``. After each kernel has run on the device (in queue order), the same
compute region runs on the host (a kernel compiled for device type ``host``) on the
**program's host arrays** (API.md §11): a device array that belongs to a mapping is
replaced by the host array it maps, which the host run reads and writes in place — the
host arrays evolve as a host-only run of the program would, so host data never sent to
the device (a missing ``update device``) makes the host run differ from the device's.
For each non-host device it also keeps a *shadow* of device memory in host RAM, one
buffer per device allocation (ALLOC/FREE events), holding what the device data would be
had every kernel run on the host:

- an upload (copyin, ``update device``) writes the host data into the shadow too;
- a device-to-device copy copies shadow to shadow;
- after a host run, the values it wrote to mapped host arrays are copied into their
  shadows; device memory of no mapping (``acc.malloc``, ``deviceptr``) is run on its
  shadow directly;
- at every download (copyout, ``copy`` at region exit, ``update self``) the values that
  arrived from the device are compared with the shadow, with relative and absolute
  tolerances (``PYACC_AUTOCOMPARE_RTOL``, default 1e-6; ``PYACC_AUTOCOMPARE_ATOL``,
  default 0): a line on stderr names the variable, where it came back, how many
  elements differ and the first few (index, device value, host value); the device's
  values are then copied as usual.
Under oversubscription a block's shadow follows its data: set aside at EVICT, copied
into the new block's shadow at RESTORE. A summary is printed at exit. Device memory written outside pyacc's verbs (through
``host_data`` or ``deviceptr`` by other libraries) is not mirrored; reductions returned
by value are not compared. The host runs write the program's host arrays (of async
regions: on the queue's worker thread; on ``cuda``, whose queues publish DONE when
polled, autocompare subscribes ``in_order``, so each queued operation completes, and its
host run is done, before the call that queued it returns); with ``PYACC_CHECK=stale`` on too, each host run
is bracketed by the stale checker's ``host_run`` (``stale`` is set by
``pyacc.observe.configure``), so its writes are not taken for host changes never sent.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import nullcontext

import numpy as np

from pyacc import compiler
from pyacc.mapping import BUS, EventKind

from ._entries import EntryIndex, array_layout
from ._locate import location_of

__all__ = ["AutoCompare", "tolerances_from_environment"]

_KINDS = (EventKind.ALLOC, EventKind.FREE, EventKind.RESET, EventKind.DONE, EventKind.DOWNLOAD,
          EventKind.ENTER_DATA, EventKind.EXIT_DATA, EventKind.EVICT, EventKind.RESTORE)
_SHOWN = 5  # differing elements listed per report


def tolerances_from_environment() -> tuple[float, float]:
    values = []
    for variable, default in (("PYACC_AUTOCOMPARE_RTOL", 1e-6), ("PYACC_AUTOCOMPARE_ATOL", 0.0)):
        text = os.environ.get(variable, "").strip()
        try:
            value = float(text) if text else default
        except ValueError:
            raise ValueError(f"{variable}={text!r} is not a number (e.g. 1e-6)") from None
        if value < 0:
            raise ValueError(f"{variable}={text!r} is negative")
        values.append(value)
    return values[0], values[1]


class AutoCompare:
    """Shadows of device memory, host re-runs of kernels, comparisons at downloads."""

    def __init__(self, rtol: float = 1e-6, atol: float = 0.0):
        self.rtol, self.atol = rtol, atol
        self._lock = threading.RLock()
        self._shadows: dict = {}  # device -> {block address: uint8 shadow}
        self.compared = 0  # downloads compared
        self.differences: list[str] = []  # one report per download that differed
        self.host_failures: list[str] = []  # kernels whose host run failed
        self.skipped: list[str] = []  # regions not run on the host (once per argument)
        self._skip_reported: set = set()
        self._entries = EntryIndex()  # mappings by device address (host runs' arrays)
        self.stale = None  # the StaleChecker, when PYACC_CHECK=stale is on too
        self._evicted: dict = {}  # (device, id(entry)) -> shadow of an evicted block

    def install(self) -> None:
        # in order: a kernel's host run must write the host arrays before a later
        # download on its queue does (cuda publishes DONE when polled)
        BUS.subscribe(self, _KINDS, in_order=True)

    def uninstall(self) -> None:
        BUS.unsubscribe(self, _KINDS)

    # -- following device memory ------------------------------------------------------
    def __call__(self, event) -> None:
        if event.device[0] == "host":  # shared memory: nothing to compare
            return
        kind = event.kind
        if kind is EventKind.DOWNLOAD:  # enqueued: note the user's line while on its thread
            location_of(event)
            return
        with self._lock:
            shadows = self._shadows.setdefault(event.device, {})
            if kind is EventKind.ENTER_DATA:
                if event.counters[0] == (0, 0):
                    self._entries.add(event.device, event.info, None)
            elif kind is EventKind.EXIT_DATA:
                if event.counters[1] == (0, 0):
                    self._entries.ended(event.device, event.info)
            elif kind is EventKind.ALLOC:
                shadows[event.device_begin] = np.zeros(event.nbytes, dtype=np.uint8)
            elif kind is EventKind.FREE:
                shadows.pop(event.device_begin, None)
                self._entries.freed(event.device, event.device_begin)
            elif kind is EventKind.RESET:
                shadows.clear()
                self._evicted.clear()
                self._entries.reset(event.device)
            elif kind is EventKind.EVICT:  # oversubscription: the shadow moves with the data
                self._evicted[(event.device, id(event.info))] = shadows.pop(event.device_begin, None)
                self._entries.evicted(event.device, event.info, event.device_begin)
            elif kind is EventKind.RESTORE:
                self._restored(shadows, event)
            else:
                self._done(shadows, event)

    def _restored(self, shadows, event) -> None:
        saved = self._evicted.pop((event.device, id(event.info)), None)
        shadow = shadows.get(event.device_begin)
        if saved is not None and shadow is not None:
            count = min(saved.size, shadow.size)
            shadow[:count] = saved[:count]
        self._entries.restored(event.device, event.info)

    def _shadow_of(self, shadows, device_array):
        """The shadow array of a device array (None when it is not device memory)."""
        begin = self._block_of(shadows, device_array)
        if begin is None:
            return None
        address, shape, dtype, strides = array_layout(device_array)
        return np.ndarray(shape, dtype, buffer=shadows[begin], offset=address - begin,
                          strides=strides)

    @staticmethod
    def _block_of(shadows, device_array):
        """The start of the shadowed device block holding a device array, or None."""
        layout = array_layout(device_array)
        if layout is None or 0 in layout[1]:
            return None
        address = layout[0]
        for begin, block in shadows.items():
            if begin <= address < begin + block.size:
                return begin
        return None

    def _done(self, shadows, done) -> None:
        enqueued = done.info
        kind = enqueued.kind
        if kind is EventKind.LAUNCH:
            self._rerun_on_host(shadows, enqueued)
            return
        destination, source = enqueued.info
        if kind is EventKind.UPLOAD:
            shadow = self._shadow_of(shadows, destination)
            if shadow is not None:
                shadow[...] = source
        elif kind is EventKind.DEVICE_COPY:
            target, origin = self._shadow_of(shadows, destination), self._shadow_of(shadows, source)
            if target is not None and origin is not None:
                target[...] = origin
        else:  # DOWNLOAD: the device's values have arrived in ``destination``
            shadow = self._shadow_of(shadows, source)
            if shadow is not None:
                self._compare(destination, shadow, enqueued)

    # -- the host run --------------------------------------------------------------------
    def _host_array_of(self, identity, device_array):
        """The program's host array behind a device array of a mapping (same shape and
        strides), or None. A read-only host array is given as a copy."""
        found = self._entries.find(identity, device_array)
        if found is None:
            return None
        entry, _, offset = found
        _, shape, dtype, strides = array_layout(device_array)
        host = np.ndarray(shape, dtype, buffer=entry.host_bytes(), offset=offset, strides=strides)
        return host if host.flags.writeable else host.copy()

    def _rerun_on_host(self, shadows, launch) -> None:
        region_info, args = launch.info
        if region_info is None:
            return
        host_args, written, mirrored = [], [], []
        names = region_info.kernel_params
        for index, argument in enumerate(args):
            name = names[index] if index < len(names) else None
            is_array = array_layout(argument) is not None
            host = self._host_array_of(launch.device, argument) if is_array else None
            if host is not None:  # the program's host data (NVHPC redundant execution)
                host_args.append(host)
                if name in region_info.written:
                    mirrored.append(argument)
                shadow = self._shadow_of(shadows, argument)
                if shadow is not None and name in region_info.written:
                    written.append((shadow, host))
                continue
            shadow = self._shadow_of(shadows, argument)
            if shadow is not None:
                host_args.append(shadow)
            elif isinstance(argument, np.ndarray):
                host_args.append(argument.copy())  # host data: the device run used it already
            elif is_array:  # device memory pyacc neither mapped nor allocated
                self._skipped(shadows, region_info, name, argument, args)
                return
            else:
                host_args.append(argument)
        target = "python" if os.environ.get("PYACC_DISABLE_JIT", "") not in ("", "0") else "cpu"
        stale = self.stale
        try:
            with stale.host_run(launch.device, mirrored) if stale is not None and mirrored else nullcontext():
                compiler.get_kernel(region_info, host_args, target=target, device_type="host")(*host_args)
            for shadow, host in written:  # what the host run wrote, for the downloads
                shadow[...] = host
        except Exception as error:  # reported, never raised into the program
            self.host_failures.append(f"{region_info.where}: {type(error).__name__}: {error}")
            print(f"pyacc autocompare: the host run of {region_info.where} failed: "
                  f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)

    def _skipped(self, shadows, region_info, name, argument, args) -> None:
        """No host run: an argument is device memory of no mapping and no pyacc
        allocation (another library's array), whose host values are unknown. What the
        region writes is then unknown too: the shadows of its written arguments are
        dropped (their copies back are not compared until the memory is allocated anew).
        Reported once per region and argument, counted apart from failed host runs."""
        names = region_info.kernel_params
        for index, other in enumerate(args):
            if index < len(names) and names[index] in region_info.written:
                begin = self._block_of(shadows, other)
                if begin is not None:
                    del shadows[begin]
        key = (region_info.where, name)
        if key in self._skip_reported:
            return
        self._skip_reported.add(key)
        reason = (f"argument {name!r} is device memory pyacc did not allocate "
                  f"({type(argument).__name__}), so its host values are unknown; the arrays "
                  "the region writes are not compared from here on")
        self.skipped.append(f"{region_info.where}: {reason}")
        print(f"pyacc autocompare: no host run of {region_info.where}: {reason}",
              file=sys.stderr, flush=True)

    # -- comparing -----------------------------------------------------------------------
    def _compare(self, device_values, host_values, download) -> None:
        self.compared += 1
        if device_values.dtype.kind in "fc":
            close = np.isclose(device_values, host_values, rtol=self.rtol, atol=self.atol,
                               equal_nan=True)
        else:
            close = device_values == host_values
        if close.all():
            return
        where = location_of(download)
        wrong = np.argwhere(~close)
        shown = "; ".join(
            f"{list(int(i) for i in index) if device_values.ndim > 1 else int(index[0])}: "
            f"device={device_values[tuple(index)]} host={host_values[tuple(index)]}"
            for index in wrong[:_SHOWN])
        report = (f"pyacc autocompare: '{download.name or '?'}' copied back at {where.file}:"
                  f"{where.line} ({where.function}) differs from the host run in {len(wrong)} "
                  f"of {device_values.size} elements (rtol={self.rtol:g}, atol={self.atol:g}); "
                  f"first: {shown}")
        self.differences.append(report)
        print(report, file=sys.stderr, flush=True)

    def summary(self) -> str:
        return (f"pyacc autocompare summary: {self.compared} copies back compared, "
                f"{len(self.differences)} differed from the host run"
                + (f", {len(self.host_failures)} host runs failed" if self.host_failures else "")
                + (f", {len(self.skipped)} regions not run on the host (device memory of "
                   "other libraries)" if self.skipped else ""))
