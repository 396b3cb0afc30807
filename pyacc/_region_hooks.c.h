/* pyacc/_region_hooks.c.h: ``with acc.data(...)`` without a bound method per entry and
 * exit. Included by _fastcall.c after _data_region.c.h (whose ``region_enter`` and
 * ``region_exit`` it calls; one translation unit).
 *
 * CPython 3.11–3.13 run ``with region:`` by looking ``__enter__`` and ``__exit__`` up on
 * the region's type and binding each to the region (``_PyObject_LookupSpecial``): for a
 * method of a C type, two method objects, tracked by the garbage collector, made and
 * freed at every ``with`` (~700 of a data region's ~5,300 machine instructions). So
 * DataRegion's ``__enter__`` and ``__exit__`` are descriptors of their own
 * (``RegionHookDescr``), whose binding is a small object taken from a free list
 * (``RegionHook``) and called by vectorcall: the same calls with the same results.
 * Unbound (``DataRegion.__enter__``, ``super().__exit__``'s lookup), a descriptor is
 * callable with the region first, as a method descriptor is.
 *
 * Invariants: a RegionHook holds one strong reference, to its region (none once the
 * collector cleared it: calling it then raises), and is tracked by the collector (a
 * region may keep its own bound hook: ``region.done = region.__exit__``); a freed hook is
 * untracked and goes to the free list (``HOOKS_KEPT`` at most) with no reference, and
 * ``PyObject_Init`` and ``PyObject_GC_Track`` make it new again, as CPython's own free
 * lists of tracked objects do. Two hooks are equal when they are the same hook of the
 * same region, as bound methods are.
 */

enum { HOOK_ENTER, HOOK_EXIT, HOOKS_KEPT = 16 };

/* a descriptor; also the first fields of a RegionHook (``hook_name`` reads either) */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int hook;          /* HOOK_ENTER or HOOK_EXIT */
} RegionHookDescr;

typedef struct {
    RegionHookDescr head;  /* its vectorcall and which hook */
    PyObject *region;      /* the DataRegion it is bound to (strong) */
} RegionHook;

static const char *const HOOK_NAMES[2] = {"__enter__", "__exit__"};
static const char *const HOOK_DOCS[2] = {"Enter the region (see the type's docs).", "Leave the region."};
static RegionHook *g_hooks[HOOKS_KEPT];  /* the free list */
static int g_hooks_free;

/* ``region.__enter__()`` or ``region.__exit__(type, value, traceback)`` */
static PyObject *hook_run(int hook, PyObject *region, PyObject *const *args, Py_ssize_t nargs) {
    if (hook == HOOK_ENTER && nargs != 0)
        return PyErr_Format(PyExc_TypeError, "__enter__() takes no arguments (%zd given)", nargs);
    if (hook == HOOK_EXIT && nargs > 3)
        return PyErr_Format(PyExc_TypeError, "__exit__() takes at most 3 arguments (%zd given)", nargs);
    return hook == HOOK_ENTER ? region_enter((DataRegion *)region, NULL)
                              : region_exit((DataRegion *)region, args, nargs);
}

static int no_keywords(int hook, PyObject *kwnames) {
    if (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes no keyword arguments", HOOK_NAMES[hook]);
    return 0;
}

static PyObject *hook_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    RegionHook *bound = (RegionHook *)self;
    int hook = bound->head.hook;
    if (!no_keywords(hook, kwnames))
        return NULL;
    if (bound->region == NULL)
        return PyErr_Format(PyExc_ReferenceError, "%s of a region the garbage collector cleared",
                            HOOK_NAMES[hook]);
    return hook_run(hook, bound->region, args, PyVectorcall_NARGS(nargsf));
}

static int hook_traverse(RegionHook *self, visitproc visit, void *arg) {
    Py_VISIT(self->region);
    return 0;
}

static int hook_clear(RegionHook *self) {
    Py_CLEAR(self->region);
    return 0;
}

static void hook_dealloc(RegionHook *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->region);  /* (may free the region, and run code that makes hooks) */
    if (g_hooks_free < HOOKS_KEPT)
        g_hooks[g_hooks_free++] = self;
    else
        PyObject_GC_Del(self);
}

/* ==, != as bound methods compare: the same hook of the same region */
static PyObject *hook_richcompare(PyObject *self, PyObject *other, int op) {
    if ((op != Py_EQ && op != Py_NE) || Py_TYPE(other) != Py_TYPE(self))
        Py_RETURN_NOTIMPLEMENTED;
    RegionHook *a = (RegionHook *)self, *b = (RegionHook *)other;
    int same = a->head.hook == b->head.hook && a->region == b->region;
    return PyBool_FromLong(op == Py_EQ ? same : !same);
}

static Py_hash_t hook_hash(RegionHook *self) {
    Py_hash_t hash = PyObject_Hash(self->region != NULL ? self->region : Py_None);
    if (hash == -1)
        return -1;
    hash ^= self->head.hook + 1;
    return hash == -1 ? -2 : hash;
}

static PyObject *hook_self(RegionHook *self, void *Py_UNUSED(closure)) {
    return Py_NewRef(self->region != NULL ? self->region : Py_None);
}

