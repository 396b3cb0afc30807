"""``acc.update`` of present arrays through the data lane (``pyacc._directives``:
``_updated_in_the_lane``; the verbs ``upload``/``download`` of ``acc.update_device`` and
``acc.update_self``).

OpenACC 3.3 §2.14.4: ``update self(...) device(...)`` copies each listed array in the
order written; absent data is an error unless ``if_present``. The directive's common form
(direction clauses alone, of whole present arrays: a time step's halo exchange) is made
array by array by the lane in C, each checked present before any copy: the directive
stays all or nothing. Any other form, and any array the lane declines, is the Python
path's, with the same results, counts and events.
"""
from __future__ import annotations

import numpy as np
import pytest

import pyacc as acc
from pyacc.mapping import EventKind

N = 16


@pytest.fixture(params=["host", "emulated"])
def device(request):
    acc.shutdown(request.param)
    acc.set_device_type(request.param)
    acc.reset_stats()
    yield request.param
    acc.wait()
    acc.shutdown(request.param)
    acc.set_device_type("host")


@pytest.fixture
def emulated():
    acc.shutdown("emulated")
    acc.set_device_type("emulated")
    acc.reset_stats()
    yield
    acc.shutdown("emulated")
    acc.set_device_type("host")


def _device_copy(array):
    """What the device holds for ``array`` (a copy, read through the runtime)."""
    with acc.host_data(use_device=[array]) as (on_device,):
        return np.array(on_device)


def test_the_common_form_runs_in_the_lane_rule_2_14_4(emulated, python_frames):
    x, y = np.zeros(N), np.zeros(N)
    with acc.data(copyin=[x, y]):
        x[:], y[:] = 1.0, 2.0
        acc.update(device=[x, y])  # (the first call: the runtime's lane looked up)
        entered = python_frames(acc.update, device=[x, y])
        assert "update" in entered and "_update_planned" not in entered
        np.testing.assert_array_equal(_device_copy(x), 1.0)
        np.testing.assert_array_equal(_device_copy(y), 2.0)
    assert acc.stats()["h2d_count"] == 2 * 2 + 2  # (the copyins, then two updates of two)


def test_the_clauses_order_is_kept(emulated):
    x = np.zeros(N)
    with acc.data(copyin=[x]):
        x[:] = 5.0  # on the host only
        acc.update(self=[x], device=[x])  # device → host first: the host's 5s are lost
        np.testing.assert_array_equal(x, 0.0)
        x[:] = 7.0
        acc.update(device=x, self=x)  # host → device first
        np.testing.assert_array_equal(_device_copy(x), 7.0)
        np.testing.assert_array_equal(x, 7.0)


def test_an_absent_array_copies_nothing(emulated):
    x, absent = np.zeros(N), np.zeros(N)
    with acc.data(copyin=[x]):
        x[:] = 3.0
        with pytest.raises(acc.NotPresentError):
            acc.update(device=[x, absent])
        np.testing.assert_array_equal(_device_copy(x), 0.0)  # all or nothing
        acc.update(device=[x, absent], if_present=True)  # (the Python path: if_present)
        np.testing.assert_array_equal(_device_copy(x), 3.0)


def test_an_array_the_lane_declines_goes_with_the_rest_through_python(emulated):
    x, y = np.zeros(N), np.zeros(N)
    with acc.data(copyin=[x, y]):
        x[:], y[:] = 1.0, 2.0
        acc.update(device=[x[::2], y])  # a strided view: the Python path's, then y
        device_x = _device_copy(x)
        np.testing.assert_array_equal(device_x[::2], 1.0)
        np.testing.assert_array_equal(device_x[1::2], 0.0)
        np.testing.assert_array_equal(_device_copy(y), 2.0)
        x[:] = 4.0
        acc.update(device=[y, x[1::2]])
        np.testing.assert_array_equal(_device_copy(x)[1::2], 4.0)


