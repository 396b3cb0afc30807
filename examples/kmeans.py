"""K-means clustering with the centre sums as an array reduction — Rodinia's ``kmeans`` in OpenACC.

A port of the OpenACC version of Rodinia's ``kmeans`` benchmark in the OpenARC compiler's
test suite: repository ``ORNL/OpenARC``, file
``test/benchmarks/openacc/rodinia/kmeans/kmeans_clustering.c`` (with ``cluster.c`` and
``kmeans.h`` beside it; the code is © 2005 Northwestern University under the BSD-style
licence in its header, edited at the University of Virginia for Rodinia; OpenARC is
distributed under the Cetus Artistic License). Each iteration assigns every point to its
nearest centre (squared Euclidean distance) in one compute region that also sums the
points of each cluster (``new_centers``, ``new_centers_len``: array reductions) and counts
the points whose membership changed (``delta``); the host then divides the sums into the
new centres. It stops when no point changes cluster, or after 500 iterations.

The parallel loop runs over ``nthreads = npoints / _UNROLLFAC_`` "threads", each walking
``_UNROLLFAC_`` points with stride ``nthreads`` in a sequential inner loop, as written in
the original. The original reads its points from a file (e.g. Rodinia's ``kdd_cup``, 34
attributes); here they are overlapping Gaussian blobs, their coordinates rounded to
quarters so that the centre sums are exact in float32 whatever the order of the
additions. The original's ``delta += 1.0F`` has no clause and relies on the compiler
recognising the scalar reduction; here ``delta`` is named in the reduction clause, beside
the two array reductions of the original (OpenACC 3.3 §2.5.15).

How the directives map::

    C (kmeans_clustering.c)                               pyacc (this file)
    #define _UNROLLFAC_ 100, FLT_MAX   (macros)           module-level _UNROLLFAC_, FLT_MAX
    #pragma acc data copyin(feature, membership) \\        with acc.data(copyin=[feature, membership],
                     create(clusters)                                   create=[clusters]):
    #pragma acc update device(clusters)                   acc.update(device=[clusters])
    #pragma acc kernels loop gang worker independent \\    @acc.kernels_loop("gang worker independent
        private(i, index, index_fnp, max_dist) \\              private(i, index, index_fnp, max_dist)
        reduction(+:new_centers[0:K][0:F],                     reduction(+:new_centers, new_centers_len,
                    new_centers_len[0:K])                                 delta)")
    for (tid = 0; tid < nthreads; tid++)                  def find_nearest(...): for tid in range(nthreads)
    #pragma acc loop seq                                  for ii in acc.loop(range(_UNROLLFAC_), seq=True)
    /* replace old cluster centers */ (host loop)         the same loop, as NumPy on the host

Run::

    python examples/kmeans.py                  # 204800 points, 34 attributes, 5 clusters
    python examples/kmeans.py --small          # CI size (20000 points)
    ACC_DEVICE_TYPE=emulated python examples/kmeans.py --small

The check runs the same iterations in NumPy (the same initial centres, the distances summed
in the same order): the same number of iterations, memberships and centres, exactly.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pyacc as acc

_UNROLLFAC_ = 100                 # points per loop iteration ("thread")
FLT_MAX = 3.40282347e+38
MAX_LOOPS = 500


@acc.kernels_loop("gang worker independent private(i, index, index_fnp, max_dist) "
                  "reduction(+:new_centers, new_centers_len, delta)")
def find_nearest(feature, clusters, membership, new_centers, new_centers_len, nthreads):
    """Assign each point to its nearest centre; sum the points of each cluster; return
    the number of points whose membership changed."""
    nfeatures = feature.shape[1]
    nclusters = clusters.shape[0]
    delta = 0.0
    for tid in range(nthreads):
        for ii in acc.loop(range(_UNROLLFAC_), seq=True):
            i = tid + ii * nthreads
            # find_nearest_point() inlined: the centre with the smallest squared distance
            max_dist = FLT_MAX
            index_fnp = 0
            for i_fnp in range(nclusters):
                dist = 0.0
                for i_ed in range(nfeatures):
                    dist += (feature[i, i_ed] - clusters[i_fnp, i_ed]) * (feature[i, i_ed] - clusters[i_fnp, i_ed])
                if dist < max_dist:
                    max_dist = dist
                    index_fnp = i_fnp
            index = index_fnp
            # if membership changes, increase delta by 1
            if membership[i] != index:
                delta += 1.0
            membership[i] = index
            # update new cluster centers: the sum of all points in each cluster
            new_centers_len[index] += 1
            for j in range(nfeatures):
                new_centers[index, j] += feature[i, j]
    return delta


def kmeans_clustering(feature: np.ndarray, nclusters: int, threshold: float,
                      membership: np.ndarray) -> tuple[np.ndarray, int]:
    """The original's kmeans_clustering(): returns (cluster centres, loop count).
    ``membership`` receives each point's cluster."""
    npoints, nfeatures = feature.shape
    nthreads = npoints // _UNROLLFAC_
    clusters = feature[:nclusters].copy()            # the first nclusters points
    membership[:] = -1
    new_centers_len = np.zeros(nclusters, dtype=np.int32)
    new_centers = np.zeros((nclusters, nfeatures), dtype=np.float32)

    loop = 0
    with acc.data(copyin=[feature, membership], create=[clusters]):
        while True:
            acc.update(device=[clusters])
            # new_centers and new_centers_len are in no data region: copied in and out
            delta = find_nearest(feature, clusters, membership, new_centers, new_centers_len, nthreads)
            # replace old cluster centers with new_centers (on the host)
            filled = new_centers_len > 0
            clusters[filled] = new_centers[filled] / new_centers_len[filled, None]
            new_centers[:] = 0.0
            new_centers_len[:] = 0
            # } while (delta > threshold && loop++ < 500);
            if not delta > threshold:
                break
            loop += 1
            if loop > MAX_LOOPS:
                break
        acc.update(self=[membership])  # not in the original (its membership is copyin only): for the check
    return clusters, loop


