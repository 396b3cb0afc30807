/* The data region's C base: ``acc.data`` of present data entered and left in C.
 * Included by ``pyacc/_fastcall.c`` (one translation unit).
 *
 * ``DataRegion`` is the base type of ``pyacc._directives.data`` (a Python subclass that
 * holds everything else: clause checking, the full entry and exit, ``device``). Its
 * constructor, ``__enter__`` and ``__exit__`` are C:
 *
 *   - construction (the type's vectorcall, or ``tp_init``): keyword clauses only. When
 *     they are data clauses (``copy``, ``copyin``, ``copyout``, ``create``,
 *     ``no_create``, ``present``: no ``default``, ``deviceptr``, ``if_``, ``async_`` or
 *     ``wait``), each one array or a list or tuple of arrays,
 *     every array an exact ``numpy.ndarray`` that is C- or F-contiguous with plain items
 *     (what ``check_array`` accepts, so no error of the Python constructor is lost), the
 *     region keeps the clause names and their arrays and is a *C region*
 *     (``region_arrays``). Otherwise it calls ``self._init(clauses)``: the Python
 *     constructor (which validates and reports).
 *   - ``__enter__`` of a C region: when nobody subscribes to REGION_ENTER
 *     (``BUS.active``), the thread has a current runtime (``ICVS.runtime``) and its data
 *     lane joins every array (the lane's join: all present, each a plain block
 *     inside one mapping, the structured counts +1, all or nothing), the region pushes
 *     itself on the thread's ``ICVS.region_stack`` and returns itself. Otherwise it
 *     becomes a Python region: ``self._init(clauses)``, then the Python entry
 *     (``SingleUseRegion.__enter__``) — which finds the same answer from the lane.
 *   - ``__exit__`` of a C region: the lane's part of its entries (the counts −1 when no
 *     lifetime ends); then it leaves the stack, and publishes REGION_EXIT when someone
 *     subscribes (``self._left()``). When the lane declines (a lifetime would end: copy
 *     back, free), ``self._exit_joined(stack, entries, exc)`` runs the Python exit with
 *     what the C entry took.
 *   - a region entered twice: ``self._refuse_entry()`` (raises, as the Python one).
 *
 * The region keeps its arrays and, once joined, their entries in itself (``refs``: up to
 * ``REGION_INLINE`` of each, more in a buffer of its own), and calls the C lane's join and
 * part on them as C functions (``mapping/_lane_api.h``: no tuple either way); another
 * lane (a Python stand-in) is called by its ``join`` and ``part`` methods, with tuples.
 *
 * A C region lends nothing to compute calls inside it (no ``default``, no ``deviceptr``:
 * the class values None and ()), so pushing and removing it changes nothing that
 * ``RegionStack._refresh`` keeps: a list append and a removal by identity (at the list's
 * end in place, as CPython's own append and pop) are exactly ``push``/``remove_region``.
 * Invariants: the state goes NEW → ENTERED → DONE once; a region that became a Python
 * region never takes this path again; the region holds ``refs[0:n]`` always and
 * ``refs[n:2n]`` while ``joined``, and the garbage collector traverses exactly those, with
 * the clauses, runtime and stack.
 */

enum { REGION_NEW, REGION_ENTERED, REGION_DONE };
enum { REGION_UNSET, REGION_IN_C, REGION_IN_PYTHON };  /* (UNSET: never initialised) */

/* the most clauses a C region has: one of each data clause */
#define REGION_CLAUSES 6
/* the most arrays a region keeps in itself, with their entries (more: a buffer of its own) */
#define REGION_INLINE 8

typedef struct {
    PyObject_HEAD
    PyObject *clauses;   /* the keyword clauses (a dict), or NULL while ``names`` stands for it */
    PyObject *names;     /* a region made by ``region_vectorcall``: its clause names (the call's
                          * kwnames), from which ``clauses_of`` builds ``clauses`` when asked */
    Py_ssize_t counts[REGION_CLAUSES];  /* with ``names``: each clause's arrays in ``refs``,
                                         * in order (-1: one array, not a list or tuple) */
    PyObject **refs;     /* a C region's arrays, clause by clause, ``refs[0:n]``; once the lane
                          * joined them (``joined``), their entries ``refs[n:2n]``; each held.
                          * ``inline_refs`` or a buffer of its own (NULL: none) */
    Py_ssize_t n;
    PyObject *runtime;   /* the runtime it entered on (``_runtime``, shared with Python) */
    PyObject *stack;     /* the region stack it is on */
    int state, mode, joined;
    PyObject *inline_refs[2 * REGION_INLINE];
} DataRegion;

