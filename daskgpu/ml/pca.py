"""Principal component analysis with scikit-learn's conventions, fitted by pca-pipeline.

>>> from daskgpu.ml import PCA  # doctest: +SKIP
>>> pca = PCA(n_components=10).fit(X)  # X: NumPy, CuPy or Dask, samples x features
>>> pca.components_.shape, pca.verified_  # doctest: +SKIP
((10, 256), True)
>>> scores = pca.transform(X)  # a NumPy array; a lazy Dask array for a Dask X
>>> scores = PCA(n_components=10).fit_transform(X)  # doctest: +SKIP

``fit`` runs pca-pipeline on ``X`` (``input=X``: an array in memory, sent to the workers once,
a Dask array used as its own graph) where :mod:`daskgpu.ml.base` says, and checks its answer
at ``verify``'s depth: a wrong answer raises :class:`~daskgpu.errors.VerificationFailed`.
``svd_solver`` picks the pipeline's ``method``:

- ``"auto"`` -> ``auto``: the float64 Gram matrix and ``eigh``, or a tall-skinny QR where the
  Gram matrix cannot vouch for a variance to 1e-6 (the squared condition number);
- ``"covariance_eigh"`` -> ``covariance``: the float64 Gram matrix and ``eigh``;
- ``"full"`` -> ``exact``: a tall-skinny QR and the SVD of its R (an exact SVD of the data);
- ``"randomized"`` -> ``randomized``: subspace iteration (``iterated_power`` passes) from a
  seeded basis of ``n_components + 10`` columns (``random_state``), then Rayleigh-Ritz.

scikit-learn's ``"arpack"`` has no counterpart (refused, naming these).

The components' signs are scikit-learn's (``svd_flip`` on the components: each one's entry of
largest magnitude is positive), so results compare with ``sklearn.decomposition.PCA``.

``fit_transform`` takes the projection the fit's run made and verified on the workers
(``value["projection"]``) instead of projecting ``X`` again: gathered as NumPy for a NumPy
``X``, the Dask array on the workers itself for a Dask ``X`` (a CuPy ``X`` is projected on its
device, as :meth:`PCA.transform` does). A ``fit`` alone lets that projection go.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from daskgpu.errors import ParameterError
from daskgpu.ml.base import (
    checked_depth,
    fitted,
    float_type,
    is_dask,
    kept_result,
    matrix,
    namespace,
    outlives_fit,
    seed_of,
    session_for,
)

# scikit-learn's svd_solver -> pca-pipeline's --method.
SOLVERS = {"auto": "auto", "covariance_eigh": "covariance", "full": "exact",
           "randomized": "randomized"}
DTYPES = ("float32", "float64")


class PCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Principal component analysis of a tall-and-skinny array, verified on every ``fit``.

    Parameters
    ----------
    n_components : int, float or None, default None
        Components to keep: an int; None for ``min(n_samples, n_features)``; a float in (0, 1)
        for as many as explain that share of the variance (not with ``"randomized"``).
    svd_solver : {"auto", "covariance_eigh", "full", "randomized"}, default "auto"
        How pca-pipeline computes them (its ``method``; see the module's table).
    whiten : bool, default False
        Scale the projections to unit variance (``transform``), and back
        (``inverse_transform``).
    iterated_power : int or "auto", default "auto"
        Power iterations of ``"randomized"``: "auto" is 7 where ``n_components`` is under a
        tenth of ``min(n_samples, n_features)``, else 4 (scikit-learn's rule).
    random_state : None, int, RandomState or Generator, default None
        The randomized solver's starting basis (None: one from the data's shape); the other
        solvers draw nothing.
    verify : {"fast", "full", "off"}, default "fast"
        How deeply ``fit`` checks its answer (``"off"``: not at all, ``verified_`` is None).

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        The principal axes, by decreasing explained variance.
    explained_variance_, explained_variance_ratio_, singular_values_ : ndarray
        Each component's variance (``samples - 1`` in the denominator), its share of the total
        variance, and the singular value of the centred data.
    mean_ : ndarray of shape (n_features,)
        The column means.
    n_components_, n_samples_, n_features_in_ : int
        Components kept, rows and columns of the data fitted.
    noise_variance_ : float
        The mean variance left out (probabilistic PCA's noise; 0 where none is left out).
    verified_ : bool or None
        Whether the fit's answer verified (True; a wrong one raised); None with ``verify="off"``.
    verification_ : str
        What the check established, in one line.
    method_ : str
        The pipeline's method that computed the fit ("covariance", "exact", "randomized").
    result_ : RunResult
        The fit's pca-pipeline run: its data, timings (``compute_s``, ``verify_s``, ...); its
        value less the projection (which ``fit_transform`` returns).
    """

    def __init__(self, n_components=None, *, svd_solver="auto", whiten=False,
                 iterated_power="auto", random_state=None, verify="fast"):
        self.n_components = n_components
        self.svd_solver = svd_solver
        self.whiten = whiten
        self.iterated_power = iterated_power
        self.random_state = random_state
        self.verify = verify

    # ----------------------------------------------------------------------- fit

    def fit(self, X, y=None, session=None):
        """Fit the components of ``X`` with pca-pipeline, verified at ``verify``.

        Parameters
        ----------
        X : NumPy, CuPy or Dask array of shape (n_samples, n_features), float32 or float64
            The data (rows are samples); a Dask array is used as its graph, never gathered.
            A path (``.npy`` file, Zarr array) is read as pca-pipeline's ``input``.
        y : ignored
            Present for scikit-learn's pipelines.
        session : daskgpu Session or distributed Client, optional
            Where to compute (default: see :mod:`daskgpu.ml.base`).

        Returns
        -------
        PCA
            The fitted estimator.

        Raises
        ------
        ParameterError
            A parameter the pipeline cannot do, in one line naming what works.
        InputFileError, InputTypeError
            ``X`` is not a 2-D float array in memory or a path.
        VerificationFailed
            The answer did not check out.
        """
        self._fitted(X, session)
        return self

    def _fitted(self, X, session, project: bool = False):
        """Fit on ``X``; with ``project``, the run's projection of ``X`` of ``X``'s kind."""
        from daskgpu.data import array_input

        method = self._method()
        checked_depth(self.verify)
        source = array_input.open_matrix(X, "X", DTYPES, "samples x features")
        samples, features = source.shape
        most = min(samples, features)
        asked, fitted_k = self._components(most)
        params = {"components": fitted_k, "method": method}
        if method == "randomized":
            params["power_iters"] = self._power(fitted_k, most)
            seed = seed_of(self.random_state)
            if seed is not None:
                params["seed"] = seed
        lasting = outlives_fit(session)
        with session_for(session) as chosen:
            result = fitted(self, "pca-pipeline", chosen, keep=project, input=X, **params)
            self._keep(result, asked, samples, features)
            kept = result.value.pop("projection", None)  # a fit alone holds none on the workers
            return kept_result(kept, X, chosen, lasting) if project and kept is not None else None

    def fit_transform(self, X, y=None, session=None):
        """Fit on ``X`` (:meth:`fit`) and give its projection, the one the fit's run made.

        As :meth:`transform` would give it (whitened if asked), without projecting ``X``
        again: NumPy for a NumPy ``X`` (or a path), for a Dask ``X`` a Dask array on the
        blocks the run kept on the workers; a CuPy ``X`` is projected on its device.

        Returns
        -------
        array of shape (n_samples, n_components)
            ``X``'s projections, of ``X``'s kind.
        """
        from daskgpu.data import memory_input

        on_device = memory_input.is_array(X) and memory_input.library(X) == "cupy"
        projected = self._fitted(X, session, project=not on_device)
        if projected is None:
            return self.transform(X)
        if projected.shape[1] != self.n_components_:  # a share of the variance: fewer kept
            projected = projected[:, :self.n_components_]
        if self.whiten:
            projected = projected / self._scale().astype(projected.dtype)
        return projected

    def _method(self) -> str:
        if self.svd_solver not in SOLVERS:
            raise ParameterError(f"svd_solver={self.svd_solver!r}: daskgpu's PCA has "
                                 f"{', '.join(map(repr, SOLVERS))}")
        return SOLVERS[self.svd_solver]

    def _components(self, most: int) -> tuple[int | float, int]:
        """``(what is kept: a count, or a share of the variance; components to fit)``."""
        k = self.n_components
        works = f"give an int from 1 to {most}, None, or a float in (0, 1)"
        if k is None:
            return most, most
        if isinstance(k, numbers.Integral) and not isinstance(k, bool):
            if not 1 <= k <= most:
                raise ParameterError(f"n_components={k}: min(n_samples, n_features) is {most}; "
                                     f"{works}")
            return int(k), int(k)
        if isinstance(k, numbers.Real) and not isinstance(k, bool) and 0 < k < 1:
            if self.svd_solver == "randomized":
                raise ParameterError(f"n_components={k}: a share of the variance needs every "
                                     "component; give an int with svd_solver='randomized', "
                                     "or another svd_solver")
            return float(k), most
        raise ParameterError(f"n_components={k!r}: {works}")

    def _power(self, k: int, most: int) -> int:
        power = self.iterated_power
        if power == "auto":
            return 7 if k < 0.1 * most else 4
        if isinstance(power, numbers.Integral) and not isinstance(power, bool) and power >= 0:
            return int(power)
        raise ParameterError(f"iterated_power={power!r}: give a non-negative int or 'auto'")

    def _keep(self, result, asked, samples: int, features: int) -> None:
        """The fit's attributes from the verified run's data."""
        data = result.data
        ratio = np.asarray(data["explained_variance_ratio"], dtype=np.float64)
        if isinstance(asked, float):  # scikit-learn's rule: the first share strictly above
            k = int(np.searchsorted(np.cumsum(ratio), asked, side="right")) + 1
            k = min(k, ratio.size)
        else:
            k = asked
        variance = np.asarray(data["explained_variance"], dtype=np.float64)[:k]
        self.components_ = np.array(data["components"], dtype=np.float64)[:k]
        self.explained_variance_ = variance
        self.explained_variance_ratio_ = ratio[:k]
        self.singular_values_ = np.asarray(data["singular_values"], dtype=np.float64)[:k]
        self.mean_ = np.array(data["mean"], dtype=np.float64)
        self.n_components_, self.n_samples_, self.n_features_in_ = k, samples, features
        left = min(samples, features) - k
        total = float(result.value["total_variance"])
        self.noise_variance_ = max(total - float(variance.sum()), 0.0) / left if left else 0.0
        self.verified_ = result.verified
        self.verification_ = result.verification
        self.method_ = data["method"]
        self.result_ = result

    # ----------------------------------------------------------------------- transforms

    @property
    def _n_features_out(self) -> int:
        return self.components_.shape[0]

    def _scale(self) -> np.ndarray:
        scale = np.sqrt(self.explained_variance_)
        return np.maximum(scale, np.finfo(scale.dtype).eps)

    def transform(self, X):
        """Project ``X`` on the components: ``(X - mean_) @ components_.T`` (whitened if asked).

        Parameters
        ----------
        X : NumPy, CuPy or Dask array of shape (n_samples, n_features)
            Data with the columns fitted.

        Returns
        -------
        array of shape (n_samples, n_components)
            Of ``X``'s kind: a Dask array stays lazy (one task per block of rows).
        """
        check_is_fitted(self)
        X = matrix(X, self.n_features_in_, "PCA.transform", "n_features_in_")
        scale = self._scale() if self.whiten else None
        args = (self.components_, self.mean_, scale)
        if is_dask(X):
            return X.map_blocks(_projected, *args, dtype=float_type(X),
                                chunks=(X.chunks[0], (self.n_components_,)))
        return _projected(X, *args)

    def inverse_transform(self, X):
        """Data back in the features' space: ``X @ components_ + mean_`` (unwhitened if asked).

        Parameters
        ----------
        X : NumPy, CuPy or Dask array of shape (n_samples, n_components)
            Projections, as :meth:`transform` gives them.

        Returns
        -------
        array of shape (n_samples, n_features)
            Of ``X``'s kind: a Dask array stays lazy.
        """
        check_is_fitted(self)
        X = matrix(X, self.n_components_, "PCA.inverse_transform", "n_components_")
        components = self.components_
        if self.whiten:
            components = self._scale()[:, None] * components
        if is_dask(X):
            return X.map_blocks(_restored, components, self.mean_, dtype=float_type(X),
                                chunks=(X.chunks[0], (self.n_features_in_,)))
        return _restored(X, components, self.mean_)


# --------------------------------------------------------------------------- per block










def _projected(block, components, mean, scale=None):
    """``(block - mean) @ components.T`` in the block's library, over ``scale`` if given.

    As scikit-learn forms it: ``block @ components.T - mean @ components.T``, no centred copy.
    """
    xp, dtype = namespace(block), float_type(block)
    c = xp.asarray(components, dtype=dtype)
    out = block.astype(dtype, copy=False) @ c.T
    out -= xp.asarray(mean, dtype=dtype) @ c.T
    if scale is not None:
        out /= xp.asarray(scale, dtype=dtype)
    return out


def _restored(block, components, mean):
    """``block @ components + mean`` in the block's library."""
    xp, dtype = namespace(block), float_type(block)
    return block.astype(dtype, copy=False) @ xp.asarray(components, dtype=dtype) + xp.asarray(
        mean, dtype=dtype)
