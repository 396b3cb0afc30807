"""compiler/markers.py: plain-Python meanings of the markers."""
from __future__ import annotations

import ast
import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc.compiler import CompileError, markers


def test_loop_returns_its_iterable():
    r = range(3)
    assert markers.loop(r, gang=True, reduction="+:s") is r


def test_loop_checks_clauses():
    with pytest.raises(CompileError):
        markers.loop(range(3), bogus=True)


def test_atomics_return_old_value():
    a = np.array([5, 6, 0b1100], dtype=np.int64)
    assert markers.atomic.add(a, 0, 2) == 5 and a[0] == 7
    assert markers.atomic.sub(a, 0, 1) == 7 and a[0] == 6
    assert markers.atomic.max(a, 1, 9) == 6 and a[1] == 9
    assert markers.atomic.min(a, 1, 3) == 9 and a[1] == 3
    markers.atomic.and_(a, 2, 0b0110)
    markers.atomic.or_(a, 2, 0b0001)
    markers.atomic.xor(a, 2, 0b0011)
    assert a[2] == 0b0110


def test_plain_python_atomics_are_exact_under_threads():
    counts = np.zeros(2, dtype=np.int64)

    def work():
        for i in range(2000):
            markers.atomic.add(counts, i % 2, 1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts.tolist() == [4000, 4000]


@pytest.mark.parametrize("query, where, expected", [
    ("host", "host", True), ("multicore", "host", True), ("not_host", "host", False),
    ("emulated", "emulated", True), ("not_host", "emulated", True),
    ("host", "emulated", False), ("cuda", "host", False), ("nvidia", "cuda", True),
    ("HOST", "multicore", True),
])
def test_on_device_value(query, where, expected):
    assert markers.on_device_value(query, where) is expected


def test_on_device_follows_device_scope():
    assert markers.on_device("host")
    with markers.device_scope("emulated"):
        assert markers.on_device("emulated") and markers.on_device("not_host")
    assert markers.on_device("host")


def test_unknown_device_type():
    with pytest.raises(CompileError, match="unknown device type"):
        markers.on_device("tpu")


@acc.parallel
def nested_markers(a):
    for i in acc.loop(range(a.shape[0]), gang=True):
        for j in acc.loop(range(a.shape[1]), vector=True):
            a[i, j] = i + j


@acc.parallel
def nested_after_a_statement(a):
    for i in acc.loop(range(a.shape[0]), gang=True):
        a[i, 0] = 0.0
        for j in acc.loop(range(1, a.shape[1]), vector=True):
            a[i, j] = i + j


def test_explain_names_an_inner_marked_loop_and_its_nest():
    """Compiler feedback (API.md §6.1): an acc.loop inside a parallel nest runs within
    each iteration of the nest on CPUs, and tightly nested is collapsed with it on a GPU
    (``NestPlan.widen``); acc.explain says which, and no PerformanceWarning."""
    text = acc.explain(nested_markers)
    assert "parallel loop, gang" in text
    assert "inner loop (vector): collapsed with the parallel loop at line 75" in text
    text = acc.explain(nested_after_a_statement)
    assert "inner loop (vector): each iteration of the parallel loop at line" in text


@acc.kernels_loop
def smooths_with_a_cache_hint(a, b):
    for i in range(1, a.shape[0] - 1):
        acc.cache(a[i - 1:i + 2])
        b[i] = (a[i - 1] + a[i] + a[i + 1]) / 3.0


@acc.routine
def _doubles_with_a_cache_hint(a, i):
    acc.cache(a[i])
    return 2.0 * a[i]


@acc.parallel_loop
def doubles_through_a_routine(a, b):
    for i in range(a.shape[0]):
        b[i] = _doubles_with_a_cache_hint(a, i)


def test_the_cache_directive_is_a_hint_with_no_effect(device):
    """OpenACC 3.3 §2.10: ``acc.cache(a[i-1:i+2])`` at the top of a loop body (in a
    kernel or a routine) is a hint: the loop computes the same, stays parallel (the
    hint's sections are no array uses for the dependence tests), and ``acc.cache`` in
    plain Python does nothing (before: no spelling, the line had to go)."""
    a, b = np.arange(10.0), np.zeros(10)
    smooths_with_a_cache_hint(a, b)
    np.testing.assert_allclose(b[1:-1], np.arange(1.0, 9.0))
    info = smooths_with_a_cache_hint.info
    assert "acc.cache" not in ast.unparse(info.source.tree)
    assert "parallel loop" in acc.explain(smooths_with_a_cache_hint)
    doubles_through_a_routine(a, b)
    np.testing.assert_array_equal(b, 2.0 * a)
    assert acc.cache(a, a[1:3]) is None and markers.cache is acc.cache
