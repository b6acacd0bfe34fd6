"""The worker side of train-pipeline's check: rows drawn or read again, totals in float64.

:func:`shard_totals` redraws one shard from the documented per-shard seeds (teacher data), or
reads it from the input files with NumPy's and Zarr's own readers, picks the rows of each
step's mini-batch from the documented draws, and totals in float64 what
:mod:`pipelines.train.check` compares. It shares no code with the run: it takes from
:mod:`pipelines.train.shared` only the scheme's constants and geometry.

Rounding bounds follow Higham and Mary's probabilistic analysis (SIAM J. Sci. Comput., 2019):
a sum of ``n`` products computed in precision ``u`` errs by at most ``LAMBDA * sqrt(n) * u``
times the sum of the products' magnitudes, but with probability ``2 n exp(-LAMBDA^2 / 2)``.
"""

from __future__ import annotations

import functools
import importlib
import math

import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.numeric import generator
from pipelines.train import check_hidden
from pipelines.train.shared import BATCH, HELD_OUT, TEACHER, TEACHER_SHARPNESS, batch_rows

LAMBDA = 9.0
SLAB = 16_384  # rows recomputed at once in float64


def unit(dtype: str) -> float:
    """The run's unit roundoff plus this replay's own (float64)."""
    return float(np.finfo(dtype).eps + np.finfo(np.float64).eps) / 2


def _generator(library: str, seed: int, part: int, index: int):
    return generator(library, np.random.SeedSequence(seed, spawn_key=(part, index)))


def _teacher(seed: int, features: int, classes: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(TEACHER,)))
    return rng.standard_normal((features + 1, classes)) * (TEACHER_SHARPNESS
                                                            / math.sqrt(features + 1))


def _drawn(xp, seed: int, part: int, index: int, rows: int, features: int, classes: int,
           dtype: str, library: str):
    """A teacher shard's features and labels, drawn again; its teacher's best sum."""
    rng = _generator(library, seed, part, index)
    x = rng.standard_normal((rows, features), dtype=dtype)
    u = rng.random((rows, classes), dtype=np.float64)
    teacher = xp.asarray(_teacher(seed, features, classes))
    y = xp.zeros(rows, dtype=np.int64)
    best = 0.0
    for start in range(0, rows, SLAB):
        truth = x[start:start + SLAB].astype(np.float64) @ teacher[:-1] + teacher[-1]
        y[start:start + SLAB] = xp.argmax(truth - xp.log(-xp.log(u[start:start + SLAB])),
                                          axis=1)
        peak = truth.max(axis=1, keepdims=True)
        best += float((1.0 / xp.exp(truth - peak).sum(axis=1)).sum())
    return x, y, best


def held_out(seed: int, rows: int, count: int) -> np.ndarray:
    """The documented held-out rows of an input: ``count`` of ``rows``, seeded, sorted."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(HELD_OUT,)))
    return np.sort(rng.choice(rows, size=count, replace=False))


def _open(path: str, kind: str):
    if kind == "npy":
        return np.load(path, mmap_mode="r")  # never unpickles: allow_pickle stays False
    import zarr

    return zarr.open_array(path, mode="r")


def _training_rows(first: int, count: int, test: np.ndarray) -> np.ndarray:
    """File rows of training rows ``first .. first + count - 1`` (the rest, in file order)."""
    window = np.arange(first, first + count + len(test))  # holds them: at most all held out
    kept = window[~np.isin(window, test)]
    position = first - np.count_nonzero(test < first)  # training rows before the window
    return kept[first - position:first - position + count]


def _read(xp, source: dict, rows: np.ndarray, dtype: str):
    """Features and labels of the input's file ``rows`` (sorted, ascending)."""
    features = _open(source["features"], source["features_kind"])
    labels = _open(source["labels"], source["labels_kind"])
    if len(rows) and rows[-1] - rows[0] < 4 * len(rows):  # close together: read the span
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        x, y = np.asarray(features[lo:hi])[rows - lo], np.asarray(labels[lo:hi])[rows - lo]
    else:
        x, y = (np.asarray(a.oindex[rows] if hasattr(a, "oindex") else a[rows])
                for a in (features, labels))
    return xp.asarray(x.astype(dtype)), xp.asarray(y.astype(np.int64))


