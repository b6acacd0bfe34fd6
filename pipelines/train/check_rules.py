"""Rules of train-pipeline's check that hold at every depth (:mod:`pipelines.train.check`).

The result's structure, the bounds a teacher puts on the test accuracy, and when and how far
the loss may rise: each takes what was recomputed (``totals``) and the run's context, so that
the full replay and the fast check (:mod:`pipelines.train.check_fast`) apply them alike.
"""

from __future__ import annotations

import math

import numpy as np

from pipelines.train.shared import INIT, parameter_count

FALSE_ALARM = 1e-9  # chance that a correct run falls outside a statistical bound (each)
BEST_RTOL = 1e-9  # the teacher's best accuracy: float64 sums of probabilities in two orders
ROWS_PER_FEATURE = 10  # fewer training rows per feature: a model may rightly learn nothing


def accuracy_bounds(tested: int, common: float, best: float) -> tuple[float, float]:
    """The least and most test rows right: ``(floor, ceiling)``.

    Above the most ``common`` class's count and below the teacher's expected ``best``, each
    widened by Bernstein's inequality for a sum of ``tested`` indicators (variance at most
    1/4 each), exceeded by a correct run with probability below :data:`FALSE_ALARM`.
    """
    log_alarm = math.log(2 / FALSE_ALARM)
    slack = math.sqrt(2 * tested / 4 * log_alarm) + log_alarm / 3
    return common + slack, best + slack


def check_structure(ctx: dict, raw) -> str | None:
    """What is wrong with the shape of a result (weights, losses, accuracies), or None."""
    keys = ("weights", "losses", "right", "test_right", "test_best")
    if not isinstance(raw, dict) or any(k not in raw for k in keys):
        return f"result carries no weights, losses and accuracies to check: {type(raw)}"
    hidden = ctx.get("hidden")
    shape = ((ctx["steps"] + 1, ctx["features"] + 1, ctx["classes"]) if hidden is None else
             (ctx["steps"] + 1, parameter_count(ctx["features"], hidden, ctx["classes"])))
    weights = np.asarray(raw["weights"])
    if weights.shape != shape:
        return f"weights of shape {weights.shape}; {shape} expected (every step's and the last)"
    if len(raw["losses"]) != shape[0] or len(raw["right"]) != shape[0]:
        return f"{len(raw['losses'])} losses, {len(raw['right'])} accuracies for {shape[0]} steps"
    if len(raw.get("rows", ())) != shape[0]:
        return f"{len(raw.get('rows', ()))} row counts for {shape[0]} steps"
    start, what = initial_weights(ctx)
    if not np.array_equal(weights[0], start):
        return f"weights before the first step are not {what}"
    if not np.all(np.isfinite(weights)):
        return "weights hold NaN or infinite values (the training diverged)"
    return None


def check_bounds(ctx: dict, raw, totals: dict, steps: list[int]) -> str | None:
    """The test accuracy within ``totals["floor"]`` and ``totals["ceiling"]`` (a teacher's)."""
    if ctx.get("input") is not None:
        return None  # no teacher: no bound
    tested, hits = totals["test_rows"], int(raw["test_right"])
    if hits > totals["ceiling"]:
        return (f"test accuracy {hits / tested:.4f} above the teacher's best accuracy "
                f"{totals['test']['best'] / tested:.4f} by more than chance allows "
                f"(limit {totals['ceiling'] / tested:.4f})")
    if hits < totals["floor"] and floor_applies(ctx):
        return (f"test accuracy {hits / tested:.4f} no better than always answering the most "
                f"common class (limit {totals['floor'] / tested:.4f}): nothing was learned")
    return None


