/* Relaunch: a synchronous compute call on the cuda device made again from C (included by
 * _launch.c: one translation unit; it launches LaunchRecords).
 *
 * A ``Relaunch`` stands where the express lane calls a cuda kernel's synchronous launcher
 * (``SyncKernel``: the queue's stream current, the generated driver, its launches, a wait).
 * For a driver that only launches (``cuda_relaunch.only_launches``), the launches of a call
 * are a function of its arguments' *facts*: a CuPy array's data pointer, shape, strides
 * and dtype; a scalar's type and exact value (a float's bits: 0.0 and -0.0, or two NaNs,
 * are told apart as the kernel's words tell them). A call runs through the launcher
 * (``fallback``) by way of ``recorder`` (``cuda_plans.recorded``), which hands back the
 * launches it made when every one was a prepared launch from C (``LaunchRecord`` and the
 * words of its scalars); those launches are kept (the last ``RELAUNCHES_KEPT`` sets of facts,
 * Jacobi's two calls among them), with the words frozen. A later call whose facts equal
 * a kept set's makes those launches again, in order, with the driver's
 * ``cuLaunchKernel``, then waits for their stream with ``cuStreamSynchronize`` (the GIL
 * given back meanwhile, as CuPy's wait does), and returns None, which is what the
 * launcher returned.
 *
 * Invariants: a kept set's launches all went to one stream (the synchronous queue's,
 * current while the launcher ran) and the launcher returned None; a call with another
 * argument kind (a NumPy array, a tuple, ...), a keyword, or facts not kept goes to the
 * launcher; a launch the driver refuses raises ``launch_failed(code)`` (cuda.core's
 * error, as a prepared launch raises it); a failed wait calls ``on_failure()`` (the
 * queue's own wait, which raises pyacc's ``ExecutionError`` naming the queue), and raises
 * a RuntimeError naming the CUresult should that return.
 */

#define RELAUNCHES_KEPT 4

static int g_relaunching = 1;  /* set_relaunching(): calls are made again at all (benchmarks) */

typedef int (*stream_synchronize_fn)(void *);

typedef struct {
    Py_ssize_t nargs;       /* 0: an empty entry */
    PyObject **facts;       /* per argument: its kind, then its key (2 * nargs, owned) */
    Py_ssize_t nlaunches;
    LaunchRecord **records; /* owned */
    uint64_t **slots;       /* each launch's words, frozen */
    void *stream;
    unsigned long generation; /* changed by each ``keep`` into this entry */
} Kept;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback, *recorder, *array_type, *numbers, *on_failure, *launch_failed;
    stream_synchronize_fn synchronize;
    Kept kept[RELAUNCHES_KEPT];
    int next;                /* the entry the next set of launches replaces */
    Py_ssize_t relaunched;     /* calls made again from C */
} Relaunch;

static void
kept_clear(Kept *kept)
{
    for (Py_ssize_t i = 0; i < 2 * kept->nargs; i++)
        Py_XDECREF(kept->facts[i]);
    for (Py_ssize_t i = 0; i < kept->nlaunches; i++) {
        Py_XDECREF(kept->records[i]);
        PyMem_Free(kept->slots[i]);
    }
    PyMem_Free(kept->facts);
    PyMem_Free(kept->records);
    PyMem_Free(kept->slots);
    unsigned long generation = kept->generation;
    memset(kept, 0, sizeof *kept);
    kept->generation = generation;
}

/* The key of an argument's facts (module comment), a new reference; NULL without an error
 * set: a kind a relaunch does not cover; NULL with one: a failure reading it. */
static PyObject *
fact_key(Relaunch *self, PyObject *arg)
{
    PyTypeObject *kind = Py_TYPE(arg);
    if ((PyObject *)kind == self->array_type) {
        PyObject *data = PyObject_GetAttrString(arg, "data");
        PyObject *pointer = data ? PyObject_GetAttrString(data, "ptr") : NULL;
        Py_XDECREF(data);
        PyObject *shape = pointer ? PyObject_GetAttrString(arg, "shape") : NULL;
        PyObject *strides = shape ? PyObject_GetAttrString(arg, "strides") : NULL;
        PyObject *dtype = strides ? PyObject_GetAttrString(arg, "dtype") : NULL;
        PyObject *key = dtype ? PyTuple_Pack(4, pointer, shape, strides, dtype) : NULL;
        Py_XDECREF(pointer);
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        Py_XDECREF(dtype);
        return key;
    }
    if (kind == &PyBool_Type || kind == &PyLong_Type) {
        Py_INCREF(arg);
        return arg;
    }
    if (kind == &PyFloat_Type) {
        double value = PyFloat_AS_DOUBLE(arg);
        return PyBytes_FromStringAndSize((const char *)&value, sizeof value);
    }
    if (PySet_Contains(self->numbers, (PyObject *)kind) == 1) {  /* a NumPy number */
        Py_buffer view;
        if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        PyObject *key = PyBytes_FromStringAndSize(view.buf, view.len);
        PyBuffer_Release(&view);
        return key;
    }
    return NULL;
}

