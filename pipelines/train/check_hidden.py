"""The check's own float64 evaluation of the hidden-layer model, with rounding allowances.

Both depths of :mod:`pipelines.train.check` recompute ``relu(x W1 + b1) W2 + b2``, its
cross-entropy and its gradient here, in float64, from the documented flat layout
(:func:`pipelines.train.shared.unpacked`) and nothing of the run's code.

Allowances bound what the run, computing in its dtype with unit roundoff ``u``, may differ
by, entry by entry, following the errors through the layers (Higham and Mary's probabilistic
bound ``LAMBDA * sqrt(k) * u`` for a sum of ``k`` products, as the linear model's check):

- hidden pre-activations ``h``: ``LAMBDA sqrt(d + 1) u (|x| |w1_j| + |b1_j|)``, the dot
  bounded by Cauchy-Schwarz; ReLU moves no error up, so ``relu(h)`` errs as much;
- logits: that error through ``|W2|``, plus their own products' rounding;
- softmax outputs ``p``: ``p (2 max|dz| + (classes + 3) u)``;
- the gradient: each product's operands' errors times the other's magnitude, plus the
  rounding of sums over a cell's rows in the run's dtype; where a hidden unit is within its
  error of zero the run's ReLU may have gone either way, and its whole back-propagated
  value is allowed.
"""

from __future__ import annotations

import math

import numpy as np

from daskgpu.toolkit.backends import to_host
from pipelines.train.shared import PROBE, PROBES, unpacked

LAMBDA = 9.0
EPS64 = float(np.finfo(np.float64).eps)
COLUMNS = ("loss", "loss_tol", "right", "close")


