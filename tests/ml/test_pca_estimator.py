"""daskgpu.ml.PCA against scikit-learn's PCA: the same fit, transforms and conventions, verified."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.decomposition import PCA as SkPCA
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from daskgpu.errors import InputFileError, ParameterError, VerificationFailed
from daskgpu.ml import PCA
from daskgpu.ml import pca as ml_pca
from pipelines.pca import tasks as pca_blocks

SAMPLES, FEATURES, RANK = 2000, 10, 3
# What the randomized solver is held to against the exact fit here (well-separated leading
# variances): the pipeline promises residuals within 1e-3 of the largest variance; this
# spectrum gives far better, and a fit off by more than this has missed a direction.
RANDOMIZED_RTOL = 1e-6
ATTRIBUTES = ("components_", "explained_variance_", "explained_variance_ratio_",
              "singular_values_", "mean_", "noise_variance_")


@pytest.fixture(scope="module")
def low_rank() -> np.ndarray:
    """A rank-3 signal plus small noise, off-centre."""
    rng = np.random.default_rng(42)
    signal = rng.standard_normal((SAMPLES, RANK)) * [5.0, 3.0, 2.0] @ np.linalg.qr(
        rng.standard_normal((FEATURES, RANK)))[0].T
    return signal + 0.05 * rng.standard_normal((SAMPLES, FEATURES)) + np.arange(FEATURES)


def _relative(ours, theirs) -> float:
    """Largest relative difference, row by row for a matrix (a component's norm is 1)."""
    ours, theirs = np.atleast_1d(ours), np.atleast_1d(theirs)
    if ours.ndim == 2:
        return float(np.max(np.linalg.norm(ours - theirs, axis=1)
                            / np.linalg.norm(theirs, axis=1)))
    return float(np.max(np.abs(ours - theirs) / np.abs(theirs)))


@pytest.mark.parametrize(("solver", "method", "theirs"), [
    ("covariance_eigh", "covariance", "covariance_eigh"), ("full", "exact", "full"),
    ("auto", "covariance", "covariance_eigh"),
])
def test_the_fit_is_scikit_learns(cpu_client, low_rank, solver, method, theirs):
    """Components with scikit-learn's signs (no flip needed), variances, their ratios, singular
    values, the mean and the noise variance within 1e-6 relative; verified."""
    ours = PCA(5, svd_solver=solver).fit(low_rank, session=cpu_client)
    expected = SkPCA(5, svd_solver=theirs).fit(low_rank)
    for name in ATTRIBUTES:
        assert _relative(getattr(ours, name), getattr(expected, name)) <= 1e-6, name
    assert ours.components_.shape == (5, FEATURES)
    assert (ours.n_components_, ours.n_samples_, ours.n_features_in_) == (5, SAMPLES, FEATURES)
    assert ours.verified_ is True and ours.method_ == method
    assert ours.result_.verify == "fast" and "eigenvector" in ours.verification_


def test_randomized_is_within_its_tolerance_of_the_exact_fit(cpu_client, low_rank):
    ours = PCA(3, svd_solver="randomized", random_state=0, iterated_power=2).fit(
        low_rank, session=cpu_client)
    exact = SkPCA(3, svd_solver="covariance_eigh").fit(low_rank)
    assert ours.method_ == "randomized" and ours.result_.params["power_iters"] == 2
    assert ours.result_.params["seed"] == 0
    for name in ATTRIBUTES:
        assert _relative(getattr(ours, name), getattr(exact, name)) <= RANDOMIZED_RTOL, name
    assert ours.verified_


def test_n_components_none_and_a_share_of_the_variance(cpu_client, low_rank):
    every = PCA().fit(low_rank, session=cpu_client)
    assert every.n_components_ == FEATURES and every.noise_variance_ == 0.0
    assert every.explained_variance_ratio_.sum() == pytest.approx(1.0, rel=1e-12)
    share = PCA(0.99, svd_solver="covariance_eigh").fit(low_rank, session=cpu_client)
    expected = SkPCA(0.99, svd_solver="covariance_eigh").fit(low_rank)
    assert share.n_components_ == expected.n_components_ == RANK
    assert _relative(share.noise_variance_, expected.noise_variance_) <= 1e-6


@pytest.mark.parametrize("whiten", [False, True])
def test_transforms_are_scikit_learns_and_dask_stays_lazy(cpu_client, low_rank, whiten):
    """NumPy in, NumPy out; Dask in (its own chunks, columns split too), lazy Dask out with its
    row blocks; the same values as scikit-learn's; and a fit on a Dask array is the same fit."""
    x = da.from_array(low_rank, chunks=(300, 4))
    ours = PCA(3, whiten=whiten).fit(x, session=cpu_client)
    expected = SkPCA(3, whiten=whiten, svd_solver="covariance_eigh").fit(low_rank)
    assert _relative(ours.components_, expected.components_) <= 1e-6
    projected = expected.transform(low_rank)
    scale = np.abs(projected).max()
    np.testing.assert_allclose(ours.transform(low_rank), projected, atol=1e-9 * scale)
    lazy = ours.transform(x)
    assert isinstance(lazy, da.Array) and lazy.chunks[0] == x.chunks[0]
    assert lazy.shape == (SAMPLES, 3) and lazy.dtype == np.float64
    np.testing.assert_allclose(lazy.compute(scheduler="sync"), projected, atol=1e-9 * scale)
    back = ours.inverse_transform(lazy)
    assert isinstance(back, da.Array)
    np.testing.assert_allclose(back.compute(scheduler="sync"),
                               expected.inverse_transform(projected),
                               atol=1e-9 * np.abs(low_rank).max())
    np.testing.assert_allclose(ours.inverse_transform(ours.transform(low_rank)), low_rank,
                               atol=0.5)  # what 3 of 10 components keep: the noise is 0.05


@pytest.mark.parametrize("whiten", [False, True])
def test_fit_transform_gives_the_runs_projection_without_projecting_again(
        cpu_client, low_rank, monkeypatch, whiten):
    """NumPy in, the run's projection gathered; Dask in, the Dask array the run kept on the
    workers (its blocks only, where nothing is whitened); scikit-learn's values; X is not
    projected again here. A fit alone lets the projection go."""
    def again(*args, **kwargs):
        raise AssertionError("X projected again in this process")

    monkeypatch.setattr(ml_pca, "_projected", again)
    expected = SkPCA(3, whiten=whiten, svd_solver="covariance_eigh").fit_transform(low_rank)
    scale = np.abs(expected).max()
    ours = PCA(3, whiten=whiten)
    got = ours.fit_transform(low_rank, session=cpu_client)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, atol=1e-9 * scale)
    assert "projection" not in ours.result_.value and ours.verified_
    lazy = PCA(3, whiten=whiten).fit_transform(da.from_array(low_rank, chunks=(300, 4)),
                                               session=cpu_client)
    assert isinstance(lazy, da.Array) and lazy.shape == (SAMPLES, 3)
    assert whiten or len(dict(lazy.__dask_graph__())) == lazy.npartitions
    np.testing.assert_allclose(lazy.compute(scheduler=cpu_client.client), expected,
                               atol=1e-9 * scale)
    share = PCA(0.99, whiten=whiten, svd_solver="covariance_eigh")
    fewer = share.fit_transform(low_rank.astype(np.float32), session=cpu_client)
    assert fewer.shape == (SAMPLES, RANK) and fewer.dtype == np.float32
    np.testing.assert_allclose(fewer, expected, atol=1e-5 * scale)


