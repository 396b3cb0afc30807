/* pyacc/_direct_method.h: a one-argument C method of a static type, called directly.
 *
 * ``direct_call(&m, self, arg)`` is ``self.<m.name>(arg)``. When ``self``'s type is the one
 * last seen and that type is a static type (its methods cannot be replaced) whose
 * attribute ``m.name`` is a ``METH_O`` method descriptor of that type, the method's C
 * function is called at once, without the method lookup and the descriptor's dispatch
 * of ``PyObject_CallMethodOneArg``; any other object (a Python stand-in, a subclass) is
 * called by name. Used for the data lane's verbs (``mapping/_cprobe.c``'s ``DataLane``:
 * ``join``, ``part``, ``enter``, ...), which every data region and data routine of
 * present data calls once or twice.
 *
 * Invariants: a ``DirectMethod`` is read and written with the GIL held; its ``type`` is
 * only ever a static type (never freed), so it is kept without a reference.
 */
#ifndef PYACC_DIRECT_METHOD_H
#define PYACC_DIRECT_METHOD_H

typedef struct {
    PyObject *name;         /* the method's name (interned, owned by the caller) */
    PyTypeObject *type;     /* the static type whose method ``function`` is, or NULL */
    PyCFunction function;   /* its C function (METH_O) */
} DirectMethod;

/* Learn ``type``'s method when it is a static type's own METH_O method; 0, or -1 on error. */
static int direct_learn(DirectMethod *m, PyTypeObject *type) {
    if (type->tp_flags & Py_TPFLAGS_HEAPTYPE)
        return 0;
    PyObject *descr = PyObject_GetAttr((PyObject *)type, m->name);
    if (descr == NULL)
        return -1;
    if (Py_IS_TYPE(descr, &PyMethodDescr_Type)) {
        PyMethodDef *def = ((PyMethodDescrObject *)descr)->d_method;
        if ((def->ml_flags & ~METH_COEXIST) == METH_O && PyDescr_TYPE(descr) == type) {
            m->function = def->ml_meth;
            m->type = type;
        }
    }
    Py_DECREF(descr);
    return 0;
}

static PyObject *direct_call(DirectMethod *m, PyObject *self, PyObject *arg) {
    PyTypeObject *type = Py_TYPE(self);
    if (type != m->type && direct_learn(m, type) < 0)
        return NULL;
    if (type == m->type)
        return m->function(self, arg);
    return PyObject_CallMethodOneArg(self, m->name, arg);
}

#endif
