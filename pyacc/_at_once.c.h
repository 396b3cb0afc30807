/* pyacc/_at_once.c.h: an async call run at once by the express lane, included by _fastcall.c.
 *
 * OpenACC 3.3 §2.16.1 lets async work run asynchronously, not must: an ``async_=<int>``
 * call whose plan holds runs at once on the calling thread when its queue is idle and the
 * kernel is predicted below the queue's crossover (API.md §5, last point;
 * ``mapping/inline.py``). Owns ``run_plan_at_once``: the queue *held* in C for the
 * kernel's run (``hold_idle``: its lock taken and kept while the kernel runs, when
 * ``WorkerQueue.begin_inline``'s test finds it idle; no count changes, see there), the
 * run recorded as ``inline.record_kernel`` records it (``record_run``; a kept kernel call,
 * the same words after a short run, is timed one in 8 and its record kept in between:
 * ``TIME_SAMPLED``), the queue and the record looked up once per version of their dicts
 * (the plan's ``TakeMemo``), and the call's
 * ``AsyncResult`` (``_async_handle.c.h``); ``configure_async`` also tells
 * ``_queue_settled.c.h`` the queue types. A kernel
 * that fails marks the queue as ``begin_inline`` does (``mark_taken``) and leaves the
 * rest to ``self._ran_at_once`` (Python: the error kept for the covering wait,
 * ``WorkerQueue.end_inline``).
 *
 * Invariants:
 *   - the C path runs only for an exact ``QueueSet`` (its own ``take_at_once``) and an
 *     exact ``WorkerQueue`` whose crossover and the kernel's record have the types the
 *     Python code writes (float; (float, int)), while none of the Python names it stands
 *     for was rebound (``python_unchanged``); any other case asks the Python methods, so
 *     a queue is always given back by the side that took it;
 *   - the queue's fields are read and written in place (WorkerQueue's ``__slots__``)
 *     under its lock (the C lock of ``_table_lock.h`` taken in place; another kind
 *     through its bound ``acquire``/``release``), taken after the table's (the order of
 *     every path that holds both);
 *   - a queue held here is given back whatever happens;
 *   - events: the lane runs only when nobody subscribes (``BUS.silent``, checked by
 *     ``fastcall_call``); the run publishes none;
 *   - the GIL is held throughout, except while a lock waits and while the kernel runs
 *     (as its ``nogil`` asks). While the queue is held, Python code runs only where the
 *     kernel's call runs it (a profiler, the dispatcher): the queue's lock is re-entrant
 *     (``TableLock``, else ``threading.RLock``), so this thread's own calls on the queue
 *     go through, and other threads' wait for the run.
 */

static PyTypeObject *g_worker_queue;  /* mapping.queues.WorkerQueue (exact), or NULL */
static PyTypeObject *g_queue_set;     /* mapping.queues.QueueSet (exact), or NULL */
static PyObject *g_take_at_once;      /* QueueSet.take_at_once (the function) */
static PyObject *g_runs;              /* mapping.inline.RUNS: kernel -> (seconds, bytes) */
static PyObject *g_record_kernel;     /* mapping.inline.record_kernel (its globals are watched) */
static double g_kept_within;          /* mapping.inline._KEPT_WITHIN: a run this close keeps a record */
/* What the C take and give-back stand for, watched (``python_unchanged``): a name
 * rebound in one of these dicts (a test's spy, a patch) sends the calls to Python. */
enum { WATCHED_DICTS = 3, WATCHED_NAMES = 8 };
static PyObject *g_watched[WATCHED_DICTS];  /* queues' globals, WorkerQueue's dict, inline's globals */
static uint64_t g_watched_tags[WATCHED_DICTS];  /* their tags when last seen unchanged (0: none) */
static const struct { int dict; const char *name; } WATCHED[WATCHED_NAMES] = {
    {0, "record_kernel"}, {0, "predict_kernel"}, {1, "take_kernel"}, {1, "ran_at_once"},
    {1, "begin_inline"}, {1, "end_inline"}, {2, "RUNS"}, {2, "_KEPT_WITHIN"},
};
static PyObject *g_watched_values[WATCHED_NAMES];  /* their values at configure_async */
static PyObject *s_end_inline, *s_queues, *s_inlines, *s_inline_below, *s_completed, *s_submitted,
                *s_holds, *s_closed, *s_error, *s_inline, *s_handed, *s_device, *s_device_queues;
