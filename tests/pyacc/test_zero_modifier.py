"""The ``zero:`` modifier (OpenACC 3.3 §2.7.8 ``copyout(zero:)``, §2.7.9 ``create(zero:)``):
the create action sets the new device memory to 0; present data is left as it is. Also
``copyin(readonly:)`` (a hint) and the ``present_or_`` aliases of the data clauses (§2.7)."""
from __future__ import annotations

import numpy as np
import pytest

import pyacc as acc


def _dirty_the_pool():
    """Leave nonzero bytes where the next allocation lands (the allocator reuses them)."""
    garbage = np.full(4096, 7.0)
    acc.copyin(garbage)
    acc.delete(garbage)


@acc.parallel_loop("create(zero: b) copyout(zero: c)")
def adds_zeroed(a, b, c):
    for i in range(a.shape[0]):
        a[i] = b[i] + 1.0
        c[i] += 2.0


@acc.parallel_loop(create="zero: b", copyin="readonly: x")
def adds_keyword(a, b, x):
    for i in range(a.shape[0]):
        a[i] = b[i] + x[i]


@acc.parallel_loop(present="b c")
def accumulates(b, c):
    for i in range(b.shape[0]):
        c[i] = b[i] + c[i]


def test_zero_modifier_on_a_compute_construct(separate_memory):
    a, b, c = np.zeros(8), np.full(8, 5.0), np.full(8, 9.0)
    _dirty_the_pool()
    adds_zeroed(a, b, c)
    assert (a == 1.0).all() and (c == 2.0).all() and (b == 5.0).all()
    _dirty_the_pool()
    adds_keyword(a, b, np.full(8, 3.0))
    assert (a == 3.0).all()


def test_zero_modifier_leaves_present_data(separate_memory):
    a, b = np.zeros(8), np.full(8, 5.0)
    with acc.data(copyin=[b]):
        adds_keyword(a, b, np.ones(8))
    assert (a == 6.0).all()


def test_create_zero_and_copyout_zero_on_data_directives(separate_memory):
    b, c = np.full(8, 5.0), np.full(8, 9.0)
    _dirty_the_pool()
    with acc.data(create_zero=[b], copyout_zero=c):
        accumulates(b, c)
    assert (c == 0.0).all() and (b == 5.0).all()
    _dirty_the_pool()
    acc.enter_data(create_zero=b, async_=1)
    acc.update_self(b, async_=1)
    acc.wait(1)
    assert (b == 0.0).all()
    acc.exit_data(delete=[b])


def test_zero_modifier_on_shared_memory_changes_nothing(host_device):
    b = np.full(8, 5.0)  # no create action: the host's memory is the device's
    with acc.data(create_zero=[b]):
        pass
    assert (b == 5.0).all()


@pytest.mark.parametrize("text, message", [
    ("create(zeros: b)", "create takes zero:, not zeros:"),
    ("copyin(zero: b)", "copyin takes readonly:, not zero:"),
    ("present(zero: b)", "present takes no modifier"),
])
def test_a_modifier_a_clause_does_not_take_is_a_compile_error(text, message):
    with pytest.raises(acc.CompileError, match=message):
        acc.parallel_loop(text)(lambda a, b: None)


def test_an_unknown_zero_keyword_suggests_the_right_one(emulated):
    with pytest.raises(acc.ClauseError, match="did you mean 'copyout_zero'"):
        acc.data(copyin_zero=[np.ones(2)])


@acc.parallel_loop("pcopyin(b) present_or_copyout(c)")
def copies_with_aliases(b, c):
    for i in range(b.shape[0]):
        c[i] = b[i]


def test_present_or_aliases_are_their_clauses(emulated):
    b, c = np.arange(4.0), np.zeros(4)
    copies_with_aliases(b, c)
    assert list(c) == [0.0, 1.0, 2.0, 3.0]
    assert "b: copyin (explicit clause)" in acc.explain(copies_with_aliases)
    with acc.data(pcopyin=[b], present_or_create=c, pcopy=np.ones(2)):
        assert acc.refcounts(b) == (1, 0) and acc.refcounts(c) == (1, 0)
    acc.enter_data(pcreate=[b])
    assert acc.refcounts(b) == (0, 1)
    acc.exit_data(delete=[b])