static PyObject *g_active;          /* BUS.active: [bool] per event kind */
static Py_ssize_t g_region_enter, g_region_exit;  /* REGION_ENTER, REGION_EXIT */
static PyObject *g_python_enter, *g_python_exit;  /* SingleUseRegion.__enter__/__exit__ */
static PyObject *g_data_kinds;      /* frozenset of the clauses a C region takes */
static PyObject *g_data_names[REGION_CLAUSES];  /* the same names, interned (NULL: fewer) */
static PyObject *g_data_type;       /* pyacc._directives.data: only its own regions are C regions */
static PyObject *s_join, *s_part, *s_init, *s_refuse_entry, *s_exit_joined, *s_left, *s_with_text;
static const LaneApi *g_lane_api;   /* the C lane's region verbs (``_lane_api.h``), or NULL */

static int subscribed(Py_ssize_t kind) {
    return g_active == NULL || PyList_GET_ITEM(g_active, kind) != Py_False;
}

/* Whether ``x`` is an array a C region takes (``check_array`` accepts it). */
static int region_array(PyObject *x) {
    return Py_TYPE(x) == g_ndarray && (ARRAY(x)->flags & (NPY_C_CONTIGUOUS | NPY_F_CONTIGUOUS))
           && plain_items(x);
}

/* -- what a region holds: its arrays and their entries ------------------------------------ */

/* Drops the arrays and entries the region holds, and their buffer: the fields first (a
 * release may run code that reads the region). */
static void region_drop(DataRegion *self) {
    PyObject **refs = self->refs;
    Py_ssize_t held = self->joined ? 2 * self->n : self->n;
    self->refs = NULL, self->n = 0, self->joined = 0;
    for (Py_ssize_t i = 0; i < held; i++)
        Py_DECREF(refs[i]);
    if (refs != NULL && refs != self->inline_refs)
        PyMem_Free(refs);
}

/* Room for ``total`` arrays and as many entries (the region holds none): 0, or -1 with
 * MemoryError. */
