"""The fast depth of pca-pipeline's exact method: the run's cell certificates, and a sample of them.

The run certifies every cell of every block (:func:`pipelines.pca.shared.cells`) from the rows it
factors: the cell's row count, column means, centred sum of squares and ``G = X_c^T (X_c Q)``
for the seeded probes ``Q`` (:func:`pipelines.pca.shared.probes`), ``X_c`` centred on the cell's
own means. Here:

- :func:`certified`: the certificates tile every block in the specified cells, are finite and
  of the right shapes, and are joined about the mean of all rows (the scatter within the cells
  plus ``n_c (m_c - m)(m_c - m)^T`` between them) into ``C Q``, ``trace(C)`` and the mean, for
  the checks of :mod:`pipelines.pca.check`;
- :func:`spot_check`: a seeded sample of cells (:func:`daskgpu.toolkit.spot_checks.sample_size`)
  is computed again on the workers, a task a block, and must equal its certificate within the
  rounding bound below. Generated cells are drawn again alone from the generator state the run
  noted, once that is shown to lie on the block's stream (:mod:`daskgpu.toolkit.pcg64`), and
  the cell's draw must end at the next cell's noted state; they are taken as ``z`` with
  ``X Q = z (F Q)`` (:func:`pipelines.pca.check_pass.frame`), never multiplied out. Input cells
  are read again. On GPU workers a cell is a whole block, drawn again with CuPy on the device.

Rounding: the run's rows are ``fl(fl(z sigma) V^T)`` in the data's dtype (unit roundoff ``u``),
off the exact ``z F`` by ``|E|_F <= gamma_(d+2) |Z|_F |F|_F`` (``gamma_m = m u / (1 - m u)``;
each entry is a dot product of length ``d``); an input is read exactly (``E = 0``). With
``S = |X|_F`` and ``|E_c|_F <= |E|_F`` (centring is a projection), ``|dG|_F <= (2 |E| S +
|E|^2) |Q|_2``, ``|d squares| <= 2 |E| S + |E|^2`` and ``|d mean| <= |E| / sqrt(count)``; the
float64 sums on both sides add ``SAFETY (count + d) eps64`` times ``S^2 |Q|_F``, ``S^2`` and
``S / sqrt(count)``.
"""

from __future__ import annotations

import importlib
import math

import dask
import numpy as np

from daskgpu.toolkit import pcg64, spot_checks
from daskgpu.toolkit.numeric import generator, seed_word, starts, unit_roundoff
from pipelines.pca import check_pass, shared

SAFETY = 10.0
EPS64 = float(np.finfo(np.float64).eps)
SAMPLE_TAG = 0xCE11
KEYS = ("counts", "means", "squares", "g", "states")
# Cells computed again by one task (a few milliseconds each): enough tasks to keep every
# worker busy, few enough that scheduling them costs little.
TASK_CELLS = 8
# A failed spot check names at most this many disagreeing cells.
MAX_LISTED = 3


def block_cells(ctx: dict) -> list[list[tuple[int, int]]]:
    """Every block's cells, ``(first, stop)`` rows, as the run certifies them."""
    whole = ctx["library"] != "numpy"
    return [shared.cells(rows, whole) for rows in ctx["row_chunks"]]


def _shape_failure(ctx: dict, i: int, part, cuts) -> str | None:
    if not isinstance(part, dict) or any(key not in part for key in KEYS):
        return f"cell certificates of block {i}: {type(part).__name__} lacks {', '.join(KEYS)}"
    c, d = len(cuts), ctx["shape"][1]
    shapes = {"counts": (c,), "means": (c, d), "squares": (c,), "g": (c, d, shared.PROBES),
              "states": (c, pcg64.WORDS)}
    for key, shape in shapes.items():
        if np.shape(part[key]) != shape:
            return (f"cell certificates of block {i}: {key} of shape {np.shape(part[key])}, "
                    f"{shape} expected")
    counts = np.asarray(part["counts"])
    expected = [stop - first for first, stop in cuts]
    if counts.tolist() != expected:
        return (f"cell certificates of block {i}: counts {counts[:4].tolist()}... do not tile "
                f"its {ctx['row_chunks'][i]} rows in the cells {expected[:4]}...")
    if not all(np.isfinite(np.asarray(part[key], dtype=np.float64)).all()
               for key in ("means", "squares", "g")):
        return f"cell certificates of block {i} are not finite"
    return None


