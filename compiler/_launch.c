/* pyacc.compiler._launch: a prepared GPU launch made by one call of the driver's
 * ``cuLaunchKernel``, from C.
 *
 * Owns the type ``LaunchRecord``: a kernel's launch as the CUDA driver takes it — the
 * driver's ``cuLaunchKernel`` (its address, from ``cuGetProcAddress``), the kernel's
 * handle, grid, block, dynamic shared memory, the stream, and the kernel's parameter words
 * packed as ``cuda.core``'s ``ParamHolder`` packs them. ``compiler/cuda_plans.py`` makes
 * one per prepared launch when the driver's function is known, and its ``launch`` is then
 * what a prepared launch costs: the words of the changed scalars packed, one driver call.
 * Through ``cuda.core.launch`` the same launch packed every word again at each call and
 * built the driver's launch configuration (issue 28: 13.35 µs launch and wait on the
 * H100 host, against 6.3–6.5 µs from C, ``../shared/reference/gpu-anchors.md`` A3).
 *
 * How a word is packed (``ParamHolder``'s rules, checked byte for byte against it by
 * ``tests/cuda/test_launch_record.py``): a ``bool`` as one byte; another ``int`` as an
 * ``intptr_t`` (an int past its range is refused: ``OverflowError``); a ``float`` (and a
 * NumPy ``float64``, a subclass) as a ``double``; anything else through the buffer
 * protocol, as its bytes (ctypes scalars, NumPy scalars), at most 8 of them. Each word has
 * a slot of 8 bytes, aligned to 8; the driver reads as many bytes of it as the kernel's
 * parameter has.
 *
 * Invariants: a record holds its ``owner`` (the kernel's ``cuda.core`` object, or the
 * loaded binary: what keeps its handle loaded) for as long as it can launch; it never
 * changes after it is made (``launch``'s spans apply to a copy
 * made on the C stack, so threads may launch one record at once with scalars of their own);
 * the GIL is held for the whole of a launch (the driver's call only enqueues); the kernel's
 * handle may be a ``CUkernel`` (``cuda.core``'s ``Kernel.handle``), which the driver takes
 * as a ``CUfunction`` and runs in the context of the stream given (CUDA driver API,
 * ``cuLaunchKernel``). A launch the driver refuses raises ``LaunchFailed`` with its
 * ``CUresult`` as ``code``; nothing is enqueued then.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../pyacc/_profiled.h"  /* profiled(): calls a relaunch leaves to the launcher */

/* the driver's cuLaunchKernel (cuda.h): CUresult f(CUfunction, gridDimX, gridDimY,
 * gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, CUstream, kernelParams,
 * extra) */
typedef int (*launch_kernel_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, unsigned, void *, void **, void **);

/* words a launch packs on the C stack; a kernel with more takes the heap */
#define STACK_WORDS 64

static PyObject *LaunchFailed;

typedef struct {
    PyObject_HEAD
    PyObject *owner;     /* what keeps the kernel's handle loaded (its Kernel, its binary) */
    launch_kernel_fn launch_kernel;
    void *handle;
    void *stream;
    unsigned grid[3], block[3], shared;
    Py_ssize_t count;    /* words */
    uint64_t *values;    /* one 8-byte slot per word */
} LaunchRecord;

/* One word into its slot (module docstring); -1 with an exception set. */
static int
pack_word(PyObject *word, uint64_t *slot, Py_ssize_t index)
{
    *slot = 0;
    if (PyBool_Check(word)) {
        *(unsigned char *)slot = (unsigned char)(word == Py_True);
        return 0;
    }
    if (PyLong_Check(word)) {
        long long value = PyLong_AsLongLong(word);
        if (value == -1 && PyErr_Occurred())
            return -1;
        int64_t packed = (int64_t)value;
        memcpy(slot, &packed, sizeof packed);
        return 0;
    }
    if (PyFloat_Check(word)) {
        double value = PyFloat_AS_DOUBLE(word);
        memcpy(slot, &value, sizeof value);
        return 0;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(word, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "kernel parameter word %zd: a %.100s cannot be passed "
                     "to the driver (an int, float, bool, ctypes or NumPy scalar can)",
                     index, Py_TYPE(word)->tp_name);
        return -1;
    }
    int fits = view.len > 0 && view.len <= (Py_ssize_t)sizeof *slot;
    if (fits)
        memcpy(slot, view.buf, (size_t)view.len);
    Py_ssize_t length = view.len;
    PyBuffer_Release(&view);
    if (!fits) {
        PyErr_Format(PyExc_ValueError, "kernel parameter word %zd: a %.100s of %zd bytes "
                     "(a word has 1 to 8)", index, Py_TYPE(word)->tp_name, length);
        return -1;
    }
    return 0;
}

