"""train-pipeline's fast check (``verify(..., depth="fast")``): a tenth of the training's work.

The run reports, for every pass (each step's, the final one's and the test pass's), the sums
of each cell of rows it read (:func:`pipelines.train.shared.cell_rows`): the loss sum, the
right answers and, in a step, ``r^T G s`` of the cell's gradient ``G`` for a few seeded
random probes ``(r, s)`` (Freivalds' check). Working on the rows the run kept on its workers,
with its own code (:mod:`pipelines.train.check_kept`), the check establishes:

- every pass's loss, right answers and rows are the sums of its cells, and every step moved
  the weights by its cells' gradients summed: ``r^T (w[t] - w[t+1]) s * samples / rate``
  equals the cells' probes summed (each shard's scaled by its rows over its mini-batch's),
  within the weights' rounding;
- the final weights, recomputed over all rows: every cell's loss and right answers agree, and
  so do the final loss and train accuracy (one pass over the rows kept);
- a seeded sample of the steps' cells (``spot_checks.sample_size`` of them: a fault in a
  tenth of those cell passes is caught with probability at least 99.9 %), recomputed in
  float64, agrees with what the run reported for them, probes included;
- the test pass recomputed: every test cell, the test loss and accuracy; with a teacher, its
  best accuracy recomputed, the test labels as likely under the teacher as they should be,
  and the same bounds as the full check; the loss never rose where the full check requires
  it (on an input the learning rate is judged safe from the trace of ``A^T A``, never from
  the whole matrix);
- the kept rows are the data: a generated shard's first cell drawn again from its seed
  (NumPy's generator; on GPU workers this is left out), an input's seeded cells read again
  from its files.

What it does not establish: rows of generated data past each shard's first cell are taken
as kept (drawing them again is the full check's work), and a fault in under a tenth of the
steps' cell passes may escape the sample.
"""

from __future__ import annotations

import math

import dask
import numpy as np

from daskgpu.toolkit import spot_checks
from daskgpu.toolkit.registry import Verification
from pipelines.train import check_hidden
from pipelines.train.check_kept import (
    EPS64,
    LAMBDA,
    batch_rows_drawn,
    input_test_rows,
    probes,
    test_shard,
    training_shard,
)
from pipelines.train.check_replay import unit
from pipelines.train.check_rules import (
    BEST_RTOL,
    ROWS_PER_FEATURE,
    accuracy_bounds,
    check_bounds,
    check_descent,
    check_structure,
    descent_applies,
    floor_applies,
    why_it_may_rise,
)
from pipelines.train.shared import (
    PROBES,
    TEST,
    TRAIN,
    batch_rows,
    cell_rows,
    cells_of,
    input_held_out,
    parameter_count,
)


def verify_fast(ctx: dict, raw) -> Verification:
    """The fast check of a training run (see the module's docstring)."""
    plan = _plan(ctx)
    failure = (check_structure(ctx, raw) or _check_cells_shape(ctx, raw, plan)
               or _check_sums(ctx, raw, plan))
    if failure:
        return Verification(False, failure)
    if not ctx["shards"].futures:
        return Verification(False, "the run's shards were let go before the fast check read "
                                   "them")
    done = _recompute(ctx, plan, np.asarray(raw["weights"]))
    for check in (_check_data, _check_steps, _check_final, _check_sampled, _check_test):
        failure = check(ctx, raw, plan, done)
        if failure:
            return Verification(False, failure)
    totals = _rule_totals(ctx, raw, plan, done)
    failure = check_bounds(ctx, raw, totals, []) or check_descent(ctx, raw, totals, [])
    if failure:
        return Verification(False, failure)
    return Verification(True, _words(ctx, raw, plan, done, totals))


# --------------------------------------------------------------------------- the plan


