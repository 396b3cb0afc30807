"""Shared fixtures.

- ``emulated``: the current thread uses the emulated device (separate device memory),
  with an empty present table and zeroed stats; everything is shut down afterwards.
- ``host_device``: the same for the shared-memory ``host`` device.
- ``device``: parametrised over every device type available here (host, emulated, and
  cuda when a GPU is usable), for end-to-end tests that must hold on all of them.
- ``separate_memory``: the same over the device types with memory of their own (emulated,
  and cuda when usable: a real GPU, or the fake one in the simulator run).
- ``python_launcher``: compute calls take the Python launcher only, as where the C
  express lane (``pyacc/_fastcall.c``) is not built.
- ``python_frames``: which of pyacc's Python functions a call entered (the C lanes'
  tests: a call they finish enters none).
- ``held_by_another_thread``: ``with held_by_another_thread(lock):`` — another thread
  holds ``lock`` for the block's duration (a held table lock, a fork's old lock).
- ``listening``: ``listening(*kinds)`` subscribes one list to those event kinds until the
  test ends and returns it.
- ``prepared_calls_on``: skips a test of CPU kernels' prepared calls where they are off,
  on Numba's ``workqueue`` threading layer (kernels take turns there:
  compiler/threading_layer.py).
"""

import contextlib
import sys
import threading

import pytest

import pyacc as acc
from pyacc.mapping import BUS


@pytest.fixture
def prepared_calls_on():
    from pyacc.compiler import threading_layer  # (asked when such a test runs: it runs kernels)

    if threading_layer.serialized():
        pytest.skip("Numba's threading layer is workqueue: CPU kernels take turns and have no "
                    "prepared calls (compiler/threading_layer.py)")


def _fresh(device_type):
    acc.shutdown(device_type)
    acc.set_device_type(device_type)
    acc.set_device_num(0, device_type)
    acc.set_default_async(acc.async_noval)
    acc.reset_stats()


@pytest.fixture
def emulated():
    _fresh("emulated")
    yield "emulated"
    acc.shutdown("emulated")


@pytest.fixture
def host_device():
    _fresh("host")
    yield "host"
    acc.shutdown("host")


def _available_types():
    types = ["host", "emulated"]
    if acc.get_num_devices("cuda") > 0:
        types.append("cuda")
    return types


@pytest.fixture(params=_available_types())
def device(request):
    _fresh(request.param)
    yield request.param
    acc.shutdown(request.param)


@pytest.fixture(params=[t for t in _available_types() if t != "host"])
def separate_memory(request):
    _fresh(request.param)
    yield request.param
    acc.wait()
    acc.shutdown(request.param)


@pytest.fixture
def python_launcher():
    from pyacc._express import set_lane
    previous = set_lane(False)
    yield
    set_lane(previous)


@pytest.fixture
def python_frames():
    """``python_frames(function, *args, **kwargs)``: the names of pyacc's Python functions
    that the call entered (a profile hook; C code and other packages are not listed)."""
    def run(function, *args, **kwargs) -> list[str]:
        entered = []

        def profile(frame, event, arg):
            if event == "call" and "pyacc" in frame.f_code.co_filename:
                entered.append(frame.f_code.co_name)

        sys.setprofile(profile)
        try:
            function(*args, **kwargs)
        finally:
            sys.setprofile(None)
        return entered

    return run


@pytest.fixture
def listening():
    """Subscribe a list to some event kinds for the test's duration."""
    seen, kinds_seen = [], []

    def subscribe(*kinds):
        BUS.subscribe(seen.append, kinds)
        kinds_seen.append(kinds)
        return seen

    yield subscribe
    for kinds in kinds_seen:
        BUS.unsubscribe(seen.append, kinds)


@pytest.fixture
def held_by_another_thread():
    """``with held_by_another_thread(lock):``: ``lock`` held by another thread for the
    block's duration."""
    @contextlib.contextmanager
    def hold(lock):
        held, release = threading.Event(), threading.Event()

        def keep():
            with lock:
                held.set()
                release.wait(30)

        holder = threading.Thread(target=keep)
        holder.start()
        held.wait(30)
        try:
            yield
        finally:
            release.set()
            holder.join(30)

    return hold