static int region_room(DataRegion *self, Py_ssize_t total) {
    self->refs = total <= REGION_INLINE ? self->inline_refs : PyMem_New(PyObject *, 2 * total);
    if (self->refs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* ``items[0:n]`` as a new tuple (NULL with an exception set). */
static PyObject *refs_tuple(PyObject *const *items, Py_ssize_t n) {
    PyObject *tuple = PyTuple_New(n);
    for (Py_ssize_t i = 0; tuple != NULL && i < n; i++)
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(items[i]));
    return tuple;
}

/* The region's entries as a tuple (the Python exit's ``joined``), or None before a join. */
static PyObject *entries_tuple(DataRegion *self) {
    return self->joined ? refs_tuple(self->refs + self->n, self->n) : Py_NewRef(Py_None);
}

/* The region's clauses (a borrowed dict; NULL with an exception set): those kept, else
 * built from what ``keep_c_region`` kept (a list's or tuple's arrays as a tuple, fixed
 * when the region was made, OpenACC 3.3 §2.7.1). */
static PyObject *clauses_of(DataRegion *self) {
    if (self->clauses != NULL || self->names == NULL)
        return self->clauses != NULL ? self->clauses : (PyErr_SetString(PyExc_RuntimeError,
                                                        "acc.data: a region without clauses"), NULL);
    /* (held: a dict's hashing may run Python code that asks for the clauses too) */
    PyObject *names = Py_NewRef(self->names), *arrays = refs_tuple(self->refs, self->n);
    PyObject *clauses = arrays == NULL ? NULL : PyDict_New();
    Py_ssize_t first = 0;
    for (Py_ssize_t i = 0; clauses != NULL && i < PyTuple_GET_SIZE(names); i++) {
        Py_ssize_t count = self->counts[i];
        PyObject *value = count < 0 ? Py_NewRef(PyTuple_GET_ITEM(arrays, first))
                                    : PyTuple_GetSlice(arrays, first, first + count);
        if (value == NULL || PyDict_SetItem(clauses, PyTuple_GET_ITEM(names, i), value) < 0)
            Py_CLEAR(clauses);
        Py_XDECREF(value);
        first += count < 0 ? 1 : count;
    }
    Py_DECREF(names);
    Py_XDECREF(arrays);
    if (clauses == NULL)
        return NULL;
    if (self->clauses == NULL) {  /* (else a nested call made them meanwhile) */
        self->clauses = clauses;
        Py_CLEAR(self->names);
    } else {
        Py_DECREF(clauses);
    }
    return self->clauses;
}

/* -- construction ------------------------------------------------------------------------ */

/* Whether ``name`` is a clause a C region takes: one of ``g_data_kinds`` (the interned
 * names first: keyword names are interned). 1, 0, or -1 on error. */
static int data_kind(PyObject *name) {
    for (int i = 0; i < REGION_CLAUSES; i++)
        if (name == g_data_names[i])
            return 1;
    return PySet_Contains(g_data_kinds, name);
}

/* Whether the ``n`` clauses ``names`` (a tuple) are clauses a C region takes: data
 * clauses only, at most one of each. 1, 0, or -1 with an exception set. (A keyword that
 * is a ``str`` subclass is compared by its own ``__eq__``: Python code, so this runs
 * before any value is read.) */
static int region_clauses(Py_ssize_t n, PyObject *names) {
    if (n == 0 || n > REGION_CLAUSES || g_data_kinds == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int taken = data_kind(PyTuple_GET_ITEM(names, i));
        if (taken != 1)
            return taken;
    }
    return 1;
}

/* Whether a C region takes the clauses' ``values`` (``region_clauses`` said yes to their
 * names): each one array or a list or tuple of arrays, some array in all. 1, with their
 * arrays held in order by the region (a list's arrays fixed now, OpenACC 3.3 §2.7.1) and
 * each clause's count in ``counts``; 0 when it does not; -1 with an exception set.
 * Nothing runs from the counting to the copy (no Python code, no tracked allocation), so
 * the lists are copied as counted; the arrays are checked once held (a dtype seen first
 * is asked for two attributes, which may run code). Unless 1, the region may hold some:
 * the caller drops them (``region_drop``). */
static int region_arrays(DataRegion *self, Py_ssize_t n, PyObject *const *values) {
    region_drop(self);  /* (first: a release may run code) */
    Py_ssize_t total = 0, *counts = self->counts;
    for (Py_ssize_t i = 0; i < n; i++) {
        counts[i] = PyList_Check(values[i]) || PyTuple_Check(values[i]) ? PySequence_Fast_GET_SIZE(values[i]) : -1;
        total += counts[i] < 0 ? 1 : counts[i];
    }
    if (total == 0)
        return 0;
    if (region_room(self, total) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (counts[i] < 0)
            self->refs[self->n++] = Py_NewRef(values[i]);
        for (Py_ssize_t j = 0; j < counts[i]; j++)
            self->refs[self->n++] = Py_NewRef(PySequence_Fast_GET_ITEM(values[i], j));
    }
    for (Py_ssize_t j = 0; j < total; j++)
        if (!region_array(self->refs[j]))
            return 0;
    return 1;
}

/* The region becomes a C region of clauses ``names`` over the arrays ``region_arrays``
 * found; its snapshot is built when asked for (``clauses_of``). */
static void keep_c_region(DataRegion *self, PyObject *names) {
    Py_CLEAR(self->clauses);
    Py_XSETREF(self->names, Py_NewRef(names));
    self->mode = REGION_IN_C;
}

/* -1 with an exception for ``what`` (``__init__``, ``__setstate__``) of a region that is
 * entered or done: what it holds is its entry's, and a verb may be using it (a join
 * waiting for the lock); else 0. */
static int refuse_while_used(DataRegion *self, const char *what) {
    if (self->state == REGION_NEW)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "acc.data.%s: this region was already entered; make a new "
                 "region (acc.data(...)) instead", what);
    return -1;
}

/* For ``data`` itself (a subclass's own hooks, ``_enter``, ``_left`` ..., are Python's to
 * run): whether a C region takes the keyword clauses ``kwds`` (``region_arrays``); 1 when
 * it does, and the region is one, its clauses' snapshot built at once. */