def _plan(ctx: dict) -> dict:
    """The cells of every pass, per shard; the probes; the sampled cell passes."""
    cell = cell_rows(ctx["features"], np.dtype(ctx["dtype"]).itemsize, ctx["library"])
    sizes, steps = list(ctx["train_sizes"]), ctx["steps"]
    read = (sizes if ctx["batch"] is None
            else [batch_rows(ctx["batch"], n, ctx["samples"]) for n in sizes])
    plan = {"cell": cell, "sizes": sizes, "read": read,
            "scale": np.array([n / b for n, b in zip(sizes, read, strict=True)]),
            "step_cells": [cells_of(b, cell) for b in read],
            "final_cells": [cells_of(n, cell) for n in sizes],
            "test_cells": [cells_of(n, cell) for n in ctx["test_sizes"]],
            "probes": (probes(ctx["seed"], ctx["features"], ctx["classes"])
                       if ctx.get("hidden") is None else
                       (check_hidden.probes(ctx["seed"], parameter_count(
                           ctx["features"], ctx["hidden"], ctx["classes"])), None))}
    per_step = sum(plan["step_cells"])
    population = steps * per_step  # the steps' cell passes
    drawn = spot_checks.sample_size(population)
    plan["population"], plan["drawn"] = population, drawn
    plan["sampled"] = [divmod(int(i), per_step) for i in
                       spot_checks.seeded_sample(population, drawn, ctx["seed"])]
    return plan


def _shard_of(cells: list[int], g: int) -> tuple[int, int]:
    """Shard and cell within it of a pass's cell ``g``."""
    edges = np.cumsum(cells)
    s = int(np.searchsorted(edges, g, side="right"))
    return s, g - int(edges[s - 1] if s else 0)


def _step_cells(plan: dict, t: int, steps: int) -> list[int]:
    return plan["step_cells"] if t < steps else plan["final_cells"]


# --------------------------------------------------------------------------- the sums


def _check_cells_shape(ctx: dict, raw, plan: dict) -> str | None:
    cells, steps = raw.get("cells"), ctx["steps"]
    if not isinstance(cells, list | tuple) or len(cells) != steps + 1 or not isinstance(
            raw.get("test_cells"), dict):
        return "result carries no cell sums of its passes to check (a fast check needs them)"
    for t, sums in enumerate([*cells, raw["test_cells"]]):
        want = sum(plan["test_cells"] if t > steps else _step_cells(plan, t, steps))
        if any(np.shape(sums.get(key, ())) != (want,) for key in ("loss", "right")):
            return f"pass {t}: cell sums of another shape than its {want} cells"
        if t < steps and np.shape(sums.get("probe", ())) != (want, PROBES):
            return f"step {t + 1}: probes of another shape than its {want} cells x {PROBES}"
    return None


def _scaled(plan: dict, cells: list[int], values: np.ndarray, t: int, steps: int):
    """Each cell's value times its shard's scale (a mini-batch step's), and their sum."""
    if t >= steps:
        return values
    scale = np.repeat(plan["scale"], cells)
    return values * (scale[:, None] if values.ndim == 2 else scale)


def _check_sums(ctx: dict, raw, plan: dict) -> str | None:
    """Each pass's rows, right answers and loss are its cells' sums (no data needed)."""
    steps, n = ctx["steps"], ctx["samples"]
    for t, sums in enumerate(raw["cells"]):
        expected_rows = sum(plan["read"]) if t < steps else n
        if int(raw["rows"][t]) != expected_rows:
            return (f"rows read at step {t}: {int(raw['rows'][t])} reported, {expected_rows} "
                    "expected")
        counted = float(np.sum(sums["right"]))
        if int(raw["right"][t]) != counted:
            return (f"train accuracy at step {t}: {int(raw['right'][t]) / expected_rows:.6f} "
                    f"reported, its cells count {counted / expected_rows:.6f}")
        cells = _scaled(plan, _step_cells(plan, t, steps), np.asarray(sums["loss"]), t, steps)
        failure = _sum_agrees(f"loss at step {t}", float(raw["losses"][t]) * n, cells, n)
        if failure:
            return failure
    test = raw["test_cells"]
    tested = sum(ctx["test_sizes"])
    if int(raw["test_right"]) != float(np.sum(test["right"])):
        return (f"test accuracy {int(raw['test_right']) / tested:.6f} reported, its cells count "
                f"{float(np.sum(test['right'])) / tested:.6f}")
    return _sum_agrees("test loss", float(raw["test_loss"]), np.asarray(test["loss"]), tested)


