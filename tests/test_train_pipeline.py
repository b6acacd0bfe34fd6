"""train-pipeline: data-parallel softmax regression on CPU workers, checked against NumPy."""

from __future__ import annotations

import importlib
import json
import time

import distributed
import numpy as np
import pytest
from conftest import (
    assert_one_error_line,
    compute_as_runner,
    numpy_as_array_library,
    run_cli,
    verify_on,
)

import daskgpu
from daskgpu import answers, backends, data_parallel, registry
from daskgpu.errors import ParameterError
from pipelines import train_check, train_data, train_pipeline, train_steps

SMALL = {"samples": 3000, "features": 20, "classes": 4, "steps": 6, "learning_rate": 0.8,
         "chunks": 700, "seed": 11}


def numpy_replay(params: dict) -> dict:
    """The same training, written out in plain NumPy on all rows at once (float64)."""
    d, k = params["features"], params["classes"]
    teacher = train_steps.teacher_weights(params["seed"], d, k)
    sizes = train_data.shard_sizes(params["samples"], params["chunks"])
    shards = [train_steps.make_shard(params["seed"], train_data.TRAIN, i, rows, d, k,
                                        "float32", "numpy", teacher)
              for i, rows in enumerate(sizes)]
    x = np.concatenate([s["x"] for s in shards]).astype(np.float64)
    x = np.hstack([x, np.ones((x.shape[0], 1))])
    y = np.concatenate([s["y"] for s in shards])
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
    assert workload.context["train_sizes"] == (700, 700, 700, 700, 200)


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


def test_a_wrong_learning_rate_or_seed_in_the_run_fails_verification(cpu_client, small_run):
    """The check recomputes from the parameters, not from the run's own numbers."""
    spec, workload, raw = small_run
    for change in ({"learning_rate": SMALL["learning_rate"] * 1.1}, {"seed": SMALL["seed"] + 1}):
        workload.context.update(change)
        try:
            check = verify_on(cpu_client, spec, workload, raw)
        finally:
            workload.context.update({k: SMALL[k] for k in change})
        assert not check.ok, change
        assert "weights" in check.detail, check.detail


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


@pytest.fixture
def stand_in_library(monkeypatch):
    """NumPy as the array library, with CuPy's integer-seeded generator (conftest); arrays
    come back through ``to_host``."""
    return numpy_as_array_library(monkeypatch, (
        "asarray", "empty", "zeros", "argmax", "log", "exp", "arange", "sqrt", "abs", "sort",
        "take_along_axis", "bincount", "full_like", "moveaxis", "inf"))


def test_gpu_branches_draw_train_and_check_alike(stand_in_library):
    d, k, rows = 12, 3, 500
    teacher = train_steps.teacher_weights(4, d, k)
    shard = train_steps.make_shard(4, train_data.TRAIN, 1, rows, d, k, "float32",
                                      "xp_stand_in", teacher)
    on_numpy = train_steps.make_shard(4, train_data.TRAIN, 1, rows, d, k, "float32",
                                         "numpy", teacher)
    assert not np.array_equal(shard["x"], on_numpy["x"])  # another generator, seeded apart
    w = np.zeros((d + 1, k), np.float32)
    (gradient, loss, right), _ = train_steps.shard_pass(shard, w, True, "xp_stand_in")
    weights = np.stack([w, (w - gradient / rows).astype(np.float32)])
    totals = train_check.shard_totals(4, train_data.TRAIN, 1, rows, "float32", "xp_stand_in",
                                      weights, [0])
    seeds = stand_in_library.seeds
    assert len(seeds) == 2 and seeds[0] == seeds[1]  # the run and the check drew shard 1 alike
    assert totals["loss"][0] == pytest.approx(loss, rel=1e-6)
    np.testing.assert_allclose(totals["gradient"][0], gradient, rtol=1e-4, atol=1e-4)
    assert totals["labels"].sum() == rows and totals["right"][0] == right


def test_the_pipeline_modules_import_no_gpu_library():
    """The array library is imported by name on the workers (``library``), never here."""
    import ast

    for name in ("pipelines.train_pipeline", "pipelines.train_steps", "pipelines.train_check",
                 "daskgpu.data_parallel"):
        tree = ast.parse(open(importlib.util.find_spec(name).origin).read())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom))
                    for alias in (node.names if isinstance(node, ast.Import)
                                  else [ast.alias(node.module or "")])}
        assert not imported & {"cupy", "cudf", "cupyx"}, (name, imported)


def test_the_accuracy_bounds_can_fail():
    ctx = {"samples": 10_000, "features": 9}
    totals = {"test_rows": 1000, "floor": 300.0, "ceiling": 800.0, "test": {"best": 750.0}}
    assert train_check._check_bounds(ctx, {"test_right": 500}, totals, []) is None
    assert "teacher's best" in train_check._check_bounds(ctx, {"test_right": 801}, totals, [])
    assert "nothing was learned" in train_check._check_bounds(ctx, {"test_right": 299},
                                                              totals, [])
    few = {"samples": 99, "features": 9}  # under 10 rows per feature: learning not required
    assert train_check._check_bounds(few, {"test_right": 299}, totals, []) is None
    assert 1.9 < train_check.safe_rate(10**6, 784) < 2.0
    assert train_check.safe_rate(100, 784) < 0.2


def test_the_runner_drives_an_iterative_workload_and_times_it_as_the_compute(cpu_client):
    import dask

    from daskgpu import runner
    from daskgpu.workload import Verification, Workload

    def never(_):
        raise AssertionError("the collection was computed instead of driven")

    def drive(workload, client):
        assert client is cpu_client.client
        time.sleep(0.3)
        return client.submit(sum, [40, 2]).result()

    spec = registry.Pipeline(
        "driven-test", "s", (),
        lambda resolved: Workload(collection=dask.delayed(never)(1), drive=drive, elements=1,
                                  nbytes=8),
        lambda workload, raw: Verification(raw == 42, f"got {raw}"))
    result = runner.run(spec, cpu_client)
    assert result.value == 42 and result.verified
    assert result.timings["compute_s"] >= 0.3
