"""What every kernel family needs to dispatch and launch: host or device, grid, stream."""

from __future__ import annotations

import math

import numpy as np

THREADS_PER_BLOCK = 256
# Enough blocks to fill every SM several times over; grid-stride loops cover the rest.
BLOCKS_PER_SM = 8
_FALLBACK_SM_COUNT = 16


def on_host(x) -> bool:
    """True for a NumPy array (run the CPU twin), False for a device array (run the kernel)."""
    return isinstance(x, np.ndarray)


def grid_1d(n: int, threads: int = THREADS_PER_BLOCK) -> tuple[int, int]:
    """``(blocks, threads)`` for a grid-stride loop over ``n`` items on the current device."""
    from numba import cuda

    sm_count = getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", _FALLBACK_SM_COUNT)
    blocks = max(1, min(math.ceil(n / threads), sm_count * BLOCKS_PER_SM))
    return blocks, threads


def stream_for(x):
    """The Numba stream to launch on: CuPy's current stream for a CuPy array, else default."""
    from numba import cuda

    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        return cuda.external_stream(cupy.cuda.get_current_stream().ptr)
    return cuda.default_stream()


def like(x, shape, dtype):
    """A new zeroed array of ``shape``/``dtype`` in the same memory (host, CuPy, Numba) as ``x``."""
    if on_host(x):
        return np.zeros(shape, dtype=dtype)
    if type(x).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy.zeros(shape, dtype=dtype)
    from numba import cuda

    return cuda.to_device(np.zeros(shape, dtype=dtype))
