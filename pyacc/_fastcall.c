/* pyacc._fastcall: the express lane of a compute call, in C.
 *
 * Owns the type ``FastCall``, the base class of ``pyacc.ComputeRegion``. Its ``tp_call`` repeats
 * a call that the Python launcher has just replayed (``ComputeRegion._arm_express`` hands it an
 * *express plan*: what that replay checked and what it launched) when every check of that replay
 * still holds, and otherwise calls ``self._call_slow(*args, **kw)``, the Python launcher (the plan
 * itself — the type ``ExpressPlan``, its checks and one call through it — is
 * ``_express_plan.c.h``, included below: one translation unit). The checks are exactly the
 * Python replay's (``pyacc/_compute.py``, ``mapping/compute.py``), in the same order of cost:
 *
 *   - the call: as many arguments as the plan's, in parameter order (those given by name or
 *     left to their defaults bound as Python binds them: ``_binding``, ``_call_binding.c.h``),
 *     followed by the values of the module-level and closure names the kernel reads, read
 *     now (``_free``, ``_free_values.c.h``); nobody subscribes to any event (``BUS.silent[0]``);
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
 *     ``DeviceRuntime.hold_structured``). A table that changed since is *followed*, the
 *     lock held: when each array lies wholly inside a mapping, the plan takes their
 *     device arrays as they are now (``CallPlan.follow``; ``_plan_follow.c.h``); a call
 *     with other host arrays in slots whose own arrays are gone may move it to them.
 *
 * The per-thread and environment checks are remembered (a plan's *context memo*): after
 * they held on a thread, they are not read again on that thread while nothing they read
 * can have changed — no write to any thread's ``ICVS.runtime`` or open regions' default
 * (``context_changed()``, called by ``pyacc._devices`` after each; a module-wide epoch),
 * and the same version tag of ``os.environ._data`` (CPython's dict version, changed by
 * every change of the dict; before 3.14). Only when the ICVs are one per thread state
 * (``threading.local``; not gevent's greenlet-local one, whose greenlets share a thread state:
 * ``configure(..., remember=False)`` and every check runs). The device's instance dict is looked
 * up again only when its tag changed (before 3.13: from 3.13 an attribute set may not touch the
 * dict's tag, and it is looked up at every call). These lookups cost ~0.5 µs a call after a
 * kernel has streamed its arrays through the caches.
 *
 * Then it counts the launch (the device's row of the statistics, ``Stats.counter_row``), calls
 * the kernel with the plan's device arrays in place of the mapped host arrays (on a CPU device
 * through the kernel's prepared call, ``_prepared_call.c.h``: plain words and one C call instead
 * of Numba's dispatcher, where the arguments fit it), and releases the lock. A kernel that raises
 * goes to ``self._express_failed(error)`` (Python), which raises what the Python launcher would.
 *
 * A call with ``async_=<int>`` — or without it, of a region whose constant ``async`` clause says
 * a queue (``_clause_async``); ``acc.async_noval`` is the thread's default queue
 * (``ICVS.default_async``); ``acc.async_sync`` is synchronous — takes the same checks (a call
 * may also give ``wait=`` and ``if_=True``: ``CallKeywords``, ``_call_binding.c.h``), then: on
 * devices whose queues are host threads, runs at once when its queue is idle and the kernel
 * short (``_at_once.c.h``);
 * on the others (``cuda``, where a launch only enqueues on the queue's stream), hands its kernel
 * and device arrays to the plan's ``enqueue`` (``pyacc._express.enqueuer``: ``Device.launch`` on
 * the queue, the ``AsyncResult``) with the table held, as the held replay launches.
 *
 * A region with a constant ``wait`` clause (``_clause_wait``: OpenACC 3.3 §2.16.2) takes the lane
 * when every queue it waits for was never made or is settled (the join holds already:
 * ``waits_settled``, ``_call_queue.c.h``); otherwise only a plan that enqueues takes the call, its
 * ``enqueue`` making the join on the device first; a call's ``wait=`` replaces the clause. A
 * region whose ``if`` clause is its only expression (``_condition``, §2.5.6) takes it when the
 * expression (or the call's ``if_=True``) is true. Every other call is the Python launcher's.
 * Calls arrive through the instance's vectorcall (PEP 590,
 * ``fastcall_vectorcall``: no keyword dict is made; Python subclasses ask for it with
 * ``enable_vectorcall`` before 3.12) or through ``tp_call``; both end in ``fastcall_run``.
 *
 * NumPy arrays are read through NumPy's array object layout (``pyacc/_numpy_abi.h``:
 * ``PyArrayObject_fields``, part of NumPy's ABI, the same in NumPy 1.x and 2.x), so the module
 * builds without NumPy's headers. Every array a plan reads was checked at arming to be a
 * numpy.ndarray (or a subclass): an object of the same type has that layout.
 *
 * Invariants: a plan keeps no host array alive (weak references); it holds strong references
 * only to what it compares (dtypes, the runtime, the table) and to what it launches (kernel,
 * device arrays that hold no memory), and takes part in garbage collection. A region keeps at
 * most four plans, one per call plan of the launcher. The GIL is held throughout, except where
 * the kernel or the lock releases it; a call holds its plans tuple for its duration, so
 * re-arming by another thread (or a region's condition) never frees a plan in use.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>
#include <time.h>

#include "_counter_row.h"
#include "_dict_tag.h"
#include "_direct_method.h"
#include "_numpy_abi.h"
#include "_table_lock.h"
#include "../mapping/_slot_fields.h"
#include "../mapping/_range_search.h"
#include "../mapping/_lane_api.h"

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
static PyObject *s_runtime, *s_region_stack, *s_innermost_default, *s_version, *s_call_slow,
                *s_express_failed, *s_launch, *s_async, *s_ran_at_once, *s_queue_ran_at_once,
                *s_bounds, *s_default_async, *s_wait, *s_if;

#define ASYNC_NOVAL (-1)  /* pyacc._clauses.async_noval: the thread's default queue */
#define ASYNC_SYNC (-2)   /* pyacc._clauses.async_sync: synchronous */

