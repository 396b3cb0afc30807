"""``benchmarks/bench_cuda.py``'s parts that run without a GPU: the cold-start measure
(kernels compiled once per machine, issue 28) on a CPU device, and the headline fields it
adds to ``results_cuda.json`` and to the RESULTS.md table."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_cuda  # noqa: E402


def test_the_cold_start_measure_runs_fresh_processes_and_reports_both_first_calls():
    """One process compiles into an empty cache, the next loads from it; the child checks
    its results, so a wrong kernel fails the measure instead of timing it."""
    cold = bench_cuda.cold_start("emulated", 1)
    assert cold["compile_first_call_ms"] > 0 and cold["cached_first_call_ms"] > 0
    assert cold["processes"] == 1 and cold["notes"] == {}


def test_a_failed_cold_start_is_a_note_and_the_other_measures_stand(monkeypatch):
    def fails(device_type, processes):
        raise RuntimeError("the child exited 1: boom")

    monkeypatch.setattr(bench_cuda, "cold_start", fails)
    assert "boom" in bench_cuda.run_cold_start("smoke")["notes"]["cold start"]


def test_the_cached_first_call_is_a_headline_field_with_its_target():
    report = {"machine": {"gpu": "NVIDIA H100 80GB HBM3"},
              "cold_start": {"compile_first_call_ms": 900.0, "cached_first_call_ms": 42.0,
                             "processes": 5, "notes": {}}}
    fields = bench_cuda.summary_fields(report)
    assert fields["cached_first_call_ms"] == 42.0 and fields["compile_first_call_ms"] == 900.0
    line, = [line for line in bench_cuda.measure_lines(report) if "fresh process" in line]
    assert "42.0" in line and "≤ 50.0" in line and "met" in line and "not met" not in line


def test_the_overlap_measure_times_two_queues_alone_and_together():
    """Run on ``emulated`` (its queues are threads): the three candidates are timed, the
    hidden share computed from them, and the mapped arrays are gone afterwards."""
    import pyacc as acc

    acc.set_device_type("emulated")
    try:
        overlap = bench_cuda.run_overlap("smoke", 0.0)
        assert acc.present_table() == []
    finally:
        acc.set_device_type("host")
    assert overlap["notes"] == {}
    assert set(overlap["seconds"]) == {"kernels (queue 1)", "copy (queue 2)", "both"}
    k, c, b = (overlap["seconds"][name] for name in ("kernels (queue 1)", "copy (queue 2)", "both"))
    assert overlap["hidden"] == (k + c - b) / min(k, c)


def test_overlap_and_launch_context_are_reported_with_their_targets():
    report = {"machine": {"gpu": "NVIDIA H100 80GB HBM3"},
              "overlap": {"launches": 8, "n": 1 << 26, "nbytes": 256 << 20, "notes": {},
                          "seconds": {"kernels (queue 1)": 0.004, "copy (queue 2)": 0.005,
                                      "both": 0.0055}, "hidden": 0.875},
              "launch": {"us": {"pyacc sync": 9.0, "numba-cuda sync": 30.0,
                                "pyacc sync, dispatcher": 120.0,
                                "driver launch (cuda.core) sync": 6.1}}}
    assert bench_cuda.summary_fields(report)["overlap_hidden"] == 0.875
    lines = bench_cuda.measure_lines(report)
    overlap, = [line for line in lines if "two queues" in line]
    assert "0.88" in overlap and "≥ 0.5" in overlap and "not met" not in overlap
    context, = [line for line in lines if "for context" in line]
    assert "dispatcher 120.00" in context and "sync 6.10" in context
    sync, = [line for line in lines if "sync: pyacc µs per call" in line]
    assert "9.00" in sync and "≤ 10.0" in sync and "not met" not in sync


class _StubCupy:
    """What ``run_bandwidth`` calls of CuPy, over host memory: its copies record whether
    the host array they were given is mapped by pyacc (on a GPU a mapped array of at
    least ``PYACC_PIN`` bytes is page-locked, so a "pageable" copy of it runs at pinned
    speed), and its ``hostRegister`` refuses what is registered already, as CUDA does."""

    def __init__(self, acc):
        import types

        stub = self
        self.acc, self.copied_mapped, self.registered = acc, [], set()

        class Device:
            def __init__(self, n, dtype):
                self.data = np.zeros(n, dtype)

            def set(self, host, stream=None):
                stub.note(host, stream)
                self.data[...] = host

            def get(self, stream=None, out=None):
                stub.note(out, stream)
                out[...] = self.data

        def register(address, nbytes, flags):
            if address in stub.registered:
                raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered")
            stub.registered.add(address)

        runtime = types.SimpleNamespace(deviceSynchronize=lambda: None, hostRegister=register,
                                        hostUnregister=stub.registered.discard)
        stream = types.SimpleNamespace(synchronize=lambda: None)
        self.cuda = types.SimpleNamespace(runtime=runtime, Stream=lambda non_blocking: stream)
        self.empty = Device
        self.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
        self.cupyx = types.SimpleNamespace(empty_pinned=lambda shape, dtype: np.empty(shape, dtype))

    def note(self, host, stream):
        if stream is None:  # the pageable copies (the pinned ones name their stream)
            self.copied_mapped.append(self.acc.is_present(host))


def _bandwidth(monkeypatch, register=None):
    import pyacc as acc

    stub = _StubCupy(acc)
    if register is not None:
        stub.cuda.runtime.hostRegister = register
    monkeypatch.setitem(sys.modules, "cupyx", stub.cupyx)
    acc.set_device_type("emulated")
    try:
        result = bench_cuda.run_bandwidth("smoke", stub, 0.0)
        assert acc.present_table() == []
    finally:
        acc.set_device_type("host")
    return stub, result


def test_cupys_pageable_copies_use_an_array_pyacc_never_mapped(monkeypatch):
    """The array pyacc's updates copy is mapped, hence page-locked on a GPU: CuPy's
    "pageable" copies of it measured pinned bandwidth, and the one-off ratio's target
    (pyacc ÷ CuPy pageable ≥ 1) was judged against the wrong figure."""
    stub, result = _bandwidth(monkeypatch)
    assert stub.copied_mapped and not any(stub.copied_mapped)
    assert {"cupy pageable h2d", "cupy pageable d2h"} <= set(result["seconds"])
    assert result["registration"]["nbytes"] > 0 and result["notes"] == {}


def test_a_refused_registration_is_a_note_and_the_bandwidth_figures_stand(monkeypatch):
    def refuse(address, nbytes, flags):
        raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered")

    _, result = _bandwidth(monkeypatch, refuse)
    assert result["registration"] is None and "AlreadyRegistered" in result["notes"]["page-locking"]
    assert "pyacc h2d" in result["gbps"]
    assert not any("page-locking" in line for line in bench_cuda.measure_lines(
        {"bandwidth": result, "machine": {}}))


def test_the_cold_start_child_imports_the_measured_pyacc_installed_or_not(monkeypatch):
    """The child's script lives in a temporary folder: without ``PYTHONPATH`` naming the
    checkout it imports pyacc only where pyacc is installed (and then maybe another
    copy of it), so the measure failed, or timed other code, on a machine that runs
    the suite from a copied tree."""
    import json
    import subprocess
    from types import SimpleNamespace

    seen = []

    def run(command, env, **_):
        seen.append(env["PYTHONPATH"].split(os.pathsep)[0])
        out = json.dumps({"file": str(bench_cuda.ROOT / "pyacc" / "__init__.py"), "first_s": 0.5,
                          "import_s": 0.25, "init_s": 0.125, "warm_us": 1.0,
                          "binaries": {"loaded": 0, "saved": 0}})
        return SimpleNamespace(returncode=0, stdout=out + "\n", stderr="")

    monkeypatch.setattr(subprocess, "run", run)
    cold = bench_cuda.cold_start("emulated", 2)
    assert cold["cached_first_call_ms"] == 500.0 and cold["cached_start_ms"] == 875.0
    assert seen == [str(bench_cuda.ROOT)] * 3

    def elsewhere(command, env, **_):
        out = json.dumps({"file": "/opt/other/pyacc/__init__.py", "first_s": 0.5})
        return SimpleNamespace(returncode=0, stdout=out, stderr="")

    monkeypatch.setattr(subprocess, "run", elsewhere)
    with pytest.raises(RuntimeError, match="not the pyacc of"):
        bench_cuda.cold_start("emulated", 1)


def test_a_section_that_raises_is_a_note_and_every_figure_is_saved_as_it_comes(monkeypatch):
    """A lent GPU gives minutes: a measure that fails, or a run cut short by a timeout,
    must not cost the figures measured before it (the JSON is written after each)."""
    import json

    ran, saved = [], []

    def sections(mode, cupy, nb, budget):
        def ok(key):
            return lambda: ran.append(key) or {"notes": {}}

        def broken():
            raise RuntimeError("cudaErrorIllegalAddress")
        return {"kernels": lambda: [], "bandwidth": broken, "launch": ok("launch"),
                "cold_start": ok("cold_start")}

    monkeypatch.setattr(bench_cuda, "measure_sections", sections)
    monkeypatch.setattr(bench_cuda, "gpu_machine", lambda cupy: {
        "gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "driver": "13.0",
        "cupy": "14.2.0", "numba_cuda": "0.30.4", "reference_compiler": "numba-cuda",
        "pyacc_compiler": "numba-cuda"})
    monkeypatch.setattr(bench_cuda, "check_kernels", lambda cupy, nb: {"saxpy": True})
    report = bench_cuda.run_all("smoke", None, None, lambda r: saved.append(json.dumps(r)))
    assert ran == ["launch", "cold_start"] and report["failed_sections"] == ["bandwidth"]
    assert "IllegalAddress" in report["bandwidth"]["notes"]["bandwidth"]
    assert len(saved) == 5 and '"launch"' in saved[2] and '"cold_start"' not in saved[2]
    assert "bandwidth, bandwidth: RuntimeError" in " ".join(bench_cuda.smoke_failures(
        {**report, "strided": {"notes": {}}, "overlap": {"notes": {}}}))


def test_results_are_written_from_the_json_of_a_gpu_run(tmp_path, monkeypatch):
    """``--from-json``: the figures of a lent GPU's run go to RESULTS.md and
    results_cuda.json here, with the headline fields, and the rest of RESULTS.md kept."""
    import json

    results, figures = tmp_path / "RESULTS.md", tmp_path / "results_cuda.json"
    results.write_text("# Benchmark results\n\nkept\n")
    monkeypatch.setattr(bench_cuda, "RESULTS", results)
    monkeypatch.setattr(bench_cuda, "JSON", figures)
    monkeypatch.setattr(bench_cuda, "ROOT", tmp_path)
    report = {"mode": "full", "checks": {"saxpy": True}, "kernels": [],
              "machine": {"gpu": "NVIDIA H100 80GB HBM3", "gpu_memory": 80 << 30,
                          "compute_capability": "9.0", "driver": "13.0", "cupy": "14.2.0",
                          "numba_cuda": "0.30.4", "pyacc": "0.1.0", "pyacc_compiler": "numba-cuda",
                          "host": "16 cores", "date": "2026-11-28 03:00"},
              "launch": {"us": {"pyacc sync": 7.5, "numba-cuda sync": 30.0}, "notes": {}}}
    saved = tmp_path / "bench.json"
    saved.write_text(json.dumps(report))
    assert bench_cuda.main(["--from-json", str(saved)]) == 0
    text = results.read_text()
    assert "kept" in text and "NVIDIA H100 80GB HBM3" in text and "7.50" in text
    assert "--quick" not in text and json.loads(figures.read_text())["launch_us"] == 7.5
