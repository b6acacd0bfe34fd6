"""kmeans-pipeline's work on the cluster: blobs, shards, a shard's pass, the Lloyd loop.

The shards are drawn on the workers and stay there; the loop runs in a client (see
:mod:`pipelines.kmeans.pipeline`), through :mod:`daskgpu.toolkit.data_parallel`: each iteration
broadcasts the centroids, runs :func:`daskgpu.kernels.kmeans.kmeans_pass` on every shard where
it lives, and tree-reduces the shards' sums, counts and inertias.

The data follow the scheme of :mod:`pipelines.kmeans.shared`. Per-shard generators:
``numpy.random.default_rng`` of the shard's ``SeedSequence`` on CPU workers; on GPU workers
``cupy.random.default_rng`` seeded with that sequence's first 64-bit word. A shard draws each
point's blob (``integers(0, clusters)``), then its offsets (``standard_normal``, the dtype's).
"""

from __future__ import annotations

import importlib
import time

import numpy as np

from daskgpu.errors import ParameterError
from daskgpu.toolkit import backends, data_parallel
from daskgpu.toolkit.numeric import generator
from daskgpu.toolkit.registry import worker_function
from pipelines.kmeans.shared import (
    BLOB_STD,
    CENTRE_TRIES,
    CENTRES,
    POINTS,
    SEPARATION,
    half_width,
    lloyd_cell_rows,
)


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


def make_shard(seed: int, index: int, rows: int, features: int, dtype: str, library: str,
               centres: np.ndarray):
    """Shard ``index``: ``rows`` points of the blobs around ``centres``, drawn where it stays."""
    xp = importlib.import_module(library)
    rng = generator(library, np.random.SeedSequence(seed, spawn_key=(POINTS, index)))
    blob = rng.integers(0, centres.shape[0], rows)
    x = rng.standard_normal((rows, features), dtype=dtype)
    if BLOB_STD != 1:
        x *= BLOB_STD
    x += xp.asarray(centres.astype(dtype))[blob]
    return x


# The kernels, imported by the workers only (the pipeline's worker_modules)
kmeans_pass = worker_function("daskgpu.kernels.kmeans", "kmeans_pass")
kmeans_counts_cost = worker_function("daskgpu.kernels.kmeans", "kmeans_counts_cost")


def shard_pass(x, centroids: np.ndarray) -> tuple:
    """One shard's Lloyd pass: ``((sums, counts, inertia), seconds)``, all on the host."""
    began = time.perf_counter()
    sums, counts, inertia = kmeans_pass(x, centroids)
    out = (backends.to_host(sums), backends.to_host(counts), float(backends.to_host(inertia)[0]))
    return out, time.perf_counter() - began


def shard_cost(x, candidates: np.ndarray) -> tuple:
    """k-means||'s cost on one shard: ``((cost,), seconds)``.

    The squared distances of its points to their nearest candidate, summed by the
    counts-and-cost kernel (no sums).
    """
    began = time.perf_counter()
    cost = float(backends.to_host(kmeans_counts_cost(x, candidates)[1])[0])
    return (cost,), time.perf_counter() - began


def shard_weights(x, candidates: np.ndarray, cell: int) -> np.ndarray:
    """The points of shard ``x`` nearest each candidate, per cell of ``cell`` points.

    One counts-and-cost kernel pass per cell: ``(cells, candidates)`` int64 counts on the
    host. Counts are whole numbers, so the shard's (their sum) are those of one pass over the
    whole shard.
    """
    xp = importlib.import_module(type(x).__module__.split(".")[0])
    counts = [kmeans_counts_cost(x[first:first + cell], candidates)[0]
              for first in range(0, x.shape[0], cell)]
    if not counts:
        return np.zeros((0, len(candidates)), np.int64)
    return np.asarray(backends.to_host(xp.stack(counts)), dtype=np.int64)


def shard_cells(x, sets: np.ndarray, cell: int) -> tuple:
    """Each cell's Lloyd totals for each centroid set: the certificates a check samples.

    One kernel pass per cell of ``cell`` points and set: ``(sums, counts, inertia)``, host
    float64 arrays ``(sets, cells, k, d)``, ``(sets, cells, k)``, ``(sets, cells)``.
    """
    xp = importlib.import_module(type(x).__module__.split(".")[0])
    count, k, d = sets.shape
    sums, counts, inertia = [], [], []
    for c in sets:
        for first in range(0, x.shape[0], cell):
            cell_sums, cell_counts, cell_inertia = kmeans_pass(x[first:first + cell], c)
            sums.append(cell_sums)
            counts.append(cell_counts)
            inertia.append(cell_inertia)
    host = [np.asarray(backends.to_host(xp.stack(part)), dtype=np.float64)
            for part in (sums, counts, inertia)]
    return (host[0].reshape(count, -1, k, d), host[1].reshape(count, -1, k),
            host[2].reshape(count, -1))


def pick_rows(x, rows: np.ndarray) -> np.ndarray:
    """The shard's points at ``rows``, as float64 host memory."""
    xp = importlib.import_module(type(x).__module__.split(".")[0])
    return np.asarray(backends.to_host(x[xp.asarray(rows)]), dtype=np.float64)


# --------------------------------------------------------------------------- the iterations


def lloyd(client, shards, centroids: np.ndarray, max_iter: int, tol: float,
          samples: int | None = None) -> dict:
    """Lloyd's iterations from ``centroids`` on persisted ``shards``, driven here.

    Every iteration: the centroids broadcast, one :func:`shard_pass` per shard, the sums,
    counts and inertias tree-reduced, and the new centroids ``sums / counts`` computed here; a
    centroid no point is nearest keeps its place. It stops once no centroid moved more than
    ``tol`` (Euclidean), or after ``max_iter`` iterations; one more pass gives the final
    centroids' inertia. Given the ``samples`` in the shards, the iterations but the last are
    passed again cell by cell (:func:`shard_cells`), for the check: ``cells``.

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
    out = {"centroids": np.stack(trajectory), "inertias": np.array(inertias),
           "counts": np.asarray(counts), "iterations": len(shifts),
           "shifts": np.array(shifts), "step_s": wall, "step_compute_s": computed}
    if samples is not None:
        began = time.perf_counter()
        out["cells"] = _certificates(client, shards, out["centroids"][:-2], samples)
        out["cells_s"] = time.perf_counter() - began
    return out


def _certificates(client, shards, sets: np.ndarray, samples: int) -> dict:
    """:func:`shard_cells` of every shard for ``sets``, cells shard after shard."""
    k, d = sets.shape[1:] if len(sets) else (0, 0)
    cell = lloyd_cell_rows(samples, k, d, len(sets))
    found = client.gather([client.submit(shard_cells, s, sets, cell, pure=False)
                           for s in shards]) if len(sets) else []
    names = ("sums", "counts", "inertia")
    if not found:
        return {name: np.zeros((0, 0)) for name in names}
    return {name: np.concatenate([part[i] for part in found], axis=1)
            for i, name in enumerate(names)}
