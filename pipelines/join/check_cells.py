"""join-pipeline's fast check: cell certificates, every block's count, a sample drawn again.

Beside its answer, the run sums its joined rows by cell of the left table (``CELL_ROWS`` rows)
and group: the rows, the sum of x*y and the sum of y (``raw["cells"]``, the non-empty ones).
This module establishes, without any join:

- the certificates add up to the reported answer: per group the count exactly, ``sum_xy`` and
  ``mean_y`` to their rounding; the joined rows equal their total and ``round(match * rows)``;
- every block's joined rows (``BLOCK_ROWS`` rows, the unit the tables are drawn in) equal the
  count its definition gives, ``floor(M b1 / N) - floor(M b0 / N)`` for rows ``[b0, b1)``
  (:mod:`daskgpu.data.synthetic_tables`);
- a seeded sample of cells (``spot_checks.sample_size`` of them), drawn again by the tables'
  definition (a block at a time; in this process for CPU workers, on GPU workers in CuPy) and
  joined by lookup (a key's partner row
  follows from the right table's definition, its ``y`` drawn again), has the certified rows
  and sums, group by group.

It shares no code with the computation (only :mod:`pipelines.join.shared`). On GPU workers the
lookups and sums run in CuPy (the rows drawn with NumPy, as the run draws them, then copied to
the device); only per-cell totals travel back.
"""

from __future__ import annotations

import dask
import numpy as np

from daskgpu.toolkit import spot_checks
from daskgpu.toolkit.registry import Verification, Workload
from pipelines.join.check_redraw import redrawn_cells
from pipelines.join.shared import BLOCK_ROWS, CELL_ROWS, GROUPS

FIELDS = ("count", "sum_xy", "sum_y")
#: At most this many problems are named in a failed check's detail.
SHOWN = 4


