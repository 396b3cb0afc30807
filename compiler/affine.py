"""Integer polynomials of loop indices and symbols: the arithmetic of subscripts.

Owns :class:`Poly` (a polynomial with integer coefficients over names, read from a
subscript's AST by :func:`poly_of`) and :class:`Facts` (what is known of the names in a
loop nest: the range of each loop index, which symbols are sizes and so never
negative), with :meth:`Facts.prove_nonneg`, the one question dependence analysis asks:
is this polynomial ≥ 0 for every iteration?

Invariants:
    * A :class:`Poly` is exact: it stands for the subscript's value under Python's
      integer arithmetic (``+``, ``-``, ``*`` by anything, no division), or the reader
      gives up (None). Symbols are variable names, or the source of a size read such as
      ``x.shape[0]`` / ``len(x)`` (valid Python, so a condition can be emitted as is).
    * :meth:`Facts.prove_nonneg` answers True (proved), a condition over symbols that
      are defined before the nest (to check at run time), or False (unknown); it never
      answers True for a polynomial that can be negative.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

__all__ = ["Poly", "poly_of", "size_symbol", "Facts"]


class Poly:
    """``{monomial: coefficient}`` where a monomial is a sorted tuple of names (``()``
    for the constant)."""

    __slots__ = ("terms",)

    def __init__(self, terms=None):
        self.terms = {m: c for m, c in (terms or {}).items() if c}

    @classmethod
    def const(cls, value: int) -> "Poly":
        return cls({(): value})

    @classmethod
    def name(cls, name: str) -> "Poly":
        return cls({(name,): 1})

    def __add__(self, other):
        terms = dict(self.terms)
        for m, c in other.terms.items():
            terms[m] = terms.get(m, 0) + c
        return Poly(terms)

    def __neg__(self):
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other):
        return self + (-other)

    def __mul__(self, other):
        terms: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = tuple(sorted(m1 + m2))
                terms[m] = terms.get(m, 0) + c1 * c2
        return Poly(terms)

    def __eq__(self, other):
        return isinstance(other, Poly) and self.terms == other.terms

    def __hash__(self):
        return hash(frozenset(self.terms.items()))

    def names(self) -> set:
        return {n for m in self.terms for n in m}

    def constant(self) -> int | None:
        """The value when the polynomial has no names, else None."""
        if all(m == () for m in self.terms):
            return self.terms.get((), 0)
        return None

    def coefficient(self, name: str) -> "Poly":
        """The factor multiplying ``name`` (terms without it dropped): for ``i*n + 2*i +
        j`` and ``i``, ``n + 2``. Terms with ``name`` squared are not linear: None."""
        terms = {}
        for m, c in self.terms.items():
            if m.count(name) > 1:
                return None
            if name in m:
                rest = list(m)
                rest.remove(name)
                terms[tuple(rest)] = c
        return Poly(terms)

    def without(self, names) -> "Poly":
        """The terms that contain none of ``names``."""
        return Poly({m: c for m, c in self.terms.items() if not set(m) & set(names)})

    def substitute(self, name: str, value: "Poly") -> "Poly":
        result = Poly()
        for m, c in self.terms.items():
            term = Poly({(): c})
            for n in m:
                term = term * (value if n == name else Poly.name(n))
            result = result + term
        return result

    def source(self) -> str:
        """Python source of the polynomial (``n - k - 1``; symbols are valid
        expressions)."""
        text = ""
        for m, c in sorted(self.terms.items(), key=lambda item: (item[0] == (), item[0])):
            factors = "*".join(n if n.isidentifier() else f"({n})" for n in m)
            magnitude = str(abs(c)) if not factors else \
                (factors if abs(c) == 1 else f"{abs(c)}*{factors}")
            if not text:
                text = magnitude if c > 0 else f"-{magnitude}"
            else:
                text += f" + {magnitude}" if c > 0 else f" - {magnitude}"
        return text or "0"

    def __repr__(self):
        return f"Poly({self.source()})"


def poly_of(node: ast.AST, env: dict | None = None) -> Poly | None:
    """The polynomial an index expression computes, or None when it is not one.
    ``env`` maps local names to the polynomials they were assigned (substituted)."""
    env = env or {}
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Poly.const(node.value)
    if isinstance(node, ast.Name):
        return env.get(node.id) or Poly.name(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = poly_of(node.operand, env)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        left, right = poly_of(node.left, env), poly_of(node.right, env)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        return left * right
    size = size_symbol(node)
    if size is not None:
        return Poly.name(size)
    return None


def size_symbol(node) -> str | None:
    """``"x.shape[0]"`` / ``"len(x)"`` / ``"x.size"`` for a read of an array's size."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and \
            node.value.attr == "shape" and isinstance(node.value.value, ast.Name) and \
            isinstance(node.slice, ast.Constant) and type(node.slice.value) is int:
        return f"{node.value.value.id}.shape[{node.slice.value}]"
    if isinstance(node, ast.Attribute) and node.attr == "size" and \
            isinstance(node.value, ast.Name):
        return f"{node.value.id}.size"
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "len" and \
            len(node.args) == 1 and isinstance(node.args[0], ast.Name):
        return f"len({node.args[0].id})"
    return None


