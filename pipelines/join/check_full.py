"""join-pipeline's full depth: every left row joined by lookup, the sums the later steps read."""

from __future__ import annotations

from pipelines.join.check_replay import lookup_totals
from pipelines.join.shared import JoinContext


def every_row_looked_up(ctx: JoinContext, r, verdict) -> None:
    """Every left row joined through a dense ``y[key]`` of the right table (``r.looked_up``).

    The lookup stands for the join only where the right table's keys are ``0..R-1`` once each,
    and covers the left table only where it has ``--rows`` rows: both are established first.
    """
    rows, (right_rows, distinct, repeated), r.looked_up = lookup_totals(
        ctx.left, ctx.right, ctx.right_rows, ctx.starts(), ctx.cells.total)
    if not verdict.require(right_rows == distinct == ctx.right_rows, (
            f"right keys: {right_rows} rows hold {distinct} of the keys 0..{ctx.right_rows - 1} "
            f"({repeated} repeated); the lookup needs each once")):
        return
    if verdict.require(rows == ctx.rows, f"left table: {rows} rows generated, --rows {ctx.rows}"):
        verdict.establish(f"all {rows} left rows joined by a lookup in the right table's "
                          f"{right_rows} keys, each once, without a join")
