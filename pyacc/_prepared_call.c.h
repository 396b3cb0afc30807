/* pyacc/_prepared_call.c.h: a plan's kernel called through its prepared call, included by
 * _fastcall.c (before _express_plan.c.h: an ``ExpressPlan`` holds a ``PreparedCall``).
 *
 * Owns ``call_kernel``: what every lane path on a CPU device calls the kernel with. The
 * first time a plan calls its kernel it asks ``compiler.cpu_plans.prepare(kernel,
 * args)`` (configure_prepared) for the kernel's prepared call: a trampoline compiled by
 * Numba that takes the arguments as plain words (an array: data pointer, dimensions,
 * strides; a scalar: its bits) and calls the overload the dispatcher chose for those
 * arguments' types, without the dispatcher's typing, overload selection and unboxing
 * (~2,300 of a call's ~6,000 instructions on three arrays; compiler/cpu_plans.py says what
 * the trampoline does).
 * Later calls fill the words from the arguments and call the trampoline when each
 * argument still has the kind, dtype object and typing flags (layout, alignment,
 * writability: what Numba's ``typeof`` reads) it had at the preparation; any other call
 * goes to the dispatcher, as before (an ``int`` beyond int64, another layout, ...).
 *
 * A kernel called with the words of its last prepared call, which was short
 * (``g_hold_below``), is called through the trampoline that keeps the GIL (``holding``);
 * the others release it as their ``nogil`` asks, as the dispatcher would. (Kept around
 * the call only: a parallel loop inside the kernel gives the GIL back for the loop's run,
 * as Numba's parallel launch does; so keeping it never stands for a lock.)
 *
 * Invariants: the words describe arguments that the call's tuple (and, for the device
 * arrays put in their slots, the plan: ``plan_words``) keep alive for the call; a plan
 * whose preparation failed or was refused calls the dispatcher for good
 * (a failure is reported once as an unraisable error, never raised to the caller: the
 * dispatcher is a correct way to call; an interrupt meanwhile is raised, and the next call
 * asks again); a thread with a profiler calls the dispatcher, which reports the kernel's
 * call to it; the preparation runs Python code (the GIL may be
 * released) while the plan is marked *preparing*, so another thread meanwhile calls the
 * dispatcher.
 */

enum { PREPARED_WORDS = 256, PREPARED_MOST_NDIM = 32 };  /* the words: compiler.cpu_plans.MOST_WORDS */
enum { PREPARED_UNASKED = 0, PREPARED_READY = 1, PREPARED_NONE = -1, PREPARED_PREPARING = -2 };
/* the typing flags of an array: what Numba's typeof reads of them */
#define PREPARED_TYPING_FLAGS (NPY_C_CONTIGUOUS | NPY_F_CONTIGUOUS | NPY_ALIGNED | NPY_WRITEABLE)

/* a kernel's prepared call: the trampoline and what each argument was when it was
 * prepared (an ExpressPlan's ``prepared``) */
typedef PyObject *(*Trampoline)(const int64_t *words);
typedef struct {
    unsigned char kind;   /* an array's ndim (0-32), else 'i', 'f', 'b' */
    int flags;            /* an array's typing flags */
    PyObject *descr;      /* an array's dtype (strong), compared by address */
} PreparedArg;
typedef struct {
    int state;            /* PREPARED_UNASKED, _READY, _NONE, _PREPARING */
    Trampoline entry;     /* releases the GIL for the kernel's run when it is nogil */
    Trampoline holding;   /* keeps the GIL (``entry`` itself for a kernel that is not nogil) */
    int hold;             /* the last prepared call ran under g_hold_below, with ``short_words`` */
    int64_t *short_words; /* that call's words (``nwords``): a call with the same keeps the GIL */
    unsigned untimed;     /* kept calls counted, one in HOLD_SAMPLE timed (call_prepared) */
    Py_ssize_t nwords;    /* the words of every call (fixed by the arguments' kinds) */
    int64_t function, environment;  /* the words every call starts with */
    Py_ssize_t nargs;
    PreparedArg *args;
} PreparedCall;

