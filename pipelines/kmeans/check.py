"""kmeans-pipeline's check, declared on :mod:`daskgpu.verification`.

The run reports sums per cell of consecutive points beside its answer (Lloyd's totals of every
iteration but the last; k-means||'s costs, sampled points and weights). Both depths recompute,
a task a shard (:mod:`.check_replay`), on the points the run kept (``fast``) or on every shard
drawn or read again (``full``): the cells of the plan (a seeded sample, or all), the last
iteration (or all) over all points, the initialisation, the outputs. An input, file or array
in memory, is read again through :func:`daskgpu.verification.replay.region`, apart from the
run's graph. See ``docs/pipelines``.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from daskgpu.verification import Check, Plan, Sampler, Unreadable, differences, replay
from daskgpu.verification.bounds import FALSE_ALARM, rounding, share, sigmas, tolerance
from pipelines.kmeans import check_replay as again
from pipelines.kmeans import shared
from pipelines.kmeans.check_fast import data_kept
from pipelines.kmeans.check_mutations import MUTATIONS
from pipelines.kmeans.shared import KMeansContext

PROBES = 4  # random directions the fast check compares sums along
ROUNDS = shared.KMEANS_PARALLEL_ROUNDS
MIN_BLOB = 100  # a blob of fewer points need not be seeded


class Plans(NamedTuple):
    """The cells a depth recomputes: Lloyd's (``t * cells + g``), k-means||'s, the labels'."""

    lloyd: Plan
    cells: Plan
    labels: Plan


def plans(ctx: KMeansContext, iterations: int, depth: str) -> Plans:
    """Every cell at ``full``; at ``fast`` a seeded sample (a tenth caught at 99.9 %)."""
    lloyd = (iterations - 1) * ctx.cells(ctx.lloyd_rows(iterations)).total
    return Plans(*(Plan.at(depth, total, Sampler(ctx.check_seed, purpose), unit=unit)
                   for total, purpose, unit in (
                       (lloyd, "lloyd cells", "Lloyd cells"),
                       (ctx.cells(ctx.cell_rows).total, "cells", "cells"),
                       (ctx.cells(ctx.label_rows).total, "labels", "cells"))))


@dataclass
class Reported:
    """What the check reads of a result (:func:`read`), then what :func:`recompute` found."""

    trajectory: np.ndarray
    inertias: np.ndarray
    counts: np.ndarray
    init: dict | None
    lloyd_cells: dict | None
    labels: dict | None
    written: dict
    keep: bool = False  # whether the run kept labels on the workers (a run from Python)
    kept: object = None  # those labels, a Dask array
    shards: list = field(default_factory=list)
    whole: dict = field(default_factory=dict)
    picked: np.ndarray | None = None
    probes: np.ndarray | None = None
    plans: Plans | None = None

    @property
    def iterations(self) -> int:
        """Lloyd iterations run; the last starts at centroid set ``iterations - 1``."""
        return len(self.trajectory) - 1

    @property
    def final(self) -> again.Totals:
        """Lloyd's totals over all points at the final centroids."""
        return self.whole[self.iterations]


def read(workload, raw) -> Reported:
    """The reported iterations, their shapes checked, and the outputs this run wrote."""
    ctx: KMeansContext = workload.context
    if not isinstance(raw, dict) or not {"centroids", "inertias", "iterations"} <= set(raw):
        raise Unreadable(f"result carries no centroids, inertias and iterations to check: "
                         f"{type(raw)}")
    trajectory, steps = np.asarray(raw["centroids"]), int(raw["iterations"])
    sets = len(trajectory) if trajectory.ndim else 0
    for wrong, problem in (
            (trajectory.ndim != 3 or trajectory.shape[1:] != (ctx.k, ctx.features),
             f"centroids of shape {trajectory.shape}; (iterations + 1, k, d) expected"),
            (sets != steps + 1 or len(raw["inertias"]) != steps + 1,
             f"{steps} iterations reported, {sets} centroid sets and "
             f"{len(raw['inertias'])} inertias (iterations + 1 expected)"),
            (not 1 <= steps <= ctx.max_iter,
             f"{steps} iterations reported; between 1 and --max-iter {ctx.max_iter} expected"),
            (not np.all(np.isfinite(trajectory)), "centroids hold NaN or infinite values")):
        if wrong:
            raise Unreadable(problem)
    written = {name: workload.written(path) for name, path in (("output", ctx.output),
                                                                ("labels", ctx.labels))
               if path and workload.written(path) != path}
    labels = raw.get("labels") if isinstance(raw.get("labels"), dict) else {}
    return Reported(trajectory.astype(np.float64), np.asarray(raw["inertias"], np.float64),
                    np.asarray(raw.get("counts", ()), np.float64), raw.get("init"),
                    raw.get("cells"), raw.get("labels"), written, workload.keep,
                    labels.get("kept"))


