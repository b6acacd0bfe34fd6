"""kmeans-pipeline: Lloyd's k-means on CPU workers, checked against a plain NumPy replay."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import time
from types import SimpleNamespace

import dask
import distributed
import numpy as np
import pytest
from conftest import (
    assert_one_error_line,
    compute_as_runner,
    run_cli,
    verify_on,
)

import daskgpu
from daskgpu.errors import ParameterError
from daskgpu.execution import answers, runner
from daskgpu.toolkit import data_parallel, numeric, registry
from pipelines.kmeans import baseline as kmeans_baseline
from pipelines.kmeans import check as kmeans_check
from pipelines.kmeans import check_mutations as kmeans_mutations
from pipelines.kmeans import check_replay
from pipelines.kmeans import init as kmeans_init
from pipelines.kmeans import pipeline as kmeans_pipeline
from pipelines.kmeans import shared as kmeans_data
from pipelines.kmeans import tasks as kmeans_steps

SMALL = {"samples": 6000, "features": 5, "clusters": 4, "chunks": 1600, "seed": 11}


def numpy_data(params: dict) -> np.ndarray:
    """All points at once, as the documented scheme draws them shard by shard."""
    d, clusters = params["features"], params["clusters"]
    centres = kmeans_steps.blob_centres(params["seed"], clusters, d)
    parts = []
    for i, rows in enumerate(numeric.shard_sizes(params["samples"], params["chunks"])):
        rng = np.random.default_rng(np.random.SeedSequence(params["seed"],
                                                           spawn_key=(kmeans_data.POINTS, i)))
        blob = rng.integers(0, clusters, rows)
        parts.append(rng.standard_normal((rows, d), dtype=np.float32)
                     + centres.astype(np.float32)[blob])
    return np.concatenate(parts)


def numpy_lloyd(x: np.ndarray, start: np.ndarray, max_iter: int, tol: float) -> dict:
    """Lloyd's iterations written out in plain NumPy, float64."""
    x = x.astype(np.float64)
    c, trajectory, inertias = start.copy(), [start], []
    for _ in range(max_iter):
        dist = ((x[:, None, :] - c[None]) ** 2).sum(axis=2)
        labels = dist.argmin(axis=1)
        inertias.append(dist.min(axis=1).sum())
        new = c.copy()
        for j in range(c.shape[0]):
            if (labels == j).any():
                new[j] = x[labels == j].mean(axis=0)
        shift = np.sqrt(((new - c) ** 2).sum(axis=1)).max()
        c = new
        trajectory.append(c)
        if shift <= tol:
            break
    inertias.append(((x[:, None, :] - c[None]) ** 2).sum(axis=2).min(axis=1).sum())
    return {"centroids": np.stack(trajectory), "inertias": np.array(inertias)}


@pytest.fixture(scope="module")
def small_run(cpu_client):
    return compute_as_runner(cpu_client, "kmeans-pipeline", **SMALL)


