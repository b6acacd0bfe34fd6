"""kmeans-pipeline's recomputations: :func:`shard_again`, a task a shard, where it lives.

On the points the run kept (``fast``) or the shard drawn or read again (``full``: an input's
rows as :func:`daskgpu.verification.replay.region` reads them, a file's or an array's in
memory), in float64, with code of the check's own. A squared distance is known only up to rounding
(:func:`distance_error`): a point within both errors of two centroids may be nearest either,
and the totals count such points apart (``near``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields

import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.verification import replay, rounding, unit_roundoff
from pipelines.kmeans import shared
from pipelines.kmeans.shared import INIT, NO_LABEL

SLAB = 16_384  # points recomputed at once
DISTANCES = 1 << 22  # distances held at once


def true_centres(seed: int, clusters: int, features: int) -> np.ndarray:
    """The blobs' centres, drawn again from the documented scheme."""
    rng, out, width = replay.stream(seed, shared.CENTRES), [], shared.half_width(clusters, features)
    while len(out) < clusters:
        for _ in range(shared.CENTRE_TRIES):
            c = rng.uniform(-width, width, features)
            if all(np.sum((c - o) ** 2) >= shared.SEPARATION ** 2 for o in out):
                out.append(c)
                break
        else:
            raise AssertionError("the run drew centres the scheme cannot")
    return np.array(out)


def seeded_rows(seed: int, samples: int, k: int) -> np.ndarray:
    """The documented random initial centroids' rows; with ``k`` = 1, k-means||'s first."""
    return replay.stream(seed, INIT).choice(samples, size=k, replace=False)


def drawn(job: Job, count: int) -> tuple:
    """Generated shard ``job.index`` drawn again: its first ``count`` points, points per blob."""
    xp = importlib.import_module(job.library)
    rng = replay.stream(job.seed, shared.POINTS, job.index, library=job.library)
    blob = rng.integers(0, job.clusters, job.rows)
    points = rng.standard_normal((count, job.features), dtype=job.dtype)
    if shared.BLOB_STD != 1:
        points *= shared.BLOB_STD
    points += xp.asarray(true_centres(job.seed, job.clusters, job.features).astype(job.dtype))[
        blob[:count]]
    return points, to_host(xp.bincount(blob, minlength=job.clusters)).astype(np.float64)


def expansion_error(x_norm2, c_norm2, d: int):
    """How far two float64 expansions of a distance differ (each errs ``rounding(d + 2)``)."""
    return 4 * rounding(d + 2) * (x_norm2 + c_norm2)


def kernel_error(dist, c_norm2, d: int, dtype: str):
    """How far the run's squared distance (differences in ``dtype``) or a sum of them is off."""
    u = unit_roundoff(dtype)
    return rounding(d + 3, dtype) * dist + 2.5 * u * (dist * c_norm2) ** 0.5 + 2 * u * u * c_norm2


def distance_error(dist, x_norm2, c_norm2, d: int, dtype: str):
    """How far the run's squared distance and this check's float64 expansion may differ."""
    return expansion_error(x_norm2, c_norm2, d) + kernel_error(dist, c_norm2, d, dtype)


def near_sets(xp, x, x_norm2, c, c_norm2, dtype: str) -> tuple:
    """Each point's nearest row of ``c`` (its distance, errors), and those within both errors.

    Returns ``best, low, low_err, err, within, tied, dist``: ``tied`` rows of a point in a tie.
    """
    dist = xp.maximum(x_norm2[:, None] - 2 * (x @ c.T) + c_norm2, 0)
    err = distance_error(dist, x_norm2[:, None], c_norm2, x.shape[1], dtype)
    best = xp.argmin(dist, axis=1)
    low = xp.take_along_axis(dist, best[:, None], axis=1)[:, 0]
    low_err = xp.take_along_axis(err, best[:, None], axis=1)[:, 0]
    within = (dist - low[:, None]) <= err + low_err[:, None]
    return best, low, low_err, err, within, within & (within.sum(axis=1) > 1)[:, None], dist


