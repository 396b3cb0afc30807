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

/* an array's attributes a relaunch reads, interned (``intern_names``): a name made at
 * each read would miss the type's attribute cache */
static PyObject *s_data, *s_ptr, *s_shape, *s_strides, *s_dtype;

static int
intern_names(void)
{
    s_data = PyUnicode_InternFromString("data");
    s_ptr = PyUnicode_InternFromString("ptr");
    s_shape = PyUnicode_InternFromString("shape");
    s_strides = PyUnicode_InternFromString("strides");
    s_dtype = PyUnicode_InternFromString("dtype");
    return s_data && s_ptr && s_shape && s_strides && s_dtype ? 0 : -1;
}

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

/* What a call's arguments are, read once a call: an array's data pointer, shape, strides
 * and dtype (new references; NULLs for a scalar). */
typedef struct {
    PyObject *pointer, *shape, *strides, *dtype;
} Seen;

/* The kind of ``arg`` a relaunch covers: 1 an array, 2 a float, 3 a NumPy number, 4 an
 * int or a bool; 0 none. */
static int
kind_of(Relaunch *self, PyObject *arg)
{
    PyTypeObject *kind = Py_TYPE(arg);
    if ((PyObject *)kind == self->array_type)
        return 1;
    if (kind == &PyFloat_Type)
        return 2;
    if (kind == &PyBool_Type || kind == &PyLong_Type)
        return 4;
    int number = PySet_Contains(self->numbers, (PyObject *)kind);
    if (number < 0)
        PyErr_Clear();  /* (an unhashable type: not a NumPy number) */
    return number == 1 ? 3 : 0;
}

static void
unsee(Seen *seen, Py_ssize_t nargs)
{
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_CLEAR(seen[i].pointer);
        Py_CLEAR(seen[i].shape);
        Py_CLEAR(seen[i].strides);
        Py_CLEAR(seen[i].dtype);
    }
}

/* Read the arguments (``seen``, zeroed by the caller): 1 all covered, 0 one is not, -1 an
 * error reading one (``seen`` released but for 1). */
static int
see(Relaunch *self, PyObject *const *args, Py_ssize_t nargs, Seen *seen)
{
    for (Py_ssize_t i = 0; i < nargs; i++) {
        int kind = kind_of(self, args[i]);
        if (kind != 1) {
            if (kind == 0) {
                unsee(seen, nargs);
                return 0;
            }
            continue;
        }
        PyObject *data = PyObject_GetAttr(args[i], s_data);
        seen[i].pointer = data ? PyObject_GetAttr(data, s_ptr) : NULL;
        Py_XDECREF(data);
        seen[i].shape = seen[i].pointer ? PyObject_GetAttr(args[i], s_shape) : NULL;
        seen[i].strides = seen[i].shape ? PyObject_GetAttr(args[i], s_strides) : NULL;
        seen[i].dtype = seen[i].strides ? PyObject_GetAttr(args[i], s_dtype) : NULL;
        if (seen[i].dtype == NULL) {
            unsee(seen, nargs);
            return -1;
        }
    }
    return 1;
}

/* The key of an argument's facts, a new reference (its kind covered: ``see``): an
 * array's (pointer, shape, strides, dtype); a float's or NumPy number's bytes; an int or
 * a bool itself. */
static PyObject *
key_of(Relaunch *self, PyObject *arg, Seen *seen)
{
    switch (kind_of(self, arg)) {
    case 1:
        return PyTuple_Pack(4, seen->pointer, seen->shape, seen->strides, seen->dtype);
    case 2: {
        double value = PyFloat_AS_DOUBLE(arg);
        return PyBytes_FromStringAndSize((const char *)&value, sizeof value);
    }
    case 3: {
        Py_buffer view;
        if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        PyObject *key = PyBytes_FromStringAndSize(view.buf, view.len);
        PyBuffer_Release(&view);
        return key;
    }
    default:
        Py_INCREF(arg);
        return arg;
    }
}

/* Whether ``arg`` (read into ``seen``) has the facts of ``key``; -1 on an error. */
static int
same_facts(PyObject *arg, Seen *seen, PyObject *key)
{
    if (seen->pointer != NULL) {  /* an array */
        PyObject *read[4] = {seen->pointer, seen->shape, seen->strides, seen->dtype};
        for (int f = 0; f < 4; f++) {
            int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(key, f), read[f], Py_EQ);
            if (same != 1)
                return same;
        }
        return 1;
    }
    if (PyFloat_CheckExact(arg)) {
        double value = PyFloat_AS_DOUBLE(arg);
        return memcmp(PyBytes_AS_STRING(key), &value, sizeof value) == 0;
    }
    if (PyBytes_CheckExact(key)) {  /* a NumPy number */
        Py_buffer view;
        if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
            return -1;
        int same = view.len == PyBytes_GET_SIZE(key) &&
                   memcmp(view.buf, PyBytes_AS_STRING(key), (size_t)view.len) == 0;
        PyBuffer_Release(&view);
        return same;
    }
    return PyObject_RichCompareBool(key, arg, Py_EQ);
}

/* Whether ``kept`` holds the facts of these arguments; -1 on an error comparing. (A
 * comparison that ran Python code could let another thread replace the entry: then it is
 * not a match; each key is held while it is compared.) */
static int
kept_matches(Kept *kept, PyObject *const *args, Py_ssize_t nargs, Seen *seen)
{
    unsigned long generation = kept->generation;
    if (kept->nargs != nargs || nargs == 0)
        return 0;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if ((PyObject *)Py_TYPE(args[i]) != kept->facts[2 * i])
            return 0;
        PyObject *key = kept->facts[2 * i + 1];
        Py_INCREF(key);
        int same = same_facts(args[i], &seen[i], key);
        Py_DECREF(key);
        if (same != 1 || kept->generation != generation)
            return same < 0 ? -1 : 0;
    }
    return 1;
}

