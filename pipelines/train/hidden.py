"""The hidden-layer model's work on the workers: seeded initial weights, a shard's pass.

``--hidden H`` trains ``Dense(H, relu) -> Dense(classes, softmax)``: logits
``relu(x W1 + b1) W2 + b2``, cross-entropy. Its parameters travel as one flat vector
(:func:`pipelines.train.shared.unpacked` gives the layout), and so does its gradient; the
pass hands the workers :class:`Layers` ``W1``, ``W2``, each with its bias as the last row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from daskgpu.toolkit import backends
from pipelines.train.shared import INIT, PROBE, PROBES, parameter_count, unpacked


def initial_weights(seed: int, features: int, hidden: int, classes: int,
                    dtype: str) -> np.ndarray:
    """Glorot-uniform weights and zero biases, flat, from ``SeedSequence(seed, (INIT,))``."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(INIT,)))
    flat = np.zeros(parameter_count(features, hidden, classes))
    first, second = unpacked(flat, features, classes)
    for layer, (fan_in, fan_out) in ((first, (features, hidden)),
                                     (second, (hidden, classes))):
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        layer[:-1] = rng.uniform(-limit, limit, (fan_in, fan_out))
    return flat.astype(dtype)


def gradient_probes(seed: int, parameters: int) -> np.ndarray:
    """The run's probes of its cells' flat gradients: ``(PROBES, parameters)`` float64."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PROBE,)))
    return rng.standard_normal((PROBES, parameters))


@dataclass(frozen=True)
class SplitProbes:
    """Probes as ``(W1, b1, W2, b2)``'s parts (one object: scattered whole)."""

    parts: tuple


def split_probes(probes: np.ndarray, features: int, classes: int) -> SplitProbes:
    """Flat probes ``(PROBES, parameters)`` as ``(W1, b1, W2, b2)``'s parts, split once.

    Each part contiguous, ``(PROBES, its size)``, float64: as a pass takes them.
    """
    r1, r2 = unpacked(np.asarray(probes, dtype=np.float64), features, classes)
    return SplitProbes(tuple(np.ascontiguousarray(part).reshape(PROBES, -1)
                             for part in (r1[:, :-1], r1[:, -1], r2[:, :-1], r2[:, -1])))


@dataclass(frozen=True)
class Layers:
    """The two layers' weights a step broadcasts (one object: scattered whole)."""

    first: np.ndarray  # W1, (features + 1, hidden), bias last
    second: np.ndarray  # W2, (hidden + 1, classes), bias last


def layers(flat: np.ndarray, features: int, classes: int) -> Layers:
    """``Layers`` of flat weights, as the contiguous arrays a step broadcasts."""
    first, second = unpacked(flat, features, classes)
    return Layers(np.ascontiguousarray(first), np.ascontiguousarray(second))


def pass_in_blocks(xp, x, y, weights: Layers, gradient: bool, block: int,
                   probes=None, report=None) -> tuple:
    """Loss sum, right answers and (if asked) flat float64 gradient, ``block`` rows at a time.

    As the linear model's pass (:func:`pipelines.train.tasks.shard_pass`): each block is a
    cell, read from memory once for the forward and the backward pass; its gradient is one
    product each way in the data's dtype, added in float64 across blocks, on CPU and GPU
    workers alike. ``probes`` (flat, ``(PROBES, parameters)``, or :func:`split_probes`) give
    each cell's ``r . g``; the cells of ``report`` give their flat gradient whole too.
    """
    first, second = xp.asarray(weights.first), xp.asarray(weights.second)
    features, hidden, classes = first.shape[0] - 1, first.shape[1], second.shape[1]
    w1, b1, w2, b2 = first[:-1], first[-1], second[:-1], second[-1]
    sums = [xp.zeros((features, hidden), dtype=np.float64), xp.zeros(hidden, dtype=np.float64),
            xp.zeros((hidden, classes), dtype=np.float64), xp.zeros(classes, dtype=np.float64)]
    along = None
    if probes is not None:
        if not isinstance(probes, SplitProbes):
            probes = split_probes(probes, features, classes)
        along = [xp.asarray(part) for part in probes.parts]
    losses, hits, probed, whole = [], [], [], []
    offsets = xp.arange(min(block, y.shape[0]))
    for start in range(0, y.shape[0], block):
        xb, yb = x[start:start + block], y[start:start + block]
        rows = offsets[:yb.shape[0]]
        h = xb @ w1
        h += b1
        active = xp.maximum(h, 0)
        z = active @ w2
        z += b2
        hits.append((xp.argmax(z, axis=1) == yb).sum())
        z -= z.max(axis=1, keepdims=True)
        e = xp.exp(z)
        total = e.sum(axis=1)
        losses.append((xp.log(total) - z[rows, yb]).sum(dtype=np.float64))
        if not gradient:
            continue
        e /= total[:, None]
        e[rows, yb] -= 1  # d loss / d logits
        back = e @ w2.T
        back *= h > 0  # d loss / d hidden pre-activations
        parts = ((xb.T @ back).astype(np.float64), back.sum(axis=0, dtype=np.float64),
                 (active.T @ e).astype(np.float64), e.sum(axis=0, dtype=np.float64))
        for total_part, part in zip(sums, parts, strict=True):
            total_part += part
        if along is not None:
            probed.append(sum(r @ part.reshape(-1) for r, part in zip(along, parts,
                                                                       strict=True)))
        if report is not None and start // block in report:
            whole.append(_flat(parts))
    cells = {"loss": _host_values(xp, losses, np.float64),
             "right": _host_values(xp, hits, np.int64)}
    if probes is not None:  # none where an epoch's step read none of the shard's rows
        cells["probe"] = (np.asarray(backends.to_host(xp.stack(probed)), dtype=np.float64)
                          if probed else np.zeros((0, PROBES)))
    if report is not None:
        cells["gradient"] = np.array(whole, dtype=np.float64).reshape(
            len(whole), sum(s.size for s in sums))
        cells["reported"] = np.asarray(report, dtype=np.int64)
    loss = 0.0
    for value in cells["loss"]:
        loss += float(value)
    right = int(cells["right"].sum())
    if not gradient:
        return 0.0, loss, right, cells
    return _flat(sums), loss, right, cells


def _flat(parts) -> np.ndarray:
    """``(W1, b1, W2, b2)``'s gradient parts as one flat float64 host vector."""
    return np.concatenate([
        np.vstack([backends.to_host(parts[0]), backends.to_host(parts[1])[None]]).reshape(-1),
        np.vstack([backends.to_host(parts[2]), backends.to_host(parts[3])[None]]).reshape(-1)
    ]).astype(np.float64)


def _host_values(xp, values: list, dtype) -> np.ndarray:
    if not values:
        return np.zeros(0, dtype)
    return np.asarray(backends.to_host(xp.stack(values)), dtype=dtype).reshape(-1)
