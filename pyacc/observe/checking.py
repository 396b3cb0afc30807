"""``PYACC_CHECK=counters`` (or ``1``): the consistency checker run after every directive.
(The other modes: ``memcheck`` for ``memory``, ``stale`` for ``stale``; API.md §11.)

Owns: ``Checker`` — attaches ``mapping.check.LEDGER`` (the second bookkeeping, see that
module for what is checked) and verifies the device of each checkpoint: the end of every
public directive and data routine (DIRECTIVE_END) and every region entry/exit. A failed
check raises ``acc.ConsistencyError`` from the directive that found it.
"""

from __future__ import annotations

from pyacc.mapping import BUS, EventKind
from pyacc.mapping.check import LEDGER

from .. import _devices

__all__ = ["Checker", "verify_all", "live_runtimes"]

_KINDS = (EventKind.DIRECTIVE_END, EventKind.REGION_EXIT)


class Checker:
    def install(self) -> None:
        LEDGER.attach()
        for runtime in live_runtimes():
            LEDGER.adopt(runtime)
        BUS.subscribe(self, _KINDS)

    def uninstall(self) -> None:
        BUS.unsubscribe(self, _KINDS)
        LEDGER.detach()

    def __call__(self, event) -> None:
        device_type, number = event.device
        runtime = next((r for r in _devices.live_runtimes(device_type)
                        if r.device.number == number), None)
        if runtime is not None:
            what = event.name or event.info or event.kind.name.lower()
            LEDGER.verify(runtime, str(what))


def verify_all() -> None:
    """Check every device in use now (``acc.testing.check_consistency``)."""
    if not LEDGER.attached:
        raise RuntimeError("the consistency checker is off: set PYACC_CHECK=1 (before the "
                           "program starts, or then call pyacc.observe.configure()), or use "
                           "pyacc.testing.check('counters')")
    for runtime in live_runtimes():
        LEDGER.verify(runtime, "acc.testing.check_consistency()")


def live_runtimes() -> list:
    """Every device runtime created so far, of every type."""
    return [runtime for device_type in _devices.DEVICE_TYPES
            for runtime in _devices.live_runtimes(device_type)]
