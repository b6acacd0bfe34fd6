"""The worker side of train-pipeline's check: rows drawn or read again, evaluated its own way.

:class:`Model` evaluates the run's model per row and set of weights: the loss and how far the
run's may lie from it, whether the row is right or too close to call, and on asked sets the
gradient over the rows with its allowance, entry by entry. Softmax regression is evaluated for
several sets in one product, the hidden layer in float64 (over many rows, the largest product of
each in the data's dtype, both computations' rounding allowed).
The allowances carry both computations' rounding (:func:`daskgpu.verification.rounding`)
through the layers: a logit within ``c(d + 1) (|x| |w_k| + |b_k|)``, the softmax outputs within
``p (2 max|dz| + c(classes + 3))``, a gradient entry within ``c(cell)`` of its magnitude (the
run sums a cell in its dtype) plus its operands' errors; where a hidden unit is within its error
of zero, the run's ReLU may have gone either way and its whole back-propagated value is allowed.
The rows come from the documented scheme (:mod:`pipelines.train.shared`), never the run's code.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field, replace

import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.verification import differences, replay, rounding
from daskgpu.verification.certificates import sums_by_cell
from pipelines.train import shared

#: Columns of an evaluation's table (per row, per cell, or summed): the loss, its allowance,
#: right answers, rows too close to call.
LOSS, LOSS_TOL, RIGHT, CLOSE = range(4)
SLAB_ROWS = 1_536  # rows evaluated at once (whole cells): a slab stays in the core's cache


@dataclass(frozen=True)
class Model:
    """The model a run trained, the dtype and cell it computed in, and this check's dtype."""

    features: int
    classes: int
    hidden: int | None
    dtype: str
    cell: int
    computed: str = "float64"

    def u(self, terms: int) -> float:
        """The run's rounding of a sum of ``terms`` terms, plus this check's."""
        return rounding(terms, self.dtype) + rounding(terms, self.computed)

    def over_many_rows(self) -> Model:
        """The model evaluated over many rows: its largest product in the data's dtype."""
        return replace(self, computed=self.dtype)

    def evaluate(self, xp, x, y, weights, gradient=(), summed: int = 0) -> tuple:
        """Rows ``x``, labels ``y`` at each of ``weights`` (sets, parameters), host float64.

        Returns the table (rows, sets, 4) of :data:`LOSS` to :data:`CLOSE`; for each set of
        ``gradient`` its gradient over the rows and its allowance (flat host arrays); and
        each row's squared norm (an upper bound). ``summed``: rows the sums run over.
        """
        summed = max(summed, x.shape[0], 1)
        if self.hidden is None:
            return _linear(self, xp, x, y, np.asarray(weights, dtype=np.float64), gradient,
                           summed)
        found = [_hidden(self, xp, x, y, w, k in gradient, summed)
                 for k, w in enumerate(np.asarray(weights, dtype=np.float64))]
        return (xp.concatenate([table for table, _, _ in found], axis=1),
                [g for _, g, _ in found if g is not None], found[0][2])


def _softmax(m: Model, xp, z, y, err, summed: int) -> tuple:
    """The table of logits ``z`` (rows, sets, classes), each within ``err`` (rows, sets)."""
    ordered = xp.partition(z, m.classes - 2, axis=2)
    top, gap = ordered[..., -1], (ordered[..., -1] - ordered[..., -2]).astype(np.float64)
    e = xp.exp(z - top[..., None])
    total = e.sum(axis=2)
    labelled = z[xp.arange(z.shape[0]), :, y]
    loss = (xp.log(total) - (labelled - top)).astype(np.float64)
    tol = 2 * err + m.u(m.classes + 4) * (1 + loss) + 2 * rounding(summed) * loss
    close = gap <= 2 * err + rounding(2, m.computed) * xp.abs(top).astype(np.float64)
    right = xp.argmax(z, axis=2) == y[:, None]
    table = xp.stack([loss, tol, right.astype(np.float64), close.astype(np.float64)], axis=2)
    return table, e / total[..., None]


