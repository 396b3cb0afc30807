/* Slot fields read and written in place: ``SlotField``, for the data lane
 * (``mapping/_cprobe.c``), which reads a handful of attributes of the present table, its
 * ranges and an entry on every present-data call (~100 machine instructions each through
 * ``PyObject_GetAttr``, ~5 in place).
 *
 * ``slot_field_init(field, type, name)`` looks ``name`` up in ``type``'s own dict: a
 * ``__slots__`` member (a member descriptor of an object field, CPython's layout for
 * ``__slots__`` and ``dataclass(slots=True)``) is read at its offset; anything else
 * (a property, a class without slots) keeps ``offset`` 0 and is read by name. Callers read
 * a field of an object of exactly ``type`` (checked by them), so the offset holds. An
 * unset slot (NULL) raises AttributeError through ``PyObject_GetAttr``, as Python would.
 * The GIL is held throughout.
 */
#ifndef PYACC_SLOT_FIELDS_H
#define PYACC_SLOT_FIELDS_H

#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject *name;     /* interned; a borrowed reference to a module-lifetime string */
    Py_ssize_t offset;  /* of the slot in the object, 0: read and written by name */
} SlotField;

static void slot_field_init(SlotField *field, PyTypeObject *type, PyObject *name) {
    field->name = name;
    field->offset = 0;
    PyObject *descr = type->tp_dict == NULL ? NULL : PyDict_GetItemWithError(type->tp_dict, name);
    if (descr == NULL) {
        PyErr_Clear();  /* not there: read by name */
        return;
    }
    /* (a member descriptor of another class's layout, copied in, is read by name) */
    if (Py_TYPE(descr) == &PyMemberDescr_Type && PyType_IsSubtype(type, PyDescr_TYPE(descr))) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == T_OBJECT_EX && !(member->flags & READONLY) && member->offset > 0)
            field->offset = member->offset;
    }
}

/* A new reference to the field's value; NULL with an exception set. */
static inline PyObject *slot_field_get(PyObject *object, const SlotField *field) {
    if (field->offset) {
        PyObject *value = *(PyObject **)((char *)object + field->offset);
        if (value != NULL)
            return Py_NewRef(value);
    }
    return PyObject_GetAttr(object, field->name);
}

/* A field read from objects of whichever type was met last: its ``SlotField`` learnt once
 * per type (a reader of several types' objects learns again at each change of type). */
typedef struct {
    PyObject *type;   /* the type last met (a strong reference: its offsets hold), or NULL */
    SlotField field;  /* the field in it */
} TypedField;

/* ``owner.<name>`` (a new reference; NULL with an exception set) through ``typed``. */
static PyObject *typed_field_get(TypedField *typed, PyObject *owner, PyObject *name) {
    PyTypeObject *type = Py_TYPE(owner);
    if ((PyObject *)type != typed->type) {
        /* both set before the old type is released: its deallocation may run Python
           code, and another thread may read the two meanwhile */
        SlotField field;
        slot_field_init(&field, type, name);
        PyObject *old = typed->type;
        typed->type = Py_NewRef((PyObject *)type);
        typed->field = field;
        Py_XDECREF(old);
    }
    return slot_field_get(owner, &typed->field);
}

/* Set the field to ``value`` (a new reference is taken); -1 with an exception set. */
static inline int slot_field_set(PyObject *object, const SlotField *field, PyObject *value) {
    if (!field->offset)
        return PyObject_SetAttr(object, field->name, value);
    Py_XSETREF(*(PyObject **)((char *)object + field->offset), Py_NewRef(value));
    return 0;
}

#endif
