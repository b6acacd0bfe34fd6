"""trips-pipeline on a real CPU LocalCluster and through the CLI, with generated inputs."""

from __future__ import annotations

import copy
import json
import re

import dask
import numpy as np
import pandas as pd
import pytest
from conftest import compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.errors import BackendUnavailable, InputFileError, ParameterError
from daskgpu.kernels import trips as trip_kernel
from daskgpu.kernels.haversine import haversine_numpy
from daskgpu.toolkit.backends import Backend
from pipelines.trips import check_fast as trips_check_fast
from pipelines.trips import check_replay as trips_check_replay
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
        assert mutation.named_in(check.detail) and "\n" not in check.detail, check.detail


def test_verification_catches_a_wrong_row_count(cpu_client):
    spec, workload, raw = _computed(cpu_client, rows=9_000, partitions=3, seed=2)
    check = _verified(cpu_client, spec, workload, dict(raw, rows=raw["rows"] - 1))
    assert not check.ok and check.detail == "rows 8999 reported, 9000 recomputed"


def test_a_wrong_distance_kernel_fails_verification(monkeypatch):
    """A kernel 0.1 % off in one partition: caught by the independent haversine."""
    partial_sums = trips_tasks.partial_sums

    def drifting(partition, to_device=None, cells=None):
        partial = partial_sums(partition, to_device, cells)
        if partition[1][0] == 0:
            partial["sums"][1] *= 1.001
        return partial

    spec = daskgpu.get_pipeline("trips-pipeline")
    workload = spec.workload(CPU2, rows=8_000, partitions=4, seed=3)
    with dask.config.set(scheduler="sync"):
        raw = dask.compute(workload.collection)[0]
        assert spec.verify(workload, raw, "full").ok
        monkeypatch.setattr(trips_tasks, "partial_sums", drifting)
        drifted = spec.workload(CPU2, rows=8_000, partitions=4, seed=3)
        raw = dask.compute(drifted.collection)[0]
        check = spec.verify(drifted, raw, "full")
    assert not check.ok and "distance_mean_km" in check.detail, check.detail


def test_the_numpy_sums_check_the_pandas_recomputation(monkeypatch):
    """Every partition is also summed by NumPy alone: a pandas path that lost a trip in each
    partition disagrees there (and with the reported table)."""
    spec = daskgpu.get_pipeline("trips-pipeline")
    workload = spec.workload(CPU2, rows=8_000, partitions=4, seed=3)
    pandas_groups = trips_check_replay.pandas_groups
    monkeypatch.setattr(trips_check_replay, "pandas_groups",
                        lambda t: pandas_groups(t.iloc[1:]))
    with dask.config.set(scheduler="sync"):
        raw = dask.compute(workload.collection)[0]
        check = spec.verify(workload, raw, "full")
    assert not check.ok
    assert "partition 0, hour" in check.detail and "by NumPy" in check.detail, check.detail


def test_the_cells_follow_the_seed_and_full_sums_every_partition_with_numpy(monkeypatch):
    """The fast depth's cells are drawn with the run's seed; the full depth, which sampled three
    partitions for its NumPy sums, now sums every one."""
    spec = daskgpu.get_pipeline("trips-pipeline")

    def drawn(seed):
        workload = spec.workload(CPU2, rows=400_000, partitions=4, seed=seed)
        return trips_check_fast.drawn_cells(workload.context)

    picks = {tuple(drawn(seed)) for seed in range(5)}
    assert len(picks) > 1 and drawn(7) == drawn(7)
    recomputed = trips_check_replay.recomputed_cells
    seen = []
    monkeypatch.setattr(trips_check_replay, "recomputed_cells",
                        lambda cells: seen.append(len(cells[0]["fare"])) or recomputed(cells))
    workload = spec.workload(CPU2, rows=8_000, partitions=4, seed=3)
    with dask.config.set(scheduler="sync"):
        raw = dask.compute(workload.collection)[0]
        check = spec.verify(workload, raw, "full")
    assert check.ok and seen == [2_000] * 4, (check.detail, seen)
    assert "all 4 partitions read again" in check.detail