/* WorkerQueue's fields the take and give-back read and write: in place where they are
 * ``__slots__`` members (``mapping/_slot_fields.h``; the take runs for an exact WorkerQueue
 * only), else by name */
enum { Q_INLINES, Q_INLINE_BELOW, Q_COMPLETED, Q_SUBMITTED, Q_HOLDS, Q_CLOSED, Q_ERROR,
       Q_INLINE, Q_HANDED, Q_FIELDS };
static SlotField g_queue_fields[Q_FIELDS];
#define QUEUE_FIELD(name) (&g_queue_fields[Q_##name])
static SlotField g_set_queues;  /* QueueSet's ``_queues`` (its dict of queues): in place */

/* 1: every watched name still has its value of configure_async; 0: one was rebound;
 * -1: error. Memoized by the dicts' version tags (read again only when one changed). */
static int python_unchanged(void) {
    int same = 1;
    for (int i = 0; i < WATCHED_DICTS; i++)
        same &= g_watched_tags[i] != 0 && dict_tag(g_watched[i]) == g_watched_tags[i];
    if (same)
        return 1;
    uint64_t tags[WATCHED_DICTS];
    for (int i = 0; i < WATCHED_DICTS; i++)
        tags[i] = dict_tag(g_watched[i]);
    for (int i = 0; i < WATCHED_NAMES; i++) {
        PyObject *value = PyDict_GetItemString(g_watched[WATCHED[i].dict], WATCHED[i].name);
        if (value != g_watched_values[i])
            return 0;
    }
    memcpy(g_watched_tags, tags, sizeof tags);
    return 1;
}

/* The QueueSet of a bound ``take_at_once`` when it is an exact QueueSet's own method
 * (new reference), else NULL (the plan's async calls take and give back in Python). */
static PyObject *queue_set_of(PyObject *bound) {
    if (g_queue_set == NULL || !PyMethod_Check(bound) || PyMethod_GET_FUNCTION(bound) != g_take_at_once)
        return NULL;
    PyObject *owner = PyMethod_GET_SELF(bound);
    return Py_TYPE(owner) == g_queue_set ? Py_NewRef(owner) : NULL;
}

/* the truth of ``owner.<field>``: 1, 0, or -1 on error (a bool in place: read as is) */
static int field_true(PyObject *owner, const SlotField *field) {
    if (field->offset) {
        PyObject *held = *(PyObject **)((char *)owner + field->offset);
        if (held == Py_False || held == Py_True)
            return held == Py_True;
    }
    PyObject *value = slot_field_get(owner, field);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* A queue's lock (``queue._lock``), taken and given back as the table lock is
 * (``_table_lock.h``: its bound methods kept for the lock last seen; a release keeps a
 * pending exception). */
static TableLock g_queue_lock;

/* ``queue._lock.release()`` through the bound ``release`` that ``table_lock_take`` gave
 * (dropped here), a pending exception kept; -1 when the release itself failed */
static int give_queue_lock(PyObject *release) {
    int done = table_lock_give(release);
    Py_DECREF(release);
    return done;
}

/* ``inline.RUNS[kernel]`` read (the plan's memo while RUNS is unchanged): 1 with
 * ``*record``; 0: never measured; 2: a record of another shape (the Python code decides);
 * -1: error. */
static int read_run(ExpressPlan *plan, RunRecord *record) {
    uint64_t tag = dict_tag(g_runs);
    if (tag != 0 && tag == plan->taken.runs_tag) {
        *record = plan->taken.run;
        return 1;
    }
    PyObject *last = PyDict_GetItemWithError(g_runs, plan->kernel);
    if (last == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_CheckExact(last) || PyTuple_GET_SIZE(last) != 2 ||
            !PyFloat_CheckExact(PyTuple_GET_ITEM(last, 0)) || !PyLong_CheckExact(PyTuple_GET_ITEM(last, 1)))
        return 2;
    Py_ssize_t measured = PyLong_AsSsize_t(PyTuple_GET_ITEM(last, 1));
    if (measured == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 2;
    }
    record->seconds = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(last, 0));
    record->nbytes = measured;
    plan->taken.run = *record;
    plan->taken.runs_tag = tag;
    return 1;
}