/* The launches of ``kept`` (``relaunch_kept`` has taken it out of its place: Python code
 * that runs meanwhile, a driver's callback or a profiler's, may replace the entry without
 * freeing what these launches read). 0, or -1 with an error set. */
static int
launch_kept(Relaunch *self, Kept *kept)
{
    for (Py_ssize_t i = 0; i < kept->nlaunches; i++) {
        int code = call_driver(kept->records[i], kept->slots[i]);
        if (code < 0)
            return -1;
        if (code > 0) {
            PyObject *error = PyObject_CallFunction(self->launch_failed, "i", code);
            if (error != NULL) {
                PyErr_SetObject((PyObject *)Py_TYPE(error), error);
                Py_DECREF(error);
            }
            return -1;
        }
    }
    return 0;
}

/* The kept launches, then the wait for their stream; None, or NULL with an error set. */
static PyObject *
relaunch_kept(Relaunch *self, Kept *kept)
{
    Kept taken = *kept;  /* the entry taken out while it launches (``launch_kept``) */
    kept->nargs = kept->nlaunches = 0;
    kept->facts = NULL;
    kept->records = NULL;
    kept->slots = NULL;
    int status = launch_kept(self, &taken);
    void *stream = taken.stream;
    if (kept->nargs == 0 && kept->generation == taken.generation)
        *kept = taken;  /* back in its place: nothing replaced it meanwhile */
    else
        kept_clear(&taken);
    if (status < 0)
        return NULL;
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
        for (Py_ssize_t s = 0; status == 0 && s < PyTuple_GET_SIZE(spans); s++)
            status = pack_span(PyTuple_GET_ITEM(spans, s), fresh.slots[i], launch->count);
    }
    if (status != 0 || n == 0 || nargs == 0) {
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
        if (keep(self, args, nargs, keys, launches) < 0)
            PyErr_Clear();  /* (keeping is the next calls' saving: this one ran, and well) */
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

/* The keys of these arguments' facts (``key_of``) into ``keys``: 0, or -1 (none left). */
static int
keys_of(Relaunch *self, PyObject *const *args, Py_ssize_t nargs, Seen *seen, PyObject **keys)
{
    for (Py_ssize_t i = 0; i < nargs; i++) {
        keys[i] = key_of(self, args[i], &seen[i]);
        if (keys[i] == NULL) {
            for (Py_ssize_t j = 0; j < i; j++)
                Py_DECREF(keys[j]);
            return -1;
        }
    }
    return 0;
}

#define STACK_ARGS 8

static PyObject *
relaunch_vectorcall(Relaunch *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!g_relaunching || profiled() || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0))
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    Seen seen_stack[STACK_ARGS] = {{0}};
    PyObject *keys_stack[STACK_ARGS];
    Seen *seen = nargs <= STACK_ARGS ? seen_stack : PyMem_Calloc((size_t)nargs, sizeof(Seen));
    PyObject **keys = nargs <= STACK_ARGS ? keys_stack
                                          : PyMem_Malloc(sizeof(PyObject *) * (size_t)nargs);
    PyObject *result = NULL;
    if (seen == NULL || keys == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int covered = see(self, args, nargs, seen);
    if (covered < 0)
        goto done;
    for (int k = 0; covered && k < RELAUNCHES_KEPT; k++) {
        int same = kept_matches(&self->kept[k], args, nargs, seen);
        if (same != 0) {
            unsee(seen, nargs);
            result = same < 0 ? NULL : relaunch_kept(self, &self->kept[k]);
            goto done;
        }
    }
    if (covered && keys_of(self, args, nargs, seen, keys) < 0) {
        unsee(seen, nargs);
        goto done;
    }
    if (covered)
        unsee(seen, nargs);
    result = call_and_keep(self, args, nargs, covered ? keys : NULL);
done:
    if (seen != NULL && seen != seen_stack)
        PyMem_Free(seen);
    if (keys != NULL && keys != keys_stack)
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

static int
relaunch_traverse(Relaunch *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    Py_VISIT(self->recorder);
    Py_VISIT(self->array_type);
    Py_VISIT(self->numbers);
    Py_VISIT(self->on_failure);
    Py_VISIT(self->launch_failed);
    for (int k = 0; k < RELAUNCHES_KEPT; k++) {
        Kept *kept = &self->kept[k];
        for (Py_ssize_t i = 0; i < 2 * kept->nargs; i++)
            Py_VISIT(kept->facts[i]);
        for (Py_ssize_t i = 0; i < kept->nlaunches; i++)
            Py_VISIT((PyObject *)kept->records[i]);
    }
    return 0;
}

static int
relaunch_clear(Relaunch *self)
{
    for (int k = 0; k < RELAUNCHES_KEPT; k++)
        kept_clear(&self->kept[k]);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->recorder);
    Py_CLEAR(self->array_type);
    Py_CLEAR(self->numbers);
    Py_CLEAR(self->on_failure);
    Py_CLEAR(self->launch_failed);
    return 0;
}

static void
relaunch_dealloc(Relaunch *self)
{
    PyObject_GC_UnTrack(self);
    relaunch_clear(self);
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
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)relaunch_traverse,
    .tp_clear = (inquiry)relaunch_clear,
    .tp_doc = "Relaunch(fallback, recorder, array_type, numbers, on_failure, launch_failed, "
              "synchronize): a synchronous call's launches made again from C "
              "(compiler/_relaunch.c.h).",
    .tp_new = relaunch_new,
    .tp_dealloc = (destructor)relaunch_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Relaunch, vectorcall),
    .tp_getset = relaunch_getset,
};