def test_the_two_haversines_of_verification_agree_with_the_kernel():
    rng = np.random.default_rng(0)
    lat1, lat2 = rng.uniform(-89, 89, (2, 1000))
    lon1, lon2 = rng.uniform(-180, 180, (2, 1000))
    from daskgpu.kernels.haversine import haversine_km

    kernel = haversine_km(lat1, lon1, lat2, lon2)
    for own in (trips_check_replay.great_circle_asin_km,
                trips_check_replay.great_circle_atan2_km):
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
        assert all(spec.verify(workload, raw, depth).ok for depth in ("fast", "full"))
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


# --- the fast depth: certificates, seeded cells, faults in the computation -------------------

FAST = {"rows": 400_000, "partitions": 4, "seed": 5}  # 100 cells of 4096 rows, 48 drawn
DEPTHS = ("fast", "full")


def _both(session, spec, workload, raw) -> dict:
    return {depth: _verified(session, spec, workload, raw, depth) for depth in DEPTHS}


def test_the_fast_depth_draws_cells_and_says_what_it_promises(in_process_client):
    spec, workload, raw = _computed(in_process_client, **FAST)
    checks = _both(in_process_client, spec, workload, raw)
    assert all(c.ok for c in checks.values()), {d: c.detail for d, c in checks.items()}
    assert checks["fast"].depth == "fast" and checks["full"].depth == "full"
    assert ("48 of 100 cells checked again: a fault in at least 10 % of the cells is caught "
            "with probability at least 99.9 %") in checks["fast"].detail
    # the run kept the rows of exactly the drawn cells, and only those
    kept = sorted((i, k) for i, c in enumerate(raw["partitions"]) for k in c["sampled"])
    drawn = trips_check_fast.drawn_cells(workload.context)
    assert kept == sorted(drawn) and len(kept) == 48
    assert all(len(c["cell_rows"]) == 25 for c in raw["partitions"])


def test_the_fast_depth_reads_no_data_again(in_process_client, monkeypatch):
    spec, workload, raw = _computed(in_process_client, **FAST)
    monkeypatch.setattr(trips_pipeline, "synthetic_partition", None)
    for module in (trips_tasks, trips_check_replay):
        for name in ("host_chunks", "synthetic_columns", "synthetic_partition", "pandas_chunks"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, None)
    assert _verified(in_process_client, spec, workload, raw, "fast").ok


def _kernel_fault(monkeypatch, change):
    """``daskgpu.kernels.trips.trip_sums`` changed by ``change`` on the cells (one kernel call
    each) whose first pickup tick is a multiple of 4: about a quarter of them."""
    import daskgpu.kernels.trips as kernel

    real, touched = kernel.trip_sums, []

    def faulty(ticks, per_hour, *values):
        if len(ticks) and int(ticks[0]) % 4 == 0:
            touched.append(len(ticks))
            return change(real, ticks, per_hour, *values)
        return real(ticks, per_hour, *values)

    monkeypatch.setattr(kernel, "trip_sums", faulty)
    return touched


def _longer_distances(real, *columns):
    counts, sums = real(*columns)
    return counts, sums * np.array([1.0, 1.001])[:, None, None]  # distances 0.1 % long


def _hour_shifted(real, ticks, per_hour, *values):
    ticks = ticks.copy()
    ticks[:64] += per_hour  # the first 64 trips of the cell placed in the next hour
    return real(ticks, per_hour, *values)


def _rows_skipped(real, *columns):
    return real(*(c[:-40] if hasattr(c, "shape") else c for c in columns))


@pytest.mark.parametrize("change", [_longer_distances, _hour_shifted, _rows_skipped],
                         ids=["a distance 0.1 % long", "a bin index: trips in the next hour",
                              "a kernel skipping its last 40 trips"])
