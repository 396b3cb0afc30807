/* The present table's lock: ``pyacc.mapping._cprobe.TableLock``, a re-entrant lock with
 * ``threading.RLock``'s semantics whose state C code reads and changes in place.
 *
 * Why not ``threading.RLock``: the C lanes (``_cprobe.DataLane``, the express lane of
 * ``pyacc/_fastcall.c``) take the table lock on every present-data call, and an RLock is
 * taken from C only through its Python methods (``acquire`` parses its arguments each
 * time: measured, ~490 machine instructions more a take and give than this lock's, about
 * a tenth of an ``acc.copyin`` of present data then). This lock is taken by
 * ``table_lock_take`` (``pyacc/_table_lock.h``, which also holds its layout,
 * ``ReentrantLock``) in a few dozen instructions: its owner and count are read and
 * set with the GIL held, and only a lock held by another thread is waited for, with the
 * GIL released (as ``_thread``'s ``acquire_timed``: interrupted waits run the signal
 * handlers, whose exception ends the wait).
 *
 * Python sees ``acquire(blocking=True, timeout=-1)``, ``release()``, ``__enter__``,
 * ``__exit__``, ``_is_owned()`` and ``threading.Condition``'s ``_release_save``/
 * ``_acquire_restore``, as on an RLock; releasing a lock this thread does not hold raises
 * RuntimeError. Included by ``mapping/_cprobe.c`` (one translation unit).
 */

static PyObject *lock_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "TableLock() takes no arguments");
        return NULL;
    }
    ReentrantLock *self = (ReentrantLock *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if ((self->lock = PyThread_allocate_lock()) == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "TableLock: cannot allocate a lock");
        return NULL;
    }
    return (PyObject *)self;
}

static void lock_dealloc(ReentrantLock *self) {
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->lock != NULL) {
        if (self->count > 0)
            PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *lock_acquire(ReentrantLock *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|pd:acquire", keywords, &blocking, &timeout))
        return NULL;
    if (!blocking && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout < 0 && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    if (timeout != timeout) {  /* NaN */
        PyErr_SetString(PyExc_ValueError, "Invalid value NaN (not a number)");
        return NULL;
    }
    if (timeout != -1 && timeout * 1e6 > (double)PY_TIMEOUT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "timeout value is too large");
        return NULL;
    }
    int64_t wait_us = blocking ? -1 : 0;
    if (blocking && timeout != -1) {  /* up to the next microsecond, as _thread's timeouts */
        wait_us = (int64_t)(timeout * 1e6);
        wait_us += (double)wait_us < timeout * 1e6;
    }
    int taken = reentrant_lock_take(self, wait_us);
    return taken < 0 ? NULL : PyBool_FromLong(taken);
}

static PyObject *lock_enter(ReentrantLock *self, PyObject *unused) {
    return reentrant_lock_take(self, -1) < 0 ? NULL : Py_NewRef(Py_True);
}

static PyObject *lock_release(ReentrantLock *self, PyObject *unused) {
    return reentrant_lock_give(self) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *lock_exit(ReentrantLock *self, PyObject *const *args, Py_ssize_t nargs) {
    return reentrant_lock_give(self) < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *lock_is_owned(ReentrantLock *self, PyObject *unused) {
    return PyBool_FromLong(self->count > 0 && self->owner == PyThread_get_thread_ident());
}

/* threading.Condition's protocol for a re-entrant lock: every level given back at once
 * while it waits, and taken back after. */
static PyObject *lock_release_save(ReentrantLock *self, PyObject *unused) {
    if (self->count == 0 || self->owner != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
        return NULL;
    }
    PyObject *saved = Py_BuildValue("(kk)", self->count, self->owner);
    if (saved == NULL)
        return NULL;
    self->count = 0;
    self->owner = 0;
    PyThread_release_lock(self->lock);
    return saved;
}

static PyObject *lock_acquire_restore(ReentrantLock *self, PyObject *saved) {
    unsigned long count, owner;
    if (!PyArg_ParseTuple(saved, "kk:_acquire_restore", &count, &owner))
        return NULL;
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {  /* not interruptible, as RLock's */
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    self->owner = owner;
    self->count = count;
    Py_RETURN_NONE;
}

static PyObject *lock_repr(ReentrantLock *self) {
    return PyUnicode_FromFormat("<%s %s owner=%lu count=%lu at %p>", Py_TYPE(self)->tp_name,
                                self->count > 0 ? "locked" : "unlocked", self->count > 0 ? self->owner : 0,
                                self->count, self);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))lock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool: as threading.RLock.acquire."},
    {"release", (PyCFunction)lock_release, METH_NOARGS,
     "release(): one level less; RuntimeError when this thread does not hold the lock."},
    {"__enter__", (PyCFunction)lock_enter, METH_NOARGS, "acquire()"},
    {"__exit__", (PyCFunction)(void (*)(void))lock_exit, METH_FASTCALL, "release()"},
    {"_is_owned", (PyCFunction)lock_is_owned, METH_NOARGS, "whether this thread holds the lock"},
    {"_release_save", (PyCFunction)lock_release_save, METH_NOARGS, "for threading.Condition: every level released"},
    {"_acquire_restore", (PyCFunction)lock_acquire_restore, METH_O, "for threading.Condition: the levels taken back"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReentrantLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = TABLE_LOCK_TYPE_NAME,
    .tp_doc = "The present table's re-entrant lock (threading.RLock's semantics), taken in place by "
              "pyacc's C lanes.",
    .tp_basicsize = sizeof(ReentrantLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = lock_new,
    .tp_dealloc = (destructor)lock_dealloc,
    .tp_repr = (reprfunc)lock_repr,
    .tp_weaklistoffset = offsetof(ReentrantLock, weakrefs),
    .tp_methods = lock_methods,
};
