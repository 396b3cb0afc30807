"""Each package's docstring is its map (issue 31 item 1): every module of the package is
named there as ``name`` (a double-backquoted literal), so a module added without a line
in the map fails here, and a line left for a removed module too. A sub-package has its own
map (``mapping/devices``); its parent's map names it as one line."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["pyacc", "mapping", "mapping/devices", "compiler", "pyacc/observe", "pyacc/omp"]


def _docstring(package: str) -> str:
    return ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text())) or ""


def _modules(package: str) -> set[str]:
    folder = ROOT / package
    found = {path.stem for path in folder.glob("*.py") if path.stem != "__init__"}
    found |= {path.name for path in folder.iterdir()
              if path.is_dir() and (path / "__init__.py").exists()}
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_is_on_its_packages_map(package):
    doc = _docstring(package)
    named = set(re.findall(r"``([A-Za-z_][A-Za-z0-9_]*)``", doc))
    missing = sorted(_modules(package) - named)
    assert not missing, f"{package}/__init__.py's docstring does not name {missing}: add a line each"


@pytest.mark.parametrize("package", PACKAGES)
def test_the_map_names_no_module_that_is_gone(package):
    """Each line of the map's module list (``- ``name``  what it owns``) is a module."""
    doc = _docstring(package)
    listed = set(re.findall(r"^- ``([A-Za-z_][A-Za-z0-9_]*)``", doc, re.MULTILINE))
    gone = sorted(listed - _modules(package))
    assert not gone, f"{package}/__init__.py's map lists {gone}, which are not modules there"
