/* pyacc/_express_plan.c.h: the express plan of pyacc._fastcall, included by _fastcall.c.
 *
 * Owns the type ``ExpressPlan`` (what one replay checked and launched), its checks (the
 * call, the arrays, the thread's context, the present table) and one call through it,
 * synchronous (``run_plan``); an asynchronous call run at once through a plan is
 * ``_at_once.c.h``'s (``run_plan_at_once``). It is
 * part of ``_fastcall.c``'s one translation unit (included after the module state it
 * reads: ``g_*``, ``s_*``; CPython's own ``*.c.h`` files are built the same way), so its
 * functions stay ``static``; the rules it follows are stated in ``_fastcall.c``'s header
 * comment.
 */

/* -- plans ------------------------------------------------------------------------------ */
typedef struct {
    Py_ssize_t slot;
    PyObject *ref;        /* weak reference to the host array (exact slots), else NULL */
    PyTypeObject *type;   /* the host array's type */
    PyObject *device;     /* what the kernel gets instead (strong), or NULL: the argument */
    PyObject *descr;      /* strong: compared by address */
    char *data;
    int nd;
    int flags;            /* its LAYOUT_FLAGS (exact slots compare them all, the others WRITEABLE) */
    Py_ssize_t *layout;   /* dims then strides (exact slots) */
    Py_ssize_t itemsize;  /* the dtype's (the same at every call: the dtype is checked) */
} ArraySlot;

typedef struct {
    Py_ssize_t slot;
    PyTypeObject *type;
} ScalarSlot;

/* A kernel's run record (``inline.RUNS[kernel]``): seconds over arguments of nbytes. */
typedef struct { double seconds; Py_ssize_t nbytes; } RunRecord;

/* The queue of async value ``number`` in a QueueSet's dict of queues, as last looked up
 * (``_queue_take.c.h``, ``queue_of``), kept while that dict's version tag is unchanged: a tag,
 * never 0 here, names one dict in one state (``_dict_tag.h``), and that dict holds the
 * queue, so the borrowed pointer is valid. */
typedef struct {
    uint64_t tag;     /* the dict's tag when ``queue`` was found (0: none) */
    PyObject *dict;   /* that dict (its address only: tags are per interpreter from 3.12) */
    long number;      /* the async value looked up */
    PyObject *queue;  /* borrowed */
} QueueMemo;

/* What an async call run at once (``_at_once.c.h``) last looked up: its queue, and the
 * kernel's run record while ``inline.RUNS``' tag is unchanged. */
typedef struct {
    QueueMemo queue;
    uint64_t runs_tag;  /* ``inline.RUNS``' tag when ``run`` was read (0: none) */
    RunRecord run;
} TakeMemo;

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
    CounterRow launches;   /* the device's statistics row counted in place (``_counter_row.h``) */
    Py_ssize_t launch_index;  /* the launch count's index in it */
    PyObject *device_dict; /* the device's instance dict: no "launch" installed there */
    uint64_t memo_thread;  /* context memo: the thread (PyThreadState id, 0: none) on which */
    uint64_t memo_epoch;   /* the context checks last held, at this g_context_epoch, */
    uint64_t memo_env_tag;  /* and this os.environ version (0: unknown) */
    uint64_t memo_device_tag;  /* device_dict's version when it had no "launch" (0: none) */
    int substitutes;       /* some slot has a device array */
    PyObject *fixed_args;  /* the kernel's arguments when every slot has one, else NULL */
    TableLock held;        /* the table lock last seen, its bound methods (_table_lock.h) */
    PyObject *take_at_once; /* the device's QueueSet.take_at_once, or NULL: async calls
                             * take the Python launcher */
    PyObject *queue_set;   /* its QueueSet when the queue's take and give-back may be done in
                            * C (_queue_take.c.h: an exact QueueSet's own method), else NULL */
    PyObject *enqueue;     /* devices whose queues are not host threads (cuda): what hands an
                            * async call's kernel to its queue (_express.enqueuer), or NULL */
    PyObject *follow;      /* exact plans: ``CallPlan.follow``, which moves the plan to a
                            * changed table or to other host arrays (follow_table), or NULL */
    uint64_t moves;        /* how many times follow_table moved the plan: a call that matched
                            * before it waited for the table's lock checks again (hold_table) */
    TakeMemo taken;        /* what _queue_take.c.h's last take looked up (no references held) */
    Py_ssize_t narrays;
    ArraySlot *arrays;
    Py_ssize_t nscalars;
    ScalarSlot *scalars;
    PreparedCall prepared; /* the kernel's prepared call (CPU devices), asked at its first call */
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
    COUNTER_ROW_VISIT(plan->launches);
    Py_VISIT(plan->device_dict);
    Py_VISIT(plan->fixed_args);
    TABLE_LOCK_VISIT(plan->held);
    Py_VISIT(plan->take_at_once);
    Py_VISIT(plan->queue_set);
    Py_VISIT(plan->enqueue);
    Py_VISIT(plan->follow);
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
    counter_row_close(&plan->launches);
    Py_XDECREF(plan->device_dict);
    Py_XDECREF(plan->fixed_args);
    table_lock_clear(&plan->held);
    Py_XDECREF(plan->take_at_once);
    Py_XDECREF(plan->queue_set);
    Py_XDECREF(plan->enqueue);
    Py_XDECREF(plan->follow);
    prepared_clear(&plan->prepared);
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

