"""kmeans-pipeline's fast check (``verify(..., depth="fast")``): a tenth of the clustering's work.

It reads the points the run kept on its workers, with its own code
(:mod:`pipelines.kmeans.check_kept`), and establishes, in float64:

- the last iteration over all points: each final centroid is the mean of the points nearest
  the centroids before (compared along a few random probes, Freivalds' check, within the
  points in a rounding tie), both last inertias agree; the blobs' true centres found;
- every iteration before it is a Lloyd step of the cell sums the run reports beside its
  answer, and its inertia their sum; a seeded sample of those cells, recomputed, agrees; no
  inertia rose; the stopping rule;
- a k-means|| initialisation from the cell sums the run reports beside it (per cell of
  points, :func:`pipelines.kmeans.shared.cell_rows`: each round's sampling cost and sampled
  points, and the points nearest each candidate): the reported weights, sampled points and
  costs are the cells' sums; a seeded sample of cells (``spot_checks.sample_size`` of them:
  a fault in a tenth of the cells is caught with probability at least 99.9 %) is weighed
  again and its sampling replayed from the seeded draws; the candidates are the points at
  their rows; the initial centroids a fixed point of weighted Lloyd on them, and every blob
  seeded once; random initial centroids are the seeded points;
- the kept points are the data: a generated shard's blobs (all) and first cell drawn again
  from its seed (the points with NumPy's generator only), an input's sampled cells read
  again from its file.

What it does not establish: generated points past each shard's first cell are taken as
kept, and the k-means|| sampling and weights of cells outside the sample are taken from the
run's cell sums.
"""

from __future__ import annotations

import math

import dask
import numpy as np

from daskgpu.toolkit import spot_checks
from daskgpu.toolkit.registry import Verification
from pipelines.kmeans import check_init as init_checks
from pipelines.kmeans.check import (
    _check_centres,
    _check_descent,
    _check_stop,
    _check_structure,
)
from pipelines.kmeans.check_init import EPS64, LAMBDA
from pipelines.kmeans.check_kept import kept_shard
from pipelines.kmeans.shared import cell_rows, cells_of, lloyd_cell_rows

PROBES = 4  # random directions the means are compared along
PROBE_KEY = 9  # the check's own spawn key: its probes, SeedSequence(seed, (PROBE_KEY,))


def verify_fast(ctx: dict, raw, final: dict | None = None) -> Verification:
    """The fast check of a k-means run (see the module's docstring).

    ``final`` gets what it counted at the final centroids (``counts``, ``near``, ``points``).
    """
    failure = _check_structure(ctx, raw) or _check_stop(ctx, raw)
    chosen = None if failure or ctx["init"] == "random" else raw.get("init")
    plan = _plan(ctx, chosen, 0 if failure else int(raw["iterations"]))
    if not failure and ctx["init"] != "random":
        failure = init_checks.check_reported(ctx, chosen) or _check_cell_sums(ctx, chosen, plan)
    failure = failure or _check_certificate_shape(ctx, raw, plan)
    if failure:
        return Verification(False, failure)
    if not ctx["shards"].futures:
        return Verification(False, "the run's shards were let go before the fast check read "
                                   "them")
    trajectory = np.asarray(raw["centroids"], dtype=np.float64)
    last = len(trajectory) - 2  # the last iteration: from these centroids to the final ones
    sets, index = np.unique(trajectory[last:], axis=0, return_inverse=True)
    done = _recompute(ctx, chosen, sets, plan, trajectory)
    totals = _totals(done, np.asarray(index).reshape(-1))
    failure = _check_data(ctx, done) or (
        _check_random(ctx, trajectory, done, totals) if chosen is None
        else _check_kmeans_parallel(ctx, chosen, trajectory[0], done, plan, totals))
    failure = (failure or _check_certified(ctx, raw, plan, done, totals)
               or _check_last(ctx, raw, plan, totals))
    if failure:
        return Verification(False, failure)
    found = _check_centres(ctx, trajectory[-1], totals)
    if found.startswith("centroid"):
        return Verification(False, found)
    iterations = len(trajectory) - 1
    if final is not None:
        final.update(counts=totals["counts"][1], near=totals["near"][1],
                     points=float(totals["points"]))
    earlier = (spot_checks.detection(plan["pairs_drawn"], plan["pairs_population"],
                                     "cell passes of the earlier iterations")
               if plan["pairs_population"] else "no earlier iterations")
    return Verification(True, (
        f"{totals['init_words']}; the last iteration recomputed in float64 on all "
        f"{int(totals['points'])} points kept on the workers agrees, and the {iterations - 1} "
        f"before it are their cells' sums ({earlier}); {iterations + 1} inertias agree and "
        f"never increase; {found}; {_data_words(ctx, done, plan)}"))


