"""train-pipeline: data-parallel softmax regression on CPU workers, checked against NumPy."""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import time

import distributed
import numpy as np
import pytest
from conftest import (
    assert_one_error_line,
    compute_as_runner,
    run_cli,
    train_rows,
    verify_on,
)

import daskgpu
from daskgpu.errors import ParameterError
from daskgpu.execution import answers
from daskgpu.toolkit import backends, data_parallel, registry
from pipelines.train import check as train_check
from pipelines.train import check_replay as train_replay
from pipelines.train import pipeline as train_pipeline
from pipelines.train import shared as train_data
from pipelines.train import tasks as train_steps

SMALL = {"samples": 3000, "features": 20, "classes": 4, "steps": 6, "learning_rate": 0.8,
         "chunks": 700, "seed": 11}


def numpy_replay(params: dict) -> dict:
    """The same training, written out in plain NumPy on all rows at once (float64)."""
    d, k = params["features"], params["classes"]
    x, y = train_rows(params)
    x = np.hstack([x, np.ones((x.shape[0], 1))])
    onehot = np.eye(k)[y]
    w = np.zeros((d + 1, k))
    losses, weights = [], [w]
    for _ in range(params["steps"] + 1):
        z = x @ w
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        losses.append(float(-np.log(p[np.arange(len(y)), y]).mean()))
        if len(weights) <= params["steps"]:
            w = w - params["learning_rate"] * x.T @ (p - onehot) / len(y)
            weights.append(w)
    return {"weights": np.stack(weights), "losses": np.array(losses)}


@pytest.fixture(scope="module")
def small_run(cpu_client):
    return compute_as_runner(cpu_client, "train-pipeline", **SMALL)


