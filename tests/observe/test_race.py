"""``PYACC_CHECK=race`` (API.md §11, issue 29 "a checker for the bug the ports themselves
made") and the time report's arrays copied at every call (issue 29 item 2).

OpenACC 3.3 §2.16.1: operations on one queue run in order; different queues — the
synchronous one included — run in any order unless a wait orders them. The planted race
is the one the ports made: a kernel written without ``async`` between async kernels on the
same data. Queues are held (``hold_queue``) wherever a test needs work to stay queued, so
that no finding depends on timing; the quiet cases (wait, wait_async, wait=, the same
queue, completed work, synchronous programs, disjoint views) are checked as carefully.
"""

import warnings

import numpy as np
import pytest

import pyacc as acc
from pyacc.observe import active, parse_check
from pyacc.observe.race import footprint
from pyacc.testing import check, hold_queue

N = 16


@acc.parallel_loop
def smooth(u, v):
    for i in range(1, u.shape[0] - 1):
        v[i] = (u[i - 1] + u[i] + u[i + 1]) / 3.0


@acc.parallel_loop
def copy_back(v, u):
    for i in range(1, u.shape[0] - 1):
        u[i] = v[i]


@acc.parallel_loop
def fill(a, value):
    for i in range(a.shape[0]):
        a[i] = value


@acc.parallel_loop
def total(a):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i]
    return s


@acc.parallel_loop(collapse=2)
def rows(image, first, count):
    for r in range(count):
        for c in range(image.shape[1]):
            image[first + r, c] = first + r + c


def _line_of(text: str) -> int:
    """The line of this file that holds ``text`` (the racing call's line)."""
    with open(__file__) as source:
        return next(n for n, line in enumerate(source, 1) if text in line)


def _def_line(region) -> int:
    return region.info.lineno


# == the mode ============================================================================
def test_race_mode_parses_with_and_without_error():
    assert parse_check("race") == {"race": True}
    assert parse_check("counters,race:error") == {"counters": True, "race": "error"}
    with pytest.raises(ValueError, match="race, race:error"):
        parse_check("race:warn")


def test_race_mode_installs_its_checker_and_nothing_when_off(emulated, observe):
    from pyacc.mapping import BUS, EventKind

    observe()
    assert active("race") is None and not BUS.active[EventKind.JOIN]
    assert not observe(PYACC_CHECK="race")["race"].error
    assert BUS.active[EventKind.JOIN]  # joins are followed while the mode is on
    assert observe(PYACC_CHECK="race:error")["race"].error
    with check("race", error=True):
        assert active("race").error
    observe(PYACC_CHECK="")
    assert active("race") is None and not BUS.active[EventKind.JOIN]


# == the planted race, on every device type ===============================================
def test_planted_race_sync_kernel_between_async_kernels_is_reported(device):
    """The issue's race: ``copy_back`` written without ``async`` between two async
    kernels on the same data runs while ``smooth`` is still queued (§2.16.1)."""
    u, v = np.arange(float(N)), np.zeros(N)
    with check("race"):
        with acc.data(copy=[u], create=[v]):
            with hold_queue(1):
                smooth(u, v, async_=1)
                with pytest.warns(acc.RaceWarning) as caught:
                    copy_back(v, u)  # the planted race: no async_=1
                smooth(u, v, async_=1)
            acc.wait(1)
    (warning,) = [w for w in caught if issubclass(w.category, acc.RaceWarning)]
    message = str(warning.message)
    here, line = __file__, _line_of("copy_back(v, u)  # the planted race")
    assert warning.filename == here and warning.lineno == line
    assert f"kernel 'copy_back' (region {here}:{_def_line(copy_back)}, called at {here}:{line})" in message
    assert f"kernel 'smooth' (region {here}:{_def_line(smooth)}" in message
    assert f"on the synchronous queue of {device} device 0" in message
    assert f"on queue 1 of {device} device 0, queued and not finished, writes it" in message
    assert "reads 'v'" in message and "§2.16.1" in message
    assert f"Fix: acc.wait(1) before {here}:{line}, or queue it on the same queue (async_=1)" in message