def stopping(ctx: KMeansContext, r: Reported, verdict) -> None:
    """Every shift but the last over ``--tol``; the last within it unless ``--max-iter`` ran."""
    shifts = np.sqrt((np.diff(r.trajectory, axis=0) ** 2).sum(axis=2)).max(axis=1)
    early = np.flatnonzero(shifts[:-1] <= ctx.tol)
    if len(early):
        verdict.fail(f"iterations went on after iteration {early[0] + 1}, whose largest "
                     f"centroid shift {shifts[early[0]]:.3g} was within --tol {ctx.tol:g}")
    elif shifts[-1] > ctx.tol and r.iterations < ctx.max_iter:
        verdict.fail(f"iterations stopped after {r.iterations} (of --max-iter {ctx.max_iter}) "
                     f"with a last centroid shift {shifts[-1]:.3g} over --tol {ctx.tol:g}")


def candidates_problem(ctx: KMeansContext, chosen) -> str | None:
    """What is wrong with the reported k-means|| candidates' shapes and ranges, or None."""
    if not isinstance(chosen, dict) or not {"rows", "points", "weights"} <= set(chosen):
        return "k-means|| result reports no initial candidates (rows, points, weights) to check"
    rows, points = np.asarray(chosen["rows"]), np.asarray(chosen["points"])
    weights = np.asarray(chosen["weights"] if chosen["weights"] is not None else [np.nan])
    rounds = np.asarray(chosen.get("rounds", ()))
    costs, n = np.asarray(chosen.get("costs", ()), dtype=np.float64), len(rows)
    if rows.ndim != 1 or not np.issubdtype(rows.dtype, np.integer) or n < ctx.k:
        return (f"initial candidates: rows of shape {rows.shape} and type {rows.dtype}; at "
                f"least --k {ctx.k} integer rows expected")
    if rows.min() < 0 or rows.max() >= ctx.samples:
        return f"initial candidates: a row outside 0 .. {ctx.samples - 1}"
    if points.shape != (n, ctx.features) or not np.all(np.isfinite(points)):
        return (f"initial candidates: points of shape {points.shape} (finite, "
                f"{(n, ctx.features)} expected)")
    if weights.shape != (n,) or not np.all(weights >= 0) or np.any(weights != weights.round()):
        return f"initial candidates: weights must be {n} whole counts of 0 or more"
    if (rounds.shape != (n,) or not np.issubdtype(rounds.dtype, np.integer) or rounds[0] != 0
            or np.any(np.diff(rounds) < 0) or rounds.max() > ROUNDS + 1):
        return (f"initial candidates: rounds must be {n} non-decreasing whole numbers from 0 "
                f"to {ROUNDS + 1}")
    if costs.ndim != 1 or not np.all(np.isfinite(costs)) or not (
            len(costs) == ROUNDS or (1 <= len(costs) <= ROUNDS and costs[-1] <= 0)):
        return (f"k-means|| ran {costs.size} sampling rounds (costs {costs.tolist()[:6]}); "
                f"{ROUNDS} expected, fewer only after a cost of 0")
    sampled = len(costs) - int(costs[-1] <= 0)  # rounds that sampled
    if np.any((rounds > sampled) & (rounds <= ROUNDS)) or np.any(costs[:-1] <= 0):
        return "initial candidates: sampled in a round that did not run"
    return None


def certificates(ctx: KMeansContext, r: Reported, verdict) -> None:
    """The run's cells: one of each a cell; k-means||'s candidates' sampling and weights."""
    certified, count = r.iterations - 1, ctx.cells(ctx.lloyd_rows(r.iterations)).total
    cells = r.lloyd_cells if isinstance(r.lloyd_cells, dict) else {}
    if certified and [np.shape(cells.get(name, ())) for name in ("sums", "counts", "inertia")
                      ] != [(certified, count, ctx.k, ctx.features), (certified, count, ctx.k),
                            (certified, count)]:
        verdict.fail(f"result carries no cell sums of its {certified} iterations before the last "
                     "to check (a fast check needs them)")
    elif ctx.init != "random" and verdict.note(candidates_problem(ctx, r.init)):
        verdict.note(_init_cells_problem(ctx, r.init))


