"""One Lloyd pass of k-means, and k-means||'s counts and cost: nearest centroids and totals.

``kmeans_pass(x, centroids)`` reads ``n`` points (rows of ``x``, ``d`` features) once. For
each point it computes the squared Euclidean distance to each of the ``k`` centroids,
``sum_f (x[i, f] - c[j, f])^2`` in the data's dtype, picks the nearest (a tie goes to the
lowest centroid index: the comparison is strict, in index order), and adds the point (in
float64) to its centroid's sum, 1 to its count and the distance (in float64) to the inertia.
It returns the ``k x d`` sums, the ``k`` counts and the inertia, never a per-point label, so a
shard's answer to one iteration is tiny however many points it holds.
``kmeans_counts_cost(x, candidates)`` is the same pass without the sums, for k-means||'s many
candidates: the counts and the cost (the inertia).

Which points count: exactly those whose coordinates are all finite (given finite centroids).
A float32 point far from every centroid (beyond about ``1.8e19``) has finite coordinates but
float32 squared distances that all overflow: its distances are computed again in float64,
where they cannot overflow, and it is counted with that nearest centroid and distance. A
point with a NaN or infinite coordinate has no finite distance in either and is left out of
all the totals.

The CUDA kernels (built per dtype and feature count ``d``, a compile-time constant):

- Each block stages a tile of its points through shared memory with coalesced loads
  (consecutive threads read consecutive elements of the tile's rows), and each thread copies
  its own point from the tile into a local array of ``d`` elements (registers, for a
  moderate ``d``), read by every distance. Tile rows are padded to an odd length, so the
  threads of a warp reading their rows hit distinct shared-memory banks.
- The pass kernel holds the centroids, the sums, and the counts in shared memory where they
  fit (``SHARED_BYTES`` a block); the sums' rows are padded to an odd length too, so the
  atomics of points nearest different centroids fall in different banks. Each block adds its
  totals to the global result once, at the end.
- Counts and inertia are reduced per warp: the lanes with the same nearest centroid are found
  with ``match_any_sync`` and one lane adds their number; the inertia is a ``shfl_down_sync``
  sum, one shared slot per warp. Every lane of a block runs the same tile loop, so every
  warp intrinsic sees a full warp.
- The counts-and-cost kernel streams the candidates through shared memory in tiles of up to
  ``CANDIDATE_TILE_ROWS`` rows, for any number of candidates; its counts go to global memory.
- The grid is sized from occupancy: the blocks one SM holds, computed from the device's
  limits (numba-cuda's device attributes) and the block's shared memory and register budget
  (``REGISTERS_PER_THREAD``; the kernels are compiled with that block count as
  ``launch_bounds``, so their registers fit), times the SM count. On an H200 the float32 pass
  at ``d = 32, k = 16`` runs 4 blocks of 256 threads an SM (40 KiB of shared memory and 64
  registers each, without spilling), where the previous fixed 8 blocks an SM did not fit.

Where not even a tile of 32 points fits (very many features), the points are read where they
are; where the centroids and sums do not fit, they are read and added in global memory.

The CPU twins (``numba.njit(parallel=True)``) split the points into contiguous slices, one
private table each, summed at the end in slice order: no races. Each point is measured against
four centroids at once (four independent sums, which the compiler interleaves), still compared
in index order. They may add a distance's ``d`` terms in another order than the kernels
(vectorised); either way the rounding is that of a ``d``-term sum, which a caller comparing
assignments allows for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
from numba import cuda, prange

from daskgpu.kernels import launch

__all__ = ["CANDIDATE_TILE_ROWS", "REGISTERS_PER_THREAD", "SHARED_BYTES", "kmeans_counts_cost",
           "kmeans_pass", "resident_blocks"]

#: Shared memory one block of these kernels may use (the static limit of every CUDA GPU).
SHARED_BYTES = 48 * 1024
#: Registers a thread is planned for: :func:`resident_blocks` counts the blocks an SM holds at
#: this many, and the kernels are compiled with those blocks as launch bounds, so the compiler
#: keeps each thread within ``registers per SM / (blocks x threads)`` (at least this many).
REGISTERS_PER_THREAD = 64
#: Most candidate rows the counts-and-cost kernel holds in shared memory at once.
CANDIDATE_TILE_ROWS = 64
#: Threads of a block at most (8 warps), and at least (one warp).
MAX_THREADS = 256
WARP = 32
# Per-block counters in shared memory are uint32: no block may see more points than this.
_MAX_PER_BLOCK = 2**31
# Below this many points per thread the CPU twins use fewer threads (start-up dominates).
_MIN_PER_THREAD = 1 << 13
_FULL_MASK = np.uint32(0xFFFFFFFF)
# An SM's limits where the device does not report them (Numba's simulator): sm_90's (H100,
# H200), in the names of numba-cuda's device attributes.
_SM90_LIMITS = {"MULTIPROCESSOR_COUNT": 132, "MAX_THREADS_PER_MULTIPROCESSOR": 2048,
                "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233_472,
                "RESERVED_SHARED_MEMORY_PER_BLOCK": 1024,
                "MAX_REGISTERS_PER_MULTIPROCESSOR": 65_536, "MAX_BLOCKS_PER_MULTIPROCESSOR": 32}


# --------------------------------------------------------------------------- CPU twins


# How many centroids the CPU twins measure a point against at once: four independent sums
# over the features, which the compiler interleaves (1.4x one at a time, at d = 32, k = 16).
_CPU_CENTROIDS_AT_ONCE = 4


@numba.njit(cache=True, fastmath={"reassoc", "contract"}, inline="always")
def _four_distances(point, c, j):  # pragma: no cover - compiled
    """Squared distances, in ``point``'s dtype, from ``point`` to rows ``j .. j + 3`` of ``c``."""
    s0 = s1 = s2 = s3 = point.dtype.type(0)
    for f in range(point.shape[0]):
        v = point[f]
        e0 = v - c[j, f]
        e1 = v - c[j + 1, f]
        e2 = v - c[j + 2, f]
        e3 = v - c[j + 3, f]
        s0 += e0 * e0
        s1 += e1 * e1
        s2 += e2 * e2
        s3 += e3 * e3
    return s0, s1, s2, s3


