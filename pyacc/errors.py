"""The public home of pyacc's exceptions (API.md §7).

::

    AccError (RuntimeError)                  .code: OpenACC acc_error_t name (§5.2.2)
    ├── NotPresentError (LookupError)        not_present
    ├── PartlyPresentError                   partly_present
    ├── PresentError                         present
    ├── OutOfMemoryError (MemoryError)       out_of_memory
    ├── InvalidArgumentError (ValueError)    invalid_argument
    │   └── ClauseError (TypeError)          an unknown or malformed clause
    ├── InvalidAsyncError (ValueError)       invalid_async
    ├── InvalidDataSectionError (ValueError) invalid_data_section
    ├── DeviceUnavailableError               device_unavailable
    ├── DeviceTypeUnavailableError           device_type_unavailable
    ├── ExecutionError                       execution
    │   ├── MemoryCheckError                 execution (PYACC_CHECK=memory: out of bounds, use after free)
    │   └── RaceError                        execution (PYACC_CHECK=race:error: unordered work on shared data)
    ├── StaleDataError                       stale_data (PYACC_CHECK=stale:error)
    └── ConsistencyError (AssertionError)    consistency (PYACC_CHECK: runtime bookkeeping wrong)
    StaleDataWarning (UserWarning)           PYACC_CHECK=stale: missing update device, lost host update
    RaceWarning (UserWarning)                PYACC_CHECK=race: two operations unordered on shared data
    CompileError (Exception)                 a kernel that cannot be compiled (not an AccError)

The runtime classes are defined in ``mapping.errors``; ``CompileError`` in
``compiler.errors``. Each carries its facts as attributes (``name``, ``host_range`` ...).
"""

from pyacc.compiler.errors import CompileError
from pyacc.mapping.errors import (
    AccError,
    ClauseError,
    ConsistencyError,
    DeviceTypeUnavailableError,
    DeviceUnavailableError,
    ExecutionError,
    InvalidArgumentError,
    InvalidAsyncError,
    InvalidDataSectionError,
    MemoryCheckError,
    NotPresentError,
    OutOfMemoryError,
    PartlyPresentError,
    PresentError,
    RaceError,
    RaceWarning,
    StaleDataError,
    StaleDataWarning,
)

__all__ = [
    "AccError",
    "CompileError",
    "ClauseError",
    "ConsistencyError",
    "DeviceTypeUnavailableError",
    "DeviceUnavailableError",
    "ExecutionError",
    "InvalidArgumentError",
    "InvalidAsyncError",
    "InvalidDataSectionError",
    "MemoryCheckError",
    "NotPresentError",
    "OutOfMemoryError",
    "PartlyPresentError",
    "PresentError",
    "RaceError",
    "RaceWarning",
    "StaleDataError",
    "StaleDataWarning",
]
