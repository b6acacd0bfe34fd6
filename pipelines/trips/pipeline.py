"""trips-pipeline: taxi-trip ETL, one fused kernel pass per partition, summed in a tree.

Each partition (synthetic, a Parquet row group, or a CSV file) is read once, in its task, and
only the 7 columns the ETL needs; ``daskgpu.kernels.trips.trip_sums`` computes the distance,
applies the filter and sums trips, fares and distances by pickup hour and passengers into a small
dense table (on the GPU for GPU workers, which copy just that table to the host), and the tables
are added in a tree of tasks. The client builds no frame: its graph holds partition descriptions
and functions only.

An input is Parquet or CSV (a row group or a file a partition), or a pandas, cuDF or Dask
DataFrame in memory (:mod:`daskgpu.data.frame_input`): a pandas or cuDF frame is cut into the
pipeline's partitions, each sent to the workers once; a Dask DataFrame's own partitions are
used where they suit (:data:`ROWS_PER_PARTITION`), else its rows are repartitioned, which the
run's data says. Either way a partition is a range of the table's rows.

This module holds the parameters, ``settle``, the one-process baseline (a pandas or cuDF ETL on
the concatenated trips), the reported value and ``prepare``, which assembles the workload; the
reader, the tasks and their tree are in :mod:`pipelines.trips.tasks`, the trips' columns and
synthetic partitions in :mod:`pipelines.trips.shared`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from daskgpu.data import frame_input
from daskgpu.errors import ParameterError
from daskgpu.toolkit import backends
from daskgpu.toolkit import output as output_files
from daskgpu.toolkit.params import (
    Param,
    non_negative_int,
    output_path,
    path_or_frame,
    positive_int,
    refuse_with_input,
)
from daskgpu.toolkit.registry import Resolved, Workload, pipeline
from daskgpu.toolkit.timing import timed
from pipelines.trips import SUMMARY
from pipelines.trips.check import CHECK
from pipelines.trips.check_fast import drawn_cells
from pipelines.trips.shared import (
    COLUMNS,
    TripsContext,
    partition_specs,
    synthetic_partition,
)
from pipelines.trips.tasks import GROUP, partial_sums, tree

if TYPE_CHECKING:  # pandas only where a frame is built (the baseline, an --output file)
    import pandas as pd

CPU_DEFAULT_ROWS = 20_000_000
GPU_DEFAULT_ROWS = 200_000_000
ROWS_PER_PARTITION = 2_000_000
# Options that shape generated trips: refused with an --input, where they would do nothing.
GENERATED = ("rows", "seed", "partitions")
# More synthetic rows than this would make more partitions than a graph can hold.
MAX_ROWS = ROWS_PER_PARTITION * 100_000


def _rows(value) -> int:
    number = positive_int(value)
    if number > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS:.0e} rows")
    return number


PARAMS = (
    Param("rows", _rows, None, "Rows of synthetic trips [default: 20 million on CPU, "
          "200 million on GPUs].", "N"),
    Param("seed", non_negative_int, None, "Seed of the synthetic trips [default: fresh, "
          "reported].", "INT"),
    Param("partitions", positive_int, None, "Partitions of the synthetic trips [default: a "
          f"multiple of the worker threads, at most {ROWS_PER_PARTITION:.0e} rows each].", "N"),
    Param("input", path_or_frame, None, "Trips from Parquet or CSV (file, directory or glob) "
          "instead of synthetic ones (from Python also a pandas, cuDF or Dask DataFrame).",
          "PATH"),
    Param("output", output_path((".parquet", ".csv")), None, "Write the result table to this "
          ".parquet or .csv file.", "PATH"),
)


def _with_distance(part):
    """Add ``distance_km`` with daskgpu's haversine kernel (the baseline's ETL, on a frame)."""
    from daskgpu.kernels.haversine import haversine_km

    distance = haversine_km(part["pickup_lat"], part["pickup_lon"], part["dropoff_lat"],
                            part["dropoff_lon"])
    part = part.copy()
    part["distance_km"] = distance
    return part


def _aggregate(frame):
    """Drop non-positive distance or fare, group by pickup hour and passengers, sum and count."""
    kept = frame[(frame["distance_km"] > 0) & (frame["fare"] > 0)]
    kept = kept.assign(hour=kept["pickup_time"].dt.hour)
    return kept.groupby(GROUP).agg(
        trips=("fare", "count"), fare_sum=("fare", "sum"), distance_sum=("distance_km", "sum")
    )


def finish(sums: dict) -> dict[str, list]:
    """Means and fare per km from summed columns, sorted by hour and passengers, as lists.

    ``sums`` maps ``hour``, ``passengers``, ``trips``, ``fare_sum`` and ``distance_sum`` to
    arrays with one entry per group; the result holds ``hour``, ``passengers``, ``trips``,
    ``fare_mean``, ``distance_mean_km`` and ``fare_per_km``.
    """
    hour, passengers = (np.asarray(sums[name]) for name in GROUP)
    order = np.lexsort((passengers, hour))
    trips, fare, distance = (np.asarray(sums[name])[order]
                             for name in ("trips", "fare_sum", "distance_sum"))
    with np.errstate(divide="ignore", invalid="ignore"):
        columns = {"hour": hour[order], "passengers": passengers[order],
                   "trips": trips.astype(np.int64), "fare_mean": fare / trips,
                   "distance_mean_km": distance / trips, "fare_per_km": fare / distance}
    return {name: values.tolist() for name, values in columns.items()}


def _frame_sums(frame) -> dict:
    """The baseline's grouped pandas frame as the columns :func:`finish` takes."""
    return {name: column.to_numpy() for name, column in frame.reset_index().items()}


