"""Independent verification of train-pipeline's result (:func:`verify`) and its mutations.

What the check establishes, on data it draws again on the workers from the documented
per-shard seeds, its own way, with every value in float64:

- the weights start at zero, and a seeded sample of steps (the first and the last among them)
  is ``w[t+1] = w[t] - rate * gradient(w[t]) / samples``, the gradient over all training rows;
- every reported loss and accuracy (train at each step's weights, test at the final ones) is
  that of the reported weights; the teacher's best accuracy is recomputed;
- the test accuracy lies between the most common class's share (where there are enough rows to
  learn from) and the teacher's best accuracy, each widened by a deviation a correct run
  exceeds with probability below 1e-9;
- where the learning rate is provably safe for the data, the loss never increases.

Rounding bounds follow Higham and Mary's probabilistic analysis (SIAM J. Sci. Comput., 2019):
a sum of ``n`` products computed in precision ``u`` errs by at most ``LAMBDA * sqrt(n) * u``
times the sum of the products' magnitudes, but with probability ``2 n exp(-LAMBDA^2 / 2)``.

It shares no code with the run (:mod:`pipelines.train_pipeline`, :mod:`pipelines.train_steps`,
:mod:`daskgpu.data_parallel`): it takes from :mod:`pipelines.train_data` only the scheme's
constants. ``MUTATIONS`` are the wrong results it must reject.
"""

from __future__ import annotations

import importlib
import math

import dask
import numpy as np

from daskgpu.backends import to_host
from daskgpu.registry import Mutation, Verification, Workload
from pipelines.train_data import TEACHER, TEACHER_SHARPNESS, TEST, TRAIN

LAMBDA = 9.0
FALSE_ALARM = 1e-9  # chance that a correct run falls outside a statistical bound (each)
SAMPLED_STEPS = 4  # steps whose update is recomputed: the first, the last, seeded others
SLAB = 16_384  # rows recomputed at once in float64
BEST_RTOL = 1e-9  # the teacher's best accuracy: float64 sums of probabilities in two orders
ROWS_PER_FEATURE = 10  # fewer training rows per feature: a model may rightly learn nothing


def verify(workload: Workload, raw) -> Verification:
    """Check the weights, losses and accuracies of a training run against a float64 replay.

    See the module's docstring for what is established.
    """
    ctx = workload.context
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
    floor = (f"{totals['floor'] / tested:.4f}" if _learnable(ctx)
             else f"- (not required with under {ROWS_PER_FEATURE} rows per feature)")
    return Verification(True, (
        f"{len(steps)} of {ctx['steps']} steps recomputed in float64 on all "
        f"{ctx['samples']} rows agree; {ctx['steps'] + 1} losses and accuracies agree; test "
        f"accuracy {raw['test_right'] / tested:.4f} within [{floor}, "
        f"{totals['ceiling'] / tested:.4f}] (most common class, teacher's best)"))


# --------------------------------------------------------------------------- the replay


def _generator(library: str, seed: int, part: int, index: int):
    words = np.random.SeedSequence(seed, spawn_key=(part, index))
    if library == "numpy":
        return np.random.default_rng(words)
    xp = importlib.import_module(library)
    return xp.random.default_rng(int(words.generate_state(1, np.uint64)[0]))


def _teacher(seed: int, features: int, classes: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(TEACHER,)))
    return rng.standard_normal((features + 1, classes)) * (TEACHER_SHARPNESS
                                                            / math.sqrt(features + 1))


