"""What join-pipeline and its independent check share: the group count, the cells, the context.

The aggregate groups joined rows by ``key % GROUPS``: the run (:mod:`pipelines.join.tasks`)
groups by it, the reported value (``present`` in :mod:`pipelines.join.pipeline`) lists its
groups, and the check (:mod:`pipelines.join.check`) totals its lookup by it, so neither the run
nor the check imports the other.

The run also sums its joined rows by cell of the left table (its certificates): rows
``[c * CELL_ROWS, (c + 1) * CELL_ROWS)`` of the left table are cell ``c``. Cells lie within the
blocks of ``BLOCK_ROWS`` rows that the synthetic tables are drawn in
(:mod:`daskgpu.data.synthetic_tables`), so that the fast check can draw a cell again by
drawing its block alone. :class:`JoinContext` is what the check knows of a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daskgpu.data.synthetic_tables import BLOCK_ROWS, partition_bounds
from daskgpu.verification import Cells

__all__ = ["BLOCK_ROWS", "CELL_ROWS", "GROUPS", "JoinContext"]

GROUPS = 16  # the aggregate groups by key % GROUPS
CELL_ROWS = 1 << 12  # rows of a certificate's cell: BLOCK_ROWS holds 16 of them


@dataclass(frozen=True)
class JoinContext:
    """What join-pipeline's check knows of a run.

    Attributes
    ----------
    rows, right_rows, matched : int
        Rows of the left and right tables, and left rows with a partner.
    seed : int
        The tables' seed.
    partitions : int
        Partitions of the left table.
    left, right : dask DataFrame
        The run's lazy tables (the full check looks every left row up in the right one).
    library : str
        The workers' array library ("numpy", "cupy").
    threads : int
        Worker threads of the cluster.
    """

    rows: int
    right_rows: int
    matched: int
    seed: int
    partitions: int
    left: Any
    right: Any
    library: str = "numpy"
    threads: int = 1

    @property
    def sizes(self) -> tuple[int, int, int]:
        """``(rows, right_rows, matched)``: what the tables' definition takes, besides the seed."""
        return self.rows, self.right_rows, self.matched

    @property
    def cells(self) -> Cells:
        """The cells of the left table, by block of ``BLOCK_ROWS`` rows."""
        blocks = -(-self.rows // BLOCK_ROWS)
        last = self.rows - (blocks - 1) * BLOCK_ROWS
        return Cells((BLOCK_ROWS // CELL_ROWS,) * (blocks - 1) + (-(-last // CELL_ROWS),))

    def starts(self) -> list[int]:
        """The first left row of every partition."""
        return [start for start, _ in partition_bounds(self.rows, self.partitions)]

    def partitions_of(self, cell: int) -> str:
        """The left partition(s) holding cell ``cell``'s rows: "partition 3", "partitions 3-4"."""
        first, last = cell * CELL_ROWS, min(self.rows, (cell + 1) * CELL_ROWS) - 1
        starts = self.starts()
        a, b = (sum(s <= row for s in starts) - 1 for row in (first, last))
        return f"partition {a}" if a == b else f"partitions {a}-{b}"