def initial_weights(ctx: dict) -> tuple[np.ndarray, str]:
    """The weights a run must start from, in its dtype, and what they are.

    Read from ``--init-weights`` with NumPy's own reader; else zero for softmax regression;
    else drawn as :data:`pipelines.train.shared.INIT` documents (Glorot's uniform).
    """
    features, hidden, classes = ctx["features"], ctx.get("hidden"), ctx["classes"]
    dtype = ctx["dtype"]
    if ctx.get("init_weights") is not None:
        with np.load(ctx["init_weights"]) as stored:
            names = ("W", "b") if hidden is None else ("W1", "b1", "W2", "b2")
            parts = [np.asarray(stored[n], dtype=np.float64) for n in names]
        if hidden is None:
            return np.vstack([parts[0], parts[1][None]]).astype(dtype), "the file's"
        return (np.concatenate([np.vstack([parts[0], parts[1][None]]).ravel(),
                                np.vstack([parts[2], parts[3][None]]).ravel()]).astype(dtype),
                "the file's")
    if hidden is None:
        return np.zeros((features + 1, classes), dtype), "zero"
    rng = np.random.default_rng(np.random.SeedSequence(ctx["seed"], spawn_key=(INIT,)))
    low = math.sqrt(6.0 / (features + hidden))
    first = rng.uniform(-low, low, (features, hidden))
    high = math.sqrt(6.0 / (hidden + classes))
    second = rng.uniform(-high, high, (hidden, classes))
    flat = np.concatenate([first.ravel(), np.zeros(hidden), second.ravel(), np.zeros(classes)])
    return flat.astype(dtype), "the seeded Glorot-uniform draw"


def floor_applies(ctx: dict) -> bool:
    """Full batches on enough rows: a correct run must beat the most common class."""
    return (ctx.get("batch") is None and ctx.get("hidden") is None
            and ctx["samples"] >= ROWS_PER_FEATURE * (ctx["features"] + 1))


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


def input_safe_rate(gram: np.ndarray, samples: int) -> float:
    """A learning rate under which full-batch descent on the input never raises the loss.

    ``L <= lambda_max(A^T A / n) / 2`` as in :func:`safe_rate`, with ``lambda_max`` the Gram
    matrix's largest eigenvalue (or its trace, an upper bound).
    """
    top = (float(np.linalg.eigvalsh(gram / samples)[-1]) if gram.ndim == 2
           else float(gram[0]) / samples)
    return 4 / (top * (1 + 1e-9))


def descent_applies(ctx: dict, totals: dict) -> bool:
    """Full batches at a provably safe learning rate (``totals["gram"]`` for an input)."""
    if ctx.get("batch") is not None or ctx.get("hidden") is not None:
        return False  # a mini-batch step, or a ReLU layer's, may rightly raise the loss
    if ctx.get("input") is not None:
        return ctx["learning_rate"] <= input_safe_rate(totals["gram"], ctx["samples"])
    return ctx["learning_rate"] <= safe_rate(ctx["samples"], ctx["features"])


def why_it_may_rise(ctx: dict) -> str:
    """Why the never-rise rule does not apply (where :func:`descent_applies` is false)."""
    if ctx.get("batch") is not None:
        return "mini-batches"
    if ctx.get("hidden") is not None:
        return ("a ReLU hidden layer: its loss has no Lipschitz gradient, so no step size is "
                "provably safe")
    return "no provably safe learning rate"


def check_descent(ctx: dict, raw, totals: dict, steps: list[int]) -> str | None:
    """Where :func:`descent_applies`, no loss above the one before by more than rounding.

    ``totals["loss_tol"]``: each loss sum's rounding allowance.
    """
    if not descent_applies(ctx, totals):
        return None
    losses = np.asarray(raw["losses"], dtype=np.float64)
    allowed = totals["loss_tol"] / ctx["samples"]
    for t in range(1, len(losses)):
        if losses[t] > losses[t - 1] + allowed[t] + allowed[t - 1]:
            return (f"loss rose from {losses[t - 1]:.9g} to {losses[t]:.9g} at step {t} with "
                    f"a safe learning rate {ctx['learning_rate']:g}")
    return None
