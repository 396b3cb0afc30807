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

#endif
