"""daskgpu.ml.MLPClassifier: scikit-learn's conventions on train-pipeline, verified on every fit.

Held against scikit-learn's own MLPClassifier and a plain NumPy Adam on the documented
batches; NumPy in, NumPy out; Dask in, lazy Dask out; clone, parameters and scikit-learn's
pipelines; refusals in one line; a wrong answer raises.
"""

from __future__ import annotations

import math

import dask.array as da
import distributed
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.neural_network import MLPClassifier as SklearnMLP
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from daskgpu.errors import InputFileError, ParameterError, VerificationFailed
from daskgpu.ml import MLPClassifier
from pipelines.train import tasks as train_steps


@pytest.fixture(scope="module")
def problem():
    """Three well-separated classes of 8 features, float32; 900 rows to train, 300 to test."""
    x, y = make_classification(n_samples=1200, n_features=8, n_informative=5, n_redundant=0,
                               n_classes=3, n_clusters_per_class=1, class_sep=2.5,
                               random_state=4)
    x = x.astype(np.float32)
    labels = np.array(["cat", "dog", "eel"])[y]
    return x[:900], labels[:900], x[900:], labels[900:]


@pytest.fixture(scope="module")
def fitted(cpu_client, problem):
    x, y, _, _ = problem
    return MLPClassifier((16,), learning_rate_init=0.01, batch_size=100, max_iter=8,
                         random_state=0).fit(x, y, session=cpu_client)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_as_accurate_as_scikit_learns_with_the_same_solver_and_batches(fitted, problem):
    x, y, x_test, y_test = problem
    theirs = SklearnMLP((16,), learning_rate_init=0.01, batch_size=100, max_iter=8,
                        random_state=0).fit(x, y)
    ours = fitted.score(x_test, y_test)
    assert ours > 0.9 and abs(ours - theirs.score(x_test, y_test)) <= 0.01, (
        ours, theirs.score(x_test, y_test))
    assert fitted.verified_ is True and "8 epochs of 9 mini-batches" in fitted.verification_
    assert [c.shape for c in fitted.coefs_] == [c.shape for c in theirs.coefs_]
    assert [b.shape for b in fitted.intercepts_] == [b.shape for b in theirs.intercepts_]
    assert fitted.coefs_[0].dtype == np.float32 and list(fitted.classes_) == ["cat", "dog", "eel"]
    assert (fitted.n_iter_, fitted.t_, fitted.n_features_in_) == (8, 72, 8)
    assert (fitted.n_layers_, fitted.n_outputs_, fitted.out_activation_) == (3, 3, "softmax")
    assert fitted.loss_curve_[-1] < fitted.loss_curve_[0] and fitted.loss_ == fitted.loss_curve_[-1]


def _numpy_adam(x, codes, classes, seed, epochs, batch, rate):
    """Softmax regression from zero by Adam (scikit-learn's form) in float64 on the pipeline's
    documented epochs (a seeded permutation each): the weights, and each epoch's mean loss."""
    x1 = np.hstack([x.astype(np.float64), np.ones((len(x), 1))])
    w, m, v = (np.zeros((x1.shape[1], classes)) for _ in range(3))
    t, curve = 0, []
    for epoch in range(epochs):
        order = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7, epoch))
                                      ).permutation(len(x))
        total = 0.0
        for first in range(0, len(x), batch):
            rows = np.sort(order[first:first + batch])
            z = x1[rows] @ w
            z -= z.max(axis=1, keepdims=True)
            p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
            total -= np.log(p[np.arange(len(rows)), codes[rows]]).sum()
            p[np.arange(len(rows)), codes[rows]] -= 1
            g = (x1[rows].T @ p / len(rows)).astype(np.float32).astype(np.float64)
            t += 1
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            w = (w - rate * math.sqrt(1 - 0.999**t) / (1 - 0.9**t) * m / (np.sqrt(v) + 1e-8)
                 ).astype(np.float32).astype(np.float64)
        curve.append(total / len(x))
    return w, curve


