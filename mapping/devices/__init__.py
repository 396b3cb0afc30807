"""The devices: the ``Device`` protocol, the three device types and their helpers.

Installed as ``pyacc.mapping.devices`` (the repository's ``mapping/devices/``): the room
of the devices inside the mapping runtime. The runtime side (the present table and its
verbs, in ``mapping/``) asks a device for memory, transfers, queues and launches; the
device asks its helpers; the ``cuda`` helpers ask the backend. Modules:

- ``base``           the device protocol (``Device``) and ``submit_transfer``; re-exports
  ``common``'s names (the one module of the room the runtime side imports)
- ``common``         ``emit``, ``Timed``, ``size_setting``: shared below every device
- ``host``           ``HostDevice``: the CPU, sharing memory with the host program
- ``emulated``       ``EmulatedDevice``: separate memory in host RAM, a real allocator
- ``memcheck``       the emulated device's guard zones and quarantine (``PYACC_CHECK=memory``;
  ``GuardedMemory``, a mixin of ``EmulatedDevice``)
- ``faults``         the emulated device's fault injection (``FaultPlan``)
- ``cuda``           ``CudaDevice``: an NVIDIA GPU through a backend
- ``cuda_memory``    ``CudaMemory``: the GPU's blocks, ``allocate_block``, ``interface_of``,
  ``pins``; handed to the transfers by the device
- ``cuda_transfers`` the operations a queue runs for uploads, downloads and device copies
- ``cuda_staging``   chunked, double-buffered staging of the transfers (``CHUNK``-byte pieces)
- ``cuda_queues``    ``CudaQueue``/``CudaSyncQueue``: queues on CUDA streams
- ``cuda_pins``      ``Pins``: host arrays page-locked while they are mapped (``PYACC_PIN``)
- ``cuda_layout``    strides, element order, extents and transfer packing (pure arithmetic)
- ``cuda_backend``   ``CupyBackend`` (the only code that calls CuPy) and ``BlockIndex``
- ``cuda_fake``      ``FakeCudaBackend``: the backend interface over host memory (tests)

Calls and imports go one way, down these levels (``tests/test_layering.py`` checks the
imports, ``tests/mapping/test_call_direction.py`` the calls of a cuda copyin, update and
delete):

1. the runtime side: ``mapping``'s table side (``runtime``, ``commit``, ``residency``,
   ``compute``, ``shared``...) imports of the room only ``devices.base`` (the protocol,
   ``emit``); ``mapping/__init__`` re-exports the device types, and ``pyacc`` creates
   them (``pyacc/_registry.py``);
2. the devices: ``base``, ``host``, ``emulated`` (with its mixin ``memcheck``), ``cuda``;
3. their helpers: ``cuda_memory``, ``cuda_transfers``, ``cuda_staging``, ``cuda_queues``,
   ``cuda_pins``, ``faults``: they import no device module and never call a device; what they need (the
   memory, a queue, the backend, whether a queue is the synchronous one) is handed down;
4. the backends: ``cuda_backend``, ``cuda_fake``: they import no device or helper module;
5. the leaves: ``common``, ``cuda_layout``: they import nothing of the room.

The room imports from ``mapping`` only what every level shares: ``errors``, ``events``,
``_probe``, ``queue_protocol``, ``queues``, ``inline`` (never ``table``, ``entry``,
``plan``, ``commit``, ``runtime``, ``residency``...). A call up a level is only the run of
something handed down: an operation or host function a queue runs (its ``__call__``, its
``skipped``), a closure, a deferred release.
"""