def test_iterations_match_a_plain_numpy_replay(small_run):
    _spec, workload, raw = small_run
    assert workload.context.init == "k-means||" and workload.context.k == 4
    x = numpy_data(SMALL)
    want = numpy_lloyd(x, raw["centroids"][0], 100, 1e-4)
    assert raw["iterations"] == len(want["centroids"]) - 1 == len(raw["step_s"])
    np.testing.assert_allclose(raw["centroids"], want["centroids"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(raw["inertias"], want["inertias"], rtol=1e-6)
    assert raw["counts"].sum() == SMALL["samples"]
    assert np.all(np.diff(raw["inertias"]) <= 1e-6 * raw["inertias"][0])
    # k-means|| starts from points of the data's blobs: every centre is found
    centres = kmeans_steps.blob_centres(SMALL["seed"], SMALL["clusters"], SMALL["features"])
    gap = np.sqrt(((raw["centroids"][-1][:, None] - centres[None]) ** 2).sum(axis=2))
    assert sorted(gap.argmin(axis=1)) == [0, 1, 2, 3] and gap.min(axis=1).max() < 0.2


def test_driving_from_the_client_gives_the_same_iterations(cpu_client):
    spec = registry.get("kmeans-pipeline")
    import dask

    resolved = spec.resolve(cpu_client.backend, **SMALL, init="random")
    with dask.config.set(scheduler=cpu_client.client):
        workload = spec.workload(cpu_client.backend, resolved)
    driven = kmeans_pipeline.drive(workload, cpu_client.client)
    x = numpy_data(SMALL)
    rows = kmeans_init.random_rows(SMALL["seed"], SMALL["samples"], 4)
    np.testing.assert_array_equal(driven["centroids"][0], x[rows].astype(np.float64))
    want = numpy_lloyd(x, x[rows].astype(np.float64), 100, 1e-4)
    np.testing.assert_allclose(driven["centroids"], want["centroids"], rtol=1e-9, atol=1e-9)
    check = verify_on(cpu_client, spec, workload, driven)
    assert check.ok, check.detail
    workload.context.kept.shards.release()


def test_the_run_verifies_and_finds_the_blobs(cpu_client, small_run):
    spec, workload, raw = small_run
    check = verify_on(cpu_client, spec, workload, raw)
    assert check.ok, check.detail
    assert "iterations recomputed" in check.detail
    assert "every blob's true centre found" in check.detail
    assert "k-means|| candidates are points of the data" in check.detail
    assert "every blob seeded by one initial centroid" in check.detail


@pytest.mark.parametrize("depth", ["fast", "full"])
def test_a_wrong_seed_or_tol_in_the_run_fails_verification(cpu_client, small_run, depth):
    """The check recomputes from the parameters, not from the run's own numbers."""
    spec, workload, raw = small_run
    context = workload.context
    for change, word in (({"seed": SMALL["seed"] + 1}, "initial"), ({"tol": 1e9}, "tol")):
        workload.context = dataclasses.replace(context, **change)
        try:
            check = verify_on(cpu_client, spec, workload, raw, depth)
        finally:
            workload.context = context
        assert not check.ok, change
        # the fast check reads the kept points: drawn from another seed, they are not the data
        said = "differs from its seed" if depth == "fast" and "seed" in change else word
        assert said in check.detail, check.detail


def test_an_empty_cluster_keeps_its_centroid(cpu_client):
    client = cpu_client.client
    shards = data_parallel.place(client, np.asarray, [(np.array([[0.0, 0.0], [1.0, 0.0]]),),
                                                      (np.array([[10.0, 0.0]]),)])
    distributed.wait(shards)
    start = np.array([[0.0, 0.0], [1e6, 1e6], [10.0, 1.0]])
    out = kmeans_steps.lloyd(client, shards, start, 10, 0.0)
    assert out["iterations"] == 2 and out["counts"].tolist() == [2, 0, 1]
    np.testing.assert_array_equal(out["centroids"][-1], [[0.5, 0.0], [1e6, 1e6], [10.0, 0.0]])
    assert out["inertias"].tolist() == [2.0, 0.5, 0.5]


def test_the_baseline_gives_the_runs_value(cpu_client, tmp_path):
    out = tmp_path / "centroids.npy"
    result = daskgpu.run("kmeans-pipeline", cpu_client, samples=3000, features=3, clusters=3,
                         seed=5, output=str(out))
    assert result.verified, result.verification
    spec = registry.get("kmeans-pipeline")
    seconds, answer = spec.baseline(spec.resolve(cpu_client.backend, **result.params))
    assert seconds > 0
    assert answers.difference(result.value, answer) is None
    assert set(result.value) == {"iterations", "inertia", "inertias", "centroids", "labels"}
    assert result.value["inertia"] == result.value["inertias"][-1]
    saved = np.load(out)  # as scikit-learn's cluster_centers_: a plain (k, d) array
    assert saved.dtype == np.float64 and saved.shape == (3, 3)
    np.testing.assert_array_equal(saved, result.value["centroids"])
    assert result.data["iteration_s"] >= result.data["iteration_compute_s"] > 0


def test_cli_run_is_verified_and_reports_each_iteration(tmp_path):
    out = tmp_path / "centroids.csv"
    proc = run_cli("run", "kmeans-pipeline", "--cpu", "--workers", "2", "--samples", "20000",
                   "--seed", "3", "--no-dashboard", "--json", "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"], doc["verification"]
    value, data = doc["value"], doc["data"]
    assert len(value["inertias"]) == value["iterations"] + 1
    assert value["inertia"] == value["inertias"][-1] <= value["inertias"][0]
    assert np.asarray(value["centroids"]).shape == (16, 32)
    assert data["shape"] == [20000, 32] and doc["params"]["k"] == 16
    assert data["converged"] and data["iteration_s"] > 0
    assert data["initialisation"].startswith("k-means||: ")
    assert "in 5 rounds" in data["initialisation"]
    lines = out.read_text().splitlines()
    assert len(lines) == 17 and lines[0].startswith("x0,x1,")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--k", "0"], "--k"),
    (["--samples", "10", "--k", "11"], "more centroids"),
    (["--tol", "-1"], "--tol"),
])
def test_cli_hostile_option_is_one_error_line(args, fragment):
    started = time.perf_counter()
    proc = run_cli("run", "kmeans-pipeline", *args, "--cpu", "--workers", "1", timeout=60)
    assert_one_error_line(proc, started, fragment)


@pytest.mark.parametrize(("params", "fragment"), [
    ({"tol": "nan"}, "--tol"),
    ({"tol": -1e-9}, "0 or more"),
    ({"max_iter": 0}, "--max-iter"),
    ({"k": -1}, "--k"),
    ({"init": "kmeans++"}, "--init"),
    ({"samples": 10**8, "chunks": 10}, "shards"),
    ({"samples": 5, "k": 6}, "more centroids"),
    ({"clusters": 0}, "--clusters"),
    ({"clusters": 10**5, "features": 2}, "at most"),
    ({"k": 2**23, "samples": 2**30}, "centroid entries"),
    ({"max_iter": 10**6}, "over all iterations"),
    ({"chunks": "100,5"}, "whole points"),
    ({"dtype": "float16"}, "--dtype"),
    ({"samples": 2**62}, "TiB"),
])
def test_hostile_parameters_are_refused_before_any_cluster(params, fragment):
    with pytest.raises(ParameterError, match=fragment) as err:
        registry.get("kmeans-pipeline").resolve(**params)
    assert "\n" not in str(err.value)


def test_blobs_that_do_not_fit_are_one_error(monkeypatch):
    monkeypatch.setattr(kmeans_steps, "CENTRE_TRIES", 1)
    with pytest.raises(ParameterError, match="no room"):
        kmeans_steps.blob_centres(1, 200, 1)


def test_defaults_follow_the_backend():
    from daskgpu.toolkit import backends

    spec = registry.get("kmeans-pipeline")
    assert spec.resolve()["samples"] == kmeans_pipeline.CPU_DEFAULT_SAMPLES
    assert spec.resolve(clusters=7)["k"] == 7
    gpu = backends.Backend("gpu", "cupy", "cudf", (), workers=4, threads=4)
    assert spec.resolve(gpu)["samples"] == kmeans_pipeline.GPU_DEFAULT_SAMPLES


