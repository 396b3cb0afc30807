"""Rules between the clauses of one construct (OpenACC 3.3 §2.5.13–2.5.15, 2.7, 2.9,
2.15.1), applied to the parsed values before a ``ComputeClauses`` is made.

Owns ``one_action_each`` (a variable in several data clauses gets the one clause that
does what they do together), ``check_disjoint`` (a private variable takes no other
clause; a reduction variable no private one) and ``check_exclusive`` (seq/independent/auto, tile/collapse, a routine's
one level of parallelism).

Invariants: each rule reads and may rewrite only the ``values`` dict of ``parse_clauses``
(field name -> normalised value); a violation is a ``CompileError`` naming the variable or
the clauses and the rule.
"""
from __future__ import annotations

from .clause_kinds import DATA_CLAUSES, EXCLUSIVE, PRIVATE_CLAUSES
from .errors import CompileError

__all__ = ["one_action_each", "check_disjoint", "check_exclusive"]

_ACTIONS = ("present", "copy", "copyin", "copyout", "create", "no_create")


def one_action_each(construct, values):
    """A variable in several data clauses (``copyin(t) copyout(t)``: OpenACC 3.3 §2.7 does
    not forbid it, and its order may not matter) gets the one clause that does what they
    do together, as ``acc.data`` entering each would: ``present`` when one is ``present``,
    else ``copy`` when one copies in and one out, else the one that allocates."""
    kinds: dict[str, list] = {}
    for kind in _ACTIONS:
        for name in dict.fromkeys(values.get(kind, ())):
            kinds.setdefault(name, []).append(kind)
    for name, given in kinds.items():
        if len(given) == 1 and values[given[0]].count(name) == 1:
            continue
        ins, outs = {"copy", "copyin"} & set(given), {"copy", "copyout"} & set(given)
        one = "present" if "present" in given else "copy" if ins and outs else \
            next(k for k in ("copyin", "copyout", "create", "no_create") if k in given)
        sections = [section for kind, section in values.get("sections", ())
                    if kind in given and section.name == name]
        if sections and (len(sections) != sum(values[k].count(name) for k in given)
                         or any(section != sections[0] for section in sections)):
            raise CompileError(f"{construct}: {name!r} is in {', '.join(given)} with different "
                               f"sections; name it with one section (OpenACC 3.3 §2.7.1)")
        for kind in given:
            values[kind] = tuple(n for n in values[kind] if n != name)
        values[one] = values.get(one, ()) + (name,)
        values["sections"] = tuple(item for item in values.get("sections", ())
                                   if not (item[0] in given and item[1].name == name)) + \
            tuple((one, section) for section in sections[:1])


def check_disjoint(construct, values):
    seen: dict[str, str] = {}
    for kind in DATA_CLAUSES + PRIVATE_CLAUSES:
        for name in values.get(kind, ()):
            if name in seen:
                where = f"twice in {kind}" if seen[name] == kind else \
                    f"in both {seen[name]} and {kind}"
                why = ("a private variable is the construct's own: it takes no other data "
                       "clause (OpenACC 3.3 §2.5.13, 2.5.14)") if kind in PRIVATE_CLAUSES else \
                    ("a deviceptr variable is device memory already: it takes no data "
                     "clause (OpenACC 3.3 §2.7.4)")
                raise CompileError(f"{construct}: {name!r} appears {where}; {why}")
            seen[name] = kind
    rvars = [var for _, var in values.get("reductions", ())]
    for var in rvars:
        if rvars.count(var) > 1:
            raise CompileError(f"{construct}: reduction variable {var!r} given twice")
        if seen.get(var) in PRIVATE_CLAUSES:  # (a data clause may name it too: §2.6.2)
            raise CompileError(f"{construct}: reduction variable {var!r} also appears in "
                               f"{seen[var]}; a reduction variable is private to each "
                               f"thread already (OpenACC 3.3 §2.5.15)")


def check_exclusive(construct, values):
    """At most one clause of each exclusive group (``clause_kinds.EXCLUSIVE``)."""
    groups = EXCLUSIVE.get("routine" if construct == "routine" else "loop", ())
    for group in groups:
        given = [name for name in group if values.get(name) not in (None, False, ())]
        if len(given) > 1:
            rule = "2.15.1: a routine has one level of parallelism" if construct == "routine" \
                else "2.9: " + ("tile sets how many loops the nest takes" if "tile" in group
                                else "the loop's iterations are one or the other")
            raise CompileError(f"{construct}: {' and '.join(given)} may not appear together "
                               f"(OpenACC 3.3 §{rule}); keep one of "
                               f"{', '.join(group)}")
