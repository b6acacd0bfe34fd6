"""Independent verification of kmeans-pipeline's result (:func:`verify`) and its mutations.

At ``depth="fast"`` (the default of a run) :mod:`pipelines.kmeans.check_fast` checks the last
iteration whole and the cell sums the run reports, on the points it kept. What the full check
establishes, on data it draws again on the workers from the documented
per-shard seeds, its own way, with every value in float64, over all points:

- the iterations stop as the rule says: every shift but the last over ``--tol``, and the last
  one within it unless ``--max-iter`` iterations ran; random initial centroids are the seeded
  points of the data; a k-means|| initialisation is checked from what it reports choosing
  (:mod:`pipelines.kmeans.check_init`): candidates that are the data's points, sampled as their
  seeded draws and the recomputed costs say, weights recomputed over all points, initial
  centroids a fixed point of weighted Lloyd on them, and (generated blobs, as many centroids as
  blobs) every blob seeded once;
- every iteration is one Lloyd step: each reported centroid is the mean of the points nearest
  the previous centroids (the previous centroid where none is), so the final centroids are a
  fixed point within ``--tol`` of the step that gave them; every reported inertia is that of
  its centroids, and the inertia never increases;
- with as many centroids as blobs, where each blob's centre has exactly one centroid near it,
  every centroid lies within a few standard errors (``1 / sqrt(points)``) of that centre: the
  blobs were found. (Lloyd's iteration may rightly end in a local optimum that pairs
  centroids and blobs otherwise; the detail says so and the check does not fail.) Points read
  from ``--input`` have no true centres: not compared. The check reads them again with NumPy's
  or Zarr's own reader; a point with a NaN or infinite coordinate is left out, as the kernel
  documents.

A point's nearest centroid is known only up to rounding: the run's distances (in the data's
dtype, the centroids rounded to it) and the check's (float64, ``|x|^2 - 2 x.c + |c|^2``) each
err by a bounded amount; a point whose nearest centroids are within both errors of each other
may go to either, and the allowed difference of each mean counts such points. Sums of many
float64 terms follow Higham and Mary's probabilistic bound, ``LAMBDA * sqrt(n) * u``.

It shares no code with the run (:mod:`pipelines.kmeans.pipeline`, :mod:`pipelines.kmeans.tasks`,
:mod:`pipelines.kmeans.init`,
the kernel, :mod:`daskgpu.toolkit.data_parallel`): it takes from :mod:`pipelines.kmeans.shared` only
the scheme's constants. ``MUTATIONS`` are the wrong results it must reject.
"""

from __future__ import annotations

import importlib
import math

import dask
import numpy as np

from daskgpu.toolkit import data_parallel
from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.numeric import generator
from daskgpu.toolkit.registry import Mutation, Verification, Workload
from pipelines.kmeans import check_init as init_checks
from pipelines.kmeans.check_init import EPS64, LAMBDA, ROUNDS
from pipelines.kmeans.check_init import near_sets as _near_sets
from pipelines.kmeans.check_outputs import check_outputs
from pipelines.kmeans.shared import POINTS, SEPARATION

FALSE_ALARM = 1e-9  # chance that a correct run's centroid falls outside the blob's bound
SLAB = 16_384  # points recomputed at once in float64


def verify(workload: Workload, raw, depth: str = "full") -> Verification:
    """Check the iterations, inertias and centroids of a k-means run.

    ``depth="full"``: against a float64 replay on data drawn or read again (see the module's
    docstring); ``"fast"``: on the points the run kept, with the k-means|| initialisation's
    cells sampled (:mod:`pipelines.kmeans.check_fast`). A presented run's shards are let go
    once the check no longer needs them (the full check, before it draws its own).
    """
    from pipelines.kmeans.check_fast import verify_fast  # it builds on this module's rules

    ctx = workload.context
    # what this run wrote: the temporaries renamed into place once it has verified
    written = {name: workload.written(ctx[name]) for name in ("output", "labels")
               if ctx.get(name) and workload.written(ctx[name]) != ctx[name]}

    def and_outputs(check):
        def checked(ctx: dict, raw) -> Verification:
            final: dict = {}
            verdict = check(ctx, raw, final)
            if not verdict.ok:
                return verdict
            return check_outputs(ctx, raw, written, final, verdict, depth)
        return checked

    return data_parallel.check_kept_shards(ctx, and_outputs(verify_fast),
                                           and_outputs(_verify_full), raw, depth)


