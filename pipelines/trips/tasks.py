"""What trips-pipeline runs on the workers: a fused kernel pass per partition, and the tree.

:func:`partial_sums` is one task: it reads one partition (a synthetic one, a Parquet row group,
a CSV file, or a range of a DataFrame's rows, which arrives as the task's argument) once, only
the needed columns (:func:`host_chunks`, the run's reader; cuDF on a GPU worker), passes its
columns through ``daskgpu.kernels.trips.trip_sums`` (on the GPU for GPU workers, which copy
just the small dense table to the host) and groups the rare trips outside the dense table
exactly. :func:`tree` builds the graph: a task per partition, their tables added
``TREE_WIDTH`` at a time, and the summed table by (hour, passengers) at the root. The graph holds
partition descriptions and functions only (and a frame in memory's rows, sent once): the client
builds no frame.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import dask
import numpy as np

from daskgpu.data import frame_input
from daskgpu.toolkit import backends
from pipelines.trips.shared import (
    CELL_ROWS,
    COLUMNS,
    HOURS,
    SLOTS,
    projection_weights,
    synthetic_columns,
)

if TYPE_CHECKING:  # pandas only where a CSV file is read or passengers are unusual
    import pandas as pd

#: The groups of the summed table: pickup hour and passengers.
GROUP = ["hour", "passengers"]
#: Partial tables added by one task of the tree.
TREE_WIDTH = 8
# The dense table's column of every other passenger count (the kernel's OUTSIDE; a test holds
# shared's layout to the kernel's).
OUTSIDE = SLOTS - 1
#: The kernel's columns after the pickup time, in its argument order.
VALUES = ("passengers", "fare", "pickup_lat", "pickup_lon", "dropoff_lat", "dropoff_lon")
#: Rows of a CSV file read (and summed) at a time: a whole number of cells on every backend.
CSV_CHUNK_ROWS = 1 << 21


def _kernel():
    """:mod:`daskgpu.kernels.trips`, loaded on a task's first use.

    The client, which builds the graph and checks the result, never imports Numba: the
    pipeline names the module as its workers' own, which their fork server imports.
    """
    from daskgpu.kernels import trips

    return trips


def _arrow_values(column) -> np.ndarray:
    """A pyarrow column as NumPy: times naive on the wall clock (NaT for nulls), NaN for nulls."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        column = pc.local_timestamp(column)
    elif pa.types.is_date(kind):
        column = column.cast(pa.timestamp("s"))
    if column.null_count == 0:
        with contextlib.suppress(TypeError, BufferError):
            return _shared_values(column)
    return column.to_numpy()


def _shared_values(column) -> np.ndarray:
    """A pyarrow column without nulls as NumPy, sharing its memory, through DLPack.

    pyarrow's own ``to_numpy`` imports pandas (where it is installed) on first use: about 0.3 s
    of a worker's first task, for a conversion that copies nothing. Times pass as their int64
    ticks. Raises TypeError or BufferError for a type DLPack does not carry.
    """
    import pyarrow as pa

    values = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if pa.types.is_timestamp(values.type):
        return np.from_dlpack(values.cast(pa.int64())).view(f"datetime64[{values.type.unit}]")
    return np.from_dlpack(values)


def _pandas_values(series: pd.Series) -> np.ndarray:
    """A pandas column as NumPy, the same way as ``_arrow_values``."""
    if getattr(series.dtype, "tz", None) is not None:
        series = series.dt.tz_localize(None)
    numpy_dtype = getattr(series.dtype, "numpy_dtype", None)  # nullable extension types
    if numpy_dtype is not None and series.hasnans:
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    return series.to_numpy()


