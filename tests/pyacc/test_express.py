"""The express lane (``pyacc/_fastcall.c``): a compute call that repeats one the Python
launcher has replayed is checked and launched in C. It must give exactly the answers of
the Python launcher, so every change between calls that the Python replay would notice
sends the call back to it. These tests also pass without the lane (``PYACC_EXPRESS=0``:
``test_the_python_launcher_alone_passes_these_tests``), where every call is a slow one."""

import functools
import gc
import os
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

import pyacc as acc
import pyacc.testing  # noqa: F401 - acc.testing
from pyacc.mapping import BUS, EventKind
from tests.launcher_calls import slow_calls
from tests.relayout import relayout

LANE = acc.express_lane()


@acc.parallel_loop
def add_one(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1.0


@acc.parallel_loop
def increment(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1


@acc.parallel_loop
def axpy(y, x, a):
    for i in range(y.shape[0]):
        y[i] = y[i] + a * x[i]


@acc.parallel_loop(present=["x"])
def add_one_present(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1.0


@acc.parallel_loop
def shifted(x, shift):
    for i in range(x.shape[0]):
        x[i] = x[i + shift] + 1.0


@acc.parallel_loop
def relax(u, unew):
    for i in range(1, u.shape[0] - 1):
        unew[i] = 0.5 * (u[i - 1] + u[i + 1])


def express(calls_in_c: int) -> int:
    """How many of ``calls_in_c`` calls reach the Python launcher anyway: none with the
    lane, all without it."""
    return 0 if LANE else calls_in_c


def test_the_express_lane_is_built_unless_turned_off():
    """CI builds ``pyacc._fastcall`` (``pip install -e .``); a build that silently failed
    would cost every call ~3 µs, so it is a failure here."""
    assert LANE == (os.environ.get("PYACC_EXPRESS", "1") != "0")


@pytest.mark.parametrize("device_type", ["host", "emulated"])
def test_repeated_calls_take_the_express_lane_and_count_their_launches(device_type, monkeypatch):
    acc.shutdown(device_type)
    acc.set_device_type(device_type)
    acc.reset_stats()
    calls = slow_calls(add_one, monkeypatch)
    x = np.zeros(8)
    with acc.data(copy=[x]):
        add_one(x)
        add_one(x)  # a replay (on the host already the first call) arms the lane
        calls.clear()
        for _ in range(3):
            add_one(x)
    assert len(calls) == express(3)
    assert acc.stats()["launch_count"] == 5
    np.testing.assert_array_equal(x, 5.0)
    acc.shutdown(device_type)


@pytest.mark.skipif(not LANE, reason="the launch-plan record is the C lane's input")
def test_a_launch_plan_record_is_read_by_field_name(emulated, monkeypatch):
    """The record the Python launcher hands the lane (``_express.ExpressPlan``) is read
    by name in C (``PLAN_FIELDS``): any object with those attributes arms a plan, and
    one without a field is refused, naming it."""
    import types

    from pyacc import _fastcall
    from pyacc._express import ExpressPlan

    assert _fastcall.PLAN_FIELDS == ExpressPlan._fields
    records = []
    monkeypatch.setattr(add_one, "_arm_plan", records.append, raising=False)
    calls = slow_calls(add_one, monkeypatch)
    x = np.zeros(8)
    with acc.data(copy=[x]):
        add_one(x)
        add_one(x)  # a replay: its record is made (and kept here instead of armed)
        monkeypatch.undo()
        calls = slow_calls(add_one, monkeypatch)
        fields = records[-1]._asdict()
        shuffled = types.SimpleNamespace(**dict(reversed(list(fields.items()))))
        type(add_one)._arm_plan(add_one, shuffled)  # not a tuple, fields in another order
        for _ in range(3):
            add_one(x)
        assert calls == []  # the three calls took the plan armed from that record
        del fields["kernel"]
        with pytest.raises(AttributeError, match="kernel"):
            type(add_one)._arm_plan(add_one, types.SimpleNamespace(**fields))
    np.testing.assert_array_equal(x, 5.0)


def test_jacobi_swaps_keep_one_plan_per_argument_order(emulated, monkeypatch):
    u, unew = np.linspace(0.0, 1.0, 16), np.zeros(16)
    expected_u, expected_unew = u.copy(), unew.copy()
    for _ in range(4):
        expected_unew[1:-1] = 0.5 * (expected_u[:-2] + expected_u[2:])
        expected_u[1:-1] = 0.5 * (expected_unew[:-2] + expected_unew[2:])
    calls = slow_calls(relax, monkeypatch)
    with acc.data(copy=[u, unew]):
        for sweep in range(4):
            relax(u, unew)
            relax(unew, u)
            if sweep == 1:  # each order has been joined and replayed: both are armed
                calls.clear()
    assert len(calls) == express(4)
    np.testing.assert_allclose(u, expected_u)
    np.testing.assert_allclose(unew, expected_unew)


@pytest.mark.parametrize("device_type", ["host", "emulated"])
def test_a_dtype_changed_in_place_is_launched_anew(device_type, monkeypatch):
    """``x.dtype = ...`` keeps the object and its bytes: the kernel (and on emulated the
    device array) of the old dtype must not run on it."""
    acc.shutdown(device_type)
    acc.set_device_type(device_type)
    calls = slow_calls(increment, monkeypatch)
    x = np.zeros(8)
    with acc.data(copy=[x]):
        increment(x)
        increment(x)
        increment(x)  # express
        calls.clear()
        acc.update_self(x)
        relayout(x, dtype=np.int64)  # the same bytes, read as integers
        expected = x + 1
        increment(x)
        acc.update_self(x)
        np.testing.assert_array_equal(x, expected)
    assert len(calls) == 1
    acc.shutdown(device_type)


def test_a_host_plan_takes_other_arrays_of_the_same_kinds(host_device, monkeypatch):
    """On the host nothing is mapped: a plan holds for any arrays of the same kinds (new
    objects each call, such as slices), and for no others."""
    calls = slow_calls(add_one, monkeypatch)
    base = np.zeros(12)
    add_one(base[:4])
    add_one(base[:4])  # the lane is armed by now
    calls.clear()
    for start in (4, 8):
        add_one(base[start:start + 4])
    add_one(np.zeros(3, dtype=np.float32))  # another dtype: another kernel
    np.testing.assert_array_equal(base, [2.0] * 4 + [1.0] * 8)
    assert len(calls) == 1 + express(2)


def test_data_that_left_the_device_is_not_present_for_an_express_call(emulated):
    x = np.zeros(4)
    acc.enter_data(copyin=[x])
    add_one_present(x)
    add_one_present(x)
    add_one_present(x)
    acc.exit_data(copyout=[x])
    np.testing.assert_array_equal(x, 3.0)
    with pytest.raises(acc.NotPresentError, match="'x'"):
        add_one_present(x)
    assert acc.refcounts(x) == (0, 0)


def test_jit_turned_off_between_calls_reaches_the_python_launcher(emulated, monkeypatch):
    calls = slow_calls(add_one, monkeypatch)
    x = np.zeros(4)
    with acc.data(copy=[x]):
        add_one(x)
        add_one(x)
        add_one(x)
        calls.clear()
        monkeypatch.setenv("PYACC_DISABLE_JIT", "1")
        add_one(x)
        assert any(key[0] == "python" for key in add_one.info.kernels)
    assert len(calls) == 1
    np.testing.assert_array_equal(x, 4.0)


def test_another_current_device_is_used_at_the_next_call(host_device):
    x = np.zeros(4)
    add_one(x)
    add_one(x)
    add_one(x)  # an express host call
    np.testing.assert_array_equal(x, 3.0)
    acc.set_device_type("emulated")
    try:
        with acc.data(copy=[x]):
            add_one(x)
            np.testing.assert_array_equal(x, 3.0)  # ran on the emulated device's copy
        np.testing.assert_array_equal(x, 4.0)
    finally:
        acc.shutdown("emulated")
        acc.set_device_type("host")


def test_a_subscriber_that_comes_sees_the_next_call(emulated):
    x = np.zeros(4)
    seen = []

    def listener(event):
        seen.append(event.kind)

    with acc.data(copy=[x]):
        for _ in range(3):
            add_one(x)
        BUS.subscribe(listener, (EventKind.LAUNCH,))
        try:
            add_one(x)
        finally:
            BUS.unsubscribe(listener, (EventKind.LAUNCH,))
        add_one(x)
    assert seen == [EventKind.LAUNCH]
    np.testing.assert_array_equal(x, 5.0)


def test_a_scalar_of_another_type_gets_its_own_kernel(emulated, monkeypatch):
    calls = slow_calls(axpy, monkeypatch)
    y, x = np.zeros(4), np.ones(4)
    with acc.data(copy=[y], copyin=[x]):
        axpy(y, x, 2.0)
        axpy(y, x, 2.0)
        calls.clear()
        axpy(y, x, 0.5)  # the same type: express
        axpy(y, x, 3)    # an int: the Python launcher picks the int kernel
        axpy(y, x, np.float32(1.5))
    assert len(calls) == 2 + express(1)
    np.testing.assert_array_equal(y, 9.0)


def test_a_kernel_that_fails_in_the_lane_raises_execution_error_and_releases_the_table(
        emulated, monkeypatch):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x = np.zeros(4)
    with acc.data(copy=[x]):
        shifted(x, 0)
        shifted(x, 0)
        shifted(x, 0)
        with pytest.raises(acc.ExecutionError, match="out of bounds") as raised:
            shifted(x, 100)
        assert raised.value.__cause__ is not None
        assert acc.refcounts(x) == (1, 0)
        y = np.ones(2)
        acc.copyin(y)  # the table lock is free again
        acc.delete(y)
        shifted(x, 0)
    np.testing.assert_array_equal(x, 4.0)


@pytest.mark.parametrize("device_type", ["host", "emulated"])
def test_an_express_plan_keeps_no_host_array_alive(device_type):
    acc.shutdown(device_type)
    acc.set_device_type(device_type)
    x = np.zeros(64)
    with acc.data(copy=[x]):
        for _ in range(3):
            add_one(x)
    reference = weakref.ref(x)
    del x
    gc.collect()
    assert reference() is None
    acc.shutdown(device_type)


def test_fault_injection_reaches_calls_armed_before_it(emulated):
    x = np.zeros(4)
    with acc.data(copy=[x]):
        for _ in range(3):
            add_one(x)
        with acc.testing.inject_faults(launch=1) as plan:
            with pytest.raises(acc.ExecutionError, match="injected fault"):
                add_one(x)
        assert plan.fired
        add_one(x)
    np.testing.assert_array_equal(x, 4.0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_an_express_call_in_a_forked_child_takes_the_childs_table_lock(emulated, held_by_another_thread):
    """A fork replaces the table's lock in the child (another thread of the parent may
    have held it); the lane reads the lock at each call, so the child never waits for
    the parent's."""
    x = np.zeros(4)
    with acc.data(copy=[x]):
        for _ in range(3):
            add_one(x)
        with held_by_another_thread(acc._devices.current_runtime().table.locked()):
            pid = os.fork()
            if pid == 0:  # the child: one express call, then leave at once
                code = 1
                try:
                    add_one(x)
                    acc.update_self(x)
                    code = 0 if x[0] == 4.0 else 2
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    np.testing.assert_array_equal(x, 3.0)


@pytest.mark.skipif(not LANE, reason="runs the tests again without the lane")
def test_the_python_launcher_alone_passes_these_tests():
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYACC_EXPRESS="0")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
         str(root / "tests" / "pyacc" / "test_fast_paths.py")],
        cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


@acc.parallel_loop
def add_one_2d(x):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = x[i, j] + 1.0 + j


def test_an_array_reshaped_in_place_gets_a_device_array_of_its_new_shape(emulated, monkeypatch):
    calls = slow_calls(add_one_2d, monkeypatch)
    x = np.zeros((2, 4))
    with acc.data(copy=[x]):
        for _ in range(3):
            add_one_2d(x)
        calls.clear()
        relayout(x, shape=(4, 2))  # the same bytes, another shape
        add_one_2d(x)
    assert len(calls) == 1
    expected = (np.zeros((2, 4)) + 3.0 + np.arange(4) * 3.0).reshape(4, 2) + 1.0 + np.arange(2)
    np.testing.assert_array_equal(x, expected)


def test_an_environment_variable_written_again_with_its_value_keeps_the_lane(emulated, monkeypatch):
    """``os.environ`` stores a new bytes object at each write: the lane compares values."""
    monkeypatch.setenv("PYACC_SERIAL_BELOW", "1000")
    calls = slow_calls(add_one, monkeypatch)
    x = np.zeros(4)
    with acc.data(copy=[x]):
        add_one(x)
        add_one(x)
        calls.clear()
        for _ in range(3):
            monkeypatch.setenv("PYACC_SERIAL_BELOW", "1000")
            add_one(x)
    assert len(calls) == express(3)
    np.testing.assert_array_equal(x, 5.0)


def test_a_fault_plan_installed_on_the_device_itself_reaches_armed_calls(emulated):
    from pyacc.mapping.devices.faults import FaultPlan

    x = np.zeros(4)
    device = acc._devices.current_runtime().device
    with acc.data(copy=[x]):
        for _ in range(3):
            add_one(x)
        plan = FaultPlan(launch=1)
        previous = device.inject_faults(plan)  # no table change: the lane must still see it
        try:
            with pytest.raises(acc.ExecutionError, match="injected fault"):
                add_one(x)
        finally:
            device.inject_faults(previous)
        add_one(x)
    np.testing.assert_array_equal(x, 4.0)


def test_a_second_tally_subscriber_counts_express_launches(emulated):
    x = np.zeros(4)
    launches = []

    def tally(kind, device, nbytes):
        if kind == int(EventKind.LAUNCH):
            launches.append(device)

    with acc.data(copy=[x]):
        for _ in range(3):
            add_one(x)
        BUS.subscribe_tally(tally)
        try:
            add_one(x)
            add_one(x)
        finally:
            BUS.unsubscribe_tally(tally)
    assert len(launches) == 2


# -- the context memo: what a plan remembers per thread instead of reading it at each call --

def test_a_default_none_region_opened_after_arming_reaches_the_next_call(emulated):
    """The open regions' ``default(...)`` is remembered per thread; a region that changes
    it (without changing the present table) makes the next call read it again."""
    x = np.zeros(4)
    with acc.data(copy=[x]):
        for _ in range(3):
            add_one(x)
        with acc.data(default="none"):
            with pytest.raises(acc.ClauseError, match="default\\(none\\)"):
                add_one(x)
        add_one(x)  # the default is back to the implicit rules
    np.testing.assert_array_equal(x, 4.0)


def test_another_thread_on_another_device_does_not_take_this_threads_plan(host_device):
    """A plan armed on one thread's runtime is not the plan of a thread whose current
    device is another, even when that thread chose its device before the plan was armed
    (nothing changed since: only the thread tells them apart)."""
    import threading

    x = np.zeros(4)
    chosen, armed = threading.Event(), threading.Event()
    seen = {}

    def other_thread():
        try:
            acc.set_device_type("emulated")
            y = np.zeros(4)
            with acc.data(copy=[y]):
                chosen.set()
                armed.wait(10)
                add_one(y)
                add_one(y)
                seen["inside"] = y.copy()  # the device has the new values, not y yet
            seen["after"] = y.copy()
        except BaseException as error:  # noqa: BLE001 - reported below
            seen["error"] = error
        finally:
            chosen.set()
            acc.shutdown("emulated")

    worker = threading.Thread(target=other_thread)
    worker.start()
    chosen.wait(10)
    for _ in range(3):
        add_one(x)  # armed on this thread's host runtime, after the other chose its device
    armed.set()
    worker.join()
    assert "error" not in seen, seen.get("error")
    np.testing.assert_array_equal(seen["inside"], 0.0)
    np.testing.assert_array_equal(seen["after"], 2.0)
    add_one(x)  # and this thread's plan still holds on its own device
    np.testing.assert_array_equal(x, 4.0)


def test_a_device_switched_on_this_thread_after_arming_is_used(host_device):
    """``ICVS.runtime`` is remembered per thread; setting the device makes the next call
    read it again (no table changes on the host: only the memo could notice)."""
    x = np.zeros(4)
    for _ in range(3):
        add_one(x)
    acc.set_device_type("emulated")
    try:
        with acc.data(copyin=[x]):
            add_one(x)  # on the device's copy: x itself is unchanged
        np.testing.assert_array_equal(x, 3.0)
    finally:
        acc.shutdown("emulated")
        acc.set_device_type("host")


def test_a_device_switch_interrupted_right_after_its_store_is_still_seen(host_device):
    """A KeyboardInterrupt (SIGINT) can land between two bytecodes: right after
    ``ICVS.runtime`` is stored, before anything else runs. The lane must not go on
    remembering the old runtime (the REPL user who pressed Ctrl-C carries on)."""
    import inspect

    from pyacc._devices import _ThreadICVs

    x = np.zeros(4)
    for _ in range(3):
        add_one_present(x)  # armed on the host (where everything is present)
    code = _ThreadICVs.__setattr__.__code__
    lines, first = inspect.getsourcelines(_ThreadICVs.__setattr__)
    store = [first + i for i, text in enumerate(lines)
             if text.strip() == "super().__setattr__(name, value)"]
    assert store, "the store of a watched attribute"
    stored = []

    def in_setattr(frame, event, arg):
        if event == "line" and frame.f_locals.get("name") == "runtime":
            if stored:
                sys.settrace(None)
                raise KeyboardInterrupt  # what SIGINT does at the next bytecode
            if frame.f_lineno == store[-1]:
                stored.append(True)  # the next line event comes after the store
        return in_setattr

    sys.settrace(lambda frame, event, arg: in_setattr if frame.f_code is code else None)
    try:
        with pytest.raises(KeyboardInterrupt):
            acc.set_device_type("emulated")
    finally:
        sys.settrace(None)
    try:
        with pytest.raises(acc.NotPresentError):
            add_one_present(x)  # the first thing after the interrupt: on emulated now
        np.testing.assert_array_equal(x, 3.0)
    finally:
        acc.shutdown("emulated")
        acc.set_device_type("host")


def test_icvs_local_to_greenlets_do_not_share_a_remembered_context():
    """gevent's monkey patching makes ``threading.local`` greenlet-local: the ICVs are one
    per greenlet, and all greenlets share one thread state. The lane then checks every
    call (``configure(..., remember=False)``): a greenlet whose device is ``emulated``
    does not take the plan another greenlet armed on the host (a stand-in for gevent's
    local: ``greenlet_local_program.py``)."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("greenlet_local_program.py"))],
        cwd=root, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "ok" in result.stdout


def test_calls_take_the_c_bases_vectorcall_and_a_replaced_call_is_honoured(emulated):
    """``FastCall`` calls take the vectorcall protocol (no keyword dict for ``async_``):
    a subclass made in Python gets it too (before Python 3.12 only by
    ``enable_vectorcall``), keyword spellings all reach the same launcher, and a
    ``__call__`` assigned to the class afterwards is the call."""
    if not LANE:
        pytest.skip("PYACC_EXPRESS=0: no C base")

    class Counted(type(relax)):
        pass

    region = Counted(relax.__wrapped__, relax.info)
    assert type(region).__flags__ & (1 << 11)  # Py_TPFLAGS_HAVE_VECTORCALL
    u, unew = np.arange(8.0), np.zeros(8)
    with acc.data(copyin=[u], copy=[unew]):
        for _ in range(3):
            region(u, unew)
        assert region(u, unew, async_=1).result() is None
        assert region(u, unew, **{"async_": 1}).result() is None
        region(u, unew=unew)
    np.testing.assert_allclose(unew[1:-1], 0.5 * (u[:-2] + u[2:]))
    Counted.__call__ = lambda self, *args, **kwargs: ("replaced", args, kwargs)
    assert region(1, async_=2) == ("replaced", (1,), {"async_": 2})


def test_a_call_that_recurses_in_c_raises_recursion_error():
    """The vectorcall counts its depth as ``tp_call``'s caller does: a ``_call_slow``
    that is a C callable calling the region again ends in ``RecursionError``, not in a
    C stack overflow."""
    if not LANE:
        pytest.skip("PYACC_EXPRESS=0: no C base")

    class Looping(type(relax)):
        pass

    region = Looping(relax.__wrapped__, relax.info)
    region._call_slow = functools.partial(region)
    with pytest.raises(RecursionError):
        region()