def _sum_agrees(what: str, reported: float, cells: np.ndarray, per: int) -> str | None:
    """A reported float64 sum against its cells' (the rounding of a few float64 sums)."""
    summed = float(np.sum(cells))
    allowed = 8 * (len(cells) + 2) * EPS64 * (float(np.abs(cells).sum()) + abs(reported))
    if not abs(reported - summed) <= allowed:
        return (f"{what}: {reported / per:.9g} reported, its cells sum to {summed / per:.9g} "
                f"(tolerance {allowed / per:.2g})")
    return None


# --------------------------------------------------------------------------- the recomputation


def _recompute(ctx: dict, plan: dict, weights: np.ndarray) -> dict:
    """The shards' and test shards' tasks, computed where the run kept them."""
    futures = ctx["shards"].futures
    train_count = len(plan["sizes"])
    jobs = _training_jobs(ctx, plan, weights)
    tasks = [dask.delayed(training_shard, pure=False)(futures[s], job)
             for s, job in enumerate(jobs)]
    tasks += [dask.delayed(test_shard, pure=False)(futures[train_count + s], job)
              for s, job in enumerate(_test_jobs(ctx, plan, weights))]
    done = dask.compute(*tasks)
    return {"train": done[:train_count], "test": done[train_count:]}


def _common(ctx: dict, plan: dict) -> dict:
    return {"library": ctx["library"], "dtype": ctx["dtype"], "cell": plan["cell"],
            "probes": plan["probes"], "classes": ctx["classes"]}


def _batch_of(ctx: dict, plan: dict, t: int, s: int):
    if ctx["batch"] is None:
        return None
    return batch_rows_drawn(ctx["seed"], t, s, plan["sizes"][s], plan["read"][s])


def _training_jobs(ctx: dict, plan: dict, weights: np.ndarray) -> list[dict]:
    steps, source = ctx["steps"], ctx["input"]
    data = _data_cells(ctx, plan)
    firsts = np.cumsum((0, *plan["sizes"]))
    jobs = []
    for s in range(len(plan["sizes"])):
        whole = [(None, weights[steps:], 0)]  # the final weights, on all rows
        sampled = []
        for t, g in plan["sampled"]:
            shard, c = _shard_of(plan["step_cells"], g)
            if shard == s:
                sampled.append((t, c, _batch_of(ctx, plan, t, s)))
        # each step's weights once, however many of its cells are sampled on this shard
        job = {**_common(ctx, plan), "whole": whole, "sampled": sampled,
               "weights": {t: weights[t] for t, _, _ in sampled}}
        if source is None:
            job["redraw"] = (ctx["seed"], TRAIN, s)
        else:
            job["reread"] = {"source": _source(ctx), "seed": ctx["seed"],
                             "first": int(firsts[s]), "count": plan["sizes"][s],
                             "cells": data["train"][s]}
        jobs.append(job)
    return jobs


def _test_jobs(ctx: dict, plan: dict, weights: np.ndarray) -> list[dict]:
    data = _data_cells(ctx, plan)
    jobs = []
    rows = (None if ctx["input"] is None else
            input_test_rows(_source(ctx), ctx["seed"],
                            [int(f) for f in np.cumsum((0, *plan["sizes"][:-1]))],
                            ctx["samples"]))
    for s in range(len(ctx["test_sizes"])):
        job = {**_common(ctx, plan), "whole": [(None, weights[-1:], 0)]}
        if ctx["input"] is None:
            job["teacher"] = (ctx["seed"], ctx["features"], ctx["classes"])
            job["redraw"] = (ctx["seed"], TEST, s)
        else:
            job["reread"] = {"source": _source(ctx), "file_rows": rows[s],
                             "cells": data["test"][s]}
        jobs.append(job)
    return jobs


