/* pyacc.mapping._cprobe: the present table's hot searches, and the data API's lane, in C.
 *
 * Owns ``extent(x)``, ``contained_index(bounds, x)``, ``same_layout(a, b)`` (whether
 * a cached device view still matches its host array), ``plain_block(x)`` (the data
 * API's hot-path test: a numpy.ndarray of plain data in one C- or F-ordered block),
 * ``DataLane`` (below: copyin/create/delete/copyout/is_present of present data in one
 * C call each) and ``TableLock`` (the present table's lock, which the lanes take in
 * place: ``_reentrant_lock.c.h``). The first four are ``_search.c.h``'s. The first two give the same answers as the Numba
 * functions of ``mapping/_probe.py`` (which uses these when this module is built), without
 * a Numba dispatch (~0.3 µs, the larger part of an ``acc.is_present`` of present data).
 *
 *   extent(x) -> (data, low, high): the first element's address and the half-open byte
 *       range the elements of the numpy array ``x`` cover ((data, data, data) when empty);
 *   contained_index(bounds, x) -> int: the index of the range of ``bounds`` that wholly
 *       contains the elements of ``x``; -1 when they overlap none (an empty ``x`` too),
 *       -2 when they overlap one without lying inside it.
 *
 * ``bounds`` is ``_ordered``'s ``bounds``: a C-contiguous native int64 array of shape
 * ``(2, capacity)``, row 0 the begins and row 1 the ends of sorted, non-overlapping
 * half-open ranges, unused slots int64 max in both rows (the lane's searches stop at the
 * ranges' ``count``). Anything else (an ``x`` that is
 * not a numpy array, a ``bounds`` of another shape or type) raises TypeError, and the
 * caller takes its pure-Python search.
 *
 * NumPy arrays are read through NumPy's array object layout (``pyacc/_numpy_abi.h``,
 * shared with ``pyacc/_fastcall.c``), so the module builds without NumPy's headers. The item size
 * is read as the array's ``itemsize`` attribute, remembered for the last dtype object seen
 * (NumPy's built-in dtypes are singletons). The GIL is held throughout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#include "../pyacc/_counter_row.h"
#include "../pyacc/_numpy_abi.h"
#include "../pyacc/_dict_tag.h"
#include "../pyacc/_table_lock.h"
#include "_slot_fields.h"
#include "_range_search.h"
#include "_lane_api.h"
#include "_reentrant_lock.c.h"

#include "_search.c.h"


/* == DataLane: the data API's present-data verbs in one C call ======================
 *
 * ``DataLane(table, ranges, runtime, entry_type, normal, active, kinds)`` belongs to one
 * runtime (``runtime.lane``); ``active`` is ``BUS.active`` and ``kinds`` the ints of
 * ENTER_DATA, EXIT_DATA and DIRECTIVE_END. A ``table`` of None makes the lane of a device
 * that shares the host's memory (``SharedMemoryRuntime``, OpenACC 3.3 §2.7.4): enter
 * returns ``x`` itself, leave True and present True, with no count and no table. Each method does the whole verb for the one
 * case it knows, or returns None having changed nothing, and the caller takes the Python
 * path (which owns every rule; the lane repeats only the plain case of each):
 *
 *   enter(x) -> device array | None: ``acc.copyin``/``acc.create`` of present data
 *       (OpenACC 3.3 §3.2.18: the dynamic count +1, nothing moves) — ``runtime.enter_one``
 *       for a plain block ``x`` (``plain_block``) wholly inside one mapping, when nobody
 *       subscribes to ENTER_DATA or DIRECTIVE_END and the runtime does not track use
 *       (oversubscription). The device array is the entry's cached one when ``x`` is the
 *       mapped array with its layout, else ``runtime.device_array_of(entry, x)``.
 *   leave(x) -> True | None: ``acc.delete``/``acc.copyout`` (no finalize) of data that
 *       stays present (§3.2.23: the dynamic count −1, nothing moves) — taken only for a
 *       NORMAL entry whose dynamic count is at least 1 and whose lifetime the decrement
 *       does not end (``MappingEntry.would_end`` false); every other case is Python's.
 *   present(x) -> bool: ``table.contains(x)`` for a numpy array (lock-free: the GIL is
 *       held throughout, and an odd ``ranges.version`` — a writer stopped mid-mutation —
 *       sends it to ``table.contains``, which retries under the lock).
 *   upload(x) / download(x) -> True | None: a synchronous ``acc.update_device``/
 *       ``update_self`` of present data, on a device that admitted the lane's copies
 *       (``_lane_copies.c.h``).
 *   join(arrays) / part(entries): a data region's structured counts of present data
 *       (``_lane_regions.c.h``); the same two on C arrays are the module's ``LANE_API``
 *       capsule (``_lane_api.h``), which ``acc.data``'s C base calls.
 *
 * enter, leave and the copies hold the table lock (``table._lock``, read at each call: a
 * fork replaces it; a ``TableLock``, taken in place) while they read and change the
 * counts, as the Python verbs do (mapping/table.py's lock rule): a held compute call or
 * another thread's directive is waited for, with the GIL released. They read the ranges'
 * and entries' slots in place (``_slot_fields.h``).
 */