def _init_cells_problem(ctx: KMeansContext, chosen: dict) -> str | None:
    """Whether the cells' sampled points and weights (whole numbers) are exactly the reported."""
    cells, rows = ctx.cells(ctx.cell_rows), np.asarray(chosen["rows"])
    sampled = len(chosen["costs"]) - int(chosen["costs"][-1] <= 0)
    per_cell = np.asarray(chosen.get("cell_sampled", np.zeros((0, 0))))
    weighed = np.asarray(chosen.get("cell_weights", np.zeros((0, 0))))
    if (per_cell.shape, np.shape(chosen.get("cell_costs"))) != ((sampled, cells.total),) * 2:
        return (f"k-means|| reports no sampled points and costs of its {cells.total} cells in "
                f"{sampled} rounds to check (a fast check needs them)")
    shard = np.searchsorted(ctx.edges, rows, side="right") - 1
    owner = cells.firsts[shard] + (rows - ctx.edges[shard]) // ctx.cell_rows
    for s in range(sampled):
        reported = np.bincount(owner[np.asarray(chosen["rounds"]) == s + 1],
                               minlength=cells.total)
        if np.any(reported != per_cell[s]):
            g = int(np.flatnonzero(reported != per_cell[s])[0])
            return (f"k-means|| round {s}: the run's cells sampled {int(per_cell[s].sum())} "
                    f"points ({int(per_cell[s][g])} in cell {g}), {int(reported.sum())} "
                    f"reported sampled ({int(reported[g])} there)")
    if weighed.shape != (cells.total, len(rows)):
        return f"k-means|| reports no weights of its candidates in its {cells.total} cells"
    return differences(chosen["weights"], weighed.sum(axis=0), what="initial candidate",
                       reported_as="weight {}",
                       expected_as="the run's cells count {} points nearest it")


def _named(ctx: KMeansContext, r: Reported) -> str:
    """How the check names the labels: ``--labels``'s, else those kept (read where kept)."""
    return f"--labels {ctx.labels}" if ctx.labels else "the kept labels"


def labels_written(ctx: KMeansContext, r: Reported, verdict) -> None:
    """The labels, one int32 a point shard by shard: kept (from Python), written (--labels)."""
    name, path, sizes, kept = ctx.labels, r.written.get("labels"), list(ctx.sizes), r.kept
    rows = list(r.labels.get("rows", ())) if isinstance(r.labels, dict) else None
    blocks = getattr(kept, "chunks", None), getattr(kept, "dtype", type(kept).__name__)
    if not (name or r.keep) or not all(verdict.require(ok, problem) for ok, problem in (
            (rows == sizes, f"{_named(ctx, r)}: the run reports labelling {rows} points by "
                            f"shard; {sizes} expected"),
            (path is not None or not name, f"--labels {name}: this run wrote no labels"),
            (kept is not None or not r.keep, "the run kept no labels on the workers"),
            (kept is None or blocks == ((tuple(sizes),), np.int32), f"the kept labels: "
             f"{blocks[1]} in blocks {blocks[0]}; int32 in the shards' {sizes} expected"))
    ) or not path:
        return
    try:
        opened = replay.stored(path, _kind(name))
    except (OSError, ValueError, KeyError) as exc:
        verdict.fail(f"--labels {name}: cannot be read back ({exc})")
        return
    shape, dtype = tuple(opened.shape), np.dtype(opened.dtype)
    verdict.require(shape == (ctx.samples,) and dtype == np.int32, lambda: (
        f"--labels {name}: {dtype} of shape {shape}; int32 of shape ({ctx.samples},) expected"))


def _kind(name: str) -> str:
    return "zarr" if name.lower().endswith(".zarr") else "npy"


def recompute(ctx: KMeansContext, r: Reported, verdict) -> None:
    """A task a shard (:func:`~.check_replay.shard_again`): kept (fast), or drawn again (full)."""
    fast, kept = verdict.depth == "fast", ctx.kept.shards.futures
    if not verdict.require(kept or not fast, "the run's shards were let go before the fast "
                                             "check read them"):
        return
    r.plans = plans(ctx, r.iterations, verdict.depth)
    r.probes = Sampler(ctx.check_seed, "probes").normal((ctx.features, PROBES)) if fast else None
    last = r.iterations - 1  # the last iteration's centroids before, and after it
    sets, index = np.unique(r.trajectory[last:], axis=0, return_inverse=True)
    jobs, rows = _jobs(ctx, r, fast, sets)
    r.shards = replay.on_workers(again.shard_again, [
        (kept[i] if fast else None, job, _read_again(ctx, job, fast),
         None if r.kept is None else r.kept.blocks[i]) for i, job in enumerate(jobs)])
    add = functools.partial(functools.reduce, operator.add)
    r.whole = {last + i: add(part.whole[j] for part in r.shards)
               for i, j in enumerate(np.asarray(index).reshape(-1))}
    if r.plans.lloyd.complete:  # every cell of every earlier iteration: their sums are its totals
        r.whole.update({t: add(totals for part in r.shards for u, _, totals in part.pairs
                               if u == t) for t in range(last)})
    r.picked = np.empty((len(rows), ctx.features))
    for job, part in zip(jobs, r.shards, strict=True):
        r.picked[(rows >= job.start) & (rows < job.start + job.rows)] = part.picked


