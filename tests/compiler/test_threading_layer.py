"""Numba's threading layer under pyacc's CPU kernels (compiler/threading_layer.py): what
each layer does with two threads' kernels and with an exception inside a parallel loop,
and that pyacc says so (``pyacc info``, ``acc.explain``). Each case runs in a child
process: a threading layer is chosen once per process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_TWO_QUEUES = textwrap.dedent("""
    import numpy as np
    import pyacc as acc
    from pyacc.compiler import threading_layer

    @acc.parallel_loop(present="image")
    def rows(image, first, count):
        for r in range(count):
            for c in range(image.shape[1]):
                image[first + r, c] = (first + r) * 1000 + c

    acc.set_device_type("host")
    image = np.zeros((512, 4096))
    with acc.data(copy=[image]):
        for round in range(20):  # two queues and this thread run kernels at once
            for block in range(8):
                rows(image, block * 64, 64, async_=block % 2)
            rows(image, 0, 64)
        acc.wait()
    expected = np.arange(512)[:, None] * 1000 + np.arange(4096)[None, :]
    assert (image == expected).all()
    print("layer", threading_layer.layer(), "caveat", threading_layer.caveat())
""")


def _child(code: str, layer: str, folder: Path) -> subprocess.CompletedProcess:
    script = folder / "program.py"  # (kernels live in files)
    script.write_text(code)
    env = dict(os.environ, NUMBA_THREADING_LAYER=layer, NUMBA_NUM_THREADS="2",
               PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    return subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_workqueue_kernels_take_turns_instead_of_aborting_the_process(tmp_path):
    """Numba's workqueue aborts the process when two threads run parallel kernels at once
    ("Concurrent access has been detected"), which two async queues do: pyacc's parallel
    kernels take turns there (the image without oneTBB and libgomp of the lent H100)."""
    done = _child(_TWO_QUEUES, "workqueue", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "layer workqueue" in done.stdout and "never reported" in done.stdout
    assert "Concurrent access" not in done.stderr


def test_the_layer_and_its_caveat_are_in_pyacc_info():
    done = subprocess.run([sys.executable, "-m", "pyacc", "info"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ, NUMBA_THREADING_LAYER="workqueue"))
    line, = [text for text in done.stdout.splitlines() if text.startswith("CPU threading layer")]
    assert "workqueue" in line and "not oneTBB" in line and "pip install tbb" in line


def test_onetbb_has_no_caveat_and_runs_kernels_side_by_side(tmp_path):
    from pyacc.compiler import threading_layer

    if threading_layer.layer() != "tbb":  # (not loadable here, or another layer chosen)
        pytest.skip(f"this process runs on {threading_layer.layer()}, not oneTBB")
    done = _child(_TWO_QUEUES, "tbb", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "layer tbb caveat None" in done.stdout
