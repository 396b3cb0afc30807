"""The three layers of DESIGN.md: pyacc imports compiler and mapping; compiler never
imports mapping; mapping imports neither (nor pyacc). Checked in fresh interpreters."""

import subprocess
import sys

import pytest


def _modules_after_import(module):
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


def _ours(modules, package):
    return any(name == package or name.startswith(package + ".") for name in modules)


@pytest.mark.parametrize("module", ["mapping", "mapping.runtime", "mapping.emulated"])
def test_mapping_imports_neither_pyacc_nor_compiler(module):
    modules = _modules_after_import(module)
    assert not _ours(modules, "pyacc") and not _ours(modules, "compiler")


@pytest.mark.parametrize("module", ["compiler"])
def test_compiler_never_imports_mapping_or_pyacc(module):
    modules = _modules_after_import(module)
    assert not _ours(modules, "mapping") and not _ours(modules, "pyacc")


def test_pyacc_joins_both_layers():
    modules = _modules_after_import("pyacc")
    assert _ours(modules, "mapping") and _ours(modules, "compiler")
