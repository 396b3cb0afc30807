/* The data lane's copies: ``acc.update_device``/``acc.update_self`` of present data in one
 * C call (``DataLane.upload(x)``/``download(x)``), for a device whose transfers are a plain
 * copy between two numpy arrays in host memory (``emulated``: ``Device._copy`` of
 * ``np.copyto``). Included by ``mapping/_cprobe.c`` after the lane's verbs, whose
 * table-lock and entry helpers it uses (one translation unit).
 *
 *   allow_copies(device, tally_alone, stats_row, counted, kinds): turns the copies on
 *       (the runtime does, for a device whose class copies plainly: ``Device.
 *       copies_in_place``); ``stats_row`` is the statistics' row the lane counts in
 *       (``Stats.counter_row``, an ``array('q')`` counted in place: ``pyacc/_counter_row.h``),
 *       ``counted`` its four indices (uploads, their bytes,
 *       downloads, their bytes), ``kinds`` the event kinds (UPLOAD, DOWNLOAD, DONE).
 *   upload(x) / download(x) -> True | None: the copy of present ``x`` to or from its
 *       device array (OpenACC 3.3 §2.14.4, synchronous), counted as ``BUS.count`` would
 *       (on a device that shares host memory, nothing to copy: True for a numpy.ndarray of
 *       plain items when nobody listens to the directive's end, as the Python verb's no-op);
 *       None, having done nothing, in every other case, which the Python verb takes:
 *       copies not allowed; an ``x`` that is not a writeable (download) numpy.ndarray of
 *       one block, or not inside one mapping; a device array of another layout; someone
 *       listening to the transfer's events, its DONE or the directive's end; another
 *       tally subscriber than the statistics; oversubscription; and a device whose
 *       instance dict holds a fault plan (``_faults``) or its own ``_copy``, ``upload``,
 *       ``download``, ``_transfer`` or ``_transfer_operation`` (a test's patch): the dict
 *       is looked at again only when its version tag changed (``pyacc/_dict_tag.h``).
 *
 * The copy is one ``memmove`` of the block's bytes with the table lock held (nothing can
 * unmap the entry meanwhile), with the GIL released for copies of 64 KiB or more, as
 * NumPy's copies release it.
 */

#define COPY_WITHOUT_GIL (1 << 16)

static PyObject *s_faults, *s_device_hooks[5];

static int copies_names_init(void) {
    const char *hooks[5] = {"_copy", "upload", "download", "_transfer", "_transfer_operation"};
    if ((s_faults = PyUnicode_InternFromString("_faults")) == NULL)
        return -1;
    for (int i = 0; i < 5; i++)
        if ((s_device_hooks[i] = PyUnicode_InternFromString(hooks[i])) == NULL)
            return -1;
    return 0;
}

static PyObject *lane_allow_copies(Lane *self, PyObject *args) {
    PyObject *device, *alone, *row, *counted, *kinds;
    if (!PyArg_ParseTuple(args, "OO!OO!O!:allow_copies", &device, &PyList_Type, &alone,
                          &row, &PyTuple_Type, &counted, &PyTuple_Type, &kinds))
        return NULL;
    Py_ssize_t c[4], k[3];
    if (!PyArg_ParseTuple(counted, "nnnn", &c[0], &c[1], &c[2], &c[3]) ||
            !PyArg_ParseTuple(kinds, "nnn", &k[0], &k[1], &k[2]))
        return NULL;
    Py_ssize_t top = 0;  /* the highest index the counts add to */
    for (int i = 0; i < 4; i++) {
        if (c[i] < 0 || (i < 3 && k[i] < 0)) {
            PyErr_SetString(PyExc_ValueError, "allow_copies: a negative count index or event kind");
            return NULL;
        }
        top = c[i] > top ? c[i] : top;
    }
    CounterRow counts;
    if (counter_row_open(&counts, row, top, "allow_copies") < 0)
        return NULL;
    PyObject *dict = PyObject_GenericGetDict(device, NULL);
    if (dict == NULL) {
        counter_row_close(&counts);
        return NULL;
    }
    Py_XSETREF(self->device_dict, dict);
    Py_XSETREF(self->tally_alone, Py_NewRef(alone));
    counter_row_close(&self->stats_row);
    self->stats_row = counts;
    memcpy(self->counted, c, sizeof c);
    self->upload_kind = k[0], self->download_kind = k[1], self->done_kind = k[2];
    self->device_tag = 0;
    Py_RETURN_NONE;
}

