"""The C spellings of the OpenACC runtime API (OpenACC 3.3 ch. 3), for ported code.

``from pyacc.openacc import *`` gives ``acc_copyin``, ``acc_copyin_async(a, q)``,
``acc_copyout_finalize`` and the rest. The plain names are the very same objects as
``pyacc.copyin`` etc.; the ``_async`` and ``_finalize`` forms are thin functions that
pass ``async_=`` / ``finalize=``. Device types are strings (``acc_device_host == "host"``).
The OpenACC 2.0 present-or names (``acc_pcopyin``, ``acc_present_or_create`` ...) are
aliases of ``acc_copyin`` / ``acc_create``, as every copyin is present-or since 2.5.
"""

from __future__ import annotations

from pyacc.compiler.markers import on_device

from . import _routines as _r
from ._clauses import async_noval as acc_async_noval
from ._clauses import async_sync as acc_async_sync

acc_device_none = "none"
acc_device_default = "default"
acc_device_host = "host"
acc_device_multicore = "host"
acc_device_not_host = "not_host"
acc_device_nvidia = "cuda"
acc_device_cuda = "cuda"
acc_device_emulated = "emulated"
#: OpenACC 3.3 §3.2.6 ``acc_device_property_t``: the property names ``acc.get_property`` takes
acc_property_memory = "memory"
acc_property_free_memory = "free_memory"
acc_property_shared_memory_support = "shared_memory_support"
acc_property_name = "name"
acc_property_vendor = "vendor"
acc_property_driver = "driver"

acc_copyin = _r.copyin
acc_create = _r.create
acc_present_or_copyin = acc_pcopyin = _r.copyin
acc_present_or_create = acc_pcreate = _r.create
acc_copyout = _r.copyout
acc_delete = _r.delete
acc_update_device = _r.update_device
acc_update_self = _r.update_self
acc_is_present = _r.is_present
acc_deviceptr = _r.deviceptr
acc_hostptr = _r.hostptr
acc_map_data = _r.map_data
acc_unmap_data = _r.unmap_data
acc_malloc = _r.malloc
acc_free = _r.free
acc_memcpy_to_device = _r.memcpy_to_device
acc_memcpy_from_device = _r.memcpy_from_device
acc_memcpy_device = _r.memcpy_device
acc_memcpy_d2d = _r.memcpy_d2d
acc_wait = _r.wait
acc_wait_async = _r.wait_async
acc_wait_all = _r.wait_all
acc_async_test = _r.async_test
acc_async_test_all = _r.async_test_all
acc_get_num_devices = _r.get_num_devices
acc_set_device_type = _r.set_device_type
acc_get_device_type = _r.get_device_type
acc_set_device_num = _r.set_device_num
acc_get_device_num = _r.get_device_num
acc_init = _r.init
acc_shutdown = _r.shutdown
acc_get_default_async = _r.get_default_async
acc_on_device = on_device
acc_set_default_async = _r.set_default_async
acc_get_cuda_stream = _r.get_cuda_stream
#: OpenACC 2.6 attach/detach (§3.2.34-3.2.35): C passes the address of one pointer
#: member; pyacc takes the struct and attaches its array members (API.md §6.2)
acc_attach = _r.attach
acc_detach = _r.detach


def _async_form(routine, **fixed):
    def with_queue(a, async_arg):
        return routine(a, async_=async_arg, **fixed)

    return _named(with_queue, routine, "_finalize_async" if fixed else "_async",
                  f"``{routine.__name__}`` on queue ``async_arg``"
                  + (" with ``finalize=True``." if fixed else "."))


def _finalize_form(routine):
    def finalized(a, *, async_=None):
        return routine(a, finalize=True, async_=async_)

    return _named(finalized, routine, "_finalize", f"``{routine.__name__}`` with ``finalize=True``.")


def _named(form, routine, suffix: str, doc: str):
    """``form`` named as C names it (``acc_copyin_async``), with its own signature (not
    ``routine``'s, as ``functools.wraps`` would have ``help`` show)."""
    form.__name__ = form.__qualname__ = f"acc_{routine.__name__}{suffix}"
    form.__module__, form.__doc__ = __name__, doc
    return form


acc_copyin_async = _async_form(_r.copyin)
acc_create_async = _async_form(_r.create)
acc_copyout_async = _async_form(_r.copyout)
acc_delete_async = _async_form(_r.delete)
acc_copyout_finalize = _finalize_form(_r.copyout)
acc_delete_finalize = _finalize_form(_r.delete)
acc_copyout_finalize_async = _async_form(_r.copyout, finalize=True)
acc_delete_finalize_async = _async_form(_r.delete, finalize=True)
acc_update_device_async = _async_form(_r.update_device)
acc_update_self_async = _async_form(_r.update_self)
acc_attach_async = _async_form(_r.attach)
acc_detach_async = _async_form(_r.detach)
acc_detach_finalize = _finalize_form(_r.detach)
acc_detach_finalize_async = _async_form(_r.detach, finalize=True)


def acc_memcpy_to_device_async(d, a, async_arg):
    """``memcpy_to_device`` on queue ``async_arg``."""
    _r.memcpy_to_device(d, a, async_=async_arg)


def acc_memcpy_from_device_async(a, d, async_arg):
    """``memcpy_from_device`` on queue ``async_arg``."""
    _r.memcpy_from_device(a, d, async_=async_arg)


def acc_memcpy_d2d_async(dst, src, dst_device, src_device, async_arg):
    """``memcpy_d2d`` on the source device's queue ``async_arg``."""
    _r.memcpy_d2d(dst, src, dst_device, src_device, async_=async_arg)


def acc_memcpy_device_async(d_dst, d_src, async_arg):
    """``memcpy_device`` on queue ``async_arg``."""
    _r.memcpy_device(d_dst, d_src, async_=async_arg)


def acc_get_property(dev_num, dev_type, property):
    """A device property in C's argument order (OpenACC 3.3 §3.2.6); ``acc.get_property``
    takes the property first."""
    _c_order(dev_num)
    return _r.get_property(property, dev_num, dev_type)


def acc_get_property_string(dev_num, dev_type, property):
    """A string property (``name``, ``vendor``, ``driver``) in C's argument order."""
    _c_order(dev_num)
    return _r.get_property_string(property, dev_num, dev_type)


def _c_order(dev_num) -> None:
    if isinstance(dev_num, str):
        raise _r.InvalidArgumentError(
            f"acc_get_property takes C's order (dev_num, dev_type, property), got the "
            f"device number {dev_num!r}; acc.get_property takes the property first")


def acc_init_device(dev_num, dev_type):
    """``acc.init_device`` (OpenACC 3.3 §3.2.7)."""
    _r.init_device(dev_num, dev_type)


def acc_shutdown_device(dev_num, dev_type):
    """``acc.shutdown_device`` (OpenACC 3.3 §3.2.8)."""
    _r.shutdown_device(dev_num, dev_type)


def acc_wait_any(count, wait_arg):
    """The index of a queue of ``wait_arg[:count]`` that has finished (§3.2.12)."""
    if count < 0:
        raise _r.InvalidArgumentError(f"acc_wait_any: count must be 0 or more, got {count}")
    return _r.wait_any(list(wait_arg)[:count])


def acc_wait_all_async(async_arg):
    """Queue ``async_arg`` waits for every other queue (``acc_wait_all_async``)."""
    _r.wait(async_=async_arg)


__all__ = [name for name in globals() if name.startswith("acc_")]