def shard_totals(seed: int, part: int, index: int, rows: int, dtype: str, library: str,
                 weights: np.ndarray, steps: list[int]) -> dict:
    """Redraw one shard and total, in float64, what the checks compare (runs on a worker).

    ``weights`` are the run's reported weights at every step; ``steps`` those whose gradient
    is summed. Returns host arrays: per weights, the loss sum, its rounding allowance, the
    right answers and the rows too close to call; per sampled step, the gradient sum and its
    rounding allowance; the teacher's best sum, and the count of each label.
    """
    xp = importlib.import_module(library)
    count, features1, classes = weights.shape
    rng = _generator(library, seed, part, index)
    x_all = rng.standard_normal((rows, features1 - 1), dtype=dtype)
    u_all = rng.random((rows, classes), dtype=np.float64)
    teacher = xp.asarray(_teacher(seed, features1 - 1, classes))
    w = xp.asarray(weights, dtype=np.float64)
    flat = xp.moveaxis(w, 0, 1).reshape(features1, count * classes)  # every step's weights
    unit = _unit(dtype)
    dot = LAMBDA * math.sqrt(features1) * unit  # one logit's relative rounding
    over_rows = LAMBDA * math.sqrt(rows) * unit  # one gradient entry's, summed over the rows
    adding = LAMBDA * math.sqrt(rows) * float(np.finfo(np.float64).eps)  # float64 sums of rows
    # per weights: the largest column norm and bias, bounding every logit's rounding
    column = xp.sqrt((w[:, :-1] ** 2).sum(axis=1)).max(axis=1)
    bias = xp.abs(w[:, -1]).max(axis=1)
    out = {name: xp.zeros(count) for name in ("loss", "loss_tol", "right", "close")}
    out["gradient"] = xp.zeros((len(steps), features1, classes))
    out["gradient_tol"] = xp.zeros((len(steps), features1, classes))
    out["best"] = 0.0
    out["labels"] = xp.zeros(classes)
    for start in range(0, rows, SLAB):
        x = x_all[start:start + SLAB].astype(np.float64)
        n = x.shape[0]
        gumbel = -xp.log(-xp.log(u_all[start:start + SLAB]))
        truth = x @ teacher[:-1] + teacher[-1]
        y = xp.argmax(truth + gumbel, axis=1)
        out["labels"] += xp.bincount(y, minlength=classes)
        peak = truth.max(axis=1, keepdims=True)
        out["best"] += float((1.0 / xp.exp(truth - peak).sum(axis=1)).sum())
        z = (x @ flat[:-1] + flat[-1]).reshape(n, count, classes)
        top = z.max(axis=2, keepdims=True)
        shifted = z - top
        logsum = xp.log(xp.exp(shifted).sum(axis=2))
        mine = xp.take_along_axis(shifted, y[:, None, None], axis=2)[..., 0]
        losses = logsum - mine
        norms = xp.sqrt((x ** 2).sum(axis=1))
        err = dot * (norms[:, None] * column[None, :] + bias[None, :])  # |logit error| bound
        ordered = xp.sort(z, axis=2)
        gap = ordered[..., -1] - ordered[..., -2] if classes > 1 else xp.full_like(err, xp.inf)
        out["loss"] += losses.sum(axis=0)
        # each row's loss from rounded logits, and the float64 sum over the rows
        out["loss_tol"] += (2 * err + (classes + 4) * unit * (1 + losses)
                            + adding * losses).sum(axis=0)
        out["right"] += (xp.argmax(z, axis=2) == y[:, None]).sum(axis=0)
        out["close"] += (gap <= 2 * err + 1e-12 * (1 + xp.abs(ordered[..., -1]))).sum(axis=0)
        for i, t in enumerate(steps):
            p = xp.exp(shifted[:, t] - logsum[:, t, None])
            g = p.copy()
            g[xp.arange(n), y] -= 1
            out["gradient"][i, :-1] += x.T @ g
            out["gradient"][i, -1] += g.sum(axis=0)
            spread = over_rows * xp.abs(g) + p * (2 * err[:, t, None] + (classes + 3) * unit)
            out["gradient_tol"][i, :-1] += xp.abs(x).T @ spread
            out["gradient_tol"][i, -1] += spread.sum(axis=0)
    return {k: (v if isinstance(v, float) else to_host(v)) for k, v in out.items()}


def _unit(dtype: str) -> float:
    """The run's unit roundoff plus this replay's own (float64)."""
    return float(np.finfo(dtype).eps + np.finfo(np.float64).eps) / 2


def _recompute(ctx: dict, weights: np.ndarray, steps: list[int]) -> dict:
    """Totals of :func:`shard_totals` over the training shards and over the test shards."""
    last = np.asarray(weights[-1:])
    tasks = [dask.delayed(shard_totals, pure=True)(
        ctx["seed"], TRAIN, i, rows, ctx["dtype"], ctx["library"], weights, steps)
        for i, rows in enumerate(ctx["train_sizes"])]
    tasks += [dask.delayed(shard_totals, pure=True)(
        ctx["seed"], TEST, i, rows, ctx["dtype"], ctx["library"], last, [])
        for i, rows in enumerate(ctx["test_sizes"])]
    done = dask.compute(*tasks)
    train, test = done[:len(ctx["train_sizes"])], done[len(ctx["train_sizes"]):]
    totals = {key: sum(part[key] for part in train) for key in train[0]}
    totals["test"] = {key: sum(part[key] for part in test) for key in test[0]}
    tested = sum(ctx["test_sizes"])
    totals["test_rows"] = tested
    log_alarm = math.log(2 / FALSE_ALARM)
    # Bernstein's inequality for a sum of ``tested`` indicators (variance at most 1/4 each)
    slack = math.sqrt(2 * tested / 4 * log_alarm) + log_alarm / 3
    common = float(totals["test"]["labels"].max())
    totals["floor"] = common + slack
    totals["ceiling"] = totals["test"]["best"] + slack
    return totals


# --------------------------------------------------------------------------- the checks


