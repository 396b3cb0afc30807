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
 * (``bound_call`` answers NULL without an exception set; with one only when an allocation
 * failed). A tuple with an empty slot never leaves this file. A parameter named ``async_``,
 * ``wait`` or ``if_`` is given by position only: by name it is the call's keyword, as in the
 * Python launcher.
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

/* The index of ``name`` among ``count`` names (``candidates``: str), compared as the same
 * object when ``by_value`` is 0 (the names of a call site and of the parameters are
 * interned), else by value; -1: none. */
static Py_ssize_t index_of(PyObject *name, PyObject *const *candidates, Py_ssize_t count, int by_value) {
    for (Py_ssize_t i = 0; i < count; i++)
        if (candidates[i] == name || (by_value && is_name(name, candidates[i])))
            return i;
    return -1;
}

/* The keyword ``name`` = ``value`` of a call read into ``*keys`` (``lane``: the index of a lane
 * keyword, ``async_``, ``wait``, ``if_``): 1 (read), 0 (a value the lane does not read: the
 * Python launcher's). */
static int read_keyword(CallKeywords *keys, Py_ssize_t lane, PyObject *value) {
    if (lane == 0)
        return PyLong_CheckExact(value) ? (keys->async_value = value, 1) : 0;
    if (lane == 1)
        return is_queue_number(value) || is_clause_wait(value) ? (keys->wait = value, 1) : 0;
    return value == Py_True ? (keys->if_given = 1, 1) : 0;
}

/* A tuple of ``count`` parameters, the positional ``args[:nargs]`` first, the others empty
 * (NULL) for the keywords and defaults to fill; NULL on a failed allocation. */
static PyObject *new_slots(Py_ssize_t count, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *slots = PyTuple_New(count);
    for (Py_ssize_t i = 0; slots != NULL && i < nargs; i++)
        PyTuple_SET_ITEM(slots, i, Py_NewRef(args[i]));
    return slots;
}

/* ``value`` bound to parameter ``index`` in ``*slots`` (made at the first such keyword:
 * ``new_slots``): 1; 0 when Python would refuse it (given by position too); -1 on a failed
 * allocation. */
static int bind_at(Py_ssize_t index, Py_ssize_t count, PyObject **slots, PyObject *const *args,
                   Py_ssize_t nargs, PyObject *value) {
    if (index < nargs)
        return 0;
    Py_INCREF(value);  /* (first: the allocation below may run a finalizer) */
    if (*slots == NULL)
        *slots = new_slots(count, args, nargs);
    if (*slots == NULL || PyTuple_GET_ITEM(*slots, index) != NULL) {
        Py_DECREF(value);
        return *slots == NULL ? -1 : 0;
    }
    PyTuple_SET_ITEM(*slots, index, value);
    return 1;
}

/* One keyword of a call: a lane keyword read into ``*keys``, or a parameter's argument bound
 * (``names``: the parameters, or NULL); 1, 0 (the Python launcher's: a lane keyword's value
 * it does not read, an unknown name, an argument given twice), -1 on error. The names are
 * compared as objects first, then by value. */
static int take_keyword(CallKeywords *keys, PyObject *names, PyObject **slots, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *name, PyObject *value) {
    PyObject *const lane[3] = {s_async, s_wait, s_if};
    Py_ssize_t count = names == NULL ? 0 : PyTuple_GET_SIZE(names);
    PyObject *const *params = names == NULL ? NULL : &PyTuple_GET_ITEM(names, 0);
    for (int by_value = 0; by_value <= 1; by_value++) {
        Py_ssize_t at = index_of(name, lane, 3, by_value);
        if (at >= 0)
            return read_keyword(keys, at, value);
        at = index_of(name, params, count, by_value);
        if (at >= 0)
            return bind_at(at, count, slots, args, nargs, value);
    }
    return 0;
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
 * NULL without an exception set: the call is the Python launcher's (the module docstring);
 * with one: an allocation failed. */
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
        int read = take_keyword(keys, names, &slots, args, nargs, name, value);
        if (read <= 0) {
            Py_XDECREF(slots);
            return NULL;
        }
    }
    if (slots == NULL && names != NULL && nargs < PyTuple_GET_SIZE(names)) {
        slots = new_slots(PyTuple_GET_SIZE(names), args, nargs);  /* (defaults to fill) */
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
