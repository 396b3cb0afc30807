/* pyacc._fastcall: the express lane of a compute call, in C.
 *
 * Owns the type ``FastCall``, the base class of ``pyacc.ComputeRegion``. Its ``tp_call``
 * repeats a call that the Python launcher has just replayed (``ComputeRegion._arm_express``
 * hands it an *express plan*: what that replay checked and what it launched) when every
 * check of that replay still holds, and otherwise calls ``self._call_slow(*args, **kw)``,
 * the Python launcher. The checks are exactly the Python replay's
 * (``pyacc/_compute.py``, ``mapping/compute.py``), in the same order of cost:
 *
 *   - the call: positional arguments only, as many as the plan's; nobody subscribes to
 *     any event (``BUS.silent[0]``);
 *   - each mapped array: on a device with separate memory, the same object
 *     (a weak reference) with the same data pointer, shape, strides, dtype and flags; on
 *     the host device (shared memory, nothing mapped) an array of the same type, dtype
 *     and number of dimensions (the kernel's argument kinds);
 *   - each other argument: a scalar of the same type;
 *   - the thread's current runtime (``ICVS.runtime``), no launch installed on its device
 *     (fault injection), the statistics as the only tally subscriber, the enclosing
 *     ``default`` when the region reads it, the environment that decides a kernel
 *     (``kernel_env``; values compared by value when not the same object);
 *   - on a device with separate memory: the present table's version, read again once
 *     the table lock is held; the lock is held until the kernel returns (a *held* replay,
 *     ``DeviceRuntime.hold_structured``).
 *
 * The per-thread and environment checks are remembered (a plan's *context memo*): after
 * they held on a thread, they are not read again on that thread while nothing they read
 * can have changed — no write to any thread's ``ICVS.runtime`` or open regions' default
 * (``context_changed()``, called by ``pyacc._devices`` after each; a module-wide epoch),
 * and the same version tag of ``os.environ._data`` (CPython's dict version, changed by
 * every change of the dict; before 3.14). Only when the ICVs are one per thread state
 * (``threading.local``; not gevent's greenlet-local one, whose greenlets share a thread
 * state: ``configure(..., remember=False)`` and every check runs). The device's instance dict is looked up again
 * only when its tag changed (before 3.13: from 3.13 an attribute set may not touch the
 * dict's tag, and it is looked up at every call). These lookups cost ~0.5 µs a call
 * after a kernel has streamed its arrays through the caches.
 *
 * Then it counts the launch (the statistics' launch cell of the device), calls the kernel
 * with the plan's device arrays in place of the mapped host arrays, and releases the lock.
 * A kernel that raises goes to ``self._express_failed(error)`` (Python), which raises what
 * the Python launcher would.
 *
 * NumPy arrays are read through NumPy's array object layout (``pyacc/_numpy_abi.h``:
 * ``PyArrayObject_fields``, part of NumPy's ABI, the same in NumPy 1.x and 2.x), so the
 * module builds without NumPy's headers. Every array a plan reads was checked at arming to be a
 * numpy.ndarray (or a subclass): an object of the same type has that layout.
 *
 * Invariants: a plan keeps no host array alive (weak references); it holds strong
 * references only to what it compares (dtypes, the runtime, the table) and to what it
 * launches (kernel, device arrays that hold no memory), and takes part in garbage
 * collection. A region keeps at most four plans, one per call plan of the launcher. The GIL is held throughout, except where
 * the kernel or the lock releases it; a call holds its plans tuple for its duration, so
 * re-arming by another thread never frees a plan in use.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "_numpy_abi.h"

/* what Numba's typing reads of an array's flags */
#define LAYOUT_FLAGS (NPY_C_CONTIGUOUS | NPY_F_CONTIGUOUS | NPY_ALIGNED | NPY_WRITEABLE)

/* -- module state, set once by configure() --------------------------------------------- */
static PyObject *g_icvs;         /* pyacc._devices.ICVS (thread-local) */
static PyObject *g_environ;      /* os.environ._data */
static PyObject *g_env_keys;     /* tuple of bytes: the variables kernel_env() reads */
static PyObject *g_silent;       /* BUS.silent: [bool] */
static PyObject *g_tally_alone;  /* BUS.tally_alone: [bool], the statistics are the only tally */
static PyTypeObject *g_ndarray;  /* numpy.ndarray */
static PyObject *g_async_result; /* pyacc._compute.AsyncResult (configure_async), or NULL */
static int g_enabled = 1;        /* set_enabled(): plans are tried at all */
static uint64_t g_context_epoch = 1;  /* bumped by context_changed() */
static int g_remember = 1;       /* configure(): one ICVS per thread state, the memo holds */
static PyObject *s_runtime, *s_region_stack, *s_innermost_default, *s_version, *s_lock,
                *s_acquire, *s_release, *s_call_slow, *s_express_failed, *s_launch,
                *s_async, *s_ran_at_once, *s_queue_ran_at_once;

/* -- plans ------------------------------------------------------------------------------ */
typedef struct {
    Py_ssize_t slot;
    PyObject *ref;        /* weak reference to the host array (exact slots), else NULL */
    PyTypeObject *type;   /* the host array's type */
    PyObject *device;     /* what the kernel gets instead (strong), or NULL: the argument */
    PyObject *descr;      /* strong: compared by address */
    char *data;
    int nd;
    int flags;
    Py_ssize_t *layout;   /* dims then strides (exact slots) */
    Py_ssize_t itemsize;  /* the dtype's (the same at every call: the dtype is checked) */
} ArraySlot;

