"""train-pipeline's full check: every shard drawn or read again, every step replayed in float64.

On the workers (:mod:`pipelines.train.check_replay`), each shard drawn again from its seed or
read again from the input, each step's mini-batch drawn again: every step's gradient entry by
entry, every pass's loss and right answers, the test pass, a teacher's best accuracy, an input's
Gram matrix for the never-rise rule. Only the totals come back.
"""

from __future__ import annotations

import dask
import numpy as np

from daskgpu.verification import differences, replay, rounding
from pipelines.train.check_replay import (
    SLAB_ROWS,
    Again,
    Job,
    batch_of,
    batch_words,
    entry,
    held_out,
    model_of,
    replayed,
    rows_again,
    training_rows,
)
from pipelines.train.shared import TEST, TRAIN, TrainContext


def gram_kind(ctx: TrainContext) -> str | None:
    """An input's Gram matrix where it costs at most about twice the replay, else its trace."""
    if ctx.teacher or ctx.batch is not None or ctx.hidden is not None:
        return None
    return "full" if ctx.features + 1 <= 4 * (ctx.steps + 1) * ctx.classes else "trace"


def jobs(ctx: TrainContext, r) -> tuple[list, list]:
    """What each training shard, and each test shard (or slab of held-out rows), replays.

    Each a task: its :class:`Job` and an input's rows read again (:func:`rows_again`).
    """
    w, model = r.flat, model_of(ctx)
    common = {"model": model, "library": ctx.library, "seed": ctx.seed, "final": w[-1]}
    if ctx.teacher:
        where = [({"redraw": (TRAIN, s), "rows": n}, None) for s, n in enumerate(ctx.train_sizes)]
        tests = [({"redraw": (TEST, s), "rows": n}, None) for s, n in enumerate(ctx.test_sizes)]
    else:
        test = held_out(ctx.seed, ctx.source.rows, ctx.held_out)
        firsts = np.cumsum((0, *ctx.train_sizes))
        where = [({}, training_rows(int(f), n, test))
                 for f, n in zip(firsts, ctx.train_sizes, strict=False)]
        tests = [({}, test[i:i + 16 * SLAB_ROWS]) for i in range(0, len(test), 16 * SLAB_ROWS)]
    train = [(Job(**common, **place, everything=w, gram=gram_kind(ctx), batch=batch_of(ctx, s)),
              rows) for s, (place, rows) in enumerate(where)]
    return train, [(Job(**common, **place), rows) for place, rows in tests]


def recompute(ctx: TrainContext, r, verdict) -> None:
    """Every shard replayed on the workers; only the totals come back."""
    parts = [[dask.delayed(replayed, pure=False)(job, None if rows is None else rows_again(
        ctx.source, rows, ctx.dtype)) for job, rows in part] for part in jobs(ctx, r)]
    none = {"passes": np.zeros((1, 4)), "best": np.zeros(3), "labels": np.zeros(ctx.classes)}
    total, tested = dask.compute(*(replay.combined(part, replay.added) if part else none
                                   for part in parts))
    r.again = Again(
        passes=dict(enumerate(total["passes"])),
        gradients={t: tuple(pair) for t, pair in enumerate(total["gradients"])},
        test=tested["passes"][0], best=tested["best"], labels=tested["labels"],
        sums=total["sums"], gram=total.get("gram"))


def steps_agree(ctx: TrainContext, r, verdict) -> None:
    """Every step's gradient recomputed whole: with SGD every weight, with Adam the gradient.

    Adam's steps are then replayed from the reported gradients
    (:func:`pipelines.train.check.adam_agrees`).
    """
    w, n, rate = r.flat, ctx.samples, ctx.learning_rate
    rows, shape = batch_words(ctx), r.weights.shape[1:]
    if ctx.optimizer == "adam":
        reported = np.asarray(r.gradients, dtype=np.float64).reshape(ctx.steps, -1)
        for t in range(ctx.steps):
            gradient, tol = r.again.gradients[t]
            if not verdict.note(differences(
                    reported[t], gradient / n, what="entry", unit="entries",
                    tolerance=tol / n + (rounding(4) + rounding(1, ctx.dtype)) * np.abs(
                        reported[t]),
                    label=lambda i, t=t: f"step {t + 1}: gradient[{entry(i, shape)}]",
                    reported_as="{} reported", expected_as="{} recomputed in float64 on "
                    + rows)):
                return
        verdict.establish(f"all {ctx.steps} steps' gradients recomputed in float64 on {rows}: "
                          "every entry agrees")
        return
    for t in range(ctx.steps):
        gradient, tol = r.again.gradients[t]
        expected = w[t] - rate * gradient / n
        allowed = (rate * tol / n + rounding(2, ctx.dtype) * np.abs(expected)
                   + rounding(4) * (np.abs(w[t]) + rate * np.abs(gradient) / n))
        if not verdict.note(differences(
                w[t + 1], expected, what="weight", tolerance=allowed, reported_as="{} reported",
                label=lambda i, t=t: f"step {t + 1}: weights[{entry(i, shape)}]",
                expected_as="gradient descent on " + rows + " gives {}")):
            return
    verdict.establish(f"all {ctx.steps} steps recomputed in float64 on {rows}: every weight "
                      "agrees")
