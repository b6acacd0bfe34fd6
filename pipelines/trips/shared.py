"""trips-pipeline's trips: their columns and synthetic partitions (the run and check share them).

The columns the ETL reads (``COLUMNS``), the definition of the synthetic trips and how they are
split into partitions (an input's partitions: Parquet row groups, CSV files, or row ranges of a
DataFrame in memory, ``("memory", number, start, stop)``). The run reads them with its own
reader (``host_chunks`` in :mod:`pipelines.trips.tasks`); the check reads them its own way.

Also the geometry of the run's certificates, which the fast check reads: each partition is cut
into cells of ``CELL_ROWS`` consecutive rows (in the order the partition is read), and each
cell's sums form a dense table of ``HOURS`` rows by ``SLOTS`` columns (passengers
``0 .. SLOTS - 2``, then one column for every other passenger count); the tables are projected
on ``projection_weights(seed)``.

:class:`TripsContext` is what the check knows of a run (``workload.context``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from daskgpu.toolkit import backends
from daskgpu.verification import Cells, Sampler, run_seed

COLUMNS = {
    "pickup_time": "datetime",
    "pickup_lat": "number",
    "pickup_lon": "number",
    "dropoff_lat": "number",
    "dropoff_lon": "number",
    "passengers": "integer",
    "fare": "number",
}


def synthetic_columns(spec: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """The columns of synthetic partition ``spec = (number, rows, seed)``, as NumPy arrays.

    The definition of the synthetic trips: the same for a seed wherever they are built.
    """
    number, rows, seed = spec
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(number,)))
    start = np.datetime64("2026-01-01T00:00:00", "s")
    seconds = rng.integers(0, 31 * 24 * 3600, rows)
    columns = {
        "pickup_time": start + seconds.astype("timedelta64[s]"),
        "pickup_lat": rng.uniform(40.55, 40.90, rows),
        "pickup_lon": rng.uniform(-74.10, -73.75, rows),
        "dropoff_lat": rng.uniform(40.55, 40.90, rows),
        "dropoff_lon": rng.uniform(-74.10, -73.75, rows),
        "passengers": rng.integers(0, 7, rows).astype(np.int64),
        # a few free or refunded rides, which the ETL drops
        "fare": np.round(rng.lognormal(2.5, 0.6, rows) - rng.binomial(1, 0.01, rows) * 40, 2),
    }
    # some trips start and end at the same place: zero distance, dropped too
    same = rng.random(rows) < 0.005
    columns["dropoff_lat"][same] = columns["pickup_lat"][same]
    columns["dropoff_lon"][same] = columns["pickup_lon"][same]
    return columns


def synthetic_partition(spec: tuple[int, int, int], library: str = "pandas"):
    """``rows`` synthetic trips of partition ``number`` as a frame of ``library``."""
    import pandas as pd

    return backends.from_pandas(pd.DataFrame(synthetic_columns(spec)), library)


def partition_specs(rows: int, seed: int, partitions: int) -> list[tuple[int, int, int]]:
    """The ``(number, rows, seed)`` of each synthetic partition."""
    sizes = [rows // partitions + (1 if i < rows % partitions else 0) for i in range(partitions)]
    return [(i, size, seed) for i, size in enumerate(sizes)]


#: Rows of a certificate cell, by the workers' dataframe library: small cells on CPU (their rows
#: come back for the sampled ones), larger ones on GPUs (one kernel launch each).
CELL_ROWS = {"pandas": 1 << 12, "cudf": 1 << 15}
#: A cell's dense table: hours of the day by passenger slots (``0 .. SLOTS - 2``, and the last
#: for any other passenger count: negative, larger or not a whole number).
HOURS = 24
SLOTS = 17
#: Integer weights of the random projections below are drawn from ``[1, WEIGHT_LIMIT)``.
WEIGHT_LIMIT = 1 << 20


def cell_count(rows: int, cell_rows: int) -> int:
    """Cells of a partition of ``rows`` rows."""
    return -(-rows // cell_rows)


def projection_weights(seed: int) -> np.ndarray:
    """``(HOURS * SLOTS, 2)`` int64 weights: ones, and seeded random integers.

    A cell's table (flattened, hour-major) times these is what the run reports per cell: its
    total and a random projection, which changes when a trip moves between groups.
    """
    rng = Sampler(seed, "projection weights").generator()
    cells = HOURS * SLOTS
    return np.stack([np.ones(cells, np.int64),
                     rng.integers(1, WEIGHT_LIMIT, cells, dtype=np.int64)], axis=1)


@dataclass(frozen=True)
class TripsContext:
    """What trips-pipeline's check knows of a run.

    Attributes
    ----------
    library : str
        The workers' dataframe library ("pandas", "cudf"): it sets the cells' rows.
    planned_rows : tuple of int
        The rows each partition was planned to read, in order (the cells were cut from these).
    seed, rows, partitions : int, optional
        Synthetic trips' seed, rows and partitions (None for an input).
    source : TableSource or FrameSource, optional
        The input (its ``kind``, ``rows``, and a file's ``files`` or a frame in memory's
        ``frame`` and ``form``), or None for synthetic trips.
    output : str, optional
        Where the table is written.
    bounds : tuple of (int, int)
        A frame in memory: the rows ``[start, stop)`` of the table (the frame's rows in order)
        that each partition reads; empty otherwise.
    """

    library: str
    planned_rows: tuple[int, ...]
    seed: int | None = None
    rows: int | None = None
    partitions: int | None = None
    source: Any = None
    output: str | None = None
    bounds: tuple[tuple[int, int], ...] = ()

    @property
    def sample_seed(self) -> int:
        """The seed of the cells drawn and of the projections: for an input, from its rows."""
        return run_seed(self.seed if self.source is None else None,
                        0 if self.source is None else self.source.rows)

    @property
    def cell_rows(self) -> int:
        """Rows of a cell."""
        return CELL_ROWS[self.library]

    def cells(self) -> Cells:
        """The cells of every partition, as planned."""
        return Cells(tuple(cell_count(rows, self.cell_rows) for rows in self.planned_rows))