# --------------------------------------------------------------------------- the plan


def _plan(ctx: dict, chosen, iterations: int) -> dict:
    """The cells of every shard, and the seeded samples of them recomputed."""
    cell = cell_rows(ctx["samples"], ctx["k"])
    per_shard = [cells_of(n, cell) for n in ctx["sizes"]]
    population = sum(per_shard)
    drawn = spot_checks.sample_size(population) if (
        chosen is not None or ctx.get("input") is not None) else 0
    offsets = np.cumsum((0, *per_shard))
    sampled = [[] for _ in per_shard]
    for g in spot_checks.seeded_sample(population, drawn, ctx["seed"]) if drawn else ():
        s = int(np.searchsorted(offsets, g, side="right")) - 1
        sampled[s].append(int(g - offsets[s]))
    plan = {"cell": cell, "cells": per_shard, "offsets": offsets, "sampled": sampled,
            "drawn": drawn, "population": population,
            "edges": np.cumsum((0, *ctx["sizes"]))}
    # the Lloyd certificates: the iterations before the last, per cell
    certified = max(0, iterations - 1)
    lloyd_cell = lloyd_cell_rows(ctx["samples"], ctx["k"], ctx["features"], certified)
    lloyd_cells = [cells_of(n, lloyd_cell) for n in ctx["sizes"]]
    per_pass = sum(lloyd_cells)
    population = certified * per_pass
    drawn = spot_checks.sample_size(population)
    pairs = [[] for _ in per_shard]
    lloyd_offsets = np.cumsum((0, *lloyd_cells))
    for i in spot_checks.seeded_sample(population, drawn, ctx["seed"] + 1) if drawn else ():
        t, g = divmod(int(i), per_pass)
        s = int(np.searchsorted(lloyd_offsets, g, side="right")) - 1
        pairs[s].append((t, int(g - lloyd_offsets[s])))
    rng = np.random.default_rng(np.random.SeedSequence(ctx["seed"], spawn_key=(PROBE_KEY,)))
    plan["probes"] = rng.standard_normal((ctx["features"], PROBES))
    plan.update(certified=certified, lloyd_cell=lloyd_cell, lloyd_cells=per_pass,
                lloyd_offsets=lloyd_offsets, pairs=pairs, pairs_drawn=drawn,
                pairs_population=population)
    return plan


def _cell_of(plan: dict, rows: np.ndarray) -> np.ndarray:
    """The global cell of each global row."""
    shard = np.searchsorted(plan["edges"], rows, side="right") - 1
    return plan["offsets"][shard] + (rows - plan["edges"][shard]) // plan["cell"]


# --------------------------------------------------------------------------- the cell sums


def _check_cell_sums(ctx: dict, chosen: dict, plan: dict) -> str | None:
    """The reported sampled points and weights are the run's cells' sums (no data needed)."""
    cells, costs = plan["population"], np.asarray(chosen["costs"], dtype=np.float64)
    sampled_rounds = len(costs) - int(costs[-1] <= 0)
    per_cell = np.asarray(chosen.get("cell_sampled", np.zeros((0, 0))))
    if per_cell.shape != (sampled_rounds, cells) or np.shape(chosen.get("cell_costs")) != (
            sampled_rounds, cells):
        return (f"k-means|| reports no sampled points and costs of its {cells} cells in "
                f"{sampled_rounds} rounds to check (a fast check needs them)")
    rows, rounds = np.asarray(chosen["rows"]), np.asarray(chosen["rounds"])
    for s in range(sampled_rounds):
        reported = np.bincount(_cell_of(plan, rows[rounds == s + 1]), minlength=cells)
        if np.any(reported != per_cell[s]):
            g = int(np.flatnonzero(reported != per_cell[s])[0])
            return (f"k-means|| round {s}: the run's cells sampled {int(per_cell[s].sum())} "
                    f"points ({int(per_cell[s][g])} in cell {g}), {int(reported.sum())} "
                    f"reported sampled ({int(reported[g])} there)")
    weighed = np.asarray(chosen.get("cell_weights", np.zeros((0, 0))))
    if weighed.shape != (cells, len(rows)):
        return (f"k-means|| reports no weights of its {len(rows)} candidates in its {cells} "
                "cells to check (a fast check needs them)")
    counted = weighed.sum(axis=0)
    weights = np.asarray(chosen["weights"])
    if np.any(counted != weights):
        i = int(np.flatnonzero(counted != weights)[0])
        return (f"initial candidate {i} has weight {weights[i]:.0f}; the run's cells count "
                f"{counted[i]:.0f} points nearest it")
    return None