@pytest.mark.parametrize("whiten", [False, True])
def test_device_arrays_are_projected_on_the_device(cpu_client, low_rank, cupy_stand_in, whiten):
    """CuPy in, CuPy out (the strict stand-in: no implicit copy to the host on the way)."""
    ours = PCA(3, whiten=whiten).fit(low_rank, session=cpu_client)
    projected = ours.transform(cupy_stand_in.asarray(low_rank))
    assert isinstance(projected, cupy_stand_in.ndarray)
    np.testing.assert_allclose(projected.get(), ours.transform(low_rank), rtol=1e-12)
    back = ours.inverse_transform(projected)
    assert isinstance(back, cupy_stand_in.ndarray)
    np.testing.assert_allclose(back.get(), ours.inverse_transform(ours.transform(low_rank)),
                               rtol=1e-12)


def test_float32_data_are_projected_in_float32(cpu_client, low_rank):
    x = low_rank.astype(np.float32)
    ours = PCA(2).fit(x, session=cpu_client)
    assert ours.transform(x).dtype == np.float32
    assert ours.transform(da.from_array(x, chunks=500)).dtype == np.float32


def test_clone_params_and_a_scikit_learn_pipeline(cpu_client, low_rank):
    model = PCA(3, svd_solver="randomized", random_state=1, verify="full")
    twin = clone(model)
    assert twin.get_params() == model.get_params() and twin is not model
    assert twin.set_params(n_components=2) is twin and twin.n_components == 2
    with pytest.raises(NotFittedError):
        twin.transform(low_rank)
    ours = make_pipeline(StandardScaler(), PCA(3, svd_solver="covariance_eigh"))
    theirs = make_pipeline(StandardScaler(), SkPCA(3, svd_solver="covariance_eigh"))
    with cpu_client.client.as_current():  # where a pipeline's fit computes: the current client
        got = ours.fit_transform(low_rank)
    expected = theirs.fit_transform(low_rank)
    np.testing.assert_allclose(got, expected, atol=1e-9 * np.abs(expected).max())
    assert ours[-1].verified_ and list(ours.get_feature_names_out()) == ["pca0", "pca1", "pca2"]


