/* Relaunch: a compute call on the cuda device made again from C (included by _launch.c:
 * one translation unit; it launches LaunchRecords).
 *
 * A ``Relaunch`` stands where the express lane calls a cuda kernel's launcher: the
 * synchronous queue's (``SyncKernel``: the queue's stream current, the generated driver,
 * its launches, a wait), or an asynchronous queue's (the driver, run by the queue with its
 * stream current: ``pyacc._express.enqueuer``; no wait: made with ``synchronize`` 0).
 * For a driver that only launches (``cuda_relaunch.only_launches``), the launches of a call
 * are a function of its arguments' *facts* (``_relaunch_facts.c.h``): a CuPy array's data
 * pointer, shape, strides and dtype; a scalar's type and exact value. A call runs through
 * the launcher (``fallback``) by way of ``recorder`` (``cuda_plans.recorded``), which hands
 * back the launches it made when every one was a prepared launch from C (``LaunchRecord``
 * and the words of its scalars); those launches are kept (the last ``RELAUNCHES_KEPT`` sets
 * of facts, Jacobi's two calls among them; the least recently used goes first), with the
 * words frozen. A later call whose facts equal a kept set's makes those launches again,
 * in order, with the driver's ``cuLaunchKernel``; a synchronous one then waits for their stream with
 * ``cuStreamSynchronize`` (the GIL given back meanwhile, as CuPy's wait does); and returns
 * None, which is what the launcher returned. ``again(*args)`` makes the kept launches of
 * the arguments' facts and nothing else: True, or False when none are kept (an async
 * queue's bookkeeping is done around it: ``CudaQueue.submit_relaunch``).
 *
 * After ``RELAUNCH_MISSES`` calls in a row whose facts were not kept (a time step passed
 * as a scalar, arrays made anew at each call), a Relaunch *gives up*, for good: its calls
 * go to the launcher at once, with no facts read and nothing recorded, as the express lane
 * gives up on plans that never hold (``gave_up``: the lane's enqueue then stops asking).
 *
 * Invariants: a kept set's launches all went to one stream (the queue's, current while the
 * launcher ran) and the launcher returned None; a call with another argument kind (a
 * NumPy array, a tuple, ...), a keyword, or facts not kept goes to the launcher; a launch
 * the driver refuses raises ``launch_failed(code)`` (cuda.core's error, as a prepared
 * launch raises it); a failed wait calls ``on_failure()`` (the queue's own wait, which
 * raises pyacc's ``ExecutionError`` naming the queue), and raises a RuntimeError naming the
 * CUresult should that return.
 */

#define RELAUNCHES_KEPT 4
#define RELAUNCH_MISSES 16  /* calls in a row not made again after which a Relaunch gives up */

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
    unsigned long used;       /* the Relaunch's clock when last kept or made again */
} Kept;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback, *recorder, *array_type, *numbers, *on_failure, *launch_failed;
    stream_synchronize_fn synchronize;  /* NULL: an asynchronous queue's (no wait) */
    Kept kept[RELAUNCHES_KEPT];
    unsigned long clock;     /* ticks at each set kept or made again (``Kept.used``) */
    int misses;              /* calls in a row through the launcher (RELAUNCH_MISSES) */
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

#include "_relaunch_facts.c.h"

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
    taken.used = ++self->clock;
    if (kept->nargs == 0 && kept->generation == taken.generation)
        *kept = taken;  /* back in its place: nothing replaced it meanwhile */
    else
        kept_clear(&taken);
    if (status < 0)
        return NULL;
    self->relaunched++;
    self->misses = 0;
    if (self->synchronize == NULL)  /* an asynchronous queue's: the queue's waits wait */
        Py_RETURN_NONE;
    int code;
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

/* The entry a new set of launches replaces: an empty one, else the one least recently kept
 * or made again (a set made again at every other call stays while new facts come and go). */
static Kept *
least_used(Relaunch *self)
{
    Kept *least = &self->kept[0];
    for (int k = 0; k < RELAUNCHES_KEPT; k++) {
        if (self->kept[k].nargs == 0)
            return &self->kept[k];
        if (self->kept[k].used < least->used)
            least = &self->kept[k];
    }
    return least;
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
    Kept *slot = least_used(self);
    Kept old = *slot;
    fresh.generation = old.generation + 1;
    fresh.used = ++self->clock;
    *slot = fresh;
    kept_clear(&old);
    return 0;
}

/* A call through the launcher, recorded; its launches kept for ``keys`` (stolen). */
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
    if (result == Py_None && launches != Py_None) {
        if (keep(self, args, nargs, keys, launches) < 0)
            PyErr_Clear();  /* (keeping is the next calls' saving: this one ran, and well) */
    } else {
        for (Py_ssize_t i = 0; i < nargs; i++)
            Py_DECREF(keys[i]);
    }
    Py_DECREF(answer);
    return result;
failed:
    for (Py_ssize_t i = 0; i < nargs; i++)
        Py_DECREF(keys[i]);
    return NULL;
}