def certified(ctx: dict, parts, q: np.ndarray) -> tuple[str | None, dict]:
    """The certificates checked for form and joined: ``C Q``, ``trace(C)``, the mean.

    Returns
    -------
    tuple
        A failure (or None) and the joined ``gram``: ``rows``, ``mean``, ``cq``, ``trace``,
        ``probes`` and the certificates stacked (``cells``: the arrays of :data:`KEYS`, cell by
        cell, and ``blocks``: the cells' first index in each block).
    """
    cuts = block_cells(ctx)
    if not isinstance(parts, list | tuple) or len(parts) != len(cuts):
        found = len(parts) if isinstance(parts, list | tuple) else type(parts).__name__
        return (f"cell certificates: {found} blocks of them for the run's {len(cuts)} blocks",
                {})
    for i, (part, block) in enumerate(zip(parts, cuts, strict=True)):
        failure = _shape_failure(ctx, i, part, block)
        if failure:
            return failure, {}
    cells = {key: np.concatenate([np.asarray(p[key]) for p in parts]) for key in KEYS}
    counts = cells["counts"].astype(np.float64)
    rows = float(counts.sum())
    mean = counts @ cells["means"] / rows
    apart = cells["means"] - mean
    cq = cells["g"].sum(axis=0) + apart.T @ (counts[:, None] * (apart @ q))
    trace = float(cells["squares"].sum() + counts @ np.einsum("ij,ij->i", apart, apart))
    firsts = np.concatenate([[0], np.cumsum([len(c) for c in cuts])])
    return None, {"rows": int(rows), "mean": mean, "cq": cq, "trace": trace, "probes": q,
                  "cells": cells, "blocks": firsts}


# --------------------------------------------------------------------------- on the workers


def _sums(x, xp, multiplier, scratch) -> tuple:
    """``(count, mean, column squares of X_c, X_c^T (X_c M), |X|^2 by column, |X_c M|_F^2)``.

    ``x`` (float64) is centred in place; ``scratch``: at least ``count x m``.
    """
    count = x.shape[0]
    mean = x.sum(axis=0) / count
    uncentred = xp.einsum("ij,ij->j", x, x)
    x -= mean
    projected = xp.matmul(x, multiplier, out=scratch[:count])
    return (count, mean, xp.einsum("ij,ij->j", x, x), x.T @ projected, uncentred,
            xp.einsum("ij,ij->", projected, projected))


def _host(value) -> np.ndarray:
    return value.get() if hasattr(value, "get") else np.asarray(value)


def _framed(sums: tuple, f, sigma2) -> dict:
    """A cell's sums in the rows' coordinates: ``z``'s taken through ``F``, or as read.

    ``F F^T = diag(sigma^2)``, so ``|X_c|_F^2 = sum_j sigma_j^2 |z_c,j|^2`` (likewise
    uncentred); ``z2``: ``|Z|_F^2`` (generated data), for the rounding bound.
    """
    count, mean, squares, g, uncentred, projected = (sums[0], *map(_host, sums[1:]))
    if f is None:
        return {"count": count, "mean": mean, "squares": float(squares.sum()), "g": g,
                "norm2": float(uncentred.sum()), "projected": float(projected), "z2": None}
    return {"count": count, "mean": f.T @ mean, "squares": float(squares @ sigma2),
            "g": f.T @ g, "norm2": float(uncentred @ sigma2), "projected": float(projected),
            "z2": float(uncentred.sum())}


def _drawn(ctx: dict, i: int, picks, states, buffer):
    """Block ``i``'s picked cells of ``z``, drawn again from the noted states (NumPy)."""
    d, dtype = ctx["shape"][1], ctx["dtype"]
    half = np.dtype(dtype).itemsize == 4
    cuts = shared.cells(ctx["row_chunks"][i])
    bits = np.random.PCG64(np.random.SeedSequence(shared.data_seed(ctx["seed"]),
                                                  spawn_key=(i,)))
    seeded = bits.state
    for j in picks:
        first, stop = cuts[j]
        bits.state = seeded
        placed = pcg64.place(bits, first * d, states[j], half)
        if placed:
            yield j, placed
            continue
        z = buffer[:(stop - first)]
        np.random.Generator(bits).standard_normal(out=z, dtype=dtype)
        if j + 1 < len(cuts) and pcg64.state_words(bits.state) != [int(w) for w in states[j + 1]]:
            yield j, "its draw does not end at the generator state noted for the next cell"
            continue
        yield j, z


def _read(ctx: dict, i: int, picks):
    """Block ``i``'s picked cells read again, in float64 (a copy: centred in place)."""
    source = ctx["input"]
    if source.kind == "zarr":
        import zarr

        stored = zarr.open_array(source.path, mode="r")
    else:
        stored = np.load(source.path, mmap_mode="r")
    r0 = int(starts(ctx["row_chunks"])[i])
    cuts = block_cells(ctx)[i]
    for j in picks:
        first, stop = cuts[j]
        yield j, np.array(stored[r0 + first:r0 + stop], dtype=np.float64)


def _device_drawn(ctx: dict, i: int, picks):
    """Block ``i`` of ``z`` drawn again whole with the library's generator (CuPy)."""
    sequence = np.random.SeedSequence(shared.data_seed(ctx["seed"]), spawn_key=(i,))
    rng = generator(ctx["library"], sequence)
    for j in picks:
        yield j, rng.standard_normal((ctx["row_chunks"][i], ctx["shape"][1]), dtype=ctx["dtype"])