def test_a_centroid_off_its_blob_fails_the_centres_check():
    centres = kmeans_steps.blob_centres(2, 3, 4)
    np.testing.assert_array_equal(check_replay.true_centres(2, 3, 4), centres)
    counts = np.array([1e4, 1e4, 1e4])

    def found(final):
        return kmeans_check.centres_found(centres, final, counts, 0.0)

    problem, words = found(centres[[2, 0, 1]] + 0.01)
    assert problem is None and "found" in words
    moved = centres.copy()
    moved[1, 2] += 0.2  # 20 standard errors of a blob of 1e4 points
    assert found(moved)[0].startswith("centroid 1")
    merged = centres.copy()
    merged[0] = merged[1] + 1.0  # two centroids in one blob: a local optimum, not an error
    problem, words = found(merged)
    assert problem is None and "local optimum" in words


def test_the_pipeline_modules_import_no_gpu_library():
    import ast

    for name in ("pipelines.kmeans.pipeline", "pipelines.kmeans.tasks", "pipelines.kmeans.check",
                 "pipelines.kmeans.shared", "pipelines.kmeans.check_replay",
                 "pipelines.kmeans.check_mutations", "pipelines.kmeans.init",
                 "pipelines.kmeans.baseline"):
        tree = ast.parse(open(importlib.util.find_spec(name).origin).read())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom))
                    for alias in (node.names if isinstance(node, ast.Import)
                                  else [ast.alias(node.module or "")])}
        assert not imported & {"cupy", "cudf", "cupyx"}, (name, imported)


@pytest.fixture
def device_kernel(cupy_stand_in, monkeypatch):
    """The strict CuPy stand-in, with the Lloyd pass's kernel run by its CPU twin on the
    stand-in's values (its results back in "device memory")."""
    import strict_cupy

    monkeypatch.setattr(kmeans_steps, "kmeans_pass",
                        strict_cupy.host_kernel(kmeans_steps.kmeans_pass))
    return cupy_stand_in


def test_gpu_branches_draw_and_check_alike(device_kernel):
    cupy = device_kernel
    d, clusters, rows = 6, 3, 700
    centres = kmeans_steps.blob_centres(4, clusters, d)
    x = kmeans_steps.make_shard(4, 1, rows, d, "float32", "cupy", centres)
    assert isinstance(x, cupy.ndarray) and x.dtype == np.float32
    host = x.get()
    on_numpy = kmeans_steps.make_shard(4, 1, rows, d, "float32", "numpy", centres)
    assert not np.array_equal(host, on_numpy)  # another generator, seeded apart
    start = host[:clusters].astype(np.float64)
    (sums, counts, inertia), _ = kmeans_steps.shard_pass(x, start)
    (want_sums, want_counts, want_inertia), _ = kmeans_steps.shard_pass(host, start)
    np.testing.assert_array_equal(counts, want_counts)  # the NumPy branch on the same points
    np.testing.assert_allclose(sums, want_sums, rtol=1e-12)
    assert inertia == pytest.approx(want_inertia, rel=1e-12)
    def job(**more):
        """What the full check recomputes on shard 1 (which starts at row ``rows``), drawn again
        on the device."""
        return check_replay.Job(1, rows, rows, d, 4, clusters, "float32", "cupy", None,
                                start[None], (), rows, None, np.array([0, 2]), **more)

    totals = check_replay.shard_again(None, job())
    assert len(cupy.seeds) == 2 and cupy.seeds[0] == cupy.seeds[1]  # shard 1 drawn alike
    np.testing.assert_array_equal(totals.picked, start[[0, 2]])
    np.testing.assert_array_equal(totals.whole[0].counts, counts)
    np.testing.assert_allclose(totals.whole[0].projected, sums, rtol=1e-12)  # every feature
    assert totals.whole[0].inertia == pytest.approx(inertia, rel=1e-6)
    # k-means||: one round sampled from the first point, replayed and weighed by the check
    first = start[:1]
    (_, _, cost), _ = kmeans_steps.shard_pass(x, first)
    factor = 2.0 * clusters
    kept, points = kmeans_init.sample_far(x, first, cost, factor, 4, 0, 1, start=rows)
    want_kept, want_points = kmeans_init.sample_far(host, first, cost, factor, 4, 0, 1,
                                                    start=rows)
    np.testing.assert_array_equal(kept, want_kept)
    np.testing.assert_allclose(points, want_points, rtol=1e-12)
    assert len(kept) > 0 and kept.min() >= rows
    candidates = np.concatenate([first, points])
    (_, weights, _), _ = kmeans_steps.shard_pass(x, candidates)
    for lost in (0, 1):  # every sampled row reported, or the first left out
        sampling = check_replay.Sampling(4, 1, candidates, (cost,), (1,), factor,
                                         ((kept - rows)[lost:],), 256)
        got = check_replay.shard_again(None, job(sampling=sampling, cells=(0, 1, 2)))
        assert (got.first_wrong is None) == (lost == 0)
    np.testing.assert_array_equal(sum(cell[1] for cell in got.init), weights)
    assert sum(cell[3][0] for cell in got.init) == pytest.approx(cost, rel=1e-6)
    assert got.first_wrong[:3] == (0, kept[0] - rows, False)  # row kept[0]: not reported


# --------------------------------------------------------------------------- --input