def _linear(m: Model, xp, x, y, w, gradient, summed: int) -> tuple:
    d, k = m.features, m.classes
    w = w.reshape(-1, d + 1, k)
    sets = w.shape[0]
    columns = np.moveaxis(w[:, :-1], 0, 1).reshape(d, sets * k).astype(m.computed)
    xc = x.astype(m.computed, copy=False)
    z = (xc @ xp.asarray(columns) + xp.asarray(w[:, -1].reshape(-1).astype(m.computed)))
    z = z.reshape(-1, sets, k)
    norm2 = xp.einsum("ij,ij->i", xc, xc).astype(np.float64) * (1 + m.u(d))
    column = np.sqrt((w[:, :-1] ** 2).sum(axis=1)).max(axis=1)
    err = m.u(d + 1) * (xp.sqrt(norm2)[:, None] * xp.asarray(column)
                        + xp.asarray(np.abs(w[:, -1]).max(axis=1)))
    table, p = _softmax(m, xp, z, y, err, summed)
    # the run's sums of a cell in its dtype, this one's of the slab, both's float64 sums
    over = (rounding(min(m.cell, summed), m.dtype) + rounding(x.shape[0], m.computed)
            + 2 * rounding(summed))
    # sum_i |x_ij| spread_ik, bounded by Cauchy-Schwarz: no product with |x| (each step's)
    if gradient:
        size = xp.sqrt(xp.einsum("ij,ij->j", xc, xc).astype(np.float64) * (1 + m.u(len(y))))
    found = []
    for s in gradient:
        g = p[:, s].copy()
        g[xp.arange(g.shape[0]), y] -= 1
        spread = over * xp.abs(g) + p[:, s] * (2 * err[:, s, None] + m.u(k + 3))
        bound = size[:, None] * xp.sqrt((spread * spread).sum(axis=0))
        found.append((_flat(xp, xc.T @ g, g.sum(axis=0)), _flat(xp, bound, spread.sum(axis=0))))
    return table, found, norm2


def _flat(xp, first, last) -> np.ndarray:
    """``first`` (rows, columns) over ``last`` (columns), flat on the host in float64."""
    return np.asarray(to_host(xp.concatenate([first, last[None]])), dtype=np.float64).ravel()


def _hidden(m: Model, xp, x, y, flat, gradient: bool, summed: int) -> tuple:
    """One set of a hidden-layer model's weights, in float64."""
    d, k = m.features, m.classes
    first, second = (xp.asarray(np.ascontiguousarray(w)) for w in shared.unpacked(flat, d, k))
    a1, b1, a2, b2 = first[:-1], first[-1], second[:-1], second[-1]
    x = x.astype(m.computed, copy=False)  # float64 but over many rows (the first product)
    norm2 = xp.einsum("ij,ij->i", x, x).astype(np.float64) * (1 + m.u(d))
    h = (x @ a1.astype(m.computed) + b1.astype(m.computed)).astype(np.float64)
    err_h = (m.u(d + 1) * (xp.sqrt(norm2)[:, None] * xp.sqrt((a1 * a1).sum(axis=0))[None]
                           + xp.abs(b1)) + m.u(1) * xp.abs(h))
    active = xp.maximum(h, 0)
    z = active @ a2 + b2
    err_z = (err_h @ xp.abs(a2) + m.u(a1.shape[1] + 1) * ((active + err_h) @ xp.abs(a2)
                                                        + xp.abs(b2)) + m.u(1) * xp.abs(z))
    worst = err_z.max(axis=1)
    table, p = _softmax(m, xp, z[:, None], y, worst[:, None], summed)
    if not gradient:
        return table, None, norm2
    p = p[:, 0]
    dz = p.copy()
    dz[xp.arange(dz.shape[0]), y] -= 1
    err_dz = p * (2 * worst[:, None] + m.u(k + 3))
    over = rounding(min(m.cell, summed), m.dtype) + 2 * rounding(summed)
    back = dz @ a2.T
    err_back = (err_dz @ xp.abs(a2.T) + m.u(k) * (xp.abs(dz) @ xp.abs(a2.T))
                + m.u(1) * xp.abs(back))
    unsure = xp.abs(h) <= err_h  # the run's ReLU may have gone either way
    dh = back * (h > 0)
    err_dh = xp.where(unsure, xp.abs(back) + err_back, err_back * (h > 0)) + over * xp.abs(dh)
    err_dz = err_dz + over * xp.abs(dz)
    gradient = np.concatenate([_flat(xp, x.T @ dh, dh.sum(axis=0)),
                               _flat(xp, active.T @ dz, dz.sum(axis=0))])
    tol = np.concatenate([
        _flat(xp, xp.abs(x).T @ err_dh, err_dh.sum(axis=0)),
        _flat(xp, err_h.T @ xp.abs(dz) + (active + err_h).T @ err_dz, err_dz.sum(axis=0))])
    return table, (gradient, tol), norm2