static int region_init_in_c(DataRegion *self, PyObject *kwds) {
    Py_ssize_t n = PyDict_GET_SIZE(kwds), position = 0, i = 0;
    if ((PyObject *)Py_TYPE(self) != g_data_type || n == 0 || n > REGION_CLAUSES)
        return 0;
    PyObject *names = PyTuple_New(n), *values[REGION_CLAUSES], *key, *value;
    if (names == NULL)
        return -1;
    while (PyDict_Next(kwds, &position, &key, &value) && i < n) {
        PyTuple_SET_ITEM(names, i, Py_NewRef(key));
        values[i++] = Py_NewRef(value);  /* (held: a check may run Python code) */
    }
    int taken = region_clauses(i, names);
    if (taken == 1)
        taken = region_arrays(self, i, values);
    if (taken == 1) {
        keep_c_region(self, names);
        taken = clauses_of(self) == NULL ? -1 : 1;
    }
    if (taken != 1)
        region_drop(self);
    while (i > 0)
        Py_DECREF(values[--i]);
    Py_DECREF(names);
    return taken;
}

static int region_init(DataRegion *self, PyObject *args, PyObject *kwds) {
    if (refuse_while_used(self, "__init__") < 0)
        return -1;
    if (PyTuple_GET_SIZE(args) > 1) {
        PyErr_Format(PyExc_TypeError, "acc.data takes one clause string or keywords "
                     "(acc.data(\"copyin(a) copy(b)\"), acc.data(copyin=[a], copy=[b])), got "
                     "%zd positional arguments", PyTuple_GET_SIZE(args));
        return -1;
    }
    /* a clause string: the keywords it writes, read in the caller's frame (``_with_text``) */
    PyObject *clauses = PyTuple_GET_SIZE(args) == 1
        ? PyObject_CallMethodObjArgs((PyObject *)self, s_with_text, PyTuple_GET_ITEM(args, 0),
                                     kwds != NULL ? kwds : Py_None, NULL)
        : kwds != NULL ? Py_NewRef(kwds) : PyDict_New();
    if (clauses == NULL)
        return -1;
    int taken = region_init_in_c(self, clauses);
    if (taken == 1) {
        Py_DECREF(clauses);
        return 0;
    }
    Py_CLEAR(self->names);
    Py_XSETREF(self->clauses, clauses);
    if (taken < 0)
        return -1;
    self->mode = REGION_IN_PYTHON;
    PyObject *done = PyObject_CallMethodOneArg((PyObject *)self, s_init, clauses);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* ``data(**clauses)``, the type's vectorcall (set on ``pyacc._directives.data`` by
 * ``configure_data``; a type's ``tp_vectorcall`` is never inherited, so subclasses take
 * ``type.__call__``): a region of data clauses only, each one array or a list or tuple
 * of arrays a C region takes (``region_arrays``), is made without the keyword dict, and
 * without the snapshot ``region_init`` builds (``clauses_of`` builds it if anyone asks); any other call,
 * or one after ``data.__init__`` or ``data.__new__`` was replaced, is ``type.__call__``'s. */
static PyObject *region_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyTypeObject *tp = (PyTypeObject *)type;
    if (type != g_data_type || nargs != 0 || nkw == 0 || tp->tp_init != (initproc)region_init ||
            tp->tp_new != PyType_GenericNew)
        return tp_call_of(PyType_Type.tp_call, type, args, nargsf, kwnames);
    int taken = region_clauses(nkw, kwnames);
    if (taken != 1)
        return taken < 0 ? NULL : tp_call_of(PyType_Type.tp_call, type, args, nargsf, kwnames);
    DataRegion *self = (DataRegion *)tp->tp_alloc(tp, 0);
    if (self == NULL)
        return NULL;
    taken = region_arrays(self, nkw, args);
    if (taken == 1) {
        keep_c_region(self, kwnames);
        return (PyObject *)self;
    }
    Py_DECREF(self);
    return taken < 0 ? NULL : tp_call_of(PyType_Type.tp_call, type, args, nargsf, kwnames);
}

/* -- the lane's join and part of the region's arrays -------------------------------------- */

/* Whether ``lane`` is the C lane, whose verbs are called as C functions (``_lane_api.h``). */
static int c_lane(PyObject *lane) {
    return g_lane_api != NULL && Py_TYPE(lane) == g_lane_api->lane_type;
}

/* ``lane.join(arrays)`` of another lane (a Python stand-in): 1 with its entries held in
 * ``entries``, 0 when it declines, -1 with an exception set. */
