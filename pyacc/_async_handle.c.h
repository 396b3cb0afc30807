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

static SlotField g_result_fields[2];  /* AsyncResult's _queue and _value, set in place
                                       * (``_slot_fields.h``); an offset 0: the type is called */
static PyObject *g_result_names[2];   /* "_queue", "_value" (interned, kept) */

/* ``AsyncResult(queue, value)``: its two slots set (its __init__ sets nothing else).
 *
 * The handle of a call that returns nothing (``value`` None) is kept (``g_idle_result``)
 * and given again by a later such call once nobody else holds it (its only reference
 * ours): a handle with no other holder cannot be told from a new one (no weak
 * references, no state besides its two slots), so a loop of async calls that drops its
 * handles makes none (~450 machine instructions each: allocation, two slot sets,
 * ``subtype_dealloc``). A handle someone holds is never given twice. */
static PyObject *g_idle_result;  /* the last AsyncResult(queue, None) made here, or NULL */

static PyObject *async_result(PyObject *queue, PyObject *value) {
    PyTypeObject *type = (PyTypeObject *)g_async_result;
    if (g_result_fields[0].offset == 0 || g_result_fields[1].offset == 0)
        return PyObject_CallFunctionObjArgs(g_async_result, queue, value, NULL);
    PyObject *result = g_idle_result;
    if (value == Py_None && result != NULL && Py_REFCNT(result) == 1 && Py_TYPE(result) == type) {
        Py_INCREF(result);  /* (ours first: a queue freed by the slot set may run Python code) */
    } else if ((result = type->tp_alloc(type, 0)) == NULL) {
        return NULL;
    } else if (value == Py_None) {
        Py_XSETREF(g_idle_result, Py_NewRef(result));
    }
    slot_field_set(result, &g_result_fields[0], queue);  /* (in place: cannot fail) */
    slot_field_set(result, &g_result_fields[1], value);
    return result;
}

/* ``configure_async``'s part: the AsyncResult type, its two slots when they are plain
 * object member slots (else the type is called), and no handle kept from another type.
 * -1 with an exception set (no memory for the names). */
static int configure_handle(PyObject *result_type) {
    for (int i = 0; i < 2; i++)
        if (g_result_names[i] == NULL &&
                (g_result_names[i] = PyUnicode_InternFromString(i ? "_value" : "_queue")) == NULL)
            return -1;
    Py_XSETREF(g_async_result, Py_NewRef(result_type));
    Py_CLEAR(g_idle_result);
    for (int i = 0; i < 2; i++)
        slot_field_init(&g_result_fields[i], (PyTypeObject *)result_type, g_result_names[i]);
    return 0;
}
