"""kmeans-pipeline's initial centroids: seeded points of the data, or k-means||.

k-means|| (``--init k-means||``, Bahmani et al., 2012, simplified) samples candidates on the
workers, where the shards live, in ``KMEANS_PARALLEL_ROUNDS`` rounds, weights them by the points
nearest each with one kernel pass (:func:`pipelines.kmeans.tasks.shard_weights`), and reduces them
to ``k`` here in the client. The scheme's constants are in :mod:`pipelines.kmeans.shared`.
"""

from __future__ import annotations

import importlib

import numpy as np

from daskgpu.toolkit import backends, data_parallel
from pipelines.kmeans.shared import (
    INIT,
    KMEANS_PARALLEL_OVERSAMPLING,
    KMEANS_PARALLEL_ROUNDS,
    cell_rows,
)
from pipelines.kmeans.tasks import pick_rows, shard_cost, shard_weights

# Most weighted Lloyd steps reducing the candidates to k (they stop at a fixed point first).
WEIGHTED_MAX_STEPS = 200
# Seeded reductions of the candidates to k tried; the one of least weighted inertia is kept.
WEIGHTED_TRIES = 5
# Rows whose distances k-means|| computes at once on a worker.
SLAB = 65_536


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


def initial_centroids(client, shards, sizes, seed: int, k: int, method: str
                      ) -> tuple[np.ndarray, dict]:
    """``(k, d)`` float64 initial centroids, and what chose them (:func:`kmeans_parallel`).

    ``random``: the points at ``k`` seeded rows, reported as the candidates (``rows`` and
    ``points``, no ``weights``); ``k-means||``: see :func:`kmeans_parallel`.
    """
    samples = int(sum(sizes))
    if method == "random":
        rows = random_rows(seed, samples, k)
        points = gather_rows(client, shards, sizes, rows)
        return points, {"rows": rows, "points": points, "weights": None}
    return kmeans_parallel(client, shards, sizes, seed, k)


