"""train-pipeline's hidden layer (--hidden), its outputs (--output, --init-weights) and its
held-out split (--validation-fraction); the GPU pass's float64 accumulation over row blocks."""

from __future__ import annotations

import copy
import dataclasses
import math
import re

import numpy as np
import pytest
from conftest import compute_as_runner, train_rows, verify_on

import daskgpu
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit import registry
from pipelines.train import check_replay
from pipelines.train import hidden as hidden_layer
from pipelines.train import shared as train_data
from pipelines.train import tasks as train_steps

HIDDEN = {"samples": 3000, "features": 20, "classes": 4, "hidden": 16, "steps": 5,
          "learning_rate": 0.5, "chunks": 700, "seed": 11}


def glorot(seed: int, d: int, h: int, k: int) -> tuple[np.ndarray, ...]:
    """The documented initial weights, drawn here: W1, b1, W2, b2 (float64)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(6,)))
    a = math.sqrt(6 / (d + h))
    w1 = rng.uniform(-a, a, (d, h))
    b = math.sqrt(6 / (h + k))
    w2 = rng.uniform(-b, b, (h, k))
    return w1, np.zeros(h), w2, np.zeros(k)


def mlp_replay(params: dict) -> dict:
    """The same training written out in plain NumPy, all rows at once, float64."""
    d, k, h = params["features"], params["classes"], params["hidden"]
    x, y = train_rows(params)
    onehot = np.eye(k)[y]
    w1, b1, w2, b2 = (a.astype(np.float32).astype(np.float64)
                      for a in glorot(params["seed"], d, h, k))
    losses, flats = [], []
    n = len(y)
    for step in range(params["steps"] + 1):
        flats.append(np.concatenate([np.vstack([w1, b1]).ravel(), np.vstack([w2, b2]).ravel()]))
        pre = x @ w1 + b1
        a = np.maximum(pre, 0)
        z = a @ w2 + b2
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        losses.append(float(-np.log(p[np.arange(n), y]).mean()))
        if step == params["steps"]:
            break
        dz = (p - onehot) / n
        dh = (dz @ w2.T) * (pre > 0)
        rate = params["learning_rate"]
        w2, b2 = w2 - rate * a.T @ dz, b2 - rate * dz.sum(axis=0)
        w1, b1 = w1 - rate * x.T @ dh, b1 - rate * dh.sum(axis=0)
    return {"weights": np.stack(flats), "losses": np.array(losses)}


@pytest.fixture(scope="module")
def hidden_run(cpu_client):
    return compute_as_runner(cpu_client, "train-pipeline", **HIDDEN)


def test_the_hidden_layer_trains_as_plain_numpy_does(hidden_run):
    """Dense(16, relu) -> Dense(4, softmax) from the seeded Glorot weights: the run's weights
    and losses at every step are a float64 NumPy replay's, to float32 rounding."""
    _spec, workload, raw = hidden_run
    d, k, h = HIDDEN["features"], HIDDEN["classes"], HIDDEN["hidden"]
    assert raw["weights"].shape == (HIDDEN["steps"] + 1, (d + 1) * h + (h + 1) * k)
    expected = mlp_replay(HIDDEN)
    np.testing.assert_array_equal(raw["weights"][0], expected["weights"][0].astype(np.float32))
    np.testing.assert_allclose(raw["weights"], expected["weights"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(raw["losses"], expected["losses"], rtol=1e-5)
    assert raw["losses"][-1] < raw["losses"][0]
    assert workload.description["initial weights"] == "Glorot uniform, biases zero, seed 11"
    assert workload.description["model"] == "Dense(16, relu) -> Dense(4, softmax) on 20 features"


@pytest.mark.parametrize("depth", ["fast", "full"])
def test_both_depths_verify_the_hidden_layer_and_catch_every_mutation(cpu_client, hidden_run,
                                                                      depth):
    spec, workload, raw = hidden_run
    check = verify_on(cpu_client, spec, workload, raw, depth)
    assert check.ok, check.detail
    assert "no step size is provably safe" in check.detail  # says why no never-rise rule
    for mutation in spec.mutations:
        altered = verify_on(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)),
                            depth)
        assert not altered.ok, (mutation.name, depth)
        assert re.search(mutation.names, altered.detail), (mutation.name, altered.detail)


@pytest.mark.parametrize("depth", ["fast", "full"])
def test_another_initialisation_fails_both_depths(cpu_client, hidden_run, depth):
    """The check draws the documented initial weights itself: a run started elsewhere fails."""
    spec, workload, raw = hidden_run
    ctx = workload.context
    workload.context = dataclasses.replace(ctx, seed=ctx.seed + 1)
    try:
        check = verify_on(cpu_client, spec, workload, raw, depth)
    finally:
        workload.context = ctx
    assert not check.ok
    assert "before the first step are not the seeded Glorot-uniform draw" in check.detail


