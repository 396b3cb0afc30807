"""A repeated CPU call goes through its kernel's prepared call (``compiler/cpu_plans.py``,
``pyacc/_prepared_call.c.h``): plain words and one C call instead of Numba's dispatcher.
It must give exactly what the dispatcher gives — the same results, return values and
errors — and hand every call it cannot describe back to the dispatcher."""

import sys
import threading

import numpy as np
import pytest
from numba import njit

import pyacc as acc
from pyacc.compiler import cpu_plans

from test_fast_paths import total_of  # the same sum: one region for both modules

pytestmark = [pytest.mark.skipif(not acc.express_lane(), reason="the C express lane is not built"),
              pytest.mark.usefixtures("prepared_calls_on")]

CPU_DEVICES = ["host", "emulated"]


def prepared_calls() -> int:
    from pyacc import _fastcall

    return _fastcall.prepared_calls()


@pytest.fixture(params=CPU_DEVICES)
def cpu(request):
    acc.shutdown(request.param)
    acc.set_device_type(request.param)
    acc.set_default_async(acc.async_noval)
    yield request.param
    acc.wait()
    acc.shutdown(request.param)


@acc.parallel_loop
def axpy(y, x, a, n):
    for i in range(n):
        y[i] = y[i] + a * x[i]


@acc.parallel_loop(reduction="+:total max:biggest")
def total_and_max(x):
    total = 0.0
    biggest = -1e300
    for i in range(x.shape[0]):
        total += x[i]
        biggest = max(biggest, x[i])
    return total, biggest


@acc.parallel_loop(collapse=2)
def grid_update(u, v, scale, flip):
    for i in range(u.shape[0]):
        for j in range(u.shape[1]):
            if flip:
                u[i, j] = scale * v[i, j] - u[i, j]
            else:
                u[i, j] = scale * v[i, j] + u[i, j]


@acc.parallel_loop
def shift(y, k):
    for i in range(y.shape[0]):
        y[i] = y[i] + k


@acc.parallel_loop(collapse=3)
def sum_of_ten(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, scale):
    for i in range(a0.shape[0]):
        for j in range(a0.shape[1]):
            for k in range(a0.shape[2]):
                a0[i, j, k] = scale * (a1[i, j, k] + a2[i, j, k] + a3[i, j, k] + a4[i, j, k]
                                       + a5[i, j, k] + a6[i, j, k] + a7[i, j, k] + a8[i, j, k]
                                       + a9[i, j, k])


@acc.routine
def quotient(a, b):
    if b == 0:  # (a // 0 itself is 0: NumPy's error model)
        raise ZeroDivisionError("integer division by zero")
    return a // b


@acc.parallel_loop
def divide(y, a, b):
    # (the call is loop-invariant: Numba hoists it out of the parallel loop, and its
    # overload then returns a result with the routine's exception set; the prepared call
    # checks for it, as CPython checks the dispatcher's result)
    for i in range(y.shape[0]):
        y[i] = quotient(a, b)


def test_a_repeated_call_goes_through_its_prepared_call(cpu):
    x, y = np.arange(100.0), np.zeros(100)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(3):  # the launcher, then the lane arms and prepares
            axpy(y, x, 2.0, 100)
        before = prepared_calls()
        for _ in range(5):
            axpy(y, x, 2.0, 100)
        assert prepared_calls() - before == 5
    np.testing.assert_array_equal(y, 16.0 * np.arange(100.0))


def test_a_reduction_returns_its_value_through_the_prepared_call(cpu):
    x = np.arange(1.0, 11.0)
    with acc.data(copyin=[x]):
        for _ in range(3):
            total_of(x)
            total_and_max(x)
        before = prepared_calls()
        assert total_of(x) == 55.0
        assert total_and_max(x) == (55.0, 10.0)
        assert prepared_calls() - before == 2


