"""mean-pipeline's check, declared on :mod:`daskgpu.verification`.

Both depths: the block sums fill the block grid and add up to the mean; random data's sums are
pairwise distinct, each within its Hoeffding bound of half its count, and the mean within its
normal bound of 0.5.

- ``fast``: every block's sum is the total of its cells' sums (the run's certificate, geometry
  in :mod:`pipelines.mean.shared`), and a seeded sample of cells gives the same sums again:
  random cells drawn in this process from their block's seed (NumPy's PCG64 advanced to the
  cell's first value), an input's slabs re-read with ``numpy.load``/Zarr (an array in memory:
  from the object itself, :func:`daskgpu.verification.replay.region`). On GPU workers, whose
  generator cannot start inside a block, the run reports no cells and a seeded sample of whole
  blocks is drawn again on the devices.
- ``full``: every block drawn again on the workers from its seed, or re-read from the input in
  float64, and summed again.

It shares no code with the computation (:mod:`daskgpu.data.synthetic`,
:mod:`daskgpu.toolkit.reductions`, :mod:`daskgpu.data.array_input`, the pipeline's tasks): it
draws and reads the data again through :mod:`daskgpu.verification.replay`.
"""

from __future__ import annotations

import math

import dask
import numpy as np

from daskgpu.verification import (
    FALSE_ALARM,
    Check,
    Plan,
    Sampler,
    Unreadable,
    differences,
    exact_total,
    hoeffding,
    parts_add_up,
    replay,
    run_seed,
    sigmas,
    tolerance,
)
from daskgpu.verification.bounds import share
from pipelines.mean.check_mutations import MUTATIONS
from pipelines.mean.shared import CELL, MeanContext, slab_rows


def read(workload, raw):
    """The computed mean with its block sums (and cells' sums), or why it cannot be checked."""
    if getattr(raw, "block_sums", None) is None:
        raise Unreadable(f"result {raw!r} carries no per-block sums to check")
    return raw


def sampler(ctx: MeanContext, purpose: str) -> Sampler:
    """The check's choices: from random data's seed, or for an input from its size."""
    return Sampler(run_seed(ctx.seed, ctx.elements), purpose)


def cell_plan(ctx: MeanContext, depth: str = "fast") -> Plan:
    """The cells the fast depth checks again."""
    return Plan.at(depth, ctx.cells().total, sampler(ctx, "cells"), unit="cells")


def block_plan(ctx: MeanContext, depth: str) -> Plan:
    """The blocks drawn again or re-read whole: every one at ``full``, a sample at ``fast``."""
    return Plan.at(depth, ctx.grid.blocks, sampler(ctx, "blocks"), unit="blocks")


# --------------------------------------------------------------------------- the sums


def grid_filled(ctx: MeanContext, r, verdict) -> None:
    """One block sum for every block of the grid."""
    sums, grid = r.block_sums, ctx.grid
    verdict.require(sums.shape == grid.shape, lambda: (
        f"block sums: {sums.size} for a grid of {' x '.join(map(str, grid.shape))} = "
        f"{grid.blocks} blocks (a block dropped or counted twice)"))


def mean_of_sums(ctx: MeanContext, r, verdict) -> None:
    """The mean is the sums' exact total over the element count, within the run's rounding."""
    mean, sums, n = float(r), r.block_sums, ctx.elements
    total = exact_total(sums)
    expected = total / n
    limit = tolerance(exact_total(np.abs(sums)) / n, sums.size + 1)
    agree = abs(mean - expected) <= limit or (math.isnan(mean) and math.isnan(expected))
    if verdict.require(agree, f"mean {mean:.10g} is not the block sums' total {total:.10g} / "
                              f"{n} elements = {expected:.10g}"):
        verdict.establish(f"{sums.size} block sums add up to the mean {mean:.12g}")


