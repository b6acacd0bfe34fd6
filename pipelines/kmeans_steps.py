"""kmeans-pipeline's work on the cluster: blobs, shards, a shard's pass, the Lloyd loop.

The shards are drawn on the workers and stay there; the loop runs in a client (see
:mod:`pipelines.kmeans_pipeline`), through :mod:`daskgpu.data_parallel`: each iteration
broadcasts the centroids, runs :func:`daskgpu.kernels.kmeans.kmeans_pass` on every shard where
it lives, and tree-reduces the shards' sums, counts and inertias.

The data follow the scheme of :mod:`pipelines.kmeans_data`. Per-shard generators:
``numpy.random.default_rng`` of the shard's ``SeedSequence`` on CPU workers; on GPU workers
``cupy.random.default_rng`` seeded with that sequence's first 64-bit word. A shard draws each
point's blob (``integers(0, clusters)``), then its offsets (``standard_normal``, the dtype's).
"""

from __future__ import annotations

import importlib
import time

import numpy as np

from daskgpu import backends, data_parallel
from daskgpu.errors import ParameterError
from daskgpu.kernels.kmeans import kmeans_pass
from pipelines.kmeans_data import (
    BLOB_STD,
    CENTRE_TRIES,
    CENTRES,
    INIT,
    POINTS,
    SEPARATION,
    half_width,
)

# k-means||: rounds of sampling, and points sampled per round per centroid wanted.
KMEANS_PARALLEL_ROUNDS = 5
KMEANS_PARALLEL_OVERSAMPLING = 2
# Rows whose distances k-means|| computes at once on a worker.
SLAB = 65_536


def blob_centres(seed: int, clusters: int, features: int) -> np.ndarray:
    """The blobs' ``(clusters, features)`` float64 centres, at least ``SEPARATION`` apart.

    Raises
    ------
    ParameterError
        Where so many clusters do not fit (too few features for their count).
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(CENTRES,)))
    width = half_width(clusters, features)
    centres = np.empty((clusters, features))
    for j in range(clusters):
        for _ in range(CENTRE_TRIES):
            candidate = rng.uniform(-width, width, features)
            if j == 0 or np.min(((centres[:j] - candidate) ** 2).sum(axis=1)) >= SEPARATION ** 2:
                centres[j] = candidate
                break
        else:
            raise ParameterError(f"--clusters {clusters}: no room for that many separated blobs "
                                 f"in {features} features; give fewer clusters or more features")
    return centres


def _rng(library: str, sequence: np.random.SeedSequence):
    if library == "numpy":
        return np.random.default_rng(sequence)
    xp = importlib.import_module(library)  # CuPy's generator takes an integer seed
    return xp.random.default_rng(int(sequence.generate_state(1, np.uint64)[0]))


def make_shard(seed: int, index: int, rows: int, features: int, dtype: str, library: str,
               centres: np.ndarray):
    """Shard ``index``: ``rows`` points of the blobs around ``centres``, drawn where it stays."""
    xp = importlib.import_module(library)
    rng = _rng(library, np.random.SeedSequence(seed, spawn_key=(POINTS, index)))
    blob = rng.integers(0, centres.shape[0], rows)
    x = rng.standard_normal((rows, features), dtype=dtype)
    if BLOB_STD != 1:
        x *= BLOB_STD
    x += xp.asarray(centres.astype(dtype))[blob]
    return x


def shard_pass(x, centroids: np.ndarray) -> tuple:
    """One shard's Lloyd pass: ``((sums, counts, inertia), seconds)``, all on the host."""
    began = time.perf_counter()
    sums, counts, inertia = kmeans_pass(x, centroids)
    out = (backends.to_host(sums), backends.to_host(counts), float(backends.to_host(inertia)[0]))
    return out, time.perf_counter() - began


def pick_rows(x, rows: np.ndarray) -> np.ndarray:
    """The shard's points at ``rows``, as float64 host memory."""
    xp = importlib.import_module(type(x).__module__.split(".")[0])
    return np.asarray(backends.to_host(x[xp.asarray(rows)]), dtype=np.float64)


# --------------------------------------------------------------------------- initialisation


