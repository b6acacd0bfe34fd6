"""The worker side of kmeans-pipeline's fast check: the points the run kept, read its own way.

The fast check (:func:`pipelines.kmeans.check.verify` at ``depth="fast"``) computes where the
run's shards live, on the points the run kept on its workers, with its own code, in float64:
every distinct centroid set's Lloyd totals over all points (counts, sums projected on a few
random probes, inertia, and the points within rounding of two centroids); the k-means||
sampling replayed and the candidates weighed again in a seeded sample of cells
(:func:`pipelines.kmeans.shared.cell_rows`); and the kept points against their source (a
generated shard's blobs and first cell drawn again from its seed, an input's sampled cells
read again from its file). Only small host arrays come back. It shares no code with the run.
"""

from __future__ import annotations

import importlib

import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.numeric import generator
from pipelines.kmeans.check_init import EPS64, near_sets, true_centres
from pipelines.kmeans.shared import BLOB_STD, INIT, POINTS

SLAB = 16_384  # points recomputed at once


def kept_shard(x, job: dict) -> dict:
    """What the fast check recomputes on one kept shard ``x`` (runs on its worker).

    ``job``: ``library``, ``dtype``, ``probes`` (``(d, probes)``, see :func:`lloyd_totals`),
    ``sets`` (distinct centroid sets, ``(sets, k, d)``, whose
    totals over all points come back), ``pairs`` ``(t, cell, centroids)`` (cells of
    ``lloyd_cell`` points whose totals at iteration ``t``'s centroids come back),
    ``picked`` (the shard's rows whose points come back, and ``where`` they go among all
    picked), ``cell`` and ``cells`` (the
    sampled cells, increasing), ``candidates`` and ``plan`` (a k-means|| run's candidates and
    this shard's sampling, see :func:`pipelines.kmeans.check_init.sampling_plan`), and where
    the points come from: ``redraw`` ``(seed, index, clusters)`` or ``reread`` ``(source,
    start)``.
    """
    xp = importlib.import_module(job["library"])
    unit = float(np.finfo(job["dtype"]).eps) / 2
    finite_only, probes = job.get("reread") is not None, job["probes"]
    out = lloyd_totals(xp, x, np.asarray(job["sets"], dtype=np.float64), unit, finite_only,
                       probes)
    size = job.get("lloyd_cell", 1)
    out["pairs"] = [(t, c, lloyd_totals(xp, x[c * size:(c + 1) * size],
                                        np.asarray(centroids, dtype=np.float64)[None], unit,
                                        finite_only, probes))
                    for t, c, centroids in job.get("pairs", ())]
    out["picked"] = to_host(x[xp.asarray(job["picked"])].astype(np.float64))
    out["where"] = job["where"]  # their places among the rows picked
    if job.get("candidates") is not None:
        out["cells"] = init_cells(xp, x, job, unit)
    out.update(kept_data(xp, x, job))
    return out


def _err(dist, x_norm2, c_norm2, d: int, unit: float):
    """How far a squared distance may be off: the run's (its dtype) and this one's (float64)."""
    return (2 * (d + 2) * EPS64 * (x_norm2 + c_norm2) + (d + 3) * unit * dist
            + 2.5 * unit * (dist * c_norm2) ** 0.5 + 2 * unit ** 2 * c_norm2)


