"""Monte Carlo cross-section lookups over a struct of arrays — XSBench's OpenACC event-based kernel.

A port of the OpenACC version of XSBench, the proxy application for the macroscopic
cross-section lookups of OpenMC (Argonne National Laboratory's CESAR co-design centre):
repository ``ANL-CESAR/XSBench``, folder ``openacc/`` as added by pull request 34 (commit
``17be517``; the folder is on that pull request's branch, not on ``master``). The kernel is
``run_event_based_simulation()`` in ``openacc/Simulation.c`` with the routines beside it
(``calculate_macro_xs``, ``calculate_micro_xs``, ``grid_search``, ``grid_search_nuclide``,
``pick_mat``, ``LCG_random_double``, ``fast_forward_LCG``); the data come from
``openacc/GridInit.c`` and ``openacc/Materials.c``, the structs from
``openacc/XSbench_header.h``. XSBench is © 2012-2021 Argonne National Laboratory under the
MIT licence (the repository's ``LICENSE``).

Each lookup ``i`` fast-forwards a linear congruential generator to ``2*i``, samples a
neutron energy and one of the 12 materials of the Hoogenboom-Martin (H-M) "small" reactor
(68 nuclides), and sums the five microscopic cross sections of every nuclide of that
material, each interpolated in the nuclide's energy grid and weighted by its concentration.
The index of the largest of the five macroscopic cross sections (plus one) is the lookup's
verification value; the host sums them into a hash. The nuclide's grid interval is found
one of three ways (``--grid``): ``unionized`` (the default: one binary search in the
unionized energy grid, then the index grid), ``nuclide`` (a binary search per nuclide) or
``hash`` (an energy hash into the index grid, then a short binary search).

All the data travel in one struct, ``SimulationData SD``: six heap arrays and their
lengths. The original's only directive maps them member by member with array sections,
and that is what this port keeps, clause for clause::

    C (Simulation.c)                                      pyacc (this file)
    #pragma acc parallel loop\\                            @acc.parallel_loop(
      copyin( SD)\\                                           "copyin( SD) "
      copyin( SD.max_num_nucs)\\                              "copyin( SD.max_num_nucs) "
      copyin( SD.num_nucs[0:SD.length_num_nucs])\\           "copyin( SD.num_nucs[0:SD.length_num_nucs]) "
      ... (concs, mats, unionized_energy_array,              ... the same five members, the same sections
           index_grid, nuclide_grid)
      copyout( verification[0:in.lookups])                   "copyout( verification[0:in_.lookups])")
    for( int i = 0; i < in.lookups; i++ )                 def event_based_lookups(in_, SD, verification):
                                                              for i in range(in_.lookups):
    calculate_macro_xs(...) and the routines it calls     @acc.routine functions of the same names
    typedef struct {...} SimulationData, Inputs           dataclasses SimulationData, Inputs
    NuclideGridPoint (a struct of six doubles)            a NumPy structured dtype: SD.nuclide_grid is a
                                                          np.recarray, read as nuclide_grids[low].energy
    validation_hash += verification[i] (host loop)        the same loop, as verification.sum() on the host

In C, ``copyin( SD)`` copies the struct itself, pointers and all, and each array member
needs its own clause to reach the device. In pyacc ``copyin( SD)`` maps every member
without a clause of its own (a dataclass holds references, not pointers), so the member
clauses here say what the C ones say — which sections move, and in which direction —
and dropping one would still copy that member in. The planted bug of
``tests/test_examples.py`` instead turns ``copyin( SD.concs[...])`` into ``create(...)``:
on ``emulated`` (separate device memory) the concentrations are then never sent and the
check fails.

What changed, and why:

- ``in`` is a Python keyword: the ``Inputs`` parameter is ``in_``; the kernel's local
  ``max`` is ``max_`` (not to hide the built-in).
- C passes the generator state by pointer (``LCG_random_double(&seed)``, ``pick_mat(&seed)``);
  Python has no pointers to scalars, so these routines return the new state with their
  value (``p_energy, seed = LCG_random_double(seed)``). The ``NuclideGridPoint *`` pointers
  ``low`` and ``high`` become indices into the record array, and ``&nuclide_grids[nuc *
  n_gridpoints]`` a view starting there (``nuclide_grids[nuc * n_gridpoints:]``).
- The 64-bit generator is the original's, in ``np.uint64`` (every constant typed so, as C's
  ``ULL`` literals): the same streams, hence the same samples. Its wrap-around is intended;
  NumPy warns about it where a kernel runs as Python (the CUDA simulator,
  ``PYACC_DISABLE_JIT=1``), and this file silences exactly that warning.
- ``SD.nuclide_grid`` is an ``np.recarray`` rather than a plain structured array, so that
  ``nuclide_grids[low].energy`` also works where kernels run as Python.
- ``SimulationData`` leaves out ``p_energy_samples`` and ``mat_samples``, which only the
  optimised kernels of other ports (not this one) use.
- The data are built on the host with NumPy (``GridInit.c``: not part of the measured
  kernel, "do not profile"), from the same generator streams and the same sorting; the
  unionized index grid by a search per nuclide that gives the original's incremental walk.
- Sizes are options (``-l``, ``-g``, ``-G``, ``-p`` as in the original's command line; the
  H-M size is always "small", 68 nuclides). The checksums are the original's: built with
  gcc (OpenACC off), ``XSBench -m event -s small -g 60 -l 20000 -G unionized`` (or
  ``nuclide``, ``hash``) prints 60600, as ``--small`` does. The original's default problem
  (11303 grid points per nuclide, 17 million lookups) has the published checksum 945990:
  ``--full`` runs it (the unionized index grid is 209 MB) and checks that too; on the host
  device of a 2-core machine (``--full --grid hash``) the kernel took 18 s and the NumPy
  check 2 more minutes.
- The original only prints whether its hash matches the published one; here every
  lookup's verification value is compared with a NumPy computation of the same lookups
  that searches each nuclide's energy grid directly (``np.searchsorted``) instead of
  using the acceleration grids, summing the cross sections in the same order. On a GPU,
  whose compiler may fuse multiply-adds, a lookup whose two largest cross sections are
  equal to 1e-12 may pick the other one; such near-ties are reported, not counted as
  failures.

Run::

    python examples/xsbench.py                        # 1 million lookups, 1000 grid points
    python examples/xsbench.py --small                # CI size (20000 lookups, 60 grid points)
    python examples/xsbench.py --grid hash --lookups 200000
    ACC_DEVICE_TYPE=emulated python examples/xsbench.py --small
    python examples/xsbench.py --full                 # the original's default problem

Run on ``host`` and ``emulated``, and on ``cuda`` only under Numba's CUDA simulator
(``PYACC_TESTING_FAKE_CUDA=1 NUMBA_ENABLE_CUDASIM=1``, a few hundred lookups); the kernel
compiles to sm_90 PTX with numba-cuda-mlir and numba-cuda, but has not run on a GPU.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np

import pyacc as acc

# The generator's uint64 arithmetic wraps around, as C's unsigned arithmetic does. Compiled
# kernels wrap silently; where a kernel runs as Python on NumPy scalars (the CUDA simulator,
# PYACC_DISABLE_JIT=1) NumPy warns at each wrap-around: that is intended here.
warnings.filterwarnings("ignore", r"overflow encountered in scalar (multiply|add)", RuntimeWarning)

# Grid types
UNIONIZED = 0
NUCLIDE = 1
HASH = 2
GRID_TYPES = {"unionized": UNIONIZED, "nuclide": NUCLIDE, "hash": HASH}

# Starting Seed
STARTING_SEED = 1070

# Published checksums of the event-based H-M small and large problems (io.c)
PUBLISHED_CHECKSUM = {"small": 945990, "large": 952131}

# typedef struct { double energy, total_xs, ...; } NuclideGridPoint;
NuclideGridPoint = np.dtype([("energy", np.float64), ("total_xs", np.float64),
                             ("elastic_xs", np.float64), ("absorbtion_xs", np.float64),
                             ("fission_xs", np.float64), ("nu_fission_xs", np.float64)])


@dataclass
class Inputs:
    """The members of the original's ``Inputs`` the simulation reads."""
    n_isotopes: int
    n_gridpoints: int
    lookups: int
    HM: str
    grid_type: int     # 0: Unionized Grid (default)    1: Nuclide Grid    2: Hash
    hash_bins: int