def _source(ctx: dict) -> dict:
    return {**ctx["input"], "held_out": input_held_out(ctx["input"]["rows"],
                                                       ctx.get("validation_fraction"))}


def _data_cells(ctx: dict, plan: dict) -> dict:
    """An input's cells read again: a seeded sample of all training and test cells."""
    train, test = plan["final_cells"], plan["test_cells"]
    population = sum(train) + sum(test)
    drawn = spot_checks.sample_size(population) if ctx["input"] is not None else 0
    picked = spot_checks.seeded_sample(population, drawn, ctx["seed"] + 1) if drawn else []
    out = {"train": [[] for _ in train], "test": [[] for _ in test], "drawn": drawn,
           "population": population}
    for g in (int(i) for i in picked):
        if g < sum(train):
            s, c = _shard_of(train, g)
            out["train"][s].append(c)
        else:
            s, c = _shard_of(test, g - sum(train))
            out["test"][s].append(c)
    return out


# --------------------------------------------------------------------------- the comparisons


def _check_final(ctx: dict, raw, plan: dict, done: dict) -> str | None:
    """Every cell of the final pass (all rows, the final weights), and its totals."""
    got = {k: np.concatenate([d["whole"][0][k][0] for d in done["train"]])
           for k in ("loss", "loss_tol", "right", "close")}
    steps = ctx["steps"]
    return (_cells_agree(raw["cells"][steps], got, plan["final_cells"], f"step {steps}")
            or _total_agrees(ctx, raw, plan, steps, got))


def _cells_agree(reported: dict, got: dict, cells: list[int], what: str) -> str | None:
    """Each cell's loss, right answers (and probes) as recomputed, within its allowances."""
    for name, key, allowance in (("loss", "loss", "loss_tol"), ("right answers", "right",
                                                                 "close")):
        excess = np.abs(np.asarray(reported[key]) - got[key]) - got[allowance]
        if np.any(excess > 0):
            g = int(np.argmax(excess))
            s, c = _shard_of(cells, g)
            return (f"{what}, shard {s} cell {c}: {name} {float(reported[key][g]):.9g} "
                    f"reported, {float(got[key][g]):.9g} recomputed (tolerance "
                    f"{float(got[allowance][g]):.2g})")
    if "probe" in got:
        excess = np.abs(np.asarray(reported["probe"]) - got["probe"]) - got["probe_tol"]
        if np.any(excess > 0):
            g, m = np.unravel_index(int(np.argmax(excess)), excess.shape)
            s, c = _shard_of(cells, int(g))
            return (f"{what}, shard {s} cell {c}: its gradient along probe {m} is "
                    f"{reported['probe'][g, m]:.9g} in the run, {got['probe'][g, m]:.9g} "
                    f"recomputed (tolerance {got['probe_tol'][g, m]:.2g})")
    return None


def _total_agrees(ctx: dict, raw, plan: dict, t: int, got: dict) -> str | None:
    steps, n = ctx["steps"], ctx["samples"]
    cells = _step_cells(plan, t, steps)
    loss = float(_scaled(plan, cells, got["loss"], t, steps).sum()) / n
    allowed = float(_scaled(plan, cells, got["loss_tol"], t, steps).sum()) / n
    reported = float(raw["losses"][t])
    if not abs(reported - loss) <= allowed:
        return (f"loss at step {t}: {reported:.9g} reported, {loss:.9g} recomputed for its "
                f"weights (tolerance {allowed:.2g})")
    read = int(raw["rows"][t])
    if not abs(int(raw["right"][t]) - got["right"].sum()) <= got["close"].sum():
        return (f"train accuracy at step {t}: {int(raw['right'][t]) / read:.6f} reported, "
                f"{got['right'].sum() / read:.6f} recounted ({int(got['close'].sum())} rows "
                "too close to call)")
    return None


