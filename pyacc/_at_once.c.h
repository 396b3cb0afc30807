/* pyacc/_at_once.c.h: an async call run at once by the express lane, included by _fastcall.c
 * (after _queue_take.c.h, which takes and gives back the call's queue).
 *
 * OpenACC 3.3 §2.16.1 lets async work run asynchronously, not must: an ``async_=<int>``
 * call whose plan holds runs at once on the calling thread when its queue is idle and the
 * kernel is predicted below the queue's crossover (API.md §5, last point;
 * ``mapping/inline.py``). Owns ``run_plan_at_once``: the queue taken (in C,
 * ``take_queue``: held for the kernel's run; else by the Python ``take_at_once``), the
 * kernel run (a kept call, the same words after a short run, is timed one in 8 and its
 * record kept in between: ``TIME_SAMPLED``), the queue given back and the run recorded,
 * and the call's ``AsyncResult`` (``_async_handle.c.h``); ``configure_async`` also tells
 * ``_queue_settled.c.h`` the queue types. A kernel that fails marks the queue as
 * ``begin_inline`` does (``mark_taken``) and leaves the rest to ``self._ran_at_once``
 * (Python: the error kept for the covering wait, ``WorkerQueue.end_inline``).
 *
 * The table's lock is taken first, then the queue's (the order of every path that holds
 * both). The kernel goes through its prepared call's words, with no tuple made
 * (``plan_words``), when they apply.
 *
 * Invariants:
 *   - a queue taken here is given back whatever happens (``after_run``);
 *   - events: the lane runs only when nobody subscribes (``BUS.silent``, checked by
 *     ``fastcall_call``); the run publishes none;
 *   - the GIL is held throughout, except while a lock waits and while the kernel runs
 *     (as its ``nogil`` asks). While the queue is held, Python code runs only where the
 *     kernel's call runs it (a profiler, the dispatcher): the queue's lock is re-entrant
 *     (``TableLock``, else ``threading.RLock``), so this thread's own calls on the queue
 *     go through, and other threads' wait for the run.
 */

/* -- one call ----------------------------------------------------------------------------- */
static Py_ssize_t plan_bytes(ExpressPlan *plan, PyObject *args) {
    /* the bytes of the call's arrays (what the kernel's predicted run time scales with) */
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < plan->narrays; i++) {
        ArrayFields *f = ARRAY(PyTuple_GET_ITEM(args, plan->arrays[i].slot));
        Py_ssize_t size = plan->arrays[i].itemsize;
        for (int d = 0; d < f->nd; d++)
            size *= f->dimensions[d];
        total += size;
    }
    return total;
}

/* The queue for ``value`` taken: held in C (``take_queue``: ``*took`` says how), else
 * by the Python ``take_at_once`` (``took->held`` NULL). The queue, Py_None when not
 * taken, NULL on error. */
typedef struct {
    PyObject *held;  /* the queue's lock release when C holds it (hold_idle), else NULL */
    RunRecord last;  /* with ``held``: the kernel's run record */
    double below;    /* with ``held``: the queue's crossover */
} Took;

static PyObject *take(ExpressPlan *plan, PyObject *value, Py_ssize_t nbytes, Took *took) {
    PyObject *queue = NULL;
    took->held = NULL;
    int taken = plan->queue_set == NULL ? 2
        : take_queue(plan, value, nbytes, &queue, &took->held, &took->last, &took->below);
    if (taken == 1)
        return queue;
    if (taken == 0)
        Py_RETURN_NONE;
    if (taken < 0)
        return NULL;
    return PyObject_CallFunction(plan->take_at_once, "OOn", value, plan->kernel, nbytes);
}

/* The kernel's error (pending) as an exception object with its traceback (a new
 * reference, or NULL when none is pending). */