def _gradient_off(original):
    def faulty(shard, weights, gradient, library, batch=None, probes=None, report=None):
        (total, loss, right, rows, cells), seconds = original(shard, weights, gradient,
                                                              library, batch, probes, report)
        if shard["index"] == 0 and shard["y"].shape[0] == 1000 and gradient:
            total = total.copy()
            first = (HIDDEN["features"] + 1) * HIDDEN["hidden"]
            total[first:] *= 1.002  # the second layer's gradient off by 0.2 %
        return (total, loss, right, rows, cells), seconds

    return faulty


def test_a_fault_in_one_shards_gradient_fails_both_depths(in_process_client, monkeypatch):
    monkeypatch.setattr(train_steps, "shard_pass", _gradient_off(train_steps.shard_pass))
    params = {**HIDDEN, "samples": 4000, "chunks": 1000}
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline", **params)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, (depth, check.detail)
        assert "step" in check.detail


def _loss(x, y, flat, classes):
    """The cross-entropy summed over rows, written out (float64)."""
    w1, w2 = train_data.unpacked(flat, x.shape[1], classes)
    z = np.maximum(x @ w1[:-1] + w1[-1], 0) @ w2[:-1] + w2[-1]
    z = z - z.max(axis=1, keepdims=True)
    return float((np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]).sum())


def test_the_gradients_are_the_losss_finite_differences():
    """The run's pass and the check's evaluation, in float64, against central differences
    of the loss in every coordinate (both layers, weights and biases)."""
    rng = np.random.default_rng(0)
    d, h, k, rows = 7, 5, 3, 40
    x = rng.standard_normal((rows, d))
    y = rng.integers(0, k, rows)
    flat = rng.standard_normal(train_data.parameter_count(d, h, k)) * 0.7
    layers = hidden_layer.layers(flat, d, k)
    run, loss, _right, _cells = hidden_layer.pass_in_blocks(np, x, y, layers, True, 9)
    model = check_replay.Model(d, k, h, "float64", 9)
    check = model.evaluate(np, x, y, flat[None], (0,))[1][0][0]
    assert loss == pytest.approx(_loss(x, y, flat, k), rel=1e-12)
    step = 1e-6
    for i in range(flat.size):
        up, down = flat.copy(), flat.copy()
        up[i] += step
        down[i] -= step
        numeric_slope = (_loss(x, y, up, k) - _loss(x, y, down, k)) / (2 * step)
        assert run[i] == pytest.approx(numeric_slope, rel=1e-5, abs=1e-6), i
        assert check[i] == pytest.approx(numeric_slope, rel=1e-5, abs=1e-6), i


def test_the_gradients_allowance_covers_float32_and_is_tight():
    """The check's allowance holds the float32 pass's gradient, and a 1 % change of one
    entry of it exceeds the allowance."""
    rng = np.random.default_rng(1)
    d, h, k, rows = 30, 12, 4, 500
    x = rng.standard_normal((rows, d)).astype(np.float32)
    y = rng.integers(0, k, rows)
    flat = (rng.standard_normal(train_data.parameter_count(d, h, k)) * 0.3).astype(np.float32)
    run, *_ = hidden_layer.pass_in_blocks(np, x, y, hidden_layer.layers(flat, d, k), True, 64)
    model = check_replay.Model(d, k, h, "float32", 64)
    (gradient, tol), = model.evaluate(np, x, y, flat[None], (0,))[1]
    assert np.all(np.abs(run - gradient) <= tol)
    worst = int(np.argmax(np.abs(gradient)))
    assert 0.01 * abs(gradient[worst]) > tol[worst]


# ------------------------------------------------------------- outputs and the held-out split


def test_output_is_the_final_weights_and_starts_another_run(cpu_client, tmp_path):
    out = tmp_path / "weights.npz"
    result = daskgpu.run("train-pipeline", cpu_client, **{**HIDDEN, "steps": 2},
                         output=str(out))
    assert result.verified, result.verification
    with np.load(out) as stored:
        saved = {name: stored[name] for name in stored.files}
    d, k, h = HIDDEN["features"], HIDDEN["classes"], HIDDEN["hidden"]
    assert {n: a.shape for n, a in saved.items()} == {"W1": (d, h), "b1": (h,), "W2": (h, k),
                                                     "b2": (k,)}
    # the file is the model: a run starting from it starts at the first run's final loss
    again = daskgpu.run("train-pipeline", cpu_client, **{**HIDDEN, "steps": 1},
                        init_weights=str(out))
    assert again.verified, again.verification
    assert again.value["losses"][0] == pytest.approx(result.value["loss"], rel=1e-6)
    assert again.data["initial weights"] == f"from {out}"