def sweep(xp, x, y, m: Model, weights, gradient=()) -> tuple:
    """Per cell and set the table's sums; the gradients; the rows' norms, squares and count."""
    step = m.cell * max(1, SLAB_ROWS // m.cell)
    weights = np.asarray(weights, dtype=np.float64)
    cells, sums = [np.zeros((0, len(weights), 4))], np.zeros(3)
    gradients = [(np.zeros(weights[0].size), np.zeros(weights[0].size)) for _ in gradient]
    for first in range(0, x.shape[0], step):
        table, found, norm2 = m.evaluate(xp, x[first:first + step], y[first:first + step],
                                         weights, gradient, x.shape[0])
        cells.append(to_host(sums_by_cell(table, m.cell, xp)))
        gradients = [(a + c, b + d) for (a, b), (c, d) in zip(gradients, found, strict=True)]
        sums += [float(xp.sqrt(norm2).sum()), float(norm2.sum()), norm2.shape[0]]
    return np.concatenate(cells), gradients, sums


# --------------------------------------------------------------------------- the data


def teacher(seed: int, features: int, classes: int) -> np.ndarray:
    """The teacher's float64 weights ``(features + 1, classes)``, drawn again."""
    scale = shared.TEACHER_SHARPNESS / np.sqrt(features + 1)
    return replay.stream(seed, shared.TEACHER).standard_normal((features + 1, classes)) * scale


def drawn(xp, seed: int, part: int, index: int, rows: int, features: int, classes: int,
          dtype: str, library: str) -> tuple:
    """A teacher's shard drawn again: features, and labels its Gumbel draw gives."""
    rng = replay.stream(seed, part, index, library=library)
    x = rng.standard_normal((rows, features), dtype=dtype)
    gumbel = -xp.log(-xp.log(rng.random((rows, classes), dtype=np.float64)))
    weights = xp.asarray(teacher(seed, features, classes))
    y = xp.zeros(rows, dtype=np.int64)
    for first in range(0, rows, SLAB_ROWS):
        truth = x[first:first + SLAB_ROWS].astype(np.float64) @ weights[:-1] + weights[-1]
        y[first:first + SLAB_ROWS] = xp.argmax(truth + gumbel[first:first + SLAB_ROWS], axis=1)
    return x, y


def teacher_best(xp, x, y, seed: int, classes: int) -> np.ndarray:
    """The teacher's expected right answers on the rows, their allowance, rows it labels right."""
    drawn_again = teacher(seed, x.shape[1], classes)
    weights = xp.asarray(drawn_again)
    size = float(np.sqrt((drawn_again[:-1] ** 2).sum(axis=0)).max())
    bias = float(np.abs(drawn_again[-1]).max())
    best = np.zeros(3)
    for first in range(0, x.shape[0], SLAB_ROWS):
        xs = x[first:first + SLAB_ROWS].astype(np.float64)
        z = xs @ weights[:-1] + weights[-1]
        top = 1.0 / xp.exp(z - z.max(axis=1, keepdims=True)).sum(axis=1)
        # both computations' logits within err; the largest probability moves by 2 max|dz|
        err = 2 * rounding(x.shape[1] + 1) * (xp.sqrt((xs * xs).sum(axis=1)) * size + bias)
        best += [float(top.sum()), float((top * (2 * err + 2 * rounding(classes + 4))).sum()),
                 float((xp.argmax(z, axis=1) == y[first:first + SLAB_ROWS]).sum())]
    best[1] += 2 * rounding(x.shape[0]) * best[0]
    return best


def held_out(seed: int, rows: int, count: int) -> np.ndarray:
    """The documented held-out rows of an input: ``count`` of ``rows``, seeded, sorted."""
    return np.sort(replay.stream(seed, shared.HELD_OUT).choice(rows, size=count, replace=False))


def training_rows(first: int, count: int, test: np.ndarray) -> np.ndarray:
    """File rows of training rows ``first .. first + count - 1`` (the rest, in file order)."""
    window = np.arange(first, first + count + len(test))  # holds them: at most all held out
    kept = window[~np.isin(window, test)]
    position = first - np.count_nonzero(test < first)  # training rows before the window
    return kept[first - position:first - position + count]


def test_rows(test: np.ndarray, firsts: list[int], rows: int) -> list[np.ndarray]:
    """File rows of each training shard's held-out rows, in file order.

    Those from its first training row's file row (the first shard's: 0) to the next shard's.
    """
    starts = [0] + [int(training_rows(f, 1, test)[0]) for f in firsts[1:]]
    stops = [*starts[1:], rows]
    return [test[(test >= a) & (test < b)] for a, b in zip(starts, stops, strict=True)]


def input_words(source: shared.InputFiles) -> str:
    """Where an input's rows are read again, in words: files, arrays in memory, or both."""
    kinds = {source.features_kind, source.labels_kind}
    return ("the input's files" if "memory" not in kinds else "the arrays in memory"
            if kinds == {"memory"} else "the input's file and array in memory")


def rows_again(source: shared.InputFiles, rows: np.ndarray, dtype: str) -> tuple:
    """Features and labels of the input's ``rows`` (sorted), read again apart from the run.

    Lazily (:func:`daskgpu.verification.replay.region`): a file with its own reader where the
    task runs, an array in memory from the object (a Dask array: its own graph, sliced).
    """
    return (replay.region(source.features, (rows,), dtype),
            replay.region(source.labels, (rows,), np.int64))


@functools.lru_cache(maxsize=2)
def epoch_order(seed: int, epoch: int, samples: int) -> np.ndarray:
    """Epoch ``epoch``'s ordering of the training rows, drawn again (do not write to it)."""
    return replay.stream(seed, shared.EPOCH, epoch).permutation(samples)


def step_rows(seed: int, step: int, batch: tuple, rows: int) -> tuple[np.ndarray, float]:
    """A shard's rows (of ``rows``) that step ``step`` read, drawn again, and their scale.

    ``batch``: ``(shard, size, samples, first row, steps an epoch or None)``. A seeded sample
    of its share of the batch, scaled by its rows over those; or its rows at the step's
    positions of its epoch's ordering (maybe none), scaled by the training rows over the step's.
    """
    index, size, samples, first, per_epoch = batch
    if per_epoch is None:
        count = shared.batch_rows(size, rows, samples)
        rng = replay.stream(seed, shared.BATCH, step, index)
        return np.sort(rng.choice(rows, size=count, replace=False)), rows / count
    epoch, j = divmod(step, per_epoch)
    order = epoch_order(seed, epoch, samples)[j * size:(j + 1) * size]
    return np.sort(order[(order >= first) & (order < first + rows)]) - first, samples / len(order)


@functools.lru_cache(maxsize=4)
def _epoch_sizes(seed: int, epochs: int, size: int, samples: int, sizes: tuple) -> np.ndarray:
    per_epoch = -(-samples // size)
    owner = np.searchsorted(np.cumsum(sizes), np.arange(samples), side="right")
    found = []
    for epoch in range(epochs):  # position p of the ordering: step p // size, the row's shard
        cell = (np.arange(samples) // size) * len(sizes) + owner[epoch_order(seed, epoch, samples)]
        found.append(np.bincount(cell, minlength=per_epoch * len(sizes)).reshape(per_epoch, -1))
    return np.concatenate(found)


def step_geometry(ctx: shared.TrainContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step and training shard (arrays): the rows read, their scale, the pass's cells."""
    if ctx.in_epochs:
        sizes = _epoch_sizes(ctx.seed, ctx.epochs, ctx.batch, ctx.samples, ctx.train_sizes)
        scales = np.repeat(ctx.samples / sizes.sum(axis=1, keepdims=True), sizes.shape[1], 1)
    else:
        sizes, scales = (np.tile(a, (ctx.steps, 1)) for a in (ctx.read_sizes, ctx.scales))
    return sizes, scales, -(-sizes // ctx.cell)


def batch_of(ctx: shared.TrainContext, index: int) -> tuple | None:
    """What :func:`step_rows` needs of training shard ``index`` (None: all rows, every step)."""
    if ctx.batch is None:
        return None
    return (index, ctx.batch, ctx.samples, sum(ctx.train_sizes[:index]),
            -(-ctx.samples // ctx.batch) if ctx.in_epochs else None)


def probes(seed: int, features: int, classes: int, hidden: int | None,
           parameters: int) -> np.ndarray:
    """The run's documented probes, flat ``(PROBES, parameters)``.

    Softmax regression's ``r s^T`` of its ``(r, s)``; a hidden-layer model's drawn as they are.
    """
    rng, count = replay.stream(seed, shared.PROBE), shared.PROBES
    if hidden is not None:
        return rng.standard_normal((count, parameters))
    r = rng.standard_normal((count, features + 1))
    return np.einsum("mj,mk->mjk", r, rng.standard_normal((count, classes))).reshape(count, -1)


def cells_differ(reported: dict, got: np.ndarray, label, how: str = "") -> str | None:
    """Where reported cells' losses or right answers first differ from the table ``got``."""
    return differences(
        reported["loss"], got[:, LOSS], tolerance=got[:, LOSS_TOL], what="cell", label=label,
        reported_as="loss {} reported", expected_as="{} recomputed" + how) or differences(
        reported["right"], got[:, RIGHT], tolerance=got[:, CLOSE], what="cell", label=label,
        reported_as="{} right reported", expected_as="{} recounted" + how)


def entry(i: int, shape) -> str:
    """Where flat entry ``i`` of weights of ``shape`` lies: ``"3, 1"``, or ``"12"``."""
    return ", ".join(str(int(j)) for j in np.unravel_index(i, shape))


def batch_words(ctx: shared.TrainContext) -> str:
    """The rows a step reads, in words."""
    if ctx.batch is None:
        return f"all {ctx.samples} rows"
    if ctx.in_epochs:
        return (f"{ctx.epochs} epoch{'s' * (ctx.epochs > 1)} of {-(-ctx.samples // ctx.batch)} "
                f"mini-batches of up to {ctx.batch} rows, every row once an epoch")
    return f"mini-batches of {sum(ctx.read_sizes)} rows"


# --------------------------------------------------------------------------- the tasks


def model_of(ctx: shared.TrainContext) -> Model:
    """The run's model, as the check evaluates it."""
    return Model(ctx.features, ctx.classes, ctx.hidden, ctx.dtype, ctx.cell)


@dataclass
class Again:
    """What a depth recomputed, for the steps that compare it with what the run reports.

    Totals by pass and the test pass's; steps' gradients and allowances (full); labels' counts;
    a teacher's best (expected right, allowance, rows it labels right); :func:`sweep`'s row
    sums; an input's Gram matrix (full); each task's findings (fast).
    """

    passes: dict
    gradients: dict
    test: np.ndarray
    best: np.ndarray
    labels: np.ndarray
    sums: np.ndarray
    gram: np.ndarray | None = None
    shards: list = field(default_factory=list)
    tests: list = field(default_factory=list)


@dataclass(frozen=True)
class Job:
    """What one task recomputes on one shard (kept on its worker, or drawn or read again).

    ``final``: the final weights on all the shard's rows. ``sampled``: ``(step, cell, rows)``
    of cells recomputed in float64 at ``weights[step]`` (``rows``: the step's, None for all).
    ``redraw``: ``(part, index)`` of a generated shard of ``rows``; an input's rows arrive
    beside the job (:func:`rows_again`); ``reread``: ``(first kept row, rows)`` compared with
    the input's rows.
    ``everything``: every step's weights, every step replayed (full); ``weights``: the sampled
    cells' steps' weights, once each; ``batch``: mini-batches, as :func:`step_rows` takes it.
    """

    model: Model
    library: str
    seed: int
    final: np.ndarray
    sampled: tuple = ()
    weights: dict = field(default_factory=dict)
    redraw: tuple | None = None
    reread: tuple = ()
    rows: int = 0
    everything: np.ndarray | None = None
    batch: tuple | None = None
    gram: str | None = None


def kept_training(shard: dict, job: Job, again=()) -> dict:
    """The fast check's work on a kept training shard: the final pass, the sampled cells.

    Each sampled cell's table, probes and their allowance, gradient and its allowance.
    """
    xp = importlib.import_module(job.library)
    x, y, m = shard["x"], shard["y"], job.model
    cells, _, sums = sweep(xp, x, y, m.over_many_rows(), [job.final])
    out = {"cells": cells[:, 0], "sums": sums, "sampled": [],
           "data": kept_data(xp, x, y, job, again)}
    along = probes(job.seed, m.features, m.classes, m.hidden, job.final.size)
    for t, c, rows in job.sampled:
        xr, yr = (x, y) if rows is None else (x[xp.asarray(rows)], y[xp.asarray(rows)])
        part = slice(c * m.cell, (c + 1) * m.cell)
        table, ((g, tol),), _ = m.evaluate(xp, xr[part], yr[part], job.weights[t][None], (0,))
        out["sampled"].append((t, c, to_host(table.sum(axis=0)[0]), along @ g, np.abs(along)
                               @ (tol + 2 * rounding(g.size) * np.abs(g)), g, tol))
    return out


def kept_test(shard: dict, job: Job, again=()) -> dict:
    """The fast check's work on a kept test shard: the final weights cell by cell; a teacher's."""
    xp = importlib.import_module(job.library)
    x, y = shard["x"], shard["y"]
    return {"cells": sweep(xp, x, y, job.model.over_many_rows(), [job.final])[0][:, 0],
            "data": kept_data(xp, x, y, job, again), **_test_facts(xp, x, y, job)}


def _test_facts(xp, x, y, job: Job) -> dict:
    labels = to_host(xp.bincount(y.astype(np.int64), minlength=job.model.classes))
    best = (teacher_best(xp, x, y, job.seed, job.model.classes) if job.redraw is not None
            else np.zeros(3))
    return {"labels": np.asarray(labels, dtype=np.float64), "best": best}


def kept_data(xp, x, y, job: Job, again=()) -> tuple[int, int]:
    """Rows compared with their source, and the first kept row that differs (or -1).

    A generated shard's first cell drawn again (NumPy's generator draws in order: a later row
    cannot be drawn alone); an input's cells ``job.reread``, read again as ``again``.
    """
    if job.redraw is not None and job.library == "numpy":
        count = min(job.model.cell, x.shape[0])
        again = replay.stream(job.seed, *job.redraw).standard_normal(
            (count, x.shape[1]), dtype=job.model.dtype)
        same = (to_host(x[:count]) == again).all(axis=1)
        return count, -1 if same.all() else int(np.argmin(same))
    compared, differ = 0, -1
    for (first, rows), (xf, yf) in zip(job.reread, again, strict=True):
        xf, yf = xp.asarray(xf), xp.asarray(yf)
        kept_x, kept_y = x[first:first + len(rows)], y[first:first + len(rows)]
        if kept_x.shape[0] != len(rows):  # another split of the file
            return compared, first
        same = to_host((kept_x == xf).all(axis=1) & (kept_y.astype(np.int64) == yf))
        compared += len(same)
        if differ < 0 and not same.all():
            differ = first + int(np.argmin(same))
    return compared, differ


def replayed(job: Job, again=None) -> dict:
    """The full check's work on a shard drawn or read again (``again``): steps, or test rows."""
    xp = importlib.import_module(job.library)
    m = job.model
    if job.redraw is not None:
        x, y = drawn(xp, job.seed, *job.redraw, job.rows, m.features, m.classes, m.dtype,
                     job.library)
    else:
        x, y = (xp.asarray(a) for a in again)
    if job.everything is None:  # test rows
        return {"passes": sweep(xp, x, y, m, [job.final])[0].sum(axis=0),
                **_test_facts(xp, x, y, job)}
    steps = len(job.everything) - 1
    if job.batch is None:
        cells, gradients, sums = sweep(xp, x, y, m, job.everything, range(steps))
        passes = cells.sum(axis=0)
    else:
        passes, gradients = np.zeros((steps + 1, 4)), []
        for t in range(steps):
            rows, scale = step_rows(job.seed, t, job.batch, x.shape[0])
            rows = xp.asarray(rows)
            cells, found, _ = sweep(xp, x[rows], y[rows], m, job.everything[t:t + 1], (0,))
            passes[t] = cells.sum(axis=0)[0] * [scale, scale, 1, 1]
            gradients.append(np.array(found[0]) * scale)
        cells, _, sums = sweep(xp, x, y, m, job.everything[-1:])
        passes[-1] = cells.sum(axis=0)[0]
    out = {"passes": passes, "gradients": np.array(gradients), "sums": sums}
    if job.gram is not None:
        out["gram"] = gram(xp, x, job.gram == "full")
    return out


def gram(xp, x, full: bool) -> np.ndarray:
    """``A^T A`` of the rows with a column of ones (``full``), or its trace (float64)."""
    d = x.shape[1]
    total = np.zeros((d + 1, d + 1) if full else 1)
    for first in range(0, x.shape[0], SLAB_ROWS):
        a = x[first:first + SLAB_ROWS].astype(np.float64)
        a = xp.concatenate([a, xp.ones((a.shape[0], 1))], axis=1)
        total += to_host(a.T @ a) if full else float((a * a).sum())
    return total
