"""Mandelbrot set in blocks over async queues: the blocked pipeline.

The image is computed block by block on the device; each block's copy back to the host
is queued behind its kernel, on alternating queues, so the transfer of one block overlaps
the kernel of the next. Run::

    python examples/mandelbrot_async.py                   # 2048 × 2048, 16 blocks, emulated
    python examples/mandelbrot_async.py --n 256 --blocks 4 --device host

It prints the time with and without async and checks that both images are identical
(and, for small images, equal to a NumPy computation).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pyacc as acc


@acc.parallel_loop(collapse=2, present="image")
def mandelbrot_block(image, first_row, rows, size, max_iterations):
    for r in range(rows):
        for column in range(size):
            c_re = -2.0 + 3.0 * column / size
            c_im = -1.5 + 3.0 * (first_row + r) / size
            z_re = 0.0
            z_im = 0.0
            count = 0
            for _ in range(max_iterations):
                if z_re * z_re + z_im * z_im > 4.0:
                    break
                z_re, z_im = z_re * z_re - z_im * z_im + c_re, 2.0 * z_re * z_im + c_im
                count += 1
            image[first_row + r, column] = count


def render(size: int, blocks: int, max_iterations: int, *, use_async: bool) -> tuple[np.ndarray, float]:
    image = np.zeros((size, size), dtype=np.int32)
    rows = size // blocks
    start = time.perf_counter()
    with acc.data(create=[image]):
        for block in range(blocks):
            queue = block % 2 if use_async else acc.async_sync
            view = image[block * rows:(block + 1) * rows]
            mandelbrot_block(image, block * rows, rows, size, max_iterations, async_=queue)
            acc.update(self=[view], async_=queue)  # the copy back overlaps the next block
        acc.wait()
    return image, time.perf_counter() - start


def numpy_mandelbrot(size: int, max_iterations: int) -> np.ndarray:
    columns, rows = np.meshgrid(np.arange(size), np.arange(size))
    c = (-2.0 + 3.0 * columns / size) + 1j * (-1.5 + 3.0 * rows / size)
    z = np.zeros_like(c)
    count = np.zeros(c.shape, dtype=np.int32)
    for _ in range(max_iterations):
        inside = np.abs(z) <= 2.0
        z[inside] = z[inside] ** 2 + c[inside]
        count[inside] += 1
    return count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048, help="image size (n × n)")
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--device", default="emulated")
    args = parser.parse_args(argv)
    if args.n % args.blocks:
        parser.error("--n must be a multiple of --blocks")
    acc.set_device_type(args.device)
    render(args.blocks * 2, args.blocks, 2, use_async=True)  # compile first
    synchronous, sync_time = render(args.n, args.blocks, args.iterations, use_async=False)
    pipelined, async_time = render(args.n, args.blocks, args.iterations, use_async=True)
    print(f"mandelbrot {args.n}x{args.n}, {args.blocks} blocks, {args.iterations} iterations "
          f"on the {acc.get_device_type()} device")
    print(f"synchronous: {sync_time:.3f} s   async (2 queues): {async_time:.3f} s   "
          f"speed-up {sync_time / async_time:.2f}x")
    if not np.array_equal(synchronous, pipelined):
        print("check: FAILED — the async image differs from the synchronous one", file=sys.stderr)
        return 1
    if args.n <= 512 and not np.array_equal(synchronous, numpy_mandelbrot(args.n, args.iterations)):
        print("check: FAILED — differs from the NumPy computation", file=sys.stderr)
        return 1
    print("check: async and synchronous images are identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