typedef struct {
    Py_ssize_t slot;
    PyTypeObject *type;
} ScalarSlot;

typedef struct {
    PyObject_HEAD
    PyObject *owner;       /* what the plan was made from (one plan per owner) */
    Py_ssize_t nargs;
    PyObject *runtime;     /* the runtime the call ran on */
    PyObject *ranges;      /* the present table's SortedRanges (its .version), or NULL */
    PyObject *table;       /* the present table (its ._lock), or NULL: nothing held */
    PyObject *version;
    PyObject *kernel;
    PyObject *check_default;  /* NULL: not read; else the expected innermost default */
    PyObject *env_values;  /* tuple: the expected values (None: unset) */
    PyObject *launch_cell; /* list [count] of the statistics */
    PyObject *device_dict; /* the device's instance dict: no "launch" installed there */
    uint64_t memo_thread;  /* context memo: the thread (PyThreadState id, 0: none) on which */
    uint64_t memo_epoch;   /* the context checks last held, at this g_context_epoch, */
    uint64_t memo_env_tag;  /* and this os.environ version (0: unknown) */
    uint64_t memo_device_tag;  /* device_dict's version when it had no "launch" (0: none) */
    int substitutes;       /* some slot has a device array */
    PyObject *fixed_args;  /* the kernel's arguments when every slot has one, else NULL */
    PyObject *lock;        /* the table lock last seen, its bound acquire and release */
    PyObject *acquire, *release;
    PyObject *take_at_once; /* the device's QueueSet.take_at_once, or NULL: async calls
                             * take the Python launcher */
    Py_ssize_t narrays;
    ArraySlot *arrays;
    Py_ssize_t nscalars;
    ScalarSlot *scalars;
} ExpressPlan;

static int plan_traverse(ExpressPlan *plan, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < plan->narrays; i++) {
        ArraySlot *a = &plan->arrays[i];
        Py_VISIT(a->ref);
        Py_VISIT((PyObject *)a->type);
        Py_VISIT(a->device);
        Py_VISIT(a->descr);
    }
    for (Py_ssize_t i = 0; i < plan->nscalars; i++)
        Py_VISIT((PyObject *)plan->scalars[i].type);
    Py_VISIT(plan->owner);
    Py_VISIT(plan->runtime);
    Py_VISIT(plan->ranges);
    Py_VISIT(plan->table);
    Py_VISIT(plan->version);
    Py_VISIT(plan->kernel);
    Py_VISIT(plan->check_default);
    Py_VISIT(plan->env_values);
    Py_VISIT(plan->launch_cell);
    Py_VISIT(plan->device_dict);
    Py_VISIT(plan->fixed_args);
    Py_VISIT(plan->lock);
    Py_VISIT(plan->acquire);
    Py_VISIT(plan->release);
    Py_VISIT(plan->take_at_once);
    return 0;
}

static void plan_dealloc(ExpressPlan *plan) {
    PyObject_GC_UnTrack(plan);
    for (Py_ssize_t i = 0; i < plan->narrays; i++) {
        ArraySlot *a = &plan->arrays[i];
        Py_XDECREF(a->ref);
        Py_XDECREF((PyObject *)a->type);
        Py_XDECREF(a->device);
        Py_XDECREF(a->descr);
        PyMem_Free(a->layout);
    }
    PyMem_Free(plan->arrays);
    for (Py_ssize_t i = 0; i < plan->nscalars; i++)
        Py_XDECREF((PyObject *)plan->scalars[i].type);
    PyMem_Free(plan->scalars);
    Py_XDECREF(plan->owner);
    Py_XDECREF(plan->runtime);
    Py_XDECREF(plan->ranges);
    Py_XDECREF(plan->table);
    Py_XDECREF(plan->version);
    Py_XDECREF(plan->kernel);
    Py_XDECREF(plan->check_default);
    Py_XDECREF(plan->env_values);
    Py_XDECREF(plan->launch_cell);
    Py_XDECREF(plan->device_dict);
    Py_XDECREF(plan->fixed_args);
    Py_XDECREF(plan->lock);
    Py_XDECREF(plan->acquire);
    Py_XDECREF(plan->release);
    Py_XDECREF(plan->take_at_once);
    Py_TYPE(plan)->tp_free((PyObject *)plan);
}

static PyTypeObject ExpressPlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyacc._fastcall.ExpressPlan",
    .tp_basicsize = sizeof(ExpressPlan),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    /* no tp_clear: a plan is reached only through its region's plans, which the
     * region's clear (FastCall's) drops, so a cycle through a plan is broken there */
    .tp_traverse = (traverseproc)plan_traverse,
    .tp_free = PyObject_GC_Del,
    .tp_doc = "An express plan (FastCall._arm).",
};

static int is_target(PyObject *ref, PyObject *object) {
    /* whether weak reference ``ref`` still refers to ``object`` */
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *target = NULL;
    if (PyWeakref_GetRef(ref, &target) < 0) {
        PyErr_Clear();
        return 0;
    }
    Py_XDECREF(target);  /* the caller holds ``object``: only the address is compared */
    return target == object;
#else
    return PyWeakref_GET_OBJECT(ref) == object;
#endif
}

