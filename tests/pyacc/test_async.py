"""Asynchronous queues on the emulated device (API.md §5, §3–4; OpenACC 3.3 §2.16;
openacc-semantics.md §1.11, S24, S30; issue 4).

What is checked:

* the conformance scenarios S24 (ordering on one queue, both parts) and S30 (an async exit
  updates the counts at once and frees later);
* order within a queue; independence of queues; ``wait_async`` chains across three
  queues; the ``wait=`` clause on directives and compute calls and ``acc.wait(..., async_=)``;
* counters change at once on the calling thread; deferred frees (device memory stays in
  use until the queue has passed the exit); re-mapping before the wait never reuses the
  block whose copy-out is pending; host arrays used by pending operations stay alive;
* errors inside queued operations are raised once, by the wait that covers them, as
  ``ExecutionError`` naming the queue and the operation; other queues keep working and the
  present table stays consistent;
* ``async_test`` / ``async_test_all`` never report done before the work is;
  ``async_noval`` is the thread's default queue; ``async_sync`` is synchronous;
  ``async_`` on ``acc.data`` applies to its entry and exit only; async compute calls return
  a handle whose ``.result()`` waits; ``acc.shutdown`` drains every queue first;
* several host threads sharing queues, and a stress test of 8 threads × mixed operations
  with the present table and device memory checked at the end.

Determinism: "work is pending" is made certain with ``pyacc.testing.hold_queue(q)``, which
lets operations be enqueued on queue ``q`` of the current device but keeps them from
starting until its ``with`` block ends. Nothing relies on timing for correctness; where a
background effect must be waited for, the test polls with a timeout of at most 5 s.

Where the contract allows a call either to block the host or to enqueue a dependency (the
``wait=`` clause, the ``wait`` directive with ``async_``, ``acc.shutdown`` draining), the
queue is held on a helper thread that releases it after a short delay, so both legal
implementations pass; when the call returns while the queue is still held (the delayed
release is cancelled under a lock, so "still held" is certain), the test also checks that
the dependent work has not run.

A watchdog (``faulthandler``) ends the whole run with every thread's traceback if one test
hangs for 60 s — a deadlock in the queues would otherwise hang the suite forever.

Kernels are defined once at module level (each costs a Numba compile) and shared. Device
contents are observed through ``acc.deviceptr(a)`` (on ``emulated`` a numpy array living
in device memory), read only while nothing queued can be writing them.
"""

import faulthandler
import gc
import random
import re
import sys
import threading
import time

import numpy as np
import pytest

import pyacc as acc

N = 64
WATCHDOG_S = 60


# =========================================================================== kernels


@acc.parallel_loop
def add_one(v):  # implicit present-or-copy (v is written)
    for i in range(v.shape[0]):
        v[i] += 1.0


@acc.parallel_loop(present=["v"])
def add_one_present(v):
    for i in range(v.shape[0]):
        v[i] += 1.0


@acc.parallel_loop(present=["v"])
def scale_present(v, s):
    for i in range(v.shape[0]):
        v[i] *= s


@acc.parallel_loop(present=["v"])
def fill_present(v, value):
    for i in range(v.shape[0]):
        v[i] = value


@acc.parallel_loop(present=["src", "dst"])
def copy_present(src, dst):
    for i in range(dst.shape[0]):
        dst[i] = src[i]


@acc.parallel_loop(present=["x", "y", "z"])
def add_present(x, y, z):
    for i in range(z.shape[0]):
        z[i] = x[i] + y[i]


@acc.parallel_loop(reduction="+:s")
def dot(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


@acc.parallel_loop(reduction=["+:s", "max:m"])
def sum_and_max(x):
    s = 10.0  # a non-identity initial value
    m = -1.0e300
    for i in range(x.shape[0]):
        s += x[i]
        m = max(m, x[i])
    return s, m


@acc.parallel_loop
def shift_read(x, y):  # out of bounds at the last i (PYACC_BOUNDSCHECK=1 catches it)
    for i in range(y.shape[0]):
        y[i] = x[i + 1]


@acc.parallel_loop(reduction="+:s")
def sum_shifted(x):  # out of bounds at the last i, in a reduction
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i + 1]
    return s


# =========================================================================== helpers


def _stderr_fd(config):
    """The real stderr (pytest's own faulthandler keeps a duplicate of it: ours would
    otherwise write into the captured, and then lost, output)."""
    try:
        from _pytest.faulthandler import fault_handler_stderr_fd_key

        return config.stash[fault_handler_stderr_fd_key]
    except Exception:  # noqa: BLE001 - another pytest: the stderr we have
        return sys.__stderr__.fileno()


@pytest.fixture(autouse=True)
def _watchdog(request):
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=_stderr_fd(request.config))
    yield
    faulthandler.cancel_dump_traceback_later()


def hold_queue(q):
    """``pyacc.testing.hold_queue(q)``, imported per use so that the tests that do not
    need it run even before it exists."""
    from pyacc.testing import hold_queue as hold

    return hold(q)


