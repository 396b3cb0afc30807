"""The CPU benchmark suite: pyacc against hand-written Numba, NumPy and PyOMP, in one run.

One command measures, side by side and interleaved round by round (warm-up first, then
the median of the repeats, the same data and sizes for everyone):

- saxpy, Jacobi (2-D stencil + max reduction), dot (+ reduction) and dense matmul with
  pyacc on the ``host`` device and on the ``emulated`` device (data resident in its
  separate memory), each in its OpenACC spelling (``@acc.parallel_loop``) and its OpenMP
  spelling (``pyacc.omp``: ``@omp.target_teams_distribute_parallel_for`` with clause
  strings, the same loops; ``bench_compute.omp_*``), hand-written Numba (``njit(parallel=True)`` + ``prange``: the
  kernels of ``bench_compute.py``, imported from it), NumPy, and PyOMP;
- Jacobi time per step against the grid size for each of them, plotted to
  ``benchmarks/jacobi_scaling.png`` (needs matplotlib: ``pip install -e ".[bench]"``);
- the size sweep of a trivial compute call, 8 to 10⁷ elements against Numba serial and
  parallel, plotted to ``benchmarks/sweep.png``: ``bench_sweep.py``, in a subprocess;
- the existing micro-benchmarks: ``bench_runtime.py`` (in a subprocess: it configures the
  emulated devices at first use) and the launch-overhead, compile-time and transfer
  measures of ``bench_compute.py`` (imported).

PyOMP runs each kernel as ``parallel for`` on the host threads (``pyomp_kernels.py``), and
Jacobi also in its OpenMP *target* spelling (``target data`` + ``target teams distribute
parallel for`` on ``device(1)``, the host as an offload device with its own memory:
``pyomp-target``, in a second PyOMP process), the spelling ``pyacc.omp`` ports.

PyOMP pins an older Numba than pyacc, so it runs in its own virtual environment,
``benchmarks/.venv-pyomp``, which the suite creates on first use (``python -m venv`` +
``pip install pyomp==0.6.0``), driving ``benchmarks/pyomp_kernels.py`` there as a
subprocess that answers JSON requests (one timed run per round, interleaved with the
others). If PyOMP cannot be installed or run, its column says so and why.

The suite prints a table of times and ratios and rewrites the "CPU suite" section of
``benchmarks/RESULTS.md`` (between its BEGIN/END markers; the rest of the file is kept).

Run: ``python benchmarks/suite.py [--quick] [--no-pyomp] [--no-runtime] [--no-sweep] [--no-write]
[--json FILE] [--note TEXT]``; ``--smoke`` runs every kernel and measure once at tiny
sizes (no PyOMP, nothing written: the check ``tests/test_benchmarks_checked.py`` runs
under every checker).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numba
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import bench_compute as bc  # noqa: E402  (the pyacc, Numba and NumPy kernels)
import bench_sweep  # noqa: E402  (its table; it runs in a subprocess)
from fields import problem_arrays  # noqa: E402  (the same arrays as pyomp_kernels.Problem)
from bench_runtime import machine_description  # noqa: E402

import pyacc as acc  # noqa: E402

PYOMP_VENV = HERE / ".venv-pyomp"
PYOMP_SCRIPT = HERE / "pyomp_kernels.py"
PYOMP_REQUIREMENT = "pyomp==0.6.0"
RESULTS = HERE / "RESULTS.md"
PLOT = HERE / "jacobi_scaling.png"
BEGIN = "<!-- BEGIN CPU SUITE: written by benchmarks/suite.py, replaced on each run -->"
END = "<!-- END CPU SUITE -->"
IMPLEMENTATIONS = ["pyacc", "pyacc-emu", "pyacc-omp", "pyacc-omp-emu", "numba", "numba-ikj",
                   "numpy", "pyomp", "pyomp-target"]
LABELS = {"pyacc": "pyacc (host)", "pyacc-emu": "pyacc (emulated)",
          "pyacc-omp": "pyacc.omp (host)", "pyacc-omp-emu": "pyacc.omp (emulated)",
          "numba": "hand-written Numba",
          "numba-ikj": "hand-written Numba, loops interchanged by hand", "numpy": "NumPy",
          "pyomp": "PyOMP", "pyomp-target": "PyOMP, target device(1)"}
#: The Jacobi sweep has no hand-interchanged variant.
SCALING_IMPLEMENTATIONS = ["pyacc", "pyacc-emu", "pyacc-omp", "pyacc-omp-emu", "numba", "numpy",
                           "pyomp", "pyomp-target"]
#: the memory-bound kernels: bytes each must move per (float64) element at the least
#: (saxpy reads x and y and writes y; dot reads x and y)
MINIMAL_BYTES_PER_ELEMENT = {"saxpy": 24, "dot": 16}
TRAFFIC_IMPLEMENTATIONS = ["pyacc", "pyacc-emu", "pyacc-omp", "numba", "numpy", "pyomp"]
#: what ``bc.settle`` (the wait, before each sample, for the previous candidate's spinning
#: worker threads to go quiet) typically takes; used to estimate a round's length
SETTLE_S = 0.02


# == PyOMP in its own venv ===================================================================


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def pyomp_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_pyomp(venv: Path, requirement: str, install: bool, log=print) -> tuple[Path | None, str]:
    """The PyOMP venv's interpreter, creating the venv on first use; (None, why) if not."""
    python = pyomp_python(venv)
    probe = [str(python), "-c", "import numba.openmp, numba; print(numba.openmp.__version__)"]

    def works() -> tuple[bool, str]:
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as error:
            return False, f"{type(error).__name__}: {error}"
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return done.returncode == 0, done.stdout.strip() if done.returncode == 0 else tail[0]

    if python.exists():
        ok, detail = works()
        if ok:
            return python, f"PyOMP {detail} in {_shown(venv)}"
        if not install:
            return None, f"the PyOMP venv {venv} does not work: {detail}"
        log(f"pyomp: the venv at {venv} does not work ({detail}); recreating it")
        shutil.rmtree(venv, ignore_errors=True)
    elif not install:
        return None, f"no PyOMP venv at {venv} (run without --no-pyomp-install to create it)"

    log(f"pyomp: creating {venv} and installing {requirement} (once; about a minute)")
    steps = [("python -m venv", [sys.executable, "-m", "venv", str(venv)]),
             (f"pip install {requirement}", [str(python), "-m", "pip", "install", "-q",
                                             "--disable-pip-version-check", requirement])]
    for label, step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as error:
            shutil.rmtree(venv, ignore_errors=True)
            return None, f"`{label}` failed: {type(error).__name__}: {error}"
        if done.returncode != 0:
            lines = [line for line in (done.stderr + done.stdout).splitlines()
                     if line.strip() and not line.startswith("WARNING: Location")]
            shutil.rmtree(venv, ignore_errors=True)
            return None, f"`{label}` failed: {' / '.join(lines[-2:]) or done.returncode}"
    ok, detail = works()
    if not ok:
        return None, f"PyOMP installed but does not import: {detail}"
    return python, f"PyOMP {detail} in {_shown(venv)} (created now)"


