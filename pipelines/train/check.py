"""Independent verification of train-pipeline's result (:func:`verify`) and its mutations.

At ``depth="fast"`` (the default of a run) :mod:`pipelines.train.check_fast` checks the cell
sums the run reports on the rows it kept. What the full check establishes, on data it draws
or reads again on the workers its own way
(:mod:`pipelines.train.check_replay`), with every value in float64:

- the weights start at zero, and a seeded sample of steps (the first and the last among them)
  is ``w[t+1] = w[t] - rate * gradient(w[t]) / samples``: the gradient over all training
  rows, or with ``--batch-size`` over the step's mini-batch rows, drawn again from the
  documented seeds, each shard's sum scaled by its rows over its batch rows;
- every reported loss and accuracy (train at each step's weights, on the rows that step read;
  test at the final ones) is that of the reported weights, and so are the counts of rows;
  the teacher's best accuracy is recomputed;
- on teacher data, the test accuracy is at most the teacher's best accuracy and, in full-batch
  training with enough rows, above the most common class's share, each widened by a
  deviation a correct run exceeds with probability below 1e-9 (an input has no teacher: no
  such bound);
- in full-batch training where the learning rate is provably safe for the data, the loss
  never increases (a mini-batch step may rightly raise it).

It shares no code with the run (:mod:`pipelines.train.pipeline`, :mod:`pipelines.train.tasks`,
:mod:`pipelines.train.inputs`, :mod:`daskgpu.toolkit.data_parallel`): it takes from
:mod:`pipelines.train.shared` only the scheme's constants and geometry. ``MUTATIONS`` are the
wrong results it must reject.
"""

from __future__ import annotations

import dask
import numpy as np

from daskgpu.toolkit import data_parallel
from daskgpu.toolkit.registry import Mutation, Verification, Workload
from pipelines.train import check_fast
from pipelines.train.check_replay import SLAB, held_out, shard_totals, unit
from pipelines.train.check_rules import (  # noqa: F401 (input_safe_rate, safe_rate: rules)
    BEST_RTOL,
    ROWS_PER_FEATURE,
    accuracy_bounds,
    input_safe_rate,
    safe_rate,
)
from pipelines.train.check_rules import check_bounds as _check_bounds
from pipelines.train.check_rules import check_descent as _check_descent
from pipelines.train.check_rules import check_structure as _check_structure
from pipelines.train.check_rules import descent_applies as _descent_applies
from pipelines.train.check_rules import floor_applies as _floor_applies
from pipelines.train.check_rules import why_it_may_rise as _why_it_may_rise
from pipelines.train.shared import TEST, TRAIN, cell_rows, input_held_out

SAMPLED_STEPS = 4  # steps whose update is recomputed: the first, the last, seeded others


def verify(workload: Workload, raw, depth: str = "full") -> Verification:
    """Check the weights, losses and accuracies of a training run.

    ``depth="full"``: against a float64 replay on data drawn or read again (see the module's
    docstring); ``"fast"``: the run's cell sums checked on the rows it kept
    (:mod:`pipelines.train.check_fast`). A presented run's shards are let go once the check
    no longer needs them (the full check, before it draws its own).
    """
    return data_parallel.check_kept_shards(workload.context, check_fast.verify_fast,
                                           _verify_full, raw, depth)


def _verify_full(ctx: dict, raw) -> Verification:
    failure = _check_structure(ctx, raw)
    if failure:
        return Verification(False, failure)
    steps = _sampled_steps(ctx)
    totals = _recompute(ctx, raw["weights"], steps)
    for check in _CHECKS:
        failure = check(ctx, raw, totals, steps)
        if failure:
            return Verification(False, failure)
    tested = totals["test_rows"]
    rows = (f"all {ctx['samples']} rows" if ctx["batch"] is None
            else f"their mini-batches of {int(totals['rows'][0])} rows")
    if ctx["input"] is not None:
        bounds = (f"test accuracy {raw['test_right'] / tested:.4f} on {tested} held-out rows "
                  "(no teacher: no bound on it)")
    else:
        floor = (f"{totals['floor'] / tested:.4f}" if _floor_applies(ctx)
                 else "- (not required with mini-batches, a hidden layer or under "
                      f"{ROWS_PER_FEATURE} rows per feature)")
        bounds = (f"test accuracy {raw['test_right'] / tested:.4f} within [{floor}, "
                  f"{totals['ceiling'] / tested:.4f}] (most common class, teacher's best)")
    descent = ("the loss never rose (a safe learning rate)" if _descent_applies(ctx, totals)
               else f"the loss may rise ({_why_it_may_rise(ctx)})")
    return Verification(True, (
        f"{len(steps)} of {ctx['steps']} steps recomputed in float64 on {rows} agree; "
        f"{ctx['steps'] + 1} losses and accuracies agree; {descent}; {bounds}"))