@pytest.fixture(scope="module")
def points_files(tmp_path_factory):
    import zarr

    base = tmp_path_factory.mktemp("kmeans-input")
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3000, 3)) + 8 * rng.integers(0, 3, (3000, 1))).astype(np.float32)
    x[1234] = np.nan  # left out of every sum, count and inertia, as the kernel documents
    np.save(base / "x.npy", x)
    z = zarr.create_array(str(base / "x.zarr"), shape=x.shape, dtype="float64", chunks=(800, 3))
    z[:] = x.astype(np.float64)
    files = {"x": x, "npy": str(base / "x.npy"), "zarr": str(base / "x.zarr")}
    for name, array in {"flat": np.zeros(10), "cube": np.zeros((4, 3, 2)),
                        "ints": np.zeros((10, 2), int), "text": np.array([["a", "b"]])}.items():
        np.save(base / f"{name}.npy", array)
        files[name] = str(base / f"{name}.npy")
    return files


@pytest.mark.parametrize(("kind", "init"), [("npy", "random"), ("zarr", "k-means||")])
def test_clustering_an_input_matches_numpy_and_verifies(cpu_client, points_files, kind, init):
    params = {"input": points_files[kind], "k": 3, "chunks": 700, "seed": 4, "init": init}
    spec, workload, raw = compute_as_runner(cpu_client, "kmeans-pipeline", **params)
    assert workload.context.samples == 3000 and workload.context.features == 3
    assert workload.context.dtype == ("float32" if kind == "npy" else "float64")
    x = points_files["x"].astype(workload.context.dtype)
    if init == "random":
        rows = kmeans_init.random_rows(4, 3000, 3)
        np.testing.assert_array_equal(raw["centroids"][0], x[rows].astype(np.float64))
    finite = x[np.isfinite(x).all(axis=1)]
    want = numpy_lloyd(finite, raw["centroids"][0], 100, 1e-4)
    np.testing.assert_allclose(raw["centroids"], want["centroids"], rtol=1e-9, atol=1e-9)
    assert raw["counts"].sum() == 2999
    for depth in ("fast", "full"):
        check = verify_on(cpu_client, spec, workload, raw, depth)
        assert check.ok, check.detail
        assert "no true centres" in check.detail
        for mutation in spec.mutations:
            if init == "random" and mutation.name.startswith(
                    kmeans_mutations.KMEANS_PARALLEL_ONLY):
                continue
            if mutation.name.startswith(kmeans_mutations.LABELS_ONLY):  # no --labels here
                continue
            altered = mutation.alter(dict(raw))
            assert not verify_on(cpu_client, spec, workload, altered, depth).ok, mutation.name


def test_the_baseline_clusters_the_same_input(cpu_client, points_files):
    result = daskgpu.run("kmeans-pipeline", cpu_client, input=points_files["zarr"], k=3, seed=2)
    assert result.verified, result.verification
    assert result.params["samples"] is None and result.params["clusters"] is None
    spec = registry.get("kmeans-pipeline")
    _seconds, answer = spec.baseline(spec.resolve(cpu_client.backend, **result.params))
    assert answer["iterations"] == result.value["iterations"]
    np.testing.assert_allclose(answer["centroids"], result.value["centroids"], rtol=1e-6)


@pytest.mark.parametrize(("given", "fragment"), [
    ({"input": "flat"}, "a matrix of samples x features"),
    ({"input": "cube"}, "a matrix of samples x features"),
    ({"input": "ints"}, "float32 or float64"),
    ({"input": "text"}, "numeric"),
    ({"input": "/nonexistent/points.npy"}, "no such file"),
    ({"input": "npy", "samples": 10}, "--samples: applies to generated points"),
    ({"input": "npy", "clusters": 3}, "--clusters: applies to generated points"),
    ({"input": "npy", "features": 3}, "--features: applies to generated points"),
    ({"input": "npy", "k": 3001}, "more centroids than the 3000 points"),
    ({"input": "npy", "dtype": "float64"}, "the input holds float32"),
])
def test_hostile_inputs_are_one_line_before_any_cluster(points_files, given, fragment):
    from daskgpu.errors import DaskGPUError

    params = {k: points_files.get(v, v) if k == "input" else v for k, v in given.items()}
    with pytest.raises(DaskGPUError) as err:
        registry.get("kmeans-pipeline").resolve(**params)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_cli_refuses_a_flat_input_in_one_line(points_files):
    started = time.perf_counter()
    proc = run_cli("run", "kmeans-pipeline", "--input", points_files["flat"], "--cpu",
                   "--workers", "1", timeout=60)
    assert_one_error_line(proc, started, "--input", "2 axes")


# --------------------------------------------------------------------------- k-means|| init

def _in_process_init(params: dict, k: int):
    centres = kmeans_steps.blob_centres(params["seed"], params["clusters"], params["features"])
    sizes = numeric.shard_sizes(params["samples"], params["chunks"])
    shards = [kmeans_steps.make_shard(params["seed"], i, rows, params["features"], "float32",
                                      "numpy", centres) for i, rows in enumerate(sizes)]
    return kmeans_init.initial_centroids(kmeans_baseline.InProcess(), shards, sizes,
                                          params["seed"], k, "k-means||")


