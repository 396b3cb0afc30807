/* pyacc/_vectorcall_args.h: a vectorcall's arguments handed to a ``tp_call``, included by
 * _fastcall.c (FastCall's vectorcall, acc.data's ``DataRegion`` type call).
 *
 * Owns ``tuple_of`` (positional arguments as a tuple) and ``tp_call_of`` (a vectorcall that
 * does not take a call itself hands it to the ``tp_call`` it stands for).
 *
 * Invariants: new references only; an allocation that fails sets MemoryError and answers NULL.
 */
#ifndef PYACC_VECTORCALL_ARGS_H
#define PYACC_VECTORCALL_ARGS_H

#include <Python.h>

static PyObject *tuple_of(PyObject *const *items, Py_ssize_t n) {
    PyObject *tuple = PyTuple_New(n);
    for (Py_ssize_t i = 0; tuple != NULL && i < n; i++)
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(items[i]));
    return tuple;
}

/* ``call(callable, args_tuple, kwargs_dict)`` with a vectorcall's arguments: what a
 * vectorcall that does not take a call itself hands to the ``tp_call`` it stands for. */
static PyObject *tp_call_of(ternaryfunc call, PyObject *callable, PyObject *const *args,
                            size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *positional = tuple_of(args, nargs);
    PyObject *keywords = nkw ? PyDict_New() : NULL;
    PyObject *result = NULL;
    int made = positional != NULL && (nkw == 0 || keywords != NULL);
    for (Py_ssize_t i = 0; made && i < nkw; i++)
        made = PyDict_SetItem(keywords, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) == 0;
    if (made)
        result = call(callable, positional, keywords);
    Py_XDECREF(positional);
    Py_XDECREF(keywords);
    return result;
}

#endif /* PYACC_VECTORCALL_ARGS_H */