def test_softmax_regression_writes_w_and_b(cpu_client, tmp_path):
    out = tmp_path / "linear.npz"
    params = {k: v for k, v in HIDDEN.items() if k != "hidden"}
    result = daskgpu.run("train-pipeline", cpu_client, **{**params, "steps": 2},
                         output=str(out))
    assert result.verified
    with np.load(out) as stored:
        assert sorted(stored.files) == ["W", "b"]
        assert stored["W"].shape == (20, 4) and stored["b"].shape == (4,)
        assert np.any(stored["W"] != 0)


@pytest.mark.parametrize(("arrays", "params", "fragment"), [
    ({"W": np.zeros((20, 4)), "b": np.zeros(4)}, {"hidden": 16}, "needs W1, b1, W2, b2"),
    ({"W": np.zeros((21, 4)), "b": np.zeros(4)}, {}, "W of shape (21, 4); (20, 4)"),
    ({"W": np.full((20, 4), np.nan), "b": np.zeros(4)}, {}, "not finite"),
])
def test_init_weights_of_another_model_are_one_line(tmp_path, arrays, params, fragment):
    path = tmp_path / "w.npz"
    np.savez(path, **arrays)
    base = {k: v for k, v in HIDDEN.items() if k != "hidden"}
    with pytest.raises(InputFileError) as err:
        registry.get("train-pipeline").resolve(**base, **params, init_weights=str(path))
    assert fragment in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("bad", [1, -0.1, 1.5, "nan", "a tenth"])  # 0: none held out
def test_a_validation_fraction_outside_0_1_is_one_line(bad):
    with pytest.raises(ParameterError, match="--validation-fraction") as err:
        registry.get("train-pipeline").resolve(**HIDDEN, validation_fraction=bad)
    assert "\n" not in str(err.value)


def test_the_validation_fraction_holds_out_its_share(cpu_client, tmp_path):
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((1000, 6)).astype(np.float32), rng.integers(0, 3, 1000)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    result = daskgpu.run("train-pipeline", cpu_client, input=str(tmp_path / "x.npy"),
                         labels=str(tmp_path / "y.npy"), classes=3, steps=2, seed=4,
                         validation_fraction=0.25, hidden=8)
    assert result.verified, result.verification
    assert "(750 training rows, 250 held out)" in result.data["train vs held out"]
    generated = daskgpu.run("train-pipeline", cpu_client, **{**HIDDEN, "steps": 1},
                            validation_fraction=0.5)
    assert generated.verified and "1500 held out" in generated.data["train vs held out"]


# ------------------------------------------------------------- the GPU pass, on the stand-in