def test_prepared_calls_pass_scalars_of_each_kind_and_arrays_of_any_layout(cpu):
    """Fortran-ordered and strided arrays, ints, floats and bools: the same as NumPy."""
    u = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    whole = np.arange(24.0).reshape(3, 8)
    v = whole[:, ::2]  # not contiguous: a view of a mapped array
    expected = u.copy()
    before = prepared_calls()
    with acc.data(copy=[u], copyin=[whole]):
        for flip in (False, True, False, True, True, False):
            grid_update(u, v, 0.5, flip)
            expected = 0.5 * v - expected if flip else 0.5 * v + expected
    assert prepared_calls() - before >= 3
    np.testing.assert_array_equal(u, expected)


def test_an_int_beyond_int64_takes_the_dispatcher(cpu):
    """The words carry an int64: a bigger int goes to the dispatcher, which refuses it as
    the Python launcher does (the kernel was compiled for int64)."""
    y = np.zeros(4)
    with acc.data(copy=[y]):
        for _ in range(3):
            shift(y, 1)
        before = prepared_calls()
        with pytest.raises(acc.ExecutionError, match="OverflowError"):
            shift(y, 2**63)
        assert prepared_calls() == before
        shift(y, -2**63)
        assert prepared_calls() == before + 1
    np.testing.assert_array_equal(y, np.full(4, 3.0 - float(2**63)))


def test_a_kernel_error_through_the_prepared_call_is_the_dispatchers(cpu):
    y = np.zeros(4)
    with acc.data(copy=[y]):
        with pytest.raises(Exception) as first:  # the Python launcher, the dispatcher
            divide(y, 1, 0)
        for _ in range(3):
            divide(y, 6, 3)
        before = prepared_calls()
        with pytest.raises(type(first.value)) as again:
            divide(y, 1, 0)
        assert prepared_calls() == before + 1
        assert str(again.value) == str(first.value)
        divide(y, 8, 2)  # the lane goes on after an error
    np.testing.assert_array_equal(y, np.full(4, 4.0))


@pytest.mark.parametrize("inline_below", ["1000", "0"])  # run at once; by the queue's thread
def test_an_async_routine_error_names_the_routines_exception(cpu, monkeypatch, inline_below):
    """API.md §5, §7: the wait raises ExecutionError naming what the routine raised, as a
    synchronous call does, not Python's SystemError around it."""
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", inline_below)
    acc.shutdown()  # queues read the crossover again
    y = np.zeros(4)
    divide(y, 1, 0, async_=1)
    with pytest.raises(acc.ExecutionError, match="ZeroDivisionError: integer division by zero") \
            as raised:
        acc.wait(1)
    assert "SystemError" not in str(raised.value)


def test_an_async_call_run_at_once_goes_through_the_prepared_call(cpu, monkeypatch):
    monkeypatch.setenv("PYACC_ASYNC_INLINE_BELOW", "1000")  # every kernel runs at once
    acc.shutdown(cpu)
    acc.set_device_type(cpu)
    x, y = np.ones(50), np.zeros(50)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(3):
            axpy(y, x, 1.0, 50, async_=1)
            acc.wait(1)
        before = prepared_calls()
        for _ in range(4):
            axpy(y, x, 1.0, 50, async_=1)
        acc.wait(1)
        assert prepared_calls() - before == 4
    np.testing.assert_array_equal(y, np.full(50, 7.0))


def test_threads_share_a_prepared_call(cpu):
    arrays = [np.zeros(64) for _ in range(4)]
    errors = []

    def run(y):
        try:
            acc.set_device_type(cpu)
            ones = np.ones(64)
            with acc.data(copyin=[ones], copy=[y]):
                for _ in range(200):
                    axpy(y, ones, 1.0, 64)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(y,)) for y in arrays]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for y in arrays:
        np.testing.assert_array_equal(y, np.full(64, 200.0))


