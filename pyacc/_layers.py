"""Where ``pyacc.mapping`` and ``pyacc.compiler`` come from.

The repository's layout is fixed (DESIGN.md): ``pyacc/``, ``mapping/`` and ``compiler/``
side by side. Installed, the two layers are subpackages, ``pyacc.mapping`` and
``pyacc.compiler``: a wheel holds them inside ``pyacc/`` (``pyproject.toml``'s
``package-dir``), and an editable install maps them to the folders. Run from a checkout
with the repository on ``sys.path`` and no install, :func:`find_in_checkout` adds a finder
that maps exactly these two names to the folders beside this package, the way the
editable install does.

Invariants: the finder is added only when this package sits in a checkout (``mapping/``
and ``compiler/`` beside it, not inside it), at most once per process, and resolves only
``pyacc.mapping`` and ``pyacc.compiler`` themselves; their submodules are found through
the packages' own ``__path__``.
"""
from __future__ import annotations

import importlib.util
import os
import sys

__all__ = ["find_in_checkout", "folders", "LAYERS"]

#: the layers installed inside ``pyacc``, by subpackage name: their folder in a checkout
LAYERS = ("mapping", "compiler")

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)


class _CheckoutFinder:
    """``pyacc.<layer>`` from the checkout's top-level ``<layer>/`` folder."""

    def find_spec(self, fullname, path=None, target=None):
        head, _, layer = fullname.partition(".")
        if head != "pyacc" or layer not in LAYERS:
            return None
        folder = os.path.join(_ROOT, layer)
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])


def folders() -> tuple[str, ...]:
    """The folders of pyacc's own code: this package's, and each layer's (inside it when
    installed, beside it in a checkout), each ending with a separator."""
    found = [_HERE]
    for layer in LAYERS:
        spec = importlib.util.find_spec(f"pyacc.{layer}")
        found.append(os.path.dirname(os.path.abspath(spec.origin)))
    return tuple(folder + os.sep for folder in found)


def find_in_checkout() -> None:
    """Add the finder when this package sits in a checkout (module docstring)."""
    in_checkout = all(os.path.isfile(os.path.join(_ROOT, layer, "__init__.py")) and
                      not os.path.isdir(os.path.join(_HERE, layer)) for layer in LAYERS)
    if in_checkout and not any(isinstance(f, _CheckoutFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutFinder())
