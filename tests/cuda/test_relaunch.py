"""Synchronous calls made again from C (``compiler/cuda_relaunch.py``, ``_relaunch.c.h``),
without a GPU.

Which drivers only launch is decided on generated modules (``get_kernel`` for the cuda
target, nothing launched). The ``Relaunch`` runs against numba-cuda's launch path with the
driver's leaves standing in (``numba_cuda_leaves``): the driver's ``cuLaunchKernel``
(:class:`Driver`) and ``cuStreamSynchronize`` (:class:`Waits`) are C functions made by
ctypes that record what they are given. A relaunched call must make exactly the launches,
word for word, that the launcher made for the same facts, then wait for their stream.
"""
from __future__ import annotations

import ctypes
import threading
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from pyacc.compiler import analyze, cuda_compilers, cuda_plans, cuda_relaunch, cuda_runtime, get_kernel
from pyacc.compiler import parse_clauses

if cuda_runtime.SIMULATED:  # pragma: no cover - conftest keeps this file out
    pytest.skip("numba-cuda's launch path, not the simulator's", allow_module_level=True)
_launch = pytest.importorskip("pyacc.compiler._launch", reason="the C launch is not built")
if not cuda_plans.enabled(cuda_compilers.COMPILERS["numba-cuda"]):
    pytest.skip("plans reproduce numba-cuda 0.30's launch", allow_module_level=True)

from numba import cuda  # noqa: E402 - numba-cuda is installed (above)

from numba_cuda_leaves import STREAM, DeviceArray, Driver, Waits, fill, fill_kernel, fill_machine  # noqa: E402


# == which drivers only launch ===================================================================
def one_nest(a, b, c, n):
    for i in range(n):
        c[i] = a[i] + b[i]


def tiled(a, c, n, m):
    for i in range(n):
        for j in range(m):
            c[i, j] = 2.0 * a[i, j]


def two_nests(a, b, n):
    for i in range(n):
        a[i] = 1.0
    for i in range(len(a)):
        b[i] = a[i]


def reduction(a, n):
    s = 0.0
    for i in range(n):
        s += a[i]
    return s


def host_code(a, n):
    m = n // 2
    for i in range(m):
        a[i] = 1.0


def host_call(a, n):
    for i in range(int(np.sqrt(n))):
        a[i] = 1.0


def serial_part(a, n):
    a[0] = 5.0
    for i in range(n):
        a[i] += 1.0


def steps(a, n):
    for t in range(3):
        for i in range(n):
            a[i] += 1.0


def private_array(a, n):
    tmp = np.zeros(2)
    for i in range(n):
        tmp[0] = a[i]
        a[i] = tmp[0] * 2.0


def made_array(a, n):
    t = np.ones(4)
    for i in range(n):
        a[i] = t[i % 4]


def element_bound(a, m, n):
    for i in range(m[0]):
        a[i] = 1.0


def element_max_bound(a, m, n):
    for i in range(max(m[0], n)):
        a[i] = 1.0


def zero_d_bound(a, m):
    for i in range(m):
        a[i] = 1.0


SIZES = [16]


def global_bound(a):
    for i in range(SIZES[0]):
        a[i] = 1.0


def layout_bounds(a, b):
    for i in range(min(len(a), b.shape[0])):
        b[i] = a[i]


_V, _M = np.ones(16), np.ones((4, 4))
_I = np.array([8, 8])


@pytest.mark.parametrize("function, clauses, args, expected", [
    (one_nest, "parallel_loop", (_V, _V, _V, 16), True),
    (tiled, "parallel_loop collapse(2)", (_M, _M, 4, 4), True),
    (two_nests, "kernels", (_V, _V, 16), True),
    (reduction, "parallel_loop reduction(+:s)", (_V, 16), False),
    (host_code, "kernels", (_V, 16), False),
    (host_call, "parallel_loop", (_V, 16), False),
    (serial_part, "kernels", (_V, 16), False),
    (steps, "kernels", (_V, 16), False),
    (private_array, "parallel_loop private(tmp)", (_V, 16), False),
    (made_array, "kernels", (_V, 16), False),
    (layout_bounds, "parallel_loop", (_V, _V), True),
    # bounds the facts do not cover: an element of an array, a global's value
    (element_bound, "parallel_loop", (_V, _I, 16), False),
    (element_max_bound, "parallel_loop", (_V, _I, 16), False),
    (zero_d_bound, "parallel_loop", (_V, np.array(8)), False),
    (global_bound, "parallel_loop", (_V,), False),
])
def test_a_driver_is_relaunchable_when_it_only_launches_its_nests(function, clauses, args,
                                                                expected):
    """``cuda_relaunch.only_launches``: nests' bounds, shapes and launches, nothing else."""
    construct, _, clause_string = clauses.partition(" ")
    info = analyze(function, parse_clauses(construct, clause_string or None))
    with warnings.catch_warnings():  # (``steps``' loop runs sequentially, and says so)
        warnings.simplefilter("ignore")
        kernel = get_kernel(info, args, target="cuda", device_type="cuda")
    assert kernel.relaunchable is expected


