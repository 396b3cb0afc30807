"""Child process of ``bench_observe.py``: measures, in whatever pyacc is first on
``sys.path`` and with whatever PYACC_* variables are set, the per-call cost of a trivial
compute region on three present arrays, of ``acc.is_present`` and of ``acc.copyin`` of
present data, on the emulated device; prints one JSON line of medians (µs)."""

import json
import statistics
import sys
import time

import numpy as np

import pyacc as acc


@acc.parallel_loop
def trivial(x, y, z):
    for i in range(1):
        z[i] = x[i] + y[i]


def per_call(loop, calls, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        loop(calls)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main(calls: int, repeats: int) -> dict:
    acc.set_device_type("emulated")
    x, y, z = np.ones(8), np.ones(8), np.zeros(8)
    with acc.data(copyin=[x, y], copy=[z]):
        def kernel_calls(n):
            for _ in range(n):
                trivial(x, y, z)

        def present_checks(n):
            is_present = acc.is_present
            for _ in range(n):
                is_present(x)

        def present_copyins(n):
            copyin, delete = acc.copyin, acc.delete
            for _ in range(n):
                copyin(x)
                delete(x)

        for loop in (kernel_calls, present_checks, present_copyins):  # warm-up
            loop(calls // 10)
        return {"kernel call": per_call(kernel_calls, calls, repeats),
                "is_present": per_call(present_checks, calls * 5, repeats),
                "copyin+delete present": per_call(present_copyins, calls, repeats)}


if __name__ == "__main__":
    print(json.dumps({"pyacc": acc.__file__, **main(int(sys.argv[1]), int(sys.argv[2]))}))