def lloyd_totals(xp, x, sets: np.ndarray, unit: float, finite_only: bool,
                 probes: np.ndarray) -> dict:
    """Lloyd's totals of the points ``x`` for each centroid set, float64.

    Per set: ``counts`` of the points nearest each centroid and ``projected``, their sum along
    each column of ``probes`` (``(sets, k, probes)``: Freivalds' check of the means, a few
    numbers where the sums have ``d``); ``near`` and ``near_projected``, the count and
    magnitudes along ``|probes|`` of the points that may be nearest it by a rounding tie; the
    ``inertia`` and its allowance ``inertia_tol``. Over the points: ``largest`` (the largest
    norm), ``squares`` (the sum of ``|x|^2``) and ``points`` counted (with ``finite_only``, a
    point with a NaN or infinite coordinate is left out, as the kernel documents).
    """
    count, k, d = sets.shape
    c = xp.asarray(sets)
    c_norm2 = (c ** 2).sum(axis=2)
    along = xp.asarray(np.asarray(probes, dtype=np.float64))
    out = {name: xp.zeros((count, k)) for name in ("counts", "near")}
    out.update({name: xp.zeros((count, k, along.shape[1]))
                for name in ("projected", "near_projected")})
    out.update(inertia=xp.zeros(count), inertia_tol=xp.zeros(count))
    largest, squares, points = 0.0, 0.0, 0
    for first in range(0, x.shape[0], SLAB):
        x64 = x[first:first + SLAB].astype(np.float64)
        if finite_only:
            x64 = x64[xp.isfinite(x64).all(axis=1)]
        x_norm2 = xp.einsum("ij,ij->i", x64, x64)
        if x64.shape[0]:
            largest = max(largest, float(x_norm2.max()))
        squares += float(x_norm2.sum())
        points += int(x64.shape[0])
        projected = x64 @ along
        for s in range(count):
            shifted = (-2 * c[s]) @ x64.T  # (k, points): distances less |x|^2
            shifted += c_norm2[s][:, None]
            _add_set(xp, out, s, (x64, x_norm2, projected, along), shifted,
                     (c[s], c_norm2[s]), unit)
    done = {name: to_host(value) for name, value in out.items()}
    done.update(largest=np.sqrt(largest) * (1 + 4 * EPS64), squares=squares, points=points)
    return done


def _add_set(xp, out: dict, s: int, points: tuple, shifted, centroids: tuple, unit: float
             ) -> None:
    """One slab's totals for centroid set ``s``: the nearest of every point; ties exactly.

    ``shifted`` holds each centroid's squared distance less ``|x|^2`` (centroids first). A
    point whose two nearest centroids are further apart than both their rounding allowances
    has one possible nearest; only the others (few) go through the exact tie rule of
    :func:`pipelines.kmeans.check_init.near_sets`, which then decides their nearest too.
    """
    x64, x_norm2, projected, along = points
    c, c_norm2 = centroids
    k, d = c.shape
    best, nearest, runner_up = _two_nearest(xp, shifted)
    low = xp.maximum(x_norm2 + nearest, 0)
    low_err = _err(low, x_norm2, c_norm2[best], d, unit)
    most = c_norm2.max()
    second = xp.maximum(x_norm2 + runner_up, 0)
    tied = (second - low) <= (_err(second, x_norm2, most, d, unit)
                              + _err(low, x_norm2, most, d, unit))
    out["inertia_tol"][s] += 2 * low_err[~tied].sum()
    if bool(tied.any()):
        at = xp.flatnonzero(tied)
        near_best, near_low, near_err, err, within, shared, _ = near_sets(
            x64[at], x_norm2[at], c, c_norm2, unit, xp)
        best[at], low[at] = near_best, near_low
        out["near"][s] += shared.sum(axis=0)
        out["near_projected"][s] += shared.astype(np.float64).T @ (xp.abs(x64[at])
                                                                  @ xp.abs(along))
        out["inertia_tol"][s] += (near_err + (err * within).max(axis=1)).sum()
    out["counts"][s] += xp.bincount(best, minlength=k)
    for q in range(projected.shape[1]):
        out["projected"][s][:, q] += xp.bincount(best, weights=projected[:, q], minlength=k)
    out["inertia"][s] += low.sum()


def _two_nearest(xp, shifted) -> tuple:
    """Per column of ``shifted`` (centroids by points): the least row, its value, the next.

    Row by row with whole-column operations (a tie keeps the lower row, as argmin does).
    """
    nearest = shifted[0].copy()
    runner_up = xp.full_like(nearest, xp.inf)
    best = xp.zeros(nearest.shape[0], dtype=np.int64)
    for j in range(1, shifted.shape[0]):
        value = shifted[j]
        runner_up = xp.minimum(runner_up, xp.maximum(nearest, value))
        best[value < nearest] = j
        nearest = xp.minimum(nearest, value)
    return best, nearest, runner_up


