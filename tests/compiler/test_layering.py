"""compiler/ never imports mapping/ or pyacc/ (DESIGN.md, the three layers)."""
from __future__ import annotations

import ast
from pathlib import Path

COMPILER = Path(__file__).resolve().parents[2] / "compiler"


def test_compiler_imports_neither_mapping_nor_pyacc():
    for path in COMPILER.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            for name in names:
                assert name.split(".")[0] not in ("mapping", "pyacc"), (path, name)