/* The queue of async value ``value`` in a QueueSet's dict ``queues`` (borrowed; NULL:
 * none, or an error when one is set), read from ``memo`` while that dict is unchanged. */
static PyObject *queue_of(QueueMemo *memo, PyObject *queues, PyObject *value) {
    uint64_t tag = dict_tag(queues);
    int overflow = 1;
    long number = PyLong_CheckExact(value) ? PyLong_AsLongAndOverflow(value, &overflow) : 0;
    if (tag != 0 && !overflow && tag == memo->tag && queues == memo->dict && number == memo->number)
        return memo->queue;
    PyObject *found = PyDict_GetItemWithError(queues, value);
    if (found != NULL && tag != 0 && !overflow)
        *memo = (QueueMemo){tag, queues, number, found};
    return found;
}

/* ``inline.predict_kernel``'s prediction from a record: seconds if nbytes <= measured
 * else seconds * (nbytes / max(measured, 1)) */
static double predicted_of(const RunRecord *record, Py_ssize_t nbytes) {
    Py_ssize_t measured = record->nbytes;
    return nbytes <= measured ? record->seconds
        : record->seconds * ((double)nbytes / (double)(measured > 1 ? measured : 1));
}

/* 1 when ``owner.<field>`` is false, 0 when true, -1 on error */
static int field_false(PyObject *owner, const SlotField *field) {
    int truth = field_true(owner, field);
    return truth < 0 ? -1 : !truth;
}

/* ``WorkerQueue.begin_inline``'s test, its lock held: nothing queued or running
 * (``_completed == _submitted``), no unreported error, not held, not shut down, no
 * operation another caller runs at once (``_inline``). 1 idle, 0 not, -1 error. */
static int queue_idle(PyObject *queue) {
    int idle = -1;
    PyObject *completed = slot_field_get(queue, QUEUE_FIELD(COMPLETED));
    PyObject *submitted = completed ? slot_field_get(queue, QUEUE_FIELD(SUBMITTED)) : NULL;
    PyObject *error = submitted ? slot_field_get(queue, QUEUE_FIELD(ERROR)) : NULL;
    if (error != NULL) {
        idle = error != Py_None ? 0
            : completed == submitted ? 1 : PyObject_RichCompareBool(completed, submitted, Py_EQ);
        if (idle == 1)
            idle = field_false(queue, QUEUE_FIELD(HOLDS));
        if (idle == 1)
            idle = field_false(queue, QUEUE_FIELD(CLOSED));
        if (idle == 1)
            idle = field_false(queue, QUEUE_FIELD(INLINE));
    }
    Py_XDECREF(completed);
    Py_XDECREF(submitted);
    Py_XDECREF(error);
    return idle;
}

/* The queue's lock taken, and kept while the queue is idle (``queue_idle``): 1 with
 * ``*release`` (the caller runs its kernel now, the lock held, then gives it back:
 * ``give_queue_lock``); 0 not idle (given back); -1 error (nothing held).
 *
 * Held, the queue needs no count (``begin_inline``'s ``_inline`` and ``_submitted``):
 * nobody can queue on it, hold it, close it or wait for it (each takes the lock first),
 * and its worker sleeps or waits for the lock. A host thread that reads the counts
 * without the lock (``settled``, ``is_idle``, ``acc.async_test``) sees the queue idle:
 * the call has not returned, so nothing ordered that read after it (the call's
 * operation is complete when it returns: OpenACC 3.3 §2.16.1 allows it). */
