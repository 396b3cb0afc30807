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
 *     lane joins every array (``runtime.lane.join``: all present, each a plain block
 *     inside one mapping, the structured counts +1, all or nothing), the region pushes
 *     itself on the thread's ``ICVS.region_stack`` and returns itself. Otherwise it
 *     becomes a Python region: ``self._init(clauses)``, then the Python entry
 *     (``SingleUseRegion.__enter__``) — which finds the same answer from the lane.
 *   - ``__exit__`` of a C region: ``runtime.lane.part(entries)`` (the counts −1 when no
 *     lifetime ends); then it leaves the stack, and publishes REGION_EXIT when someone
 *     subscribes (``self._left()``). When the lane declines (a lifetime would end: copy
 *     back, free), ``self._exit_joined(stack, entries, exc)`` runs the Python exit with
 *     what the C entry took.
 *   - a region entered twice: ``self._refuse_entry()`` (raises, as the Python one).
 *
 * A C region lends nothing to compute calls inside it (no ``default``, no ``deviceptr``:
 * the class values None and ()), so pushing and removing it changes nothing that
 * ``RegionStack._refresh`` keeps: a list append and a removal by identity are exactly
 * ``push``/``remove_region``. Invariants: the state goes NEW → ENTERED → DONE once; a
 * region that became a Python region never takes this path again; references to the
 * clauses, arrays, runtime, entries and stack are traversed by the garbage collector.
 */

enum { REGION_NEW, REGION_ENTERED, REGION_DONE };
enum { REGION_UNSET, REGION_IN_C, REGION_IN_PYTHON };  /* (UNSET: never initialised) */

/* the most clauses a C region has: one of each data clause */
#define REGION_CLAUSES 6

typedef struct {
    PyObject_HEAD
    PyObject *clauses;   /* the keyword clauses (a dict), or NULL while ``names`` stands for it */
    PyObject *names;     /* a region made by ``region_vectorcall``: its clause names (the call's
                          * kwnames), from which ``clauses_of`` builds ``clauses`` when asked */
    Py_ssize_t counts[REGION_CLAUSES];  /* with ``names``: each clause's arrays in ``arrays``,
                                         * in order (-1: one array, not a list or tuple) */
    PyObject *arrays;    /* a C region's arrays, clause by clause (a tuple) */
    PyObject *runtime;   /* the runtime it entered on (``_runtime``, shared with Python) */
    PyObject *entries;   /* what the lane joined (a tuple) */
    PyObject *stack;     /* the region stack it is on */
    int state, mode;
} DataRegion;

static PyObject *g_active;          /* BUS.active: [bool] per event kind */
static Py_ssize_t g_region_enter, g_region_exit;  /* REGION_ENTER, REGION_EXIT */
static PyObject *g_python_enter, *g_python_exit;  /* SingleUseRegion.__enter__/__exit__ */
static PyObject *g_data_kinds;      /* frozenset of the clauses a C region takes */
static PyObject *g_data_names[REGION_CLAUSES];  /* the same names, interned (NULL: fewer) */
static PyObject *g_data_type;       /* pyacc._directives.data: only its own regions are C regions */
static PyObject *s_join, *s_part, *s_init, *s_refuse_entry, *s_exit_joined, *s_left;
static DirectMethod g_join, g_part;  /* the lane's ``join`` and ``part``, called directly */

static int subscribed(Py_ssize_t kind) {
    return g_active == NULL || PyList_GET_ITEM(g_active, kind) != Py_False;
}

/* Whether ``x`` is an array a C region takes (``check_array`` accepts it). */
static int region_array(PyObject *x) {
    return Py_TYPE(x) == g_ndarray && (ARRAY(x)->flags & (NPY_C_CONTIGUOUS | NPY_F_CONTIGUOUS))
           && plain_items(x);
}

/* The region's clauses (a borrowed dict; NULL with an exception set): those kept, else
 * built from what ``keep_c_region`` kept (a list's or tuple's arrays as a tuple, fixed
 * when the region was made, OpenACC 3.3 §2.7.1). */