def synthetic_points(npoints: int, nfeatures: int, nclusters: int, seed: int) -> np.ndarray:
    """Overlapping Gaussian blobs (σ = 1), twice as many as clusters, around random centres
    in [0, 10)^nfeatures. The coordinates are rounded to quarters: every partial sum of them
    is exact in float32 (below 2^22 up to about 270000 points), so the centre sums do not
    depend on the order in which the parallel loop adds the points, and the check can ask
    for equality."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.0, 10.0, (2 * nclusters, nfeatures))
    blob = rng.integers(0, 2 * nclusters, npoints)
    points = centres[blob] + rng.normal(0.0, 1.0, (npoints, nfeatures))
    return (np.round(points * 4.0) / 4.0).astype(np.float32)


def numpy_reference(feature: np.ndarray, nclusters: int, threshold: float) -> tuple[np.ndarray, np.ndarray, int]:
    """The same iterations, vectorised over the points: (centres, membership, loop count).
    The distances are summed feature by feature in float64, as the kernel sums them."""
    npoints, nfeatures = feature.shape
    clusters = feature[:nclusters].copy()
    membership = np.full(npoints, -1)
    loop = 0
    while True:
        distances = np.zeros((nclusters, npoints))
        for c in range(nclusters):
            for f in range(nfeatures):
                diff = feature[:, f] - clusters[c, f]          # float32, as in the kernel
                distances[c] += diff * diff
        nearest = distances.argmin(axis=0)                     # the first of equal distances
        delta = float((nearest != membership).sum())
        membership = nearest
        new_centers_len = np.bincount(nearest, minlength=nclusters).astype(np.int32)
        new_centers = np.zeros((nclusters, nfeatures), dtype=np.float32)
        np.add.at(new_centers, nearest, feature)
        filled = new_centers_len > 0
        clusters[filled] = new_centers[filled] / new_centers_len[filled, None]
        if not delta > threshold:
            break
        loop += 1
        if loop > MAX_LOOPS:
            break
    return clusters, membership, loop


def transfer_summary(stats: dict) -> str:
    return (f"{stats['h2d_count']} to device ({stats['h2d_bytes']} B), "
            f"{stats['d2h_count']} to host ({stats['d2h_bytes']} B), "
            f"{stats['launch_count']} kernel launches")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=204800, help=f"number of points (a multiple of {_UNROLLFAC_})")
    parser.add_argument("--features", type=int, default=34, help="attributes per point")
    parser.add_argument("--clusters", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=0.001)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--small", action="store_true", help="a quick run (n = 20000)")
    parser.add_argument("--device", default=None,
                        help="host, emulated or cuda (default: ACC_DEVICE_TYPE or the default device)")
    args = parser.parse_args(argv)
    if args.small:
        args.n = 20000
    if args.n <= 0 or args.n % _UNROLLFAC_ or not 0 < args.clusters <= args.n:
        parser.error(f"--n must be a positive multiple of {_UNROLLFAC_}, at least --clusters")
    if args.device:
        acc.set_device_type(args.device)

    feature = synthetic_points(args.n, args.features, args.clusters, args.seed)
    membership = np.empty(args.n, dtype=np.int32)

    # compile the kernel before timing
    kmeans_clustering(feature[:_UNROLLFAC_].copy(), args.clusters, args.threshold,
                      np.empty(_UNROLLFAC_, dtype=np.int32))
    acc.reset_stats()
    start = time.perf_counter()
    clusters, loops = kmeans_clustering(feature, args.clusters, args.threshold, membership)
    elapsed = time.perf_counter() - start
    stats = acc.stats()

    print(f"k-means of {args.n} points with {args.features} attributes into {args.clusters} clusters "
          f"on the {acc.get_device_type()} device")
    print(f"  loop count: {loops}   time: {elapsed:.3f} s   transfers: {transfer_summary(stats)}")
    print(f"  cluster sizes: {np.bincount(membership, minlength=args.clusters).tolist()}")

    ref_clusters, ref_membership, ref_loops = numpy_reference(feature, args.clusters, args.threshold)
    problems = []
    if loops != ref_loops:
        problems.append(f"{loops} iterations, the reference took {ref_loops}")
    if not np.array_equal(membership, ref_membership):
        problems.append(f"{int((membership != ref_membership).sum())} points in a different cluster")
    if not np.array_equal(clusters, ref_clusters):
        problems.append(f"centres differ by up to {float(np.abs(clusters - ref_clusters).max()):.3g}")
    if problems:
        for problem in problems:
            print(f"check: FAILED — {problem}", file=sys.stderr)
        return 1
    print("check: matches the NumPy reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
