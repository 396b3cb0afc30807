"""A small pyacc program the observability tests run in a subprocess (and import).

``python program.py`` maps two arrays in a data region, calls a kernel in it, copies one
array in and deletes it, runs the kernel once on async queue 1, waits, and prints
``STATS <json of acc.stats()>``.
"""

import json

import numpy as np

import pyacc as acc


@acc.parallel_loop
def saxpy(a, x, y):
    for i in range(x.shape[0]):
        y[i] += a * x[i]


def main():
    x = np.ones(100)
    y = np.zeros(100)
    with acc.data(copyin=[x], copy=[y]):
        saxpy(2.0, x, y)
    acc.copyin(x)
    acc.delete(x)
    saxpy(1.0, x, y, async_=1)
    acc.wait_all()
    assert (y == 3.0).all(), y
    print("STATS " + json.dumps(acc.stats()), flush=True)


if __name__ == "__main__":
    main()
