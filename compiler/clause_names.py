"""The names a compute construct's clauses give, against the function they decorate.

Owns :func:`check_clause_names` (each data, private and reduction clause names a
parameter, a module-level or closure name the function reads — checked again at the
first call, ``analysis.bind_free_names`` — or a local, as each clause allows), and the two
adjustments of a construct's clauses to what the function is:
:func:`without_copied_results` (``copy`` of a local that a loop reduces is the
reduction's result already: dropped) and :func:`present_routine_arrays` (the arrays the
routines it calls read, ``free_names.routine_arrays``, are ``present``).

Invariants: a refused name raises ``CompileError`` at the clause (``FunctionSource.
clause_error``), listing the function's own parameters; the adjusted clauses are new
values (``ComputeClauses`` is frozen).
"""
from __future__ import annotations

import ast
import dataclasses

from .clause_kinds import omp_spelling
from .clauses import ComputeClauses

__all__ = ["check_clause_names", "without_copied_results", "present_routine_arrays"]


def present_routine_arrays(clauses: ComputeClauses, owners: dict) -> ComputeClauses:
    """``clauses`` with ``present`` of the routines' arrays no clause names: OpenACC 3.3
    §2.15.1 has them declared (``acc.declare``), so on the device when a kernel runs."""
    named = clauses.data_names()
    absent = tuple(name for name in owners if name not in named)
    return dataclasses.replace(clauses, present=clauses.present + absent) if absent else clauses


def without_copied_results(source, clauses, scope, params, plan) -> ComputeClauses:
    """``clauses`` without ``copy`` of the function's locals, each a reduction variable
    of the construct or of a loop in it: a reduction's result is ``copy`` already (OpenACC
    3.3 §2.9.11, C's ``parallel copy(sum)`` around ``loop reduction(+:sum)``; OpenMP 5.2
    §5.5.8's ``map(tofrom: sum) reduction(+:sum)``, BabelStream's dot), and in Python the
    local the function returns is the host's variable."""
    local = [n for n in clauses.copy if n in scope.local and n not in params]
    if not local:
        return clauses
    results = {var for _, var in clauses.reductions + plan.reductions()}
    for name in local:
        if name not in results:
            raise source.clause_error(
                f"copy({name}) names a local variable of the function that no loop reduces: "
                f"a local is the kernel's own; name a parameter or a module-level array, or "
                f"declare the reduction that computes {name!r}")
    return dataclasses.replace(clauses, copy=tuple(n for n in clauses.copy if n not in local))


def check_clause_names(source, clauses, scope, user_params):
    """Refuse a clause naming what the function has not (module docstring)."""
    omp = hasattr(clauses.construct, "omp")

    def spelled(kind, name):
        return omp_spelling(kind, name) if omp else f"{kind}({name})"

    params, local = set(source.params), scope.local
    free = {n.id for n in ast.walk(source.tree)
            if isinstance(n, ast.Name) and n.id not in local}
    for name, kind in clauses.data_names().items():
        if "." in name:  # a member (OpenACC 3.3 §2.7.1): of a parameter only
            root = name.split(".")[0]
            if root not in params:
                raise source.clause_error(f"{spelled(kind, name)} names a member of {root!r}, which is "
                                          f"not a parameter (parameters: "
                                          f"{', '.join(source.params) or 'none'}); members of "
                                          f"parameters only: pass {root} as an argument")
            continue
        if name in scope.local and kind == "copy":
            continue  # a reduction's result (``without_copied_results``)
        if name not in params and name not in free:  # (a free name: checked at first call)
            raise source.clause_error(f"{spelled(kind, name)} does not name a parameter or a "
                                      f"module-level array the function reads "
                                      f"(parameters: {', '.join(user_params) or 'none'})")
    for kind in ("private", "firstprivate"):
        for name in getattr(clauses, kind):
            if name not in local:
                raise source.clause_error(
                    f"{kind}({name}) does not name a parameter or a local variable: a "
                    f"private array is made in the function before the loop, as C declares "
                    f"it ({name} = np.empty(4); a scalar: {name} = 0.0)")
    for op, var in clauses.reductions:
        if var not in local:
            raise source.clause_error(f"reduction({op}:{var}): {var!r} is not a variable of "
                                      f"the function")
