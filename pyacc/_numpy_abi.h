/* NumPy's array object layout, as pyacc's C extensions read it (pyacc/_fastcall.c,
 * mapping/_cprobe.c), so that they build without NumPy's headers.
 *
 * ``ArrayFields`` mirrors the start of ``PyArrayObject_fields`` (numpy/ndarraytypes.h),
 * and the flags are NumPy's ``NPY_ARRAY_*`` bits: both are part of NumPy's ABI, the same
 * in NumPy 1.x and 2.x. Read an object through it only after checking that it is a
 * numpy.ndarray (or a subclass): an object of another type has another layout.
 */
#ifndef PYACC_NUMPY_ABI_H
#define PYACC_NUMPY_ABI_H

#include <Python.h>

typedef struct {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags;
} ArrayFields;

#define ARRAY(o) ((ArrayFields *)(o))

#define NPY_C_CONTIGUOUS 0x0001  /* NPY_ARRAY_C_CONTIGUOUS */
#define NPY_F_CONTIGUOUS 0x0002  /* NPY_ARRAY_F_CONTIGUOUS */
#define NPY_ALIGNED      0x0100  /* NPY_ARRAY_ALIGNED */
#define NPY_WRITEABLE    0x0400  /* NPY_ARRAY_WRITEABLE */

/* The dtype read last by ``array_itemsize`` (a strong reference), its item size and its
 * ``hasobject`` (elements that are object references): a dtype's layout changed across
 * NumPy 1.x and 2.x, so its fields are read as attributes, once per new dtype object
 * (each translation unit keeps its own memo). */
static PyObject *g_last_descr;
static Py_ssize_t g_last_itemsize;
static int g_last_hasobject;
static PyObject *s_itemsize, *s_hasobject;

static int numpy_abi_init(void) {
    s_itemsize = PyUnicode_InternFromString("itemsize");
    s_hasobject = PyUnicode_InternFromString("hasobject");
    return s_itemsize != NULL && s_hasobject != NULL ? 0 : -1;
}

/* The item size of a numpy array (checked to be one), its dtype remembered with its
 * ``hasobject``; -1 with an exception set. */
static Py_ssize_t array_itemsize(PyObject *array) {
    PyObject *descr = ARRAY(array)->descr;
    if (descr == g_last_descr)
        return g_last_itemsize;
    PyObject *value = PyObject_GetAttr(array, s_itemsize);
    if (value == NULL)
        return -1;
    Py_ssize_t size = PyLong_AsSsize_t(value);
    Py_DECREF(value);
    PyObject *objects = size < 0 ? NULL : PyObject_GetAttr(descr, s_hasobject);
    int hasobject = objects == NULL ? -1 : PyObject_IsTrue(objects);
    Py_XDECREF(objects);
    if (hasobject < 0)
        return -1;
    Py_INCREF(descr);
    Py_XSETREF(g_last_descr, descr);
    g_last_itemsize = size, g_last_hasobject = hasobject;
    return size;
}

/* Whether the numpy array x (checked to be one) holds plain data: no object references,
 * which only the Python verbs' ``check_array`` refuses properly; 0 also on an error,
 * cleared. */
static int plain_items(PyObject *x) {
    if (array_itemsize(x) < 0) {
        PyErr_Clear();
        return 0;
    }
    return !g_last_hasobject;
}

#endif
