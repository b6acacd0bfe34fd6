"""train-pipeline's check, declared on :mod:`daskgpu.verification`.

Both depths, on what they recomputed (:mod:`pipelines.train.check_fast`: on the rows the run
kept; :mod:`pipelines.train.check_full`: on every shard drawn or read again): the result's
shapes, step count and first weights; every pass's sums the sums of its cells, every step's
move (SGD: ``w[t+1] = w[t] - rate * gradient / samples``) or reported gradient (Adam) its
cells' gradients along the run's probes (Freivalds); with Adam every step replayed in float64
from the reported gradients, every weight (:func:`adam_agrees`); the recomputed losses and
accuracies, the test pass, a teacher's best accuracy and its bounds on the test accuracy; in
full-batch SGD at a provably safe learning rate, a loss that never rose. The gradients
themselves: a sample of cells' at ``fast``, every step's at ``full``; the rows of every step
(a seeded sample, or an epoch's batch) drawn again. It shares no code with the run: it takes
from :mod:`pipelines.train.shared` only the scheme's constants and geometry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskgpu.verification import FALSE_ALARM, Check, Unreadable, differences, replay, rounding
from daskgpu.verification.plans import Plan
from daskgpu.verification.sampling import Sampler
from pipelines.train import check_fast, check_full, shared
from pipelines.train.check_mutations import MUTATIONS
from pipelines.train.check_replay import CLOSE, LOSS, LOSS_TOL, RIGHT, batch_words, entry, probes
from pipelines.train.check_replay import step_geometry as geometry
from pipelines.train.shared import INIT, PROBES, TrainContext, unpacked

#: Fewer training rows per feature: a model may rightly learn nothing.
ROWS_PER_FEATURE = 10
#: Steps whose weights (and gradients) the check holds in float64 at once.
AT_ONCE = 16
#: Adam's beta_1, beta_2, epsilon.
ADAM = (shared.ADAM_BETA_1, shared.ADAM_BETA_2, shared.ADAM_EPSILON)


#: What a run reports, in the order :class:`Run` holds it.
REPORTED = ("weights", "losses", "right", "rows", "test_right", "test_best", "test_loss",
            "cells", "test_cells")


@dataclass
class Run:
    """The result a check reads (``cells``: each pass's cell sums), and what it recomputed."""

    weights: np.ndarray
    losses: np.ndarray
    right: np.ndarray
    rows: np.ndarray
    test_right: int
    test_best: float
    test_loss: float
    cells: list
    test_cells: dict
    again: Any = None
    gradients: Any = None
    moments: Any = None  # Adam's last step's (m, v, M), summed by moved_by_cells

    @property
    def flat(self) -> np.ndarray:
        """Every step's weights, flat, in float64."""
        return np.asarray(self.weights, dtype=np.float64).reshape(len(self.weights), -1)


def read(workload, raw) -> Run:
    """The weights, losses, accuracies and cell sums of a run, or why there are none."""
    if not isinstance(raw, dict) or any(k not in raw for k in REPORTED):
        raise Unreadable("result carries no weights, losses, accuracies and cell sums to "
                         f"check: {type(raw)}")
    return Run(*(np.asarray(raw[k]) if i < 4 else raw[k] for i, k in enumerate(REPORTED)),
               gradients=raw.get("gradients"))


def release(ctx: TrainContext) -> None:
    """A presented run's shards are let go once checked (the full check draws its own)."""
    if ctx.kept.presented and ctx.shards is not None:
        ctx.shards.release()


def initial_weights(ctx: TrainContext) -> tuple[np.ndarray, str]:
    """The weights a run must start from, in its dtype, and what they are.

    Read from ``--init-weights`` with NumPy's own reader; else zero for softmax regression;
    else drawn as :data:`pipelines.train.shared.INIT` documents (Glorot's uniform).
    """
    d, hidden, k = ctx.features, ctx.hidden, ctx.classes
    if ctx.init_weights is not None:
        with np.load(ctx.init_weights) as stored:
            names = ("W", "b") if hidden is None else ("W1", "b1", "W2", "b2")
            parts = [np.asarray(stored[n], dtype=np.float64) for n in names]
        layers = [np.vstack([parts[i], parts[i + 1][None]]) for i in range(0, len(parts), 2)]
        start = layers[0] if hidden is None else np.concatenate([a.ravel() for a in layers])
        return start.astype(ctx.dtype), "the file's"
    if hidden is None:
        return np.zeros((d + 1, k), ctx.dtype), "zero"
    flat = np.zeros(ctx.parameters)
    rng = replay.stream(ctx.seed, INIT)
    for layer, (fan_in, fan_out) in zip(unpacked(flat, d, k), ((d, hidden), (hidden, k)),
                                        strict=True):
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        layer[:-1] = rng.uniform(-limit, limit, (fan_in, fan_out))
    return flat.astype(ctx.dtype), "the seeded Glorot-uniform draw"


# --------------------------------------------------------------------------- the result


def structure(ctx: TrainContext, r: Run, verdict) -> None:
    """Every step's weights, loss, accuracy, rows (Adam's gradients); the epochs' steps."""
    shape = ((ctx.steps + 1, ctx.features + 1, ctx.classes) if ctx.hidden is None
             else (ctx.steps + 1, ctx.parameters))
    per_epoch = 1 if ctx.batch is None else -(-ctx.samples // ctx.batch)
    adam = ctx.optimizer == "adam"
    if ctx.epochs is not None and ctx.steps != ctx.epochs * per_epoch:
        verdict.fail(f"{ctx.steps} steps for {ctx.epochs} epochs of {per_epoch}")
    elif adam and np.shape(r.gradients) != (shape[0] - 1, *shape[1:]):
        verdict.fail(f"Adam's gradients of shape {np.shape(r.gradients)}; "
                     f"{(shape[0] - 1, *shape[1:])} expected (every step's)")
    elif r.weights.shape != shape:
        verdict.fail(f"weights of shape {r.weights.shape}; {shape} expected (every step's and "
                     "the last)")
    elif not len(r.losses) == len(r.right) == len(r.rows) == len(r.cells) == shape[0]:
        verdict.fail(f"{len(r.losses)} losses, {len(r.right)} accuracies, {len(r.rows)} row "
                     f"counts, {len(r.cells)} passes' cells for {shape[0]} steps")
    elif not np.array_equal(r.weights[0], (start := initial_weights(ctx))[0]):
        verdict.fail(f"weights before the first step are not {start[1]}")
    else:  # a few steps at a time: no copy of them all
        verdict.require(all(np.isfinite(a[i:i + AT_ONCE]).all() for a in (
            r.weights, r.gradients if adam else ()) for i in range(0, len(a), AT_ONCE)),
            "weights or gradients hold NaN or infinite values (the training diverged)")


def passes_add_up(ctx: TrainContext, r: Run, verdict) -> None:
    """Every pass's rows, right answers and loss are the sums of its cells (no data needed)."""
    (sizes, scales, counts), steps, n = geometry(ctx), ctx.steps, ctx.samples
    for t, sums in enumerate([*r.cells, r.test_cells]):
        cells = counts[t].sum() if t < steps else ctx.cells("final" if t == steps else
                                                            "test").total
        shapes = [np.shape(sums.get(key, ())) for key in ("loss", "right", "probe")]
        if shapes[:2] != [(cells,)] * 2 or (t < steps and shapes[2] != (cells, PROBES)):
            verdict.fail(f"pass {t}: cell sums of another shape than its {cells} cells")
            return
    read = [*sizes.sum(axis=1), n]
    scale = [*map(np.repeat, scales, counts), 1.0]
    verdict.note(differences(r.rows, read, what="row count", label=lambda t: f"rows read at "
                             f"step {t}", reported_as="{} reported", expected_as="{} expected"))
    verdict.note(differences(r.right, [np.sum(sums["right"]) for sums in r.cells],
                             what="accuracy", label=lambda t: f"train accuracy at step {t}",
                             reported_as="{} reported", expected_as="its cells count {}"))
    per = np.array([n] * (steps + 1) + [max(1, sum(ctx.test_sizes))])
    sums = [*(np.array([np.sum(c["loss"] * s), np.sum(np.abs(c["loss"]) * s)])
              for c, s in zip(r.cells, scale, strict=True)),
            np.array([np.sum(r.test_cells["loss"]), np.sum(np.abs(r.test_cells["loss"]))])]
    loss, size = np.array(sums).T / per
    reported = np.array([*r.losses, r.test_loss / per[-1]])
    verdict.note(differences(reported, loss, what="loss", tolerance=2 * rounding(
        ctx.cells("final").total) * (size + np.abs(reported)),
        label=lambda t: f"loss at step {t}" if t <= steps else "test loss",
        reported_as="{} reported", expected_as="its cells sum to {}"))
    counted = np.sum(r.test_cells["right"])
    verdict.require(r.test_right == counted, lambda: (
        f"test accuracy {r.test_right / per[-1]:.6f} reported, its cells count "
        f"{counted / per[-1]:.6f}"))
    if verdict.ok:
        verdict.establish(f"{steps + 1} losses and accuracies are their cells' sums")


def moved_by_cells(ctx: TrainContext, r: Run, verdict) -> None:
    """Every step moved the weights (SGD), or reported the gradient (Adam), its cells sum to.

    Along each of the run's probes: ``r^T (w[t] - w[t+1]) * samples / rate``, or Adam's
    reported ``r^T gradient[t] * samples``, against the cells' probes summed (each shard's
    scaled as its step's rows were): the weights' rounding to their dtype, and the float64
    sums of probes and cells.
    """
    n, rate, adam, u = ctx.samples, ctx.learning_rate, ctx.optimizer == "adam", rounding(4)
    along = probes(ctx.seed, ctx.features, ctx.classes, ctx.hidden, ctx.parameters)
    reach = np.abs(along)
    _, scales, counts = geometry(ctx)
    found = []  # per step: moved along the probes, |moved| along |probes|, rounding, size
    r.moments, later = [np.zeros(ctx.parameters) for _ in range(3)], np.arange(ctx.steps)[::-1]
    for a in range(0, ctx.steps, AT_ONCE):  # float64 copies of AT_ONCE steps at a time
        w = np.asarray(r.weights[a:a + AT_ONCE + 1], np.float64).reshape(-1, ctx.parameters)
        g = np.asarray(r.gradients[a:a + AT_ONCE], np.float64).reshape(len(w) - 1, -1) if adam \
            else None
        moved = g * n if adam else (w[:-1] - w[1:]) * (n / rate)
        spread = np.abs(moved)
        for total, beta, part in zip(r.moments, (*ADAM[:2], ADAM[0]),
                                     (g, g * g, spread / n) if adam else (), strict=False):
            total += (1 - beta) * beta ** later[a:a + len(g)] @ part  # Adam's, closed form
        spread = spread @ reach.T
        found.append(np.hstack([moved @ along.T, spread, (u + rounding(1, ctx.dtype)) * (
            spread if adam else n / rate * np.abs(w[1:]) @ reach.T), np.array(
            [[gradient_size(ctx, x, r.again.sums)] for x in w[:-1]])]))
    dots, spread, rounded, size = np.split(np.vstack(found), [PROBES, 2 * PROBES, 3 * PROBES], 1)
    what = ("the reported gradient {} (times samples)" if adam else
            "the weights moved by {} (times samples / rate)")
    summed = np.array([np.repeat(scale, count) @ np.asarray(sums["probe"])
                       for scale, count, sums in zip(scales, counts, r.cells, strict=False)])
    allowed = rounded + 2 * rounding(ctx.parameters + counts.sum(axis=1))[:, None] * (
        spread + np.outer(size[:, 0] * scales.max(axis=1), reach.max(axis=1)))
    if verdict.note(differences(
            dots, summed, what="probe", tolerance=allowed,
            label=lambda i: f"step {i // PROBES + 1}: probe {i % PROBES}",
            reported_as=what,
            expected_as="the gradient its cells sum to gives {}")):
        verdict.establish(f"all {ctx.steps} steps on {batch_words(ctx)} "
                          + ("moved the weights as" if ctx.optimizer == "sgd" else
                             "reported the gradient") + " their cells' gradients sum (along "
                          f"{PROBES} random probes)")


def adam_agrees(ctx: TrainContext, r: Run, verdict, depth: str = "full") -> None:
    """With Adam, every step replayed in float64 from the reported gradients, every weight.

    This check's own Adam: ``m``, ``v`` from zero, ``lr_t = rate sqrt(1 - beta_2^t) /
    (1 - beta_1^t)``, ``w[t] - lr_t m / (sqrt(v) + epsilon)``. Adam works weight by weight:
    at ``fast`` a seeded sample of the weights is replayed (:func:`adam_sampled`).
    """
    if ctx.optimizer != "adam":
        return
    plan = Plan.at(depth, ctx.parameters, Sampler(ctx.seed, "adam"), unit="weights")
    cols, shape, (b1, b2) = np.array(plan.parts), r.weights.shape[1:], ADAM[:2]
    w = np.asarray(r.weights.reshape(ctx.steps + 1, -1)[:, cols], dtype=np.float64)
    gradients = np.asarray(r.gradients.reshape(ctx.steps, -1)[:, cols], dtype=np.float64)
    first = second = size = np.zeros(w.shape[1])
    for t, g in enumerate(gradients):
        first = b1 * first + (1 - b1) * g
        second = b2 * second + (1 - b2) * np.square(g)
        size = b1 * size + (1 - b1) * np.abs(g)
        if not adam_step(ctx, verdict, t + 1, (first, second, size), w[t], w[t + 1],
                         lambda i: entry(cols[i], shape)):
            return
    verdict.establish(f"all {ctx.steps} Adam steps replayed in float64 from the reported "
                      f"gradients (beta_1 {b1}, beta_2 {b2}, epsilon {ADAM[2]}, bias-corrected)"
                      ": " + ("every weight agrees" if plan.complete else plan.promise))


def adam_step(ctx: TrainContext, verdict, k: int, moments, before, after, where,
              terms: int = 0) -> bool:
    """Whether Adam's step ``k`` from the moments ``(m, v, M)`` moves ``before`` to ``after``.

    Allowed: both computations' float64 rounding (``M``, the moment of ``|g|``, bounds
    ``|m|``; ``terms`` more in the moments' sums; the powers' rounding is magnified by
    ``1 / (1 - beta^k)``) and the weights' rounding to their dtype.
    """
    (first, second, size), (b1, b2, eps) = moments, ADAM
    scale = ctx.learning_rate * math.sqrt(1 - b2 ** k) / (1 - b1 ** k) / (np.sqrt(second) + eps)
    expected = before - scale * first
    relative = rounding(3 * k + 12 + terms) + rounding(2) * (1 / (1 - b2**k) + 1 / (1 - b1**k))
    allowed = (relative * scale * size + rounding(2, ctx.dtype) * np.abs(expected)
               + rounding(4) * np.abs(before))
    return bool(np.all(np.abs(after - expected) <= allowed)) or verdict.note(differences(
        after, expected, what="weight", tolerance=allowed, reported_as="{} reported",
        label=lambda i: f"step {k}: weights[{where(i)}]",
        expected_as="Adam on the reported gradients gives {}"))


def adam_sampled(ctx: TrainContext, r: Run, verdict) -> None:
    """At ``fast``: the last Adam step in every weight, then :func:`adam_agrees` on a sample.

    The last step's moments in closed form, ``m = sum_t (1 - beta_1) beta_1^(T - t) g[t]``
    (and ``v`` of ``g^2``), summed a few steps at a time (:func:`moved_by_cells`): no replay.
    """
    if ctx.optimizer != "adam":
        return
    w = np.asarray(r.weights[-2:], np.float64).reshape(2, -1)
    if adam_step(ctx, verdict, ctx.steps, r.moments, w[0], w[1],
                 lambda i: entry(i, r.weights.shape[1:]), ctx.steps):
        verdict.establish("the last Adam step in every weight, its moments summed again")
        adam_agrees(ctx, r, verdict, "fast")


def gradient_size(ctx: TrainContext, flat: np.ndarray, sums: np.ndarray) -> float:
    """A bound on the sum over the rows of a row's gradient's ``|g|_1`` at weights ``flat``.

    ``|x|_1 <= sqrt(d) |x|_2``, ``|dz|_1 <= 2``; with a hidden layer, back through ``W2`` at
    most ``2 max_c sum_k |W2_kc|`` times ``|x|_1``, the second layer's ``|relu(h)|_1 |dz|_1``.
    """
    l1, rows = math.sqrt(ctx.features) * sums[0], sums[2]
    if ctx.hidden is None:
        return 2 * (l1 + rows)
    first, second = unpacked(flat, ctx.features, ctx.classes)
    into = float(np.abs(second[:-1]).sum(axis=0).max())
    spread = float(np.abs(first[:-1]).sum(axis=1).max())
    return 2.02 * (into * (l1 + rows) + spread * l1 + float(np.abs(first[-1]).sum()) * rows
                   + rows)


def passes_agree(ctx: TrainContext, r: Run, verdict) -> None:
    """The recomputed passes' losses and right answers are the reported ones."""
    again = r.again.passes
    done = sorted(again)
    got = np.array([again[t] for t in done])
    rows = r.rows[done].astype(np.float64)
    if verdict.note(differences(
            r.losses[done], got[:, LOSS] / ctx.samples, what="loss",
            tolerance=got[:, LOSS_TOL] / ctx.samples, label=lambda i: f"loss at step {done[i]}",
            reported_as="{} reported", expected_as="{} recomputed for its weights")):
        verdict.note(differences(
            r.right[done] / rows, got[:, RIGHT] / rows, tolerance=(got[:, CLOSE] + 0.5) / rows,
            what="accuracy", label=lambda i: f"train accuracy at step {done[i]}", form=".6f",
            reported_as="{} reported", expected_as="{} recounted (rows too close to call "
                                                   "either way)"))


def test_agrees(ctx: TrainContext, r: Run, verdict) -> None:
    """The test loss and accuracy at the final weights, and a teacher's best accuracy."""
    test, best, tested = r.again.test, r.again.best, sum(ctx.test_sizes)
    if not tested:
        verdict.establish("no rows held out (validation fraction 0): no test loss, accuracy "
                          "or bounds on them")
        return
    hits = (r.test_right, test[RIGHT])
    if not verdict.require(abs(hits[0] - hits[1]) <= test[CLOSE], lambda: (
            f"test accuracy {hits[0] / tested:.6f} reported, {hits[1] / tested:.6f} recounted "
            f"for the final weights ({int(test[CLOSE])} rows too close to call)")):
        return
    verdict.require(abs(r.test_loss - test[LOSS]) <= test[LOSS_TOL], lambda: (
        f"test loss {r.test_loss / tested:.9g} reported, {test[LOSS] / tested:.9g} recomputed "
        "for the final weights"))
    if ctx.teacher:
        verdict.require(abs(r.test_best - best[0]) <= best[1], lambda: (
            f"teacher's best accuracy {r.test_best / tested:.9f} reported, "
            f"{best[0] / tested:.9f} recomputed"))


@dataclass(frozen=True)
class Bounds:
    """The least and most test rows right a correct run has (a teacher's), and its best."""

    tested: int
    floor: float
    ceiling: float
    best: float


def accuracy_bounds(tested: int, common: float, best: float) -> Bounds:
    """Above the most ``common`` class's count and below the teacher's expected ``best``.

    Each widened by Bernstein's inequality for a sum of ``tested`` indicators (variance at
    most 1/4 each), exceeded by a correct run with probability below ``FALSE_ALARM``.
    """
    log_alarm = math.log(2 / FALSE_ALARM)
    slack = math.sqrt(2 * tested / 4 * log_alarm) + log_alarm / 3
    return Bounds(tested, common + slack, best + slack, best)


def floor_applies(ctx: TrainContext) -> bool:
    """Full-batch SGD on enough rows: a correct run must beat the most common class."""
    return (ctx.batch is None and ctx.hidden is None and ctx.optimizer == "sgd"
            and ctx.samples >= ROWS_PER_FEATURE * (ctx.features + 1))


def bounds_problem(ctx: TrainContext, hits: int, bounds: Bounds) -> str | None:
    """What is wrong with ``hits`` test rows right, against a teacher's ``bounds``."""
    tested = bounds.tested
    if hits > bounds.ceiling:
        return (f"test accuracy {hits / tested:.4f} above the teacher's best accuracy "
                f"{bounds.best / tested:.4f} by more than chance allows (limit "
                f"{bounds.ceiling / tested:.4f})")
    if hits < bounds.floor and floor_applies(ctx):
        return (f"test accuracy {hits / tested:.4f} no better than always answering the most "
                f"common class (limit {bounds.floor / tested:.4f}): nothing was learned")
    return None


def within_bounds(ctx: TrainContext, r: Run, verdict) -> None:
    """With a teacher, the test accuracy between the most common class's and the best."""
    tested = sum(ctx.test_sizes)
    if not tested:
        return  # test_agrees said so
    if not ctx.teacher:
        verdict.establish(f"test accuracy {r.test_right / tested:.4f} on {tested} held-out "
                          "rows recomputed (no teacher: no bound on it)")
        return
    best, _, taught = r.again.best
    bounds = accuracy_bounds(tested, float(r.again.labels.max()), best)
    slack = bounds.ceiling - best  # Bernstein's, for the labels too
    if not verdict.require(abs(taught - best) <= slack, lambda: (
            f"test labels: the teacher labels {taught / tested:.4f} of the test rows as its best "
            f"guess, {best / tested:.4f} expected (labels not drawn from the teacher)")):
        return
    if verdict.note(bounds_problem(ctx, r.test_right, bounds)):
        floor = (f"{bounds.floor / tested:.4f}" if floor_applies(ctx)
                 else "- (not required with mini-batches, a hidden layer, Adam or under "
                      f"{ROWS_PER_FEATURE} rows per feature)")
        verdict.establish(f"test accuracy {r.test_right / tested:.4f} recomputed, within "
                          f"[{floor}, {bounds.ceiling / tested:.4f}] (most common class, "
                          "teacher's best recomputed)")


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
    """A learning rate under which full-batch descent on an input never raises the loss.

    As :func:`safe_rate`, ``lambda_max`` the Gram matrix's (or its trace, an upper bound).
    """
    top = (float(np.linalg.eigvalsh(gram / samples)[-1]) if gram.ndim == 2
           else float(gram[0]) / samples)
    return 4 / (top * (1 + rounding(gram.shape[0] ** 2)))


def why_it_may_rise(ctx: TrainContext, gram: np.ndarray | None) -> str | None:
    """Why the loss may rightly rise (None: full batches at a provably safe rate)."""
    if ctx.batch is not None:
        return "mini-batches"
    if ctx.optimizer == "adam":
        return "Adam: its steps are not gradient steps of a provably safe size"
    if ctx.hidden is not None:
        return ("a ReLU hidden layer: its loss has no Lipschitz gradient, so no step size is "
                "provably safe")
    safe = (safe_rate(ctx.samples, ctx.features) if ctx.teacher
            else input_safe_rate(gram, ctx.samples))
    if ctx.learning_rate > safe:
        trace = "" if ctx.teacher or gram.ndim == 2 else " from the trace of A^T A"
        return f"no learning rate provably safe{trace}"
    return None


def descent_problem(ctx: TrainContext, losses, allowed, gram=None) -> str | None:
    """Where a loss rose above the one before by more than their ``allowed`` rounding.

    Only at a provably safe learning rate (``gram``: an input's Gram matrix, or its trace).
    """
    if why_it_may_rise(ctx, gram) is not None:
        return None
    rose = np.flatnonzero(np.diff(losses) > allowed[1:] + allowed[:-1])
    if rose.size:
        t = int(rose[0]) + 1
        return (f"loss rose from {losses[t - 1]:.9g} to {losses[t]:.9g} at step {t} with a "
                f"safe learning rate {ctx.learning_rate:g}")
    return None


def descent(ctx: TrainContext, r: Run, verdict) -> None:
    """In full-batch training at a provably safe rate, no loss above the one before."""
    gram = r.again.gram
    if gram is None:  # the trace of A^T A: the rows' squared norms and a one each
        gram = np.array([r.again.sums[1] + r.again.sums[2]])
    if (why := why_it_may_rise(ctx, gram)) is not None:
        verdict.establish(f"the loss may rise ({why})")
    elif verdict.note(descent_problem(ctx, r.losses, loss_allowance(ctx, r), gram)):
        verdict.establish("the loss never rose (a safe learning rate)")


def loss_allowance(ctx: TrainContext, r: Run) -> np.ndarray:
    """Each reported loss's rounding allowance (softmax regression at its weights).

    Every logit within ``c(d + 1) (|x| max_k |w_k| + max |b|)``, the softmax's rounding.
    """
    n, w = ctx.samples, np.asarray(r.weights, dtype=np.float64)
    column = np.sqrt((w[:, :-1] ** 2).sum(axis=1)).max(axis=1)
    bias = np.abs(w[:, -1]).max(axis=1)
    loss = r.losses * n
    return (2 * rounding(ctx.features + 1, ctx.dtype) * (column * r.again.sums[0] + n * bias)
            + rounding(ctx.classes + 4, ctx.dtype) * (n + loss) + rounding(n) * loss) / n


# --------------------------------------------------------------------------- the declaration

CHECK = Check(
    fast=(structure, passes_add_up, check_fast.recompute, check_fast.kept_are_the_data,
          moved_by_cells, adam_sampled, passes_agree, test_agrees, check_fast.cells_agree,
          check_fast.sampled_cells_agree, within_bounds, descent),
    full=(structure, passes_add_up, check_full.recompute, moved_by_cells,
          check_full.steps_agree, adam_agrees, passes_agree, test_agrees, within_bounds,
          descent),
    read=read, mutations=MUTATIONS, release=release)