/* Each argument's key into ``keys`` (new references); 1: all covered, 0: one is not
 * (``keys`` released), -1: an error. */
static int
call_facts(Relaunch *self, PyObject *const *args, Py_ssize_t nargs, PyObject **keys)
{
    for (Py_ssize_t i = 0; i < nargs; i++) {
        keys[i] = fact_key(self, args[i]);
        if (keys[i] == NULL) {
            for (Py_ssize_t j = 0; j < i; j++)
                Py_DECREF(keys[j]);
            return PyErr_Occurred() ? -1 : 0;
        }
    }
    return 1;
}

/* Whether ``kept`` holds these facts; -1 on an error comparing. (A comparison that ran
 * Python code could let another thread replace the entry: then it is not a match.) */
static int
kept_matches(Kept *kept, PyObject *const *args, Py_ssize_t nargs, PyObject **keys)
{
    unsigned long generation = kept->generation;
    if (kept->nargs != nargs || nargs == 0)
        return 0;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if ((PyObject *)Py_TYPE(args[i]) != kept->facts[2 * i])
            return 0;
        PyObject *recorded = kept->facts[2 * i + 1];
        Py_INCREF(recorded);
        int same = PyObject_RichCompareBool(recorded, keys[i], Py_EQ);
        Py_DECREF(recorded);
        if (same != 1 || kept->generation != generation)
            return same < 0 ? -1 : 0;
    }
    return 1;
}

/* The kept launches, then the wait for their stream; None, or NULL with an error set. */
static PyObject *
relaunch_kept(Relaunch *self, Kept *kept)
{
    for (Py_ssize_t i = 0; i < kept->nlaunches; i++) {
        LaunchRecord *record = kept->records[i];
        void *stack[STACK_WORDS];
        void **params = record->count <= STACK_WORDS
            ? stack : PyMem_Malloc(sizeof(void *) * record->count);
        if (params == NULL)
            return PyErr_NoMemory();
        for (Py_ssize_t w = 0; w < record->count; w++)
            params[w] = &kept->slots[i][w];
        int code = record->launch_kernel(record->handle, record->grid[0], record->grid[1],
                                         record->grid[2], record->block[0], record->block[1],
                                         record->block[2], record->shared, record->stream,
                                         params, NULL);
        if (params != stack)
            PyMem_Free(params);
        if (code != 0) {
            PyObject *error = PyObject_CallFunction(self->launch_failed, "i", code);
            if (error != NULL) {
                PyErr_SetObject((PyObject *)Py_TYPE(error), error);
                Py_DECREF(error);
            }
            return NULL;
        }
    }
    void *stream = kept->stream;  /* (another thread may replace the entry meanwhile) */
    int code;
    self->relaunched++;
    Py_BEGIN_ALLOW_THREADS
    code = self->synchronize(stream);
    Py_END_ALLOW_THREADS
    if (code == 0)
        Py_RETURN_NONE;
    PyObject *waited = PyObject_CallNoArgs(self->on_failure);  /* raises what it says */
    if (waited != NULL) {
        Py_DECREF(waited);
        PyErr_Format(PyExc_RuntimeError, "cuStreamSynchronize failed: CUresult %d", code);
    }
    return NULL;
}

/* Keep ``launches`` (``[(LaunchRecord, spans), ...]``) for facts ``keys`` (stolen); 0, or
 * -1 with an error set. Launches this cannot make again (another stream, not records) are
 * not kept (0). */
