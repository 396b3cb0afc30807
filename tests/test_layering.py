"""The three layers of DESIGN.md: pyacc joins compiler and mapping; compiler never imports
mapping; mapping imports neither (nor the surface). The layers are installed inside pyacc
(``pyacc.mapping``, ``pyacc.compiler``), so each layer imports its own modules relatively
and nothing of ``pyacc`` by absolute name: checked on their source. A fresh interpreter
checks that ``import pyacc`` joins both and never imports a top-level ``mapping`` or
``compiler`` (a user's file of that name beside a script must not be taken for them).
Inside mapping, the room of the devices (``mapping/devices``) keeps its levels: the rule
is stated in ``mapping/devices/__init__.py`` and checked on the source below."""

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


# == the room of the devices (mapping/devices/__init__.py states the rule) =====================
ROOM = ROOT / "mapping" / "devices"
#: what the room may import from ``mapping``: what every level shares
ROOM_FLOOR = {"errors", "events", "_probe", "queue_protocol", "queues", "inline"}
DEVICES = {"base", "host", "emulated", "memcheck", "cuda"}
HELPERS = {"cuda_memory", "cuda_transfers", "cuda_staging", "cuda_queues", "cuda_pins", "faults"}
BACKENDS = {"cuda_backend", "cuda_fake"}
LEAVES = {"common", "cuda_layout"}
#: the modules of ``mapping`` (outside the room) that may import the room, and what
OWNERS = {"__init__": {"base", "host", "emulated"}}


def _relative_imports(path: Path):
    """``(level, module)`` of each relative import of ``path``: ``from ..errors import x`` is
    ``(2, "errors")``; ``from . import _probe`` is ``(1, "_probe")``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.module:
                yield node.level, node.module
            else:
                yield from ((node.level, alias.name) for alias in node.names)


def _room_imports(name: str):
    """What the room's module ``name`` imports: ``("room", module)`` or ``("mapping", module)``."""
    for level, module in _relative_imports(ROOM / f"{name}.py"):
        yield ("room" if level == 1 else "mapping"), module.split(".")[0]


def test_the_rooms_levels_name_every_module():
    modules = {path.stem for path in ROOM.glob("*.py")} - {"__init__"}
    assert modules == DEVICES | HELPERS | BACKENDS | LEAVES


def test_the_room_imports_only_the_floor_of_mapping():
    """Never the table side (``table``, ``entry``, ``plan``, ``commit``, ``runtime``...)."""
    found = sorted((name, module) for name in DEVICES | HELPERS | BACKENDS | LEAVES
                   for where, module in _room_imports(name)
                   if where == "mapping" and module not in ROOM_FLOOR)
    assert found == []


@pytest.mark.parametrize("group, allowed", [
    (HELPERS, HELPERS | BACKENDS | LEAVES),  # never a device module: what they need is handed down
    (BACKENDS, BACKENDS | LEAVES),           # no device, no helper
    (LEAVES, set()),                         # nothing of the room
], ids=["helpers", "backends", "leaves"])
def test_imports_inside_the_room_go_down(group, allowed):
    found = sorted((name, module) for name in group for where, module in _room_imports(name)
                   if where == "room" and module not in allowed)
    assert found == []


def test_outside_the_room_only_the_owners_import_devices_and_the_rest_only_the_protocol():
    """The table side knows devices through the protocol (``devices.base``: ``Device``,
    ``emit``); only the package's ``__init__`` names device types (it re-exports them)."""
    found = []
    for path in sorted((ROOT / "mapping").glob("*.py")):
        allowed = OWNERS.get(path.stem, {"base"})
        for level, module in _relative_imports(path):
            parts = module.split(".")
            if level == 1 and parts[0] == "devices" and (len(parts) < 2 or parts[1] not in allowed):
                found.append((path.stem, module))
    assert found == []