def sums_distinct(ctx: MeanContext, r, verdict) -> None:
    """Random data: distinct per-block seeds give distinct sums (but by a negligible chance)."""
    flat = r.block_sums.ravel()
    if flat.size < 2 or _chance_of_equal_sums(ctx, flat) > FALSE_ALARM:
        return
    order = np.argsort(flat, kind="stable")
    equal = np.flatnonzero(flat[order][1:] == flat[order][:-1])
    if equal.size:
        first, second = sorted((int(order[equal[0]]), int(order[equal[0] + 1])))
        verdict.fail(f"blocks {ctx.grid.location(first)} and {ctx.grid.location(second)}: "
                     f"identical sums {flat[first]:.10g} (distinct per-block seeds give "
                     "distinct sums)")


def _chance_of_equal_sums(ctx: MeanContext, flat: np.ndarray) -> float:
    """About how likely two equal block sums are among correct ones (union over pairs)."""
    spread = math.sqrt(2 * float(ctx.grid.counts().min()) / 12)  # s.d. of two sums' difference
    values_step = 2.0**-24 if ctx.dtype == "float32" else 2.0**-53
    step = max(values_step, float(np.spacing(np.abs(flat).max())))
    return flat.size * (flat.size - 1) / 2 * step / (math.sqrt(2 * math.pi) * spread)


def sums_within_bounds(ctx: MeanContext, r, verdict) -> None:
    """Random data: each block's sum of m values in [0, 1) within Hoeffding's bound of m/2."""
    sums = r.block_sums
    counts = ctx.grid.counts().astype(np.float64)
    each = share(FALSE_ALARM, sums.size)
    limits = counts * np.vectorize(lambda m: hoeffding(int(m), each))(counts)
    excess = np.abs(sums - counts / 2) / limits
    worst = int(np.argmax(excess))  # the first NaN, if any: a NaN sum is out of bounds too
    if not excess.ravel()[worst] <= 1:
        m = float(counts.ravel()[worst])
        got = sums.ravel()[worst]
        verdict.fail(f"block {ctx.grid.location(worst)}: sum {got:.8g} is {abs(got - m / 2):.4g}"
                     f" from its expected {m / 2:g} (Hoeffding limit "
                     f"{limits.ravel()[worst]:.4g})")


def mean_near_half(ctx: MeanContext, r, verdict) -> None:
    """Random data: the mean of n uniform values lies within its normal bound of 0.5."""
    n, mean = ctx.elements, float(r)
    off, limit = abs(mean - 0.5) * math.sqrt(12.0 * n), sigmas(FALSE_ALARM)
    if verdict.require(off <= limit, f"uniform [0,1) mean {mean:.8f} is {off:.2f} standard "
                                     f"errors from 0.5 (limit {limit:.2f}, n={n})"):
        verdict.establish(f"each sum within its bound; {off:.2f} standard errors from 0.5 "
                          f"(limit {limit:.2f}, n={n})")


# --------------------------------------------------------------------------- cells (fast)


def cells_add_up(ctx: MeanContext, r, verdict) -> None:
    """Every block's sum is the total of its cells' sums (the run's certificate)."""
    cells, cell_sums = ctx.cells(), getattr(r, "cell_sums", None)
    if cell_sums is None or cell_sums.shape != (cells.total,):
        got = "no" if cell_sums is None else f"{cell_sums.size}"
        verdict.fail(f"cell sums: {got} reported for the {cells.total} cells of the block grid")
        return
    verdict.note(parts_add_up(
        r.block_sums.ravel(), cell_sums, cells.owners(), terms=max(ctx.grid.counts().flat),
        label=lambda i: f"block {ctx.grid.location(i)}", reported_as="sum {} reported",
        expected_as="{} recomputed from its cells' sums"))


