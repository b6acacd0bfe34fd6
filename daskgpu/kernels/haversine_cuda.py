"""The CUDA half of :mod:`daskgpu.kernels.haversine`: the fused kernel and its device function.

In a module of its own so that importing the host half (the client, CPU workers) does not load
numba.cuda; :func:`daskgpu.kernels.haversine.haversine_km` imports it for device arrays only.
"""

from __future__ import annotations

from numba import cuda

from daskgpu.kernels.haversine import distance

__all__ = ["distance_gpu", "haversine_kernel"]

distance_gpu = cuda.jit(device=True, inline=True)(distance)


@cuda.jit
def haversine_kernel(lat1, lon1, lat2, lon2, out):  # pragma: no cover - compiled
    """One grid-stride pass: 4 reads and 1 write per point."""
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = distance_gpu(lat1[i], lon1[i], lat2[i], lon2[i])