def redrawn_points(ctx: dict, index: int, start: int, rows: int):
    """Shard ``index``'s points (rows ``start`` on), drawn or read again the check's way."""
    return _shard_points(ctx["seed"], index, rows, ctx["clusters"], ctx["features"],
                         ctx["dtype"], ctx["library"], ctx.get("input"), start)[0]


def _verify_full(ctx: dict, raw, final: dict | None = None) -> Verification:
    """The full check; ``final`` gets what it counted at the final centroids."""
    failure = _check_structure(ctx, raw) or _check_stop(ctx, raw)
    if not failure and ctx["init"] != "random":
        failure = init_checks.check_reported(ctx, raw.get("init"))
    if failure:
        return Verification(False, failure)
    trajectory = np.asarray(raw["centroids"], dtype=np.float64)
    totals = _recompute(ctx, trajectory, raw.get("init") if ctx["init"] != "random" else None)
    for check in (_check_init, _check_steps, _check_inertias, _check_descent):
        failure = check(ctx, raw, totals)
        if failure:
            return Verification(False, failure)
    found = _check_centres(ctx, trajectory[-1], totals)
    if found.startswith("centroid"):
        return Verification(False, found)
    iterations = len(trajectory) - 1
    if final is not None:
        final.update(counts=totals["counts"][-1], near=totals["near"][-1],
                     points=float(totals["counts"][-1].sum()))
    after = _lloyd(trajectory[-1], totals, iterations)[0]
    move = float(np.sqrt(((after - trajectory[-1]) ** 2).sum(axis=1)).max())
    return Verification(True, (
        f"{totals['init_words']}; all {iterations} iterations recomputed in float64 on all "
        f"{ctx['samples']} points agree; {iterations + 1} inertias agree and never increase; "
        f"one more step would move the centroids by {move:.3g}; {found}"))


# --------------------------------------------------------------------------- the replay


def _read(source: dict, start: int, rows: int, dtype: str, xp):
    """Rows ``start .. start + rows - 1`` of the input, read with its format's own reader."""
    if source["kind"] == "npy":
        points = np.load(source["path"], mmap_mode="r")  # allow_pickle stays False
    else:
        import zarr

        points = zarr.open_array(source["path"], mode="r")
    return xp.asarray(np.asarray(points[start:start + rows]).astype(dtype))