@numba.njit(cache=True, fastmath={"reassoc", "contract"}, inline="always")
def _distance(point, c, j):  # pragma: no cover - compiled
    dist = point.dtype.type(0)
    for f in range(point.shape[0]):
        diff = point[f] - c[j, f]
        dist += diff * diff
    return dist


@numba.njit(cache=True, fastmath={"reassoc", "contract"})
def _nearest_cpu(point, c):  # pragma: no cover - compiled
    """``(index, float64 distance)`` of ``point``'s nearest row of ``c``; ``(-1, inf)`` if none.

    Distances in ``point``'s dtype; where none is finite, again in float64 (an overflow of
    float32 squares has a finite float64 answer; a NaN or infinite coordinate has none).
    Centroids are compared in index order, strictly: a tie goes to the lowest index.
    """
    k = c.shape[0]
    best = -1
    low = point.dtype.type(np.inf)
    j = 0
    while j + _CPU_CENTROIDS_AT_ONCE <= k:
        s0, s1, s2, s3 = _four_distances(point, c, j)
        if s0 < low:
            low, best = s0, j
        if s1 < low:
            low, best = s1, j + 1
        if s2 < low:
            low, best = s2, j + 2
        if s3 < low:
            low, best = s3, j + 3
        j += _CPU_CENTROIDS_AT_ONCE
    for rest in range(j, k):
        dist = _distance(point, c, rest)
        if dist < low:
            low, best = dist, rest
    if best >= 0 or point.itemsize == 8:
        return best, np.float64(low)
    wide = np.inf
    for j in range(k):
        dist64 = 0.0
        for f in range(point.shape[0]):
            diff64 = np.float64(point[f]) - np.float64(c[j, f])
            dist64 += diff64 * diff64
        if dist64 < wide:
            wide = dist64
            best = j
    return best, wide


