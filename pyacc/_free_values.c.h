/* pyacc/_free_values.c.h: a kernel's free values read in C, included by _fastcall.c.
 *
 * Owns ``with_free``: the arguments of a call of a region whose kernel reads module-level
 * or closure names (API.md §6.1: read at each call) followed by those names' values now,
 * as ``pyacc._call_inputs.free_reader`` appends them for the Python launcher; and
 * ``is_free_sources``, the check of what a region hands the lane (``FastCall._free``:
 * ``_call_inputs.free_sources``).
 *
 * Invariants: reads only (a dict lookup by a str key of an exact dict, a cell's contents:
 * no Python code runs); a name not defined now leaves the call to the Python launcher,
 * which raises the NameError that names the kernel.
 */

/* Whether ``value`` may be a region's ``_free``: a tuple of ``(cell, None)`` (a closure
 * name) and ``(dict, str)`` (a module-level name of that exact dict) pairs. */
static int is_free_sources(PyObject *value) {
    if (!PyTuple_CheckExact(value))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value); i++) {
        PyObject *pair = PyTuple_GET_ITEM(value, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            return 0;
        PyObject *where = PyTuple_GET_ITEM(pair, 0), *name = PyTuple_GET_ITEM(pair, 1);
        if (!(PyCell_Check(where) && name == Py_None) &&
                !(PyDict_CheckExact(where) && PyUnicode_CheckExact(name)))
            return 0;
    }
    return 1;
}

/* ``args`` followed by the current value of each name of ``sources`` (a new tuple); NULL
 * without an exception when a name is not defined now (an empty cell, a global deleted),
 * NULL with one on error. */
static PyObject *with_free(PyObject *sources, PyObject *args) {
    Py_ssize_t nargs = PyTuple_GET_SIZE(args), count = PyTuple_GET_SIZE(sources);
    PyObject *all = PyTuple_New(nargs + count);
    if (all == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++)
        PyTuple_SET_ITEM(all, i, Py_NewRef(PyTuple_GET_ITEM(args, i)));
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PyTuple_GET_ITEM(sources, i);
        PyObject *where = PyTuple_GET_ITEM(pair, 0), *name = PyTuple_GET_ITEM(pair, 1);
        PyObject *value = PyCell_Check(where) ? PyCell_GET(where) : PyDict_GetItemWithError(where, name);
        if (value == NULL) {  /* (borrowed, as both are) */
            Py_DECREF(all);
            return NULL;
        }
        PyTuple_SET_ITEM(all, nargs + i, Py_NewRef(value));
    }
    return all;
}