/* ``__name__`` of a descriptor or of a bound hook (both start as a RegionHookDescr) */
static PyObject *hook_name(PyObject *self, void *Py_UNUSED(closure)) {
    return PyUnicode_FromString(HOOK_NAMES[((RegionHookDescr *)self)->hook]);
}

static PyGetSetDef hook_getset[] = {
    {"__self__", (getter)hook_self, NULL, "the region it is bound to", NULL},
    {"__name__", (getter)hook_name, NULL, "__enter__ or __exit__", NULL},
    {NULL},
};

static PyTypeObject RegionHookType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyacc._fastcall.RegionHook",
    .tp_basicsize = sizeof(RegionHook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "DataRegion.__enter__ or __exit__, bound to one region.",
    .tp_vectorcall_offset = offsetof(RegionHook, head.vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)hook_dealloc,
    .tp_traverse = (traverseproc)hook_traverse,
    .tp_clear = (inquiry)hook_clear,
    .tp_richcompare = hook_richcompare,
    .tp_hash = (hashfunc)hook_hash,
    .tp_getset = hook_getset,
};

/* A hook bound to ``region``: from the free list when it has one. */
static PyObject *hook_new(PyObject *region, int hook) {
    RegionHook *bound;
    if (g_hooks_free > 0) {
        bound = g_hooks[--g_hooks_free];
        PyObject_Init((PyObject *)bound, &RegionHookType);
    } else if ((bound = PyObject_GC_New(RegionHook, &RegionHookType)) == NULL) {
        return NULL;
    }
    bound->head.vectorcall = hook_vectorcall;
    bound->head.hook = hook;
    bound->region = Py_NewRef(region);
    PyObject_GC_Track(bound);
    return (PyObject *)bound;
}

static PyObject *descr_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    int hook = ((RegionHookDescr *)self)->hook;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!no_keywords(hook, kwnames))
        return NULL;
    if (nargs < 1 || !PyObject_TypeCheck(args[0], &DataRegionType))
        return PyErr_Format(PyExc_TypeError, "descriptor '%s' needs a DataRegion (acc.data) as its "
                            "first argument", HOOK_NAMES[hook]);
    return hook_run(hook, args[0], args + 1, nargs - 1);
}

static PyObject *descr_get(PyObject *self, PyObject *region, PyObject *Py_UNUSED(type)) {
    int hook = ((RegionHookDescr *)self)->hook;
    if (region == NULL || region == Py_None)
        return Py_NewRef(self);
    if ((PyObject *)Py_TYPE(region) != g_data_type && !PyObject_TypeCheck(region, &DataRegionType))
        return PyErr_Format(PyExc_TypeError, "descriptor '%s' for DataRegion objects does not apply "
                            "to a '%s' object", HOOK_NAMES[hook], Py_TYPE(region)->tp_name);
    return hook_new(region, hook);
}

static PyObject *descr_doc(PyObject *self, void *Py_UNUSED(closure)) {
    return PyUnicode_FromString(HOOK_DOCS[((RegionHookDescr *)self)->hook]);
}

static PyObject *descr_objclass(PyObject *self, void *Py_UNUSED(closure)) {
    return Py_NewRef((PyObject *)&DataRegionType);
}

static PyObject *descr_qualname(PyObject *self, void *Py_UNUSED(closure)) {
    return PyUnicode_FromFormat("DataRegion.%s", HOOK_NAMES[((RegionHookDescr *)self)->hook]);
}

static PyGetSetDef descr_getset[] = {
    {"__name__", (getter)hook_name, NULL, "__enter__ or __exit__", NULL},
    {"__qualname__", (getter)descr_qualname, NULL, "DataRegion.__enter__ or __exit__", NULL},
    {"__doc__", (getter)descr_doc, NULL, "what the hook does", NULL},
    {"__objclass__", (getter)descr_objclass, NULL, "DataRegion", NULL},
    {NULL},
};

static PyTypeObject RegionHookDescrType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyacc._fastcall.RegionHookDescr",
    .tp_basicsize = sizeof(RegionHookDescr),
    /* (a method descriptor: ``region.__enter__()`` and 3.14's ``with`` call it unbound) */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "DataRegion's __enter__ or __exit__ (bound without a method object).",
    .tp_vectorcall_offset = offsetof(RegionHookDescr, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = descr_get,
    .tp_getset = descr_getset,
};

/* DataRegion's ``__enter__`` and ``__exit__`` set in its dict (after ``PyType_Ready``). */
static int region_hooks_init(void) {
    if (PyType_Ready(&RegionHookType) < 0 || PyType_Ready(&RegionHookDescrType) < 0)
        return -1;
    for (int hook = HOOK_ENTER; hook <= HOOK_EXIT; hook++) {
        RegionHookDescr *descr = PyObject_New(RegionHookDescr, &RegionHookDescrType);
        if (descr == NULL)
            return -1;
        descr->vectorcall = descr_vectorcall;
        descr->hook = hook;
        int set = PyDict_SetItemString(DataRegionType.tp_dict, HOOK_NAMES[hook], (PyObject *)descr);
        Py_DECREF(descr);
        if (set < 0)
            return -1;
    }
    PyType_Modified(&DataRegionType);
    return 0;
}