def cells_again(ctx: MeanContext, r, verdict) -> None:
    """A seeded sample of cells drawn again (random data) or re-read (an input): their sums."""
    plan, cells = cell_plan(ctx, verdict.depth), ctx.cells()
    values = [cell_values(ctx, *cells.locate(c)) for c in plan]
    again = np.array([[v.sum(), np.abs(v).sum()] for v in map(np.asarray, dask.compute(
        *values))]).reshape(-1, 2)
    how = "drawn again from their blocks' seeds" if ctx.random else "re-read from the input"
    source = "from its seed" if ctx.random else "from the input"
    piece = "cell" if ctx.random else "slab"

    def label(i: int) -> str:
        block, index = cells.locate(plan.parts[i])
        return f"block {ctx.grid.location(block)} {piece} {index}"

    limit = tolerance(again[:, 1], CELL)
    if verdict.note(differences(
            r.cell_sums[list(plan)], again[:, 0], what="cell", tolerance=limit, label=label,
            reported_as="sum {} reported", expected_as="{} recomputed " + source)):
        verdict.establish(f"each the total of its cells' sums; {plan.promise} ({how}), and "
                          "agree")


def cell_values(ctx: MeanContext, block: int, index: int):
    """The values of cell ``index`` of ``block`` in float64: drawn again, or re-read (lazily)."""
    shape = ctx.grid.block_shape(block)
    if ctx.random:
        first = index * CELL
        return replay.uniform_at(ctx.seed, block, first, min(CELL, math.prod(shape) - first),
                                 ctx.dtype).astype(np.float64)
    region = list(ctx.grid.region(block))
    if region:  # a slab: the block's rows index * step on (all of a 0-d block)
        step, start = slab_rows(shape), region[0].start
        region[0] = slice(start + index * step, min(start + (index + 1) * step, region[0].stop))
    return replay.region(ctx.source, tuple(region))


# --------------------------------------------------------------------------- whole blocks


def blocks_again(ctx: MeanContext, r, verdict) -> None:
    """Blocks drawn again on the workers from their seeds, or re-read from the input: sums.

    Every block at ``full``; at ``fast`` a seeded sample (where the run reports no cells).
    """
    plan, grid = block_plan(ctx, verdict.depth), ctx.grid
    if ctx.random:
        calls = [(ctx.seed, b, grid.block_shape(b), ctx.dtype, ctx.library) for b in plan]
        again = np.array(replay.on_workers(redrawn_sums, calls))
        how, source = "redrawn from their seeds", "from its seed"
    else:
        calls = [(replay.region(ctx.source, grid.region(b)),) for b in plan]
        again = np.array(replay.on_workers(region_sums, calls))
        how, source = "re-read from the input in float64", "from the input"
    again = again.reshape(-1, 2)
    limit = tolerance(again[:, 1], [grid.block_size(b) for b in plan])
    if verdict.note(differences(
            r.block_sums.ravel()[list(plan)], again[:, 0], what="block", tolerance=limit,
            label=lambda i: f"block {grid.location(plan.parts[i])}",
            reported_as="sum {} reported", expected_as="{} recomputed " + source)):
        verdict.establish(f"{plan.promise}: their sums {how} agree")


def redrawn_sums(seed: int, block: int, shape, dtype: str, library: str) -> np.ndarray:
    """Sum and sum of |x| (the same: values in [0, 1)) of a random block drawn again whole."""
    total = float(replay.redraw(seed, block, shape, dtype, library).sum(dtype=np.float64))
    return np.array([total, total])


def region_sums(values: np.ndarray) -> np.ndarray:
    """Sum and sum of |x| of a region of an input, read again (:func:`replay.region`)."""
    return np.array([values.sum(), np.abs(values).sum()])


# --------------------------------------------------------------------------- the declaration


def _sums(ctx: MeanContext) -> tuple:
    bounds = (sums_distinct, sums_within_bounds, mean_near_half) if ctx.random else ()
    return (grid_filled, mean_of_sums, *bounds)


def _fast(ctx: MeanContext) -> tuple:
    return (*_sums(ctx), *((cells_add_up, cells_again) if ctx.has_cells else (blocks_again,)))


def _full(ctx: MeanContext) -> tuple:
    return (*_sums(ctx), blocks_again)


CHECK = Check(fast=_fast, full=_full, read=read, mutations=MUTATIONS)
