"""``benchmarks/bench_cuda.py``'s parts that run without a GPU: the cold-start measure
(kernels compiled once per machine, issue 28) on a CPU device, and the headline fields it
adds to ``results_cuda.json`` and to the RESULTS.md table."""

from __future__ import annotations

import sys
from pathlib import Path

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