static int join_by_method(DataRegion *self, PyObject *lane, PyObject **entries) {
    PyObject *arrays = refs_tuple(self->refs, self->n);
    PyObject *got = arrays == NULL ? NULL : PyObject_CallMethodOneArg(lane, s_join, arrays);
    Py_XDECREF(arrays);
    int joined = got == NULL ? -1 : got != Py_None;
    if (joined == 1 && (!(PyTuple_Check(got) || PyList_Check(got)) || PySequence_Fast_GET_SIZE(got) != self->n)) {
        PyErr_SetString(PyExc_TypeError, "acc.data: the data lane's join gave no entry per array");
        joined = -1;
    }
    for (Py_ssize_t i = 0; joined == 1 && i < self->n; i++)
        entries[i] = Py_NewRef(PySequence_Fast_GET_ITEM(got, i));
    Py_XDECREF(got);
    return joined;
}

/* The structured +1 of the region's arrays (OpenACC 3.3 §2.6.5): 1, the entries held in
 * ``refs[n:2n]``; 0 when the lane declines; -1 with an exception set. */
static int join_refs(DataRegion *self, PyObject *lane) {
    PyObject **entries = self->refs + self->n;
    int joined = c_lane(lane) ? g_lane_api->join(lane, self->refs, self->n, entries)
                              : join_by_method(self, lane, entries);
    self->joined = joined == 1;
    return joined;
}

/* The structured −1 of the region's entries: 1; 0 when the lane declines (a lifetime
 * ends); -1 with an exception set. */
static int part_refs(DataRegion *self, PyObject *lane) {
    if (!self->joined) {
        PyErr_SetString(PyExc_RuntimeError, "acc.data: the exit of a region whose entry did not finish");
        return -1;
    }
    if (c_lane(lane))
        return g_lane_api->part(lane, self->refs + self->n, self->n);
    PyObject *entries = entries_tuple(self);
    PyObject *got = entries == NULL ? NULL : PyObject_CallMethodOneArg(lane, s_part, entries);
    Py_XDECREF(entries);
    int parted = got == NULL ? -1 : got != Py_None;
    Py_XDECREF(got);
    return parted;
}

/* -- the region stack: a list, pushed and popped at its end in place -------------------- */

/* ``stack.append(region)``: in place while the list has room (as CPython's own append). */
static int stack_push(PyObject *list, PyObject *region) {
    PyListObject *stack = (PyListObject *)list;
    Py_ssize_t size = Py_SIZE(stack);
    if (size >= stack->allocated)
        return PyList_Append(list, region);
    stack->ob_item[size] = Py_NewRef(region);
    Py_SET_SIZE(stack, size + 1);
    return 0;
}

/* Removes the region from its stack, innermost end first (``RegionStack.remove_region``):
 * the last item in place (its size first: the release may run code). */
static int leave_stack(DataRegion *self) {
    PyListObject *stack = (PyListObject *)self->stack;
    Py_ssize_t last = Py_SIZE(stack) - 1;
    if (last >= 0 && stack->ob_item[last] == (PyObject *)self) {
        Py_SET_SIZE(stack, last);
        Py_DECREF(self);  /* (the stack's reference; the caller holds one) */
        return 0;
    }
    for (Py_ssize_t i = last - 1; i >= 0; i--)
        if (PyList_GET_ITEM(stack, i) == (PyObject *)self)
            return PyList_SetSlice(self->stack, i, i + 1, NULL);
    return 0;
}

/* -- entry and exit ----------------------------------------------------------------------- */

/* The C region becomes a Python region and enters as one. */
static PyObject *enter_in_python(DataRegion *self) {
    PyObject *clauses = clauses_of(self);
    if (clauses == NULL)
        return NULL;
    self->mode = REGION_IN_PYTHON;
    PyObject *done = PyObject_CallMethodOneArg((PyObject *)self, s_init, clauses);
    if (done == NULL)
        return NULL;
    Py_DECREF(done);
    return PyObject_CallOneArg(g_python_enter, (PyObject *)self);
}

/* The lane's join, then the region on the stack (a push that fails parts again: no count
 * stays behind): 1, 0 (declined), -1. */
static int join_and_push(DataRegion *self, PyObject *lane, PyObject *stack) {
    int joined = join_refs(self, lane);
    if (joined == 1 && stack_push(stack, (PyObject *)self) < 0) {
        PyObject *error_type, *error, *traceback;
        PyErr_Fetch(&error_type, &error, &traceback);
        part_refs(self, lane);
        PyErr_Restore(error_type, error, traceback);
        joined = -1;
    }
    return joined;
}