/* -- a vectorcall's arguments as a tuple (and a dict), for a tp_call -------------------- */
#include "_vectorcall_args.h"

/* -- a kernel's prepared call: plain words and one C call, not the dispatcher ------------ */
#include "_prepared_call.c.h"
/* -- plans: the ExpressPlan type, its checks and one call through it -------------------- */
#include "_express_plan.c.h"
/* -- a plan moved to the present table as it is now (its arrays' mappings, other arrays) -- */
#include "_plan_follow.c.h"
/* -- the handle an async call gives back (AsyncResult), made in C ------------------------ */
#include "_async_handle.c.h"
/* -- the queue of an async call run at once, taken and given back in C -------------------- */
#include "_queue_take.c.h"
/* -- an async call run at once: the queue held in C for the kernel's run ----------------- */
#include "_at_once.c.h"
/* -- a host wait with nothing to do: acc.wait of settled queues seen in C ----------------- */
#include "_queue_settled.c.h"
/* -- the thread's runtime, lane and region stack, remembered per context epoch ------------- */
#include "_thread_runtime.c.h"
/* -- the data routines' entry: the current runtime's data lane first ---------------------- */
#include "_routine_lane.c.h"
/* -- acc.data's C base: regions of present data entered and left in C --------------------- */
static PyObject *intern(const char *text);
#include "_data_region.c.h"
/* -- its type: collection, copy and pickle, configuration ----------------------------------- */
#include "_region_type.c.h"
/* -- its __enter__ and __exit__ bound without a method object per ``with`` ---------------- */
#include "_region_hooks.c.h"

/* -- an express plan made from its launch-plan record (pyacc._express.ExpressPlan) -------- */
#include "_plan_record.c.h"
/* -- a call's queue, and the waits of its wait clause ------------------------------------- */
#include "_call_queue.c.h"
/* -- a call's arguments in parameter order, and its keywords -------------------------------- */
#include "_call_binding.c.h"
/* -- the values of the module-level and closure names a kernel reads ------------------------ */
#include "_free_values.c.h"