def test_training_matches_a_plain_numpy_replay(small_run):
    _spec, workload, raw = small_run
    expected = numpy_replay(SMALL)
    assert raw["weights"].shape == (SMALL["steps"] + 1, SMALL["features"] + 1, SMALL["classes"])
    assert raw["weights"].dtype == np.float32
    np.testing.assert_allclose(raw["weights"], expected["weights"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(raw["losses"], expected["losses"], rtol=1e-5)
    assert raw["losses"][0] == pytest.approx(np.log(SMALL["classes"]))
    assert np.all(np.diff(raw["losses"]) < 0)  # a safe rate: the loss falls at every step
    assert len(raw["step_s"]) == SMALL["steps"]
    assert all(w >= c >= 0 for w, c in zip(raw["step_s"], raw["step_compute_s"], strict=True))
    assert workload.context.train_sizes == (700, 700, 700, 700, 200)


def test_driving_from_the_client_gives_the_same_training(cpu_client, small_run):
    _spec, workload, raw = small_run
    driven = train_pipeline.drive(workload, cpu_client.client)
    # BLAS may round a product differently from call to call (it picks kernels by alignment)
    np.testing.assert_allclose(driven["weights"], raw["weights"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(driven["losses"], raw["losses"], rtol=1e-6)
    np.testing.assert_allclose(driven["right"], raw["right"], atol=2)


def test_the_run_verifies_and_learns(cpu_client, small_run):
    spec, workload, raw = small_run
    check = verify_on(cpu_client, spec, workload, raw)
    assert check.ok, check.detail
    assert "steps recomputed" in check.detail
    tested = train_data.held_out_rows(SMALL["samples"])
    assert raw["test_right"] / tested > 0.5 and raw["test_right"] <= raw["test_best"] + 60


@pytest.mark.parametrize("depth", ["fast", "full"])
def test_a_wrong_learning_rate_or_seed_in_the_run_fails_verification(cpu_client, small_run,
                                                                     depth):
    """The check recomputes from the parameters, not from the run's own numbers."""
    spec, workload, raw = small_run
    ctx = workload.context
    for change in ({"learning_rate": SMALL["learning_rate"] * 1.1}, {"seed": SMALL["seed"] + 1}):
        workload.context = dataclasses.replace(ctx, **change)
        try:
            check = verify_on(cpu_client, spec, workload, raw, depth)
        finally:
            workload.context = ctx
        assert not check.ok, change
        # the fast check reads the kept rows: drawn from another seed, they are not the data
        said = ("differs from its seed" if depth == "fast" and "seed" in change else "weights")
        assert said in check.detail, check.detail


def test_the_baseline_gives_the_runs_value(cpu_client):
    result = daskgpu.run("train-pipeline", cpu_client, samples=2000, features=16, classes=3,
                         steps=3, seed=5)
    assert result.verified, result.verification
    spec = registry.get("train-pipeline")
    seconds, answer = spec.baseline(spec.resolve(cpu_client.backend, **result.params))
    assert seconds > 0
    assert answers.difference(result.value, answer) is None
    assert set(result.value) == {"loss", "test_loss", "losses"}
    assert result.value["losses"][0] > result.value["loss"]
    assert {"step time", "samples/s", "loss per step", "accuracy per step"} <= set(result.data)
    assert result.data["step_s"] >= result.data["step_compute_s"] > 0
    assert len(result.data["accuracies"]) == 4
    assert result.data["train_accuracy"] == result.data["accuracies"][-1] > 1 / 3


def test_cli_run_is_verified_and_reports_each_step():
    proc = run_cli("run", "train-pipeline", "--cpu", "--workers", "2", "--samples", "20000",
                   "--steps", "5", "--seed", "3", "--no-dashboard", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"], doc["verification"]
    value, data = doc["value"], doc["data"]
    assert len(value["losses"]) == len(data["accuracies"]) == 6
    assert value["loss"] == value["losses"][-1] < value["losses"][0]
    assert 0.1 < data["test_accuracy"] <= data["best_accuracy"] + 0.05
    assert data["shape"] == [20000, 784] and doc["params"]["classes"] == 10
    assert data["samples/s"] > 0 and data["step_s"] >= data["step_communication_s"] >= 0
    assert doc["timings"]["compute_s"] > 0


@pytest.mark.parametrize(("args", "fragment"), [
    (["--classes", "1"], "--classes"),
    (["--learning-rate", "-1"], "--learning-rate"),
    (["--samples", "0"], "--samples"),
    (["--samples", "100000000", "--chunks", "10"], "shards"),
])
def test_cli_hostile_option_is_one_error_line(args, fragment):
    started = time.perf_counter()
    proc = run_cli("run", "train-pipeline", *args, "--cpu", "--workers", "1", timeout=60)
    assert_one_error_line(proc, started, fragment)


@pytest.mark.parametrize(("params", "fragment"), [
    ({"learning_rate": "nan"}, "--learning-rate"),
    ({"learning_rate": 0}, "positive"),
    ({"steps": 0}, "--steps"),
    ({"classes": 2**31}, "weights"),
    ({"features": 10**8}, "weights"),
    ({"chunks": "100,5"}, "whole rows"),
    ({"chunks": "100,784,3"}, "whole rows"),
    ({"dtype": "float16"}, "--dtype"),
])
def test_hostile_parameters_are_refused_before_any_cluster(params, fragment):
    with pytest.raises(ParameterError, match=fragment) as err:
        registry.get("train-pipeline").resolve(**params)
    assert "\n" not in str(err.value)


def test_defaults_follow_the_backend():
    spec = registry.get("train-pipeline")
    assert spec.resolve()["samples"] == train_pipeline.CPU_DEFAULT_SAMPLES
    gpu = backends.Backend("gpu", "cupy", "cudf", (), workers=4, threads=4)
    assert spec.resolve(gpu)["samples"] == train_pipeline.GPU_DEFAULT_SAMPLES
    assert data_parallel.rows_per_shard("auto", 10, gpu) == 3
    with pytest.raises(ParameterError, match="TiB"):
        spec.resolve(samples=2**62)


def test_data_parallel_tree_reduce_and_step(cpu_client):
    client = cpu_client.client
    futures = [client.scatter(((np.full(3, float(i)), i), 0.1 * i)) for i in range(5)]
    total = data_parallel.tree_reduce(client, futures, data_parallel.add_pairs).result()
    np.testing.assert_array_equal(total[0][0], np.full(3, 10.0))
    assert total[0][1] == 10 and total[1] == pytest.approx(0.4)
    shards = data_parallel.place(client, np.arange, [(4,), (6,), (8,)])
    distributed.wait(shards)
    homes = client.who_has(shards)
    assert len({w for held in homes.values() for w in held}) == 2  # round-robin on 2 workers
    summed, spent = data_parallel.step(client, shards, _sum_task, data_parallel.add_pairs, 2)
    assert summed == (2 * (6 + 15 + 28),) and spent.wall_s >= spent.compute_s >= 0
    with pytest.raises(ValueError):
        data_parallel.tree_reduce(client, [], data_parallel.add_pairs)


def _sum_task(shard, factor):
    return (int(shard.sum()) * factor,), 0.0


def test_shard_keys_pickle_as_keys_only(cpu_client):
    import pickle

    future = cpu_client.client.scatter(np.arange(3))
    keys = data_parallel.ShardKeys.holding([future])
    copied = pickle.loads(pickle.dumps(keys))
    assert copied.keys == (future.key,) and copied.futures == []
    keys.release()
    assert keys.futures == []


# ------------------------------------------------------------- the GPU branches, on NumPy


def test_gpu_branches_draw_train_and_check_alike(cupy_stand_in):
    """Drawn, trained and checked on CuPy (the strict stand-in): as the NumPy branch computes
    on the same shard, and the check draws the shard as the run did."""
    d, k, rows = 12, 3, 500
    teacher = train_steps.teacher_weights(4, d, k)
    shard = train_steps.make_shard(4, train_data.TRAIN, 1, rows, d, k, "float32", "cupy",
                                   teacher)
    assert isinstance(shard["x"], cupy_stand_in.ndarray)
    host = {key: value.get() if isinstance(value, cupy_stand_in.ndarray) else value
            for key, value in shard.items()}
    on_numpy = train_steps.make_shard(4, train_data.TRAIN, 1, rows, d, k, "float32", "numpy",
                                      teacher)
    assert not np.array_equal(host["x"], on_numpy["x"])  # another generator, seeded apart
    w = np.zeros((d + 1, k), np.float32)
    (gradient, loss, right, read, _cells), _ = train_steps.shard_pass(shard, w, True, "cupy")
    (want_gradient, want_loss, want_right, want_read, _), _ = train_steps.shard_pass(
        host, w, True, "numpy")
    assert (read, right) == (want_read, want_right) and read == rows
    assert loss == pytest.approx(want_loss, rel=1e-6)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-5, atol=1e-5)
    weights = np.stack([w, (w - gradient / rows).astype(np.float32)]).reshape(2, -1)
    model = train_replay.Model(d, k, None, "float32", train_data.cell_rows(d, 4, "cupy"))
    job = train_replay.Job(model, "cupy", 4, weights[-1], redraw=(train_data.TRAIN, 1),
                           rows=rows, everything=weights)
    totals = train_replay.replayed(job)
    seeds = cupy_stand_in.seeds
    assert len(seeds) == 2 and seeds[0] == seeds[1]  # the run and the check drew shard 1 alike
    assert totals["passes"][0][train_replay.LOSS] == pytest.approx(loss, rel=1e-6)
    np.testing.assert_allclose(totals["gradients"][0][0], gradient.ravel(), rtol=1e-4,
                               atol=1e-4)
    assert totals["sums"][2] == rows and totals["passes"][0][train_replay.RIGHT] == right


def test_the_pipeline_modules_import_no_gpu_library():
    """The array library is imported by name on the workers (``library``), never here."""
    import ast

    for name in ("pipelines.train.pipeline", "pipelines.train.tasks", "pipelines.train.check",
                 "pipelines.train.check_replay", "pipelines.train.inputs",
                 "daskgpu.toolkit.data_parallel"):
        tree = ast.parse(open(importlib.util.find_spec(name).origin).read())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom))
                    for alias in (node.names if isinstance(node, ast.Import)
                                  else [ast.alias(node.module or "")])}
        assert not imported & {"cupy", "cudf", "cupyx"}, (name, imported)


def test_the_accuracy_bounds_can_fail():
    ctx = train_data.TrainContext(samples=10_000, features=9)
    bounds = train_check.Bounds(tested=1000, floor=300.0, ceiling=800.0, best=750.0)
    assert train_check.bounds_problem(ctx, 500, bounds) is None
    assert "teacher's best" in train_check.bounds_problem(ctx, 801, bounds)
    assert "nothing was learned" in train_check.bounds_problem(ctx, 299, bounds)
    few = train_data.TrainContext(samples=99, features=9)  # under 10 rows per feature
    assert train_check.bounds_problem(few, 299, bounds) is None
    assert 1.9 < train_check.safe_rate(10**6, 784) < 2.0
    assert train_check.safe_rate(100, 784) < 0.2


def test_the_runner_drives_an_iterative_workload_and_times_it_as_the_compute(cpu_client):
    import dask

    from daskgpu.execution import runner
    from daskgpu.toolkit.workload import Verification, Workload

    def never(_):
        raise AssertionError("the collection was computed instead of driven")

    def drive(workload, client):
        # the run's client, waiting as the runner waits (lost workers end it in one line)
        assert client.id == cpu_client.client.id
        time.sleep(0.3)
        return client.results([client.submit(sum, [40, 2])])[0]

    spec = registry.Pipeline(
        "driven-test", "s", (),
        lambda resolved: Workload(collection=dask.delayed(never)(1), drive=drive, elements=1,
                                  nbytes=8),
        lambda workload, raw: Verification(raw == 42, f"got {raw}"))
    result = runner.run(spec, cpu_client)
    assert result.value == 42 and result.verified
    assert result.timings["compute_s"] >= 0.3


# ------------------------------------------------------------- --input/--labels, --batch-size


def _teacher_data(rows: int, d: int, k: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, d))
    y = (x @ rng.standard_normal((d, k)) + rng.gumbel(size=(rows, k))).argmax(axis=1)
    return x, y