def test_a_kernel_fault_in_a_quarter_of_the_cells_fails_both_depths(in_process_client,
                                                                    monkeypatch, change):
    touched = _kernel_fault(monkeypatch, change)
    spec, workload, raw = _computed(in_process_client, **FAST)
    assert len(touched) >= 10  # at least a tenth of the 100 cells
    checks = _both(in_process_client, spec, workload, raw)
    assert not checks["full"].ok and not checks["fast"].ok, {d: c.detail for d, c in
                                                             checks.items()}
    assert "recomputed from its rows" in checks["fast"].detail, checks["fast"].detail


def test_a_misread_fare_column_in_some_partitions_fails_both_depths(in_process_client,
                                                                    monkeypatch):
    """The reader hands the kernel fares 0.05 % high in the partitions whose first pickup
    second is even."""
    real = trips_tasks._kernel_columns

    def misread(chunk):
        ticks, per_hour, passengers, fare, *coordinates = real(chunk)
        if int(ticks[0]) % 2 == 0:
            fare = fare * 1.0005
        return (ticks, per_hour, passengers, fare, *coordinates)

    monkeypatch.setattr(trips_tasks, "_kernel_columns", misread)
    spec, workload, raw = _computed(in_process_client, **FAST)
    firsts = [int(trips_pipeline.synthetic_partition(c["partition"][1])["pickup_time"]
                  .iloc[0].value) // 10**9 for c in raw["partitions"]]
    assert any(t % 2 == 0 for t in firsts)
    checks = _both(in_process_client, spec, workload, raw)
    assert not checks["full"].ok and "fare" in checks["full"].detail, checks["full"].detail
    assert not checks["fast"].ok and "fare_sum" in checks["fast"].detail, checks["fast"].detail


def test_a_partial_sum_off_in_the_tree_fails_both_depths(in_process_client, monkeypatch):
    """The tree's addition gives fare sums 0.2 % high."""
    real = trips_tasks._merged

    def off(*partials):
        merged = real(*partials)
        return dict(merged, sums=merged["sums"] * np.array([1.002, 1.0])[:, None, None])

    monkeypatch.setattr(trips_tasks, "_merged", off)
    spec, workload, raw = _computed(in_process_client, **FAST)
    checks = _both(in_process_client, spec, workload, raw)
    assert not checks["full"].ok and not checks["fast"].ok
    assert "fare_mean" in checks["fast"].detail and "certified" in checks["fast"].detail


def test_a_partition_table_that_is_not_its_cells_fails_the_fast_depth(in_process_client,
                                                                       monkeypatch):
    """Cells' tables added into the wrong hour of the partition's table: the reported table
    follows the partition tables, the projections show the move."""
    real = trips_tasks._cell_sums

    def moved(*args):
        piece = real(*args)
        counts, sums = piece["counts"].copy(), piece["sums"].copy()
        counts[[3, 4]], sums[:, [3, 4]] = counts[[4, 3]], sums[:, [4, 3]]
        return dict(piece, counts=counts, sums=sums)

    monkeypatch.setattr(trips_tasks, "_cell_sums", moved)
    spec, workload, raw = _computed(in_process_client, **FAST)
    checks = _both(in_process_client, spec, workload, raw)
    assert not checks["full"].ok
    assert not checks["fast"].ok and "cells'" in checks["fast"].detail, checks["fast"].detail


# One partition of eight: a random one (drawn with a seed, not the first), and the last. Each
# holds an eighth of the cells, so the fast depth's sample (a tenth caught at 99.9 %) finds it.
ONE_PARTITION = {"random": int(np.random.default_rng(12).integers(1, 7)), "last": 7}


@pytest.mark.parametrize("where", sorted(ONE_PARTITION))
def test_one_partition_misread_fails_both_depths(in_process_client, monkeypatch, where):
    """The reader hands the kernel dropoff latitudes 1e-4 degrees north in one partition only
    (its rows as read, which the fast depth recomputes, are right)."""
    real, target = trips_tasks._chunks, ONE_PARTITION[where]
    column = trips_tasks.VALUES.index("dropoff_lat")

    def misread(partition, to_device):
        for n, (ticks, per_hour, *values), as_read in real(partition, to_device):
            if partition[1][0] == target:
                values[column] = values[column] + 1e-4
            yield n, (ticks, per_hour, *values), as_read

    monkeypatch.setattr(trips_tasks, "_chunks", misread)
    spec, workload, raw = _computed(in_process_client, rows=400_000, partitions=8, seed=5)
    checks = _both(in_process_client, spec, workload, raw)
    fast, full = checks["fast"].detail, checks["full"].detail
    assert not checks["fast"].ok and f"partition {target} cell " in fast, fast
    assert "distance_sum" in fast and "recomputed from its rows" in fast, fast
    assert set(re.findall(r"partition (\d+) cell", fast)) == {str(target)}, fast
    assert not checks["full"].ok and "distance_mean_km" in full and "recomputed" in full, full


@pytest.mark.parametrize("kind", ["parquet", "csv"])
def test_the_fast_depth_of_an_input_with_unusual_values(in_process_client, tmp_path, kind):
    frame = _unusual(30_000, 6)
    for i, part in enumerate(_split(frame, 3)):
        if kind == "parquet":
            part.to_parquet(tmp_path / f"t-{i}.parquet", row_group_size=6_000)
        else:
            part.to_csv(tmp_path / f"t-{i}.csv", index=False)
    spec, workload, raw = _computed(in_process_client, input=str(tmp_path))
    assert any(c["outside"] is not None for c in raw["partitions"])
    check = _verified(in_process_client, spec, workload, raw, "fast")
    assert check.ok and "cells checked again" in check.detail, check.detail
    for mutation in spec.mutations:
        check = _verified(in_process_client, spec, workload, mutation.alter(copy.deepcopy(raw)),
                          "fast")
        assert not check.ok and mutation.named_in(check.detail), (mutation.name, check.detail)


def test_exact_groups_with_fares_off_fail_both_depths(in_process_client, tmp_path,
                                                         monkeypatch):
    """The exact grouping of other passenger counts adds fares 0.2 % high."""
    _unusual(20_000, 7).to_parquet(tmp_path / "t.parquet", row_group_size=5_000)
    real = trips_tasks._outside_frame

    def high(columns):
        frame = real(columns)
        return frame.assign(fare_sum=frame["fare_sum"] * 1.002)

    monkeypatch.setattr(trips_tasks, "_outside_frame", high)
    spec, workload, raw = _computed(in_process_client, input=str(tmp_path / "t.parquet"))
    checks = _both(in_process_client, spec, workload, raw)
    assert not checks["full"].ok
    assert not checks["fast"].ok and "other passenger counts" in checks["fast"].detail


def test_the_certificates_table_is_the_kernels_own():
    """shared's HOURS x SLOTS, and tasks' column of other passenger counts, are the kernel's."""
    from pipelines.trips import shared

    assert (shared.HOURS, shared.SLOTS) == (trip_kernel.HOURS, trip_kernel.PASSENGER_SLOTS + 1)
    assert trips_tasks.OUTSIDE == trip_kernel.OUTSIDE
    counts, _ = trip_kernel.trip_sums(np.array([0], "datetime64[s]"), 3600, np.array([99]),
                                      np.array([1.0]), *np.array([[40.0], [-74.0], [40.1],
                                                                  [-74.1]]))
    assert counts[0, trips_tasks.OUTSIDE] == 1  # 99 passengers: the other counts' column


def test_cells_recomputed_by_numpy_equal_the_kernel():
    """The check's own cell tables (hour, slot, filter, haversine) against the fused kernel, on
    unusual values: missing times, fares, coordinates and passengers, times before 1970 and
    passengers outside the dense slots."""
    frame = _unusual(9_000, 3)
    rows = {name: trips_tasks._pandas_values(frame[name]) for name in trips_pipeline.COLUMNS}
    counts, sums = trips_check_replay.recomputed_cells([rows])
    want_counts, want_sums = trip_kernel.trip_sums(*trips_tasks._kernel_columns(rows))
    np.testing.assert_array_equal(counts[0], want_counts)
    np.testing.assert_allclose(sums[0], want_sums, rtol=1e-10)
    assert want_counts[:, -1].sum() > 0 and want_counts.sum() < 9_000


def test_device_rows_come_back_to_the_host_as_read(monkeypatch):
    """A GPU reader's columns ((ticks, dtype) for times, CuPy arrays otherwise) are copied to
    the host for a drawn cell, times as datetime64 again."""
    import sys
    import types

    class Device:
        def __init__(self, values):
            self.values = np.asarray(values)

        def __getitem__(self, key):
            return Device(self.values[key])

        @property
        def __cuda_array_interface__(self):
            return self.values.__array_interface__

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        asnumpy=lambda a: np.array(a.values)))
    times = np.array(["2026-01-01T03:00", "NaT", "1969-12-31T23:30"], "datetime64[ns]")
    columns = {"pickup_time": (Device(times.view(np.int64)), times.dtype),
               "fare": Device([1.0, np.nan, 3.0])}
    rows = trips_tasks._rows_as_read(columns, 1, 3)
    np.testing.assert_array_equal(rows["pickup_time"], times[1:])
    assert rows["pickup_time"].dtype == times.dtype
    np.testing.assert_array_equal(rows["fare"], [np.nan, 3.0])