def sample_far(x, candidates: np.ndarray, cost: float, factor: float, seed: int, step: int,
               index: int, start: int = 0, cell: int | None = None) -> tuple:
    """Points of shard ``x`` sampled with probability ``min(1, factor * D^2 / cost)``.

    ``D`` is a point's distance to the nearest candidate. The draws are seeded by
    ``(seed, INIT, step, index)``; runs on the shard's worker. Returns the kept points' global
    rows (``start``, the shard's first row, plus their own) and the points, float64 on the
    host; with ``cell``, also per cell of that many points the sum of ``D^2`` (float64) and
    the count of points kept, for the check.
    """
    xp = importlib.import_module(type(x).__module__.split(".")[0])
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(INIT, step, index)))
    c = xp.asarray(candidates)
    norms = (c ** 2).sum(axis=1)
    cells = -(-x.shape[0] // cell) if cell else 0
    rows, chosen = [], []
    costs, kept = np.zeros(cells), np.zeros(cells, np.int64)
    for first in range(0, x.shape[0], SLAB):
        part = x[first:first + SLAB].astype(np.float64)
        near = ((part ** 2).sum(axis=1)[:, None] - 2 * part @ c.T + norms).min(axis=1)
        near = backends.to_host(xp.maximum(near, 0))
        # A point with a NaN or infinite coordinate counts nowhere; its distance may be +inf,
        # which any probability would take. One draw a point all the same, as the check replays.
        finite = backends.to_host(xp.isfinite(part).all(axis=1))
        keep = np.flatnonzero((rng.random(near.shape[0]) < factor * near / cost) & finite)
        if cell:  # a point with no finite distance counts nowhere, as in the kernel's cost
            where = (first + np.arange(near.shape[0])) // cell
            costs += np.bincount(where, weights=np.where(np.isfinite(near), near, 0),
                                 minlength=cells)
            kept += np.bincount(where[keep], minlength=cells)
        if len(keep):
            rows.append(start + first + keep)
            chosen.append(backends.to_host(part[xp.asarray(keep)]))
    if not chosen:
        found = np.empty(0, np.int64), np.empty((0, x.shape[1]))
    else:
        found = np.concatenate(rows).astype(np.int64), np.concatenate(chosen)
    return (*found, costs, kept) if cell else found


def kmeans_parallel(client, shards, sizes, seed: int, k: int) -> tuple[np.ndarray, dict]:
    """k-means|| (Bahmani et al., 2012), simplified: a few sampling rounds, then k-means++.

    One seeded point; each round samples every point with probability proportional to its
    squared distance to the candidates so far (``KMEANS_PARALLEL_OVERSAMPLING * k`` expected);
    where fewer than ``k`` were sampled, the seeded rows of the random initialisation that are
    not candidates yet are added until there are ``k``. The candidates are weighted by the
    points nearest each (one kernel pass), and reduced to ``k`` here by :func:`weighted_kmeans`.

    Returns
    -------
    (numpy.ndarray, dict)
        The ``(k, d)`` initial centroids, and the candidates: ``rows`` (global row numbers,
        the seeded one first), ``points`` (float64), ``weights`` (points nearest each),
        ``rounds`` (0 for the seeded one, ``r + 1`` for those sampled in round ``r``,
        ``KMEANS_PARALLEL_ROUNDS + 1`` for the seeded ones added), and ``costs``: the sum of
        squared distances to the candidates at the start of each round run (the sampling's
        denominator; the rounds stop early at a cost of 0). For the check, per cell of
        points (:func:`pipelines.kmeans.shared.cell_rows`, shard after shard): each round's
        sum of squared distances (``cell_costs``, rounds x cells) and points sampled
        (``cell_sampled``), and the points nearest each candidate (``cell_weights``).
    """
    samples = int(sum(sizes))
    starts = np.cumsum((0, *sizes))
    cell = cell_rows(samples, k)
    rows = random_rows(seed, samples, 1).astype(np.int64)
    candidates = gather_rows(client, shards, sizes, rows)
    factor = KMEANS_PARALLEL_OVERSAMPLING * k
    rounds, costs, cell_costs, cell_sampled = [np.zeros(1, np.int64)], [], [], []
    for step in range(KMEANS_PARALLEL_ROUNDS):
        (cost,), _ = data_parallel.step(client, shards, shard_cost, data_parallel.add_pairs,
                                        candidates)
        costs.append(float(cost))
        if cost <= 0:
            break
        found = client.gather([client.submit(sample_far, s, candidates, cost, factor, seed,
                                             step, i, int(starts[i]), cell, pure=False)
                               for i, s in enumerate(shards)])
        rows = np.concatenate([rows, *(f[0] for f in found)])
        candidates = np.concatenate([candidates, *(f[1] for f in found)])
        cell_costs.append(np.concatenate([f[2] for f in found]))
        cell_sampled.append(np.concatenate([f[3] for f in found]))
        rounds.append(np.full(len(rows) - sum(map(len, rounds)), step + 1, np.int64))
    if len(rows) < k:  # too few distinct points were sampled: add seeded ones
        extra = random_rows(seed, samples, k)
        extra = extra[~np.isin(extra, rows)][:k - len(rows)].astype(np.int64)
        rows = np.concatenate([rows, extra])
        candidates = np.concatenate([candidates, gather_rows(client, shards, sizes, extra)])
        rounds.append(np.full(len(extra), KMEANS_PARALLEL_ROUNDS + 1, np.int64))
    per_cell = np.concatenate(client.gather([
        client.submit(shard_weights, s, candidates, cell, pure=False) for s in shards]))
    weights = per_cell.sum(axis=0)
    chosen = {"rows": rows, "points": candidates, "weights": weights,
              "rounds": np.concatenate(rounds), "costs": np.array(costs),
              "cell_costs": _rounds_by_cells(cell_costs, len(per_cell), np.float64),
              "cell_sampled": _rounds_by_cells(cell_sampled, len(per_cell), np.int64),
              "cell_weights": per_cell}
    if len(rows) == k:
        return candidates.copy(), chosen
    return weighted_kmeans(candidates, weights.astype(np.float64), k, seed), chosen


def _rounds_by_cells(per_round: list, cells: int, dtype) -> np.ndarray:
    """Each sampling round's per-cell values, ``(rounds, cells)`` (no rows if none sampled)."""
    return np.stack(per_round).astype(dtype) if per_round else np.zeros((0, cells), dtype)


def nearest(points: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Index of each point's nearest centroid (squared distances by their expansion)."""
    near = ((centroids ** 2).sum(axis=1)[None] - 2 * points @ centroids.T)
    return near.argmin(axis=1)  # |p|^2 is the same for every centroid of a point


def weighted_kmeans(points: np.ndarray, weights: np.ndarray, k: int, seed: int,
                    max_steps: int = WEIGHTED_MAX_STEPS) -> np.ndarray:
    """``k`` centroids of weighted ``points``: the best of ``WEIGHTED_TRIES`` seeded reductions.

    Each try: greedy k-means++ seeding (:func:`greedy_seeding`), then weighted Lloyd steps
    (:func:`weighted_lloyd`). The try of least weighted inertia is kept (the first on a tie):
    one seeding in a few hundred leaves two blobs to one centroid, which Lloyd cannot undo.
    """
    best, least = None, np.inf
    for t in range(WEIGHTED_TRIES):
        rng = np.random.default_rng(np.random.SeedSequence(
            seed, spawn_key=(INIT, KMEANS_PARALLEL_ROUNDS, t)))
        centroids = weighted_lloyd(points, weights, greedy_seeding(points, weights, k, rng),
                                   max_steps)
        labels = nearest(points, centroids)
        inertia = float((weights * ((points - centroids[labels]) ** 2).sum(axis=1)).sum())
        if inertia < least or best is None:
            best, least = centroids, inertia
    return best


def greedy_seeding(points: np.ndarray, weights: np.ndarray, k: int, rng) -> np.ndarray:
    """``k`` of the weighted ``points`` chosen by greedy k-means++, float64.

    The first is drawn in proportion to weight; each next one, of ``2 + log(k)`` drawn in
    proportion to weight times squared distance to the chosen ones, is the one that lowers the
    weighted inertia most.
    """
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
    return points[chosen].copy()


def weighted_lloyd(points: np.ndarray, weights: np.ndarray, centroids: np.ndarray,
                   max_steps: int = WEIGHTED_MAX_STEPS) -> np.ndarray:
    """Weighted Lloyd steps from ``centroids`` until no point changes its nearest centroid.

    So the centroids returned are the weighted means of the points nearest them (a fixed
    point), unless ``max_steps`` steps ran first. A centroid with no weight nearest it keeps
    its place.
    """
    centroids = np.array(centroids, dtype=np.float64, copy=True)
    labels = None
    for _ in range(max_steps):
        now = nearest(points, centroids)
        if labels is not None and np.array_equal(now, labels):
            break
        labels = now
        mass = np.bincount(labels, weights, minlength=len(centroids))
        for j in np.flatnonzero(mass > 0):
            mine = labels == j
            centroids[j] = (weights[mine, None] * points[mine]).sum(axis=0) / mass[j]
    return centroids
