"""2-D heat diffusion: explicit 5-point stencil steps, on the GPU or on CPU cores.

One explicit step is ``u + alpha * (up + down + left + right - 4 * u)`` on the cells of a window;
every other cell keeps its value. ``heat_steps`` runs ``steps`` of them with double buffering
(each step reads only the previous step's values) and dispatches on its input:

- a device array (CuPy, Numba, anything with ``__cuda_array_interface__``): ``_step_kernel``,
  one launch per step on a 2-D grid of 32 x 8 thread blocks (32 threads along a row, so that
  reads and writes coalesce), ping-ponging between two device buffers. Each thread reads the
  5 cells of its stencil and writes 1 cell, all in one pass. The CuPy slicing expression of a
  step (``heat_step_numpy`` on a CuPy array) instead launches about eight element-wise kernels
  per step, each reading and writing a full-size temporary (roughly 20 reads and writes per
  cell, plus an allocation per temporary and per step); here nothing is allocated after the two
  buffers, and cells outside the window are copied by the same pass rather than by a separate
  copy of the input.
- a NumPy array: ``_step_host``, the ``numba.njit(parallel=True)`` twin, the same fused pass with
  the rows split across cores.

The window is what a Dask ``map_overlap`` block needs: ghost cells outside the global domain are
held at their value (zero for a zero boundary) by leaving them out of the window, and the
outermost ring of a block, whose values go stale, is always left out (the caller trims it).
"""

from __future__ import annotations

import math
import operator

import numba
import numpy as np
from numba import cuda

from daskgpu.kernels import launch

__all__ = ["heat_step_numpy", "heat_steps", "heat_steps_in_place"]

# Threads per block along columns (x, the contiguous axis) and rows (y).
BLOCK = (32, 8)
_MAX_GRID_Y = 65_535
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@numba.njit(parallel=True, cache=True)
def _step_host(src, dst, alpha, four, r0, r1, c0, c1):  # pragma: no cover - compiled
    """One step from ``src`` into every cell of ``dst``: stencil inside the window, copy outside."""
    n, m = src.shape
    for i in numba.prange(n):
        if i < r0 or i >= r1:
            for j in range(m):
                dst[i, j] = src[i, j]
        else:
            for j in range(c0):
                dst[i, j] = src[i, j]
            for j in range(c0, c1):
                c = src[i, j]
                dst[i, j] = c + alpha * (
                    src[i - 1, j] + src[i + 1, j] + src[i, j - 1] + src[i, j + 1] - four * c
                )
            for j in range(c1, m):
                dst[i, j] = src[i, j]


@cuda.jit
def _step_kernel(src, dst, alpha, four, r0, r1, c0, c1):  # pragma: no cover - compiled
    """One step from ``src`` into every cell of ``dst`` (2-D grid-stride loop, x along columns)."""
    j0, i0 = cuda.grid(2)
    sj, si = cuda.gridsize(2)
    n, m = dst.shape
    for i in range(i0, n, si):
        for j in range(j0, m, sj):
            c = src[i, j]
            if r0 <= i and i < r1 and c0 <= j and j < c1:
                dst[i, j] = c + alpha * (
                    src[i - 1, j] + src[i + 1, j] + src[i, j - 1] + src[i, j + 1] - four * c
                )
            else:
                dst[i, j] = c


def _shape_dtype(u) -> tuple[tuple[int, ...], np.dtype]:
    shape = tuple(u.shape)
    if len(shape) != 2:
        raise ValueError(f"heat diffusion needs a 2-D array, got shape {shape}")
    dtype = np.dtype(u.dtype)
    if dtype not in _DTYPES:
        raise TypeError(f"heat diffusion needs float32 or float64, got {dtype}")
    return shape, dtype


def _check_alpha(alpha) -> float:
    alpha = float(alpha)
    if not 0.0 <= alpha <= 0.25:
        raise ValueError(
            f"alpha must be between 0 and 0.25, got {alpha}: the explicit scheme is unstable "
            "above 0.25"
        )
    return alpha


