"""The OpenACC 3.3 runtime routines of one device and of any queue: ``acc_init_device``,
``acc_shutdown_device`` (§3.2.7, 3.2.8), ``acc_get_property_string`` (§3.2.6),
``acc_wait_any`` (§3.2.12), and the C argument order of ``pyacc.openacc``."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import pyacc as acc
from pyacc import openacc


_TWO_DEVICES = """
import numpy as np
import pyacc as acc
from pyacc import openacc
acc.set_device_type("emulated")
a, b = np.ones(4), np.ones(4)
acc.init_device(1, "emulated")
assert acc.get_device_num("emulated") == 1
acc.copyin(b)
acc.set_device_num(0, "emulated")
acc.copyin(a)
acc.shutdown_device(1, "emulated")
assert acc.is_present(a)
acc.set_device_num(1, "emulated")
assert not acc.is_present(b)
openacc.acc_init_device(0, "emulated")
openacc.acc_shutdown_device(0, "emulated")
assert not acc.is_present(a)
print("two devices ok")
"""


def test_init_device_makes_it_current_and_shutdown_device_ends_only_its_data():
    """Two emulated devices (their count is read at first use: a process of its own)."""
    env = dict(os.environ, PYACC_EMULATED_DEVICES="2")
    result = subprocess.run([sys.executable, "-c", _TWO_DEVICES], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "two devices ok" in result.stdout, result.stderr


@pytest.mark.parametrize("number", [-1, 99, 1.0, True])
def test_shutdown_device_of_no_such_device_is_an_invalid_argument(emulated, number):
    with pytest.raises(acc.InvalidArgumentError, match="shutdown_device: no emulated device"):
        acc.shutdown_device(number, "emulated")


def test_property_string_and_the_c_argument_order(emulated):
    name = acc.get_property_string("name")
    assert isinstance(name, str) and name == openacc.acc_get_property_string(0, "emulated", "name")
    assert openacc.acc_get_property(0, "emulated", openacc.acc_property_memory) == \
        acc.get_property("memory")
    with pytest.raises(acc.InvalidArgumentError, match="is a number"):
        acc.get_property_string("memory")
    with pytest.raises(acc.InvalidArgumentError, match="the property comes first here"):
        acc.get_property(0, "emulated", "memory")
    with pytest.raises(acc.InvalidArgumentError, match="the property comes first here"):
        acc.get_property(0, "name")
    with pytest.raises(acc.InvalidArgumentError, match="takes C's order"):
        openacc.acc_get_property("memory", 0, "emulated")


def test_wait_any_returns_the_index_of_a_finished_queue(emulated):
    x = np.ones(8)
    acc.copyin(x)
    acc.update_device(x, async_=2)  # queue 2 has work; queue 5 none
    assert acc.wait_any([acc.async_sync, 5, 2]) in (1, 2)
    assert acc.wait_any([acc.async_sync]) == -1 and acc.wait_any([]) == -1
    assert openacc.acc_wait_any(2, [acc.async_sync, 3]) == 1
    assert openacc.acc_wait_any(0, [3]) == -1
    with pytest.raises(acc.InvalidArgumentError):
        openacc.acc_wait_any(-1, [])
    with pytest.raises(acc.InvalidArgumentError, match="takes a list of queues"):
        acc.wait_any(5)
    acc.delete(x)


def test_wait_any_waits_for_the_first_queue_to_finish(emulated):
    from pyacc.testing import hold_queue
    x = np.ones(8)
    acc.copyin(x)
    with hold_queue(4):
        acc.update_device(x, async_=4)
        acc.update_self(x, async_=6)
        acc.wait(6)
        assert acc.wait_any([4, 6]) == 1  # 4 is held: only 6 can be the one
    assert acc.wait_any([4]) == 0
    acc.delete(x)
