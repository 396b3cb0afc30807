"""The ``mpiexec`` of the MPI that mpi4py is bound to (``tests/test_mpi.py`` and
``.ci/gpu-check`` launch through it).

mpi4py's MPI is the first line of ``MPI.Get_library_version()``, asked in a subprocess
without initialising MPI. Of the ``mpiexec`` beside this interpreter (where the MPICH wheel
of the ``mpi`` extra puts it) and the ``mpiexec``/``mpirun`` on PATH, the first whose
``--version`` names the same implementation is used, one of the library's own release
first. Open MPI's gets ``--oversubscribe`` (more ranks than cores) and, as root,
``OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``.

``python tests/mpi_launcher.py N`` prints the command that starts N ranks (environment
assignments first, through ``env``), or the reason there is none on stderr (exit 1).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

TIMEOUT = 180  # seconds for asking mpi4py its library (a cold start on a loaded machine)

# the launcher sizes pyacc.mpi reads (and Slurm's counts): never passed on to a child
LAUNCH_SIZES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE",
                "SLURM_STEP_NUM_TASKS", "SLURM_TASK_PID", "SLURM_NTASKS", "SLURM_NPROCS")


def _without_launch_sizes() -> dict:
    return {key: value for key, value in os.environ.items() if key not in LAUNCH_SIZES}


# (implementation, the words naming it in MPI.Get_library_version() or `mpiexec --version`),
# Intel MPI first (it is MPICH-derived), case-sensitive
_IMPLEMENTATIONS = (
    ("Intel MPI", ("Intel(R) MPI",)),
    ("Open MPI", ("Open MPI", "OpenRTE", "PRRTE", "prterun")),
    ("MPICH", ("MPICH", "HYDRA", "MVAPICH")),
)
_LAUNCHER_NAMES = ("mpiexec", "mpirun", "mpiexec.hydra", "mpiexec.mpich", "mpiexec.openmpi",
                   "mpirun.openmpi")


def _implementation(text: str) -> str | None:
    for name, words in _IMPLEMENTATIONS:
        if any(word in text for word in words):
            return name
    return None


def _release(text: str) -> str | None:
    """The first version number in a library's or a launcher's version text."""
    found = re.search(r"\d+\.\d+(?:\.\d+)?", text)
    return found.group(0) if found else None


@functools.cache
def _mpi4py_library_version() -> str:
    """mpi4py's ``MPI.Get_library_version()``, asked in a subprocess without initialising
    MPI; empty when mpi4py is not installed or cannot load its MPI."""
    if importlib.util.find_spec("mpi4py") is None:
        return ""
    code = ("import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
            "print(MPI.Get_library_version())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT, env=_without_launch_sizes())
    return done.stdout.strip() if done.returncode == 0 else ""


def _mpi4py_library() -> str | None:
    """The first line of mpi4py's library version, spaces collapsed (as pyacc.mpi names it)."""
    lines = _mpi4py_library_version().replace("\x00", "").splitlines()
    return " ".join(lines[0].split()) if lines else None


def _version(path: str) -> str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout + done.stderr


def _candidates() -> list[str]:
    """The launchers to try, in order: ``mpiexec`` beside this interpreter, then PATH's."""
    found = [str(Path(sys.executable).parent / "mpiexec")]
    found += [shutil.which(name) for name in _LAUNCHER_NAMES]
    unique, seen = [], set()
    for path in found:
        if path and os.path.exists(path) and os.path.realpath(path) not in seen:
            seen.add(os.path.realpath(path))
            unique.append(path)
    return unique


@dataclass(frozen=True)
class Launcher:
    """An ``mpiexec`` of mpi4py's MPI and what it needs to run tests here."""

    path: str
    implementation: str
    env: dict = field(default_factory=dict)

    def command(self, ranks: int) -> list[str]:
        extra = ["--oversubscribe"] if self.implementation == "Open MPI" else []
        return [self.path, *extra, "-n", str(ranks)]


@functools.cache
def _launcher() -> Launcher | str:
    """The launcher of mpi4py's MPI, or why there is none (a skip reason)."""
    library = _mpi4py_library()
    if library is None:
        return 'mpi4py is not installed or cannot load its MPI (pip install -e ".[mpi]")'
    wanted = _implementation(library)
    seen, matches = [], []
    for path in _candidates():
        text = _version(path)
        found = _implementation(text)
        seen.append(f"{path} ({found or 'unknown MPI'})")
        if wanted is not None and found == wanted:
            matches.append((_release(text) != _release(library), path))  # same release first
    if matches:
        path = min(matches, key=lambda match: match[0])[1]
        root = wanted == "Open MPI" and hasattr(os, "geteuid") and os.geteuid() == 0
        env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if root else {}
        return Launcher(path, wanted, env)
    return (f"no mpiexec of mpi4py's MPI ({library!r}, {wanted or 'unknown implementation'}) "
            f"beside the interpreter or on PATH; found: {', '.join(seen) or 'none'} "
            '(pip install -e ".[mpi]" brings MPICH\'s, or rebuild mpi4py against the system MPI: '
            "pip install --no-binary mpi4py mpi4py)")




def main(argv) -> int:
    found = _launcher()
    if isinstance(found, str):
        print(found, file=sys.stderr)
        return 1
    ranks = int(argv[1]) if len(argv) > 1 else 2
    assignments = [f"{key}={value}" for key, value in found.env.items()]
    print(" ".join((["env", *assignments] if assignments else []) + found.command(ranks)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