def test_observers_see_each_copy(emulated, listening):
    x, y = np.zeros(N), np.zeros(N)
    with acc.data(copyin=[x, y]):
        seen = listening(EventKind.UPLOAD, EventKind.DOWNLOAD)
        acc.update(device=[x, y], self=[y])
    assert [event.kind for event in seen] == [EventKind.UPLOAD, EventKind.UPLOAD, EventKind.DOWNLOAD]


@pytest.mark.parametrize("clauses", [dict(device=[]), dict(device=[1.0]), dict(devices=[None]),
                                     dict(device=[np.zeros(N)], async_=1)])
def test_other_forms_are_the_python_paths(device, clauses, monkeypatch):
    x = np.zeros(N)
    acc.copyin(x)
    try:
        expected = _raised(clauses)
        with monkeypatch.context() as python_path:
            python_path.setattr(acc._directives, "_updated_in_the_lane", lambda clauses: False)
            assert _raised(clauses) is expected
    finally:
        acc.wait()
        acc.delete(x)


def _raised(clauses):
    """The type of the error ``acc.update(**clauses)`` raises, or None."""
    try:
        acc.update(**clauses)
    except Exception as error:  # noqa: BLE001 - compared with the other path's
        return type(error)
    return None


def test_the_lane_and_the_python_path_agree(device, monkeypatch):
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    results = []
    for lane in (True, False):
        with monkeypatch.context() as patched:
            if not lane:
                patched.setattr(acc._directives, "_updated_in_the_lane", lambda clauses: False)
            acc.reset_stats()
            with acc.data(copyin=[x], copy=[y]):
                for k in range(5):
                    x[:] = k
                    acc.update(device=x)
                    y[:] = -1.0
                    acc.update(self=[y], device=[x])
            results.append((y.tolist(), acc.stats()["h2d_count"], acc.stats()["d2h_count"]))
    assert results[0] == results[1]


def test_a_read_only_array_to_copy_into_changes_nothing(emulated):
    """The Python path refuses a read-only target before any copy: so does the directive
    when a read-only array follows arrays the lane could copy (API.md §4: a directive that
    raises changes nothing)."""
    a, b = np.zeros(N), np.zeros(N)
    with acc.data(copyin=[a, b]):
        with acc.host_data(use_device=[a, b]) as (on_a, on_b):
            on_a[:], on_b[:] = 7.0, 9.0
        read_only = b.view()
        read_only.flags.writeable = False
        with pytest.raises(acc.InvalidArgumentError):
            acc.update(self=[a, read_only])
        np.testing.assert_array_equal(a, 0.0)
        a[:] = 1.0
        with pytest.raises(acc.InvalidArgumentError):
            acc.update(device=[a], self=[read_only])
        np.testing.assert_array_equal(_device_copy(a), 7.0)


def test_an_object_array_is_refused_as_the_python_path_refuses_it(device):
    with pytest.raises(acc.InvalidArgumentError):
        acc.update(self=[np.array([None, 1], dtype=object)])


def test_another_thread_unmapping_an_array_never_splits_an_update(emulated):
    """The presence checks and the copies are made under the table lock: a thread that
    maps and unmaps ``b`` meanwhile makes an update of ``[a, b]`` either whole or refused
    before any copy."""
    import threading

    a, b = np.zeros(1 << 15), np.zeros(1 << 15)  # (256 KiB: the copies give the GIL back)
    acc.copyin(a)
    stop = threading.Event()

    def churn():
        acc.set_device_type("emulated")
        while not stop.is_set():
            acc.copyin(b)
            acc.delete(b)

    thread = threading.Thread(target=churn)
    thread.start()
    split = 0
    try:
        for k in range(2000):
            with acc.host_data(use_device=[a]) as (on_a,):
                on_a[:1] = k + 1.0
            a[:1] = 0.0
            try:
                acc.update(self=[a, b])
            except acc.NotPresentError:
                split += a[0] != 0.0  # a copied back before b was found absent
    finally:
        stop.set()
        thread.join()
        acc.delete(a)
    assert split == 0