static PyObject *fetch_error(void) {
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    PyErr_NormalizeException(&type, &error, &traceback);
    if (traceback != NULL && error != NULL)
        PyException_SetTraceback(error, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return error;
}

/* A kernel run with its queue held in C (``hold_idle``) came back with ``result``: the
 * queue given back (marked taken first when the kernel failed: ``mark_taken``), then the
 * table (``let_go``). 1: it ran (``*result``); 0: it failed, marked (the error pending, for
 * ``self._ran_at_once``); -1: an error (raised; nothing marked, the queue given back). */
static int give_back_held(PyObject *held, PyObject *queue, PyObject *release, PyObject **result) {
    int outcome = 1;
    if (*result == NULL) {  /* (the kernel's error stays pending while the queue is marked) */
        PyObject *type, *error, *traceback;
        PyErr_Fetch(&type, &error, &traceback);
        outcome = mark_taken(queue);
        if (outcome == 0) {
            PyErr_Restore(type, error, traceback);
        } else {  /* the mark's error (a MemoryError) replaces the kernel's */
            Py_XDECREF(type);
            Py_XDECREF(error);
            Py_XDECREF(traceback);
        }
    }
    if (give_queue_lock(held) < 0 && outcome == 1)
        outcome = -1;
    let_go(release, result);
    if (outcome == 1 && *result == NULL)
        outcome = -1;
    if (outcome < 0)
        Py_CLEAR(*result);
    return outcome;
}

/* The end of a kernel's run at once (``result``, its reference and ``queue``'s taken):
 * the queue given back, then the table (``release``, NULL when not held); the run
 * recorded; the call's AsyncResult (NULL on error). A kernel that failed leaves its error
 * to ``self._ran_at_once``, kept for the covering wait; a queue the Python
 * ``take_at_once`` took (``took->held`` NULL) is given back by ``queue.ran_at_once``. */
static PyObject *after_run(PyObject *self, ExpressPlan *plan, PyObject *queue, const Took *took,
                           PyObject *release, PyObject *result, double seconds, Py_ssize_t nbytes) {
    if (took->held != NULL) {
        int ran = give_back_held(took->held, queue, release, &result);
        if (ran == 1) {  /* the common case: record_kernel; AsyncResult */
            PyObject *done = seconds != UNTIMED && record_run(plan, seconds, nbytes, &took->last,
                                                              took->below) < 0
                ? NULL : async_result(queue, result);
            Py_DECREF(queue);
            Py_DECREF(result);
            return done;
        }
        if (ran < 0) {
            Py_DECREF(queue);
            return NULL;
        }
    } else {
        let_go(release, &result);
    }
    PyObject *error = result == NULL ? fetch_error() : NULL;  /* kept, not raised here */
    PyObject *done = NULL;
    /* (a kept call not sampled failed: its record's time, which recording keeps as is) */
    PyObject *took_seconds = PyFloat_FromDouble(seconds == UNTIMED ? took->last.seconds : seconds);
    PyObject *size = PyLong_FromSsize_t(nbytes);
    if (took_seconds != NULL && size != NULL) {
        if (result != NULL) {
            /* it ran: queue.ran_at_once(...) gives the queue back; AsyncResult(queue, value) */
            PyObject *given = PyObject_CallMethodObjArgs(queue, s_queue_ran_at_once, plan->kernel,
                                                         took_seconds, size, Py_None, Py_None, NULL);
            if (given != NULL) {
                Py_DECREF(given);
                done = async_result(queue, result);
            }
        } else {  /* it failed: self._ran_at_once keeps the error for the covering wait */
            done = PyObject_CallMethodObjArgs(self, s_ran_at_once, queue, plan->kernel, took_seconds,
                                              size, Py_None, error ? error : Py_None, NULL);
        }
    } else {  /* no memory for the numbers: the queue given back all the same (end_inline) */
        PyObject *type, *pending, *traceback;
        PyErr_Fetch(&type, &pending, &traceback);
        Py_XDECREF(PyObject_CallMethodNoArgs(queue, s_end_inline));
        PyErr_Clear();
        PyErr_Restore(type, pending, traceback);
    }
    Py_XDECREF(took_seconds);
    Py_XDECREF(size);
    Py_DECREF(queue);
    Py_XDECREF(result);
    Py_XDECREF(error);
    return done;
}

/* The plan's call with ``async_=value``, run at once on this thread when its queue is
 * idle and the kernel predicted short (taken with the table held): its AsyncResult (the
 * kernel's error is kept for the covering wait, by ``self._ran_at_once``); MISS when a
 * check fails or the queue is not taken; NULL on error. */
static PyObject *run_plan_at_once(PyObject *self, ExpressPlan *plan, PyObject *args,
                                  PyObject *value, int adopt) {
    if (plan->take_at_once == NULL)
        return MISS;
    PyObject *release;
    int ok = enter_plan(plan, args, adopt, &release);
    if (ok != 1)
        return ok == 0 ? MISS : NULL;
    /* the kernel's arguments, before the queue is taken (an interrupt while preparing is
     * raised here, nothing taken) and the kernel timed */
    int64_t words[PREPARED_WORDS];
    PyObject *device_args;
    if (plan_arguments(plan, args, words, &device_args) < 0) {
        PyObject *none = NULL;
        let_go(release, &none);
        return NULL;
    }
    Py_ssize_t nbytes = plan_bytes(plan, args);
    Took took;
    PyObject *queue = take(plan, value, nbytes, &took);
    if (queue == NULL || queue == Py_None) {
        Py_XDECREF(device_args);
        let_go(release, &queue);
        if (queue == NULL)
            return NULL;
        Py_DECREF(queue);
        return MISS;
    }
    /* from here the queue is taken: given back by after_run, whatever happens */
    double seconds = 0.0;  /* (UNTIMED: a kept call not sampled, when C holds the queue) */
    PyObject *result = call_planned(plan, words, device_args, took.held ? TIME_SAMPLED : TIME_ALWAYS,
                                    &seconds);
    return after_run(self, plan, queue, &took, release, result, seconds, nbytes);
}

/* -- configuration ------------------------------------------------------------------------ */
static PyObject *configure_async(PyObject *module, PyObject *args) {
    /* configure_async(AsyncResult[, WorkerQueue, QueueSet, RUNS, kept_within, record_kernel]) */
    PyObject *result_type, *worker = NULL, *queue_set = NULL, *runs = NULL, *record = NULL;
    double kept_within = 0.0;
    if (!PyArg_ParseTuple(args, "O!|O!O!O!dO", &PyType_Type, &result_type, &PyType_Type, &worker,
                          &PyType_Type, &queue_set, &PyDict_Type, &runs, &kept_within, &record))
        return NULL;
    if (configure_handle(result_type) < 0)
        return NULL;
    if (record == NULL)
        Py_RETURN_NONE;
    PyObject *take = PyObject_GetAttrString(queue_set, "take_at_once");
    if (take == NULL)
        return NULL;
    if (s_queues == NULL) {
#define NAME(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) { Py_DECREF(take); return NULL; }
        NAME(s_end_inline, "end_inline") NAME(s_queues, "_queues") NAME(s_inlines, "inlines") NAME(s_inline_below, "_inline_below")
        NAME(s_completed, "_completed") NAME(s_submitted, "_submitted")
        NAME(s_holds, "_holds") NAME(s_closed, "_closed") NAME(s_error, "_error")
        NAME(s_inline, "_inline") NAME(s_handed, "_handed") NAME(s_device, "device")
        NAME(s_device_queues, "queues")
#undef NAME
    }
    Py_XSETREF(g_take_at_once, take);
    Py_XSETREF(g_worker_queue, (PyTypeObject *)Py_NewRef(worker));
    PyObject *field_names[Q_FIELDS] = {s_inlines, s_inline_below, s_completed, s_submitted,
                                       s_holds, s_closed, s_error, s_inline,
                                       s_handed};
    for (int i = 0; i < Q_FIELDS; i++)
        slot_field_init(&g_queue_fields[i], (PyTypeObject *)worker, field_names[i]);
    Py_XSETREF(g_queue_set, (PyTypeObject *)Py_NewRef(queue_set));
    slot_field_init(&g_set_queues, (PyTypeObject *)queue_set, s_queues);
    Py_XSETREF(g_runs, Py_NewRef(runs));
    Py_XSETREF(g_record_kernel, Py_NewRef(record));
    g_kept_within = kept_within;
    /* the dicts watched: WorkerQueue's methods' globals (mapping.queues), WorkerQueue's
     * own dict, record_kernel's globals (mapping.inline) */
    PyObject *method = PyDict_GetItemString(((PyTypeObject *)worker)->tp_dict, "take_kernel");
    if (method == NULL || !PyFunction_Check(method) || !PyFunction_Check(record)) {
        PyErr_SetString(PyExc_TypeError, "configure_async: WorkerQueue.take_kernel and "
                        "record_kernel must be Python functions");
        return NULL;
    }
    PyObject *dicts[WATCHED_DICTS] = {PyFunction_GET_GLOBALS(method),
                                      ((PyTypeObject *)worker)->tp_dict, PyFunction_GET_GLOBALS(record)};
    for (int i = 0; i < WATCHED_DICTS; i++) {
        Py_XSETREF(g_watched[i], Py_NewRef(dicts[i]));
        g_watched_tags[i] = 0;
    }
    for (int i = 0; i < WATCHED_NAMES; i++)
        Py_XSETREF(g_watched_values[i], Py_XNewRef(PyDict_GetItemString(dicts[WATCHED[i].dict],
                                                                       WATCHED[i].name)));
    Py_RETURN_NONE;
}
