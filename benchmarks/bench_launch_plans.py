"""The host side of one GPU launch, with and without a prepared plan, measured without a GPU.

A launch of the trivial kernel (``z[i] = x[i] + y[i]``, 3 arrays, 1 block of 32) through
``compiler.cuda_runtime.launch`` — what a generated cuda driver calls — in five ways,
side by side: a synchronous call of a driver of that one launch made again from C (a
*relaunch*, ``compiler/cuda_relaunch.py``: the arguments' facts checked, the kept launch
made, the stream waited for, no Python); an ``async_`` call of it made again (*queued
relaunch*: what the express lane's enqueue runs in Python, ``pyacc._express.enqueuer``,
``CudaDevice.relaunch``, ``CudaQueue.submit_relaunch`` — the queue found, polled, its
order kept — around the relaunch, which does not wait), and the same call with
relaunches off (*queued launch*: a ``Pending`` the queue submits, which runs the driver,
whose launch is made from C); through its prepared launch
(``compiler.cuda_plans``) made from C by a ``LaunchRecord`` (``compiler/_launch.c``: the
words packed once, one driver call); the same through ``cuda.core.launch``; and through
numba-cuda's dispatcher (plans off: ``PYACC_EXPRESS=0``, or facts a plan does not cover). numba-cuda's own dispatcher, typing
and marshaller run; what needs a GPU stands in (``tests/cuda/numba_cuda_leaves.py``): the
queue's stream (``cuda_runtime.stream``, on a GPU a CuPy call and a dict lookup), the
device arrays (plain attributes, where CuPy's ``shape``/``strides`` build a tuple at each
read), their DLPack views, the loaded function, ``cuda.core.launch`` (which here packs
the words with cuda.core's own ``ParamHolder``, its packing at each launch, and makes no
driver call) and the driver's ``cuLaunchKernel`` (for the C launch: a C function that
returns 0 at once, libm's ``fegetround``, which takes no arguments: the System V x86-64
convention lets a caller pass more; the C ways are not run elsewhere) and its
``cuStreamSynchronize`` (a relaunch's wait: the same function). The relaunch's launcher
is a plain function of the one launch: on a GPU the launcher it stands for
(``SyncKernel``) also makes the stream current and waits through CuPy, which the figures
leave out. So every figure
leaves out the driver call itself (~2–3 µs, ``../shared/reference/gpu-anchors.md``
A1–A3), the stream lookup and cuda.core's building of the driver's launch configuration;
the plans' leave out CuPy's attribute reads (a few per array), and the dispatcher's
CuPy's real ``__dlpack__`` (twice per array per launch). The GPU figures are
``bench_cuda.py``'s.

Reported: µs per launch (median of rounds, interleaved) and machine instructions per
launch (callgrind, counted only inside the loop of launches: ``--toggle-collect`` of
CPython's ``builtin_breakpoint``), written to the "Prepared GPU launches" lines of the
terminal; RESULTS.md quotes them with the machine.

Run: ``python benchmarks/bench_launch_plans.py [--calls N] [--no-callgrind] [--smoke]``
(needs numba-cuda 0.30 and pytest, as the test suite does).
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import ctypes.util
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "cuda"))

#: the ways of launching (module docstring)
WAYS = ["relaunched", "queued relaunch", "queued launch", "C launch", "prepared", "dispatcher"]
_C_WAYS = ("relaunched", "queued relaunch", "queued launch", "C launch")  # (need the C launch)

_CHILD = """
import sys
sys.path.insert(0, sys.argv[3])
import bench_launch_plans as b
way, calls = sys.argv[1].replace("_", " "), int(sys.argv[2])
with b.standing_in():
    launch = b.launcher(way)
    code = compile("for _ in range(%d):\\n    launch()" % calls, "bench", "exec")
    sys.breakpointhook = lambda: exec(code, {"launch": launch})
    breakpoint()  # counted: CPython's builtin_breakpoint, which nothing else calls
