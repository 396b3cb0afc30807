/* pyacc/_plan_follow.c.h: an express plan moved to the present table as it is now,
 * included by _fastcall.c (after _express_plan.c.h, whose ``hold_table`` calls
 * ``follow_table``).
 *
 * On a device with separate memory a plan holds device arrays of the mappings its arrays
 * had when it was armed. When the table changed since (a data region that maps the same
 * arrays anew, as a program's time step does), or when a call passes other host arrays of
 * the plan's type, dtype, flags and layout (a program whose arrays are made anew), the
 * plan follows them, the table's lock held: ``follow_table`` asks ``CallPlan.follow``
 * (``pyacc/_replay.py``: the memo followed, ``ComputeMemo.followed``) for the device arrays
 * of their mappings as they are now — what the Python launcher's join would find — and
 * takes them, the table's version and, for other host arrays, those arrays
 * (``take_arrays``); the kernel's fixed arguments are made again (``fix_arguments``).
 *
 * Invariants: a plan changes only with the table's lock held, and each change counts in
 * ``plan->moves``, so that a call that matched the plan before it waited for the lock
 * checks again (``hold_table``); a failed follow (an error) leaves the plan as it was, or
 * (a fixed-arguments tuple that could not be made) moved with no such tuple; a
 * follow that answers None (an array not wholly inside a mapping, or sorted otherwise)
 * changes nothing, and the call goes to the Python launcher, which answers as for a first
 * call (the copy, or the error).
 */

/* ``plan->fixed_args`` (re)made from the plan's device arrays when every argument is one
 * (the same at every call: ``kernel_arguments``), else left NULL: 0; -1 on error. Called
 * by ``new_plan`` and, when the plan's arrays moved, by ``follow_table``. */
static int fix_arguments(ExpressPlan *plan) {
    PyObject *fixed = PyTuple_New(plan->nargs);
    if (fixed == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < plan->nargs; i++)
        PyTuple_SET_ITEM(fixed, i, Py_NewRef(Py_None));
    for (Py_ssize_t i = 0; i < plan->narrays; i++) {
        ArraySlot *a = &plan->arrays[i];
        if (a->device == NULL) {  /* (an array passed as it is: built per call) */
            Py_CLEAR(fixed);
            break;
        }
        Py_SETREF(((PyTupleObject *)fixed)->ob_item[a->slot], Py_NewRef(a->device));
    }
    Py_XSETREF(plan->fixed_args, fixed);
    return 0;
}

/* ``args``' arrays taken by the plan in its exact slots (after follow_table's follow
 * moved the memo to them): each slot's weak reference and data address. 0; -1 on error,
 * the plan unchanged. */
static int take_arrays(ExpressPlan *plan, PyObject *args) {
    PyObject **refs = PyMem_Calloc((size_t)plan->narrays + 1, sizeof(PyObject *));
    if (refs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t i = 0;
    for (; i < plan->narrays; i++) {
        PyObject *array = PyTuple_GET_ITEM(args, plan->arrays[i].slot);
        if (plan->arrays[i].ref != NULL && (refs[i] = PyWeakref_NewRef(array, NULL)) == NULL)
            break;
    }
    int ok = i == plan->narrays;
    for (Py_ssize_t j = 0; j < plan->narrays; j++) {
        ArraySlot *a = &plan->arrays[j];
        if (ok && refs[j] != NULL) {
            Py_SETREF(a->ref, refs[j]);
            a->data = ARRAY(PyTuple_GET_ITEM(args, a->slot))->data;
        } else {
            Py_XDECREF(refs[j]);
        }
    }
    PyMem_Free(refs);
    return ok ? 0 : -1;
}

static TypedField g_ranges_bounds;  /* SortedRanges' ``bounds``: read in place (a slot) */

/* Whether each array of ``args`` in the plan's exact slots lies wholly inside one range of
 * the present table (``plan->ranges``' bounds, searched in C: ``_range_search.h``), the
 * table's lock held: 0 when one does not — the follow would answer None, and is not asked
 * (a plan armed in a data region, then called on the same arrays outside any: each call
 * maps them for itself); 1 when they all do, or when the bounds cannot be read here
 * (the follow decides). */
static int all_mapped(ExpressPlan *plan, PyObject *args) {
    PyObject *bounds = typed_field_get(&g_ranges_bounds, plan->ranges, s_bounds);
    if (bounds == NULL) {
        PyErr_Clear();
        return 1;
    }
    int mapped = 1;
    Py_ssize_t itemsize = PyObject_TypeCheck(bounds, g_ndarray) && bounds_layout(ARRAY(bounds))
                          ? array_itemsize(bounds) : 0;
    if (itemsize < 0)
        PyErr_Clear();  /* (not read: the follow decides) */
    if (itemsize == (Py_ssize_t)sizeof(int64_t)) {
        ArrayFields *b = ARRAY(bounds);
        for (Py_ssize_t i = 0; mapped && i < plan->narrays; i++) {
            ArraySlot *a = &plan->arrays[i];
            int64_t low, high;
            array_span(ARRAY(PyTuple_GET_ITEM(args, a->slot)), a->itemsize, &low, &high);
            mapped = a->ref == NULL || (low < high && bounds_search(b, b->dimensions[1], low, high) >= 0);
        }
    }
    Py_DECREF(bounds);
    return mapped;
}

/* The plan moved to the present table as it is now, the table's lock held: when the table
 * changed since the plan's version, or for ``args`` in which ``other`` (OTHER_ARRAYS)
 * host arrays of the plan's layout stand in its exact slots, ``plan->follow(runtime,
 * args)`` (``CallPlan.follow``: its memo followed, ``ComputeMemo.followed``). 1: every
 * array lies wholly inside a mapping, and the plan now has their device arrays as the
 * memo made them, the table's version and, when ``other``, those arrays (what the Python
 * launcher's join and replay would arm); 0: one does not, or another sorting applies (no
 * follow: the launcher decides); -1: an error. */
static int follow_table(ExpressPlan *plan, PyObject *args, int other) {
    if (plan->follow == NULL || !all_mapped(plan, args))
        return 0;
    PyObject *answer = PyObject_CallFunctionObjArgs(plan->follow, plan->runtime, args, NULL);
    if (answer == NULL || answer == Py_None) {
        Py_XDECREF(answer);
        return answer == NULL ? -1 : 0;
    }
    PyObject *version, *views;
    int ok = PyArg_ParseTuple(answer, "OO!", &version, &PyTuple_Type, &views)
             && PyTuple_GET_SIZE(views) == plan->narrays;
    for (Py_ssize_t i = 0; ok && i < plan->narrays; i++)
        ok = plan->arrays[i].device != NULL && PyTuple_GET_ITEM(views, i) != Py_None;
    if (!ok) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "FastCall: a plan's follow answered no device "
                            "array for each of its arrays");
        Py_DECREF(answer);
        return -1;
    }
    if (other && take_arrays(plan, args) < 0) {
        Py_DECREF(answer);
        return -1;
    }
    plan->moves++;
    for (Py_ssize_t i = 0; i < plan->narrays; i++)
        Py_SETREF(plan->arrays[i].device, Py_NewRef(PyTuple_GET_ITEM(views, i)));
    Py_SETREF(plan->version, Py_NewRef(version));
    Py_DECREF(answer);
    if (plan->fixed_args != NULL && fix_arguments(plan) < 0) {
        Py_CLEAR(plan->fixed_args);  /* (the old views' tuple: each call makes its own) */
        return -1;
    }
    return 1;
}
