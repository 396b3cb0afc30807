/* pyacc/_call_binding.c.h: a compute call's arguments in parameter order, and what its
 * keywords ask of the lane; included by _fastcall.c after _call_queue.c.h (``is_clause_wait``).
 *
 * Owns ``CallKeywords`` (``async_=<int>``, ``wait=<queues>``, ``if_=True``: the keywords the
 * lane reads), ``bound_call`` (positional arguments, arguments by parameter name and the
 * parameters' defaults bound as Python binds them, through the region's ``_binding``: its
 * parameters' names and defaults), ``keyword_dict`` (the keywords again, for the Python
 * launcher) and ``call_waits``.
 *
 * Invariants: reads only; a call it cannot bind exactly as Python would (an unknown or
 * duplicate name, a missing argument, too many, a keyword with a value the lane does not
 * read) is the Python launcher's, which binds it again and raises Python's ``TypeError``
 * (``bound_call`` answers NULL without an exception set). A tuple with an empty slot never
 * leaves this file.
 */

/* What a call's keywords ask of the lane (borrowed): its queue (``async_=<int>``), the queues
 * it waits for first (``wait=``: an int >= 0 or a tuple of them, which replaces the region's
 * wait clause, §2.16.2), and whether ``if_=True`` was given (the device: the region's ``if``
 * expression is not asked, §2.5.6). */
typedef struct {
    PyObject *async_value, *wait;
    int if_given;
} CallKeywords;

static int is_name(PyObject *name, PyObject *interned) {
    return name == interned || (PyUnicode_Check(name) && PyUnicode_Compare(name, interned) == 0);
}

/* Whether ``value`` may be a region's ``_binding``: ``(names, defaults)``, a tuple of str
 * (its parameters, each positional-or-keyword) and a tuple of the last ones' defaults. */
static int is_binding(PyObject *value) {
    if (!PyTuple_CheckExact(value) || PyTuple_GET_SIZE(value) != 2)
        return 0;
    PyObject *names = PyTuple_GET_ITEM(value, 0), *defaults = PyTuple_GET_ITEM(value, 1);
    if (!PyTuple_CheckExact(names) || !PyTuple_CheckExact(defaults) ||
            PyTuple_GET_SIZE(defaults) > PyTuple_GET_SIZE(names))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, i)))
            return 0;
    return 1;
}

/* One keyword of a call read into ``*keys``: 1 (read), 0 (one the lane reads, with a value it
 * does not: the Python launcher's), 2 (not one of them: a parameter's name, or unknown). */
static int read_keyword(CallKeywords *keys, PyObject *name, PyObject *value) {
    if (is_name(name, s_async))
        return PyLong_CheckExact(value) ? (keys->async_value = value, 1) : 0;
    if (is_name(name, s_wait))
        return is_queue_number(value) || is_clause_wait(value) ? (keys->wait = value, 1) : 0;
    if (is_name(name, s_if))
        return value == Py_True ? (keys->if_given = 1, 1) : 0;
    return 2;
}

/* ``value`` bound to the parameter ``name`` in ``*slots`` (made at the first such keyword: a
 * tuple of the parameters, the positional ``args[:nargs]`` first): 1; 0 when Python would
 * refuse it (no such parameter, or given by position too); -1 on a failed allocation. */
static int bind_by_name(PyObject *names, PyObject **slots, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *name, PyObject *value) {
    Py_ssize_t count = PyTuple_GET_SIZE(names), index = -1;
    for (Py_ssize_t i = 0; i < count && index < 0; i++)  /* (interned: the same object) */
        if (PyTuple_GET_ITEM(names, i) == name)
            index = i;
    for (Py_ssize_t i = 0; i < count && index < 0; i++)
        if (is_name(name, PyTuple_GET_ITEM(names, i)))
            index = i;
    if (index < nargs)
        return 0;
    if (*slots == NULL) {
        *slots = PyTuple_New(count);  /* (empty slots: NULL) */
        if (*slots == NULL)
            return -1;
        for (Py_ssize_t i = 0; i < nargs; i++)
            PyTuple_SET_ITEM(*slots, i, Py_NewRef(args[i]));
    }
    if (PyTuple_GET_ITEM(*slots, index) != NULL)
        return 0;
    PyTuple_SET_ITEM(*slots, index, Py_NewRef(value));
    return 1;
}

