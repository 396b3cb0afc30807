/* mapping/_range_search.h: the bytes an array spans, and the range of the present table's
 * ``bounds`` that holds them — the one search of ``mapping/_cprobe.c`` (``_search.c.h``:
 * its ``extent``, ``contained_index`` and the data lane's lookups) and of the express
 * lane (``pyacc/_plan_follow.c.h``: whether a plan's arrays are all still mapped before it
 * asks Python to follow them).
 *
 * ``bounds`` is ``mapping/_ordered.py``'s: a C-contiguous (2, capacity) int64 array, row
 * 0 the sorted begins, row 1 the ends, the spare slots PAD (int64 max) in both rows, so a
 * search over the whole capacity needs no count. Pure functions of their arguments; the
 * caller holds the GIL (and, for a consistent answer, the table's lock or its sequence
 * lock). Needs ``ArrayFields`` (``pyacc/_numpy_abi.h``).
 */
#ifndef PYACC_RANGE_SEARCH_H
#define PYACC_RANGE_SEARCH_H

#include <stdint.h>

/* ``[*low, *high)``: the bytes of the array ``f`` with items of ``itemsize`` bytes;
 * ``*low == *high`` (its data address) when it has no elements. */
static inline void array_span(const ArrayFields *f, Py_ssize_t itemsize, int64_t *low, int64_t *high) {
    *low = *high = (int64_t)(intptr_t)f->data;
    for (int axis = 0; axis < f->nd; axis++)
        if (f->dimensions[axis] == 0)
            return;
    *high += itemsize;
    for (int axis = 0; axis < f->nd; axis++) {
        int64_t step = (int64_t)(f->dimensions[axis] - 1) * (int64_t)f->strides[axis];
        if (step < 0)
            *low += step;
        else
            *high += step;
    }
}

/* Whether ``b`` has the layout of ``_ordered``'s ``bounds`` (its dtype is the caller's to
 * check: a C-contiguous (2, n) array of 8-byte items). */
static inline int bounds_layout(const ArrayFields *b) {
    return b->nd == 2 && b->dimensions[0] == 2 && (b->flags & NPY_C_CONTIGUOUS) &&
           b->strides[1] == (Py_ssize_t)sizeof(int64_t);
}

/* The index of the range among the first ``limit`` of ``bounds`` (``b``, of
 * ``bounds_layout``) that wholly holds ``[low, high)``, ``low < high``; -1 when none
 * overlaps it; -2 when one overlaps it without holding it. */
static inline Py_ssize_t bounds_search(const ArrayFields *b, Py_ssize_t limit, int64_t low, int64_t high) {
    Py_ssize_t capacity = b->dimensions[1];
    const int64_t *begins = (const int64_t *)b->data;
    const int64_t *ends = begins + capacity;
    /* np.searchsorted(ends, low, side="right"): the first range that ends after low */
    Py_ssize_t first = 0, stop = limit;
    while (first < stop) {
        Py_ssize_t middle = first + (stop - first) / 2;
        if (ends[middle] <= low)
            first = middle + 1;
        else
            stop = middle;
    }
    if (first < limit && begins[first] < high) {
        if (begins[first] <= low && high <= ends[first])
            return first;
        return -2;  /* overlaps a mapping without lying inside it */
    }
    return -1;
}

#endif
