"""What a compute call reads besides its arguments, at each call.

Owns the reading of a kernel's free parameters (global and closure values, modules'
attributes: :func:`free_reader`, from :func:`free_sources`), the launch's ``(enabled,
async, wait)`` from its clauses (:func:`clause_values`, :func:`truth_of`; evaluated with
the call's arguments: :func:`evaluate_clauses`), an ``if`` expression made a function of
the arguments (:func:`condition_of`, :func:`condition_holds`), which constant ``async`` and
``wait`` clauses let a call be direct (:func:`constant_queues`), and the parameters' names
and defaults by which the express lane binds a call's arguments (:func:`call_binding`).
The environment that decides a kernel is read at each call by ``compiler.kernel_env``.
"""

from __future__ import annotations

import builtins
import collections
import sys
import types

from pyacc import compiler
from pyacc.compiler.clause_text import EXPR_BUILTINS
from pyacc.compiler.free_names import chain_source
from pyacc.mapping import InvalidArgumentError

from ._clauses import async_noval, async_sync

__all__ = ["free_reader", "free_sources", "clause_values", "constant_queues", "evaluate_clauses",
           "condition_of", "condition_holds", "call_binding", "truth_of"]


def truth_of(value, where: str) -> bool:
    """An ``if`` clause's value as a truth value, as C's ``if(expr)`` takes one (OpenACC
    3.3 §2.5.6): a bool or a number; ``InvalidArgumentError`` for a value without one (an
    array of several elements: NumPy's own error would not name the clause)."""
    try:
        return bool(value)
    except Exception as error:  # noqa: BLE001 - any __bool__ may raise
        raise InvalidArgumentError(
            f"{where}: the if clause's value ({type(value).__name__}) has no truth value "
            f"({type(error).__name__}: {error}); give a bool or a number (e.g. "
            "if_=x.size > 1000)") from None


def clause_values(clauses, where: str = "a compute region"):
    """``(enabled, async, wait)`` of a launch from its (evaluated) clauses."""
    enabled = True if clauses.if_ is None else truth_of(clauses.if_, where)
    async_clause = async_noval if isinstance(clauses.async_, str) and clauses.async_ == compiler.ASYNC_NOVAL \
        else clauses.async_  # (any other value is checked with the queue: InvalidAsyncError)
    wait_clause = None if clauses.wait in (None, False) else ([] if clauses.wait is True else clauses.wait)
    return enabled, async_clause, wait_clause


def evaluate_clauses(info, args, shape: bool = True) -> tuple:
    """A call's clause values written as expressions, evaluated with its arguments
    (parameters by name, then the function's globals; API.md §6.1): ``(enabled, async,
    wait, clauses)``, the last the evaluated clauses; ``(enabled, async, wait)`` alone
    when ``shape`` is false — a region whose ``if`` expression is its only one
    (:func:`condition_of`): the kernel and the launch shape are then those of its direct
    calls.

    Raises:
        InvalidArgumentError: an expression raised, a count is not a positive int, or the
            if clause's value has no truth value.
    """
    namespace = collections.ChainMap(dict(zip(info.params, args)), info.func.__globals__)
    try:
        clauses = info.clauses.evaluate(namespace)
    except Exception as error:  # noqa: BLE001 - a user expression may raise anything
        texts = ", ".join(f"{name}({expr.text})" for name, expr in info.clauses.expressions().items())
        raise InvalidArgumentError(
            f"{info.where}: a clause value is not valid for this call "
            f"({texts}): {type(error).__name__}: {error}") from None
    values = clause_values(clauses, info.where)
    return values + (clauses,) if shape else values


def condition_of(info):
    """For a region whose only clause value written as an expression is its ``if``
    clause (``if_="n > 1000"``, OpenACC 3.3 §2.5.6): that expression as a function of the
    call's arguments (compiled once; its names the parameters, then the function's
    globals read at each call, as :func:`evaluate_clauses` reads them), which a direct
    call asks first (:func:`condition_holds`; the express lane, ``FastCall._condition``);
    else None."""
    expressions = info.clauses.expressions()
    if set(expressions) != {"if_"} or any(
            name not in info.params and name in _OTHER_BUILTINS for name in expressions["if_"].names):
        return None  # (the clause sees only EXPR_BUILTINS; a function sees every builtin)
    source = f"def condition({', '.join(info.params)}):\n    return (\n{expressions['if_'].text}\n)\n"
    module = compile(source, f"<the if clause of {info.where}>", "exec")
    code = next(const for const in module.co_consts if isinstance(const, types.CodeType))
    return types.FunctionType(code, info.func.__globals__, "condition")