def _clip_window(window, shape) -> tuple[int, int, int, int]:
    """``window`` (default: all but the outermost ring) clipped to leave the ring out.

    An empty window comes back as ``(0, 0, 0, 0)``.
    """
    n, m = shape
    if window is None:
        window = (1, n - 1, 1, m - 1)
    try:
        r0, r1, c0, c1 = (operator.index(w) for w in window)
    except (TypeError, ValueError):
        raise ValueError(
            f"window must be four integers (r0, r1, c0, c1), got {window!r}"
        ) from None
    r0, r1 = max(r0, 1), min(r1, n - 1)
    c0, c1 = max(c0, 1), min(c1, m - 1)
    if r1 <= r0 or c1 <= c0:
        return 0, 0, 0, 0
    return r0, r1, c0, c1


def heat_step_numpy(u, alpha: float, window: tuple[int, int, int, int] | None = None):
    """One explicit heat-diffusion step by array slicing: the reference for ``heat_steps``.

    Parameters
    ----------
    u : numpy.ndarray
        2-D float32 or float64 grid (a CuPy array works too); not modified.
    alpha : float
        Diffusion number ``D * dt / dx**2``, between 0 and 0.25; cast to ``u``'s dtype.
    window : tuple of int, optional
        ``(r0, r1, c0, c1)``: only rows ``r0 <= i < r1`` and columns ``c0 <= j < c1`` are
        updated, clipped so that the outermost ring never is. Default: all but the ring.

    Returns
    -------
    numpy.ndarray
        A new C-ordered array of ``u``'s shape and dtype.
    """
    shape, dtype = _shape_dtype(u)
    a = dtype.type(_check_alpha(alpha))
    four = dtype.type(4)
    r0, r1, c0, c1 = _clip_window(window, shape)
    out = u.copy(order="C")
    if r1 > r0:
        c = u[r0:r1, c0:c1]
        out[r0:r1, c0:c1] = c + a * (
            u[r0 - 1 : r1 - 1, c0:c1]
            + u[r0 + 1 : r1 + 1, c0:c1]
            + u[r0:r1, c0 - 1 : c1 - 1]
            + u[r0:r1, c0 + 1 : c1 + 1]
            - four * c
        )
    return out


def heat_steps(
    u, alpha: float, steps: int, window: tuple[int, int, int, int] | None = None
):
    """``steps`` explicit 5-point heat-diffusion steps on the cells of ``window``.

    ``u_new[i, j] = u[i, j] + alpha * (u[i-1, j] + u[i+1, j] + u[i, j-1] + u[i, j+1] - 4*u[i, j])``
    inside the window, each step reading only the previous step's values; cells outside the
    window keep their values in every step. A NumPy array runs the parallel CPU twin; a device
    array launches the CUDA kernel on its stream (see the module docstring).

    Parameters
    ----------
    u : numpy.ndarray or device array
        2-D float32 or float64 grid; not modified.
    alpha : float
        Diffusion number ``D * dt / dx**2``, between 0 and 0.25; cast to ``u``'s dtype, in which
        all arithmetic is done.
    steps : int
        Number of steps, at least 0 (0 returns a copy).
    window : tuple of int, optional
        ``(r0, r1, c0, c1)``: only rows ``r0 <= i < r1`` and columns ``c0 <= j < c1`` are
        updated, clipped so that the outermost ring never is (``r0=0`` acts as 1).
        Default ``(1, n-1, 1, m-1)``: all but the ring.

    Returns
    -------
    numpy.ndarray or device array
        A new array of ``u``'s shape and dtype, in the same memory as ``u`` (C-ordered).

    Raises
    ------
    ValueError
        ``u`` not 2-D, ``steps`` negative, ``alpha`` outside [0, 0.25], or a malformed window.
    TypeError
        ``u`` neither float32 nor float64.
    """
    shape, dtype = _shape_dtype(u)
    a = dtype.type(_check_alpha(alpha))
    four = dtype.type(4)
    steps = operator.index(steps)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    r0, r1, c0, c1 = _clip_window(window, shape)
    if launch.on_host(u):
        with launch.worker_threads():
            return _heat_steps_host(u, a, four, steps, r0, r1, c0, c1)
    return _heat_steps_device(u, a, four, steps, r0, r1, c0, c1)