# reassoc: each distance's sum over the features may be vectorised (in an order fixed at compile
# time); contract: fused multiply-adds. Rounding stays within the usual bound of a d-term sum.
@numba.njit(parallel=True, cache=True, fastmath={"reassoc", "contract"})
def _pass_cpu(x, c, nchunks, with_sums):  # pragma: no cover - compiled
    """CPU twin: ``nchunks`` contiguous slices of points, a private table each, then summed.

    Without ``with_sums`` the sums stay zero (k-means||'s counts and cost).
    """
    n, d = x.shape
    k = c.shape[0]
    sums = np.zeros((nchunks, k, d if with_sums else 0), np.float64)
    counts = np.zeros((nchunks, k), np.int64)
    inertia = np.zeros(nchunks, np.float64)
    step = (n + nchunks - 1) // nchunks
    for t in prange(nchunks):
        mine = sums[t]
        for i in range(t * step, min(n, (t + 1) * step)):
            point = x[i]
            best, low = _nearest_cpu(point, c)
            if best < 0:
                continue
            counts[t, best] += 1
            inertia[t] += low
            if with_sums:
                row = mine[best]
                for f in range(d):
                    row[f] += np.float64(point[f])
    total_sums = np.zeros((k, d if with_sums else 0), np.float64)
    total_counts = np.zeros(k, np.int64)
    total_inertia = np.zeros(1, np.float64)
    for s in range(nchunks):
        total_inertia[0] += inertia[s]
        for j in range(k):
            total_counts[j] += counts[s, j]
            for f in range(total_sums.shape[1]):
                total_sums[j, f] += sums[s, j, f]
    return total_sums, total_counts, total_inertia


# --------------------------------------------------------------------------- the kernels' plans


def _odd(d: int) -> int:
    """A row length of at least ``d`` that is odd.

    Rows that many elements apart start in distinct shared-memory banks for 32 consecutive
    rows of 4-byte elements, or 16 of 8-byte ones.
    """
    return d | 1


@dataclass(frozen=True)
class Plan:
    """How a kernel is built and launched for one dtype, feature count and centroid count.

    ``threads`` per block; ``staged``: points staged through a shared tile of ``threads``
    rows; ``held``: the pass kernel's centroids, sums and counts in shared memory, room for
    ``capacity`` centroids (the counts-and-cost kernel: ``capacity`` candidate rows a tile);
    ``shared_bytes``: the block's static shared memory.
    """

    kind: str
    dtype: np.dtype
    features: int
    threads: int
    staged: bool
    held: bool
    capacity: int
    shared_bytes: int