def test_the_reported_init_is_the_datas_points_and_reproducible(small_run):
    _spec, _workload, raw = small_run
    chosen = raw["init"]
    x = numpy_data(SMALL).astype(np.float64)
    rows = np.asarray(chosen["rows"])
    assert rows[0] == kmeans_init.random_rows(SMALL["seed"], SMALL["samples"], 1)[0]
    assert len(np.unique(rows)) == len(rows) > SMALL["clusters"]
    np.testing.assert_array_equal(chosen["points"], x[rows])
    nearest = ((x[:, None] - x[rows][None]) ** 2).sum(axis=2).argmin(axis=1)
    np.testing.assert_array_equal(chosen["weights"], np.bincount(nearest, minlength=len(rows)))
    # the same from the seed, in one process: rows, weights and initial centroids
    start, again = _in_process_init(SMALL, SMALL["clusters"])
    for key in ("rows", "weights", "rounds", "costs"):
        np.testing.assert_array_equal(again[key], chosen[key])
    assert len(chosen["costs"]) == kmeans_data.KMEANS_PARALLEL_ROUNDS == kmeans_check.ROUNDS
    np.testing.assert_array_equal(start, raw["centroids"][0])


def test_sample_far_reports_global_rows():
    x = np.random.default_rng(1).standard_normal((300, 3)).astype(np.float32)
    rows, points = kmeans_init.sample_far(x, x[:1].astype(np.float64), 10.0, 5.0, 3, 0, 2,
                                           start=1000)
    assert rows.dtype == np.int64 and len(rows) > 0 and rows.min() >= 1000
    np.testing.assert_array_equal(points, x[rows - 1000].astype(np.float64))


def test_weighted_kmeans_ends_at_a_fixed_point():
    rng = np.random.default_rng(5)
    points = rng.standard_normal((200, 3)) + 6 * rng.integers(0, 4, (200, 1))
    weights = rng.integers(0, 50, 200).astype(np.float64)
    c = kmeans_init.weighted_kmeans(points, weights, 4, seed=2)
    labels = ((points[:, None] - c[None]) ** 2).sum(axis=2).argmin(axis=1)
    for j in range(4):
        mine = labels == j
        np.testing.assert_allclose(c[j], np.average(points[mine], axis=0, weights=weights[mine]),
                                   rtol=1e-12, atol=1e-12)
    chosen = {"points": points, "weights": weights}
    assert kmeans_check.fixed_point_problem(chosen, c) is None
    # from any start the steps end at one, which the check accepts too
    mid = kmeans_init.weighted_lloyd(points, weights, points[:4])
    assert kmeans_check.fixed_point_problem(chosen, mid) is None
    assert "not a fixed point" in kmeans_check.fixed_point_problem(chosen, points[:4])
    moved = c.copy()
    moved[2, 1] += 1e-6
    assert kmeans_check.fixed_point_problem(chosen, moved).startswith("initial centroid 2")
    assert np.array_equal(kmeans_init.weighted_kmeans(points, weights, 4, seed=2), c)


def test_the_init_checks_fail_on_crafted_wrong_candidates():
    ctx = SimpleNamespace(k=2, samples=50, features=2, seed=3)
    first = int(check_replay.seeded_rows(3, 50, 1)[0])
    assert first == kmeans_init.random_rows(3, 50, 1)[0]
    good = {"rows": np.array([first, 7, 9]), "points": np.arange(6.0).reshape(3, 2),
            "weights": np.array([20, 20, 10]), "rounds": np.array([0, 1, 3]),
            "costs": np.array([9.0, 5.0, 4.0, 3.0, 2.0])}
    assert kmeans_check.candidates_problem(ctx, good) is None
    for change, fragment in (({"rows": np.array([first, 7, 50])}, "outside"),
                             ({"rows": np.array([first])}, "at least --k 2"),
                             ({"weights": np.array([20, -1, 31])}, "whole counts"),
                             ({"weights": None}, "whole counts"),
                             ({"points": np.full((3, 2), np.nan)}, "points of shape"),
                             ({"rounds": np.array([0, 3, 1])}, "non-decreasing"),
                             ({"costs": np.array([9.0, 5.0, 4.0, 3.0])}, "ran 4 sampling"),
                             ({"costs": np.array([9.0, 5.0, 0.0])}, "did not run")):
        assert fragment in kmeans_check.candidates_problem(ctx, {**good, **change})
    assert "no initial candidates" in kmeans_check.candidates_problem(ctx, None)
    read = good["points"].copy()
    assert kmeans_check.points_problem(ctx, good, read) is None
    read[1, 1] += 1e-9  # the data's point differs from the reported candidate
    assert kmeans_check.points_problem(ctx, good, read).startswith("initial candidate 1")
    shifted = {**good, "rows": np.array([(first + 1) % 50, 7, 9])}
    assert "the seeded row" in kmeans_check.points_problem(ctx, shifted, good["points"])


def _cells_altered(raw: dict, name: str, index: tuple, total: str, at: tuple, by: float):
    """``raw`` with the k-means|| cells' ``name`` at ``index`` and the total ``total`` at
    ``at`` changed by ``by`` together (the run's certificate adds up)."""
    cells = np.array(raw["init"][name], dtype=np.float64, copy=True)
    cells[index] += by
    reported = np.array(raw["init"][total], dtype=np.float64, copy=True)
    reported[at] += by
    return {**raw, "init": {**raw["init"], name: cells, total: reported}}