def host_chunks(partition: tuple, data=None):
    """The needed columns of one partition as dicts of NumPy arrays, read here, once.

    ``partition`` is ``("synthetic", spec)``, ``("parquet", file, row group)``,
    ``("csv", file)`` (read in chunks of ``CSV_CHUNK_ROWS``) or ``("memory", number, start,
    stop)``, whose rows are ``data`` (a pandas frame; cuDF's are copied to the host). Only
    ``COLUMNS`` are read; ``pickup_time`` is ``datetime64`` on the wall clock, NaT where
    missing; numbers with missing values are float64 with NaN.
    """
    kind = partition[0]
    if kind == "synthetic":
        yield synthetic_columns(partition[1])
    elif kind == "memory":
        frame = data.to_pandas() if frame_input.library(data) == "cudf" else data
        if len(frame):
            yield {name: _pandas_values(frame[name]) for name in COLUMNS}
    elif kind == "parquet":
        import pyarrow.parquet as pq

        table = pq.ParquetFile(partition[1]).read_row_group(partition[2], columns=list(COLUMNS),
                                                           use_threads=False)
        yield {name: _arrow_values(table.column(name)) for name in COLUMNS}
    else:
        import pandas as pd

        with pd.read_csv(partition[1], usecols=list(COLUMNS), parse_dates=["pickup_time"],
                         chunksize=CSV_CHUNK_ROWS) as chunks:
            for chunk in chunks:
                if len(chunk) == 0:  # a header alone: no types to read
                    continue
                if chunk["pickup_time"].dtype.kind != "M":  # a chunk without any time
                    chunk["pickup_time"] = pd.to_datetime(chunk["pickup_time"])
                yield {name: _pandas_values(chunk[name]) for name in COLUMNS}


def _host_chunks(partition: tuple, data):
    """:func:`host_chunks` of a partition, with a frame's rows where it has them."""
    return host_chunks(partition) if data is None else host_chunks(partition, data)


def _kernel_columns(chunk: dict) -> tuple:
    """``(ticks, ticks per hour, *VALUES)`` of a chunk read on the host."""
    times = chunk["pickup_time"]
    if times.dtype.kind != "M" or np.datetime_data(times.dtype)[0] not in ("s", "ms", "us", "ns"):
        times = times.astype("datetime64[s]")
    return (times.view(np.int64), _kernel().ticks_per_hour(times.dtype),
            *(chunk[name] for name in VALUES))


def _device_chunks(partition: tuple, to_device, data=None):
    """The partition's kernel columns on this worker's GPU.

    cuDF reads the files there; a frame's cuDF rows are used where they are, pandas rows are
    copied to the device.
    """
    if partition[0] == "synthetic" or (partition[0] == "memory"
                                       and frame_input.library(data) != "cudf"):
        for chunk in _host_chunks(partition, data):
            ticks, per_hour, *values = _kernel_columns(chunk)
            yield len(ticks), (to_device(ticks), per_hour, *(to_device(v) for v in values)), chunk
        return
    if partition[0] == "memory":
        frame = data
    else:
        frame = backends.read_table_gpu(partition[0], partition[1], COLUMNS,
                                        partition[2] if partition[0] == "parquet" else None,
                                        dates=["pickup_time"])
    columns = backends.device_columns(frame, COLUMNS)
    ticks, dtype = columns["pickup_time"]
    yield len(frame), (ticks, _kernel().ticks_per_hour(dtype),
                       *(columns[name] for name in VALUES)), columns


def _chunks(partition: tuple, to_device, data=None):
    """``(rows, kernel columns, the columns as read)`` of each chunk of a partition.

    ``data``: a frame's rows, for a ``("memory", ...)`` partition.
    """
    if to_device is not None:
        yield from _device_chunks(partition, to_device, data)
    else:
        for chunk in _host_chunks(partition, data):
            yield len(chunk["pickup_time"]), _kernel_columns(chunk), chunk


def _outside_frame(columns: tuple) -> pd.DataFrame:
    """Exact groups of the trips whose passengers have no column in the dense table."""
    import pandas as pd

    hours, riders, counts, fares, distances = _kernel().outside_sums(
        *(backends.to_host(c) for c in columns))
    if riders.dtype.kind == "f" and np.all(riders == np.floor(riders)):
        riders = riders.astype(np.int64)
    index = pd.MultiIndex.from_arrays([hours, riders], names=GROUP)
    return pd.DataFrame({"trips": counts, "fare_sum": fares, "distance_sum": distances},
                        index=index)


