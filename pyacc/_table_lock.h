/* The present table's lock as pyacc's C extensions take it (pyacc/_express_plan.c.h, the
 * express lane; mapping/_cprobe.c, the data lane): the same re-entrant lock the Python
 * verbs hold (``PresentTable._lock``), so that a C lane waits for a held compute call or
 * another thread's directive exactly as they do. A worker queue's lock
 * (``WorkerQueue._lock``, pyacc/_queue_take.c.h) is taken the same way: any object's
 * ``_lock``.
 *
 * Two kinds of lock. The table's own, ``pyacc.mapping._cprobe.TableLock``
 * (mapping/_reentrant_lock.c.h; its layout, ``ReentrantLock``, is here), is taken and
 * given in place: its owner and count are read and set with the GIL held, and only a
 * lock another thread holds is waited for, with the GIL released. Any other lock (a
 * ``threading.RLock`` where _cprobe is not built) is taken
 * through its Python ``acquire``/``release``: ``TableLock`` remembers the lock last seen
 * and its bound methods, made again only when the lock is not the one last seen.
 *
 * The lock is read as ``table._lock`` at each take (in the child of a fork the table has
 * a new one): in place when ``_lock`` is a ``__slots__`` member of the owner's type (the
 * table's, a WorkerQueue's; the offset learnt once per type, ``tl_lock_of``), else by
 * name. An extension recognises the table's lock type by its name and size the first
 * time it meets it (``tl_reentrant``), so that _fastcall needs no import of _cprobe.
 * ``table_lock_init`` interns the three names once per extension (each includes this
 * header: its functions are ``static``). The GIL is held throughout, except while a take
 * waits.
 */
#ifndef PYACC_TABLE_LOCK_H
#define PYACC_TABLE_LOCK_H

#include <Python.h>
#include <pythread.h>
#include <limits.h>
#include <string.h>
#include <time.h>
#if defined(__linux__) && PY_VERSION_HEX < 0x030F0000
#include <errno.h>
#include <semaphore.h>
#define TL_SEMAPHORES 1  /* CPython's locks may be POSIX semaphores here (tl_try) */
#endif

#include "../mapping/_slot_fields.h"

#define TABLE_LOCK_TYPE_NAME "pyacc.mapping._cprobe.TableLock"

/* pyacc.mapping._cprobe.TableLock: threading.RLock's state, read and set with the GIL held */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;  /* held while count > 0 (and briefly before, by a new owner) */
    unsigned long owner;      /* PyThread_get_thread_ident() of the holder while count > 0 */
    unsigned long count;      /* how many times the owner took it */
    PyObject *weakrefs;
} ReentrantLock;

typedef struct {
    PyObject *lock, *acquire, *release;  /* the (other kind of) lock last seen, its bound methods */
    TypedField lock_of;     /* ``_lock`` in the type of its owner last met: in place where a
                             * slot (``_slot_fields.h``) */
} TableLock;

static PyTypeObject *tl_reentrant;  /* TableLock's type, once met (or set by _cprobe) */

static int64_t tl_now_us(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000;
}

/* 1 when CPython's locks are POSIX semaphores (``tl_semaphores_found``), tried with
 * ``sem_trywait`` (``tl_try``) */
#ifdef TL_SEMAPHORES
static int tl_semaphores;
#else
#define tl_semaphores 0
#endif

/* One try for ``lock``, never waiting: 1 taken, 0 not. CPython's own try
 * (``PyThread_acquire_lock_timed(lock, 0, 0)``) reads the monotonic clock for a deadline
 * that a try never uses: ~90 machine instructions and, on a VM, ~23 ns (a fifth of a
 * present-data call). Where its locks are POSIX semaphores (``PyThread_allocate_lock``'s
 * ``sem_t``: ``sys.thread_info.lock == 'semaphore'``), the try is the ``sem_trywait``
 * CPython's own makes after that read, retried on EINTR as it retries. */
static inline int tl_try(PyThread_type_lock lock) {
#ifdef TL_SEMAPHORES
    if (tl_semaphores) {
        while (sem_trywait((sem_t *)lock) != 0)
            if (errno != EINTR)
                return 0;
        return 1;
    }
#endif
    return PyThread_acquire_lock_timed(lock, 0, 0) == PY_LOCK_ACQUIRED;
}

