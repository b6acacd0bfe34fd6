"""trips-pipeline on the frames a user has in hand: pandas and Dask DataFrames as ``input=``.

The same answer as the same trips in a Parquet file; named, never held, in the reported
parameters and data; a Dask DataFrame used as its own graph (repartitioned where its partitions
do not suit, and said so); both depths verify on that data and catch the declared mutations and
faults injected into the computation, the pandas frame's rows read again by the check from the
frame itself. cuDF's branches run with a stand-in (cuDF is not installed here).
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import compute_as_runner, verify_on

import daskgpu
from daskgpu.data import frame_input
from daskgpu.errors import InputFileError, InputTypeError, ParameterError
from daskgpu.execution import answers
from daskgpu.testing import check_pipeline
from daskgpu.toolkit import backends
from daskgpu.toolkit.params import path_or_frame
from pipelines.trips import pipeline as trips_pipeline
from pipelines.trips import tasks as trips_tasks

NAME = "trips-pipeline"
ROWS = 40_000  # two partitions of 20,000 rows (5 cells each) on two one-thread workers
DEPTHS = ("fast", "full")
CPU2 = backends.Backend("cpu", "numpy", "pandas", workers=2, threads=2)


def _trips(rows: int = ROWS, seed: int = 2, parts: int = 2) -> pd.DataFrame:
    specs = trips_pipeline.partition_specs(rows, seed, parts)
    return pd.concat([trips_pipeline.synthetic_partition(s) for s in specs], ignore_index=True)


@pytest.fixture(scope="module")
def trips() -> pd.DataFrame:
    return _trips()


def _both(session, spec, workload, raw) -> dict:
    return {depth: verify_on(session, spec, workload, raw, depth) for depth in DEPTHS}


# --------------------------------------------------------------------------- the same answer


def test_a_frame_gives_the_parquet_files_answer_and_is_named_not_held(in_process_client, trips,
                                                                      tmp_path):
    path = tmp_path / "trips.parquet"
    trips.to_parquet(path, row_group_size=ROWS // 2)  # the frame's two partitions
    from_file = daskgpu.run(NAME, in_process_client, input=str(path), verify="full")
    assert from_file.verified, from_file.verification
    for given in (trips, dd.from_pandas(trips, npartitions=2)):
        result = daskgpu.run(NAME, in_process_client, input=given, verify="full")
        assert result.verified, result.verification
        assert result.value == from_file.value  # the same sums, in the same order: identical
        name = frame_input.label(given)
        assert result.params["input"] == result.data["source"] == name
        assert name.startswith(("pandas.DataFrame (40000 rows; columns pickup_time, ",
                                "dask.dataframe.DataFrame (2 partitions of pandas; columns "))
        assert result.data["format"] == "memory" and result.data["rows"] == ROWS
        assert result.data["partitions"] == 2 and "repartitioned" not in result.data
        assert result.params["seed"] is None  # an input, as a file: no seed drawn
        json.dumps(result.as_dict())  # nothing of the object in what a run reports
        spec = daskgpu.get_pipeline(NAME)  # bench's one-process baseline reads the frame too
        _, answer = spec.baseline(spec.resolve(in_process_client.backend, input=given))
        assert answers.difference(result.value, answer) is None


def test_a_dask_frame_of_small_partitions_is_repartitioned_its_own_graph_read_again(
        in_process_client, trips):
    spec, workload, raw = compute_as_runner(in_process_client, NAME,
                                            input=dd.from_pandas(trips, npartitions=20))
    assert workload.description["repartitioned"] == (
        "repartitioned from 20 partitions (at most 2000 rows) to 2, the pipeline's")
    assert [c["rows"] for c in raw["partitions"]] == [20_000, 20_000]
    checks = _both(in_process_client, spec, workload, raw)
    assert all(c.ok for c in checks.values()), {d: c.detail for d, c in checks.items()}
    assert "all 20 of the frame's own partitions computed again" in checks["full"].detail
    assert "its 2 partitions cover the frame's 40000 rows once, in order" in checks["fast"].detail


@pytest.mark.parametrize("kind", ["pandas", "dask"])
def test_both_depths_catch_every_mutation_on_a_frame(in_process_client, trips, kind):
    given = trips if kind == "pandas" else dd.from_pandas(trips, npartitions=3)
    report = check_pipeline(NAME, session=in_process_client, input=given)
    assert report.depths == DEPTHS
    assert len(report.caught) == 2 * len(daskgpu.get_pipeline(NAME).mutations)
    assert report.params["input"] == frame_input.label(given)


# --------------------------------------------------------------------------- faults


def _misread_in(monkeypatch, target: int) -> None:
    """The reader hands the kernel dropoff latitudes 1e-4 degrees north in partition
    ``target`` only (its rows as read stay right)."""
    real = trips_tasks._chunks
    column = trips_tasks.VALUES.index("dropoff_lat")

    def misread(partition, to_device, *data):
        for n, (ticks, per_hour, *values), as_read in real(partition, to_device, *data):
            if partition[1] == target:
                values[column] = values[column] + 1e-4
            yield n, (ticks, per_hour, *values), as_read

    monkeypatch.setattr(trips_tasks, "_chunks", misread)


# A Dask DataFrame of 8 partitions (its own, kept): a random one of them (drawn with a seed,
# not the first), and the last; the pandas frame's 2 partitions: the last.
ONE_PARTITION = {("dask", "random"): int(np.random.default_rng(3).integers(1, 7)),
                 ("dask", "last"): 7, ("pandas", "last"): 1}


@pytest.mark.parametrize(("kind", "where"), sorted(ONE_PARTITION))
def test_a_kernel_fault_in_one_partition_of_a_frame_fails_both_depths(in_process_client, trips,
                                                                       monkeypatch, kind, where):
    target = ONE_PARTITION[kind, where]
    given = trips if kind == "pandas" else dd.from_pandas(trips, npartitions=8)
    _misread_in(monkeypatch, target)
    spec, workload, raw = compute_as_runner(in_process_client, NAME, input=given)
    assert len(raw["partitions"]) == (2 if kind == "pandas" else 8)
    checks = _both(in_process_client, spec, workload, raw)
    fast, full = checks["fast"].detail, checks["full"].detail
    assert not checks["fast"].ok and f"partition {target} cell " in fast, fast
    assert "distance_sum" in fast and "recomputed from" in fast, fast
    assert not checks["full"].ok and "distance_mean_km" in full, full


def test_rows_sent_wrong_fail_the_fast_depth_which_reads_the_frame_itself(in_process_client,
                                                                          trips, monkeypatch):
    """The first partition's rows are sent one row late (the kernel sums what it was sent, and
    its rows as read are those rows): only a check that reads the frame's own rows sees it."""
    real = frame_input.row_ranges

    def one_late(source, bounds, columns):
        (a, b), *rest = bounds
        return real(source, [(a + 1, b + 1), *rest], columns)

    monkeypatch.setattr(frame_input, "row_ranges", one_late)
    spec, workload, raw = compute_as_runner(in_process_client, NAME, input=trips)
    checks = _both(in_process_client, spec, workload, raw)
    fast, full = checks["fast"].detail, checks["full"].detail
    assert not checks["fast"].ok and "recomputed from the frame's own rows" in fast, fast
    assert "partition 0 cell " in fast and "partition 1 cell" not in fast, fast
    assert not checks["full"].ok and "recomputed" in full, full