class PyOMPServer:
    """``pyomp_kernels.py --serve`` in the PyOMP venv: one JSON request, one JSON answer."""

    def __init__(self, python: Path, settle: float = 0.3):
        self._stderr = tempfile.TemporaryFile(mode="w+")
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        self.process = subprocess.Popen(
            [str(python), str(PYOMP_SCRIPT), "--serve", "--settle", str(settle)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            bufsize=1, env=env, cwd=str(HERE))
        self._answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.info = self.request(op="info", timeout=300)

    def _read(self):
        for line in self.process.stdout:
            self._answers.put(line)
        self._answers.put(None)

    def request(self, timeout: float = 900, **request) -> dict:
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise RuntimeError(f"the PyOMP process has exited ({self._tail()})") from None
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise RuntimeError(f"PyOMP did not answer {request} within {timeout} s") from None
        if line is None:
            raise RuntimeError(f"the PyOMP process died (exit {self.process.wait()}: {self._tail()})")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise RuntimeError(answer.get("error", "PyOMP request failed"))
        return answer

    def _tail(self) -> str:
        self._stderr.seek(0)
        lines = [line for line in self._stderr.read().splitlines() if line.strip()]
        return " / ".join(lines[-2:]) or "no message"

    def close(self):
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


# == measurement =============================================================================


class Candidate:
    """One implementation of one problem. ``run()`` does the timed work once; ``prepare()``
    (untimed) runs just before a sample. A ``self_timed`` candidate is called as
    ``run(number)`` and returns its own mean seconds per run (PyOMP, in its process)."""

    def __init__(self, run, prepare=None, self_timed=False):
        self.run, self.prepare, self.self_timed = run, prepare, self_timed


def measure(candidates: dict[str, Candidate], repeats: int, budget_s: float,
            max_repeats: int = 41) -> tuple[dict, dict]:
    """Round-robin over the candidates: one warm-up round, then timed rounds; returns
    (median seconds per run of each candidate, failures).

    Each sample runs a candidate ``number`` times in a row, ``number`` chosen from the
    warm-up so that a sample of the fastest candidate lasts ≥ 20 ms (a 1 ms kernel is
    otherwise at the mercy of one scheduler tick). The number of rounds is at least
    ``repeats`` and grows, up to ``max_repeats``, while the rounds fit in ``budget_s``:
    more samples, steadier medians on a noisy machine. Each timed round runs the
    candidates in a new order (``bench_compute.round_order``), so that no candidate always
    runs right after the same one (a candidate timed just after PyOMP, or after NumPy's
    BLAS, can find the other process's threads, or cache state, in its way; rotating the
    start of one order did not help: the order around the cycle stayed the same).
    """
    samples = {name: [] for name in candidates}
    failed = {}

    def sample(name, candidate, number):
        if candidate.prepare:
            candidate.prepare()
        bc.settle()
        if candidate.self_timed:
            return float(candidate.run(number))
        run = candidate.run
        start = time.perf_counter()
        for _ in range(number):
            run()
        return (time.perf_counter() - start) / number

    def round_(numbers, keep, only=None, start=0):
        for name, candidate in bc.round_order(list(candidates.items()), start):
            if name in failed or (only is not None and name not in only):
                continue
            try:
                seconds = sample(name, candidate, numbers.get(name, 1))
            except Exception as error:  # noqa: BLE001 - a failing candidate is reported
                failed[name] = f"{type(error).__name__}: {error}"
                continue
            if keep:
                samples[name].append(seconds)
            else:
                warm[name] = seconds

    warm: dict[str, float] = {}
    round_({}, keep=False)  # warm-up (and compile)
    # time the quick ones again now that they are compiled (the warm-up included that)
    round_({}, keep=False, only={name for name, seconds in warm.items() if seconds < 1.0})
    numbers = {name: max(1, min(1000, int(0.02 / max(seconds, 1e-9)) + 1)) if seconds < 0.02 else 1
               for name, seconds in warm.items()}
    per_round = sum(warm[name] * numbers[name] + SETTLE_S for name in warm) or 1e-3
    rounds = max(repeats, min(max_repeats, int(budget_s / per_round)))
    for index in range(rounds):
        round_(numbers, keep=True, start=index)
    medians = {name: statistics.median(values) for name, values in samples.items() if values}
    return medians, failed


@contextmanager
def on_device(device_type: str):
    previous = acc.get_device_type()
    acc.set_device_type(device_type)
    try:
        yield
    finally:
        acc.set_device_type(previous)


def _use(device_type):
    return lambda: acc.set_device_type(device_type)


def _nothing():
    pass


def _then(first, second):
    def both():
        first()
        second()
    return both


def pyomp_candidate(server: PyOMPServer | None, kernel: str, size: int, steps: int = 0):
    """Set PyOMP up for this problem (compile, check against NumPy); a Candidate or why not."""
    if server is None:
        return None, None
    try:
        answer = server.request(op="setup", kernel=kernel, size=size, steps=steps)
    except RuntimeError as error:
        return None, str(error)
    if not answer.get("check"):
        return None, "wrong result against NumPy"
    return Candidate(lambda number: server.request(op="run", number=number)["seconds"],
                     self_timed=True), None


def problem_candidates(kernel: str, size: int, steps: int, server, target_server=None):
    """The candidates for one problem, their data resident on the emulated device for
    ``pyacc-emu``; for Jacobi also PyOMP's target spelling (``target_server``: a second
    PyOMP process); returns (candidates, cleanup, notes)."""
    arrays = problem_arrays(kernel, size)  # the same data and placement as PyOMP's
    notes, extra, reset = {}, {}, _nothing
    if kernel == "saxpy":
        x, y = arrays["x"], arrays["y"]
        calls = [lambda f=f: f(2.0, x, y)
                 for f in (bc.acc_saxpy, bc.omp_saxpy, bc.nb_saxpy, bc.np_saxpy)]
        resident = dict(copyin=[x, y])
        y_start = y.copy()

        def reset():
            # every sample starts from the same y, and the emulated device's copy of y is
            # the host's (the host candidates change y: without the update the emulated
            # ones would read a stale device copy, which PYACC_CHECK=stale reports)
            y[:] = y_start
            if acc.get_device_type() == "emulated":
                acc.update_device(y)
    elif kernel == "dot":
        x, y = arrays["x"], arrays["y"]
        calls = [lambda f=f: f(x, y) for f in (bc.acc_dot, bc.omp_dot, bc.nb_dot, bc.np_dot)]
        resident = dict(copyin=[x, y])
    elif kernel == "jacobi":
        u, unew, start = arrays["u"], arrays["unew"], arrays["start"]
        calls = [lambda run=bc.jacobi_steps(f, steps): run(u, unew)
                 for f in (bc.acc_jacobi, bc.omp_jacobi, bc.nb_jacobi, bc.np_jacobi)]
        resident = dict(copyin=[u, unew])

        def reset():
            # every sample starts from the initial grid (PyOMP's process does the same):
            # the same steps from the same values for every implementation
            u[:] = start
            unew[:] = start
            if acc.get_device_type() == "emulated":
                acc.update_device(u)
                acc.update_device(unew)
    elif kernel == "matmul":
        a, b, c = arrays["a"], arrays["b"], arrays["c"]
        calls = [lambda f=f: f(a, b, c)
                 for f in (bc.acc_matmul, bc.omp_matmul, bc.nb_matmul, bc.np_matmul)]
        resident = dict(copyin=[a, b], create=[c])
        extra["numba-ikj"] = Candidate(lambda: bc.nb_matmul_ikj(a, b, c))
    else:
        raise ValueError(kernel)
    acc_call, omp_call, nb_call, np_call = calls

    with on_device("emulated"):
        acc.enter_data(**resident)
    candidates = {
        "pyacc": Candidate(acc_call, prepare=_then(_use("host"), reset)),
        "pyacc-emu": Candidate(acc_call, prepare=_then(_use("emulated"), reset)),
        "pyacc-omp": Candidate(omp_call, prepare=_then(_use("host"), reset)),
        "pyacc-omp-emu": Candidate(omp_call, prepare=_then(_use("emulated"), reset)),
        "numba": Candidate(nb_call, prepare=reset),
        **extra,
        "numpy": Candidate(np_call, prepare=reset),
    }
    omp, why = pyomp_candidate(server, kernel, size, steps)
    if omp is not None:
        candidates["pyomp"] = omp
    elif why:
        notes["pyomp"] = why
    if kernel == "jacobi" and target_server is not None:
        omp, why = pyomp_candidate(target_server, "jacobi-target", size, steps)
        if omp is not None:
            candidates["pyomp-target"] = omp
        elif why:
            notes["pyomp-target"] = why

    def cleanup():
        acc.set_device_type("host")
        with on_device("emulated"):
            acc.exit_data(delete=[array for arrays in resident.values() for array in arrays])

    return candidates, cleanup, notes


def run_problem(kernel, size, steps, server, repeats, budget_s, target_server=None):
    candidates, cleanup, notes = problem_candidates(kernel, size, steps, server, target_server)
    try:
        medians, failed = measure(candidates, repeats, budget_s)
    finally:
        cleanup()
    notes.update(failed)
    return medians, notes


# == correctness before speed ================================================================


#: (device, OpenACC spelling or OpenMP spelling) of every pyacc check
SPELLINGS = [(device, spelling) for device in ("host", "emulated") for spelling in ("acc", "omp")]


def check_kernels() -> dict[str, bool]:
    """pyacc (host and emulated; the OpenACC and the OpenMP spelling of each kernel)
    against hand-written Numba and NumPy on small data."""
    rng = np.random.default_rng(3)
    results = {}
    x, y = rng.random(1001), rng.random(1001)
    ok = True
    for device, spelling in SPELLINGS:
        with on_device(device):
            yy = y.copy()
            getattr(bc, f"{spelling}_saxpy")(2.0, x, yy)
            ok &= np.array_equal(yy, 2.0 * x + y)
    results["saxpy"] = bool(ok)
    ok = True
    for device, spelling in SPELLINGS:
        with on_device(device):
            ok &= bool(np.isclose(getattr(bc, f"{spelling}_dot")(x, y), x @ y, rtol=1e-12))
    results["dot"] = ok
    ok = True
    u0 = rng.random((37, 41))
    for device, spelling in SPELLINGS:
        with on_device(device):
            u, unew = u0.copy(), u0.copy()
            with acc.data(copy=[u, unew]):
                err = getattr(bc, f"{spelling}_jacobi")(u, unew)
            v, vnew = u0.copy(), u0.copy()
            ok &= bool(np.array_equal(unew, (bc.nb_jacobi(v, vnew), vnew)[1])
                       and err == bc.nb_jacobi(u0.copy(), u0.copy()))
    results["jacobi"] = ok
    ok = True
    a, b = rng.random((33, 17)), rng.random((17, 29))
    expected, by_hand = np.zeros((33, 29)), np.zeros((33, 29))
    bc.nb_matmul(a, b, expected)
    bc.nb_matmul_ikj(a, b, by_hand)
    ok = bool(np.allclose(expected, a @ b, rtol=1e-12) and np.array_equal(by_hand, expected))
    for device, spelling in SPELLINGS:
        with on_device(device):
            c = np.zeros((33, 29))
            getattr(bc, f"{spelling}_matmul")(a, b, c)
            ok &= bool(np.array_equal(c, expected))  # the interchange is bit-exact
    results["matmul"] = ok
    return results


# == the suite ===============================================================================


def kernel_problems(mode: str | bool) -> list[tuple[str, str, int, int, int]]:
    """(label, kernel, size, steps, repeats): bench_compute.py's sizes (``mode``: full,
    quick or smoke; True/False: quick/full)."""
    mode = bc._mode(mode)
    if mode == "smoke":
        return [("saxpy 1e3", "saxpy", 1000, 0, 1), ("jacobi 16² × 2", "jacobi", 16, 2, 1),
                ("dot 1e3", "dot", 1000, 0, 1), ("matmul 8²", "matmul", 8, 0, 1)]
    if mode == "quick":
        return [("saxpy 1e6", "saxpy", 10**6, 0, 5), ("jacobi 512² × 20", "jacobi", 512, 20, 3),
                ("dot 1e6", "dot", 10**6, 0, 5), ("matmul 256²", "matmul", 256, 0, 3)]
    return [("saxpy 1e7", "saxpy", 10**7, 0, 9), ("jacobi 2048² × 100", "jacobi", 2048, 100, 3),
            ("dot 1e7", "dot", 10**7, 0, 9), ("matmul 1024²", "matmul", 1024, 0, 3)]


def scaling_problems(mode: str | bool) -> list[tuple[int, int]]:
    """(grid size, steps): about the same number of point updates per measurement."""
    mode = bc._mode(mode)
    if mode == "smoke":
        return [(16, 2)]
    quick = mode == "quick"
    sizes = [64, 128, 256, 512] if quick else [128, 256, 512, 1024, 2048, 4096]
    work = 2e7 if quick else 1.5e8
    out = []
    for size in sizes:
        steps = int(work / (size * size))
        steps = max(2, min(2000, steps - steps % 2))
        out.append((size, steps))
    return out


def run_runtime_benchmarks(mode: str | bool) -> dict:
    """bench_runtime.py in a subprocess (it configures the emulated devices at first use).
    In a smoke run its stderr (checker reports included) goes to this process's."""
    mode = bc._mode(mode)
    options = [] if mode == "full" else [f"--{mode}"]
    return json_of_script("bench_runtime.py", options, quiet=mode != "smoke")


SWEEP_PLOT = HERE / "sweep.png"


def run_size_sweep(mode: str, plot: bool) -> dict:
    """bench_sweep.py in a subprocess (it switches the current device and maps arrays of
    its own): a trivial compute call from 8 to 10⁷ elements against Numba serial and
    parallel (issue 17's target), and its plot ``benchmarks/sweep.png`` when ``plot``."""
    options = (["--quick"] if mode == "quick" else []) + (["--plot", str(SWEEP_PLOT)] if plot else [])
    return json_of_script("bench_sweep.py", options)


def json_of_script(script: str, options: list, quiet: bool = True) -> dict:
    """Run ``benchmarks/<script> <options> --json FILE`` and return what it wrote, or
    ``{"error": ...}`` with the last line it printed. ``quiet``: its stderr is kept
    (else it goes to this process's: a smoke run's checker reports)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "figures.json")
        command = [sys.executable, str(HERE / script), *options, "--json", path]
        done = subprocess.run(command, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE if quiet else None, text=True, cwd=str(ROOT))
        if not os.path.exists(path):
            return {"error": f"{script} exited {done.returncode}: "
                             f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}"}
        with open(path) as source:
            return json.load(source)


def sweep_lines(sweep: dict) -> list[str]:
    if "error" in sweep:
        return [f"bench_sweep.py did not finish: {sweep['error']}"]
    return [f"Machine: {sweep['machine']}.", "", f"![the size sweep]({SWEEP_PLOT.name})", ""] + \
        bench_sweep.table_lines(sweep["rows"])


def run_compute_extras(mode: str | bool) -> dict:
    """bench_compute.py's launch overhead, compile/cache times and emulated transfers."""
    mode = bc._mode(mode)
    acc.set_device_type("host")
    pyacc_us, numba_us = bc.launch_overhead_us(mode)
    compile_times = bc.compile_and_cache_times()
    stats = bc.emulated_jacobi_transfers(*((16, 2) if mode == "smoke" else ()))
    acc.set_device_type("host")
    return {"launch_us": {"pyacc": pyacc_us, "numba": numba_us}, "compile": compile_times,
            "emulated_stats": {key: stats[key] for key in ("h2d_count", "d2h_count", "launch_count")}}


def machine() -> dict:
    return {"description": machine_description(), "numba": numba.__version__,
            "threads": numba.config.NUMBA_NUM_THREADS, "layer": numba.config.THREADING_LAYER,
            "python": platform.python_version(), "pyacc": acc.__version__,
            "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "load": os.getloadavg() if hasattr(os, "getloadavg") else None}


# == reporting ===============================================================================


def _fmt(value, digits=4):
    return "—" if value is None else f"{value:.{digits}f}"


def _ratio(t: dict, top: str, bottom: list[str]) -> float | None:
    """``t[top]`` ÷ the smallest of ``t[bottom]`` (None when a time is missing)."""
    below = [t[k] for k in bottom if k in t]
    return t[top] / min(below) if top in t and below else None


def _verdict(value: float | None, ok, form: str = "{:.3f}") -> str:
    """``value`` formatted with ``form`` and whether ``ok(value)`` holds; — when missing."""
    return "—" if value is None else f"{form.format(value)} {'met' if ok(value) else '**not met**'}"


def kernel_table(rows) -> list[str]:
    """Times of every implementation, then: pyacc ÷ the best hand-written Numba for each
    spelling (target ≤ 1.05), PyOMP ÷ pyacc (an earlier issue's target: ≥ 2) and
    pyacc.omp ÷ PyOMP (the OpenMP spelling faster than PyOMP: < 1)."""
    head = ("| kernel | " + " | ".join(f"{LABELS[k]} (s)" for k in IMPLEMENTATIONS)
            + " | pyacc ÷ best Numba (≤ 1.05) | pyacc.omp ÷ best Numba (≤ 1.05) "
            "| PyOMP ÷ pyacc (≥ 2) | pyacc.omp ÷ PyOMP (< 1) | pyacc.omp ÷ PyOMP target (< 1) |")
    lines = [head, "|---|" + "---:|" * (len(IMPLEMENTATIONS) + 5)]
    for row in rows:
        t = row["times"]
        acc_numba = _ratio(t, "pyacc", ["numba", "numba-ikj"])
        omp_numba = _ratio(t, "pyacc-omp", ["numba", "numba-ikj"])
        speedup = _ratio(t, "pyomp", ["pyacc"])
        omp_pyomp = _ratio(t, "pyacc-omp", ["pyomp"])
        omp_target = _ratio(t, "pyacc-omp", ["pyomp-target"])
        cells = [_verdict(acc_numba, lambda r: r <= 1.05), _verdict(omp_numba, lambda r: r <= 1.05),
                 _verdict(speedup, lambda r: r >= 2, "{:.2f}×"), _verdict(omp_pyomp, lambda r: r < 1),
                 _verdict(omp_target, lambda r: r < 1)]
        lines.append(f"| {row['label']} | " + " | ".join(_fmt(t.get(k)) for k in IMPLEMENTATIONS)
                     + " | " + " | ".join(cells) + " |")
    return lines


def traffic_table(rows) -> list[str]:
    """The memory-bound kernels as rates: GB/s of the kernel's minimal traffic for each
    implementation, and the rate at which pyacc would be 2× faster than PyOMP. (NumPy's
    saxpy moves more than the minimum: ``a * x`` is a temporary array.)"""
    head = ("| kernel | minimal traffic (MB) | " + " | ".join(
        f"{LABELS[k]} (GB/s)" for k in TRAFFIC_IMPLEMENTATIONS) + " | 2× PyOMP needs (GB/s) |")
    lines = [head, "|---|---:|" + "---:|" * (len(TRAFFIC_IMPLEMENTATIONS) + 1)]
    for row in rows:
        per_element = MINIMAL_BYTES_PER_ELEMENT.get(row["kernel"])
        if per_element is None:
            continue
        nbytes = per_element * row["size"]
        t = row["times"]
        rates = [_fmt(nbytes / t[k] / 1e9, 1) if k in t else "—" for k in TRAFFIC_IMPLEMENTATIONS]
        needed = _fmt(2 * nbytes / t["pyomp"] / 1e9, 1) if "pyomp" in t else "—"
        lines.append(f"| {row['label']} | {nbytes / 1e6:.0f} | " + " | ".join(rates) + f" | {needed} |")
    return lines


def scaling_table(scaling) -> list[str]:
    lines = ["| grid | steps | " + " | ".join(f"{LABELS[k]} (ms/step)" for k in SCALING_IMPLEMENTATIONS)
             + " | pyacc ÷ Numba | pyacc.omp ÷ Numba | pyacc.omp ÷ PyOMP | pyacc.omp ÷ PyOMP target |",
             "|---:|---:|" + "---:|" * (len(SCALING_IMPLEMENTATIONS) + 4)]
    for row in scaling:
        t = row["times"]
        per = {k: t[k] / row["steps"] * 1e3 for k in t}
        ratios = [_ratio(t, "pyacc", ["numba"]), _ratio(t, "pyacc-omp", ["numba"]),
                  _ratio(t, "pyacc-omp", ["pyomp"]), _ratio(t, "pyacc-omp", ["pyomp-target"])]
        lines.append(f"| {row['size']}² | {row['steps']} | "
                     + " | ".join(_fmt(per.get(k), 3) for k in SCALING_IMPLEMENTATIONS)
                     + " | " + " | ".join(_fmt(r, 3) for r in ratios) + " |")
    return lines


def plot_scaling(scaling, path: Path) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        return f"no plot: matplotlib is not installed ({error}); pip install -e \".[bench]\""
    figure, axes = plt.subplots(figsize=(7, 4.5))
    markers = {"pyacc": "o", "pyacc-emu": "s", "pyacc-omp": "x", "pyacc-omp-emu": "+",
               "numba": "^", "numpy": "v", "pyomp": "D", "pyomp-target": "d"}
    for name in SCALING_IMPLEMENTATIONS:
        points = [(row["size"], row["times"][name] / row["steps"]) for row in scaling
                  if name in row["times"]]
        if points:
            xs, ys = zip(*points)
            axes.plot(xs, ys, marker=markers[name], label=LABELS[name])
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("grid size n (n × n points)")
    axes.set_ylabel("seconds per Jacobi step")
    axes.set_title("Jacobi 2-D (stencil + max reduction), CPU, median per step")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return None


def runtime_lines(runtime: dict) -> list[str]:
    if "error" in runtime:
        return [f"bench_runtime.py did not finish: {runtime['error']}"]
    lines = ["| measure | value | target | |", "|---|---:|---|---|"]
    for row in runtime["rows"]:
        verdict = "" if row["pass"] is None else ("met" if row["pass"] else "**not met**")
        lines.append(f"| {row['measure']} | {row['value']:.3f} | {row['target'] or ''} | {verdict} |")
    return lines


def extras_lines(extras: dict) -> list[str]:
    launch, compile_, stats = extras["launch_us"], extras["compile"], extras["emulated_stats"]
    extra = launch["pyacc"] - launch["numba"]
    exact = (stats["h2d_count"], stats["d2h_count"]) == (2, 1)
    return [
        "| measure | value | target | |", "|---|---:|---|---|",
        f"| trivial kernel, 3 present arrays: pyacc − direct Numba call (µs) | {extra:.2f} "
        f"({launch['pyacc']:.2f} vs {launch['numba']:.2f}) | ≤ 5 | {'met' if extra <= 5 else '**not met**'} |",
        f"| first call, cold cache (s) | {compile_['cold_first_call']:.2f} | ≤ 1.5 | "
        f"{'met' if compile_['cold_first_call'] <= 1.5 else '**not met**'} |",
        f"| fresh process, warm cache: time in pyacc before the first result (s) | "
        f"{compile_['warm_first_call']:.3f} | ≤ 0.3 | {'met' if compile_['warm_first_call'] <= 0.3 else '**not met**'} |",
        f"| emulated data region around 100 Jacobi steps: copy-ins, copy-outs, launches | "
        f"{stats['h2d_count']}, {stats['d2h_count']}, {stats['launch_count']} | 2, 1, 100 | "
        f"{'met' if exact else '**not met**'} |",
    ]


def section(report: dict, args) -> str:
    m = report["machine"]
    load = m["load_start"], m["load_end"]
    out = [BEGIN, "", "## CPU suite — `benchmarks/suite.py`", ""]
    out += [f"Run: `python benchmarks/suite.py{' --quick' if args.quick else ''}` on "
            f"{m['date']}. Machine: {m['description']}; numba {m['numba']} "
            f"({m['threads']} threads, `{m['layer']}` layer), pyacc {m['pyacc']}. "
            f"Load average (1 min) {load[0][0]:.2f} at the start, {load[1][0]:.2f} at the end."
            if load[0] and load[1] else f"Run on {m['date']}: {m['description']}."]
    if args.note:
        out += ["", f"**Note:** {args.note}"]
    out += ["", f"PyOMP: {report['pyomp']['status']}.", ""]
    out += ["Every cell is the median of interleaved rounds after a warm-up round; "
            "each column ran the same data and sizes. pyacc (emulated): data resident on the "
            "emulated device (`enter_data`), kernels on the CPU cores. pyacc.omp: the same "
            "loops spelled with OpenMP target directives "
            "(`@omp.target_teams_distribute_parallel_for(\"map(...) ...\")`, "
            "`bench_compute.omp_*`). PyOMP ran in its own "
            "process (`benchmarks/.venv-pyomp`), one timed sample per round like the others "
            "(kernels shorter than 20 ms are run several times per sample, everywhere), "
            "with its result checked against NumPy first.", ""]
    out += [f"Correctness before timing (pyacc host and emulated, both spellings, vs Numba/NumPy on small data): "
            + ", ".join(f"{k} {'ok' if v else 'WRONG'}" for k, v in report["checks"].items()), ""]
    out += ["### Kernels", ""] + kernel_table(report["kernels"]) + [""]
    notes = [f"- {row['label']}, {LABELS.get(k, k)}: {v}" for row in report["kernels"]
             for k, v in row["notes"].items()]
    if notes:
        out += ["Missing cells:", ""] + notes + [""]
    traffic = traffic_table(report["kernels"])
    if len(traffic) > 2:
        out += ["### Memory-bound kernels as rates", "",
                "saxpy and dot do one or two flops per 8-byte element they load, so their time "
                "is the time to stream their arrays through memory. The table turns each time "
                "into a rate: the bytes the kernel must move at the least, divided by the time. "
                "The last column is the rate pyacc would need to be 2× faster than PyOMP; "
                "compare it with the fastest rate any implementation reached in this run.", ""]
        out += traffic + [""]
    out += ["### Jacobi against grid size", "",
            f"![Jacobi time per step against grid size]({PLOT.name})", ""]
    if report.get("plot_error"):
        out += [report["plot_error"], ""]
    out += scaling_table(report["scaling"]) + [""]
    if "sweep" in report:
        out += ["### A trivial compute call from 8 to 10⁷ elements (`bench_sweep.py`)", "",
                "`c[i] = a[i] + 2 b[i]`, arrays present, against the same loop hand-written "
                "for Numba, serial and parallel; target pyacc ≤ 1.05 × the better + 1 µs "
                "(method: `bench_sweep.py`'s docstring).", ""]
        out += sweep_lines(report["sweep"]) + [""]
    if "runtime" in report:
        out += ["### Runtime micro-benchmarks (`bench_runtime.py`, emulated device)", ""]
        out += runtime_lines(report["runtime"]) + [""]
    if "extras" in report:
        out += ["### Compute-region overheads (`bench_compute.py`'s measures)", ""]
        out += extras_lines(report["extras"]) + [""]
    out += [END]
    return "\n".join(out) + "\n"


def write_results(text: str, path: Path = RESULTS, begin: str = BEGIN, end: str = END) -> None:
    """Replace the section between the ``begin``/``end`` markers of RESULTS.md with
    ``text`` (or append it); the rest of the file is kept. bench_cuda.py passes its own."""
    current = path.read_text() if path.exists() else "# Benchmark results\n"
    if begin in current and end in current:
        before = current[:current.index(begin)]
        after = current[current.index(end) + len(end):].lstrip("\n")
        updated = before + text + ("\n" + after if after else "")
    else:
        updated = current.rstrip("\n") + "\n\n" + text
    path.write_text(updated)


# == main ====================================================================================


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats (~1 min)")
    parser.add_argument("--smoke", action="store_true",
                        help="run every kernel and measure once at tiny sizes: a check that the "
                             "suite works, no figures; implies --no-pyomp and --no-write")
    parser.add_argument("--no-pyomp", action="store_true", help="leave PyOMP out")
    parser.add_argument("--no-pyomp-install", action="store_true",
                        help="use benchmarks/.venv-pyomp only if it exists; never create it")
    parser.add_argument("--no-runtime", action="store_true",
                        help="skip bench_runtime.py and bench_compute.py's overhead measures")
    parser.add_argument("--no-scaling", action="store_true", help="skip the Jacobi size sweep")
    parser.add_argument("--no-sweep", action="store_true",
                        help="skip bench_sweep.py (a trivial call from 8 to 1e7 elements)")
    parser.add_argument("--no-write", action="store_true",
                        help="do not touch RESULTS.md or the plot (print only)")
    parser.add_argument("--json", help="also write every figure to this JSON file")
    parser.add_argument("--note", help="a sentence to put in the RESULTS.md section (e.g. load)")
    args = parser.parse_args(argv)
    mode = bc.run_mode(args)
    if mode == "smoke":  # never installs PyOMP, never writes RESULTS.md or the plot
        args.no_pyomp = args.no_write = True

    acc.set_device_type("host")
    info = machine()
    info["load_start"] = info.pop("load")
    print(f"machine: {info['description']}, numba {info['numba']} ({info['threads']} threads, "
          f"{info['layer']} layer), load {info['load_start']}")

    server, target_server, status = None, None, "left out (--no-pyomp)"
    if not args.no_pyomp:
        python, status = ensure_pyomp(PYOMP_VENV, PYOMP_REQUIREMENT, not args.no_pyomp_install)
        if python is not None:
            try:
                server = PyOMPServer(python)
                i = server.info
                status = (f"pyomp {i['pyomp']} (numba {i['numba']}, numpy {i['numpy']}, "
                          f"{i['omp_threads']} OpenMP threads) in `benchmarks/.venv-pyomp`")
                # a second process for Jacobi's target spelling (one problem per process)
                target_server = PyOMPServer(python)
            except Exception as error:  # noqa: BLE001
                status = f"unavailable: the PyOMP process failed to start: {error}"
                if server is not None:
                    server.close()
                server = None
        else:
            status = f"unavailable: {status}"
    print(f"pyomp: {status}")

    report = {"machine": info, "pyomp": {"status": status}}
    # seconds of timed rounds per problem (at least)
    budget = {"full": 20.0, "quick": 4.0, "smoke": 0.0}[mode]
    try:
        report["checks"] = check_kernels()
        info["layer"] = numba.threading_layer()  # known once a parallel kernel has run
        print("correctness: " + ", ".join(f"{k} {'ok' if v else 'WRONG'}" for k, v in report["checks"].items()))
        rows = []
        for label, kernel, size, steps, repeats in kernel_problems(mode):
            times, notes = run_problem(kernel, size, steps, server, repeats, budget, target_server)
            rows.append({"label": label, "kernel": kernel, "size": size, "steps": steps,
                         "times": times, "notes": notes})
            print(f"  {label}: " + ", ".join(f"{k} {v:.4f}s" for k, v in times.items())
                  + ("; " + "; ".join(f"{k}: {v}" for k, v in notes.items()) if notes else ""))
        report["kernels"] = rows
        scaling = []
        if not args.no_scaling:
            for size, steps in scaling_problems(mode):
                times, notes = run_problem("jacobi", size, steps, server,
                                           1 if mode == "smoke" else 3, budget / 2, target_server)
                scaling.append({"size": size, "steps": steps, "times": times, "notes": notes})
                print(f"  jacobi {size}² × {steps}: " + ", ".join(
                    f"{k} {v / steps * 1e3:.3f} ms/step" for k, v in times.items()))
        report["scaling"] = scaling
    finally:
        for process in (server, target_server):
            if process is not None:
                process.close()

    if not args.no_sweep and mode != "smoke":  # (CI runs bench_sweep.py --smoke itself)
        print("size sweep (bench_sweep.py) ...")
        report["sweep"] = run_size_sweep(mode, plot=not args.no_write)
    if not args.no_runtime:
        print("runtime micro-benchmarks (bench_runtime.py) ...")
        report["runtime"] = run_runtime_benchmarks(mode)
        print("compute-region overheads (bench_compute.py) ...")
        report["extras"] = run_compute_extras(mode)
    info["load_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None

    print()
    print("\n".join(kernel_table(report["kernels"])))
    print()
    print("\n".join(traffic_table(report["kernels"])))
    if scaling:
        print()
        print("\n".join(scaling_table(scaling)))
    if "sweep" in report:
        print()
        print("\n".join(sweep_lines(report["sweep"])))
    if "runtime" in report:
        print()
        print("\n".join(runtime_lines(report["runtime"])))
        print("\n".join(extras_lines(report["extras"])))
    if not args.no_write:
        if scaling:
            report["plot_error"] = plot_scaling(scaling, PLOT)
            print(report["plot_error"] or f"plot: {PLOT.relative_to(ROOT)}")
        write_results(section(report, args))
        with open(HERE / "results_suite.json", "w") as out:
            json.dump(report, out, indent=1, default=str)
        print(f"wrote the CPU suite section of {RESULTS.relative_to(ROOT)} "
              f"(figures: benchmarks/results_suite.json)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1, default=str)
    if mode == "smoke":
        failures = [f"{row['label']}, {LABELS.get(k, k)}: {v}" for row in report["kernels"] + scaling
                    for k, v in row["notes"].items()]
        failures += [f"bench_runtime.py: {report['runtime']['error']}"] if "error" in report.get("runtime", {}) else []
        for failure in failures:
            print(f"smoke run: FAILED: {failure}", file=sys.stderr)
        if failures or not all(report["checks"].values()):
            return 1
        print("smoke run: every kernel and measure ran once at tiny sizes (targets not checked)")
        return 0
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