def test_softmax_regression_is_a_plain_numpy_adam_on_the_documented_batches(cpu_client,
                                                                          problem):
    x, y, _, _ = problem
    model = MLPClassifier((), learning_rate_init=0.05, batch_size=250, max_iter=3,
                          random_state=11).fit(x, y, session=cpu_client)
    codes = np.searchsorted(["cat", "dog", "eel"], y)
    w, curve = _numpy_adam(x, codes, 3, 11, 3, 250, 0.05)
    np.testing.assert_allclose(model.coefs_[0], w[:-1], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(model.intercepts_[0], w[-1], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(model.loss_curve_, curve, rtol=1e-5)
    assert model.seed_ == 11 and model.t_ == 3 * 4
    assert model.result_.params["validation_fraction"] == 0  # scikit-learn holds none out
    proba = model.predict_proba(x)
    z = x.astype(np.float64) @ w[:-1] + w[-1]
    np.testing.assert_allclose(proba, np.exp(z) / np.exp(z).sum(axis=1, keepdims=True),
                               rtol=1e-4, atol=1e-6)


def _on_a_worker(block):
    distributed.get_worker()  # raises ValueError outside a worker: the graph pulled elsewhere
    return block


def test_dask_in_lazy_dask_out(cpu_client, fitted, problem):
    x, y, x_test, _ = problem
    xd = da.from_array(x, chunks=(200, 8))
    xd = xd.map_blocks(_on_a_worker, meta=xd._meta)
    yd = da.from_array(y, chunks=200)
    model = MLPClassifier((16,), batch_size=150, max_iter=1, random_state=1).fit(
        xd, yd, session=cpu_client)
    assert model.verified_ and list(model.classes_) == ["cat", "dog", "eel"]
    assert model.result_.params["input"] == "dask.array.Array float32 (900, 8)"
    test = da.from_array(x_test, chunks=(70, 4))  # features in two blocks: joined
    guessed, proba = fitted.predict(test), fitted.predict_proba(test)
    assert isinstance(guessed, da.Array) and isinstance(proba, da.Array)
    np.testing.assert_array_equal(guessed.compute(), fitted.predict(x_test))
    np.testing.assert_allclose(proba.compute(), fitted.predict_proba(x_test), rtol=1e-5)
    assert isinstance(fitted.predict(x_test), np.ndarray) and proba.dtype == np.float32


def test_clone_parameters_and_a_scikit_learn_pipeline(cpu_client, fitted, problem):
    x, y, x_test, y_test = problem
    copied = clone(fitted)
    assert copied.get_params() == fitted.get_params() and not hasattr(copied, "coefs_")
    copied.set_params(max_iter=2, hidden_layer_sizes=(8,))
    assert copied.get_params()["hidden_layer_sizes"] == (8,)
    chain = make_pipeline(StandardScaler(), MLPClassifier((8,), learning_rate_init=0.05,
                                                          batch_size=100, max_iter=2,
                                                          random_state=2))
    chain.fit(x.astype(np.float64) * 100 + 5, y, mlpclassifier__session=cpu_client)
    assert chain.score(x_test * 100 + 5, y_test) > 0.85
    assert chain[-1].coefs_[0].dtype == np.float64  # float64 rows: a float64 model


@pytest.mark.parametrize(("params", "fragment"), [
    ({"hidden_layer_sizes": (64, 32)}, "one hidden layer of ReLU units, (n,), or none, ()"),
    ({"activation": "tanh"}, "activation='tanh': the hidden layer is ReLU"),
    ({"solver": "lbfgs"}, "solver='lbfgs': choose 'adam' or 'sgd'"),
    ({"early_stopping": True}, "early_stopping=True: not supported"),
    ({"batch_size": 0}, "batch_size=0: give an int of 1 or more, or 'auto'"),
    ({"verify": "some"}, "verify='some'"),
])
def test_what_the_pipeline_cannot_do_is_refused_in_one_line(problem, params, fragment):
    x, y, _, _ = problem
    with pytest.raises(ParameterError) as caught:
        MLPClassifier(**params).fit(x, y)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("labels", "fragment"), [
    (np.zeros(900), "y holds a single class (np.float64(0.0)); at least 2 are needed"),
    (np.arange(10), "y of shape (10,): one label per row of X (900,) is needed"),
])
def test_bad_labels_are_refused_in_one_line(problem, labels, fragment):
    with pytest.raises(InputFileError) as caught:
        MLPClassifier().fit(problem[0], labels)
    assert fragment in str(caught.value)


def test_a_wrong_gradient_in_the_run_raises_verification_failed(in_process_client, monkeypatch,
                                                               problem):
    original = train_steps.shard_pass

    def off(shard, weights, gradient, *args):
        (total, *rest), seconds = original(shard, weights, gradient, *args)
        return ((total * 1.01 if gradient else total, *rest), seconds)

    monkeypatch.setattr(train_steps, "shard_pass", off)
    x, y, _, _ = problem
    model = MLPClassifier((4,), batch_size=300, max_iter=1, random_state=3)
    with pytest.raises(VerificationFailed, match="MLPClassifier.fit: the result did not verify"):
        model.fit(x, y, session=in_process_client)
    assert not hasattr(model, "coefs_")
    monkeypatch.setattr(train_steps, "shard_pass", original)
    assert model.fit(x, y, session=in_process_client).verified_ is True
    assert model.set_params(verify="off").fit(x, y, session=in_process_client).verified_ is None