static int hold_idle(PyObject *queue, PyObject **release) {
    if (table_lock_take(&g_queue_lock, queue, release) < 0)
        return -1;
    int idle = queue_idle(queue);
    if (idle != 1) {
        if (give_queue_lock(*release) < 0)
            idle = -1;
        *release = NULL;
    }
    return idle;
}

/* The kernel run with the queue held failed: the queue is marked as ``begin_inline``
 * marks it (``_inline``, one more submitted), its lock still held, so that
 * ``WorkerQueue.ran_at_once`` (Python: the error kept for the covering wait) gives it
 * back as it gives back a queue taken in Python. -1 on error (nothing marked). */
static int mark_taken(PyObject *queue) {
    PyObject *submitted = slot_field_get(queue, QUEUE_FIELD(SUBMITTED));
    PyObject *next = submitted == NULL ? NULL : PyNumber_Add(submitted, g_one);
    Py_XDECREF(submitted);
    int done = next == NULL ? -1 : slot_field_set(queue, QUEUE_FIELD(INLINE), Py_True);
    if (done == 0 && slot_field_set(queue, QUEUE_FIELD(SUBMITTED), next) < 0) {
        slot_field_set(queue, QUEUE_FIELD(INLINE), Py_False);
        done = -1;
    }
    Py_XDECREF(next);
    return done;
}

/* The plan's queue for ``value``, held in C (``hold_idle``): 1 (``*queue``, a new
 * reference; ``*held``, its lock's release; ``*last``, the kernel's run record;
 * ``*below_seconds``, the queue's crossover), 0 not held (no such queue, not idle,
 * predicted too long: the call is queued), 2 the Python ``take_at_once`` decides
 * (another kind of queue or record), -1 error. */