/* 1: the device copies plainly now (no fault plan, no patched transfer method); 0: not;
 * -1: an error. */
static int device_copies_plainly(Lane *self) {
    uint64_t tag = instance_dict_tag(self->device_dict);
    if (tag != 0 && tag == self->device_tag)
        return 1;
    PyObject *faults = PyDict_GetItemWithError(self->device_dict, s_faults);
    if (faults != Py_None)
        return PyErr_Occurred() ? -1 : 0;
    for (int i = 0; i < 5; i++) {
        if (PyDict_GetItemWithError(self->device_dict, s_device_hooks[i]) != NULL)
            return 0;
        if (PyErr_Occurred())
            return -1;
    }
    self->device_tag = tag;
    return 1;
}

/* With the lock held: the copy between x and its device array in entry (True), or None. */
static PyObject *copy_entry(Lane *self, PyObject *entry, PyObject *x, int upload) {
    PyObject *device_array = device_array_of(self, entry, x);
    if (device_array == NULL)
        return NULL;
    ArrayFields *host = (ArrayFields *)x, *device = (ArrayFields *)device_array;
    int64_t data, low, high;
    if (Py_TYPE(device_array) != g_ndarray || !same_layout_of(device, host) ||
            !((upload ? device : host)->flags & NPY_WRITEABLE) || array_extent(x, &data, &low, &high) < 0) {
        Py_DECREF(device_array);
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    }
    /* same layout, one block: the bytes from the lowest element's address on */
    char *from = (upload ? host : device)->data + (low - data), *to = (upload ? device : host)->data + (low - data);
    size_t nbytes = (size_t)(high - low);
    if (nbytes >= COPY_WITHOUT_GIL) {
        Py_BEGIN_ALLOW_THREADS
        memmove(to, from, nbytes);
        Py_END_ALLOW_THREADS
    } else {
        memmove(to, from, nbytes);
    }
    Py_DECREF(device_array);
    Py_ssize_t first = upload ? 0 : 2;
    counter_row_add(&self->stats_row, self->counted[first], 1);
    counter_row_add(&self->stats_row, self->counted[first + 1], (int64_t)nbytes);
    return Py_NewRef(Py_True);
}

static PyObject *copy_verb(Lane *self, PyObject *x, int upload) {
    if (self->table == Py_None)  /* shared memory: nothing to copy (§2.7.4), as the Python verb */
        return watched(self, self->end_kind) || !plain_items(x) ? Py_NewRef(Py_None) : Py_NewRef(Py_True);
    if (self->device_dict == NULL || PyList_GET_ITEM(self->tally_alone, 0) != Py_True ||
            watched(self, self->done_kind) || (!upload && !(((ArrayFields *)x)->flags & NPY_WRITEABLE)))
        Py_RETURN_NONE;
    int plain = device_copies_plainly(self);
    if (plain != 1)
        return plain < 0 ? NULL : Py_NewRef(Py_None);
    Py_ssize_t kind = upload ? self->upload_kind : self->download_kind;
    PyObject *release;
    switch (start_verb(self, x, kind, &release)) {
        case DECLINED: case SHARED: Py_RETURN_NONE;  /* (shared memory: never allowed) */
        case HELD: break;
        default: return NULL;
    }
    /* what another thread may have changed while the take waited, again with the lock */
    plain = watched(self, self->done_kind) || PyList_GET_ITEM(self->tally_alone, 0) != Py_True
        ? 0 : device_copies_plainly(self);
    if (plain != 1)
        return unlock(release, plain < 0 ? NULL : Py_NewRef(Py_None));
    PyObject *entry = present_entry(self, x);
    PyObject *result = entry != NULL ? copy_entry(self, entry, x, upload)
        : PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    return unlock(release, result);
}

static PyObject *lane_upload(Lane *self, PyObject *x) {
    return Py_TYPE(x) != g_ndarray ? Py_NewRef(Py_None) : copy_verb(self, x, 1);
}

static PyObject *lane_download(Lane *self, PyObject *x) {
    return Py_TYPE(x) != g_ndarray ? Py_NewRef(Py_None) : copy_verb(self, x, 0);
}