def probes(seed: int, parameters: int) -> np.ndarray:
    """The documented probes of a hidden-layer model's cells: ``(PROBES, parameters)``."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PROBE,)))
    return rng.standard_normal((PROBES, parameters))


def evaluate(xp, x, y, flat: np.ndarray, classes: int, u: float, cell: int,
             gradient: bool) -> dict:
    """Per row: loss, its allowance, right, too close to call (float64 device arrays).

    With ``gradient`` also the rows' flat gradient sum and its allowance (``cell``: the rows
    the run sums in its dtype).
    """
    rows, features = x.shape
    first, second = (xp.asarray(np.asarray(w, dtype=np.float64))
                     for w in unpacked(np.asarray(flat, dtype=np.float64), features, classes))
    a1, b1, a2, b2 = first[:-1], first[-1], second[:-1], second[-1]
    hidden = a1.shape[1]
    x = x.astype(np.float64)
    labels = y.astype(np.int64)
    index = xp.arange(rows)
    norms = xp.sqrt((x * x).sum(axis=1))
    h = x @ a1 + b1
    err_h = (LAMBDA * math.sqrt(features + 1) * u
             * (norms[:, None] * xp.sqrt((a1 * a1).sum(axis=0))[None] + xp.abs(b1))
             + u * xp.abs(h))
    active = xp.maximum(h, 0)
    z = active @ a2 + b2
    err_z = (err_h @ xp.abs(a2)
             + LAMBDA * math.sqrt(hidden + 1) * u * ((active + err_h) @ xp.abs(a2) + xp.abs(b2))
             + u * xp.abs(z))
    worst = err_z.max(axis=1)
    top = z.max(axis=1)
    shifted = z - top[:, None]
    e = xp.exp(shifted)
    total = e.sum(axis=1)
    loss = xp.log(total) - shifted[index, labels]
    ordered = xp.sort(z, axis=1)
    gap = ordered[:, -1] - ordered[:, -2]
    out = {"loss": loss,
           "loss_tol": (2 * worst + (classes + 4) * u * (1 + loss)
                        + LAMBDA * math.sqrt(rows) * EPS64 * loss),
           "right": (xp.argmax(z, axis=1) == labels).astype(np.float64),
           "close": (gap <= 2 * worst + 1e-12 * (1 + xp.abs(top))).astype(np.float64)}
    if not gradient:
        return out
    p = e / total[:, None]
    dz = p.copy()
    dz[index, labels] -= 1
    err_dz = p * (2 * worst[:, None] + (classes + 3) * u)
    summed = LAMBDA * math.sqrt(max(1, min(cell, rows))) * u + LAMBDA * math.sqrt(rows) * EPS64
    back = dz @ a2.T
    err_back = (err_dz @ xp.abs(a2.T) + LAMBDA * math.sqrt(classes) * u * (xp.abs(dz)
                                                                              @ xp.abs(a2.T))
                + u * xp.abs(back))
    unsure = xp.abs(h) <= err_h  # the run's ReLU may have gone either way
    dh = back * (h > 0)
    err_dh = xp.where(unsure, xp.abs(back) + err_back, err_back * (h > 0))
    ax = xp.abs(x)
    g1, g2 = x.T @ dh, active.T @ dz
    tol1 = ax.T @ err_dh + summed * (ax.T @ xp.abs(dh))
    tol2 = (err_h.T @ xp.abs(dz) + (active + err_h).T @ err_dz
            + summed * (active.T @ xp.abs(dz)))
    out["gradient"] = xp.concatenate([
        xp.concatenate([g1, dh.sum(axis=0)[None]]).reshape(-1),
        xp.concatenate([g2, dz.sum(axis=0)[None]]).reshape(-1)])
    out["gradient_tol"] = xp.concatenate([
        xp.concatenate([tol1, (err_dh + summed * xp.abs(dh)).sum(axis=0)[None]]).reshape(-1),
        xp.concatenate([tol2, (err_dz + summed * xp.abs(dz)).sum(axis=0)[None]]).reshape(-1)])
    return out


def totals(xp, x_all, y_all, weights, steps: list[int], u: float, classes: int, cell: int,
           slab: int) -> dict:
    """The linear replay's ``totals`` for a hidden-layer model, rows ``slab`` at a time.

    Per weights (``(count, parameters)``) the loss sum and allowance, right answers, rows too
    close to call; per sampled step the gradient sum and its allowance.
    """
    count, parameters = weights.shape
    out = {name: xp.zeros(count) for name in COLUMNS}
    out["gradient"] = xp.zeros((len(steps), parameters))
    out["gradient_tol"] = xp.zeros((len(steps), parameters))
    for start in range(0, x_all.shape[0], slab):
        x, y = x_all[start:start + slab], y_all[start:start + slab]
        for k in range(count):
            got = evaluate(xp, x, y, weights[k], classes, u, cell, k in steps)
            for name in COLUMNS:
                out[name][k] += got[name].sum()
            if k in steps:
                out["gradient"][steps.index(k)] += got["gradient"]
                out["gradient_tol"][steps.index(k)] += got["gradient_tol"]
    return out


def cells(xp, x, y, weights, probed: int, r: np.ndarray, cell: int, u: float,
          classes: int) -> dict:
    """The linear fast check's ``pass_cells`` for a hidden-layer model (host float64 arrays).

    Per weights set and cell of ``cell`` rows, its sums (``COLUMNS``) and for the first
    ``probed`` sets each probe ``r . g`` of its gradient and the allowance; ``l1`` (the rows'
    summed ``|x|_1``) and ``rows``.
    """
    sets = weights.shape[0]
    rows = x.shape[0]
    found = {name: [[] for _ in range(sets)] for name in (*COLUMNS, "probe", "probe_tol")}
    reach = xp.asarray(np.abs(r))
    toward = xp.asarray(r)
    for start in range(0, rows, cell):
        xb, yb = x[start:start + cell], y[start:start + cell]
        for k in range(sets):
            got = evaluate(xp, xb, yb, weights[k], classes, u, cell, k < probed)
            for name in COLUMNS:
                found[name][k].append(got[name].sum())
            if k < probed:
                found["probe"][k].append(toward @ got["gradient"])
                found["probe_tol"][k].append(
                    reach @ got["gradient_tol"]
                    + weights.shape[1] * EPS64 * (reach @ xp.abs(got["gradient"])))
    out = {name: np.stack([_host(xp, parts) for parts in found[name]]) for name in COLUMNS}
    if probed:
        out["probe"], out["probe_tol"] = (np.stack([_host(xp, parts) for parts in
                                                    found[name][:probed]])
                                          for name in ("probe", "probe_tol"))
    out["l1"] = float(_host(xp, [xp.abs(x.astype(np.float64)).sum()])[0]) if rows else 0.0
    out["norms"] = out["lifted"] = out["squares"] = 0.0  # the linear model's curvature sums
    out["rows"] = rows
    return out


def _host(xp, parts: list) -> np.ndarray:
    if not parts:
        return np.zeros(0)
    return np.asarray(to_host(xp.stack(parts)), dtype=np.float64)


def gradient_l1_bound(flat: np.ndarray, features: int, classes: int, l1: float,
                      rows: float) -> float:
    """An upper bound on the sum over rows of ``|g_row|_1`` at weights ``flat``.

    ``|dz|_1 <= 2`` per row; back through ``W2`` at most ``2 max_c sum_k |W2_kc|``; the
    first layer's gradient ``|x|_1`` times that, the second's ``|relu(h)|_1 |dz|_1``.
    """
    first, second = unpacked(np.asarray(flat, dtype=np.float64), features, classes)
    into = float(np.abs(second[:-1]).sum(axis=0).max())
    spread = float(np.abs(first[:-1]).sum(axis=1).max())
    lift = float(np.abs(first[-1]).sum())
    return 2.02 * (into * (l1 + rows) + spread * l1 + lift * rows + rows)
