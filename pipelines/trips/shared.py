"""trips-pipeline's trips: their columns and synthetic partitions (the run and check share them).

The columns the ETL reads (``COLUMNS``), the definition of the synthetic trips and how they are
split into partitions. The run reads them with its own reader (``host_chunks`` in
:mod:`pipelines.trips.tasks`); the check reads them its own way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from daskgpu.toolkit import backends

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
    return backends.from_pandas(pd.DataFrame(synthetic_columns(spec)), library)


def partition_specs(rows: int, seed: int, partitions: int) -> list[tuple[int, int, int]]:
    """The ``(number, rows, seed)`` of each synthetic partition."""
    sizes = [rows // partitions + (1 if i < rows % partitions else 0) for i in range(partitions)]
    return [(i, size, seed) for i, size in enumerate(sizes)]
