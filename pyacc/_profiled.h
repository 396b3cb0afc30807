/* Whether this thread has a profiler set by ``sys.setprofile`` (cProfile before CPython
 * 3.12) — shared by the C paths that skip Python frames such a profiler would see: the
 * express lane's prepared calls (``pyacc/_prepared_call.c.h``: Numba's dispatcher reports
 * a kernel's call to it) and the cuda device's relaunches (``compiler/_relaunch.c.h``:
 * the launcher's frames). Up to CPython 3.11 such a profiler is ``c_profilefunc``; from
 * 3.12 cProfile uses ``sys.monitoring``, and the dispatcher reports to no profiler (checked
 * with Numba 0.68), so both paths stay. */
#ifndef PYACC_PROFILED_H
#define PYACC_PROFILED_H

#include <Python.h>

static int profiled(void) {
#if PY_VERSION_HEX < 0x030C0000
    return PyThreadState_Get()->c_profilefunc != NULL;  /* (CPython's thread state, 3.11) */
#else
    return 0;
#endif
}

#endif
