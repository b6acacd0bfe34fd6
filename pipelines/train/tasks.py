"""train-pipeline's work on the cluster: shards, a shard's pass, the loop driving the steps.

The shards are drawn on the workers; the loop runs in a client (see
:mod:`pipelines.train.pipeline`).

Each step's gradient ``g`` is the mean over the rows it read: the shards' sums tree-reduced
in float64, divided by the training rows (a mini-batch's sums scaled up to an estimate of the
full sums first). The update, applied once in the client, in float64, then cast to the
weights' dtype (:class:`Descent`):

- ``sgd``: ``w <- w - lr g``.
- ``adam`` (Kingma and Ba; as scikit-learn's ``MLPClassifier(solver="adam")`` and Keras
  apply it, with scikit-learn's defaults ``beta_1 = 0.9``, ``beta_2 = 0.999``,
  ``epsilon = 1e-8``): at step ``t = 1, 2, ...``
  ``m <- beta_1 m + (1 - beta_1) g``, ``v <- beta_2 v + (1 - beta_2) g^2`` (``m = v = 0``
  before the first step, float64), ``lr_t = lr sqrt(1 - beta_2^t) / (1 - beta_1^t)`` (the
  bias corrections of both moments folded into the step size, scikit-learn's form) and
  ``w <- w - lr_t m / (sqrt(v) + epsilon)``, entry by entry. The state lives only here, in
  the one place that applies the step, so every worker gets the same weights.

The data follow the scheme of :mod:`pipelines.train.shared`: standard normal features; each
row's label the argmax of the teacher's logits plus a standard Gumbel draw per class, which is
a draw from the teacher's softmax. Per-shard generators: ``numpy.random.default_rng`` of the
shard's ``SeedSequence`` on CPU workers; on GPU workers ``cupy.random.default_rng`` seeded
with that sequence's first 64-bit word.
"""

from __future__ import annotations

import copy
import importlib
import math
import time
from dataclasses import dataclass

import numpy as np

from daskgpu.toolkit import backends, data_parallel
from daskgpu.toolkit.numeric import generator
from pipelines.train import hidden as hidden_layer
from pipelines.train.shared import (
    ADAM_BETA_1,
    ADAM_BETA_2,
    ADAM_EPSILON,
    BATCH,
    EPOCH,
    PROBE,
    PROBES,
    TEACHER,
    TEACHER_SHARPNESS,
    batch_rows,
    cell_rows,
)

# Rows of a shard turned into teacher logits at once (float64 temporaries of this many rows).
LABEL_SLAB = 65_536
# With one training shard, steps run this many at a time in one task, their reports (every
# step's weights, and gradient) at most REPORTED_BYTES together.
MAX_TOGETHER, REPORTED_BYTES = 256, 64 << 20


def teacher_weights(seed: int, features: int, classes: int) -> np.ndarray:
    """The teacher's ``(features + 1, classes)`` float64 weights, the bias as the last row."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(TEACHER,)))
    scale = TEACHER_SHARPNESS / math.sqrt(features + 1)
    return rng.standard_normal((features + 1, classes)) * scale


def _shard_rng(library: str, seed: int, part: int, index: int):
    return generator(library, np.random.SeedSequence(seed, spawn_key=(part, index)))


def make_shard(seed: int, part: int, index: int, rows: int, features: int, classes: int,
               dtype: str, library: str, teacher: np.ndarray) -> dict:
    """One shard of rows, drawn where it will stay: features, labels, the teacher's certainty.

    Features are standard normal; each row's label is the argmax of the teacher's logits plus
    a standard Gumbel draw per class (``-log(-log(u))``), a draw from the teacher's softmax.
    ``best`` is the sum over the rows of the teacher's largest class probability: the
    expected number of rows the best possible model labels right.
    """
    xp = importlib.import_module(library)
    rng = _shard_rng(library, seed, part, index)
    x = rng.standard_normal((rows, features), dtype=dtype)
    u = rng.random((rows, classes), dtype=np.float64)
    teacher = xp.asarray(teacher)
    y = xp.empty(rows, dtype=np.int32)
    best = 0.0
    for start in range(0, rows, LABEL_SLAB):
        stop = min(rows, start + LABEL_SLAB)
        logits = x[start:stop].astype(np.float64) @ teacher[:-1] + teacher[-1]
        y[start:stop] = xp.argmax(logits - xp.log(-xp.log(u[start:stop])), axis=1)
        logits -= logits.max(axis=1, keepdims=True)
        probabilities = xp.exp(logits)
        best += float((1.0 / probabilities.sum(axis=1)).sum())  # the largest is exp(0)
    return {"x": x, "y": y, "best": best, "index": index}


def gradient_probes(seed: int, features: int, classes: int) -> np.ndarray:
    """The run's probes of its cells' gradients, drawn as :mod:`pipelines.train.shared` says.

    One float64 array ``(PROBES, features + 1 + classes)``: each row ``r`` (over the
    features and the bias) then ``s`` (over the classes).
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PROBE,)))
    r = rng.standard_normal((PROBES, features + 1))
    return np.hstack([r, rng.standard_normal((PROBES, classes))])