# --------------------------------------------------------------------------- refusals


def test_the_parameter_keeps_paths_as_text_and_frames_as_they_are(trips, tmp_path):
    assert path_or_frame(" a.parquet ") == "a.parquet" and path_or_frame("  ") is None
    assert path_or_frame(tmp_path / "t.csv") == str(tmp_path / "t.csv")
    assert path_or_frame(trips) is trips and path_or_frame(None) is None
    assert path_or_frame(b"t.csv") == "t.csv"
    param = daskgpu.get_pipeline(NAME).param("input")
    assert param.convert(trips) is trips
    with pytest.raises(ParameterError, match=r"^--input nan: a float is not an input daskgpu "
                                             r"reads; give a path \(Parquet or CSV\) or a "):
        param.convert(float("nan"))  # neither a table nor a path: text made of it would be one


@pytest.mark.parametrize(("case", "kinds", "message"), [
    ("columns", (ValueError,), "pandas.DataFrame (40000 rows; columns pickup_time datetime64[s], "
                               "pickup_lat float64, pickup_lon float64, dropoff_lat float64, ... "
                               "2 more): missing column(s) fare"),
    ("types", (ValueError,), "wrong column type(s): passengers is number, needs integer; fare "
                             "is str, needs number"),
    ("empty", (ValueError,), "(0 rows; columns pickup_time datetime64[s],"),
    ("series", (ValueError,), "pandas.Series float64: a Series, not a table"),
    ("array", (ValueError,), "numpy.ndarray float64 (3, 2): an array, not a table"),
    ("list", (TypeError, ParameterError), "a list is not an input daskgpu reads; give a path"),
    ("rows", (ParameterError,), "--rows: applies to generated trips, not to an --input"),
])
def test_a_bad_frame_is_refused_in_one_line_by_kind(trips, case, kinds, message):
    given = {"columns": trips.drop(columns=["fare"]),
             "types": trips.assign(fare=trips["fare"].astype(str),
                                   passengers=trips["passengers"] + 0.5),
             "empty": trips.iloc[:0], "series": trips["fare"], "array": np.zeros((3, 2)),
             "list": [1, 2], "rows": trips}[case]
    extra = {"rows": 10} if case == "rows" else {}
    with pytest.raises(kinds) as caught:
        daskgpu.get_pipeline(NAME).resolve(CPU2, input=given, **extra)
    error = caught.value
    assert isinstance(error, InputTypeError if case == "list" else daskgpu.DaskGPUError)
    assert message in str(error) and "\n" not in str(error), str(error)