#ifdef TL_SEMAPHORES
/* Whether CPython's locks are POSIX semaphores: ``sys.thread_info`` says so, and a lock
 * taken and given by CPython and by ``sem_trywait``/``sem_post`` is seen alike by both
 * (a check made once, at ``table_lock_init``). */
static int tl_semaphores_found(void) {
    PyObject *info = PySys_GetObject("thread_info");  /* borrowed */
    PyObject *kind = info == NULL ? NULL : PyObject_GetAttrString(info, "lock");
    int said = kind != NULL && PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "semaphore") == 0;
    Py_XDECREF(kind);
    PyErr_Clear();
    PyThread_type_lock lock = said ? PyThread_allocate_lock() : NULL;
    if (lock == NULL)
        return 0;
    sem_t *sem = (sem_t *)lock;
    int alike = PyThread_acquire_lock_timed(lock, 0, 0) == PY_LOCK_ACQUIRED &&
                sem_trywait(sem) != 0 && errno == EAGAIN;   /* CPython's take seen here */
    PyThread_release_lock(lock);
    alike = alike && sem_trywait(sem) == 0;                 /* its give seen here: taken */
    alike = alike && PyThread_acquire_lock_timed(lock, 0, 0) == PY_LOCK_FAILURE;  /* and seen there */
    PyThread_free_lock(lock);  /* (sem_destroy: taken or not) */
    return alike;
}
#endif

/* Wait for ``lock`` with the GIL released, ``wait_us`` at most (-1: for ever; 0: not at
 * all): 1 taken, 0 not; -1 when a signal handler raised meanwhile (as _thread's
 * acquire_timed: an interrupted wait runs the handlers, then waits again). */
static int tl_wait(PyThread_type_lock lock, int64_t wait_us) {
    if (tl_try(lock))
        return 1;
    if (wait_us == 0)
        return 0;
    if (wait_us > (int64_t)PY_TIMEOUT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "timeout value is too large");
        return -1;
    }
    int64_t deadline = wait_us > 0 ? tl_now_us() + wait_us : 0;
    for (;;) {
        PyLockStatus status;
        Py_BEGIN_ALLOW_THREADS
        status = PyThread_acquire_lock_timed(lock, (PY_TIMEOUT_T)wait_us, 1);
        Py_END_ALLOW_THREADS
        if (status != PY_LOCK_INTR)
            return status == PY_LOCK_ACQUIRED;
        if (Py_MakePendingCalls() < 0)
            return -1;
        if (wait_us > 0 && (wait_us = deadline - tl_now_us()) <= 0)
            return tl_try(lock);
    }
}

/* One level of ``self`` for this thread, waiting ``wait_us`` at most: 1 taken, 0 not, -1
 * an error (set). */
static int reentrant_lock_take(ReentrantLock *self, int64_t wait_us) {
    unsigned long me = PyThread_get_thread_ident();
    if (self->count > 0 && self->owner == me) {
        if (self->count == ULONG_MAX) {
            PyErr_SetString(PyExc_OverflowError, "Internal lock count overflowed");
            return -1;
        }
        self->count++;
        return 1;
    }
    int taken = tl_wait(self->lock, wait_us);
    if (taken == 1) {
        self->owner = me;
        self->count = 1;
    }
    return taken;
}

/* One level less; -1 with RuntimeError when this thread does not hold ``self``. */
static int reentrant_lock_give(ReentrantLock *self) {
    if (self->count == 0 || self->owner != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
        return -1;
    }
    if (--self->count == 0) {
        self->owner = 0;
        PyThread_release_lock(self->lock);
    }
    return 0;
}

/* Whether ``lock`` is the table's own kind (recognised by name and size once). */
static int tl_is_reentrant(PyObject *lock) {
    PyTypeObject *type = Py_TYPE(lock);
    if (type == tl_reentrant)
        return 1;
    if (tl_reentrant != NULL || type->tp_basicsize != (Py_ssize_t)sizeof(ReentrantLock) ||
            strcmp(type->tp_name, TABLE_LOCK_TYPE_NAME) != 0)
        return 0;
    tl_reentrant = (PyTypeObject *)Py_NewRef(type);
    return 1;
}

static PyObject *tl_lock_name, *tl_acquire_name, *tl_release_name;

