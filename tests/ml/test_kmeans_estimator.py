"""daskgpu.ml.KMeans: scikit-learn's conventions on kmeans-pipeline, verified on every fit.

Held against scikit-learn's own KMeans on blobs nobody here made; NumPy in, NumPy out; Dask in,
Dask out (labels_ the run's, kept on the workers; predict lazy); clone, parameters and
scikit-learn's pipelines; a wrong answer raises.
"""

from __future__ import annotations

import argparse

import dask.array as da
import numpy as np
import pytest
from distributed import futures_of
from sklearn.base import clone
from sklearn.cluster import KMeans as SklearnKMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from daskgpu.errors import ParameterError, VerificationFailed
from daskgpu.ml import KMeans
from daskgpu.ml import kmeans as ml_kmeans
from pipelines.kmeans import tasks as kmeans_steps


@pytest.fixture(scope="module")
def blobs() -> np.ndarray:
    """Five well-separated blobs (centres at least 12 standard deviations apart), float64."""
    x, _labels, centres = make_blobs(n_samples=3000, n_features=4, centers=5,
                                     center_box=(-40, 40), random_state=3, return_centers=True)
    gaps = np.sqrt(((centres[:, None] - centres[None]) ** 2).sum(axis=2))
    assert gaps[np.triu_indices(5, 1)].min() > 12
    return x


@pytest.fixture(scope="module")
def fitted(cpu_client, blobs):
    return KMeans(5, random_state=0).fit(blobs, session=cpu_client)


