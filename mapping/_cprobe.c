/* pyacc.mapping._cprobe: the present table's hot searches, in C.
 *
 * Owns ``extent(x)``, ``contained_index(bounds, x)``, ``same_layout(a, b)`` (whether
 * a cached device view still matches its host array) and ``plain_block(x)`` (the data
 * API's hot-path test: a numpy.ndarray whose elements are one C- or F-ordered block). The first two give the same answers as the Numba
 * functions of ``mapping/_probe.py`` (which uses these when this module is built), without
 * a Numba dispatch (~0.3 µs, the larger part of an ``acc.is_present`` of present data).
 *
 *   extent(x) -> (data, low, high): the first element's address and the half-open byte
 *       range the elements of the numpy array ``x`` cover ((data, data, data) when empty);
 *   contained_index(bounds, x) -> int: the index of the range of ``bounds`` that wholly
 *       contains the elements of ``x``; -1 when they overlap none (an empty ``x`` too),
 *       -2 when they overlap one without lying inside it.
 *
 * ``bounds`` is ``_ordered``'s ``bounds``: a C-contiguous native int64 array of shape
 * ``(2, capacity)``, row 0 the begins and row 1 the ends of sorted, non-overlapping
 * half-open ranges, unused slots int64 max in both rows. Anything else (an ``x`` that is
 * not a numpy array, a ``bounds`` of another shape or type) raises TypeError, and the
 * caller takes its pure-Python search.
 *
 * NumPy arrays are read through NumPy's array object layout (``pyacc/_numpy_abi.h``,
 * shared with ``pyacc/_fastcall.c``), so the module builds without NumPy's headers. The item size
 * is read as the array's ``itemsize`` attribute, remembered for the last dtype object seen
 * (NumPy's built-in dtypes are singletons). The GIL is held throughout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../pyacc/_numpy_abi.h"

static PyTypeObject *g_ndarray;  /* numpy.ndarray */
static PyObject *g_int64;        /* numpy.dtype("int64"): native, one object (built-in dtypes are) */
static PyObject *g_last_descr;   /* the dtype object itemsize() read last (a strong ref) */
static Py_ssize_t g_last_itemsize;
static PyObject *s_itemsize;

static Py_ssize_t itemsize(PyObject *array) {
    PyObject *descr = ((ArrayFields *)array)->descr;
    if (descr == g_last_descr)
        return g_last_itemsize;
    PyObject *value = PyObject_GetAttr(array, s_itemsize);
    if (value == NULL)
        return -1;
    Py_ssize_t size = PyLong_AsSsize_t(value);
    Py_DECREF(value);
    if (size < 0)
        return -1;
    Py_INCREF(descr);
    Py_XSETREF(g_last_descr, descr);
    g_last_itemsize = size;
    return size;
}

/* The extent of a numpy array; 0, or -1 with an exception set. */
static int array_extent(PyObject *x, int64_t *data, int64_t *low, int64_t *high) {
    if (!PyObject_TypeCheck(x, g_ndarray)) {
        PyErr_SetString(PyExc_TypeError, "_cprobe: not a numpy array");
        return -1;
    }
    ArrayFields *f = (ArrayFields *)x;
    *data = *low = *high = (int64_t)(intptr_t)f->data;
    for (int axis = 0; axis < f->nd; axis++)
        if (f->dimensions[axis] == 0)
            return 0;
    Py_ssize_t size = itemsize(x);
    if (size < 0)
        return -1;
    *high += size;
    for (int axis = 0; axis < f->nd; axis++) {
        int64_t step = (int64_t)(f->dimensions[axis] - 1) * (int64_t)f->strides[axis];
        if (step < 0)
            *low += step;
        else
            *high += step;
    }
    return 0;
}

static PyObject *extent(PyObject *module, PyObject *x) {
    int64_t data, low, high;
    if (array_extent(x, &data, &low, &high) < 0)
        return NULL;
    return Py_BuildValue("(LLL)", (long long)data, (long long)low, (long long)high);
}