/* -- the checks ---------------------------------------------------------------------------- */
static int arrays_match(ExpressPlan *plan, PyObject *args) {
    for (Py_ssize_t i = 0; i < plan->narrays; i++) {
        ArraySlot *a = &plan->arrays[i];
        PyObject *arg = PyTuple_GET_ITEM(args, a->slot);
        if (a->ref != NULL) {
            if (!is_target(a->ref, arg))
                return 0;
        } else if (Py_TYPE(arg) != a->type) {
            return 0;
        }
        ArrayFields *f = ARRAY(arg);
        if (f->nd != a->nd)
            return 0;
        if (f->descr != a->descr) {  /* an equal dtype may be another object */
            int equal = PyObject_RichCompareBool(f->descr, a->descr, Py_EQ);
            if (equal != 1) {
                PyErr_Clear();
                return 0;
            }
        }
        if (a->layout != NULL) {
            if (f->data != a->data || (f->flags & LAYOUT_FLAGS) != a->flags)
                return 0;
            size_t bytes = (size_t)a->nd * sizeof(Py_ssize_t);
            if (bytes && (memcmp(f->dimensions, a->layout, bytes) != 0 ||
                          memcmp(f->strides, a->layout + a->nd, bytes) != 0))
                return 0;
        }
    }
    for (Py_ssize_t i = 0; i < plan->nscalars; i++) {
        if (Py_TYPE(PyTuple_GET_ITEM(args, plan->scalars[i].slot)) != plan->scalars[i].type)
            return 0;
    }
    return 1;
}

/* 1: same; 0: not; -1: error */
static int same_attr(PyObject *owner, PyObject *name, PyObject *expected, int by_value) {
    PyObject *value = PyObject_GetAttr(owner, name);
    if (value == NULL)
        return -1;
    int same = value == expected;
    if (!same && by_value)
        same = PyObject_RichCompareBool(value, expected, Py_EQ);
    Py_DECREF(value);
    return same;
}

/* A dict's version tag: changed by every change of the dict (PEP 509; CPython 3.10-3.13
 * keep it, deprecated from 3.12), 0 where there is none to read (every check then runs). */
static inline uint64_t dict_tag(PyObject *dict) {
#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_LIMITED_API)
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    return ((PyDictObject *)dict)->ma_version_tag;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#else
    (void)dict;
    return 0;
#endif
}

/* The tag of an object's instance dict, or 0: from 3.13 an attribute set on the object
 * may be stored in the object's inline values without touching its dict's tag. */
static inline uint64_t instance_dict_tag(PyObject *dict) {
#if PY_VERSION_HEX < 0x030D0000
    return dict_tag(dict);
#else
    (void)dict;
    return 0;
#endif
}

static inline uint64_t thread_id(void) {
    return PyThreadState_GetID(PyThreadState_Get());
}

/* The context memo: the checks of thread_context held on this thread and nothing they
 * read has changed since. */
static inline int context_remembered(ExpressPlan *plan) {
    return g_remember && plan->memo_thread == thread_id() && plan->memo_epoch == g_context_epoch &&
           plan->memo_env_tag != 0 && plan->memo_env_tag == dict_tag(g_environ);
}

/* The thread's current runtime, enclosing default and kernel environment. */
static int thread_context(ExpressPlan *plan) {
    int same = same_attr(g_icvs, s_runtime, plan->runtime, 0);
    if (same != 1)
        return same;
    if (plan->check_default != NULL) {
        PyObject *stack = PyObject_GetAttr(g_icvs, s_region_stack);
        if (stack == NULL)
            return -1;
        same = same_attr(stack, s_innermost_default, plan->check_default, 1);
        Py_DECREF(stack);
        if (same != 1)
            return same;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(g_env_keys);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyDict_GetItemWithError(g_environ, PyTuple_GET_ITEM(g_env_keys, i));
        if (value == NULL) {
            if (PyErr_Occurred())
                return -1;
            value = Py_None;
        }
        PyObject *expected = PyTuple_GET_ITEM(plan->env_values, i);
        if (value != expected) {  /* (os.environ stores a new bytes object at each write) */
            int equal = PyObject_RichCompareBool(value, expected, Py_EQ);
            if (equal != 1)
                return equal;
        }
    }
    return 1;
}

/* 1: no launch installed on the plan's device (fault injection); 0: one is; -1: error */
static int no_launch_installed(ExpressPlan *plan) {
    uint64_t tag = instance_dict_tag(plan->device_dict);
    if (tag != 0 && tag == plan->memo_device_tag)
        return 1;
    PyObject *launch = PyDict_GetItemWithError(plan->device_dict, s_launch);
    if (launch != NULL)
        return 0;
    if (PyErr_Occurred())
        return -1;
    plan->memo_device_tag = tag;
    return 1;
}

