/* The data routines' entry in C: ``LaneRoutine``, what ``acc.copyin``, ``acc.create``,
 * ``acc.copyout``, ``acc.delete``, ``acc.is_present``, ``acc.update_device`` and
 * ``acc.update_self`` are when this extension is built (``pyacc/_routines.py``).
 *
 * A call with one positional argument and no keyword goes straight to the current
 * runtime's data lane (``runtime.lane``, ``mapping/_cprobe.c``): ``lane.<verb>(a)``.
 * The lane either carries the routine out on present data (nobody listening to its
 * events) or answers that it did not, having changed nothing; then — and for every other
 * call — the routine's Python function (``slow``) runs, exactly as before. What the
 * lane's answer means depends on the verb (``kind``):
 *
 *   RETURNS_DEVICE_ARRAY (``enter``): a device array, returned; None: not done;
 *   RETURNS_NONE (``leave``, ``update``): True: done, None returned; None: not done;
 *   ANSWERS (``present``): the answer, for a ``numpy.ndarray`` argument of plain items only
 *       (other objects, and object dtypes, are checked, and reported, by the Python function).
 *
 * The current runtime is ``ICVS.runtime`` of the calling thread; it and its lane are
 * remembered per thread and context epoch (``thread_runtime``, ``_thread_runtime.c.h``),
 * so that the same thread finds the same lane without reading its thread-local ICVs while
 * no thread's ``ICVS.runtime`` has changed. A thread without a current runtime yet takes
 * the Python function, which selects one.
 *
 * The routine has a ``__dict__``: ``functools.update_wrapper`` gives it the Python
 * function's name, docstring and ``__wrapped__`` (``inspect.signature`` follows it); it
 * pickles by name (``__reduce__``), copies as itself and takes weak references, as a
 * function does. A lane that raised an ``Exception`` changed nothing (its verbs are all or
 * nothing): the Python function then runs, and raises and reports what it finds.
 * One routine is not the lane's: ``acc.wait`` (kind SETTLES). Its calls with plain queue
 * numbers (none: every queue) and no keyword return at once when nobody listens for its
 * WAIT event and each queue of the current device was never made or is settled (idle, no
 * error: ``wait_settled``, ``_at_once.c.h``; API.md §5: a wait with nothing pending costs
 * a check); every other call, and every doubt, is the Python function's.
 *
 * Invariants: the GIL is held throughout, except where the lane waits for the table
 * lock; a call holds its own reference to the lane it calls.
 */

enum { RETURNS_DEVICE_ARRAY, RETURNS_NONE, ANSWERS, SETTLES };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *verb;   /* the lane's method name (interned) */
    DirectMethod method;  /* the lane's verb, called directly (``_direct_method.h``) */
    PyObject *slow;   /* the routine's Python function */
    PyObject *dict, *weakrefs;
    int kind;
} LaneRoutine;

/* The calling thread's current runtime's lane (a new reference, ``thread_runtime``);
 * NULL without an exception: no current runtime (the Python function selects one), or one
 * without a lane. */
static PyObject *current_lane(void) {
    if (thread_context_remembered())  /* (the common case: only the lane is needed) */
        return Py_NewRef(g_context_lane);
    PyObject *runtime, *lane, *stack;
    if (thread_runtime(&runtime, &lane, &stack) <= 0)
        return NULL;
    Py_DECREF(runtime);
    Py_DECREF(stack);
    return lane;
}