def _held_out(seed: int, rows: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(train_data.HELD_OUT,)))
    return rng.choice(rows, size=train_data.input_held_out(rows), replace=False)


def _descent(x, y, k, steps, rate, batches=None):
    """Gradient descent in float64; ``batches[t]`` lists (rows, scale) per shard, or all rows."""
    x1 = np.hstack([x, np.ones((len(x), 1))])
    w, trajectory = np.zeros((x1.shape[1], k)), []
    for t in range(steps):
        trajectory.append(w)
        parts = batches[t] if batches else [(np.arange(len(x)), 1.0)]
        g = np.zeros_like(w)
        for rows, scale in parts:
            z = x1[rows] @ w
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(len(rows)), y[rows]] -= 1
            g += scale * x1[rows].T @ p
        w = w - rate * g / len(x)
    return np.stack([*trajectory, w])


@pytest.fixture(scope="module")
def input_files(tmp_path_factory):
    import zarr

    base = tmp_path_factory.mktemp("train-input")
    x, y = _teacher_data(2500, 12, 3, 1)
    np.save(base / "x.npy", x)
    np.save(base / "y.npy", y.astype(np.int16))
    z = zarr.create_array(str(base / "x.zarr"), shape=x.shape, dtype="float32",
                          chunks=(700, 12))
    z[:] = x.astype(np.float32)
    return {"x": x, "y": y, "npy": str(base / "x.npy"), "zarr": str(base / "x.zarr"),
            "labels": str(base / "y.npy"), "base": base}


