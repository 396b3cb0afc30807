"""The devices: the ``Device`` protocol, the three device types and their helpers.

Installed as ``pyacc.mapping.devices`` (the repository's ``mapping/devices/``): the room
of the devices inside the mapping runtime. The runtime side (the present table and its
verbs, in ``mapping/``) asks a device for memory, transfers, queues and launches; the
device asks its helpers; the ``cuda`` helpers ask the backend. Modules:

- ``base``           the device protocol (``Device``), ``emit``, ``size_setting``, ``Timed``
- ``host``           ``HostDevice``: the CPU, sharing memory with the host program
- ``emulated``       ``EmulatedDevice``: separate memory in host RAM, a real allocator
- ``memcheck``       the emulated device's guard zones and quarantine (``PYACC_CHECK=memory``)
- ``faults``         the emulated device's fault injection (``FaultPlan``)
- ``cuda``           ``CudaDevice``: an NVIDIA GPU through a backend
- ``cuda_layout``    strides, element order, extents and transfer packing (pure arithmetic)
- ``cuda_pins``      ``Pins``: host arrays page-locked while they are mapped (``PYACC_PIN``)
- ``cuda_queues``    ``CudaQueue``/``CudaSyncQueue``: queues on CUDA streams
- ``cuda_transfers`` the operations a queue runs for uploads, downloads and device copies
- ``cuda_backend``   ``CupyBackend`` (the only code that calls CuPy) and ``BlockIndex``
- ``cuda_fake``      ``FakeCudaBackend``: the backend interface over host memory (tests)
"""