static PyObject *g_prepare_call;  /* compiler.cpu_plans.prepare, or NULL: never asked */
static unsigned long long g_prepared_calls;  /* calls made through a prepared call (prepared_calls()) */
static unsigned long long g_held_calls;      /* of those, of a nogil kernel keeping the GIL (held_calls()) */

/* ``prepare``'s answer, checked and kept: the trampoline, the words it starts with and
 * what each argument was at the preparation */
static int prepared_from(PreparedCall *n, PyObject *answer, PyObject *args) {
    PyObject *kinds;
    unsigned long long entry, holding, function, environment;
    if (!PyArg_ParseTuple(answer, "KKKKS", &entry, &holding, &function, &environment, &kinds))
        return -1;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (PyBytes_GET_SIZE(kinds) != nargs) {
        PyErr_SetString(PyExc_ValueError, "prepare: one kind per argument");
        return -1;
    }
    Py_ssize_t nwords = 2;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        unsigned char kind = (unsigned char)PyBytes_AS_STRING(kinds)[i];
        nwords += kind <= PREPARED_MOST_NDIM ? 1 + 2 * kind : 1;
    }
    n->args = PyMem_Calloc(nargs ? (size_t)nargs : 1, sizeof(PreparedArg));
    n->short_words = PyMem_Calloc((size_t)nwords, sizeof(int64_t));
    if (n->args == NULL || n->short_words == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    n->nargs = nargs;
    n->nwords = nwords;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PreparedArg *arg = &n->args[i];
        PyObject *value = PyTuple_GET_ITEM(args, i);
        arg->kind = (unsigned char)PyBytes_AS_STRING(kinds)[i];
        if (arg->kind <= PREPARED_MOST_NDIM) {
            if (Py_TYPE(value) != g_ndarray || ARRAY(value)->nd != arg->kind) {
                PyErr_SetString(PyExc_ValueError, "prepare: an array's kind is its ndim");
                return -1;
            }
            arg->descr = Py_NewRef(ARRAY(value)->descr);
            arg->flags = ARRAY(value)->flags & PREPARED_TYPING_FLAGS;
        }
    }
    n->entry = (Trampoline)(uintptr_t)entry;
    n->holding = (Trampoline)(uintptr_t)holding;
    n->hold = 0;  /* (a first call's length is unknown: the GIL released, as Numba would) */
    n->function = (int64_t)function;
    n->environment = (int64_t)environment;
    return 0;
}

static void prepared_clear(PreparedCall *n) {
    for (Py_ssize_t i = 0; i < n->nargs; i++)
        Py_XDECREF(n->args[i].descr);
    PyMem_Free(n->args);
    PyMem_Free(n->short_words);
    n->args = NULL;
    n->short_words = NULL;
    n->nargs = n->nwords = 0;
    n->hold = 0;
}

/* Ask for the kernel's prepared call, once: state READY or NONE afterwards, 0; an
 * interrupt (any BaseException that is not an Exception: KeyboardInterrupt, SystemExit)
 * propagates, -1, the call asked again next time. */
static int prepare_call(PreparedCall *n, PyObject *kernel, PyObject *args) {
    n->state = PREPARED_PREPARING;
    PyObject *answer = g_prepare_call == NULL ? Py_NewRef(Py_None)
        : PyObject_CallFunctionObjArgs(g_prepare_call, kernel, args, NULL);
    int ready = answer != NULL && answer != Py_None && prepared_from(n, answer, args) == 0;
    Py_XDECREF(answer);
    if (PyErr_Occurred()) {
        prepared_clear(n);
        if (!PyErr_ExceptionMatches(PyExc_Exception)) {
            n->state = PREPARED_UNASKED;
            return -1;
        }
        PyErr_WriteUnraisable(kernel);  /* a failed preparation: said, and the dispatcher called */
    }
    n->state = ready ? PREPARED_READY : PREPARED_NONE;
    return 0;
}