static int take_queue(ExpressPlan *plan, PyObject *value, Py_ssize_t nbytes, PyObject **queue,
                      PyObject **held, RunRecord *last, double *below_seconds) {
    *queue = *held = NULL;
    int unchanged = python_unchanged();
    if (unchanged != 1)
        return unchanged < 0 ? -1 : 2;
    if (Py_TYPE(plan->queue_set) != g_queue_set)  /* (g_set_queues is that type's field) */
        return 2;
    PyObject *queues = slot_field_get(plan->queue_set, &g_set_queues);
    if (queues == NULL)
        return -1;
    if (!PyDict_CheckExact(queues)) {
        Py_DECREF(queues);
        return 2;
    }
    PyObject *found = queue_of(&plan->taken.queue, queues, value);
    Py_XINCREF(found);
    Py_DECREF(queues);
    if (found == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int taken = 2;
    if (Py_TYPE(found) == g_worker_queue) {
        taken = field_true(found, QUEUE_FIELD(INLINES));
        if (taken == 1)
            taken = read_run(plan, last);
        if (taken == 1) {
            PyObject *below = slot_field_get(found, QUEUE_FIELD(INLINE_BELOW));
            if (below == NULL)
                taken = -1;
            else if (!PyFloat_CheckExact(below))
                taken = 2;
            else if (!(predicted_of(last, nbytes) < (*below_seconds = PyFloat_AS_DOUBLE(below))))
                taken = 0;
            Py_XDECREF(below);
        }
        if (taken == 1)
            taken = hold_idle(found, held);
    }
    if (taken == 1)
        *queue = found;
    else
        Py_DECREF(found);
    return taken;
}

/* ``inline.record_kernel(kernel, seconds, nbytes, True, below)`` for a kernel run at once
 * with its queue held in C: ``last`` the record ``take_queue`` read (another thread's
 * record meanwhile is overwritten: a prediction is only an optimization), ``below`` the
 * queue's crossover; -1 on error */
static int record_run(ExpressPlan *plan, double seconds, Py_ssize_t nbytes, const RunRecord *last,
                      double below) {
    double predicted = predicted_of(last, nbytes);
    if (seconds > predicted && 2.0 * predicted < seconds)
        seconds = 2.0 * predicted;  /* a longer run at once at most doubles it */
    double kept = g_kept_within * last->seconds;
    if (nbytes == last->nbytes && seconds - last->seconds <= kept && last->seconds - seconds <= kept
            && (seconds < below) == (last->seconds < below))
        return 0;  /* close to the record, on its side of the crossover: kept */
    PyObject *run = PyTuple_New(2);  /* (seconds, nbytes): as Py_BuildValue("(dn)"), faster */
    if (run == NULL)
        return -1;
    PyObject *items[2] = {PyFloat_FromDouble(seconds), PyLong_FromSsize_t(nbytes)};
    for (int i = 0; i < 2; i++) {
        if (items[i] == NULL) {
            Py_XDECREF(items[1 - i]);
            Py_DECREF(run);
            return -1;
        }
    }
    PyTuple_SET_ITEM(run, 0, items[0]);
    PyTuple_SET_ITEM(run, 1, items[1]);
    int done = PyDict_SetItem(g_runs, plan->kernel, run);
    Py_DECREF(run);
    if (done == 0) {  /* the memo follows the record written (the tag it left) */
        plan->taken.run = (RunRecord){seconds, nbytes};
        plan->taken.runs_tag = dict_tag(g_runs);
    }
    return done;
}

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

/* The plan's call with ``async_=value``, run at once on this thread when its queue is
 * idle and the kernel predicted short (taken with the table held): its AsyncResult (the
 * kernel's error is kept for the covering wait, by ``self._ran_at_once``); MISS when a
 * check fails or the queue is not taken; NULL on error. */
static PyObject *run_plan_at_once(PyObject *self, ExpressPlan *plan, PyObject *args,
                                  PyObject *value) {
    if (plan->take_at_once == NULL)
        return MISS;
    PyObject *release;
    int ok = enter_plan(plan, args, &release);
    if (ok != 1)
        return ok == 0 ? MISS : NULL;
    /* the kernel's arguments and its prepared call, before the queue is taken (an
     * interrupt while preparing is raised here, nothing taken) and the kernel timed */
    PyObject *device_args = kernel_arguments(plan, args);
    PreparedCall *prepared = &plan->prepared;
    if (device_args == NULL || ensure_prepared(prepared, plan->kernel, device_args) < 0) {
        PyObject *none = NULL;
        Py_XDECREF(device_args);
        let_go(release, &none);
        return NULL;
    }
    Py_ssize_t nbytes = plan_bytes(plan, args);
    PyObject *result = NULL;
    Took took;
    PyObject *queue = take(plan, value, nbytes, &took);
    if (queue == NULL || queue == Py_None) {
        Py_DECREF(device_args);
        let_go(release, &queue);
        if (queue == NULL)
            return NULL;
        Py_DECREF(queue);
        return MISS;
    }
    /* from here the queue is taken: given back below, whatever happens */
    double seconds = 0.0;  /* (UNTIMED: a kept call not sampled, when C holds the queue) */
    count_launch(plan);
    result = call_kernel(prepared, plan->kernel, device_args, took.held ? TIME_SAMPLED : TIME_ALWAYS,
                         &seconds);
    Py_DECREF(device_args);
    if (took.held != NULL) {
        int ran = give_back_held(took.held, queue, release, &result);
        if (ran == 1) {  /* the common case: record_kernel; AsyncResult */
            PyObject *done = seconds != UNTIMED && record_run(plan, seconds, nbytes, &took.last,
                                                              took.below) < 0
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
    PyObject *took_seconds = PyFloat_FromDouble(seconds == UNTIMED ? took.last.seconds : seconds);
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