/* 1: the call's context is the plan's; 0: not; -1: error */
static int context_matches(ExpressPlan *plan) {
    if (PyList_GET_ITEM(g_tally_alone, 0) != Py_True)
        return 0;  /* another tally subscriber counts launches: BUS.count must see them */
    int ok = no_launch_installed(plan);
    if (ok != 1 || context_remembered(plan))
        return ok;
    /* what the memo will say, read before the checks (which may run Python code) */
    uint64_t thread = thread_id(), epoch = g_context_epoch, env_tag = dict_tag(g_environ);
    ok = thread_context(plan);
    if (ok == 1) {
        plan->memo_thread = thread;
        plan->memo_epoch = epoch;
        plan->memo_env_tag = env_tag;
    }
    return ok;
}

static int table_unchanged(ExpressPlan *plan) {
    return same_attr(plan->ranges, s_version, plan->version, 1);
}

/* -- one call ----------------------------------------------------------------------------- */
static PyObject *MISS = NULL;  /* sentinel (a private object()): the plan does not apply */
static PyObject *g_one = NULL;

static PyObject *kernel_arguments(ExpressPlan *plan, PyObject *args) {
    if (!plan->substitutes) {
        Py_INCREF(args);
        return args;
    }
    if (plan->fixed_args != NULL) {  /* every argument is a device array of the plan */
        Py_INCREF(plan->fixed_args);
        return plan->fixed_args;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *device_args = PyTuple_New(n);
    if (device_args == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(args, i);
        Py_INCREF(item);
        PyTuple_SET_ITEM(device_args, i, item);
    }
    for (Py_ssize_t i = 0; i < plan->narrays; i++) {
        ArraySlot *a = &plan->arrays[i];
        if (a->device != NULL) {
            PyObject *old = PyTuple_GET_ITEM(device_args, a->slot);
            Py_INCREF(a->device);
            PyTuple_SET_ITEM(device_args, a->slot, a->device);
            Py_DECREF(old);
        }
    }
    return device_args;
}

static int count_launch(ExpressPlan *plan) {
    PyObject *cell = plan->launch_cell;
    PyObject *count = PyNumber_Add(PyList_GET_ITEM(cell, 0), g_one);
    if (count == NULL)
        return -1;
    return PyList_SetItem(cell, 0, count);  /* steals count */
}

static int unlock(PyObject *release) {
    /* call the lock's bound ``release``, keeping a pending exception (which came
     * first); -1 when the release itself failed */
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

static PyObject *failed(PyObject *self) {
    /* the kernel raised: self._express_failed(error) raises what the launcher would */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL)
        PyException_SetTraceback(value, traceback);
    PyObject *result = value == NULL ? NULL
        : PyObject_CallMethodOneArg(self, s_express_failed, value);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return result;
}

static int bind_lock(ExpressPlan *plan) {
    /* the table's lock, read at each call (in the child of a fork the table has a new
     * one), with its bound acquire and release made when it is not the one last seen */
    PyObject *lock = PyObject_GetAttr(plan->table, s_lock);
    if (lock == NULL)
        return -1;
    if (lock == plan->lock) {
        Py_DECREF(lock);
        return 0;
    }
    PyObject *acquire = PyObject_GetAttr(lock, s_acquire);
    PyObject *release = acquire == NULL ? NULL : PyObject_GetAttr(lock, s_release);
    if (release == NULL) {
        Py_XDECREF(acquire);
        Py_DECREF(lock);
        return -1;
    }
    Py_XSETREF(plan->lock, lock);
    Py_XSETREF(plan->acquire, acquire);
    Py_XSETREF(plan->release, release);
    return 0;
}

/* The table's lock taken for the plan's call, with the table unchanged (1; ``*release``
 * is then the lock's bound release, or NULL when the plan holds nothing); 0: the table
 * changed (released again); -1: an error. */
static int hold_table(ExpressPlan *plan, PyObject **release) {
    *release = NULL;
    if (plan->table == NULL)
        return 1;
    if (bind_lock(plan) < 0)
        return -1;
    PyObject *acquire = Py_NewRef(plan->acquire);  /* (another thread may bind a */
    PyObject *bound = Py_NewRef(plan->release);     /* new lock meanwhile) */
    PyObject *taken = PyObject_CallNoArgs(acquire);
    Py_DECREF(acquire);
    if (taken == NULL) {
        Py_DECREF(bound);
        return -1;
    }
    Py_DECREF(taken);
    int ok = table_unchanged(plan);  /* held: nobody changes the table until unlock */
    if (ok != 1) {
        int released = unlock(bound);
        Py_DECREF(bound);
        return ok == 0 && released == 0 ? 0 : -1;
    }
    *release = bound;
    return 1;
}

/* Release what hold_table took; a failed release clears ``*result`` (its error pends). */
static void let_go(PyObject *release, PyObject **result) {
    if (release != NULL) {
        if (unlock(release) < 0 && *result != NULL)
            Py_CLEAR(*result);
        Py_DECREF(release);
    }
}

/* The plan's checks, then the table held (hold_table): 1, with ``*release``; 0: a
 * check failed (nothing held); -1: an error. */
static int enter_plan(ExpressPlan *plan, PyObject *args, PyObject **release) {
    *release = NULL;
    if (PyTuple_GET_SIZE(args) != plan->nargs || !arrays_match(plan, args))
        return 0;
    int ok = context_matches(plan);
    return ok != 1 ? ok : hold_table(plan, release);
}

/* The plan's call, or MISS (no reference) when a check fails; NULL on error. */
static PyObject *run_plan(PyObject *self, ExpressPlan *plan, PyObject *args) {
    PyObject *release;
    int ok = enter_plan(plan, args, &release);
    if (ok != 1)
        return ok == 0 ? MISS : NULL;
    PyObject *result = NULL;
    int kernel_failed = 0;
    PyObject *device_args = kernel_arguments(plan, args);
    if (device_args != NULL && count_launch(plan) == 0) {
        result = PyObject_Call(plan->kernel, device_args, NULL);
        kernel_failed = result == NULL;
    }
    Py_XDECREF(device_args);
    let_go(release, &result);
    if (kernel_failed)
        return failed(self);
    return result;
}

/* -- an async call run at once (API.md §5, last point) ---------------------------------- */
static Py_ssize_t plan_bytes(ExpressPlan *plan, PyObject *args) {
    /* the bytes of the call's arrays (what the kernel's predicted run time scales with) */
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < plan->narrays; i++) {
        ArrayFields *f = ARRAY(PyTuple_GET_ITEM(args, plan->arrays[i].slot));
        Py_ssize_t size = plan->arrays[i].itemsize;
        for (int d = 0; d < f->nd; d++)
            size *= f->dimensions[d];
        total += size;
    }
    return total;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);  /* time.perf_counter's clock on Linux */
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The plan's call with ``async_=value``, run at once on this thread when its queue is
 * idle and the kernel predicted short (``QueueSet.take_at_once``, asked with the table
 * held): what ``self._ran_at_once(queue, kernel, seconds, nbytes, value, error)`` returns
 * (an AsyncResult; the kernel's error is kept for the covering wait); MISS when a check
 * fails or the queue is not taken; NULL on error. */
static PyObject *run_plan_at_once(PyObject *self, ExpressPlan *plan, PyObject *args,
                                  PyObject *value) {
    if (plan->take_at_once == NULL)
        return MISS;
    PyObject *release;
    int ok = enter_plan(plan, args, &release);
    if (ok != 1)
        return ok == 0 ? MISS : NULL;
    Py_ssize_t nbytes = plan_bytes(plan, args);
    PyObject *result = NULL;
    PyObject *queue = PyObject_CallFunction(plan->take_at_once, "OOn", value, plan->kernel, nbytes);
    if (queue == NULL || queue == Py_None) {
        let_go(release, &queue);
        if (queue == NULL)
            return NULL;
        Py_DECREF(queue);
        return MISS;
    }
    /* from here the queue is taken: _ran_at_once gives it back, whatever happens */
    PyObject *error = NULL;
    double seconds = 0.0;
    PyObject *device_args = kernel_arguments(plan, args);
    if (device_args != NULL && count_launch(plan) == 0) {
        double start = now();
        result = PyObject_Call(plan->kernel, device_args, NULL);
        seconds = now() - start;
    }
    Py_XDECREF(device_args);
    let_go(release, &result);
    if (result == NULL) {  /* the kernel's error (or the lane's): kept, not raised here */
        PyObject *type, *traceback;
        PyErr_Fetch(&type, &error, &traceback);
        PyErr_NormalizeException(&type, &error, &traceback);
        if (traceback != NULL && error != NULL)
            PyException_SetTraceback(error, traceback);
        Py_XDECREF(type);
        Py_XDECREF(traceback);
    }
    PyObject *took = PyFloat_FromDouble(seconds);
    PyObject *size = PyLong_FromSsize_t(nbytes);
    PyObject *done = NULL;
    if (took != NULL && size != NULL) {
        if (result != NULL && g_async_result != NULL) {
            /* it ran: queue.ran_at_once(...) gives the queue back; AsyncResult(queue, value) */
            PyObject *given = PyObject_CallMethodObjArgs(queue, s_queue_ran_at_once, plan->kernel,
                                                         took, size, Py_None, Py_None, NULL);
            if (given != NULL) {
                Py_DECREF(given);
                done = PyObject_CallFunctionObjArgs(g_async_result, queue, result, NULL);
            }
        } else {  /* it failed: self._ran_at_once keeps the error for the covering wait */
            done = PyObject_CallMethodObjArgs(self, s_ran_at_once, queue, plan->kernel, took,
                                              size, result ? result : Py_None,
                                              error ? error : Py_None, NULL);
        }
    }
    Py_XDECREF(took);
    Py_XDECREF(size);
    Py_DECREF(queue);
    Py_XDECREF(result);
    Py_XDECREF(error);
    return done;
}

/* -- FastCall ----------------------------------------------------------------------------- */
typedef struct {
    PyObject_HEAD
    PyObject *plans;  /* tuple of ExpressPlan, newest first (empty: none) */
} FastCall;

/* ``async_=value`` when it is the call's only keyword (an int: the queue; anything else
 * the Python launcher reads), else NULL */
static PyObject *async_keyword(PyObject *kwargs) {
    if (kwargs == NULL || PyDict_GET_SIZE(kwargs) != 1)
        return NULL;
    PyObject *value = PyDict_GetItemWithError(kwargs, s_async);
    if (value == NULL) {
        PyErr_Clear();
        return NULL;
    }
    return PyLong_CheckExact(value) ? value : NULL;
}

static PyObject *fastcall_call(FastCall *self, PyObject *args, PyObject *kwargs) {
    int plain = kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0;
    PyObject *async_value = plain ? NULL : async_keyword(kwargs);
    if (g_enabled && g_silent != NULL && (plain || async_value != NULL) &&
            PyTuple_GET_SIZE(self->plans) && PyList_GET_ITEM(g_silent, 0) == Py_True) {
        PyObject *plans = self->plans;
        Py_INCREF(plans);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(plans); i++) {
            ExpressPlan *plan = (ExpressPlan *)PyTuple_GET_ITEM(plans, i);
            PyObject *result = plain ? run_plan((PyObject *)self, plan, args)
                : run_plan_at_once((PyObject *)self, plan, args, async_value);
            if (result != MISS) {
                Py_DECREF(plans);
                return result;
            }
        }
        Py_DECREF(plans);
    }
    PyObject *slow = PyObject_GetAttr((PyObject *)self, s_call_slow);
    if (slow == NULL)
        return NULL;
    PyObject *result = PyObject_Call(slow, args, kwargs);
    Py_DECREF(slow);
    return result;
}

