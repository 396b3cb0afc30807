/* pyacc/_at_once.c.h: an async call run at once by the express lane, included by _fastcall.c.
 *
 * OpenACC 3.3 §2.16.1 lets async work run asynchronously, not must: an ``async_=<int>``
 * call whose plan holds runs at once on the calling thread when its queue is idle and the
 * kernel is predicted below the queue's crossover (API.md §5, last point;
 * ``mapping/inline.py``). Owns ``run_plan_at_once`` and the queue's *take* and *give-back*
 * done in C: what ``QueueSet.take_at_once`` (``WorkerQueue.take_kernel``,
 * ``inline.predict_kernel``, ``WorkerQueue.begin_inline``) and ``WorkerQueue.ran_at_once``
 * (``inline.record_kernel``, ``WorkerQueue.end_inline``) do in Python, step for step, on
 * the same attributes (read and written in place: WorkerQueue's ``__slots__``) under the
 * same lock (the queue's ``_lock``, the C lock of ``_table_lock.h`` taken in place; another
 * kind through its bound ``acquire``/``release``); and the call's ``AsyncResult``,
 * made without its Python ``__init__`` (its two slots set; ``configure_async``). Also owns
 * ``wait_settled``: whether a host wait has nothing to do (``QueueSet.settled`` read in
 * C, for ``acc.wait``'s C entry, ``_routine_lane.c.h``).
 *
 * Invariants:
 *   - the C take and give-back run only for an exact ``QueueSet`` (its own
 *     ``take_at_once``) and an exact ``WorkerQueue`` whose crossover and the kernel's
 *     prediction have the types the Python code writes (float; (float, int)); any other
 *     case asks the Python methods, so a queue is always given back by the side that
 *     took it;
 *   - a queue taken here is given back whatever happens (the kernel's error is kept by
 *     ``self._ran_at_once``, in Python, for the covering wait: the rare case);
 *   - events: the lane runs only when nobody subscribes (``BUS.silent``, checked by
 *     ``fastcall_call``); neither the take nor the give-back publishes any;
 *   - the GIL is held throughout, except while the queue's lock waits; no Python code
 *     runs between reading a queue's counts and writing them (the lock held), except a
 *     ``_notify()`` of the queue when a thread waits or work was queued meanwhile.
 */

static PyTypeObject *g_worker_queue;  /* mapping.queues.WorkerQueue (exact), or NULL */
static PyTypeObject *g_queue_set;     /* mapping.queues.QueueSet (exact), or NULL */
static PyObject *g_take_at_once;      /* QueueSet.take_at_once (the function) */
static PyObject *g_runs;              /* mapping.inline.RUNS: kernel -> (seconds, bytes) */
static PyObject *g_record_kernel;     /* mapping.inline.record_kernel (records of another shape) */
static Py_ssize_t g_kept;             /* mapping.inline._KEPT: RUNS is cleared when full */
static PyObject *g_result_slots[2];   /* AsyncResult's _queue and _value slots, or NULL */
/* What the C take and give-back stand for, watched (``python_unchanged``): a name
 * rebound in one of these dicts (a test's spy, a patch) sends the calls to Python. */
enum { WATCHED_DICTS = 3, WATCHED_NAMES = 8 };
static PyObject *g_watched[WATCHED_DICTS];  /* queues' globals, WorkerQueue's dict, inline's globals */
static uint64_t g_watched_tags[WATCHED_DICTS];  /* their tags when last seen unchanged (0: none) */
static const struct { int dict; const char *name; } WATCHED[WATCHED_NAMES] = {
    {0, "record_kernel"}, {0, "predict_kernel"}, {1, "take_kernel"}, {1, "ran_at_once"},
    {1, "begin_inline"}, {1, "end_inline"}, {2, "RUNS"}, {2, "_KEPT"},
};
static PyObject *g_watched_values[WATCHED_NAMES];  /* their values at configure_async */
static PyObject *s_queues, *s_inlines, *s_inline_below, *s_completed, *s_submitted,
                *s_holds, *s_closed, *s_error, *s_inline, *s_waiters, *s_operations,
                *s_notify, *s_handed, *s_device, *s_device_queues;
