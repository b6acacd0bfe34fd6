"""trips-pipeline on a real CPU LocalCluster and through the CLI, with generated inputs."""

from __future__ import annotations

import copy
import json

import dask
import numpy as np
import pandas as pd
import pytest
from conftest import compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.errors import BackendUnavailable, InputFileError, ParameterError
from daskgpu.kernels.haversine import haversine_numpy
from daskgpu.toolkit.backends import Backend
from pipelines.trips import check as trips_check
from pipelines.trips import pipeline as trips_pipeline
from pipelines.trips import tasks as trips_tasks

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)


def _pandas_reference(frame: pd.DataFrame) -> pd.DataFrame:
    """The ETL written out with pandas and NumPy only."""
    frame = frame.copy()
    frame["distance_km"] = haversine_numpy(frame.pickup_lat.to_numpy(), frame.pickup_lon.to_numpy(),
                                           frame.dropoff_lat.to_numpy(),
                                           frame.dropoff_lon.to_numpy())
    kept = frame[(frame.distance_km > 0) & (frame.fare > 0)].copy()
    kept["hour"] = kept.pickup_time.dt.hour
    out = kept.groupby(["hour", "passengers"]).agg(
        trips=("fare", "size"), fare_mean=("fare", "mean"),
        distance_mean_km=("distance_km", "mean"), fare_sum=("fare", "sum"),
        distance_sum=("distance_km", "sum"))
    out["fare_per_km"] = out.fare_sum / out.distance_sum
    return out.reset_index().drop(columns=["fare_sum", "distance_sum"])


