"""join-pipeline's check, declared on :mod:`daskgpu.verification`: joins by lookup, never a join.

Beside its answer the run sums its joined rows by cell of the left table and group (rows, sum of
x*y, sum of y: ``raw["cells"]``, its certificates). Both depths compare with per-cell sums
(``fast``: the certificates; ``full``: every left row joined by lookup, :mod:`.check_full`):
every block's joined rows must be its definition's ``floor(M b1 / N) - floor(M b0 / N)`` (rows
``[b0, b1)``), the joined rows their total and ``round(match * rows)``, the certificates of the
cells checked again (a seeded sample drawn again from the definition, or all looked up) theirs,
and per group the reported count their total exactly, ``sum_xy`` and ``mean_y`` to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daskgpu.verification import (
    Check,
    Plan,
    Sampler,
    Unreadable,
    cell_totals,
    differences,
    replay,
    tolerance,
)
from daskgpu.verification.verdict import apart
from pipelines.join.check_full import every_row_looked_up
from pipelines.join.check_mutations import MUTATIONS
from pipelines.join.check_replay import Sums, redrawn_cells
from pipelines.join.shared import BLOCK_ROWS, CELL_ROWS, GROUPS, JoinContext

#: Each depth's per-cell sums: their name in a problem, how they came about, what they are.
SOURCES = {"fast": ("cells", "certified", "the cells' certificates"),
           "full": ("lookup", "looked up", "the lookup of every left row")}


@dataclass
class Reading:
    """What the check reads: the reported value, the certificates by cell and group.

    ``looked_up``: the full depth's lookup of every left row, once its first step made it.
    """

    reported: dict
    certified: Sums
    looked_up: Sums | None = None

    def source(self, depth: str) -> Sums:
        """The per-cell sums a depth compares the answer with."""
        return self.looked_up if depth == "full" else self.certified


def certified(cells, count: int) -> Sums:
    """The certificates by cell and group (a cell's from two partitions added); none outside."""
    cell, group = (cells[name].to_numpy(dtype=np.int64) for name in ("cell", "group"))
    outside = (cell < 0) | (cell >= count) | (group < 0) | (group >= GROUPS)
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise Unreadable(f"certificates: {int(outside.sum())} outside the {count} cells and "
                         f"{GROUPS} groups (first: cell {cell[i]}, group {group[i]})")
    return Sums(*(np.bincount(cell * GROUPS + group, weights=cells[name].to_numpy(np.float64),
                              minlength=count * GROUPS).reshape(count, GROUPS)
                  for name in Sums._fields))


def read(workload, raw) -> Reading:
    """The reported value (``workload.present``) and the run's certificates."""
    if not isinstance(raw, dict) or "cells" not in raw:
        raise Unreadable("the result carries no cell certificates to check")
    return Reading(workload.present(workload, raw),
                   certified(raw["cells"], workload.context.cells.total))


def blocks_as_defined(ctx: JoinContext, r: Reading, verdict) -> None:
    """Every block's joined rows are the count the tables' definition gives it."""
    cells, blocks = ctx.cells, len(ctx.cells.per_part)
    got, _ = cell_totals(r.source(verdict.depth).count.sum(axis=1), cells.owners(), blocks)
    edges = [ctx.matched * min(ctx.rows, b * BLOCK_ROWS) // ctx.rows for b in range(blocks + 1)]
    wrong = differences(got.astype(np.int64), np.diff(edges), what="block",
                        reported_as="{} " + SOURCES[verdict.depth][1], expected_as="{} defined")
    if verdict.require(wrong is None, f"blocks with other joined rows than their definition: "
                                      f"{wrong}"):
        verdict.establish("each block's joined rows equal its definition's")


def rows_add_up(ctx: JoinContext, r: Reading, verdict) -> None:
    """The joined rows are the per-cell sums' total and ``round(match * rows)``."""
    total, joined = int(r.source(verdict.depth).count.sum()), r.reported["joined_rows"]
    if verdict.require(joined == total == ctx.matched, (
            f"joined_rows {joined} vs {SOURCES[verdict.depth][0]} {total} (round(match * rows) "
            f"= {ctx.matched})")):
        verdict.establish(f"joined_rows {total} = round(match * rows)")


def cells_again(ctx: JoinContext, r: Reading, verdict) -> None:
    """The cells' certificates against the cells joined again: a seeded sample, or every one."""
    plan = Plan.at(verdict.depth, ctx.cells.total, Sampler(ctx.seed, "cells"), unit="cells")
    cells, full = list(plan), verdict.depth == "full"
    again = Sums(*(s[cells] for s in r.looked_up)) if full else redrawn(ctx, cells)
    relative = tolerance(1.0, CELL_ROWS + 1)  # a cell's rows, in at most two certificates

    def label(i: int) -> str:
        cell = cells[i // GROUPS]
        return f"cell {cell} ({ctx.partitions_of(cell)}), group {i % GROUPS}"

    problems = (differences(
        got[cells], want, what="cell", label=label, unit="cell groups",
        tolerance=0 if name == "count" else relative * np.maximum(got[cells], want),
        reported_as=f"{name} {{}} certified", expected_as="{} " + ("looked up" if full else
                                                                   "drawn again"))
        for name, got, want in zip(Sums._fields, r.certified, again, strict=True))
    if verdict.fail_all(problems):
        verdict.establish(f"{plan.promise}: their certificates equal " + (
            "the lookup's" if full else "the cells drawn again and joined by a lookup"))


def redrawn(ctx: JoinContext, cells: list[int]) -> Sums:
    """Cells drawn again and joined: here for CPU workers (no round trip), else on the GPUs."""
    if ctx.library == "numpy":
        return redrawn_cells(cells, *ctx.sizes, ctx.seed)
    batches = np.array_split(np.asarray(cells), min(len(cells), ctx.threads))
    found = replay.on_workers(redrawn_cells, [(b.tolist(), *ctx.sizes, ctx.seed, ctx.library)
                                              for b in batches])
    return Sums(*np.concatenate([np.stack(s) for s in found], axis=1))


def groups_add_up(ctx: JoinContext, r: Reading, verdict) -> None:
    """Per group the reported count is the sums' exactly, ``sum_xy`` and ``mean_y`` to rounding."""
    totals = Sums(*(s.sum(axis=0) for s in r.source(verdict.depth)))
    name, _, whole = SOURCES[verdict.depth]
    if verdict.fail_all(group_problems(r.reported["aggregate"], totals, name)):
        verdict.establish(f"every group's count, sum_xy and mean_y equal the totals of {whole} "
                          "(counts exactly, sums to rounding)")


def group_problems(reported: dict, totals: Sums, source: str) -> list[str]:
    """``group g: FIELD got vs SOURCE want, ...`` for each group whose numbers disagree."""
    out = []
    for g in range(GROUPS):
        count = int(totals.count[g])
        relative = tolerance(1.0, count + 1)  # the rows' sums, then a division
        wrong = [] if reported["count"][g] == count else [
            f"count {reported['count'][g]} vs {source} {count}"]
        for name, got, want in (("sum_xy", reported["sum_xy"][g], totals.sum_xy[g]),
                                ("mean_y", reported["mean_y"][g],
                                 totals.sum_y[g] / count if count else None)):
            if got is None or want is None:
                wrong += [] if got is want else [f"{name} {_shown(got)} vs {source} "
                                                 f"{_shown(want)}"]
            elif not abs(got - want) <= relative * max(abs(got), abs(want)):  # NaN disagrees
                shown = apart(got, want)
                wrong.append(f"{name} {shown[0]} vs {source} {shown[1]}")
        if wrong:
            out.append(f"group {g}: {', '.join(wrong)}")
    return out


def _shown(value: float | None) -> str:
    return "none (no rows)" if value is None else f"{value:.6g}"


_STEPS = (blocks_as_defined, rows_add_up, cells_again, groups_add_up)
CHECK = Check(fast=_STEPS, full=(every_row_looked_up, *_STEPS), read=read, mutations=MUTATIONS)