def _check_structure(ctx: dict, raw) -> str | None:
    keys = ("weights", "losses", "right", "test_right", "test_best")
    if not isinstance(raw, dict) or any(k not in raw for k in keys):
        return f"result carries no weights, losses and accuracies to check: {type(raw)}"
    shape = (ctx["steps"] + 1, ctx["features"] + 1, ctx["classes"])
    weights = np.asarray(raw["weights"])
    if weights.shape != shape:
        return f"weights of shape {weights.shape}; {shape} expected (every step's and the last)"
    if len(raw["losses"]) != shape[0] or len(raw["right"]) != shape[0]:
        return f"{len(raw['losses'])} losses, {len(raw['right'])} accuracies for {shape[0]} steps"
    if np.any(weights[0] != 0):
        return "weights before the first step are not zero"
    if not np.all(np.isfinite(weights)):
        return "weights hold NaN or infinite values (the training diverged)"
    return None


def _check_steps(ctx: dict, raw, totals: dict, steps: list[int]) -> str | None:
    weights = np.asarray(raw["weights"], dtype=np.float64)
    rate, n = ctx["learning_rate"], ctx["samples"]
    unit = _unit(ctx["dtype"])
    for i, t in enumerate(steps):
        expected = weights[t] - rate * totals["gradient"][i] / n
        allowed = rate * totals["gradient_tol"][i] / n + 2 * unit * np.abs(expected) + 1e-300
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
    n = ctx["samples"]
    for t, hits in enumerate(raw["right"]):
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
    if not abs(best - test["best"]) <= BEST_RTOL * test["best"]:
        return (f"teacher's best accuracy {best / tested:.9f} reported, "
                f"{test['best'] / tested:.9f} recomputed")
    return None


def _check_bounds(ctx: dict, raw, totals: dict, steps: list[int]) -> str | None:
    tested, hits = totals["test_rows"], int(raw["test_right"])
    if hits > totals["ceiling"]:
        return (f"test accuracy {hits / tested:.4f} above the teacher's best accuracy "
                f"{totals['test']['best'] / tested:.4f} by more than chance allows "
                f"(limit {totals['ceiling'] / tested:.4f})")
    if hits < totals["floor"] and _learnable(ctx):
        return (f"test accuracy {hits / tested:.4f} no better than always answering the most "
                f"common class (limit {totals['floor'] / tested:.4f}): nothing was learned")
    return None


def _learnable(ctx: dict) -> bool:
    """Enough rows that a correct run must beat the most common class on the test rows."""
    return ctx["samples"] >= ROWS_PER_FEATURE * (ctx["features"] + 1)


def safe_rate(samples: int, features: int) -> float:
    """A learning rate under which full-batch descent provably never raises the loss.

    The loss's gradient is Lipschitz with constant ``L <= lambda_max(A^T A / n) / 2`` (the
    softmax's Hessian has norm at most 1/2), ``A`` the features with a column of ones; with
    standard normal features, ``lambda_max <= (1 + sqrt(d/n) + sqrt(2 ln(1/delta)/n))^2 + 1``
    but with probability ``delta`` (Davidson and Szarek). A step ``eta <= 2 / L`` never
    raises the loss.
    """
    edge = (1 + math.sqrt(features / samples)
            + math.sqrt(2 * math.log(1 / FALSE_ALARM) / samples)) ** 2 + 1
    return 4 / edge


def _check_descent(ctx: dict, raw, totals: dict, steps: list[int]) -> str | None:
    if ctx["learning_rate"] > safe_rate(ctx["samples"], ctx["features"]):
        return None
    losses = np.asarray(raw["losses"], dtype=np.float64)
    allowed = totals["loss_tol"] / ctx["samples"]
    for t in range(1, len(losses)):
        if losses[t] > losses[t - 1] + allowed[t] + allowed[t - 1]:
            return (f"loss rose from {losses[t - 1]:.9g} to {losses[t]:.9g} at step {t} with "
                    f"a safe learning rate {ctx['learning_rate']:g}")
    return None


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
    weights[-1, 0, 0] += 1e-3 * max(1.0, float(np.abs(weights[-1]).max()))
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


MUTATIONS = (
    Mutation("one final weight perturbed", _perturbed_weight, "weights"),
    Mutation("last step with twice the learning rate", _doubled_last_rate, "weights"),
    Mutation("a step's loss altered by 1 %", _altered_loss, "loss"),
    Mutation("train accuracy inflated by 1 %", _inflated_train_accuracy, "train accuracy"),
    Mutation("test accuracy inflated by 2 %",
             lambda raw: {**raw, "test_right": raw["test_right"]
                          + max(1, raw["test_right"] // 50)}, "test accuracy"),
    Mutation("teacher's best accuracy altered",
             lambda raw: {**raw, "test_best": raw["test_best"] * 1.001}, "best accuracy"),
)
