"""Structs of arrays, arrays of structs, and attach/detach, end to end (issue 29 item 4;
API.md §6.2; OpenACC 2.6 / 3.3 §2.7.1, §2.7.2).

1. A parameter the kernel reads members of (``s.x[i]``, ``s.n``) takes a namedtuple, a
   dataclass or any object with attributes: each member the kernel uses is looked up
   and mapped like an array argument (present in place, else present-or-copy, not
   copied back if never written); scalar members are firstprivate values read at the
   call; clauses name members (``copyin(s.x[0:n])``) and the struct (``copyin(s)``:
   every member without a clause of its own).
2. Errors name the member: a missing one, one of a type kernels cannot take, a struct
   passed where the function reads no member.
3. NumPy structured dtypes (record arrays) are kernel arguments (``g[i].energy``,
   ``g[i]["energy"]``), copied like other arrays.
4. ``acc.attach(s)`` needs every array member present and makes kernels taking ``s``
   use the members' device copies (members without a clause are ``present``);
   ``acc.detach(s)`` undoes it; the C spellings are the same routines.
"""

from collections import namedtuple
from dataclasses import dataclass
import types

import numpy as np
import pytest

import pyacc as acc
from pyacc import openacc

Particles = namedtuple("Particles", "x v n")


@dataclass
class Grid:
    u: np.ndarray
    unew: np.ndarray
    h: float
    label: str = "never read by a kernel"


class Slots:
    __slots__ = ("x", "v", "n")

    def __init__(self, x, v, n):
        self.x, self.v, self.n = x, v, n


def transfers():
    s = acc.stats()
    return s["h2d_bytes"], s["d2h_bytes"]


@acc.parallel_loop
def push(p, dt):
    for i in range(p.x.shape[0]):
        p.x[i] += dt * p.v[i] * p.n


@acc.parallel_loop
def relax(g):
    for i in range(1, g.u.shape[0] - 1):
        g.unew[i] = 0.5 * (g.u[i - 1] + g.u[i + 1]) * g.h


def particles(kind, size=5):
    x, v = np.arange(float(size)), np.ones(size)
    if kind == "namedtuple":
        return Particles(x, v, 2)
    if kind == "slots":
        return Slots(x, v, 2)
    return types.SimpleNamespace(x=x, v=v, n=2)


@pytest.mark.parametrize("kind", ["namedtuple", "slots", "namespace"])
def test_a_struct_of_arrays_is_a_kernel_argument(device, kind):
    """API.md §6.2: namedtuples, objects with ``__slots__`` or ``__dict__``: the kernel
    reads and writes the members as arrays, scalars by value."""
    p = particles(kind)
    push(p, 0.5)
    np.testing.assert_array_equal(p.x, np.arange(5.0) + 1.0)
    np.testing.assert_array_equal(p.v, np.ones(5))


def test_members_follow_the_implicit_rules(device):
    """OpenACC 3.3 §2.6.2 per member: present-or-copy, a member never written is not
    copied back; the dataclass's string member is never read, so never touched."""
    g = Grid(np.arange(6.0), np.zeros(6), 2.0)
    relax(g)
    np.testing.assert_array_equal(g.unew[1:-1], 2 * np.arange(1.0, 5.0))
    if device != "host":
        assert transfers() == (96, 48)  # u and unew in, only unew out


def test_members_present_in_a_data_region_are_used_in_place(device):
    """OpenACC 3.3 §2.6.2: each member is looked up in the present table."""
    g = Grid(np.arange(6.0), np.zeros(6), 1.0)
    with acc.data(copyin=[g.u], copy=[g.unew]):
        acc.reset_stats()
        relax(g)
        relax(g)
        if device != "host":
            assert transfers() == (0, 0)
    np.testing.assert_array_equal(g.unew[1:-1], np.arange(1.0, 5.0))


def test_scalar_members_are_read_at_each_call(device):
    """OpenACC 3.3 §2.5.14: a scalar member is firstprivate with its value at the call."""
    p = Particles(np.zeros(3), np.ones(3), 1)
    push(p, 1.0)
    push(p._replace(n=10), 1.0)
    np.testing.assert_array_equal(p.x, np.full(3, 11.0))


def test_a_member_whose_kind_changes_gets_its_own_kernel(device):
    """API.md §6.2: an int member that becomes a float compiles again (no stale kernel)."""
    p = Particles(np.zeros(3), np.ones(3), 1)
    push(p, 1.0)
    push(p._replace(n=0.25), 1.0)
    np.testing.assert_array_equal(p.x, np.full(3, 1.25))