def _read_again(ctx: KMeansContext, job: again.Job, fast: bool):
    """An input's points read again for a shard's job (lazily): its planned cells, or all."""
    if ctx.random:
        return None
    spans = [(job.start + c * job.cell, job.start + min((c + 1) * job.cell, job.rows))
             for c in job.cells] if fast else [(job.start, job.start + job.rows)]
    read = [replay.region(ctx.source, (slice(*span), slice(None)), ctx.dtype) for span in spans]
    return read if fast else read[0]


def _by_shard(ctx: KMeansContext, plan: Plan, rows: int, iterations: bool = False) -> list:
    """The plan's cells of ``rows`` points by shard, numbered in it (with ``t``: iterations)."""
    cells, out = ctx.cells(rows), [[] for _ in ctx.sizes]
    for part in plan:
        t, g = divmod(part, cells.total) if iterations else (None, part)
        shard, index = cells.locate(g)
        out[shard].append((t, index) if iterations else index)
    return out


def _jobs(ctx: KMeansContext, r: Reported, fast: bool, sets: np.ndarray) -> tuple:
    """The job of every shard, and the global rows whose points come back."""
    pairs = _by_shard(ctx, r.plans.lloyd, ctx.lloyd_rows(r.iterations), iterations=True)
    cells, labelled = _by_shard(ctx, r.plans.cells, ctx.cell_rows), _by_shard(ctx, r.plans.labels,
                                                                            ctx.label_rows)
    kmeans_parallel, edges, jobs = ctx.init != "random", ctx.edges, []
    rows = (np.asarray(r.init["rows"], dtype=np.int64) if kmeans_parallel
            else again.seeded_rows(ctx.seed, ctx.samples, ctx.k))
    for i, size in enumerate(ctx.sizes):
        labels = (ctx.labels or r.kept is not None) and again.Labels(
            r.written.get("labels"), _kind(ctx.labels or ""),
            tuple(r.labels.get("edits", ())), r.trajectory[-1], ctx.label_rows,
            tuple(labelled[i]))
        jobs.append(again.Job(
            i, int(edges[i]), int(size), ctx.features, ctx.seed, ctx.clusters, ctx.dtype,
            ctx.library, None if ctx.random else ctx.source.path, sets,
            tuple((t, c, r.trajectory[t]) for t, c in pairs[i]), ctx.lloyd_rows(r.iterations),
            r.probes, rows[(rows >= edges[i]) & (rows < edges[i + 1])] - edges[i],
            _sampling(ctx, r.init, i) if kmeans_parallel else None, tuple(cells[i]),
            labels or None, ctx.cell_rows))
    return jobs, rows


def _sampling(ctx: KMeansContext, chosen: dict, index: int) -> again.Sampling:
    rows, rounds = np.asarray(chosen["rows"]), np.asarray(chosen["rounds"])
    costs, first = tuple(float(c) for c in chosen["costs"]), ctx.edges[index]
    mine = (rows >= first) & (rows < ctx.edges[index + 1])
    return again.Sampling(ctx.seed, index, np.asarray(chosen["points"], dtype=np.float64), costs,
                          tuple(int(np.sum(rounds <= s)) for s in range(len(costs))),
                          float(shared.KMEANS_PARALLEL_OVERSAMPLING * ctx.k),
                          tuple(np.sort(rows[mine & (rounds == s + 1)] - first)
                                for s in range(len(costs))), ctx.cell_rows)


def init_cells_again(ctx: KMeansContext, r: Reported, verdict) -> None:
    """k-means||: candidates the data's points, costs their cells', planned cells recomputed."""
    if not (verdict.note(points_problem(ctx, r.init, r.picked))
            and verdict.note(_costs_problem(ctx, r.init, r.final))):
        return
    firsts, weighed = ctx.cells(ctx.cell_rows).firsts, np.asarray(r.init["cell_weights"])
    costs = np.asarray(r.init["cell_costs"])
    for s, part in enumerate(r.shards):
        for c, counted, near, cost, cost_tol in part.init:
            g, cost = int(firsts[s]) + c, cost[:costs.shape[0]]
            if not (verdict.note(differences(
                    weighed[g], counted, what="initial candidate", tolerance=near,
                    reported_as=f"the run weighs {{}} points of cell {g} nearest it",
                    expected_as="{} recounted (or within a rounding tie)"))
                    and verdict.note(differences(
                        costs[:, g], cost, what="round", label=lambda q: f"k-means|| round {q}",
                        tolerance=cost_tol[:len(cost)] + 2 * rounding(ctx.cell_rows) * cost,
                        reported_as=f"cell {g}'s sampling cost {{}} in the run",
                        expected_as="{} recomputed"))):
                return
        if part.first_wrong is not None:
            q, row, got, draw, threshold = part.first_wrong
            verdict.fail(f"k-means|| round {q}: row {row + int(ctx.edges[s])} was "
                         f"{'' if got else 'not '}sampled, its draw {draw:.6g} against its "
                         f"probability {min(threshold, 1.0):.6g}")
            return