# == the Relaunch ==================================================================================
@pytest.fixture
def machine(monkeypatch):
    """``numba_cuda_leaves.fill_machine``: a synchronous launcher of one launch of ``fill``,
    the driver's two functions standing in; its failed waits counted."""
    machine = fill_machine(monkeypatch)

    def on_failure():
        machine.failures += 1
        raise RuntimeError("an operation on the synchronous queue failed")
    machine.relaunch = cuda_relaunch.relaunching(machine.launcher, on_failure)
    return machine


def _words(launch) -> bytes:
    return b"".join(launch[5])


def test_a_call_with_the_facts_of_a_recorded_one_is_made_again_from_c(machine):
    a = DeviceArray((100, 3))
    relaunch = machine.relaunch
    assert isinstance(relaunch, _launch.Relaunch)
    for _ in range(3):  # the dispatcher twice (facts seen once, then the plan made), the plan
        relaunch(a, 100, 1.5)
    assert (machine.calls, relaunch.kept, relaunch.relaunched) == (3, 1, 0)
    for _ in range(4):
        assert relaunch(a, 100, 1.5) is None
    assert (machine.calls, relaunch.relaunched) == (3, 4)
    launches = machine.driver.launches
    assert len(launches) == 1 + 4 and len({_words(launch) for launch in launches}) == 1
    assert {launch[:5] for launch in launches} == {(0xf111, (4, 1, 1), (32, 1, 1), 0,
                                                     STREAM.handle)}
    assert machine.waits.streams == [STREAM.handle] * 4
    assert machine.watch.calls == 2  # numba-cuda's dispatcher: its first two launches only


@pytest.mark.parametrize("first, other", [
    (1.5, 2.5), (0.0, -0.0), (1.5, np.float64(1.5)), (1.5, 1), (np.float32(0.0), np.float32(-0.0)),
    (7, 8), (True, 1),
])
def test_other_scalar_facts_go_through_the_launcher(machine, first, other):
    """A scalar's type and exact value (its bits: 0.0 is not -0.0) are facts."""
    a = DeviceArray((100, 3))
    for _ in range(3):
        machine.relaunch(a, 100, first)
    calls = machine.calls
    machine.relaunch(a, 100, other)
    assert machine.calls == calls + 1


def test_other_array_facts_go_through_the_launcher(machine):
    a = DeviceArray((100, 3))
    for _ in range(3):
        machine.relaunch(a, 100, 1.5)
    for other in (DeviceArray((100, 3), ptr=0x9000), DeviceArray((100, 3), np.float32),
                  a.view_of_rows(50), DeviceArray((100, 3), order="F")):
        calls = machine.calls
        machine.relaunch(other, 100, 1.5)
        assert machine.calls == calls + 1
    same = DeviceArray((100, 3))  # another object, the same facts: the same words
    relaunched = machine.relaunch.relaunched
    machine.relaunch(same, 100, 1.5)
    assert machine.relaunch.relaunched == relaunched + 1


def test_two_sets_of_facts_take_turns(machine):
    """Jacobi's ``step(u, unew)``, ``step(unew, u)``: both kept, both made again."""
    u, v = DeviceArray((100, 3)), DeviceArray((100, 3), ptr=0x9000)
    for _ in range(3):
        machine.relaunch(u, 100, 1.5)
        machine.relaunch(v, 100, 1.5)
    calls = machine.calls
    for _ in range(5):
        machine.relaunch(u, 100, 1.5)
        machine.relaunch(v, 100, 1.5)
    assert machine.calls == calls and machine.relaunch.relaunched == 10
    pointers = [int.from_bytes(launch[5][4], "little") for launch in machine.driver.launches[-10:]]
    assert pointers == [u.data.ptr, v.data.ptr] * 5