# --------------------------------------------------------------------------- the recomputation


def _recompute(ctx: dict, chosen, sets: np.ndarray, plan: dict, trajectory: np.ndarray
               ) -> list[dict]:
    """One task per kept shard (:func:`pipelines.kmeans.check_kept.kept_shard`)."""
    edges = plan["edges"]
    rows = (init_checks.seeded_rows(ctx["seed"], ctx["samples"], ctx["k"]) if chosen is None
            else np.asarray(chosen["rows"], dtype=np.int64))
    plans = (init_checks.sampling_plan(ctx, chosen, edges) if chosen is not None
             else [None] * len(ctx["sizes"]))
    tasks = []
    for i, future in enumerate(ctx["shards"].futures):
        mine = (rows >= edges[i]) & (rows < edges[i + 1])
        job = {"library": ctx["library"], "dtype": ctx["dtype"], "sets": sets,
               "probes": plan["probes"],
               "picked": rows[mine] - edges[i], "where": np.flatnonzero(mine),
               "cell": plan["cell"], "cells": sorted(plan["sampled"][i]),
               "start": int(edges[i]), "lloyd_cell": plan["lloyd_cell"],
               "pairs": [(t, c, trajectory[t]) for t, c in plan["pairs"][i]]}
        if chosen is not None:
            job.update(candidates=np.asarray(chosen["points"], dtype=np.float64),
                       plan=plans[i])
        if ctx.get("input") is None:
            job["redraw"] = (ctx["seed"], i, ctx["clusters"])
        else:
            job["reread"] = (ctx["input"], int(edges[i]))
        tasks.append(dask.delayed(kept_shard, pure=False)(future, job))
    return list(dask.compute(*tasks))


def _totals(done: list[dict], index: np.ndarray) -> dict:
    """The shards' totals over all points added, for the last iteration's two centroid sets.

    Entry 0 is the centroids before the last iteration, entry 1 the final ones.
    """
    totals = {key: sum(part[key] for part in done)[index]
              for key in ("counts", "projected", "near", "near_projected", "inertia",
                          "inertia_tol")}
    totals["largest"] = max(part["largest"] for part in done)
    totals["squares"] = sum(part["squares"] for part in done)
    totals["points"] = sum(part["points"] for part in done)
    points = max(1.0, float(totals["points"]))
    totals["inertia_tol"] = (totals["inertia_tol"]
                             + LAMBDA * math.sqrt(points) * EPS64 * totals["inertia"])
    return totals


def _picked(done: list[dict], count: int, features: int) -> np.ndarray:
    picked = np.empty((count, features))
    for part in done:
        picked[part["where"]] = part["picked"]
    return picked


# --------------------------------------------------------------------------- the initialisation


def _check_random(ctx: dict, trajectory: np.ndarray, done: list[dict], totals: dict
                  ) -> str | None:
    """Random initial centroids: the seeded points, as kept."""
    totals["init_words"] = f"the {ctx['k']} initial centroids are the seeded points"
    first = trajectory[0]
    seeded = _picked(done, ctx["k"], ctx["features"])
    if not np.array_equal(first, seeded):
        j = int(np.flatnonzero((first != seeded).any(axis=1))[0])
        return (f"initial centroid {j} is {first[j][:3].tolist()}..., the seeded point "
                f"{seeded[j][:3].tolist()}... expected")
    return None