@pytest.mark.parametrize(("features", "batch"), [("npy", None), ("zarr", 400)])
def test_training_on_an_input_matches_numpy_and_verifies(cpu_client, input_files, features,
                                                         batch):
    params = {"input": input_files[features], "labels": input_files["labels"], "classes": 3,
              "steps": 4, "learning_rate": 0.7, "chunks": 600, "seed": 9, "batch_size": batch}
    spec, workload, raw = compute_as_runner(cpu_client, "train-pipeline", **params)
    ctx = workload.context
    test = _held_out(9, 2500)
    keep = np.setdiff1d(np.arange(2500), test)
    x = input_files["x"].astype(np.float32 if features == "zarr" else np.float64)[keep]
    y = input_files["y"][keep]
    assert ctx.samples == len(keep) == 2250 and sum(ctx.test_sizes) == 250
    assert ctx.dtype == ("float32" if features == "zarr" else "float64")
    batches = None
    if batch is not None:  # each shard's rows of each step, drawn as documented
        starts = np.cumsum((0, *ctx.train_sizes))
        batches = []
        for t in range(4):
            step = []
            for s, n in enumerate(ctx.train_sizes):
                rng = np.random.default_rng(np.random.SeedSequence(
                    9, spawn_key=(train_data.BATCH, t, s)))
                b = max(1, min(n, int(np.floor(batch * n / 2250 + 0.5))))
                step.append((starts[s] + np.sort(rng.choice(n, b, replace=False)), n / b))
            batches.append(step)
        assert raw["rows"].tolist() == [sum(len(r) for r, _ in batches[0])] * 4 + [2250]
    expected = _descent(x.astype(np.float64), y, 3, 4, 0.7, batches)
    np.testing.assert_allclose(raw["weights"], expected, rtol=1e-4, atol=1e-5)
    for depth in ("fast", "full"):
        check = verify_on(cpu_client, spec, workload, raw, depth)
        assert check.ok, check.detail
        assert "no teacher" in check.detail
        assert ("mini-batches" in check.detail) == (batch is not None)
        # the same replay fails when it reads other batches or another split
        workload.context = dataclasses.replace(ctx, seed=10)
        try:
            assert not verify_on(cpu_client, spec, workload, raw, depth).ok
        finally:
            workload.context = ctx


def test_mini_batches_on_teacher_data_verify_and_mutations_fail(cpu_client):
    params = {**SMALL, "batch_size": 300, "steps": 5}
    spec, workload, raw = compute_as_runner(cpu_client, "train-pipeline", **params)
    full = compute_as_runner(cpu_client, "train-pipeline", **SMALL)[2]
    assert not np.allclose(raw["weights"][2], full["weights"][2])  # other rows, other steps
    assert raw["rows"][0] == 300 and raw["rows"][-1] == SMALL["samples"]
    check = verify_on(cpu_client, spec, workload, raw)
    assert check.ok, check.detail
    assert "mini-batches of 300 rows" in check.detail and "may rise" in check.detail
    fast = verify_on(cpu_client, spec, workload, raw, "fast")
    assert fast.ok and "mini-batches of 300 rows" in fast.detail, fast.detail
    for mutation in spec.mutations:
        for depth in ("fast", "full"):
            altered = mutation.alter(dict(raw))
            assert not verify_on(cpu_client, spec, workload, altered, depth).ok, mutation
    miscounted = {**raw, "rows": raw["rows"] + np.r_[1, np.zeros(5, int)]}
    assert "rows read at step 0" in verify_on(cpu_client, spec, workload, miscounted).detail
    ctx = workload.context  # the check draws the batches again: a wrong size fails
    workload.context = dataclasses.replace(ctx, batch=400)
    try:
        assert not verify_on(cpu_client, spec, workload, raw).ok
    finally:
        workload.context = ctx


