"""Independent checks of a k-means|| initialisation (used by :mod:`pipelines.kmeans.check`).

A k-means|| run reports what it chose from (``raw["init"]``): the candidates' global ``rows``,
their ``points`` (float64), ``weights`` (the points nearest each) and ``rounds`` (the round that
sampled each), and each round's ``costs``. The checks, in float64:

- the candidates are points of the data: the check's own reading of those rows gives exactly
  the reported points, and the first is the seeded row;
- the sampling is replayed on all data: each round's cost (the sum of squared distances to the
  candidates so far) agrees with the one reported, and with it every point's seeded draw says
  whether it was sampled in that round, exactly as reported (but for a draw within rounding of
  its probability); ``ROUNDS`` rounds ran, unless one's cost was 0;
- the weights are the points nearest each candidate, counted again over all data, within the
  count of points whose nearest candidate is a rounding tie; they sum to the points counted;
- the initial centroids are a fixed point of weighted Lloyd on the candidates: each is the
  weighted mean of the candidates nearest it (a centroid no weight is nearest is not compared);
- on generated blobs with as many centroids as blobs, each holding at least ``MIN_BLOB`` points,
  every blob's true centre is the nearest of exactly one initial centroid.

Nothing here is shared with the run; the caller recomputes the totals and passes them in.
"""

from __future__ import annotations

import math

import numpy as np

from daskgpu.toolkit.backends import to_host
from pipelines.kmeans.shared import CENTRE_TRIES, CENTRES, INIT, SEPARATION, half_width
from pipelines.kmeans.shared import KMEANS_PARALLEL_OVERSAMPLING as OVERSAMPLING
from pipelines.kmeans.shared import KMEANS_PARALLEL_ROUNDS as ROUNDS

LAMBDA = 9.0  # Higham and Mary's probabilistic bound: LAMBDA * sqrt(n) * u (the check)
EPS64 = float(np.finfo(np.float64).eps)
#: Blobs with fewer points than this are not required to be seeded.
MIN_BLOB = 100
# Candidate-centroid distances computed at once.
CELLS = 1 << 22


def seeded_rows(seed: int, samples: int, k: int) -> np.ndarray:
    """``k`` distinct rows from ``SeedSequence(seed, (INIT,))``: the random init, k-means||'s first.

    The documented random initial centroids; with ``k`` = 1, k-means||'s first candidate.
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(INIT,)))
    return rng.choice(samples, size=k, replace=False)


def near_sets(x, x_norm2, c, c_norm2, unit: float, xp) -> tuple:
    """Each point's nearest of the rows of ``c`` and those within rounding of it.

    Returns the float64 distances, the nearest, its distance and error allowance, the
    allowances, and ``shared``: the rows a point with a rounding tie may be nearest.
    """
    d = x.shape[1]
    dist = xp.maximum(x_norm2[:, None] - 2 * (x @ c.T) + c_norm2, 0)
    mine = 2 * (d + 2) * EPS64 * (x_norm2[:, None] + c_norm2)
    err = (mine + (d + 3) * unit * dist + 2.5 * unit * xp.sqrt(dist * c_norm2)
           + 2 * unit ** 2 * c_norm2)
    best = xp.argmin(dist, axis=1)
    low = xp.take_along_axis(dist, best[:, None], axis=1)[:, 0]
    low_err = xp.take_along_axis(err, best[:, None], axis=1)[:, 0]
    within = (dist - low[:, None]) <= err + low_err[:, None]
    shared = within & (within.sum(axis=1) > 1)[:, None]
    return best, low, low_err, err, within, shared, dist


def check_reported(ctx: dict, chosen) -> str | None:
    """The reported candidates' shapes and ranges, before anything is computed from them."""
    if not isinstance(chosen, dict) or any(key not in chosen for key in
                                           ("rows", "points", "weights")):
        return "k-means|| result reports no initial candidates (rows, points, weights) to check"
    rows, points = np.asarray(chosen["rows"]), np.asarray(chosen["points"])
    weights = None if chosen["weights"] is None else np.asarray(chosen["weights"])
    n = len(rows)
    if rows.ndim != 1 or not np.issubdtype(rows.dtype, np.integer) or n < ctx["k"]:
        return (f"initial candidates: rows of shape {rows.shape} and type {rows.dtype}; at "
                f"least --k {ctx['k']} integer rows expected")
    if rows.min() < 0 or rows.max() >= ctx["samples"]:
        return f"initial candidates: a row outside 0 .. {ctx['samples'] - 1}"
    if points.shape != (n, ctx["features"]) or not np.all(np.isfinite(points)):
        return (f"initial candidates: points of shape {points.shape} (finite, "
                f"{(n, ctx['features'])} expected)")
    if weights is None or weights.shape != (n,) or not np.all(weights >= 0) or not np.all(
            weights == np.round(weights)):
        return f"initial candidates: weights must be {n} whole counts of 0 or more"
    rounds = np.asarray(chosen.get("rounds", ()))
    costs = np.asarray(chosen.get("costs", ()), dtype=np.float64)
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