/* -- FastCall ----------------------------------------------------------------------------- */
static PyTypeObject FastCallType;
typedef struct {
    PyObject_HEAD
    PyObject *plans;  /* tuple of ExpressPlan, newest first (empty: none) */
    vectorcallfunc vectorcall;  /* fastcall_vectorcall (the instance's, PEP 590) */
    /* the region's constant ``async`` clause (an int: a queue or acc.async_noval), which
     * a call without ``async_`` runs on; NULL: such a call is synchronous */
    PyObject *clause_async;
    /* its constant ``wait`` clause: a tuple of queue numbers (empty: every queue) that a
     * call waits for first; NULL: none */
    PyObject *clause_wait;
    /* where the module-level and closure names its kernel reads are found (``_free``), whose
     * values a call passes after its arguments; NULL: it reads none */
    PyObject *free;
    /* its ``if`` clause written as an expression, as a function of a call's arguments
     * (``_condition``): a call runs in the lane only when it is true; NULL: none */
    PyObject *condition;
    /* its parameters' names and defaults (``_binding``), by which a call's arguments given by
     * name or left to their defaults are bound in C; NULL: positional calls only */
    PyObject *binding;
} FastCall;

/* -- what a region sets once for its calls, read and set from Python ----------------------- */
#include "_region_fields.c.h"

/* The region's plans tried for a call (``async_value``: its queue, NULL when ``plain``;
 * ``joins``: the waits of its wait clause still to make, which only a plan that enqueues
 * makes, else NULL): the result, or MISS (no reference) when none takes the call. */
static PyObject *try_plans(FastCall *self, PyObject *args, int plain, PyObject *async_value,
                           PyObject *joins) {
    if (joins != NULL && plain)
        return MISS;  /* (a host wait first: the Python launcher's) */
    PyObject *plans = Py_NewRef(self->plans), *result = MISS;
    Py_ssize_t kept = PyTuple_GET_SIZE(plans);  /* (none: disarmed while a condition ran) */
    /* the plans as they are, then (none matched) the newest, which may take other host
     * arrays of its layout (enter_plan's ``adopt``) */
    for (int adopt = 0; result == MISS && adopt <= 1; adopt++) {
        for (Py_ssize_t i = 0; result == MISS && i < (adopt ? kept > 0 : kept); i++) {
            ExpressPlan *plan = (ExpressPlan *)PyTuple_GET_ITEM(plans, i);
            result = plain ? run_plan((PyObject *)self, plan, args, adopt)
                : plan->enqueue != NULL ? run_plan_enqueued((PyObject *)self, plan, args, async_value, joins, adopt)
                : joins != NULL ? MISS : run_plan_at_once((PyObject *)self, plan, args, async_value, adopt);
        }
    }
    Py_DECREF(plans);
    return result;
}

/* The lane's part of a call: the region's if expression asked unless ``if_=True`` was given
 * (false: the host's, the Python launcher's), the queues it waits for first looked at, its
 * kernel's free values read after ``args``, then its plans (``try_plans``): the result,
 * MISS (no reference) for the Python launcher, NULL on error. */
static PyObject *try_lane(FastCall *self, PyObject *args, int plain, PyObject *async_value,
                          PyObject *waits, int if_given) {
    PyObject *condition = self->condition == NULL || if_given ? NULL : Py_NewRef(self->condition);
    int holds = condition == NULL ? 1 : condition_holds(condition, args);
    Py_XDECREF(condition);
    if (holds <= 0)
        return holds < 0 ? NULL : MISS;
    int settled = waits == NULL ? 1 : waits_settled(waits);
    if (settled < 0)
        return NULL;
    PyObject *free = self->free == NULL ? NULL : Py_NewRef(self->free);  /* (held) */
    PyObject *all = free == NULL ? Py_NewRef(args) : with_free(free, args);
    Py_XDECREF(free);
    if (all == NULL)
        return PyErr_Occurred() ? NULL : MISS;
    PyObject *result = try_plans(self, all, plain, async_value, settled ? NULL : waits);
    Py_DECREF(all);
    return result;
}