def init_cells(xp, x, job: dict, unit: float) -> list:
    """The sampled cells of a k-means|| run, each weighed and its sampling replayed.

    Per cell ``(cell, weights, weights_near, costs, costs_tol)``: the points nearest each
    candidate and those that may be by a rounding tie, and per sampling round the cell's
    cost (sum of squared distances to the candidates so far, float64 as the run's cell sums
    are) and its allowance; then ``first_wrong`` of the shard: ``(round, row, sampled, draw,
    probability)`` of a point sampled otherwise than its seeded draw says (a draw within
    rounding of its probability may go either way), or nothing.
    """
    cell, cells = job["cell"], list(job["cells"])
    if not cells:
        return [[], np.array([])]
    cand = xp.asarray(np.asarray(job["candidates"], dtype=np.float64))
    cand_norm2 = (cand ** 2).sum(axis=1)
    x64 = xp.concatenate([x[c * cell:(c + 1) * cell] for c in cells]).astype(np.float64)
    local = np.concatenate([np.arange(c * cell, min((c + 1) * cell, x.shape[0]))
                            for c in cells])
    which = np.repeat(np.arange(len(cells)), [min(cell, x.shape[0] - c * cell) for c in cells])
    finite = to_host(xp.isfinite(x64).all(axis=1))
    x64, local, which = x64[xp.asarray(finite)], local[finite], which[finite]
    x_norm2 = (x64 ** 2).sum(axis=1)
    dist = xp.maximum(x_norm2[:, None] - 2 * (x64 @ cand.T) + cand_norm2, 0)
    weights, near = _weigh(xp, (x64, x_norm2), dist, (cand, cand_norm2), unit,
                           xp.asarray(which), len(cells))
    costs, allowed, wrong = _replay(xp, dist, x_norm2, cand_norm2, job, local, which, len(cells))
    found = [(c, weights[i], near[i], costs[:, i], allowed[:, i]) for i, c in enumerate(cells)]
    return [found, wrong]


def _weigh(xp, points: tuple, dist, candidates: tuple, unit: float, which, cells: int):
    """Per cell: the points nearest each candidate, and those that may be by a rounding tie.

    As in :func:`lloyd_totals`, only points whose two nearest candidates are within both their
    allowances go through :func:`pipelines.kmeans.check_init.near_sets`.
    """
    x64, x_norm2 = points
    cand, cand_norm2 = candidates
    count, d = cand.shape
    rows = xp.arange(dist.shape[0])
    best = xp.argmin(dist, axis=1)
    low = dist[rows, best]
    near = np.zeros((cells, count))
    if count > 1:
        second = xp.partition(dist, 1, axis=1)[:, 1]
        most = cand_norm2.max()
        tied = (second - low) <= (_err(second, x_norm2, most, d, unit)
                                  + _err(low, x_norm2, most, d, unit))
        if bool(tied.any()):
            at = xp.flatnonzero(tied)
            near_best, _, _, _, _, shared, _ = near_sets(x64[at], x_norm2[at], cand, cand_norm2,
                                                         unit, xp)
            best[at] = near_best
            shared, owner = to_host(shared), to_host(which[at])
            for i in np.unique(owner):
                near[i] = shared[owner == i].sum(axis=0)
    weights = to_host(xp.bincount(which * count + best, minlength=cells * count))
    return weights.reshape(cells, count), near