def _check_kmeans_parallel(ctx: dict, chosen: dict, first: np.ndarray, done: list[dict],
                           plan: dict, totals: dict) -> str | None:
    """A k-means|| initialisation from its cells' sums, sampled cells and candidates."""
    read = _picked(done, len(chosen["rows"]), ctx["features"])
    failure = (init_checks.check_points(ctx, chosen, read)
               or _check_costs(ctx, chosen, totals)
               or _check_sampled_cells(chosen, done, plan))
    weights = np.asarray(chosen["weights"], dtype=np.float64)
    if not failure and weights.sum() != totals["points"]:
        failure = (f"initial candidate weights sum to {weights.sum():.0f}, not the "
                   f"{totals['points']:.0f} points counted")
    failure = failure or init_checks.check_fixed_point(chosen, first)
    if failure:
        return failure
    words = (f"the {len(chosen['rows'])} k-means|| candidates are points of the data, their "
             "weights, sampled points and each round's cost are the sums of the run's cells, "
             f"{spot_checks.detection(plan['drawn'], plan['population'], 'cells')} (the "
             "candidates weighed again, the sampling replayed from the seeded draws), the "
             "initial centroids are a fixed point of weighted Lloyd on them")
    if ctx.get("input") is None and ctx["k"] == ctx["clusters"]:
        blob_points = sum(part["blob_points"] for part in done)
        failure, said = init_checks.check_seeded_blobs(
            first, init_checks.true_centres(ctx["seed"], ctx["clusters"], ctx["features"]),
            blob_points)
        words += f"; {said}"
    totals["init_words"] = words
    return failure


def _check_costs(ctx: dict, chosen: dict, totals: dict) -> str | None:
    """Each round's reported cost (the kernel's) against the run's cells' (float64) sum.

    They differ by the rounding of the kernel's distances (in the data's dtype, to centroids
    rounded to it) and of both expansions and sums: bounded over all points from their
    count, the sum of their ``|x|^2`` and the largest candidate's.
    """
    costs = np.asarray(chosen["costs"], dtype=np.float64)
    cells = np.asarray(chosen["cell_costs"], dtype=np.float64)
    n, d = max(1.0, float(totals["points"])), ctx["features"]
    u = float(np.finfo(ctx["dtype"]).eps) / 2
    most = float((np.asarray(chosen["points"], dtype=np.float64) ** 2).sum(axis=1).max())
    for s, summed in enumerate(cells.sum(axis=1)):
        cost = costs[s]
        allowed = ((d + 3) * u * cost + 2.5 * u * math.sqrt(cost * n * most)
                   + 2 * u ** 2 * n * most + 4 * (d + 2) * EPS64 * (totals["squares"] + n * most)
                   + 2 * LAMBDA * math.sqrt(n) * EPS64 * cost)
        if not abs(cost - summed) <= allowed:
            return (f"k-means|| round {s}: sampling cost {cost:.9g} reported, the run's cells "
                    f"sum to {summed:.9g} (tolerance {allowed:.2g})")
    return None


def _check_sampled_cells(chosen: dict, done: list[dict], plan: dict) -> str | None:
    """The sampled cells weighed again and their sampling replayed, against the run's."""
    weighed, costs = np.asarray(chosen["cell_weights"]), np.asarray(chosen["cell_costs"])
    for s, part in enumerate(done):
        found, first_wrong = part["cells"]
        for c, counted, near, cost, cost_tol in found:
            g = int(plan["offsets"][s]) + c
            off = np.abs(weighed[g] - counted) - near
            if np.any(off > 0):
                i = int(np.argmax(off))
                return (f"initial candidate {i}: the run weighs {weighed[g][i]:.0f} points of "
                        f"cell {g} nearest it, {counted[i]:.0f} recounted ({near[i]:.0f} by a "
                        "rounding tie)")
            rounds = costs.shape[0]  # those that sampled
            allowed = cost_tol[:rounds] + LAMBDA * math.sqrt(plan["cell"]) * EPS64 * np.abs(
                cost[:rounds])
            excess = np.abs(costs[:, g] - cost[:rounds]) - allowed
            if np.any(excess > 0):
                r = int(np.argmax(excess))
                return (f"k-means|| round {r}: cell {g}'s sampling cost {costs[r, g]:.9g} in "
                        f"the run, {cost[r]:.9g} recomputed (tolerance {allowed[r]:.2g})")
        if len(first_wrong):
            r, row, got, draw, thr = first_wrong
            return (f"k-means|| round {int(r)}: row {int(row)} was "
                    f"{'' if got else 'not '}sampled, its draw {draw:.6g} against its "
                    f"probability {min(thr, 1.0):.6g}")
    return None


