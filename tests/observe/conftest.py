"""Helpers for the observability tests: run ``program.py`` (or any script) in a fresh
interpreter with PYACC_* variables set, and switch diagnostics on in this process."""

import json
import os
import subprocess
import sys

import pytest

import pyacc as acc

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "program.py")
OBSERVE_VARIABLES = ("PYACC_NOTIFY", "PYACC_TIME", "PYACC_TRACE", "PYACC_CHECK",
                     "PYACC_AUTOCOMPARE", "PYACC_AUTOCOMPARE_RTOL", "PYACC_AUTOCOMPARE_ATOL",
                     "PYACC_DEBUG")


def run_program(script=PROGRAM, *, device="emulated", **variables):
    """Run ``script`` with ``ACC_DEVICE_TYPE=device`` and the given variables; return
    ``(stdout, stderr, stats)`` where stats is the dict the program printed (or None)."""
    environ = {k: v for k, v in os.environ.items() if k not in OBSERVE_VARIABLES}
    environ.update({"ACC_DEVICE_TYPE": device, **{k: str(v) for k, v in variables.items()}})
    done = subprocess.run([sys.executable, script], env=environ, capture_output=True, text=True,
                          timeout=300, cwd=HERE)
    assert done.returncode == 0, done.stderr
    stats = None
    for line in done.stdout.splitlines():
        if line.startswith("STATS "):
            stats = json.loads(line[6:])
    return done.stdout, done.stderr, stats


@pytest.fixture
def observe(monkeypatch):
    """``observe(PYACC_CHECK="1", ...)`` sets the variables and reconfigures; everything
    is switched off again afterwards."""
    for name in OBSERVE_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    def switch_on(**variables):
        for name, value in variables.items():
            monkeypatch.setenv(name, str(value))
        return acc.observe.configure()

    yield switch_on
    for name in OBSERVE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    acc.observe.configure()
