"""train-pipeline's ``--optimizer adam`` and ``--epochs``: against an independent NumPy Adam,
scikit-learn's own Adam, the documented epoch ordering, and faults both depths must catch."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
from conftest import assert_one_error_line, compute_as_runner, run_cli, verify_on
from test_train_pipeline import ENTRY, FAULT_PARAMS, ONE_SHARD, _entry_off, _faulty_pass

import daskgpu
from daskgpu.errors import ParameterError
from daskgpu.execution import answers
from daskgpu.testing import check_pipeline
from daskgpu.toolkit import numeric, registry
from pipelines.train import shared as train_data
from pipelines.train import tasks as train_steps

# Three shards (500, 500, 200 rows); 3 epochs of ceil(1200 / 250) = 5 steps (the last of 200).
ADAM = {"samples": 1200, "features": 8, "classes": 3, "chunks": 500, "seed": 21,
        "dtype": "float64", "optimizer": "adam", "learning_rate": 0.05, "epochs": 3,
        "batch_size": 250}


def _rows(params: dict) -> tuple[np.ndarray, np.ndarray]:
    """The generated training rows, shard after shard, drawn as the run's shards draw them."""
    d, k, seed = params["features"], params["classes"], params["seed"]
    teacher = train_steps.teacher_weights(seed, d, k)
    shards = [train_steps.make_shard(seed, train_data.TRAIN, i, n, d, k, params["dtype"],
                                     "numpy", teacher)
              for i, n in enumerate(numeric.shard_sizes(params["samples"], params["chunks"]))]
    return (np.concatenate([s["x"] for s in shards]).astype(np.float64),
            np.concatenate([s["y"] for s in shards]))


def _epoch_batches(seed: int, epochs: int, samples: int, batch: int) -> list[np.ndarray]:
    """Every step's rows, as the documentation says: a permutation per epoch, cut in order."""
    steps = []
    for epoch in range(epochs):
        order = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7, epoch))
                                      ).permutation(samples)
        steps += [order[i:i + batch] for i in range(0, samples, batch)]
    return steps


def _numpy_adam(x, y, classes: int, batches, rate: float) -> tuple[np.ndarray, np.ndarray]:
    """Softmax regression from zero by Adam (scikit-learn's form), in float64: the weights
    before each step and the last, and each step's mean gradient."""
    x1 = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros((x1.shape[1], classes))
    m, v, trajectory, gradients = np.zeros_like(w), np.zeros_like(w), [w], []
    for t, rows in enumerate(batches, start=1):
        z = x1[rows] @ w
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(rows)), y[rows]] -= 1
        g = x1[rows].T @ p / len(rows)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        w = w - rate * math.sqrt(1 - 0.999**t) / (1 - 0.9**t) * m / (np.sqrt(v) + 1e-8)
        trajectory.append(w)
        gradients.append(g)
    return np.stack(trajectory), np.stack(gradients)


@pytest.fixture(scope="module")
def adam_run(in_process_client):
    return compute_as_runner(in_process_client, "train-pipeline", **ADAM)