def test_the_baseline_trains_on_the_same_batches_and_input(cpu_client, input_files):
    result = daskgpu.run("train-pipeline", cpu_client, input=input_files["npy"],
                         labels=input_files["labels"], classes=3, steps=3, batch_size=500,
                         seed=5)
    assert result.verified, result.verification
    assert result.params["samples"] is None and result.params["dtype"] == "float64"
    spec = registry.get("train-pipeline")
    _seconds, answer = spec.baseline(spec.resolve(cpu_client.backend, **result.params))
    assert answers.difference(result.value, answer) is None
    assert "best_accuracy" not in result.data and result.data["samples/s"] > 0


def test_training_rows_of_an_input_shard_are_the_rows_not_held_out():
    from pipelines.train import inputs as train_input

    test = np.sort(_held_out(2, 1000))
    ranges = train_input.file_ranges(1000, test, (300, 300, 300))
    kept = np.setdiff1d(np.arange(1000), test)
    assert ranges[0][0] == 0 and ranges[-1][1] == 1000
    assert sum(len(t) for *_, t in ranges) == 100
    for s, (a, b, held) in enumerate(ranges):
        mine = np.setdiff1d(np.arange(a, b), a + held)
        np.testing.assert_array_equal(mine, kept[300 * s:300 * (s + 1)])
        np.testing.assert_array_equal(
            train_replay.training_rows(300 * s, 300, test), mine)


@pytest.fixture(scope="module")
def hostile_train_files(input_files):
    base, files = input_files["base"], {}
    for name, array in {
        "short": np.arange(10), "negative": np.r_[-1, np.zeros(2499, int)],
        "floats": np.zeros(2500), "wide": np.zeros((2500, 2), int),
        "cube": np.zeros((10, 3, 2)), "ints": np.zeros((2500, 3), int),
        "one-row": np.zeros((1, 3)), "one-label": np.zeros(1, int),
        "flat": np.zeros(2500), "complex": np.zeros((5, 2), complex),
    }.items():
        np.save(base / f"{name}.npy", array)
        files[name] = str(base / f"{name}.npy")
    return {**input_files, **files}


@pytest.mark.parametrize(("given", "fragment"), [
    ({"input": "npy", "labels": "short"}, "10 labels for the 2500 rows"),
    ({"input": "npy", "labels": "labels", "classes": 2}, "labels from 0 to 2"),
    ({"input": "npy", "labels": "negative"}, "labels from -1"),
    ({"input": "npy", "labels": "floats"}, "integer class labels"),
    ({"input": "npy", "labels": "wide"}, "one label per row"),
    ({"input": "cube", "labels": "labels"}, "a matrix of samples x features"),
    ({"input": "flat", "labels": "labels"}, "a matrix of samples x features"),
    ({"input": "ints", "labels": "labels"}, "float32 or float64"),
    ({"input": "complex", "labels": "labels"}, "complex128"),
    ({"input": "one-row", "labels": "one-label"}, "at least 2"),
    ({"labels": "labels"}, "--labels without --input"),
    ({"input": "npy"}, "--input without --labels"),
    ({"input": "npy", "labels": "labels", "samples": 100}, "--samples: applies to generated data"),
    ({"input": "npy", "labels": "labels", "dtype": "float64"}, None),  # the input's own: fine
    ({"input": "zarr", "labels": "labels", "dtype": "float64"}, "the input holds float32"),
    ({"input": "npy", "labels": "labels", "batch_size": 2251}, "over the 2250 training rows"),
    ({"batch_size": 3001, "samples": 3000}, "--batch-size 3001"),
])
def test_hostile_inputs_are_one_line_before_any_cluster(hostile_train_files, given, fragment):
    from daskgpu.errors import DaskGPUError

    params = {k: hostile_train_files.get(v, v) if k in ("input", "labels") else v
              for k, v in given.items()}
    spec = registry.get("train-pipeline")
    if fragment is None:
        assert spec.resolve(**params)["dtype"] == "float64"
        return
    with pytest.raises(DaskGPUError) as err:
        spec.resolve(**params)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_cli_refuses_labels_out_of_range_in_one_line(input_files, tmp_path):
    started = time.perf_counter()
    proc = run_cli("run", "train-pipeline", "--input", input_files["npy"], "--labels",
                   input_files["labels"], "--classes", "2", "--cpu", "--workers", "1",
                   timeout=60)
    assert_one_error_line(proc, started, "--labels", "--classes 3")


