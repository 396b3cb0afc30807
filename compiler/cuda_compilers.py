"""The GPU kernel compilers of the ``cuda`` target: which one compiles, and what differs.

Owns :class:`CudaCompiler` (one per supported compiler), :func:`chosen` (the one this
process uses) and the compatibility fix that lets numba-cuda ≤ 0.30 compile on NumPy ≥ 2.5.

Two compilers take the same generated source (``cuda_target``; API.md §12):

* **numba-cuda-mlir** (``name == "mlir"``), NVIDIA's maintained successor of numba-cuda:
  ``from numba_cuda_mlir import cuda``. It does not import Numba, has no simulator, and
  compiles on NumPy 2.5 (its ``np.row_stack`` overload is guarded since 0.4.1);
* **numba-cuda** (``name == "numba-cuda"``), in maintenance mode since 2026
  (NVIDIA/numba-cuda#902): ``from numba import cuda``; it owns Numba's CUDA simulator.

Only the line that imports ``cuda`` into a generated module differs (so the source hash,
and every cache keyed by it, tells the two apart), plus the exception classes of a failed
compile and the module that holds the compiler's settings.

The choice (:func:`chosen`): ``PYACC_CUDA_COMPILER=mlir|numba-cuda`` when set; else
numba-cuda-mlir when it is installed, else numba-cuda. Under Numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``) the kernels run in numba-cuda's simulator, so the choice is
numba-cuda, and ``PYACC_CUDA_COMPILER=mlir`` beside the simulator is an error. A chosen
compiler that is not installed, or cannot compile here, is reported as a reason, never
raised at the first launch.

numba-cuda ≤ 0.30 registers an overload of ``np.row_stack``, which NumPy 2.5 removed:
the first compile fails with ``AttributeError: module 'numpy' has no attribute
'row_stack'`` (NVIDIA/numba-cuda#907, will not be fixed). :func:`load` imports the
module that registers it with ``np.row_stack`` bound to ``np.vstack`` (what it was in
NumPy < 2.5) for the duration of that import only, and only when NumPy lacks it and the
numba-cuda version is ≤ 0.30: programs never see the alias.

Invariants: the choice is made once per process and never changes (a kernel compiled by
one compiler is never launched by the other); nothing here creates a CUDA context.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import threading

import numpy as np

__all__ = ["CudaCompiler", "COMPILERS", "chosen", "choice", "load", "describe",
           "ENVIRONMENT", "LOW_OCCUPANCY"]

#: the environment setting that names the compiler (API.md §12)
ENVIRONMENT = "PYACC_CUDA_COMPILER"
#: the message of both compilers' warning for grids under 128 blocks; with colorama
#: installed Numba's warnings start with a terminal colour code (``\x1b[1m``), and a
#: warnings filter matches from the message's first character
LOW_OCCUPANCY = re.compile(r"(?:\x1b\[[0-9;]*m)*Grid size \d+ will likely result in GPU under-utilization")
#: the last numba-cuda release that registers ``np.row_stack`` unguarded
_LAST_UNGUARDED = (0, 30)


@dataclasses.dataclass(frozen=True)
class CudaCompiler:
    """One GPU kernel compiler.

    Attributes:
        name: ``"mlir"`` or ``"numba-cuda"`` (the values of ``PYACC_CUDA_COMPILER``).
        distribution: the pip distribution (``numba-cuda-mlir``, ``numba-cuda``).
        package: the top-level import name that tells whether it is installed.
        cuda_module: the module generated code imports as ``cuda`` (:meth:`import_line`).
        errors_module: where the compiler's ``NumbaError`` lives.
        config_module: the compiler's settings (``CUDA_LOW_OCCUPANCY_WARNINGS`` ...).
    """

    name: str
    distribution: str
    package: str
    cuda_module: str
    errors_module: str
    config_module: str

    def import_line(self, alias: str) -> str:
        module, _, attribute = self.cuda_module.rpartition(".")
        return f"from {module} import {attribute} as {alias}"

    def installed(self) -> bool:
        try:
            return importlib.util.find_spec(self.package) is not None
        except (ImportError, ValueError):
            return False

    def version(self) -> str | None:
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None

    def label(self) -> str:
        """``numba-cuda-mlir 0.6.0``."""
        return f"{self.distribution} {self.version() or '(version unknown)'}"

    def imported(self) -> bool:
        """Whether its ``cuda`` module has been imported in this process."""
        return self.cuda_module in sys.modules

    def errors(self) -> tuple[type[BaseException], ...]:
        """The exception classes of a failed typing or lowering (Numba's own as well:
        numba-cuda's errors derive from them)."""
        from numba.core.errors import NumbaError  # here: this module never imports Numba (mlir needs none)

        own = getattr(importlib.import_module(self.errors_module), "NumbaError", NumbaError)
        return (NumbaError,) if own is NumbaError else (NumbaError, own)

    def config(self):
        return importlib.import_module(self.config_module)

    def typeof(self, value):
        """The compiler's type of an argument value (for ``compile_ptx`` signatures)."""
        if self.name == "mlir":
            from numba_cuda_mlir.numba_cuda.typing.typeof import typeof  # optional: numba-cuda-mlir
            return typeof(value)
        import numba  # here: this module never imports Numba at load (see errors)
        return numba.typeof(value)


COMPILERS = {
    "mlir": CudaCompiler("mlir", "numba-cuda-mlir", "numba_cuda_mlir", "numba_cuda_mlir.cuda",
                         "numba_cuda_mlir.numba_cuda.core.errors",
                         "numba_cuda_mlir.numba_cuda.core.config"),
    "numba-cuda": CudaCompiler("numba-cuda", "numba-cuda", "numba_cuda", "numba.cuda",
                               "numba.cuda.core.errors", "numba.cuda.core.config"),
}
#: spellings accepted for PYACC_CUDA_COMPILER (case-insensitive)
_SPELLINGS = {"mlir": "mlir", "numba-cuda-mlir": "mlir", "numba_cuda_mlir": "mlir",
              "numba-cuda": "numba-cuda", "numba_cuda": "numba-cuda", "numba": "numba-cuda"}

_lock = threading.Lock()
_choice: list = []  # [(compiler or None, reason or None, how)] once made


def simulated() -> bool:
    """Whether Numba's CUDA simulator is on (read from Numba's config once numba-cuda is
    imported, else from ``NUMBA_ENABLE_CUDASIM``)."""
    config = sys.modules.get("numba.cuda.core.config")
    if config is not None and hasattr(config, "ENABLE_CUDASIM"):
        return bool(config.ENABLE_CUDASIM)
    text = os.environ.get("NUMBA_ENABLE_CUDASIM", "").strip()
    try:
        return bool(int(text)) if text else False
    except ValueError:
        return False


def _decide(environ=os.environ):
    """``(compiler or None, reason or None, how)``: the compiler this process uses, why
    none can be used, and how it was chosen (for ``python -m pyacc info``)."""
    text = environ.get(ENVIRONMENT, "").strip()
    if text:
        name = _SPELLINGS.get(text.lower())
        if name is None:
            return None, (f"{ENVIRONMENT}={text!r} is not a CUDA kernel compiler: use "
                          "'mlir' (numba-cuda-mlir) or 'numba-cuda'"), "bad setting"
        compiler, how = COMPILERS[name], f"{ENVIRONMENT}={text}"
        if simulated() and name == "mlir":
            return None, (f"{ENVIRONMENT}={text} asks for numba-cuda-mlir, but "
                          "NUMBA_ENABLE_CUDASIM=1 runs kernels in numba-cuda's simulator, "
                          "which numba-cuda-mlir does not have: unset one of them"), how
        if not compiler.installed():
            return None, (f"{ENVIRONMENT}={text} asks for {compiler.distribution}, which is "
                          f"not installed: pip install 'pyacc[cuda]' or unset "
                          f"{ENVIRONMENT}"), how
        return compiler, None, how
    mlir, classic = COMPILERS["mlir"], COMPILERS["numba-cuda"]
    if simulated():
        if classic.installed():
            return classic, None, "NUMBA_ENABLE_CUDASIM=1: the simulator is numba-cuda's"
        return None, ("NUMBA_ENABLE_CUDASIM=1 needs numba-cuda, whose simulator runs the "
                      "kernels: pip install 'pyacc[test]'"), "simulator"
    if mlir.installed():
        return mlir, None, "the default when installed"
    if classic.installed():
        return classic, None, "numba-cuda-mlir is not installed"
    return None, ("no CUDA kernel compiler is installed (numba-cuda-mlir or numba-cuda): "
                  "pip install 'pyacc[cuda]'"), "none installed"


def choice():
    """``(compiler or None, reason or None, how)``, decided once per process."""
    if not _choice:
        with _lock:
            if not _choice:
                _choice.append(_decide())
    return _choice[0]


def chosen() -> CudaCompiler:
    """The compiler of this process's cuda kernels.

    Raises:
        RuntimeError: none can be used here (the message is the reason).
    """
    compiler, reason, _ = choice()
    if compiler is None:
        raise RuntimeError(reason)
    return compiler


def describe() -> str:
    """One line for ``python -m pyacc info`` and ``acc.explain``: the compiler in use,
    its version and how it was chosen, or why there is none."""
    compiler, reason, how = choice()
    if compiler is None:
        return f"none: {reason}"
    return f"{compiler.label()} ({how})"


# -- loading ----------------------------------------------------------------------------------
_loaded: dict[str, object] = {}


def load(compiler: CudaCompiler | None = None):
    """The ``cuda`` module of ``compiler`` (default: :func:`chosen`), imported with the
    NumPy 2.5 fix when numba-cuda needs it (module docstring).

    Raises:
        RuntimeError: the compiler cannot be imported or cannot compile with this NumPy;
            the message names the fix.
    """
    compiler = compiler or chosen()
    module = _loaded.get(compiler.name)
    if module is None:
        with _lock:
            module = _loaded.get(compiler.name)
            if module is None:
                if compiler.name == "numba-cuda" and not simulated():
                    _register_numpy_overloads(compiler)
                module = _loaded[compiler.name] = importlib.import_module(compiler.cuda_module)
    return module


def needs_row_stack_fix(version: str | None, numpy=np) -> bool:
    """Whether numba-cuda ``version`` needs ``np.row_stack``, which ``numpy`` lacks."""
    if hasattr(numpy, "row_stack") or version is None:
        return False
    return _release(version)[:2] <= _LAST_UNGUARDED


def _release(version: str) -> tuple[int, ...]:
    numbers = []
    for part in version.split(".")[:3]:
        digits = re.match(r"\d+", part)
        numbers.append(int(digits.group()) if digits else 0)
    return tuple(numbers)


def _register_numpy_overloads(compiler: CudaCompiler) -> None:
    """Import numba-cuda's NumPy overloads (``numba.cuda.np.arrayobj``), with the
    ``np.row_stack`` alias it needs on NumPy ≥ 2.5 present during that import only."""
    if "numba.cuda.np.arrayobj" in sys.modules or not needs_row_stack_fix(compiler.version()):
        return
    added = not hasattr(np, "row_stack")
    if added:
        np.row_stack = np.vstack  # what NumPy < 2.5 had: row_stack is vstack
    try:
        importlib.import_module("numba.cuda.np.arrayobj")
    except Exception as error:
        if "row_stack" not in str(error) and "numpy" not in str(error).lower():
            raise  # not the NumPy 2.5 fault: the compiler's own error, as it is
        raise RuntimeError(
            f"{compiler.label()} cannot compile with NumPy {np.__version__} "
            f"({type(error).__name__}: {error}): install numba-cuda-mlir "
            "(pip install 'pyacc[cuda]'), which replaces numba-cuda, or numpy<2.5") from error
    finally:
        if added:
            del np.row_stack
