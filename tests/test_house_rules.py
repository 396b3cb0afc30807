"""The house rules of the three packages (issue 31), kept true: no source file over 600
lines (Python and C, the C parts of one translation unit included), and every import made
inside a function says why (a comment on its line or the line above: a cycle it breaks,
a heavy or optional module it loads only when needed)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pyacc", "mapping", "compiler")
MOST_LINES = 600


def _sources(*patterns):
    for folder in PACKAGES:
        for pattern in patterns:
            yield from sorted((ROOT / folder).rglob(pattern))


def test_no_source_file_of_the_three_packages_is_over_600_lines():
    long = {str(path.relative_to(ROOT)): count for path in _sources("*.py", "*.c", "*.h")
            if (count := len(path.read_text().splitlines())) > MOST_LINES}
    assert long == {}


def _function_level_imports(path: Path):
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node.lineno, lines[node.lineno - 1], lines[node.lineno - 2] if node.lineno > 1 else ""


def test_every_import_inside_a_function_says_why():
    silent = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
              for path in _sources("*.py")
              for number, line, above in _function_level_imports(path)
              if "#" not in line and not above.strip().startswith("#")]
    assert silent == []


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    import os\n", 1),
    ("def f():\n    import os  # only here: heavy\n", 0),
    ("def f():\n    # the cycle: a imports b\n    from . import b\n", 0),
    ("import os\n", 0),
])
def test_the_import_rule_sees_what_it_should(tmp_path, source, expected):
    path = tmp_path / "m.py"
    path.write_text(source)
    found = [line for _, line, above in _function_level_imports(path)
             if "#" not in line and not above.strip().startswith("#")]
    assert len(found) == expected