@acc.parallel_loop("copyin(s) copyout(s.y[0:s.n])")
def clauses_on_members(s):
    for i in range(s.n):
        s.y[i] = 2.0 * s.x[i]
        s.z[i] = 1.0


def test_a_clause_on_the_struct_covers_the_members_without_their_own(device):
    """OpenACC 3.3 §2.7.1-2.7.2 as C writes it: ``copyin(s) copyout(s.y[0:n])``: ``y``
    comes back, ``x`` and ``z`` (copyin through ``s``) do not."""
    s = types.SimpleNamespace(x=np.arange(4.0), y=np.zeros(4), z=np.zeros(4), n=4)
    clauses_on_members(s)
    np.testing.assert_array_equal(s.y, 2 * np.arange(4.0))
    if device != "host":
        assert not s.z.any()  # copyin(s): the kernel's writes stay on the device
        assert transfers() == (64, 32)  # x and z in (copyin), y out (copyout)


@acc.parallel_loop(default="none", present=["s"])
def all_present(s):
    for i in range(s.a.shape[0]):
        s.a[i] += 1.0


def test_present_of_the_struct_requires_every_member(device):
    """OpenACC 3.3 §2.7.5 with default(none): ``present(s)`` covers its members."""
    s = types.SimpleNamespace(a=np.zeros(3))
    with acc.data(copy=[s.a]):
        all_present(s)
    np.testing.assert_array_equal(s.a, np.ones(3))
    if device != "host":
        with pytest.raises(acc.NotPresentError, match="'s.a'"):
            all_present(s)


def test_a_missing_member_names_it(device):
    """API.md §6.2: the error names the member the kernel reads, before any data action."""
    g = types.SimpleNamespace(u=np.zeros(4), h=1.0)
    with pytest.raises(acc.InvalidArgumentError, match="has no member 'g.unew'"):
        relax(g)
    assert acc.refcounts(g.u) == (0, 0)


def test_a_member_of_a_type_kernels_cannot_take_names_it(device):
    """API.md §6.2: members are arrays and numeric scalars."""
    p = types.SimpleNamespace(x=np.zeros(3), v=[1.0, 2.0, 3.0], n=1)
    with pytest.raises(acc.InvalidArgumentError, match=r"argument 'p.v' is a list \(convert it"):
        push(p, 1.0)


@acc.parallel_loop
def reads_no_member(a, s):
    for i in range(a.shape[0]):
        a[i] = 1.0


def test_a_struct_the_kernel_reads_no_member_of_is_refused_clearly(device):
    """API.md §6.2: a struct is taken where the function reads its members; elsewhere
    the message says so (no 'np.asarray' hint that cannot work)."""
    with pytest.raises(acc.InvalidArgumentError, match="does not read members of 's'"):
        reads_no_member(np.zeros(2), types.SimpleNamespace(x=np.zeros(2)))


def test_struct_calls_run_on_the_host_under_if_false(device):
    """OpenACC 3.3 §2.5.6: ``if_=False`` runs the flattened kernel on host data."""
    p = Particles(np.zeros(3), np.ones(3), 3)
    push(p, 1.0, if_=False)
    np.testing.assert_array_equal(p.x, np.full(3, 3.0))


def test_struct_calls_run_on_a_queue(device):
    """OpenACC 3.3 §2.16: an async struct call copies back when its queue gets there."""
    p = Particles(np.zeros(3), np.ones(3), 3)
    push(p, 1.0, async_=2)
    acc.wait(2)
    np.testing.assert_array_equal(p.x, np.full(3, 3.0))


@pytest.fixture(params=["host", "emulated"])
def cpu_device(request):
    """The devices whose kernels run on CPU threads (plain Python can run there)."""
    return request.getfixturevalue("host_device" if request.param == "host" else "emulated")


def test_struct_calls_run_as_plain_python_without_jit(cpu_device, monkeypatch):
    """``PYACC_DISABLE_JIT=1``: the function runs as written, on a struct of the device
    arrays of its members."""
    monkeypatch.setenv("PYACC_DISABLE_JIT", "1")
    p = Particles(np.zeros(3), np.ones(3), 3)
    push(p, 1.0)
    np.testing.assert_array_equal(p.x, np.full(3, 3.0))


@acc.parallel_loop
def member_bounds(p):
    for i in range(p.x.shape[0] + 1):
        p.x[i] = 1.0


def test_bounds_errors_name_the_member(host_device, monkeypatch):
    """``PYACC_BOUNDSCHECK=1``: an index out of bounds names ``p.x``, as written."""
    monkeypatch.setenv("PYACC_BOUNDSCHECK", "1")
    with pytest.raises(acc.ExecutionError, match="on array 'p.x'"):
        member_bounds(types.SimpleNamespace(x=np.zeros(2)))


