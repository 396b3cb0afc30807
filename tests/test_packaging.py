"""What ``pip install .`` (a wheel, not the editable install CI uses) puts in place: every
package folder of the three layers is listed in ``pyproject.toml`` (a folder left out is
missing from the wheel, and ``import pyacc`` fails there: pyacc.observe and pyacc.omp
were; a sub-package of a layer, ``pyacc.mapping.devices``, comes from its folder inside
the layer's)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")


def test_every_package_folder_is_in_the_wheel():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {str(init.parent.relative_to(ROOT)) for top in ("pyacc", "mapping", "compiler")
               for init in (ROOT / top).rglob("__init__.py")}
    listed = {_folder(name, config.get("package-dir", {})) for name in config["packages"]}
    assert folders <= listed, f"package folders missing from pyproject.toml: {sorted(folders - listed)}"


def _folder(package: str, directories: dict) -> str:
    """Where setuptools takes ``package`` from: its own ``package-dir`` entry, else the one
    of its nearest listed parent with the rest of its name (``pyacc.mapping.devices`` →
    ``mapping/devices``), else its dotted name as a path."""
    parts = package.split(".")
    for end in range(len(parts), 0, -1):
        parent = ".".join(parts[:end])
        if parent in directories:
            return "/".join([directories[parent], *parts[end:]])
    return package.replace(".", "/")
