"""The Jacobi calling pattern: a compute region called with its arrays in two orders in
turn (``step(u, unew)``, ``step(unew, u)``) against one order, inside a data region.

Before, the launcher kept one replay plan, so every other call took the full path. Now it
keeps the last few plans, and each order replays its own. Tiny 4 × 4 arrays, so the figure
is launch overhead, not arithmetic.

Run: ``python benchmarks/bench_alternating.py [host|emulated]``. Compare two versions by
running this file alternately with ``PYTHONPATH`` set to each checkout.
"""
import time, statistics, sys
import numpy as np
import pyacc as acc

@acc.parallel_loop(collapse=2)
def step(u, unew):
    for i in range(1, u.shape[0] - 1):
        for j in range(1, u.shape[1] - 1):
            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])

acc.set_device_type(sys.argv[1] if len(sys.argv) > 1 else "emulated")
print(f"device: {acc.get_device_type()}")
u = np.zeros((4, 4)); unew = np.zeros((4, 4))
with acc.data(copy=[u, unew]):
    for _ in range(2000):
        step(u, unew); step(unew, u)
    def same():
        t = time.perf_counter()
        for _ in range(2000):
            step(u, unew); step(u, unew)
        return (time.perf_counter() - t) / 4000 * 1e6
    def alternating():
        t = time.perf_counter()
        for _ in range(2000):
            step(u, unew); step(unew, u)
        return (time.perf_counter() - t) / 4000 * 1e6
    rs, ra = [], []
    for _ in range(7):
        rs.append(same()); ra.append(alternating())
print(f"same arrays {statistics.median(rs):.2f} us/call, alternating {statistics.median(ra):.2f} us/call, ratio {statistics.median(ra)/statistics.median(rs):.2f}")