static int read_array(ArraySlot *a, PyObject *array, int exact) {
    if (!PyObject_TypeCheck(array, g_ndarray)) {
        PyErr_SetString(PyExc_TypeError, "FastCall._arm: a mapped argument is not a numpy array");
        return -1;
    }
    ArrayFields *f = ARRAY(array);
    a->type = Py_TYPE(array);
    Py_INCREF(a->type);
    a->descr = f->descr;
    Py_INCREF(a->descr);
    a->nd = f->nd;
    PyObject *itemsize = PyObject_GetAttrString(array, "itemsize");
    if (itemsize == NULL)
        return -1;
    a->itemsize = PyLong_AsSsize_t(itemsize);
    Py_DECREF(itemsize);
    if (a->itemsize < 0)
        return -1;
    if (!exact)
        return 0;
    a->ref = PyWeakref_NewRef(array, NULL);
    if (a->ref == NULL)
        return -1;
    a->data = f->data;
    a->flags = f->flags & LAYOUT_FLAGS;
    a->layout = PyMem_Calloc((size_t)(2 * f->nd + 1), sizeof(Py_ssize_t));
    if (a->layout == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (f->nd) {
        memcpy(a->layout, f->dimensions, (size_t)f->nd * sizeof(Py_ssize_t));
        memcpy(a->layout + f->nd, f->strides, (size_t)f->nd * sizeof(Py_ssize_t));
    }
    return 0;
}

static ExpressPlan *new_plan(PyObject *spec) {
    /* spec: a pyacc._express.ExpressPlan (a named tuple; its fields documented there):
     *       (owner, nargs, runtime, ranges|None, table|None, version, kernel,
     *        reads_default, default, env_values, launch_cell, device_dict, arrays,
     *        scalars, exact, take_at_once|None)
     * arrays: ((slot, host array, device array|None), ...); scalars: ((slot, type), ...) */
    Py_ssize_t nargs;
    PyObject *owner, *runtime, *ranges, *table, *version, *kernel, *default_, *env_values,
             *cell, *device_dict, *arrays, *scalars, *take_at_once;
    int reads_default, exact;
    if (!PyTuple_Check(spec)) {
        PyErr_SetString(PyExc_TypeError, "FastCall._arm_plan: the plan must be a tuple");
        return NULL;
    }
    if (!PyArg_ParseTuple(spec, "OnOOOOOpOO!O!O!O!O!pO", &owner, &nargs, &runtime, &ranges, &table,
                          &version, &kernel, &reads_default, &default_, &PyTuple_Type, &env_values,
                          &PyList_Type, &cell, &PyDict_Type, &device_dict, &PyTuple_Type, &arrays,
                          &PyTuple_Type, &scalars, &exact, &take_at_once))
        return NULL;
    if ((ranges == Py_None) != (table == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "FastCall._arm_plan: a table needs its version holder");
        return NULL;
    }
    if (PyList_GET_SIZE(cell) != 1 || PyTuple_GET_SIZE(env_values) != PyTuple_GET_SIZE(g_env_keys)) {
        PyErr_SetString(PyExc_ValueError, "FastCall._arm: a malformed plan");
        return NULL;
    }
    ExpressPlan *plan = PyObject_GC_New(ExpressPlan, &ExpressPlanType);
    if (plan == NULL)
        return NULL;
    plan->owner = plan->runtime = plan->ranges = plan->table = plan->version = NULL;
    plan->kernel = plan->check_default = plan->env_values = plan->launch_cell = NULL;
    plan->device_dict = NULL;
    plan->memo_thread = plan->memo_epoch = plan->memo_env_tag = plan->memo_device_tag = 0;
    plan->nargs = nargs;
    plan->narrays = plan->nscalars = 0;
    plan->arrays = NULL;
    plan->scalars = NULL;
    plan->substitutes = 0;
    plan->fixed_args = NULL;
    plan->lock = plan->acquire = plan->release = NULL;
    plan->take_at_once = take_at_once == Py_None ? NULL : Py_NewRef(take_at_once);
#define KEEP(field, value) (Py_INCREF(value), plan->field = (value))
    KEEP(owner, owner);
    KEEP(runtime, runtime);
    plan->ranges = ranges == Py_None ? NULL : (Py_INCREF(ranges), ranges);
    plan->table = table == Py_None ? NULL : (Py_INCREF(table), table);
    KEEP(version, version);
    KEEP(kernel, kernel);
    plan->check_default = reads_default ? (Py_INCREF(default_), default_) : NULL;
    KEEP(env_values, env_values);
    KEEP(launch_cell, cell);
    KEEP(device_dict, device_dict);
#undef KEEP
    Py_ssize_t n = PyTuple_GET_SIZE(arrays);
    plan->arrays = PyMem_Calloc((size_t)n + 1, sizeof(ArraySlot));
    Py_ssize_t m = PyTuple_GET_SIZE(scalars);
    plan->scalars = PyMem_Calloc((size_t)m + 1, sizeof(ScalarSlot));
    if (plan->arrays == NULL || plan->scalars == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t slot;
        PyObject *host, *device;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(arrays, i), "nOO", &slot, &host, &device))
            goto fail;
        ArraySlot *a = &plan->arrays[plan->narrays++];
        a->slot = slot;
        if (slot < 0 || slot >= nargs) {
            PyErr_SetString(PyExc_ValueError, "FastCall._arm: an argument slot out of range");
            goto fail;
        }
        if (read_array(a, host, exact) < 0)
            goto fail;
        if (device != Py_None) {
            Py_INCREF(device);
            a->device = device;
            plan->substitutes = 1;
        }
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_ssize_t slot;
        PyObject *type;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(scalars, i), "nO!", &slot, &PyType_Type, &type))
            goto fail;
        if (slot < 0 || slot >= nargs) {
            PyErr_SetString(PyExc_ValueError, "FastCall._arm: an argument slot out of range");
            goto fail;
        }
        Py_INCREF(type);
        plan->scalars[plan->nscalars].slot = slot;
        plan->scalars[plan->nscalars++].type = (PyTypeObject *)type;
    }
    if (plan->substitutes && plan->narrays == nargs && plan->nscalars == 0) {
        PyObject *fixed = PyTuple_New(nargs);  /* the same device arrays at every call */
        if (fixed == NULL)
            goto fail;
        for (Py_ssize_t i = 0; i < nargs; i++)
            PyTuple_SET_ITEM(fixed, i, Py_NewRef(Py_None));
        for (Py_ssize_t i = 0; i < plan->narrays; i++) {
            ArraySlot *a = &plan->arrays[i];
            if (a->device == NULL) {  /* (an array passed as it is: built per call) */
                Py_CLEAR(fixed);
                break;
            }
            Py_SETREF(((PyTupleObject *)fixed)->ob_item[a->slot], Py_NewRef(a->device));
        }
        plan->fixed_args = fixed;
    }
    PyObject_GC_Track(plan);
    return plan;
