"""One Lloyd pass of k-means: nearest centroids, per-centroid sums and counts, and the inertia.

``kmeans_pass(x, centroids)`` reads ``n`` points (rows of ``x``, ``d`` features) once. For
each point it computes the squared Euclidean distance to each of the ``k`` centroids,
``sum_f (x[i, f] - c[j, f])^2`` in the data's dtype, picks the nearest (a tie goes to the
lowest centroid index: the comparison is strict, in index order), and adds the point (in
float64) to its centroid's sum, 1 to its count and the distance (in float64) to the inertia.
It returns the ``k x d`` sums, the ``k`` counts and the inertia, never a per-point label, so a
shard's answer to one iteration is tiny however many points it holds. A point with no finite
distance (a NaN or infinite coordinate) is left out of all three.

The CUDA kernel holds the centroids in shared memory; every block accumulates its sums,
counts and inertia in shared memory (shared-memory atomics, contended only within the block),
then adds them to the global result with one atomic each. Where ``k x d`` is over
``SHARED_CELLS`` a second kernel reads the centroids from global memory and adds to the global
result directly; both find a point's nearest centroid with one device function. The CPU twin
(``numba.njit(parallel=True)``) splits the points into contiguous slices, one private table
each, summed at the end in slice order: no races. It may add a distance's ``d`` terms in
another order than the kernel (vectorised); either way the rounding is that of a ``d``-term
sum, which a caller comparing assignments allows for.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import cuda, prange

from daskgpu.kernels import launch

__all__ = ["SHARED_CELLS", "kmeans_pass"]

#: Most ``k x d`` centroid entries a block holds in shared memory; more use global memory.
#: A global constant, as cuda.shared.array's shape must be: 2048 entries of the centroids
#: (float64 at most) and of the sums (float64) take 32 KiB of the 48 KiB a block may hold.
SHARED_CELLS = 2048
# Per-block counters are uint32: no block may see more points than this.
_MAX_PER_BLOCK = 2**31
# Below this many points per thread the CPU twin uses fewer threads (start-up dominates).
_MIN_PER_THREAD = 1 << 13


# reassoc: each distance's sum over the features may be vectorised (in an order fixed at compile
# time); contract: fused multiply-adds. Rounding stays within the usual bound of a d-term sum.
@numba.njit(parallel=True, cache=True, fastmath={"reassoc", "contract"})
def _pass_cpu(x, c, nchunks):  # pragma: no cover - compiled
    """CPU twin: ``nchunks`` contiguous slices of points, a private table each, then summed."""
    n, d = x.shape
    k = c.shape[0]
    sums = np.zeros((nchunks, k, d), np.float64)
    counts = np.zeros((nchunks, k), np.int64)
    inertia = np.zeros(nchunks, np.float64)
    step = (n + nchunks - 1) // nchunks
    zero = x.dtype.type(0)
    for t in prange(nchunks):
        mine = sums[t]
        for i in range(t * step, min(n, (t + 1) * step)):
            point = x[i]
            best = -1
            low = x.dtype.type(np.inf)
            for j in range(k):
                centroid = c[j]
                dist = zero
                for f in range(d):
                    diff = point[f] - centroid[f]
                    dist += diff * diff
                if dist < low:
                    low = dist
                    best = j
            if best < 0:
                continue
            counts[t, best] += 1
            inertia[t] += np.float64(low)
            row = mine[best]
            for f in range(d):
                row[f] += np.float64(point[f])
    total_sums = np.zeros((k, d), np.float64)
    total_counts = np.zeros(k, np.int64)
    total_inertia = np.zeros(1, np.float64)
    for c in range(nchunks):
        total_inertia[0] += inertia[c]
        for j in range(k):
            total_counts[j] += counts[c, j]
            for f in range(d):
                total_sums[j, f] += sums[c, j, f]
    return total_sums, total_counts, total_inertia


def _make_kernels(dtype):
    """The two CUDA kernels for points of ``dtype`` (distances computed in that dtype).

    Both take the centroids flat (``k * d``, row after row): the first copies them into
    shared memory, the second reads them where they are; both find each point's nearest
    with the one device function ``nearest``.
    """
    nearest = _make_nearest(dtype)
    return _make_shared_kernel(dtype, nearest), _make_wide_kernel(dtype, nearest)


def _make_nearest(dtype):
    """The device function: point ``i``'s nearest centroid, distances in ``dtype``."""
    inf = dtype(np.inf)

    @cuda.jit(device=True)
    def nearest(x, i, c, k, d):  # pragma: no cover - compiled
        """Point ``i``'s nearest of the ``k`` flat centroids ``c``: (index or -1, distance)."""
        best = -1
        low = inf
        for j in range(k):
            dist = dtype(0)
            for f in range(d):
                diff = x[i, f] - c[j * d + f]
                dist += diff * diff
            if dist < low:
                low = dist
                best = j
        return best, low

    return nearest


