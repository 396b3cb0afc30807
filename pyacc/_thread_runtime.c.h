/* The calling thread's runtime context, remembered: its current runtime
 * (``ICVS.runtime``), that runtime's data lane and the thread's region stack
 * (``ICVS.region_stack``). Included by ``pyacc/_fastcall.c`` before its two users, the
 * data routines' C entry (``_routine_lane.c.h``: the lane) and ``acc.data``'s C base
 * (``_data_region.c.h``: all three).
 *
 * The three are remembered with the thread and the context epoch at which they were read
 * (as the express lane's plans remember their context, ``_express_plan.c.h``): both ICVs
 * are watched (``_ThreadICVs._WATCHED``: every change bumps the epoch through
 * ``context_changed()``, and a new thread's ICVs are set, so bump it too), and a runtime's
 * lane never changes, so while the epoch stands the same thread finds the same three
 * without reading its thread-local ICVs. One slot for the module; only when the ICVs are
 * one per thread state (``g_remember``). The slot holds strong references to the last
 * reader's three until another thread or epoch replaces them.
 */

static PyObject *s_lane;
static uint64_t g_context_thread, g_context_read_at;  /* the thread and epoch of the slot */
static PyObject *g_context_runtime, *g_context_lane, *g_context_stack;

/* Whether the slot holds the calling thread's context of the current epoch. */
static inline int thread_context_remembered(void) {
    return g_remember && g_context_runtime != NULL && g_context_thread == thread_id() &&
           g_context_read_at == g_context_epoch;
}

/* 1 with new references in ``*runtime``, ``*lane`` and ``*stack``; 0 without an exception
 * when there is nothing to remember — not configured, no current runtime yet, or one
 * without a lane (the callers' Python paths select a runtime, or serve it); -1 with an
 * exception set. */
static int thread_runtime(PyObject **runtime, PyObject **lane, PyObject **stack) {
    if (!thread_context_remembered()) {
        uint64_t thread = thread_id(), epoch = g_context_epoch;
        if (g_icvs == NULL)
            return 0;
        PyObject *found = PyObject_GetAttr(g_icvs, s_runtime);
        if (found == NULL || found == Py_None) {
            Py_XDECREF(found);
            return found == NULL ? -1 : 0;
        }
        PyObject *found_lane = PyObject_GetAttr(found, s_lane);
        if (found_lane == NULL) {
            Py_DECREF(found);
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear();  /* a runtime without a lane */
            return 0;
        }
        PyObject *found_stack = PyObject_GetAttr(g_icvs, s_region_stack);
        if (found_stack == NULL || !PyList_Check(found_stack)) {
            if (found_stack != NULL)
                PyErr_SetString(PyExc_TypeError, "pyacc: the thread's region stack is not a list");
            Py_DECREF(found);
            Py_DECREF(found_lane);
            Py_XDECREF(found_stack);
            return -1;
        }
        Py_XSETREF(g_context_runtime, found);
        Py_XSETREF(g_context_lane, found_lane);
        Py_XSETREF(g_context_stack, found_stack);
        g_context_thread = thread;
        g_context_read_at = epoch;  /* (read before the attribute reads, which may run Python code) */
    }
    *runtime = Py_NewRef(g_context_runtime);
    *lane = Py_NewRef(g_context_lane);
    *stack = Py_NewRef(g_context_stack);
    return 1;
}
