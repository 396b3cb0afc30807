"""How many calls of a compute region reach the Python launcher (``slow_calls``): the
express lane's tests count with it, on the CPU devices (``tests/pyacc/test_express.py``)
and on the simulated cuda device (``tests/cuda/test_simulated_runtime.py``)."""

from __future__ import annotations

import pyacc as acc
from pyacc._compute import ComputeRegion


def slow_calls(region, monkeypatch) -> list:
    """A list that grows by one at each call of ``region`` that reaches the Python
    launcher (``ComputeRegion._call_slow``), from a first call: what earlier tests left
    (call plans, express plans) is dropped."""
    calls = []
    region._call_plans = ()  # what earlier tests left: every count starts from a first call
    if acc.express_lane():  # the lane calls the instance's ``_call_slow`` when no plan holds
        region._disarm()
        launcher = type(region)._call_slow

        def counted(*args, **kwargs):
            calls.append(1)
            return launcher(region, *args, **kwargs)

        monkeypatch.setattr(region, "_call_slow", counted, raising=False)
        return calls
    launcher = ComputeRegion.__call__  # without it, the launcher is the call

    def counted_call(self, *args, **kwargs):
        if self is region:
            calls.append(1)
        return launcher(self, *args, **kwargs)

    monkeypatch.setattr(ComputeRegion, "__call__", counted_call)
    return calls
