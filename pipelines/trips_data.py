"""trips-pipeline's trips: their columns and synthetic partitions (ETL and check share them).

It also holds the run's reader (``host_chunks``): one partition's needed columns as NumPy
arrays, read once, on a worker. The check reads the trips its own way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from daskgpu import backends

#: The kernel's columns after the pickup time, in its argument order.
VALUES = ("passengers", "fare", "pickup_lat", "pickup_lon", "dropoff_lat", "dropoff_lon")
#: Rows of a CSV file read (and summed) at a time.
CSV_CHUNK_ROWS = 2_000_000

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


def _arrow_values(column) -> np.ndarray:
    """A pyarrow column as NumPy: times naive on the wall clock (NaT for nulls), NaN for nulls."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        column = pc.local_timestamp(column)
    elif pa.types.is_date(kind):
        column = column.cast(pa.timestamp("s"))
    return column.to_numpy()


def _pandas_values(series: pd.Series) -> np.ndarray:
    """A pandas column as NumPy, the same way as ``_arrow_values``."""
    if getattr(series.dtype, "tz", None) is not None:
        series = series.dt.tz_localize(None)
    numpy_dtype = getattr(series.dtype, "numpy_dtype", None)  # nullable extension types
    if numpy_dtype is not None and series.hasnans:
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    return series.to_numpy()


def host_chunks(partition: tuple):
    """The needed columns of one partition as dicts of NumPy arrays, read here, once.

    ``partition`` is ``("synthetic", spec)``, ``("parquet", file, row group)`` or
    ``("csv", file)`` (read in chunks of ``CSV_CHUNK_ROWS``). Only ``COLUMNS`` are read;
    ``pickup_time`` is ``datetime64`` on the wall clock, NaT where missing; numbers with missing
    values are float64 with NaN.
    """
    kind = partition[0]
    if kind == "synthetic":
        yield synthetic_columns(partition[1])
    elif kind == "parquet":
        import pyarrow.parquet as pq

        table = pq.ParquetFile(partition[1]).read_row_group(partition[2], columns=list(COLUMNS),
                                                           use_threads=False)
        yield {name: _arrow_values(table.column(name)) for name in COLUMNS}
    else:
        with pd.read_csv(partition[1], usecols=list(COLUMNS), parse_dates=["pickup_time"],
                         chunksize=CSV_CHUNK_ROWS) as chunks:
            for chunk in chunks:
                if len(chunk) == 0:  # a header alone: no types to read
                    continue
                if chunk["pickup_time"].dtype.kind != "M":  # a chunk without any time
                    chunk["pickup_time"] = pd.to_datetime(chunk["pickup_time"])
                yield {name: _pandas_values(chunk[name]) for name in COLUMNS}