def test_a_rising_loss_on_an_input_fails_where_the_rate_is_safe():
    source = train_data.InputFiles("x.npy", "npy", "y.npy", "npy", 110)
    ctx = train_data.TrainContext(samples=100, features=2, learning_rate=1.0, source=source)
    gram, allowed = 100 * np.eye(3), np.zeros(3)
    assert train_check.input_safe_rate(gram, 100) == pytest.approx(4.0)
    losses = np.array([1.0, 0.9, 0.95])
    assert "loss rose" in train_check.descent_problem(ctx, losses, allowed, gram)
    faster = dataclasses.replace(ctx, learning_rate=5.0)
    assert train_check.descent_problem(faster, losses, allowed, gram) is None
    batched = dataclasses.replace(ctx, batch=10)
    assert train_check.descent_problem(batched, losses, allowed, gram) is None
    trace = np.array([300.0])  # the trace: a safe bound
    assert train_check.input_safe_rate(trace, 100) == pytest.approx(4 / 3)


@pytest.mark.parametrize("gradient", [True, False])
def test_a_cpu_pass_in_blocks_equals_one_over_the_whole_shard(monkeypatch, gradient):
    """Blocks of 7 rows (the last one short) give the whole shard's sums; ties go to the first
    class, as argmax's do, so zero weights count the rows labelled 0 as right."""
    d, k, rows = 11, 4, 100
    teacher = train_steps.teacher_weights(3, d, k)
    shard = train_steps.make_shard(3, train_data.TRAIN, 0, rows, d, k, "float32", "numpy",
                                      teacher)
    monkeypatch.setattr(train_steps, "cell_rows", lambda *_: 7)
    x, y = shard["x"], shard["y"]
    for w in (np.zeros((d + 1, k), np.float32), (teacher * 0.5).astype(np.float32)):
        blocked = train_steps.shard_pass(shard, w, gradient, "numpy")[0][:3]
        whole = train_steps._pass_in_blocks(np, x, y, w, gradient, rows)  # one block
        assert blocked[2] == whole[2]
        assert blocked[1] == pytest.approx(whole[1], rel=1e-6)
        if gradient:
            np.testing.assert_allclose(blocked[0], whole[0], rtol=1e-5, atol=1e-5)
        else:
            assert blocked[0] == whole[0] == 0.0
    assert train_steps._pass_in_blocks(np, x, y, np.zeros((d + 1, k), np.float32), False,
                                       7)[2] == int((y == 0).sum())


# ------------------------------------------------------------- the fast check


def test_the_fast_check_verifies_the_run_and_says_what_it_promises(cpu_client, small_run):
    spec, workload, raw = small_run
    check = verify_on(cpu_client, spec, workload, raw, "fast")
    assert check.ok and check.depth == "fast", check.detail
    for words in ("recomputed on all 3000 rows kept on the workers", "4 random probes",
                  "step cells", "in float64",
                  "drawn again from their seeds and equal", "teacher's best recomputed"):
        assert words in check.detail, (words, check.detail)
    assert "\n" not in check.detail


def test_the_run_reports_every_cell_of_every_pass(small_run):
    """The certificates: a pass's cells add up to its loss, right answers and gradient."""
    _spec, workload, raw = small_run
    cell = train_data.cell_rows(SMALL["features"], 4, "numpy")
    cells = sum(train_data.cells_of(n, cell) for n in workload.context.train_sizes)
    assert len(raw["cells"]) == SMALL["steps"] + 1
    r, s = train_steps.gradient_probes(SMALL["seed"], SMALL["features"],
                                       SMALL["classes"])[:, :SMALL["features"] + 1], \
        train_steps.gradient_probes(SMALL["seed"], SMALL["features"],
                                    SMALL["classes"])[:, SMALL["features"] + 1:]
    for t, sums in enumerate(raw["cells"]):
        assert sums["loss"].shape == sums["right"].shape == (cells,)
        assert sums["right"].sum() == raw["right"][t]
        assert sums["loss"].sum() / SMALL["samples"] == pytest.approx(raw["losses"][t],
                                                                       rel=1e-12)
        if t < SMALL["steps"]:
            moved = ((raw["weights"][t] - raw["weights"][t + 1]).astype(np.float64)
                     * SMALL["samples"] / SMALL["learning_rate"])
            along = np.einsum("mj,jk,mk->m", r, moved, s)
            np.testing.assert_allclose(sums["probe"].sum(axis=0), along, rtol=1e-3)
    assert raw["test_cells"]["right"].sum() == raw["test_right"]