def test_planted_race_raises_race_error_under_race_error(emulated):
    u, v = np.arange(float(N)), np.zeros(N)
    with check("race", error=True):
        with acc.data(copy=[u], create=[v]):
            with hold_queue(1):
                smooth(u, v, async_=1)
                with pytest.raises(acc.RaceError) as raised:
                    copy_back(v, u)
            acc.wait(1)
    error = raised.value
    assert isinstance(error, acc.ExecutionError) and error.code == "execution"
    assert error.name == "v" and error.queue is None and error.other_queue == 1
    assert "kernel 'copy_back'" in error.operation and "kernel 'smooth'" in error.other
    begin, nbytes = error.device_range
    assert nbytes == (N - 2) * 8 and f"[{begin:#x},+{nbytes}]" in str(error)


def test_race_error_is_raised_once_the_racing_action_is_done(emulated):
    """Like ``stale:error``: the action that found the race completes (the kernel ran,
    its region's data is released) before the error is raised."""
    a = np.zeros(N)
    with check("race", error=True):
        acc.copyin(a)
        with hold_queue(1):
            fill(a, 1.0, async_=1)
            with pytest.raises(acc.RaceError):
                fill(a, 2.0)
            assert acc.deviceptr(a)[0] == 2.0  # the synchronous kernel ran
        acc.wait(1)
        acc.delete(a)
    assert acc.is_present(a) is False