def _norm_sums(done: dict) -> dict:
    """Sums over all training rows: norms, ``sqrt(|x|^2 + 1)``, ``|x|^2``."""
    final = [d["whole"][0] for d in done["train"]]
    return {k: sum(f[k] for f in final) for k in ("norms", "lifted", "squares", "rows")}


def _check_steps(ctx: dict, raw, plan: dict, done: dict) -> str | None:
    """Every step moved the weights by its cells' gradients, along every probe."""
    if ctx.get("hidden") is not None:
        return _check_hidden_steps(ctx, raw, plan, done)
    steps, n, rate = ctx["steps"], ctx["samples"], ctx["learning_rate"]
    weights = np.asarray(raw["weights"], dtype=np.float64)
    r, s = plan["probes"]
    u = unit(ctx["dtype"])
    lifted = _norm_sums(done)["lifted"] * float(plan["scale"].max())
    for t in range(steps):
        moved = (weights[t] - weights[t + 1]) * (n / rate)  # the gradient the weights say
        along = np.einsum("mj,jk,mk->m", r, moved, s)
        size = np.abs(r) @ np.abs(weights[t + 1]) * np.abs(s)
        allowed = ((n / rate) * (u + 4 * EPS64) * size.sum(axis=1)
                   + (ctx["features"] + ctx["classes"] + 8) * EPS64
                   * (np.abs(r) @ np.abs(moved) * np.abs(s)).sum(axis=1))
        cells = plan["step_cells"]
        # the run's float64 sums of the cells' float32 products, and of these probes
        allowed += ((sum(cells) + ctx["features"] + ctx["classes"] + 8) * EPS64 * 4
                    * np.abs(s).max(axis=1) * np.sqrt((r ** 2).sum(axis=1)) * lifted)
        summed = _scaled(plan, cells, np.asarray(raw["cells"][t]["probe"]), t,
                         steps).sum(axis=0)
        excess = np.abs(along - summed) - allowed
        if np.any(excess > 0):
            m = int(np.argmax(excess))
            return (f"step {t + 1}: the weights moved by {along[m]:.9g} along probe {m} "
                    f"(times samples / rate); the gradient summed from the run's cells gives "
                    f"{summed[m]:.9g} (tolerance {allowed[m]:.2g})")
    return None


def _check_hidden_steps(ctx: dict, raw, plan: dict, done: dict) -> str | None:
    """:func:`_check_steps` of a hidden-layer model: probes ``r . g`` of flat gradients."""
    steps, n, rate = ctx["steps"], ctx["samples"], ctx["learning_rate"]
    weights = np.asarray(raw["weights"], dtype=np.float64)
    r, _ = plan["probes"]
    reach = np.abs(r)
    u, parameters = unit(ctx["dtype"]), weights.shape[1]
    top = float(plan["scale"].max())
    l1 = sum(d["whole"][0]["l1"] for d in done["train"])
    cells = plan["step_cells"]
    for t in range(steps):
        moved = (weights[t] - weights[t + 1]) * (n / rate)
        along = r @ moved
        # the weights' rounding to the dtype; this check's float64 products
        allowed = ((n / rate) * (u + 4 * EPS64) * (reach @ np.abs(weights[t + 1]))
                   + (parameters + 8) * EPS64 * (reach @ np.abs(moved)))
        # the run's float64 sums of its cells' gradients and of their probes
        size = check_hidden.gradient_l1_bound(weights[t], ctx["features"], ctx["classes"],
                                              l1, n) * top
        allowed += (sum(cells) + parameters + 8) * EPS64 * 4 * reach.max(axis=1) * size
        summed = _scaled(plan, cells, np.asarray(raw["cells"][t]["probe"]), t,
                         steps).sum(axis=0)
        excess = np.abs(along - summed) - allowed
        if np.any(excess > 0):
            m = int(np.argmax(excess))
            return (f"step {t + 1}: the weights moved by {along[m]:.9g} along probe {m} "
                    f"(times samples / rate); the gradient summed from the run's cells gives "
                    f"{summed[m]:.9g} (tolerance {allowed[m]:.2g})")
    return None