/* ``fastcall_run`` with the queue number resolved (``async_value``; NULL when ``plain``) and
 * the queues waited for first held (``waits``, or NULL); ``keys``: the call's keywords, its
 * arguments bound (``bound_call``), or NULL when it is the Python launcher's as it came. */
static PyObject *fastcall_try(FastCall *self, PyObject *args, PyObject *kwargs, const CallKeywords *keys,
                              int plain, PyObject *async_value, PyObject *waits) {
    if (g_enabled && g_silent != NULL && keys != NULL &&
            PyTuple_GET_SIZE(self->plans) && PyList_GET_ITEM(g_silent, 0) == Py_True) {
        PyObject *result = try_lane(self, args, plain, async_value, waits, keys->if_given);
        if (result != MISS)
            return result;
    }
    PyObject *made = keys == NULL ? NULL : keyword_dict(keys);  /* (the arguments are bound) */
    if (made == NULL && PyErr_Occurred())
        return NULL;
    PyObject *slow = PyObject_GetAttr((PyObject *)self, s_call_slow);
    PyObject *result = slow == NULL ? NULL : PyObject_Call(slow, args, keys == NULL ? kwargs : made);
    Py_XDECREF(slow);
    Py_XDECREF(made);
    return result;
}

/* The call: through a plan when one holds (``keys``: its keywords, its arguments ``args``
 * bound; NULL when the Python launcher's, with ``kwargs``: a call without ``async_`` runs on
 * the region's constant async clause, ``clause_async``, when it has one, and with
 * ``acc.async_sync`` synchronously; first, it waits for the queues of its ``wait=`` or of the
 * region's constant wait clause, ``clause_wait``: ``waits_settled``), else
 * ``self._call_slow(*args, **keywords)``. */
static PyObject *fastcall_run(FastCall *self, PyObject *args, PyObject *kwargs, const CallKeywords *keys) {
    PyObject *async_value = keys == NULL ? NULL : keys->async_value;
    PyObject *given = Py_XNewRef(async_value);  /* (borrowed from the call: kept for its fallback) */
    int plain = async_value == NULL;
    if (!plain && is_async_sync(async_value)) {  /* (§2.16.1: whatever the async clause) */
        async_value = NULL;
        plain = 1;
    } else if (plain && self->clause_async != NULL) {  /* (the construct's async clause) */
        async_value = self->clause_async;
        plain = 0;
    }
    /* held: the clauses may be set again while the call runs (the waits first: resolving
     * the queue may run Python code, and the keywords are the call's dict's) */
    PyObject *waits = call_waits(keys, self->clause_wait);
    if (waits == NULL && PyErr_Occurred()) {
        Py_XDECREF(given);
        return NULL;
    }
    PyObject *held = async_value == NULL ? NULL : Py_NewRef(async_value);
    PyObject *queue = held == NULL ? NULL : resolve_queue(held);
    PyObject *result = fastcall_try(self, args, kwargs, keys, plain, queue ? queue : held, waits);
    Py_XDECREF(waits);
    Py_XDECREF(queue);
    Py_XDECREF(held);
    Py_XDECREF(given);
    return result;
}

/* ``fastcall_run`` of a call the lane cannot bind, as it came (a tuple and a dict: the
 * Python launcher's, which binds it, or raises Python's TypeError). */
static PyObject *fastcall_as_it_came(FastCall *self, PyObject *args, PyObject *kwargs) {
    return fastcall_run(self, args, kwargs, NULL);
}

/* ``fastcall_run`` of a call's arguments bound (``bound_call``: ``tuple``, the positional
 * ones as a tuple, or NULL; ``kwargs``: a dict, or NULL with ``kwnames``), or as they came. */
