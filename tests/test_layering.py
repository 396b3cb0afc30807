"""The three layers of DESIGN.md: pyacc joins compiler and mapping; compiler never imports
mapping; mapping imports neither (nor the surface). The layers are installed inside pyacc
(``pyacc.mapping``, ``pyacc.compiler``), so each layer imports its own modules relatively
and nothing of ``pyacc`` by absolute name: checked on their source. A fresh interpreter
checks that ``import pyacc`` joins both and never imports a top-level ``mapping`` or
``compiler`` (a user's file of that name beside a script must not be taken for them)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _absolute_imports(folder: Path):
    """``(file, module)`` of every absolute import in the layer's source."""
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                yield from ((path, alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                yield path, node.module or ""


def _top(module: str) -> str:
    return module.split(".")[0]


@pytest.mark.parametrize("layer", ["mapping", "compiler"])
def test_a_layer_imports_nothing_of_pyacc_by_absolute_name(layer):
    """Within ``pyacc.mapping`` and ``pyacc.compiler`` every import of pyacc's own code is
    relative: mapping never reaches compiler or the surface, compiler never reaches
    mapping or the surface (the relative imports cannot leave their package)."""
    found = [(str(path.relative_to(ROOT)), module) for path, module in _absolute_imports(ROOT / layer)
             if _top(module) in ("pyacc", "mapping", "compiler")]
    assert found == []


def _modules_after_import(module, cwd):
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=cwd)
    return set(result.stdout.split())


def test_pyacc_joins_both_layers_and_no_top_level_namesake(tmp_path):
    for name in ("mapping", "compiler"):  # a user's files that would shadow the old names
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('the user file {name}.py was imported')\n")
    modules = _modules_after_import("pyacc", tmp_path)
    assert {"pyacc.mapping", "pyacc.compiler"} <= modules
    assert not {"mapping", "compiler"} & modules