static PyObject *clauses_of(DataRegion *self) {
    if (self->clauses != NULL || self->names == NULL)
        return self->clauses != NULL ? self->clauses : (PyErr_SetString(PyExc_RuntimeError,
                                                        "acc.data: a region without clauses"), NULL);
    /* (held: a dict's hashing may run Python code that asks for the clauses too) */
    PyObject *names = Py_NewRef(self->names), *arrays = Py_NewRef(self->arrays);
    PyObject *clauses = PyDict_New();
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
    Py_DECREF(arrays);
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

/* Whether ``name`` is a clause a C region takes: one of ``g_data_kinds`` (the interned
 * names first: keyword names are interned). 1, 0, or -1 on error. */
static int data_kind(PyObject *name) {
    for (int i = 0; i < REGION_CLAUSES; i++)
        if (name == g_data_names[i])
            return 1;
    return PySet_Contains(g_data_kinds, name);
}

/* How many arrays a clause's ``value`` gives a C region (-1 in ``*count`` for one array,
 * else the list's or tuple's length), each an array it takes (``region_array``): 1, or 0
 * when some value is not. (The checks read the arrays' fields; a dtype seen first is
 * asked for two attributes, so a list is read by its length at each step.) */
static int clause_arrays(PyObject *value, Py_ssize_t *count) {
    if (!PyList_Check(value) && !PyTuple_Check(value)) {
        *count = -1;
        return region_array(value);
    }
    Py_ssize_t i = 0;
    for (; i < PySequence_Fast_GET_SIZE(value); i++)
        if (!region_array(PySequence_Fast_GET_ITEM(value, i)))
            return 0;
    *count = i;
    return 1;
}

/* Whether a C region takes the ``n`` clauses ``names`` (a tuple, or NULL when ``n`` is 0)
 * with ``values``: data clauses only, each one array or a list or tuple of arrays
 * (``clause_arrays``), some array in all. 1, with their arrays in order (a new tuple,
 * ``*arrays``: a list's arrays fixed now, OpenACC 3.3 §2.7.1) and each clause's count in
 * ``counts``; 0 when it does not; -1 with an exception set. */
static int region_arrays(Py_ssize_t n, PyObject *names, PyObject *const *values, Py_ssize_t *counts,
                         PyObject **arrays) {
    if (n == 0 || n > REGION_CLAUSES || g_data_kinds == NULL)
        return 0;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int taken = data_kind(PyTuple_GET_ITEM(names, i));
        if (taken == 1)
            taken = clause_arrays(values[i], &counts[i]);
        if (taken != 1)
            return taken;
        total += counts[i] < 0 ? 1 : counts[i];
    }
    if (total == 0)
        return 0;
    PyObject *found = PyTuple_New(total);
    if (found == NULL)
        return -1;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (counts[i] < 0) {
            PyTuple_SET_ITEM(found, k++, Py_NewRef(values[i]));
            continue;
        }
        if (PySequence_Fast_GET_SIZE(values[i]) != counts[i]) {  /* (changed meanwhile) */
            Py_DECREF(found);
            return 0;
        }
        for (Py_ssize_t j = 0; j < counts[i]; j++)
            PyTuple_SET_ITEM(found, k++, Py_NewRef(PySequence_Fast_GET_ITEM(values[i], j)));
    }
    /* held by the tuple now, each checked again: code that ran meanwhile (a collection
     * at the tuple's allocation, a dtype's finalizer) may have replaced a list's item */
    for (Py_ssize_t j = 0; j < total; j++) {
        if (!region_array(PyTuple_GET_ITEM(found, j))) {
            Py_DECREF(found);
            return 0;
        }
    }
    *arrays = found;
    return 1;
}

/* The region becomes a C region of clauses ``names`` over ``arrays`` (stolen), as
 * ``region_arrays`` found them; its snapshot is built when asked for (``clauses_of``). */
static void keep_c_region(DataRegion *self, PyObject *names, const Py_ssize_t *counts, PyObject *arrays) {
    Py_CLEAR(self->clauses);
    Py_XSETREF(self->names, Py_NewRef(names));
    memcpy(self->counts, counts, sizeof(self->counts));
    Py_XSETREF(self->arrays, arrays);
    self->mode = REGION_IN_C;
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
    Py_ssize_t counts[REGION_CLAUSES];
    PyObject *arrays;
    int taken = region_arrays(i, names, values, counts, &arrays);
    if (taken == 1) {
        keep_c_region(self, names, counts, arrays);
        taken = clauses_of(self) == NULL ? -1 : 1;
    }
    while (i > 0)
        Py_DECREF(values[--i]);
    Py_DECREF(names);
    return taken;
}

