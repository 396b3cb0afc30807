/* pyacc/_queue_take.c.h: the queue of an async call run at once, taken and given back in
 * C, included by _fastcall.c (before _at_once.c.h, which runs the kernel between the two).
 *
 * Owns what ``QueueSet.take_at_once``, ``WorkerQueue.begin_inline``/``end_inline`` and
 * ``inline.predict_kernel``/``record_kernel`` do, done in C for an exact ``QueueSet`` and
 * ``WorkerQueue`` (API.md §5, last point; ``mapping/inline.py``): the queue of an async
 * value looked up (``queue_of``, memoized per version of the queues' dict), the kernel's
 * run record read (``read_run``) and its prediction against the queue's crossover, the
 * queue *held* while idle (``hold_idle``: its lock taken and kept for the kernel's run; no
 * count changes, see there), marked taken when the kernel failed (``mark_taken``), and the
 * run recorded (``record_run``). ``take_queue`` is the whole take.
 *
 * Invariants:
 *   - the C take runs only for an exact ``QueueSet`` (its own ``take_at_once``) and an
 *     exact ``WorkerQueue`` whose crossover and the kernel's record have the types the
 *     Python code writes (float; (float, int)), while none of the Python names it stands
 *     for was rebound (``python_unchanged``); any other case is left to the Python
 *     methods (``take_queue`` answers 2), so a queue is always given back by the side that
 *     took it;
 *   - the queue's fields are read and written in place (WorkerQueue's ``__slots__``)
 *     under its lock (the C lock of ``_table_lock.h`` taken in place; another kind
 *     through its bound ``acquire``/``release``), taken after the table's when both are
 *     held (the order of every path that holds both);
 *   - a queue held here is given back whatever happens, by its caller;
 *   - the GIL is held throughout, except while a lock waits.
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
