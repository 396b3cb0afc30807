"""Calling a CuPy library routine on pyacc device data: ``host_data(use_device=...)``.

OpenACC's ``#pragma acc host_data use_device(x, y)`` hands host code the *device*
addresses of present data, so that it can call a GPU library (cuFFT, cuBLAS, ...) on the
arrays in place, without a copy. In pyacc, ``with acc.host_data(use_device=[x, y]) as
(dx, dy):`` gives the device arrays; on the ``cuda`` device they are CuPy arrays, so any
CuPy function works on them. The pipeline here:

1. a pyacc kernel fills a noisy signal ``x`` on the device;
2. CuPy low-pass filters it with an FFT (``cupy.fft.rfft``/``irfft``) straight from the
   device memory of ``x`` into that of ``y``;
3. a pyacc reduction computes the energy of ``y`` on the device;
4. ``acc.update_self(y)`` brings the filtered signal to the host.

It needs a GPU: on a machine without a usable ``cuda`` device it prints why and exits 0.
``--device emulated`` runs the same code on the emulated device with NumPy standing in
for CuPy (there the device arrays are NumPy arrays in emulated device memory), which
checks the data flow — the host copy of ``y`` stays stale until ``update_self``. Run::

    python examples/cupy_interop.py              # on the GPU (2**20 samples)
    python examples/cupy_interop.py --small
    python examples/cupy_interop.py --device emulated --small

The filtered signal and its energy are checked against NumPy.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

import pyacc as acc


@acc.parallel_loop(present="x noise")
def make_signal(x, noise, frequency):
    n = x.shape[0]
    for i in range(n):
        t = i / n
        x[i] = math.sin(2.0 * math.pi * frequency * t) + 0.5 * noise[i]


@acc.parallel_loop(present="y", reduction="+:energy")
def energy_of(y):
    energy = 0.0
    for i in range(y.shape[0]):
        energy += y[i] * y[i]
    return energy


def low_pass(xp, dx, dy, keep: int) -> None:
    """Filter device array ``dx`` into ``dy`` with the array library ``xp`` (CuPy on a
    GPU): keep the ``keep`` lowest frequencies."""
    spectrum = xp.fft.rfft(dx)
    spectrum[keep:] = 0.0
    dy[...] = xp.fft.irfft(spectrum, n=dx.shape[0])


def synchronize(xp) -> None:
    """CuPy queues its work on its current stream; pyacc's next synchronous operation
    must not start before it has finished. (Putting both on one queue — CuPy on
    ``acc.get_cuda_stream(q)`` and pyacc calls with ``async_=q`` — is the asynchronous
    alternative.)"""
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def pipeline(xp, n: int, frequency: float, keep: int, noise: np.ndarray):
    x = np.empty(n)
    y = np.zeros(n)
    with acc.data(copyin=[noise], create=[x, y]):
        make_signal(x, noise, frequency)               # 1. pyacc kernel on the device
        with acc.host_data(use_device=[x, y]) as (dx, dy):
            low_pass(xp, dx, dy, keep)                 # 2. library call on device memory
            synchronize(xp)
        device_array_type = type(dx).__module__.split(".")[0] + "." + type(dx).__name__
        stale = y.copy()                               # what the host has before the update
        energy = energy_of(y)                          # 3. pyacc reduction on device data
        acc.update_self(y)                             # 4. the host needs the values
    return y, energy, stale, device_array_type


def numpy_reference(n: int, frequency: float, keep: int, noise: np.ndarray):
    t = np.arange(n) / n
    x = np.sin(2.0 * np.pi * frequency * t) + 0.5 * noise
    spectrum = np.fft.rfft(x)
    spectrum[keep:] = 0.0
    y = np.fft.irfft(spectrum, n=n)
    return y, float(np.dot(y, y))


def cuda_unavailable_reason() -> str | None:
    """None when the cuda device can be used, else why not."""
    if acc.get_num_devices("cuda") > 0:
        return None
    try:  # the error message says what is missing (CuPy, a GPU, or pyacc support)
        acc.set_device_type("cuda")
    except acc.AccError as error:
        return str(error)
    return "acc.get_num_devices('cuda') is 0"


def transfer_summary(stats: dict) -> str:
    return (f"{stats['h2d_count']} to device ({stats['h2d_bytes']} B), "
            f"{stats['d2h_count']} to host ({stats['d2h_bytes']} B), "
            f"{stats['launch_count']} kernel launches")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2 ** 20, help="number of samples")
    parser.add_argument("--small", action="store_true", help="a quick run (4096 samples)")
    parser.add_argument("--device", choices=("cuda", "emulated"), default="cuda",
                        help="cuda (CuPy, the default) or emulated (NumPy standing in for CuPy)")
    args = parser.parse_args(argv)
    if args.small:
        args.n = 4096

    if args.device == "cuda":
        reason = cuda_unavailable_reason()
        if reason is not None:
            print(f"cupy_interop: skipped, this example needs a GPU: {reason}")
            return 0
        import cupy as xp
    else:
        xp = np
    acc.set_device_type(args.device)

    frequency, keep = 5.0, 32
    noise = np.random.default_rng(5).standard_normal(args.n)
    pipeline(xp, 64, frequency, keep, noise[:64])      # compile the kernels before timing
    acc.reset_stats()
    start = time.perf_counter()
    y, energy, stale, device_array_type = pipeline(xp, args.n, frequency, keep, noise)
    elapsed = time.perf_counter() - start
    stats = acc.stats()
    print(f"low-pass filter of {args.n} samples: pyacc kernels + {xp.__name__}.fft through "
          f"host_data, on the {acc.get_device_type()} device")
    print(f"  device arrays from host_data are {device_array_type}")
    print(f"  energy of the filtered signal: {energy:.9g}")
    print(f"  time: {elapsed:.4f} s   transfers: {transfer_summary(stats)}")

    reference, reference_energy = numpy_reference(args.n, frequency, keep, noise)
    problems = []
    if not np.allclose(y, reference, rtol=1e-9, atol=1e-9):
        worst = int(np.argmax(np.abs(y - reference)))
        problems.append(f"y[{worst}] = {y[worst]!r}, NumPy says {reference[worst]!r}")
    if not np.isclose(energy, reference_energy, rtol=1e-9):
        problems.append(f"energy {energy!r}, NumPy says {reference_energy!r}")
    if acc.get_device_type() != "host" and np.any(stale != 0.0):
        problems.append("the host copy of y changed before update_self")
    if problems:
        for problem in problems:
            print(f"check: FAILED — {problem}", file=sys.stderr)
        return 1
    print("check: matches the NumPy reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