static int region_init(DataRegion *self, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_Format(PyExc_TypeError, "acc.data takes clauses as keywords only "
                     "(acc.data(copyin=[a], copy=[b])), got %zd positional argument(s)",
                     PyTuple_GET_SIZE(args));
        return -1;
    }
    PyObject *clauses = kwds != NULL ? Py_NewRef(kwds) : PyDict_New();
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
    if (type != g_data_type || nargs != 0 || tp->tp_init != (initproc)region_init ||
            tp->tp_new != PyType_GenericNew)
        return tp_call_of(PyType_Type.tp_call, type, args, nargsf, kwnames);
    Py_ssize_t counts[REGION_CLAUSES];
    PyObject *arrays;
    int taken = region_arrays(nkw, kwnames, args, counts, &arrays);
    if (taken != 1)
        return taken < 0 ? NULL : tp_call_of(PyType_Type.tp_call, type, args, nargsf, kwnames);
    DataRegion *self = (DataRegion *)tp->tp_alloc(tp, 0);
    if (self == NULL) {
        Py_DECREF(arrays);
        return NULL;
    }
    keep_c_region(self, kwnames, counts, arrays);
    return (PyObject *)self;
}

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
    PyObject *entries = direct_call(&g_join, lane, self->arrays);
    if (entries != NULL && entries != Py_None && PyList_Append(stack, (PyObject *)self) < 0) {
        PyObject *error_type, *error, *traceback;  /* no count may stay behind: the lane's part */
        PyErr_Fetch(&error_type, &error, &traceback);
        Py_XDECREF(direct_call(&g_part, lane, entries));
        PyErr_Restore(error_type, error, traceback);
        Py_CLEAR(entries);
    }
    Py_DECREF(lane);
    if (entries == NULL || entries == Py_None) {  /* an error, or the lane declined */
        Py_DECREF(runtime);
        Py_DECREF(stack);
        if (entries == NULL) {  /* a failed entry leaves the region done, as in Python */
            self->state = REGION_DONE;
            return NULL;
        }
        Py_DECREF(entries);
        return enter_in_python(self);
    }
    Py_XSETREF(self->runtime, runtime);
    Py_XSETREF(self->entries, entries);
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

/* Removes the region from its stack, innermost end first (``RegionStack.remove_region``). */
static int leave_stack(DataRegion *self) {
    PyObject *stack = self->stack;
    for (Py_ssize_t i = PyList_GET_SIZE(stack) - 1; i >= 0; i--)
        if (PyList_GET_ITEM(stack, i) == (PyObject *)self)
            return PyList_SetSlice(stack, i, i + 1, NULL);
    return 0;
}

/* ``runtime.lane`` (a new reference; NULL with an exception set): the thread's remembered
 * lane when ``runtime`` is the remembered runtime (a runtime's lane is set once, by its
 * constructor), else read by name. */
static PyObject *lane_of(PyObject *runtime) {
    if (thread_context_remembered() && g_context_runtime == runtime)
        return Py_NewRef(g_context_lane);
    return PyObject_GetAttr(runtime, s_lane);
}

static PyObject *region_exit(DataRegion *self, PyObject *const *args, Py_ssize_t nargs) {
    if (self->mode != REGION_IN_C)
        return PyObject_Vectorcall(g_python_exit, (PyObject *[]){(PyObject *)self,
                                   nargs > 0 ? args[0] : Py_None, nargs > 1 ? args[1] : Py_None,
                                   nargs > 2 ? args[2] : Py_None}, 4, NULL);
    if (self->state != REGION_ENTERED)
        Py_RETURN_FALSE;
    self->state = REGION_DONE;
    if (leave_stack(self) < 0)  /* first, as the Python exit (``_leave``) */
        return NULL;
    PyObject *lane = lane_of(self->runtime);
    PyObject *parted = lane == NULL ? NULL : direct_call(&g_part, lane, self->entries);
    Py_XDECREF(lane);
    PyObject *done;
    if (parted == Py_None) {  /* a lifetime ends: the Python exit (copy back, free) */
        done = PyObject_CallMethodObjArgs((PyObject *)self, s_exit_joined, self->stack, self->entries,
                                          nargs > 1 ? args[1] : Py_None, NULL);
    } else {  /* True, or the part's error: ``_left`` follows either (``finally``) */
        done = subscribed(g_region_exit) ? call_left(self) : Py_NewRef(Py_None);
        if (parted == NULL)  /* the part's error stands (or _left's own) */
            Py_CLEAR(done);
    }
    Py_XDECREF(parted);
    if (done == NULL)
        return NULL;
    Py_DECREF(done);
    Py_RETURN_FALSE;
}

