"""Runtime micro-benchmarks of the mapping layer (issue: runtime foundation).

Measures, side by side in one run, with warm-up and medians:

1. ``acc.is_present`` on present data with 100 / 10,000 / 100,000 live mappings on the
   emulated device (target: ≤ 0.5 µs median at 10,000; cost at 100,000 ≤ 1.3× cost at 100);
2. ``acc.copyin`` of present data (dynamic +1, no transfer) and ``acc.delete`` back
   (target ≤ 2 µs each);
3. emulated ``copyin`` / ``update_device`` / ``update_self`` of a contiguous 256 MiB array
   against ``np.copyto`` between two host arrays of the same size (target ≥ 0.9× its
   bandwidth);
4. host time to enqueue an async copy and an async kernel launch on the emulated device
   (issue: asynchronous queues; target ≤ 15 µs each).

Run: ``python benchmarks/bench_runtime.py [--quick] [--smoke] [--json FILE]``. It prints
a table with each figure, its target and PASS/FAIL, and the machine it ran on.
``--smoke`` runs every measure once at tiny sizes and checks no target (exit 0 unless
something fails).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

import pyacc as acc


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"numpy {np.__version__}, {platform.system()} {platform.release()}")


def per_call_us(function, argument, *, calls: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean time per call of ``calls`` calls, in µs."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            function(argument)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def fill_table(count: int) -> list[np.ndarray]:
    """Map ``count`` small arrays (dynamic count 1 each); return them."""
    arrays = [np.empty(2) for _ in range(count)]
    batch = 1000
    for start in range(0, count, batch):
        acc.enter_data(create=arrays[start:start + batch])
    return arrays


def bench_is_present(sizes, calls, repeats) -> dict[int, float]:
    """is_present on one emulated device per table size, measured round-robin (the
    machines are noisy: interleaving makes every size see the same load)."""
    probes = {}
    for number, size in enumerate(sizes):
        acc.set_device_num(number, "emulated")
        acc.shutdown("emulated") if number == 0 else None
        arrays = fill_table(size)
        probes[size] = (number, arrays[size // 2], arrays)
        assert acc.is_present(arrays[size // 2])
    samples = {size: [] for size in sizes}
    for round_ in range(repeats + 1):
        for size, (number, probe, _) in probes.items():
            acc.set_device_num(number, "emulated")
            value = per_call_us(acc.is_present, probe, calls=calls, repeats=1)
            if round_:  # the first round is the warm-up
                samples[size].append(value)
    for number in range(len(sizes)):
        acc.set_device_num(number, "emulated")
        acc.shutdown("emulated")
    acc.set_device_num(0, "emulated")
    return {size: statistics.median(values) for size, values in samples.items()}


@acc.parallel_loop(present="x")
def _touch(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1.0


def bench_enqueue(calls, repeats) -> tuple[float, float]:
    """Host time to enqueue an async copy and an async launch on the emulated device
    (the queue is held, so the time is the enqueue alone, not the work)."""
    from pyacc.testing import hold_queue

    acc.shutdown("emulated")
    x = np.zeros(8)
    acc.copyin(x)
    _touch(x)  # compile
    copies, launches = [], []
    batch = 100  # the queue is held per batch: thousands of pending closures would time the GC
    for _ in range(repeats * max(1, calls // batch)):
        with hold_queue(1):
            start = time.perf_counter()
            for _ in range(batch):
                acc.update_device(x, async_=1)
            middle = time.perf_counter()
            for _ in range(batch):
                _touch(x, async_=1)
            end = time.perf_counter()
        acc.wait(1)
        copies.append((middle - start) / batch * 1e6)
        launches.append((end - middle) / batch * 1e6)
    acc.delete(x)
    acc.shutdown("emulated")
    return statistics.median(copies), statistics.median(launches)


def dispatch_floor_us(calls, repeats) -> float:
    """Calibration: a do-nothing Numba function taking the lookup's two arguments (the
    dispatch cost the compiled lookup pays on this machine; the reference machine of
    environment-notes.md measured ~0.2 µs)."""
    from numba import njit

    @njit
    def nothing(bounds, x):
        return 0

    bounds, probe = np.zeros((2, 64), dtype=np.int64), np.empty(2)
    nothing(bounds, probe)
    return per_call_us(lambda x: nothing(bounds, x), probe, calls=calls, repeats=repeats)


def bench_present_copyin_delete(calls, repeats) -> tuple[float, float]:
    acc.shutdown("emulated")
    arrays = fill_table(1000)
    target = arrays[500]
    copyin_samples, delete_samples = [], []
    for _ in range(repeats + 2):
        start = time.perf_counter()
        for _ in range(calls):
            acc.copyin(target)
        middle = time.perf_counter()
        for _ in range(calls):
            acc.delete(target)
        end = time.perf_counter()
        copyin_samples.append((middle - start) / calls * 1e6)
        delete_samples.append((end - middle) / calls * 1e6)
    assert acc.refcounts(target) == (0, 1)
    acc.shutdown("emulated")
    return statistics.median(copyin_samples[2:]), statistics.median(delete_samples[2:])


def bench_bandwidth(nbytes, repeats) -> dict[str, float]:
    """GB/s of np.copyto and of the three emulated transfers, interleaved per round."""
    acc.shutdown("emulated")
    source = np.random.default_rng(0).random(nbytes // 8)
    destination = np.empty_like(source)
    np.copyto(destination, source)  # touch the pages
    acc.copyin(source)
    acc.update_self(source)
    timings = {"np.copyto": [], "copyin": [], "update_device": [], "update_self": []}

    def timed(key, action):
        start = time.perf_counter()
        action()
        timings[key].append(nbytes / (time.perf_counter() - start) / 1e9)

    for _ in range(repeats):
        timed("np.copyto", lambda: np.copyto(destination, source))
        acc.delete(source)
        timed("copyin", lambda: acc.copyin(source))
        timed("update_device", lambda: acc.update_device(source))
        timed("update_self", lambda: acc.update_self(source))
    acc.delete(source)
    acc.shutdown("emulated")
    return {key: statistics.median(values) for key, values in timings.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and a 64 MiB array")
    parser.add_argument("--smoke", action="store_true",
                        help="every measure once at tiny sizes, no targets checked")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYACC_EMULATED_MEMORY", str(2 << 30))
    os.environ["PYACC_EMULATED_DEVICES"] = "3"  # one table size per device (read at first use)
    acc.set_device_type("emulated")
    repeats = 1 if args.smoke else 5 if args.quick else 11
    calls = 40 if args.smoke else 20_000 if args.quick else 100_000
    nbytes = 1 << (20 if args.smoke else 26 if args.quick else 28)
    small, middle, large = sizes = [10, 30, 100] if args.smoke else [100, 10_000, 100_000]

    floor = dispatch_floor_us(calls, repeats)
    present = bench_is_present(sizes, calls, repeats)
    copyin_us, delete_us = bench_present_copyin_delete(calls // 2, repeats)
    bandwidth = bench_bandwidth(nbytes, repeats)
    enqueue_copy, enqueue_launch = bench_enqueue(calls // 20, repeats)

    rows = [
        ("calibration: empty Numba call (µs)", floor, None, None),
        (f"is_present, {small:,} mappings (µs)", present[small], None, None),
        (f"is_present, {middle:,} mappings (µs)", present[middle], "≤ 0.5", present[middle] <= 0.5),
        (f"is_present, {large:,} mappings (µs)", present[large], None, None),
        (f"is_present cost {large:,} ÷ {small:,}", present[large] / present[small], "≤ 1.3",
         present[large] / present[small] <= 1.3),
        ("copyin of present data (µs)", copyin_us, "≤ 2", copyin_us <= 2),
        ("delete back (µs)", delete_us, "≤ 2", delete_us <= 2),
        ("np.copyto bandwidth (GB/s)", bandwidth["np.copyto"], None, None),
    ]
    rows.append(("enqueue an async copy (µs of host time)", enqueue_copy, "≤ 15", enqueue_copy <= 15))
    rows.append(("enqueue an async launch (µs of host time)", enqueue_launch, "≤ 15", enqueue_launch <= 15))
    for key in ("copyin", "update_device", "update_self"):
        ratio = bandwidth[key] / bandwidth["np.copyto"]
        rows.append((f"emulated {key} {nbytes >> 20} MiB (GB/s)", bandwidth[key], None, None))
        rows.append((f"  {key} ÷ np.copyto", ratio, "≥ 0.9", ratio >= 0.9))

    print(f"machine: {machine_description()}")
    print(f"{'measure':44} {'value':>10}  {'target':>7}  result")
    for label, value, target, ok in rows:
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        print(f"{label:44} {value:10.3f}  {target or '':>7}  {verdict}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": machine_description(), "rows": [
                {"measure": r[0], "value": r[1], "target": r[2], "pass": r[3]} for r in rows]}, out, indent=1)
    if args.smoke:
        print("smoke run: every measure ran once at tiny sizes (targets not checked)")
        return 0
    return 0 if all(ok is not False for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