def _make_shared_kernel(dtype, nearest):
    """The kernel that holds the centroids and the block's partial sums in shared memory."""
    inf = dtype(np.inf)

    @cuda.jit
    def shared(x, centroids, sums, counts, inertia):  # pragma: no cover - compiled
        k, d = counts.shape[0], x.shape[1]
        s_c = cuda.shared.array(SHARED_CELLS, dtype)
        s_sums = cuda.shared.array(SHARED_CELLS, np.float64)
        s_counts = cuda.shared.array(SHARED_CELLS, np.uint32)  # k <= k x d
        s_inertia = cuda.shared.array(1, np.float64)
        tid = cuda.threadIdx.x
        for e in range(tid, k * d, cuda.blockDim.x):
            s_c[e] = centroids[e]
            s_sums[e] = 0.0
        for j in range(tid, k, cuda.blockDim.x):
            s_counts[j] = 0
        if tid == 0:
            s_inertia[0] = 0.0
        cuda.syncthreads()
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            best, low = nearest(x, i, s_c, k, d)
            if best >= 0 and low < inf:
                cuda.atomic.add(s_counts, best, 1)
                cuda.atomic.add(s_inertia, 0, np.float64(low))
                for f in range(d):
                    cuda.atomic.add(s_sums, best * d + f, np.float64(x[i, f]))
        cuda.syncthreads()
        for j in range(tid, k, cuda.blockDim.x):
            if s_counts[j] != 0:
                cuda.atomic.add(counts, j, np.int64(s_counts[j]))
        for e in range(tid, k * d, cuda.blockDim.x):
            if s_counts[e // d] != 0:
                cuda.atomic.add(sums, (e // d, e % d), s_sums[e])
        if tid == 0:
            cuda.atomic.add(inertia, 0, s_inertia[0])

    return shared


def _make_wide_kernel(dtype, nearest):
    """The kernel that reads the centroids where they are (too many for shared memory)."""
    inf = dtype(np.inf)

    @cuda.jit
    def wide(x, centroids, sums, counts, inertia):  # pragma: no cover - compiled
        k, d = counts.shape[0], x.shape[1]
        for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
            best, low = nearest(x, i, centroids, k, d)
            if best >= 0 and low < inf:
                cuda.atomic.add(counts, best, 1)
                cuda.atomic.add(inertia, 0, np.float64(low))
                for f in range(d):
                    cuda.atomic.add(sums, (best, f), np.float64(x[i, f]))

    return wide


_KERNELS: dict = {}


def _kernels(dtype):
    key = np.dtype(dtype)
    if key not in _KERNELS:
        _KERNELS[key] = _make_kernels(key.type)
    return _KERNELS[key]


def _checked(x, centroids) -> tuple[int, int, int]:
    if len(x.shape) != 2 or len(centroids.shape) != 2:
        raise ValueError(f"kmeans_pass needs 2-D points and centroids, got shapes {x.shape} "
                         f"and {centroids.shape}")
    n, d = x.shape
    k, dc = centroids.shape
    if dc != d:
        raise ValueError(f"kmeans_pass: points have {d} features, centroids {dc}")
    if k < 1:
        raise ValueError("kmeans_pass needs at least one centroid")
    if np.dtype(x.dtype) not in (np.float32, np.float64):
        raise TypeError(f"kmeans_pass needs float32 or float64 points, got {x.dtype}")
    return n, d, k


def _host(x, centroids, n: int):
    x = np.ascontiguousarray(x)
    c = np.ascontiguousarray(centroids, dtype=x.dtype)
    nchunks = max(1, min(numba.get_num_threads(), n // _MIN_PER_THREAD))
    return _pass_cpu(x, c, nchunks)


def _device(x, centroids, n: int, d: int, k: int):
    stream = launch.stream_for(x)
    sums = launch.like(x, (k, d), np.float64)
    counts = launch.like(x, (k,), np.int64)
    inertia = launch.like(x, (1,), np.float64)
    if n:
        shared, wide = _kernels(x.dtype)
        kernel = shared if k * d <= SHARED_CELLS else wide
        c = _on_device(x, np.ascontiguousarray(centroids, dtype=x.dtype).reshape(-1))
        blocks, threads = launch.grid_1d(n)
        blocks = max(blocks, math.ceil(n / _MAX_PER_BLOCK))
        kernel[blocks, threads, stream](
            launch.to_numba(x), launch.to_numba(c), launch.to_numba(sums),
            launch.to_numba(counts), launch.to_numba(inertia))
    return sums, counts, inertia


def _on_device(like, host: np.ndarray):
    """A device copy of ``host`` in ``like``'s kind of memory (CuPy's pool, or Numba's)."""
    if launch.is_cupy(like):
        import cupy

        return cupy.asarray(host)
    return cuda.to_device(host)


def kmeans_pass(x, centroids):
    """Sums, counts and inertia of one Lloyd pass of points ``x`` to their nearest centroids.

    Parameters
    ----------
    x : array
        ``(n, d)`` float32 or float64 points: NumPy (the parallel CPU twin runs) or on the
        device (CuPy or Numba arrays: the CUDA kernel runs on the current device and stream).
    centroids : numpy.ndarray
        ``(k, d)`` centroids on the host (tiny; copied to the device for a device ``x``),
        used in ``x``'s dtype.

    Returns
    -------
    sums : array
        float64 ``(k, d)``: the sum of the points nearest each centroid.
    counts : array
        int64 ``(k,)``: how many points are nearest each centroid (ties: the lowest index).
    inertia : array
        float64 ``(1,)``: the sum of the points' squared distances to their nearest centroid.

    All three in ``x``'s memory. Points with no finite distance are left out.

    Raises
    ------
    ValueError
        For shapes that are not ``(n, d)`` and ``(k, d)`` with ``k >= 1``.
    TypeError
        For points that are not float32 or float64.
    """
    centroids = np.asarray(centroids)
    n, d, k = _checked(x, centroids)
    if launch.on_host(x):
        with launch.worker_threads():
            return _host(x, centroids, n)
    return _device(x, centroids, n, d, k)