static int region_traverse(DataRegion *self, visitproc visit, void *arg) {
    Py_VISIT(self->clauses);
    Py_VISIT(self->names);
    Py_VISIT(self->arrays);
    Py_VISIT(self->runtime);
    Py_VISIT(self->entries);
    Py_VISIT(self->stack);
    return 0;
}

static int region_clear(DataRegion *self) {
    Py_CLEAR(self->clauses);
    Py_CLEAR(self->names);
    Py_CLEAR(self->arrays);
    Py_CLEAR(self->runtime);
    Py_CLEAR(self->entries);
    Py_CLEAR(self->stack);
    return 0;
}

static void region_dealloc(DataRegion *self) {
    PyObject_GC_UnTrack(self);
    region_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define OR_NONE(field) ((field) != NULL ? (field) : Py_None)

/* copy and pickle: the instance dict and the C fields (``__setstate__`` restores both) */
static PyObject *region_getstate(DataRegion *self, PyObject *Py_UNUSED(ignored)) {
    if (self->names != NULL && clauses_of(self) == NULL)
        return NULL;
    PyObject *dict = PyObject_GenericGetDict((PyObject *)self, NULL);
    if (dict == NULL)
        return NULL;
    return Py_BuildValue("(N(OOOOOii))", dict, OR_NONE(self->clauses), OR_NONE(self->arrays),
                         OR_NONE(self->runtime), OR_NONE(self->entries), OR_NONE(self->stack),
                         self->state, self->mode);
}

static PyObject *field_or_null(PyObject *value) {
    return value == Py_None ? NULL : Py_NewRef(value);
}

static PyObject *region_setstate(DataRegion *self, PyObject *state) {
    PyObject *values, *clauses, *arrays, *runtime, *entries, *stack;
    int region_state, mode;
    if (!PyArg_ParseTuple(state, "O!(OOOOOii)", &PyDict_Type, &values, &clauses, &arrays, &runtime,
                          &entries, &stack, &region_state, &mode))
        return NULL;
    int in_c = mode == REGION_IN_C, entered = region_state == REGION_ENTERED;
    if (region_state < REGION_NEW || region_state > REGION_DONE || mode < REGION_UNSET ||
            mode > REGION_IN_PYTHON || (in_c && (!PyDict_Check(clauses) ||
                                                 !(PyTuple_Check(arrays) || PyList_Check(arrays)))) ||
            (in_c && entered && (runtime == Py_None || !PyList_Check(stack) ||
                                 !(PyTuple_Check(entries) || PyList_Check(entries)))) ||
            (stack != Py_None && !PyList_Check(stack))) {
        PyErr_SetString(PyExc_ValueError, "acc.data.__setstate__: a malformed state");
        return NULL;
    }
    PyObject *dict = PyObject_GenericGetDict((PyObject *)self, NULL);
    int updated = dict == NULL ? -1 : PyDict_Update(dict, values);
    Py_XDECREF(dict);
    if (updated < 0)
        return NULL;
    Py_XSETREF(self->clauses, field_or_null(clauses));
    Py_CLEAR(self->names);
    Py_XSETREF(self->arrays, PyList_Check(arrays) ? PyList_AsTuple(arrays) : field_or_null(arrays));
    if (in_c && self->arrays == NULL)  /* (a list of an earlier version's state: no memory) */
        return NULL;
    Py_XSETREF(self->runtime, field_or_null(runtime));
    Py_XSETREF(self->entries, field_or_null(entries));
    Py_XSETREF(self->stack, field_or_null(stack));
    self->state = region_state, self->mode = mode;
    Py_RETURN_NONE;
}

static PyMethodDef region_methods[] = {
    {"__getstate__", (PyCFunction)region_getstate, METH_NOARGS, "The state copy and pickle keep."},
    {"__setstate__", (PyCFunction)region_setstate, METH_O, "Restore what __getstate__ gave."},
    /* (``__enter__`` and ``__exit__``: descriptors of their own, _region_hooks.c.h) */
    {NULL},
};

static PyMemberDef region_members[] = {
    {"_runtime", T_OBJECT, offsetof(DataRegion, runtime), 0, "the runtime it entered on"},
    {NULL},
};

static PyObject *region_get_clauses(DataRegion *self, void *Py_UNUSED(closure)) {
    if (self->clauses == NULL && self->names == NULL)
        Py_RETURN_NONE;
    return Py_XNewRef(clauses_of(self));
}

static PyGetSetDef region_getset[] = {
    {"_clauses", (getter)region_get_clauses, NULL, "the clauses given", NULL},
    {NULL},
};

static PyTypeObject DataRegionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyacc._fastcall.DataRegion",
    .tp_basicsize = sizeof(DataRegion),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C base of acc.data: a region of present data entered and left in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)region_init,
    .tp_traverse = (traverseproc)region_traverse,
    .tp_clear = (inquiry)region_clear,
    .tp_dealloc = (destructor)region_dealloc,
    .tp_methods = region_methods,
    .tp_members = region_members,
    .tp_getset = region_getset,
};