def test_adam_over_epochs_is_an_independent_numpy_adam_on_the_documented_batches(adam_run):
    _spec, workload, raw = adam_run
    batches = _epoch_batches(21, 3, 1200, 250)
    assert workload.context.steps == len(batches) == 3 * 5
    assert raw["rows"].tolist() == [250] * 4 + [200] + [250] * 4 + [200] + [250] * 4 + [200] \
        + [1200]
    for epoch in range(3):  # every row once an epoch
        used = np.concatenate(batches[5 * epoch:5 * epoch + 5])
        assert np.array_equal(np.sort(used), np.arange(1200))
    x, y = _rows(ADAM)
    weights, gradients = _numpy_adam(x, y, 3, batches, 0.05)
    np.testing.assert_allclose(raw["weights"], weights, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(raw["gradients"], gradients, rtol=1e-9, atol=1e-12)
    assert not np.allclose(weights[1], -0.05 * gradients[0])  # Adam, not gradient descent


def test_the_numpy_adam_here_is_scikit_learns(adam_run):
    optimizers = pytest.importorskip("sklearn.neural_network._stochastic_optimizers")
    _spec, _workload, raw = adam_run
    w = [np.zeros(raw["weights"][0].shape)]
    adam = optimizers.AdamOptimizer(w, learning_rate_init=0.05)  # its defaults: 0.9, 0.999, 1e-8
    for g in raw["gradients"]:
        adam.update_params(w, [g])
    np.testing.assert_allclose(w[0], raw["weights"][-1], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("depth", ["fast", "full"])
def test_an_adam_run_over_epochs_verifies(in_process_client, adam_run, depth):
    spec, workload, raw = adam_run
    check = verify_on(in_process_client, spec, workload, raw, depth)
    assert check.ok, check.detail
    for words in ("15 Adam steps replayed in float64", "3 epochs of 5 mini-batches of up to 250",
                  "the loss may rise (mini-batches)"):
        assert words in check.detail, (words, check.detail)
    altered = {**raw, "gradients": raw["gradients"].copy()}  # a reported gradient 1 % off
    altered["gradients"][4].reshape(-1)[np.abs(raw["gradients"][4]).argmax()] *= 1.01
    check = verify_on(in_process_client, spec, workload, altered, depth)
    assert not check.ok and re.search(r"step 5: probe \d: the reported gradient", check.detail)


def test_every_mutation_of_an_adam_result_is_caught_at_both_depths(in_process_client):
    report = check_pipeline("train-pipeline", session=in_process_client, **{
        **FAULT_PARAMS, "optimizer": "adam", "learning_rate": 0.01, "steps": 3})
    caught = {(c.mutation, c.depth) for c in report.caught}
    names = {m.name for m in registry.get("train-pipeline").mutations}
    assert caught == {(n, d) for n in names for d in ("fast", "full")}, str(report)


def test_uneven_shards_and_empty_parts_of_an_epochs_steps_verify(in_process_client):
    """Batches of 7 over shards of 30, 30, 30 and 10 rows: many steps read none of a shard."""
    params = {"samples": 100, "features": 5, "classes": 3, "chunks": 30, "seed": 4,
              "epochs": 2, "batch_size": 7}
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline", **params)
    assert raw["rows"].tolist() == ([7] * 14 + [2]) * 2 + [100]
    empty = [s for t in range(15) for s, part in enumerate(
        train_steps.epoch_batches(4, 0, 100, 7, (30, 30, 30, 10))[t].parts) if not len(part)]
    assert empty  # the pass of a shard with no rows in a step
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert check.ok, check.detail


def test_steps_epochs_learning_rate_and_optimizer_are_resolved_and_reported(
        in_process_client):
    spec = registry.get("train-pipeline")
    assert spec.resolve()["learning_rate"] == 0.5 and spec.resolve()["steps"] == 20
    adam = spec.resolve(optimizer="ADAM", epochs=3)
    assert (adam["optimizer"], adam["learning_rate"], adam["steps"]) == ("adam", 0.001, None)
    assert spec.resolve(optimizer="adam", learning_rate=0.01)["learning_rate"] == 0.01
    result = daskgpu.run("train-pipeline", in_process_client, samples=600, features=4,
                         classes=3, epochs=4, optimizer="adam", chunks=300, seed=2)
    assert result.verified, result.verification
    assert result.params["learning_rate"] == 0.001 and result.params["steps"] is None
    assert (result.data["epochs"], result.data["steps"]) == (4, 4)  # full batches: 1 a pass
    assert result.data["optimizer"].startswith("adam (beta_1 0.9, beta_2 0.999, epsilon 1e-08")
    assert len(result.value["losses"]) == 5
    _seconds, answer = spec.baseline(spec.resolve(in_process_client.backend, **result.params))
    assert answers.difference(result.value, answer) is None


@pytest.mark.parametrize(("params", "fragment"), [
    ({"epochs": 2, "steps": 5}, "--epochs 2 with --steps 5: give one of them"),
    ({"optimizer": "rmsprop"}, "--optimizer rmsprop: choose one of sgd, adam"),
    ({"epochs": 0}, "--epochs"),
    ({"epochs": 10**6, "batch_size": 1, "samples": 1000}, "give at most"),
])
def test_conflicting_or_bad_options_are_refused_in_one_line(params, fragment):
    with pytest.raises(ParameterError, match=re.escape(fragment)) as err:
        registry.get("train-pipeline").resolve(**params)
    assert "\n" not in str(err.value)


def test_cli_refuses_epochs_with_steps_in_one_line_with_exit_code_2():
    started = time.perf_counter()
    proc = run_cli("run", "train-pipeline", "--epochs", "2", "--steps", "5", "--cpu",
                   "--workers", "1", timeout=60)
    assert_one_error_line(proc, started, "--epochs 2 with --steps 5", "--epochs N",
                          "--steps N")


# --------------------------------------------------------------------------- faults


def _adam(beta_1=0.9, beta_2=0.999, shift=0, corrected=True):
    """The run's update with one thing wrong: a beta, the step count, the bias correction."""
    def step(self, w, gradient):
        self.t += 1
        t = self.t + shift
        self.m = beta_1 * self.m + (1 - beta_1) * gradient
        self.v = beta_2 * self.v + (1 - beta_2) * gradient * gradient
        rate = self.rate * (math.sqrt(1 - beta_2**t) / (1 - beta_1**t) if corrected else 1)
        return (w - rate * self.m / (np.sqrt(self.v) + 1e-8)).astype(w.dtype)
    return step


ADAM_FAULTS = {"beta_1 0.8": _adam(beta_1=0.8), "beta_2 0.99": _adam(beta_2=0.99),
               "step count one ahead": _adam(shift=1), "no bias correction": _adam(corrected=False)}
SMALL_ADAM = {**FAULT_PARAMS, "optimizer": "adam", "learning_rate": 0.01, "steps": 3}


@pytest.mark.parametrize("fault", sorted(ADAM_FAULTS))
def test_a_wrong_adam_update_fails_both_depths(in_process_client, monkeypatch, fault):
    monkeypatch.setattr(train_steps.Descent, "step", ADAM_FAULTS[fault])
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline", **SMALL_ADAM)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and "Adam on the reported gradients gives" in check.detail, (
            depth, check.detail)


@pytest.mark.parametrize("where", sorted(ONE_SHARD))
def test_a_gradient_fault_on_one_shard_fails_both_depths_with_adam(in_process_client,
                                                                   monkeypatch, where):
    """0.2 % on one gradient entry of a random and of the last shard, probes consistent."""
    monkeypatch.setattr(train_steps, "shard_pass", _faulty_pass(_entry_off, ONE_SHARD[where]))
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline", **SMALL_ADAM)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, (depth, check.detail)
        assert f"gradient[{ENTRY[0]}, {ENTRY[1]}]" in check.detail, (depth, check.detail)


def test_a_fault_in_an_early_step_of_an_epoch_fails_both_depths(in_process_client,
                                                                monkeypatch):
    """Step 2 of an epoch's 4 reads the rows of step 1 again (every shard), with Adam."""
    original = train_steps.epoch_batches

    def repeated(*args):
        steps = original(*args)
        return [steps[0], steps[0], *steps[2:]]

    monkeypatch.setattr(train_steps, "epoch_batches", repeated)
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline", **{
        **FAULT_PARAMS, "optimizer": "adam", "learning_rate": 0.01, "steps": None,
        "epochs": 1, "batch_size": 1000})
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and "step 2" in check.detail, (depth, check.detail)