# ------------------------------------------------------------------------- records

PARTICLE = np.dtype([("energy", "f8"), ("count", "i4")])
ALIGNED = np.dtype([("energy", "f8"), ("count", "i4"), ("v", "f8", (3,))], align=True)


@acc.parallel_loop
def weigh(g, out):
    for i in range(g.shape[0]):
        out[i] = g[i].energy * g[i].count + g[i]["energy"]
        g[i].count = 0


@acc.parallel_loop("reduction(+:total)")
def total_energy(h):
    total = 0.0
    for i in range(h.shape[0]):
        total += h[i].energy + h[i].v[1]
    return total


def test_record_arrays_are_kernel_arguments(device):
    """API.md §6.2: structured dtypes are Numba records; fields read and written, the
    array copied like any other."""
    g = np.zeros(5, PARTICLE)
    g["energy"], g["count"] = np.arange(5.0), 3
    out = np.zeros(5)
    weigh(g, out)
    np.testing.assert_array_equal(out, 4 * np.arange(5.0))
    assert not g["count"].any()


def test_aligned_records_with_subarray_fields_reduce(device):
    """API.md §6.2: aligned records, fixed-size subarray fields, in a reduction."""
    h = np.zeros(4, ALIGNED)
    h["energy"], h["v"][:, 1] = 1.0, 2.0
    assert total_energy(h) == 12.0


@pytest.mark.parametrize("dtype, field", [
    (np.dtype([("name", "U4"), ("energy", "f8")]), "'name'"),
    (np.dtype([("energy", ">f8"), ("count", "i4")]), "'energy'"),
])
def test_records_kernels_cannot_take_name_the_field(device, dtype, field):
    """API.md §6.2: a string or byte-swapped field is refused before any data action."""
    with pytest.raises(acc.InvalidArgumentError, match=f"its field {field}"):
        weigh(np.zeros(2, dtype), np.zeros(2))


# ------------------------------------------------------------------------- attach


@acc.parallel_loop
def shift(s, out):
    for i in range(out.shape[0]):
        out[i] = s.x[i] + s.n


def test_attach_needs_every_array_member_present(separate_memory):
    """OpenACC 3.3 §2.7.2: attaching refers to the members' device copies."""
    s = types.SimpleNamespace(x=np.zeros(3), inner=types.SimpleNamespace(y=np.zeros(2)), n=1)
    acc.copyin(s.x)
    with pytest.raises(acc.NotPresentError, match=r"acc.attach\(s\): member 's.inner.y'"):
        acc.attach(s)
    acc.delete(s.x)


def test_an_attached_struct_uses_its_members_device_copies(separate_memory):
    """OpenACC 3.3 §2.7.2: while attached, members without a clause are ``present``:
    used in place, never copied implicitly; after a member's data is gone the kernel
    says so (naming the attachment), and ``detach`` brings the implicit rules back."""
    s = types.SimpleNamespace(x=np.arange(3.0), n=1)
    out = np.zeros(3)
    acc.enter_data(copyin=[s.x])
    acc.attach(s)
    acc.reset_stats()
    shift(s, out)
    assert acc.stats()["h2d_bytes"] == 24  # out only
    np.testing.assert_array_equal(out, np.arange(3.0) + 1)
    acc.exit_data(delete=[s.x])
    with pytest.raises(acc.NotPresentError, match=r"'s' is attached \(acc.attach\)"):
        shift(s, out)
    acc.detach(s)
    shift(s, out)  # present-or-copy again
    np.testing.assert_array_equal(out, np.arange(3.0) + 1)


def test_attachment_counts_and_finalize(separate_memory):
    """OpenACC 3.3 §2.7.2: each attach counts; detach takes one back, ``finalize`` all;
    detaching a struct that is not attached does nothing."""
    s = types.SimpleNamespace(x=np.arange(3.0), n=0)
    out = np.zeros(3)
    acc.detach(s)  # not attached: nothing
    acc.enter_data(copyin=[s.x])
    acc.attach(s)
    acc.attach(s)
    acc.detach(s)
    acc.exit_data(delete=[s.x])
    with pytest.raises(acc.NotPresentError):
        shift(s, out)  # still attached once
    acc.attach(s) if acc.is_present(s.x) else None
    acc.detach(s, finalize=True)
    shift(s, out)
    np.testing.assert_array_equal(out, np.arange(3.0))