def cell_sums(ctx: dict, i: int, picks: list[int], states, f, multiplier) -> list:
    """Block ``i``'s picked cells computed again: ``(j, sums)`` or ``(j, why not)``, on the host.

    ``f, multiplier``: ``F, F Q`` of generated data, ``None, Q`` of an input
    (:func:`pipelines.pca.check_pass.framed`). The sums (:func:`_framed`) are in float64.
    """
    xp = importlib.import_module(ctx["library"])
    on_device = xp.asarray(multiplier)
    sigma2 = shared.spectrum(ctx["shape"][1]) ** 2
    if ctx["input"] is not None:
        cells = _read(ctx, i, picks)
    elif ctx["library"] != "numpy":
        cells = _device_drawn(ctx, i, picks)
    else:
        buffer = np.empty((shared.CELL_ROWS, ctx["shape"][1]), dtype=ctx["dtype"])
        cells = _drawn(ctx, i, picks, np.asarray(states, dtype=np.uint64), buffer)
    out, scratch = [], None
    for j, cell in cells:
        if isinstance(cell, str):
            out.append((j, cell))
            continue
        wide = xp.asarray(cell, dtype=np.float64)  # a scratch or fresh copy: centred in place
        if scratch is None or scratch.shape[0] < wide.shape[0]:
            scratch = xp.empty((wide.shape[0], multiplier.shape[1]))
        out.append((j, _framed(_sums(wide, xp, on_device, scratch), f, sigma2)))
    return out


# --------------------------------------------------------------------------- the comparison


def sample_seed(ctx: dict) -> int:
    """The sample's seed: the run's, or for an input one from its shape."""
    if ctx["seed"] is not None:
        return int(ctx["seed"])
    n, d = ctx["shape"]
    return seed_word(np.random.SeedSequence((n, d, SAMPLE_TAG)))


def bounds(ctx: dict, sums: dict, q: np.ndarray) -> dict:
    """How far a correct certificate may lie from a cell computed again (see the module)."""
    d = ctx["shape"][1]
    count = sums["count"]
    if sums["z2"] is None:
        err = 0.0
    else:
        m = (d + 2) * unit_roundoff(ctx["dtype"])
        frame = math.sqrt(float(np.sum(shared.spectrum(d) ** 2)))
        err = m / (1 - m) * math.sqrt(sums["z2"]) * frame
    s = math.sqrt(sums["norm2"])
    arith = SAFETY * (count + d) * EPS64
    spread = 2 * err * s + err**2
    return {"g": spread * float(np.linalg.norm(q, 2)) + arith * s * s * float(np.linalg.norm(q)),
            "squares": spread + arith * s * s,
            "mean": (err + arith * s) / math.sqrt(count)}


def _compared(ctx: dict, sums: dict, cells: dict, c: int, q: np.ndarray) -> str | None:
    if sums["count"] != int(cells["counts"][c]):
        return f"{sums['count']} rows, the certificate counts {int(cells['counts'][c])}"
    allowed = bounds(ctx, sums, q)
    offs = {"g": float(np.linalg.norm(sums["g"] - cells["g"][c])),
            "squares": abs(sums["squares"] - float(cells["squares"][c])),
            "mean": float(np.linalg.norm(sums["mean"] - cells["means"][c]))}
    for key, off in offs.items():
        if not off <= allowed[key]:
            what = {"g": "X_c^T X_c Q", "squares": "sum of squares", "mean": "mean"}[key]
            return f"{what} off the certificate's by {off:.3g} (bound {allowed[key]:.3g})"
    return None


def spot_check(ctx: dict, gram: dict) -> tuple[str | None, tuple[int, int]]:
    """A seeded sample of cells computed again on the workers against their certificates.

    Returns
    -------
    tuple
        A failure naming the first disagreeing cells (or None), and ``(drawn, population)``.
    """
    cells, firsts, q = gram["cells"], gram["blocks"], gram["probes"]
    population = len(cells["counts"])
    picked = spot_checks.seeded_sample(population, spot_checks.sample_size(population),
                                       sample_seed(ctx))
    by_block: dict[int, list[int]] = {}
    for c in picked.tolist():
        i = int(np.searchsorted(firsts, c, side="right")) - 1
        by_block.setdefault(i, []).append(c - int(firsts[i]))
    groups = [(i, picks[at:at + TASK_CELLS]) for i, picks in by_block.items()
              for at in range(0, len(picks), TASK_CELLS)]
    f, multiplier = dask.delayed(check_pass.framed, pure=True, nout=2)(ctx, q)
    tasks = [dask.delayed(cell_sums, pure=True)(
        ctx, i, picks, cells["states"][firsts[i]:firsts[i + 1]], f, multiplier)
        for i, picks in groups]
    found = dask.compute(tasks)[0]
    wrong = []
    for (i, _), results in zip(groups, found, strict=True):
        for j, sums in results:
            c = int(firsts[i]) + j
            why = sums if isinstance(sums, str) else _compared(ctx, sums, cells, c, q)
            if why:
                wrong.append(f"cell {j} of block {i}: {why}")
    if wrong:
        listed = "; ".join(wrong[:MAX_LISTED]) + ("; ..." if len(wrong) > MAX_LISTED else "")
        return (f"{len(wrong)} of {len(picked)} cells computed again disagree with the run's "
                f"certificates: {listed}"), (len(picked), population)
    return None, (len(picked), population)
