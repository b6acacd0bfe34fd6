"""What trips-pipeline runs on the workers: a fused kernel pass per partition, and the tree.

:func:`partial_sums` is one task: it reads one partition (a synthetic one, a Parquet row group
or a CSV file) once, only the needed columns (:func:`host_chunks`, the run's reader; cuDF on a
GPU worker), passes its columns through ``daskgpu.kernels.trips.trip_sums`` (on the GPU for GPU
workers, which copy just the small dense table to the host) and groups the rare trips outside
the dense table exactly. :func:`tree` builds the graph: a task per partition, their tables added
``TREE_WIDTH`` at a time, and the summed table by (hour, passengers) at the root. The graph holds
partition descriptions and functions only: the client builds no frame.
"""

from __future__ import annotations

import dask
import numpy as np
import pandas as pd

from daskgpu.kernels import trips as trip_kernel
from daskgpu.toolkit import backends
from pipelines.trips.shared import COLUMNS, synthetic_columns

#: The groups of the summed table: pickup hour and passengers.
GROUP = ["hour", "passengers"]
#: Partial tables added by one task of the tree.
TREE_WIDTH = 8
#: The kernel's columns after the pickup time, in its argument order.
VALUES = ("passengers", "fare", "pickup_lat", "pickup_lon", "dropoff_lat", "dropoff_lon")
#: Rows of a CSV file read (and summed) at a time.
CSV_CHUNK_ROWS = 2_000_000


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


def _kernel_columns(chunk: dict) -> tuple:
    """``(ticks, ticks per hour, *VALUES)`` of a chunk read on the host."""
    times = chunk["pickup_time"]
    if times.dtype.kind != "M" or np.datetime_data(times.dtype)[0] not in ("s", "ms", "us", "ns"):
        times = times.astype("datetime64[s]")
    return (times.view(np.int64), trip_kernel.ticks_per_hour(times.dtype),
            *(chunk[name] for name in VALUES))


def _device_chunks(partition: tuple, to_device):
    """The partition's kernel columns on this worker's GPU (cuDF reads the files there)."""
    if partition[0] == "synthetic":
        for chunk in host_chunks(partition):
            ticks, per_hour, *values = _kernel_columns(chunk)
            yield len(ticks), (to_device(ticks), per_hour, *(to_device(v) for v in values))
        return
    frame = backends.read_table_gpu(partition[0], partition[1], COLUMNS,
                                    partition[2] if partition[0] == "parquet" else None,
                                    dates=["pickup_time"])
    columns = backends.device_columns(frame, COLUMNS)
    ticks, dtype = columns["pickup_time"]
    yield len(frame), (ticks, trip_kernel.ticks_per_hour(dtype),
                       *(columns[name] for name in VALUES))


def _chunks(partition: tuple, to_device):
    if to_device is not None:
        yield from _device_chunks(partition, to_device)
    else:
        for chunk in host_chunks(partition):
            yield len(chunk["pickup_time"]), _kernel_columns(chunk)


def _outside_frame(columns: tuple) -> pd.DataFrame:
    """Exact groups of the trips whose passengers have no column in the dense table."""
    hours, riders, counts, fares, distances = trip_kernel.outside_sums(
        *(backends.to_host(c) for c in columns))
    if riders.dtype.kind == "f" and np.all(riders == np.floor(riders)):
        riders = riders.astype(np.int64)
    index = pd.MultiIndex.from_arrays([hours, riders], names=GROUP)
    return pd.DataFrame({"trips": counts, "fare_sum": fares, "distance_sum": distances},
                        index=index)


def partial_sums(partition: tuple, to_device=None) -> dict:
    """One partition read and summed by the fused kernel, on a worker: a small host table.

    ``{"rows", "counts", "sums", "outside"}``: rows read, the kernel's dense counts and sums
    (NumPy, copied from the device on a GPU worker) and a frame of the trips whose passengers
    are outside the dense table (``None`` when there are none, the usual case).
    """
    rows, counts, sums, outside = 0, 0, 0, []
    for n, columns in _chunks(partition, to_device):
        rows += n
        got_counts, got_sums = (backends.to_host(a) for a in trip_kernel.trip_sums(*columns))
        counts, sums = counts + got_counts, sums + got_sums
        if got_counts[:, trip_kernel.OUTSIDE].any():
            outside.append(_outside_frame(columns))
    if rows == 0:
        return _merged()
    return {"rows": rows, "counts": counts, "sums": sums, "outside": _regrouped(outside)}


def _regrouped(frames: list) -> pd.DataFrame | None:
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return None
    return pd.concat(frames).groupby(level=[0, 1]).sum() if len(frames) > 1 else frames[0]


def _merged(*partials: dict) -> dict:
    """Partial tables added: rows, counts and sums, and the outside groups regrouped."""
    width = trip_kernel.PASSENGER_SLOTS + 1
    return {"rows": sum(p["rows"] for p in partials),
            "counts": sum((p["counts"] for p in partials),
                          np.zeros((trip_kernel.HOURS, width), np.int64)),
            "sums": sum((p["sums"] for p in partials),
                        np.zeros((2, trip_kernel.HOURS, width), np.float64)),
            "outside": _regrouped([p["outside"] for p in partials])}


def _result(total: dict) -> dict:
    """The computed value: rows read and the summed table by (hour, passengers)."""
    counts = total["counts"][:, :trip_kernel.OUTSIDE]
    hours, riders = np.nonzero(counts)
    index = pd.MultiIndex.from_arrays([hours.astype(np.int64), riders.astype(np.int64)],
                                      names=GROUP)
    table = pd.DataFrame({"trips": counts[hours, riders],
                          "fare_sum": total["sums"][0][hours, riders],
                          "distance_sum": total["sums"][1][hours, riders]}, index=index)
    outside = total["outside"]
    expected = int(total["counts"][:, trip_kernel.OUTSIDE].sum())
    found = 0 if outside is None else int(outside["trips"].sum())
    if found != expected:  # the kernel and the exact path disagree: a bug, never a result
        raise RuntimeError(f"trips outside the dense table: {expected} counted, {found} grouped")
    if outside is not None:
        table = pd.concat([table, outside])
    return {"rows": int(total["rows"]), "table": table.sort_index()}


def tree(parts: list[tuple], to_device):
    """The summed table: a task per partition, their tables added ``TREE_WIDTH`` at a time."""
    level = [dask.delayed(partial_sums, pure=True)(p, to_device) for p in parts]
    while len(level) > 1:
        level = [dask.delayed(_merged, pure=True)(*level[i:i + TREE_WIDTH])
                 for i in range(0, len(level), TREE_WIDTH)]
    return dask.delayed(_result, pure=True)(level[0])