@pytest.mark.gpu
@pytest.mark.parametrize("depth", DEPTHS)
def test_on_cudf_workers_both_depths_verify_and_catch_a_mutation(depth):
    pytest.importorskip("cudf")
    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        spec, workload, raw = _computed(session, rows=2_000_000, seed=4)
        assert session.backend.is_gpu
        assert _verified(session, spec, workload, raw, depth).ok
        mutation = spec.mutations[0]
        check = _verified(session, spec, workload, mutation.alter(copy.deepcopy(raw)), depth)
        assert not check.ok and mutation.named_in(check.detail)


def _arrow_columns():
    import pyarrow as pa

    ticks = [0, 1_700_000_000, 86_399]
    yield pa.chunked_array([pa.array([1.5, -2.0, 3.25])])
    yield pa.chunked_array([pa.array([1.5, 2.0], pa.float32()), pa.array([3.0], pa.float32())])
    yield pa.chunked_array([pa.array([1, 7, 3], pa.int32())])
    yield pa.chunked_array([pa.array([1, None, 3])])  # nulls: NaN, through pyarrow's to_numpy
    yield pa.chunked_array([pa.array([1.0, None])])
    yield pa.chunked_array([], pa.float64())
    for unit in ("s", "ms", "us", "ns"):
        yield pa.chunked_array([pa.array(ticks, pa.timestamp(unit))])
    yield pa.chunked_array([pa.array([0, None, 5], pa.timestamp("ms"))])
    yield pa.chunked_array([pa.array(ticks, pa.timestamp("s", tz="America/New_York"))])
    yield pa.chunked_array([pa.array([0, 20_000], pa.date32())])


@pytest.mark.parametrize("column", list(_arrow_columns()), ids=str)
def test_arrow_columns_convert_as_pyarrow_converts_them(column):
    """The reader's own conversion gives what ``to_numpy`` gives: dtype, values, NaN and NaT."""
    import pyarrow as pa
    import pyarrow.compute as pc

    got = trips_tasks._arrow_values(column)
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        column = pc.local_timestamp(column)
    elif pa.types.is_date(kind):
        column = column.cast(pa.timestamp("s"))
    want = column.to_numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
