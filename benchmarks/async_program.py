"""An async-heavy program, miniWeather's shape: every kernel of a time step on one
queue, a ``wait`` per step (the ported atmospheric codes queue every kernel and
update); with the same loops in hand-written Numba (serial and ``prange``) beside it.
Used by ``bench_async.py``.

A 1-D advection step in x on an ``nz × nx`` grid with a halo of 2: fill the halo,
compute interface fluxes, tendencies, update the state.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

import pyacc as acc


@acc.parallel_loop(present=["state"])
def halo(state, nx, nz):
    for k in range(nz):
        state[k, 0] = state[k, nx]
        state[k, 1] = state[k, nx + 1]
        state[k, nx + 2] = state[k, 2]
        state[k, nx + 3] = state[k, 3]


@acc.parallel_loop(collapse=2, present=["state", "flux"])
def fluxes(state, flux, nx, nz):
    for k in range(nz):
        for i in range(nx + 1):
            mean = (-state[k, i] + 7.0 * state[k, i + 1] + 7.0 * state[k, i + 2] - state[k, i + 3]) / 12.0
            flux[k, i] = mean - 0.05 * (state[k, i + 2] - state[k, i + 1])


@acc.parallel_loop(collapse=2, present=["flux", "tend"])
def tendencies(flux, tend, nx, nz, dx):
    for k in range(nz):
        for i in range(nx):
            tend[k, i] = -(flux[k, i + 1] - flux[k, i]) / dx


@acc.parallel_loop(collapse=2, present=["state", "tend"])
def update(state, tend, nx, nz, dt):
    for k in range(nz):
        for i in range(nx):
            state[k, i + 2] = state[k, i + 2] + dt * tend[k, i]


def fields(nx, nz):
    x = np.linspace(0.0, 1.0, nx, endpoint=False)
    state = np.zeros((nz, nx + 4))
    state[:, 2:nx + 2] = np.exp(-((x - 0.5) / 0.1) ** 2)
    return state, np.zeros((nz, nx + 1)), np.zeros((nz, nx))


def run_pyacc(state, flux, tend, steps, dx, dt):
    with acc.data(copy=[state], create=[flux, tend]):
        async_steps(state, flux, tend, steps, dx, dt)


def async_steps(state, flux, tend, steps, dx, dt):
    """``steps`` steps of mapped arrays, every kernel on queue 1, a wait per step."""
    nz, nx = tend.shape
    for _ in range(steps):
        halo(state, nx, nz, async_=1)
        fluxes(state, flux, nx, nz, async_=1)
        tendencies(flux, tend, nx, nz, dx, async_=1)
        update(state, tend, nx, nz, dt, async_=1)
        acc.wait(1)


def sync_steps(state, flux, tend, steps, dx, dt):
    """The same steps with every kernel synchronous."""
    nz, nx = tend.shape
    for _ in range(steps):
        halo(state, nx, nz)
        fluxes(state, flux, nx, nz)
        tendencies(flux, tend, nx, nz, dx)
        update(state, tend, nx, nz, dt)


def _numba_step(parallel):
    loop = prange if parallel else range

    @njit(parallel=parallel, cache=False)
    def step(state, flux, tend, dx, dt):
        nz, nx = tend.shape
        for k in loop(nz):
            state[k, 0] = state[k, nx]
            state[k, 1] = state[k, nx + 1]
            state[k, nx + 2] = state[k, 2]
            state[k, nx + 3] = state[k, 3]
        for k in loop(nz):
            for i in range(nx + 1):
                mean = (-state[k, i] + 7.0 * state[k, i + 1] + 7.0 * state[k, i + 2] - state[k, i + 3]) / 12.0
                flux[k, i] = mean - 0.05 * (state[k, i + 2] - state[k, i + 1])
        for k in loop(nz):
            for i in range(nx):
                tend[k, i] = -(flux[k, i + 1] - flux[k, i]) / dx
        for k in loop(nz):
            for i in range(nx):
                state[k, i + 2] = state[k, i + 2] + dt * tend[k, i]

    return step


def _numba_kernels(parallel):
    """The four loops as four functions, called one after the other (the port's shape)."""
    loop = prange if parallel else range

    @njit(parallel=parallel)
    def halo_(state, nx, nz):
        for k in loop(nz):
            state[k, 0] = state[k, nx]
            state[k, 1] = state[k, nx + 1]
            state[k, nx + 2] = state[k, 2]
            state[k, nx + 3] = state[k, 3]

    @njit(parallel=parallel)
    def fluxes_(state, flux, nx, nz):
        for k in loop(nz):
            for i in range(nx + 1):
                mean = (-state[k, i] + 7.0 * state[k, i + 1] + 7.0 * state[k, i + 2] - state[k, i + 3]) / 12.0
                flux[k, i] = mean - 0.05 * (state[k, i + 2] - state[k, i + 1])

    @njit(parallel=parallel)
    def tendencies_(flux, tend, nx, nz, dx):
        for k in loop(nz):
            for i in range(nx):
                tend[k, i] = -(flux[k, i + 1] - flux[k, i]) / dx

    @njit(parallel=parallel)
    def update_(state, tend, nx, nz, dt):
        for k in loop(nz):
            for i in range(nx):
                state[k, i + 2] = state[k, i + 2] + dt * tend[k, i]

    def step(state, flux, tend, dx, dt):
        nz, nx = tend.shape
        halo_(state, nx, nz)
        fluxes_(state, flux, nx, nz)
        tendencies_(flux, tend, nx, nz, dx)
        update_(state, tend, nx, nz, dt)

    return step


#: one fused function a step, and the four loops as four functions, each serial and prange
NUMBA = {"fused serial": _numba_step(False), "fused prange": _numba_step(True),
         "4 functions serial": _numba_kernels(False), "4 functions prange": _numba_kernels(True)}


def run_numba(form, state, flux, tend, steps, dx, dt):
    step = NUMBA[form]
    for _ in range(steps):
        step(state, flux, tend, dx, dt)
