/* pyacc/_queue_settled.c.h: whether a host wait has nothing to do, included by _fastcall.c
 * after _at_once.c.h (whose ``configure_async`` gives it the queue types and fields).
 *
 * Owns ``wait_settled``: ``QueueSet.settled`` read in C, for ``acc.wait``'s C entry
 * (``_routine_lane.c.h``): every queue waited for is an exact ``WorkerQueue`` that is idle
 * (``_completed`` read first, as ``is_idle`` does), has no error to report and had no
 * work handed to its worker since the last wait (that case adapts the crossover: the
 * Python wait's). Anything else is the Python wait's to decide.
 *
 * Invariants: reads only (no lock: as ``WorkerQueue.settled``); the runtime last waited on
 * and its QueueSet are remembered (a runtime's device, and its queues, never change).
 */

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

/* Whether ``value`` is a queue number the C entries read: an exact int >= 0 that fits a C
 * long (anything else is the Python function's to resolve or refuse). */
static int is_queue_number(PyObject *value) {
    int overflow;
    return PyLong_CheckExact(value) && PyLong_AsLongAndOverflow(value, &overflow) >= 0 && !overflow;
}

static QueueMemo g_waited_queue;  /* the queue a wait last looked up (``queue_of``) */

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
        if (!is_queue_number(numbers[i]))
            return 0;
        PyObject *queue = queue_of(&g_waited_queue, queues, numbers[i]);
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
        PyObject *queues = slot_field_get(set, &g_set_queues);
        settled = queues == NULL ? -1 : PyDict_CheckExact(queues) ? numbers_settled(queues, numbers, count) : 0;
        Py_XDECREF(queues);
    }
    Py_DECREF(set);
    return settled;
}
