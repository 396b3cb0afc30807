/* Dict version tags, for memos that must notice any change of a dict (os.environ's data,
 * a device's instance dict): pyacc/_express_plan.c.h (the express lane) and
 * mapping/_lane_copies.c.h (the data lane's copies). A tag of 0 means there is none to
 * read: the caller then runs every check. */
#ifndef PYACC_DICT_TAG_H
#define PYACC_DICT_TAG_H

#include <Python.h>
#include <stdint.h>

/* A dict's version tag: changed by every change of the dict (PEP 509; CPython 3.10-3.13
 * keep it, deprecated from 3.12), 0 where there is none to read (every check then runs). */
static inline uint64_t dict_tag(PyObject *dict) {
#if PY_VERSION_HEX < 0x030E0000 && !defined(Py_LIMITED_API)
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    return ((PyDictObject *)dict)->ma_version_tag;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#else
    (void)dict;
    return 0;
#endif
}

/* The tag of an object's instance dict, or 0: from 3.13 an attribute set on the object
 * may be stored in the object's inline values without touching its dict's tag. */
static inline uint64_t instance_dict_tag(PyObject *dict) {
#if PY_VERSION_HEX < 0x030D0000
    return dict_tag(dict);
#else
    (void)dict;
    return 0;
#endif
}

#endif