def test_enter_data_attach_and_exit_data_detach_clauses(separate_memory):
    """OpenACC 3.3 §2.7.12-13: ``enter data copyin(s.x) attach(s)``, ``exit data
    detach(s) delete(s.x)``: the attach after the directive's maps, the detach before."""
    s = types.SimpleNamespace(x=np.arange(3.0), n=1)
    out = np.zeros(3)
    acc.enter_data(copyin=[s.x], attach=s)
    acc.reset_stats()
    shift(s, out)
    assert acc.stats()["h2d_bytes"] == 24  # out only: s.x is used in place
    acc.exit_data(detach=[s], delete=[s.x])
    assert not acc.is_present(s.x)
    shift(s, out)  # detached: present-or-copy again
    np.testing.assert_array_equal(out, np.arange(3.0) + 1)


def test_enter_data_attach_is_all_or_nothing(separate_memory):
    s = types.SimpleNamespace(x=np.zeros(3), y=np.zeros(2), n=1)
    a = np.ones(4)
    with pytest.raises(acc.NotPresentError, match="member 's.y'"):
        acc.enter_data(copyin=[a, s.x], attach=[s])
    assert not acc.is_present(a) and not acc.is_present(s.x)
    with pytest.raises(acc.InvalidArgumentError, match=r"acc.enter_data\(attach=...\) takes a struct"):
        acc.enter_data(copyin=[a], attach=[a])
    assert not acc.is_present(a)


def test_shutdown_ends_attachments(separate_memory):
    """OpenACC 3.3 §3.2.8: shutdown ends every data lifetime, attachments included."""
    s = types.SimpleNamespace(x=np.arange(3.0), n=0)
    acc.copyin(s.x)
    acc.attach(s)
    acc.shutdown(separate_memory)
    out = np.zeros(3)
    shift(s, out)
    np.testing.assert_array_equal(out, np.arange(3.0))


def test_attach_on_the_host_device_checks_the_struct(host_device):
    """API.md §1: on ``host`` every member is present; attach only checks its argument."""
    s = types.SimpleNamespace(x=np.arange(3.0), n=0)
    acc.attach(s)
    acc.detach(s)
    with pytest.raises(acc.InvalidArgumentError, match="acc.attach takes a struct"):
        acc.attach(np.zeros(3))


def test_the_c_spellings_are_the_same_routines(separate_memory):
    """API.md §3: ``acc_attach``/``acc_detach`` (and their forms) from pyacc.openacc."""
    assert openacc.acc_attach is acc.attach and openacc.acc_detach is acc.detach
    s = types.SimpleNamespace(x=np.arange(3.0), n=0)
    acc.copyin(s.x)
    openacc.acc_attach_async(s, 1)
    openacc.acc_detach_finalize_async(s, 1)
    openacc.acc_attach(s)
    openacc.acc_detach_finalize(s)
    openacc.acc_detach_async(s, 1)
    acc.delete(s.x)
    out = np.zeros(3)
    shift(s, out)  # not attached: copied implicitly
    np.testing.assert_array_equal(out, np.arange(3.0))


@acc.parallel_loop("copyin(s) present(s.y)")
def needs_y_present(s):
    for i in range(s.x.shape[0]):
        s.y[i] = s.x[i]


def test_a_failing_member_undoes_the_others(separate_memory):
    """API.md §4: all or nothing: when one member cannot be mapped (``present`` of an
    absent member), no other member stays mapped and nothing was allocated."""
    s = types.SimpleNamespace(x=np.arange(3.0), y=np.zeros(3))
    with pytest.raises(acc.NotPresentError, match="'s.y'"):
        needs_y_present(s)
    assert acc.refcounts(s.x) == (0, 0)
    assert acc.stats()["alloc_count"] == 0 and acc.present_table() == []


def test_explain_names_members_as_the_program_spells_them(host_device):
    """API.md §6.1: compiler feedback of a struct call says ``g.u``, not a generated
    name."""
    relax(Grid(np.arange(4.0), np.zeros(4), 1.0))
    text = acc.explain(relax)
    assert "g.u: copyin" in text and "g.unew: copy" in text and "g.h: firstprivate" in text
    assert "__" not in text


class Vector:
    """A C++-style vector class: its members are named like ndarray attributes."""

    def __init__(self, n):
        self.data = np.zeros(n)
        self.size = n


@acc.parallel_loop
def fill_vector(v, value):
    for i in range(v.size):
        v.data[i] = value


def test_members_named_like_array_attributes_are_members(device):
    """API.md §6.2: ``v.data`` is no attribute a kernel's array has, so ``v`` is a
    struct; its ``size`` member then is a member too."""
    v = Vector(4)
    fill_vector(v, 2.5)
    np.testing.assert_array_equal(v.data, np.full(4, 2.5))