def heat_steps_in_place(u, scratch, alpha: float, steps: int,
                        window: tuple[int, int, int, int] | None = None):
    """``heat_steps`` in two buffers the caller owns: nothing is allocated.

    The steps ping-pong between ``u`` and ``scratch``: each step writes every cell of the other
    buffer (the stencil inside the window, a copy outside it), so after an even number of steps
    the result is in ``u``, after an odd number in ``scratch``. A caller that evolves a block
    with its halo (a Dask block) fills ``u`` once and reuses both buffers for all its steps.

    Parameters
    ----------
    u : numpy.ndarray or device array
        2-D float32 or float64 grid, C-contiguous; overwritten.
    scratch : numpy.ndarray or device array
        Same shape, dtype and memory as ``u``, C-contiguous; its contents are ignored.
    alpha, steps, window
        As for :func:`heat_steps`.

    Returns
    -------
    numpy.ndarray or device array
        ``u`` or ``scratch``, whichever holds the grid after ``steps`` steps.

    Raises
    ------
    ValueError
        As for :func:`heat_steps`, and for buffers that differ in shape or dtype or are not
        C-contiguous.
    """
    shape, dtype = _shape_dtype(u)
    if tuple(scratch.shape) != shape or np.dtype(scratch.dtype) != dtype:
        raise ValueError(f"scratch must match u ({shape}, {dtype}), got "
                         f"({tuple(scratch.shape)}, {np.dtype(scratch.dtype)})")
    a = dtype.type(_check_alpha(alpha))
    four = dtype.type(4)
    steps = operator.index(steps)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    r0, r1, c0, c1 = _clip_window(window, shape)
    if steps == 0 or r1 == r0:
        return u
    if launch.on_host(u):
        if not (u.flags.c_contiguous and scratch.flags.c_contiguous):
            raise ValueError("u and scratch must be C-contiguous")
        with launch.worker_threads():
            src, dst = u, scratch
            for _ in range(steps):
                _step_host(src, dst, a, four, r0, r1, c0, c1)
                src, dst = dst, src
        return src
    stream = launch.stream_for(u)
    grid = _grid(shape)
    views = ((u, launch.to_numba(u)), (scratch, launch.to_numba(scratch)))
    if not all(view.is_c_contiguous() for _, view in views):
        raise ValueError("u and scratch must be C-contiguous")
    src, dst = views
    for _ in range(steps):
        _step_kernel[grid, BLOCK, stream](src[1], dst[1], a, four, r0, r1, c0, c1)
        src, dst = dst, src
    return src[0]


def _heat_steps_host(u, a, four, steps, r0, r1, c0, c1):
    if steps == 0 or r1 == r0:
        return u.copy(order="C")
    # One layout (C) for the compiled twin; a transposed or strided block is copied once.
    src = np.ascontiguousarray(u)
    dst = np.empty(u.shape, u.dtype)
    _step_host(src, dst, a, four, r0, r1, c0, c1)  # step 1 reads u itself: no copy of u
    if steps > 1:
        src, dst = dst, np.empty(u.shape, u.dtype)
        for _ in range(steps - 1):
            _step_host(src, dst, a, four, r0, r1, c0, c1)
            src, dst = dst, src
        dst = src
    return dst


def _grid(shape) -> tuple[int, int]:
    n, m = shape
    return (
        max(1, math.ceil(m / BLOCK[0])),
        max(1, min(math.ceil(n / BLOCK[1]), _MAX_GRID_Y)),
    )


def _heat_steps_device(u, a, four, steps, r0, r1, c0, c1):
    stream = launch.stream_for(u)
    first = launch.like(u, u.shape, u.dtype)
    if u.size == 0:
        return first
    grid = _grid(u.shape)
    if steps == 0:
        r0 = r1 = c0 = c1 = 0  # an empty window: the kernel is a copy
    # Each buffer becomes a Numba array once, not at every launch (see launch.to_numba).
    first_view = launch.to_numba(first)
    # Step 1 reads u and writes every cell of the first buffer, so u is never copied first.
    _step_kernel[grid, BLOCK, stream](launch.to_numba(u), first_view, a, four, r0, r1, c0, c1)
    if steps <= 1 or r1 == r0:
        return first
    second = launch.like(u, u.shape, u.dtype)
    src, dst = (first, first_view), (second, launch.to_numba(second))
    for _ in range(steps - 1):
        _step_kernel[grid, BLOCK, stream](src[1], dst[1], a, four, r0, r1, c0, c1)
        src, dst = dst, src
    return src[0]
