/* A statistics row that C code counts in place: ``mapping.events.Stats.counter_row``, an
 * ``array.array('q')`` of the device's counts in ``STAT_KEYS``' order, which the express
 * lane (launches, pyacc/_express_plan.c.h) and the data lane (copies and their bytes,
 * mapping/_lane_copies.c.h) add to. Adding to a Python int in a list cost ~180 machine
 * instructions a count (a new int, the old one freed); an int64 item costs one add.
 *
 * Invariants: the row's buffer is held (``counter_row_open``) for as long as its user
 * keeps the row, so the array cannot be resized meanwhile (an exported array refuses);
 * every add is made with the GIL held, as Python's own ``row[i] += n`` (``Stats.add``'s
 * rows, summed with this one by ``Stats.snapshot``); an index is checked once, at open.
 * Counts wrap at 2**63 (9.2e18 bytes), which no run reaches.
 */
#ifndef PYACC_COUNTER_ROW_H
#define PYACC_COUNTER_ROW_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_buffer view;  /* the row's buffer, held; view.obj NULL: none */
} CounterRow;

/* ``row`` opened on ``array`` (an ``array.array('q')``, or any writable contiguous buffer
 * of int64 'q' items) that has an item ``top`` (the highest index its user adds to): 0;
 * -1 with TypeError set naming ``what`` (nothing held). */
static int counter_row_open(CounterRow *row, PyObject *array, Py_ssize_t top, const char *what) {
    Py_buffer view;
    int opened = PyObject_GetBuffer(array, &view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS);
    if (opened == 0 && view.itemsize == (Py_ssize_t)sizeof(int64_t) && view.format != NULL &&
            strcmp(view.format, "q") == 0 && top >= 0 && top < view.len / view.itemsize) {
        row->view = view;
        return 0;
    }
    if (opened == 0)
        PyBuffer_Release(&view);
    PyErr_Clear();  /* (the buffer protocol's own message names no statistics row) */
    PyErr_Format(PyExc_TypeError, "%s: the statistics row must be a writable array('q') with a "
                 "count at index %zd (Stats.counter_row), not %.100s", what, top, Py_TYPE(array)->tp_name);
    return -1;
}

static inline void counter_row_add(CounterRow *row, Py_ssize_t index, int64_t amount) {
    ((int64_t *)row->view.buf)[index] += amount;
}

static void counter_row_close(CounterRow *row) {
    if (row->view.obj != NULL)
        PyBuffer_Release(&row->view);
    row->view.obj = NULL;
}

#define COUNTER_ROW_VISIT(row) Py_VISIT((row).view.obj)

#endif