#define STACK_ARGS 8

/* What ``relaunch_facts`` found */
enum { NOT_KEPT = 0, RELAUNCHED = 1, NOT_COVERED = 2 };

/* The kept launches of these arguments' facts made again (``relaunch_kept``): RELAUNCHED,
 * ``*result`` None or NULL with an error set; NOT_KEPT: no kept set has their facts,
 * their keys into ``keys`` (new references) unless ``keys`` is NULL; NOT_COVERED: an
 * argument of another kind; -1 on an error. */
static int
relaunch_facts(Relaunch *self, PyObject *const *args, Py_ssize_t nargs, PyObject **keys,
               PyObject **result)
{
    Seen seen_stack[STACK_ARGS] = {{0}};
    Seen *seen = nargs <= STACK_ARGS ? seen_stack : PyMem_Calloc((size_t)nargs, sizeof(Seen));
    if (seen == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int found = see(self, args, nargs, seen), index = 0;
    if (found == 1) {
        found = NOT_KEPT;
        for (int k = 0; found == NOT_KEPT && k < RELAUNCHES_KEPT; k++) {
            int same = kept_matches(&self->kept[k], args, nargs, seen);
            found = same < 0 ? -1 : same ? RELAUNCHED : NOT_KEPT;
            index = k;
        }
        if (found == NOT_KEPT && keys != NULL && keys_of(self, args, nargs, seen, keys) < 0)
            found = -1;
        unsee(seen, nargs);
    } else if (found == 0) {
        found = NOT_COVERED;
    }
    if (found == RELAUNCHED)
        *result = relaunch_kept(self, &self->kept[index]);
    if (seen != seen_stack)
        PyMem_Free(seen);
    return found;
}

/* Whether calls are not looked at (each goes to the launcher as it is): relaunches off,
 * a Relaunch that gave up (RELAUNCH_MISSES), a profiler (which would miss the launcher's
 * frames). */
static int
passes_by(Relaunch *self)
{
    return !g_relaunching || self->misses >= RELAUNCH_MISSES || profiled();
}

static PyObject *
relaunch_vectorcall(Relaunch *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (passes_by(self) || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0))
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *keys_stack[STACK_ARGS];
    PyObject **keys = nargs <= STACK_ARGS ? keys_stack
                                          : PyMem_Malloc(sizeof(PyObject *) * (size_t)nargs);
    if (keys == NULL)
        return PyErr_NoMemory();
    PyObject *result = NULL;
    int found = relaunch_facts(self, args, nargs, keys, &result);
    if (found == NOT_KEPT || found == NOT_COVERED) {
        self->misses++;
        result = found == NOT_KEPT ? call_and_keep(self, args, nargs, keys)
                                   : PyObject_Vectorcall(self->fallback, args, nargsf, NULL);
    }
    if (keys != keys_stack)
        PyMem_Free(keys);
    return result;
}

/* ``again(*args)``: the kept launches of the arguments' facts made (and, synchronous,
 * waited for): True; False when none are kept (nothing run, nothing recorded). */
static PyObject *
relaunch_again(Relaunch *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (passes_by(self))
        Py_RETURN_FALSE;
    PyObject *result = NULL;
    int found = relaunch_facts(self, args, nargs, NULL, &result);
    if (found < 0 || (found == RELAUNCHED && result == NULL))
        return NULL;
    if (found != RELAUNCHED)
        Py_RETURN_FALSE;
    Py_DECREF(result);
    Py_RETURN_TRUE;
}

static PyMethodDef relaunch_methods[] = {
    {"again", (PyCFunction)(void (*)(void))relaunch_again, METH_FASTCALL,
     "again(*args): the launches kept for these arguments' facts made again: True; False "
     "when none are kept (nothing run)."},
    {NULL, NULL, 0, NULL},
};

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
    self->synchronize = (stream_synchronize_fn)(uintptr_t)synchronize;  /* 0: no wait */
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

static PyObject *
relaunch_gave_up(Relaunch *self, void *unused)
{
    return PyBool_FromLong(self->misses >= RELAUNCH_MISSES);
}

static PyGetSetDef relaunch_getset[] = {
    {"relaunched", (getter)relaunch_relaunched, NULL, "calls made again from C", NULL},
    {"kept", (getter)relaunch_kept_count, NULL, "sets of facts whose launches are kept", NULL},
    {"fallback", (getter)relaunch_fallback, NULL, "the launcher (SyncKernel, or a driver)", NULL},
    {"gave_up", (getter)relaunch_gave_up, NULL, "whether calls go to the launcher at once "
     "(RELAUNCH_MISSES calls in a row were not made again)", NULL},
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
              "synchronize): a call's launches made again from C (synchronize 0: an asynchronous "
              "queue's, no wait; compiler/_relaunch.c.h).",
    .tp_new = relaunch_new,
    .tp_dealloc = (destructor)relaunch_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Relaunch, vectorcall),
    .tp_getset = relaunch_getset,
    .tp_methods = relaunch_methods,
};