def totals(xp, x_all, y_all, weights, steps: list[int], dtype: str) -> dict:
    """Per weights: the loss sum and its allowance, right answers, rows too close to call.

    Per sampled step (an index into ``weights``): the gradient sum and its allowance. Device
    arrays.
    """
    count, features1, classes = weights.shape
    rows = x_all.shape[0]
    w = xp.asarray(weights, dtype=np.float64)
    flat = xp.moveaxis(w, 0, 1).reshape(features1, count * classes)  # every step's weights
    u = unit(dtype)
    dot = LAMBDA * math.sqrt(features1) * u  # one logit's relative rounding
    over_rows = LAMBDA * math.sqrt(max(rows, 1)) * u  # a gradient entry's, summed over rows
    adding = LAMBDA * math.sqrt(max(rows, 1)) * float(np.finfo(np.float64).eps)
    # per weights: the largest column norm and bias, bounding every logit's rounding
    column = xp.sqrt((w[:, :-1] ** 2).sum(axis=1)).max(axis=1)
    bias = xp.abs(w[:, -1]).max(axis=1)
    out = {name: xp.zeros(count) for name in ("loss", "loss_tol", "right", "close")}
    out["gradient"] = xp.zeros((len(steps), features1, classes))
    out["gradient_tol"] = xp.zeros((len(steps), features1, classes))
    for start in range(0, rows, SLAB):
        x = x_all[start:start + SLAB].astype(np.float64)
        y = y_all[start:start + SLAB]
        n = x.shape[0]
        z = (x @ flat[:-1] + flat[-1]).reshape(n, count, classes)
        shifted = z - z.max(axis=2, keepdims=True)
        logsum = xp.log(xp.exp(shifted).sum(axis=2))
        losses = logsum - xp.take_along_axis(shifted, y[:, None, None], axis=2)[..., 0]
        norms = xp.sqrt((x ** 2).sum(axis=1))
        err = dot * (norms[:, None] * column[None, :] + bias[None, :])  # |logit error| bound
        ordered = xp.sort(z, axis=2)
        gap = ordered[..., -1] - ordered[..., -2] if classes > 1 else xp.full_like(err, xp.inf)
        out["loss"] += losses.sum(axis=0)
        # each row's loss from rounded logits, and the float64 sum over the rows
        out["loss_tol"] += (2 * err + (classes + 4) * u * (1 + losses)
                            + adding * losses).sum(axis=0)
        out["right"] += (xp.argmax(z, axis=2) == y[:, None]).sum(axis=0)
        out["close"] += (gap <= 2 * err + 1e-12 * (1 + xp.abs(ordered[..., -1]))).sum(axis=0)
        for i, t in enumerate(steps):
            p = xp.exp(shifted[:, t] - logsum[:, t, None])
            g = p.copy()
            g[xp.arange(n), y] -= 1
            out["gradient"][i, :-1] += x.T @ g
            out["gradient"][i, -1] += g.sum(axis=0)
            spread = over_rows * xp.abs(g) + p * (2 * err[:, t, None] + (classes + 3) * u)
            out["gradient_tol"][i, :-1] += xp.abs(x).T @ spread
            out["gradient_tol"][i, -1] += spread.sum(axis=0)
    return out