def points_problem(ctx: KMeansContext, chosen: dict, read: np.ndarray) -> str | None:
    """Whether the candidates are the data's points at their rows, the first the seeded row."""
    rows, points = np.asarray(chosen["rows"]), np.asarray(chosen["points"], dtype=np.float64)
    first = int(again.seeded_rows(ctx.seed, ctx.samples, 1)[0])
    if int(rows[0]) != first:
        return f"initial candidate 0 is row {int(rows[0])}, the seeded row {first} expected"
    differ = np.flatnonzero((points != read).any(axis=1))
    return None if not len(differ) else (
        f"initial candidate {differ[0]} (row {int(rows[differ[0]])}) is "
        f"{points[differ[0]][:3].tolist()}..., the data's point there is "
        f"{read[differ[0]][:3].tolist()}...")


def _costs_problem(ctx: KMeansContext, chosen: dict, final: again.Totals) -> str | None:
    """Each round's reported cost (the kernel's) is its cells' float64 sum, within rounding."""
    n, summed = max(1, final.points), np.asarray(chosen["cell_costs"]).sum(axis=1)
    costs = np.asarray(chosen["costs"], dtype=np.float64)[:len(summed)]  # rounds that sampled
    most = n * float((np.asarray(chosen["points"], dtype=np.float64) ** 2).sum(axis=1).max())
    allowed = (again.kernel_error(costs, most, ctx.features, ctx.dtype)
               + 2 * rounding(n) * costs + again.expansion_error(final.squares, most,
                                                                 ctx.features))
    return differences(costs, summed, what="round", tolerance=allowed,
                       label=lambda s: f"k-means|| round {s}", reported_as="sampling cost {} "
                       "reported", expected_as="the run's cells sum to {}")


def initial_centroids(ctx: KMeansContext, r: Reported, verdict) -> None:
    """The seeded points; or k-means||'s fixed point of weighted Lloyd, every blob seeded."""
    first, d = r.trajectory[0], ctx.features
    if ctx.init == "random":
        if verdict.note(differences(first, r.picked, what="initial centroid",
                                    label=lambda i: f"initial centroid {i // d}",
                                    expected_as="the seeded point {}")):
            verdict.establish(f"the {ctx.k} initial centroids are the seeded points")
        return
    weights = np.asarray(r.init["weights"], dtype=np.float64)
    if not (verdict.require(weights.sum() == r.final.points, lambda: (
            f"initial candidate weights sum to {weights.sum():.0f}, not the "
            f"{r.final.points:.0f} points counted"))
            and verdict.note(fixed_point_problem(r.init, first))):
        return
    words = (f"the {len(weights)} k-means|| candidates are points of the data, their weights, "
             "sampled points and each round's cost are the sums of the run's cells, "
             f"{r.plans.cells.promise} (the candidates weighed again, the sampling replayed from "
             "the seeded draws), the initial centroids are a fixed point of weighted Lloyd on "
             "them")
    if ctx.blobs_known:
        problem, said = seeded_blobs(first, again.true_centres(ctx.seed, ctx.clusters, d),
                                     sum(part.blobs for part in r.shards))
        verdict.note(problem)
        words += f"; {said}"
    verdict.establish(words)


def fixed_point_problem(chosen: dict, start: np.ndarray) -> str | None:
    """Whether each initial centroid is the weighted mean of the candidates nearest it.

    A candidate within both this and the run's (float64) rounding of two centroids may count
    for either, and each mean allows for such candidates' weight.
    """
    points = np.asarray(chosen["points"], dtype=np.float64)
    weights = np.asarray(chosen["weights"], dtype=np.float64)[:, None]
    best, _, _, _, _, tied, _ = again.near_sets(np, points, (points ** 2).sum(axis=1), start,
                                                (start ** 2).sum(axis=1), "float64")
    nearest = (best[:, None] == np.arange(len(start))[None]) * weights
    totals = again.Totals(nearest.sum(axis=0), nearest.T @ points, (tied * weights).sum(axis=0),
                          (tied * weights).T @ np.abs(points), points=len(points),
                          largest=float(np.sqrt((points ** 2).sum(axis=1).max())))
    problem = _means_problem(start, start, totals, None, "initial centroid",
                             "the weighted mean of the candidates nearest it is {}")
    return problem and f"{problem}: not a fixed point of weighted Lloyd"


