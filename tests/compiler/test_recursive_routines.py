"""A recursive routine (OpenACC 3.3 §2.15: a routine may call itself) in a kernel's module:
Numba's on-disk cache cannot hold it (a second process loading the cached module crashed
with a segmentation fault, or failed with "unresolved symbol"), so such a module is
compiled without it (``ModuleBuilder.recursive``): every process compiles it, and runs."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import numpy as np, pyacc as acc

    @acc.routine
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    @acc.routine
    def even(n):
        return True if n == 0 else odd(n - 1)

    @acc.routine
    def odd(n):
        return False if n == 0 else even(n - 1)

    @acc.parallel_loop
    def kernel(x, parity):
        for i in range(x.shape[0]):
            x[i] = fact(i)
            parity[i] = even(i)

    x, parity = np.zeros(6), np.zeros(6, dtype=np.bool_)
    kernel(x, parity)
    print(x.tolist(), parity.tolist())
""")


@pytest.mark.parametrize("run", ["first process", "second process"])
def test_a_recursive_routine_runs_in_every_process(tmp_path_factory, run):
    folder = tmp_path_factory.getbasetemp() / "recursive-routines"  # shared by both runs
    folder.mkdir(exist_ok=True)
    script = folder / "recursive.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYACC_CACHE_DIR=str(folder / "cache"), NUMBA_CACHE_DIR=str(folder / "numba"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[0] == (
        "[1.0, 1.0, 2.0, 6.0, 24.0, 120.0] [True, False, True, False, True, False]")