def _check_sampled(ctx: dict, raw, plan: dict, done: dict) -> str | None:
    """The seeded sample of the steps' cells, recomputed in float64."""
    for s, part in enumerate(done["train"]):
        for t, c, got in part["sampled"]:
            g = int(sum(plan["step_cells"][:s])) + c
            cert = raw["cells"][t]
            checks = (("loss", float(cert["loss"][g]), got["loss"],
                       got["loss_tol"] + 8 * EPS64 * abs(got["loss"])),
                      ("right answers", float(cert["right"][g]), got["right"], got["close"]))
            for name, mine, theirs, allowed in checks:
                if not abs(mine - theirs) <= allowed:
                    return (f"step {t}, shard {s} cell {c}: {name} {mine:.9g} reported, "
                            f"{theirs:.9g} recomputed in float64 (tolerance {allowed:.2g})")
            excess = np.abs(np.asarray(cert["probe"][g]) - got["probe"]) - (
                got["probe_tol"] + 16 * EPS64 * np.abs(got["probe"]))
            if np.any(excess > 0):
                m = int(np.argmax(excess))
                return (f"step {t + 1}, shard {s} cell {c}: its gradient along probe {m} is "
                        f"{cert['probe'][g][m]:.9g} in the run, {got['probe'][m]:.9g} "
                        f"recomputed in float64 (tolerance {got['probe_tol'][m]:.2g})")
    return None


def _check_test(ctx: dict, raw, plan: dict, done: dict) -> str | None:
    """The test pass: every cell, the totals, and with a teacher its best accuracy."""
    got = {k: np.concatenate([d["whole"][0][k][0] for d in done["test"]])
           for k in ("loss", "loss_tol", "right", "close")}
    failure = _cells_agree(raw["test_cells"], got, plan["test_cells"], "test pass")
    if failure:
        return failure
    tested = sum(ctx["test_sizes"])
    hits = int(raw["test_right"])
    if not abs(hits - got["right"].sum()) <= got["close"].sum():
        return (f"test accuracy {hits / tested:.6f} reported, {got['right'].sum() / tested:.6f} "
                f"recounted for the final weights ({int(got['close'].sum())} rows too close "
                "to call)")
    loss = float(raw["test_loss"])
    if not abs(loss - got["loss"].sum()) <= got["loss_tol"].sum():
        return (f"test loss {loss / tested:.9g} reported, {got['loss'].sum() / tested:.9g} "
                "recomputed for the final weights")
    if ctx["input"] is not None:
        return None
    best = sum(d["best"] for d in done["test"])
    if not abs(float(raw["test_best"]) - best) <= BEST_RTOL * best + 1e-300:
        return (f"teacher's best accuracy {float(raw['test_best']) / tested:.9f} reported, "
                f"{best / tested:.9f} recomputed")
    taught = sum(d["teacher_right"] for d in done["test"])
    slack = accuracy_bounds(tested, 0.0, 0.0)[0]  # Bernstein's, as for the bounds
    if not abs(taught - best) <= slack:
        return (f"test labels: the teacher labels {taught / tested:.4f} of the test rows as "
                f"its best guess, {best / tested:.4f} expected (labels not drawn from the "
                "teacher)")
    return None


def _check_data(ctx: dict, raw, plan: dict, done: dict) -> str | None:
    for what, parts in (("shard", done["train"]), ("test shard", done["test"])):
        for s, part in enumerate(parts):
            if part["data"]["differ"] >= 0:
                source = "its seed" if ctx["input"] is None else "the input's files"
                return (f"{what} {s}: kept row {part['data']['differ']} differs from {source} "
                        "(the data the run trained on are not the data)")
    return None


# --------------------------------------------------------------------------- rules and words


