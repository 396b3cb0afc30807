/* The data lane's region verbs as C functions, for another extension: ``acc.data``'s C
 * base (``pyacc/_fastcall.c``, ``_data_region.c.h``) joins and parts a region's arrays
 * through them, with the arrays and entries in C arrays, where the lane's ``join`` and
 * ``part`` methods take and give tuples (two tuples made and freed per region, ~370
 * machine instructions of its ~4,300).
 *
 * ``mapping/_cprobe.c`` fills one ``LaneApi`` and publishes it as the capsule
 * ``LANE_API_CAPSULE`` (the module's ``LANE_API``); a user imports it with
 * ``PyCapsule_Import`` and calls its functions only for an object whose type is exactly
 * ``lane_type`` (any other lane: a Python stand-in, is called by its methods). The
 * verbs' rules are ``mapping/_lane_regions.c.h``'s; the GIL is held throughout.
 */
#ifndef PYACC_LANE_API_H
#define PYACC_LANE_API_H

#include <Python.h>

#define LANE_API_CAPSULE "pyacc.mapping._cprobe.LANE_API"
#define LANE_API_VERSION 1

typedef struct {
    int version;               /* LANE_API_VERSION */
    PyTypeObject *lane_type;   /* DataLane */
    /* The structured count +1 of the entry holding each of ``arrays[0:n]`` (all or
     * nothing): 1, with a new reference to each entry in ``entries[0:n]`` (None on shared
     * memory); 0 when the lane declines (nothing changed, no exception); -1 with an
     * exception set, nothing changed. */
    int (*join)(PyObject *lane, PyObject *const *arrays, Py_ssize_t n, PyObject **entries);
    /* The structured count -1 of each of ``entries[0:n]`` when no lifetime ends by it: 1;
     * 0 when the lane declines (a lifetime would end, someone subscribes: nothing
     * changed); -1 with an exception set, nothing changed. */
    int (*part)(PyObject *lane, PyObject *const *entries, Py_ssize_t n);
} LaneApi;

#endif