def sampling_plan(ctx: dict, chosen: dict, edges: np.ndarray) -> list[dict]:
    """What :class:`Replay` needs for each shard: the rounds' costs, prefixes and rows kept."""
    rows, rounds = np.asarray(chosen["rows"]), np.asarray(chosen["rounds"])
    costs = [float(c) for c in chosen["costs"]]
    ends = [int(np.sum(rounds <= s)) for s in range(len(costs))]
    plans = []
    for i in range(len(edges) - 1):
        mine = (rows >= edges[i]) & (rows < edges[i + 1])
        kept = [np.sort(rows[mine & (rounds == s + 1)] - edges[i]) for s in range(len(costs))]
        plans.append({"seed": ctx["seed"], "index": i, "costs": costs, "ends": ends,
                      "factor": float(OVERSAMPLING * ctx["k"]), "kept": kept,
                      "features": ctx["features"]})
    return plans


class Replay:
    """One shard's replay of the k-means|| sampling, slab by slab of its points, in order.

    Each round's draws come from ``SeedSequence(seed, (INIT, round, shard))``, one uniform per
    row of the shard; a point is sampled where its draw is below ``factor * D^2 / cost``.
    """

    def __init__(self, plan: dict):
        self.plan, self.drawn = plan, 0
        self.rngs = [np.random.default_rng(np.random.SeedSequence(
            plan["seed"], spawn_key=(INIT, s, plan["index"]))) for s in range(len(plan["costs"]))]
        steps = len(plan["costs"])
        self.out = {"costs": np.zeros(steps), "costs_tol": np.zeros(steps),
                    "sampling_wrong": np.zeros(steps)}
        self.first: list = []

    def add(self, local: np.ndarray, dist, err, x_norm2, cand_norm2, xp) -> None:
        """Points at shard rows ``local`` (increasing): distances to every candidate, errors."""
        if len(local) == 0:
            return
        upto = int(local[-1]) + 1
        base, self.drawn = self.drawn, upto
        draws = [rng.random(upto - base)[local - base] for rng in self.rngs]
        xn2, d = to_host(x_norm2), self.plan["features"]
        low = None
        for s, cost in enumerate(self.plan["costs"]):
            # the candidates so far: the nearest one's distance and error, the largest error
            cols = self.plan["ends"][s]
            block = slice(self.plan["ends"][s - 1] if s else 0, cols)
            if block.stop > block.start:
                arg = xp.argmin(dist[:, block], axis=1)[:, None]
                b_low = xp.take_along_axis(dist[:, block], arg, axis=1)[:, 0]
                b_err = xp.take_along_axis(err[:, block], arg, axis=1)[:, 0]
                b_max = err[:, block].max(axis=1)
                if low is None:
                    low, low_err, most = b_low, b_err, b_max
                else:  # a tie keeps the earlier candidate, as the first of an argmin
                    better = b_low < low
                    low = xp.where(better, b_low, low)
                    low_err = xp.where(better, b_err, low_err)
                    most = xp.maximum(most, b_max)
            self.out["costs"][s] += float(to_host(low.sum()))
            self.out["costs_tol"][s] += float(to_host((low_err + most).sum()))
            if cost <= 0:
                continue
            cmax = float(to_host(cand_norm2[:cols].max()))
            thr = self.plan["factor"] * to_host(low) / cost
            margin = (self.plan["factor"] * 4 * (d + 3) * EPS64 * (xn2 + cmax) / cost
                      + 4 * EPS64 * thr)
            got = np.isin(local, self.plan["kept"][s])
            wrong = ((draws[s] < thr) != got) & (np.abs(draws[s] - thr) > margin)
            self.out["sampling_wrong"][s] += wrong.sum()
            if wrong.any() and not self.first:
                i = int(np.flatnonzero(wrong)[0])
                self.first = [s, int(local[i]), bool(got[i]), float(draws[s][i]),
                              float(thr[i])]

    def totals(self, start: int) -> dict:
        """The shard's totals; ``first_wrong``: (round, global row, sampled, draw, threshold)."""
        first = np.array(self.first[:1] + [self.first[1] + start] + self.first[2:]
                         if self.first else [], dtype=np.float64)
        return {**self.out, "first_wrong": first}


