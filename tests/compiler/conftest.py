"""Shared fixtures for the compiler tests: a private kernel cache and a runner."""
from __future__ import annotations

import os

import pytest

from pyacc.compiler import analyze, get_kernel, parse_clauses


@pytest.fixture(scope="session", autouse=True)
def kernel_cache(tmp_path_factory):
    """Every test process writes generated kernels into its own cache folder."""
    path = tmp_path_factory.mktemp("pyacc-cache")
    old = os.environ.get("PYACC_CACHE_DIR")
    os.environ["PYACC_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("PYACC_CACHE_DIR", None)
    else:
        os.environ["PYACC_CACHE_DIR"] = old


_infos = {}


def compile_and_run(func, construct, *args, clause_string=None, target="cpu",
                    device_type="host", **clauses):
    """Analyse (memoised per function and clauses), compile and run a kernel."""
    key = (func, construct, clause_string, repr(sorted(clauses.items(), key=str)))
    info = _infos.get(key)
    if info is None:
        info = _infos[key] = analyze(func, parse_clauses(construct, clause_string,
                                                         **clauses))
    kernel = get_kernel(info, args, target=target, device_type=device_type)
    return kernel(*args)


@pytest.fixture
def run():
    """``run(func, construct, *args, target=..., **clauses)``."""
    return compile_and_run