FAULT_PARAMS = {"samples": 4000, "features": 16, "classes": 4, "steps": 4, "chunks": 1000,
                "learning_rate": 0.8, "seed": 5}


def _faulty_pass(alter, index: int = 0):
    """``shard_pass`` with ``alter(shard, partial)`` applied on training shard ``index``."""
    original = train_steps.shard_pass

    def faulty(shard, weights, gradient, library, batch=None, probes=None, report=None):
        training = shard["y"].shape[0] == FAULT_PARAMS["chunks"]
        if training and shard["index"] == index:
            return alter(original, shard, weights, gradient, library, batch, probes, report)
        return original(shard, weights, gradient, library, batch, probes, report)

    return faulty


def _gradient_off(original, shard, *args):
    """Each cell's gradient product off by 0.2 % (its sum, its probes and, where the cell
    reports it, its whole gradient alike)."""
    (total, loss, right, rows, cells), seconds = original(shard, *args)
    if not isinstance(total, float):
        total = total * 1.002
        cells = [(i, {**sums, **{key: sums[key] * 1.002 for key in ("probe", "gradient")
                                 if key in sums}}) for i, sums in cells]
    return (total, loss, right, rows, cells), seconds


def _rows_skipped(original, shard, *args):
    """The shard's last 100 rows left out of every pass (its row count still reported)."""
    kept = {**shard, "x": shard["x"][:-100], "y": shard["y"][:-100]}
    (total, loss, right, rows, cells), seconds = original(kept, *args)
    return (total, loss, right, rows + 100, cells), seconds


def _labels_misplaced(original, shard, *args):
    """The shard's labels read one row off (a misplaced piece)."""
    return original({**shard, "y": np.roll(shard["y"], 1)}, *args)


@pytest.mark.parametrize("alter", [_gradient_off, _rows_skipped, _labels_misplaced],
                         ids=["gradient off by 0.2 %", "rows skipped", "labels misplaced"])
def test_a_fault_in_a_quarter_of_the_shards_fails_both_depths(in_process_client, monkeypatch,
                                                              alter):
    """Faults in the computing function itself, on one of the four training shards."""
    monkeypatch.setattr(train_steps, "shard_pass", _faulty_pass(alter))
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline",
                                            **FAULT_PARAMS)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, (depth, check.detail)


# One training shard of the four: a random one (seeded, neither the first nor the last), and
# the last. The fast check recomputes one seeded step's gradient whole: a fault in every step
# shows there; full recomputes every step.
ONE_SHARD = {"random": int(np.random.default_rng(12).integers(1, 3)), "last": 3}
ENTRY = (9, 3)  # a feature's weight of a class: its gradient well above rounding


def _entry_off(original, shard, weights, gradient, library, batch=None, probes=None,
               report=None):
    """One gradient entry off by 0.2 %, each cell's probes (and the gradients of the cells
    reporting theirs) computed from the faulty gradient: the run's numbers agree."""
    (total, loss, right, rows, cells), seconds = original(shard, weights, gradient, library,
                                                          batch, probes, report)
    if not gradient:
        return (total, loss, right, rows, cells), seconds
    (j, k), d = ENTRY, shard["x"].shape[1]
    cell = train_data.cell_rows(d, shard["x"].dtype.itemsize, library)
    entries = np.array([train_steps._pass_in_blocks(
        np, shard["x"][a:a + cell], shard["y"][a:a + cell], weights, True, cell)[0][j, k]
        for a in range(0, shard["y"].shape[0], cell)])
    index, sums = cells[0]
    probe = sums["probe"] + 0.002 * np.outer(entries, probes[:, j] * probes[:, d + 1 + k])
    whole = sums["gradient"].copy()  # the reported cells' gradients, flat (features + 1, k)
    whole[:, j * weights.shape[1] + k] += 0.002 * entries[sums["reported"]]
    total = total.copy()
    total[j, k] *= 1.002
    return (total, loss, right, rows,
            [(index, {**sums, "probe": probe, "gradient": whole})]), seconds