@dataclass
class SimulationData:
    num_nucs: np.ndarray                   # Length = length_num_nucs;
    concs: np.ndarray                      # Length = length_concs
    mats: np.ndarray                       # Length = length_mats
    unionized_energy_array: np.ndarray     # Length = length_unionized_energy_array
    index_grid: np.ndarray                 # Length = length_index_grid
    nuclide_grid: np.ndarray               # Length = length_nuclide_grid (NuclideGridPoint records)
    length_num_nucs: int
    length_concs: int
    length_mats: int
    length_unionized_energy_array: int
    length_index_grid: int
    length_nuclide_grid: int
    max_num_nucs: int


# ==========================================================================================
# Simulation.c
# ==========================================================================================

@acc.parallel_loop(
    "copyin( SD) "
    "copyin( SD.max_num_nucs) "
    "copyin( SD.num_nucs[0:SD.length_num_nucs]) "
    "copyin( SD.concs[0:SD.length_concs]) "
    "copyin( SD.mats[0:SD.length_mats]) "
    "copyin( SD.unionized_energy_array[0:SD.length_unionized_energy_array]) "
    "copyin( SD.index_grid[0:SD.length_index_grid]) "
    "copyin( SD.nuclide_grid[0:SD.length_nuclide_grid]) "
    "copyout( verification[0:in_.lookups])")