@pytest.mark.parametrize("depth", ["fast", "full"])
def test_weights_and_costs_altered_with_their_cells_fail(cpu_client, small_run, depth):
    """A candidate's weight and its cells' (or a round's cost and a cell's) changed together:
    the cells recomputed show it; a weight moved in a cell the fast sample leaves out, the
    weights' sum."""
    spec, workload, raw = small_run
    plan = kmeans_check.plans(workload.context, 1, "fast").cells
    outside, inside = min(set(range(plan.population)) - set(plan.parts)), plan.parts[1]
    heavier = _cells_altered(raw, "cell_weights", (outside, 0), "weights", 0, 1)
    check = verify_on(cpu_client, spec, workload, heavier, depth)
    said = ("initial candidate weights sum to 6001, not the 6000 points counted"
            if depth == "fast" else "initial candidate 0: the run weighs ")
    assert not check.ok and said in check.detail, check.detail
    costlier = _cells_altered(raw, "cell_costs", (2, inside), "costs", 2, 1.0)
    check = verify_on(cpu_client, spec, workload, costlier, depth)
    assert not check.ok and f"k-means|| round 2: cell {inside}'s sampling cost " in (
        check.detail), check.detail


def test_the_seeded_blobs_check():
    centres = np.array([[0.0, 0.0], [20.0, 0.0], [0.0, 20.0]])
    many = np.array([500.0, 500.0, 500.0])
    failure, words = kmeans_check.seeded_blobs(centres + 1.0, centres, many)
    assert failure is None and "every blob seeded" in words
    two = centres[[0, 0, 2]] + np.array([[1.0, 0], [-1.0, 0], [0, 0]])
    failure, _ = kmeans_check.seeded_blobs(two, centres, many)
    assert "blob 1 has 0 and blob 0 has 2" in failure
    failure, words = kmeans_check.seeded_blobs(two, centres, many * [1, 0.1, 1])
    assert failure is None and "not paired" in words


# --------------------------------------------------------------------------- the fast check


def test_the_fast_check_verifies_the_run_and_says_what_it_promises(cpu_client, small_run):
    spec, workload, raw = small_run
    check = verify_on(cpu_client, spec, workload, raw, "fast")
    assert check.ok and check.depth == "fast", check.detail
    for words in ("k-means|| candidates are points of the data", "cells checked again",
                  "every blob seeded by one initial centroid",
                  "the last iteration recomputed in float64 on all 6000 points kept",
                  "every blob's true centre found", "drawn again from their seeds and equal"):
        assert words in check.detail, (words, check.detail)


def test_the_run_reports_its_cells_beside_its_answer(small_run):
    """The certificates: the cells' counts add up to the reported weights and sampled points,
    and the iterations before the last are their cells' Lloyd steps."""
    _spec, workload, raw = small_run
    chosen = raw["init"]
    cell = kmeans_data.cell_rows(SMALL["samples"], workload.context.k)
    cells = sum(kmeans_data.cells_of(n, cell) for n in workload.context.sizes)
    assert chosen["cell_weights"].shape == (cells, len(chosen["rows"]))
    np.testing.assert_array_equal(chosen["cell_weights"].sum(axis=0), chosen["weights"])
    rounds = np.asarray(chosen["rounds"])
    assert chosen["cell_sampled"].sum(axis=1).tolist() == [
        int((rounds == s + 1).sum()) for s in range(len(chosen["costs"]))]
    np.testing.assert_allclose(chosen["cell_costs"].sum(axis=1), chosen["costs"], rtol=1e-5)
    certified = raw["cells"]
    assert certified["counts"].shape[0] == raw["iterations"] - 1
    for t in range(raw["iterations"] - 1):
        counts = certified["counts"][t].sum(axis=0)
        np.testing.assert_allclose(certified["sums"][t].sum(axis=0) / counts[:, None],
                                   raw["centroids"][t + 1], rtol=1e-12)
        assert certified["inertia"][t].sum() == pytest.approx(raw["inertias"][t], rel=1e-12)


# Random initial centroids that take the iterations to a local optimum: 6 iterations, 5 of them
# certified by their cells; k-means|| for the initialisation's faults.
KFAULT = {"samples": 8000, "features": 4, "clusters": 5, "chunks": 2000, "init": "random",
          "tol": 0.0, "max_iter": 6, "seed": 7}
KFAULT_INIT = {**KFAULT, "init": "k-means||", "max_iter": 100, "tol": 1e-4}


@pytest.fixture
def first_shard():
    """Whether points are (a part of) shard 0 of ``KFAULT``'s data, known by its first point.

    By content: a function the run ships to its workers is pickled, so a list it filled
    would stay on the workers' side.
    """
    centres = kmeans_steps.blob_centres(KFAULT["seed"], KFAULT["clusters"], KFAULT["features"])
    first = kmeans_steps.make_shard(KFAULT["seed"], 0, KFAULT["chunks"], KFAULT["features"],
                                    "float32", "numpy", centres)[0]

    def of_first(x):
        owner = x if x.base is None else x.base
        return (owner.ndim == 2 and owner.shape[0] == KFAULT["chunks"]
                and bool(np.array_equal(owner[0], first)))

    return of_first


def _kernel_with(monkeypatch, first_shard, alter):
    original = kmeans_steps.kmeans_pass

    def faulty(x, centroids):
        if first_shard(x):
            return alter(original, x, centroids)
        return original(x, centroids)

    monkeypatch.setattr(kmeans_steps, "kmeans_pass", faulty)


def _sums_off(original, x, centroids):
    sums, counts, inertia = original(x, centroids)
    return sums * 1.001, counts, inertia


def _inertia_off(original, x, centroids):
    sums, counts, inertia = original(x, centroids)
    return sums, counts, inertia * 1.002


def _points_skipped(original, x, centroids):
    return original(x[:-50], centroids)


@pytest.mark.parametrize("alter", [_sums_off, _inertia_off, _points_skipped],
                         ids=["sums off by 0.1 %", "inertia off by 0.2 %", "points skipped"])