static PyObject *fastcall_bound(FastCall *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames, PyObject *kwargs, PyObject *tuple) {
    CallKeywords keys;
    PyObject *binding = Py_XNewRef(self->binding);  /* (an allocation may run Python code) */
    PyObject *bound = bound_call(binding, args, nargs, kwnames, kwargs, tuple, &keys);
    Py_XDECREF(binding);
    if (bound == NULL && PyErr_Occurred())
        return NULL;
    if (bound != NULL || tuple != NULL) {
        PyObject *result = fastcall_run(self, bound ? bound : tuple, kwargs, bound ? &keys : NULL);
        Py_XDECREF(bound);
        return result;
    }
    return tp_call_of((ternaryfunc)fastcall_as_it_came, (PyObject *)self, args, nargs, kwnames);
}

static PyObject *fastcall_call(FastCall *self, PyObject *args, PyObject *kwargs) {
    return fastcall_bound(self, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), NULL, kwargs, args);
}

/* The instance's vectorcall (PEP 590): ``fastcall_call`` without a keyword dict and without
 * ``tp_call``'s argument conversion; a class whose ``__call__`` was replaced (before 3.12
 * CPython does not clear the vectorcall flag then) goes through its ``tp_call`` with a tuple
 * and a dict. */
static PyObject *fastcall_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (Py_EnterRecursiveCall(" while calling a Python object"))  /* as tp_call's caller does */
        return NULL;
    ternaryfunc call = Py_TYPE(callable)->tp_call;
    PyObject *result = NULL;
    if (call == (ternaryfunc)fastcall_call)
        result = fastcall_bound((FastCall *)callable, args, nargs, kwnames, NULL, NULL);
    else if (call != NULL)
        result = tp_call_of(call, callable, args, nargsf, kwnames);
    else
        PyErr_Format(PyExc_TypeError, "'%.200s' object is not callable", Py_TYPE(callable)->tp_name);
    Py_LeaveRecursiveCall();
    return result;
}

/* ``enable_vectorcall(cls)``: calls of ``cls``'s instances (a subclass of FastCall that
 * keeps its ``tp_call``) take ``fastcall_vectorcall``. From 3.12 a heap subclass inherits
 * the flag itself (and loses it when ``__call__`` is assigned); before, it does not. */