static PyObject *region_enter(DataRegion *self, PyObject *Py_UNUSED(ignored)) {
    if (self->mode != REGION_IN_C)
        return PyObject_CallOneArg(g_python_enter, (PyObject *)self);
    if (self->state != REGION_NEW)
        return PyObject_CallMethodNoArgs((PyObject *)self, s_refuse_entry);
    if (subscribed(g_region_enter))
        return enter_in_python(self);
    self->state = REGION_ENTERED;  /* from here on single use: an entry while the join waits
                                      for the lock (a signal handler's) is refused */
    PyObject *runtime, *lane, *stack;
    switch (thread_runtime(&runtime, &lane, &stack)) {
        case 1: break;
        case 0: return enter_in_python(self);  /* no current runtime yet: Python selects one */
        default:
            self->state = REGION_DONE;
            return NULL;
    }
    int joined = join_and_push(self, lane, stack);
    Py_DECREF(lane);
    if (joined != 1) {  /* an error, or the lane declined */
        Py_DECREF(runtime);
        Py_DECREF(stack);
        if (joined < 0) {  /* a failed entry leaves the region done, as in Python */
            self->state = REGION_DONE;
            return NULL;
        }
        return enter_in_python(self);
    }
    Py_XSETREF(self->runtime, runtime);
    Py_XSETREF(self->stack, stack);
    return Py_NewRef(self);
}

/* ``self._left()`` (REGION_EXIT): with an error pending (the exit failed), the error is
 * kept unless ``_left`` raises one of its own, as in ``finally: self._left()``. */
static PyObject *call_left(DataRegion *self) {
    PyObject *error_type, *error, *traceback;
    PyErr_Fetch(&error_type, &error, &traceback);
    PyObject *done = PyObject_CallMethodNoArgs((PyObject *)self, s_left);
    if (done == NULL) {
        Py_XDECREF(error_type);
        Py_XDECREF(error);
        Py_XDECREF(traceback);
    } else {
        PyErr_Restore(error_type, error, traceback);
    }
    return done;
}

/* ``runtime.lane`` (a new reference; NULL with an exception set): the thread's remembered
 * lane when ``runtime`` is the remembered runtime (a runtime's lane is set once, by its
 * constructor), else read by name. */
static PyObject *lane_of(PyObject *runtime) {
    if (thread_context_remembered() && g_context_runtime == runtime)
        return Py_NewRef(g_context_lane);
    return PyObject_GetAttr(runtime, s_lane);
}

/* The Python exit of what the C entry joined (``_exit_joined``: copy back, free). */
static PyObject *exit_joined(DataRegion *self, PyObject *exc) {
    PyObject *entries = entries_tuple(self);
    if (entries == NULL)
        return NULL;
    PyObject *done = PyObject_CallMethodObjArgs((PyObject *)self, s_exit_joined, self->stack, entries, exc, NULL);
    Py_DECREF(entries);
    return done;
}

static PyObject *region_exit(DataRegion *self, PyObject *const *args, Py_ssize_t nargs) {
    if (self->mode != REGION_IN_C)
        return PyObject_Vectorcall(g_python_exit, (PyObject *[]){(PyObject *)self,
                                   nargs > 0 ? args[0] : Py_None, nargs > 1 ? args[1] : Py_None,
                                   nargs > 2 ? args[2] : Py_None}, 4, NULL);
    if (self->state != REGION_ENTERED)
        Py_RETURN_FALSE;
    if (self->stack == NULL)  /* (a signal handler's exit while the entry waits for the lock) */
        return PyErr_Format(PyExc_RuntimeError, "acc.data: the exit of a region whose entry did not finish");
    self->state = REGION_DONE;
    if (leave_stack(self) < 0)  /* first, as the Python exit (``_leave``) */
        return NULL;
    PyObject *lane = lane_of(self->runtime);
    int parted = lane == NULL ? -1 : part_refs(self, lane);
    Py_XDECREF(lane);
    PyObject *done;
    if (parted == 0) {  /* a lifetime ends: the Python exit (copy back, free) */
        done = exit_joined(self, nargs > 1 ? args[1] : Py_None);
    } else {  /* parted, or the part's error: ``_left`` follows either (``finally``) */
        done = subscribed(g_region_exit) ? call_left(self) : Py_NewRef(Py_None);
        if (parted < 0)  /* the part's error stands (or _left's own) */
            Py_CLEAR(done);
    }
    if (done == NULL)
        return NULL;
    Py_DECREF(done);
    Py_RETURN_FALSE;
}