@dataclass
class Totals:
    """Lloyd's totals of some points for one centroid set, in float64; parts add up (``+``).

    ``projected``: sums along each probe (or feature); ``near``, ``near_projected``: of the
    points in a rounding tie (magnitudes along ``|probe|``); ``largest``: the largest norm.
    """

    counts: np.ndarray
    projected: np.ndarray
    near: np.ndarray
    near_projected: np.ndarray
    inertia: float = 0.0
    inertia_tol: float = 0.0
    points: int = 0
    largest: float = 0.0
    squares: float = 0.0

    def __add__(self, other: Totals) -> Totals:
        added = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        return Totals(**{**added, "largest": max(self.largest, other.largest)})


def lloyd_totals(xp, x, sets, probes, dtype: str, finite_only: bool) -> list[Totals]:
    """Lloyd's :class:`Totals` of the points ``x`` for each centroid set of ``sets``.

    Along the columns of ``probes`` (Freivalds' check), or the features where it is None;
    ``finite_only``: a point with a NaN or infinite coordinate left out, as the kernel does.
    """
    sets = np.asarray(sets, dtype=np.float64)
    k, d = sets.shape[1:]
    c, q = xp.asarray(sets), d if probes is None else probes.shape[1]
    along = None if probes is None else xp.asarray(np.asarray(probes, dtype=np.float64))
    out = [Totals(*(xp.zeros(shape) for shape in (k, (k, q), k, (k, q), (), ()))) for _ in sets]
    largest = squares = points = 0
    for first in range(0, x.shape[0], SLAB):
        x64 = x[first:first + SLAB].astype(np.float64)
        x64 = x64[xp.isfinite(x64).all(axis=1)] if finite_only else x64
        if x64.shape[0]:
            x_norm2 = xp.einsum("ij,ij->i", x64, x64)
            largest, squares = max(largest, float(x_norm2.max())), squares + float(x_norm2.sum())
            points += int(x64.shape[0])
            slab = (x64, x_norm2, x64 if along is None else x64 @ along,
                    None if along is None else xp.abs(along))
            for s, totals in enumerate(out):
                _add_slab(xp, totals, slab, c[s], (c[s] ** 2).sum(axis=1), dtype)
    norm = float(np.sqrt(largest)) * (1 + rounding(d))
    return [Totals(*[to_host(getattr(t, f.name)) for f in fields(t)][:6], points, norm, squares)
            for t in out]


def _add_slab(xp, totals: Totals, slab: tuple, c, c_norm2, dtype: str) -> None:
    """Add a slab's totals for centroids ``c``."""
    x64, x_norm2, projected, along = slab
    best, low, tied, near, _ = nearest(xp, x64, x_norm2, c, c_norm2, dtype)
    d, magnitude = c.shape[1], xp.abs(x64[tied])  # of the points in a tie (along |probes|)
    totals.inertia_tol += 2 * distance_error(low, x_norm2, c_norm2[best], d, dtype)[~tied].sum()
    totals.near += near[5].sum(axis=0)
    totals.near_projected += near[5].astype(np.float64).T @ (
        magnitude if along is None else magnitude @ along)
    totals.inertia_tol += (near[2] + (near[3] * near[4]).max(axis=1)).sum()
    totals.counts += xp.bincount(best, minlength=len(c))
    for j in range(projected.shape[1]):
        totals.projected[:, j] += xp.bincount(best, weights=projected[:, j], minlength=len(c))
    totals.inertia += low.sum()


def nearest(xp, x, x_norm2, c, c_norm2, dtype: str) -> tuple:
    """Each point's nearest row of ``c``, distance, rounding ties (``tied``, ``near``: its say)."""
    shifted = c_norm2[:, None] - 2 * (c @ x.T)
    best, first, second = _two_nearest(xp, shifted)
    low, second = xp.maximum(x_norm2 + first, 0), xp.maximum(x_norm2 + second, 0)
    most, d = c_norm2.max(), x.shape[1]
    tied = (second - low) <= (distance_error(second, x_norm2, most, d, dtype)
                              + distance_error(low, x_norm2, most, d, dtype))
    near = near_sets(xp, x[tied], x_norm2[tied], c, c_norm2, dtype)
    best[tied], low[tied] = near[0], near[1]
    return best, low, tied, near, shifted