static PyObject *enable_vectorcall(PyObject *module, PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &FastCallType)) {
        PyErr_SetString(PyExc_TypeError, "enable_vectorcall: a subclass of FastCall");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type->tp_call == (ternaryfunc)fastcall_call &&
            type->tp_vectorcall_offset == offsetof(FastCall, vectorcall))
        type->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
    Py_RETURN_NONE;
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
    self->vectorcall = fastcall_vectorcall;
    self->plans = PyTuple_New(0);
    if (self->plans == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int fastcall_traverse(FastCall *self, visitproc visit, void *arg) {
    Py_VISIT(self->plans);  /* (a heap subclass's traverse visits the type itself) */
    Py_VISIT(self->free);  /* (the kernel's module dict, which holds the region) */
    Py_VISIT(self->condition);  /* (a function of that module: the dict breaks that cycle) */
    return 0;
}

static int fastcall_clear(FastCall *self) {
    /* an empty tuple, never NULL: a call may still reach a cleared region (which keeps
     * its async and wait clauses, ints: in no cycle, dropped by dealloc; without its
     * free names a plan, made for the arguments and their values, matches no call) */
    Py_XSETREF(self->plans, PyTuple_New(0));
    Py_CLEAR(self->free);  /* (its condition kept: its calls must still ask it) */
    return 0;
}

static void fastcall_dealloc(FastCall *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    fastcall_clear(self);
    Py_CLEAR(self->clause_async);
    Py_CLEAR(self->clause_wait);
    Py_CLEAR(self->free);
    Py_CLEAR(self->condition);
    Py_CLEAR(self->binding);
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
    REGION_FIELDS
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FastCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyacc._fastcall.FastCall",
    .tp_basicsize = sizeof(FastCall),
    .tp_dealloc = (destructor)fastcall_dealloc,
    .tp_call = (ternaryfunc)fastcall_call,
    .tp_vectorcall_offset = offsetof(FastCall, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
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
    {"enable_vectorcall", enable_vectorcall, METH_O,
     "enable_vectorcall(cls): calls of a FastCall subclass's instances take the vectorcall "
     "protocol (set by the class itself before Python 3.12)."},
    {"configure_async", configure_async, METH_VARARGS,
     "configure_async(AsyncResult[, WorkerQueue, QueueSet, RUNS, kept_within, record_kernel]): what "
     "an async call run at once returns, made in C; with the rest, its queue is held in C for "
     "the kernel's run (pyacc/_queue_take.c.h, _at_once.c.h)."},
    {"set_enabled", set_enabled, METH_O,
     "set_enabled(flag) -> previous: whether calls try their express plans (tests, debugging)."},
    {"is_enabled", is_enabled, METH_NOARGS, "Whether calls try their express plans."},
    {"context_changed", context_changed, METH_NOARGS,
     "A thread's ICVS.runtime or open regions' default changed: every plan's context memo "
     "is stale."},
    {"configure_prepared", configure_prepared, METH_VARARGS,
     "configure_prepared(prepare, hold_below): what gives a plan's kernel its prepared call "
     "(compiler.cpu_plans.prepare; None: the dispatcher is always called), and the seconds "
     "under which a call repeated with the same arguments keeps the GIL (0: never)."},
    {"prepared_calls", prepared_calls, METH_NOARGS,
     "prepared_calls(): how many kernel calls went through a prepared call so far."},
    {"held_calls", held_calls, METH_NOARGS,
     "held_calls(): how many of those kept the GIL for the kernel's run (a short kernel)."},
    {"configure_data", configure_data, METH_VARARGS,
     "configure_data(BUS.active, REGION_ENTER, REGION_EXIT, SingleUseRegion.__enter__, "
     "SingleUseRegion.__exit__, data clause names): what acc.data's C base reads "
     "(pyacc/_data_region.c.h)."},
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
    if (PyType_Ready(&ExpressPlanType) < 0 || PyType_Ready(&FastCallType) < 0 ||
            PyType_Ready(&LaneRoutineType) < 0 || numpy_abi_init() < 0 || data_region_init() < 0 ||
            region_hooks_init() < 0)
        return NULL;
    MISS = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    g_one = PyLong_FromLong(1);
    if (MISS == NULL || g_one == NULL)
        return NULL;
    s_runtime = intern("runtime");
    s_region_stack = intern("region_stack");
    s_innermost_default = intern("innermost_default");
    s_version = intern("version");
    s_call_slow = intern("_call_slow");
    s_express_failed = intern("_express_failed");
    s_launch = intern("launch");
    s_async = intern("async_");
    s_wait = intern("wait");
    s_if = intern("if_");
    s_default_async = intern("default_async");
    s_ran_at_once = intern("_ran_at_once");
    s_queue_ran_at_once = intern("ran_at_once");
    s_lane = intern("lane");
    s_bounds = intern("bounds");
    if (!s_lane || !s_bounds || !s_runtime || !s_region_stack || !s_innermost_default || !s_version || !s_call_slow ||
            !s_express_failed || !s_launch || !s_async || !s_ran_at_once || !s_queue_ran_at_once ||
            !s_default_async || !s_wait || !s_if || table_lock_init() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    PyObject *names = plan_field_names();
    if (names == NULL || PyModule_AddObjectRef(module, "FastCall", (PyObject *)&FastCallType) < 0 ||
            PyModule_AddObjectRef(module, "LaneRoutine", (PyObject *)&LaneRoutineType) < 0 ||
            PyModule_AddObjectRef(module, "DataRegion", (PyObject *)&DataRegionType) < 0 ||
            PyModule_AddObjectRef(module, "PLAN_FIELDS", names) < 0 ||
            PyModule_AddIntConstant(module, "PREPARED_WORDS", PREPARED_WORDS) < 0) {
        Py_XDECREF(names);
        Py_DECREF(module);
        return NULL;
    }
    Py_DECREF(names);
    return module;
}
