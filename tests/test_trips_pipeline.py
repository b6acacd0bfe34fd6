"""trips-pipeline on a real CPU LocalCluster and through the CLI, with generated inputs."""

from __future__ import annotations

import json

import dask
import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

import daskgpu
from daskgpu.backends import Backend
from daskgpu.errors import BackendUnavailable, InputFileError, ParameterError
from daskgpu.kernels.haversine import haversine_numpy
from pipelines import trips_pipeline

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


def test_wrong_counts_fail_verification():
    spec = daskgpu.get_pipeline("trips-pipeline")
    workload = spec.workload(CPU2, rows=20_000, seed=1)
    raw = dask.compute(workload.collection, scheduler="sync")[0]
    assert spec.verify(workload, raw).ok
    assert not spec.verify(workload, dict(raw, kept=raw["kept"] + 1)).ok
    wrong = raw["partition_table"].copy()
    wrong.iloc[0, wrong.columns.get_loc("fare_sum")] += 0.01
    assert not spec.verify(workload, dict(raw, partition_table=wrong)).ok


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
