"""matmul-pipeline's check, declared on :mod:`daskgpu.verification`.

Both depths, every block C_ij of C = A B: the norm and sum are the blocks' totals, each block's
sum its rows' (``C_ij 1``); Freivalds' check, the run's ``C_ij R_j`` (R: ones and sign probes)
against ``A_i (B_j R_j)`` from A and B drawn again or re-read (:mod:`.check_replay`, no code of
the computation's); squares between ``|C r|² / |r|²`` and ``‖A_i‖² ‖B_j‖²``; sampled cells as
dot products. ``full`` adds every block of C multiplied again (:mod:`.check_full`).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from daskgpu.verification import (
    Check,
    Plan,
    Unreadable,
    compare_probes,
    differences,
    exact_total,
    parts_add_up,
    rounding,
    tolerance,
)
from daskgpu.verification.probes import miss_probability
from pipelines.matmul import check_replay
from pipelines.matmul.check_full import blocks_recomputed
from pipelines.matmul.check_mutations import MUTATIONS
from pipelines.matmul.shared import PROBES, SAMPLED_CELLS, VECTORS, MatmulContext


def read(workload, raw) -> SimpleNamespace:
    """The run's per-block material (:func:`pipelines.matmul.tasks.assemble`), or why not."""
    result = raw.get("result") if isinstance(raw, dict) else None
    if not isinstance(result, dict) or "partials" not in result:
        raise Unreadable(f"result {type(raw).__name__} carries no per-block material")
    return SimpleNamespace(**result)


def again(ctx: MatmulContext, r: SimpleNamespace) -> SimpleNamespace:
    """The recomputation the steps share, made on the workers when first asked for."""
    if not hasattr(r, "again"):
        r.again = check_replay.recompute(ctx)
    return r.again


def shapes(ctx: MatmulContext, r, verdict) -> None:
    """Every block's material is there, once."""
    (n, _, m), grid = ctx.shape, ctx.c.shape
    expected = {"block_squares": grid, "block_sums": grid, "partials": (n, grid[1], VECTORS),
                "samples": (SAMPLED_CELLS,), "block_rows": (grid[0],)}
    for name, shape in expected.items():
        got = np.shape(getattr(r, name, None))
        if not verdict.require(got == shape, f"{name}: shape {got} for C of {n} x {m} in "
                               f"{grid[0]} x {grid[1]} blocks, {shape} expected (a block "
                               "dropped or counted twice)"):
            return
    verdict.require(tuple(r.block_rows) == ctx.a.chunks[0],
                    lambda: f"block_rows {tuple(r.block_rows)}: not the rows of A's blocks")


def totals(ctx: MatmulContext, r, verdict) -> None:
    """The norm is the root of the blocks' squares; the sum, their sums' total."""
    squares, sums = r.block_squares.ravel(), r.block_sums.ravel()
    norm = math.sqrt(exact_total(squares)) if squares.min() >= 0 else math.nan
    verdict.require(abs(r.frobenius_norm - norm) <= tolerance(norm, squares.size + 2), (
        f"Frobenius norm {r.frobenius_norm!r} is not the root of its blocks' squares, {norm!r}"))
    total = exact_total(sums)
    verdict.require(abs(r.sum - total) <= tolerance(exact_total(np.abs(sums)), sums.size + 2),
                    f"sum {r.sum!r} is not the total of its blocks' sums, {total!r}")


def sums_add_up(ctx: MatmulContext, r, verdict) -> None:
    """Every block's sum is the total of its rows' sums, ``C_ij 1`` (the probe of ones)."""
    (gi, gj), grid = ctx.c.shape, ctx.c
    owners = np.repeat(np.arange(gi), ctx.a.chunks[0])[:, None] * gj + np.arange(gj)
    if verdict.note(parts_add_up(
            r.block_sums.ravel(), r.partials[:, :, 0].ravel(), owners.ravel(),
            terms=max(grid.counts().flat), label=lambda b: f"block {grid.location(b)} of C",
            reported_as="sum {} reported",
            expected_as="{} the total of its rows' C 1")):
        verdict.establish(f"C's norm and sum are its {grid.blocks} blocks' totals, each "
                          "block's sum its rows'")


