"""Needleman-Wunsch sequence alignment, a wavefront dynamic program — Rodinia's ``nw`` in OpenACC.

A port of the OpenACC version of Rodinia's ``nw`` benchmark in the OpenARC compiler's test
suite: repository ``ORNL/OpenARC``, file ``test/benchmarks/openacc/rodinia/nw/needle.c``
(Rodinia, University of Virginia; OpenARC is distributed under the Cetus Artistic
License). Two random sequences of length n index the BLOSUM62 substitution matrix; the
score matrix ``input_itemsets`` ((n+1)² ints, row-major and flat, as in C) is filled by
the recurrence

    H[r, c] = max(H[r-1, c-1] + reference[r, c],  H[r, c-1] - penalty,  H[r-1, c] - penalty)

Each cell needs its left, upper and upper-left neighbours, so the cells of one
anti-diagonal are independent of each other: the program sweeps the anti-diagonals of the
top-left triangle, then those of the bottom-right one, launching one parallel loop per
anti-diagonal (4n launches in all) while the matrices stay on the device. As in the
original, the sweep covers rows and columns 1 … n-1 (the traceback starts at
``[n-1, n-1]``); the last row and column keep their initial values.

How the directives map::

    C (needle.c)                                        pyacc (this file)
    int max_rows, max_cols, penalty;  (globals)         module-level max_rows, max_cols, penalty
    int blosum62[24][24] = {...};     (global)          module-level BLOSUM62 (NumPy int32)
    #pragma acc data copy(input_itemsets[0:N*N]) \\      with acc.data(copy=[input_itemsets],
                     copyin(referrence[0:N*N])                        copyin=[referrence]):
    #pragma acc kernels loop gang worker independent    @acc.kernels_loop("gang worker independent")
    for (idx = 0; idx <= i; idx++) { ... }              def top_left_diagonal(...):  for idx in range(i + 1)
    mainCompCPU(...)  (OpenMP version, verification)    numpy_reference(): a row-by-row NumPy scan

The kernels read the module-level ``max_cols`` and ``penalty`` as the C kernels read the
globals: pyacc reads their values at each call (API.md §6.1).

Run::

    python examples/needleman_wunsch.py                  # n = 2048, the original's size
    python examples/needleman_wunsch.py --small          # CI size (n = 256)
    ACC_DEVICE_TYPE=emulated python examples/needleman_wunsch.py --small

The scores are integers: the matrix must equal the NumPy reference exactly, and so must the
traceback path read from it.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pyacc as acc

LIMIT = -999

# BLOSUM62 (Henikoff & Henikoff 1992), rows and columns in the order A R N D C Q E G H I L K
# M F P S T W Y V B Z X *, as the original's global ``blosum62[24][24]``.
BLOSUM62 = np.array([row.split() for row in """
 4 -1 -2 -2  0 -1 -1  0 -2 -1 -1 -1 -1 -2 -1  1  0 -3 -2  0 -2 -1  0 -4
-1  5  0 -2 -3  1  0 -2  0 -3 -2  2 -1 -3 -2 -1 -1 -3 -2 -3 -1  0 -1 -4
-2  0  6  1 -3  0  0  0  1 -3 -3  0 -2 -3 -2  1  0 -4 -2 -3  3  0 -1 -4
-2 -2  1  6 -3  0  2 -1 -1 -3 -4 -1 -3 -3 -1  0 -1 -4 -3 -3  4  1 -1 -4
 0 -3 -3 -3  9 -3 -4 -3 -3 -1 -1 -3 -1 -2 -3 -1 -1 -2 -2 -1 -3 -3 -2 -4
-1  1  0  0 -3  5  2 -2  0 -3 -2  1  0 -3 -1  0 -1 -2 -1 -2  0  3 -1 -4
-1  0  0  2 -4  2  5 -2  0 -3 -3  1 -2 -3 -1  0 -1 -3 -2 -2  1  4 -1 -4
 0 -2  0 -1 -3 -2 -2  6 -2 -4 -4 -2 -3 -3 -2  0 -2 -2 -3 -3 -1 -2 -1 -4