def shard_totals(shard: dict, weights: np.ndarray, steps: list[int], batch: dict | None,
                 dtype: str, library: str) -> dict:
    """One shard's rows again, and :func:`totals` of each step's rows (runs on a worker).

    ``shard`` says where its rows come from: ``{"seed", "part", "index", "rows", "classes"}``
    for a teacher's shard, ``{"source", "rows"}`` (file rows) for an input's, or
    ``{"source", "seed", "first", "count"}`` for an input's training rows ``first ..``;
    with ``"gram"`` (``"full"`` or ``"trace"``) also ``A^T A`` of the rows (or its trace).
    ``weights`` are the run's reported weights at every step; ``steps`` those whose gradient
    is summed. Without ``batch`` every weights' totals are over all rows; with
    ``{"seed", "size", "samples", "index"}`` step ``t``'s are over its mini-batch rows (the
    loss and gradient scaled by the shard's rows over them), the last weights' over all.
    Returns host arrays, plus ``rows`` per weights, the count of each label and the
    teacher's best sum.
    """
    xp = importlib.import_module(library)
    if weights.ndim == 3:  # softmax regression: (count, features + 1, classes)
        count, features1, classes = weights.shape
        summing = totals
    else:  # a hidden layer: (count, parameters), flat
        count, features1, classes = weights.shape[0], shard["features"] + 1, shard["classes"]
        summing = functools.partial(_hidden_totals, classes=classes, cell=shard["cell"])
    best = 0.0
    if "part" in shard:
        x, y, best = _drawn(xp, shard["seed"], shard["part"], shard["index"], shard["rows"],
                            features1 - 1, classes, dtype, library)
    else:
        rows = shard.get("rows")
        if rows is None:
            source = shard["source"]
            test = held_out(shard["seed"], source["rows"], source["held_out"])
            rows = _training_rows(shard["first"], shard["count"], test)
        x, y = _read(xp, shard["source"], rows, dtype)
    if batch is None:
        out = summing(xp, x, y, weights, steps, dtype)
        out["rows"] = xp.full(count, float(x.shape[0]))
        if shard.get("gram"):
            out["gram"] = _gram(xp, x, shard["gram"] == "full")
    else:
        out = _batch_totals(xp, x, y, weights, steps, batch, dtype, summing)
    done = {k: to_host(v) for k, v in out.items()}
    done["labels"] = to_host(xp.bincount(y, minlength=classes)).astype(np.float64)
    done["best"] = best
    return done


def _gram(xp, x_all, full: bool):
    """``A^T A`` of the rows with a column of ones (``full``), or its trace (float64)."""
    n, d = x_all.shape
    gram = xp.zeros((d + 1, d + 1)) if full else xp.zeros(1)
    for start in range(0, n, SLAB):
        x = x_all[start:start + SLAB].astype(np.float64)
        if full:
            gram[:-1, :-1] += x.T @ x
            gram[-1, :-1] += x.sum(axis=0)
        else:
            gram[0] += (x ** 2).sum()
    if full:
        gram[:-1, -1] = gram[-1, :-1]
        gram[-1, -1] = n
    else:
        gram[0] += n
    return gram


def _hidden_totals(xp, x, y, weights, steps: list[int], dtype: str, classes: int,
                   cell: int) -> dict:
    """:func:`totals` of a hidden-layer model (:mod:`pipelines.train.check_hidden`)."""
    return check_hidden.totals(xp, x, y, weights, steps, unit(dtype), classes, cell, SLAB)


def _batch_totals(xp, x, y, weights, steps: list[int], batch: dict, dtype: str,
                  summing=totals) -> dict:
    count, shape = weights.shape[0], weights.shape[1:]
    n = x.shape[0]
    out = {name: xp.zeros(count) for name in ("loss", "loss_tol", "right", "close", "rows")}
    out["gradient"] = xp.zeros((len(steps), *shape))
    out["gradient_tol"] = xp.zeros((len(steps), *shape))
    for t in range(count - 1):
        spawn = (BATCH, t, batch["index"])
        rng = np.random.default_rng(np.random.SeedSequence(batch["seed"], spawn_key=spawn))
        size = batch_rows(batch["size"], n, batch["samples"])
        mine = xp.asarray(np.sort(rng.choice(n, size=size, replace=False)))
        sampled = [steps.index(t)] if t in steps else []
        part = summing(xp, x[mine], y[mine], weights[t:t + 1], [0] * len(sampled), dtype)
        scale = n / size
        for name in ("loss", "loss_tol"):
            out[name][t] = part[name][0] * scale
        for name in ("right", "close"):
            out[name][t] = part[name][0]
        out["rows"][t] = size
        for i in sampled:
            out["gradient"][i] = part["gradient"][0] * scale
            out["gradient_tol"][i] = part["gradient_tol"][0] * scale
    last = summing(xp, x, y, weights[-1:], [], dtype)
    for name in ("loss", "loss_tol", "right", "close"):
        out[name][-1] = last[name][0]
    out["rows"][-1] = n
    return out
