/* pyacc/_call_queue.c.h: which queue a compute call runs on, what it waits for first, and
 * whether its if clause sends it to the device;
 * included by _fastcall.c after _routine_lane.c.h (``waits_for_nothing``).
 *
 * Owns ``resolve_queue`` (``acc.async_noval``: the thread's default queue, remembered per
 * thread and context epoch) and ``is_async_sync``; ``waits_settled``: whether the queues a
 * call waits for first (its ``wait=``, or its region's constant ``wait`` clause,
 * ``FastCall``'s ``_clause_wait``) have nothing pending (OpenACC 3.3 §2.16.1, §2.16.2); and
 * ``condition_holds``: whether a region's ``if`` clause, an expression, is true (§2.5.6).
 *
 * Invariants: reads only, except ``condition_holds``, which runs the clause's expression (a
 * Python function of the arguments); anything it cannot tell is the Python launcher's to
 * decide (it answers NULL or 0 without an exception set, except an interrupt, which
 * propagates).
 */

/* The calling thread's default queue (``ICVS.default_async``), a new reference, or NULL
 * (no error set) when the ICVs cannot say. Remembered per thread and context epoch, as
 * the thread's runtime is (``_thread_runtime.c.h``): ``default_async`` is watched
 * (``_ThreadICVs._WATCHED``: each change bumps the epoch). */
static uint64_t g_default_thread, g_default_read_at;
static PyObject *g_default_queue;

static PyObject *default_queue(void) {
    uint64_t thread = thread_id(), epoch = g_context_epoch;
    if (g_remember && g_default_queue != NULL && g_default_thread == thread && g_default_read_at == epoch)
        return Py_NewRef(g_default_queue);
    PyObject *queue = g_icvs == NULL ? NULL : PyObject_GetAttr(g_icvs, s_default_async);
    if (queue == NULL || !PyLong_CheckExact(queue)) {
        Py_XDECREF(queue);
        PyErr_Clear();
        return NULL;
    }
    Py_XSETREF(g_default_queue, Py_NewRef(queue));
    g_default_thread = thread;
    g_default_read_at = epoch;  /* (read before the attribute read, which may run Python code) */
    return queue;
}

/* ``value`` (an int) resolved to the queue it names, a new reference: the calling thread's
 * default queue (``ICVS.default_async``, ``acc.set_default_async``) for
 * ``acc.async_noval`` (OpenACC 3.3 §2.16.1), else ``value`` itself; NULL (no error set)
 * when the ICVs cannot say (the Python launcher resolves it). */
static PyObject *resolve_queue(PyObject *value) {
    int overflow;
    long number = PyLong_AsLongAndOverflow(value, &overflow);
    if (number == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    return overflow || number != ASYNC_NOVAL ? Py_NewRef(value) : default_queue();
}

/* Whether ``value`` (an exact int) is ``acc.async_sync``: a call given it is synchronous,
 * whatever its region's async clause (OpenACC 3.3 §2.16.1). */
static int is_async_sync(PyObject *value) {
    int overflow;
    long number = PyLong_AsLongAndOverflow(value, &overflow);
    return !overflow && number == ASYNC_SYNC;  /* (an exact int: no error) */
}

/* After a check that raised: 0 with an ``Exception`` cleared (the Python launcher decides,
 * and reports what it finds), -1 with anything else (an interrupt propagates). */
static int launchers_to_decide(void) {
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyErr_Clear();
    return 0;
}

/* Whether a call of a region may leave out its constant ``wait`` clause (``waits``: a tuple
 * of queue numbers, empty: every queue; OpenACC 3.3 §2.16.2): 1 when each queue it waits
 * for was never made or is settled (idle, no error to report: ``waits_for_nothing``), so
 * the join holds already (``QueueSet.join`` skips such a queue too); 0 when a join is still
 * to be made: only a plan that enqueues makes it (``run_plan_enqueued`` hands ``waits`` to
 * its ``enqueue``), the Python launcher any other; -1 on an interrupt (no Exception: an
 * Exception here leaves the call to the Python launcher, which reports what it finds). */
static int waits_settled(PyObject *waits) {
    int settled = waits_for_nothing(&PyTuple_GET_ITEM(waits, 0), PyTuple_GET_SIZE(waits));
    return settled < 0 ? launchers_to_decide() : settled;
}

/* Whether ``value`` may be a region's ``_clause_wait``: a tuple of ints >= 0 (empty: every
 * queue), the queue numbers of a constant ``wait`` clause. */
static int is_clause_wait(PyObject *value) {
    if (!PyTuple_CheckExact(value))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value); i++)
        if (!is_queue_number(PyTuple_GET_ITEM(value, i)))
            return 0;
    return 1;
}

/* Whether a region's ``if`` clause written as an expression (``condition``: a function of
 * the call's arguments, ``FastCall._condition``; OpenACC 3.3 §2.5.6) is true for ``args``:
 * 1, 0 (false: the region runs on the host, the Python launcher's; or the expression
 * raised an Exception, which the Python launcher evaluates again and reports), -1 on an
 * interrupt. */
static int condition_holds(PyObject *condition, PyObject *args) {
    PyObject *value = PyObject_Call(condition, args, NULL);
    int holds = value == NULL ? -1 : PyObject_IsTrue(value);
    Py_XDECREF(value);
    return holds < 0 ? launchers_to_decide() : holds;
}