def cell_count(rows: int) -> int:
    """Cells of a left table of ``rows`` rows."""
    return -(-rows // CELL_ROWS)


def defined_counts(rows: int, matched: int) -> np.ndarray:
    """Rows of each block that have a partner, as the tables are defined: exact integers."""
    blocks = -(-rows // BLOCK_ROWS)
    bounds = [min(rows, b * BLOCK_ROWS) for b in range(blocks + 1)]
    edges = [matched * bound // rows for bound in bounds]  # Python integers: no overflow
    return np.diff(np.array(edges, dtype=np.int64))


def certified(cells, count: int) -> tuple[dict, list[str]]:
    """The certificates as ``(count, GROUPS)`` arrays per field, and problems with their cells.

    A cell split between partitions has a certificate from each: they are added.
    """
    cell = cells["cell"].to_numpy(dtype=np.int64)
    group = cells["group"].to_numpy(dtype=np.int64)
    outside = (cell < 0) | (cell >= count) | (group < 0) | (group >= GROUPS)
    problems = []
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        problems.append(f"certificates: {int(outside.sum())} outside the {count} cells and "
                        f"{GROUPS} groups (first: cell {cell[i]}, group {group[i]})")
    slot = cell[~outside] * GROUPS + group[~outside]
    totals = {}
    for name in FIELDS:
        values = cells[name].to_numpy()[~outside]
        summed = np.bincount(slot, weights=values, minlength=count * GROUPS)
        totals[name] = summed.reshape(count, GROUPS)
    totals["count"] = np.rint(totals["count"]).astype(np.int64)
    return totals, problems


def _redrawn(ctx: dict, drawn: np.ndarray) -> dict:
    """The drawn cells recomputed: here with NumPy for CPU workers, else on the cluster.

    A sample is a few hundred thousand rows drawn from the tables' definition: in this
    process it costs less than a round trip to the workers. GPU workers join theirs in CuPy,
    one task per worker thread.
    """
    sizes = {name: ctx[name] for name in ("rows", "right_rows", "matched")}
    if ctx["library"] == "numpy":
        return redrawn_cells(drawn.tolist(), sizes, ctx["seed"], "numpy")
    batches = np.array_split(drawn, min(len(drawn), ctx["threads"]))
    found = dask.compute(*[dask.delayed(redrawn_cells)(batch.tolist(), sizes, ctx["seed"],
                                                       ctx["library"]) for batch in batches])
    return {c: totals for part in found for c, totals in part.items()}


def _tolerance(count):
    """Relative tolerance of two sums of ``count`` non-negative terms added in any order."""
    return (2 * count + 4) * float(np.finfo(np.float64).eps)


def cell_differences(totals: dict, redrawn: dict) -> list[str]:
    """``cell c, group g: FIELD certified vs drawn again`` for each sampled cell that differs."""
    cells = np.array(sorted(redrawn), dtype=np.int64)
    if not len(cells):
        return []
    again = [np.stack([redrawn[c][k] for c in cells]) for k in range(len(FIELDS))]
    got = [totals[name][cells] for name in FIELDS]
    tolerance = _tolerance(again[0])
    wrong = [got[0] != again[0]] + [
        np.abs(g - a) > tolerance * np.maximum(np.abs(g), np.abs(a))
        for g, a in zip(got[1:], again[1:], strict=True)]
    out = []
    for i, g in zip(*np.nonzero(np.logical_or.reduce(wrong)), strict=True):
        if out and out[-1][0] == i:
            continue  # the first group of a cell that differs
        k = next(k for k in range(len(FIELDS)) if wrong[k][i, g])
        out.append((i, f"cell {cells[i]}, group {g}: {FIELDS[k]} {got[k][i, g]:.17g} "
                       f"certified, {again[k][i, g]:.17g} drawn again"))
    return [line for _, line in out]


def count_differences(totals: dict, rows: int, matched: int) -> list[str]:
    """Blocks whose certified joined rows differ from their definition's count."""
    defined = defined_counts(rows, matched)
    per_cell = totals["count"].sum(axis=1)
    got = np.bincount(np.arange(len(per_cell)) * CELL_ROWS // BLOCK_ROWS, weights=per_cell,
                      minlength=len(defined)).astype(np.int64)
    wrong = np.flatnonzero(got != defined)
    if not len(wrong):
        return []
    b = int(wrong[0])
    return [f"{len(wrong)} of {len(defined)} blocks have other joined rows than their "
            f"definition (first: block {b}, {int(got[b])} certified, {int(defined[b])} defined)"]


def verify_fast(workload: Workload, raw: dict, group_differences) -> Verification:
    """The reported join against the run's cell certificates and a redrawn sample of cells.

    Parameters
    ----------
    workload : Workload
        The run's workload (its context: sizes, seed, array library, worker threads).
    raw : dict
        The computed result: ``joined_rows``, ``aggregate`` and the certificates (``cells``).
    group_differences : callable
        ``group_differences(reported, totals, source)``: where the reported aggregate
        disagrees with per-group totals (the full check's own comparison).

    Returns
    -------
    Verification
        Passed, with the sample's promise in words; or failed, naming what disagreed.
    """
    ctx = workload.context
    reported = workload.present(workload, raw)
    rows, matched = ctx["rows"], ctx["matched"]
    count = cell_count(rows)
    totals, problems = certified(raw["cells"], count)
    drawn = spot_checks.seeded_sample(count, spot_checks.sample_size(count), ctx["seed"])
    redrawn = _redrawn(ctx, drawn)
    certified_rows = int(totals["count"].sum())
    if reported["joined_rows"] != certified_rows or certified_rows != matched:
        problems.append(f"joined_rows {reported['joined_rows']} vs cells {certified_rows} "
                        f"(round(match * rows) = {matched})")
    summed = {name: totals[name].sum(axis=0) for name in FIELDS}
    problems += group_differences(reported["aggregate"], summed, "cells")
    problems += count_differences(totals, rows, matched)
    problems += cell_differences(totals, redrawn)
    if problems:
        more = f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
        return Verification(False, "the reported join differs from the run's cell "
                            f"certificates: {'; '.join(problems[:SHOWN])}{more}")
    return Verification(
        True, f"joined_rows {matched} = round(match * rows); every group's count, sum_xy and "
        f"mean_y add up from the run's certificates of {count} cells of the left table, each "
        f"block's joined rows equal its definition's; "
        f"{spot_checks.detection(len(drawn), count, 'cells')} (drawn again and joined by a "
        "lookup, without a join)")