def test_a_kernel_fault_on_a_quarter_of_the_shards_fails_both_depths(
        in_process_client, monkeypatch, first_shard, alter):
    """Faults in the kernel's pass itself, on one of the four shards, at every call."""
    _kernel_with(monkeypatch, first_shard, alter)
    spec, workload, raw = compute_as_runner(in_process_client, "kmeans-pipeline", **KFAULT)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, (depth, check.detail)


def test_a_sampling_fault_on_a_quarter_of_the_shards_fails_both_depths(
        in_process_client, monkeypatch, first_shard):
    """k-means|| sampling shard 0 with half the probability it documents."""
    original = kmeans_init.sample_far

    def faulty(x, candidates, cost, factor, *args, **kwargs):
        return original(x, candidates, cost, factor / 2 if first_shard(x) else factor, *args,
                        **kwargs)

    monkeypatch.setattr(kmeans_init, "sample_far", faulty)
    spec, workload, raw = compute_as_runner(in_process_client, "kmeans-pipeline", **KFAULT_INIT)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and "sampled" in check.detail, (depth, check.detail)


@functools.cache
def _first_points() -> np.ndarray:
    """The first point of each of ``KFAULT``'s four shards."""
    return numpy_data(KFAULT)[::KFAULT["chunks"]]


def _shard_of(x) -> int | None:
    """Which of ``KFAULT``'s shards ``x`` is (or is a part of), known by its first point."""
    owner = x if x.base is None else x.base
    if owner.ndim != 2 or owner.shape[0] != KFAULT["chunks"]:
        return None
    same = np.flatnonzero((_first_points() == owner[0]).all(axis=1))
    return int(same[0]) if len(same) else None


# One shard of the four: a random one (not the first), and the last. Each holds a quarter of
# the Lloyd cells, so the fast depth's sample (a tenth caught at 99.9 %) finds it.
ONE_SHARD = {"random": int(np.random.default_rng(12).integers(1, 3)), "last": 3}


@pytest.mark.parametrize("where", sorted(ONE_SHARD))
def test_sums_off_on_one_shard_fail_both_depths(in_process_client, monkeypatch, where):
    """The kernel's sums off by 0.1 % on one shard, at every pass (its cells' too: the run's
    certificates add up): the shard's cells recomputed show it."""
    original, faulty = kmeans_steps.kmeans_pass, ONE_SHARD[where]

    def off(x, centroids):
        sums, counts, inertia = original(x, centroids)
        return (sums * 1.001 if _shard_of(x) == faulty else sums), counts, inertia

    monkeypatch.setattr(kmeans_steps, "kmeans_pass", off)
    spec, workload, raw = compute_as_runner(in_process_client, "kmeans-pipeline", **KFAULT)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and f", shard {faulty} cell " in check.detail, (depth, check.detail)
        assert " points sum to " in check.detail, check.detail


def _initial_centroids(params: dict) -> np.ndarray:
    """The random initial centroids of ``params``' run: the seeded points of its data."""
    rows = kmeans_init.random_rows(params["seed"], params["samples"], params["clusters"])
    return numpy_data(params)[rows].astype(np.float64)


def test_sums_off_in_an_early_iteration_fail_both_depths(in_process_client, monkeypatch):
    """The first iteration's pass (of six) off by 0.1 % on every shard; the cells the run
    passes again for its certificates are right, so the first step is not their Lloyd step
    (fast), nor that of the points (full)."""
    original, start = kmeans_steps.kmeans_pass, _initial_centroids(KFAULT)

    def off(x, centroids):
        sums, counts, inertia = original(x, centroids)
        first = x.base is None and np.array_equal(centroids, start)  # a whole shard, at 0
        return (sums * 1.001 if first else sums), counts, inertia

    monkeypatch.setattr(kmeans_steps, "kmeans_pass", off)
    spec, workload, raw = compute_as_runner(in_process_client, "kmeans-pipeline", **KFAULT)
    assert raw["iterations"] == 6
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and check.detail.startswith("iteration 1: centroid "), check.detail
        source = "summed from the run's cells " if depth == "fast" else ""
        assert f"the mean of its points {source}is" in check.detail, check.detail