def event_based_lookups(in_, SD, verification):
    for i in range(in_.lookups):
        # Set the initial seed value
        seed = np.uint64(STARTING_SEED)

        # Forward seed to lookup index (we need 2 samples per lookup)
        seed = fast_forward_LCG(seed, np.uint64(2 * i))

        # Randomly pick an energy and material for the particle
        p_energy, seed = LCG_random_double(seed)
        mat, seed = pick_mat(seed)

        macro_xs_vector = np.zeros(5)

        # Perform macroscopic Cross Section Lookup
        calculate_macro_xs(
            p_energy,                   # Sampled neutron energy (in lethargy)
            mat,                        # Sampled material type index neutron is in
            in_.n_isotopes,             # Total number of isotopes in simulation
            in_.n_gridpoints,           # Number of gridpoints per isotope in simulation
            SD.num_nucs,                # 1-D array with number of nuclides per material
            SD.concs,                   # Flattened 2-D array with concentration of each nuclide
                                        #   in each material
            SD.unionized_energy_array,  # 1-D Unionized energy array
            SD.index_grid,              # Flattened 2-D grid holding indices into nuclide grid
                                        #   for each unionized energy level
            SD.nuclide_grid,            # Flattened 2-D grid holding energy levels and XS_data
                                        #   for all nuclides in simulation
            SD.mats,                    # Flattened 2-D array with nuclide indices defining
                                        #   composition of each type of material
            macro_xs_vector,            # 1-D array with result of the macroscopic cross section
                                        #   (5 different reaction channels)
            in_.grid_type,              # Lookup type (nuclide, hash, or unionized)
            in_.hash_bins,              # Number of hash bins used (if using hash lookup type)
            SD.max_num_nucs)            # Maximum number of nuclides present in any material

        # For verification, and to prevent the compiler from optimizing all work out, we
        # interrogate the returned macro_xs_vector array to find its maximum value index,
        # then store that index (plus one) as this lookup's verification value.
        max_ = -1.0
        max_idx = 0
        for j in range(5):
            if macro_xs_vector[j] > max_:
                max_ = macro_xs_vector[j]
                max_idx = j
        verification[i] = max_idx + 1


def run_event_based_simulation(in_: Inputs, SD: SimulationData) -> tuple[int, np.ndarray]:
    """The original's function of that name: (validation hash, per-lookup values)."""
    verification = np.zeros(in_.lookups, dtype=np.uint64)   # unsigned long long *
    event_based_lookups(in_, SD, verification)
    # Reduce validation hash on the host
    validation_hash = int(verification.sum())
    return validation_hash, verification


