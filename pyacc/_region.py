"""The single-use region: the state machine shared by ``acc.data``, ``acc.acquire`` and
``omp.target_data``.

Owns: ``SingleUseRegion``, a base class for the context managers that hold something on
a device for the length of a ``with`` block. Each subclass says what entering and
leaving do (``_enter``, ``_leave``, ``_left``); this base says when they run:

- a region object is single-use (like ``trio.CancelScope``): its state goes ``new`` →
  ``entered`` → ``done`` and never back; entering it twice raises (and reports)
  ``InvalidArgumentError``, whatever the first entry did;
- an entry that fails before the region holds anything (``_opened()`` false) leaves it
  ``done``; an ``AccError`` is reported (error callbacks) and propagates;
- an entry that fails after the region holds something — a profiling callback that
  raises at the end of the entry (``enter_data``, ``data_construct_start`` ...: their
  exceptions wait for the entry, ``BUS.holding``) — makes the region end there
  (``_abandon``: by default its exit actions run, as ``__exit__`` would), because the
  block will not run and Python will not call ``__exit__``; then the exception
  propagates, and no count is left behind;
- ``__exit__`` runs the exit once, only when the region was entered and holds
  something: ``_leave(exc)`` (``exc``: the block's exception, which is never
  suppressed; an ``acc.ExecutionError`` there means the device data may be garbage, and
  the subclasses copy nothing back), then ``_left()`` even when ``_leave`` raised; an
  ``AccError`` from ``_leave`` is reported before ``_left`` runs, then propagates.

Invariants: the state changes on the thread that uses the region (a region is not
shared between threads); ``_left`` releases what ``_enter`` took, whatever happened in
between.
"""

from __future__ import annotations

from pyacc.mapping import AccError, InvalidArgumentError

from ._errors import report

__all__ = ["SingleUseRegion"]


class SingleUseRegion:
    """A context manager entered once (module docstring). Subclasses set ``_NAME`` (its
    spelling: ``"acc.data"``) and ``_WHAT`` (how messages call an object of it: ``"acc.data
    region"``) and implement ``_enter``, ``_opened``, ``_leave`` and ``_left``."""

    _NAME = "a region"
    _WHAT = "region"
    #: ``"new"``, ``"entered"`` or ``"done"``
    _state = "new"

    def __enter__(self):
        if self._state != "new":
            self._refuse_entry()
        self._state = "entered"
        try:
            return self._enter()
        except BaseException as error:
            self._state = "done"
            if self._opened():
                self._abandon(error)
                raise
            if isinstance(error, AccError):
                report(error)
            raise

    def __exit__(self, exc_type, exc, traceback):
        if self._state != "entered":
            return False
        self._state = "done"
        if self._opened():
            self._exit(exc)
        return False

    def _refuse_entry(self):
        """A second entry: ``InvalidArgumentError``, reported."""
        error = InvalidArgumentError(f"this {self._WHAT} was already entered; create a new "
                                     f"{self._NAME}(...) for each with-block")
        report(error)
        raise error

    def _exit(self, exc: BaseException | None) -> None:
        """The exit: ``_leave(exc)``, an ``AccError`` of it reported, then ``_left()``."""
        try:
            self._leave(exc)
        except AccError as error:
            report(error)
            raise
        finally:
            self._left()

    # -- what subclasses say -------------------------------------------------------------------
    def _enter(self):
        """The entry actions; returns what ``with ... as`` binds."""
        raise NotImplementedError

    def _opened(self) -> bool:
        """Whether the region holds something that its exit must release."""
        raise NotImplementedError

    def _abandon(self, error: BaseException) -> None:
        """The entry failed after the region took hold (``error``; the state is
        ``done``): end it now. By default its exit runs, as for an exception inside the
        block."""
        self._exit(error)

    def _leave(self, exc: BaseException | None) -> None:
        """The exit actions (``exc``: the block's exception, or None)."""

    def _left(self) -> None:
        """What always follows the exit actions, even when they raised."""