def poll(condition, timeout=5.0) -> bool:
    """True as soon as ``condition()`` is; False after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def stays_false(condition, duration=0.2) -> bool:
    """True when ``condition()`` stays False for ``duration`` seconds: gives work that
    must not run yet (a bug) the time to run, so that the check fails reliably rather
    than by luck. Never flaky for a correct implementation: the work cannot run."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        if condition():
            return False
        time.sleep(0.005)
    return not condition()


def table():
    return acc.present_table()


def rc(a):
    return tuple(acc.refcounts(a))


def mem():
    return acc.stats()["memory_in_use"]


def dev(a):
    """A copy of what the device holds for ``a``."""
    d = acc.deviceptr(a)
    assert d is not None, "expected a to be present"
    return np.array(d, copy=True)


def device_range(d):
    begin = d.__array_interface__["data"][0]
    return begin, begin + d.nbytes


def on_emulated_thread(target, *args):
    """Run ``target(*args)`` on a new host thread whose current device is emulated 0;
    returns ``(thread, errors)``."""
    errors = []

    def run():
        try:
            acc.set_device_num(0, "emulated")
            target(*args)
        except BaseException as error:  # noqa: BLE001 - reported by the caller
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


class HeldElsewhere:
    """``hold_queue(q)`` entered on a helper thread (current device: emulated 0), so that
    the test thread may make a call that is allowed to block until ``q`` drains.

    ``release_later(delay)`` arms a timed release; ``cancel_release()`` returns True when
    it had not fired yet — the queue is then certainly still held, and stays held until
    ``release()`` or the end of the ``with`` block."""

    def __init__(self, q):
        self.q = q
        self._held = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._requested = False
        self._cancelled = False
        self._timer = None
        self._thread = None
        self._errors = None

    def _hold(self):
        with hold_queue(self.q):
            self._held.set()
            self._release.wait(WATCHDOG_S)

    def __enter__(self):
        self._thread, self._errors = on_emulated_thread(self._hold)
        while not self._held.wait(0.01):
            if self._errors:
                raise self._errors[0]
            assert self._thread.is_alive()
        return self

    def release(self):
        self._release.set()

    def release_later(self, delay=0.3):
        def fire():
            with self._lock:
                if self._cancelled:
                    return
                self._requested = True
            self._release.set()

        self._timer = threading.Timer(delay, fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel_release(self) -> bool:
        with self._lock:
            if self._requested:
                return False
            self._cancelled = True
        self._timer.cancel()
        return True

    def __exit__(self, *exc):
        self._release.set()
        if self._timer is not None:
            self._timer.cancel()
        self._thread.join(10)
        if self._errors and exc[0] is None:
            raise self._errors[0]
        return False


# =========================================================================== scenarios


def test_s24_ordering_of_async_operations_on_one_queue(emulated):
    """S24 (async-data-1-1.c). t1: two async compute calls with copy(a) on one queue, then
    wait → a = initial + 2; the second copy-in sees the first one's copy-out. t2: inside
    ``data copyin(a)``: host a = 3; update device / parallel present(a) a += 1 / update
    self, all async, twice; wait → host a = 5."""
    baseline = mem()

    # t1, plain
    a = np.arange(N, dtype=np.float64)
    initial = a.copy()
    add_one(a, async_=1)
    add_one(a, async_=1)
    acc.wait(1)
    np.testing.assert_array_equal(a, initial + 2)
    assert table() == []

    # t1 with the queue held: both calls map and unmap at once (counts), their copies
    # run later, in order, each on its own block (the first block's free is deferred)
    a = np.arange(N, dtype=np.float64)
    initial = a.copy()
    with hold_queue(1):
        add_one(a, async_=1)
        assert not acc.is_present(a)
        add_one(a, async_=1)
        assert not acc.is_present(a)
        assert table() == []
        assert mem() >= baseline + 2 * a.nbytes, "a block was freed while its copy-out was queued"
        np.testing.assert_array_equal(a, initial)  # nothing has run
    acc.wait(1)
    np.testing.assert_array_equal(a, initial + 2)
    assert table() == [] and mem() == baseline

    # t2
    a = np.zeros(1, dtype=np.float64)
    with acc.data(copyin=a):
        with hold_queue(1):
            a[0] = 3.0
            for _ in range(2):
                acc.update_device(a, async_=1)
                add_one_present(a, async_=1)
                acc.update_self(a, async_=1)
            assert a[0] == 3.0  # nothing has run
        acc.wait(1)
        # the second update_device read the host when it ran (a = 4), not when queued (3)
        assert a[0] == 5.0
    assert table() == [] and mem() == baseline


def test_s30_async_exit_updates_counts_at_once_and_frees_later(emulated):
    """S30: copyin(a); copyout_async(a, q) → absent at once; the host sees the data only
    after wait(q). Re-mapping a before the wait does not reuse or free the old block while
    its transfer is queued."""
    baseline = mem()
    a = np.arange(N, dtype=np.float64)
    initial = a.copy()
    acc.copyin(a)
    acc.deviceptr(a)[:] = 100.0 + initial  # "device code"
    old_block = device_range(acc.deviceptr(a))
    one_block = mem() - baseline

    with hold_queue(1):
        acc.copyout(a, async_=1)
        assert not acc.is_present(a)
        assert rc(a) == (0, 0)
        assert acc.deviceptr(a) is None
        np.testing.assert_array_equal(a, initial)  # not yet on the host
        # re-map before the wait: queued after the copy-out on the same queue
        acc.copyin(a, async_=1)
        assert acc.is_present(a) and rc(a) == (0, 1)
        new_block = device_range(acc.deviceptr(a))
        assert new_block[1] <= old_block[0] or new_block[0] >= old_block[1], \
            "the re-mapping reuses the block whose copy-out is still queued"
        assert mem() == baseline + 2 * one_block
        np.testing.assert_array_equal(a, initial)
    acc.wait(1)
    np.testing.assert_array_equal(a, 100.0 + initial)  # the old block's data
    # the new copy-in read the host after the copy-out had landed
    np.testing.assert_array_equal(dev(a), 100.0 + initial)
    assert mem() == baseline + one_block  # the old block is freed now
    acc.copyout(a)
    assert table() == [] and mem() == baseline


# =========================================================================== order and independence


def test_order_within_one_queue_gives_the_sequential_result(emulated):
    x = np.arange(N, dtype=np.float64)
    y = np.zeros(N)
    acc.enter_data(copyin=[x, y])
    base = x.copy()

    def chain():
        acc.update_device(x, async_=1)
        scale_present(x, 2.0, async_=1)
        add_one_present(x, async_=1)
        copy_present(x, y, async_=1)
        scale_present(x, 3.0, async_=1)
        acc.update_self(x, async_=1)
        acc.update_self(y, async_=1)

    with hold_queue(1):
        x[:] = base + 5.0
        chain()
        np.testing.assert_array_equal(x, base + 5.0)  # nothing has run
        np.testing.assert_array_equal(y, 0.0)
    acc.wait(1)
    np.testing.assert_array_equal(y, (base + 5.0) * 2.0 + 1.0)
    np.testing.assert_array_equal(x, ((base + 5.0) * 2.0 + 1.0) * 3.0)

    for r in range(20):  # the same without a hold: the worker runs while the host enqueues
        x[:] = base + r
        chain()
        acc.wait(1)
        np.testing.assert_array_equal(y, (base + r) * 2.0 + 1.0)
        np.testing.assert_array_equal(x, ((base + r) * 2.0 + 1.0) * 3.0)
    acc.exit_data(delete=[x, y])
    assert table() == [] and mem() == 0


def test_a_held_queue_does_not_block_another_queue(emulated):
    a = np.zeros(N)
    b = np.arange(N, dtype=np.float64)
    acc.enter_data(copyin=a)
    with hold_queue(1):
        fill_present(a, 9.0, async_=1)
        acc.update_self(a, async_=1)
        add_one(b, async_=2)  # copy-in, kernel and copy-out, all on queue 2
        assert poll(lambda: acc.async_test(2)), "queue 2 did not run while queue 1 was held"
        acc.wait(2)
        np.testing.assert_array_equal(b, np.arange(N) + 1.0)
        assert not acc.async_test(1)
        np.testing.assert_array_equal(a, 0.0)
    acc.wait(1)
    np.testing.assert_array_equal(a, 9.0)
    acc.exit_data(delete=a)
    assert table() == [] and mem() == 0


def test_wait_async_chains_three_queues(emulated):
    """Queue 3 waits for queues 1 and 2 (``wait_async``) without blocking the host: its
    work runs only after both drain."""
    x, y, z = np.zeros(N), np.zeros(N), np.zeros(N)
    acc.enter_data(copyin=[x, y, z])
    with hold_queue(1):
        with hold_queue(2):
            fill_present(x, 3.0, async_=1)
            fill_present(y, 4.0, async_=2)
            acc.wait_async(1, 3)  # returns at once although 1 and 2 are held
            acc.wait_async(2, 3)
            add_present(x, y, z, async_=3)
            acc.update_self(z, async_=3)
            assert stays_false(lambda: acc.async_test(3)), "queue 3 ran although queues 1 and 2 are held"
        assert poll(lambda: acc.async_test(2)), "queue 2 did not drain after its release"
        assert stays_false(lambda: acc.async_test(3)), "queue 3 ran although queue 1 is still held"
        np.testing.assert_array_equal(z, 0.0)
        np.testing.assert_array_equal(dev(z), 0.0)
    acc.wait(3)
    np.testing.assert_array_equal(z, 7.0)
    acc.wait_all()
    acc.exit_data(delete=[x, y, z])
    assert table() == [] and mem() == 0


def _wait_form(form, x, y):
    """One operation on queue 2 that must start only after queue 1 drains; returns the
    host array whose value shows (after ``wait(2)``) whether it did."""
    if form == "compute_call":
        copy_present(x, y, async_=2, wait=1)
        acc.update_self(y, async_=2)
        return y
    if form == "compute_call_wait_list":
        copy_present(x, y, async_=2, wait=[1])
        acc.update_self(y, async_=2)
        return y
    if form == "update_directive":
        acc.update(self=x, async_=2, wait=[1])
        return x
    if form == "exit_data_directive":
        acc.exit_data(copyout=x, async_=2, wait=1)
        assert not acc.is_present(x)  # the counts change at once, the copy waits
        return x
    if form == "wait_directive_with_async":
        acc.wait(1, async_=2)
        acc.update_self(x, async_=2)
        return x
    raise AssertionError(form)


@pytest.mark.parametrize("form", ["compute_call", "compute_call_wait_list", "update_directive",
                                  "exit_data_directive", "wait_directive_with_async"])
def test_wait_clause_starts_the_operation_only_after_the_listed_queues_drain(emulated, form):
    """OpenACC 3.3 §2.16.2: the operation may not start before queue 1 drains; blocking
    the host or enqueueing a dependency are both legal."""
    x, y = np.zeros(N), np.zeros(N)
    acc.enter_data(copyin=[x, y])
    with HeldElsewhere(1) as held:
        fill_present(x, 7.0, async_=1)  # on the held queue
        held.release_later(0.3)
        shows = _wait_form(form, x, y)
        if held.cancel_release():  # returned while queue 1 is still held
            assert stays_false(lambda: acc.async_test(2)), "the operation on queue 2 did not wait for queue 1"
            np.testing.assert_array_equal(shows, 0.0)
            held.release()
    acc.wait(2)
    np.testing.assert_array_equal(shows, 7.0)
    acc.wait_all()
    acc.exit_data(delete=[x, y])
    assert table() == [] and mem() == 0


def test_synchronous_update_with_wait_clause_blocks_until_the_queue_drains(emulated):
    x = np.zeros(N)
    acc.enter_data(copyin=x)
    with HeldElsewhere(1) as held:
        fill_present(x, 7.0, async_=1)
        held.release_later(0.3)
        acc.update(self=x, wait=[1])  # synchronous: done when it returns
        assert not held.cancel_release(), "a synchronous update with wait=[1] returned while queue 1 was held"
        np.testing.assert_array_equal(x, 7.0)
    acc.exit_data(delete=x)
    assert table() == [] and mem() == 0


# =========================================================================== counts and frees


def test_counters_change_at_once_on_async_enter_and_exit(emulated):
    a = np.arange(N, dtype=np.float64)
    b = np.zeros(N)
    initial = a.copy()
    with hold_queue(1):
        d = acc.copyin(a, async_=1)
        assert d is not None and acc.is_present(a) and rc(a) == (0, 1)
        assert acc.deviceptr(a) is not None
        acc.enter_data(copyin=a, create=b, async_=1)
        assert rc(a) == (0, 2) and rc(b) == (0, 1)
        acc.create(b, async_=1)
        assert rc(b) == (0, 2)
        with acc.data(copyin=a, async_=1):
            assert rc(a) == (1, 2)
        assert rc(a) == (0, 2)
        acc.exit_data(delete=a, async_=1)
        assert rc(a) == (0, 1) and acc.is_present(a)
        acc.copyout(a, async_=1)
        assert rc(a) == (0, 0) and not acc.is_present(a)
        acc.delete(b, async_=1)
        assert rc(b) == (0, 1)
        acc.exit_data(delete=b, finalize=True, async_=1)
        assert rc(b) == (0, 0) and not acc.is_present(b)
        assert table() == []
        np.testing.assert_array_equal(a, initial)
    acc.wait(1)
    np.testing.assert_array_equal(a, initial)
    assert table() == [] and mem() == 0


def _exit_copyout(a):
    acc.copyout(a, async_=1)


def _exit_delete(a):
    acc.delete(a, async_=1)


def _exit_data_copyout(a):
    acc.exit_data(copyout=a, async_=1)


def _exit_data_delete(a):
    acc.exit_data(delete=a, async_=1)


@pytest.mark.parametrize("exit_op", [_exit_copyout, _exit_delete, _exit_data_copyout, _exit_data_delete],
                         ids=["copyout", "delete", "exit_data_copyout", "exit_data_delete"])
def test_async_exit_frees_device_memory_only_after_the_queue_has_passed_it(emulated, exit_op):
    baseline = mem()
    a = np.arange(N, dtype=np.float64)
    initial = a.copy()
    acc.copyin(a)
    in_use = mem()
    assert in_use > baseline
    with hold_queue(1):
        add_one_present(a, async_=1)  # the queue still uses the block
        exit_op(a)
        assert not acc.is_present(a) and rc(a) == (0, 0)
        assert mem() == in_use, "device memory freed while the queue still uses it"
        np.testing.assert_array_equal(a, initial)
    acc.wait(1)
    assert mem() == baseline, "device memory not freed after the wait that covers the exit"
    copied_out = exit_op in (_exit_copyout, _exit_data_copyout)
    np.testing.assert_array_equal(a, initial + 1.0 if copied_out else initial)
    assert table() == []


def test_remapping_before_the_wait_does_not_reuse_the_pending_block(emulated):
    """A synchronous re-map while the copy-out is queued gets a fresh block; the queued
    copy-out still reads the old one."""
    a = np.arange(N, dtype=np.float64)
    initial = a.copy()
    acc.copyin(a)
    acc.deviceptr(a)[:] = 50.0 + initial
    old_block = device_range(acc.deviceptr(a))
    with hold_queue(1):
        acc.copyout(a, async_=1)
        acc.copyin(a)  # synchronous: reads the host now (still the initial data)
        new_block = device_range(acc.deviceptr(a))
        assert new_block[1] <= old_block[0] or new_block[0] >= old_block[1], \
            "the re-mapping reuses the block whose copy-out is still queued"
        np.testing.assert_array_equal(dev(a), initial)
        acc.deviceptr(a)[:] = -1.0  # must not reach the host through the queued copy-out
    acc.wait(1)
    np.testing.assert_array_equal(a, 50.0 + initial)
    acc.copyout(a)
    np.testing.assert_array_equal(a, -1.0)
    assert table() == [] and mem() == 0


class _Owner(bytearray):
    """A host buffer that records its contents when it is finally released."""

    def __init__(self, nbytes, sink):
        super().__init__(nbytes)
        self.sink = sink

    def __del__(self):
        self.sink.append(bytes(self))


def test_host_array_of_a_pending_copyout_stays_alive(emulated):
    """Drop every user reference to a host array whose copy-out is queued: the runtime
    keeps its buffer alive, the copy lands in it, and the buffer is released after."""
    released = []
    owner = _Owner(N * 8, released)
    a = np.frombuffer(owner, dtype=np.float64)
    a[:] = 1.0
    acc.copyin(a)
    acc.deviceptr(a)[:] = 42.0
    with hold_queue(1):
        acc.copyout(a, async_=1)
        del a, owner
        gc.collect()
        assert released == [], "the host buffer was released while its copy-out was queued"
    acc.wait(1)
    assert table() == [] and mem() == 0

    def gone():
        gc.collect()
        return bool(released)

    assert poll(gone), "the host buffer was never released after the copy-out (leak)"
    np.testing.assert_array_equal(np.frombuffer(released[0], dtype=np.float64), 42.0)


def test_host_array_is_released_once_its_last_queued_operation_has_run(emulated):
    """§5: host arrays used by pending operations stay alive *until* the queue has run
    them — not longer: dropping the last reference after the wait releases the array,
    even when its operation was the last one queued."""
    a = np.arange(N, dtype=np.float64)
    acc.enter_data(copyin=a)
    released = []
    owner = _Owner(N * 8, released)
    h = np.frombuffer(owner, dtype=np.float64)
    acc.memcpy_from_device(h, acc.deviceptr(a), async_=1)  # the last operation on queue 1
    acc.wait(1)
    np.testing.assert_array_equal(h, np.arange(N))
    del h, owner

    def gone():
        gc.collect()
        return bool(released)

    assert poll(gone), "a finished queued operation still holds its host array"
    acc.exit_data(delete=a)
    assert table() == [] and mem() == 0


# =========================================================================== errors


def _cover_wait_queue(handle):
    acc.wait(2)


def _cover_wait_every_queue(handle):
    acc.wait()


def _cover_wait_all(handle):
    acc.wait_all()


def _cover_result(handle):
    handle.result()


@pytest.mark.parametrize("covering_wait", [_cover_wait_queue, _cover_wait_every_queue, _cover_wait_all, _cover_result],
                         ids=["wait_q", "wait_no_args", "wait_all", "handle_result"])
def test_error_in_a_queued_kernel_is_raised_once_by_the_wait_that_covers_it(emulated, monkeypatch, covering_wait):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x = np.arange(N, dtype=np.float64)
    y = np.full(N, -1.0)
    other = np.arange(N, dtype=np.float64)
    with hold_queue(2):
        handle = shift_read(x, y, async_=2)  # the kernel has not run: nothing to raise yet
        assert table() == []  # the call's counts are released at once
        # other queues keep working
        add_one(other, async_=1)
        assert poll(lambda: acc.async_test(1)), "queue 1 did not run while queue 2 was held"
        acc.wait(1)  # a wait that does not cover queue 2 raises nothing
        np.testing.assert_array_equal(other, np.arange(N) + 1.0)
    with pytest.raises(acc.ExecutionError) as info:
        covering_wait(handle)
    message = str(info.value)
    assert info.value.code == "execution"
    assert "shift_read" in message, f"the error does not name the operation: {message}"
    assert re.search(r"(queue|async)\D{0,16}\b2\b", message, re.IGNORECASE), \
        f"the error does not name queue 2: {message}"
    # raised once
    acc.wait(2)
    acc.wait()
    acc.wait_all()
    assert acc.async_test(2) and acc.async_test_all()
    # the table is consistent and the memory released
    assert table() == [] and mem() == 0
    # queue 2 keeps working
    z = np.arange(N, dtype=np.float64)
    add_one(z, async_=2)
    acc.wait(2)
    np.testing.assert_array_equal(z, np.arange(N) + 1.0)
    assert table() == [] and mem() == 0


def test_error_on_one_queue_leaves_a_data_region_and_other_queues_consistent(emulated, monkeypatch):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x = np.arange(N, dtype=np.float64)
    y = np.full(N, -1.0)
    w = np.zeros(N)
    with acc.data(copyin=[x], copy=[w]):
        with hold_queue(2):
            shift_read(x, y, async_=2)
            fill_present(w, 5.0, async_=3)
        acc.wait(3)
        assert rc(x) == (1, 0) and rc(w) == (1, 0) and rc(y) == (0, 0)
        with pytest.raises(acc.ExecutionError):
            acc.wait(2)
        assert rc(x) == (1, 0) and rc(w) == (1, 0) and rc(y) == (0, 0)
    np.testing.assert_array_equal(w, 5.0)
    assert table() == [] and mem() == 0


def test_a_failed_async_reduction_never_returns_a_value(emulated, monkeypatch):
    """API.md §6: ``.result()`` waits and returns the reductions. A kernel that failed
    has none: its handle raises, even after a plain ``acc.wait`` consumed the queue's
    error — it must not return None as if the kernel had no reduction."""
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x = np.arange(N, dtype=np.float64)
    handle = sum_shifted(x, async_=2)
    with pytest.raises(acc.ExecutionError):
        acc.wait(2)
    with pytest.raises(acc.ExecutionError):
        value = handle.result()
        pytest.fail(f"result() of a failed reduction returned {value!r}")
    assert table() == [] and mem() == 0


def test_a_failed_async_kernel_does_not_copy_back(emulated, monkeypatch):
    """As for a synchronous call (pyacc/_compute.py: "its copy/copyout data is not copied
    back (the device data may be garbage)"; API.md §4 for regions left by a device
    error): the copy-back queued behind a failed kernel does not reach the host."""
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x = np.arange(N, dtype=np.float64)
    y = np.full(N, -1.0)
    shift_read(x, y, async_=2)
    with pytest.raises(acc.ExecutionError):
        acc.wait(2)
    np.testing.assert_array_equal(y, -1.0)
    assert table() == [] and mem() == 0


def _messages(error):
    """The messages (and notes) of an error, of its chain and of a group's members."""
    seen, stack = [], [error]
    while stack:
        item = stack.pop()
        if item is None or any(item is other for other in seen):
            continue
        seen.append(item)
        stack += [item.__cause__, item.__context__, *getattr(item, "exceptions", ())]
    return " | ".join(" ".join([str(item), *getattr(item, "__notes__", ())]) for item in seen)


def test_errors_on_two_queues_are_both_reported(emulated, monkeypatch):
    """§5: an error in an async operation is raised by the wait that covers it. With
    failures on queues 2 and 3, ``wait_all`` covers both: neither may be lost — each is
    named by what ``wait_all`` raises (message, chain or group) or raised by a later wait."""
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    x2, y2 = np.arange(N, dtype=np.float64), np.zeros(N)
    x3, y3 = np.arange(N, dtype=np.float64), np.zeros(N)
    with hold_queue(2), hold_queue(3):
        shift_read(x2, y2, async_=2)
        shift_read(x3, y3, async_=3)
    reported = []
    with pytest.raises(acc.ExecutionError) as info:
        acc.wait_all()
    reported.append(_messages(info.value))
    for q in (2, 3):
        try:
            acc.wait(q)
        except acc.ExecutionError as error:
            reported.append(_messages(error))
    text = " || ".join(reported)
    for q in (2, 3):
        assert re.search(rf"(queue|async)\D{{0,16}}\b{q}\b", text, re.IGNORECASE), \
            f"the failure on queue {q} was never reported: {text}"
    assert table() == [] and mem() == 0


def test_error_callbacks_run_for_a_queued_error_when_the_wait_raises_it(emulated, monkeypatch):
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    seen = []

    def callback(error):
        seen.append(type(error))

    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    acc.register_error_callback(callback)
    try:
        with hold_queue(2):
            shift_read(x, y, async_=2)
            assert seen == []  # nothing has failed yet
        with pytest.raises(acc.ExecutionError):
            acc.wait(2)
        acc.wait(2)
    finally:
        acc.unregister_error_callback(callback)
    assert seen == [acc.ExecutionError]


def test_an_async_directive_that_raises_changes_nothing(emulated):
    """API.md §4: all-or-nothing, also with ``async_``: a copy-in already queued for an
    earlier array of the directive is rolled back, its block freed only after the queue
    has passed the copy."""
    b = np.zeros(2 * N)
    acc.enter_data(copyin=b[:N])
    baseline = mem()
    a = np.arange(N, dtype=np.float64)
    with hold_queue(1):
        with pytest.raises(acc.PartlyPresentError):
            acc.enter_data(copyin=[a, b], async_=1)
        assert not acc.is_present(a) and rc(a) == (0, 0)
        assert rc(b[:N]) == (0, 1) and len(table()) == 1
    acc.wait(1)  # nothing failed on the queue
    assert mem() == baseline
    acc.exit_data(delete=b[:N])
    assert table() == [] and mem() == 0


# =========================================================================== tests and defaults


def test_async_test_never_reports_done_before_the_work_is(emulated):
    assert acc.async_test(9)  # a queue never used has nothing pending
    a = np.arange(N, dtype=np.float64)
    acc.enter_data(copyin=a)
    with hold_queue(1):
        acc.update_device(a, async_=1)
        add_one_present(a, async_=1)
        for _ in range(20):
            assert acc.async_test(1) is False
    acc.wait(1)
    assert acc.async_test(1) is True

    # without a hold: whenever async_test says done, the results are there
    for k in range(50):
        fill_present(a, float(k), async_=1)
        acc.update_self(a, async_=1)
        assert poll(lambda: acc.async_test(1))
        np.testing.assert_array_equal(a, float(k))
    acc.exit_data(delete=a)
    assert table() == []


def test_async_test_all(emulated):
    assert acc.async_test_all() is True
    a = np.arange(N, dtype=np.float64)
    acc.enter_data(copyin=a)
    acc.update_device(a, async_=2)
    acc.wait(2)
    with hold_queue(3):
        add_one_present(a, async_=3)
        assert acc.async_test(2) is True
        assert acc.async_test(3) is False
        assert acc.async_test_all() is False
    acc.wait(3)
    assert acc.async_test_all() is True
    acc.exit_data(delete=a)


def test_async_noval_uses_the_threads_default_queue(emulated):
    a = np.arange(N, dtype=np.float64)
    acc.enter_data(copyin=a)
    acc.set_default_async(3)
    assert acc.get_default_async() == 3
    with hold_queue(3):
        a[:] = 8.0
        acc.update_device(a, async_=acc.async_noval)
        handle = dot(a, a, async_=acc.async_noval)
        assert acc.async_test(3) is False
        assert acc.async_test(0) is True  # not the initial default queue
        np.testing.assert_array_equal(dev(a), np.arange(N))  # the update has not run
    acc.wait(3)
    np.testing.assert_array_equal(dev(a), 8.0)
    assert handle.result() == 64.0 * N

    acc.set_default_async(acc.async_noval)  # back to queue 0
    with hold_queue(0):
        acc.update_self(a, async_=acc.async_noval)
        assert acc.async_test(0) is False
    acc.wait(0)
    acc.exit_data(delete=a)
    assert table() == []


def test_async_sync_is_synchronous_even_while_queues_are_held(emulated):
    a = np.arange(N, dtype=np.float64)
    acc.copyin(a)
    acc.deviceptr(a)[:] = 6.0
    with hold_queue(0), hold_queue(1):
        acc.update_self(a, async_=acc.async_sync)
        np.testing.assert_array_equal(a, 6.0)
        add_one_present(a, async_=acc.async_sync)
        np.testing.assert_array_equal(dev(a), 7.0)
        acc.copyout(a, async_=acc.async_sync)
        np.testing.assert_array_equal(a, 7.0)
        assert mem() == 0
    assert table() == []


# =========================================================================== data regions and compute


def test_async_on_a_data_region_applies_to_its_entry_and_exit_only(emulated):
    a = np.arange(N, dtype=np.float64)
    initial = a.copy()
    with hold_queue(1):
        with acc.data(copy=a, async_=1):
            assert rc(a) == (1, 0)  # at once
            assert acc.async_test(1) is False  # the entry copy is queued
            add_one_present(a, async_=1)
        assert not acc.is_present(a)  # the exit counts at once
        np.testing.assert_array_equal(a, initial)  # the copy-back is queued
    acc.wait(1)
    np.testing.assert_array_equal(a, initial + 1.0)
    assert table() == [] and mem() == 0

    # the block itself runs synchronously: calls inside it without async_ are synchronous
    b = np.arange(N, dtype=np.float64)
    with acc.data(copy=b, async_=2):
        acc.wait(2)  # the entry copy has landed
        value = dot(b, b)
        assert isinstance(value, float) and value == float(initial @ initial)
        add_one_present(b)
        np.testing.assert_array_equal(dev(b), initial + 1.0)  # done when the call returned
    acc.wait(2)
    np.testing.assert_array_equal(b, initial + 1.0)
    assert table() == [] and mem() == 0


def test_async_compute_call_returns_a_handle_whose_result_waits(emulated):
    x = np.ones(N)
    acc.enter_data(copyin=x)
    x[:] = 2.0
    with hold_queue(1):
        acc.update_device(x, async_=1)
        handle = dot(x, x, async_=1)
        handle2 = sum_and_max(x, async_=1)
        assert hasattr(handle, "result") and not isinstance(handle, float)
        assert acc.async_test(1) is False
    # result() waits for the queue; the reductions saw the updated data
    assert handle.result() == 4.0 * N
    assert handle2.result() == (pytest.approx(10.0 + 2.0 * N), 2.0)
    assert handle.result() == 4.0 * N  # asking twice gives the same value
    assert acc.async_test(1)
    acc.exit_data(delete=x)
    assert table() == [] and mem() == 0


def test_shutdown_drains_every_queue_first(emulated):
    arrays = [np.arange(N, dtype=np.float64) + k for k in range(4)]
    with HeldElsewhere(2) as held:
        for q, a in enumerate(arrays):
            add_one(a, async_=q)  # queue 2's copy-back cannot land before the release
        held.release_later(0.3)
        acc.shutdown("emulated")
        assert not held.cancel_release(), "shutdown returned while queue 2 still had work"
    for k, a in enumerate(arrays):
        np.testing.assert_array_equal(a, np.arange(N) + k + 1.0)
    acc.set_device_num(0, "emulated")
    assert table() == [] and mem() == 0


# =========================================================================== threads


def test_several_host_threads_share_queues(emulated):
    n_threads, rounds = 4, 15
    results = {}

    def worker(tid):
        a = np.full(N + tid, float(tid))
        values = []
        for r in range(rounds):
            q = 1 + (r + tid) % 2  # queues 1 and 2, shared by every thread
            acc.enter_data(copyin=a, async_=q)
            add_one_present(a, async_=q)
            add_one_present(a, async_=q)
            handle = dot(a, a, async_=q)
            acc.exit_data(copyout=a, async_=q)
            acc.wait(q)
            values.append(handle.result())
        results[tid] = (a, values)

    started = [on_emulated_thread(worker, tid) for tid in range(n_threads)]
    for thread, _ in started:
        thread.join(30)
        assert not thread.is_alive()
    for _, errors in started:
        assert not errors, errors
    acc.wait_all()
    for tid in range(n_threads):
        a, values = results[tid]
        np.testing.assert_array_equal(a, tid + 2.0 * rounds)
        assert values == [(tid + 2.0 * (r + 1)) ** 2 * (N + tid) for r in range(rounds)]
    assert table() == [] and mem() == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stress_8_threads_mixed_async_operations(emulated, seed):
    """8 host threads × a few hundred async operations (copyin / update / kernels /
    copyout on private and shared arrays, random queues 0–3), then ``wait_all``: every
    private result and reduction is right, the table holds only the shared arrays (with
    the test's own dynamic count) and device memory is back to the baseline."""
    n_threads, ops_per_thread = 8, 400
    baseline = mem()
    shared = [np.arange(256, dtype=np.float64) * (k + 1) for k in range(4)]
    shared_dots = [float(s @ s) for s in shared]
    acc.enter_data(copyin=shared)
    results = {}
    barrier = threading.Barrier(n_threads)

    def worker(tid):
        rng = random.Random(1000 * seed + tid)
        private = [np.full(64 + 8 * j + tid, float(10 * tid + j)) for j in range(3)]
        expected = [p.copy() for p in private]
        last_queue = [None] * len(private)
        handles = []
        ops = 0
        barrier.wait(10)
        while ops < ops_per_thread:
            q = rng.randrange(4)
            if rng.random() < 0.6:  # a chain on a private array, on one queue
                j = rng.randrange(len(private))
                a, prev = private[j], last_queue[j]
                wait = None
                if prev is not None and prev != q:  # order after the previous chain on a
                    how = rng.randrange(3)
                    if how == 0:
                        wait = prev
                    elif how == 1:
                        acc.wait_async(prev, q)
                        ops += 1
                    else:
                        acc.wait(prev)
                        ops += 1
                acc.enter_data(copyin=a, async_=q, wait=wait)
                k = rng.randrange(1, 4)
                for _ in range(k):
                    add_one_present(a, async_=q)
                expected[j] = expected[j] + k
                if rng.random() < 0.3:
                    acc.update_self(a, async_=q)
                    acc.update_device(a, async_=q)
                    ops += 2
                if rng.random() < 0.3:
                    handles.append((dot(a, a, async_=q), float(expected[j] @ expected[j])))
                    ops += 1
                acc.exit_data(copyout=a, async_=q)
                last_queue[j] = q
                ops += 2 + k
            else:  # shared arrays: their data never changes, only their counts
                s = rng.randrange(len(shared))
                acc.copyin(shared[s], async_=q)
                handles.append((dot(shared[s], shared[s], async_=q), shared_dots[s]))
                if rng.random() < 0.5:
                    acc.update_device(shared[s], async_=q)
                    ops += 1
                acc.delete(shared[s], async_=q)
                ops += 3
        results[tid] = (private, expected, handles)

    started = [on_emulated_thread(worker, tid) for tid in range(n_threads)]
    for thread, _ in started:
        thread.join(45)
        assert not thread.is_alive(), "a worker thread hangs"
    for _, errors in started:
        assert not errors, errors
    acc.wait_all()
    assert acc.async_test_all()
    for tid in range(n_threads):
        private, expected, handles = results[tid]
        for a, e in zip(private, expected):
            np.testing.assert_array_equal(a, e)
        for handle, value in handles:
            assert handle.result() == value
    records = table()
    assert len(records) == len(shared)
    for s in shared:
        assert rc(s) == (0, 1)
    acc.exit_data(delete=shared)
    assert table() == []
    assert mem() == baseline