def _replay(xp, dist, x_norm2, cand_norm2, job: dict, local: np.ndarray, which: np.ndarray,
            cells: int) -> tuple:
    """Each round's cost per cell, and the first point sampled against its seeded draw.

    A round's draws are one double per point of the shard, in order, from
    ``SeedSequence(seed, (INIT, round, shard))``; PCG64 jumps ahead to each cell's.
    """
    plan = job["plan"]
    d = plan["features"]
    low = xp.full(dist.shape[0], xp.inf)
    done, first = 0, None
    costs, allowed = np.zeros((len(plan["costs"]), cells)), np.zeros((len(plan["costs"]), cells))
    xn2 = to_host(x_norm2)
    for s, (cost, end) in enumerate(zip(plan["costs"], plan["ends"], strict=True)):
        if end > done:
            low, done = xp.minimum(low, dist[:, done:end].min(axis=1)), end
        most = float(to_host(cand_norm2[:end].max()))
        least = to_host(low)
        costs[s] = np.bincount(which, weights=least, minlength=cells)
        # the run's and this sum's float64 expansions of each point's distance
        allowed[s] = np.bincount(which, weights=4 * (d + 2) * EPS64 * (xn2 + most),
                                 minlength=cells)
        if cost <= 0 or first is not None:
            continue
        draws = _draws(plan["seed"], s, plan["index"], local)
        threshold = plan["factor"] * least / cost
        margin = (plan["factor"] * 4 * (d + 3) * EPS64 * (xn2 + most) / cost
                  + 4 * EPS64 * threshold)
        got = np.isin(local, plan["kept"][s])
        wrong = np.flatnonzero(((draws < threshold) != got)
                               & (np.abs(draws - threshold) > margin))
        if len(wrong):
            i = int(wrong[0])
            first = [s, int(local[i]) + job["start"], float(got[i]), float(draws[i]),
                     float(threshold[i])]
    return costs, allowed, np.array(first if first is not None else [], dtype=np.float64)


def _draws(seed: int, step: int, index: int, local: np.ndarray) -> np.ndarray:
    """A sampling round's uniform draws of the shard's points at rows ``local`` (increasing)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(INIT, step, index)))
    out = np.empty(len(local))
    at = 0  # the draws taken so far: one 64-bit word each
    for run in np.split(np.arange(len(local)), np.flatnonzero(np.diff(local) > 1) + 1):
        if not len(run):
            continue
        first, last = int(local[run[0]]), int(local[run[-1]])
        rng.bit_generator.advance(first - at)
        out[run] = rng.random(last - first + 1)[local[run] - first]
        at = last + 1
    return out


def kept_data(xp, x, job: dict) -> dict:
    """The kept points against their source; a generated shard's points per blob.

    ``blob_points``: generated points' blobs drawn again (the first draw of the shard's
    generator, any library). ``compared`` points and ``differ`` (the first kept row that is
    not its source's, or -1): the shard's first cell drawn again (NumPy's generator draws in
    order; a later row cannot be drawn alone), or an input's sampled cells read again.
    """
    cell, compared, differ = job["cell"], 0, -1
    if job.get("redraw") is not None:
        seed, index, clusters = job["redraw"]
        rng = generator(job["library"], np.random.SeedSequence(seed, spawn_key=(POINTS, index)))
        blob = rng.integers(0, clusters, x.shape[0])
        out = {"blob_points": to_host(xp.bincount(blob, minlength=clusters)).astype(np.float64)}
        if job["library"] == "numpy":
            compared = min(cell, x.shape[0])
            drawn = rng.standard_normal((compared, x.shape[1]), dtype=job["dtype"])
            if BLOB_STD != 1:
                drawn *= BLOB_STD
            centres = true_centres(seed, clusters, x.shape[1]).astype(job["dtype"])
            drawn += centres[blob[:compared]]
            same = (x[:compared] == drawn).all(axis=1)
            differ = -1 if same.all() else int(np.argmin(same))
        return {**out, "compared": compared, "differ": differ}
    source, start = job["reread"]
    points = _open(source)
    for c in job["cells"]:
        first, stop = c * cell, min((c + 1) * cell, x.shape[0])
        read = np.asarray(points[start + first:start + stop]).astype(job["dtype"])
        kept = to_host(x[first:stop])
        same = ((kept == read) | (np.isnan(kept) & np.isnan(read))).all(axis=1)
        compared += len(same)
        if differ < 0 and not same.all():
            differ = c * cell + int(np.argmin(same))
    return {"compared": compared, "differ": differ}


def _open(source: dict):
    if source["kind"] == "npy":
        return np.load(source["path"], mmap_mode="r")  # allow_pickle stays False
    import zarr

    return zarr.open_array(source["path"], mode="r")