"""


def _no_launch(stream, config, handle, *words):
    """``cuda.core.launch`` standing in: its packing of the words, no driver call."""
    _PACKING[0](words)


_PACKING = [None]  # cuda.core's ParamHolder (made in ``standing_in``)


def c_driver() -> int | None:
    """The address of a C function that returns 0 at once (module docstring), or None:
    not x86-64 Linux, no libm, or the C launch not built."""
    from pyacc.compiler import cuda_plans

    if cuda_plans._launch is None or platform.system() != "Linux" or \
            platform.machine() not in ("x86_64", "AMD64"):
        return None
    name = ctypes.util.find_library("m")
    if name is None:
        return None
    return ctypes.cast(ctypes.CDLL(name).fegetround, ctypes.c_void_p).value


class standing_in:
    """numba-cuda's launch path with the GPU's leaves standing in (module docstring)."""

    def __enter__(self):
        import pytest
        from numba_cuda_leaves import stand_in

        from cuda.core._kernel_arg_handler import ParamHolder  # with numba-cuda 0.30
        from numba.cuda import codegen, dispatcher

        self.patch = pytest.MonkeyPatch()
        stand_in(self.patch)
        # launches are not recorded here (a growing list would time the garbage collector)
        _PACKING[0] = ParamHolder
        self.patch.setattr(dispatcher, "launch", _no_launch)
        self.patch.setattr(codegen.CUDACodeLibrary, "get_cufunc", lambda library: SimpleNamespace(
            kernel=SimpleNamespace(handle=0xfeed), name="trivial",
            module=SimpleNamespace(initialized=True)))
        return self

    def __exit__(self, *exc):
        self.patch.undo()


def launcher(way: str):
    """A no-argument callable: one launch of the trivial kernel on 3 device arrays, the
    way named (``WAYS``), warmed up (compiled; the plan made for ``prepared``)."""
    from numba_cuda_leaves import DeviceArray

    from pyacc.compiler import cuda_compilers, cuda_runtime

    # numba-cuda as pyacc loads it (with the NumPy 2.5 fix: a plain ``from numba import
    # cuda`` cannot compile on NumPy 2.5, which a GPU machine showed)
    cuda = cuda_compilers.load(cuda_compilers.COMPILERS["numba-cuda"])

    @cuda.jit
    def trivial(x, y, z):
        i = cuda.grid(1)
        if i < x.shape[0]:
            z[i] = x[i] + y[i]

    x, y, z = (DeviceArray((8,), ptr=0x1000 * (k + 1)) for k in range(3))
    args = (x, y, z)
    use(way)

    def launch():
        cuda_runtime.launch(trivial, 1, 32, args)
    from pyacc.compiler import cuda_plans, cuda_relaunch

    with_c = way in _C_WAYS
    cuda_plans._driver.update(cuLaunchKernel=c_driver() if with_c else None,
                              cuStreamSynchronize=c_driver() if with_c else None)
    if way == "relaunched":  # a synchronous call of a driver of one launch, made again from C
        relaunch = cuda_relaunch.relaunching(driver_of(trivial), lambda: None)

        def launch():
            relaunch(x, y, z)
    if way.startswith("queued"):  # an async call of that driver, as the express lane hands it
        launch, relaunch = queued(driver_of(trivial), args)
    try:  # (read as plans and relaunches are made)
        for _ in range(4):
            launch()
    finally:
        cuda_plans._driver.pop("cuLaunchKernel")
        cuda_plans._driver.pop("cuStreamSynchronize")
    if way in ("relaunched", "queued relaunch") and relaunch.relaunched == 0:
        raise RuntimeError("the relaunch made nothing again: its launches were not kept")
    return launch


def driver_of(kernel):
    """A generated driver of one launch of ``kernel`` on 1 block of 32 threads, which a
    relaunch may make again (``relaunchable``)."""
    from pyacc.compiler import cuda_runtime

    def driver(x, y, z):
        cuda_runtime.launch(kernel, 1, 32, (x, y, z))
    driver.relaunchable = True
    return driver


def queued(driver, args):
    """``(launch, relaunch)``: ``launch()`` is an ``async_=1`` call of ``driver`` with
    ``args`` as the express lane hands it to the cuda device (``pyacc._express.enqueuer``:
    the queue found, its ``Relaunch``, ``CudaDevice.relaunch`` and the queue's bookkeeping,
    ``CudaQueue.submit_relaunch``), over a queue whose backend stands in
    (``numba_cuda_leaves.QueueBackend``: on a GPU CuPy's makes the stream current around
    a ``Pending``'s run, which the queued launch leaves out); ``relaunch``: the queue's
    ``Relaunch``."""
    from numba_cuda_leaves import EnqueuingDevice, QueueBackend

    from pyacc._express import enqueuer

    backend = QueueBackend()
    backend.log = collections.deque(maxlen=1)  # (not kept: a growing list)
    device = EnqueuingDevice(backend, "the bench's device")
    queue = device.queue
    enqueue = enqueuer(device, driver, "trivial", None, None)
    enqueue(1, args)  # (the queue's Relaunch made)
    return (lambda: enqueue(1, args)), queue.relaunches[driver]


def use(way: str) -> None:
    """Launches from now on prepared (plans for the stand-in arrays) or not."""
    from numba_cuda_leaves import DeviceArray

    from pyacc.compiler import cuda_runtime

    cuda_runtime._prepared[:] = [None if way == "dispatcher" else DeviceArray]
    if c_driver() is not None:  # (the queued launch: the queue runs the driver, in Python)
        from pyacc.compiler import _launch

        _launch.set_relaunching(way != "queued launch")


def microseconds(calls: int, rounds: int = 7) -> dict:
    """µs per launch of each way, median of ``rounds`` interleaved rounds."""
    samples = {way: [] for way in WAYS}
    with standing_in():
        launches = {way: launcher(way) for way in WAYS}
        for _ in range(rounds):
            for way in WAYS:
                use(way)
                launch = launches[way]
                start = time.perf_counter()
                for _ in range(calls):
                    launch()
                samples[way].append((time.perf_counter() - start) / calls * 1e6)
    return {way: statistics.median(values) for way, values in samples.items()}


def instructions(calls: int) -> dict:
    """Machine instructions per launch of each way (callgrind, inside the loop only;
    ``bench_async.instructions`` runs it)."""
    from bench_async import instructions as counted  # (imports pyacc's async benchmark)

    result = {}
    for way in WAYS:
        total = counted(None, calls, child=(_CHILD, way.replace(" ", "_"), str(calls), str(HERE)),
                        options=("--collect-atstart=no", "--toggle-collect=builtin_breakpoint"))
        if total <= 0:
            raise RuntimeError("callgrind counted nothing: is CPython's builtin_breakpoint "
                               "a symbol here?")
        result[way] = total / calls
    return result


def unavailable() -> str | None:
    """Why the measure cannot run here (None: it can)."""
    from pyacc.compiler import cuda_compilers, cuda_plans, cuda_runtime

    if cuda_runtime.SIMULATED:
        return "under Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    compiler = cuda_compilers.COMPILERS["numba-cuda"]
    if not cuda_plans.enabled(compiler):
        return f"plans are for numba-cuda 0.30 with the express lane on; here {compiler.label()}"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--no-callgrind", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="each way a few times, no callgrind (numba-cuda 0.30 missing: "
                             "says so, exit 0)")
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason:
        print(f"bench_launch_plans.py: not run: {reason}")
        return 0
    if args.smoke:
        args.calls, args.no_callgrind = 20, True
    if c_driver() is None:
        WAYS[:] = [way for way in WAYS if way not in _C_WAYS]
        print("bench_launch_plans.py: the C launch is not measured here (not x86-64 Linux "
              "with libm, or compiler/_launch.c not built)")
    us = microseconds(args.calls, rounds=1 if args.smoke else 7)
    print("Prepared GPU launches, host side without the driver call (trivial kernel, 3 arrays):")
    for way in WAYS:
        print(f"  {way:>15}: {us[way]:7.2f} µs per launch")
    print(f"  dispatcher ÷ prepared: {us['dispatcher'] / us['prepared']:.1f}")
    if "C launch" in WAYS:
        print(f"  prepared ÷ C launch: {us['prepared'] / us['C launch']:.2f}")
        print(f"  C launch ÷ relaunched: {us['C launch'] / us['relaunched']:.2f}")
        print(f"  queued launch ÷ queued relaunch: {us['queued launch'] / us['queued relaunch']:.2f}")
    if not args.no_callgrind and shutil.which("valgrind"):
        counted = instructions(max(200, args.calls // 20))
        for way in WAYS:
            print(f"  {way:>15}: {counted[way]:9,.0f} instructions per launch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