def _rule_totals(ctx: dict, raw, plan: dict, done: dict) -> dict:
    """What the depth-independent rules read: test bounds, loss allowances, the curvature."""
    tested = sum(ctx["test_sizes"])
    out = {"test_rows": tested, "test": {"best": 0.0}, "floor": 0.0, "ceiling": math.inf}
    if ctx["input"] is None:
        best = sum(d["best"] for d in done["test"])
        common = float(sum(d["labels"] for d in done["test"]).max())
        out["floor"], out["ceiling"] = accuracy_bounds(tested, common, best)
        out["test"]["best"] = best
    if ctx.get("hidden") is not None:  # no never-rise rule: no curvature needed
        out["loss_tol"] = np.zeros(ctx["steps"] + 1)
        return out
    sums = _norm_sums(done)
    n, u = ctx["samples"], unit(ctx["dtype"])
    weights = np.asarray(raw["weights"], dtype=np.float64)
    column = np.sqrt((weights[:, :-1] ** 2).sum(axis=1)).max(axis=1)
    bias = np.abs(weights[:, -1]).max(axis=1)
    dot = LAMBDA * math.sqrt(ctx["features"] + 1) * u
    losses = np.asarray(raw["losses"], dtype=np.float64) * n
    out["loss_tol"] = (2 * dot * (column * sums["norms"] + n * bias)
                       + (ctx["classes"] + 4) * u * (n + losses)
                       + LAMBDA * math.sqrt(n) * EPS64 * losses)
    out["gram"] = np.array([sums["squares"] + sums["rows"]])  # the trace of A^T A
    return out


def _words(ctx: dict, raw, plan: dict, done: dict, totals: dict) -> str:
    steps, tested = ctx["steps"], totals["test_rows"]
    earlier = (spot_checks.detection(plan["drawn"], plan["population"],
                                     "cell passes of the steps")
               if plan["population"] else "no steps")
    words = [f"the final weights recomputed on all {ctx['samples']} rows kept on the workers "
             "agree, cell by cell",
             f"all {steps} steps" + ("" if ctx["batch"] is None else
                                    f" (on mini-batches of {sum(plan['read'])} rows)")
             + f" moved the weights as their cells' gradients sum (along {PROBES} random "
             f"probes), and {steps + 1} losses and accuracies are their cells' sums",
             f"{earlier}, in float64"]
    if ctx["input"] is not None:
        words.append(f"test accuracy {raw['test_right'] / tested:.4f} on {tested} held-out "
                     "rows recomputed (no teacher: no bound on it)")
    else:
        floor = (f"{totals['floor'] / tested:.4f}" if floor_applies(ctx)
                 else "- (not required with mini-batches, a hidden layer or under "
                      f"{ROWS_PER_FEATURE} rows per feature)")
        words.append(f"test accuracy {raw['test_right'] / tested:.4f} recomputed, within "
                     f"[{floor}, {totals['ceiling'] / tested:.4f}] (most common class, "
                     "teacher's best recomputed)")
    why = why_it_may_rise(ctx)
    if ctx["batch"] is None and ctx.get("hidden") is None:
        why = "no learning rate provably safe" + (" from the trace of A^T A"
                                                  if ctx["input"] is not None else "")
    words.append("the loss never rose (a safe learning rate)" if descent_applies(ctx, totals)
                 else f"the loss may rise ({why})")
    words.append(_data_words(ctx, plan, done))
    return "; ".join(words)


def _data_words(ctx: dict, plan: dict, done: dict) -> str:
    compared = sum(d["data"]["compared"] for d in (*done["train"], *done["test"]))
    if ctx["input"] is not None:
        data = _data_cells(ctx, plan)
        return (f"{spot_checks.detection(data['drawn'], data['population'], 'cells')} read "
                f"again from the input's files ({compared} rows) and equal to the rows kept")
    if compared == 0:
        return "the kept rows taken as drawn (their generator cannot be drawn again here)"
    return (f"the first {compared} kept rows of the shards drawn again from their seeds and "
            "equal")

