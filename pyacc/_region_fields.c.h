/* pyacc/_region_fields.c.h: what a compute region sets once for its calls, included by
 * _fastcall.c after the FastCall struct.
 *
 * Owns the getters and setters of FastCall's ``_clause_async``, ``_clause_wait``, ``_free``,
 * ``_condition`` and ``_binding`` (``REGION_FIELDS``, entries of its getset table): where each is kept in
 * FastCall and what a value must be (``RegionField``), checked when set (else TypeError).
 *
 * Invariants: a field holds a strong reference or NULL (None from Python); each is set by
 * ``ComputeRegion._bind_free_names`` before ``_direct`` (a call reads it after that).
 */

/* What the region sets once for its calls (``_clause_async``, ``_clause_wait``, ``_free``,
 * ``_condition``, ``_binding``):
 * where it is kept in FastCall, and what a value must be (else TypeError: ``error``). */
typedef struct {
    size_t offset;
    int (*valid)(PyObject *value);
    const char *error;
} RegionField;

static int is_exact_int(PyObject *value) { return PyLong_CheckExact(value); }
static int is_callable(PyObject *value) { return PyCallable_Check(value); }

static RegionField f_clause_async = {offsetof(FastCall, clause_async), is_exact_int,
                                     "_clause_async: an int (a queue or acc.async_noval) or None"},
    f_clause_wait = {offsetof(FastCall, clause_wait), is_clause_wait,
                     "_clause_wait: a tuple of ints >= 0 (queues; empty: every queue) or None"},
    f_free = {offsetof(FastCall, free), is_free_sources,
              "_free: a tuple of (cell, None) and (dict, str) pairs, or None"},
    f_condition = {offsetof(FastCall, condition), is_callable, "_condition: a callable or None"},
    f_binding = {offsetof(FastCall, binding), is_binding,
                 "_binding: (names, defaults), a tuple of str and a tuple of the last ones' defaults, or None"};

static PyObject *region_field(FastCall *self, RegionField *field) {
    PyObject *value = *(PyObject **)((char *)self + field->offset);
    return Py_NewRef(value ? value : Py_None);
}

static int set_region_field(FastCall *self, PyObject *value, RegionField *field) {
    if (value != NULL && value != Py_None && !field->valid(value)) {
        PyErr_SetString(PyExc_TypeError, field->error);
        return -1;
    }
    Py_XSETREF(*(PyObject **)((char *)self + field->offset),
               value == NULL || value == Py_None ? NULL : Py_NewRef(value));
    return 0;
}

#define REGION_FIELDS \
    {"_clause_async", (getter)region_field, (setter)set_region_field, \
     "The region's constant async clause, which its calls without async_ run on (None: " \
     "synchronous).", &f_clause_async}, \
    {"_clause_wait", (getter)region_field, (setter)set_region_field, \
     "The region's constant wait clause: the queues its calls wait for first (a tuple; " \
     "empty: every queue; None: no wait clause).", &f_clause_wait}, \
    {"_free", (getter)region_field, (setter)set_region_field, \
     "Where the names its kernel reads besides its parameters are found, whose values a call " \
     "passes after its arguments (None: none).", &f_free}, \
    {"_condition", (getter)region_field, (setter)set_region_field, \
     "The region's if clause written as an expression, as a function of a call's arguments " \
     "(None: none).", &f_condition}, \
    {"_binding", (getter)region_field, (setter)set_region_field, \
     "Its parameters' names and the last ones' defaults, by which the lane binds a call's " \
     "arguments given by name or left out (None: positional calls only).", &f_binding},
