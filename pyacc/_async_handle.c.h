/* pyacc/_async_handle.c.h: the handle an async call run at once in C gives back, included
 * by _fastcall.c before _at_once.c.h.
 *
 * Owns ``async_result``: ``pyacc._outcome.AsyncResult(queue, value)`` made without its
 * Python ``__init__`` (its two ``__slots__`` set in place; API.md §6: "with ``async_``,
 * the call returns a handle whose ``.result()`` waits for the queue"), and
 * ``configure_handle`` (``configure_async``'s part).
 *
 * Invariants: a handle someone else holds is never given again (``g_idle_result`` is
 * reused only while its one reference is ours); the GIL is held throughout.
 */

static PyObject *g_result_slots[2];   /* AsyncResult's _queue and _value slots, or NULL */

/* ``AsyncResult(queue, value)``: its two slots set (its __init__ sets nothing else).
 *
 * The handle of a call that returns nothing (``value`` None) is kept (``g_idle_result``)
 * and given again by a later such call once nobody else holds it (its only reference
 * ours): a handle with no other holder cannot be told from a new one (no weak
 * references, no state besides its two slots), so a loop of async calls that drops its
 * handles makes none (~450 machine instructions each: allocation, two slot sets,
 * ``subtype_dealloc``). A handle someone holds is never given twice. */
static PyObject *g_idle_result;  /* the last AsyncResult(queue, None) made here, or NULL */

/* ``slot`` (a member descriptor of AsyncResult) of ``result`` set to ``value`` in place */
static void result_slot_set(PyObject *result, PyObject *slot, PyObject *value) {
    PyObject **field = (PyObject **)((char *)result + ((PyMemberDescrObject *)slot)->d_member->offset);
    if (*field != value)
        Py_XSETREF(*field, Py_NewRef(value));
}

static PyObject *async_result(PyObject *queue, PyObject *value) {
    PyTypeObject *type = (PyTypeObject *)g_async_result;
    if (g_result_slots[0] == NULL)
        return PyObject_CallFunctionObjArgs(g_async_result, queue, value, NULL);
    PyObject *kept = g_idle_result;
    if (value == Py_None && kept != NULL && Py_REFCNT(kept) == 1 && Py_TYPE(kept) == type) {
        Py_INCREF(kept);  /* (ours first: a queue freed by the slot set may run Python code) */
        result_slot_set(kept, g_result_slots[0], queue);
        result_slot_set(kept, g_result_slots[1], Py_None);
        return kept;
    }
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
    if (value == Py_None)
        Py_XSETREF(g_idle_result, Py_NewRef(result));
    return result;
}

/* ``configure_async``'s part: the AsyncResult type, its two slots when they are plain
 * object member slots (else the type is called), and no handle kept from another type */
static void configure_handle(PyObject *result_type) {
    Py_XSETREF(g_async_result, Py_NewRef(result_type));
    Py_CLEAR(g_idle_result);
    for (int i = 0; i < 2; i++) {
        PyObject *slot = PyObject_GetAttrString(result_type, i ? "_value" : "_queue");
        if (slot == NULL)
            PyErr_Clear();
        else if (Py_TYPE(slot) != &PyMemberDescr_Type ||
                 ((PyMemberDescrObject *)slot)->d_member->type != T_OBJECT_EX ||
                 ((PyMemberDescrObject *)slot)->d_member->offset <= 0)
            Py_CLEAR(slot);
        Py_XSETREF(g_result_slots[i], slot);
    }
    if (g_result_slots[0] == NULL || g_result_slots[1] == NULL) {  /* then: called */
        Py_CLEAR(g_result_slots[0]);
        Py_CLEAR(g_result_slots[1]);
    }
}