_OTHER_BUILTINS = frozenset(vars(builtins)) - frozenset(EXPR_BUILTINS)  # what a clause may not read


def condition_holds(condition, args) -> bool:
    """Whether ``condition`` (:func:`condition_of`) is true for a call with ``args``;
    False when it raises an ``Exception``: the call's full path then evaluates the clause
    again, and raises what it raises."""
    try:
        return bool(condition(*args))
    except Exception:  # noqa: BLE001 - the full path reports it
        return False


def constant_queues(async_clause, wait_clause):
    """What a direct call of a region with these constant clause values runs on and
    waits for first: ``(async, waits)`` — its ``async`` clause (None: synchronous; a
    queue ≥ 0 or ``async_noval``, the thread's default queue at each call) and the queues
    of its ``wait`` clause as a tuple (empty: every queue; None: no ``wait`` clause;
    OpenACC 3.3 §2.16.1, §2.16.2) — or None when its calls cannot be direct: a value
    the full path resolves, or rejects, at each call (a negative number other than
    ``async_noval`` and ``async_sync``, not an int; a wait for a queue number beyond a C long's, which the express
    lane does not read)."""
    if type(async_clause) is int and async_clause == async_sync:  # synchronous (§2.16.1)
        async_clause = None
    if async_clause is not None and not (type(async_clause) is int and
                                         (async_clause >= 0 or async_clause == async_noval)):
        return None
    if wait_clause is None:
        return async_clause, None
    waits = tuple(wait_clause) if isinstance(wait_clause, (list, tuple)) else (wait_clause,)
    return (async_clause, waits) if all(type(n) is int and 0 <= n <= sys.maxsize for n in waits) \
        else None


def call_binding(signature):
    """``(names, defaults)``: the parameters of a region's function (``signature``, an
    ``inspect.Signature``) and the last ones' defaults, by which the express lane binds a
    call's arguments given by name or left out, as ``Signature.bind`` does (``FastCall``'s
    ``_binding``, ``pyacc/_call_binding.c.h``); None when a parameter is not
    positional-or-keyword (such calls are the Python launcher's, which binds them)."""
    params = signature.parameters.values()
    if any(param.kind is not param.POSITIONAL_OR_KEYWORD for param in params):
        return None
    names = tuple(sys.intern(param.name) for param in params)
    return names, tuple(param.default for param in params if param.default is not param.empty)


def free_sources(info) -> tuple:
    """Where each of ``info.free_params`` is found: ``(cell, None)`` for a closure name,
    ``(the module's dict, name)`` for a module-level one or a module's attribute (an empty
    dict when its module is gone: the call's NameError), a routine's array in that
    routine's scope (``info.owners``); what :func:`free_reader` reads,
    and what the express lane reads in C (``FastCall._free``, ``pyacc/_free_values.c.h``)."""
    return tuple(chain_source(info.func, info.chains[name]) or ({}, name)
                 if name in info.chains else _name_source(info.owners.get(name, info.func), name)
                 for name in info.free_params)


def _name_source(func, name) -> tuple:
    """Where free name ``name`` of ``func`` is read: its closure cell, else its module."""
    cells = dict(zip(func.__code__.co_freevars, func.__closure__ or ()))
    return (cells[name], None) if name in cells else (func.__globals__, name)


def free_reader(info):
    """A function returning the current values of ``info.free_params`` (global and
    closure variables, read at each call), or None when the kernel has none."""
    if not info.free_params:
        return None
    sources = free_sources(info)

    def read():
        try:
            return [where.cell_contents if name is None else where[name] for where, name in sources]
        except (KeyError, ValueError):  # deleted since: a clear NameError
            return info.free_values()

    return read
