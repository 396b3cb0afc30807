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
 * Both hold the table lock for the whole sequence, as the Python verbs do.
 */

/* the sequences the verbs take: exact tuples and lists, read with PySequence_Fast's macros */
static int verb_sequence(PyObject *items) {
    return PyTuple_CheckExact(items) || PyList_CheckExact(items);
}

/* How many times ``entry`` is in ``entries`` (by identity). */
static Py_ssize_t times_listed(PyObject *entries, PyObject *entry) {
    Py_ssize_t times = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(entries); i++)
        times += PySequence_Fast_GET_ITEM(entries, i) == entry;
    return times;
}

/* Adds ``step`` to the structured count of each of ``entries``, all or nothing: 0, or -1
 * with an exception set and every count as it was. */
static int add_structured(Lane *self, PyObject *entries, long step) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(entries); i++) {
        PyObject *entry = PySequence_Fast_GET_ITEM(entries, i);
        long structured = count_of(entry, &self->structured);
        if (structured < 0 || set_count(entry, &self->structured, structured + step) < 0) {
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            while (--i >= 0) {  /* the counts set so far go back */
                entry = PySequence_Fast_GET_ITEM(entries, i);
                set_count(entry, &self->structured, count_of(entry, &self->structured) - step);
            }
            PyErr_Restore(type, value, traceback);
            return -1;
        }
    }
    return 0;
}

/* With the lock held: the entries of ``arrays`` after their +1 (a new tuple), or None. */
static PyObject *join_entries(Lane *self, PyObject *arrays) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(arrays);
    PyObject *entries = PyTuple_New(n);
    if (entries == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(arrays, i);
        PyObject *entry = is_plain_block(x) ? present_entry(self, x) : NULL;
        if (entry == NULL) {
            Py_DECREF(entries);
            return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        }
        PyTuple_SET_ITEM(entries, i, Py_NewRef(entry));
    }
    if (add_structured(self, entries, 1) < 0) {
        Py_DECREF(entries);
        return NULL;
    }
    return entries;
}

/* With the lock held: True after the −1 of each of ``entries``, or None. */
static PyObject *part_entries(Lane *self, PyObject *entries) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(entries);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PySequence_Fast_GET_ITEM(entries, i);
        if ((PyObject *)Py_TYPE(entry) != self->entry_type)
            Py_RETURN_NONE;
        long dynamic = count_of(entry, &self->dynamic);
        long structured = dynamic < 0 ? -1 : count_of(entry, &self->structured);
        if (structured < 0)
            return NULL;
        if (!dynamic && structured <= times_listed(entries, entry))
            Py_RETURN_NONE;  /* a lifetime would end: Python's full exit */
    }
    return add_structured(self, entries, -1) < 0 ? NULL : Py_NewRef(Py_True);
}

/* Shared memory (OpenACC 3.3 §2.7.4: no action, ``SharedMemoryRuntime``): the entries
 * of ``arrays`` (one None per plain block, as ``enter``'s ``Mapped(request, None)``), or
 * None. */
static PyObject *shared_join(Lane *self, PyObject *arrays) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(arrays);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!is_plain_block(PySequence_Fast_GET_ITEM(arrays, i)))
            Py_RETURN_NONE;
    PyObject *entries = PyTuple_New(n);
    for (Py_ssize_t i = 0; entries != NULL && i < n; i++)
        PyTuple_SET_ITEM(entries, i, Py_NewRef(Py_None));
    return entries;
}

/* Shared memory: True for the entries ``shared_join`` gave (all None), else None. */
static PyObject *shared_part(Lane *self, PyObject *entries) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(entries); i++)
        if (PySequence_Fast_GET_ITEM(entries, i) != Py_None)
            Py_RETURN_NONE;
    Py_RETURN_TRUE;
}

/* A verb on a whole sequence (``verb_sequence``): the lock taken once, ``on_list`` with
 * it held; on shared memory, ``on_shared`` (no table, no lock). */
static PyObject *run_list_verb(Lane *self, PyObject *list, Py_ssize_t event_kind,
                               PyObject *(*on_list)(Lane *, PyObject *),
                               PyObject *(*on_shared)(Lane *, PyObject *)) {
    if (!verb_sequence(list) || PySequence_Fast_GET_SIZE(list) == 0 ||
            self->tracks_use || watched(self, event_kind) || watched(self, self->end_kind))
        Py_RETURN_NONE;
    if (self->table == Py_None)
        return on_shared(self, list);
    PyObject *release;
    switch (take_lock(self, event_kind, &release)) {
        case HELD: return unlock(release, on_list(self, list));
        case DECLINED: Py_RETURN_NONE;
        default: return NULL;
    }
}

static PyObject *lane_join(Lane *self, PyObject *arrays) {
    return run_list_verb(self, arrays, self->enter_kind, join_entries, shared_join);
}

static PyObject *lane_part(Lane *self, PyObject *entries) {
    return run_list_verb(self, entries, self->exit_kind, part_entries, shared_part);
}