@acc.routine
def calculate_micro_xs(p_energy, nuc, n_isotopes, n_gridpoints, egrid, index_data,
                       nuclide_grids, idx, xs_vector, grid_type, hash_bins):
    """Calculates the microscopic cross section for a given nuclide & energy."""
    # If using only the nuclide grid, we must perform a binary search
    # to find the energy location in this particular nuclide's grid.
    if grid_type == NUCLIDE:
        # Perform binary search on the Nuclide Grid to find the index
        idx = grid_search_nuclide(n_gridpoints, p_energy, nuclide_grids[nuc * n_gridpoints:],
                                  0, n_gridpoints - 1)
        # pull ptr from nuclide grid and check to ensure that
        # we're not reading off the end of the nuclide's grid
        if idx == n_gridpoints - 1:
            low = nuc * n_gridpoints + idx - 1
        else:
            low = nuc * n_gridpoints + idx
    elif grid_type == UNIONIZED:
        # Unionized Energy Grid - we already know the index, no binary search needed.
        # pull ptr from energy grid and check to ensure that
        # we're not reading off the end of the nuclide's grid
        if index_data[idx * n_isotopes + nuc] == n_gridpoints - 1:
            low = nuc * n_gridpoints + index_data[idx * n_isotopes + nuc] - 1
        else:
            low = nuc * n_gridpoints + index_data[idx * n_isotopes + nuc]
    else:  # Hash grid
        # load lower bounding index
        u_low = index_data[idx * n_isotopes + nuc]
        # Determine higher bounding index
        if idx == hash_bins - 1:
            u_high = n_gridpoints - 1
        else:
            u_high = index_data[(idx + 1) * n_isotopes + nuc] + 1
        # Check edge cases to make sure energy is actually between these
        # Then, if things look good, search for gridpoint in the nuclide grid
        # within the lower and higher limits we've calculated.
        e_low = nuclide_grids[nuc * n_gridpoints + u_low].energy
        e_high = nuclide_grids[nuc * n_gridpoints + u_high].energy
        if p_energy <= e_low:
            lower = 0
        elif p_energy >= e_high:
            lower = n_gridpoints - 1
        else:
            lower = grid_search_nuclide(n_gridpoints, p_energy, nuclide_grids[nuc * n_gridpoints:],
                                        u_low, u_high)
        if lower == n_gridpoints - 1:
            low = nuc * n_gridpoints + lower - 1
        else:
            low = nuc * n_gridpoints + lower

    high = low + 1

    # calculate the re-useable interpolation factor
    # (high->x is nuclide_grids[high].x)
    f = ((nuclide_grids[high].energy - p_energy)
         / (nuclide_grids[high].energy - nuclide_grids[low].energy))
    # Total XS
    xs_vector[0] = (nuclide_grids[high].total_xs
                    - f * (nuclide_grids[high].total_xs - nuclide_grids[low].total_xs))
    # Elastic XS
    xs_vector[1] = (nuclide_grids[high].elastic_xs
                    - f * (nuclide_grids[high].elastic_xs - nuclide_grids[low].elastic_xs))
    # Absorbtion XS
    xs_vector[2] = (nuclide_grids[high].absorbtion_xs
                    - f * (nuclide_grids[high].absorbtion_xs - nuclide_grids[low].absorbtion_xs))
    # Fission XS
    xs_vector[3] = (nuclide_grids[high].fission_xs
                    - f * (nuclide_grids[high].fission_xs - nuclide_grids[low].fission_xs))
    # Nu Fission XS
    xs_vector[4] = (nuclide_grids[high].nu_fission_xs
                    - f * (nuclide_grids[high].nu_fission_xs - nuclide_grids[low].nu_fission_xs))


@acc.routine
def calculate_macro_xs(p_energy, mat, n_isotopes, n_gridpoints, num_nucs, concs, egrid,
                       index_data, nuclide_grids, mats, macro_xs_vector, grid_type, hash_bins,
                       max_num_nucs):
    """Calculates macroscopic cross section based on a given material & energy."""
    idx = -1

    # cleans out macro_xs_vector
    for k in range(5):
        macro_xs_vector[k] = 0.0

    # If we are using the unionized energy grid (UEG), we only
    # need to perform 1 binary search per macroscopic lookup.
    # If we are using the nuclide grid search, it will have to be
    # done inside of the "calculate_micro_xs" function for each different
    # nuclide in the material.
    if grid_type == UNIONIZED:
        idx = grid_search(n_isotopes * n_gridpoints, p_energy, egrid)
    elif grid_type == HASH:
        du = 1.0 / hash_bins
        idx = int(p_energy / du)

    # Once we find the pointer array on the UEG, we can pull the data
    # from the respective nuclide grids, as well as the nuclide
    # concentration data for the material
    # Each nuclide from the material needs to have its micro-XS array
    # looked up & interpolatied (via calculate_micro_xs). Then, the
    # micro XS is multiplied by the concentration of that nuclide
    # in the material, and added to the total macro XS array.
    for j in range(num_nucs[mat]):
        xs_vector = np.empty(5)
        p_nuc = mats[mat * max_num_nucs + j]
        conc = concs[mat * max_num_nucs + j]
        calculate_micro_xs(p_energy, p_nuc, n_isotopes, n_gridpoints, egrid, index_data,
                           nuclide_grids, idx, xs_vector, grid_type, hash_bins)
        for k in range(5):
            macro_xs_vector[k] += xs_vector[k] * conc