/* Words of the sequence ``words`` into ``slots[first:]``; -1 past ``count`` or on a word
 * that cannot be packed. */
static int
pack_words(PyObject *words, uint64_t *slots, Py_ssize_t first, Py_ssize_t count)
{
    PyObject *fast = PySequence_Fast(words, "the words must be a sequence");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int status = 0;
    if (first < 0 || n > count - first) {
        PyErr_Format(PyExc_IndexError, "words %zd to %zd of a launch of %zd words",
                     first, first + n, count);
        status = -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; status == 0 && i < n; i++)
        status = pack_word(items[i], &slots[first + i], first + i);
    Py_DECREF(fast);
    return status;
}

static int
dimensions(PyObject *value, unsigned out[3], const char *what)
{
    if (!PyArg_ParseTuple(value, "III", &out[0], &out[1], &out[2])) {
        PyErr_Format(PyExc_ValueError, "a launch's %s is three unsigned ints", what);
        return -1;
    }
    return 0;
}

static PyObject *
record_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"driver", "handle", "grid", "block", "shared", "stream", "words",
                            "owner", NULL};
    unsigned long long driver, handle, stream;
    PyObject *grid, *block, *words, *owner = Py_None;
    unsigned shared;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KKO!O!IKO|O:LaunchRecord", names, &driver,
                                     &handle, &PyTuple_Type, &grid, &PyTuple_Type, &block,
                                     &shared, &stream, &words, &owner))
        return NULL;
    if (driver == 0) {
        PyErr_SetString(PyExc_ValueError, "no driver function (address 0)");
        return NULL;
    }
    Py_ssize_t count = PySequence_Size(words);
    if (count < 0)
        return NULL;
    LaunchRecord *self = (LaunchRecord *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    Py_INCREF(owner);
    self->owner = owner;
    self->launch_kernel = (launch_kernel_fn)(uintptr_t)driver;
    self->handle = (void *)(uintptr_t)handle;
    self->stream = (void *)(uintptr_t)stream;
    self->shared = shared;
    self->count = count;
    self->values = PyMem_Calloc((size_t)(count ? count : 1), sizeof(uint64_t));
    if (self->values == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    if (dimensions(grid, self->grid, "grid") < 0 || dimensions(block, self->block, "block") < 0
            || pack_words(words, self->values, 0, count) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void
record_dealloc(LaunchRecord *self)
{
    PyMem_Free(self->values);
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* One cuLaunchKernel of ``self`` with ``slots`` as its words: the driver's CUresult (0:
 * launched), or -1 with MemoryError set. */
static int
call_driver(LaunchRecord *self, uint64_t *slots)
{
    void *stack[STACK_WORDS];
    void **params = self->count <= STACK_WORDS ? stack
                                               : PyMem_Malloc(sizeof(void *) * self->count);
    if (params == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < self->count; i++)
        params[i] = &slots[i];
    int code = self->launch_kernel(self->handle, self->grid[0], self->grid[1], self->grid[2],
                                   self->block[0], self->block[1], self->block[2],
                                   self->shared, self->stream, params, NULL);
    if (params != stack)
        PyMem_Free(params);
    return code;
}

/* The launch, with ``slots`` as its words; -1 with LaunchFailed set when refused. */
static int
launch_with(LaunchRecord *self, uint64_t *slots)
{
    int code = call_driver(self, slots);
    if (code <= 0)
        return code;
    PyObject *failed = PyObject_CallFunction(LaunchFailed, "si", "cuLaunchKernel failed", code);
    if (failed != NULL) {
        PyObject *number = PyLong_FromLong(code);
        if (number == NULL || PyObject_SetAttrString(failed, "code", number) < 0) {
            Py_XDECREF(number);
            Py_DECREF(failed);
            return -1;
        }
        Py_DECREF(number);
        PyErr_SetObject(LaunchFailed, failed);
        Py_DECREF(failed);
    }
    return -1;
}

/* The words of ``span`` (a tuple ``(first, words)``) into ``slots[first:]`` of ``count``;
 * 0, or -1 with an error set. */
static int
pack_span(PyObject *span, uint64_t *slots, Py_ssize_t count)
{
    Py_ssize_t first;
    PyObject *words;
    if (!PyTuple_Check(span)) {
        PyErr_SetString(PyExc_TypeError, "a span is a tuple (first, words)");
        return -1;
    }
    if (!PyArg_ParseTuple(span, "nO:a span (first, words)", &first, &words))
        return -1;
    return pack_words(words, slots, first, count);
}

/* launch(*spans): one launch; each span ``(first, words)`` replaces the record's words
 * from ``first`` on, for this launch only (a scalar's words). */
static PyObject *
record_launch(LaunchRecord *self, PyObject *const *spans, Py_ssize_t nspans)
{
    if (nspans == 0) {
        if (launch_with(self, self->values) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    uint64_t stack[STACK_WORDS];
    uint64_t *slots = self->count <= STACK_WORDS ? stack
                                                 : PyMem_Malloc(sizeof(uint64_t) * self->count);
    if (slots == NULL)
        return PyErr_NoMemory();
    memcpy(slots, self->values, sizeof(uint64_t) * (size_t)self->count);
    int status = 0;
    for (Py_ssize_t i = 0; status == 0 && i < nspans; i++)
        status = pack_span(spans[i], slots, self->count);
    if (status == 0)
        status = launch_with(self, slots);
    if (slots != stack)
        PyMem_Free(slots);
    if (status < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* words(): the packed words, 8 bytes a word (tests compare them with ParamHolder's). */
static PyObject *
record_words(LaunchRecord *self, PyObject *unused)
{
    return PyBytes_FromStringAndSize((const char *)self->values,
                                     (Py_ssize_t)(sizeof(uint64_t) * (size_t)self->count));
}

static PyMethodDef record_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))record_launch, METH_FASTCALL,
     "launch(*spans): one cuLaunchKernel; each span (first, words) replaces words from "
     "first on for this launch only. Raises LaunchFailed (its .code the CUresult)."},
    {"words", (PyCFunction)record_words, METH_NOARGS,
     "words(): the packed words, an 8-byte slot each"},
    {NULL, NULL, 0, NULL},
};

static PyObject *
record_count(LaunchRecord *self, void *unused)
{
    return PyLong_FromSsize_t(self->count);
}

static PyGetSetDef record_getset[] = {
    {"count", (getter)record_count, NULL, "the number of words", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LaunchRecordType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyacc.compiler._launch.LaunchRecord",
    .tp_basicsize = sizeof(LaunchRecord),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "LaunchRecord(driver, handle, grid, block, shared, stream, words, owner=None): "
              "a kernel's launch as cuLaunchKernel (at address driver) takes it, owner kept "
              "alive with it (what keeps the handle loaded); see the module's source for "
              "the packing of words.",
    .tp_new = record_new,
    .tp_dealloc = (destructor)record_dealloc,
    .tp_methods = record_methods,
    .tp_getset = record_getset,
};

#include "_relaunch.c.h"

/* set_relaunching(flag) -> previous: whether Relaunches make calls again (else every call goes
 * to the launcher, unrecorded: benchmarks measure the path a relaunch replaces). */
static PyObject *
set_relaunching(PyObject *module, PyObject *flag)
{
    int relaunching = PyObject_IsTrue(flag);
    if (relaunching < 0)
        return NULL;
    PyObject *previous = PyBool_FromLong(g_relaunching);
    g_relaunching = relaunching;
    return previous;
}

static PyMethodDef launch_functions[] = {
    {"set_relaunching", set_relaunching, METH_O,
     "set_relaunching(flag) -> previous: whether Relaunches make calls again (benchmarks)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef launch_module = {
    PyModuleDef_HEAD_INIT, "pyacc.compiler._launch",
    "Prepared GPU launches made by one call of the driver's cuLaunchKernel, and synchronous "
    "calls made again from C (compiler/_launch.c, compiler/_relaunch.c.h).",
    -1, launch_functions, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__launch(void)
{
    if (PyType_Ready(&LaunchRecordType) < 0 || PyType_Ready(&RelaunchType) < 0 ||
            intern_names() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&launch_module);
    if (module == NULL)
        return NULL;
    LaunchFailed = PyErr_NewExceptionWithDoc(
        "pyacc.compiler._launch.LaunchFailed",
        "The driver refused a launch; .code is its CUresult.", PyExc_RuntimeError, NULL);
    if (LaunchFailed == NULL || PyModule_AddObjectRef(module, "LaunchFailed", LaunchFailed) < 0
            || PyModule_AddObjectRef(module, "LaunchRecord", (PyObject *)&LaunchRecordType) < 0
            || PyModule_AddObjectRef(module, "Relaunch", (PyObject *)&RelaunchType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