static int table_lock_init(void) {
    tl_lock_name = PyUnicode_InternFromString("_lock");
    tl_acquire_name = PyUnicode_InternFromString("acquire");
    tl_release_name = PyUnicode_InternFromString("release");
#ifdef TL_SEMAPHORES
    tl_semaphores = tl_semaphores_found();
#endif
    return tl_lock_name && tl_acquire_name && tl_release_name ? 0 : -1;
}

#define TABLE_LOCK_VISIT(bound) \
    do { Py_VISIT((bound).lock); Py_VISIT((bound).acquire); Py_VISIT((bound).release); \
         Py_VISIT((bound).lock_of.type); } while (0)

static void table_lock_clear(TableLock *bound) {
    Py_CLEAR(bound->lock);
    Py_CLEAR(bound->acquire);
    Py_CLEAR(bound->release);
    Py_CLEAR(bound->lock_of.type);
}

/* ``owner._lock`` (a new reference; NULL with an exception set): read in place when it is
 * a ``__slots__`` member of the owner's type (its field learnt once per type,
 * ``slot_field_init``), else by name (``PyObject_GetAttr``, ~150 instructions). */
static PyObject *tl_lock_of(TableLock *bound, PyObject *owner) {
    return typed_field_get(&bound->lock_of, owner, tl_lock_name);
}

/* ``table``'s lock, acquired: 0, and ``*release`` is what gives it back (a new reference,
 * for ``table_lock_give`` and then Py_DECREF: the lock itself, or its bound release); -1
 * with an exception set, nothing held. */
static int table_lock_take(TableLock *bound, PyObject *table, PyObject **release) {
    PyObject *lock = tl_lock_of(bound, table);
    if (lock == NULL)
        return -1;
    if (tl_is_reentrant(lock)) {  /* taken in place; *release is the lock itself */
        if (reentrant_lock_take((ReentrantLock *)lock, -1) < 0) {
            Py_DECREF(lock);
            return -1;
        }
        *release = lock;
        return 0;
    }
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

/* Whether a section may skip ``table``'s lock: 1 when the lock is a ``TableLock`` that
 * no thread holds (count 0) or that this thread holds; 0 otherwise (another thread holds
 * it, or it is another kind of lock); -1 with an exception set.
 *
 * The rule it serves: a section that runs with the GIL held from start to end — it runs
 * no Python code, releases no GIL, and makes no object the garbage collector tracks
 * (whose allocation may start a collection, and finalizers with it) before its last
 * write — cannot interleave with any other thread's section, because every holder of the
 * lock sets its count, and every reader of the table runs, with the GIL held. A thread
 * that took the semaphore while waiting without the GIL (``tl_wait``) but has not yet set
 * the count has not started its section; it starts after this one, which is a valid
 * order. A lock this thread holds is re-entered (as a take would: count +1, then −1). Not
 * where there is no GIL (a free-threaded build): there, 0. */
static inline int table_lock_free_here(TableLock *bound, PyObject *table) {
#ifdef Py_GIL_DISABLED
    return 0;
#else
    PyObject *lock = tl_lock_of(bound, table);
    if (lock == NULL)
        return -1;
    ReentrantLock *held = tl_is_reentrant(lock) ? (ReentrantLock *)lock : NULL;
    int free = held != NULL && (held->count == 0 || held->owner == PyThread_get_thread_ident());
    Py_DECREF(lock);
    return free;
#endif
}

/* Give back what ``table_lock_take`` gave as ``release`` (not dropped), keeping a pending
 * exception (which came first); -1 when the release itself failed (its exception set,
 * unless one was pending). */
static int table_lock_give(PyObject *release) {
    int in_place = Py_TYPE(release) == tl_reentrant;  /* (no Python code runs) */
    if (in_place && !PyErr_Occurred())
        return reentrant_lock_give((ReentrantLock *)release);
    PyObject *type = NULL, *value = NULL, *traceback = NULL;
    int pending = PyErr_Occurred() != NULL;
    if (pending)
        PyErr_Fetch(&type, &value, &traceback);
    PyObject *done = !in_place ? PyObject_CallNoArgs(release)
        : reentrant_lock_give((ReentrantLock *)release) < 0 ? NULL : Py_NewRef(Py_None);
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
