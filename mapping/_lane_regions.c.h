/* The data lane's structured counts: a data region's entry and exit of present data
 * (``acc.data``, OpenACC 3.3 §2.6.5 and §2.7), one C call each. Included by
 * ``mapping/_cprobe.c`` after the lane's verbs, whose lock and entry helpers it uses (one
 * translation unit).
 *
 *   join(arrays) -> (entry, ...) | None: the structured count +1 of the entry wholly
 *       containing each array (a tuple or list; one entry per array, in order, in a
 *       tuple: ``acc.data``'s C region keeps it until its exit) — ``runtime.enter``
 *       of present data, all or nothing — when every array is a plain block inside one
 *       mapping, nobody subscribes to ENTER_DATA or DIRECTIVE_END, and the runtime does
 *       not track use; else None, nothing changed. On shared memory (the lane of
 *       ``SharedMemoryRuntime``: no table) every plain block is present and nothing is
 *       counted: one None entry per array, as that runtime's ``enter``.
 *   part(entries) -> True | None: the structured count −1 of each entry (a tuple or
 *       list; k for an entry listed k times) when none of them would end its lifetime by it
 *       (``entry.leave_all_structured``'s rule: not dynamic and structured ≤ k) and
 *       nobody subscribes to EXIT_DATA or DIRECTIVE_END; else None, nothing changed (the
 *       caller runs ``exit_structured``, which copies back and frees). On shared memory:
 *       True for the None entries of its join.
 *
 * The same two verbs on C arrays (``region_join``, ``region_part``) are ``LANE_API``'s
 * (``_lane_api.h``), which ``acc.data``'s C base calls without a tuple either way.
 *
 * Both hold the table lock for the whole sequence, as the Python verbs do — or, when
 * nobody else holds it, run as one section under the GIL without taking it
 * (``table_lock_free_here``'s rule, ~350 of a region's machine instructions): a section
 * that only reads and writes slots in place (every field the verbs touch a ``__slots__``
 * member), makes no tracked object and runs no Python code before its last write. So
 * the join checks its arrays before the section, and skips the lock only for arrays of
 * one dtype (whose item size the checks then find remembered: no attribute is read and
 * no dtype released inside). Reads come first and may fail (nothing written then); the
 * writes set counts, exact ints (the runtime writes no other), which the collector does
 * not track and whose release runs no code.
 */

/* the sequences the verbs take: exact tuples and lists, read with PySequence_Fast's macros */
static int verb_sequence(PyObject *items) {
    return PyTuple_CheckExact(items) || PyList_CheckExact(items);
}

/* How many of ``entries[0:n]`` are ``entry`` (by identity). */
static Py_ssize_t times_listed(PyObject *const *entries, Py_ssize_t n, PyObject *entry) {
    Py_ssize_t times = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        times += entries[i] == entry;
    return times;
}

/* Adds ``step`` to the structured count of each of ``entries[0:n]``, all or nothing: 0,
 * or -1 with an exception set and every count as it was. */
static int add_structured(Lane *self, PyObject *const *entries, Py_ssize_t n, long step) {
    for (Py_ssize_t i = 0; i < n; i++) {
        long structured = count_of(entries[i], &self->structured);
        if (structured < 0 || set_count(entries[i], &self->structured, structured + step) < 0) {
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            while (--i >= 0)  /* the counts set so far go back */
                set_count(entries[i], &self->structured, count_of(entries[i], &self->structured) - step);
            PyErr_Restore(type, value, traceback);
            return -1;
        }
    }
    return 0;
}

/* In a section: each array's entry (in ``entries``; the arrays are plain blocks, checked
 * by ``region_join``), then their +1: 1, each entry held; 0 when some array is in no
 * entry; -1 with an exception set. Nothing changed, and nothing held, unless 1. */
static int join_entries(Lane *self, PyObject *const *arrays, Py_ssize_t n, PyObject **entries) {
    for (Py_ssize_t i = 0; i < n; i++) {
        entries[i] = present_entry(self, arrays[i]);
        if (entries[i] == NULL)
            return PyErr_Occurred() ? -1 : 0;
    }
    if (add_structured(self, entries, n, 1) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        Py_INCREF(entries[i]);  /* (in the section: the table holds each while the count is up) */
    return 1;
}

/* In a section: the −1 of each of ``entries`` (1), or 0 when some entry is not a mapping
 * entry or would end its lifetime by it; -1 with an exception set. */
static int part_entries(Lane *self, PyObject *const *entries, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((PyObject *)Py_TYPE(entries[i]) != self->entry_type)
            return 0;
        long dynamic = count_of(entries[i], &self->dynamic);
        long structured = dynamic < 0 ? -1 : count_of(entries[i], &self->structured);
        if (structured < 0)
            return -1;
        if (!dynamic && structured <= times_listed(entries, n, entries[i]))
            return 0;  /* a lifetime would end: Python's full exit */
    }
    return add_structured(self, entries, n, -1) < 0 ? -1 : 1;
}

/* Whether the verbs' sections may run without the lock: every field they read or write a
 * slot (no Python code runs for it) and ``table_lock_free_here``. 1, 0, or -1. */
static int lock_free(Lane *self) {
    if (!self->bounds.offset || !self->values.offset || !self->dynamic.offset || !self->structured.offset)
        return 0;
    return table_lock_free_here(&self->held, self->table);
}