def _rows_as_read(columns: dict, start: int, stop: int) -> dict:
    """Rows ``start:stop`` of a chunk's columns as read, copied to the host.

    Times come back as ``datetime64`` (a GPU reader's ``(ticks, dtype)`` viewed as its dtype).
    """
    out = {}
    for name, column in columns.items():
        if isinstance(column, tuple):  # device ticks and their datetime64 dtype
            out[name] = np.asarray(backends.to_host(column[0][start:stop])).view(column[1])
        else:
            out[name] = np.array(backends.to_host(column[start:stop]), copy=True)
    return out


def _cell_sums(n: int, columns: tuple, as_read: dict, cells: dict, first: int) -> dict:
    """One chunk summed cell by cell by the fused kernel: its table and its cells' certificates.

    Each cell of ``cells["rows"]`` rows is one kernel call (on the GPU for device columns, each
    small table then copied to the host); the chunk's table is the sum of the cells' tables.
    Per cell the certificate holds its rows and its table projected on ``projection_weights``
    (exact for counts); a cell of ``cells["sampled"]`` (numbered in the partition, this chunk's
    first being ``first``) also keeps its table and its rows as read.
    """
    size = cells["rows"]
    starts = range(0, n, size)
    trip_sums = _kernel().trip_sums
    tables = [[backends.to_host(a) for a in trip_sums(
        *(c[s:s + size] if hasattr(c, "shape") else c for c in columns))] for s in starts]
    counts, sums = np.stack([t[0] for t in tables]), np.stack([t[1] for t in tables])
    weights = projection_weights(cells["seed"])
    # In float64, exact for counts: each projection is an integer below 2**53.
    projected = (counts.reshape(len(tables), -1).astype(np.float64) @ weights,
                 sums.reshape(len(tables), 2, -1) @ weights.astype(np.float64))
    sampled = {cell: {"counts": counts[cell - first], "sums": sums[cell - first],
                      "rows": _rows_as_read(as_read, (cell - first) * size,
                                            min(n, (cell - first + 1) * size))}
               for cell in cells["sampled"] if first <= cell < first + len(tables)}
    return {"counts": counts.sum(axis=0), "sums": sums.sum(axis=0),
            "cell_rows": np.array([min(size, n - s) for s in starts], np.int64),
            "cell_counts": np.rint(projected[0]).astype(np.int64), "cell_sums": projected[1],
            "sampled": sampled}


def _certificate(partition: tuple, rows: int, pieces: list[dict], outside) -> dict:
    """What the fast check reads of one partition: its table, its cells, its sampled cells."""
    empty = {"cell_rows": np.zeros(0, np.int64), "cell_counts": np.zeros((0, 2), np.int64),
             "cell_sums": np.zeros((0, 2, 2))}
    joined = {name: np.concatenate([p[name] for p in pieces]) if pieces else value
              for name, value in empty.items()}
    return {"partition": partition, "rows": rows,
            "counts": sum((p["counts"] for p in pieces), np.zeros((HOURS, SLOTS), np.int64)),
            "sums": sum((p["sums"] for p in pieces), np.zeros((2, HOURS, SLOTS))),
            "outside": outside, **joined,
            "sampled": {k: v for p in pieces for k, v in p["sampled"].items()}}


