"""pyacc under a greenlet-local threading.local (what gevent's monkey patching installs):
the ICVs are one per greenlet, all greenlets on one thread state."""
import threading

CURRENT = ["a"]  # the running "greenlet"


class GreenletLocal:
    """Attributes per CURRENT[0]; ``__init__`` runs at each greenlet's first access."""

    _spaces = {}

    def _space(self):
        key = (id(self), CURRENT[0])
        space = GreenletLocal._spaces.get(key)
        if space is None:
            space = GreenletLocal._spaces[key] = {}
            type(self).__init__(self)
        return space

    def __getattribute__(self, name):
        if name.startswith("__") or name == "_space":
            return object.__getattribute__(self, name)
        found = getattr(type(self), name, None)
        if isinstance(found, property):
            return found.__get__(self)
        space = object.__getattribute__(self, "_space")()
        if name in space:
            return space[name]
        return object.__getattribute__(self, name)

    def __setattr__(self, name, value):
        found = getattr(type(self), name, None)
        if isinstance(found, property):
            return found.__set__(self, value)
        object.__getattribute__(self, "_space")()[name] = value


threading.local = GreenletLocal

import numpy as np  # noqa: E402

import pyacc as acc  # noqa: E402


@acc.parallel_loop(present=["x"])
def add_one_present(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1.0


x = np.zeros(4)
acc.set_device_type("emulated")  # greenlet a
CURRENT[0] = "b"
acc.set_device_type("host")
for _ in range(3):
    add_one_present(x)  # greenlet b arms a plan on the host
CURRENT[0] = "a"
try:
    add_one_present(x)  # greenlet a: on the emulated device, where x is not present
except acc.NotPresentError:
    print("greenlet a: not present on its own device: ok")
else:
    raise SystemExit("greenlet a's call ran on greenlet b's host runtime")