# --------------------------------------------------------------------------- the replay


def _recompute(ctx: dict, weights: np.ndarray, steps: list[int]) -> dict:
    """Totals of :func:`shard_totals` over the training shards and over the test rows."""
    last = np.asarray(weights[-1:])
    dtype, library, seed = ctx["dtype"], ctx["library"], ctx["seed"]
    source = ctx["input"]
    if source is not None:
        source = {**source, "held_out": input_held_out(source["rows"],
                                                        ctx.get("validation_fraction"))}
    model = {"features": ctx["features"], "classes": ctx["classes"],
             "cell": cell_rows(ctx["features"], np.dtype(dtype).itemsize, library)}
    train_specs, firsts = [], np.cumsum((0, *ctx["train_sizes"]))
    for i, rows in enumerate(ctx["train_sizes"]):
        train_specs.append({**model, "seed": seed, "part": TRAIN, "index": i, "rows": rows}
                           if source is None else
                           {**model, "source": source, "seed": seed, "first": int(firsts[i]),
                            "count": rows, "gram": _gram_kind(ctx)})
    if source is None:
        test_specs = [{**model, "seed": seed, "part": TEST, "index": i, "rows": rows}
                      for i, rows in enumerate(ctx["test_sizes"])]
    else:  # the held-out rows, drawn again, in slabs of this check's own
        test = held_out(seed, source["rows"], source["held_out"])
        test_specs = [{**model, "source": source, "rows": test[i:i + SLAB]}
                      for i in range(0, len(test), SLAB)]
    batches = [None if ctx["batch"] is None else
               {"seed": seed, "size": ctx["batch"], "samples": ctx["samples"], "index": i}
               for i in range(len(train_specs))]
    tasks = [dask.delayed(shard_totals, pure=True)(spec, weights, steps, batch, dtype, library)
             for spec, batch in zip(train_specs, batches, strict=True)]
    tasks += [dask.delayed(shard_totals, pure=True)(spec, last, [], None, dtype, library)
              for spec in test_specs]
    done = dask.compute(*tasks)
    train, test_done = done[:len(train_specs)], done[len(train_specs):]
    totals = {key: sum(part[key] for part in train) for key in train[0]}
    totals["test"] = {key: sum(part[key] for part in test_done) for key in test_done[0]}
    tested = int(totals["test"]["rows"][0])
    totals["test_rows"] = tested
    totals["floor"], totals["ceiling"] = accuracy_bounds(
        tested, float(totals["test"]["labels"].max()), totals["test"]["best"])
    return totals


# --------------------------------------------------------------------------- the checks


def _check_steps(ctx: dict, raw, totals: dict, steps: list[int]) -> str | None:
    weights = np.asarray(raw["weights"], dtype=np.float64)
    rate, n = ctx["learning_rate"], ctx["samples"]
    u = unit(ctx["dtype"])
    for i, t in enumerate(steps):
        expected = weights[t] - rate * totals["gradient"][i] / n
        allowed = rate * totals["gradient_tol"][i] / n + 2 * u * np.abs(expected) + 1e-300
        excess = np.abs(weights[t + 1] - expected) / allowed
        worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
        if not excess[worst] <= 1:
            return (f"step {t + 1}: weights{list(map(int, worst))} = "
                    f"{weights[t + 1][worst]:.9g}, gradient descent on all rows gives "
                    f"{expected[worst]:.9g} (tolerance {allowed[worst]:.2g})")
    return None


def _check_losses(ctx: dict, raw, totals: dict, steps: list[int]) -> str | None:
    n = ctx["samples"]
    reported = np.asarray(raw["losses"], dtype=np.float64)
    expected = totals["loss"] / n
    allowed = totals["loss_tol"] / n
    for t in range(len(reported)):
        if not abs(reported[t] - expected[t]) <= allowed[t]:
            return (f"loss at step {t}: {reported[t]:.9g} reported, {expected[t]:.9g} "
                    f"recomputed for its weights (tolerance {allowed[t]:.2g})")
    return None