static int
keep(Relaunch *self, PyObject *const *args, Py_ssize_t nargs, PyObject **keys,
     PyObject *launches)
{
    Kept fresh = {0};
    int status = 0;
    Py_ssize_t n = PyList_Check(launches) ? PyList_GET_SIZE(launches) : 0;
    fresh.facts = PyMem_Calloc((size_t)(2 * nargs), sizeof(PyObject *));
    fresh.records = PyMem_Calloc((size_t)(n ? n : 1), sizeof(LaunchRecord *));
    fresh.slots = PyMem_Calloc((size_t)(n ? n : 1), sizeof(uint64_t *));
    if (fresh.facts == NULL || fresh.records == NULL || fresh.slots == NULL) {
        for (Py_ssize_t i = 0; i < nargs; i++)
            Py_DECREF(keys[i]);
        PyMem_Free(fresh.facts);
        PyMem_Free(fresh.records);
        PyMem_Free(fresh.slots);
        PyErr_NoMemory();
        return -1;
    }
    fresh.nargs = nargs;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(Py_TYPE(args[i]));
        fresh.facts[2 * i] = (PyObject *)Py_TYPE(args[i]);
        fresh.facts[2 * i + 1] = keys[i];
    }
    for (Py_ssize_t i = 0; status == 0 && i < n; i++) {
        PyObject *item = PyList_GET_ITEM(launches, i);
        PyObject *record, *spans;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
                !PyObject_TypeCheck(record = PyTuple_GET_ITEM(item, 0), &LaunchRecordType) ||
                !PyTuple_Check(spans = PyTuple_GET_ITEM(item, 1))) {
            status = 1;  /* not a record's launch: not kept */
            break;
        }
        LaunchRecord *launch = (LaunchRecord *)record;
        if (i > 0 && launch->stream != fresh.stream) {
            status = 1;
            break;
        }
        fresh.stream = launch->stream;
        Py_INCREF(record);
        fresh.records[i] = launch;
        fresh.nlaunches = i + 1;
        fresh.slots[i] = PyMem_Malloc(sizeof(uint64_t) * (size_t)(launch->count ? launch->count : 1));
        if (fresh.slots[i] == NULL) {
            PyErr_NoMemory();
            status = -1;
            break;
        }
        memcpy(fresh.slots[i], launch->values, sizeof(uint64_t) * (size_t)launch->count);
        for (Py_ssize_t s = 0; status == 0 && s < PyTuple_GET_SIZE(spans); s++) {
            Py_ssize_t first;
            PyObject *words;
            if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spans, s), "nO", &first, &words))
                status = -1;
            else
                status = pack_words(words, fresh.slots[i], first, launch->count);
        }
    }
    if (status != 0 || n == 0) {
        kept_clear(&fresh);
        return status < 0 ? -1 : 0;
    }
    Kept *slot = &self->kept[self->next];
    self->next = (self->next + 1) % RELAUNCHES_KEPT;
    Kept old = *slot;
    fresh.generation = old.generation + 1;
    *slot = fresh;
    kept_clear(&old);
    return 0;
}

/* A call through the launcher, recorded; its launches kept for ``keys`` (stolen; NULL:
 * the facts are not covered). */
static PyObject *
call_and_keep(Relaunch *self, PyObject *const *args, Py_ssize_t nargs, PyObject **keys)
{
    PyObject *tuple = PyTuple_New(nargs);
    if (tuple == NULL)
        goto failed;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tuple, i, args[i]);
    }
    PyObject *answer = PyObject_CallFunctionObjArgs(self->recorder, self->fallback, tuple, NULL);
    Py_DECREF(tuple);
    if (answer == NULL)
        goto failed;
    PyObject *result, *launches;
    if (!PyArg_ParseTuple(answer, "OO", &result, &launches)) {
        Py_DECREF(answer);
        goto failed;
    }
    Py_INCREF(result);
    if (keys != NULL && result == Py_None && launches != Py_None) {
        if (keep(self, args, nargs, keys, launches) < 0) {
            Py_DECREF(answer);
            Py_DECREF(result);
            return NULL;
        }
    } else if (keys != NULL) {
        for (Py_ssize_t i = 0; i < nargs; i++)
            Py_DECREF(keys[i]);
    }
    Py_DECREF(answer);
    return result;
failed:
    if (keys != NULL)
        for (Py_ssize_t i = 0; i < nargs; i++)
            Py_DECREF(keys[i]);
    return NULL;
}