def random_rows(seed: int, samples: int, k: int) -> np.ndarray:
    """The global rows whose points are the random initial centroids, in centroid order."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(INIT,)))
    return rng.choice(samples, size=k, replace=False)


def gather_rows(client, shards, sizes, rows) -> np.ndarray:
    """The points at global ``rows`` of the persisted shards, float64, in the order given."""
    starts = np.cumsum((0, *sizes))
    owner = np.searchsorted(starts, rows, side="right") - 1
    out = np.empty((len(rows), 0))
    picked = {}
    for s in np.unique(owner):
        mine = np.flatnonzero(owner == s)
        picked[int(s)] = (mine, client.submit(pick_rows, shards[s], rows[mine] - starts[s],
                                              pure=False))
    for mine, future in picked.values():
        points = future.result()
        if out.shape[1] == 0:
            out = np.empty((len(rows), points.shape[1]))
        out[mine] = points
    return out


def initial_centroids(client, shards, sizes, seed: int, k: int, method: str) -> np.ndarray:
    """``(k, d)`` float64 initial centroids: ``k`` seeded points, or k-means|| from them."""
    samples = int(sum(sizes))
    if method == "random":
        return gather_rows(client, shards, sizes, random_rows(seed, samples, k))
    return kmeans_parallel(client, shards, sizes, seed, k)


def sample_far(x, candidates: np.ndarray, cost: float, factor: float, seed: int, step: int,
               index: int) -> np.ndarray:
    """Points of shard ``x`` sampled with probability ``min(1, factor * D^2 / cost)``.

    ``D`` is a point's distance to the nearest candidate. The draws are seeded by
    ``(seed, INIT, step, index)``; runs on the shard's worker, returns float64 host points.
    """
    xp = importlib.import_module(type(x).__module__.split(".")[0])
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(INIT, step, index)))
    c = xp.asarray(candidates)
    norms = (c ** 2).sum(axis=1)
    chosen = []
    for start in range(0, x.shape[0], SLAB):
        part = x[start:start + SLAB].astype(np.float64)
        near = ((part ** 2).sum(axis=1)[:, None] - 2 * part @ c.T + norms).min(axis=1)
        near = backends.to_host(xp.maximum(near, 0))
        keep = rng.random(near.shape[0]) < factor * near / cost
        if keep.any():
            chosen.append(backends.to_host(part[xp.asarray(np.flatnonzero(keep))]))
    return np.concatenate(chosen) if chosen else np.empty((0, x.shape[1]))


def kmeans_parallel(client, shards, sizes, seed: int, k: int) -> np.ndarray:
    """k-means|| (Bahmani et al., 2012), simplified: a few sampling rounds, then k-means++.

    One seeded point; each round samples every point with probability proportional to its
    squared distance to the candidates so far (``KMEANS_PARALLEL_OVERSAMPLING * k`` expected);
    the candidates are weighted by the points nearest each (one kernel pass), and reduced to
    ``k`` by weighted k-means++ seeding and a few weighted Lloyd steps, here.
    """
    samples = int(sum(sizes))
    candidates = gather_rows(client, shards, sizes, random_rows(seed, samples, 1))
    factor = KMEANS_PARALLEL_OVERSAMPLING * k
    for step in range(KMEANS_PARALLEL_ROUNDS):
        (_, _, cost), _ = data_parallel.step(client, shards, shard_pass, data_parallel.add_pairs,
                                             candidates)
        if cost <= 0:
            break
        found = client.gather([client.submit(sample_far, s, candidates, cost, factor, seed,
                                             step, i, pure=False) for i, s in enumerate(shards)])
        candidates = np.concatenate([candidates, *found])
    (_, weights, _), _ = data_parallel.step(client, shards, shard_pass, data_parallel.add_pairs,
                                            candidates)
    if len(candidates) < k:  # too few distinct points were sampled: add seeded ones
        extra = gather_rows(client, shards, sizes, random_rows(seed, samples, k))
        return np.concatenate([candidates, extra])[:k]
    return weighted_kmeans(candidates, weights.astype(np.float64), k, seed)


def weighted_kmeans(points: np.ndarray, weights: np.ndarray, k: int, seed: int,
                    steps: int = 10) -> np.ndarray:
    """``k`` centroids of weighted ``points``: greedy k-means++ seeding, weighted Lloyd steps.

    Greedy seeding draws ``2 + log(k)`` candidates for each next centroid (in proportion to
    weight times squared distance to the chosen ones) and keeps the one that lowers the
    weighted inertia most.
    """
    sequence = np.random.SeedSequence(seed, spawn_key=(INIT, KMEANS_PARALLEL_ROUNDS))
    rng = np.random.default_rng(sequence)
    trials = 2 + int(np.log(k))
    total = weights.sum()
    chosen = [int(rng.choice(len(points), p=weights / total)) if total > 0 else 0]
    near = ((points - points[chosen[0]]) ** 2).sum(axis=1)
    while len(chosen) < k:
        mass = weights * near
        if mass.sum() > 0:
            tries = rng.choice(len(points), size=trials, p=mass / mass.sum())
        else:
            tries = rng.integers(len(points), size=1)
        options = np.minimum(near[None], ((points[None] - points[tries][:, None]) ** 2)
                             .sum(axis=2))
        best = int(np.argmin((options * weights[None]).sum(axis=1)))
        chosen.append(int(tries[best]))
        near = options[best]
    centroids = points[chosen].copy()
    for _ in range(steps):
        labels = ((points[:, None, :] - centroids[None]) ** 2).sum(axis=2).argmin(axis=1)
        mass = np.bincount(labels, weights, minlength=k)
        for j in np.flatnonzero(mass > 0):
            mine = labels == j
            centroids[j] = (weights[mine, None] * points[mine]).sum(axis=0) / mass[j]
    return centroids


# --------------------------------------------------------------------------- the iterations


def lloyd(client, shards, centroids: np.ndarray, max_iter: int, tol: float) -> dict:
    """Lloyd's iterations from ``centroids`` on persisted ``shards``, driven here.

    Every iteration: the centroids broadcast, one :func:`shard_pass` per shard, the sums,
    counts and inertias tree-reduced, and the new centroids ``sums / counts`` computed here; a
    centroid no point is nearest keeps its place. It stops once no centroid moved more than
    ``tol`` (Euclidean), or after ``max_iter`` iterations; one more pass gives the final
    centroids' inertia.

    Returns
    -------
    dict
        ``centroids`` ``(iterations + 1, k, d)``: the initial ones and those after each
        iteration; ``inertias`` at each of them; ``counts`` at the final ones; ``iterations``;
        ``shifts``, the largest move of each iteration; the times of each (``step_s``,
        ``step_compute_s``).
    """
    c = np.asarray(centroids, dtype=np.float64)
    trajectory, inertias, shifts, wall, computed = [c], [], [], [], []
    current = data_parallel.broadcast(client, c)
    for _ in range(max_iter):
        (sums, counts, inertia), spent = data_parallel.step(
            client, shards, shard_pass, data_parallel.add_pairs, current)
        began = time.perf_counter()
        moved = c.copy()
        filled = counts > 0
        moved[filled] = sums[filled] / counts[filled, None]
        shift = float(np.sqrt(((moved - c) ** 2).sum(axis=1)).max())
        c = moved
        current.release()
        current = data_parallel.broadcast(client, c)
        wall.append(spent.wall_s + time.perf_counter() - began)
        computed.append(spent.compute_s)
        trajectory.append(c)
        inertias.append(inertia)
        shifts.append(shift)
        if shift <= tol:
            break
    (_, counts, inertia), _ = data_parallel.step(client, shards, shard_pass,
                                                 data_parallel.add_pairs, current)
    current.release()
    inertias.append(inertia)
    return {"centroids": np.stack(trajectory), "inertias": np.array(inertias),
            "counts": np.asarray(counts), "iterations": len(shifts),
            "shifts": np.array(shifts), "step_s": wall, "step_compute_s": computed}


def run(client, shards, sizes, seed: int, k: int, init: str, max_iter: int, tol: float) -> dict:
    """The initial centroids, then :func:`lloyd` (the loop a run's compute times)."""
    began = time.perf_counter()
    start = initial_centroids(client, shards, sizes, seed, k, init)
    out = lloyd(client, shards, start, max_iter, tol)
    out["init_s"] = time.perf_counter() - began - sum(out["step_s"])
    return out


# --------------------------------------------------------------------------- one process


class InProcess:
    """The little of a ``distributed.Client`` the initialisation uses, computing here at once.

    So that a one-process baseline starts where the run started, k-means|| included.
    """

    class Done:
        """A finished "future"."""

        def __init__(self, value):
            self.value = value

        def result(self):
            """The value."""
            return self.value

        def release(self):
            """Nothing to let go."""

    def submit(self, function, *args, pure=True, **kwargs):
        """``function(*args)`` now."""
        args = [a.value if isinstance(a, self.Done) else a for a in args]
        return self.Done(function(*args, **kwargs))

    def gather(self, futures):
        """The values of ``futures``."""
        return [f.result() for f in futures]


def one_process_lloyd(shards, start: np.ndarray, max_iter: int, tol: float, xp) -> dict:
    """Lloyd's iterations as one process writes them with an array library ``xp``.

    Each pass: per slab of a shard, the distances by broadcasting in the data's dtype, the
    nearest (``argmin``: the lowest index on ties), float64 sums through a one-hot product.
    The same stopping rule, empty-cluster rule and rule for points with no finite distance
    (left out) as :func:`lloyd`.
    """

    def one_pass(c):
        k, d = c.shape
        sums, counts, inertia = np.zeros((k, d)), np.zeros(k, np.int64), 0.0
        for x in shards:
            centroids = xp.asarray(c.astype(x.dtype))[None]
            for lo in range(0, x.shape[0], 16_384):
                part = x[lo:lo + 16_384]
                dist = ((part[:, None, :] - centroids) ** 2).sum(axis=2)
                dist[xp.isnan(dist)] = xp.inf
                counted = dist.min(axis=1) < xp.inf  # no finite distance: left out
                if not bool(counted.all()):
                    part, dist = part[counted], dist[counted]
                labels = dist.argmin(axis=1)
                inertia += float(dist.min(axis=1).sum(dtype=np.float64))
                onehot = (labels[:, None] == xp.arange(k)[None]).astype(np.float64)
                sums += backends.to_host(onehot.T @ part.astype(np.float64))
                counts += backends.to_host(onehot.sum(axis=0)).astype(np.int64)
        return sums, counts, inertia

    c, inertias = start, []
    for _ in range(max_iter):
        sums, counts, inertia = one_pass(c)
        inertias.append(inertia)
        moved = c.copy()
        moved[counts > 0] = sums[counts > 0] / counts[counts > 0, None]
        shift = float(np.sqrt(((moved - c) ** 2).sum(axis=1)).max())
        c = moved
        if shift <= tol:
            break
    inertias.append(one_pass(c)[2])
    return {"iterations": len(inertias) - 1, "inertias": inertias, "centroids": [c]}