def _trips(rows: int, seed: int) -> pd.DataFrame:
    halves = [trips_pipeline.synthetic_partition((i, rows // 2, seed)) for i in range(2)]
    return pd.concat(halves, ignore_index=True)


def _assert_table_equal(value_table: dict, expected: pd.DataFrame):
    got = pd.DataFrame(value_table)
    assert list(got.columns) == ["hour", "passengers", "trips", "fare_mean", "distance_mean_km",
                                 "fare_per_km"]
    np.testing.assert_array_equal(got[["hour", "passengers", "trips"]].to_numpy(),
                                  expected[["hour", "passengers", "trips"]].to_numpy())
    np.testing.assert_allclose(got[["fare_mean", "distance_mean_km", "fare_per_km"]].to_numpy(),
                               expected[["fare_mean", "distance_mean_km", "fare_per_km"]]
                               .to_numpy(), rtol=1e-9)


def test_synthetic_trips_match_a_pandas_etl(cpu_client):
    result = daskgpu.run("trips-pipeline", client=cpu_client, rows=300_000, seed=9)
    assert result.verified, result.verification
    frame = pd.concat([trips_pipeline.synthetic_partition((i, n, 9)) for i, n in
                       enumerate(_sizes(300_000, result.data["partitions"]))], ignore_index=True)
    expected = _pandas_reference(frame)
    _assert_table_equal(result.value["table"], expected)
    assert result.value["rows"] == 300_000
    assert result.value["kept"] == int(expected.trips.sum()) < 300_000  # some rows dropped
    assert result.throughput["elements_per_s"] == pytest.approx(
        300_000 / result.timings["compute_s"])


def _split(frame, parts):
    step = -(-len(frame) // parts)
    return [frame.iloc[i : i + step] for i in range(0, len(frame), step)]


def _sizes(rows, parts):
    return [rows // parts + (1 if i < rows % parts else 0) for i in range(parts)]


def test_same_seed_same_trips():
    a = trips_pipeline.synthetic_partition((3, 1000, 5))
    b = trips_pipeline.synthetic_partition((3, 1000, 5))
    c = trips_pipeline.synthetic_partition((4, 1000, 5))
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


@pytest.mark.parametrize("kind", ["parquet-file", "parquet-dir", "csv-glob"])
def test_inputs_and_outputs(cpu_client, tmp_path, kind):
    frame = _trips(40_000, 2)
    if kind == "parquet-file":
        path = tmp_path / "trips.parquet"
        frame.to_parquet(path)
    elif kind == "parquet-dir":
        path = tmp_path / "trips"
        path.mkdir()
        for i, part in enumerate(_split(frame, 3)):
            part.to_parquet(path / f"part-{i}.parquet")
    else:
        for i, part in enumerate(_split(frame, 2)):
            part.to_csv(tmp_path / f"t-{i}.csv", index=False)
        path = tmp_path / "t-*.csv"
    out = tmp_path / "out.parquet"
    result = daskgpu.run("trips-pipeline", client=cpu_client, input=str(path), output=str(out))
    assert result.verified, result.verification
    expected = _pandas_reference(frame)
    _assert_table_equal(result.value["table"], expected)
    written = pd.read_parquet(out)
    assert written.trips.sum() == expected.trips.sum()
    assert result.data["rows"] == 40_000


def _computed(session, **params):
    return compute_as_runner(session, "trips-pipeline", **params)


_verified = verify_on


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_verification_of_an_input_catches_every_altered_table(cpu_client, tmp_path, kind):
    frame = _trips(12_000, 4)
    for i, part in enumerate(_split(frame, 3)):
        if kind == "parquet":
            part.to_parquet(tmp_path / f"t-{i}.parquet")
        else:
            part.to_csv(tmp_path / f"t-{i}.csv", index=False)
    spec, workload, raw = _computed(cpu_client, input=str(tmp_path))
    check = _verified(cpu_client, spec, workload, raw)
    assert check.ok, check.detail
    assert "3 partitions read again" in check.detail and "12000 rows" in check.detail
    for mutation in spec.mutations:
        check = _verified(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)))
        assert not check.ok, mutation.name
        assert mutation.names in check.detail and "\n" not in check.detail, check.detail


def test_verification_catches_a_wrong_row_count(cpu_client):
    spec, workload, raw = _computed(cpu_client, rows=9_000, partitions=3, seed=2)
    check = _verified(cpu_client, spec, workload, dict(raw, rows=raw["rows"] - 1))
    assert not check.ok and check.detail == "rows 8999 reported, 9000 recomputed"


def test_a_wrong_distance_kernel_fails_verification(monkeypatch):
    """A kernel 0.1 % off in one partition: caught by the independent haversine."""
    partial_sums = trips_tasks.partial_sums

    def drifting(partition, to_device=None):
        partial = partial_sums(partition, to_device)
        if partition[1][0] == 0:
            partial["sums"][1] *= 1.001
        return partial

    spec = daskgpu.get_pipeline("trips-pipeline")
    workload = spec.workload(CPU2, rows=8_000, partitions=4, seed=3)
    with dask.config.set(scheduler="sync"):
        raw = dask.compute(workload.collection)[0]
        assert spec.verify(workload, raw).ok
        monkeypatch.setattr(trips_tasks, "partial_sums", drifting)
        drifted = spec.workload(CPU2, rows=8_000, partitions=4, seed=3)
        raw = dask.compute(drifted.collection)[0]
        check = spec.verify(drifted, raw)
    assert not check.ok and "distance_mean_km" in check.detail, check.detail


def test_the_numpy_sample_checks_the_pandas_recomputation(monkeypatch):
    """Sampled partitions are also summed by NumPy alone: a pandas path that lost a trip in
    each partition disagrees there (and with the reported table)."""
    spec = daskgpu.get_pipeline("trips-pipeline")
    workload = spec.workload(CPU2, rows=8_000, partitions=4, seed=3)
    pandas_groups = trips_check._pandas_groups
    monkeypatch.setattr(trips_check, "_pandas_groups", lambda t: pandas_groups(t.iloc[1:]))
    with dask.config.set(scheduler="sync"):
        raw = dask.compute(workload.collection)[0]
        check = spec.verify(workload, raw)
    assert not check.ok
    assert "sampled partition" in check.detail and "by NumPy" in check.detail, check.detail


def test_the_sample_is_chosen_by_the_seed():
    picks = {tuple(trips_check._sampled(40, seed)) for seed in range(5)}
    assert len(picks) > 1
    assert trips_check._sampled(40, 7) == trips_check._sampled(40, 7)
    assert trips_check._sampled(2, 7) == [0, 1]


def test_the_two_haversines_of_verification_agree_with_the_kernel():
    rng = np.random.default_rng(0)
    lat1, lat2 = rng.uniform(-89, 89, (2, 1000))
    lon1, lon2 = rng.uniform(-180, 180, (2, 1000))
    kernel = trips_pipeline.haversine_km(lat1, lon1, lat2, lon2)
    for own in (trips_check._great_circle_asin_km, trips_check._great_circle_atan2_km):
        np.testing.assert_allclose(own(lat1, lon1, lat2, lon2), kernel, rtol=1e-10)
        assert own(lat1, lon1, lat1, lon1).max() == 0.0


@pytest.mark.parametrize("given, message", [
    ({"rows": 100}, "--rows: applies to generated trips, not to an --input; drop it"),
    ({"seed": 1, "partitions": 2}, "--seed, --partitions: apply to generated trips"),
])
def test_options_of_generated_trips_are_refused_with_an_input(tmp_path, given, message):
    path = tmp_path / "t.parquet"
    _trips(200, 1).to_parquet(path)
    spec = daskgpu.get_pipeline("trips-pipeline")
    with pytest.raises(ParameterError, match=message):
        spec.resolve(input=str(path), **given)
    python = r"^rows=\.\.\.: applies to generated trips, not to an input=\.\.\.; drop it$"
    with pytest.raises(ParameterError, match=python):
        spec.workload(CPU2, input=str(path), rows=100)  # the Python API's spelling
    resolved = spec.resolve(input=str(path))
    assert resolved["rows"] is None and resolved["seed"] is None


def test_cli_refuses_rows_and_seed_with_an_input(tmp_path):
    path = tmp_path / "t.parquet"
    _trips(200, 1).to_parquet(path)
    proc = run_cli("run", "trips-pipeline", "--input", str(path), "--rows", "5", "--seed", "2",
                   "--no-dashboard")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("error: --rows, --seed: apply to generated trips, not to an --input; "
                           "drop them\n"), proc.stderr


def test_gpu_backend_without_cudf_is_refused():
    gpu = Backend("gpu", "cupy", "cudf", workers=1, threads=1)
    with pytest.raises(BackendUnavailable, match="cuDF"):
        daskgpu.get_pipeline("trips-pipeline").workload(gpu, rows=10)


@pytest.fixture
def bad_inputs(tmp_path):
    frame = _trips(200, 1)
    cases = {}
    cases["missing"] = (str(tmp_path / "nope.parquet"), "no such file")
    frame.drop(columns=["fare", "passengers"]).to_parquet(tmp_path / "cols.parquet")
    cases["columns"] = (str(tmp_path / "cols.parquet"), "missing column(s) passengers, fare")
    frame.assign(fare=frame.fare.astype(str)).to_parquet(tmp_path / "types.parquet")
    cases["types"] = (str(tmp_path / "types.parquet"), "fare is")
    frame.iloc[:0].to_parquet(tmp_path / "empty.parquet")
    cases["empty"] = (str(tmp_path / "empty.parquet"), "empty")
    (tmp_path / "corrupt.parquet").write_bytes(b"PAR1 this is not parquet")
    cases["corrupt"] = (str(tmp_path / "corrupt.parquet"), "not a readable Parquet")
    frame.head(0).to_csv(tmp_path / "header.csv", index=False)
    cases["empty-csv"] = (str(tmp_path / "header.csv"), "empty")
    (tmp_path / "nothing").mkdir()
    cases["empty-dir"] = (str(tmp_path / "nothing"), "no Parquet or CSV")
    return cases


@pytest.mark.parametrize("case", ["missing", "columns", "types", "empty", "corrupt", "empty-csv",
                                  "empty-dir"])
def test_bad_inputs_are_refused_in_one_line(bad_inputs, case):
    path, message = bad_inputs[case]
    with pytest.raises(InputFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        daskgpu.get_pipeline("trips-pipeline").resolve(input=path)
    proc = run_cli("run", "trips-pipeline", "--input", path, "--no-dashboard")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error:"), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("params, message", [({"rows": 0}, "--rows"),
                                             ({"output": "x.txt"}, ".parquet or .csv")])
def test_bad_parameters(params, message):
    with pytest.raises(ParameterError, match=message):
        daskgpu.get_pipeline("trips-pipeline").resolve(**params)


def test_cli_json_and_csv_output(tmp_path):
    out = tmp_path / "result.csv"
    proc = run_cli("run", "trips-pipeline", "--rows", "50000", "--seed", "3", "--workers", "2",
                   "--no-dashboard", "--json", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True and doc["value"]["rows"] == 50_000
    written = pd.read_csv(out)
    assert written.trips.sum() == doc["value"]["kept"]
    assert [p.name for p in tmp_path.iterdir()] == ["result.csv"]


# --- unusual values, one read per partition, no device objects in the client -------------------

def _unusual(rows: int, seed: int) -> pd.DataFrame:
    """Trips with missing times, fares, coordinates and passengers, times before 1970 and
    passengers outside the kernel's dense table (negative, 16 and more)."""
    frame = _trips(rows, seed)
    rng = np.random.default_rng(seed)

    def some(share):
        return rng.random(rows) < share

    frame.loc[some(0.02), "pickup_time"] = pd.NaT
    frame.loc[some(0.02), "pickup_time"] = pd.Timestamp("1969-12-31 23:30")
    frame.loc[some(0.02), "fare"] = np.nan
    frame.loc[some(0.02), "pickup_lon"] = np.nan
    odd = some(0.05)
    frame.loc[odd, "passengers"] = rng.choice([-2, 16, 40, 2**40], odd.sum())
    passengers = frame["passengers"].astype("Int64")
    passengers[some(0.02)] = pd.NA  # a nullable integer column: Parquet nulls
    return frame.assign(passengers=passengers)


def _pandas_reference_of_unusual(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.assign(passengers=frame.passengers.astype("float64"))
    return _pandas_reference(frame).astype({"passengers": np.int64})


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_unusual_values_give_the_pandas_answer_and_verify(cpu_client, tmp_path, kind):
    frame = _unusual(8_000, 8)
    for i, part in enumerate(_split(frame, 2)):
        if kind == "parquet":
            part.to_parquet(tmp_path / f"t-{i}.parquet", row_group_size=2_000)
        else:
            part.to_csv(tmp_path / f"t-{i}.csv", index=False)
    result = daskgpu.run("trips-pipeline", client=cpu_client, input=str(tmp_path))
    assert result.verified, result.verification
    expected = _pandas_reference_of_unusual(frame)
    assert (expected.passengers >= 16).any() and (expected.passengers < 0).any()
    _assert_table_equal(result.value["table"], expected)
    assert result.value["rows"] == 8_000
    assert result.data["partitions"] == (4 if kind == "parquet" else 2)  # row groups, files


def test_time_zones_are_grouped_by_their_wall_clock(tmp_path):
    frame = _trips(4_000, 3)
    frame["pickup_time"] = frame.pickup_time.dt.tz_localize("America/New_York",
                                                            nonexistent="shift_forward")
    frame.to_parquet(tmp_path / "t.parquet")
    spec = daskgpu.get_pipeline("trips-pipeline")
    with dask.config.set(scheduler="sync"):
        workload = spec.workload(CPU2, input=str(tmp_path / "t.parquet"))
        raw = dask.compute(workload.collection)[0]
        assert spec.verify(workload, raw).ok
    expected = _pandas_reference(frame)  # .dt.hour: the local hour
    _assert_table_equal(spec.workload(CPU2, input=str(tmp_path / "t.parquet")).present(
        workload, raw)["table"], expected)


def test_every_partition_is_read_once_and_only_its_columns(monkeypatch, tmp_path):
    frame = _trips(9_000, 5).assign(notes="a column the ETL never reads")
    for i, part in enumerate(_split(frame, 3)):
        part.to_parquet(tmp_path / f"t-{i}.parquet", row_group_size=2_000)
    reads = []
    host_chunks = trips_tasks.host_chunks

    def counted(partition):
        for chunk in host_chunks(partition):
            reads.append((partition, sorted(chunk)))
            yield chunk

    monkeypatch.setattr(trips_tasks, "host_chunks", counted)
    spec = daskgpu.get_pipeline("trips-pipeline")
    workload = spec.workload(CPU2, input=str(tmp_path))
    with dask.config.set(scheduler="sync"):
        raw = dask.compute(workload.collection)[0]
    partitions = [p for p, _ in reads]
    assert len(partitions) == len(set(partitions)) == 6  # 3 files of 2 row groups, once each
    assert all(columns == sorted(trips_pipeline.COLUMNS) for _, columns in reads)
    assert raw["rows"] == 9_000


def test_the_client_builds_no_device_object(monkeypatch):
    """A GPU run's graph, built in the client, holds partition descriptions and functions only:
    no cuDF meta frame, no CuPy array (and cuDF and CuPy are never imported there)."""
    import sys
    import types

    touched = []

    def untouchable(name):
        module = types.ModuleType(name)
        module.__getattr__ = lambda attr: touched.append((name, attr)) or (_ for _ in ()).throw(
            AssertionError(f"{name}.{attr} used in the client"))
        return module

    for name in ("cudf", "cupy", "dask_cudf"):
        monkeypatch.setitem(sys.modules, name, untouchable(name))
    monkeypatch.setattr(trips_pipeline.backends, "require_dataframe_library", lambda *a: None)
    gpu = Backend("gpu", "cupy", "cudf", workers=1, threads=1)
    workload = daskgpu.get_pipeline("trips-pipeline").workload(gpu, rows=10_000, partitions=3,
                                                               seed=1)
    graph = dict(workload.collection.__dask_graph__())
    assert touched == []

    def leaves(value):
        if isinstance(value, (tuple, list)):
            for item in value:
                yield from leaves(item)
        elif isinstance(value, dict):
            for item in value.values():
                yield from leaves(item)
        else:
            yield value

    modules = set()
    for task in graph.values():
        args = getattr(task, "args", task)
        for leaf in leaves(args):
            for attribute in ("func", "value"):
                leaf = getattr(leaf, attribute, leaf)
            modules.add(type(leaf).__module__.split(".")[0])
    assert not modules & {"cudf", "cupy", "dask_cudf", "pandas"}, modules
    partials = [k for k in graph if str(k[0] if isinstance(k, tuple) else k)
                .startswith("partial_sums")]
    assert len(partials) == 3


def test_a_csv_without_rows_or_without_times_adds_nothing(tmp_path):
    frame = _trips(6, 1)
    frame.head(0).to_csv(tmp_path / "header.csv", index=False)
    frame.assign(pickup_time=pd.NaT).to_csv(tmp_path / "no-times.csv", index=False)
    empty = trips_tasks.partial_sums(("csv", str(tmp_path / "header.csv")))
    assert empty["rows"] == 0 and empty["counts"].sum() == 0 and empty["outside"] is None
    untimed = trips_tasks.partial_sums(("csv", str(tmp_path / "no-times.csv")))
    assert untimed["rows"] == 6 and untimed["counts"].sum() == 0