static PyObject *
relaunch_vectorcall(Relaunch *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!g_relaunching || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0))
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *stack[8];
    PyObject **keys = nargs <= 8 ? stack : PyMem_Malloc(sizeof(PyObject *) * (size_t)nargs);
    if (keys == NULL)
        return PyErr_NoMemory();
    PyObject *result = NULL;
    int covered = call_facts(self, args, nargs, keys);
    if (covered < 0)
        goto done;
    for (int k = 0; covered && k < RELAUNCHES_KEPT; k++) {
        int same = kept_matches(&self->kept[k], args, nargs, keys);
        if (same == 1) {
            for (Py_ssize_t i = 0; i < nargs; i++)
                Py_DECREF(keys[i]);
            result = relaunch_kept(self, &self->kept[k]);
            goto done;
        }
        if (same < 0) {
            for (Py_ssize_t i = 0; i < nargs; i++)
                Py_DECREF(keys[i]);
            goto done;
        }
    }
    result = call_and_keep(self, args, nargs, covered ? keys : NULL);
done:
    if (keys != stack)
        PyMem_Free(keys);
    return result;
}

static PyObject *
relaunch_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"fallback", "recorder", "array_type", "numbers", "on_failure",
                            "launch_failed", "synchronize", NULL};
    PyObject *fallback, *recorder, *array_type, *numbers, *on_failure, *launch_failed;
    unsigned long long synchronize;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO!OOK:Relaunch", names, &fallback,
                                     &recorder, &array_type, &PyFrozenSet_Type, &numbers,
                                     &on_failure, &launch_failed, &synchronize))
        return NULL;
    if (synchronize == 0) {
        PyErr_SetString(PyExc_ValueError, "no driver function to wait with (address 0)");
        return NULL;
    }
    Relaunch *self = (Relaunch *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)relaunch_vectorcall;
    PyObject *held[] = {fallback, recorder, array_type, numbers, on_failure, launch_failed};
    PyObject **fields[] = {&self->fallback, &self->recorder, &self->array_type,
                           &self->numbers, &self->on_failure, &self->launch_failed};
    for (int i = 0; i < 6; i++) {
        Py_INCREF(held[i]);
        *fields[i] = held[i];
    }
    self->synchronize = (stream_synchronize_fn)(uintptr_t)synchronize;
    return (PyObject *)self;
}

static void
relaunch_dealloc(Relaunch *self)
{
    for (int k = 0; k < RELAUNCHES_KEPT; k++)
        kept_clear(&self->kept[k]);
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->recorder);
    Py_XDECREF(self->array_type);
    Py_XDECREF(self->numbers);
    Py_XDECREF(self->on_failure);
    Py_XDECREF(self->launch_failed);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
relaunch_relaunched(Relaunch *self, void *unused)
{
    return PyLong_FromSsize_t(self->relaunched);
}

static PyObject *
relaunch_kept_count(Relaunch *self, void *unused)
{
    int count = 0;
    for (int k = 0; k < RELAUNCHES_KEPT; k++)
        count += self->kept[k].nargs > 0;
    return PyLong_FromLong(count);
}

static PyObject *
relaunch_fallback(Relaunch *self, void *unused)
{
    Py_INCREF(self->fallback);
    return self->fallback;
}

static PyGetSetDef relaunch_getset[] = {
    {"relaunched", (getter)relaunch_relaunched, NULL, "calls made again from C", NULL},
    {"kept", (getter)relaunch_kept_count, NULL, "sets of facts whose launches are kept", NULL},
    {"fallback", (getter)relaunch_fallback, NULL, "the launcher (SyncKernel)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RelaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyacc.compiler._launch.Relaunch",
    .tp_basicsize = sizeof(Relaunch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Relaunch(fallback, recorder, array_type, numbers, on_failure, launch_failed, "
              "synchronize): a synchronous call's launches made again from C "
              "(compiler/_relaunch.c.h).",
    .tp_new = relaunch_new,
    .tp_dealloc = (destructor)relaunch_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Relaunch, vectorcall),
    .tp_getset = relaunch_getset,
};

/* set_relaunching(flag) -> previous: whether Replays make calls again (else every call goes
 * to the launcher, unrecorded: benchmarks measure the path a relaunch replaces). */
static PyObject *
set_relaunching(PyObject *module, PyObject *flag)
{
    int relaunching = PyObject_IsTrue(flag);
    if (relaunching < 0)
        return NULL;
    PyObject *previous = PyBool_FromLong(g_relaunching);
    g_relaunching = relaunching;
    return previous;
}
