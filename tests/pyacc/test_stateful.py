"""Stateful property test of the data side (issue 2, item 4; API.md §2–4, §8).

A hypothesis ``RuleBasedStateMachine`` drives random sequences of
copyin/create/copyout/delete (routines and enter/exit data directives, with and
without finalize), structured ``acc.data`` regions entered and exited later in LIFO
order, update_device/update_self (also on strided views), map_data/unmap_data, and
host/device writes, on overlapping views ``buf[i:j]`` of three buffers of 16 float64,
on the emulated device.

After every step the runtime is compared with a small reference model written here:
each mapping's host range, structured and dynamic counters, kind, and the expected
device bytes (copyin copies host -> model device, copyout copies model device -> host,
update moves only the named view's elements). Expected errors (partly present, not
present, present) must be raised exactly when the model says so, and then nothing
may have changed.

One point the contract leaves open is modelled loosely: when an exit action on a
*proper sub-view* ends a mapping's lifetime with a copy back, the view's elements must
be copied; the mapping's other elements may or may not be (each must then hold either
its old host value or the device value).
"""

import copy as _copy
import sys
from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pyacc as acc

NBUF = 3
N = 16
ITEM = 8  # float64

# ----------------------------------------------------------------------------- strategies

_GRID = [0, 4, 8, 12, 16]


@st.composite
def views(draw):
    """(buffer, lo, hi) with 0 <= lo < hi <= N, biased towards a grid of boundaries."""
    b = draw(st.integers(0, NBUF - 1))
    lo = draw(st.one_of(st.sampled_from(_GRID[:-1]), st.integers(0, N - 1)))
    above = [g for g in _GRID if g > lo]
    hi = draw(st.one_of(st.sampled_from(above), st.integers(lo + 1, N)))
    return (b, lo, hi)


views = views()
strided_views = st.tuples(views, st.sampled_from([1, 1, 2, 3])).map(lambda t: t[0] + (t[1],))


def two_views_distinct_buffers():
    return st.lists(views, min_size=1, max_size=2, unique_by=lambda v: v[0])


# ----------------------------------------------------------------------------- model


class Expect(Exception):
    """Raised inside the model: the real call must raise ``cls``."""

    def __init__(self, cls):
        super().__init__(cls.__name__)
        self.cls = cls


@dataclass
class Mapping:
    buf: int
    lo: int
    hi: int
    S: int = 0
    D: int = 0
    kind: str = "normal"
    dev: object = None  # np.ndarray of hi-lo values, or None while unknown (create)
    dkey: object = None  # key of the malloc'd device array for map_data