def test_a_relaunched_launch_has_the_words_of_the_launchers(machine):
    """Each new value is launched by the launcher once, then made again from C: the same
    bytes the launcher's launch gave the driver."""
    a = DeviceArray((100, 3))
    for x in (1.5, 1.5, 1.5, -2.0, -2.0, 0.25, 0.25, -2.0):
        machine.relaunch(a, 100, x)
    by_value = {}
    for launch in machine.driver.launches:
        x = ctypes.c_double.from_buffer_copy(launch[5][-1]).value
        by_value.setdefault(x, set()).add(_words(launch))
    assert set(by_value) == {1.5, -2.0, 0.25} and all(len(w) == 1 for w in by_value.values())


@pytest.mark.parametrize("args", [
    (np.zeros((4, 3)), 4, 1.5),  # a host array: the launcher refuses it
    (DeviceArray((100, 3)), 100, (1.5,)),  # a tuple
])
def test_arguments_of_other_kinds_are_never_kept(machine, args):
    for _ in range(4):
        with pytest.raises(Exception):
            machine.relaunch(*args)
    assert machine.relaunch.kept == 0 and machine.calls == 4


def test_a_call_with_a_launch_through_the_dispatcher_is_not_kept(machine, monkeypatch):
    a = DeviceArray((100, 3))
    other = cuda.jit(fill)
    monkeypatch.setattr(cuda_runtime, "_prepared", [DeviceArray])

    def launcher(a, n, x):
        machine.calls += 1
        cuda_runtime.launch(fill_kernel(), (4, 1), (32, 1), (a, n, x))
        cuda_plans._plans.pop((other, 1, 32, cuda_runtime.stream()), None)  # never planned
        cuda_runtime.launch(other, 1, 32, (a, n, x))
    relaunch = cuda_relaunch.relaunching(launcher, lambda: None)
    for _ in range(5):
        relaunch(a, 100, 1.5)
    assert relaunch.kept == 0 and machine.calls == 5


def test_keywords_go_through_the_launcher(machine):
    calls = []
    relaunch = cuda_relaunch.relaunching(lambda *args, **kw: calls.append(kw), lambda: None)
    relaunch(1, x=2)
    assert calls == [{"x": 2}]


def test_a_refused_relaunch_raises_the_drivers_error(machine):
    a = DeviceArray((100, 3))
    for _ in range(3):
        machine.relaunch(a, 100, 1.5)
    machine.driver.result = 700  # CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(Exception, match="CUDA_ERROR_ILLEGAL_ADDRESS") as raised:
        machine.relaunch(a, 100, 1.5)
    assert not isinstance(raised.value, _launch.LaunchFailed)
    assert machine.waits.streams == []  # not waited for: nothing was launched


def test_a_failed_wait_raises_what_the_queues_wait_raises(machine):
    a = DeviceArray((100, 3))
    for _ in range(3):
        machine.relaunch(a, 100, 1.5)
    machine.waits.result = 719  # CUDA_ERROR_LAUNCH_FAILED
    with pytest.raises(RuntimeError, match="the synchronous queue failed"):
        machine.relaunch(a, 100, 1.5)
    assert machine.failures == 1


def test_a_failed_wait_the_queue_does_not_see_still_raises(machine):
    a = DeviceArray((100, 3))
    relaunch = cuda_relaunch.relaunching(machine.relaunch.fallback, lambda: None)
    for _ in range(3):
        relaunch(a, 100, 1.5)
    machine.waits.result = 719
    with pytest.raises(RuntimeError, match="cuStreamSynchronize failed: CUresult 719"):
        relaunch(a, 100, 1.5)


def test_threads_relaunch_one_call_with_scalars_of_their_own(machine):
    a = DeviceArray((100, 3))
    values = [float(v) for v in range(6)]
    for x in values:  # each value kept... 4 at most: the last four
        for _ in range(3):
            machine.relaunch(a, 100, x)
    errors = []

    def calls(x):
        try:
            for _ in range(200):
                machine.relaunch(a, 100, x)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
    threads = [threading.Thread(target=calls, args=(x,)) for x in values]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    launched = [ctypes.c_double.from_buffer_copy(launch[5][-1]).value
                for launch in machine.driver.launches[-1200:]]
    assert sorted(launched) == sorted(values * 200)


