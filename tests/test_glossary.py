"""docs/glossary.md stays true of the tree (issue 31: one word per concept, written down).

What can be checked mechanically is checked here, so that a rename cannot leave the
glossary stale and a new name cannot quietly reuse a word the glossary gives one meaning:

* every backquoted path in the glossary (``mapping/table.py``, ``pyacc/observe/``) exists;
* every backquoted code name (``PresentTable``, ``plan_spec``, ``Counter.STRUCTURED``,
  ``acc.map_data``, ``ICVS.region_stack``, ``pyacc.mapping``) is defined in the tree:
  a module, a class, a function, a module-level name, a class member (method, class
  attribute, ``__slots__`` entry, ``self.x`` assignment) or a name of the C extensions;
  a dotted name is resolved part by part;
* "plan" is always qualified: no class is named bare ``Plan`` (Python or C), and every
  class whose name ends in one of the glossary's words (``…Plan``, ``…Memo``,
  ``…Ticket``, ``…Record``, ``…Entry``) is named in the glossary.
"""
from __future__ import annotations

import ast
import builtins
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "docs" / "glossary.md"
#: the code directories and the package each is installed as
PACKAGES = {"pyacc": "pyacc", "mapping": "pyacc.mapping", "compiler": "pyacc.compiler"}
#: the glossary's short package names (``acc.map_data``, ``omp.target_data``)
ALIASES = {"acc": "pyacc", "omp": "pyacc.omp"}
#: class-name endings that are glossary words: each such class is written down there
WORDS = ("Plan", "Memo", "Ticket", "Record", "Entry")

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def _spans() -> list[str]:
    return sorted(set(re.findall(r"`([^`\n]+)`", GLOSSARY.read_text())))


def _python_files():
    for folder in PACKAGES:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _c_files():
    """The C sources and the headers they include (``*.c.h`` parts of one translation unit)."""
    for folder in PACKAGES:
        yield from sorted((ROOT / folder).rglob("*.c"))
        yield from sorted((ROOT / folder).rglob("*.h"))


def _module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    parts[0] = PACKAGES[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _members(node: ast.ClassDef) -> set[str]:
    """Methods, class attributes, ``__slots__`` entries and ``self.x`` assignments."""
    found = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(item.name)
        targets = item.targets if isinstance(item, ast.Assign) else \
            [item.target] if isinstance(item, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name):
                found.add(target.id)
                if target.id == "__slots__":
                    found |= {element.value for element in ast.walk(item.value)
                              if isinstance(element, ast.Constant)
                              and isinstance(element.value, str)}
    for inner in ast.walk(node):
        targets = inner.targets if isinstance(inner, ast.Assign) else \
            [inner.target] if isinstance(inner, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            for element in ast.walk(target):
                if isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name) \
                        and element.value.id == "self":
                    found.add(element.attr)
    return found


@cache
def _index():
    """``(modules by last name, module-level names, classes' (members, bases), C names)``."""
    modules: dict[str, list[str]] = {}
    top: dict[str, list[str]] = {}  # module-level name -> the modules that define it
    classes: dict[str, list[tuple[set[str], list[str]]]] = {}
    for path in _python_files():
        name = _module_name(path)
        modules.setdefault(name.rsplit(".", 1)[-1], []).append(name)
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            defined = [node.name] if isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else \
                [t.id for t in node.targets if isinstance(t, ast.Name)] \
                if isinstance(node, ast.Assign) else \
                [node.target.id] if isinstance(node, ast.AnnAssign) and \
                isinstance(node.target, ast.Name) else []
            for item in defined:
                top.setdefault(item, []).append(name)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
                         for base in node.bases]
                classes.setdefault(node.name, []).append((_members(node), bases))
    c_names: set[str] = set()
    for path in _c_files():
        text = path.read_text()
        c_names |= set(re.findall(_NAME, text))
    return modules, top, classes, c_names


@cache
def _spelled() -> set[str]:
    """Name-like string constants of the Python sources: the clauses, kinds and keys the
    code spells (``ompx_hold``)."""
    return {node.value for path in _python_files()
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(_NAME, node.value)}


def _class_has(name: str, member: str, seen=()) -> bool:
    _, _, classes, c_names = _index()
    if name in seen:
        return False
    for members, bases in classes.get(name, ()):
        if member in members or any(_class_has(base, member, seen + (name,)) for base in bases):
            return True
    return False


