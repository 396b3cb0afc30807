"""``acc.enter_data``/``acc.exit_data`` of present arrays through the data lane
(``pyacc._directives._counted_in_the_lane``; the verbs ``enter``/``leave`` of ``acc.copyin``
and ``acc.delete``).

OpenACC 3.3 §2.14.6-7: ``enter data copyin(x)`` of present data adds one to its dynamic
count and moves nothing; ``exit data delete(x)``/``copyout(x)`` takes one away and moves
nothing while the data stays present. A program that nests such directives (a routine that
enters its arrays at each call while its caller holds them) makes the directive's common
form — data clauses alone, of arrays present and staying present — which the lane makes in
C, one count each, the table lock held. When the lane declines any array (absent, an exit
that would end a mapping, an observer), the counts it changed are put back and the Python
path makes the whole directive: all or nothing, with the same counts, copies and events.
"""
from __future__ import annotations

import numpy as np
import pytest

import pyacc as acc
from pyacc.mapping import EventKind

N = 8


# the fixture ``device`` (host, emulated: each shut down before and after)
from test_update_lane import device  # noqa: F401,E402


def _python_path(monkeypatch):
    import pyacc._directives as directives
    monkeypatch.setattr(directives, "_counted_in_the_lane", lambda clauses, entering: False)


@pytest.mark.parametrize("path", ["lane", "python"])
def test_enter_and_exit_of_present_data_count_and_move_nothing_rule_2_14_6(device, path, monkeypatch,
                                                                           python_frames):
    if path == "python":
        _python_path(monkeypatch)
    x, y = np.ones(N), np.ones(N)
    acc.copyin(x)
    acc.copyin(y)
    before = acc.stats()
    acc.enter_data(copyin=[x], create=y)
    acc.enter_data(copyin=[x, x])  # (twice: two counts)
    entered = set(python_frames(acc.enter_data, copyin=[x]))
    expected = (0, 0) if device == "host" else (0, 5)
    assert acc.refcounts(x) == expected and acc.refcounts(y) == ((0, 0) if device == "host" else (0, 2))
    acc.exit_data(delete=[x, x], copyout=y)
    acc.exit_data(delete=x)
    acc.exit_data(copyout=[x])
    assert acc.refcounts(x) == acc.refcounts(y) == ((0, 0) if device == "host" else (0, 1))
    after = acc.stats()
    assert [after[k] - before[k] for k in ("h2d_count", "d2h_count", "alloc_count", "free_count")] == [0] * 4
    assert ("check_clauses" in entered) == (path == "python")  # (the Python path's first step)


def test_an_array_the_lane_declines_sends_the_whole_directive_to_python(device):
    x, fresh = np.ones(N), np.full(N, 2.0)
    acc.copyin(x)
    acc.enter_data(copyin=[x, fresh])  # fresh is absent: the Python path maps it
    if device == "emulated":
        assert acc.refcounts(x) == (0, 2) and acc.refcounts(fresh) == (0, 1)
        acc.deviceptr(fresh)[:] = 5.0
    acc.exit_data(delete=[x], copyout=[fresh])  # fresh's count ends: copied out, freed
    assert acc.refcounts(x) == ((0, 1) if device == "emulated" else (0, 0))
    assert acc.refcounts(fresh) == (0, 0)
    np.testing.assert_array_equal(fresh, 5.0 if device == "emulated" else 2.0)


def test_a_directive_that_fails_after_the_lanes_counts_changes_nothing(device):
    """The lane has counted ``x`` when it finds ``part`` partly present: it puts ``x``'s
    count back, and the Python path raises PartlyPresentError before changing anything."""
    if device == "host":
        pytest.skip("nothing is ever partly present on host")
    x, big = np.ones(N), np.ones(2 * N)
    acc.copyin(x)
    acc.copyin(big[:N])
    with pytest.raises(acc.PartlyPresentError):
        acc.enter_data(copyin=[x, big[N // 2:]])
    assert acc.refcounts(x) == (0, 1) and acc.refcounts(big[:N]) == (0, 1)
    with pytest.raises(acc.PartlyPresentError):
        acc.exit_data(delete=[x, big[N // 2:]])
    assert acc.refcounts(x) == (0, 1) and acc.refcounts(big[:N]) == (0, 1)


def test_observed_directives_take_the_python_path_and_publish_their_events(device, listening):
    x = np.ones(N)
    acc.copyin(x)
    seen = listening(EventKind.ENTER_DATA, EventKind.EXIT_DATA)
    acc.enter_data(copyin=[x])
    acc.exit_data(delete=[x])
    kinds = [event.kind for event in seen]
    assert kinds == ([] if device == "host" else [EventKind.ENTER_DATA, EventKind.EXIT_DATA])


def test_a_map_data_mapping_beside_an_absent_array_is_counted_once(device):
    """Found by ``test_stateful``: ``enter_data(copyin=[inside a map_data mapping, absent])``
    counted the first array twice (the lane's +1, whose undo the lane declines for a
    ``map_data`` mapping, then the Python path's). Now every array is checked present
    before the lane counts any, and the Python path makes a directive with an absent one."""
    if device == "host":
        pytest.skip("map_data maps nothing on host")
    block, fresh = np.ones(16), np.ones(4)
    acc.map_data(block, acc.malloc(block.shape, block.dtype))
    before = acc.refcounts(block)
    acc.enter_data(copyin=[block[12:16], fresh])
    after = acc.refcounts(block)
    acc.exit_data(delete=[block[12:16], fresh])
    assert acc.refcounts(block) == before and acc.refcounts(fresh) == (0, 0)
    acc.copyin(block[12:16])  # the routine's count, for comparison
    assert acc.refcounts(block) == after
    acc.delete(block[12:16])
    acc.unmap_data(block)


def test_a_clause_of_the_other_directive_is_refused_not_counted(device):
    x = np.ones(N)
    acc.copyin(x)
    with pytest.raises(acc.ClauseError):
        acc.enter_data(delete=[x])
    with pytest.raises(acc.ClauseError):
        acc.exit_data(copyin=[x])
    assert acc.refcounts(x) == ((0, 0) if device == "host" else (0, 1))
