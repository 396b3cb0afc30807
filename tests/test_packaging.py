"""What ``pip install .`` (a wheel, not the editable install CI uses) puts in place: every
package folder of the three layers is listed in ``pyproject.toml`` (a folder left out is
missing from the wheel, and ``import pyacc`` fails there: pyacc.observe and pyacc.omp
were)."""
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
    directories = config.get("package-dir", {})
    listed = {directories.get(name, name.replace(".", "/")) for name in config["packages"]}
    assert folders <= listed, f"package folders missing from pyproject.toml: {sorted(folders - listed)}"