def batch_draw(seed: int, step: int, index: int, rows: int, batch: int, samples: int
               ) -> np.ndarray:
    """Sorted rows of shard ``index`` (of ``rows``) in step ``step``'s mini-batch.

    ``batch_rows`` of them, drawn without replacement by ``Generator.choice`` of
    ``SeedSequence(seed, spawn_key=(BATCH, step, index))``.
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(BATCH, step, index)))
    return np.sort(rng.choice(rows, size=batch_rows(batch, rows, samples), replace=False))


@dataclass(frozen=True)
class EpochStep:
    """A step of an epoch (:func:`epoch_batches`): every training shard's rows, the scale."""

    parts: tuple
    scale: float


def epoch_batches(seed: int, epoch: int, samples: int, batch: int, sizes) -> list[EpochStep]:
    """The steps of epoch ``epoch``: each training shard's rows of each, and its scale.

    ``permutation(samples)`` of ``SeedSequence(seed, spawn_key=(EPOCH, epoch))`` orders the
    training rows (numbered shard after shard, ``sizes`` rows each); step ``j`` reads the rows
    at its positions ``j batch`` to ``(j + 1) batch - 1`` (the last step the rest). Each
    step's ``parts`` are every shard's sorted rows of it (maybe none), ``scale`` the training
    rows over the step's: its sums scaled up to an estimate of the full ones (the mean over
    its rows, once divided by ``samples``).
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(EPOCH, epoch)))
    order = rng.permutation(samples)
    firsts = np.cumsum((0, *sizes))
    steps = []
    for start in range(0, samples, batch):
        rows = np.sort(order[start:start + batch])
        cut = np.searchsorted(rows, firsts)
        steps.append(EpochStep(tuple(rows[cut[s]:cut[s + 1]] - firsts[s]
                                     for s in range(len(sizes))), samples / len(rows)))
    return steps


def step_batches(seed: int, steps: int, batch: int | None = None, samples: int = 0,
                 sizes=(), epochs: int | None = None):
    """Each step's ``batch`` argument of :func:`shard_pass`, in order (a generator).

    None (all rows) without ``batch``; ``(seed, step, batch, samples)`` (a seeded sample) with
    it; with ``epochs`` too, the steps of :func:`epoch_batches`, epoch after epoch.
    """
    if batch is None or epochs is None:
        yield from (None if batch is None else (seed, t, batch, samples) for t in range(steps))
        return
    for epoch in range(epochs):
        yield from epoch_batches(seed, epoch, samples, batch, sizes)


class Descent:
    """The update of the weights from each step's mean gradient: SGD's or Adam's.

    See the module's docstring for the rules. ``Descent("adam", 0.001).step(w, g)`` applies
    one step to ``w`` (its dtype kept) and advances Adam's state.
    """

    def __init__(self, optimizer: str, rate: float):
        self.optimizer, self.rate = optimizer, rate
        self.t, self.m, self.v = 0, 0.0, 0.0

    def step(self, w: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        """The weights after one step along the float64 mean ``gradient``."""
        if self.optimizer == "sgd":
            return (w - self.rate * gradient).astype(w.dtype)
        self.t += 1
        self.m = ADAM_BETA_1 * self.m + (1 - ADAM_BETA_1) * gradient
        self.v = ADAM_BETA_2 * self.v + (1 - ADAM_BETA_2) * gradient * gradient
        rate = self.rate * math.sqrt(1 - ADAM_BETA_2 ** self.t) / (1 - ADAM_BETA_1 ** self.t)
        return (w - rate * self.m / (np.sqrt(self.v) + ADAM_EPSILON)).astype(w.dtype)


def shard_pass(shard: dict, weights: np.ndarray, gradient: bool, library: str,
               batch: tuple | None = None, probes: np.ndarray | None = None,
               report: np.ndarray | None = None) -> tuple:
    """One shard's loss sum, right answers and (if asked) gradient sum at ``weights``.

    With ``batch`` ``(seed, step, batch size, samples)`` only the shard's rows of that step's
    mini-batch (:func:`batch_draw`) are read, and the gradient and loss sums are scaled by
    the shard's rows over its batch rows, so that their total over the shards is an unbiased
    estimate of the full sums. With an epoch's step (:class:`EpochStep`) the rows
    of its ``parts`` are read (maybe none), the sums scaled by its ``scale``. The rows are
    read a cell at a time (:func:`pipelines.train.shared.cell_rows`), and each cell's sums
    are reported too, for the check: its loss sum, right answers and, with the gradient,
    ``r^T G s`` of its gradient ``G`` for each probe ``(r, s)`` of ``probes``
    (:func:`gradient_probes`), unscaled. With ``report``, ``(shard index, cell)`` rows, the
    cells of this shard named there also report their gradient whole, flat in float64
    (``gradient``, one row a cell, in cell order; ``reported``: their cells): the fast
    check's seeded sample recomputes them.

    Returns
    -------
    ((gradient, loss, right, rows, cells), seconds)
        The summed cross-entropy gradient over the rows read as float64 host memory (0.0
        when not asked), the float64 sum of their losses, the count of them whose most
        likely class is their label, how many were read, ``[(shard index, cell sums)]``
        (a list, so that adding two shards' answers lists both), and the seconds it took
        (device work included).
    """
    began = time.perf_counter()
    xp = importlib.import_module(library)
    x, y = shard["x"], shard["y"]
    scale = 1.0
    if isinstance(batch, EpochStep):  # a step of an epoch: its rows given
        chosen, scale = batch.parts[shard["index"]], batch.scale
    elif batch is not None:
        seed, step, size, samples = batch
        chosen = batch_draw(seed, step, shard["index"], y.shape[0], size, samples)
        scale = y.shape[0] / len(chosen)
    if batch is not None:
        chosen = xp.asarray(chosen)
        x, y = x[chosen], y[chosen]
    block = cell_rows(x.shape[1], x.dtype.itemsize, library)
    if gradient and report is not None:
        report = np.asarray(report).reshape(-1, 2)
        report = report[report[:, 0] == shard["index"], 1]
    else:
        report = None
    if isinstance(weights, hidden_layer.Layers):
        total, loss, right, cells = hidden_layer.pass_in_blocks(
            xp, x, y, weights, gradient, block, probes if gradient else None, report)
    else:
        total, loss, right, cells = _pass_in_blocks(xp, x, y, xp.asarray(weights), gradient,
                                                    block, probes if gradient else None, report)
    if gradient:
        total *= scale
    return ((total, loss * scale, right, int(y.shape[0]), [(shard["index"], cells)]),
            time.perf_counter() - began)


def _pass_in_blocks(xp, x, y, w, gradient: bool, block: int, probes=None, report=None) -> tuple:
    """Loss sum, right answers and (if asked) float64 gradient of rows ``block`` at a time.

    On CPU a block small enough for the core's cache is read from memory once for both
    products (logits, then the gradient), where whole-shard products read every row twice;
    on two cores sharing memory that was 20 % of a step. The gradient is summed in float64.
    Each block is a cell: its loss sum, right answers and probed gradient are kept too
    (``cells``: host arrays ``loss``, ``right`` and, with ``probes``, ``probe``; with
    ``report``, the cells whose gradient is reported whole, see :func:`shard_pass`).
    """
    features, classes = w.shape[0] - 1, w.shape[1]
    weights, bias = w[:-1], w[-1]
    transposed = xp.zeros((classes, features), dtype=np.float64)  # the gradient, transposed
    bias_gradient = xp.zeros(classes, dtype=np.float64)
    losses, hits, probed, whole = [], [], [], []
    if probes is not None:  # r of the features, r of the bias, s
        probes = np.asarray(probes, dtype=np.float64)
        towards, lift, along = (xp.asarray(probes[:, :features].T),
                                xp.asarray(probes[:, features]),
                                xp.asarray(probes[:, features + 1:]))
    offsets = xp.arange(min(block, y.shape[0]))
    for start in range(0, y.shape[0], block):
        xb, yb = x[start:start + block], y[start:start + block]
        rows = offsets[:yb.shape[0]]
        logits = xb @ weights
        logits += bias
        hits.append((xp.argmax(logits, axis=1) == yb).sum())
        logits -= logits.max(axis=1, keepdims=True)
        exp = xp.exp(logits)
        sums = exp.sum(axis=1)
        losses.append((xp.log(sums) - logits[rows, yb]).sum(dtype=np.float64))
        if gradient:
            exp /= sums[:, None]  # the class probabilities
            exp[rows, yb] -= 1  # minus the one-hot labels: d loss / d logits
            part = exp.T @ xb  # (classes, rows) @ (rows, features): BLAS's faster side
            transposed += part
            part_bias = exp.sum(axis=0, dtype=np.float64)
            bias_gradient += part_bias
            if probes is not None:  # r^T G s of this cell, for each probe: a few flops
                probed.append(((part @ towards) * along.T).sum(axis=0)
                              + (along @ part_bias) * lift)
            if report is not None and start // block in report:
                whole.append(np.vstack([backends.to_host(part).T.astype(np.float64),
                                        backends.to_host(part_bias)[None]]).ravel())
    cells = {"loss": _host_values(xp, losses, np.float64),
             "right": _host_values(xp, hits, np.int64)}
    if probes is not None:  # none where an epoch's step read none of the shard's rows
        cells["probe"] = (np.asarray(backends.to_host(xp.stack(probed)), dtype=np.float64)
                          if probed else np.zeros((0, along.shape[0])))
    if report is not None:
        cells["gradient"] = np.array(whole, dtype=np.float64).reshape(len(whole), w.size)
        cells["reported"] = np.asarray(report, dtype=np.int64)
    loss = 0.0
    for value in cells["loss"]:  # in block order, as one running sum
        loss += float(value)
    right = int(cells["right"].sum())
    if not gradient:
        return 0.0, loss, right, cells
    total = np.empty(w.shape, dtype=np.float64)
    total[:-1] = backends.to_host(transposed).T
    total[-1] = backends.to_host(bias_gradient)
    return total, loss, right, cells


def _host_values(xp, values: list, dtype) -> np.ndarray:
    """Device scalars (or NumPy's), one per cell, as one host array."""
    if not values:
        return np.zeros(0, dtype)
    return np.asarray(backends.to_host(xp.stack(values)), dtype=dtype).reshape(-1)


def shard_best(shard: dict) -> float:
    """The shard's ``best``: the expected right answers of the best possible model."""
    return shard["best"]


# --------------------------------------------------------------------------- the training


def train(client, shards, train_shards: int, samples: int, features: int, classes: int,
          steps: int, rate: float, dtype: str, library: str, seed: int = 0,
          batch: int | None = None, initial: np.ndarray | None = None,
          report: list | None = None, optimizer: str = "sgd", epochs: int | None = None,
          sizes: tuple = ()) -> dict:
    """Gradient descent (SGD or Adam) from ``initial`` weights on persisted ``shards``, driven here.

    ``initial``: ``(features + 1, classes)`` weights of softmax regression (``None``: zero),
    or a hidden-layer model's flat weights (:mod:`pipelines.train.hidden`): then every
    step's weights and gradient are flat, and the workers get ``(W1, W2)``. ``report``: per
    step, the ``(shard, cell)`` rows whose gradient is reported whole (:func:`shard_pass`).

    ``shards[:train_shards]`` hold the training rows, the rest the held-out test rows (maybe
    none). Every step: one :func:`shard_pass` per shard at the step's weights (on all its
    rows, or on its rows of the step's mini-batch of ``batch`` rows: a seeded sample, or with
    ``epochs`` the epoch's next batch, :func:`step_batches`; ``sizes``: the training shards'
    rows), the gradients summed by a tree reduction, the step applied once (:func:`stepped`:
    :class:`Descent` of ``optimizer`` at ``rate`` along ``gradient / samples``). Every step's
    tasks are submitted at once, each depending on the last's weights, so the steps follow
    each other on the workers without a round trip to this client, which gathers what each
    step reports as they come. After the last step one more pass gives the final weights'
    loss and accuracy on all rows, and one over the test shards.

    Returns
    -------
    dict
        ``weights`` (steps + 1, features + 1, classes), or (steps + 1, parameters) with a
        hidden layer, the weights before each step and the final ones; ``losses`` and
        ``right`` at each of them (a mini-batch step's loss is its estimate of the full
        loss), ``rows`` their rows; ``test_loss``, ``test_right``, ``test_best`` (zero
        without test shards); ``cells``, per pass (every step's and the final one) the sums
        of each cell of rows it read, shard after shard (:func:`shard_pass`), and
        ``test_cells``, the test pass's; the times of each step (``step_s``,
        ``step_compute_s``); with Adam, ``gradients`` (steps, ...), each step's mean
        gradient that the update took, in the weights' dtype.
    """
    training, testing = shards[:train_shards], shards[train_shards:]
    w = (np.zeros((features + 1, classes), dtype=dtype) if initial is None
         else np.asarray(initial, dtype=dtype))
    layout = (features, classes) if w.ndim == 1 else None
    probes = data_parallel.broadcast(client, hidden_layer.split_probes(
        hidden_layer.gradient_probes(seed, w.size), *layout) if layout
        else gradient_probes(seed, features, classes))
    began = time.time()
    states = [data_parallel.broadcast(client, Step(w, Descent(optimizer, rate), began))]
    reports = []
    drawn = [(_own(b, s), None if report is None else report[t]) for t, b in enumerate(
        step_batches(seed, steps, batch, samples, sizes, epochs)) for s in range(len(training))]
    if len(training) == 1:  # no reduction to wait for: the steps run where the rows are
        together = max(1, min(MAX_TOGETHER, REPORTED_BYTES // (w.nbytes * 2)))
        for t in range(0, steps, together):
            states.append(client.submit(steps_in_place, training[0], states[-1], samples,
                                        layout, library, probes, drawn[t:t + together],
                                        pure=False))
            reports.append(client.submit(reported, states[-1], pure=False))
    for t in range(steps if len(training) > 1 else 0):
        parts = [client.submit(pass_at, shard, states[-1], layout, True, library,
                               drawn[t * len(training) + s][0], probes,
                               drawn[t * len(training) + s][1], pure=False)
                 for s, shard in enumerate(training)]
        while len(parts) > 2:  # the tree reduction's levels but the last (in stepped)
            parts = [client.submit(data_parallel.add_pairs, parts[i], parts[i + 1], pure=False)
                     for i in range(0, len(parts) - 1, 2)] + parts[len(parts) - len(parts) % 2:]
        states.append(client.submit(stepped, states[-1], samples, *parts, pure=False))
        reports.append(client.submit(reported, states[-1], pure=False))
    # Filled as the steps report, in order, while the next ones compute; what the next steps
    # took is let go.
    trajectory = np.empty((steps + 1, *w.shape), dtype=w.dtype)
    trajectory[0] = w
    gradients = np.empty((steps, *w.shape), dtype=w.dtype) if optimizer == "adam" else None
    found = []
    for t, future in enumerate(reports):
        for step in data_parallel.fetch(client, [future])[0]:
            trajectory[len(found) + 1] = step.pop("weights")
            if gradients is not None:
                gradients[len(found)] = step.pop("gradient")
            found.append(step)
        for done in (future, states[t]):
            done.release()
    ends = [began, *(step["done"] for step in found)]
    passes = [step["cells"] for step in found]
    losses, right, rows = ([step[key] for step in found] for key in ("loss", "right", "rows"))
    (_, loss, hits, read, cells), _ = data_parallel.step(
        client, training, pass_at, data_parallel.add_pairs, states[-1], layout, False, library)
    losses.append(loss / samples)
    right.append(hits)
    rows.append(read)
    passes.append(in_shard_order(cells))
    test_loss, test_hits, cells, best = 0.0, 0, [(0, _NO_CELLS)], 0.0
    if testing:  # none held out (--validation-fraction 0): no test pass
        (_, test_loss, test_hits, _, cells), _ = data_parallel.step(
            client, testing, pass_at, data_parallel.add_pairs, states[-1], layout, False,
            library)
        best = sum(client.gather([client.submit(shard_best, s, pure=False) for s in testing]))
    for future in (states[-1], probes):
        future.release()
    return {**({} if gradients is None else {"gradients": gradients}),
            "weights": trajectory, "losses": np.array(losses),
            "right": np.array(right, dtype=np.int64),
            "rows": np.array(rows, dtype=np.int64), "test_loss": float(test_loss),
            "test_right": int(test_hits), "test_best": float(best),
            "cells": passes, "test_cells": in_shard_order(cells),
            "step_s": list(np.diff(ends)), "step_compute_s": [s["compute_s"] for s in found]}


@dataclass(frozen=True)
class Step:
    """What a step hands the next: the weights after it, the update's state, when it ended.

    ``found``: what the steps since the last report report (:func:`reported`), one dict each.
    """

    weights: np.ndarray
    descent: Descent
    done: float
    found: tuple = ()


def _own(drawn, shard: int):
    """A step's batch argument for one shard: an epoch's step carries only that shard's rows."""
    if not isinstance(drawn, EpochStep):
        return drawn
    return EpochStep(tuple(p if i == shard else None for i, p in enumerate(drawn.parts)),
                     drawn.scale)


def stepped(state: Step, samples: int, *parts) -> Step:
    """One step applied where its shards' sums meet: their sum, the mean gradient, the update.

    The last level of the shards' tree reduction (:func:`data_parallel.add_pairs`). Adam
    steps along the mean gradient rounded to the weights' dtype, which the run reports.
    """
    total = parts[0]
    for part in parts[1:]:
        total = data_parallel.add_pairs(total, part)
    (gradient, loss, hits, read, cells), seconds = total
    descent, mean = copy.copy(state.descent), gradient / samples
    adam = descent.optimizer == "adam"
    if adam:
        mean = mean.astype(state.weights.dtype)
    w = descent.step(state.weights, mean.astype(np.float64))
    done = time.time()
    return Step(w, descent, done, ({
        "weights": w, "done": done, "gradient": mean if adam else None, "loss": loss / samples,
        "right": hits, "rows": read, "cells": in_shard_order(cells),
        "compute_s": float(seconds)},))


def steps_in_place(shard: dict, state: Step, samples: int, layout: tuple | None, library: str,
                   probes, drawn: list) -> Step:
    """Several steps on one training shard, in this task: each step's pass, then its update.

    ``drawn``: each step's ``(batch, report)`` arguments of :func:`shard_pass`. With one
    shard a step has no reduction across workers to wait for; what each step reports (its
    weights, gradient, sums) comes back with the last (:attr:`Step.found`).
    """
    found = []
    for batch, report in drawn:
        state = stepped(state, samples, pass_at(shard, state, layout, True, library, batch,
                                                probes, report))
        found.extend(state.found)
    return Step(state.weights, state.descent, state.done, tuple(found))


def pass_at(shard: dict, state: Step, layout: tuple | None, *args) -> tuple:
    """:func:`shard_pass` at ``state``'s weights: a step's tasks take the step before whole.

    With a hidden layer (``layout``: features and classes) the weights go as :class:`Layers`.
    """
    w = state.weights
    return shard_pass(shard, hidden_layer.layers(w, *layout) if layout else w, *args)


def reported(state: Step) -> tuple:
    """What the steps that made ``state`` report to the driver: weights, times, sums."""
    return state.found


_NO_CELLS = {"loss": np.zeros(0), "right": np.zeros(0, dtype=np.int64)}


def in_shard_order(cells: list) -> dict:
    """The cells' sums of every shard of a pass, shard after shard: one array per sum."""
    ordered = [sums for _, sums in sorted(cells, key=lambda pair: pair[0])]
    return {key: np.concatenate([sums[key] for sums in ordered]) for key in ordered[0]}