def shard_totals(seed: int, index: int, rows: int, clusters: int, dtype: str, library: str,
                 trajectory: np.ndarray, picked: np.ndarray, source: dict | None = None,
                 start: int = 0, candidates: np.ndarray | None = None,
                 sampling: dict | None = None) -> dict:
    """Redraw (or read) shard ``index`` and total, in float64, what the checks compare.

    For each centroids ``trajectory[t]``: per centroid, the points nearest it, their sum, the
    sum of their magnitudes, and (``near``, ``near_abs``) the points that may be nearest it
    within rounding; the inertia and its rounding allowance. The points at ``picked``. For
    ``candidates`` (k-means||'s): the points nearest each (``weights``) and those that may be
    by a rounding tie (``weights_near``), and with ``sampling`` (the shard's
    :func:`pipelines.kmeans.check_init.sampling_plan`) its sampling replayed. Generated
    points: the points of each blob (``blob_points``). With ``source`` (an input's path and
    kind) the shard is its rows from ``start``. Runs on a worker.
    """
    xp = importlib.import_module(library)
    steps, k, d = trajectory.shape
    points, counted, blob_points, local = _shard_points(seed, index, rows, clusters, d, dtype,
                                                        library, source, start)
    unit = float(np.finfo(dtype).eps) / 2
    c = xp.asarray(trajectory)
    c_norm2 = (c ** 2).sum(axis=2)  # (steps, k)
    out = {name: xp.zeros((steps, k)) for name in ("counts", "near")}
    for name in ("sums", "abs_sums", "near_abs"):
        out[name] = xp.zeros((steps, k, d))
    out["inertia"], out["inertia_tol"] = xp.zeros(steps), xp.zeros(steps)
    part = SLAB
    if candidates is not None:
        cand = xp.asarray(candidates)
        cand_norm2 = (cand ** 2).sum(axis=1)
        out["weights"], out["weights_near"] = xp.zeros(len(cand)), xp.zeros(len(cand))
        part = max(256, (1 << 22) // max(len(cand), 1))  # bounds the distances held at once
        replay = init_checks.Replay(sampling) if sampling is not None else None
    for first in range(0, counted.shape[0], SLAB):
        x = counted[first:first + SLAB].astype(np.float64)
        ax = xp.abs(x)
        x_norm2 = (x ** 2).sum(axis=1)
        for lo in range(0, x.shape[0] if candidates is not None else 0, part):
            nearest, _, _, err, _, shared, dist = _near_sets(
                x[lo:lo + part], x_norm2[lo:lo + part], cand, cand_norm2, unit, xp)
            out["weights"] += xp.bincount(nearest, minlength=len(cand))
            out["weights_near"] += shared.sum(axis=0)
            if replay is not None:
                at = first + lo
                replay.add(local[at:at + len(nearest)], dist, err, x_norm2[lo:lo + part],
                           cand_norm2, xp)
        for t in range(steps):
            _add_nearest_totals(out, t, x, ax, x_norm2, c[t], c_norm2[t], unit, xp)
    total = {name: to_host(value) for name, value in out.items()}
    total["inertia_tol"] += LAMBDA * math.sqrt(max(rows, 1)) * EPS64 * total["inertia"]
    total["picked"] = to_host(points[xp.asarray(picked)].astype(np.float64))
    if blob_points is not None:
        total["blob_points"] = blob_points
    if candidates is not None and sampling is not None:
        total.update(replay.totals(start))
    return total


def _shard_points(seed: int, index: int, rows: int, clusters: int, d: int, dtype: str,
                  library: str, source: dict | None, start: int):
    """Shard ``index``'s points: redrawn from the seed, or read from the input.

    Returns the points, those counted (an input's finite rows), the points of each blob
    (generated data only, else None) and the counted points' rows within the shard.
    """
    xp = importlib.import_module(library)
    if source is None:
        sequence = np.random.SeedSequence(seed, spawn_key=(POINTS, index))
        rng = generator(library, sequence)
        blob = rng.integers(0, clusters, rows)
        points = rng.standard_normal((rows, d), dtype=dtype)
        points += xp.asarray(init_checks.true_centres(seed, clusters, d).astype(dtype))[blob]
        blob_points = to_host(xp.bincount(blob, minlength=clusters)).astype(np.float64)
        return points, points, blob_points, np.arange(rows)
    points = _read(source, start, rows, dtype, xp)
    finite = xp.isfinite(points).all(axis=1)
    return points, points[finite], None, np.flatnonzero(to_host(finite))


def _add_nearest_totals(out: dict, t: int, x, ax, x_norm2, c, c_norm2, unit: float, xp) -> None:
    """Add one slab's totals for the centroids ``c`` of iteration ``t`` into ``out``."""
    k = c.shape[0]
    best, low, low_err, err, within, shared, _ = _near_sets(x, x_norm2, c, c_norm2, unit, xp)
    onehot = (best[:, None] == xp.arange(k)[None]).astype(np.float64)
    out["counts"][t] += onehot.sum(axis=0)
    out["sums"][t] += onehot.T @ x
    out["abs_sums"][t] += onehot.T @ ax
    out["near"][t] += shared.sum(axis=0)
    out["near_abs"][t] += shared.astype(np.float64).T @ ax
    out["inertia"][t] += low.sum()
    out["inertia_tol"][t] += (low_err + (err * within).max(axis=1)).sum()


def _recompute(ctx: dict, trajectory: np.ndarray, chosen: dict | None = None) -> dict:
    """Totals of :func:`shard_totals` over all shards; the points picked, in their order.

    Random initialisation: the seeded points (``init``); k-means|| (``chosen``, the reported
    candidates): the points at the candidates' rows (``candidates``).
    """
    if chosen is None:
        rows = init_checks.seeded_rows(ctx["seed"], ctx["samples"], ctx["k"])
        candidates = None
    else:
        rows = np.asarray(chosen["rows"], dtype=np.int64)
        candidates = np.asarray(chosen["points"], dtype=np.float64)
    edges = np.cumsum((0, *ctx["sizes"]))
    plans = (init_checks.sampling_plan(ctx, chosen, edges) if chosen is not None
             else [None] * len(ctx["sizes"]))
    tasks, positions = [], []
    for i, size in enumerate(ctx["sizes"]):
        mine = np.flatnonzero((rows >= edges[i]) & (rows < edges[i + 1]))
        positions.append(mine)
        tasks.append(dask.delayed(shard_totals, pure=True)(
            ctx["seed"], i, size, ctx["clusters"], ctx["dtype"], ctx["library"], trajectory,
            rows[mine] - edges[i], ctx.get("input"), int(edges[i]), candidates, plans[i]))
    done = dask.compute(*tasks)
    totals = {key: sum(part[key] for part in done) for key in done[0]
              if key not in ("picked", "first_wrong")}
    totals["first_wrong"] = [part["first_wrong"] for part in done if "first_wrong" in part]
    picked = np.empty((len(rows), ctx["features"]))
    picked[np.concatenate(positions)] = np.concatenate([p["picked"] for p in done])
    totals["init"] = picked if chosen is None else None
    totals["candidates"] = picked if chosen is not None else None
    return totals


# --------------------------------------------------------------------------- the checks


def _check_structure(ctx: dict, raw) -> str | None:
    keys = ("centroids", "inertias", "iterations")
    if not isinstance(raw, dict) or any(key not in raw for key in keys):
        return f"result carries no centroids, inertias and iterations to check: {type(raw)}"
    trajectory = np.asarray(raw["centroids"])
    steps = int(raw["iterations"])
    if trajectory.ndim != 3 or trajectory.shape[1:] != (ctx["k"], ctx["features"]):
        return f"centroids of shape {trajectory.shape}; (iterations + 1, k, d) expected"
    if trajectory.shape[0] != steps + 1 or len(raw["inertias"]) != steps + 1:
        return (f"{steps} iterations reported, {trajectory.shape[0]} centroid sets and "
                f"{len(raw['inertias'])} inertias (iterations + 1 expected)")
    if not 1 <= steps <= ctx["max_iter"]:
        return f"{steps} iterations reported; between 1 and --max-iter {ctx['max_iter']} expected"
    if not np.all(np.isfinite(trajectory)):
        return "centroids hold NaN or infinite values"
    return None


def _shifts(trajectory: np.ndarray) -> np.ndarray:
    return np.sqrt(((np.diff(trajectory, axis=0)) ** 2).sum(axis=2)).max(axis=1)


def _check_stop(ctx: dict, raw) -> str | None:
    shifts = _shifts(np.asarray(raw["centroids"], dtype=np.float64))
    tol, steps = ctx["tol"], len(shifts)
    early = np.flatnonzero(shifts[:-1] <= tol)
    if len(early):
        return (f"iterations went on after iteration {early[0] + 1}, whose largest centroid "
                f"shift {shifts[early[0]]:.3g} was within --tol {tol:g}")
    if shifts[-1] > tol and steps < ctx["max_iter"]:
        return (f"iterations stopped after {steps} (of --max-iter {ctx['max_iter']}) with a "
                f"last centroid shift {shifts[-1]:.3g} over --tol {tol:g}")
    return None


def _check_init(ctx: dict, raw, totals: dict) -> str | None:
    return init_checks.check_init(ctx, raw, totals)


def _lloyd(previous: np.ndarray, totals: dict, t: int) -> tuple[np.ndarray, np.ndarray]:
    """The step from ``previous`` (the centroids at ``t``) and how far each entry may be off."""
    counts = totals["counts"][t]
    return init_checks.lloyd_step(previous, counts, totals["near"][t], totals["sums"][t],
                                  totals["abs_sums"][t], totals["near_abs"][t],
                                  float(counts.sum()))


def _check_steps(ctx: dict, raw, totals: dict) -> str | None:
    trajectory = np.asarray(raw["centroids"], dtype=np.float64)
    for t in range(len(trajectory) - 1):
        expected, allowed = _lloyd(trajectory[t], totals, t)
        excess = np.abs(trajectory[t + 1] - expected) - allowed
        if np.any(excess > 0):
            j, f = np.unravel_index(int(np.argmax(excess)), excess.shape)
            return (f"iteration {t + 1}: centroid {j} feature {f} = "
                    f"{trajectory[t + 1][j, f]:.9g}, the mean of its points is "
                    f"{expected[j, f]:.9g} (tolerance {allowed[j, f]:.2g})")
    return None


def _check_inertias(ctx: dict, raw, totals: dict) -> str | None:
    reported = np.asarray(raw["inertias"], dtype=np.float64)
    for t, value in enumerate(reported):
        if not abs(value - totals["inertia"][t]) <= totals["inertia_tol"][t]:
            return (f"inertia at iteration {t}: {value:.9g} reported, "
                    f"{totals['inertia'][t]:.9g} recomputed (tolerance "
                    f"{totals['inertia_tol'][t]:.2g})")
    return None


def _check_descent(ctx: dict, raw, totals: dict) -> str | None:
    reported = np.asarray(raw["inertias"], dtype=np.float64)
    slack = totals["inertia_tol"]
    for t in range(1, len(reported)):
        if reported[t] > reported[t - 1] + slack[t] + slack[t - 1]:
            return (f"inertia rose from {reported[t - 1]:.9g} to {reported[t]:.9g} at "
                    f"iteration {t}")
    return None


def _check_centres(ctx: dict, final: np.ndarray, totals: dict) -> str:
    """``centroid ...`` for a blob found wrongly; else what was found, in words."""
    if ctx.get("input") is not None:
        return "points read from --input: no true centres to compare"
    if ctx["k"] != ctx["clusters"]:
        return f"--k {ctx['k']} differs from --clusters {ctx['clusters']}: centres not compared"
    centres = init_checks.true_centres(ctx["seed"], ctx["clusters"], ctx["features"])
    gap = np.sqrt(((final[:, None, :] - centres[None]) ** 2).sum(axis=2))
    close = gap < SEPARATION / 2
    if not (np.all(close.sum(axis=0) == 1) and np.all(close.sum(axis=1) == 1)):
        paired = int((close.sum(axis=1) == 1).sum())
        return (f"a local optimum: {paired} of {ctx['k']} centroids near a blob's true centre "
                "(not an error of Lloyd's iteration)")
    counts = totals["counts"][-1]
    z = math.sqrt(2 * math.log(2 * final.size / FALSE_ALARM))
    for j, c in enumerate(np.argmax(close, axis=1)):
        bound = z / math.sqrt(max(counts[j], 1)) + ctx["tol"]
        off = np.abs(final[j] - centres[c])
        if np.any(off > bound):
            f = int(np.argmax(off))
            return (f"centroid {j} is {off[f]:.3g} from its blob's true centre in feature {f}; "
                    f"within {bound:.3g} ({z:.1f} standard errors) expected")
    return f"every blob's true centre found within {z:.1f} standard errors"


# ------------------------------------------------------------ the wrong results it must reject
# Those named ``k-means|| ...`` alter what a k-means|| initialisation reports (``raw["init"]``)
# and apply to such a run only; those named ``labels: ...`` alter the labels a run with
# ``--labels`` wrote (through the result's ``edits``, see :mod:`pipelines.kmeans.check_outputs`).


def _moved_centroid(raw: dict) -> dict:
    trajectory = np.array(raw["centroids"], dtype=np.float64, copy=True)
    trajectory[-1, 0, 0] += 0.01
    return {**raw, "centroids": trajectory}


def _altered_inertia(raw: dict) -> dict:
    inertias = np.array(raw["inertias"], dtype=np.float64, copy=True)
    inertias[len(inertias) // 2] *= 1.01
    return {**raw, "inertias": inertias}


def _stopped_early(raw: dict) -> dict:
    return {**raw, "centroids": np.asarray(raw["centroids"])[:-1],
            "inertias": np.asarray(raw["inertias"])[:-1], "iterations": raw["iterations"] - 1}


def _moved_start(raw: dict) -> dict:
    trajectory = np.array(raw["centroids"], dtype=np.float64, copy=True)
    trajectory[0, -1] += 0.5
    return {**raw, "centroids": trajectory}


def _moved_weight(raw: dict) -> dict:
    """A tenth of the heaviest candidate's weight given to another (the sum kept)."""
    weights = np.array(raw["init"]["weights"], copy=True)
    i = int(np.argmax(weights))
    moved = max(1, int(weights[i]) // 10)
    weights[i] -= moved
    weights[(i + 1) % len(weights)] += moved
    return {**raw, "init": {**raw["init"], "weights": weights}}


def _invented_candidate(raw: dict) -> dict:
    points = np.array(raw["init"]["points"], dtype=np.float64, copy=True)
    points[-1] += 0.25
    return {**raw, "init": {**raw["init"], "points": points}}


def _dropped_candidate(raw: dict) -> dict:
    """The last candidate sampled in a round left out (its weight given to the first)."""
    chosen = raw["init"]
    rounds = np.asarray(chosen["rounds"])
    i = int(np.flatnonzero((rounds >= 1) & (rounds <= ROUNDS))[-1])
    keep = np.arange(len(rounds)) != i
    weights = np.array(chosen["weights"], copy=True)
    weights[0] += weights[i]
    return {**raw, "init": {**chosen, "rows": np.asarray(chosen["rows"])[keep],
                            "points": np.asarray(chosen["points"])[keep],
                            "weights": weights[keep], "rounds": rounds[keep]}}


def _altered_cost(raw: dict) -> dict:
    costs = np.array(raw["init"]["costs"], dtype=np.float64, copy=True)
    costs[-1] *= 1.01
    return {**raw, "init": {**raw["init"], "costs": costs}}


def _unreduced_start(raw: dict) -> dict:
    """The initial centroids: the first k candidates, as if never reduced."""
    trajectory = np.array(raw["centroids"], dtype=np.float64, copy=True)
    trajectory[0] = np.asarray(raw["init"]["points"])[:trajectory.shape[1]]
    return {**raw, "centroids": trajectory}


def _edited_labels(raw: dict, add: int, step: int, modulo: int) -> dict:
    """The written labels as if those of every ``step``-th point were ``add`` more."""
    labels = dict(raw.get("labels") or {})
    edit = {"start": 0, "stop": int(sum(labels.get("rows", ()))), "step": step, "add": add,
            "modulo": modulo}
    return {**raw, "labels": {**labels, "edits": [*labels.get("edits", ()), edit]}}


def _moved_labels(raw: dict) -> dict:
    """Every 997th point labelled with the next centroid."""
    return _edited_labels(raw, 1, 997, len(raw["counts"]))


def _labels_from_one(raw: dict) -> dict:
    """Every label one more: counted from 1, not 0."""
    return _edited_labels(raw, 1, 1, 0)


# What a failed check's detail names (a regular expression, see Mutation.names).
NOT_A_FIXED_POINT = r"initial centroid \d+ feature \d+ = \S+, the weighted mean"
MUTATIONS = (
    Mutation("a final centroid moved by 0.01", _moved_centroid,
             r"last centroid shift 0\.01 over --tol"),
    Mutation("an inertia altered by 1 %", _altered_inertia,
             r"inertia at iteration \d+: \S+ reported"),
    Mutation("iterations miscounted", lambda raw: {**raw, "iterations": raw["iterations"] + 1},
             r"^\d+ iterations reported, \d+ centroid sets"),
    Mutation("stopped one iteration early", _stopped_early,
             r"iterations stopped after \d+ \(of --max-iter \d+\) with a last centroid shift"),
    Mutation("an initial centroid moved", _moved_start, NOT_A_FIXED_POINT),
    # --labels only:
    Mutation("labels: some points labelled with another centroid", _moved_labels,
             r"--labels \S+: (\d+ points labelled \d+, the last pass counted|row \d+ is "
             r"labelled \d+, its nearest final centroid is \d+)"),
    Mutation("labels: counted from 1", _labels_from_one,
             r"--labels \S+: row \d+ is labelled \d+, outside -1"),
    # k-means|| only (a random initialisation reports no weighed candidates):
    Mutation("k-means|| candidate weight moved to another", _moved_weight,
             r"initial candidate \d+ has weight \d+"),
    Mutation("k-means|| candidate not a point of the data", _invented_candidate,
             r"initial candidate \d+ \(row \d+\) is"),
    Mutation("k-means|| candidates not reduced to k", _unreduced_start, NOT_A_FIXED_POINT),
    Mutation("k-means|| a sampled candidate left out", _dropped_candidate,
             r"k-means\|\| round \d+: (the run's cells sampled \d+ points|row \d+ was not "
             r"sampled)"),
    Mutation("k-means|| a round's sampling cost altered by 1 %", _altered_cost,
             r"k-means\|\| round \d+: sampling cost \S+ reported"),
)
KMEANS_PARALLEL_ONLY = "k-means||"  # the prefix of the mutations that apply to it alone
LABELS_ONLY = "labels: "  # the prefix of those that apply to a run with --labels alone