# --------------------------------------------------------------------------- the iterations


def _check_certificate_shape(ctx: dict, raw, plan: dict) -> str | None:
    """The run's cell sums of its iterations before the last: one per cell and iteration."""
    cells, certified = raw.get("cells"), plan["certified"]
    k, d, count = ctx["k"], ctx["features"], plan["lloyd_cells"]
    want = {"sums": (certified, count, k, d), "counts": (certified, count, k),
            "inertia": (certified, count)}
    if not isinstance(cells, dict) or any(
            np.shape(cells.get(name, ())) != shape
            and not (certified == 0 and np.size(cells.get(name, 0)) == 0)
            for name, shape in want.items()):
        return (f"result carries no cell sums of its {certified} iterations before the last to "
                "check (a fast check needs them)")
    return None


def _check_certified(ctx: dict, raw, plan: dict, done: list[dict], totals: dict) -> str | None:
    """The iterations before the last, from the run's cells.

    Each is a Lloyd step of its cells' sums and its inertia is theirs; a seeded sample of
    those cells is recomputed.
    """
    trajectory = np.asarray(raw["centroids"], dtype=np.float64)
    cells, n = raw["cells"], max(1.0, float(totals["points"]))
    summing = LAMBDA * math.sqrt(n) * EPS64  # two float64 sums of the same terms
    for t in range(plan["certified"]):
        counts, sums = cells["counts"][t].sum(axis=0), cells["sums"][t].sum(axis=0)
        expected = trajectory[t].copy()
        filled = counts > 0
        expected[filled] = sums[filled] / counts[filled, None]
        allowed = 2 * summing * totals["largest"] + 4 * EPS64 * np.abs(expected)
        excess = np.abs(trajectory[t + 1] - expected) - allowed
        if np.any(excess > 0):
            j, f = np.unravel_index(int(np.argmax(excess)), excess.shape)
            return (f"iteration {t + 1}: centroid {j} feature {f} = "
                    f"{trajectory[t + 1][j, f]:.9g}, the mean of its points summed from the "
                    f"run's cells is {expected[j, f]:.9g} (tolerance {allowed[j, f]:.2g})")
        inertia, reported = float(cells["inertia"][t].sum()), float(raw["inertias"][t])
        if not abs(reported - inertia) <= 2 * summing * inertia:
            return (f"inertia at iteration {t}: {reported:.9g} reported, the run's cells sum "
                    f"to {inertia:.9g}")
    return _check_pairs(cells, plan, done, float(totals["largest"]))


def _check_pairs(cells: dict, plan: dict, done: list[dict], largest: float) -> str | None:
    """The sampled cells of the earlier iterations, recomputed in float64.

    Their sums are compared along the probes, within the points in a rounding tie.
    """
    summing = LAMBDA * math.sqrt(plan["lloyd_cell"]) * EPS64
    reach = np.sqrt((plan["probes"] ** 2).sum(axis=0)) * largest  # bounds every |x . r|
    for s, part in enumerate(done):
        for t, c, got in part["pairs"]:
            g = int(plan["lloyd_offsets"][s]) + c
            where = f"iteration {t + 1}, shard {s} cell {c}"
            off = np.abs(cells["counts"][t, g] - got["counts"][0]) - got["near"][0]
            if np.any(off > 0):
                j = int(np.argmax(off))
                return (f"{where}: centroid {j} has {cells['counts'][t, g, j]:.0f} points "
                        f"nearest it in the run, {got['counts'][0][j]:.0f} recounted "
                        f"({got['near'][0][j]:.0f} by a rounding tie)")
            summed = cells["sums"][t, g] @ plan["probes"]
            allowed = (got["near_projected"][0]
                       + 4 * summing * got["counts"][0][:, None] * reach)
            off = np.abs(summed - got["projected"][0]) - allowed
            if np.any(off > 0):
                j, q = np.unravel_index(int(np.argmax(off)), off.shape)
                return (f"{where}: centroid {j}'s points sum to {summed[j, q]:.9g} along probe "
                        f"{q} in the run, {got['projected'][0][j, q]:.9g} recomputed")
            inertia = float(got["inertia"][0])
            allowed = float(got["inertia_tol"][0]) + 2 * summing * inertia
            if not abs(cells["inertia"][t, g] - inertia) <= allowed:
                return (f"{where}: inertia {cells['inertia'][t, g]:.9g} in the run, "
                        f"{inertia:.9g} recomputed (tolerance {allowed:.2g})")
    return None


