"""Serial twins of CPU nests (``compiler.crossover``): below a trip count a straight-line
nest runs on one thread, with exactly the results of its parallel form.

OpenACC 3.3 §2.5.1 leaves the mapping of iterations to gangs, workers and vector lanes to
the implementation; API.md §6 promises the results of the loop as written, whatever the
schedule. ``PYACC_SERIAL_BELOW=n`` sets the crossover (0: never serial).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from pyacc.compiler import caches
from pyacc.compiler import analyze, crossover, get_kernel, parse_clauses


def elementwise(a, b, c):
    for i in range(a.shape[0]):
        c[i] = a[i] + 2.0 * b[i]


def chunked_sum(x, scale):
    s = 0.0
    for i in range(x.shape[0]):
        t = x[i] * scale
        s = t * t + s  # not the form Numba's prange reduces itself: the chunked form
    return s


def with_inner_loop(x, out):
    for i in range(x.shape[0]):
        acc = 0.0
        for k in range(4):
            acc += x[i] * k
        out[i] = acc


def _kernel(func, *args, **clauses):
    info = analyze(func, parse_clauses("parallel_loop", **clauses))
    return info, get_kernel(info, args)


def test_serial_below_reads_the_environment(monkeypatch):
    """``PYACC_SERIAL_BELOW`` overrides the measured crossover; 0 means never serial."""
    monkeypatch.setenv("PYACC_SERIAL_BELOW", "123")
    assert crossover.serial_below() == 123
    monkeypatch.setenv("PYACC_SERIAL_BELOW", "0")
    assert crossover.serial_below() == 0


@pytest.mark.parametrize("raw", ["-1", "many", "1.5"])
def test_serial_below_rejects_bad_values(monkeypatch, raw):
    monkeypatch.setenv("PYACC_SERIAL_BELOW", raw)
    with pytest.raises(ValueError, match="PYACC_SERIAL_BELOW"):
        crossover.serial_below()


def test_measured_crossover_is_within_its_clamp(monkeypatch):
    monkeypatch.delenv("PYACC_SERIAL_BELOW", raising=False)
    value = crossover.serial_below()
    assert crossover.LOWEST <= value <= crossover.HIGHEST


def test_straight_line_nest_gets_a_serial_twin_with_the_same_results(monkeypatch):
    """Below the crossover the elementwise nest runs serially; results are those of the
    parallel form (independent iterations), at sizes on both sides of the crossover."""
    monkeypatch.setenv("PYACC_SERIAL_BELOW", "1000")
    for n in (7, 999, 1000, 5000):
        a, b = np.arange(n, dtype=np.float64), np.ones(n)
        c = np.zeros(n)
        info, kernel = _kernel(elementwise, a, b, c)
        kernel(a, b, c)
        np.testing.assert_array_equal(c, a + 2.0)
    assert [note.serial_below for note in info.notes] == [1000]


def test_chunked_reduction_twin_is_bit_identical(monkeypatch):
    """A reduction in the chunked form (here: ``s = e + s``) combines the same
    chunks in the same order on one thread: the float sum has the same bits."""
    x = np.random.default_rng(3).random(4000)
    results = {}
    for below in ("0", str(10**9)):
        monkeypatch.setenv("PYACC_SERIAL_BELOW", below)
        info, kernel = _kernel(chunked_sum, x, 1.5)
        results[below] = kernel(x, 1.5)
        assert [note.serial_below for note in info.notes] == [int(below)]
    assert results["0"] == results[str(10**9)]


def test_nests_with_loops_or_native_reductions_have_no_twin(monkeypatch):
    """A body with a loop (uneven, larger cost per iteration) and a reduction Numba
    orders by its thread split stay parallel at every size."""
    monkeypatch.setenv("PYACC_SERIAL_BELOW", "100000")
    x = np.arange(10.0)
    out = np.zeros(10)
    info, kernel = _kernel(with_inner_loop, x, out)
    kernel(x, out)
    np.testing.assert_array_equal(out, x * 6)
    assert [note.serial_below for note in info.notes] == [0]

    def dot(a, b):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i] * b[i]
        return s

    info, kernel = _kernel(dot, x, x)
    assert kernel(x, x) == float(x @ x)
    assert [note.serial_below for note in info.notes] == [0]


def _scripted_race(losses_at):
    """A ``_race`` where parallel wins (0.5 × serial) except at the sizes in ``losses_at``."""
    def race(n):
        return 1.0, (1.0 if n in losses_at else 0.5)
    return race


@pytest.mark.parametrize("losses_at, expected", [
    ((), crossover.LOWEST),                       # parallel wins everywhere
    ({1 << 14, 1 << 13}, 1 << 15),                # two losses in a row end the run
    ({1 << 17, 1 << 14, 1 << 13}, 1 << 15),       # one loss alone (a cache edge) does not
    ({1 << 20, 1 << 19}, crossover.HIGHEST),      # never wins at the top: 2**20
])
def test_the_crossover_is_the_smallest_size_of_the_run_where_parallel_wins(monkeypatch, losses_at,
                                                                         expected):
    monkeypatch.setattr(crossover, "_race", _scripted_race(set(losses_at)))
    monkeypatch.setattr(crossover.numba, "get_num_threads", lambda: 2)
    assert crossover._measure() == expected


def test_a_race_run_while_other_processes_were_busy_is_not_kept(monkeypatch, tmp_path):
    """A machine under load says parallel never pays; that must not become the value of
    every later process on this machine (``crossover.signed``)."""
    monkeypatch.setenv("PYACC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(crossover, "_measure", lambda: 4096)
    readings = iter([(100.0, 1.0), (150.0, 1.0)])  # others used 50 CPU seconds meanwhile
    monkeypatch.setattr(crossover, "_cpu_reading", lambda: next(readings))
    assert crossover._load_or_measure() == 4096
    assert not (tmp_path / "crossover.signed").exists()
    readings = iter([(100.0, 1.0), (100.0, 1.0)])  # a quiet machine: kept
    monkeypatch.setattr(crossover, "_cpu_reading", lambda: next(readings))
    assert crossover._load_or_measure() == 4096
    record = caches.verified_bytes((tmp_path / "crossover.signed").read_bytes(), "crossover.signed")
    assert json.loads(record) == {crossover._machine_key(): 4096}


def test_a_crossover_record_pyacc_did_not_sign_is_measured_again(monkeypatch, tmp_path):
    """The record is one of the cache's files (issue 32): one written by someone else
    (or an older pyacc) is not believed, named in one warning, and measured again."""
    monkeypatch.setenv("PYACC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(caches.KEY_ENVIRONMENT, str(tmp_path / "key"))
    monkeypatch.setattr(caches, "_warned", set())
    (tmp_path / "crossover.signed").write_text(json.dumps({crossover._machine_key(): 1}))
    monkeypatch.setattr(crossover, "_measure", lambda: 4096)
    monkeypatch.setattr(crossover, "_cpu_reading", lambda: None)
    with pytest.warns(caches.CacheTrustWarning, match="crossover.signed"):
        assert crossover._load_or_measure() == 4096