typedef struct {
    PyObject_HEAD
    PyObject *table, *ranges, *runtime, *entry_type, *normal, *active;
    Py_ssize_t enter_kind, exit_kind, end_kind;
    TableLock held;  /* the table lock last seen, its bound methods (``_table_lock.h``) */
    char tracks_use;  /* the runtime's ``tracks_use``, kept here by the runtime */
    /* the ranges' and entries' attributes the verbs read, in place where slots (``_slot_fields.h``) */
    SlotField bounds, count, values, version, dynamic, structured, kind, host_array, device_array;
    /* update's copies (``_lane_copies.c.h``: ``allow_copies``; NULL until then) */
    PyObject *device_dict, *tally_alone;
    CounterRow stats_row;  /* the device's statistics row, counted in place (_counter_row.h) */
    Py_ssize_t counted[4], upload_kind, download_kind, done_kind;
    uint64_t device_tag;  /* device_dict's tag when it was last found plain (0: none) */
} Lane;

static PyObject *s_bounds, *s_count, *s_values, *s_version, *s_dynamic,
    *s_structured, *s_kind, *s_host_array, *s_device_array, *s_device_array_of, *s_contains;

static int lane_init(Lane *self, PyObject *args, PyObject *kwargs) {
    PyObject *table, *ranges, *runtime, *entry_type, *normal, *active;
    Py_ssize_t enter_kind, exit_kind, end_kind;
    if (!PyArg_ParseTuple(args, "OOOOOO!(nnn):DataLane", &table, &ranges, &runtime, &entry_type,
                          &normal, &PyList_Type, &active, &enter_kind, &exit_kind, &end_kind))
        return -1;
    Py_ssize_t size = PyList_GET_SIZE(active);
    if (enter_kind < 0 || enter_kind >= size || exit_kind < 0 || exit_kind >= size
            || end_kind < 0 || end_kind >= size) {
        PyErr_SetString(PyExc_ValueError, "DataLane: an event kind outside the active list");
        return -1;
    }
    Py_INCREF(table); Py_XSETREF(self->table, table);
    Py_INCREF(ranges); Py_XSETREF(self->ranges, ranges);
    Py_INCREF(runtime); Py_XSETREF(self->runtime, runtime);
    Py_INCREF(entry_type); Py_XSETREF(self->entry_type, entry_type);
    Py_INCREF(normal); Py_XSETREF(self->normal, normal);
    Py_INCREF(active); Py_XSETREF(self->active, active);
    self->enter_kind = enter_kind, self->exit_kind = exit_kind, self->end_kind = end_kind;
    PyTypeObject *ranges_type = Py_TYPE(ranges), *entry = PyType_Check(entry_type) ? (PyTypeObject *)entry_type
                                                                                  : &PyBaseObject_Type;
    slot_field_init(&self->bounds, ranges_type, s_bounds);
    slot_field_init(&self->count, ranges_type, s_count);
    slot_field_init(&self->values, ranges_type, s_values);
    slot_field_init(&self->version, ranges_type, s_version);
    slot_field_init(&self->dynamic, entry, s_dynamic);
    slot_field_init(&self->structured, entry, s_structured);
    slot_field_init(&self->kind, entry, s_kind);
    slot_field_init(&self->host_array, entry, s_host_array);
    slot_field_init(&self->device_array, entry, s_device_array);
    return 0;
}