fail:
    Py_DECREF(plan);
    return NULL;
}

#define PLANS_KEPT 4

static PyObject *fastcall_arm(FastCall *self, PyObject *spec) {
    /* the new plan first, then the kept ones made from other owners (at most four) */
    ExpressPlan *plan = new_plan(spec);
    if (plan == NULL)
        return NULL;
    PyObject *old = Py_NewRef(self->plans);  /* (an allocation may run other threads) */
    PyObject *plans = PyTuple_New(PLANS_KEPT);
    if (plans == NULL) {
        Py_DECREF(old);
        Py_DECREF(plan);
        return NULL;
    }
    PyTuple_SET_ITEM(plans, 0, (PyObject *)plan);
    Py_ssize_t kept = 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(old) && kept < PLANS_KEPT; i++) {
        PyObject *previous = PyTuple_GET_ITEM(old, i);
        if (((ExpressPlan *)previous)->owner == plan->owner)
            continue;  /* replaced by the new plan */
        PyTuple_SET_ITEM(plans, kept++, Py_NewRef(previous));
    }
    PyObject *trimmed = PyTuple_GetSlice(plans, 0, kept);  /* (the rest are still NULL) */
    Py_DECREF(plans);
    Py_DECREF(old);
    if (trimmed == NULL)
        return NULL;
    Py_SETREF(self->plans, trimmed);
    Py_RETURN_NONE;
}

