/* The facts of a relaunch's arguments (included by _relaunch.c.h, after the ``Kept`` and
 * ``Relaunch`` types): what a call's arguments are (``see``: a CuPy array's data pointer,
 * shape, strides and dtype), the key kept of each (``key_of``: an array's four facts, a
 * float's or NumPy number's bytes, an int or bool itself), and whether a kept entry holds
 * a call's facts (``kept_matches``).
 *
 * Invariants: a scalar is told by its exact type and bits (0.0 is not -0.0; two NaNs of
 * the same bits are the same fact), as the kernel's words tell it; an array by the four
 * facts a launch packs of it, never by its identity (another object with the same facts
 * launches the same words); an argument of another kind is not covered (``kind_of`` 0).
 */

/* an array's attributes a relaunch reads, interned (``intern_names``): a name made at
 * each read would miss the type's attribute cache */
static PyObject *s_data, *s_ptr, *s_shape, *s_strides, *s_dtype;

static int
intern_names(void)
{
    s_data = PyUnicode_InternFromString("data");
    s_ptr = PyUnicode_InternFromString("ptr");
    s_shape = PyUnicode_InternFromString("shape");
    s_strides = PyUnicode_InternFromString("strides");
    s_dtype = PyUnicode_InternFromString("dtype");
    return s_data && s_ptr && s_shape && s_strides && s_dtype ? 0 : -1;
}

/* What a call's arguments are, read once a call: an array's data pointer, shape, strides
 * and dtype (new references; NULLs for a scalar). */
typedef struct {
    PyObject *pointer, *shape, *strides, *dtype;
} Seen;

/* The kind of ``arg`` a relaunch covers: 1 an array, 2 a float, 3 a NumPy number, 4 an
 * int or a bool; 0 none. */
static int
kind_of(Relaunch *self, PyObject *arg)
{
    PyTypeObject *kind = Py_TYPE(arg);
    if ((PyObject *)kind == self->array_type)
        return 1;
    if (kind == &PyFloat_Type)
        return 2;
    if (kind == &PyBool_Type || kind == &PyLong_Type)
        return 4;
    int number = PySet_Contains(self->numbers, (PyObject *)kind);
    if (number < 0)
        PyErr_Clear();  /* (an unhashable type: not a NumPy number) */
    return number == 1 ? 3 : 0;
}

static void
unsee(Seen *seen, Py_ssize_t nargs)
{
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_CLEAR(seen[i].pointer);
        Py_CLEAR(seen[i].shape);
        Py_CLEAR(seen[i].strides);
        Py_CLEAR(seen[i].dtype);
    }
}

/* Read the arguments (``seen``, zeroed by the caller): 1 all covered, 0 one is not, -1 an
 * error reading one (``seen`` released but for 1). */
static int
see(Relaunch *self, PyObject *const *args, Py_ssize_t nargs, Seen *seen)
{
    for (Py_ssize_t i = 0; i < nargs; i++) {
        int kind = kind_of(self, args[i]);
        if (kind != 1) {
            if (kind == 0) {
                unsee(seen, nargs);
                return 0;
            }
            continue;
        }
        PyObject *data = PyObject_GetAttr(args[i], s_data);
        seen[i].pointer = data ? PyObject_GetAttr(data, s_ptr) : NULL;
        Py_XDECREF(data);
        seen[i].shape = seen[i].pointer ? PyObject_GetAttr(args[i], s_shape) : NULL;
        seen[i].strides = seen[i].shape ? PyObject_GetAttr(args[i], s_strides) : NULL;
        seen[i].dtype = seen[i].strides ? PyObject_GetAttr(args[i], s_dtype) : NULL;
        if (seen[i].dtype == NULL) {
            unsee(seen, nargs);
            return -1;
        }
    }
    return 1;
}

/* The key of an argument's facts, a new reference (its kind covered: ``see``): an
 * array's (pointer, shape, strides, dtype); a float's or NumPy number's bytes; an int or
 * a bool itself. */
static PyObject *
key_of(Relaunch *self, PyObject *arg, Seen *seen)
{
    switch (kind_of(self, arg)) {
    case 1:
        return PyTuple_Pack(4, seen->pointer, seen->shape, seen->strides, seen->dtype);
    case 2: {
        double value = PyFloat_AS_DOUBLE(arg);
        return PyBytes_FromStringAndSize((const char *)&value, sizeof value);
    }
    case 3: {
        Py_buffer view;
        if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        PyObject *key = PyBytes_FromStringAndSize(view.buf, view.len);
        PyBuffer_Release(&view);
        return key;
    }
    default:
        Py_INCREF(arg);
        return arg;
    }
}

/* Whether ``arg`` (read into ``seen``) has the facts of ``key``; -1 on an error. */
static int
same_facts(PyObject *arg, Seen *seen, PyObject *key)
{
    if (seen->pointer != NULL) {  /* an array */
        PyObject *read[4] = {seen->pointer, seen->shape, seen->strides, seen->dtype};
        for (int f = 0; f < 4; f++) {
            int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(key, f), read[f], Py_EQ);
            if (same != 1)
                return same;
        }
        return 1;
    }
    if (PyFloat_CheckExact(arg)) {
        double value = PyFloat_AS_DOUBLE(arg);
        return memcmp(PyBytes_AS_STRING(key), &value, sizeof value) == 0;
    }
    if (PyBytes_CheckExact(key)) {  /* a NumPy number */
        Py_buffer view;
        if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
            return -1;
        int same = view.len == PyBytes_GET_SIZE(key) &&
                   memcmp(view.buf, PyBytes_AS_STRING(key), (size_t)view.len) == 0;
        PyBuffer_Release(&view);
        return same;
    }
    return PyObject_RichCompareBool(key, arg, Py_EQ);
}

/* Whether ``kept`` holds the facts of these arguments; -1 on an error comparing. (A
 * comparison that ran Python code could let another thread replace the entry: then it is
 * not a match; each key is held while it is compared.) */
static int
kept_matches(Kept *kept, PyObject *const *args, Py_ssize_t nargs, Seen *seen)
{
    unsigned long generation = kept->generation;
    if (kept->nargs != nargs || nargs == 0)
        return 0;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if ((PyObject *)Py_TYPE(args[i]) != kept->facts[2 * i])
            return 0;
        PyObject *key = kept->facts[2 * i + 1];
        Py_INCREF(key);
        int same = same_facts(args[i], &seen[i], key);
        Py_DECREF(key);
        if (same != 1 || kept->generation != generation)
            return same < 0 ? -1 : 0;
    }
    return 1;
}


/* The keys of these arguments' facts (``key_of``) into ``keys``: 0, or -1 (none left). */
static int
keys_of(Relaunch *self, PyObject *const *args, Py_ssize_t nargs, Seen *seen, PyObject **keys)
{
    for (Py_ssize_t i = 0; i < nargs; i++) {
        keys[i] = key_of(self, args[i], &seen[i]);
        if (keys[i] == NULL) {
            for (Py_ssize_t j = 0; j < i; j++)
                Py_DECREF(keys[j]);
            return -1;
        }
    }
    return 0;
}