def _tile_threads(room: int, row_bytes: int) -> int:
    """Most threads (a multiple of 32, at most ``MAX_THREADS``) whose rows fit in ``room``."""
    return min(MAX_THREADS, max(0, room) // row_bytes // WARP * WARP)


def pass_plan(dtype, d: int, k: int, budget: int | None = None) -> Plan:
    """The pass kernel's :class:`Plan` for ``k`` centroids of ``d`` features in ``dtype``.

    The centroids, their float64 sums (rows padded to odd length) and uint32 counts are held
    in shared memory, room made for the next power of two of ``k``, where they fit; the rest of
    the budget stages the points, as many threads as whole warps' rows fit (``staged`` if 32
    do, else the points are read in place by 256 threads).
    """
    budget = SHARED_BYTES if budget is None else budget
    item = np.dtype(dtype).itemsize
    capacity = 1 << (k - 1).bit_length()
    scratch = 8 * (MAX_THREADS // WARP)
    held_bytes = capacity * (d * item + _odd(d) * 8 + 4)
    held = held_bytes + scratch <= budget
    room = budget - scratch - (held_bytes if held else 0)
    threads = _tile_threads(room, _odd(d) * item)
    staged = threads >= WARP
    threads = threads if staged else MAX_THREADS
    shared = scratch + (held_bytes if held else 0) + (threads * _odd(d) * item if staged else 0)
    return Plan("pass", np.dtype(dtype), d, threads, staged, held, capacity if held else 0,
                shared)


def counts_cost_plan(dtype, d: int, budget: int | None = None) -> Plan | None:
    """The counts-and-cost kernel's :class:`Plan`, or None where not one candidate row fits.

    The points' tile takes at most half the budget; the candidates' tile (up to
    ``CANDIDATE_TILE_ROWS`` rows) the rest.
    """
    budget = SHARED_BYTES if budget is None else budget
    item = np.dtype(dtype).itemsize
    scratch = 8 * (MAX_THREADS // WARP)
    threads = _tile_threads((budget - scratch) // 2, _odd(d) * item)
    staged = threads >= WARP
    threads = threads if staged else MAX_THREADS
    tile_bytes = threads * _odd(d) * item if staged else 0
    rows = min(CANDIDATE_TILE_ROWS, (budget - scratch - tile_bytes) // (d * item))
    if rows < 1:
        return None
    return Plan("counts_cost", np.dtype(dtype), d, threads, staged, False, rows,
                scratch + tile_bytes + rows * d * item)


def resident_blocks(threads: int, shared_bytes: int, limits: dict | None = None) -> int:
    """Blocks of ``threads`` threads and ``shared_bytes`` of shared memory one SM holds.

    The least of the SM's thread, shared-memory (each block also takes the device's reserved
    shared memory), register (``REGISTERS_PER_THREAD`` each) and block limits. ``limits``:
    the device's attributes by numba-cuda's names (``_SM90_LIMITS`` where absent).

    >>> resident_blocks(256, 40 * 1024)   # an H200: shared memory allows 5, registers 4
    4
    >>> resident_blocks(128, 44 * 1024)
    5
    """
    lim = dict(_SM90_LIMITS, **(limits or {}))
    return max(1, min(lim["MAX_THREADS_PER_MULTIPROCESSOR"] // threads,
                      lim["MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"]
                      // (shared_bytes + lim["RESERVED_SHARED_MEMORY_PER_BLOCK"]),
                      lim["MAX_REGISTERS_PER_MULTIPROCESSOR"] // (threads * REGISTERS_PER_THREAD),
                      lim["MAX_BLOCKS_PER_MULTIPROCESSOR"]))


def device_limits() -> dict:
    """The current device's limits that :func:`resident_blocks` reads, where it reports them."""
    device = cuda.get_current_device()
    found = {}
    for name in _SM90_LIMITS:
        value = getattr(device, name, None)  # the simulator's device has none
        if isinstance(value, (int, np.integer)) and value > 0:
            found[name] = int(value)
    return found


# --------------------------------------------------------------------------- CUDA device code


def _jit_options(threads: int, blocks: int) -> tuple[dict, dict]:
    """Kernel and device-function options; the simulator takes neither."""
    if numba.config.ENABLE_CUDASIM:
        return {}, {}
    return {"launch_bounds": (threads, blocks)}, {"forceinline": True}


def _fetch_function(plan: Plan, jit):
    """``fetch``: a block's points into its threads, for ``plan``'s features and threads."""
    d, threads, stride, staged = plan.features, plan.threads, _odd(plan.features), plan.staged

    @jit
    def fetch(x, base, tile, point):  # pragma: no cover - compiled
        """Thread ``t`` copies point ``base + t`` into ``point``: True if there is one.

        Staged: the block first copies its ``threads`` points into the tile, consecutive
        threads taking consecutive elements (coalesced), every thread of the block taking part.
        """
        tid = cuda.threadIdx.x
        rows = min(threads, x.shape[0] - base)
        if staged:
            cuda.syncthreads()  # every thread has its previous point out of the tile
            for e in range(tid, rows * d, threads):
                r = e // d
                tile[r * stride + e - r * d] = x[base + r, e - r * d]
            cuda.syncthreads()
            if tid < rows:
                for f in range(d):
                    point[f] = tile[tid * stride + f]
        elif tid < rows:
            for f in range(d):
                point[f] = x[base + tid, f]
        return tid < rows

    return fetch


def _distance_functions(plan: Plan, jit):
    """``scan``, ``scan64`` and ``nearest`` for ``plan``'s dtype and features."""
    dtype, d = plan.dtype.type, plan.features
    inf, widen = plan.dtype.type(np.inf), plan.dtype.itemsize < 8

    @jit
    def scan(point, c, rows, first, best, low):  # pragma: no cover - compiled
        """The nearer of ``(best, low)`` and the ``rows`` flat rows of ``c``.

        Row ``r`` is centroid ``first + r``; distances in the data's dtype.
        """
        for r in range(rows):
            dist = dtype(0)
            for f in range(d):
                diff = point[f] - c[r * d + f]
                dist += diff * diff
            if dist < low:
                low = dist
                best = first + r
        return best, low

    @jit
    def scan64(point, c, rows, first, best, low):  # pragma: no cover - compiled
        """:func:`scan` in float64 (for a float32 point whose squares all overflowed)."""
        for r in range(rows):
            dist = 0.0
            for f in range(d):
                diff = np.float64(point[f]) - np.float64(c[r * d + f])
                dist += diff * diff
            if dist < low:
                low = dist
                best = first + r
        return best, low

    @jit
    def nearest(point, c, k):  # pragma: no cover - compiled
        """``(index, float64 distance)`` of the nearest of ``k`` flat centroids, or (-1, inf)."""
        best, low = scan(point, c, k, 0, -1, inf)
        if widen and best < 0:
            return scan64(point, c, k, 0, -1, np.inf)
        return best, np.float64(low)

    return scan, scan64, nearest


def _warp_functions(jit):
    """``warp_sum`` and ``peers_counted``: every lane of a full warp must call them."""

    @jit
    def warp_sum(value):  # pragma: no cover - compiled
        """The sum of ``value`` over the warp's 32 lanes, in lane 0."""
        offset = WARP // 2
        while offset > 0:
            value += cuda.shfl_down_sync(_FULL_MASK, value, offset)
            offset //= 2
        return value

    @jit
    def peers_counted(best):  # pragma: no cover - compiled
        """How many lanes of the warp share this lane's nearest ``best``.

        The number goes to the lowest of those lanes; the others, and ``best < 0``, get 0.
        """
        peers = cuda.match_any_sync(_FULL_MASK, best)
        if best >= 0 and cuda.ffs(peers) - 1 == cuda.laneid:
            return cuda.popc(peers)
        return 0

    return warp_sum, peers_counted


def _held_functions(plan: Plan, jit):
    """The pass kernel's block-wide steps: ``hold`` the centroids, ``hand_on`` the totals.

    The shared tables (``held``): centroids flat, sums in rows of odd length, uint32 counts;
    else the global ones are used directly.
    """
    d, threads, stride, held = plan.features, plan.threads, _odd(plan.features), plan.held
    warps = threads // WARP

    @jit
    def hold(centroids, k, s_c, s_sums, s_counts, s_inertia):  # pragma: no cover - compiled
        tid = cuda.threadIdx.x
        if held:
            for e in range(tid, k * d, threads):
                s_c[e] = centroids[e]
            for e in range(tid, k * stride, threads):
                s_sums[e] = 0.0
            for j in range(tid, k, threads):
                s_counts[j] = 0
        if tid < warps:
            s_inertia[tid] = 0.0
        cuda.syncthreads()

    @jit
    def hand_on(sums, counts, s_sums, s_counts):  # pragma: no cover - compiled
        """The block's shared sums and counts added to the global ones (after a sync)."""
        if held:
            tid, k = cuda.threadIdx.x, counts.shape[0]
            for j in range(tid, k, threads):
                if s_counts[j] != 0:
                    cuda.atomic.add(counts, j, np.int64(s_counts[j]))
            for e in range(tid, k * d, threads):
                j = e // d
                if s_counts[j] != 0:
                    cuda.atomic.add(sums, (j, e - j * d), s_sums[j * stride + e - j * d])

    return hold, hand_on


def _total_functions(plan: Plan, jit):
    """``add_point`` (a point to the pass's tables) and ``hand_on_total`` (a block's total)."""
    d, stride, held, warps = plan.features, _odd(plan.features), plan.held, plan.threads // WARP

    @jit
    def add_point(point, best, peers, sums, counts, s_sums, s_counts):  # pragma: no cover
        if held:
            if peers:
                cuda.atomic.add(s_counts, best, np.uint32(peers))
            for f in range(d):
                cuda.atomic.add(s_sums, best * stride + f, np.float64(point[f]))
        else:
            if peers:
                cuda.atomic.add(counts, best, np.int64(peers))
            for f in range(d):
                cuda.atomic.add(sums, (best, f), np.float64(point[f]))

    @jit
    def hand_on_total(s_partials, total):  # pragma: no cover - compiled
        """The warps' partial sums added to ``total[0]`` by thread 0 (after a sync)."""
        if cuda.threadIdx.x == 0:
            block_total = 0.0
            for w in range(warps):
                block_total += s_partials[w]
            cuda.atomic.add(total, 0, block_total)

    return add_point, hand_on_total


def _make_pass_kernel(plan: Plan, blocks_per_sm: int):
    """The Lloyd pass kernel of ``plan``: ``(x, centroids flat, sums, counts, inertia)``."""
    dtype, d, threads, held = plan.dtype.type, plan.features, plan.threads, plan.held
    capacity, warps = max(1, plan.capacity), plan.threads // WARP
    # shared arrays' shapes must be compile-time constants
    tile_cells = threads * _odd(d) if plan.staged else 1
    centroid_cells, sum_cells = capacity * d, capacity * _odd(d)
    kernel_options, device_options = _jit_options(threads, blocks_per_sm)
    jit = cuda.jit(device=True, **device_options)
    fetch, (_, _, nearest) = _fetch_function(plan, jit), _distance_functions(plan, jit)
    warp_sum, peers_counted = _warp_functions(jit)
    (hold, hand_on), (add_point, hand_on_total) = (_held_functions(plan, jit),
                                                   _total_functions(plan, jit))

    @cuda.jit(**kernel_options)
    def lloyd(x, centroids, sums, counts, inertia):  # pragma: no cover - compiled
        tile = cuda.shared.array(tile_cells, dtype)
        s_c = cuda.shared.array(centroid_cells, dtype)
        s_sums = cuda.shared.array(sum_cells, np.float64)
        s_counts = cuda.shared.array(capacity, np.uint32)
        s_inertia = cuda.shared.array(warps, np.float64)
        point = cuda.local.array(d, dtype)
        hold(centroids, counts.shape[0], s_c, s_sums, s_counts, s_inertia)
        for base in range(cuda.blockIdx.x * threads, x.shape[0], cuda.gridDim.x * threads):
            best, low = -1, np.inf
            if fetch(x, base, tile, point):
                if held:
                    best, low = nearest(point, s_c, counts.shape[0])
                else:
                    best, low = nearest(point, centroids, counts.shape[0])
            peers = peers_counted(best)
            total = warp_sum(low if best >= 0 else 0.0)
            if cuda.laneid == 0:
                s_inertia[cuda.threadIdx.x // WARP] += total
            if best >= 0:
                add_point(point, best, peers, sums, counts, s_sums, s_counts)
        cuda.syncthreads()
        hand_on(sums, counts, s_sums, s_counts)
        hand_on_total(s_inertia, inertia)

    return lloyd


def _make_counts_cost_kernel(plan: Plan, blocks_per_sm: int):
    """The counts-and-cost kernel of ``plan``: ``(x, candidates flat, counts, cost)``."""
    dtype, d, threads, rows_cap = plan.dtype.type, plan.features, plan.threads, plan.capacity
    warps, widen, inf = plan.threads // WARP, plan.dtype.itemsize < 8, plan.dtype.type(np.inf)
    tile_cells, candidate_cells = (threads * _odd(d) if plan.staged else 1), rows_cap * d
    kernel_options, device_options = _jit_options(threads, blocks_per_sm)
    jit = cuda.jit(device=True, **device_options)
    fetch, (scan, scan64, _) = _fetch_function(plan, jit), _distance_functions(plan, jit)
    warp_sum, peers_counted = _warp_functions(jit)
    hand_on_total = _total_functions(plan, jit)[1]

    @jit
    def candidate_tile(candidates, first, k, s_cand):  # pragma: no cover - compiled
        """Candidates ``first ..`` (at most a tile) into shared memory; how many."""
        rows = min(rows_cap, k - first)
        cuda.syncthreads()  # every thread is done with the previous candidates
        for e in range(cuda.threadIdx.x, rows * d, threads):
            s_cand[e] = candidates[first * d + e]
        cuda.syncthreads()
        return rows

    @cuda.jit(**kernel_options)
    def counts_cost(x, candidates, counts, cost):  # pragma: no cover - compiled
        k = counts.shape[0]
        tile = cuda.shared.array(tile_cells, dtype)
        s_cand = cuda.shared.array(candidate_cells, dtype)
        s_cost = cuda.shared.array(warps, np.float64)
        point = cuda.local.array(d, dtype)
        if cuda.threadIdx.x < warps:
            s_cost[cuda.threadIdx.x] = 0.0
        for base in range(cuda.blockIdx.x * threads, x.shape[0], cuda.gridDim.x * threads):
            valid = fetch(x, base, tile, point)
            best, low = -1, inf
            for first in range(0, k, rows_cap):
                rows = candidate_tile(candidates, first, k, s_cand)
                if valid:
                    best, low = scan(point, s_cand, rows, first, best, low)
            low64 = np.float64(low)
            # a float32 point whose squares all overflowed: the candidates again, in float64
            lost = valid and best < 0
            if widen and cuda.syncthreads_or(np.int32(lost)):
                for first in range(0, k, rows_cap):
                    rows = candidate_tile(candidates, first, k, s_cand)
                    if lost:
                        best, low64 = scan64(point, s_cand, rows, first, best, low64)
            peers = peers_counted(best)
            total = warp_sum(low64 if best >= 0 else 0.0)
            if cuda.laneid == 0:
                s_cost[cuda.threadIdx.x // WARP] += total
            if peers:
                cuda.atomic.add(counts, best, np.int64(peers))
        cuda.syncthreads()
        hand_on_total(s_cost, cost)

    return counts_cost


_KERNELS: dict = {}


def _kernel(plan: Plan):
    """``(kernel, blocks per SM)`` for ``plan``, built once per process and device limits."""
    limits = device_limits()
    key = (plan, tuple(sorted(limits.items())))
    if key not in _KERNELS:
        blocks = resident_blocks(plan.threads, plan.shared_bytes, limits)
        make = _make_pass_kernel if plan.kind == "pass" else _make_counts_cost_kernel
        _KERNELS[key] = (make(plan, blocks), blocks)
    return _KERNELS[key]


def grid_blocks(n: int, plan: Plan, blocks_per_sm: int, limits: dict | None = None) -> int:
    """Blocks to launch for ``n`` points.

    Every SM full (``blocks_per_sm`` each), no idle block, and no block seeing more points
    than its uint32 counters hold.
    """
    sm_count = dict(_SM90_LIMITS, **(limits or {}))["MULTIPROCESSOR_COUNT"]
    blocks = max(1, min(math.ceil(n / plan.threads), sm_count * blocks_per_sm))
    return max(blocks, math.ceil(n / _MAX_PER_BLOCK))


# --------------------------------------------------------------------------- dispatch


def _checked(x, centroids, name: str) -> tuple[int, int, int]:
    if len(x.shape) != 2 or len(centroids.shape) != 2:
        raise ValueError(f"{name} needs 2-D points and centroids, got shapes {x.shape} "
                         f"and {centroids.shape}")
    n, d = x.shape
    k, dc = centroids.shape
    if dc != d:
        raise ValueError(f"{name}: points have {d} features, centroids {dc}")
    if k < 1:
        raise ValueError(f"{name} needs at least one centroid")
    if np.dtype(x.dtype) not in (np.float32, np.float64):
        raise TypeError(f"{name} needs float32 or float64 points, got {x.dtype}")
    return n, d, k


def _host(x, centroids, n: int, with_sums: bool):
    x = np.ascontiguousarray(x)
    c = np.ascontiguousarray(centroids, dtype=x.dtype)
    nchunks = max(1, min(numba.get_num_threads(), n // _MIN_PER_THREAD))
    with launch.worker_threads():
        return _pass_cpu(x, c, nchunks, with_sums)


def _launch(plan: Plan, x, centroids, n: int, outputs: tuple) -> None:
    if not n:
        return
    kernel, blocks_per_sm = _kernel(plan)
    c = _on_device(x, np.ascontiguousarray(centroids, dtype=x.dtype).reshape(-1))
    blocks = grid_blocks(n, plan, blocks_per_sm, device_limits())
    kernel[blocks, plan.threads, launch.stream_for(x)](
        launch.to_numba(x), launch.to_numba(c), *(launch.to_numba(a) for a in outputs))


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

    All three in ``x``'s memory. Points with a NaN or infinite coordinate are left out; a
    float32 point whose squared distances all overflow float32 is measured in float64.

    Raises
    ------
    ValueError
        For shapes that are not ``(n, d)`` and ``(k, d)`` with ``k >= 1``.
    TypeError
        For points that are not float32 or float64.
    """
    centroids = np.asarray(centroids)
    n, d, k = _checked(x, centroids, "kmeans_pass")
    if launch.on_host(x):
        return _host(x, centroids, n, True)
    sums = launch.like(x, (k, d), np.float64)
    counts = launch.like(x, (k,), np.int64)
    inertia = launch.like(x, (1,), np.float64)
    if d:
        _launch(pass_plan(x.dtype, d, k), x, centroids, n, (sums, counts, inertia))
    elif n:  # no features: every point at distance 0 from every centroid, the first nearest
        counts[0:1] = n
    return sums, counts, inertia


def kmeans_counts_cost(x, candidates):
    """k-means||'s pass: the points nearest each candidate, and the sum of their distances.

    The :func:`kmeans_pass` without the sums, for many candidates: on the device the
    candidates pass through shared memory a tile at a time, however many there are.

    Parameters
    ----------
    x : array
        ``(n, d)`` float32 or float64 points, on the host or the device (as for
        :func:`kmeans_pass`).
    candidates : numpy.ndarray
        ``(k, d)`` candidate centroids on the host, used in ``x``'s dtype.

    Returns
    -------
    counts : array
        int64 ``(k,)``: how many points are nearest each candidate (ties: the lowest index).
    cost : array
        float64 ``(1,)``: the sum of the points' squared distances to their nearest candidate.

    Both in ``x``'s memory; points count as in :func:`kmeans_pass`.

    Raises
    ------
    ValueError, TypeError
        As :func:`kmeans_pass` does, for the same shapes and dtypes.
    """
    candidates = np.asarray(candidates)
    n, d, k = _checked(x, candidates, "kmeans_counts_cost")
    if launch.on_host(x):
        _, counts, cost = _host(x, candidates, n, False)
        return counts, cost
    plan = counts_cost_plan(x.dtype, d) if d else None
    if plan is None:  # not one candidate row fits in shared memory: the pass kernel's way
        _, counts, cost = kmeans_pass(x, candidates)
        return counts, cost
    counts = launch.like(x, (k,), np.int64)
    cost = launch.like(x, (1,), np.float64)
    _launch(plan, x, candidates, n, (counts, cost))
    return counts, cost
