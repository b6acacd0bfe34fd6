"""The CUDA half of :mod:`daskgpu.kernels.trips`: the fused kernel and its cell function.

In a module of its own so that importing the host half (the client, CPU workers) does not load
numba.cuda; :func:`daskgpu.kernels.trips.trip_sums` imports it for device arrays only.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from daskgpu.kernels.haversine_cuda import distance_gpu
from daskgpu.kernels.trips import CELLS, WIDTH, cell

__all__ = ["cell_gpu", "trip_sums_kernel"]

cell_gpu = cuda.jit(device=True, inline=True)(cell)


@cuda.jit
def trip_sums_kernel(ticks, per_hour, passengers, fare, lat1, lon1, lat2, lon2, counts,
                      sums):  # pragma: no cover - compiled
    """One pass; each block sums into shared memory, then adds its cells to the global table."""
    s_count = cuda.shared.array(CELLS, np.uint32)
    s_fare = cuda.shared.array(CELLS, np.float64)
    s_dist = cuda.shared.array(CELLS, np.float64)
    tid = cuda.threadIdx.x
    for j in range(tid, CELLS, cuda.blockDim.x):
        s_count[j] = 0
        s_fare[j] = 0.0
        s_dist[j] = 0.0
    cuda.syncthreads()
    for i in range(cuda.grid(1), ticks.shape[0], cuda.gridsize(1)):
        cell = cell_gpu(ticks[i], per_hour, passengers[i], fare[i])
        if cell >= 0:
            d = distance_gpu(lat1[i], lon1[i], lat2[i], lon2[i])
            if d > 0:
                cuda.atomic.add(s_count, cell, 1)
                cuda.atomic.add(s_fare, cell, np.float64(fare[i]))
                cuda.atomic.add(s_dist, cell, d)
    cuda.syncthreads()
    for j in range(tid, CELLS, cuda.blockDim.x):
        c = s_count[j]
        if c != 0:
            hour, slot = j // WIDTH, j % WIDTH
            cuda.atomic.add(counts, (hour, slot), np.int64(c))
            cuda.atomic.add(sums, (0, hour, slot), s_fare[j])
            cuda.atomic.add(sums, (1, hour, slot), s_dist[j])
