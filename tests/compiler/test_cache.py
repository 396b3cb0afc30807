"""The disk cache: a fresh process with a warm cache loads kernels without compiling."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import json, sys, time
    sys.path.insert(0, {tests!r})
    import numpy as np
    from pyacc.compiler import analyze, get_kernel, parse_clauses
    from cache_kernels import dot
    x = np.arange(1000.0)
    start = time.perf_counter()
    info = analyze(dot, parse_clauses("parallel_loop", reduction="+:s"))
    kernel = get_kernel(info, (x, x))
    value = kernel(x, x)
    elapsed = time.perf_counter() - start
    print(json.dumps({{"value": value, "hits": sum(kernel.stats.cache_hits.values()),
                      "misses": sum(kernel.stats.cache_misses.values()),
                      "elapsed": elapsed}}))
''')


def _run(cache, tmp_path):
    module = tmp_path / "cache_kernels.py"
    if not module.exists():
        module.write_text(textwrap.dedent('''
            def dot(x, y):
                s = 0.0
                for i in range(x.shape[0]):
                    s += x[i] * y[i]
                return s
        '''))
    env = dict(os.environ, PYACC_CACHE_DIR=str(cache))
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(tests=str(tmp_path))],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fresh_process_loads_from_disk(tmp_path):
    cache = tmp_path / "cache"
    cold = _run(cache, tmp_path)
    warm = _run(cache, tmp_path)
    assert cold["value"] == warm["value"] == float((__import__("numpy").arange(1000.0)
                                                    ** 2).sum())
    assert cold["hits"] == 0
    assert warm["hits"] == 1 and warm["misses"] == 0
    assert len(list((cache / "kernels").glob("dot_*.py"))) == 1