@pytest.mark.parametrize("where", sorted(ONE_SHARD))
def test_a_gradient_fault_consistent_with_the_probes_fails_both_depths(
        in_process_client, monkeypatch, where):
    """The issue's fault: 0.2 % on one gradient entry of one shard, at every step, with the
    probes the cells report computed from it. It passed the fast check that compared the
    run's numbers with each other; the step recomputed whole shows it."""
    monkeypatch.setattr(train_steps, "shard_pass", _faulty_pass(_entry_off, ONE_SHARD[where]))
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline",
                                            **FAULT_PARAMS)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, (depth, check.detail)
        entry = (rf"shard {ONE_SHARD[where]} cell 0: gradient\[{ENTRY[0]}, {ENTRY[1]}\]: \S+ "
                 r"reported, \S+ recomputed in float64" if depth == "fast" else
                 rf"step \d+: weights\[{ENTRY[0]}, {ENTRY[1]}\]: \S+ reported, gradient "
                 "descent on all 4000 rows gives")
        assert re.search(entry, check.detail), (depth, check.detail)


def test_a_fault_in_an_early_step_fails_both_depths(in_process_client, monkeypatch):
    """Every shard's gradient and its probes off by 0.2 % in step 2 of 4 only (a quarter of
    the steps' cells: the fast sample holds some of them). Mini-batches: a pass knows its
    step."""
    original = train_steps.shard_pass

    def faulty(shard, weights, gradient, library, batch=None, probes=None, report=None):
        found = original(shard, weights, gradient, library, batch, probes, report)
        return _gradient_off(lambda *_: found, shard) if batch and batch[1] == 1 else found

    monkeypatch.setattr(train_steps, "shard_pass", faulty)
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline",
                                            **FAULT_PARAMS, batch_size=2000)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and "step 2" in check.detail, (depth, check.detail)


def test_the_unfaulted_run_verifies_at_both_depths(in_process_client):
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline",
                                            **FAULT_PARAMS)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert check.ok, (depth, check.detail)


def test_the_fast_check_reads_an_inputs_rows_again(in_process_client, input_files):
    """A kept row that is not the file's row fails the fast check (its seeded cells)."""
    params = {"input": input_files["npy"], "labels": input_files["labels"], "classes": 3,
              "steps": 3, "chunks": 600, "seed": 9}
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline", **params)
    assert verify_on(in_process_client, spec, workload, raw, "fast").ok

    def corrupt(shard):
        shard["x"][5, 0] += 1.0  # the worker's kept copy (a thread of this process)

    shard = workload.context.shards.futures[0]
    in_process_client.client.submit(corrupt, shard, pure=False).result()
    check = verify_on(in_process_client, spec, workload, raw, "fast")
    assert not check.ok and "differs from the input's files" in check.detail, check.detail


def test_the_fast_checks_device_branch_computes_as_on_numpy(cupy_stand_in):
    """The fast check's worker side on CuPy (the strict stand-in), on a kept shard in device
    memory: the same sums as the NumPy branch on the same shard."""
    d, k, rows, seed = 12, 3, 900, 4
    teacher = train_steps.teacher_weights(seed, d, k)
    shard = train_steps.make_shard(seed, train_data.TRAIN, 0, rows, d, k, "float32", "numpy",
                                   teacher)
    on_device = {key: cupy_stand_in.asarray(value) if isinstance(value, np.ndarray) else value
                 for key, value in shard.items()}
    w = np.stack([np.zeros((d + 1, k), np.float32),
                  (teacher * 0.2).astype(np.float32)]).reshape(2, -1)
    job = train_replay.Job(train_replay.Model(d, k, None, "float32", 256), "numpy", seed, w[1],
                           sampled=((1, 2, None),), weights={1: w[1]},
                           redraw=(train_data.TRAIN, 0))
    mine = train_replay.kept_training(on_device, dataclasses.replace(job, library="cupy"))
    theirs = train_replay.kept_training(shard, job)
    np.testing.assert_allclose(mine["cells"], theirs["cells"], rtol=1e-12)  # the whole pass
    # a sampled cell: its table, probes and their allowance, its gradient and its allowance
    for a, b in zip(mine["sampled"][0][2:], theirs["sampled"][0][2:], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert mine["data"][0] == 0 < theirs["data"][0]  # CuPy's generator is not redrawn
    tested = train_replay.kept_test(on_device, dataclasses.replace(job, library="cupy"))
    again = train_replay.kept_test(shard, job)
    assert tested["best"][0] == pytest.approx(shard["best"], rel=1e-12)
    np.testing.assert_allclose(tested["cells"], again["cells"], rtol=1e-12)


@pytest.mark.gpu
def test_on_a_gpu_both_depths_verify_and_a_mutation_fails():
    import copy

    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        spec, workload, raw = compute_as_runner(session, "train-pipeline", **SMALL)
        for depth in ("fast", "full"):
            assert verify_on(session, spec, workload, raw, depth).ok
            altered = spec.mutations[0].alter(copy.deepcopy(raw))
            assert not verify_on(session, spec, workload, altered, depth).ok