def freivalds(ctx: MatmulContext, r, verdict) -> None:
    """``C_ij R_j`` against ``A_i (B_j R_j)`` recomputed apart, every row (Freivalds' check)."""
    q, (n, k, m) = again(ctx, r), ctx.shape
    for j, width in enumerate(ctx.b.chunks[1]):
        ok, worst, ratio = compare_probes(r.partials[:, j], q.q[:, j], q.q_abs[:, j, None],
                                          terms=k, dtype=ctx.dtype, check_terms=k + 2 * width)
        if not ok:
            p, v = divmod(worst, VECTORS)
            i = int(np.searchsorted(np.cumsum(ctx.a.chunks[0]), p, side="right"))
            verdict.fail(f"Freivalds' check: block ({i}, {j}) of C, row {p}, vector {v}: "
                         f"C r = {r.partials[p, j, v]:.12g}, A (B r) = {q.q[p, j, v]:.12g}, "
                         f"off by {ratio:.3g} times the rounding bound")
            return
    how = "drawn again from their seeds" if ctx.inputs is None else "re-read from the inputs"
    verdict.establish(
        f"Freivalds' check of every row of C ({n} x {m}; {Plan.every(ctx.c.blocks).promise}) "
        f"with C 1 and {PROBES} sign probes against A (B r), A and B {how} on the workers, "
        f"within the rounding bound of k={k} in {ctx.dtype} (a row with an entry off by more "
        f"passes with probability at most {miss_probability(PROBES):.2g})")


def squares_bounded(ctx: MatmulContext, r, verdict) -> None:
    """Each block's sum of squares between ``|C r|² / |r|²`` and ``‖A_i‖² ‖B_j‖²``."""
    q, k = again(ctx, r), ctx.shape[1]
    for i, j in ctx.c.locations():
        rows, (height, width) = ctx.c.region((i, j))[0], ctx.c.block_shape((i, j))
        bound = rounding(k, ctx.dtype) + rounding(k + 2 * width + 1)  # compare_probes'
        smallest = np.maximum(np.abs(q.q[rows, j]) - bound * q.q_abs[rows, j, None], 0.0)
        lower = float((smallest**2).sum(axis=0).max()) / width  # |C r|² / |r|², |r|² = width
        upper = float(q.a_squares[i] * q.b_squares[j])
        got, summed = float(r.block_squares[i, j]), rounding(height * width)
        if not lower * (1 - summed) <= got <= upper * (1 + 2 * rounding(k, ctx.dtype) + summed):
            verdict.fail(f"block ({i}, {j}) of C: sum of squares {got:.12g} outside "
                         f"[{lower:.12g}, {upper:.12g}] (|C r|^2 / |r|^2 to |A_i|^2 |B_j|^2)")
            return
    verdict.establish("every block's sum of squares within its bounds from A and B")


def cells_agree(ctx: MatmulContext, r, verdict) -> None:
    """The sampled cells of C as dot products of a row of A and a column of B."""
    q, (rows, cols), k = again(ctx, r), ctx.cells(), ctx.shape[1]
    if verdict.note(differences(
            r.samples, q.samples, what="cell",
            tolerance=tolerance(q.samples_abs, k, ctx.dtype),
            label=lambda s: f"sampled cell C[{rows[s]}, {cols[s]}]", reported_as="{} reported",
            expected_as="{} as a dot product of A's row and B's column")):
        verdict.establish(f"{SAMPLED_CELLS} sampled cells recomputed as dot products agree")


BOTH = (shapes, totals, sums_add_up, freivalds, squares_bounded, cells_agree)
CHECK = Check(fast=BOTH, full=(*BOTH, blocks_recomputed), read=read, mutations=MUTATIONS)