-2  0  1 -1 -3  0  0 -2  8 -3 -3 -1 -2 -1 -2 -1 -2 -2  2 -3  0  0 -1 -4
-1 -3 -3 -3 -1 -3 -3 -4 -3  4  2 -3  1  0 -3 -2 -1 -3 -1  3 -3 -3 -1 -4
-1 -2 -3 -4 -1 -2 -3 -4 -3  2  4 -2  2  0 -3 -2 -1 -2 -1  1 -4 -3 -1 -4
-1  2  0 -1 -3  1  1 -2 -1 -3 -2  5 -1 -3 -1  0 -1 -3 -2 -2  0  1 -1 -4
-1 -1 -2 -3 -1  0 -2 -3 -2  1  2 -1  5  0 -2 -1 -1 -1 -1  1 -3 -1 -1 -4
-2 -3 -3 -3 -2 -3 -3 -3 -1  0  0 -3  0  6 -4 -2 -2  1  3 -1 -3 -3 -1 -4
-1 -2 -2 -1 -3 -1 -1 -2 -2 -3 -3 -1 -2 -4  7 -1 -1 -4 -3 -2 -2 -1 -2 -4
 1 -1  1  0 -1  0  0  0 -1 -2 -2  0 -1 -2 -1  4  1 -3 -2 -2  0  0  0 -4
 0 -1  0 -1 -1 -1 -1 -2 -2 -1 -1 -1 -1 -2 -1  1  5 -2 -2  0 -1 -1  0 -4
-3 -3 -4 -4 -2 -2 -3 -2 -2 -3 -2 -3 -1  1 -4 -3 -2 11  2 -3 -4 -3 -2 -4
-2 -2 -2 -3 -2 -1 -2 -3  2 -1 -1 -2 -1  3 -3 -2 -2  2  7 -1 -3 -2 -1 -4
 0 -3 -3 -3 -1 -2 -2 -3 -3  3  1 -2  1 -1 -2 -2  0 -3 -1  4 -3 -2 -1 -4
-2 -1  3  4 -3  0  1 -1  0 -3 -4  0 -3 -3 -2  0 -1 -4 -3 -3  4  1 -1 -4
-1  0  0  1 -3  3  4 -2  0 -3 -3  1 -1 -3 -1  0 -1 -3 -2 -2  1  4 -1 -4
 0 -1 -1 -1 -2 -1 -1 -1 -1 -1 -1 -1 -1 -1 -2  0  0 -2 -1 -1 -1 -1 -1 -4
-4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4 -4  1
""".strip().splitlines()], dtype=np.int32)

# the original's globals, set by run_test() from the command line
max_rows = 0
max_cols = 0
penalty = 10


@acc.kernels_loop("gang worker independent")
def top_left_diagonal(input_itemsets, referrence, i):
    """Anti-diagonal i of the top-left triangle: cells (idx + 1, i + 1 - idx)."""
    for idx in range(i + 1):
        index = (idx + 1) * max_cols + (i + 1 - idx)
        a = input_itemsets[index - 1 - max_cols] + referrence[index]
        b = input_itemsets[index - 1] - penalty
        c = input_itemsets[index - max_cols] - penalty
        if a <= b:
            k = b
        else:
            k = a
        if k <= c:
            input_itemsets[index] = c
        else:
            input_itemsets[index] = k


@acc.kernels_loop("gang worker independent")
def bottom_right_diagonal(input_itemsets, referrence, i):
    """Anti-diagonal i (counting down) of the bottom-right triangle."""
    for idx in range(i + 1):
        index = (max_cols - idx - 2) * max_cols + idx + max_cols - i - 2
        a = input_itemsets[index - 1 - max_cols] + referrence[index]
        b = input_itemsets[index - 1] - penalty
        c = input_itemsets[index - max_cols] - penalty
        if a <= b:
            k = b
        else:
            k = a
        if k <= c:
            input_itemsets[index] = c
        else:
            input_itemsets[index] = k


def main_comp(input_itemsets: np.ndarray, referrence: np.ndarray) -> None:
    """The original's mainComp(): both wavefront sweeps inside one data region."""
    with acc.data(copy=[input_itemsets], copyin=[referrence]):
        for i in range(max_cols - 2):  # top-left triangle
            top_left_diagonal(input_itemsets, referrence, i)
        for i in range(max_cols - 4, -1, -1):  # bottom-right triangle
            bottom_right_diagonal(input_itemsets, referrence, i)


