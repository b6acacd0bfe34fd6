"""What join-pipeline and its independent check share: the group count and the cells.

The aggregate groups joined rows by ``key % GROUPS``: the run (:mod:`pipelines.join.tasks`)
groups by it, the reported value (``present`` in :mod:`pipelines.join.pipeline`) lists its
groups, and the check (:mod:`pipelines.join.check`) totals its lookup by it, so neither the run
nor the check imports the other.

The run also sums its joined rows by cell of the left table (its certificates): rows
``[c * CELL_ROWS, (c + 1) * CELL_ROWS)`` of the left table are cell ``c``. Cells lie within the
blocks of ``BLOCK_ROWS`` rows that the synthetic tables are drawn in
(:mod:`daskgpu.data.synthetic_tables`), so that the fast check can draw a cell again by
drawing its block alone.
"""

from __future__ import annotations

from daskgpu.data.synthetic_tables import BLOCK_ROWS

__all__ = ["BLOCK_ROWS", "CELL_ROWS", "GROUPS"]

GROUPS = 16  # the aggregate groups by key % GROUPS
CELL_ROWS = 1 << 12  # rows of a certificate's cell: BLOCK_ROWS holds 16 of them