@pytest.mark.parametrize("hidden", [None, 6])
def test_on_gpu_workers_the_gradient_adds_row_blocks_in_float64(cupy_stand_in, monkeypatch,
                                                                hidden):
    """A GPU shard of three device cells and a bit: every product reads at most one cell of
    rows (no float32 product over the whole shard), and the gradient comes back float64,
    as the NumPy branch's on the same rows."""
    import strict_cupy

    d, k, rows, cell = 12, 3, 3 * 50 + 7, 50
    monkeypatch.setattr(train_steps, "cell_rows", lambda *_: cell)
    teacher = train_steps.teacher_weights(2, d, k)
    host = train_steps.make_shard(2, train_data.TRAIN, 0, rows, d, k, "float32", "numpy",
                                  teacher)
    device = {key: cupy_stand_in.asarray(v) if isinstance(v, np.ndarray) else v
              for key, v in host.items()}
    if hidden is None:
        weights = (teacher * 0.3).astype(np.float32)
    else:
        flat = hidden_layer.initial_weights(2, d, hidden, k, "float32")
        weights = hidden_layer.layers(flat, d, k)
    contracted = []
    original = strict_cupy.ndarray.__array_ufunc__

    def spy(self, ufunc, method, *inputs, **kwargs):
        if ufunc is np.matmul:
            contracted.append(inputs[0].shape[-1])
        return original(self, ufunc, method, *inputs, **kwargs)

    monkeypatch.setattr(strict_cupy.ndarray, "__array_ufunc__", spy)
    (gradient, loss, right, read, cells), _ = train_steps.shard_pass(device, weights, True,
                                                                     "cupy")
    monkeypatch.setattr(strict_cupy.ndarray, "__array_ufunc__", original)
    assert contracted and max(contracted) <= max(cell, d)
    assert gradient.dtype == np.float64 and len(cells[0][1]["loss"]) == 4
    (want, want_loss, want_right, _, _), _ = train_steps.shard_pass(host, weights, True,
                                                                    "numpy")
    assert read == rows and right == want_right
    assert loss == pytest.approx(want_loss, rel=1e-6)
    np.testing.assert_allclose(gradient, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------- real data: scikit-learn's digits


@pytest.mark.timeout(900)
def test_digits_held_out_accuracy_is_within_2_points_of_scikit_learns(in_process_client,
                                                                     tmp_path):
    """The worked example of the docs: scikit-learn's bundled 8 x 8 digits as .npy files,
    trained with and without --hidden 128; on the same held-out fifth, scikit-learn's
    LogisticRegression and MLPClassifier(128) score within 2 points of the runs (workers in
    this process: 200 small steps are mostly round trips)."""
    import warnings

    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    digits = load_digits()
    x, y = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
    np.save(tmp_path / "digits_x.npy", x)
    np.save(tmp_path / "digits_y.npy", y)
    rows = len(y)
    draw = np.random.default_rng(np.random.SeedSequence(0, spawn_key=(train_data.HELD_OUT,)))
    test = np.sort(draw.choice(rows, size=round(0.2 * rows), replace=False))
    train = np.setdiff1d(np.arange(rows), test)
    for hidden, rate, peer in ((None, 4.0, LogisticRegression(max_iter=5000)),
                               (128, 1.0, MLPClassifier(hidden_layer_sizes=(128,),
                                                        random_state=0, max_iter=2000))):
        options = {} if hidden is None else {"hidden": hidden}
        result = daskgpu.run("train-pipeline", in_process_client,
                             input=str(tmp_path / "digits_x.npy"),
                             labels=str(tmp_path / "digits_y.npy"), classes=10, steps=100,
                             learning_rate=rate, validation_fraction=0.2, seed=0, **options)
        assert result.verified, result.verification
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # MLPClassifier's convergence warnings
            theirs = peer.fit(x[train], y[train]).score(x[test], y[test])
        ours = result.data["test_accuracy"]
        assert f"{len(train)} training rows, {len(test)} held out" in (
            result.data["train vs held out"])
        print(f"digits, hidden {hidden}: {ours:.4f} held out, scikit-learn {theirs:.4f}")
        assert abs(ours - theirs) <= 0.02, (hidden, ours, theirs)
        assert ours > 0.9


def test_a_run_that_fails_its_check_writes_no_weights(in_process_client, monkeypatch, tmp_path):
    monkeypatch.setattr(train_steps, "shard_pass", _gradient_off(train_steps.shard_pass))
    out = tmp_path / "weights.npz"
    result = daskgpu.run("train-pipeline", in_process_client,
                         **{**HIDDEN, "samples": 4000, "chunks": 1000}, output=str(out))
    assert not result.verified
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_mini_batches_with_a_hidden_layer_verify_and_a_mutation_fails(cpu_client):
    spec, workload, raw = compute_as_runner(cpu_client, "train-pipeline",
                                            **{**HIDDEN, "batch_size": 500, "steps": 3})
    assert list(raw["rows"][:-1]) == [sum(train_data.batch_rows(500, n, 3000)
                                          for n in workload.context.train_sizes)] * 3
    doubled = next(m for m in spec.mutations if "twice" in m.name)
    for depth in ("fast", "full"):
        check = verify_on(cpu_client, spec, workload, raw, depth)
        assert check.ok and "mini-batch" in check.detail, check.detail
        assert not verify_on(cpu_client, spec, workload, doubled.alter(copy.deepcopy(raw)),
                             depth).ok


def test_the_baseline_trains_the_same_hidden_layer(cpu_client):
    from daskgpu.execution import answers

    params = {**HIDDEN, "steps": 2}
    result = daskgpu.run("train-pipeline", cpu_client, **params)
    spec = registry.get("train-pipeline")
    seconds, answer = spec.baseline(spec.resolve(cpu_client.backend, **result.params))
    assert seconds > 0 and result.verified
    assert answers.difference(result.value, answer) is None
    assert answer["losses"][0] == pytest.approx(mlp_replay(params)["losses"][0], rel=1e-6)


def test_the_fast_checks_jobs_carry_each_steps_weights_once(hidden_run):
    """A shard's job names its sampled cells by step and holds each step's weights once:
    a hidden layer's weights repeated per sampled cell made a graph of tens of MiB (Dask
    warned of it on every default-sized run)."""
    from pipelines.train import check as train_check
    from pipelines.train import check_fast

    spec, workload, raw = hidden_run
    ctx = workload.context
    plan = check_fast.cell_plan(ctx)
    weights = np.asarray(raw["weights"])
    jobs = check_fast.training_jobs(ctx, train_check.read(workload, raw))
    assert sum(len(job.sampled) for job in jobs) == plan.sampled > ctx.steps
    for job in jobs:
        steps = {t for t, _, _ in job.sampled}
        assert set(job.weights) == steps
        for t in steps:
            np.testing.assert_array_equal(job.weights[t], weights[t])
        held = sum(value.nbytes for value in job.weights.values())
        assert held <= ctx.steps * weights[0].nbytes