def seeded_blobs(start: np.ndarray, centres: np.ndarray, blob_points: np.ndarray
                 ) -> tuple[str | None, str]:
    """Every blob's true centre the nearest of exactly one initial centroid: (problem, words)."""
    if blob_points.min() < MIN_BLOB:
        return None, f"a blob of under {MIN_BLOB} points: initial centroids not paired"
    owner = ((start[:, None, :] - centres[None]) ** 2).sum(axis=2).argmin(axis=1)
    seeded = np.bincount(owner, minlength=len(centres))
    if np.all(seeded == 1):
        return None, "every blob seeded by one initial centroid"
    return (f"initial centroids: blob {int(np.argmin(seeded))} has {seeded.min()} and blob "
            f"{int(np.argmax(seeded))} has {seeded.max()} initial centroids nearest its true "
            "centre (k-means|| seeds each well-separated blob once)"), ""


def _along(a: np.ndarray, probes: np.ndarray | None, magnitude: bool = False) -> np.ndarray:
    """Rows of features ``a`` along the probes (``|a|`` along ``|probes|``), or as they are."""
    a = np.abs(a) if magnitude else a
    return a if probes is None else a @ (np.abs(probes) if magnitude else probes)


def _reach(totals: again.Totals, probes: np.ndarray | None):
    """Bounds every point's ``|x . probe|`` (or ``|x_f|``)."""
    return totals.largest * (1.0 if probes is None else np.sqrt((probes ** 2).sum(axis=0)))


def _means_problem(previous: np.ndarray, reported: np.ndarray, totals: again.Totals,
                   probes: np.ndarray | None, name: str, expected_as: str) -> str | None:
    """Whether ``reported`` are the means of ``totals``' points (``previous`` where none).

    Each mean allows for the points in a rounding tie, and the rounding of both sums.
    """
    d, got, expected = previous.shape[1], _along(reported, probes), _along(previous, probes) + 0
    counts, near, q = totals.counts, totals.near, got.shape[1]
    filled = counts > 0
    expected[filled] = totals.projected[filled] / counts[filled, None]
    allowed = ((totals.near_projected + near[:, None] * np.abs(expected))
               / np.maximum(counts - near, 1)[:, None])
    allowed[(counts <= near) & (near > 0)] = np.inf  # all of it may belong elsewhere
    allowed += (2 * rounding(max(1, totals.points) + d) * _reach(totals, probes)
                + rounding(d + 1) * (_along(reported, probes, True) + np.abs(expected)))
    axis = "feature" if probes is None else "along probe"
    return differences(got, expected, what="centroid", tolerance=allowed, reported_as="{}",
                       label=lambda i: f"{name} {i // q} {axis} {i % q}",
                       expected_as=expected_as, unit="centroid entries")


def lloyd_cells_again(ctx: KMeansContext, r: Reported, verdict) -> None:
    """The planned Lloyd cells recomputed: counts, sums (along the probes) and inertia agree."""
    cells, firsts = r.lloyd_cells, ctx.cells(ctx.lloyd_rows(r.iterations)).firsts
    rows, d = ctx.lloyd_rows(r.iterations), ctx.features
    q = d if r.probes is None else r.probes.shape[1]
    axis = "feature" if r.probes is None else "along probe"
    for s, part in enumerate(r.shards):
        for t, c, got in part.pairs:
            g, where = int(firsts[s]) + c, f"iteration {t + 1}, shard {s} cell {c}: "
            sums = cells["sums"][t, g]
            allowed = (got.near_projected + rounding(d) * _along(sums, r.probes, True)
                       + 2 * rounding(rows + d) * got.counts[:, None] * _reach(got, r.probes))
            if not (verdict.note(differences(
                    cells["counts"][t, g], got.counts, what="centroid", tolerance=got.near,
                    label=lambda j, w=where: f"{w}centroid {j}", expected_as="{} recounted",
                    reported_as="has {} points nearest it in the run"))
                    and verdict.note(differences(
                        _along(sums, r.probes), got.projected, what="sum", tolerance=allowed,
                        label=lambda i, w=where: f"{w}centroid {i // q} {axis} {i % q}",
                        reported_as="points sum to {} in the run", expected_as="{} recomputed"))
                    and verdict.note(differences(
                        cells["inertia"][t, g], got.inertia, what="inertia",
                        tolerance=got.inertia_tol + tolerance(got.inertia, rows),
                        label=lambda _, w=where: f"{w}inertia", reported_as="{} in the run",
                        expected_as="{} recomputed"))):
                return
    if r.plans.lloyd.population:
        verdict.establish(f"{r.plans.lloyd.promise}: their Lloyd totals recomputed agree")