/* ``on_list`` as a section of the table (lock-free where ``may_skip`` and ``lock_free``
 * allow, or with the lock held); 0 when the verb is declined before it (a subscriber,
 * oversubscription). A release that fails after the verb did its work (only a lock of
 * another kind than ``TableLock`` can: the lane's table has one) gives -1 with the
 * release's error, the verb's changes standing, as a Python ``with lock:`` would; a join's
 * entries then stay held (never released). */
static int run_section(Lane *self, Py_ssize_t event_kind, int may_skip, int (*on_list)(Lane *, void *),
                       void *arg) {
    switch (may_skip ? lock_free(self) : 0) {
        case 1: return on_list(self, arg);
        case 0: break;
        default: return -1;
    }
    PyObject *release;
    switch (take_lock(self, event_kind, &release)) {
        case HELD: break;
        case DECLINED: return 0;
        default: return -1;
    }
    int done = on_list(self, arg);
    int failed = table_lock_give(release) < 0;
    Py_DECREF(release);
    return failed ? -1 : done;
}

/* Whether a region verb of ``event_kind`` on ``n`` items is declined at once. */
static int region_declined(Lane *self, Py_ssize_t event_kind, Py_ssize_t n) {
    return n == 0 || self->tracks_use || watched(self, event_kind) || watched(self, self->end_kind);
}

typedef struct { PyObject *const *items; Py_ssize_t n; PyObject **entries; } RegionVerb;

static int join_section(Lane *self, void *arg) {
    RegionVerb *verb = arg;
    return join_entries(self, verb->items, verb->n, verb->entries);
}

static int part_section(Lane *self, void *arg) {
    RegionVerb *verb = arg;
    return part_entries(self, verb->items, verb->n);
}

/* LANE_API's join (``_lane_api.h``): on shared memory (OpenACC 3.3 §2.7.4) a None entry
 * per plain block, nothing counted. The arrays are checked before the section; where
 * they share one dtype, the checks in it find that dtype remembered (``array_itemsize``:
 * no attribute read, no dtype released), so the section may skip the lock. */
static int region_join(PyObject *lane, PyObject *const *arrays, Py_ssize_t n, PyObject **entries) {
    Lane *self = (Lane *)lane;
    if (region_declined(self, self->enter_kind, n))
        return 0;
    int one_dtype = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!is_plain_block(arrays[i]))
            return 0;
        one_dtype &= ((ArrayFields *)arrays[i])->descr == ((ArrayFields *)arrays[0])->descr;
    }
    if (self->table == Py_None) {
        for (Py_ssize_t i = 0; i < n; i++)
            entries[i] = Py_NewRef(Py_None);
        return 1;
    }
    RegionVerb verb = {arrays, n, entries};
    return run_section(self, self->enter_kind, one_dtype, join_section, &verb);
}

/* LANE_API's part: on shared memory, 1 for the None entries of its join. */
static int region_part(PyObject *lane, PyObject *const *entries, Py_ssize_t n) {
    Lane *self = (Lane *)lane;
    if (region_declined(self, self->exit_kind, n))
        return 0;
    if (self->table == Py_None) {
        for (Py_ssize_t i = 0; i < n; i++)
            if (entries[i] != Py_None)
                return 0;
        return 1;
    }
    RegionVerb verb = {entries, n, NULL};
    return run_section(self, self->exit_kind, 1, part_section, &verb);
}

/* (``lane_type`` set when the module is made) */
static LaneApi g_lane_api = {LANE_API_VERSION, NULL, region_join, region_part};

/* The methods: ``items`` (an exact tuple or list) copied, each held, into a buffer (a
 * list may change while the lock is waited for), with room for as many entries after
 * them; NULL with ``*n`` -1 when ``items`` is not a verb's sequence or is empty (the verb
 * declines), or with an exception set. */
static PyObject **hold_items(PyObject *items, Py_ssize_t *n) {
    *n = verb_sequence(items) ? PySequence_Fast_GET_SIZE(items) : 0;
    PyObject **held = *n > 0 ? PyMem_New(PyObject *, 2 * *n) : NULL;
    if (held == NULL) {
        if (*n > 0)
            PyErr_NoMemory();
        *n = -1;
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++)
        held[i] = Py_NewRef(PySequence_Fast_GET_ITEM(items, i));
    return held;
}

static void drop_items(PyObject **held, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        Py_DECREF(held[i]);
    PyMem_Free(held);
}

static PyObject *lane_join(Lane *self, PyObject *arrays) {
    Py_ssize_t n;
    PyObject **held = hold_items(arrays, &n);
    PyObject *entries = held == NULL ? NULL : PyTuple_New(n);  /* (made before the section) */
    int joined = entries == NULL ? (PyErr_Occurred() ? -1 : 0) : region_join((PyObject *)self, held, n, held + n);
    for (Py_ssize_t i = 0; joined == 1 && i < n; i++)
        PyTuple_SET_ITEM(entries, i, held[n + i]);  /* (the join's new references) */
    if (held != NULL)
        drop_items(held, n);
    if (joined == 1)
        return entries;
    Py_XDECREF(entries);
    return joined < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *lane_part(Lane *self, PyObject *entries) {
    Py_ssize_t n;
    PyObject **held = hold_items(entries, &n);
    int parted = held == NULL ? (PyErr_Occurred() ? -1 : 0) : region_part((PyObject *)self, held, n);
    if (held != NULL)
        drop_items(held, n);
    return parted < 0 ? NULL : Py_NewRef(parted ? Py_True : Py_None);
}