def test_an_interrupt_while_preparing_reaches_the_caller(cpu, monkeypatch):
    """A Ctrl-C in the preparation (~15 ms for a new shape) is raised by the call, nothing
    taken or counted; the next call prepares again."""
    from pyacc import _fastcall

    asked = []

    def interrupted(kernel, args):
        asked.append(1)
        raise KeyboardInterrupt

    x, y = np.ones(8), np.zeros(8)
    with acc.data(copyin=[x], copy=[y]):
        axpy._disarm()  # a fresh plan: prepared at its first call in the lane
        monkeypatch.setattr(axpy, "_call_plans", ())
        _fastcall.configure_prepared(interrupted, acc._express.gil_hold_below())
        try:
            for keywords in ({}, {"async_": 1}):
                axpy._disarm()
                asked.clear()
                raised = False
                for _ in range(6):
                    try:
                        axpy(y, x, 1.0, 8, **keywords)
                    except KeyboardInterrupt:
                        raised = True
                        break
                assert asked == [1] and raised
                acc.wait()
        finally:
            _fastcall.configure_prepared(cpu_plans.prepare, acc._express.gil_hold_below())
        axpy(y, x, 1.0, 8)  # prepared again, now for real
        before = prepared_calls()
        axpy(y, x, 1.0, 8)
        assert prepared_calls() == before + 1


def test_a_profiler_sees_the_kernel_called_by_its_dispatcher(cpu):
    """Up to CPython 3.11 Numba's dispatcher reports a kernel's call to the profiler
    (``sys.setprofile``, which cProfile uses there): a profiled call goes through it. From
    3.12 cProfile uses ``sys.monitoring`` and the dispatcher reports to no profiler, so
    going through it would only be slower: the prepared call stays (an H100 image's
    Python 3.12 showed the difference)."""
    import cProfile
    import pstats

    x, y = np.ones(8), np.zeros(8)
    reported = sys.version_info < (3, 12)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(3):
            axpy(y, x, 1.0, 8)
        before = prepared_calls()
        profile = cProfile.Profile()
        profile.runcall(lambda: [axpy(y, x, 1.0, 8) for _ in range(5)])
        assert prepared_calls() == (before if reported else before + 5)
        names = {function[2] for function in pstats.Stats(profile).stats}
        assert ("_acc_kernel" in names) == reported
        axpy(y, x, 1.0, 8)
        assert prepared_calls() == (before + 1 if reported else before + 6)
    np.testing.assert_array_equal(y, 9.0)
    np.testing.assert_array_equal(y, np.full(8, 9.0))


# -- compiler.cpu_plans.prepare itself --------------------------------------------------


@njit(nogil=True)
def _add(a, b, n):
    for i in range(n):
        a[i] += b[i]
    return n


@njit
def _view(a):
    return a[1:]


def test_prepare_answers_only_for_compiled_arguments_it_can_describe():
    a, b = np.zeros(3), np.ones(3)
    assert cpu_plans.prepare(_add, (a, b, 3)) is None  # not compiled for them yet
    _add(a, b, 3)
    trampoline, holding, function, environment, kinds = cpu_plans.prepare(_add, (a, b, 3))
    assert kinds == b"\x01\x01i" and trampoline and function and environment
    assert holding and holding != trampoline, "a nogil kernel has a trampoline that keeps the GIL"
    assert cpu_plans.prepare(_add, (a, b, 2**63)) is None  # typed uint64
    assert cpu_plans.prepare(_add, (a, [1.0, 2.0, 3.0], 3)) is None  # a list
    assert cpu_plans.prepare(_add, (a, np.ma.masked_array(b), 3)) is None  # a subclass
    assert cpu_plans.prepare(_add.py_func, (a, b, 3)) is None  # not a dispatcher
    _view(a)
    assert cpu_plans.prepare(_view, (a,)) is None  # returns an array


