"""trips-pipeline's fast-only step: a seeded sample of cells recomputed from their rows.

The run returns the drawn cells' tables and their rows as it read them (a few MB on the host):
each table must match its cell's projections and its rows recomputed with NumPy alone. Nothing
is computed on the workers, and no file is read again; a pandas or cuDF frame in hand gives the
drawn cells' rows again itself (:func:`~pipelines.trips.check_replay.cell_rows`).
"""

from __future__ import annotations

import numpy as np

from daskgpu.verification import Plan, Sampler, differences, tolerance
from pipelines.trips.check_replay import (
    cell_rows,
    dense_problems,
    in_hand,
    label,
    recomputed_cells,
    relative_slack,
)
from pipelines.trips.shared import HOURS, SLOTS, TripsContext, projection_weights


def cell_plan(ctx: TripsContext) -> Plan:
    """The cells the fast depth recomputes: a seeded sample of every partition's cells."""
    return Plan.at("fast", ctx.cells().total, Sampler(ctx.sample_seed, "cells"), unit="cells")


def drawn_cells(ctx: TripsContext) -> list[tuple[int, int]]:
    """The drawn cells as ``(partition, cell of the partition)``: the run keeps their rows."""
    cells = ctx.cells()
    return [cells.locate(cell) for cell in cell_plan(ctx)]


def cells_recomputed(ctx: TripsContext, r, verdict) -> None:
    """Each drawn cell's table: against its projections, and its rows recomputed with NumPy."""
    weights = projection_weights(ctx.sample_seed)
    kept = []
    for p, k in drawn_cells(ctx):
        c = r.certificates[p]
        if k >= len(c["cell_rows"]):  # a CSV's last lines may hold no rows
            continue
        where = f"{label(c['partition'])} cell {k}"
        if verdict.note(_kept_problem(where, k, c, weights)):
            kept.append((where, c["sampled"][k], cell_rows(ctx, c, p, k)))
    whose = ("the frame's own rows",) * 2 if in_hand(ctx) else ("its rows", "their rows")
    if kept:
        counts, sums = recomputed_cells([rows for _, _, rows in kept])
        slack = relative_slack(counts)
        for (where, cell, _), n, s, limit in zip(kept, counts, sums, slack, strict=True):
            verdict.fail_all(dense_problems(where, cell["counts"], cell["sums"], n, s,
                                            ("summed", f"recomputed from {whose[0]}"), limit))
    if verdict.ok:
        verdict.establish(f"{cell_plan(ctx).promise} (recomputed from {whose[1]} with NumPy "
                          "and this package's own haversine)")


def _kept_problem(where: str, k: int, c: dict, weights: np.ndarray) -> str | None:
    """A drawn cell the run kept: its rows and table against its cell's certificate."""
    cell = c["sampled"].get(k)
    if cell is None:
        return f"{where}: drawn, but the run kept no rows of it"
    rows = len(cell["rows"]["pickup_time"])
    if rows != c["cell_rows"][k]:
        return f"{where}: {rows} rows kept, {c['cell_rows'][k]} summed"
    projected = (cell["sums"].reshape(2, -1) @ weights.astype(np.float64)).reshape(-1)
    limit = tolerance(1.0, HOURS * SLOTS) * projected  # the values are positive
    if (np.array_equal(cell["counts"].reshape(-1) @ weights, c["cell_counts"][k])
            and not differences(projected, c["cell_sums"][k], what="sum", tolerance=limit)):
        return None
    return f"{where}: its table differs from its projections"