def test_relaunches_turned_off_send_every_call_to_the_launcher(machine):
    a = DeviceArray((100, 3))
    for _ in range(3):
        machine.relaunch(a, 100, 1.5)
    assert _launch.set_relaunching(False) is True
    try:
        for _ in range(3):
            machine.relaunch(a, 100, 1.5)
    finally:
        assert _launch.set_relaunching(True) is False
    assert machine.calls == 6 and machine.relaunch.relaunched == 0
    machine.relaunch(a, 100, 1.5)
    assert machine.calls == 6 and machine.relaunch.relaunched == 1


def test_nothing_is_relaunched_without_the_drivers_functions(monkeypatch):
    monkeypatch.setattr(cuda_plans, "_driver", {"cuLaunchKernel": None,
                                                "cuStreamSynchronize": None})

    def kernel(*args):
        return args
    assert cuda_relaunch.relaunching(kernel, lambda: None) is kernel


# == the Relaunch alone: its launches' records made by hand ======================================
class _Handmade:
    """A ``Relaunch`` whose recorder says the call made ``count`` launches of records of
    its own (handle ``i``, the scalar's bits as the last word), on a stand-in driver."""

    def __init__(self, count=3, launches=None):
        self.driver, self.waits, self.calls = Driver(2), Waits(), 0
        self.count, self.launches = count, launches

        def recorder(call, args):
            made = self.launches or [
                (_launch.LaunchRecord(self.driver.address, i, (1, 1, 1), (1, 1, 1), 0, 5,
                                      (i, args[0])), ()) for i in range(self.count)]
            return call(*args), made
        self.relaunch = _launch.Relaunch(self._launcher, recorder, DeviceArray,
                                         cuda_plans.NUMBERS, lambda: None, RuntimeError,
                                         self.waits.address)

    def _launcher(self, x):
        self.calls += 1


def test_an_entry_replaced_while_it_launches_still_launches_whole():
    """Python that runs inside a relaunch's driver call (a callback, a profiler) may push
    every kept entry out: the relaunch in progress still makes its own launches, all of
    them, from what it took out."""
    made = _Handmade()
    relaunch, state = made.relaunch, {"reenter": False}
    for _ in range(2):
        relaunch(1.0)
    real = made.driver._launch

    def launch(handle, *rest):
        if state.pop("reenter", False):
            for x in range(10, 16):
                for _ in range(2):
                    relaunch(float(x))
        return real(handle, *rest)
    made.driver._launch = launch
    state["reenter"] = True
    before = len(made.driver.launches)
    relaunch(1.0)
    mine = [launch for launch in made.driver.launches[before:]
            if ctypes.c_double.from_buffer_copy(launch[5][1]).value == 1.0]
    assert [launch[0] or 0 for launch in mine] == [0, 1, 2]  # (ctypes: a null handle is None)


def test_launches_that_cannot_be_kept_fail_no_call():
    """Keeping is the next calls' saving: a word a kept launch cannot pack costs this call
    nothing (it ran), and nothing is kept."""
    record = _launch.LaunchRecord(Driver(1).address, 1, (1, 1, 1), (1, 1, 1), 0, 5, (7,))
    made = _Handmade(launches=[(record, ((0, (object(),)),))])
    assert made.relaunch(1.0) is None and made.relaunch(1.0) is None
    assert (made.calls, made.relaunch.kept) == (2, 0)


def test_a_profiled_call_goes_through_the_launcher():
    """Under ``sys.setprofile`` (cProfile before 3.12) the launcher's frames are seen."""
    import sys

    made = _Handmade()
    for _ in range(2):
        made.relaunch(1.0)
    sys.setprofile(lambda frame, event, arg: None)
    try:
        made.relaunch(1.0)
    finally:
        sys.setprofile(None)
    expected = 2 if sys.version_info < (3, 12) else 1
    assert made.calls == expected


def test_a_relaunch_in_a_cycle_is_collected():
    import gc
    import weakref

    made = _Handmade()
    made.relaunch(1.0)
    made.relaunch(1.0)
    alive = weakref.ref(made)
    del made  # (made -> relaunch -> its launcher, a bound method of made)
    gc.collect()
    assert alive() is None


def test_a_word_a_record_cannot_pack_leaves_the_launch_to_cuda_core(monkeypatch):
    monkeypatch.setattr(cuda_plans, "_driver", {"cuLaunchKernel": Driver(1).address})
    handle, stream = SimpleNamespace(handle=1), SimpleNamespace(handle=2)
    assert cuda_plans.record(handle, 1, 1, 0, stream, [(np.complex128(1),)]) is None
    assert cuda_plans.record(handle, 1, 1, 0, stream, [(np.float64(1),)]) is not None
