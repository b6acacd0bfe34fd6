"""The worker side of train-pipeline's fast check: the rows the run kept, read its own way.

The fast check (:mod:`pipelines.train.check_fast`) computes where the run's shards live, on
the features and labels the run kept on its workers, with its own code: per cell of rows
(:func:`pipelines.train.shared.cell_rows`) the loss sum, the right answers and the probed
gradient ``r^T G s`` at given weights, each with the rounding allowance a correct run stays
within, so that every cell the run reported can be compared. The rows go through one matrix
product with several weights and the probes: a whole pass in the data's dtype (the softmax
too, the sums in float64; the allowances count this rounding and the run's), the cells of a
seeded sample in float64.
It also redraws the first rows of a generated shard, or reads an input's rows again with
NumPy's or Zarr's own reader, to compare them with the rows kept. Only small host arrays
come back. It shares no code with the run.
"""

from __future__ import annotations

import importlib
import math

import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.numeric import generator
from pipelines.train import check_hidden
from pipelines.train.check_replay import (
    LAMBDA,
    _read,
    _teacher,
    _training_rows,
    held_out,
    unit,
)
from pipelines.train.shared import BATCH, PROBE, PROBES

SLAB_ROWS = 1_536  # rows of a whole pass computed at once (whole cells)
EPS64 = float(np.finfo(np.float64).eps)