/* The empty slots of ``slots`` filled with the parameters' ``defaults`` (those of the last
 * parameters): 1; 0 when a parameter without a default has no argument. */
static int fill_defaults(PyObject *slots, PyObject *defaults) {
    Py_ssize_t count = PyTuple_GET_SIZE(slots), first = count - PyTuple_GET_SIZE(defaults);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyTuple_GET_ITEM(slots, i) != NULL)
            continue;
        if (i < first)
            return 0;
        PyTuple_SET_ITEM(slots, i, Py_NewRef(PyTuple_GET_ITEM(defaults, i - first)));
    }
    return 1;
}

/* A call's arguments in parameter order (a new reference), its lane keywords read into
 * ``*keys``: the positional ``args[:nargs]``, then the keywords — ``kwnames`` with their values
 * after the positional ones (a vectorcall), or the dict ``kwargs`` — then the defaults, through
 * ``binding`` (``_binding``; NULL: positional arguments and lane keywords only). ``tuple``: the
 * positional arguments as a tuple already (a ``tp_call``), given back when nothing is bound.
 * NULL without an exception set: the call is the Python launcher's (the module docstring). */
static PyObject *bound_call(PyObject *binding, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames, PyObject *kwargs, PyObject *tuple, CallKeywords *keys) {
    *keys = (CallKeywords){NULL, NULL, 0};
    PyObject *names = binding == NULL ? NULL : PyTuple_GET_ITEM(binding, 0), *slots = NULL, *name, *value;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames), at = 0;
    if (names != NULL && nargs > PyTuple_GET_SIZE(names))
        return NULL;
    for (Py_ssize_t i = 0;; i++) {
        if (kwnames != NULL ? i >= nkw : kwargs == NULL || !PyDict_Next(kwargs, &at, &name, &value))
            break;
        if (kwnames != NULL) {
            name = PyTuple_GET_ITEM(kwnames, i);
            value = args[nargs + i];
        }
        int read = read_keyword(keys, name, value);
        if (read == 2)
            read = names == NULL ? 0 : bind_by_name(names, &slots, args, nargs, name, value);
        if (read <= 0) {
            Py_XDECREF(slots);
            return NULL;
        }
    }
    if (slots == NULL && names != NULL && nargs < PyTuple_GET_SIZE(names)) {
        slots = PyTuple_New(PyTuple_GET_SIZE(names));
        for (Py_ssize_t i = 0; slots != NULL && i < nargs; i++)
            PyTuple_SET_ITEM(slots, i, Py_NewRef(args[i]));
        if (slots == NULL)
            return NULL;
    }
    if (slots == NULL)
        return tuple != NULL ? Py_NewRef(tuple) : tuple_of(args, nargs);
    if (!fill_defaults(slots, PyTuple_GET_ITEM(binding, 1)))
        Py_CLEAR(slots);
    return slots;
}

/* The lane keywords of ``keys`` as a dict for the Python launcher (a new reference); NULL
 * without an exception set: none. */
static PyObject *keyword_dict(const CallKeywords *keys) {
    if (keys->async_value == NULL && keys->wait == NULL && !keys->if_given)
        return NULL;
    PyObject *dict = PyDict_New();
    int made = dict != NULL &&
        (keys->async_value == NULL || PyDict_SetItem(dict, s_async, keys->async_value) == 0) &&
        (keys->wait == NULL || PyDict_SetItem(dict, s_wait, keys->wait) == 0) &&
        (!keys->if_given || PyDict_SetItem(dict, s_if, Py_True) == 0);
    if (!made)
        Py_CLEAR(dict);
    return dict;
}

/* The queues a call waits for first as a tuple (a new reference): its ``wait=`` (``keys``, or
 * NULL), else the region's clause (``clause_wait``, or NULL); NULL without an error: none. */
static PyObject *call_waits(const CallKeywords *keys, PyObject *clause_wait) {
    PyObject *given = keys == NULL ? NULL : keys->wait;
    if (given != NULL)
        return PyTuple_CheckExact(given) ? Py_NewRef(given) : PyTuple_Pack(1, given);
    return clause_wait == NULL ? NULL : Py_NewRef(clause_wait);
}