def test_a_few_cells_of_an_early_iteration_are_caught_by_recomputing_sampled_cells(
        in_process_client, monkeypatch):
    """The issue: a fault confined to a few cells of the first iteration, which the run's loop
    and its certificates both carry (the cells' sums and the shard's, so the centroids after
    it, altered together), hits no certificate, no last iteration, no inertia: of the fast
    steps only the Lloyd cells recomputed see it. Without that step the fault passes fast;
    full recomputes every iteration and catches it too."""
    session, spec = in_process_client, registry.get("kmeans-pipeline")
    with dask.config.set(scheduler=session.client):
        workload = spec.workload(session.backend, spec.resolve(session.backend, **KFAULT))
    ctx = workload.context
    cells = ctx.cells(ctx.lloyd_rows(KFAULT["max_iter"]))
    sampled = [cells.locate(part) for part in kmeans_check.plans(
        ctx, KFAULT["max_iter"], "fast").lloyd if part < cells.total]  # iteration 1's
    shard = sorted({s for s, _ in sampled})[np.random.default_rng(5).integers(0, 2)]
    faulty = sorted(c for s, c in sampled if s == shard)
    rows = kmeans_data.lloyd_cell_rows(KFAULT["samples"], KFAULT["clusters"],
                                       KFAULT["features"], KFAULT["max_iter"] - 1)
    original, start = kmeans_steps.kmeans_pass, _initial_centroids(KFAULT)

    def off(x, centroids):
        sums, counts, inertia = original(x, centroids)
        if _shard_of(x) != shard or not np.array_equal(centroids, start):
            return sums, counts, inertia
        if x.base is None:  # the loop's pass over the shard: every faulty cell's sums
            return sums + len(faulty), counts, inertia
        first = (x.__array_interface__["data"][0]
                 - x.base.__array_interface__["data"][0]) // x.base.strides[0]
        return (sums + 1.0 if first // rows in faulty else sums), counts, inertia

    monkeypatch.setattr(kmeans_steps, "kmeans_pass", off)
    raw = runner.compute(session.client, workload.collection, session.backend, None)
    assert raw["iterations"] == KFAULT["max_iter"] and 1 <= len(faulty) <= 4
    check = verify_on(session, spec, workload, raw, "fast")
    assert not check.ok and check.detail.startswith(
        f"iteration 1, shard {shard} cell {faulty[0]}: centroid "), check.detail
    full = verify_on(session, spec, workload, raw, "full")
    assert not full.ok and full.detail.startswith("iteration 1, "), full.detail
    monkeypatch.setattr(kmeans_check, "lloyd_cells_again", lambda ctx, result, verdict: None)
    assert verify_on(session, spec, workload, raw, "fast").ok  # no other fast step sees it
    workload.context.kept.shards.release()


@pytest.mark.parametrize("params", [KFAULT, KFAULT_INIT], ids=["random", "k-means||"])
def test_the_unfaulted_run_verifies_at_both_depths(in_process_client, params):
    spec, workload, raw = compute_as_runner(in_process_client, "kmeans-pipeline", **params)
    assert raw["cells"]["counts"].shape[0] == raw["iterations"] - 1
    assert params["init"] != "random" or raw["iterations"] == 6
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert check.ok, (depth, check.detail)


def test_the_fast_check_reads_an_inputs_points_again(in_process_client, points_files):
    params = {"input": points_files["npy"], "k": 3, "chunks": 700, "seed": 4}
    spec, workload, raw = compute_as_runner(in_process_client, "kmeans-pipeline", **params)
    assert verify_on(in_process_client, spec, workload, raw, "fast").ok

    def corrupt(x):
        x[3, 1] += 1.0  # the worker's kept copy (a thread of this process)

    shard = workload.context.kept.shards.futures[0]
    in_process_client.client.submit(corrupt, shard, pure=False).result()
    check = verify_on(in_process_client, spec, workload, raw, "fast")
    assert not check.ok and "differs from the input's file" in check.detail, check.detail


def test_the_fast_checks_device_branch_computes_as_on_numpy(device_kernel):
    """The fast check's worker side on CuPy (the strict stand-in): the same totals as on the
    NumPy branch, for the same points."""
    cupy = device_kernel
    d, clusters, rows = 5, 3, 3000
    centres = kmeans_steps.blob_centres(4, clusters, d)
    x = kmeans_steps.make_shard(4, 0, rows, d, "float32", "numpy", centres)
    on_device = cupy.asarray(x)
    sets = np.stack([x[:clusters].astype(np.float64), centres])
    probes = np.random.default_rng(1).standard_normal((d, 4))
    for finite_only in (False, True):
        mine = check_replay.lloyd_totals(cupy, on_device, sets, probes, "float32", finite_only)
        theirs = check_replay.lloyd_totals(np, x, sets, probes, "float32", finite_only)
        for key in ("counts", "projected", "inertia", "inertia_tol", "near"):
            for s in range(2):
                value = getattr(mine[s], key)
                assert isinstance(value, np.ndarray | float), key  # on the host
                np.testing.assert_array_equal(value, getattr(theirs[s], key))
    (sums, counts, inertia), _ = kmeans_steps.shard_pass(on_device, sets[0])
    np.testing.assert_array_equal(theirs[0].counts, counts)
    np.testing.assert_allclose(theirs[0].projected, sums @ probes, rtol=1e-9)
    first = x[:1].astype(np.float64)
    (_, _, cost), _ = kmeans_steps.shard_pass(on_device, first)
    kept, points = kmeans_init.sample_far(on_device, first, cost, 6.0, 4, 0, 0)
    candidates = np.concatenate([first, points])
    sampling = check_replay.Sampling(4, 0, candidates, (cost,), (1,), 6.0, (kept,), 256)
    found, wrong = check_replay.init_cells(cupy, on_device, sampling, [0, 3, 11], "float32")
    again, _ = check_replay.init_cells(np, x, sampling, [0, 3, 11], "float32")
    assert wrong is None and [f[0] for f in found] == [0, 3, 11]
    for mine, theirs in zip(found, again, strict=True):
        np.testing.assert_array_equal(mine[1], theirs[1])
        np.testing.assert_allclose(mine[3], theirs[3], rtol=1e-12)
    job = check_replay.Job(0, 0, rows, d, 4, clusters, "float32", "cupy", None, sets[:1], (),
                           rows, probes, np.array([0]), cell=256)
    blobs, compared, differ = check_replay.kept_data(cupy, on_device, job)
    assert compared == 0 and differ == -1 and blobs.sum() == rows


@pytest.mark.gpu
def test_on_a_gpu_both_depths_verify_and_a_mutation_fails():
    import copy

    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        spec, workload, raw = compute_as_runner(session, "kmeans-pipeline", **SMALL)
        for depth in ("fast", "full"):
            assert verify_on(session, spec, workload, raw, depth).ok
            altered = spec.mutations[0].alter(copy.deepcopy(raw))
            assert not verify_on(session, spec, workload, altered, depth).ok