/* WorkerQueue's fields the take and give-back read and write: in place where they are
 * ``__slots__`` members (``mapping/_slot_fields.h``; the take runs for an exact WorkerQueue
 * only), else by name */
enum { Q_INLINES, Q_INLINE_BELOW, Q_COMPLETED, Q_SUBMITTED, Q_HOLDS, Q_CLOSED, Q_ERROR,
       Q_INLINE, Q_WAITERS, Q_OPERATIONS, Q_HANDED, Q_FIELDS };
static SlotField g_queue_fields[Q_FIELDS];
#define QUEUE_FIELD(name) (&g_queue_fields[Q_##name])

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

/* the truth of ``owner.<field>``: 1, 0, or -1 on error */
static int field_true(PyObject *owner, const SlotField *field) {
    PyObject *value = slot_field_get(owner, field);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* ``owner.<field> += 1`` (the caller holds the lock that guards it); -1 on error */
static int field_increment(PyObject *owner, const SlotField *field) {
    PyObject *value = slot_field_get(owner, field);
    if (value == NULL)
        return -1;
    PyObject *next = PyNumber_Add(value, g_one);
    Py_DECREF(value);
    if (next == NULL)
        return -1;
    int done = slot_field_set(owner, field, next);
    Py_DECREF(next);
    return done;
}

/* ``owner.name()``; -1 on error */
static int call_method(PyObject *owner, PyObject *name) {
    PyObject *done = PyObject_VectorcallMethod(name, &owner, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
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

/* ``inline.predict_kernel(kernel, nbytes)``: 1 with ``*predicted``; 0: never measured;
 * 2: a record of another shape (the Python code decides); -1: error. */
static int predict(PyObject *kernel, Py_ssize_t nbytes, double *predicted) {
    PyObject *last = PyDict_GetItemWithError(g_runs, kernel);
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
    double seconds = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(last, 0));
    /* seconds if nbytes <= measured else seconds * (nbytes / max(measured, 1)) */
    *predicted = nbytes <= measured ? seconds
        : seconds * ((double)nbytes / (double)(measured > 1 ? measured : 1));
    return 1;
}

/* ``end_inline``'s work, its lock held: not running, one more completed, waiters woken
 * (a synchronize, work queued or a close meanwhile: ``queue._notify()``); -1 on error */
static int end_taken(PyObject *queue) {
    if (slot_field_set(queue, QUEUE_FIELD(INLINE), Py_False) < 0 ||
            field_increment(queue, QUEUE_FIELD(COMPLETED)) < 0)
        return -1;
    int wake = field_true(queue, QUEUE_FIELD(WAITERS));
    if (wake == 0)
        wake = field_true(queue, QUEUE_FIELD(OPERATIONS));
    if (wake == 0)  /* a close meanwhile: the worker finishes */
        wake = field_true(queue, QUEUE_FIELD(CLOSED));
    if (wake != 1)
        return wake;
    return call_method(queue, s_notify);
}

/* ``WorkerQueue.begin_inline``: 1 taken, 0 not, -1 error (nothing taken) */
static int begin_inline(PyObject *queue) {
    PyObject *release;
    if (table_lock_take(&g_queue_lock, queue, &release) < 0)
        return -1;
    int taken = -1;
    PyObject *completed = slot_field_get(queue, QUEUE_FIELD(COMPLETED));
    PyObject *submitted = completed ? slot_field_get(queue, QUEUE_FIELD(SUBMITTED)) : NULL;
    PyObject *error = submitted ? slot_field_get(queue, QUEUE_FIELD(ERROR)) : NULL;
    if (error != NULL) {
        int busy = PyObject_RichCompareBool(completed, submitted, Py_NE);
        if (busy == 0)
            busy = field_true(queue, QUEUE_FIELD(HOLDS));
        if (busy == 0)
            busy = field_true(queue, QUEUE_FIELD(CLOSED));
        if (busy == 0)
            busy = error != Py_None;
        if (busy == 0)
            busy = field_true(queue, QUEUE_FIELD(INLINE));
        if (busy == 0) {
            PyObject *next = PyNumber_Add(submitted, g_one);  /* (before any write) */
            if (next != NULL && slot_field_set(queue, QUEUE_FIELD(INLINE), Py_True) == 0) {
                if (slot_field_set(queue, QUEUE_FIELD(SUBMITTED), next) == 0)
                    taken = 1;
                else  /* (not taken after all) */
                    slot_field_set(queue, QUEUE_FIELD(INLINE), Py_False);
            }
            Py_XDECREF(next);
        } else if (busy == 1) {
            taken = 0;
        }
    }
    Py_XDECREF(completed);
    Py_XDECREF(submitted);
    Py_XDECREF(error);
    if (give_queue_lock(release) < 0 && taken == 1) {  /* (not with a lock this thread holds) */
        end_taken(queue);
        taken = -1;
    }
    return taken;
}

/* The plan's queue for ``value``, taken in C: 1 (``*queue``, a new reference), 0 not
 * taken (no such queue, not idle, predicted too long: the call is queued), 2 the Python
 * ``take_at_once`` decides (another kind of queue or record), -1 error. */
static int take_queue(ExpressPlan *plan, PyObject *value, Py_ssize_t nbytes, PyObject **queue) {
    *queue = NULL;
    int unchanged = python_unchanged();
    if (unchanged != 1)
        return unchanged < 0 ? -1 : 2;
    PyObject *queues = PyObject_GetAttr(plan->queue_set, s_queues);
    if (queues == NULL)
        return -1;
    if (!PyDict_CheckExact(queues)) {
        Py_DECREF(queues);
        return 2;
    }
    PyObject *found = PyDict_GetItemWithError(queues, value);
    Py_XINCREF(found);
    Py_DECREF(queues);
    if (found == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int taken = 2;
    if (Py_TYPE(found) == g_worker_queue) {
        double predicted = 0.0;
        taken = field_true(found, QUEUE_FIELD(INLINES));
        if (taken == 1)
            taken = predict(plan->kernel, nbytes, &predicted);
        if (taken == 1) {
            PyObject *below = slot_field_get(found, QUEUE_FIELD(INLINE_BELOW));
            if (below == NULL)
                taken = -1;
            else if (!PyFloat_CheckExact(below))
                taken = 2;
            else if (!(predicted < PyFloat_AS_DOUBLE(below)))
                taken = 0;
            Py_XDECREF(below);
        }
        if (taken == 1)
            taken = begin_inline(found);
    }
    if (taken == 1)
        *queue = found;
    else
        Py_DECREF(found);
    return taken;
}

/* ``inline.record_kernel(kernel, seconds, nbytes, at_once=True)``; -1 on error */
static int record_run(PyObject *kernel, double seconds, Py_ssize_t nbytes) {
    double predicted;
    int known = predict(kernel, nbytes, &predicted);
    if (known < 0)
        return -1;
    if (known == 2) {  /* a record of another shape: the Python code reads it */
        PyObject *done = PyObject_CallFunction(g_record_kernel, "OdnO", kernel, seconds, nbytes,
                                               Py_True);
        Py_XDECREF(done);
        return done == NULL ? -1 : 0;
    }
    if (known == 0 && PyDict_GET_SIZE(g_runs) >= g_kept)
        PyDict_Clear(g_runs);
    if (known == 1 && seconds > predicted && 2.0 * predicted < seconds)
        seconds = 2.0 * predicted;  /* a longer run at once at most doubles it */
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
    int done = PyDict_SetItem(g_runs, kernel, run);
    Py_DECREF(run);
    return done;
}

/* ``WorkerQueue.end_inline()`` of a queue ``begin_inline`` took; -1 on error (the counts
 * are written first: the queue is given back even then) */
static int end_inline(PyObject *queue) {
    PyObject *release;
    if (table_lock_take(&g_queue_lock, queue, &release) < 0)
        return -1;
    int done = end_taken(queue);
    if (give_queue_lock(release) < 0)
        done = -1;
    return done;
}

/* ``AsyncResult(queue, value)``: its two slots set (its __init__ sets nothing else) */
static PyObject *async_result(PyObject *queue, PyObject *value) {
    PyTypeObject *type = (PyTypeObject *)g_async_result;
    if (g_result_slots[0] == NULL)
        return PyObject_CallFunctionObjArgs(g_async_result, queue, value, NULL);
    PyObject *result = type->tp_alloc(type, 0);
    if (result == NULL)
        return NULL;
    for (int i = 0; i < 2; i++) {
        PyObject *slot = g_result_slots[i];
        if (Py_TYPE(slot)->tp_descr_set(slot, result, i ? value : queue) < 0) {
            Py_DECREF(result);
            return NULL;
        }
    }
    return result;
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

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);  /* time.perf_counter's clock on Linux */
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The queue for ``value`` taken (``take_queue``, else the Python ``take_at_once``): the
 * queue (``*in_c``: whether C took it, so gives it back), Py_None when not taken, NULL
 * on error. */
static PyObject *take(ExpressPlan *plan, PyObject *value, Py_ssize_t nbytes, int *in_c) {
    PyObject *queue = NULL;
    int taken = plan->queue_set == NULL ? 2 : take_queue(plan, value, nbytes, &queue);
    *in_c = taken == 1;
    if (taken == 1)
        return queue;
    if (taken == 0)
        Py_RETURN_NONE;
    if (taken < 0)
        return NULL;
    return PyObject_CallFunction(plan->take_at_once, "OOn", value, plan->kernel, nbytes);
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
    int in_c;
    PyObject *queue = take(plan, value, nbytes, &in_c);
    if (queue == NULL || queue == Py_None) {
        Py_DECREF(device_args);
        let_go(release, &queue);
        if (queue == NULL)
            return NULL;
        Py_DECREF(queue);
        return MISS;
    }
    /* from here the queue is taken: given back below, whatever happens */
    PyObject *error = NULL;
    double seconds = 0.0;
    if (count_launch(plan) == 0) {
        double start = now();
        result = call_kernel(prepared, plan->kernel, device_args);
        seconds = now() - start;
    }
    Py_DECREF(device_args);
    let_go(release, &result);
    PyObject *done = NULL;
    if (result != NULL && in_c) {  /* it ran: record_kernel, end_inline; AsyncResult */
        int recorded = record_run(plan->kernel, seconds, nbytes);
        if (end_inline(queue) == 0 && recorded == 0)
            done = async_result(queue, result);
        Py_DECREF(queue);
        Py_DECREF(result);
        return done;
    }
    if (result == NULL) {  /* the kernel's error (or the lane's): kept, not raised here */
        PyObject *type, *traceback;
        PyErr_Fetch(&type, &error, &traceback);
        PyErr_NormalizeException(&type, &error, &traceback);
        if (traceback != NULL && error != NULL)
            PyException_SetTraceback(error, traceback);
        Py_XDECREF(type);
        Py_XDECREF(traceback);
    }
    PyObject *took = PyFloat_FromDouble(seconds);
    PyObject *size = PyLong_FromSsize_t(nbytes);
    if (took != NULL && size != NULL) {
        if (result != NULL) {
            /* it ran: queue.ran_at_once(...) gives the queue back; AsyncResult(queue, value) */
            PyObject *given = PyObject_CallMethodObjArgs(queue, s_queue_ran_at_once, plan->kernel,
                                                         took, size, Py_None, Py_None, NULL);
            if (given != NULL) {
                Py_DECREF(given);
                done = async_result(queue, result);
            }
        } else {  /* it failed: self._ran_at_once keeps the error for the covering wait */
            done = PyObject_CallMethodObjArgs(self, s_ran_at_once, queue, plan->kernel, took,
                                              size, Py_None, error ? error : Py_None, NULL);
        }
    }
    Py_XDECREF(took);
    Py_XDECREF(size);
    Py_DECREF(queue);
    Py_XDECREF(result);
    Py_XDECREF(error);
    return done;
}

/* -- a host wait with nothing to do: its queues settled, seen in C ------------------------ */
/* ``WorkerQueue.settled()`` of an exact WorkerQueue whose work was not handed to its
 * worker since the last wait (that case adapts the crossover: the Python wait's): 1
 * settled (idle: ``_completed`` read first, as ``is_idle`` does; no error), 0 not, or not
 * known here; -1 error. */
static int queue_settled(PyObject *queue) {
    if (Py_TYPE(queue) != g_worker_queue)
        return 0;
    PyObject *completed = slot_field_get(queue, QUEUE_FIELD(COMPLETED));
    PyObject *submitted = completed ? slot_field_get(queue, QUEUE_FIELD(SUBMITTED)) : NULL;
    PyObject *error = submitted ? slot_field_get(queue, QUEUE_FIELD(ERROR)) : NULL;
    int settled = error == NULL ? -1 : error != Py_None ? 0
        : completed == submitted ? 1 : PyObject_RichCompareBool(completed, submitted, Py_EQ);
    if (settled == 1) {
        int handed = field_true(queue, QUEUE_FIELD(HANDED));
        settled = handed < 0 ? -1 : !handed;
    }
    Py_XDECREF(completed);
    Py_XDECREF(submitted);
    Py_XDECREF(error);
    return settled;
}

/* ``QueueSet.settled(numbers)`` over the exact QueueSet's dict of queues ``queues``:
 * every number a plain int >= 0 whose queue was never made or is settled (none: every
 * queue); 1, 0 (not, or not known here), -1 error */
static int numbers_settled(PyObject *queues, PyObject *const *numbers, Py_ssize_t count) {
    if (count == 0) {  /* every queue: over a copy (reading a queue may run Python code) */
        PyObject *all = PyDict_Values(queues);
        int settled = all == NULL ? -1 : 1;
        for (Py_ssize_t i = 0; settled == 1 && i < PyList_GET_SIZE(all); i++)
            settled = queue_settled(PyList_GET_ITEM(all, i));
        Py_XDECREF(all);
        return settled;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int overflow;
        if (!PyLong_CheckExact(numbers[i]) || PyLong_AsLongAndOverflow(numbers[i], &overflow) < 0 ||
                overflow)
            return PyErr_Occurred() ? -1 : 0;
        PyObject *queue = PyDict_GetItemWithError(queues, numbers[i]);
        if (queue == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;  /* never made: nothing to wait for */
        }
        Py_INCREF(queue);
        int settled = queue_settled(queue);
        Py_DECREF(queue);
        if (settled != 1)
            return settled;
    }
    return 1;
}

/* Whether a host wait for ``numbers`` on ``runtime``'s device has nothing to do: its
 * queues (``device.queues``, remembered for the runtime last waited on) an exact QueueSet,
 * ``numbers_settled``; 1, 0 (the Python wait decides), -1 error. */
static PyObject *g_waited_runtime, *g_waited_set;  /* the runtime last waited on, its QueueSet */

static int wait_settled(PyObject *runtime, PyObject *const *numbers, Py_ssize_t count) {
    if (g_queue_set == NULL)
        return 0;
    PyObject *set;
    if (runtime == g_waited_runtime) {  /* (a runtime's device, and its queues, never change) */
        set = Py_NewRef(g_waited_set);
    } else {
        PyObject *device = PyObject_GetAttr(runtime, s_device);
        set = device == NULL ? NULL : PyObject_GetAttr(device, s_device_queues);
        Py_XDECREF(device);
        if (set == NULL)
            return -1;
        Py_XSETREF(g_waited_runtime, Py_NewRef(runtime));
        Py_XSETREF(g_waited_set, Py_NewRef(set));
    }
    int settled = 0;
    if (Py_TYPE(set) == g_queue_set) {
        PyObject *queues = PyObject_GetAttr(set, s_queues);
        settled = queues == NULL ? -1 : PyDict_CheckExact(queues) ? numbers_settled(queues, numbers, count) : 0;
        Py_XDECREF(queues);
    }
    Py_DECREF(set);
    return settled;
}

/* -- configuration ------------------------------------------------------------------------ */
static PyObject *configure_async(PyObject *module, PyObject *args) {
    /* configure_async(AsyncResult[, WorkerQueue, QueueSet, RUNS, kept, record_kernel]) */
    PyObject *result_type, *worker = NULL, *queue_set = NULL, *runs = NULL, *record = NULL;
    Py_ssize_t kept = 0;
    if (!PyArg_ParseTuple(args, "O!|O!O!O!nO", &PyType_Type, &result_type, &PyType_Type, &worker,
                          &PyType_Type, &queue_set, &PyDict_Type, &runs, &kept, &record))
        return NULL;
    Py_XSETREF(g_async_result, Py_NewRef(result_type));
    for (int i = 0; i < 2; i++) {  /* its slots, when they are plain member slots */
        PyObject *slot = PyObject_GetAttrString(result_type, i ? "_value" : "_queue");
        if (slot == NULL)
            PyErr_Clear();
        else if (Py_TYPE(slot) != &PyMemberDescr_Type)
            Py_CLEAR(slot);
        Py_XSETREF(g_result_slots[i], slot);
    }
    if (g_result_slots[0] == NULL || g_result_slots[1] == NULL) {  /* then: called */
        Py_CLEAR(g_result_slots[0]);
        Py_CLEAR(g_result_slots[1]);
    }
    if (record == NULL)
        Py_RETURN_NONE;
    PyObject *take = PyObject_GetAttrString(queue_set, "take_at_once");
    if (take == NULL)
        return NULL;
    if (s_queues == NULL) {
#define NAME(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) { Py_DECREF(take); return NULL; }
        NAME(s_queues, "_queues") NAME(s_inlines, "inlines") NAME(s_inline_below, "_inline_below")
        NAME(s_completed, "_completed") NAME(s_submitted, "_submitted")
        NAME(s_holds, "_holds") NAME(s_closed, "_closed") NAME(s_error, "_error")
        NAME(s_inline, "_inline") NAME(s_waiters, "_waiters") NAME(s_operations, "_operations")
        NAME(s_notify, "_notify") NAME(s_handed, "_handed") NAME(s_device, "device")
        NAME(s_device_queues, "queues")
#undef NAME
    }
    Py_XSETREF(g_take_at_once, take);
    Py_XSETREF(g_worker_queue, (PyTypeObject *)Py_NewRef(worker));
    PyObject *field_names[Q_FIELDS] = {s_inlines, s_inline_below, s_completed, s_submitted,
                                       s_holds, s_closed, s_error, s_inline, s_waiters, s_operations,
                                       s_handed};
    for (int i = 0; i < Q_FIELDS; i++)
        slot_field_init(&g_queue_fields[i], (PyTypeObject *)worker, field_names[i]);
    Py_XSETREF(g_queue_set, (PyTypeObject *)Py_NewRef(queue_set));
    Py_XSETREF(g_runs, Py_NewRef(runs));
    Py_XSETREF(g_record_kernel, Py_NewRef(record));
    g_kept = kept;
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