@acc.routine
def grid_search(n, quarry, A):
    """binary search for energy on unionized energy grid; returns lower index"""
    lowerLimit = 0
    upperLimit = n - 1
    length = upperLimit - lowerLimit
    while length > 1:
        examinationPoint = lowerLimit + (length // 2)
        if A[examinationPoint] > quarry:
            upperLimit = examinationPoint
        else:
            lowerLimit = examinationPoint
        length = upperLimit - lowerLimit
    return lowerLimit


@acc.routine
def grid_search_nuclide(n, quarry, A, low, high):
    """binary search for energy on nuclide energy grid"""
    lowerLimit = low
    upperLimit = high
    length = upperLimit - lowerLimit
    while length > 1:
        examinationPoint = lowerLimit + (length // 2)
        if A[examinationPoint].energy > quarry:
            upperLimit = examinationPoint
        else:
            lowerLimit = examinationPoint
        length = upperLimit - lowerLimit
    return lowerLimit


@acc.routine
def pick_mat(seed):
    """picks a material based on a probabilistic distribution; returns (material, seed)"""
    # I have a nice spreadsheet supporting these numbers. They are
    # the fractions (by volume) of material in the core. Not a
    # *perfect* approximation of where XS lookups are going to occur,
    # but this will do a good job of biasing the system nonetheless.
    dist = np.empty(12)
    dist[0] = 0.140     # fuel
    dist[1] = 0.052     # cladding
    dist[2] = 0.275     # cold, borated water
    dist[3] = 0.134     # hot, borated water
    dist[4] = 0.154     # RPV
    dist[5] = 0.064     # Lower, radial reflector
    dist[6] = 0.066     # Upper reflector / top plate
    dist[7] = 0.055     # bottom plate
    dist[8] = 0.008     # bottom nozzle
    dist[9] = 0.015     # top nozzle
    dist[10] = 0.025    # top of fuel assemblies
    dist[11] = 0.013    # bottom of fuel assemblies

    roll, seed = LCG_random_double(seed)

    # makes a pick based on the distro
    for i in range(12):
        running = 0.0
        for j in range(i, 0, -1):
            running += dist[j]
        if roll < running:
            return i, seed
    return 0, seed


@acc.routine
def LCG_random_double(seed):
    """One step of the generator: (a double in [0, 1), the new seed)."""
    # LCG parameters
    m = np.uint64(9223372036854775808)  # 2^63
    a = np.uint64(2806196910506780709)
    c = np.uint64(1)
    seed = (a * seed + c) % m
    return np.float64(seed) / np.float64(m), seed


@acc.routine
def fast_forward_LCG(seed, n):
    """The generator's state ``n`` steps after ``seed`` (O(log n))."""
    # LCG parameters
    m = np.uint64(9223372036854775808)  # 2^63
    a = np.uint64(2806196910506780709)
    c = np.uint64(1)
    one = np.uint64(1)

    n = n % m
    a_new = np.uint64(1)
    c_new = np.uint64(0)
    while n > 0:
        if n & one:
            a_new *= a
            c_new = c_new * a + c
        c *= (a + one)
        a *= a
        n >>= one
    return (a_new * seed + c_new) % m


# ==========================================================================================
# GridInit.c and Materials.c, on the host with NumPy
# ==========================================================================================

LCG_M = 1 << 63
LCG_A = 2806196910506780709
LCG_C = 1


def lcg_doubles(seed: int, count: int) -> tuple[np.ndarray, int]:
    """``count`` successive ``LCG_random_double(&seed)`` values and the final seed, computed
    in blocks: each block is the previous block's last state jumped ahead 1..B steps."""
    block = max(1, min(count, 4096))
    jump_a = np.empty(block, dtype=np.uint64)
    jump_c = np.empty(block, dtype=np.uint64)
    a_k, c_k = 1, 0
    for k in range(block):                   # x_{k+1} = a_k x_0 + c_k (mod 2^63), exactly
        a_k, c_k = (LCG_A * a_k) % LCG_M, (LCG_A * c_k + LCG_C) % LCG_M
        jump_a[k], jump_c[k] = a_k, c_k
    states = np.empty(count, dtype=np.uint64)
    mask = np.uint64(LCG_M - 1)
    x0 = np.uint64(seed)
    for start in range(0, count, block):
        stop = min(start + block, count)
        # uint64 array products wrap modulo 2^64, a multiple of 2^63: masking gives mod 2^63
        states[start:stop] = (jump_a[:stop - start] * x0 + jump_c[:stop - start]) & mask
        x0 = states[stop - 1]
    return states.astype(np.float64) / float(LCG_M), int(x0) if count else seed


def load_num_nucs(n_isotopes: int) -> np.ndarray:
    """num_nucs represents the number of nuclides that each material contains"""
    # Material 0 is a special case (fuel). The H-M small reactor uses
    # 34 nuclides, while H-M larges uses 300.
    fuel = 34 if n_isotopes == 68 else 321
    return np.array([fuel, 5, 4, 4, 27, 21, 21, 21, 21, 21, 9, 9], dtype=np.int32)


def load_mats(num_nucs: np.ndarray, n_isotopes: int) -> tuple[np.ndarray, int]:
    """Assigns an array of nuclide ID's to each material: (mats, max_num_nucs)"""
    max_num_nucs = int(num_nucs.max())
    mats0_Sml = [58, 59, 60, 61, 40, 42, 43, 44, 45, 46, 1, 2, 3, 7,
                 8, 9, 10, 29, 57, 47, 48, 0, 62, 15, 33, 34, 52, 53,
                 54, 55, 56, 18, 23, 41]  # fuel
    # Large H-M has 300 fuel nuclides: the small ones, then 68, 69, ...
    mats0_Lrg = mats0_Sml + [68 + i for i in range(321 - 34)]
    mats1 = [63, 64, 65, 66, 67]  # cladding
    mats2 = [24, 41, 4, 5]  # cold borated water
    mats3 = [24, 41, 4, 5]  # hot borated water
    mats4 = [19, 20, 21, 22, 35, 36, 37, 38, 39, 25, 27, 28, 29,
             30, 31, 32, 26, 49, 50, 51, 11, 12, 13, 14, 6, 16, 17]  # RPV
    reflector = [24, 41, 4, 5, 19, 20, 21, 22, 35, 36, 37, 38, 39, 25,
                 49, 50, 51, 11, 12, 13, 14]
    mats5 = mats6 = mats7 = mats8 = mats9 = reflector  # reflectors, plates, nozzles
    mats10 = mats11 = [24, 41, 4, 5, 63, 64, 65, 66, 67]  # top / bottom of FA's
    materials = [mats0_Sml if n_isotopes == 68 else mats0_Lrg, mats1, mats2, mats3, mats4,
                 mats5, mats6, mats7, mats8, mats9, mats10, mats11]
    # the grid is allocated as a full square grid; the unused tail of each row is never read
    mats = np.zeros(12 * max_num_nucs, dtype=np.int32)
    for m, nuclides in enumerate(materials):
        mats[m * max_num_nucs:m * max_num_nucs + num_nucs[m]] = nuclides[:num_nucs[m]]
    return mats, max_num_nucs


def load_concs(num_nucs: np.ndarray, max_num_nucs: int) -> np.ndarray:
    """Randomizes the concentrations of all nuclides in a variety of materials"""
    seed = STARTING_SEED * STARTING_SEED
    concs = np.zeros(12 * max_num_nucs)
    for i in range(12):
        values, seed = lcg_doubles(seed, int(num_nucs[i]))
        concs[i * max_num_nucs:i * max_num_nucs + num_nucs[i]] = values
    return concs


def grid_init_do_not_profile(in_: Inputs) -> SimulationData:
    """GridInit.c: the nuclide grids, the acceleration grid of ``in_.grid_type`` and the
    material data, from the original's generator streams."""
    n_iso, n_g = in_.n_isotopes, in_.n_gridpoints
    # Initialize Nuclide Grid: six doubles per point from one stream (seed 42) ...
    length_nuclide_grid = n_iso * n_g
    values, _ = lcg_doubles(42, 6 * length_nuclide_grid)
    nuclide_grid = values.view(NuclideGridPoint).copy()
    # ... sorted so that each nuclide has data stored in ascending energy order
    per_nuclide = nuclide_grid.reshape(n_iso, n_g)
    order = np.argsort(per_nuclide["energy"], axis=1, kind="stable")
    nuclide_grid = np.take_along_axis(per_nuclide, order, axis=1).reshape(-1).view(np.recarray)
    energies = nuclide_grid["energy"].reshape(n_iso, n_g)

    unionized_energy_array = np.zeros(0)
    index_grid = np.zeros(0, dtype=np.int32)
    if in_.grid_type == UNIONIZED:
        # the union of all nuclide energies, sorted, and for each of them the interval of
        # every nuclide's grid that holds it: the original walks the grids incrementally
        # (idx_low[i]++ when the energy passes energy_high[i], stopping at n_g - 2); every
        # grid energy is in the union, so that is the last index at or below the energy
        unionized_energy_array = np.sort(nuclide_grid["energy"])
        index_grid = np.empty((length_nuclide_grid, n_iso), dtype=np.int32)
        for i in range(n_iso):
            below = np.searchsorted(energies[i], unionized_energy_array, side="right") - 1
            index_grid[:, i] = np.clip(below, 0, n_g - 2)
        index_grid = index_grid.reshape(-1)
    elif in_.grid_type == HASH:
        # for each of hash_bins energies e * du, grid_search_nuclide() in every nuclide
        du = 1.0 / in_.hash_bins
        energy = np.arange(in_.hash_bins) * du
        index_grid = np.empty((in_.hash_bins, n_iso), dtype=np.int32)
        for i in range(n_iso):
            below = np.searchsorted(energies[i], energy, side="right") - 1
            index_grid[:, i] = np.clip(below, 0, n_g - 2)
        index_grid = index_grid.reshape(-1)

    # Initialize Materials and Concentrations
    num_nucs = load_num_nucs(n_iso)
    mats, max_num_nucs = load_mats(num_nucs, n_iso)
    concs = load_concs(num_nucs, max_num_nucs)
    return SimulationData(
        num_nucs=num_nucs, concs=concs, mats=mats,
        unionized_energy_array=unionized_energy_array, index_grid=index_grid,
        nuclide_grid=nuclide_grid,
        length_num_nucs=12,  # There are always 12 materials in XSBench
        length_concs=len(concs), length_mats=len(mats),
        length_unionized_energy_array=len(unionized_energy_array),
        length_index_grid=len(index_grid), length_nuclide_grid=length_nuclide_grid,
        max_num_nucs=max_num_nucs)


# ==========================================================================================
# The check: the same lookups in NumPy, searching each nuclide's grid directly
# ==========================================================================================

DIST = np.array([0.140, 0.052, 0.275, 0.134, 0.154, 0.064, 0.066, 0.055, 0.008, 0.015, 0.025, 0.013])


def numpy_reference(in_: Inputs, SD: SimulationData, chunk: int = 1 << 18) -> tuple[np.ndarray, np.ndarray]:
    """Per lookup: (the five macroscopic cross sections, the verification value)."""
    n_g = in_.n_gridpoints
    energies = SD.nuclide_grid["energy"].reshape(in_.n_isotopes, n_g)
    # pick_mat's thresholds, summed as it sums them (dist[i] + ... + dist[1]: never dist[0])
    thresholds = np.array([sum(DIST[j] for j in range(i, 0, -1)) if i else 0.0 for i in range(12)])
    macro = np.empty((in_.lookups, 5))
    for start in range(0, in_.lookups, chunk):
        lookup = np.arange(start, min(start + chunk, in_.lookups), dtype=np.uint64)
        seed = jump_ahead(np.full(lookup.shape, STARTING_SEED, dtype=np.uint64), 2 * lookup)
        p_energy, seed = lcg_step(seed)
        roll, _ = lcg_step(seed)
        # the first material whose threshold is above the roll, else 0
        above = roll[:, None] < thresholds[None, :]
        mat = np.where(above.any(axis=1), above.argmax(axis=1), 0)
        xs = np.zeros((len(lookup), 5))
        for j in range(SD.max_num_nucs):
            active = j < SD.num_nucs[mat]
            rows = np.nonzero(active)[0]
            nuc = SD.mats[mat[rows] * SD.max_num_nucs + j]
            conc = SD.concs[mat[rows] * SD.max_num_nucs + j]
            p = p_energy[rows]
            below = np.empty(len(rows), dtype=np.int64)
            for n in np.unique(nuc):
                these = nuc == n
                below[these] = np.searchsorted(energies[n], p[these], side="right") - 1
            low = nuc.astype(np.int64) * n_g + np.clip(below, 0, n_g - 2)
            lo, hi = SD.nuclide_grid[low], SD.nuclide_grid[low + 1]
            f = (hi["energy"] - p) / (hi["energy"] - lo["energy"])
            for k, name in enumerate(NuclideGridPoint.names[1:]):
                xs[rows, k] += (hi[name] - f * (hi[name] - lo[name])) * conc
        macro[start:start + len(lookup)] = xs
    # the first index of the largest value, as the kernel's loop with ">" picks it
    return macro, (macro.argmax(axis=1) + 1).astype(np.uint64)


def lcg_step(seed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    seed = (seed * np.uint64(LCG_A) + np.uint64(LCG_C)) & np.uint64(LCG_M - 1)
    return seed.astype(np.float64) / float(LCG_M), seed


def jump_ahead(seed: np.ndarray, n: np.ndarray) -> np.ndarray:
    """fast_forward_LCG on arrays (uint64 products wrap modulo 2^64; masked to mod 2^63)."""
    mask = np.uint64(LCG_M - 1)
    a = np.full(seed.shape, LCG_A, dtype=np.uint64)
    c = np.full(seed.shape, LCG_C, dtype=np.uint64)
    a_new = np.ones(seed.shape, dtype=np.uint64)
    c_new = np.zeros(seed.shape, dtype=np.uint64)
    n = n.copy()
    while (n > 0).any():
        odd = (n & np.uint64(1)).astype(bool)
        a_new = np.where(odd, a_new * a, a_new)
        c_new = np.where(odd, c_new * a + c, c_new)
        c = c * (a + np.uint64(1))
        a = a * a
        n >>= np.uint64(1)
    return (a_new * seed + c_new) & mask


def check(in_: Inputs, SD: SimulationData, verification: np.ndarray) -> tuple[list[str], int]:
    """(problems, near-ties where another choice is as right)."""
    macro, expected = numpy_reference(in_, SD)
    differ = np.nonzero(verification != expected)[0]
    if len(differ) == 0:
        return [], 0
    got = verification[differ].astype(np.int64) - 1
    valid = (got >= 0) & (got < 5)
    best = macro[differ].max(axis=1)
    chosen = macro[differ, np.clip(got, 0, 4)]
    tie = valid & (np.abs(best - chosen) <= 1e-12 * np.abs(best))
    problems = []
    if not tie.all():
        first = differ[~tie][0]
        problems.append(f"{int((~tie).sum())} of {in_.lookups} lookups differ, the first lookup "
                        f"{first}: {int(verification[first])}, NumPy says {int(expected[first])}")
    return problems, int(tie.sum())


def transfer_summary(stats: dict) -> str:
    return (f"{stats['h2d_count']} to device ({stats['h2d_bytes']} B), "
            f"{stats['d2h_count']} to host ({stats['d2h_bytes']} B), "
            f"{stats['launch_count']} kernel launches")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", "-l", type=int, default=1_000_000)
    parser.add_argument("--gridpoints", "-g", type=int, default=1000, help="grid points per nuclide")
    parser.add_argument("--grid", "-G", choices=list(GRID_TYPES), default="unionized")
    parser.add_argument("--hash-bins", "-p", type=int, default=10000)
    parser.add_argument("--small", action="store_true", help="a quick run (20000 lookups, 60 grid points)")
    parser.add_argument("--full", action="store_true",
                        help="the original's default H-M small problem (17 million lookups, "
                             "11303 grid points), checked against its published checksum too")
    parser.add_argument("--device", default=None,
                        help="host, emulated or cuda (default: ACC_DEVICE_TYPE or the default device)")
    args = parser.parse_args(argv)
    if args.small:
        args.lookups, args.gridpoints = 20000, 60
    if args.full:
        args.lookups, args.gridpoints = 17_000_000, 11303
    if args.lookups < 1 or args.gridpoints < 2 or args.hash_bins < 1:
        parser.error("need --lookups ≥ 1, --gridpoints ≥ 2 and --hash-bins ≥ 1")
    if args.device:
        acc.set_device_type(args.device)

    in_ = Inputs(n_isotopes=68, n_gridpoints=args.gridpoints, lookups=args.lookups, HM="small",
                 grid_type=GRID_TYPES[args.grid], hash_bins=args.hash_bins)
    SD = grid_init_do_not_profile(in_)

    # compile the kernel before timing (the same member types, one lookup)
    run_event_based_simulation(Inputs(in_.n_isotopes, in_.n_gridpoints, 1, in_.HM,
                                      in_.grid_type, in_.hash_bins), SD)
    acc.reset_stats()
    start = time.perf_counter()
    validation_hash, verification = run_event_based_simulation(in_, SD)
    elapsed = time.perf_counter() - start
    stats = acc.stats()
    # Final Hash Step
    checksum = validation_hash % 999983

    print(f"XSBench event-based lookups, H-M {in_.HM}, {args.grid} grid, {in_.n_isotopes} nuclides "
          f"x {in_.n_gridpoints} grid points, {in_.lookups} lookups, on the {acc.get_device_type()} device")
    print(f"  time: {elapsed:.3f} s ({in_.lookups / elapsed:,.0f} lookups/s)   "
          f"transfers: {transfer_summary(stats)}")
    print(f"  verification checksum: {checksum}")

    problems, ties = check(in_, SD, verification)
    if ties:
        print(f"  {ties} near-tie lookups picked another of two equal cross sections")
    if args.full and not ties and checksum != PUBLISHED_CHECKSUM[in_.HM]:
        problems.append(f"checksum {checksum}, XSBench publishes {PUBLISHED_CHECKSUM[in_.HM]}")
    if problems:
        for problem in problems:
            print(f"check: FAILED — {problem}", file=sys.stderr)
        return 1
    if args.full:
        print(f"  the published checksum of this problem is {PUBLISHED_CHECKSUM[in_.HM]}")
    print("check: matches the NumPy reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