def test_an_empty_dask_frame_is_refused_as_the_run_counts_its_rows(in_process_client, trips):
    with pytest.raises(InputFileError, match=r"^input=dask\.dataframe\.DataFrame \(\d "
                                             r"partitions? of pandas; .*: the table is empty "
                                             r"\(no rows\)$"):
        daskgpu.run(NAME, in_process_client, input=dd.from_pandas(trips.iloc[:0],
                                                                  npartitions=2))


# --------------------------------------------------------------------------- cuDF's branches


class _CudfFrame(pd.DataFrame):
    """A frame the library takes for cuDF's (the stand-in module's ``DataFrame``), whose rows
    must never be copied to the host on a GPU worker."""

    @property
    def _constructor(self):
        return _CudfFrame

    def to_pandas(self):
        raise AssertionError("a cuDF frame's rows were copied to the host")


@pytest.fixture
def fake_cudf(monkeypatch):
    module = types.ModuleType("cudf")
    module.__spec__ = importlib.machinery.ModuleSpec("cudf", None)
    module.DataFrame = _CudfFrame
    monkeypatch.setitem(sys.modules, "cudf", module)
    return module


def test_cudf_data_is_refused_for_cpu_workers(fake_cudf, trips):
    given = _CudfFrame(trips)
    assert frame_input.form(given) == "cudf" and frame_input.library(given) == "cudf"
    with pytest.raises(InputFileError, match=r"cudf\.DataFrame \(40000 rows; .*\): cuDF data, "
                                             r"and the workers are CPU workers; run on GPU "
                                             r"workers, or give frame\.to_pandas\(\)$"):
        daskgpu.get_pipeline(NAME).resolve(CPU2, input=given)


def test_a_gpu_worker_sums_a_cudf_frame_where_it_is(fake_cudf, trips, monkeypatch):
    """On a GPU worker, a partition of cuDF rows goes to the kernel as device columns of the
    frame itself (no host copy): the same certificate as the pandas rows' on a CPU worker."""
    seen = []

    def device_columns(frame, names):  # host arrays stand in for the device's
        seen.append(frame)
        return {name: ((frame[name].to_numpy().view(np.int64), frame[name].dtype)
                       if name == "pickup_time" else frame[name].to_numpy()) for name in names}

    monkeypatch.setattr(backends, "device_columns", device_columns)
    rows = trips.iloc[:9_000]
    cells = {"rows": 4096, "seed": 1, "sampled": (1,)}
    partition = ("memory", 0, 0, 9_000)
    on_gpu = trips_tasks.partial_sums(partition, lambda a: a, cells, _CudfFrame(rows))
    on_cpu = trips_tasks.partial_sums(partition, None, cells, rows)
    assert len(seen) == 1 and type(seen[0]) is _CudfFrame
    for name in ("rows", "counts", "sums"):
        np.testing.assert_array_equal(on_gpu[name], on_cpu[name])
    gpu_cell, cpu_cell = (p["certificates"][0]["sampled"][1] for p in (on_gpu, on_cpu))
    for name, values in cpu_cell["rows"].items():
        np.testing.assert_array_equal(gpu_cell["rows"][name], values)


def test_pandas_rows_on_a_gpu_worker_are_copied_up_once(trips):
    moved = []
    rows = trips.iloc[:5_000]
    with dask.config.set(scheduler="sync"):
        partial = trips_tasks.partial_sums(("memory", 0, 0, 5_000),
                                           lambda a: moved.append(len(a)) or a, None, rows)
    assert partial["rows"] == 5_000 and moved == [5_000] * (1 + len(trips_tasks.VALUES))