def partial_sums(partition: tuple, to_device=None, cells: dict | None = None,
                 data=None) -> dict:
    """One partition read and summed by the fused kernel, on a worker: a small host table.

    ``{"rows", "counts", "sums", "outside", "certificates"}``: rows read, the kernel's dense
    counts and sums (NumPy, copied from the device on a GPU worker), a frame of the trips whose
    passengers are outside the dense table (``None`` when there are none, the usual case), and
    a one-item list: the partition's certificate for the fast check (see :func:`_cell_sums`).
    ``cells`` says the cells' rows, the seed of their projections and which cells are sampled
    (default: the backend's cells, none sampled). ``data``: the rows of a ``("memory", ...)``
    partition (a pandas or cuDF frame), which the graph hands in.
    """
    if cells is None:
        cells = {"rows": CELL_ROWS["pandas" if to_device is None else "cudf"], "seed": 0,
                 "sampled": ()}
    rows, pieces, outside = 0, [], []
    chunks = _chunks(partition, to_device) if data is None else _chunks(partition, to_device, data)
    for n, columns, as_read in chunks:
        if n:
            piece = _cell_sums(n, columns, as_read, cells, rows // cells["rows"])
            pieces.append(piece)
            if piece["counts"][:, OUTSIDE].any():
                outside.append(_outside_frame(columns))
        rows += n
    outside = _regrouped(outside)
    certificate = _certificate(partition, rows, pieces, outside)
    return {"rows": rows, "counts": certificate["counts"], "sums": certificate["sums"],
            "outside": outside, "certificates": [certificate]}


def _regrouped(frames: list) -> pd.DataFrame | None:
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return None
    if len(frames) == 1:
        return frames[0]
    import pandas as pd

    return pd.concat(frames).groupby(level=[0, 1]).sum()


def _merged(*partials: dict) -> dict:
    """Partial tables added: rows, counts, sums, outside groups, and certificates in order."""
    return {"rows": sum(p["rows"] for p in partials),
            "counts": sum((p["counts"] for p in partials), np.zeros((HOURS, SLOTS), np.int64)),
            "sums": sum((p["sums"] for p in partials),
                        np.zeros((2, HOURS, SLOTS), np.float64)),
            "outside": _regrouped([p["outside"] for p in partials]),
            "certificates": [c for p in partials for c in p["certificates"]]}


def _result(total: dict) -> dict:
    """The computed value: rows read and the summed table, its columns as NumPy arrays.

    ``table`` holds ``hour``, ``passengers`` (the groups, sorted), ``trips``, ``fare_sum`` and
    ``distance_sum``: the client makes the frame (a worker imports no pandas for it).
    """
    counts = total["counts"][:, :OUTSIDE]
    hours, riders = np.nonzero(counts)
    table = {"hour": hours.astype(np.int64), "passengers": riders.astype(np.int64),
             "trips": counts[hours, riders], "fare_sum": total["sums"][0][hours, riders],
             "distance_sum": total["sums"][1][hours, riders]}
    outside = total["outside"]
    expected = int(total["counts"][:, OUTSIDE].sum())
    found = 0 if outside is None else int(outside["trips"].sum())
    if found != expected:  # the kernel and the exact path disagree: a bug, never a result
        raise RuntimeError(f"trips outside the dense table: {expected} counted, {found} grouped")
    if outside is not None:
        groups = outside.reset_index()
        table = {name: np.concatenate([values, groups[name].to_numpy()])
                 for name, values in table.items()}
    order = np.lexsort((table["passengers"], table["hour"]))
    return {"rows": int(total["rows"]), "table": {k: v[order] for k, v in table.items()},
            "partitions": total["certificates"]}


def tree(parts: list[tuple], to_device, cells: list[dict], data: list | None = None):
    """The summed table: a task per partition, their tables added ``TREE_WIDTH`` at a time.

    ``cells[i]`` is partition ``i``'s cell plan (see :func:`partial_sums`); ``data[i]``, for
    a frame in memory, its rows (a Future or a Delayed: the task receives them). The result
    also holds every partition's certificate, in order (``partitions``).
    """
    if data is None:
        level = [dask.delayed(partial_sums, pure=True)(p, to_device, c)
                 for p, c in zip(parts, cells, strict=True)]
    else:
        level = [dask.delayed(partial_sums, pure=True)(p, to_device, c, rows)
                 for p, c, rows in zip(parts, cells, data, strict=True)]
    while len(level) > 1:
        level = [dask.delayed(_merged, pure=True)(*level[i:i + TREE_WIDTH])
                 for i in range(0, len(level), TREE_WIDTH)]
    return dask.delayed(_result, pure=True)(level[0])
