"""Source locations of events: where in the user's code an action came from.

Owns: ``Location`` and ``location_of(event)``. A data event's location is the user's
line that caused it (the first stack frame outside pyacc), read on the publishing thread
the first time a subscriber asks and cached on the event (``Event.where``); compute
regions publish their construct's own location. Events published on queue worker threads
(DONE) carry the location of the enqueue event they complete.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from .._names import user_frame

__all__ = ["Location", "location_of", "UNKNOWN"]


class Location(NamedTuple):
    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} ({self.function})"


UNKNOWN = Location("?", 0, "?")


def location_of(event) -> Location:
    """The user's source location of ``event`` (computed once, on first use)."""
    where = event.where
    if where is None:
        thread = threading.current_thread()
        if thread.name.startswith("pyacc queue"):  # a deferred action run by a queue
            where = Location(f"<{thread.name}>", 0, "deferred")
        else:
            frame = user_frame()
            where = UNKNOWN if frame is None else Location(
                frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        event.where = where
    return where