/* Weak reference ``ref``'s object in ``*target`` (its address only: no reference is
 * kept, the caller compares it): 1; 0 when the object is gone; -1 when it cannot be read
 * (cleared: the callers answer "no match"). */
static inline int referent(PyObject *ref, PyObject **target) {
#if PY_VERSION_HEX >= 0x030D0000
    if (PyWeakref_GetRef(ref, target) < 0) {
        PyErr_Clear();
        return -1;
    }
    Py_XDECREF(*target);
#else
    *target = PyWeakref_GET_OBJECT(ref);
    if (*target == Py_None)
        *target = NULL;
#endif
    return *target != NULL;
}

/* whether weak reference ``ref`` still refers to ``object`` */
static int is_target(PyObject *ref, PyObject *object) {
    PyObject *target;
    return referent(ref, &target) == 1 && target == object;
}

/* whether weak reference ``ref``'s object is gone */
static int is_dead(PyObject *ref) {
    PyObject *target;
    return referent(ref, &target) == 0;
}

/* -- the checks ---------------------------------------------------------------------------- */
enum { NO_MATCH = 0, SAME_ARRAYS = 1, OTHER_ARRAYS = 2 };

/* Whether ``args`` are the plan's: SAME_ARRAYS; OTHER_ARRAYS: a plan that follows
 * (``plan->follow``) got, in some exact slot whose own array is gone (garbage: a program
 * that makes its arrays anew), another host array of the same type, dtype, flags and
 * layout, or its own array at another address, which it may take (follow_table); else
 * NO_MATCH. (An array of the plan's still alive is never replaced: a solver's swapped
 * arguments keep a plan each.) */
static int arrays_match(ExpressPlan *plan, PyObject *args) {
    int other = 0;
    for (Py_ssize_t i = 0; i < plan->narrays; i++) {
        ArraySlot *a = &plan->arrays[i];
        PyObject *arg = PyTuple_GET_ITEM(args, a->slot);
        if (a->ref != NULL && is_target(a->ref, arg)) {
            /* the plan's array (its layout checked below) */
        } else if (Py_TYPE(arg) != a->type) {
            return NO_MATCH;
        } else if (a->ref != NULL) {
            if (plan->follow == NULL || !is_dead(a->ref))
                return NO_MATCH;
            other = 1;
        }
        ArrayFields *f = ARRAY(arg);
        if (f->nd != a->nd || (a->flags & ~f->flags & NPY_WRITEABLE))
            return NO_MATCH;  /* (read-only now: the launcher refuses a kernel's write to it) */
        if (f->descr != a->descr) {  /* an equal dtype may be another object */
            int equal = PyObject_RichCompareBool(f->descr, a->descr, Py_EQ);
            if (equal != 1) {
                PyErr_Clear();
                return NO_MATCH;
            }
        }
        if (a->layout != NULL) {
            if ((f->flags & LAYOUT_FLAGS) != a->flags)
                return NO_MATCH;
            if (f->data != a->data) {
                if (plan->follow == NULL)
                    return NO_MATCH;
                other = 1;
            }
            for (int d = 0; d < a->nd; d++)  /* (a loop: ~5x cheaper than memcmp at these sizes) */
                if (f->dimensions[d] != a->layout[d] || f->strides[d] != a->layout[a->nd + d])
                    return NO_MATCH;
        }
    }
    for (Py_ssize_t i = 0; i < plan->nscalars; i++) {
        if (Py_TYPE(PyTuple_GET_ITEM(args, plan->scalars[i].slot)) != plan->scalars[i].type)
            return NO_MATCH;
    }
    return other ? OTHER_ARRAYS : SAME_ARRAYS;
}