static int lane_traverse(Lane *self, visitproc visit, void *arg) {
    Py_VISIT(self->table); Py_VISIT(self->ranges); Py_VISIT(self->runtime);
    Py_VISIT(self->entry_type); Py_VISIT(self->normal); Py_VISIT(self->active);
    Py_VISIT(self->device_dict); Py_VISIT(self->tally_alone); COUNTER_ROW_VISIT(self->stats_row);
    TABLE_LOCK_VISIT(self->held);
    return 0;
}

static int lane_clear(Lane *self) {
    Py_CLEAR(self->table); Py_CLEAR(self->ranges); Py_CLEAR(self->runtime);
    Py_CLEAR(self->entry_type); Py_CLEAR(self->normal); Py_CLEAR(self->active);
    Py_CLEAR(self->device_dict); Py_CLEAR(self->tally_alone); counter_row_close(&self->stats_row);
    table_lock_clear(&self->held);
    return 0;
}

static void lane_dealloc(Lane *self) {
    PyObject_GC_UnTrack(self);
    lane_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Whether someone subscribes to event kind ``kind`` (BUS.active[kind]). */
static int watched(Lane *self, Py_ssize_t kind) {
    return PyList_GET_SIZE(self->active) <= kind || PyList_GET_ITEM(self->active, kind) != Py_False;
}

static PyObject *call_method_1(PyObject *object, PyObject *name, PyObject *argument) {
    PyObject *args[2] = {object, argument};
    return PyObject_VectorcallMethod(name, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* Gives the table lock back (``release``: its bound release, dropped here) and returns
 * ``result``: the verb's result, or NULL with its exception set, which the release keeps
 * (a failed release of a verb that succeeded makes the result NULL with the release's
 * exception). */
static PyObject *unlock(PyObject *release, PyObject *result) {
    int failed = table_lock_give(release) < 0;
    Py_DECREF(release);
    if (failed && result != NULL)
        Py_CLEAR(result);
    return result;
}

/* A count kept in a slot (an entry's, the ranges'), read in place when it is an exact int of one digit or none
 * (every count the runtime writes below 2**30); -1 for any other. */
static inline long small_count(PyObject *entry, const SlotField *field) {
    PyObject *value = field->offset ? *(PyObject **)((char *)entry + field->offset) : NULL;
    if (value == NULL || !PyLong_CheckExact(value))
        return -1;
#if PY_VERSION_HEX >= 0x030C0000
    if (!PyUnstable_Long_IsCompact((PyLongObject *)value))
        return -1;
    Py_ssize_t count = PyUnstable_Long_CompactValue((PyLongObject *)value);
    return count >= 0 ? (long)count : -1;
#else
    Py_ssize_t size = Py_SIZE(value);
    return size == 0 ? 0 : size == 1 ? (long)((PyLongObject *)value)->ob_digit[0] : -1;
#endif
}

/* ``search`` of the lane's ranges (their bounds, as far as their count) for [low, high):
 * its answer, -3 with an exception set (the bounds unreadable too). */
static inline Py_ssize_t ranges_search(Lane *self, int64_t low, int64_t high) {
    PyObject *bounds = slot_field_get(self->ranges, &self->bounds);
    if (bounds == NULL)
        return -3;
    Py_ssize_t index = search(bounds, small_count(self->ranges, &self->count), low, high);
    Py_DECREF(bounds);
    return index;
}

/* With the lock held: the entry (borrowed) wholly containing the non-empty plain block x
 * when it is a MappingEntry; NULL otherwise (with an exception set when one occurred). */
static PyObject *present_entry(Lane *self, PyObject *x) {
    int64_t data, low, high;
    if (array_extent(x, &data, &low, &high) < 0 || high == low)
        return NULL;
    Py_ssize_t index = ranges_search(self, low, high);
    if (index < 0)
        return NULL;
    PyObject *values = slot_field_get(self->ranges, &self->values);
    if (values == NULL)
        return NULL;
    PyObject *entry = NULL;
    if (PyList_Check(values) && index < PyList_GET_SIZE(values)) {
        entry = PyList_GET_ITEM(values, index);
        if ((PyObject *)Py_TYPE(entry) != self->entry_type)
            entry = NULL;
    }
    Py_DECREF(values);  /* the table keeps the entry alive while the lock is held */
    return entry;
}

/* entry.<name> as a C long; -1 with an exception set (counts are never negative). */
static long count_of(PyObject *entry, const SlotField *field) {
    long small = small_count(entry, field);
    if (small >= 0)
        return small;
    PyObject *value = slot_field_get(entry, field);
    if (value == NULL)
        return -1;
    long count = PyLong_Check(value) ? PyLong_AsLong(value) : -1;
    Py_DECREF(value);
    if (count < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "DataLane: a count that is not a non-negative int");
    return count;
}

static int set_count(PyObject *entry, const SlotField *field, long count) {
    PyObject *value = PyLong_FromLong(count);
    if (value == NULL)
        return -1;
    int status = slot_field_set(entry, field, value);
    Py_DECREF(value);
    return status;
}

/* The device array of x in entry: the cached one when x is the mapped array itself with
 * its layout, else runtime.device_array_of(entry, x) (which re-makes the cache). */
static PyObject *device_array_of(Lane *self, PyObject *entry, PyObject *x) {
    PyObject *host = slot_field_get(entry, &self->host_array);
    if (host == NULL)
        return NULL;
    Py_DECREF(host);  /* only its identity is compared; the entry keeps it */
    if (host == x) {
        PyObject *cached = slot_field_get(entry, &self->device_array);
        if (cached == NULL)
            return NULL;
        if (PyObject_TypeCheck(cached, g_ndarray) && same_layout_of((ArrayFields *)cached, (ArrayFields *)x))
            return cached;
        Py_DECREF(cached);
    }
    PyObject *args[3] = {self->runtime, entry, x};
    return PyObject_VectorcallMethod(s_device_array_of, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static int takes_verb(Lane *self, PyObject *x, Py_ssize_t event_kind) {
    return is_plain_block(x) && !watched(self, event_kind) && !watched(self, self->end_kind);
}

/* How a verb starts: DECLINED (the caller takes the Python verb), SHARED (shared memory:
 * no action), HELD (the table lock is taken; ``*release`` releases it); -1: an error. */
enum { DECLINED, SHARED, HELD };

/* The table lock, then the checks that another thread may have changed while the take
 * waited (a subscriber, oversubscription) made again: HELD, DECLINED (given back) or -1. */
static int take_lock(Lane *self, Py_ssize_t event_kind, PyObject **release) {
    if (table_lock_take(&self->held, self->table, release) < 0)
        return -1;
    if (!watched(self, event_kind) && !watched(self, self->end_kind) && !self->tracks_use)
        return HELD;
    int failed = table_lock_give(*release) < 0;
    Py_CLEAR(*release);
    return failed ? -1 : DECLINED;
}

static int start_verb(Lane *self, PyObject *x, Py_ssize_t event_kind, PyObject **release) {
    if (!takes_verb(self, x, event_kind))
        return DECLINED;
    if (self->table == Py_None)  /* shared memory (§2.7.4) */
        return SHARED;
    if (self->tracks_use)  /* oversubscribing: every use restores and is noted (Python) */
        return DECLINED;
    return take_lock(self, event_kind, release);
}

/* With the lock held: the device array of x, then +1 to the dynamic count of ``entry``
 * (the order of ``runtime.enter_one``: a view that fails changes no count); NULL with an
 * exception set, the count unchanged. */
static PyObject *enter_entry(Lane *self, PyObject *entry, PyObject *x) {
    PyObject *result = device_array_of(self, entry, x);
    long dynamic = result == NULL ? -1 : count_of(entry, &self->dynamic);
    if (dynamic < 0 || set_count(entry, &self->dynamic, dynamic + 1) < 0)
        Py_CLEAR(result);
    return result;
}

/* With the lock held: −1 to the dynamic count of ``entry`` (True) in the plain case, a
 * NORMAL entry that keeps a count after it; else None, unchanged; NULL on error. (``x``,
 * the array, is not needed: nothing is handed back.) */
static PyObject *leave_entry(Lane *self, PyObject *entry, PyObject *x) {
    PyObject *kind = slot_field_get(entry, &self->kind);
    if (kind == NULL)
        return NULL;
    Py_DECREF(kind);  /* only its identity is compared; EntryKind members live on */
    long dynamic = count_of(entry, &self->dynamic);
    long structured = dynamic < 0 ? -1 : count_of(entry, &self->structured);
    if (structured < 0)
        return NULL;
    if (kind != self->normal || dynamic < 1 || (dynamic == 1 && structured == 0))
        Py_RETURN_NONE;  /* pinned, already 0, or the lifetime would end: Python's */
    return set_count(entry, &self->dynamic, dynamic - 1) < 0 ? NULL : Py_NewRef(Py_True);
}

/* A verb on the entry wholly containing x: ``on_entry(self, entry, x)`` with the lock
 * held, or None when x is in no entry; ``shared`` answers for shared memory. */
static PyObject *run_verb(Lane *self, PyObject *x, Py_ssize_t event_kind, PyObject *shared,
                          PyObject *(*on_entry)(Lane *, PyObject *, PyObject *)) {
    PyObject *release;
    switch (start_verb(self, x, event_kind, &release)) {
        case DECLINED: Py_RETURN_NONE;
        case SHARED: return Py_NewRef(shared);
        case HELD: break;
        default: return NULL;
    }
    PyObject *entry = present_entry(self, x);
    PyObject *result = entry != NULL ? on_entry(self, entry, x)
        : PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    return unlock(release, result);
}

static PyObject *lane_enter(Lane *self, PyObject *x) {
    return run_verb(self, x, self->enter_kind, x, enter_entry);  /* shared: x itself */
}

static PyObject *lane_leave(Lane *self, PyObject *x) {
    return run_verb(self, x, self->exit_kind, Py_True, leave_entry);
}

static PyObject *lane_present(Lane *self, PyObject *x) {
    if (self->table == Py_None)  /* shared memory: all data is present (§2.7.4) */
        Py_RETURN_TRUE;
    if (!PyObject_TypeCheck(x, g_ndarray))
        goto checked_in_python;
    PyObject *version = slot_field_get(self->ranges, &self->version);
    if (version == NULL)
        return NULL;
    long stamp = PyLong_Check(version) ? PyLong_AsLong(version) : 1;
    Py_DECREF(version);
    if (stamp & 1)  /* a mutation in progress (or an error): under the lock */
        goto checked_in_python;
    int64_t data, low, high;
    if (array_extent(x, &data, &low, &high) < 0)
        return NULL;
    if (high == low)
        Py_RETURN_TRUE;  /* zero-size data is always present (API.md §2) */
    Py_ssize_t index = ranges_search(self, low, high);
    if (index == -3)
        return NULL;
    return PyBool_FromLong(index >= 0);
checked_in_python:
    PyErr_Clear();
    return call_method_1(self->table, s_contains, x);
}

#include "_lane_copies.c.h"
#include "_lane_regions.c.h"

static PyMemberDef lane_members[] = {
    {"tracks_use", T_BOOL, offsetof(Lane, tracks_use), 0,
     "the runtime's tracks_use (oversubscription), kept here by the runtime: while true, enter and leave answer None"},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef lane_methods[] = {
    {"enter", (PyCFunction)lane_enter, METH_O,
     "enter(x) -> the device array of present x after its dynamic count's +1; None: take the Python path."},
    {"leave", (PyCFunction)lane_leave, METH_O,
     "leave(x) -> True after the dynamic count's -1 of data that stays present; None: take the Python path."},
    {"upload", (PyCFunction)lane_upload, METH_O,
     "upload(x) -> True after the copy of present x to its device array; None: take the Python path."},
    {"download", (PyCFunction)lane_download, METH_O,
     "download(x) -> True after the copy of present x from its device array; None: take the Python path."},
    {"join", (PyCFunction)lane_join, METH_O,
     "join(arrays) -> their entries after each one's structured +1; None: take the Python path."},
    {"part", (PyCFunction)lane_part, METH_O,
     "part(entries) -> True after each one's structured -1, no lifetime ending; None: the Python path."},
    {"allow_copies", (PyCFunction)lane_allow_copies, METH_VARARGS,
     "allow_copies(device, tally_alone, stats_row, counted, kinds): upload/download copy in place "
     "(mapping/_lane_copies.c.h)."},
    {"present", (PyCFunction)lane_present, METH_O,
     "present(x) -> whether the elements of x lie inside one mapping (or x is empty)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyacc.mapping._cprobe.DataLane",
    .tp_doc = "The data API's present-data verbs of one runtime, in one C call each.",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)lane_init,
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_traverse = (traverseproc)lane_traverse,
    .tp_clear = (inquiry)lane_clear,
    .tp_methods = lane_methods,
    .tp_members = lane_members,
};

/* lock_try() -> how a TableLock tries its lock without waiting (pyacc/_table_lock.h) */
static PyObject *lock_try(PyObject *module, PyObject *unused) {
    return PyUnicode_FromString(tl_semaphores ? "sem_trywait" : "PyThread_acquire_lock_timed");
}

static PyMethodDef methods[] = {
    {"lock_try", lock_try, METH_NOARGS,
     "lock_try() -> how a TableLock tries its lock without waiting: 'sem_trywait' where CPython's "
     "locks are POSIX semaphores, else 'PyThread_acquire_lock_timed' (pyacc/_table_lock.h)."},
    {"plain_block", (PyCFunction)plain_block, METH_O,
     "plain_block(x) -> whether x is a numpy.ndarray (not a subclass) of one C- or F-ordered block."},
    {"same_layout", (PyCFunction)(void (*)(void))same_layout, METH_FASTCALL,
     "same_layout(a, b) -> whether two numpy arrays have one shape, strides and dtype; None: not both numpy."},
    {"extent", (PyCFunction)extent, METH_O,
     "extent(x) -> (data, low, high): the byte range the elements of numpy array x cover."},
    {"contained_index", (PyCFunction)(void (*)(void))contained_index, METH_FASTCALL,
     "contained_index(bounds, x) -> index of the range wholly containing x; -1 none, -2 partly."},
    {NULL, NULL, 0, NULL},
};

/* ``LANE_API``: the region verbs for another extension (``_lane_api.h``) */
static int add_lane_api(PyObject *module) {
    PyObject *capsule = PyCapsule_New(&g_lane_api, LANE_API_CAPSULE, NULL);
    int added = capsule == NULL ? -1 : PyModule_AddObjectRef(module, "LANE_API", capsule);
    Py_XDECREF(capsule);
    return added;
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cprobe", "The present table's hot searches, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__cprobe(void) {
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return NULL;
    g_ndarray = (PyTypeObject *)PyObject_GetAttrString(numpy, "ndarray");
    g_int64 = PyObject_CallMethod(numpy, "dtype", "s", "int64");
    Py_DECREF(numpy);
    if (g_ndarray == NULL || g_int64 == NULL || numpy_abi_init() < 0)
        return NULL;
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_bounds, "bounds"}, {&s_count, "count"}, {&s_values, "values"}, {&s_version, "version"},
        {&s_dynamic, "dynamic"}, {&s_structured, "structured"},
        {&s_kind, "kind"}, {&s_host_array, "host_array"}, {&s_device_array, "device_array"},
        {&s_device_array_of, "device_array_of"}, {&s_contains, "contains"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL)
            return NULL;
    if (table_lock_init() < 0 || copies_names_init() < 0 || PyType_Ready(&LaneType) < 0 || PyType_Ready(&ReentrantLockType) < 0)
        return NULL;
    tl_reentrant = (PyTypeObject *)Py_NewRef(&ReentrantLockType);
    g_lane_api.lane_type = &LaneType;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "DataLane", (PyObject *)&LaneType) < 0 ||
            PyModule_AddObjectRef(module, "TableLock", (PyObject *)&ReentrantLockType) < 0 ||
            add_lane_api(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