static PyObject *configure_data(PyObject *module, PyObject *args) {
    /* configure_data(data, BUS.active, REGION_ENTER, REGION_EXIT, SingleUseRegion.__enter__,
     *                SingleUseRegion.__exit__, data clause names) */
    PyObject *type, *active, *enter, *exit, *kinds;
    Py_ssize_t enter_kind, exit_kind;
    if (!PyArg_ParseTuple(args, "O!O!nnOOO", &PyType_Type, &type, &PyList_Type, &active, &enter_kind,
                          &exit_kind, &enter, &exit, &kinds))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)type, &DataRegionType)) {
        PyErr_SetString(PyExc_TypeError, "configure_data: the region class must derive from DataRegion");
        return NULL;
    }
    if (enter_kind < 0 || exit_kind < 0 || enter_kind >= PyList_GET_SIZE(active) ||
            exit_kind >= PyList_GET_SIZE(active)) {
        PyErr_SetString(PyExc_ValueError, "configure_data: an event kind outside BUS.active");
        return NULL;
    }
    PyObject *names = PyFrozenSet_New(kinds);
    if (names == NULL)
        return NULL;
    PyObject *listed = PySequence_List(names);  /* (a set's order: any) */
    if (listed == NULL) {
        Py_DECREF(names);
        return NULL;
    }
    Py_XSETREF(g_data_kinds, names);
    for (Py_ssize_t i = 0; i < REGION_CLAUSES; i++) {
        PyObject *name = i < PyList_GET_SIZE(listed) ? PyList_GET_ITEM(listed, i) : NULL;
        PyObject *interned = name != NULL && PyUnicode_CheckExact(name) ? Py_NewRef(name) : NULL;
        if (interned != NULL)
            PyUnicode_InternInPlace(&interned);
        Py_XSETREF(g_data_names[i], interned);
    }
    Py_DECREF(listed);
    Py_XSETREF(g_data_type, Py_NewRef(type));
    ((PyTypeObject *)type)->tp_vectorcall = region_vectorcall;  /* (never inherited) */
    Py_XSETREF(g_active, Py_NewRef(active));
    Py_XSETREF(g_python_enter, Py_NewRef(enter));
    Py_XSETREF(g_python_exit, Py_NewRef(exit));
    g_region_enter = enter_kind, g_region_exit = exit_kind;
    Py_RETURN_NONE;
}

static int data_region_init(void) {
    static const struct { PyObject **name; const char *text; } names[] = {
        {&s_join, "join"}, {&s_part, "part"}, {&s_init, "_init"}, {&s_refuse_entry, "_refuse_entry"},
        {&s_exit_joined, "_exit_joined"}, {&s_left, "_left"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].name = intern(names[i].text)) == NULL)
            return -1;
    g_join.name = s_join, g_part.name = s_part;
    return PyType_Ready(&DataRegionType);
}