def test_each_race_is_reported_once(emulated):
    u, v = np.arange(float(N)), np.zeros(N)
    with check("race"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with acc.data(copy=[u], create=[v]):
            for _ in range(3):
                with hold_queue(1):
                    smooth(u, v, async_=1)
                    copy_back(v, u)
                acc.wait(1)
    assert len([w for w in caught if issubclass(w.category, acc.RaceWarning)]) == 1


# == what races: reads and writes, kernels and copies ========================================
def test_async_kernel_reading_what_another_queue_writes_races(emulated):
    """Two async queues (§2.16.1): the fix names the device-side join."""
    u, v = np.arange(float(N)), np.zeros(N)
    with check("race", error=True):
        with acc.data(copy=[u], create=[v]):
            with hold_queue(1), hold_queue(2):
                smooth(u, v, async_=1)
                with pytest.raises(acc.RaceError) as raised:
                    copy_back(v, u, async_=2)
            acc.wait()
    message = str(raised.value)
    assert "on queue 2 of emulated device 0 reads 'v'" in message
    assert "acc.wait_async(1, 2)" in message and "wait=[1]" in message and "acc.wait(1)" in message


def test_write_over_data_queued_work_reads_races(emulated):
    """A write-after-read: the synchronous kernel overwrites what queue 1 still reads."""
    a = np.ones(N)
    with check("race", error=True):
        acc.copyin(a)
        with hold_queue(1):
            total(a, async_=1)
            with pytest.raises(acc.RaceError, match="kernel 'fill'.* writes 'a'.*kernel 'total'.* reads it"):
                fill(a, 0.0)
        acc.wait(1)
        acc.delete(a)


def test_update_self_racing_a_queued_kernel(emulated):
    """An ``update`` is an operation like a kernel: the copy to the host reads the device
    data that queue 1's kernel writes."""
    a = np.zeros(N)
    with check("race", error=True):
        acc.copyin(a)
        with hold_queue(1):
            fill(a, 1.0, async_=1)
            with pytest.raises(acc.RaceError, match=r"copy to the host of 'a' at .*test_race.py:\d+ on the "
                                                    r"synchronous queue .* reads 'a'.*kernel 'fill'"):
                acc.update_self(a)
        acc.wait(1)
        acc.delete(a)


def test_data_region_copy_back_racing_a_queued_kernel(emulated):
    """The copy at a data region's exit is checked too: leaving the region without a
    wait copies back while queue 1's kernel may still write (§2.6.5, §2.16.1)."""
    a = np.zeros(N)
    with check("race", error=True):
        with hold_queue(1):
            with pytest.raises(acc.RaceError, match="copy to the host of 'a'.*kernel 'fill'.*queue 1"):
                with acc.data(copy=[a]):
                    fill(a, 1.0, async_=1)
        acc.wait(1)


def test_acquire_racing_queued_work(emulated):
    """A host access through ``acc.acquire`` reads the device copy (its entry copy) that
    queued work on another queue writes."""
    a = np.zeros(N)
    with check("race", error=True):
        acc.copyin(a)
        with hold_queue(1):
            fill(a, 1.0, async_=1)
            with pytest.raises(acc.RaceError, match="copy to the host of 'a'.*kernel 'fill'"):
                with acc.acquire(a, "r"):
                    pass
        acc.wait(1)
        acc.delete(a)


def test_host_memory_is_checked_too(emulated):
    """A queued copy to the host writes the host array that a synchronous copy to the
    device reads: the race is in host memory as much as on the device."""
    a = np.zeros(N)
    with check("race", error=True):
        acc.copyin(a)
        with hold_queue(1):
            acc.update_self(a, async_=1)
            with pytest.raises(acc.RaceError, match="copy to the device of 'a'.* reads 'a'.*copy to the "
                                                    "host of 'a'.*queue 1.* writes it"):
                acc.update_device(a)
        acc.wait(1)
        acc.delete(a)


def test_overlapping_views_of_one_mapping_race(emulated):
    """Ranges, not identity: views of one mapping race where their elements overlap."""
    a = np.zeros(2 * N)
    with check("race", error=True):
        with acc.data(copy=[a]):
            with hold_queue(1):
                fill(a[:N], 1.0, async_=1)
                with pytest.raises(acc.RaceError):
                    fill(a[N - 1:], 2.0)
            acc.wait(1)


def test_overlapping_row_blocks_race(emulated):
    """The kernel footprint is its subscripts' range: blocks that share a row race."""
    image = np.zeros((8, 4))
    with check("race", error=True):
        with acc.data(create=[image]):
            with hold_queue(0), hold_queue(1):
                rows(image, 0, 3, async_=0)
                with pytest.raises(acc.RaceError, match="writes 'image'"):
                    rows(image, 2, 3, async_=1)  # row 2 is in both
            acc.wait()


# == quiet: ordered, completed or disjoint work ==============================================
def test_wait_orders_queued_work(device):
    u, v = np.arange(float(N)), np.zeros(N)
    with check("race", error=True):
        with acc.data(copy=[u], create=[v]):
            for _ in range(2):
                smooth(u, v, async_=1)
                acc.wait(1)
                copy_back(v, u)
                smooth(u, v, async_=2)
                acc.wait()
                copy_back(v, u, async_=1)
                acc.wait_all()


def test_wait_async_orders_queues_on_the_device(device):
    """``acc.wait_async(1, 2)`` (§3.2.11): queue 2's next work starts after queue 1's,
    with queue 1 still held (so only the join orders them)."""
    u, v = np.arange(float(N)), np.zeros(N)
    with check("race", error=True):
        with acc.data(copy=[u], create=[v]):
            with hold_queue(1):
                smooth(u, v, async_=1)
                acc.wait_async(1, 2)
                copy_back(v, u, async_=2)
            acc.wait()
    assert u[1] == pytest.approx(1.0)


def test_wait_clause_and_wait_with_async_order_queues(emulated):
    """``wait=`` on a construct and ``acc.wait(q, async_=p)`` join like ``wait_async``
    (§2.16.2)."""
    u, v = np.arange(float(N)), np.zeros(N)
    with check("race", error=True):
        with acc.data(copy=[u], create=[v]):
            with hold_queue(1):
                smooth(u, v, async_=1)
                copy_back(v, u, async_=2, wait=1)
                smooth(u, v, async_=1, wait=2)
                acc.wait(1, async_=3)
                acc.update(self=[v], async_=3)
            acc.wait()


def test_joins_compose(emulated):
    """Queue 3 waited for queue 2, which had waited for queue 1: queue 3 is after 1."""
    u, v, w = np.arange(float(N)), np.zeros(N), np.zeros(N)
    with check("race", error=True):
        with acc.data(copy=[u], create=[v, w]):
            with hold_queue(1):
                smooth(u, v, async_=1)
                acc.wait_async(1, 2)
                fill(w, 1.0, async_=2)
                acc.wait_async(2, 3)
                copy_back(v, u, async_=3)
            acc.wait()


def test_same_queue_is_ordered(device):
    u, v = np.arange(float(N)), np.zeros(N)
    with check("race", error=True):
        with acc.data(copy=[u], create=[v]):
            with hold_queue(1):
                smooth(u, v, async_=1)
                copy_back(v, u, async_=1)
                acc.update(self=[u], async_=1)
            acc.wait(1)


def test_completed_work_is_not_a_race(device):
    """Work whose queue ``async_test`` found complete (its DONE was seen) orders before
    what comes next (§3.2.9)."""
    u, v = np.arange(float(N)), np.zeros(N)
    with check("race", error=True):
        with acc.data(copy=[u], create=[v]):
            smooth(u, v, async_=1)
            while not acc.async_test(1):
                pass
            copy_back(v, u)
            handle = smooth(u, v, async_=2)
            handle.result()
            copy_back(v, u)


def test_work_skipped_after_a_failure_ends_at_the_wait(emulated):
    """A queued kernel skipped behind a failure never runs (no DONE): the wait that
    reports the failure still orders it before what comes next."""
    a = np.zeros(N)
    with check("race", error=True):
        acc.copyin(a)
        with acc.testing.inject_faults(launch=1):
            fill(a, 1.0, async_=1)  # fails on the queue
            fill(a, 2.0, async_=1)  # skipped
            with pytest.raises(acc.ExecutionError):
                acc.wait(1)
        fill(a, 3.0)
        acc.delete(a)


def test_synchronous_programs_are_quiet(device):
    a, b = np.arange(float(N)), np.zeros(N)
    with check("race", error=True):
        with acc.data(copyin=[a], copyout=[b]):
            fill(b, 1.0)
            smooth(a, b)
            acc.update_self(b)
            acc.update_device(a)
            total(b)
            with acc.acquire(a, "rw"):
                a[0] = 5.0
            smooth(a, b)
    assert b[1] == pytest.approx((5.0 + 1.0 + 2.0) / 3.0)


def test_reads_on_two_queues_are_not_a_race(emulated):
    a = np.ones(N)
    with check("race", error=True):
        acc.copyin(a)
        with hold_queue(1), hold_queue(2):
            total(a, async_=1)
            total(a, async_=2)
            acc.update_self(a)  # reads the device copy too
        acc.wait()
        acc.delete(a)


def test_disjoint_views_and_row_blocks_are_not_a_race(device):
    """The blocked pipeline (examples/mandelbrot_async.py): each block's kernel writes
    its rows of one array, its copy back reads them, blocks alternate queues."""
    image = np.zeros((8, 4))
    a = np.zeros(2 * N)
    with check("race", error=True):
        with acc.data(create=[image], copy=[a]):
            with hold_queue(0), hold_queue(1):
                for block in range(4):
                    rows(image, 2 * block, 2, async_=block % 2)
                    acc.update(self=[image[2 * block:2 * block + 2]], async_=block % 2)
                fill(a[:N], 1.0, async_=0)
                fill(a[N:], 2.0, async_=1)
            acc.wait()
    assert (image[5] == 5 + np.arange(4)).all() and a[0] == 1.0 and a[-1] == 2.0


def test_strided_views_that_share_no_element_are_not_a_race(emulated):
    """Columns of one array: their byte hulls overlap, their elements do not."""
    m = np.zeros((N, 2))
    with check("race", error=True):
        with acc.data(copy=[m]):
            with hold_queue(0), hold_queue(1):
                fill(m[:, 0], 1.0, async_=0)
                fill(m[:, 1], 2.0, async_=1)
            acc.wait()
    assert (m[:, 0] == 1.0).all() and (m[:, 1] == 2.0).all()


def test_footprint_of_a_row_block_is_its_rows():
    """The mandelbrot pipeline needs kernel footprints (the whole image would race): a
    block's kernel writes its rows, evaluated with the call's scalars."""
    image = np.zeros((8, 4))
    uses = footprint(rows.info, (image, 2, 3), "host")
    written = [access for access in uses if access.writes]
    assert len(written) == 1
    base = image.__array_interface__["data"][0]
    assert (written[0].low, written[0].high) == (base + 2 * 32, base + 5 * 32)


# == footprints ============================================================================
def test_footprint_bounds_loops_and_falls_back_to_the_whole_array():
    """Subscripts in loop ranges give index boxes; what cannot be bounded is the whole."""

    @acc.parallel_loop
    def gather(a, index, out):
        for i in range(index.shape[0]):
            out[i] = a[index[i]]

    a, index, out = np.zeros(10), np.zeros(4, dtype=np.int64), np.zeros(8)
    accesses = {(x.name, x.writes): (x.low, x.high) for x in footprint(gather.info, (a, index, out), "host")}
    start = lambda array: array.__array_interface__["data"][0]  # noqa: E731
    assert accesses[("a", False)] == (start(a), start(a) + 80)  # a[index[i]]: any element
    assert accesses[("index", False)] == (start(index), start(index) + 32)
    assert accesses[("out", True)] == (start(out), start(out) + 32)  # out[0..3] of 8
    assert ("a", True) not in accesses and ("out", False) not in accesses


# == PYACC_TIME: arrays copied at every call inside a data region (issue 29 item 2) ======
def test_time_report_names_an_array_copied_at_every_call_inside_a_data_region(emulated, observe):
    report = observe(PYACC_TIME=1)["time"]
    u, v = np.arange(float(N)), np.zeros(N)
    with acc.data(copyin=[u]):
        for _ in range(3):
            smooth(u, v)  # v is not in the data region: copied in and out each time
    (found,) = report.copied_every_call()
    where, device, name, record, calls = found
    assert (where.file, where.line, name, device) == (__file__, _def_line(smooth), "v", ("emulated", 0))
    assert record.calls == calls == 3 and record.bytes_in == record.bytes_out == 3 * N * 8
    text = report.report()
    assert (f"{__file__}:{_def_line(smooth)} smooth [device emulated:0]: 'v' is copied in and out at "
            f"every call (3) inside a data region") in text
    assert f"called at {__file__}:{_line_of('smooth(u, v)  # v is not in the data region')})" in text
    assert "add it to the enclosing data region" in text and "deviceptr=" in text and "present=" in text
    assert text.count("'v' is copied") == 1  # once per (region, array)


def test_time_report_counts_calls_inside_data_entered_with_enter_data(emulated, observe):
    report = observe(PYACC_TIME=1)["time"]
    u, v = np.arange(float(N)), np.zeros(N)
    acc.enter_data(copyin=[u])
    for _ in range(2):
        smooth(u, v)
    acc.exit_data(delete=[u])
    assert [found[2] for found in report.copied_every_call()] == ["v"]


def test_time_report_is_quiet_when_data_stays_resident(emulated, observe):
    """Resident data, a single call, and calls outside any data region are not listed."""
    report = observe(PYACC_TIME=1)["time"]
    u, v = np.arange(float(N)), np.zeros(N)
    with acc.data(copyin=[u], create=[v]):
        for _ in range(3):
            smooth(u, v)
    with acc.data(copyin=[u]):
        smooth(u, v)  # once: not "every call"
    for _ in range(3):
        smooth(u, v)  # no data region: nothing to join
    assert report.copied_every_call() == []
    assert "copied at every call" not in report.report()