def test_a_wrong_answer_raises_verification_failed(in_process_client, low_rank, monkeypatch):
    """Each block's Gram matrix 0.1 % off in the run's own task (its certificates as computed):
    the fit raises at both depths, names what disagreed, and keeps no fitted attribute;
    verify="off" says that it did not check."""
    original = pca_blocks.gram_summary

    def off(*args, **kwargs):
        (rows, mean, scatter, squares), certificate = original(*args, **kwargs)
        return (rows, mean, scatter * 1.001, squares), certificate

    monkeypatch.setattr(pca_blocks, "gram_summary", off)
    model = PCA(3, svd_solver="covariance_eigh")
    for verify in ("fast", "full"):
        with pytest.raises(VerificationFailed, match="PCA.fit: the result did not verify") as e:
            model.set_params(verify=verify).fit(low_rank, session=in_process_client)
        assert "Gram matrix" in str(e.value) and e.value.result.verified is False
        assert not hasattr(model, "components_")
    unchecked = PCA(3, svd_solver="covariance_eigh", verify="off").fit(
        low_rank, session=in_process_client)
    assert unchecked.verified_ is None and "not verified" in unchecked.verification_
    expected = SkPCA(3, svd_solver="covariance_eigh").fit(low_rank)
    assert _relative(unchecked.explained_variance_, expected.explained_variance_) > 1e-4


@pytest.mark.parametrize(("params", "x", "error", "message"), [
    ({"svd_solver": "arpack"}, None, ParameterError, "'covariance_eigh', 'full', 'randomized'"),
    ({"n_components": 11}, None, ParameterError, "min\\(n_samples, n_features\\) is 10"),
    ({"n_components": 0}, None, ParameterError, "an int from 1 to 10"),
    ({"n_components": "mle"}, None, ParameterError, "or a float in \\(0, 1\\)"),
    ({"n_components": 0.5, "svd_solver": "randomized"}, None, ParameterError,
     "give an int with svd_solver='randomized'"),
    ({"svd_solver": "randomized", "iterated_power": -1}, None, ParameterError,
     "non-negative int or 'auto'"),
    ({"verify": "deep"}, None, ParameterError, "choose one of"),
    ({}, np.ones(20), InputFileError, "a matrix of samples x features"),
    ({}, np.ones((20, 3), dtype=np.int32), InputFileError, "astype\\('float64'\\)"),
])
def test_what_it_cannot_do_is_refused_in_one_line_before_computing(monkeypatch, low_rank, params,
                                                                   x, error, message):
    def ran(*args, **kwargs):
        raise AssertionError("a fit ran")

    monkeypatch.setattr(ml_pca, "fitted", ran)
    with pytest.raises(error, match=message) as caught:
        PCA(**params).fit(low_rank if x is None else x)
    assert isinstance(caught.value, ValueError) and "\n" not in str(caught.value)


def test_transforming_the_wrong_columns_is_refused_in_one_line(cpu_client, low_rank):
    ours = PCA(2).fit(low_rank, session=cpu_client)
    for x in (low_rank[:, :4], da.from_array(low_rank[:, :4])):
        with pytest.raises(ParameterError, match="a matrix of 10 columns \\(n_features_in_\\)"):
            ours.transform(x)
    with pytest.raises(ParameterError, match="a matrix of 2 columns \\(n_components_\\)"):
        ours.inverse_transform(low_rank)


def test_the_benchmarks_small_twin_compares_the_answers_before_a_ratio(cpu_client, capsys,
                                                                     monkeypatch):
    from benchmarks import ml_pca as bench

    measured = bench.measure(bench.Config.small(), session=cpu_client)
    shown = capsys.readouterr().out
    assert measured.compared == bench.COMPARED and "answers agree" in shown
    assert measured.ratio > 0 and measured.held_ratio > 0 and 0 < measured.verify_share < 1
    assert len(measured.ours_s) == len(measured.held_s) == len(measured.theirs_s) == 1
    original = bench.sklearn_fit

    def off(x, config):
        seconds, fitted = original(x, config)
        fitted.explained_variance_ = fitted.explained_variance_ * 1.001
        return seconds, fitted

    monkeypatch.setattr(bench, "sklearn_fit", off)
    with pytest.raises(bench.Disagreement, match="explained_variance_"):
        bench.measure(bench.Config.small(), session=cpu_client)
    assert "ratio" not in capsys.readouterr().out