@dataclass
class Model:
    host: list
    maps: list = field(default_factory=list)
    pending: list = field(default_factory=list)  # loose copy-back checks

    def rel(self, b, lo, hi):
        for m in self.maps:
            if m.buf != b:
                continue
            if m.lo <= lo and hi <= m.hi:
                return "contained", m
            if lo < m.hi and m.lo < hi:
                return "partly", m
        return "disjoint", None

    # --- entry actions: which = "S" or "D"
    def enter(self, b, lo, hi, clause, which):
        r, m = self.rel(b, lo, hi)
        if r == "partly":
            raise Expect(acc.PartlyPresentError)
        if r == "contained":
            setattr(m, which, getattr(m, which) + 1)
            return True
        if clause == "present":
            raise Expect(acc.NotPresentError)
        if clause == "no_create":
            return False
        m = Mapping(b, lo, hi)
        setattr(m, which, 1)
        if clause in ("copy", "copyin"):
            m.dev = self.host[b][lo:hi].copy()
        self.maps.append(m)
        return False

    def _copy_back(self, m, lo, hi):
        """Copy-out action for the view [lo, hi) of mapping m (m.dev is known)."""
        h = self.host[m.buf]
        h[lo:hi] = m.dev[lo - m.lo : hi - m.lo]
        rest = [i for i in range(m.lo, m.hi) if not (lo <= i < hi)]
        if rest:
            idx = np.array(rest)
            self.pending.append((m.buf, idx, h[idx].copy(), m.dev[idx - m.lo].copy()))

    def _remove(self, m):
        self.maps.remove(m)

    def exit_dynamic(self, b, lo, hi, copy, finalize):
        r, m = self.rel(b, lo, hi)
        if r == "partly":
            raise Expect(acc.PartlyPresentError)
        if r == "disjoint" or m.D == 0:
            return
        if m.kind == "map_data":
            if finalize:
                m.D = 1
            elif m.D > 1:
                m.D -= 1
            return
        m.D = 0 if finalize else m.D - 1
        if m.S + m.D == 0:
            if copy:
                self._copy_back(m, lo, hi)
            self._remove(m)

    def exit_structured(self, b, lo, hi, clause, was_present):
        if clause == "no_create" and not was_present:
            return
        r, m = self.rel(b, lo, hi)
        assert r == "contained", "a region's data vanished while the region was open"
        if m.S == 0:
            return
        m.S -= 1
        if m.S + m.D == 0:
            if clause in ("copy", "copyout"):
                self._copy_back(m, lo, hi)
            self._remove(m)

    def update(self, b, lo, hi, step, direction, if_present):
        idx = np.arange(lo, hi, step)
        last = int(idx[-1]) + 1
        r, m = self.rel(b, lo, last)
        if r == "partly":
            if if_present:
                return "either"  # skipped or PartlyPresentError; nothing changes either way
            raise Expect(acc.PartlyPresentError)
        if r == "disjoint":
            if if_present:
                return None
            raise Expect(acc.NotPresentError)
        if direction == "device":
            m.dev[idx - m.lo] = self.host[b][idx]
        else:
            self.host[b][idx] = m.dev[idx - m.lo]
        return None


# ----------------------------------------------------------------------------- machine


def _addr(x):
    return x.__array_interface__["data"][0]


def _event(text):
    try:
        event(text)
    except Exception:  # outside a hypothesis test (manual replay)
        pass


class DataMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        acc.shutdown("emulated")
        acc.set_device_type("emulated")
        acc.set_device_num(0, "emulated")
        acc.reset_stats()
        self.bufs = [np.arange(N, dtype=np.float64) + 100 * k for k in range(NBUF)]
        self.model = Model(host=[b.copy() for b in self.bufs])
        self.regions = []  # stack of (region object, clause, [(b, lo, hi, was_present)])
        self.dmem = {}  # dkey -> malloc'd device array (map_data)
        self.next_key = 0
        self.tick = 0

    # --- helpers
    def view(self, v):
        if len(v) == 4:
            b, lo, hi, step = v
            return self.bufs[b][lo:hi:step]
        b, lo, hi = v
        return self.bufs[b][lo:hi]

    def dirty_device(self, b, lo, hi):
        """Stand-in for device code: new values in the whole mapping that holds [lo, hi)."""
        r, m = self.model.rel(b, lo, hi)
        if r != "contained":
            return
        vals = self.fresh(m.hi - m.lo, sign=-1.0)
        acc.deviceptr(self.bufs[m.buf][m.lo : m.hi])[...] = vals
        m.dev = vals.copy()

    def dirty_host(self, b):
        vals = self.fresh(N)
        self.bufs[b][:] = vals
        self.model.host[b][:] = vals

    def fresh(self, n, sign=1.0):
        self.tick += 1
        return sign * (1000.0 * self.tick + np.arange(n))

    def run(self, new_model, outcome, call):
        """Run ``call``; ``outcome`` is None (must succeed), an error class, or a set of
        acceptable outcomes (error classes and/or None). On success the model becomes
        ``new_model``; on an error the model is unchanged."""
        allowed = outcome if isinstance(outcome, set) else {outcome}
        label = sys._getframe(1).f_code.co_name
        try:
            result = call()
        except acc.AccError as e:
            ok = [c for c in allowed if c is not None and isinstance(e, c)]
            assert ok, f"unexpected {type(e).__name__}: {e}; model expected {allowed}"
            _event(f"{label}: {type(e).__name__}")
            return False, None
        assert None in allowed, f"expected one of {allowed}, the call succeeded"
        _event(f"{label}: ok")
        self.model = new_model
        return True, result

    def plan(self, fn):
        """Apply ``fn`` to a copy of the model; return (copy, None) or (None, error class)."""
        m = _copy.deepcopy(self.model)
        m.pending = []
        try:
            res = fn(m)
        except Expect as e:
            return None, e.cls, None
        return m, None, res

    def plan_multi(self, items, fn):
        """Per-item plans over distinct buffers: the set of errors any item would raise."""
        errors = set()
        m = _copy.deepcopy(self.model)
        m.pending = []
        results = []
        for it in items:
            try:
                results.append(fn(m, it))
            except Expect as e:
                errors.add(e.cls)
        if errors:
            return None, errors, None
        return m, None, results

    # --- rules: dynamic entry
    @rule(v=views, kind=st.sampled_from(["copyin", "create"]))
    def routine_enter(self, v, kind):
        b, lo, hi = v
        new, err, _ = self.plan(lambda m: m.enter(b, lo, hi, kind, "D"))
        a = self.view(v)
        ok, d = self.run(new, err, lambda: getattr(acc, kind)(a))
        if ok:
            assert d is not None
            assert _addr(d) == _addr(acc.deviceptr(a))
            assert d.shape == a.shape

    @rule(vs=two_views_distinct_buffers(), kind=st.sampled_from(["copyin", "create"]))
    def directive_enter(self, vs, kind):
        new, err, _ = self.plan_multi(vs, lambda m, v: m.enter(*v, kind, "D"))
        arrs = [self.view(v) for v in vs]
        self.run(new, err, lambda: acc.enter_data(**{kind: arrs}))

    # --- rules: dynamic exit
    @rule(v=views, kind=st.sampled_from(["copyout", "delete"]), finalize=st.booleans(),
          dirty=st.booleans())
    def routine_exit(self, v, kind, finalize, dirty):
        b, lo, hi = v
        if dirty:
            self.dirty_device(b, lo, hi)
            self.dirty_host(b)
        new, err, _ = self.plan(
            lambda m: m.exit_dynamic(b, lo, hi, kind == "copyout", finalize)
        )
        a = self.view(v)
        if finalize:
            self.run(new, err, lambda: getattr(acc, kind)(a, finalize=True))
        else:
            self.run(new, err, lambda: getattr(acc, kind)(a))

    @rule(vs=two_views_distinct_buffers(), kind=st.sampled_from(["copyout", "delete"]),
          finalize=st.booleans(), dirty=st.booleans())
    def directive_exit(self, vs, kind, finalize, dirty):
        if dirty:
            for b, lo, hi in vs:
                self.dirty_device(b, lo, hi)
                self.dirty_host(b)
        new, err, _ = self.plan_multi(
            vs, lambda m, v: m.exit_dynamic(*v, kind == "copyout", finalize)
        )
        arrs = [self.view(v) for v in vs]
        self.run(new, err, lambda: acc.exit_data(**{kind: arrs}, finalize=finalize))

    # --- rules: structured regions
    @rule(vs=two_views_distinct_buffers(),
          clause=st.sampled_from(["copy", "copyin", "copyout", "create", "no_create", "present"]))
    def region_enter(self, vs, clause):
        new, err, was = self.plan_multi(vs, lambda m, v: m.enter(*v, clause, "S"))
        arrs = [self.view(v) for v in vs]
        region = acc.data(**{clause: arrs})
        ok, _ = self.run(new, err, region.__enter__)
        if ok:
            self.regions.append((region, clause, [tuple(v) + (w,) for v, w in zip(vs, was)]))

    @precondition(lambda self: self.regions)
    @rule(dirty=st.booleans())
    def region_exit(self, dirty):
        region, clause, items = self.regions[-1]
        if dirty:
            for b, lo, hi, _ in items:
                self.dirty_device(b, lo, hi)
                self.dirty_host(b)

        def fn(m):
            for b, lo, hi, was in items:
                m.exit_structured(b, lo, hi, clause, was)

        new, err, _ = self.plan(fn)
        assert err is None
        self.regions.pop()
        self.run(new, None, lambda: region.__exit__(None, None, None))

    # --- rules: update
    @rule(v=strided_views, direction=st.sampled_from(["device", "self"]),
          if_present=st.booleans(), form=st.sampled_from(["routine", "directive"]),
          dirty=st.booleans())
    def update(self, v, direction, if_present, form, dirty):
        if dirty:
            self.dirty_device(v[0], v[1], v[1] + 1)
            self.dirty_host(v[0])
        new, err, res = self.plan(lambda m: m.update(*v, direction, if_present))
        outcome = {acc.PartlyPresentError, None} if res == "either" else err
        if res == "either":
            new = _copy.deepcopy(self.model)
            new.pending = []
        a = self.view(v)
        if form == "routine":
            fn = acc.update_device if direction == "device" else acc.update_self
            call = (lambda: fn(a, if_present=True)) if if_present else (lambda: fn(a))
        else:
            kw = {"device" if direction == "device" else "self": a}
            if if_present:
                kw["if_present"] = True
            call = lambda: acc.update(**kw)  # noqa: E731
        self.run(new, outcome, call)

    # --- rules: map_data / unmap_data
    @rule(v=views)
    def map_data(self, v):
        b, lo, hi = v
        r, _ = self.model.rel(b, lo, hi)
        d = acc.malloc((hi - lo,), np.float64)
        vals = self.fresh(hi - lo, sign=-1.0)
        acc.memcpy_to_device(d, vals)
        new = _copy.deepcopy(self.model)
        new.pending = []
        key = self.next_key
        self.next_key += 1
        new.maps.append(Mapping(b, lo, hi, S=0, D=1, kind="map_data", dev=vals.copy(), dkey=key))
        err = acc.PresentError if r != "disjoint" else None
        ok, _ = self.run(new, err, lambda: acc.map_data(self.view(v), d))
        if ok:
            self.dmem[key] = d
            assert _addr(acc.deviceptr(self.view(v))) == _addr(d)
        else:
            acc.free(d)

    @rule(data=st.data(), use_existing=st.booleans())
    def unmap_data(self, data, use_existing):
        if use_existing and self.model.maps:
            i = data.draw(st.integers(0, len(self.model.maps) - 1))
            m0 = self.model.maps[i]
            v = (m0.buf, m0.lo, m0.hi)
        else:
            v = data.draw(views)
        b, lo, hi = v
        r, m = self.model.rel(b, lo, hi)
        if r == "partly" or (r == "contained" and (m.lo, m.hi) != (lo, hi)):
            return  # the contract does not settle these; not exercised here
        if r == "disjoint" or m.kind != "map_data" or m.S > 0:
            self.run(self.model, acc.PresentError, lambda: acc.unmap_data(self.view(v)))
            return
        new = _copy.deepcopy(self.model)
        new.pending = []
        nm = [x for x in new.maps if (x.buf, x.lo, x.hi) == (b, lo, hi)][0]
        new.maps.remove(nm)
        self.run(new, None, lambda: acc.unmap_data(self.view(v)))
        # d was not freed and holds the device contents; nothing was copied to the host
        d = self.dmem.pop(m.dkey)
        out = np.empty(hi - lo)
        acc.memcpy_from_device(out, d)
        np.testing.assert_array_equal(out, m.dev)
        acc.free(d)

    # --- rules: writes
    @rule(v=views)
    def host_write(self, v):
        b, lo, hi = v
        vals = self.fresh(hi - lo)
        self.bufs[b][lo:hi] = vals
        self.model.host[b][lo:hi] = vals

    @rule(v=views, via=st.sampled_from(["deviceptr", "memcpy"]))
    def device_write(self, v, via):
        b, lo, hi = v
        r, m = self.model.rel(b, lo, hi)
        if r != "contained":
            return
        vals = self.fresh(hi - lo, sign=-1.0)
        dptr = acc.deviceptr(self.view(v))
        if via == "deviceptr":
            dptr[...] = vals
        else:
            acc.memcpy_to_device(dptr, vals)
        m.dev[lo - m.lo : hi - m.lo] = vals

    # --- invariants
    @invariant()
    def matches_model(self):
        model = self.model
        # loose copy-back checks, then adopt what the runtime did
        for b, idx, old, devv in model.pending:
            actual = self.bufs[b][idx]
            assert np.all((actual == old) | (actual == devv)), (b, idx, actual, old, devv)
            model.host[b][idx] = actual
        model.pending = []
        # host contents
        for b in range(NBUF):
            np.testing.assert_array_equal(self.bufs[b], model.host[b], err_msg=f"host buf {b}")
        # present table
        bases = [_addr(b) for b in self.bufs]
        expect = sorted(
            (bases[m.buf] + m.lo * ITEM, bases[m.buf] + m.hi * ITEM, m.S, m.D, m.kind)
            for m in model.maps
        )
        got = sorted(
            (r.host_begin, r.host_end, r.structured, r.dynamic, r.kind)
            for r in acc.present_table()
        )
        assert got == expect
        for r in acc.present_table():
            assert r.nbytes == r.host_end - r.host_begin
        # every mapping: counters, presence, device contents
        for m in model.maps:
            a = self.bufs[m.buf][m.lo : m.hi]
            assert tuple(acc.refcounts(a)) == (m.S, m.D)
            assert acc.is_present(a)
            d = acc.deviceptr(a)
            assert d is not None and d.shape == a.shape
            if m.dev is None:  # after create: contents unspecified, adopt them
                m.dev = np.array(d, copy=True)
            else:
                np.testing.assert_array_equal(np.asarray(d), m.dev, err_msg="device contents")
            if m.kind == "map_data":
                assert _addr(d) == _addr(self.dmem[m.dkey])
        # presence of views on a grid of boundaries, and counters of contained views
        for b in range(NBUF):
            for lo in range(0, N, 2):
                for hi in range(lo + 1, N + 1, 3):
                    r, m = model.rel(b, lo, hi)
                    a = self.bufs[b][lo:hi]
                    assert acc.is_present(a) == (r == "contained"), (b, lo, hi, r)
                    if r == "contained":
                        assert tuple(acc.refcounts(a)) == (m.S, m.D)
                        dv = acc.deviceptr(a)
                        np.testing.assert_array_equal(np.asarray(dv), m.dev[lo - m.lo : hi - m.lo])
                    elif r == "disjoint":
                        assert tuple(acc.refcounts(a)) == (0, 0)
                        assert acc.deviceptr(a) is None
        # device memory holds at least every live allocation
        live = sum((m.hi - m.lo) * ITEM for m in model.maps if m.kind == "normal")
        live += sum(d.nbytes for d in self.dmem.values())
        assert acc.stats()["memory_in_use"] >= live

    def teardown(self):
        try:
            while self.regions:
                region, _, _ = self.regions.pop()
                region.__exit__(None, None, None)
            for m in list(self.model.maps):
                a = self.bufs[m.buf][m.lo : m.hi]
                if m.kind == "map_data":
                    acc.unmap_data(a)
                else:
                    acc.delete(a, finalize=True)
            for d in self.dmem.values():
                acc.free(d)
            self.dmem.clear()
            assert len(acc.present_table()) == 0
            assert acc.stats()["memory_in_use"] == 0
        finally:
            acc.shutdown("emulated")


DataMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestDataMachine = DataMachine.TestCase