def check_sampling(ctx: dict, chosen: dict, totals: dict) -> str | None:
    """Each round's cost agrees; every point was sampled, or not, as its draw says."""
    costs = np.asarray(chosen["costs"], dtype=np.float64)
    n = max(1.0, float(totals["counts"][0].sum()))
    for s, cost in enumerate(costs):
        want = totals["costs"][s]
        tol = totals["costs_tol"][s] + LAMBDA * math.sqrt(n) * EPS64 * want
        if not abs(cost - want) <= tol:
            return (f"k-means|| round {s}: sampling cost {cost:.9g} reported, {want:.9g} "
                    f"recomputed (tolerance {tol:.2g})")
    for first in totals["first_wrong"]:
        if len(first):
            s, row, got, draw, thr = first
            return (f"k-means|| round {int(s)}: row {int(row)} was "
                    f"{'' if got else 'not '}sampled, its draw {draw:.6g} against its "
                    f"probability {min(thr, 1.0):.6g}")
    return None


def check_points(ctx: dict, chosen: dict, read: np.ndarray) -> str | None:
    """The candidates are the data's points at their rows, the first one the seeded row."""
    rows, points = np.asarray(chosen["rows"]), np.asarray(chosen["points"], dtype=np.float64)
    first = int(seeded_rows(ctx["seed"], ctx["samples"], 1)[0])
    if int(rows[0]) != first:
        return f"initial candidate 0 is row {int(rows[0])}, the seeded row {first} expected"
    differ = np.flatnonzero((points != read).any(axis=1))
    if len(differ):
        i = int(differ[0])
        return (f"initial candidate {i} (row {int(rows[i])}) is {points[i][:3].tolist()}..., "
                f"the data's point there is {read[i][:3].tolist()}...")
    return None


def check_weights(chosen: dict, counted: np.ndarray, near: np.ndarray, points: float
                  ) -> str | None:
    """The weights against ``counted`` (points nearest each candidate) within ``near`` ties."""
    weights = np.asarray(chosen["weights"], dtype=np.float64)
    if weights.sum() != points:
        return (f"initial candidate weights sum to {weights.sum():.0f}, not the "
                f"{points:.0f} points counted")
    off = np.abs(weights - counted) - near
    if np.any(off > 0):
        i = int(np.argmax(off))
        return (f"initial candidate {i} has weight {weights[i]:.0f}; {counted[i]:.0f} points "
                f"are nearest it ({near[i]:.0f} by a rounding tie)")
    return None