def iterations_again(ctx: KMeansContext, r: Reported, verdict) -> None:
    """Each iteration a Lloyd step, each inertia right: recomputed (the last, or all), or cells'."""
    for t in range(r.iterations + 1):
        totals, cells, where = r.whole.get(t), r.lloyd_cells, ""
        if totals is None:  # certified by its cells
            counts, where = cells["counts"][t].sum(axis=0), "summed from the run's cells "
            totals = again.Totals(counts, cells["sums"][t].sum(axis=0), 0 * counts, 0,
                                  float(cells["inertia"][t].sum()), 0, r.final.points,
                                  r.final.largest)
        allowed = totals.inertia_tol + tolerance(totals.inertia, max(1, totals.points))
        if not ((t == r.iterations or verdict.note(_means_problem(
                r.trajectory[t], r.trajectory[t + 1], totals, r.probes if not where else None,
                f"iteration {t + 1}: centroid", f"the mean of its points {where}is {{}}")))
                and verdict.note(differences(
                    r.inertias[t], totals.inertia, what="inertia", tolerance=allowed,
                    label=lambda _, t=t: f"inertia at iteration {t}", reported_as="{} reported",
                    expected_as="the run's cells sum to {}" if where else "{} recomputed"))):
            return
    where = "kept on the workers" if verdict.depth == "fast" else (
        "drawn again" if ctx.random else "read again")
    verdict.establish(
        f"all {r.iterations} iterations recomputed in float64 on all {r.final.points} points "
        f"{where} agree" if len(r.whole) > r.iterations else
        f"the last iteration recomputed in float64 on all {r.final.points} points {where} "
        f"agrees, and the {r.iterations - 1} before it are their cells' sums")


def descent(ctx: KMeansContext, r: Reported, verdict) -> None:
    """No inertia rose: each within its rounding (recomputed, or the kernel's) of the last."""
    n, positive = max(1, r.final.points), np.maximum(r.inertias, 0)
    most = n * (r.trajectory ** 2).sum(axis=2).max(axis=1)
    slack = again.kernel_error(positive, most, ctx.features, ctx.dtype) + 2 * rounding(n) * positive
    for t, totals in r.whole.items():
        slack[t] = totals.inertia_tol + tolerance(totals.inertia, n)
    rose = np.flatnonzero(r.inertias[1:] > r.inertias[:-1] + slack[1:] + slack[:-1])
    if verdict.require(not len(rose), lambda: (
            f"inertia rose from {r.inertias[rose[0]]:.9g} to {r.inertias[rose[0] + 1]:.9g} at "
            f"iteration {rose[0] + 1}")):
        verdict.establish(f"{r.iterations + 1} inertias agree and never increase")


def centres(ctx: KMeansContext, r: Reported, verdict) -> None:
    """With as many centroids as blobs, each blob's true centre found."""
    if not ctx.blobs_known:
        verdict.establish("points read from --input: no true centres to compare" if not
                          ctx.random else f"--k {ctx.k} differs from --clusters "
                                          f"{ctx.clusters}: centres not compared")
        return
    problem, words = centres_found(again.true_centres(ctx.seed, ctx.clusters, ctx.features),
                                   r.trajectory[-1], r.final.counts, ctx.tol)
    if verdict.note(problem):
        verdict.establish(words)


def centres_found(true: np.ndarray, final: np.ndarray, counts: np.ndarray, tol: float
                  ) -> tuple[str | None, str]:
    """Each centroid within ``z / sqrt(counts)`` of its blob's centre (a local optimum said)."""
    close = np.sqrt(((final[:, None, :] - true[None]) ** 2).sum(axis=2)) < shared.SEPARATION / 2
    if not (np.all(close.sum(axis=0) == 1) and np.all(close.sum(axis=1) == 1)):
        return None, (f"a local optimum: {int((close.sum(axis=1) == 1).sum())} of {len(final)} "
                      "centroids near a blob's true centre (not an error of Lloyd's iteration)")
    z = sigmas(share(FALSE_ALARM, final.size))
    for j, c in enumerate(np.argmax(close, axis=1)):
        bound, off = z / math.sqrt(max(counts[j], 1)) + tol, np.abs(final[j] - true[c])
        if np.any(off > bound):
            return (f"centroid {j} is {off.max():.3g} from its blob's true centre in feature "
                    f"{int(np.argmax(off))}; within {bound:.3g} ({z:.1f} standard errors) "
                    "expected"), ""
    return None, f"every blob's true centre found within {z:.1f} standard errors"


