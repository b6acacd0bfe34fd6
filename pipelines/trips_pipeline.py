"""trips-pipeline: taxi-trip ETL on cuDF or pandas partitions with a custom distance kernel."""

from __future__ import annotations

import math

import dask.dataframe as dd
import numpy as np
import pandas as pd

from daskgpu import backends, table_input
from daskgpu import output as output_files
from daskgpu.errors import ParameterError
from daskgpu.kernels.haversine import haversine_km, haversine_numpy
from daskgpu.params import Param, non_negative_int, optional_path, output_path, positive_int
from daskgpu.registry import Resolved, Workload, pipeline
from daskgpu.timing import timed
from pipelines.trips_check import MUTATIONS, verify
from pipelines.trips_data import COLUMNS, partition_specs, synthetic_partition

CPU_DEFAULT_ROWS = 20_000_000
GPU_DEFAULT_ROWS = 200_000_000
ROWS_PER_PARTITION = 2_000_000
GROUP = ["hour", "passengers"]
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
    Param("input", optional_path, None, "Trips from Parquet or CSV (file, directory or glob) "
          "instead of synthetic ones.", "PATH"),
    Param("output", output_path((".parquet", ".csv")), None, "Write the result table to this "
          ".parquet or .csv file.", "PATH"),
)


def _meta(library: str):
    return synthetic_partition((0, 0, 0), library)


def _with_distance(part):
    """Add ``distance_km`` with daskgpu's haversine kernel (CUDA on cuDF, njit on pandas)."""
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


def finish(table: pd.DataFrame) -> pd.DataFrame:
    """Means and fare per km from the summed table, sorted by hour and passengers."""
    table = table.sort_index().reset_index()
    table["fare_mean"] = table["fare_sum"] / table["trips"]
    table["distance_mean_km"] = table["distance_sum"] / table["trips"]
    table["fare_per_km"] = table["fare_sum"] / table["distance_sum"]
    table["trips"] = table["trips"].astype(np.int64)
    return table[GROUP + ["trips", "fare_mean", "distance_mean_km", "fare_per_km"]]


def default_partitions(rows: int, backend) -> int:
    """A multiple of the worker threads, at most ``ROWS_PER_PARTITION`` rows each."""
    slots = max(1, backend.threads)
    partitions = max(slots, math.ceil(rows / ROWS_PER_PARTITION))
    return min(rows, math.ceil(partitions / slots) * slots)


def settle(backend, values: dict) -> tuple[dict, dict]:
    """Open and check the input once, or choose the synthetic rows and partitions.

    With an ``input``, the options of generated trips (``GENERATED``) are refused.
    """
    values = dict(values)
    if values["input"] is not None:
        given = [f"--{name}" for name in GENERATED if values[name] is not None]
        if given:
            raise ParameterError(f"{', '.join(given)}: apply to generated trips, not to an "
                                 "--input; drop them")
        return values, {"input": table_input.open_table(values["input"], COLUMNS)}
    if values["rows"] is None:
        values["rows"] = GPU_DEFAULT_ROWS if backend.is_gpu else CPU_DEFAULT_ROWS
    if values["partitions"] is None:
        values["partitions"] = default_partitions(values["rows"], backend)
    elif values["partitions"] > values["rows"]:
        raise ParameterError(f"--partitions {values['partitions']}: more than the "
                             f"{values['rows']} rows; use at most --rows")
    return values, {}


def _frame(resolved: Resolved):
    library = resolved.backend.dataframe_library
    if resolved["input"] is not None:
        source = resolved.inputs["input"]
        if source.kind == "parquet":
            frame = dd.read_parquet(list(source.files), columns=list(COLUMNS))
        else:
            frame = dd.read_csv(list(source.files), usecols=list(COLUMNS),
                                parse_dates=["pickup_time"])
        return frame, {"source": resolved["input"], "format": source.kind, "rows": source.rows}
    rows, seed = resolved["rows"], resolved["seed"]
    specs = partition_specs(rows, seed, resolved["partitions"])
    frame = dd.from_map(synthetic_partition, specs, library=library, meta=_meta(library),
                        enforce_metadata=False)
    return frame, {"source": "synthetic", "seed": seed, "rows": rows}


def _read_pandas(source: table_input.TableSource) -> pd.DataFrame:
    if source.kind == "parquet":
        return pd.concat([pd.read_parquet(f, columns=list(COLUMNS)) for f in source.files],
                         ignore_index=True)
    return pd.concat([pd.read_csv(f, usecols=list(COLUMNS), parse_dates=["pickup_time"])
                      for f in source.files], ignore_index=True)


def _pandas_etl(frame: pd.DataFrame) -> pd.DataFrame:
    distance = haversine_numpy(frame["pickup_lat"].to_numpy(), frame["pickup_lon"].to_numpy(),
                               frame["dropoff_lat"].to_numpy(), frame["dropoff_lon"].to_numpy())
    return finish(_aggregate(frame.assign(distance_km=distance)))


def baseline(resolved: Resolved) -> tuple[float, dict]:
    """Seconds of the same ETL in one process on the same trips, concatenated, and its answer.

    pandas with NumPy's haversine on CPU; cuDF with the CUDA haversine kernel on a GPU worker.
    The trips are generated (the same partitions, for the run's seed) or read first, untimed.
    The answer has the run's reported form (see ``_answer``).
    """
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
    return seconds, _answer(len(frame), finish(backends.to_host(sums)))


@pipeline(
    "trips-pipeline",
    "Taxi-trip ETL: haversine kernel, filter, group by hour and passengers (cuDF or pandas)",
    PARAMS,
    verify,
    settle=settle,
    baseline=baseline,
    mutations=MUTATIONS,
)
def prepare(resolved: Resolved) -> Workload:
    """Build the lazy ETL over synthetic or input trips."""
    backends.require_dataframe_library(resolved.backend, "trips-pipeline")
    output = resolved["output"]
    frame, described = _frame(resolved)
    table = frame.map_partitions(_with_distance).map_partitions(_aggregate).groupby(GROUP).sum()
    collection = dict(table=table.map_partitions(backends.to_host), rows=frame.shape[0])
    described["partitions"] = frame.npartitions
    elements = described["rows"]
    return Workload(
        collection=collection,
        bytes_are="generated" if resolved["input"] is None else "read",
        elements=elements,
        nbytes=elements * 7 * 8,
        description=described,
        context={"output": output},
        present=_present,
        save=_save if output is not None else None,
    )


def _answer(rows: int, table: pd.DataFrame) -> dict:
    """The reported value: rows read, trips kept, groups, and the finished table as lists."""
    return {"rows": int(rows), "kept": int(table["trips"].sum()), "groups": len(table),
            "table": table.to_dict(orient="list")}


def _present(workload: Workload, raw: dict) -> dict:
    return _answer(raw["rows"], finish(raw["table"]))


def _save(workload: Workload, value: dict) -> None:
    path = workload.context["output"]
    table = pd.DataFrame(value["table"])
    with output_files.atomic(path) as temporary:
        if path.lower().endswith(".csv"):
            table.to_csv(temporary, index=False)
        else:
            table.to_parquet(temporary, index=False)
