"""Where pyacc meets the async crossover of ``mapping.inline`` (API.md §5, last point).

Owns ``install()`` (called once at import): the crossover's measurement is kept between
processes in the machine's signed record (``compiler.crossover.recorded``, beside the
serial crossover), under a key naming what it depends on (processor, cores, Python: the
GIL's handoff); ``PYACC_INFO`` prints the crossover once, when the first queue that can
run work at once is made (``acc.explain`` adds ``CROSSOVER.describe()`` itself).

Invariant: the mapping layer never imports the compiler; this module passes it the
compiler's store as a plain callable.
"""

from __future__ import annotations

import os
import platform

from pyacc.compiler.crossover import recorded
from pyacc.compiler.feedback import info_enabled, log_info
from pyacc.mapping.queues import CROSSOVER

__all__ = ["install"]

#: names the measurement (``mapping.inline.measure``): measured another way, measured again
_METHOD = "handoff-median-1"


def _key() -> str:
    return (f"async-at-once|{platform.processor() or platform.machine()}|{os.cpu_count()}|"
            f"{platform.python_implementation()} {platform.python_version()}|{_METHOD}")


def _record(measure):
    """The machine's recorded ``(handoff s, copy B/s)``, or a new measurement."""
    value = recorded(_key(), lambda: list(measure()))
    if isinstance(value, list) and len(value) == 2 and all(
            isinstance(part, (int, float)) and part > 0 for part in value):
        return tuple(value)
    return measure()  # a record of another shape: not trusted, not replaced


def _announce(text: str) -> None:
    if info_enabled():
        log_info(text)


def install() -> None:
    """Give the mapping layer's crossover its store and its ``PYACC_INFO`` line."""
    CROSSOVER.recorder = _record
    CROSSOVER.announce = _announce
