"""Which clauses exist, how they are spelled, and on which constructs they are valid.

Owns the clause tables of ``clauses`` (OpenACC 3.3 §2.5.1 parallel, §2.5.2 serial, §2.5.3
kernels, §2.9 loop, §2.11 combined constructs, §2.15.1 routine): the data, private, flag,
count and raw clauses, the clauses valid per construct, those that exclude each other,
and the spellings accepted for keywords and in clause strings.

Invariants: tables only (no parsing); every name here is a ``ComputeClauses`` field or a
spelling of one.
"""
from __future__ import annotations

__all__ = ["ASYNC_NOVAL", "WAIT_ALL", "DATA_CLAUSES", "PRIVATE_CLAUSES", "FLAG_CLAUSES", "INT_CLAUSES",
           "RAW_CLAUSES", "COUNT_OF", "COUNT_MODIFIER", "VALID", "KEYWORD_ALIASES",
           "STRING_ALIASES", "EXCLUSIVE", "PRESENT_OR", "OMP_MAP_TYPE", "omp_spelling"]

#: Value of ``async_`` for a bare ``async`` clause in a clause string (OpenACC
#: ``acc_async_noval``); the launcher maps it to its own constant.
ASYNC_NOVAL = "noval"
#: Value of ``wait`` for a bare ``wait`` clause (wait for every queue).
WAIT_ALL = True

DATA_CLAUSES = ("copy", "copyin", "copyout", "create", "no_create", "present", "deviceptr")
PRIVATE_CLAUSES = ("private", "firstprivate")
FLAG_CLAUSES = ("gang", "worker", "vector", "seq", "independent", "auto", "nohost")
INT_CLAUSES = ("num_gangs", "num_workers", "vector_length")
RAW_CLAUSES = ("async_", "wait", "if_")
# The count a gang/worker/vector argument sets, and the modifier it may carry
# (OpenACC 3.3 §2.9.2 ``gang(num:n)``, §2.9.3 ``worker(num:n)``,
# §2.9.4 ``vector(length:n)``).
COUNT_OF = {"gang": "num_gangs", "worker": "num_workers", "vector": "vector_length"}
COUNT_MODIFIER = {"gang": "num", "worker": "num", "vector": "length"}

# Clause sets per construct: OpenACC 3.3 §2.5.1 (parallel), §2.5.2 (serial),
# §2.5.3 (kernels), §2.9 (loop), §2.11 (combined), §2.15.1 (routine).
COMPUTE_COMMON = DATA_CLAUSES + ("default",) + RAW_CLAUSES
LOOP_ONLY = ("collapse", "tile", "reduction", "private", "gang", "worker", "vector", "seq",
              "independent", "auto")
VALID = {
    "parallel": COMPUTE_COMMON + PRIVATE_CLAUSES + ("reduction",) + INT_CLAUSES,
    "serial": COMPUTE_COMMON + PRIVATE_CLAUSES + ("reduction",),
    "kernels": COMPUTE_COMMON + INT_CLAUSES,
    "routine": ("gang", "worker", "vector", "seq", "nohost", "bind"),
    "loop": LOOP_ONLY,
}
VALID["parallel_loop"] = VALID["parallel"] + LOOP_ONLY
VALID["kernels_loop"] = VALID["kernels"] + LOOP_ONLY
for _construct in VALID:  # §2.4: on every compute, loop and routine directive
    VALID[_construct] += ("device_type",)

#: OpenACC 3.3 §2.7: the ``present_or_`` spellings of earlier versions, still aliases (the
#: data directives' too: ``pyacc._clauses.canonical_clauses``)
PRESENT_OR = {"pcopy": "copy", "present_or_copy": "copy", "pcopyin": "copyin",
               "present_or_copyin": "copyin", "pcopyout": "copyout",
               "present_or_copyout": "copyout", "pcreate": "create", "present_or_create": "create"}
# Spellings accepted for keyword names (Python keywords need the trailing underscore).
KEYWORD_ALIASES = {"async": "async_", "if": "if_", **PRESENT_OR}
# Spellings in clause strings.
STRING_ALIASES = {"async": "async_", "if": "if_", "reduction": "reduction", "dtype": "device_type",
                  **PRESENT_OR}


#: Clauses of which one at most may appear (OpenACC 3.3 §2.9: seq, independent, auto;
#: §2.15.1: a routine's one level of parallelism; §2.9.8: tile is the nest's own collapse)
EXCLUSIVE = {"loop": (("seq", "independent", "auto"), ("tile", "collapse")),
              "routine": (("gang", "worker", "vector", "seq"),)}


#: an OpenACC data clause's OpenMP map type (OpenMP 5.2 §5.8.3: ``map(<type>: x)``); the
#: one table by which messages and ``acc.explain`` speak OpenMP to ``pyacc.omp`` users
OMP_MAP_TYPE = {"copy": "tofrom", "copyin": "to", "copyout": "from", "create": "alloc",
                "present": "present, alloc"}


def omp_spelling(kind: str, item: str = "...") -> str:
    """The OpenMP spelling of OpenACC data clause ``kind`` naming ``item``."""
    if kind == "deviceptr":  # OpenMP 5.2 §5.4.7
        return f"is_device_ptr({item})"
    if kind in OMP_MAP_TYPE:
        return f"map({OMP_MAP_TYPE[kind]}: {item})"
    return f"{kind}({item})"