def _check_accuracies(ctx: dict, raw, totals: dict, steps: list[int]) -> str | None:
    for t, (hits, read) in enumerate(zip(raw["right"], raw["rows"], strict=True)):
        n = totals["rows"][t]
        if int(read) != n:
            return f"rows read at step {t}: {int(read)} reported, {int(n)} expected"
        if not abs(int(hits) - totals["right"][t]) <= totals["close"][t]:
            return (f"train accuracy at step {t}: {int(hits) / n:.6f} reported, "
                    f"{totals['right'][t] / n:.6f} recounted ({int(totals['close'][t])} rows "
                    "too close to call)")
    return None


def _check_test(ctx: dict, raw, totals: dict, steps: list[int]) -> str | None:
    test, tested = totals["test"], totals["test_rows"]
    hits = int(raw["test_right"])
    if not abs(hits - test["right"][0]) <= test["close"][0]:
        return (f"test accuracy {hits / tested:.6f} reported, {test['right'][0] / tested:.6f} "
                f"recounted for the final weights ({int(test['close'][0])} rows too close "
                "to call)")
    best = float(raw["test_best"])
    if not abs(best - test["best"]) <= BEST_RTOL * test["best"] + 1e-300:
        return (f"teacher's best accuracy {best / tested:.9f} reported, "
                f"{test['best'] / tested:.9f} recomputed")
    return None


def _gram_kind(ctx: dict) -> str | None:
    """What bounds an input's curvature: its Gram matrix, or the matrix's trace.

    The whole matrix where that costs at most about twice what the replay does (``A^T A``
    against the logits of every step); else its trace, never below the largest eigenvalue.
    """
    if ctx["batch"] is not None or ctx.get("hidden") is not None:
        return None
    return ("full" if ctx["features"] + 1 <= 4 * (ctx["steps"] + 1) * ctx["classes"]
            else "trace")


_CHECKS = (_check_steps, _check_losses, _check_accuracies, _check_test, _check_bounds,
           _check_descent)


def _sampled_steps(ctx: dict) -> list[int]:
    """Steps whose update is recomputed: the first, the last, seeded others."""
    steps = ctx["steps"]
    chosen = {0, steps - 1}
    others = list(range(1, steps - 1))
    extra = min(len(others), SAMPLED_STEPS - len(chosen))
    if extra > 0:
        picked = np.random.default_rng(ctx["seed"]).choice(others, size=extra, replace=False)
        chosen.update(int(t) for t in picked)
    return sorted(chosen)


# --------------------------------------------------------------------------- mutations


def _perturbed_weight(raw: dict) -> dict:
    weights = np.array(raw["weights"], copy=True)
    weights[-1].reshape(-1)[0] += 1e-3 * max(1.0, float(np.abs(weights[-1]).max()))
    return {**raw, "weights": weights}


def _doubled_last_rate(raw: dict) -> dict:
    weights = np.array(raw["weights"], copy=True)
    weights[-1] = weights[-2] - 2 * (weights[-2] - weights[-1])
    return {**raw, "weights": weights}


def _altered_loss(raw: dict) -> dict:
    losses = np.array(raw["losses"], copy=True)
    losses[len(losses) // 2] *= 1.01
    return {**raw, "losses": losses}


def _inflated_train_accuracy(raw: dict) -> dict:
    right = np.array(raw["right"], copy=True)
    right[-1] += max(1, right[-1] // 100)
    return {**raw, "right": right}


# What a failed check's detail names (a regular expression, see Mutation.names).
WEIGHTS_MOVED = (r"step \d+: (the weights moved by \S+ along probe|"
                 r"weights\[\d+(, \d+)?\] = )")
MUTATIONS = (
    Mutation("one final weight perturbed", _perturbed_weight, WEIGHTS_MOVED),
    Mutation("last step with twice the learning rate", _doubled_last_rate, WEIGHTS_MOVED),
    Mutation("a step's loss altered by 1 %", _altered_loss, r"loss at step \d+: \S+ reported"),
    Mutation("train accuracy inflated by 1 %", _inflated_train_accuracy,
             r"train accuracy at step \d+: \S+ reported"),
    Mutation("test accuracy inflated by 2 %",
             lambda raw: {**raw, "test_right": raw["test_right"]
                          + max(1, raw["test_right"] // 50)}, r"^test accuracy \S+ reported"),
    Mutation("teacher's best accuracy altered",
             lambda raw: {**raw, "test_best": raw["test_best"] * 1.001},
             r"teacher's best accuracy \S+ reported"),
)