@dataclass
class Facts:
    """What is known of the names of a loop nest.

    Attributes:
        bounds: ``{index: (lowest, highest)}`` for loop indices whose loop runs over
            ``range(start, stop)`` with a positive step (``stop - 1`` is the highest).
        nonneg: Symbols never negative (sizes, names assigned a size).
        invariant: Symbols whose value is fixed for the whole nest (defined before it),
            which a run-time condition may read.
        strides: Sums the subscripts multiply by (``n + 4`` in ``a[k*(n + 4) + i]``):
            strides a flat subscript may be split at (``dependence._delinearized``).
    """

    bounds: dict = field(default_factory=dict)
    nonneg: set = field(default_factory=set)
    invariant: set = field(default_factory=set)
    strides: list = field(default_factory=list)

    def primed(self) -> "Facts":
        """These facts extended to a second iteration whose indices are named ``i'``."""
        bounds = dict(self.bounds)
        for name, (low, high) in self.bounds.items():
            bounds[name + "'"] = (_prime_all(low, self.bounds), _prime_all(high, self.bounds))
        return Facts(bounds, set(self.nonneg), set(self.invariant))

    def lowest(self, poly: Poly, depth: int = 0) -> Poly | None:
        """A polynomial over symbols only that is ≤ ``poly`` for every iteration, or None
        (loop indices replaced by the bound that minimises each term)."""
        if depth > 8:
            return None
        for name in sorted(poly.names()):
            if name not in self.bounds:
                continue
            low, high = self.bounds[name]
            result = Poly()
            for m, c in poly.terms.items():
                term = Poly({m: c})
                if name in m:
                    sign = self._sign(term, name)
                    if sign is None:
                        return None
                    term = term.substitute(name, low if sign > 0 else high)
                result = result + term
            return self.lowest(result, depth + 1)
        return poly

    def _sign(self, term: Poly, name: str) -> int | None:
        """Sign of a one-term polynomial's factor other than ``name``, when known."""
        ((m, c),) = term.terms.items()
        others = [n for n in m if n != name]
        if any(n not in self.nonneg for n in others):
            return None
        return 1 if c > 0 else -1

    def prove_nonneg(self, poly: Poly):
        """True when ``poly`` ≥ 0 for every iteration; a :class:`Poly` over invariant
        symbols that must be ≥ 0 at run time for that to hold; False when unknown."""
        low = self.lowest(poly)
        if low is None:
            return False
        constant = low.constant()
        if constant is not None:
            return constant >= 0
        if all(c > 0 or m == () for m, c in low.terms.items()) and \
                low.terms.get((), 0) >= 0 and \
                all(n in self.nonneg for n in low.names()):
            return True
        if low.names() <= self.invariant:
            return low
        return False


def _prime_all(poly: Poly, bounds: dict) -> Poly:
    for name in sorted(poly.names() & set(bounds)):
        poly = poly.substitute(name, Poly.name(name + "'"))
    return poly