def test_an_answer_is_kept_per_kernel_and_argument_types_until_a_recompile(monkeypatch):
    """A new plan asks again (a data region that maps anew): the answer kept for the same
    dtypes, dimensions, typing flags and scalar types is given without typing again."""
    a, b = np.zeros(3), np.ones(3)
    _add(a, b, 3)
    first = cpu_plans.prepare(_add, (a, b, 3))
    made = []
    real = cpu_plans._prepare
    monkeypatch.setattr(cpu_plans, "_prepare", lambda *args: made.append(args) or real(*args))
    assert cpu_plans.prepare(_add, (np.zeros(5), np.arange(4.0)[::2].copy(), 7)) == first
    assert made == [], "kept: the same types, other arrays and values"
    assert cpu_plans.prepare(_add, (a, b[::2], 3)) is None and len(made) == 1  # not C-contiguous
    readonly = b.copy()
    readonly.flags.writeable = False
    assert cpu_plans.prepare(_add, (a, readonly, 3)) is None and len(made) == 2  # not compiled for it
    assert cpu_plans.prepare(_add, (a, b, 2**63)) is None and len(made) == 2  # never prepared
    _add.recompile()
    again = cpu_plans.prepare(_add, (a, b, 3))
    assert len(made) == 3 and again[2] != first[2], "a recompiled overload: made anew"
    np.testing.assert_array_equal(np.asarray(again[4]), np.asarray(first[4]))


def test_kernels_of_one_shape_share_one_trampoline():
    @njit(nogil=True)
    def other(a, b, n):
        a[0] = b[0] * n
        return n

    a, b = np.zeros(3), np.ones(3)
    _add(a, b, 3)
    other(a, b, 3)
    first, second = cpu_plans.prepare(_add, (a, b, 3)), cpu_plans.prepare(other, (a, b, 3))
    assert first[:2] == second[:2] and first[2] != second[2]

    @njit
    def holds(a, b, n):  # not nogil: its one trampoline keeps the GIL, the shape's holding one
        a[0] = b[0] - n
        return n

    holds(a, b, 3)
    third = cpu_plans.prepare(holds, (a, b, 3))
    assert third[0] == third[1] == first[1]


def held_calls() -> int:
    from pyacc import _fastcall

    return _fastcall.held_calls()


@acc.serial
def spin(x, rounds, k):  # one thread (a parallel loop's launch gives the GIL back itself)
    for i in range(x.shape[0]):
        for _ in range(rounds[0] + k):
            x[i] = 0.5 * x[i] + 1.0


def test_a_short_call_repeated_keeps_the_gil_others_give_it_back(cpu):
    x, rounds = np.zeros(64), np.ones(1, dtype=np.int64)
    with acc.data(copy=[x], copyin=[rounds]):
        for _ in range(5):
            spin(x, rounds, 0)  # compiled, prepared
        prepared, held = prepared_calls(), held_calls()
        for _ in range(50):
            spin(x, rounds, 0)  # short (a few µs; a neighbour may stretch one past 10 µs)
        assert prepared_calls() == prepared + 50
        assert held_calls() - held >= 25, "the same words as a short call: the GIL kept"
        for k in (1, 0, 1, 0):  # other words each time (the trip count may differ): released
            held = held_calls()
            spin(x, rounds, k)
            assert held_calls() == held
        ticks = []
        stop = threading.Event()

        def tick():  # another Python thread: it runs only while the GIL is free
            while not stop.is_set():
                ticks.append(1)
                stop.wait(0.0005)

        ticker = threading.Thread(target=tick)
        ticker.start()
        runs = {True: [], False: []}  # the GIL kept -> ticks during each long run
        try:
            for _ in range(20):
                rounds[0] = 1
                acc.update_device(rounds)
                spin(x, rounds, 0)
                spin(x, rounds, 0)  # short: the same words next keep the GIL (unless stretched)
                rounds[0] = 3_000_000  # the same words, a long run (~0.1 s): the GIL kept
                acc.update_device(rounds)
                for _ in range(9):  # a kept call is timed one in 8: given back within 9 calls
                    held, start = held_calls(), len(ticks)
                    spin(x, rounds, 0)
                    kept = held_calls() == held + 1
                    runs[kept].append(len(ticks) - start)
                    if not kept:
                        break
                if runs[True] and runs[False]:
                    break
        finally:
            stop.set()
            ticker.join()
        # (a kept run's ticks are the ticker's turns at the call's edges, when the switch
        # interval hands it the GIL between bytecodes: a few, more on a loaded machine —
        # 4 seen with the suite on 3 workers over 2 cores; a released ~0.1 s run: dozens)
        assert runs[True] and max(runs[True]) <= 6, "no other thread runs while a kernel keeps the GIL"
        assert runs[False] and min(runs[False]) > 10, "a long kernel gives the GIL back (and others run)"
    np.testing.assert_allclose(x, 2.0)