def cluster_sizes(ctx: KMeansContext, r: Reported, verdict) -> None:
    """The reported cluster sizes are the points counted nearest each final centroid."""
    if verdict.require(r.counts.shape == (ctx.k,), f"cluster sizes: {r.counts.size} reported "
                                                   f"for --k {ctx.k} centroids") and verdict.note(
            differences(r.counts, r.final.counts, what="cluster size", tolerance=r.final.near,
                        reported_as="{} points reported",
                        expected_as="{} counted nearest it (or within a rounding tie)")):
        verdict.establish("the cluster sizes agree")


def centroids_file(ctx: KMeansContext, r: Reported, verdict) -> None:
    """``--output`` read back with NumPy's or Zarr's reader: exactly the final centroids."""
    path, name, k, d = r.written.get("output"), ctx.output, ctx.k, ctx.features
    if not path:
        return
    try:
        if name.lower().endswith(".csv"):
            with open(path) as f:
                header = f.readline().strip().split(",")
            if header != [f"x{f}" for f in range(d)]:
                raise ValueError(f"columns {header[:4]}..., x0 .. x{d - 1} expected")
            saved = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2, dtype=np.float64)
        else:
            saved = np.asarray(replay.stored(path, _kind(name)))
    except (OSError, ValueError, KeyError) as exc:
        verdict.fail(f"--output {name}: cannot be read back ({exc})")
        return
    if verdict.require(saved.shape == (k, d) and saved.dtype == np.float64, lambda: (
            f"--output {name}: holds {saved.dtype} of shape {saved.shape}; the final "
            f"centroids, float64 of shape {(k, d)}, expected")) and verdict.note(differences(
                saved, r.trajectory[-1], what="centroid", reported_as="{} saved",
                label=lambda i: f"--output {name}: centroid {i // d} feature {i % d}",
                expected_as="{} reported")):
        verdict.establish(f"--output read back holds the {k} final centroids")


def labels_counted(ctx: KMeansContext, r: Reported, verdict) -> None:
    """The labels (kept, else written) counted as the last pass; planned cells recomputed."""
    name, k, parts = _named(ctx, r), ctx.k, [part.labels for part in r.shards]
    if None in parts:
        return
    outside, wrong, unequal = (next((part[i] for part in parts if part[i] is not None), None)
                               for i in (2, 3, 4))
    unlabelled, left_out = sum(part[1] for part in parts), ctx.samples - r.final.points
    if verdict.require(outside is None, lambda: (
            f"{name}: row {outside[0]} is labelled {outside[1]}, outside "
            f"{shared.NO_LABEL} .. {k - 1} (--k {k})")) and verdict.require(
            unlabelled == left_out, f"{name}: {unlabelled} points labelled -1, "
                                    f"{left_out} points have a NaN or infinite coordinate"
    ) and verdict.note(differences(
            sum(part[0] for part in parts), r.counts, what="label", tolerance=r.final.near,
            label=lambda j: f"{name}: label {j}", reported_as="{} points labelled",
            expected_as="the last pass counted {} nearest it (or within a rounding tie)")
    ) and verdict.require(wrong is None, lambda: (
            f"{name}: row {wrong[0]} is labelled {wrong[1]}, its nearest final "
            f"centroid is {wrong[2]}")) and verdict.require(unequal is None, lambda: (
            f"--labels {ctx.labels}: row {unequal[0]} holds {unequal[1]}, the kept labels "
            f"{unequal[2]}")):
        plan, kept = r.plans.labels, r.kept is not None
        verdict.establish(f"{'--labels read back' if ctx.labels else 'the kept labels'}: "
                          f"{ctx.samples} labels whose counts are the last "
                          f"pass's cluster sizes; {plan.promise}, "
                          f"{'every label' if plan.complete else 'each of their labels'} "
                          "recomputed as the nearest final centroid"
                          + ("; the labels kept on the workers the same" if kept and ctx.labels
                             else " (kept on the workers)" if kept else ""))


def _steps(ctx: KMeansContext, fast: bool) -> tuple:
    """The steps in order (a later one takes what an earlier one established)."""
    kmeans_parallel = ctx.init != "random"
    return (stopping, certificates, labels_written, recompute,
            *((data_kept,) if fast else ()), *((init_cells_again,) if kmeans_parallel else ()),
            initial_centroids, lloyd_cells_again, iterations_again, descent,
            centres, cluster_sizes, centroids_file, labels_counted)


CHECK = Check(fast=functools.partial(_steps, fast=True),
              full=functools.partial(_steps, fast=False), read=read, mutations=MUTATIONS,
              release=lambda ctx: ctx.kept.release())