/* The lane's part of a call: its result, or MISS (the Python function's turn), NULL on error. */
static PyObject *through_lane(LaneRoutine *self, PyObject *a) {
    if (self->kind == ANSWERS && (Py_TYPE(a) != g_ndarray || !plain_items(a)))
        return Py_NewRef(MISS);  /* (an object dtype is no host data: the Python check refuses it) */
    PyObject *lane = current_lane();
    if (lane == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(MISS);
    PyObject *answer = direct_call(&self->method, lane, a);
    Py_DECREF(lane);
    if (answer == NULL || self->kind == ANSWERS)
        return answer;
    if (answer == Py_None) {
        Py_DECREF(answer);
        return Py_NewRef(MISS);
    }
    if (self->kind == RETURNS_NONE) {
        Py_DECREF(answer);
        return Py_NewRef(Py_None);
    }
    return answer;
}

/* A wait (kind SETTLES) for ``numbers`` with nothing to do, seen in C: 1; 0 the Python
 * function's turn; -1 error. */
static int waits_for_nothing(PyObject *const *numbers, Py_ssize_t count) {
    if (g_silent == NULL || PyList_GET_ITEM(g_silent, 0) != Py_True)
        return 0;  /* someone listens for the WAIT event */
    PyObject *runtime, *lane, *stack;
    int found = thread_runtime(&runtime, &lane, &stack);
    if (found <= 0)
        return found;
    Py_DECREF(lane);
    Py_DECREF(stack);
    int settled = wait_settled(runtime, numbers, count);
    Py_DECREF(runtime);
    return settled;
}

static PyObject *routine_vectorcall(LaneRoutine *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (self->slow == NULL) {  /* (cleared by the garbage collector: a module torn down) */
        PyErr_SetString(PyExc_RuntimeError, "a pyacc data routine called after its module was torn down");
        return NULL;
    }
    int plain = kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0;
    if (self->kind == SETTLES) {
        int settled = plain ? waits_for_nothing(args, PyVectorcall_NARGS(nargsf)) : 0;
        if (settled == 1)
            Py_RETURN_NONE;
        if (settled < 0) {  /* the Python function decides, and reports; an interrupt propagates */
            if (!PyErr_ExceptionMatches(PyExc_Exception))
                return NULL;
            PyErr_Clear();
        }
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    }
    if (PyVectorcall_NARGS(nargsf) == 1 && plain) {
        PyObject *result = through_lane(self, args[0]);
        if (result == NULL) {  /* the lane changed nothing: the Python function decides, */
            if (!PyErr_ExceptionMatches(PyExc_Exception))  /* and reports; an interrupt */
                return NULL;                               /* propagates */
            PyErr_Clear();
        } else if (result != MISS) {
            return result;
        } else {
            Py_DECREF(result);
        }
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *routine_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *verb, *slow;
    int kind;
    if (!PyArg_ParseTuple(args, "UOi:LaneRoutine", &verb, &slow, &kind))
        return NULL;
    if (kind < RETURNS_DEVICE_ARRAY || kind > SETTLES || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_ValueError, "LaneRoutine(verb, function, kind): kind 0 to 3, a callable function");
        return NULL;
    }
    LaneRoutine *self = (LaneRoutine *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    Py_INCREF(verb);
    PyUnicode_InternInPlace(&verb);
    self->verb = verb;
    self->method = (DirectMethod){verb, NULL, NULL};
    self->slow = Py_NewRef(slow);
    self->kind = kind;
    self->vectorcall = (vectorcallfunc)routine_vectorcall;
    return (PyObject *)self;
}

static int routine_traverse(LaneRoutine *self, visitproc visit, void *arg) {
    Py_VISIT(self->slow);
    Py_VISIT(self->dict);
    return 0;
}

static int routine_clear(LaneRoutine *self) {
    Py_CLEAR(self->slow);
    Py_CLEAR(self->dict);
    return 0;
}

static void routine_dealloc(LaneRoutine *self) {
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    routine_clear(self);
    Py_CLEAR(self->verb);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* pickle and copy: a routine is a module global, found again by its name */
static PyObject *routine_reduce(PyObject *self, PyObject *unused) {
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyObject *routine_itself(PyObject *self, PyObject *unused) {
    return Py_NewRef(self);
}

static PyMethodDef routine_methods[] = {
    {"__reduce__", routine_reduce, METH_NOARGS, "the routine's name: pickled as a module global"},
    {"__copy__", routine_itself, METH_NOARGS, "the routine itself"},
    {"__deepcopy__", routine_itself, METH_O, "the routine itself"},
    {NULL, NULL, 0, NULL},
};

static PyObject *routine_repr(LaneRoutine *self) {
    return PyUnicode_FromFormat("<pyacc data routine %R>", self->slow);
}

static PyMemberDef routine_members[] = {
    {"slow", T_OBJECT, offsetof(LaneRoutine, slow), READONLY,
     "the routine's Python function: every call the data lane does not finish"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef routine_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LaneRoutineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyacc._fastcall.LaneRoutine",
    .tp_doc = "LaneRoutine(verb, function, kind): a data routine whose plain calls try the current "
              "runtime's data lane first (pyacc/_routine_lane.c.h).",
    .tp_basicsize = sizeof(LaneRoutine),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = routine_new,
    .tp_dealloc = (destructor)routine_dealloc,
    .tp_traverse = (traverseproc)routine_traverse,
    .tp_clear = (inquiry)routine_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(LaneRoutine, vectorcall),
    .tp_dictoffset = offsetof(LaneRoutine, dict),
    .tp_weaklistoffset = offsetof(LaneRoutine, weakrefs),
    .tp_methods = routine_methods,
    .tp_repr = (reprfunc)routine_repr,
    .tp_members = routine_members,
    .tp_getset = routine_getset,
};