def initial_matrices(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(input_itemsets, referrence) as runTest() builds them: two random sequences of
    codes 1-10, their BLOSUM62 scores, and the gap penalties along the first row and column."""
    rows = cols = n + 1
    rng = np.random.default_rng(seed)
    seq_rows = rng.integers(1, 11, rows - 1)  # rand() % 10 + 1
    seq_cols = rng.integers(1, 11, cols - 1)
    referrence = np.zeros((rows, cols), dtype=np.int32)
    referrence[1:, 1:] = BLOSUM62[seq_rows[:, None], seq_cols[None, :]]
    input_itemsets = np.zeros((rows, cols), dtype=np.int32)
    input_itemsets[1:, 0] = -np.arange(1, rows) * penalty
    input_itemsets[0, 1:] = -np.arange(1, cols) * penalty
    return input_itemsets.ravel(), referrence.ravel()


def traceback(input_itemsets: np.ndarray) -> list[int]:
    """The original's TRACE block (plain Python): the scores along the path from
    [max_rows-2, max_rows-2] back to [0, 0], choosing the best of the NW, W and N neighbours."""
    h = input_itemsets.reshape(max_rows, max_cols)
    i = j = max_rows - 2
    path = [int(h[i, j])]
    while not (i == 0 and j == 0):
        if i > 0 and j > 0:
            nw, w, n = h[i - 1, j - 1], h[i, j - 1], h[i - 1, j]
        elif i == 0:
            nw = n = LIMIT
            w = h[i, j - 1]
        else:
            nw = w = LIMIT
            n = h[i - 1, j]
        best = max(nw, w, n)
        path.append(int(best))
        if best == nw:
            i, j = i - 1, j - 1
        elif best == w:
            j -= 1
        else:
            i -= 1
    return path


def numpy_reference(input_itemsets: np.ndarray, referrence: np.ndarray) -> np.ndarray:
    """The same cells filled row by row instead of by anti-diagonals. Along a row the left
    neighbour makes the recurrence a max-plus prefix scan:
    H[r, c] = max over k ≤ c of (D[k] - penalty·(c - k)), D[k] from the row above."""
    h = input_itemsets.reshape(max_rows, max_cols).astype(np.int64)
    ref = referrence.reshape(max_rows, max_cols)
    last = max_cols - 1  # the sweep covers columns 1 … max_cols-2
    k = np.arange(last)
    for r in range(1, max_rows - 1):
        d = np.empty(last, dtype=np.int64)
        d[0] = h[r, 0]
        d[1:] = np.maximum(h[r - 1, :last - 1] + ref[r, 1:last], h[r - 1, 1:last] - penalty)
        h[r, 1:last] = (np.maximum.accumulate(d + penalty * k) - penalty * k)[1:]
    return h.astype(np.int32).ravel()


def transfer_summary(stats: dict) -> str:
    return (f"{stats['h2d_count']} to device ({stats['h2d_bytes']} B), "
            f"{stats['d2h_count']} to host ({stats['d2h_bytes']} B), "
            f"{stats['launch_count']} kernel launches")


def main(argv=None) -> int:
    global max_rows, max_cols, penalty
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048, help="sequence length (the original's max_rows)")
    parser.add_argument("--penalty", type=int, default=10, help="gap penalty (positive integer)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--small", action="store_true", help="a quick run (n = 256)")
    parser.add_argument("--device", default=None,
                        help="host, emulated or cuda (default: ACC_DEVICE_TYPE or the default device)")
    args = parser.parse_args(argv)
    if args.small:
        args.n = 256
    if args.n < 4 or args.penalty <= 0:
        parser.error("need n >= 4 and a positive penalty")
    if args.device:
        acc.set_device_type(args.device)

    penalty = args.penalty
    max_rows = max_cols = 5                      # compile the kernels on a 4x4 problem first
    main_comp(*initial_matrices(4, args.seed))

    max_rows = max_cols = args.n + 1
    input_itemsets, referrence = initial_matrices(args.n, args.seed)
    original = input_itemsets.copy()

    acc.reset_stats()
    start = time.perf_counter()
    main_comp(input_itemsets, referrence)
    elapsed = time.perf_counter() - start
    stats = acc.stats()
    path = traceback(input_itemsets)

    print(f"Needleman-Wunsch alignment of two sequences of length {args.n} (penalty {penalty}) "
          f"on the {acc.get_device_type()} device")
    print(f"  time: {elapsed:.3f} s   transfers: {transfer_summary(stats)}")
    print(f"  score at [{max_rows - 2}, {max_cols - 2}]: {path[0]}   traceback: {len(path)} cells")

    reference = numpy_reference(original, referrence)
    problems = []
    if not np.array_equal(input_itemsets, reference):
        wrong = np.flatnonzero(input_itemsets != reference)
        r, c = divmod(int(wrong[0]), max_cols)
        problems.append(f"{wrong.size} cells differ from the NumPy reference, the first at "
                        f"[{r}, {c}]: {int(input_itemsets[wrong[0]])} instead of {int(reference[wrong[0]])}")
    elif path != traceback(reference):
        problems.append("the traceback differs from the reference's")
    if problems:
        for problem in problems:
            print(f"check: FAILED — {problem}", file=sys.stderr)
        return 1
    print("check: matches the NumPy reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