/* The kernel's prepared call asked for when it never was: 0, or -1 with an interrupt
 * (``prepare_call``). Callers ask before they count or time the kernel's call. */
static int ensure_prepared(PreparedCall *n, PyObject *kernel, PyObject *args) {
    return n->state == PREPARED_UNASKED ? prepare_call(n, kernel, args) : 0;
}

#include "_profiled.h"  /* profiled(): a sys.setprofile profiler on this thread */

/* The words of a call with the ``nargs`` arguments ``items``: 1; 0 when an argument is
 * not what it was at the preparation (the dispatcher is called). */
static int prepared_words(const PreparedCall *n, PyObject *const *items, Py_ssize_t nargs,
                          int64_t *words) {
    if (nargs != n->nargs)
        return 0;
    Py_ssize_t k = 0;
    words[k++] = n->function;
    words[k++] = n->environment;
    for (Py_ssize_t i = 0; i < n->nargs; i++) {
        const PreparedArg *arg = &n->args[i];
        PyObject *value = items[i];
        if (arg->kind <= PREPARED_MOST_NDIM) {
            ArrayFields *f = ARRAY(value);
            int nd = arg->kind;
            if (Py_TYPE(value) != g_ndarray || f->nd != nd || f->descr != arg->descr ||
                    (f->flags & PREPARED_TYPING_FLAGS) != arg->flags || k + 1 + 2 * nd > PREPARED_WORDS)
                return 0;
            words[k++] = (int64_t)(intptr_t)f->data;
            for (int d = 0; d < nd; d++)
                words[k++] = f->dimensions[d];
            for (int d = 0; d < nd; d++)
                words[k++] = f->strides[d];
            continue;
        }
        if (k + 1 > PREPARED_WORDS)
            return 0;
        if (arg->kind == 'i') {
            if (!PyLong_CheckExact(value))
                return 0;
            int overflow;
            long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
            if (overflow || (v == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                return 0;  /* typed uint64 or refused by the dispatcher */
            }
            words[k++] = v;
        } else if (arg->kind == 'f') {
            if (!PyFloat_CheckExact(value))
                return 0;
            double v = PyFloat_AS_DOUBLE(value);
            memcpy(&words[k++], &v, sizeof v);
        } else if (arg->kind == 'b' && (value == Py_True || value == Py_False)) {
            words[k++] = value == Py_True;
        } else {
            return 0;
        }
    }
    return 1;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);  /* time.perf_counter's clock on Linux */
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A kernel called with the very words of its last call (the same arrays, the same scalar
 * values), which ran under ``g_hold_below`` seconds (``$PYACC_GIL_HOLD_BELOW``, 10 µs
 * unless set; configure_prepared), keeps the GIL: releasing and taking it back
 * costs ~400 instructions (~0.05 µs), a share of a short call, and another Python thread
 * then waits about this long (CPython's switch interval is 5 ms). A call with other words
 * (another trip count, other arrays), or after a longer run, releases it as ``nogil``
 * asks. A kept call whose caller needs no time is timed one in ``HOLD_SAMPLE`` (two clock
 * reads cost about what keeping the GIL saves): a kernel whose run grows with its arrays'
 * values alone gives the GIL back within that many calls. */
static double g_hold_below = 10e-6;
enum { HOLD_SAMPLE = 8 };

/* What a caller asks of a kernel's run time (``call_kernel``): nothing; every call's; or
 * the time of a call that is not kept (other words, or after a long run) and of one kept
 * call in ``HOLD_SAMPLE``, the others reported as ``UNTIMED`` (an async call run at once
 * keeps its kernel's run record then: ``_at_once.c.h``). A clock read costs ~23 ns on a
 * VM (``rdtsc`` trapped or slowed): two per call were a fifth of a short async call. */
typedef enum { TIME_NONE, TIME_ALWAYS, TIME_SAMPLED } Timing;
#define UNTIMED (-1.0)

/* A trampoline's result as CPython checks a C function's (``_Py_CheckFunctionResult``): a
 * result with an exception set is the exception (Numba's overload may return one so: a
 * routine that raised in a call its parallel loop hoisted; the dispatcher's call then
 * raises SystemError from it, which ``queue_protocol.reported_cause`` unwraps). */
static PyObject *checked_result(PyObject *result) {
    if (result != NULL && PyErr_Occurred())
        Py_CLEAR(result);
    return result;
}

/* The prepared call through ``words`` (its GIL kept or given back, as above); ``*seconds``
 * how long it took, as ``timing`` asks (NULL with TIME_NONE). */
static PyObject *call_prepared(PreparedCall *n, const int64_t *words, Timing timing, double *seconds) {
    g_prepared_calls++;
    if (n->holding == n->entry && timing == TIME_NONE)  /* (not nogil: nothing to decide) */
        return checked_result(n->entry(words));
    size_t size = (size_t)n->nwords * sizeof(int64_t);
    int hold = n->hold && memcmp(words, n->short_words, size) == 0;
    g_held_calls += hold && n->holding != n->entry;
    if (hold && timing != TIME_ALWAYS && ++n->untimed % HOLD_SAMPLE != 0) {
        if (seconds != NULL)
            *seconds = UNTIMED;
        return checked_result(n->holding(words));
    }
    double start = now();
    PyObject *result = (hold ? n->holding : n->entry)(words);
    double took = now() - start;
    if (seconds != NULL)
        *seconds = took;
    n->hold = took < g_hold_below;
    if (n->hold && !hold)  /* (the same words already kept) */
        memcpy(n->short_words, words, size);
    return checked_result(result);
}

/* ``kernel`` called with ``args``: through its prepared call ``n`` when it has one, the
 * arguments fit it and no profiler listens, else by the dispatcher (timed whenever a time
 * is asked); ``*seconds``: how long it took, as ``timing`` asks (NULL with TIME_NONE).
 * The caller has asked for ``n`` (``ensure_prepared``) before counting or timing the
 * call. */
static PyObject *call_kernel(PreparedCall *n, PyObject *kernel, PyObject *args, Timing timing,
                             double *seconds) {
    int64_t words[PREPARED_WORDS];
    if (n->state == PREPARED_READY && !profiled() &&
            prepared_words(n, ((PyTupleObject *)args)->ob_item, PyTuple_GET_SIZE(args), words))
        return call_prepared(n, words, timing, seconds);
    if (timing == TIME_NONE)
        return PyObject_Call(kernel, args, NULL);
    double start = now();
    PyObject *result = PyObject_Call(kernel, args, NULL);
    *seconds = now() - start;
    return result;
}

/* prepared_calls(): how many kernel calls went through a prepared call (tests, benchmarks) */
static PyObject *prepared_calls(PyObject *module, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(g_prepared_calls);
}

/* held_calls(): how many of those kept the GIL for the kernel's run (tests, benchmarks) */
static PyObject *held_calls(PyObject *module, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(g_held_calls);
}

/* configure_prepared(prepare, hold_below): what asks for a plan's prepared call (None:
 * never), and the seconds under which a repeated call keeps the GIL (0: never) */
static PyObject *configure_prepared(PyObject *module, PyObject *args) {
    PyObject *prepare;
    double hold_below;
    if (!PyArg_ParseTuple(args, "Od", &prepare, &hold_below))
        return NULL;
    if (!(hold_below >= 0.0)) {
        PyErr_SetString(PyExc_ValueError, "configure_prepared: hold_below must be >= 0 seconds");
        return NULL;
    }
    Py_XSETREF(g_prepare_call, prepare == Py_None ? NULL : Py_NewRef(prepare));
    g_hold_below = hold_below;
    Py_RETURN_NONE;
}