def matched(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """The permutation taking our centroids to scikit-learn's: ours[j] is theirs[match[j]]."""
    match = np.argmin(((ours[:, None] - theirs[None]) ** 2).sum(axis=2), axis=1)
    assert sorted(match) == list(range(len(theirs)))
    return match


def test_the_same_clusters_as_scikit_learn(fitted, blobs):
    model = fitted
    theirs = SklearnKMeans(5, n_init=10, random_state=0).fit(blobs)
    match = matched(model.cluster_centers_, theirs.cluster_centers_)
    np.testing.assert_allclose(model.cluster_centers_, theirs.cluster_centers_[match],
                               rtol=0, atol=1e-9)
    assert model.inertia_ == pytest.approx(theirs.inertia_, rel=1e-4)
    assert isinstance(model.labels_, np.ndarray) and model.labels_.dtype == np.int32
    np.testing.assert_array_equal(match[model.labels_], theirs.labels_)
    np.testing.assert_array_equal(model.predict(blobs), model.labels_)
    np.testing.assert_allclose(model.transform(blobs), theirs.transform(blobs)[:, match],
                               rtol=1e-9, atol=1e-9)
    assert model.score(blobs) == pytest.approx(theirs.score(blobs), rel=1e-9)
    assert model.verified_ is True and "the cluster sizes agree" in model.verification_
    assert model.n_features_in_ == 4 and model.n_iter_ >= 1
    assert model.seed_ == 0 and model.result_.params["init"] == "k-means||"
    assert list(model.get_feature_names_out()) == [f"kmeans{j}" for j in range(5)]


def test_a_dask_array_gives_the_labels_kept_on_the_workers_and_the_numpy_fits_centres(
        cpu_client, fitted, blobs):
    x = da.from_array(blobs, chunks=(700, 4))
    model = KMeans(5, random_state=0).fit(x, session=cpu_client)
    np.testing.assert_array_equal(model.cluster_centers_, fitted.cluster_centers_)
    assert model.result_.data["rechunked"].startswith("rechunked from blocks of (700, 4)")
    # the run's own labels: a block per shard, persisted (its graph holds only those blocks)
    labels = model.labels_
    assert labels is model.result_.value["labels"] and labels.chunks == ((1500, 1500),)
    assert len(dict(labels.__dask_graph__())) == labels.npartitions == 2
    np.testing.assert_array_equal(labels.compute(scheduler=cpu_client.client), fitted.labels_)
    predicted, distances = model.predict(x), model.transform(x)
    assert isinstance(predicted, da.Array) and isinstance(distances, da.Array)
    np.testing.assert_array_equal(predicted.compute(), fitted.labels_)
    np.testing.assert_allclose(distances.compute(), fitted.transform(blobs), rtol=1e-12)
    assert model.score(x) == pytest.approx(fitted.score(blobs), rel=1e-12)


def test_labels_are_the_runs_own_not_computed_again(cpu_client, blobs, monkeypatch):
    """labels_ are the labels the fit's run kept and verified (int32), not the centroids'
    labels computed again here; where fit started (and closed) a cluster of its own, a Dask
    X's labels_ are a Dask array of them held in this process."""
    def again(*args, **kwargs):
        raise AssertionError("labels computed again in this process")

    monkeypatch.setattr(ml_kmeans, "nearest", again)
    model = KMeans(5, random_state=0).fit(blobs, session=cpu_client)
    plain = ((blobs[:, None] - model.cluster_centers_[None]) ** 2).sum(axis=2).argmin(axis=1)
    assert isinstance(model.labels_, np.ndarray) and model.labels_.dtype == np.int32
    np.testing.assert_array_equal(model.labels_, plain)
    assert "the kept labels: 3000 labels whose counts" in model.verification_  # verified
    monkeypatch.setattr(ml_kmeans, "outlives_fit", lambda session: False)
    held = KMeans(5, random_state=0).fit(da.from_array(blobs, chunks=(700, 4)),
                                         session=cpu_client)
    assert isinstance(held.labels_, da.Array) and not futures_of(held.labels_)
    assert held.labels_.chunks == ((1500, 1500),)
    np.testing.assert_array_equal(held.labels_.compute(scheduler="sync"), plain)


def test_points_with_no_finite_coordinate_are_labelled_minus_one(fitted, blobs):
    x = blobs[:6].copy()
    x[[1, 4], 2] = np.nan, np.inf
    labels = fitted.predict(x)
    assert labels[1] == labels[4] == -1
    np.testing.assert_array_equal(labels[[0, 2, 3, 5]], fitted.labels_[[0, 2, 3, 5]])
    assert fitted.score(x) == pytest.approx(fitted.score(blobs[[0, 2, 3, 5]]), rel=1e-12)


def test_clone_parameters_and_a_scikit_learn_pipeline(cpu_client, blobs):
    model = KMeans(3, init="random", n_init=2, tol=0.1, random_state=5, verify="full")
    copied = clone(model)
    assert copied is not model and copied.get_params() == model.get_params()
    assert copied.set_params(n_clusters=5, verify="fast").get_params()["n_clusters"] == 5
    with pytest.raises(NotFittedError):
        copied.predict(blobs)
    pipe = make_pipeline(StandardScaler(), KMeans(5, random_state=1))
    pipe.fit(blobs, kmeans__session=cpu_client)
    scaled = StandardScaler().fit_transform(blobs)
    theirs = make_pipeline(StandardScaler(), SklearnKMeans(5, n_init=10, random_state=0)
                           ).fit(blobs)
    match = matched(pipe[-1].cluster_centers_, theirs[-1].cluster_centers_)
    np.testing.assert_array_equal(match[pipe.predict(blobs)], theirs.predict(blobs))
    np.testing.assert_allclose(pipe.transform(blobs), theirs.transform(blobs)[:, match],
                               atol=1e-9)
    assert pipe[-1].verified_ and pipe[-1].n_features_in_ == scaled.shape[1]


def test_n_init_runs_seeded_fits_and_keeps_the_least_inertia(cpu_client, blobs, monkeypatch):
    runs = []
    original = ml_kmeans.fitted

    def recorded(*args, **kwargs):
        result = original(*args, **kwargs)
        runs.append((kwargs.get("seed"), result.value["inertia"]))
        return result

    monkeypatch.setattr(ml_kmeans, "fitted", recorded)
    model = KMeans(5, init="random", n_init=3, max_iter=3, random_state=4).fit(
        blobs, session=cpu_client)
    seeds = [seed for seed, _ in runs]
    assert len(runs) == 3 and seeds[0] == 4 and len(set(seeds)) == 3
    assert model.inertia_ == min(inertia for _, inertia in runs)
    assert model.seed_ == seeds[int(np.argmin([inertia for _, inertia in runs]))]


def test_tol_is_scikit_learns_relative_tolerance(blobs):
    x = blobs.copy()
    x[7] = np.nan  # left out, as the pipeline leaves it out
    finite = np.delete(x, 7, axis=0)
    variance = np.var(finite, axis=0).mean()
    assert ml_kmeans.mean_variance(x) == pytest.approx(variance, rel=1e-12)
    assert ml_kmeans.mean_variance(da.from_array(x, chunks=(1000, 2))) == pytest.approx(
        variance, rel=1e-12)
    tol = ml_kmeans.pipeline_tol(1e-4, x, None, 5)
    assert tol == pytest.approx(np.sqrt(1e-4 * variance / 5), rel=1e-12)
    # each of the 5 centroids moving by tol: their squared shifts sum to scikit-learn's bound
    assert 5 * tol ** 2 == pytest.approx(1e-4 * variance, rel=1e-12)
    assert ml_kmeans.pipeline_tol(0, x, None, 5) == 0


def test_a_wrong_answer_raises_verification_failed(in_process_client, blobs, monkeypatch):
    original = kmeans_steps.kmeans_pass

    def off(x, centroids):  # every pass's sums 0.1 % high, on every shard
        sums, counts, inertia = original(x, centroids)
        return sums * 1.001, counts, inertia

    monkeypatch.setattr(kmeans_steps, "kmeans_pass", off)
    for verify in ("fast", "full"):
        with pytest.raises(VerificationFailed, match=r"KMeans\.fit: the result did not verify"):
            KMeans(5, random_state=0, verify=verify).fit(blobs, session=in_process_client)
    unchecked = KMeans(5, random_state=0, verify="off").fit(blobs, session=in_process_client)
    assert unchecked.verified_ is None


@pytest.mark.parametrize(("params", "fragment"), [
    ({"init": np.zeros((5, 4))}, "init=<ndarray>: daskgpu's KMeans starts from 'k-means++'"),
    ({"init": "greedy"}, "init='greedy'"),
    ({"n_init": 0}, "n_init=0: give an int of 1 or more, or 'auto'"),
    ({"n_clusters": 0}, "n_clusters=0: give an int of 1 or more"),
    ({"n_clusters": 4000}, "n_clusters=4000: give an int of 1 or more and at most n_samples"),
    ({"max_iter": 2.5}, "max_iter=2.5"),
    ({"tol": -1.0}, "tol=-1.0: give a finite number of 0 or more"),
    ({"verify": "always"}, "verify='always'"),
])
def test_bad_parameters_are_one_line_before_any_cluster(blobs, params, fragment):
    def no_session(*args, **kwargs):
        raise AssertionError("a session was asked for")

    with pytest.raises(ParameterError) as caught:
        ml_kmeans.KMeans(**{"n_clusters": 5, **params}).fit(blobs, session=no_session)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_bad_data_is_one_line(fitted, blobs):
    with pytest.raises(TypeError, match="a list is not an input daskgpu reads"):
        KMeans(2).fit([[1.0, 2.0]] * 3)
    with pytest.raises(ValueError, match=r"X numpy.ndarray int64 \(3, 2\): holds int64"):
        KMeans(2).fit(np.zeros((3, 2), np.int64))
    with pytest.raises(ParameterError, match=r"KMeans.predict: X numpy.ndarray float64 "
                                             r"\(6, 3\); a matrix of 4 columns"):
        fitted.predict(blobs[:6, :3])


# --------------------------------------------------------------------------- the benchmark


def test_the_benchmarks_small_twin_compares_the_answers_before_its_ratio(cpu_client):
    from benchmarks import ml_kmeans as bench

    args = argparse.Namespace(**{**bench.SMALL, "workers": 2})
    figures = bench.compare(args, session=cpu_client)
    assert figures["compared"].startswith("answers agree: ")
    assert figures["ratio"] == figures["sklearn_s"] / figures["daskgpu_s"] > 0
    assert 0 < figures["verify_share"] < 1
    x, (mine, peer) = bench.points(args.samples, args.features, args.k), figures["answers"]
    assert bench.agree(x, mine, peer) == figures["compared"]
    for wrong, said in (({"centroids": peer["centroids"] + 0.01}, "final centroids differ"),
                        ({"inertia": peer["inertia"] * 1.001}, "inertias differ"),
                        ({"iterations": peer["iterations"] + 1}, "iterations differ"),
                        ({"labels": (peer["labels"] + 1) % args.k}, "not within a tie")):
        with pytest.raises(SystemExit, match=said):
            bench.agree(x, mine, {**peer, **wrong})
