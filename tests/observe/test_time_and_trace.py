"""PYACC_TIME's report agrees with acc.stats(); PYACC_TRACE writes a valid timeline."""

import json
import re

from .conftest import PROGRAM, run_program


def report_rows(stderr: str) -> dict:
    """``{label: [count, bytes]}`` summed over the report's locations."""
    totals = {}
    for match in re.finditer(r"^\s+([a-z ]+): (\d+)(?:, (\d+) bytes)?", stderr, re.M):
        label, count, nbytes = match.group(1), int(match.group(2)), int(match.group(3) or 0)
        row = totals.setdefault(label, [0, 0])
        row[0] += count
        row[1] += nbytes
    return totals


def test_time_report_counts_agree_with_stats():
    _, stderr, stats = run_program(PYACC_TIME=1)
    assert "pyacc timing report (PYACC_TIME=1)" in stderr
    rows = report_rows(stderr)
    assert rows["kernel launches"][0] == stats["launch_count"] == 2
    assert rows["uploads"] == [stats["h2d_count"], stats["h2d_bytes"]]
    assert rows["downloads"] == [stats["d2h_count"], stats["d2h_bytes"]]
    assert rows["calls"][0] == 2 and rows["data regions"][0] == 1


def test_time_report_times_each_compute_region_under_its_construct():
    _, stderr, _ = run_program(PYACC_TIME=1)
    section = stderr.split(f"{PROGRAM}:")[1]
    assert section.startswith(f"{_def_line()} saxpy  [compute region, device emulated:0]")
    launches = re.search(r"kernel launches: 2, time total=(\d+)us min=(\d+)us max=(\d+)us mean=(\d+)us",
                         stderr)
    total, low, high, mean = map(int, launches.groups())
    assert low <= mean <= high <= total


def _def_line() -> int:
    with open(PROGRAM) as source:
        return next(n for n, line in enumerate(source, 1) if line.startswith("def saxpy"))


def test_trace_is_chrome_trace_json_with_a_track_per_queue(tmp_path):
    path = tmp_path / "run.json"
    _, stderr, stats = run_program(PYACC_TRACE=path)
    assert f"trace written to {path}" in stderr
    document = json.loads(path.read_text())
    events = document["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
              if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = [e for e in events if e["ph"] == "X"]
    kernels = [e for e in slices if e["cat"] == "kernel"]
    assert len(kernels) == stats["launch_count"] == 2
    assert sorted(tracks[(e["pid"], e["tid"])].split(" (")[0] for e in kernels) == ["queue 1", "sync queue"]
    for event in slices:
        assert event["dur"] >= 0 and event["ts"] >= 0
    uploads = [e for e in slices if e["cat"] == "upload"]
    assert len(uploads) == stats["h2d_count"]
    assert sum(e["args"]["bytes"] for e in uploads) == stats["h2d_bytes"]
    assert {e["args"]["variable"] for e in uploads} == {"x", "y"}
    assert all(e["args"]["file"] == PROGRAM for e in uploads)
    memory = [e["args"]["bytes"] for e in events if e["ph"] == "C"]
    assert max(memory) == 1600 and memory[-1] == 0
    # region slices open and close on the host track
    begins = [e for e in events if e["ph"] == "B"]
    ends = [e for e in events if e["ph"] == "E"]
    assert len(begins) == len(ends) == 3
    # slices of one queue do not overlap (a queue runs one operation at a time)
    queue_one = sorted((e["ts"], e["dur"]) for e in slices if tracks[(e["pid"], e["tid"])] == "queue 1")
    for (start, length), (next_start, _) in zip(queue_one, queue_one[1:]):
        assert start + length <= next_start + 1e-3
