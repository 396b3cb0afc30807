/* The present table's searches, and the array tests the lane's verbs share: the extent of
 * an array, the range of ``_ordered``'s ``bounds`` that holds it (``search``; the
 * module's ``extent`` and ``contained_index``), ``same_layout`` and ``plain_block``.
 * The span and the binary search themselves are ``_range_search.h``'s, which the express
 * lane (``pyacc/_plan_follow.c.h``) shares. Included by ``mapping/_cprobe.c`` (one
 * translation unit), whose docstring states what each answers; the GIL is held
 * throughout. */

static PyTypeObject *g_ndarray;  /* numpy.ndarray */
static PyObject *g_int64;        /* numpy.dtype("int64"): native, one object (built-in dtypes are) */
/* The extent of a numpy array; 0, or -1 with an exception set. */
static int array_extent(PyObject *x, int64_t *data, int64_t *low, int64_t *high) {
    if (!PyObject_TypeCheck(x, g_ndarray)) {
        PyErr_SetString(PyExc_TypeError, "_cprobe: not a numpy array");
        return -1;
    }
    ArrayFields *f = (ArrayFields *)x;
    Py_ssize_t size = array_itemsize(x);
    if (size < 0)
        return -1;
    *data = (int64_t)(intptr_t)f->data;
    array_span(f, size, low, high);  /* (_range_search.h) */
    return 0;
}

static PyObject *extent(PyObject *module, PyObject *x) {
    int64_t data, low, high;
    if (array_extent(x, &data, &low, &high) < 0)
        return NULL;
    return Py_BuildValue("(LLL)", (long long)data, (long long)low, (long long)high);
}

/* The index of the range of ``bounds`` that wholly contains [low, high), -1 when none
 * overlaps it, -2 when one overlaps it without containing it; -3 with TypeError set when
 * ``bounds`` is not ``_ordered``'s (2, n) int64 array. ``low < high``. ``count``: how many
 * ranges are in use (``_ordered``'s ``count``), searched alone; -1 when not known: the
 * whole capacity, whose spare slots (PAD) end after every address. */
static Py_ssize_t search(PyObject *bounds, Py_ssize_t count, int64_t low, int64_t high) {
    if (!PyObject_TypeCheck(bounds, g_ndarray)) {
        PyErr_SetString(PyExc_TypeError, "_cprobe: bounds is not a numpy array");
        return -3;
    }
    ArrayFields *b = (ArrayFields *)bounds;
    if (b->descr != g_int64 || !bounds_layout(b)) {
        PyErr_SetString(PyExc_TypeError, "_cprobe: bounds is not a C-contiguous (2, n) int64 array");
        return -3;
    }
    Py_ssize_t capacity = b->dimensions[1];
    return bounds_search(b, count >= 0 && count < capacity ? count : capacity, low, high);
}

static PyObject *contained_index(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "contained_index(bounds, x) takes two arguments");
        return NULL;
    }
    int64_t data, low, high;
    if (array_extent(args[1], &data, &low, &high) < 0)
        return NULL;
    if (high == low)
        return PyLong_FromLong(-1);
    Py_ssize_t index = search(args[0], -1, low, high);
    return index == -3 ? NULL : PyLong_FromSsize_t(index);
}

/* same_layout(a, b): True when two numpy arrays have the same shape, strides and dtype
 * object; False when they differ in any (a dtype equal but not the same object counts as
 * different: the caller re-makes what it cached, which is correct, only slower); None when
 * either is not a numpy array (the caller compares in Python). */
static int same_layout_of(ArrayFields *a, ArrayFields *b) {
    if (a->nd != b->nd || a->descr != b->descr)
        return 0;
    for (int axis = 0; axis < a->nd; axis++)
        if (a->dimensions[axis] != b->dimensions[axis] || a->strides[axis] != b->strides[axis])
            return 0;
    return 1;
}

static PyObject *same_layout(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "same_layout(a, b) takes two arguments");
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], g_ndarray) || !PyObject_TypeCheck(args[1], g_ndarray))
        Py_RETURN_NONE;
    return PyBool_FromLong(same_layout_of((ArrayFields *)args[0], (ArrayFields *)args[1]));
}

/* plain_block(x): whether x is exactly a numpy.ndarray (no subclass) of plain data (no
 * object references) whose elements are one C- or Fortran-ordered block
 * (NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_F_CONTIGUOUS): the arrays the lane's verbs take. */
static int is_plain_block(PyObject *x) {
    return Py_TYPE(x) == g_ndarray && (((ArrayFields *)x)->flags & (NPY_C_CONTIGUOUS | NPY_F_CONTIGUOUS))
           && plain_items(x);
}

static PyObject *plain_block(PyObject *module, PyObject *x) {
    return PyBool_FromLong(is_plain_block(x));
}