static PyObject *fastcall_disarm(FastCall *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL)
        return NULL;
    Py_SETREF(self->plans, empty);
    Py_RETURN_NONE;
}

static PyObject *fastcall_armed(FastCall *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(PyTuple_GET_SIZE(self->plans));
}

static PyObject *fastcall_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    FastCall *self = (FastCall *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->plans = PyTuple_New(0);
    if (self->plans == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int fastcall_traverse(FastCall *self, visitproc visit, void *arg) {
    Py_VISIT(self->plans);  /* (a heap subclass's traverse visits the type itself) */
    return 0;
}

static int fastcall_clear(FastCall *self) {
    /* an empty tuple, never NULL: a call may still reach a cleared region */
    Py_XSETREF(self->plans, PyTuple_New(0));
    return 0;
}

static void fastcall_dealloc(FastCall *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    fastcall_clear(self);
    type->tp_free((PyObject *)self);
}

static PyMethodDef fastcall_methods[] = {
    {"_arm_plan", (PyCFunction)fastcall_arm, METH_O,
     "Put an express plan first (at most four are kept; module docstring)."},
    {"_disarm", (PyCFunction)fastcall_disarm, METH_NOARGS, "Forget every express plan."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef fastcall_getset[] = {
    {"_express_plans", (getter)fastcall_armed, NULL, "How many express plans are kept.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FastCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyacc._fastcall.FastCall",
    .tp_basicsize = sizeof(FastCall),
    .tp_dealloc = (destructor)fastcall_dealloc,
    .tp_call = (ternaryfunc)fastcall_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Base of ComputeRegion: the express lane of its calls (module docstring).",
    .tp_traverse = (traverseproc)fastcall_traverse,
    .tp_clear = (inquiry)fastcall_clear,
    .tp_methods = fastcall_methods,
    .tp_getset = fastcall_getset,
    .tp_new = fastcall_new,
};

/* -- the module ------------------------------------------------------------------------ */
static PyObject *configure(PyObject *module, PyObject *args) {
    PyObject *icvs, *environ, *keys, *silent, *alone, *ndarray;
    int remember = 1;
    if (!PyArg_ParseTuple(args, "OO!O!O!O!O!|p", &icvs, &PyDict_Type, &environ, &PyTuple_Type,
                          &keys, &PyList_Type, &silent, &PyList_Type, &alone, &PyType_Type,
                          &ndarray, &remember))
        return NULL;
    if (g_icvs != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure: already configured");
        return NULL;
    }
    if (PyList_GET_SIZE(silent) != 1 || PyList_GET_SIZE(alone) != 1) {
        PyErr_SetString(PyExc_ValueError, "configure: silent and tally_alone are lists of one bool");
        return NULL;
    }
    Py_INCREF(icvs);
    Py_XSETREF(g_icvs, icvs);
    Py_INCREF(environ);
    Py_XSETREF(g_environ, environ);
    Py_INCREF(keys);
    Py_XSETREF(g_env_keys, keys);
    Py_INCREF(silent);
    Py_XSETREF(g_silent, silent);
    Py_INCREF(alone);
    Py_XSETREF(g_tally_alone, alone);
    Py_INCREF(ndarray);
    Py_XSETREF(g_ndarray, (PyTypeObject *)ndarray);
    g_remember = remember;
    Py_RETURN_NONE;
}

static PyObject *configure_async(PyObject *module, PyObject *type) {
    Py_INCREF(type);
    Py_XSETREF(g_async_result, type);
    Py_RETURN_NONE;
}

static PyObject *set_enabled(PyObject *module, PyObject *flag) {
    int enabled = PyObject_IsTrue(flag);
    if (enabled < 0)
        return NULL;
    PyObject *previous = PyBool_FromLong(g_enabled);
    g_enabled = enabled;
    return previous;
}

static PyObject *is_enabled(PyObject *module, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(g_enabled);
}

static PyObject *context_changed(PyObject *module, PyObject *Py_UNUSED(ignored)) {
    g_context_epoch++;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure_async", configure_async, METH_O,
     "configure_async(AsyncResult): what an async call run at once returns, made in C."},
    {"set_enabled", set_enabled, METH_O,
     "set_enabled(flag) -> previous: whether calls try their express plans (tests, debugging)."},
    {"is_enabled", is_enabled, METH_NOARGS, "Whether calls try their express plans."},
    {"context_changed", context_changed, METH_NOARGS,
     "A thread's ICVS.runtime or open regions' default changed: every plan's context memo "
     "is stale."},
    {"configure", configure, METH_VARARGS,
     "configure(icvs, environ_data, env_keys, silent, tally_alone, ndarray, remember=True): "
     "what every plan reads (once); remember: the ICVs are one per thread state, so a plan may "
     "remember the context checks per thread (False: a greenlet-local ICVS, gevent)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "pyacc._fastcall",
    "The express lane of a compute call, in C (see the source's header comment).", -1,
    module_methods,
};

static PyObject *intern(const char *text) { return PyUnicode_InternFromString(text); }

PyMODINIT_FUNC PyInit__fastcall(void) {
    if (PyType_Ready(&ExpressPlanType) < 0 || PyType_Ready(&FastCallType) < 0)
        return NULL;
    MISS = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    g_one = PyLong_FromLong(1);
    if (MISS == NULL || g_one == NULL)
        return NULL;
    s_runtime = intern("runtime");
    s_region_stack = intern("region_stack");
    s_innermost_default = intern("innermost_default");
    s_version = intern("version");
    s_lock = intern("_lock");
    s_acquire = intern("acquire");
    s_release = intern("release");
    s_call_slow = intern("_call_slow");
    s_express_failed = intern("_express_failed");
    s_launch = intern("launch");
    s_async = intern("async_");
    s_ran_at_once = intern("_ran_at_once");
    s_queue_ran_at_once = intern("ran_at_once");
    if (!s_runtime || !s_region_stack || !s_innermost_default || !s_version || !s_lock ||
            !s_acquire || !s_release || !s_call_slow || !s_express_failed || !s_launch ||
            !s_async || !s_ran_at_once || !s_queue_ran_at_once)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    Py_INCREF(&FastCallType);
    if (PyModule_AddObject(module, "FastCall", (PyObject *)&FastCallType) < 0) {
        Py_DECREF(&FastCallType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