def default_partitions(rows: int, backend) -> int:
    """A multiple of the worker threads, at most ``ROWS_PER_PARTITION`` rows each."""
    slots = max(1, backend.threads)
    partitions = max(slots, math.ceil(rows / ROWS_PER_PARTITION))
    return min(rows, math.ceil(partitions / slots) * slots)


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Open and check the input once, or choose the synthetic rows and partitions.

    With an ``input``, the options of generated trips (``GENERATED``) are refused. A DataFrame
    in memory is named in the values by its label (type, rows, columns) and kept in the inputs.
    """
    values = dict(values)
    if values["input"] is not None:
        refuse_with_input(PARAMS, values, GENERATED, "trips")
        # Imported here: the workers, which import this module, never open an input.
        from daskgpu.data import table_input

        source = table_input.open_table(values["input"], COLUMNS, backend=backend)
        values["input"] = source.path  # a frame in memory: named, never held in the values
        return values, {"input": source}
    if values["rows"] is None:
        values["rows"] = GPU_DEFAULT_ROWS if backend.is_gpu else CPU_DEFAULT_ROWS
    if values["partitions"] is None:
        values["partitions"] = default_partitions(values["rows"], backend)
    elif values["partitions"] > values["rows"]:
        raise ParameterError(f"--partitions {values['partitions']}: more than the "
                             f"{values['rows']} rows; use at most --rows")
    return values, {}


def _partitions(resolved: Resolved, source=None) -> tuple[list[tuple], dict]:
    """What each task reads, and the data's description: synthetic specs, row groups, files.

    A frame in memory: its row ranges (:func:`_frame_partitions`; ``source``: the input as
    the run reads it, a Dask DataFrame's rows counted).
    """
    if resolved["input"] is not None:
        source = source if source is not None else resolved.inputs["input"]
        if source.kind == "memory":
            return _frame_partitions(source, resolved.backend)
        if source.kind == "parquet":
            parts = [("parquet", file, group)
                     for file, groups in zip(source.files, source.row_groups, strict=True)
                     for group in range(groups)]
        else:
            parts = [("csv", file) for file in source.files]
        return parts, {"source": resolved["input"], "format": source.kind, "rows": source.rows}
    rows, seed = resolved["rows"], resolved["seed"]
    parts = [("synthetic", spec) for spec in partition_specs(rows, seed, resolved["partitions"])]
    return parts, {"source": "synthetic", "seed": seed, "rows": rows}


def _frame_partitions(source, backend) -> tuple[list[tuple], dict]:
    """A frame in memory's partitions ``("memory", number, start, stop)``, and its description.

    A pandas or cuDF frame is cut as synthetic trips are (:func:`default_partitions`); a Dask
    DataFrame's own partitions are kept where they suit, else its rows are cut the same way and
    the description says so (``"repartitioned"``).
    """
    described = {"source": source.label, "format": "memory", "rows": source.rows}
    parts = default_partitions(source.rows, backend)
    if source.form == "dask" and frame_input.suits(source.lengths, parts, ROWS_PER_PARTITION):
        bounds = frame_input.bounds_of(source.lengths)
    else:
        bounds = frame_input.even_bounds(source.rows, parts)
        if source.form == "dask":
            described["repartitioned"] = frame_input.repartitioned(source.lengths, parts)
    return [("memory", i, a, b) for i, (a, b) in enumerate(bounds)], described


def _csv_lines(file: str) -> int:
    """Lines after a CSV file's header: its rows, unless it has blank lines."""
    newlines, last = 0, b"\n"
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            newlines += block.count(b"\n")
            last = block[-1:]
    return max(0, newlines + (last != b"\n") - 1)


def _planned_rows(part: tuple) -> int:
    """Rows a partition will read: synthetic, a row group's, a CSV's lines, a frame's range."""
    if part[0] == "synthetic":
        return part[1][1]
    if part[0] == "memory":
        return part[3] - part[2]
    if part[0] == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(part[1]).metadata.row_group(part[2]).num_rows
    return _csv_lines(part[1])


def context(resolved: Resolved, parts: list[tuple], source=None) -> TripsContext:
    """What the check knows of the run: its data, and the rows each partition will read.

    ``source``: the input as the run reads it (a Dask DataFrame's, counted).
    """
    source = source if source is not None else resolved.inputs.get("input")
    rows = tuple(_planned_rows(p) for p in parts)
    library = resolved.backend.dataframe_library
    if resolved["input"] is not None:
        bounds = tuple((p[2], p[3]) for p in parts if p[0] == "memory")
        return TripsContext(library, rows, source=source, output=resolved["output"],
                            bounds=bounds)
    return TripsContext(library, rows, resolved["seed"], resolved["rows"],
                        resolved["partitions"], output=resolved["output"])


def cell_plan(ctx: TripsContext) -> list[dict]:
    """Each partition's cells, the ``cells`` argument of its task.

    Every partition is cut into cells of ``ctx.cell_rows`` rows, and its task keeps the rows of
    those the fast check draws (:func:`~pipelines.trips.check_fast.drawn_cells`).
    """
    sampled: list[list[int]] = [[] for _ in ctx.planned_rows]
    for partition, cell in drawn_cells(ctx):
        sampled[partition].append(cell)
    return [{"rows": ctx.cell_rows, "seed": ctx.sample_seed, "sampled": tuple(cells)}
            for cells in sampled]


def _read_pandas(source) -> pd.DataFrame:
    import pandas as pd

    if source.kind == "memory":
        return frame_input.whole(source, COLUMNS).reset_index(drop=True)
    if source.kind == "parquet":
        return pd.concat([pd.read_parquet(f, columns=list(COLUMNS)) for f in source.files],
                         ignore_index=True)
    return pd.concat([pd.read_csv(f, usecols=list(COLUMNS), parse_dates=["pickup_time"])
                      for f in source.files], ignore_index=True)


def _pandas_etl(frame: pd.DataFrame) -> dict[str, list]:
    from daskgpu.kernels.haversine import haversine_numpy

    distance = haversine_numpy(frame["pickup_lat"].to_numpy(), frame["pickup_lon"].to_numpy(),
                               frame["dropoff_lat"].to_numpy(), frame["dropoff_lon"].to_numpy())
    return finish(_frame_sums(_aggregate(frame.assign(distance_km=distance))))


def baseline(resolved: Resolved) -> tuple[float, dict]:
    """Seconds of the same ETL in one process on the same trips, concatenated, and its answer.

    pandas with NumPy's haversine on CPU; cuDF with the CUDA haversine kernel on a GPU worker.
    The trips are generated (the same partitions, for the run's seed) or read first, untimed.
    The answer has the run's reported form (see ``_answer``).
    """
    import pandas as pd

    backend = resolved.backend
    if resolved["input"] is not None:
        frame = _read_pandas(resolved.inputs["input"])
    else:
        specs = partition_specs(resolved["rows"], resolved["seed"], resolved["partitions"])
        frame = pd.concat([synthetic_partition(s) for s in specs], ignore_index=True)
    if not backend.is_gpu:
        seconds, table = timed(backend, lambda: _pandas_etl(frame))
        return seconds, _answer(len(frame), table)
    on_device = backends.from_pandas(frame, backend.dataframe_library)
    seconds, sums = timed(backend, lambda: _aggregate(_with_distance(on_device)))
    return seconds, _answer(len(frame), finish(_frame_sums(backends.to_host(sums))))


def warm_up(backend_name: str) -> None:
    """On a worker as it starts: the fused kernel on a 64-row partition, so no run compiles it.

    CPU workers load the twin from Numba's cache; GPU workers compile the CUDA kernel for the
    columns' types of generated partitions (or load it from the cache).
    """
    on_gpu = backends.Backend("gpu", "cupy", "cudf") if backend_name == "gpu" else None
    partial_sums(("synthetic", (0, 64, 0)), on_gpu.to_device() if on_gpu else None)


@pipeline(
    "trips-pipeline",
    SUMMARY,
    PARAMS,
    CHECK,
    settle=settle,
    baseline=baseline,
    warm_up=warm_up,
    # the kernel, and the Parquet reader with its compute functions (tasks.host_chunks)
    worker_modules=("daskgpu.kernels.trips", "pyarrow.parquet", "pyarrow.compute"),
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy ETL over synthetic or input trips."""
    backends.require_dataframe_library(resolved.backend, "trips-pipeline")
    output = resolved["output"]
    source = resolved.inputs.get("input")
    if source is not None and source.kind == "memory":
        source = frame_input.counted(source)  # a Dask DataFrame's rows, counted on the cluster
    parts, described = _partitions(resolved, source)
    described["partitions"] = len(parts)
    elements = described["rows"]
    ctx = context(resolved, parts, source)
    data = None
    if ctx.bounds:  # each range sent to the workers once, or the Dask DataFrame's own graph
        data = frame_input.row_ranges(source, ctx.bounds, COLUMNS)
    return Workload(
        collection=tree(parts, resolved.backend.to_device(), cell_plan(ctx), data),
        bytes_are="generated" if resolved["input"] is None else "read",
        elements=elements,
        nbytes=elements * 7 * 8,
        description=described,
        context=ctx,
        present=_present,
        save=_save if output is not None else None,
    )


def _answer(rows: int, table: dict[str, list]) -> dict:
    """The reported value: rows read, trips kept, groups, and the finished table (lists)."""
    return {"rows": int(rows), "kept": int(sum(table["trips"])), "groups": len(table["trips"]),
            "table": table}


def _present(workload: Workload, raw: dict) -> dict:
    return _answer(raw["rows"], finish(raw["table"]))


def _save(workload: Workload, value: dict, path: str) -> None:
    import pandas as pd

    table = pd.DataFrame(value["table"])
    with output_files.atomic(path) as temporary:
        if workload.context.output.lower().endswith(".csv"):
            table.to_csv(temporary, index=False)
        else:
            table.to_parquet(temporary, index=False)
