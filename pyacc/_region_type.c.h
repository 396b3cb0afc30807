/* -- the type: collection, copy and pickle, configuration ---------------------------------- */

static int region_traverse(DataRegion *self, visitproc visit, void *arg) {
    Py_VISIT(self->clauses);
    Py_VISIT(self->names);
    Py_ssize_t held = self->joined ? 2 * self->n : self->n;
    for (Py_ssize_t i = 0; i < held; i++)
        Py_VISIT(self->refs[i]);
    Py_VISIT(self->runtime);
    Py_VISIT(self->stack);
    return 0;
}

static int region_clear(DataRegion *self) {
    Py_CLEAR(self->clauses);
    Py_CLEAR(self->names);
    region_drop(self);
    Py_CLEAR(self->runtime);
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
    PyObject *arrays = dict == NULL ? NULL : self->refs != NULL ? refs_tuple(self->refs, self->n)
                                                                : Py_NewRef(Py_None);
    PyObject *entries = arrays == NULL ? NULL : entries_tuple(self);
    if (entries == NULL) {
        Py_XDECREF(dict);
        Py_XDECREF(arrays);
        return NULL;
    }
    return Py_BuildValue("(N(ONONOii))", dict, OR_NONE(self->clauses), arrays, OR_NONE(self->runtime),
                         entries, OR_NONE(self->stack), self->state, self->mode);
}

static PyObject *field_or_null(PyObject *value) {
    return value == Py_None ? NULL : Py_NewRef(value);
}

/* The region holds ``arrays`` and, unless None, ``entries`` (checked: tuples of one
 * length, or None): 0, or -1 with an exception set. */
static int region_hold(DataRegion *self, PyObject *arrays, PyObject *entries) {
    region_drop(self);
    if (arrays == Py_None)
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(arrays);
    if (region_room(self, n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        self->refs[n + i] = entries == Py_None ? NULL : Py_NewRef(PyTuple_GET_ITEM(entries, i));
    for (Py_ssize_t i = 0; i < n; i++)
        self->refs[self->n++] = Py_NewRef(PyTuple_GET_ITEM(arrays, i));
    self->joined = entries != Py_None;
    return 0;
}

/* ``value`` as a tuple when it is a list (which code run later could change), itself when
 * a tuple or None: a new reference; NULL with an exception set, or with none (not a
 * sequence the state has). */
static PyObject *frozen_or_none(PyObject *value) {
    if (value == Py_None || PyTuple_Check(value))
        return Py_NewRef(value);
    return PyList_Check(value) ? PyList_AsTuple(value) : NULL;
}

/* Whether a state's fields fit together (``__getstate__``'s): ``arrays`` and ``entries``
 * tuples or None, of one length. */
static int state_fits(PyObject *clauses, PyObject *arrays, PyObject *runtime, PyObject *entries,
                      PyObject *stack, int region_state, int mode) {
    int in_c = mode == REGION_IN_C, entered = region_state == REGION_ENTERED;
    return region_state >= REGION_NEW && region_state <= REGION_DONE && mode >= REGION_UNSET &&
           mode <= REGION_IN_PYTHON &&
           (entries == Py_None || (arrays != Py_None && PyTuple_GET_SIZE(entries) == PyTuple_GET_SIZE(arrays))) &&
           !(in_c && (!PyDict_Check(clauses) || arrays == Py_None)) &&
           !(in_c && entered && (runtime == Py_None || !PyList_Check(stack) || entries == Py_None)) &&
           (stack == Py_None || PyList_Check(stack));
}

static PyObject *region_setstate(DataRegion *self, PyObject *state) {
    PyObject *values, *clauses, *given_arrays, *runtime, *given_entries, *stack;
    int region_state, mode;
    if (refuse_while_used(self, "__setstate__") < 0 ||
            !PyArg_ParseTuple(state, "O!(OOOOOii)", &PyDict_Type, &values, &clauses, &given_arrays, &runtime,
                              &given_entries, &stack, &region_state, &mode))
        return NULL;
    PyObject *arrays = frozen_or_none(given_arrays), *entries = arrays == NULL ? NULL : frozen_or_none(given_entries);
    if (entries == NULL || !state_fits(clauses, arrays, runtime, entries, stack, region_state, mode)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "acc.data.__setstate__: a malformed state");
        Py_XDECREF(arrays);
        Py_XDECREF(entries);
        return NULL;
    }
    PyObject *dict = PyObject_GenericGetDict((PyObject *)self, NULL);
    int updated = dict == NULL ? -1 : PyDict_Update(dict, values);
    Py_XDECREF(dict);
    if (updated == 0)
        updated = refuse_while_used(self, "__setstate__") < 0 ? -1 : region_hold(self, arrays, entries);
    Py_DECREF(arrays);
    Py_DECREF(entries);
    if (updated < 0)
        return NULL;
    Py_XSETREF(self->clauses, field_or_null(clauses));
    Py_CLEAR(self->names);
    Py_XSETREF(self->runtime, field_or_null(runtime));
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

/* The C lane's region verbs (``LANE_API`` of ``pyacc.mapping._cprobe``), or NULL where
 * that module is not built or is of another version (its lanes are then called by their
 * methods, as a stand-in is). */
static const LaneApi *lane_api(void) {
    const LaneApi *api = PyCapsule_Import(LANE_API_CAPSULE, 0);
    if (api == NULL || api->version != LANE_API_VERSION) {
        PyErr_Clear();
        return NULL;
    }
    return api;
}

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
    g_lane_api = lane_api();
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
        {&s_exit_joined, "_exit_joined"}, {&s_left, "_left"}, {&s_with_text, "_with_text"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].name = intern(names[i].text)) == NULL)
            return -1;
    return PyType_Ready(&DataRegionType);
}