def _object_has(obj, member: str) -> bool:
    if hasattr(obj, member):
        return True
    cls = obj if isinstance(obj, type) else type(obj)
    return any(_class_has(klass.__name__, member) for klass in cls.__mro__)


def _resolve(head: str):
    """The objects ``head`` may name: modules (by full or last name) and module-level
    objects of the tree (imported from the module that defines them)."""
    modules, top, _, _ = _index()
    names = [ALIASES[head]] if head in ALIASES else \
        [head] if head in ("pyacc",) else modules.get(head, [])
    found = [importlib.import_module(name) for name in names]
    if not found:
        found = [vars(importlib.import_module(name))[head] for name in top.get(head, ())]
    return found


def _problem(span: str) -> str | None:
    """Why ``span`` (a backquoted glossary word) is not true of the tree, or None."""
    modules, top, classes, c_names = _index()
    words = _spelled()
    word = span.removesuffix("()")
    if "/" in word or re.search(r"\.(py|c|h|md)$", word):
        if "…" in word or "*" in word:
            return None  # a pattern of names, not one path
        if "/" not in word:  # a file name every package has (``__init__.py``)
            return None if any((ROOT / folder / word).exists() for folder in PACKAGES) \
                else f"no package has {word}"
        return None if (ROOT / word).exists() else f"no file {word}"
    if not re.fullmatch(rf"{_NAME}(\.{_NAME})*", word):
        return None  # not a code name (a value such as "host", a keyword such as async_=)
    head, *rest = word.split(".")
    if not rest:
        if hasattr(builtins, head) or head in modules or head in top or head in classes \
                or head in c_names or head in words \
                or any(_class_has(name, head) for name in classes):
            return None
        return f"nothing in {', '.join(PACKAGES)} defines {head}"
    if head in classes and not (head in modules or head in ALIASES):
        member = rest[0]
        if not _class_has(head, member):
            return f"class {head} has no {member}"
        return None
    candidates = _resolve(head)
    if not candidates:
        return f"nothing in {', '.join(PACKAGES)} is named {head}"
    for part in rest:
        following = []
        for obj in candidates:
            if _object_has(obj, part):
                if hasattr(obj, part):
                    following.append(getattr(obj, part))
                else:  # an instance attribute, known from the class's source only
                    following.append(None)
        if not following:
            return f"{word}: no {part}"
        candidates = [obj for obj in following if obj is not None] or following
        if candidates == [None]:
            break
    return None


@pytest.mark.parametrize("span", _spans())
def test_every_backquoted_name_in_the_glossary_is_in_the_tree(span):
    problem = _problem(span)
    assert problem is None, f"docs/glossary.md names `{span}`: {problem}; rename it there too"


def test_the_checks_catch_a_stale_name():
    """The checks above are not vacuous: a name, a member and a path that are not there."""
    assert _problem("PresentTable") is None and _problem("DeviceRuntime.hold_structured") is None
    assert _problem("NoSuchClassAnywhere") is not None
    assert _problem("PresentTable.no_such_member") is not None
    assert _problem("mapping/no_such_module.py") is not None
    assert _problem("acc.no_such_routine") is not None
    assert _problem("ICVS.region_stack") is None and _problem("ICVS.no_such_attribute") is not None
    assert _problem("Counter.DYNAMIC") is None and _problem("Counter.NO_SUCH_COUNTER") is not None


def test_no_class_is_named_bare_plan():
    """Five things are plans (glossary, "The five plans"); each class says which."""
    bare = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in _python_files()
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ClassDef) and node.name == "Plan"]
    for path in _c_files():
        text = path.read_text()
        if re.search(r'\.tp_name\s*=\s*"[\w.]*\.Plan"', text) or re.search(r"\}\s*Plan\s*;", text):
            bare.append(str(path.relative_to(ROOT)))
    assert not bare, f"a class named bare Plan: {bare}; name the plan (glossary)"


def test_classes_named_with_a_glossary_word_are_in_the_glossary():
    """A class ending in Plan, Memo, Ticket, Record or Entry is one of the glossary's
    concepts of that word, or a new one: either way the glossary names it."""
    _, _, classes, _ = _index()
    named = set(re.findall(_NAME, " ".join(_spans())))
    missing = sorted(name for name in classes
                     if name.lstrip("_").endswith(WORDS) and name not in named)
    assert not missing, f"docs/glossary.md does not name {missing}"