def check_fixed_point(chosen: dict, start: np.ndarray) -> str | None:
    """Each initial centroid is the weighted mean of the candidates nearest it.

    Distances by differences, in float64; a candidate whose two nearest centroids are within
    both this and the run's rounding of each other may count for either, and the allowed
    difference of each mean counts such candidates' weight.
    """
    points = np.asarray(chosen["points"], dtype=np.float64)
    weights = np.asarray(chosen["weights"], dtype=np.float64)
    k, d = start.shape
    mass, near_mass = np.zeros(k), np.zeros(k)
    sums, abs_sums, near_abs = np.zeros((k, d)), np.zeros((k, d)), np.zeros((k, d))
    c_norm2 = (start ** 2).sum(axis=1)
    step = max(1, CELLS // (k * d))
    for lo in range(0, len(points), step):
        p, w = points[lo:lo + step], weights[lo:lo + step]
        dist = ((p[:, None, :] - start[None]) ** 2).sum(axis=2)
        err = 2 * (d + 3) * EPS64 * ((p ** 2).sum(axis=1)[:, None] + c_norm2[None] + dist)
        best = np.argmin(dist, axis=1)
        rows = np.arange(len(p))
        within = (dist - dist[rows, best][:, None]) <= err + err[rows, best][:, None]
        shared = within & (within.sum(axis=1) > 1)[:, None]
        onehot = (best[:, None] == np.arange(k)[None]) * w[:, None]
        mass += onehot.sum(axis=0)
        sums += onehot.T @ p
        abs_sums += onehot.T @ np.abs(p)
        near_mass += (shared * w[:, None]).sum(axis=0)
        near_abs += (shared * w[:, None]).T @ np.abs(p)
    expected, allowed = lloyd_step(start, mass, near_mass, sums, abs_sums, near_abs,
                                   len(points))
    excess = np.abs(start - expected) - allowed
    excess[mass <= 0] = -1  # no weight nearest it: it kept its place in the run
    if np.any(excess > 0):
        j, f = np.unravel_index(int(np.argmax(excess)), excess.shape)
        return (f"initial centroid {j} feature {f} = {start[j, f]:.9g}, the weighted mean of "
                f"the candidates nearest it is {expected[j, f]:.9g} (tolerance "
                f"{allowed[j, f]:.2g}): not a fixed point of weighted Lloyd")
    return None


def lloyd_step(previous: np.ndarray, mass: np.ndarray, near_mass: np.ndarray, sums: np.ndarray,
               abs_sums: np.ndarray, near_abs: np.ndarray, n: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """A (weighted) Lloyd step from ``previous``, and how far each entry of it may be off.

    ``mass``, ``sums``, ``abs_sums``: weight, sum and sum of magnitudes of what is nearest each
    centroid; ``near_mass``, ``near_abs``: of what may be nearest another within rounding;
    ``n``: how many terms were summed. A centroid with nothing nearest keeps its place.
    """
    filled = mass > 0
    expected = previous.copy()
    expected[filled] = sums[filled] / mass[filled, None]
    sure = np.maximum(mass - near_mass, 1)[:, None]
    allowed = (near_abs + near_mass[:, None] * np.abs(expected)) / sure
    allowed[(mass <= near_mass) & (near_mass > 0)] = np.inf  # all of it may belong elsewhere
    allowed += (LAMBDA * math.sqrt(max(n, 1)) * EPS64 * abs_sums / np.maximum(mass, 1)[:, None]
                + 4 * EPS64 * np.abs(expected))
    return expected, allowed


def check_seeded_blobs(start: np.ndarray, centres: np.ndarray, blob_points: np.ndarray
                       ) -> tuple[str | None, str]:
    """Every blob's true centre the nearest of exactly one initial centroid: (failure, words).

    Applies where there are as many centroids as blobs and each blob holds ``MIN_BLOB``
    points or more (the caller decides the first).
    """
    if blob_points.min() < MIN_BLOB:
        return None, f"a blob of under {MIN_BLOB} points: initial centroids not paired"
    owner = ((start[:, None, :] - centres[None]) ** 2).sum(axis=2).argmin(axis=1)
    seeded = np.bincount(owner, minlength=len(centres))
    if np.all(seeded == 1):
        return None, "every blob seeded by one initial centroid"
    return (f"initial centroids: blob {int(np.argmin(seeded))} has {seeded.min()} and blob "
            f"{int(np.argmax(seeded))} has {seeded.max()} initial centroids nearest its true "
            "centre (k-means|| seeds each well-separated blob once)"), ""


def true_centres(seed: int, clusters: int, features: int) -> np.ndarray:
    """The blobs' centres, drawn again from the documented scheme."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(CENTRES,)))
    width = half_width(clusters, features)
    out = []
    while len(out) < clusters:
        for _ in range(CENTRE_TRIES):
            c = rng.uniform(-width, width, features)
            if all(np.sum((c - o) ** 2) >= SEPARATION ** 2 for o in out):
                out.append(c)
                break
        else:
            raise AssertionError("the run drew centres the scheme cannot")
    return np.array(out)


def check_init(ctx: dict, raw, totals: dict) -> str | None:
    """Random: the seeded points; k-means||: the checks above.

    Says what was established in ``totals["init_words"]``.
    """
    first = np.asarray(raw["centroids"][0], dtype=np.float64)
    if totals["init"] is not None:
        totals["init_words"] = f"the {ctx['k']} initial centroids are the seeded points"
        if not np.array_equal(first, totals["init"]):
            j = int(np.flatnonzero((first != totals["init"]).any(axis=1))[0])
            return (f"initial centroid {j} is {first[j][:3].tolist()}..., the seeded point "
                    f"{totals['init'][j][:3].tolist()}... expected")
        return None
    chosen = raw["init"]
    failure = (check_points(ctx, chosen, totals["candidates"])
               or check_sampling(ctx, chosen, totals)
               or check_weights(chosen, totals["weights"], totals["weights_near"],
                                            float(totals["counts"][0].sum()))
               or check_fixed_point(chosen, first))
    if failure:
        return failure
    words = (f"the {len(chosen['rows'])} k-means|| candidates are points of the data, sampled "
             f"as their seeded draws say in {len(chosen['costs'])} rounds of the costs "
             "recomputed, their weights recomputed agree, the initial centroids are a fixed "
             "point of weighted Lloyd on them")
    if ctx.get("input") is None and ctx["k"] == ctx["clusters"]:
        failure, said = check_seeded_blobs(
            first, true_centres(ctx["seed"], ctx["clusters"], ctx["features"]),
            totals["blob_points"])
        words += f"; {said}"
    totals["init_words"] = words
    return failure