/* ``value`` (a new reference, dropped; NULL: an error) is ``expected``, or equal to it
 * when ``by_value``: 1 same; 0 not; -1 error */
static int same_value(PyObject *value, PyObject *expected, int by_value) {
    if (value == NULL)
        return -1;
    int same = value == expected;
    if (!same && by_value)
        same = PyObject_RichCompareBool(value, expected, Py_EQ);
    Py_DECREF(value);
    return same;
}

/* 1: ``owner.<name>`` is ``expected`` (or equal, ``by_value``); 0: not; -1: error */
static int same_attr(PyObject *owner, PyObject *name, PyObject *expected, int by_value) {
    return same_value(PyObject_GetAttr(owner, name), expected, by_value);
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

static TypedField g_ranges_version;  /* SortedRanges' ``version``: read in place (a slot) */

static int table_unchanged(ExpressPlan *plan) {
    return same_value(typed_field_get(&g_ranges_version, plan->ranges, s_version), plan->version, 1);
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

/* one more launch in the device's statistics (the GIL held) */
static void count_launch(ExpressPlan *plan) {
    counter_row_add(&plan->launches, plan->launch_index, 1);
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

/* the plan moved to the table as it is now (``_plan_follow.c.h``) */
static int follow_table(ExpressPlan *plan, PyObject *args, int other);

/* The table's lock taken for the plan's call (1; ``*release`` is then the lock's bound
 * release, or NULL when the plan holds nothing), with the table unchanged since the plan's
 * version and ``args`` the plan's arrays (``match`` SAME_ARRAYS), else with the plan moved
 * there (follow_table); 0: the table changed and the plan cannot follow, or another call
 * moved the plan since ``match`` was read (``moves``, read before it); released again
 * then; -1: an error. */
static int hold_table(ExpressPlan *plan, PyObject *args, int match, uint64_t moves,
                      PyObject **release) {
    *release = NULL;
    if (plan->table == NULL)
        return 1;
    PyObject *bound;
    if (table_lock_take(&plan->held, plan->table, &bound) < 0)
        return -1;
    /* held: nobody changes the table, or moves the plan, until unlock */
    int ok = 0;
    if (plan->moves == moves) {  /* (else another call moved it: ``match`` is stale) */
        ok = match == SAME_ARRAYS ? table_unchanged(plan) : 0;
        if (ok == 0)
            ok = follow_table(plan, args, match == OTHER_ARRAYS);
    }
    if (ok != 1) {
        int released = table_lock_give(bound);
        Py_DECREF(bound);
        return ok == 0 && released == 0 ? 0 : -1;
    }
    *release = bound;
    return 1;
}

/* Release what hold_table took; a failed release clears ``*result`` (its error pends). */
static void let_go(PyObject *release, PyObject **result) {
    if (release != NULL) {
        if (table_lock_give(release) < 0 && *result != NULL)
            Py_CLEAR(*result);
        Py_DECREF(release);
    }
}

/* The plan's checks, then the table held (hold_table): 1, with ``*release``; 0: a
 * check failed (nothing held); -1: an error. ``adopt`` 0: ``args`` must be the plan's
 * arrays (SAME_ARRAYS); 1: they must be other host arrays of its layout, which a plan
 * that follows takes (OTHER_ARRAYS). The lane asks the second only once no plan of the
 * region matched the call as it is (``fastcall_run``), so that a solver's plans for each
 * argument order each keep theirs. */
static int enter_plan(ExpressPlan *plan, PyObject *args, int adopt, PyObject **release) {
    *release = NULL;
    uint64_t moves = plan->moves;
    if (PyTuple_GET_SIZE(args) != plan->nargs)
        return 0;
    int match = arrays_match(plan, args);
    if (match == NO_MATCH || (match == OTHER_ARRAYS) != (adopt != 0))
        return 0;
    int ok = context_matches(plan);
    return ok != 1 ? ok : hold_table(plan, args, match, moves, release);
}

/* The words of the plan's prepared call for ``args``, as ``kernel_arguments``' tuple
 * would give them (the plan's device arrays in their slots) with no tuple made: 1; 0 when
 * the prepared call does not apply (not yet prepared, a profiler, an argument of another
 * kind: the caller goes through the tuple and ``call_kernel``). */
static int plan_words(ExpressPlan *plan, PyObject *args, int64_t *words) {
    PreparedCall *n = &plan->prepared;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (n->state != PREPARED_READY || nargs > PREPARED_WORDS || profiled())
        return 0;
    if (!plan->substitutes || plan->fixed_args != NULL)  /* (the arguments as they are given) */
        return prepared_words(n, ((PyTupleObject *)(plan->fixed_args ? plan->fixed_args : args))->ob_item,
                              nargs, words);
    PyObject *items[PREPARED_WORDS];  /* borrowed: args and the plan hold them */
    memcpy(items, ((PyTupleObject *)args)->ob_item, (size_t)nargs * sizeof *items);
    for (Py_ssize_t i = 0; i < plan->narrays; i++)
        if (plan->arrays[i].device != NULL)
            items[plan->arrays[i].slot] = plan->arrays[i].device;
    return prepared_words(n, items, nargs, words);
}

/* The kernel's arguments for its call (``call_planned``): its prepared call's words
 * (``plan_words``: no tuple, ``*device_args`` NULL), else the tuple of its arguments, the
 * prepared call asked for at the kernel's first call (``ensure_prepared``): 0; -1 on error
 * (nothing held). */
static int plan_arguments(ExpressPlan *plan, PyObject *args, int64_t *words, PyObject **device_args) {
    *device_args = NULL;
    if (plan_words(plan, args, words))
        return 0;
    *device_args = kernel_arguments(plan, args);
    if (*device_args != NULL && ensure_prepared(&plan->prepared, plan->kernel, *device_args) == 0)
        return 0;
    Py_CLEAR(*device_args);
    return -1;
}

/* The kernel called with what ``plan_arguments`` gave (the tuple dropped here), its
 * launch counted; ``*seconds`` as ``timing`` asks. */
static PyObject *call_planned(ExpressPlan *plan, const int64_t *words, PyObject *device_args,
                              Timing timing, double *seconds) {
    count_launch(plan);
    if (device_args == NULL)
        return call_prepared(&plan->prepared, words, timing, seconds);
    PyObject *result = call_kernel(&plan->prepared, plan->kernel, device_args, timing, seconds);
    Py_DECREF(device_args);
    return result;
}

/* The plan's call, or MISS (no reference) when a check fails; NULL on error. */
static PyObject *run_plan(PyObject *self, ExpressPlan *plan, PyObject *args, int adopt) {
    PyObject *release;
    int ok = enter_plan(plan, args, adopt, &release);
    if (ok != 1)
        return ok == 0 ? MISS : NULL;
    PyObject *result = NULL;
    int kernel_failed = 0;
    int64_t words[PREPARED_WORDS];
    PyObject *device_args;
    if (plan_arguments(plan, args, words, &device_args) == 0) {
        result = call_planned(plan, words, device_args, TIME_NONE, NULL);
        kernel_failed = result == NULL;
    }
    let_go(release, &result);
    if (kernel_failed)
        return failed(self);
    return result;
}

/* An ``async_=value`` call through the plan on a device whose queues are not host threads
 * (cuda: a launch enqueues on the queue's stream): ``plan->enqueue(value, device_args)``
 * — ``plan->enqueue(value, device_args, joins)`` when the call's queue is first to wait for
 * the queues ``joins`` (its region's wait clause) — with the table held, as ``run_plan``
 * calls the kernel (it counts the launch itself, through ``Device.launch``): the call's
 * AsyncResult; MISS (no reference) when a check fails or ``enqueue`` leaves the call to
 * the Python launcher (None); NULL on error. */
static PyObject *run_plan_enqueued(PyObject *self, ExpressPlan *plan, PyObject *args, PyObject *value,
                                   PyObject *joins, int adopt) {
    int overflow;
    if (PyLong_AsLongAndOverflow(value, &overflow) < 0 || overflow)
        return PyErr_Occurred() ? NULL : MISS;  /* (acc.async_noval ...: the launcher's) */
    PyObject *release;
    int ok = enter_plan(plan, args, adopt, &release);
    if (ok != 1)
        return ok == 0 ? MISS : NULL;
    PyObject *result = NULL;
    PyObject *device_args = kernel_arguments(plan, args);
    if (device_args != NULL) {
        /* (joins NULL ends the arguments there: ``enqueue(value, device_args)``) */
        result = PyObject_CallFunctionObjArgs(plan->enqueue, value, device_args, joins, NULL);
        Py_DECREF(device_args);
        if (result == NULL) {
            let_go(release, &result);
            return failed(self);
        }
    }
    let_go(release, &result);
    if (result == Py_None) {
        Py_DECREF(result);
        return MISS;
    }
    return result;
}