def _check_last(ctx: dict, raw, plan: dict, totals: dict) -> str | None:
    """The last iteration, over all points: a Lloyd step, its inertias; none ever rose.

    Each final centroid against the mean of the points nearest the centroids before, along
    every probe: the mean's projection is within the points in a rounding tie of the sum of
    the points' projections over their count (as :func:`pipelines.kmeans.check_init.lloyd_step`
    allows each feature), or the centroid kept its place where no point is nearest it.
    """
    trajectory = np.asarray(raw["centroids"], dtype=np.float64)
    last = len(trajectory) - 2
    counts, near = totals["counts"][0], totals["near"][0]
    reported = trajectory[-1] @ plan["probes"]
    expected = trajectory[last] @ plan["probes"]  # a centroid no point is nearest stays
    filled = counts > 0
    expected[filled] = totals["projected"][0][filled] / counts[filled, None]
    sure = np.maximum(counts - near, 1)[:, None]
    allowed = (totals["near_projected"][0] + near[:, None] * np.abs(expected)) / sure
    allowed[(counts <= near) & (near > 0)] = np.inf  # all of it may belong elsewhere
    reach = np.sqrt((plan["probes"] ** 2).sum(axis=0)) * float(totals["largest"])
    allowed += (LAMBDA * math.sqrt(max(1.0, float(counts.sum()))) * EPS64 * reach
                + 4 * EPS64 * (np.abs(expected) + np.abs(reported)))
    excess = np.abs(reported - expected) - allowed
    if np.any(excess > 0):
        j, q = np.unravel_index(int(np.argmax(excess)), excess.shape)
        return (f"iteration {last + 1}: centroid {j} along probe {q} is {reported[j, q]:.9g}, "
                f"the mean of its points is {expected[j, q]:.9g} (tolerance "
                f"{allowed[j, q]:.2g})")
    inertias = np.asarray(raw["inertias"], dtype=np.float64)
    for i, t in enumerate((last, last + 1)):
        if not abs(inertias[t] - totals["inertia"][i]) <= totals["inertia_tol"][i]:
            return (f"inertia at iteration {t}: {inertias[t]:.9g} reported, "
                    f"{totals['inertia'][i]:.9g} recomputed (tolerance "
                    f"{totals['inertia_tol'][i]:.2g})")
    slack = _kernel_rounding(ctx, trajectory, inertias, totals)
    slack[last:] = totals["inertia_tol"]
    return _check_descent(ctx, raw, {"inertia_tol": slack})


def _kernel_rounding(ctx: dict, trajectory: np.ndarray, inertias: np.ndarray,
                     totals: dict) -> np.ndarray:
    """How far each reported inertia may be from the exact one: the kernel's rounding.

    Distances in the data's dtype to centroids rounded to it, summed in float64.
    """
    n, d = max(1.0, float(totals["points"])), ctx["features"]
    u = float(np.finfo(ctx["dtype"]).eps) / 2
    most = (trajectory ** 2).sum(axis=2).max(axis=1)
    positive = np.maximum(inertias, 0)
    return ((d + 3) * u * positive + 2.5 * u * np.sqrt(positive * n * most)
            + 2 * u ** 2 * n * most + LAMBDA * math.sqrt(n) * EPS64 * positive)


# --------------------------------------------------------------------------- the data


def _check_data(ctx: dict, done: list[dict]) -> str | None:
    for s, part in enumerate(done):
        if part["differ"] >= 0:
            source = "its seed" if ctx.get("input") is None else "the input's file"
            return (f"shard {s}: kept point {part['differ']} differs from {source} (the points "
                    "clustered are not the data)")
    return None


def _data_words(ctx: dict, done: list[dict], plan: dict) -> str:
    compared = sum(part["compared"] for part in done)
    if ctx.get("input") is not None:
        return (f"{spot_checks.detection(plan['drawn'], plan['population'], 'cells')} read "
                f"again from the input's file ({compared} points) and equal to the points "
                "kept")
    if compared == 0:
        return ("the blobs of the kept points drawn again; the points taken as drawn (their "
                "generator cannot be drawn again here)")
    return (f"the blobs of the kept points and the first {compared} points of the shards "
            "drawn again from their seeds and equal")