def probes(seed: int, features: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The documented probes: ``r`` ``(PROBES, features + 1)`` and ``s`` ``(PROBES, classes)``."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PROBE,)))
    r = rng.standard_normal((PROBES, features + 1))
    return r, rng.standard_normal((PROBES, classes))


def pass_cells(xp, x, y, weights: np.ndarray, probed: int, r: np.ndarray, s: np.ndarray,
               cell: int, dtype: str, precise: bool = False) -> dict:
    """Every cell's sums at each of ``weights`` ``(sets, features + 1, classes)``.

    The logits come from one product of the rows with every set's weights and the probes'
    ``r``, so that the rows are read once: in the data's dtype, the softmax too (as the run
    computes it: the allowances count both roundings), or with ``precise`` in float64. The
    first ``probed`` sets also give each probe's ``r^T G s`` of the cell's gradient.

    Returns
    -------
    dict
        Host float64 arrays: ``loss``, ``loss_tol``, ``right``, ``close`` (sets, cells);
        ``probe``, ``probe_tol`` (probed sets, cells, probes); and over all rows ``norms``
        (the sum of the rows' Euclidean norms), ``lifted`` (of ``sqrt(|x|^2 + 1)``),
        ``squares`` (of ``|x|^2``) and ``rows``.
    """
    sets, features1, classes = weights.shape
    rows, u = x.shape[0], unit(dtype)
    mine = float(np.finfo(np.float64).eps) if precise else u  # this computation's rounding
    computed = np.float64 if precise else dtype
    w = np.asarray(weights, dtype=np.float64)
    columns = np.concatenate([np.moveaxis(w[:, :-1], 0, 1).reshape(features1 - 1, -1),
                              r[:, :-1].T], axis=1)
    product, bias = xp.asarray(columns.astype(computed)), xp.asarray(w[:, -1].astype(computed))
    sizes = _sizes(w)
    found: list[list] = [[] for _ in range(sets)]
    sums = {name: 0.0 for name in ("norms", "lifted", "squares")}
    step = cell * max(1, SLAB_ROWS // cell)
    for first in range(0, rows, step):
        xb = x[first:first + step].astype(computed, copy=False)
        yb = y[first:first + step].astype(np.int64)
        logits = xb @ product
        # |x|^2 summed, enlarged past its rounding: an upper bound
        norm2 = xp.einsum("ij,ij->i", xb, xb).astype(np.float64) * (1 + (features1 + 2) * mine)
        norm = xp.sqrt(norm2)
        sums["norms"] += float(norm.sum())
        sums["lifted"] += float(xp.sqrt(norm2 + 1).sum())
        sums["squares"] += float(norm2.sum())
        probing = (_probing(xp, xb, logits[:, sets * classes:], norm, r, s, cell, mine, precise)
                   if probed else None)
        for k in range(sets):
            logit = LAMBDA * math.sqrt(features1) * (norm * sizes[0][k] + sizes[1][k])
            z = logits[:, k * classes:(k + 1) * classes] + bias[k]
            values = row_values(xp, z, yb, u * logit, mine * logit, u,
                                probing if k < probed else None)
            found[k].append(per_cell(xp, values, cell))
    done = _tables(xp, found, probed, len(r))
    done.update(sums)
    done["rows"] = rows
    return done


def _probing(xp, xb, along, norm, r: np.ndarray, s: np.ndarray, cell: int, mine: float,
             precise: bool) -> tuple:
    """What :func:`row_values` probes the gradient with.

    Each row's ``x . r + r_bias`` per probe, a bound on ``sum |x_j r_j| + |r_bias|``, the
    first's rounding, the probes' ``s``, the cell.
    """
    lift = xp.asarray(np.abs(r[:, -1]))
    towards = along.astype(np.float64) + xp.asarray(r[:, -1])
    if precise:  # the bound itself
        reach = xp.abs(xb) @ xp.asarray(np.abs(r[:, :-1]).T) + lift
        dotted = (xb.shape[1] + 2) * mine * reach
    else:  # Cauchy-Schwarz's
        size = norm[:, None] * xp.asarray(np.sqrt((r[:, :-1] ** 2).sum(axis=1)))
        reach = size + lift
        dotted = (LAMBDA * math.sqrt(xb.shape[1] + 1) + 1) * mine * size
    return towards, reach, dotted, xp.asarray(s), cell


def _tables(xp, found: list, probed: int, probes: int) -> dict:
    """The per-cell tables of every weights set, as the host arrays :func:`pass_cells` gives."""
    out: dict = {}
    for k, parts in enumerate(found):
        table = to_host(xp.concatenate(parts)) if parts else np.zeros((0, 4 + 2 * probes))
        for i, name in enumerate(("loss", "loss_tol", "right", "close")):
            out.setdefault(name, []).append(table[:, i])
        if k < probed:
            out.setdefault("probe", []).append(table[:, 4:4 + probes])
            out.setdefault("probe_tol", []).append(table[:, 4 + probes:])
    return {name: np.stack(value) for name, value in out.items()}


def _sizes(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per weights set: its largest column norm (over the features) and largest bias."""
    return np.sqrt((w[:, :-1] ** 2).sum(axis=1)).max(axis=1), np.abs(w[:, -1]).max(axis=1)


def per_cell(xp, values, cell: int):
    """Sums of ``values`` (rows first) over each run of ``cell`` rows, the last one shorter."""
    rows = values.shape[0]
    cells = -(-rows // cell)
    if cells * cell != rows:
        values = xp.concatenate([values, xp.zeros((cells * cell - rows, *values.shape[1:]),
                                                  dtype=values.dtype)])
    return values.reshape(cells, cell, *values.shape[1:]).sum(axis=1)


def row_values(xp, z, y, err, mine, u: float, probing=None):
    """Per row: loss, its allowance, right, too close to call (and probes), float64 columns.

    ``z``: this computation's logits, each within ``mine`` of the exact ones (the run's
    within ``err``); its softmax rounds in ``z``'s dtype, the run's with unit roundoff
    ``u``. With ``probing`` ``(towards, reach, dotted, s, cell)`` (each row's ``x . r`` per
    probe, a bound on ``sum |x_j r_j|``, the error of ``towards``, the probes' ``s``, the
    rows the run sums in its dtype), also each probe's ``r^T G s`` of the row's gradient and
    its allowance: columns ``loss, loss_tol, right, close, probe..., probe_tol...``.
    """
    own = float(np.finfo(z.dtype).eps) / 2
    classes = z.shape[1]
    rows = xp.arange(z.shape[0])
    if classes > 1:  # the largest logit and the next: a rounding tie may go either way
        ordered = xp.partition(z, classes - 2, axis=1)
        top, gap = ordered[:, -1], (ordered[:, -1] - ordered[:, -2]).astype(np.float64)
    else:
        top, gap = z[:, 0], xp.full_like(err, xp.inf)
    labelled = z[rows, y]
    shifted = z - top[:, None]
    e = xp.exp(shifted)
    total = e.sum(axis=1)
    loss = (xp.log(total) - (labelled - top)).astype(np.float64)
    scale = xp.abs(top).astype(np.float64)
    close = gap <= 2 * (err + mine) + 4 * own * scale + 1e-12 * (1 + scale)
    tol = (2 * (err + mine) + (classes + 4) * (u + own) * (1 + loss)
           + LAMBDA * math.sqrt(z.shape[0]) * EPS64 * loss)
    # right: the label's logit is the largest (a tie, the run's argmax may differ: close)
    columns = [loss, tol, (labelled >= top).astype(np.float64), close.astype(np.float64)]
    if probing is not None:
        towards, reach, dotted, s, cell = probing
        p = e / total[:, None]
        at = p[rows, y]  # d loss / d logits is p less the one-hot label: no copy needed
        weight = (p @ xp.abs(s.T).astype(p.dtype)).astype(np.float64)  # (rows, probes)
        moved = (p @ s.T.astype(p.dtype)).astype(np.float64) - s.T[y]
        size = weight + (1 - 2 * at.astype(np.float64))[:, None] * xp.abs(s.T[y])
        summed = LAMBDA * math.sqrt(min(cell, z.shape[0])) * u  # a cell summed in its dtype
        allowed = (reach * ((summed + (classes + 2) * own) * size
                            + weight * (2 * (err + mine)[:, None]
                                        + (classes + 3) * (u + own)))
                   + xp.abs(moved) * dotted)
        columns += [towards * moved, allowed]
    return xp.concatenate([c.reshape(c.shape[0], -1) for c in columns], axis=1)


# --------------------------------------------------------------------------- the tasks


def _cells(xp, x, y, weights, probed: int, r, s, job: dict, precise: bool = False) -> dict:
    """:func:`pass_cells`, or a hidden-layer model's, always in float64.

    Flat weights ``(sets, parameters)``: :func:`pipelines.train.check_hidden.cells`.
    """
    if np.ndim(weights) == 2:
        return check_hidden.cells(xp, x, y, np.asarray(weights), probed, r, job["cell"],
                                  unit(job["dtype"]), job["classes"])
    return pass_cells(xp, x, y, weights, probed, r, s, job["cell"], job["dtype"], precise)


def batch_rows_drawn(seed: int, step: int, index: int, rows: int, size: int) -> np.ndarray:
    """The shard's rows of a step's mini-batch, drawn again: ``size`` of ``rows``, sorted."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(BATCH, step, index)))
    return np.sort(rng.choice(rows, size=size, replace=False))


def training_shard(shard: dict, job: dict) -> dict:
    """Everything the fast check recomputes on one training shard (runs on its worker).

    ``job``: ``library``, ``dtype``, ``cell``, ``probes`` ``(r, s)``; ``whole``: passes over
    all its rows (or ``rows`` of them), each ``(rows, weights, probed)``, :func:`pass_cells`
    in the data's dtype (the fast check passes the final weights); ``sampled``: ``(t, cell,
    rows)`` of cells recomputed in float64 at ``weights[t]`` (``rows``: the pass's rows of the
    shard, ``None`` for all); ``redraw``: the
    seed's ``(seed, part, index)`` to redraw the first cell's features from (NumPy only);
    ``reread``: where an input's rows are read again from, and the cells to read.
    """
    xp = importlib.import_module(job["library"])
    x, y = shard["x"], shard["y"]
    r, s = job["probes"]
    out = {"whole": [], "sampled": []}
    for rows, weights, probed in job["whole"]:
        xr, yr = (x, y) if rows is None else (x[xp.asarray(rows)], y[xp.asarray(rows)])
        out["whole"].append(_cells(xp, xr, yr, weights, probed, r, s, job))
    cell = job["cell"]
    for t, c, rows in job["sampled"]:
        xr, yr = (x, y) if rows is None else (x[xp.asarray(rows)], y[xp.asarray(rows)])
        got = _cells(xp, xr[c * cell:(c + 1) * cell], yr[c * cell:(c + 1) * cell],
                     np.asarray(job["weights"][t])[None], 1, r, s, job, precise=True)
        out["sampled"].append((t, c, {key: got[key][0][0] for key in (
            "loss", "loss_tol", "right", "close", "probe", "probe_tol")}))
    out["data"] = kept_data(xp, x, y, job)
    return out


def test_shard(shard: dict, job: dict) -> dict:
    """The test pass recomputed on one test shard, and what a teacher says of its rows.

    ``job`` as for :func:`training_shard` (``whole``: the final weights), with ``teacher``
    ``(seed, features, classes)`` for generated data: then also the teacher's ``best`` (its
    expected right answers, float64), the rows it labels right (``teacher_right``) and the
    count of each label.
    """
    xp = importlib.import_module(job["library"])
    x, y = shard["x"], shard["y"]
    r, s = job["probes"]
    (_rows, weights, _probed), = job["whole"]
    out = {"whole": [_cells(xp, x, y, weights, 0, r, s, job)]}
    if job.get("teacher") is not None:
        teacher = xp.asarray(_teacher(*job["teacher"]))
        best = right = 0.0
        for first in range(0, x.shape[0], SLAB_ROWS):
            z = x[first:first + SLAB_ROWS].astype(np.float64) @ teacher[:-1] + teacher[-1]
            shifted = z - z.max(axis=1, keepdims=True)
            best += float((1.0 / xp.exp(shifted).sum(axis=1)).sum())
            right += float((xp.argmax(z, axis=1) == y[first:first + SLAB_ROWS]).sum())
        out["best"], out["teacher_right"] = best, right
    out["labels"] = to_host(xp.bincount(y.astype(np.int64), minlength=job["classes"]))
    out["data"] = kept_data(xp, x, y, job)
    return out


def kept_data(xp, x, y, job: dict) -> dict:
    """The kept rows against the data's source: ``{"compared": rows, "differ": first}``.

    Generated rows (NumPy's generator): the first cell's features drawn again from the
    shard's seed (a generator draws in order; a later row cannot be drawn alone). Input
    rows: the cells ``job["reread"]["cells"]`` read again from the files, features and
    labels. ``differ`` is the first kept row (of the shard) that differs, or -1.
    """
    if job.get("redraw") is not None and job["library"] == "numpy":
        seed, part, index = job["redraw"]
        rng = generator("numpy", np.random.SeedSequence(seed, spawn_key=(part, index)))
        count = min(job["cell"], x.shape[0])
        drawn = rng.standard_normal((count, x.shape[1]), dtype=job["dtype"])
        same = (to_host(x[:count]) == drawn).all(axis=1)
        return {"compared": count, "differ": int(np.argmin(same)) if not same.all() else -1}
    reread = job.get("reread")
    if reread is None:
        return {"compared": 0, "differ": -1}
    compared, differ = 0, -1
    cell = job["cell"]
    every = reread.get("file_rows")
    if every is None:  # a training shard: its training rows' file rows
        every = input_file_rows(reread["source"], reread["seed"], reread["first"],
                                reread["count"])
    if len(every) != x.shape[0]:  # another split of the file: the first row already differs
        return {"compared": 0, "differ": 0}
    for c in reread["cells"]:
        file_rows = every[c * cell:(c + 1) * cell]
        xf, yf = _read(xp, reread["source"], file_rows, job["dtype"])
        kept_x, kept_y = x[c * cell:(c + 1) * cell], y[c * cell:(c + 1) * cell]
        same = to_host((kept_x == xf).all(axis=1) & (kept_y.astype(np.int64) == yf))
        compared += len(same)
        if differ < 0 and not same.all():
            differ = c * cell + int(np.argmin(same))
    return {"compared": compared, "differ": differ}


def input_file_rows(source: dict, seed: int, first: int, count: int) -> np.ndarray:
    """File rows of an input's training rows ``first .. first + count - 1``."""
    test = held_out(seed, source["rows"], source["held_out"])
    return _training_rows(first, count, test)


def input_test_rows(source: dict, seed: int, firsts: list[int], samples: int) -> list:
    """File rows of each training shard's held-out rows (those within its range of the file).

    Shard ``s`` reads the file from its first training row's file row (the first: from 0)
    up to the next shard's; the held-out rows there are its test rows, in file order.
    """
    test = held_out(seed, source["rows"], source["held_out"])
    starts = [0] + [int(_training_rows(f, 1, test)[0]) for f in firsts[1:]]
    stops = [*starts[1:], source["rows"]]
    return [test[(test >= a) & (test < b)] for a, b in zip(starts, stops, strict=True)]