def _two_nearest(xp, shifted) -> tuple:
    """Per column of ``shifted`` (centroids by points): the least row, its value, the next."""
    nearest, best = shifted[0].copy(), xp.zeros(shifted.shape[1], dtype=np.int64)
    runner_up = xp.full_like(nearest, xp.inf)
    for j in range(1, shifted.shape[0]):  # a tie keeps the lower row, as argmin does
        runner_up = xp.minimum(runner_up, xp.maximum(nearest, shifted[j]))
        best[shifted[j] < nearest] = j
        nearest = xp.minimum(nearest, shifted[j])
    return best, nearest, runner_up


@dataclass(frozen=True)
class Sampling:
    """A k-means|| run's candidates, rounds and one shard's rows each round sampled (``kept``)."""

    seed: int
    index: int
    candidates: np.ndarray
    costs: tuple[float, ...]
    ends: tuple[int, ...]
    factor: float
    kept: tuple[np.ndarray, ...]
    cell: int


def init_cells(xp, x, sampling: Sampling, cells, dtype: str) -> tuple[list, tuple | None]:
    """Cells ``cells`` of shard ``x`` weighed again, their sampling replayed.

    Per cell ``(cell, weights, near, costs, costs_tol)``; and the first ``(round, row, sampled,
    draw, probability)`` sampled otherwise than its draw says (beyond rounding), or None.
    """
    size, count = sampling.cell, len(sampling.candidates)
    cand = xp.asarray(np.asarray(sampling.candidates, dtype=np.float64))
    found, wrong, group = [], None, max(1, DISTANCES // (count * size))
    for part in (list(cells[i:i + group]) for i in range(0, len(cells), group)):
        x64 = xp.concatenate([x[c * size:(c + 1) * size] for c in part]).astype(np.float64)
        local = np.concatenate([np.arange(c * size, min((c + 1) * size, x.shape[0]))
                                for c in part])
        which = np.repeat(np.arange(len(part)), [min(size, x.shape[0] - c * size) for c in part])
        finite = to_host(xp.isfinite(x64).all(axis=1))
        x64, local, which = x64[xp.asarray(finite)], local[finite], which[finite]
        x_norm2 = (x64 ** 2).sum(axis=1)
        best, _, tied, ties, shifted = nearest(xp, x64, x_norm2, cand, (cand ** 2).sum(1), dtype)
        dist = xp.maximum(x_norm2[:, None] + shifted.T, 0)
        weights = to_host(xp.bincount(xp.asarray(which) * count + best,
                                      minlength=len(part) * count)).reshape(len(part), count)
        tie, candidate = np.nonzero(to_host(ties[5]))
        near = np.bincount(which[to_host(xp.flatnonzero(tied))][tie] * count + candidate,
                           minlength=weights.size).reshape(weights.shape)
        costs, allowed, first = _replay(xp, dist, to_host(x_norm2), sampling,
                                        (local, which, len(part)), x.shape[1])
        found += [(c, weights[i], near[i], costs[:, i], allowed[:, i])
                  for i, c in enumerate(part)]
        wrong = wrong or first
    return found, wrong


def _replay(xp, dist, x_norm2: np.ndarray, sampling: Sampling, where: tuple, d: int) -> tuple:
    """Each round's cost per cell; the first point sampled against its draw (a double a row)."""
    local, which, cells = where
    candidates = (np.asarray(sampling.candidates) ** 2).sum(axis=1)
    low, done, first = xp.full(dist.shape[0], xp.inf), 0, None
    costs, allowed = np.zeros((2, len(sampling.costs), cells))
    for s, (cost, end) in enumerate(zip(sampling.costs, sampling.ends, strict=True)):
        if end > done:
            low, done = xp.minimum(low, dist[:, done:end].min(axis=1)), end
        least, error = to_host(low), expansion_error(x_norm2, candidates[:end].max(), d)
        costs[s] = np.bincount(which, weights=least, minlength=cells)
        allowed[s] = np.bincount(which, weights=error, minlength=cells)
        if cost > 0 and first is None:
            draws = replay.uniform_rows(sampling.seed, (INIT, s, sampling.index), local)
            threshold = sampling.factor * least / cost
            margin = sampling.factor * error / cost + 2 * rounding(2) * threshold
            got = np.isin(local, sampling.kept[s])
            wrong = np.flatnonzero(((draws < threshold) != got)
                                   & (np.abs(draws - threshold) > margin))
            if len(wrong):
                i = int(wrong[0])
                first = (s, int(local[i]), bool(got[i]), float(draws[i]), float(threshold[i]))
    return costs, allowed, first


@dataclass(frozen=True)
class Labels:
    """The labels a run wrote (``path``, or None), the ``centroids`` they name, ``cells`` to do."""

    path: str | None
    kind: str
    edits: tuple
    centroids: np.ndarray
    cell: int
    cells: tuple[int, ...]


def read_labels(labels: Labels, start: int, stop: int, kept=None) -> np.ndarray:
    """Labels ``start .. stop - 1``: ``kept`` (the run's kept block) or the file's, edited."""
    read = np.asarray(to_host(kept) if kept is not None else replay.stored(
        labels.path, labels.kind)[start:stop]).astype(np.int64)
    for edit in labels.edits:
        first, last = max(start, edit["start"]), min(stop, edit["stop"])
        rows = np.arange(first + (edit["start"] - first) % edit["step"], last, edit["step"])
        read[rows - start] += edit["add"]
        if edit["modulo"]:
            read[rows - start] %= edit["modulo"]
    return read


def labels_again(x, labels: Labels, start: int, dtype: str, kept=None) -> tuple:
    """A shard's labels counted and recomputed in its cells: counts, unlabelled, first wrong.

    ``kept``: the shard's labels kept on the workers, read instead of the file. ``outside``:
    the first ``(row, label)`` out of range; ``wrong``: the first ``(row, label, nearest)``
    recomputed otherwise; ``unequal``: the first ``(row, file's, kept)`` where the file holds
    other labels than those kept (global rows); or None.
    """
    read, k = read_labels(labels, start, start + x.shape[0], kept), len(labels.centroids)
    written = read if kept is None or labels.path is None else read_labels(
        labels, start, start + x.shape[0])
    differ = np.flatnonzero(written != read)[:1]
    unequal = (start + int(differ[0]), int(written[differ][0]), int(read[differ][0])) if len(
        differ) else None
    out = np.flatnonzero((read < NO_LABEL) | (read >= k))
    outside, wrong = ((start + int(out[0]), int(read[out[0]])) if len(out) else None), None
    for c in labels.cells if outside is None else ():
        lo, hi = c * labels.cell, min(x.shape[0], (c + 1) * labels.cell)
        wrong = wrong_label(x[lo:hi], read[lo:hi], labels.centroids, dtype)
        if wrong is not None:
            wrong = (start + lo + wrong[0], *wrong[1:])
            break
    counts = np.bincount(read[(read >= 0) & (read < k)], minlength=k)
    return counts, int((read == NO_LABEL).sum()), outside, wrong, unequal


def wrong_label(points, labels: np.ndarray, centroids: np.ndarray, dtype: str) -> tuple | None:
    """The first point not labelled its nearest centroid (within rounding), or None.

    ``(row, label, nearest)``; a point of no finite distance must be ``NO_LABEL``.
    """
    xp = importlib.import_module(type(points).__module__.split(".")[0])
    c, k = xp.asarray(centroids), len(centroids)
    slab = max(1, DISTANCES // k)
    for first in range(0, points.shape[0], slab):
        x = points[first:first + slab].astype(np.float64)
        finite, given = to_host(xp.isfinite(x).all(axis=1)), labels[first:first + slab]
        x = xp.where(xp.asarray(finite)[:, None], x, 0.0)
        best, _, _, _, within, _, _ = near_sets(xp, x, (x * x).sum(axis=1), c,
                                                (c * c).sum(axis=1), dtype)
        ok = np.where(finite, (given >= 0) & (given < k), given == NO_LABEL)
        inside = np.flatnonzero(ok & finite)
        ok[inside] = to_host(within)[inside, given[inside]]
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            return first + i, int(given[i]), int(to_host(best)[i]) if finite[i] else NO_LABEL
    return None


@dataclass(frozen=True)
class Job:
    """What :func:`shard_again` recomputes on shard ``index`` (rows ``start`` on).

    Totals of the centroid sets ``whole`` and of ``pairs`` ``(t, cell, centroids)``; the points
    at rows ``picked``; k-means|| ``cells`` weighed and replayed (an input's re-read, if kept).
    ``source``: the input's name, or None for generated points.
    """

    index: int
    start: int
    rows: int
    features: int
    seed: int
    clusters: int | None
    dtype: str
    library: str
    source: str | None
    whole: np.ndarray
    pairs: tuple
    lloyd_cell: int
    probes: np.ndarray | None
    picked: np.ndarray
    sampling: Sampling | None = None
    cells: tuple = ()
    labels: Labels | None = None
    cell: int = 1


@dataclass
class Again:
    """What :func:`shard_again` found; ``differ``: the first kept point not its source's."""

    whole: list
    pairs: list
    picked: np.ndarray
    init: list
    first_wrong: tuple | None
    labels: tuple | None
    blobs: np.ndarray | None
    compared: int = 0
    differ: int = -1


def shard_again(x, job: Job, read=None, labels=None) -> Again:
    """Recompute ``job`` on a shard: ``x``, the kept one, or None: drawn, or ``read`` again.

    ``read``: an input's rows read again (:func:`daskgpu.verification.replay.region`): with
    ``x``, those of the job's ``cells``, one array each; else the whole shard's. ``labels``:
    the shard's labels the run kept on the workers, if it did.
    """
    xp = importlib.import_module(job.library)
    blobs, compared, differ = None, 0, -1
    if x is not None:
        blobs, compared, differ = kept_data(xp, x, job, read or ())
    elif job.source is None:
        x, blobs = drawn(job, job.rows)
    else:
        x = xp.asarray(np.asarray(read, dtype=job.dtype))
    finite, size = job.source is not None, job.lloyd_cell
    whole = lloyd_totals(xp, x, job.whole, job.probes, job.dtype, finite)
    pairs = [(t, c, lloyd_totals(xp, x[c * size:(c + 1) * size], centroids[None], job.probes,
                                 job.dtype, finite)[0]) for t, c, centroids in job.pairs]
    init, wrong = (init_cells(xp, x, job.sampling, job.cells, job.dtype)
                   if job.sampling is not None else ([], None))
    labels = labels_again(x, job.labels, job.start, job.dtype, labels) if job.labels else None
    picked = to_host(x[xp.asarray(job.picked)].astype(np.float64))
    return Again(whole, pairs, picked, init, wrong, labels, blobs, compared, differ)


def kept_data(xp, x, job: Job, read=()) -> tuple:
    """The kept points against their source: ``(blobs, compared, differ)``.

    Their blobs and (NumPy's generator draws in order) first cell drawn again; or an input's
    planned ``cells``, ``read`` again (one array each).
    """
    if job.source is None:
        compared = min(job.cell, x.shape[0]) if job.library == "numpy" else 0
        points, blobs = drawn(job, compared)
        same = (x[:compared] == points).all(axis=1)
        return blobs, compared, -1 if bool(same.all()) else int(np.argmin(same))
    compared, differ = 0, -1
    for c, again in zip(job.cells, read, strict=True):
        first, stop = c * job.cell, min((c + 1) * job.cell, x.shape[0])
        again, kept = np.asarray(again, dtype=job.dtype), to_host(x[first:stop])
        same = ((kept == again) | (np.isnan(kept) & np.isnan(again))).all(axis=1)
        compared += len(same)
        if differ < 0 and not same.all():
            differ = first + int(np.argmin(same))
    return None, compared, differ