def test_a_prepared_call_that_cannot_be_built_is_said_once(monkeypatch, capsys):
    @njit
    def lonely(a, flag):
        a[0] = 1.0 if flag else 2.0

    a = np.zeros(2)
    lonely(a, True)

    def broken(*args):
        raise AttributeError("no such internal")

    monkeypatch.setattr(cpu_plans, "_build", broken)
    monkeypatch.setenv("PYACC_INFO", "1")
    assert cpu_plans.prepare(lonely, (a, True)) is None
    assert cpu_plans.prepare(lonely, (a, True)) is None
    said = capsys.readouterr().err
    assert said.count("kernel lonely is called through Numba's dispatcher") == 1
    assert "AttributeError: no such internal" in said


def test_the_lane_holds_as_many_words_as_prepare_allows():
    from pyacc import _fastcall

    assert _fastcall.PREPARED_WORDS == cpu_plans.MOST_WORDS


def test_a_call_of_many_arrays_is_prepared(cpu):
    """Ten 3-D arrays and a scalar: 2 + 10 × 7 + 1 words."""
    arrays = [np.full((2, 3, 4), float(i)) for i in range(10)]
    with acc.data(copy=arrays):
        for _ in range(3):
            sum_of_ten(*arrays, 2.0)
        before = prepared_calls()
        sum_of_ten(*arrays, 2.0)
        assert prepared_calls() == before + 1
    np.testing.assert_array_equal(arrays[0], 2.0 * sum(range(1, 10)))


def test_a_numba_without_the_internals_keeps_the_dispatcher(monkeypatch, capsys):
    """Numba's internals the trampoline is built from are imported defensively: a Numba
    that moved them gets no prepared calls (said once), never an import error."""
    @njit
    def moved(a, k):
        a[0] = k

    a = np.zeros(2)
    moved(a, 3)
    monkeypatch.setattr(cpu_plans, "_MISSING", ImportError("cannot import name 'excinfo_t'"))
    monkeypatch.setattr(cpu_plans, "_trampolines", {})
    monkeypatch.setenv("PYACC_INFO", "1")
    assert cpu_plans.prepare(moved, (a, 3)) is None
    assert "ImportError: cannot import name 'excinfo_t'" in capsys.readouterr().err


_HOLD_CHILD = """
import numpy as np, pyacc as acc
from pyacc import _fastcall
from test_prepared_call import spin
acc.set_device_type("host")
x, rounds = np.zeros(8), np.ones(1, dtype=np.int64)
for _ in range(30):
    spin(x, rounds, 0)
print(_fastcall.prepared_calls() > 20, _fastcall.held_calls())
"""


@pytest.mark.parametrize("setting, held", [("0", "0"), ("1e9", "many")])
def test_the_gil_hold_setting_is_read_at_import(setting, held):
    import os
    import subprocess
    import sys

    folder = os.path.dirname(__file__)
    environment = dict(os.environ, PYACC_GIL_HOLD_BELOW=setting,
                       PYTHONPATH=os.pathsep.join([folder, os.path.dirname(folder)]))
    done = subprocess.run([sys.executable, "-c", _HOLD_CHILD], env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    prepared, count = done.stdout.split()
    assert prepared == "True"
    assert (count == "0") if held == "0" else int(count) >= 20


def test_a_bad_gil_hold_setting_is_refused_at_import_with_its_name():
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import pyacc"], capture_output=True, text=True,
                          env=dict(os.environ, PYACC_GIL_HOLD_BELOW="fast"), timeout=300)
    assert done.returncode != 0
    assert "PYACC_GIL_HOLD_BELOW='fast': expected a number of microseconds" in done.stderr
