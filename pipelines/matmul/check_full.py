"""matmul-pipeline's full-only step: every block of C multiplied again, its sums recomputed.

The fast steps only bound a block's sum of squares. Here: the run's entries lie within
``rounding(k, dtype) |A| |B|`` of the exact ones, the check's within ``rounding(k)``, so a block's
sum moves by that times ``1ᵀ |A_i| |B_j| 1`` at most, its squares by that times
``2 ‖C_ij‖ ‖A_i‖ ‖B_j‖``, plus both sums' own rounding.
"""

from __future__ import annotations

import numpy as np

from daskgpu.verification import Plan, differences, replay, tolerance
from pipelines.matmul import check_replay
from pipelines.matmul.shared import MatmulContext


def blocks_recomputed(ctx: MatmulContext, r, verdict) -> None:
    """Every block of C multiplied again in float64: its sum and sum of squares as reported."""
    grid, k, light = ctx.c, ctx.shape[1], check_replay.travelling(ctx)
    # An input's blocks read again once each (None: random data, drawn again in the tasks)
    a = {at: check_replay.region(ctx, 0, at) for at in ctx.a.locations()}
    b = {at: check_replay.region(ctx, 1, at) for at in ctx.b.locations()}
    gk = ctx.a.shape[1]
    again = np.array(replay.on_workers(check_replay.c_block, [
        (light, i, j, [a[i, kb] for kb in range(gk)], [b[kb, j] for kb in range(gk)])
        for i, j in grid.locations()]))
    squares, sums, magnitude, a_squares, b_squares = again.T
    entries = grid.counts().ravel()
    square_limits = (tolerance(2 * np.sqrt(squares * a_squares * b_squares), k, ctx.dtype)
                     + tolerance(squares, entries))
    sum_limits = tolerance(magnitude, k, ctx.dtype) + tolerance(magnitude, entries)
    how = "drawn again from their seeds" if ctx.inputs is None else "re-read from the inputs"
    if verdict.fail_all(
            differences(reported, recomputed, what="block", tolerance=limits,
                        label=lambda b: f"block {grid.location(b)} of C",
                        reported_as=f"{name} {{}} reported",
                        expected_as="{} recomputed from A and B")
            for name, reported, recomputed, limits in (
                ("sum of squares", r.block_squares, squares, square_limits),
                ("sum", r.block_sums, sums, sum_limits))):
        verdict.establish(f"{Plan.every(grid.blocks).promise}: multiplied again in float64 "
                          f"from A and B {how}, their sums and sums of squares agree")
