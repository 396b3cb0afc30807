/* The present table's lock as pyacc's C extensions take it (pyacc/_express_plan.c.h, the
 * express lane; mapping/_cprobe.c, the data lane): the same re-entrant lock the Python
 * verbs hold (``PresentTable._lock``, a ``threading.RLock``), so that a C lane waits for a
 * held compute call or another thread's directive exactly as they do. A worker queue's
 * lock (``WorkerQueue._lock``, pyacc/_at_once.c.h) is taken the same way: any object's
 * ``_lock``.
 *
 * ``TableLock`` remembers the lock last seen and its bound ``acquire``/``release``. The
 * lock is read as ``table._lock`` at each take (in the child of a fork the table has a new
 * one) and its bound methods are made again only when it is not the one last seen.
 * ``table_lock_init`` interns the three names once per extension (each includes this
 * header: its functions are ``static``). The GIL is held throughout, except while the
 * lock's acquire waits.
 */
#ifndef PYACC_TABLE_LOCK_H
#define PYACC_TABLE_LOCK_H

#include <Python.h>

typedef struct {
    PyObject *lock, *acquire, *release;  /* the table lock last seen, its bound methods */
} TableLock;

static PyObject *tl_lock_name, *tl_acquire_name, *tl_release_name;

static int table_lock_init(void) {
    tl_lock_name = PyUnicode_InternFromString("_lock");
    tl_acquire_name = PyUnicode_InternFromString("acquire");
    tl_release_name = PyUnicode_InternFromString("release");
    return tl_lock_name && tl_acquire_name && tl_release_name ? 0 : -1;
}

#define TABLE_LOCK_VISIT(bound) \
    do { Py_VISIT((bound).lock); Py_VISIT((bound).acquire); Py_VISIT((bound).release); } while (0)

static void table_lock_clear(TableLock *bound) {
    Py_CLEAR(bound->lock);
    Py_CLEAR(bound->acquire);
    Py_CLEAR(bound->release);
}

/* ``table``'s lock, acquired: 0, and ``*release`` is its bound release (a new reference,
 * for ``table_lock_give`` and then Py_DECREF); -1 with an exception set, nothing held. */
static int table_lock_take(TableLock *bound, PyObject *table, PyObject **release) {
    PyObject *lock = PyObject_GetAttr(table, tl_lock_name);
    if (lock == NULL)
        return -1;
    if (lock != bound->lock) {
        PyObject *acquire = PyObject_GetAttr(lock, tl_acquire_name);
        PyObject *released = acquire == NULL ? NULL : PyObject_GetAttr(lock, tl_release_name);
        if (released == NULL) {
            Py_XDECREF(acquire);
            Py_DECREF(lock);
            return -1;
        }
        Py_XSETREF(bound->acquire, acquire);
        Py_XSETREF(bound->release, released);
        Py_XSETREF(bound->lock, Py_NewRef(lock));
    }
    Py_DECREF(lock);
    PyObject *acquire = Py_NewRef(bound->acquire);  /* (another thread may bind a new */
    *release = Py_NewRef(bound->release);           /* lock while this one waits) */
    PyObject *taken = PyObject_CallNoArgs(acquire);
    Py_DECREF(acquire);
    if (taken == NULL) {
        Py_CLEAR(*release);
        return -1;
    }
    Py_DECREF(taken);
    return 0;
}

/* Call the bound ``release`` (not dropped), keeping a pending exception (which came
 * first); -1 when the release itself failed (its exception set, unless one was pending). */
static int table_lock_give(PyObject *release) {
    PyObject *type = NULL, *value = NULL, *traceback = NULL;
    int pending = PyErr_Occurred() != NULL;
    if (pending)
        PyErr_Fetch(&type, &value, &traceback);
    PyObject *done = PyObject_CallNoArgs(release);
    if (pending) {
        if (done == NULL)
            PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

#endif
