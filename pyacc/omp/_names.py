"""Construct names for the event stream: OpenMP names that OpenACC observers still read.

pyacc's observers (PYACC_NOTIFY, PYACC_TRACE, PYACC_TIME, the profiling interface) and
its compiler tell constructs apart by their OpenACC construct string (``"data"`` is a data
region, ``"parallel_loop"`` a compute region compiled as a parallel loop ...). An OpenMP
construct is carried as a :class:`ConstructName`: a ``str`` equal to (and hashed as) the
OpenACC construct it is implemented by — so every comparison, dictionary lookup and the
compiler's kernel cache key (its ``repr``) are unchanged, and the kernels are the very
same code — that also equals its OpenMP name, and prints as it (``str``, f-strings):
``construct=target_teams_distribute_parallel_for`` in a notify line,
``info.construct == "target_data"`` in a profiling callback.
"""

from __future__ import annotations

__all__ = ["ConstructName"]


class ConstructName(str):
    """``ConstructName("parallel_loop", "target_teams_distribute_parallel_for")``."""

    omp: str

    def __new__(cls, acc_name: str, omp_name: str):
        self = super().__new__(cls, acc_name)
        self.omp = omp_name
        return self

    @property
    def acc(self) -> str:
        """The OpenACC construct it is implemented by."""
        return str.__str__(self)

    def __str__(self) -> str:
        return self.omp

    def __format__(self, spec: str) -> str:
        return format(self.omp, spec)

    def __eq__(self, other) -> bool:
        if not isinstance(other, str):
            return NotImplemented
        return str.__eq__(self, other) or str.__eq__(self.omp, str(other))

    def __ne__(self, other) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = str.__hash__

    def __reduce__(self):
        return (ConstructName, (self.acc, self.omp))
