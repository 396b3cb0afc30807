/* pyacc/_plan_record.c.h: an express plan made from its launch-plan record, included by
 * _fastcall.c.
 *
 * Owns ``new_plan``: the fields of a launch-plan record (``pyacc._express.ExpressPlan``,
 * where each is documented) read by name (``PLAN_FIELDS``, exported to Python, where a
 * test holds it equal to the record's fields), checked, and kept in an ``ExpressPlan``
 * (``_express_plan.c.h``): each mapped argument's array slot (``read_array``: the host
 * array's weak reference and layout on separate memory), each scalar's type, and the
 * kernel's fixed arguments when every argument is a device array of the plan. It is part
 * of ``_fastcall.c``'s one translation unit, after ``_queue_take.c.h`` (``queue_set_of``).
 */

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
    a->flags = f->flags & LAYOUT_FLAGS;  /* (every slot: a read-only array never matches a writeable one) */
    if (!exact)
        return 0;
    a->ref = PyWeakref_NewRef(array, NULL);
    if (a->ref == NULL)
        return -1;
    a->data = f->data;
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

/* The fields of a launch-plan record (pyacc._express.ExpressPlan, where each is
 * documented), read by name: the record's class is their one definition, and this
 * list its C reader's (exported as PLAN_FIELDS; a test holds the two equal). */
static const char *const PLAN_FIELDS[] = {
    "owner", "nargs", "runtime", "ranges", "table", "version", "kernel", "reads_default",
    "default", "env_values", "launch_count", "device_dict", "arrays", "scalars", "exact",
    "take_at_once", "enqueue", "follow", NULL,
};
#define PLAN_FIELD_COUNT (sizeof(PLAN_FIELDS) / sizeof(PLAN_FIELDS[0]) - 1)

static PyObject *plan_fields(PyObject *record) {
    /* the record's fields by name, as a tuple in PLAN_FIELDS' order */
    PyObject *fields = PyTuple_New(PLAN_FIELD_COUNT);
    for (Py_ssize_t i = 0; fields != NULL && i < (Py_ssize_t)PLAN_FIELD_COUNT; i++) {
        PyObject *value = PyObject_GetAttrString(record, PLAN_FIELDS[i]);
        if (value == NULL)
            Py_CLEAR(fields);
        else
            PyTuple_SET_ITEM(fields, i, value);
    }
    return fields;
}

static PyObject *plan_field_names(void) {
    PyObject *names = PyTuple_New(PLAN_FIELD_COUNT);
    for (Py_ssize_t i = 0; names != NULL && i < (Py_ssize_t)PLAN_FIELD_COUNT; i++) {
        PyObject *name = PyUnicode_FromString(PLAN_FIELDS[i]);
        if (name == NULL)
            Py_CLEAR(names);
        else
            PyTuple_SET_ITEM(names, i, name);
    }
    return names;
}

static ExpressPlan *new_plan(PyObject *record) {
    /* record: a launch-plan record, pyacc._express.ExpressPlan, its fields read by name
     * (PLAN_FIELDS): ranges and table None or both set, reads_default and exact truth
     * values, env_values a tuple, launch_count (row array, index), device_dict a dict,
     * arrays ((slot, host array, device array|None), ...), scalars ((slot, type), ...),
     * take_at_once None or QueueSet.take_at_once, enqueue None or a callable (not both),
     * follow None or a callable (exact plans only) */
    Py_ssize_t nargs, launch_index;
    PyObject *owner, *runtime, *ranges, *table, *version, *kernel, *default_, *env_values,
             *cell, *device_dict, *arrays, *scalars, *take_at_once, *enqueue, *follow;
    int reads_default, exact;
    PyObject *spec = plan_fields(record);
    if (spec == NULL)
        return NULL;
    int parsed = PyArg_ParseTuple(spec, "OnOOOOOpOO!(On)O!O!O!pOOO", &owner, &nargs, &runtime, &ranges,
                                  &table, &version, &kernel, &reads_default, &default_, &PyTuple_Type,
                                  &env_values, &cell, &launch_index, &PyDict_Type,
                                  &device_dict, &PyTuple_Type, &arrays, &PyTuple_Type, &scalars, &exact,
                                  &take_at_once, &enqueue, &follow);
    Py_DECREF(spec);  /* (the record keeps every field alive while the plan is made) */
    if (!parsed)
        return NULL;
    if (take_at_once != Py_None && enqueue != Py_None) {
        PyErr_SetString(PyExc_ValueError, "FastCall._arm_plan: a plan runs async calls at once or "
                        "enqueues them, not both");
        return NULL;
    }
    if (follow != Py_None && (!exact || !PyCallable_Check(follow))) {
        PyErr_SetString(PyExc_ValueError, "FastCall._arm_plan: only a plan of exact arrays "
                        "follows them, through a callable");
        return NULL;
    }
    if ((ranges == Py_None) != (table == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "FastCall._arm_plan: a table needs its version holder");
        return NULL;
    }
    if (launch_index < 0 || PyTuple_GET_SIZE(env_values) != PyTuple_GET_SIZE(g_env_keys)) {
        PyErr_SetString(PyExc_ValueError, "FastCall._arm: a malformed plan");
        return NULL;
    }
    CounterRow launches;  /* the launch count's row, held by the plan from here */
    if (counter_row_open(&launches, cell, launch_index, "FastCall._arm") < 0)
        return NULL;
    ExpressPlan *plan = PyObject_GC_New(ExpressPlan, &ExpressPlanType);
    if (plan == NULL) {
        counter_row_close(&launches);
        return NULL;
    }
    plan->owner = plan->runtime = plan->ranges = plan->table = plan->version = NULL;
    plan->kernel = plan->check_default = plan->env_values = NULL;
    plan->launches = launches;
    plan->device_dict = NULL;
    plan->memo_thread = plan->memo_epoch = plan->memo_env_tag = plan->memo_device_tag = 0;
    plan->nargs = nargs;
    plan->narrays = plan->nscalars = 0;
    plan->arrays = NULL;
    plan->scalars = NULL;
    plan->substitutes = 0;
    plan->fixed_args = NULL;
    plan->held = (TableLock){0};
    plan->taken = (TakeMemo){0};
    plan->prepared = (PreparedCall){PREPARED_UNASKED};
    plan->take_at_once = take_at_once == Py_None ? NULL : Py_NewRef(take_at_once);
    plan->queue_set = plan->take_at_once == NULL ? NULL : queue_set_of(plan->take_at_once);
    plan->enqueue = enqueue == Py_None ? NULL : Py_NewRef(enqueue);
    plan->follow = follow == Py_None ? NULL : Py_NewRef(follow);
    plan->moves = 0;
#define KEEP(field, value) (Py_INCREF(value), plan->field = (value))
    KEEP(owner, owner);
    KEEP(runtime, runtime);
    plan->ranges = ranges == Py_None ? NULL : (Py_INCREF(ranges), ranges);
    plan->table = table == Py_None ? NULL : (Py_INCREF(table), table);
    KEEP(version, version);
    KEEP(kernel, kernel);
    plan->check_default = reads_default ? (Py_INCREF(default_), default_) : NULL;
    KEEP(env_values, env_values);
    plan->launch_index = launch_index;
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
    if (plan->substitutes && plan->narrays == nargs && plan->nscalars == 0
            && fix_arguments(plan) < 0)
        goto fail;
    PyObject_GC_Track(plan);
    return plan;
fail:
    Py_DECREF(plan);
    return NULL;
}
