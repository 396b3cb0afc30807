"""The values of OpenMP clauses (OpenMP 5.2 §5.8.3, ch. 13): map types and modifiers,
:class:`MapSpec` (one array's map), :class:`OmpClauses` (a construct's clauses), which
clauses each construct takes, and the error helpers the parser uses (``caret``).
``_clauses`` parses strings and keywords into these values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyacc.compiler.clauses import caret  # noqa: F401 - the one spelling of clause errors
from pyacc.compiler.errors import CompileError

__all__ = ["MapSpec", "OmpClauses", "caret", "MAP_TYPES", "MAP_MODIFIERS", "CONSTRUCT_CLAUSES"]

#: OpenMP map types (5.2 §5.8.3); ``release``/``delete`` only on exits
MAP_TYPES = ("to", "from", "tofrom", "alloc", "release", "delete")
#: map-type modifiers pyacc implements (``close`` is accepted: a hint, no effect)
MAP_MODIFIERS = ("always", "present", "close", "ompx_hold")
_UNSUPPORTED_MODIFIERS = {
    "mapper": "user-defined mappers (declare mapper) are not supported",
    "iterator": "iterator modifiers are not supported",
}

#: reduction operators of OpenMP (5.2 §5.5.5) that pyacc compiles; ``&&``/``||`` become
#: and/or; ``-`` is ``+`` (deprecated in 5.2, as in C)
_REDUCTION_OPS = {"+": "+", "-": "+", "*": "*", "max": "max", "min": "min", "&": "&", "|": "|",
                  "^": "^", "&&": "and", "||": "or", "and": "and", "or": "or"}


@dataclass(frozen=True)
class MapSpec:
    """One map clause item: its map type and modifiers."""

    type: str = "tofrom"
    always: bool = False
    present: bool = False
    hold: bool = False

    def text(self) -> str:
        mods = [m for m, on in (("always", self.always), ("present", self.present),
                                ("ompx_hold", self.hold)) if on]
        return f"map({', '.join(mods) + ', ' if mods else ''}{self.type}: …)"


@dataclass
class OmpClauses:
    """The clauses of one OpenMP construct, normalised.

    ``maps`` is a list of ``(item, MapSpec)`` in the order written; ``motions`` (target
    update) a list of ``(item, direction, present)`` with direction ``"to"``/``"from"``.
    Expressions of the parameters (``if(n > 100)``, ``num_teams((n+127)/128)``,
    ``device(d)``) are :class:`ClauseExpr` values.
    """

    construct: str
    maps: list = field(default_factory=list)
    motions: list = field(default_factory=list)
    firstprivate: list = field(default_factory=list)
    private: list = field(default_factory=list)
    is_device_ptr: list = field(default_factory=list)
    use_device: list = field(default_factory=list)
    reductions: list = field(default_factory=list)  # "op:var" strings (OpenACC spelling)
    defaultmap: str | None = None
    collapse: int | None = None
    num_teams: Any = None
    thread_limit: Any = None
    device: Any = None
    if_: Any = None
    nowait: bool = False
    depend: list = field(default_factory=list)  # (type, item)
    hold: bool = False
    device_type: str | None = None
    loop_flags: dict = field(default_factory=dict)  # declare_target's seq/gang/...


# -- clause sets (OpenMP 5.2 ch. 13 device directives, §17 combined constructs) ----------------
_TARGET = ("map", "defaultmap", "firstprivate", "private", "is_device_ptr", "has_device_addr",
           "device", "if", "nowait", "depend", "thread_limit", "hold", "in_reduction_unsupported")
_LOOP = ("collapse", "reduction", "private", "firstprivate", "shared", "default", "order",
         "schedule")
CONSTRUCT_CLAUSES = {
    "target": _TARGET,
    "target_teams_distribute_parallel_for": _TARGET + _LOOP + ("num_teams", "dist_schedule",
                                                               "num_threads", "proc_bind"),
    "target_teams_distribute_parallel_for_simd": _TARGET + _LOOP + (
        "num_teams", "dist_schedule", "num_threads", "proc_bind", "simdlen", "safelen",
        "aligned", "nontemporal"),
    "target_parallel_for": _TARGET + _LOOP + ("num_threads", "proc_bind"),
    "target_teams_loop": _TARGET + _LOOP + ("num_teams", "bind"),
    "target_parallel_loop": _TARGET + _LOOP + ("num_threads", "bind", "proc_bind"),
    "target_teams_distribute": _TARGET + _LOOP + ("num_teams", "dist_schedule"),
    "target_teams": _TARGET + ("num_teams", "private", "firstprivate", "shared", "default"),
    "target_parallel": _TARGET + ("num_threads", "proc_bind", "private", "firstprivate",
                                  "shared", "default"),
    "target_data": ("map", "device", "if", "use_device_ptr", "use_device_addr", "hold"),
    "target_enter_data": ("map", "device", "if", "nowait", "depend"),
    "target_exit_data": ("map", "device", "if", "nowait", "depend"),
    "target_update": ("to", "from", "device", "if", "nowait", "depend"),
    "declare_target": ("device_type", "indirect", "enter", "to", "link", "seq"),
}
CONSTRUCT_CLAUSES = {k: tuple(c for c in v if not c.endswith("_unsupported"))
                     for k, v in CONSTRUCT_CLAUSES.items()}

#: map types allowed per construct (5.2 §5.8.3 restrictions)
_MAP_TYPES_OF = {
    "target_data": ("to", "from", "tofrom", "alloc"),
    "target_enter_data": ("to", "alloc"),
    "target_exit_data": ("from", "release", "delete"),
}
_COMPUTE_MAP_TYPES = ("to", "from", "tofrom", "alloc")

#: clauses OpenMP has that pyacc does not implement, with why (never silently ignored)
_NOT_SUPPORTED = {
    "lastprivate": "lastprivate is not supported: return the value from the function instead",
    "linear": "linear is not supported",
    "allocate": "allocate is not supported (device memory comes from pyacc's allocator)",
    "uses_allocators": "uses_allocators is not supported",
    "in_reduction": "in_reduction (task reductions) is not supported",
    "ordered": "ordered loops are not supported",
    "nogroup": "nogroup is not supported",
    "link": "declare target link is not supported; use enter/to",
}

# keyword aliases: Python keywords and OpenMP spellings
_KEYWORD_ALIAS = {"if_": "if", "from_": "from", "async_": "async"}


class _Bad(ValueError):
    """A malformed clause argument at ``offset`` into the argument text."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


def _error(kind, message):
    return kind(message) if kind is CompileError else kind(message, clause=None)