static PyObject *contained_index(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "contained_index(bounds, x) takes two arguments");
        return NULL;
    }
    PyObject *bounds = args[0];
    int64_t data, low, high;
    if (array_extent(args[1], &data, &low, &high) < 0)
        return NULL;
    if (high == low)
        return PyLong_FromLong(-1);
    if (!PyObject_TypeCheck(bounds, g_ndarray)) {
        PyErr_SetString(PyExc_TypeError, "_cprobe: bounds is not a numpy array");
        return NULL;
    }
    ArrayFields *b = (ArrayFields *)bounds;
    if (b->descr != g_int64 || b->nd != 2 || b->dimensions[0] != 2 ||
            !(b->flags & NPY_C_CONTIGUOUS) || b->strides[1] != (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_TypeError, "_cprobe: bounds is not a C-contiguous (2, n) int64 array");
        return NULL;
    }
    Py_ssize_t capacity = b->dimensions[1];
    const int64_t *begins = (const int64_t *)b->data;
    const int64_t *ends = begins + capacity;
    /* np.searchsorted(ends, low, side="right"): the first range that ends after low */
    Py_ssize_t first = 0, stop = capacity;
    while (first < stop) {
        Py_ssize_t middle = first + (stop - first) / 2;
        if (ends[middle] <= low)
            first = middle + 1;
        else
            stop = middle;
    }
    if (first < capacity && begins[first] < high) {
        if (begins[first] <= low && high <= ends[first])
            return PyLong_FromSsize_t(first);
        return PyLong_FromLong(-2);  /* overlaps a mapping without lying inside it */
    }
    return PyLong_FromLong(-1);
}

/* same_layout(a, b): True when two numpy arrays have the same shape, strides and dtype
 * object; False when they differ in any (a dtype equal but not the same object counts as
 * different: the caller re-makes what it cached, which is correct, only slower); None when
 * either is not a numpy array (the caller compares in Python). */
static PyObject *same_layout(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "same_layout(a, b) takes two arguments");
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], g_ndarray) || !PyObject_TypeCheck(args[1], g_ndarray))
        Py_RETURN_NONE;
    ArrayFields *a = (ArrayFields *)args[0], *b = (ArrayFields *)args[1];
    if (a->nd != b->nd || a->descr != b->descr)
        Py_RETURN_FALSE;
    for (int axis = 0; axis < a->nd; axis++)
        if (a->dimensions[axis] != b->dimensions[axis] || a->strides[axis] != b->strides[axis])
            Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

/* plain_block(x): whether x is exactly a numpy.ndarray (no subclass) whose elements are one
 * C- or Fortran-ordered block (NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_F_CONTIGUOUS). */
static PyObject *plain_block(PyObject *module, PyObject *x) {
    if (Py_TYPE(x) == g_ndarray && (((ArrayFields *)x)->flags & (NPY_C_CONTIGUOUS | NPY_F_CONTIGUOUS)))
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static PyMethodDef methods[] = {
    {"plain_block", (PyCFunction)plain_block, METH_O,
     "plain_block(x) -> whether x is a numpy.ndarray (not a subclass) of one C- or F-ordered block."},
    {"same_layout", (PyCFunction)(void (*)(void))same_layout, METH_FASTCALL,
     "same_layout(a, b) -> whether two numpy arrays have one shape, strides and dtype; None: not both numpy."},
    {"extent", (PyCFunction)extent, METH_O,
     "extent(x) -> (data, low, high): the byte range the elements of numpy array x cover."},
    {"contained_index", (PyCFunction)(void (*)(void))contained_index, METH_FASTCALL,
     "contained_index(bounds, x) -> index of the range wholly containing x; -1 none, -2 partly."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cprobe", "The present table's hot searches, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__cprobe(void) {
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return NULL;
    g_ndarray = (PyTypeObject *)PyObject_GetAttrString(numpy, "ndarray");
    g_int64 = PyObject_CallMethod(numpy, "dtype", "s", "int64");
    Py_DECREF(numpy);
    s_itemsize = PyUnicode_InternFromString("itemsize");
    if (g_ndarray == NULL || g_int64 == NULL || s_itemsize == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
