"""histogram-pipeline's fast-only steps: the checked cells, drawn again or re-read, and binned.

The run bins each checked cell (``ctx.cell_plan()``) by a kernel call of its own; the check bins
it again here with ``numpy.histogram``.
"""

from __future__ import annotations

import math

import dask
import numpy as np

from daskgpu.verification import differences
from pipelines.histogram.check_replay import cell_values, counted
from pipelines.histogram.shared import CELL, HistogramContext


def cells_again(ctx: HistogramContext, r, verdict) -> None:
    """The checked cells drawn again or re-read and binned: the replay ``cells_agree`` judges."""
    plan, width = ctx.cell_plan(), ctx.bins + 1
    if not (verdict.require(r.cells.shape == (len(plan), width), lambda: (
            f"cells: {len(r.cells)} checked cells' counts reported, {len(plan)} expected"))
            and verdict.require(not ctx.random or r.states.shape == (len(plan), 6), lambda: (
                f"states: {len(r.states)} reported for {len(plan)} checked cells"))):
        return
    again, low, high = np.zeros((len(plan), width + 1), dtype=np.int64), math.inf, -math.inf
    if ctx.random:  # one at a time into one buffer: each used before the next is drawn
        buffer = np.empty(CELL, dtype=ctx.dtype)
        had = (cell_values(ctx, cell, r.states[i], buffer) for i, cell in enumerate(plan))
    else:  # the input's slabs read again together, where they are
        had = (np.asarray(values).ravel()
               for values in dask.compute(*[cell_values(ctx, cell) for cell in plan]))
    for i, (cell, values) in enumerate(zip(plan, had, strict=True)):
        if isinstance(values, str):
            verdict.fail(f"{cell_named(ctx, i, cell)}: {values}")
            continue
        again[i, :width] = counted(values, ctx.lo, ctx.hi, ctx.bins)
        finite = values[np.isfinite(values)]
        again[i, width] = finite.size - again[i, :ctx.bins].sum()  # finite values outside
        if finite.size:
            low, high = min(low, float(finite.min())), max(high, float(finite.max()))
    r.again.update(plan=plan, cells=again)
    r.found = (low, high)


def cell_named(ctx: HistogramContext, i: int, cell: int) -> str:
    """Checked cell ``i`` (number ``cell``), named by its block and rows."""
    block, first, stop = ctx.cell_rows(cell)
    return f"cell {i} (block {block}, rows {first} to {stop - 1})"


def cells_agree(ctx: HistogramContext, r, verdict) -> None:
    """numpy.histogram of every checked cell equals the kernel's counts of it, bin by bin.

    An input binned in its own range: no finite value of a cell lies outside it.
    """
    plan, again, bins = r.again["plan"], r.again["cells"], ctx.bins
    problems = []
    for i, cell in enumerate(plan):
        wrong = differences(r.cells[i], again[i, :-1], what="bin", reported_as="by the kernel",
                            expected_as="numpy.histogram", unit="counts",
                            label=lambda j: "NaN" if j == bins else f"bin {j}")
        if not wrong and not ctx.random and ctx.range_given is None and again[i, -1]:
            wrong = f"range: {again[i, -1]} finite values outside [{ctx.lo:.6g}, {ctx.hi:.6g}]"
        problems.append(wrong and f"{cell_named(ctx, i, cell)}: {wrong}")
    if verdict.fail_all(problems):
        how = "drawn again" if ctx.random else "re-read"
        verdict.establish(f"{plan.promise}: numpy.histogram of each, {how}, equals the "
                          "kernel's counts bin by bin")
