"""k-means clustering with scikit-learn's conventions, fitted by kmeans-pipeline.

>>> from daskgpu.ml import KMeans  # doctest: +SKIP
>>> model = KMeans(n_clusters=8, random_state=0).fit(X)  # doctest: +SKIP
>>> model.cluster_centers_.shape, model.verified_  # doctest: +SKIP
((8, 32), True)
>>> labels = model.predict(X)  # doctest: +SKIP

``X`` is a NumPy, CuPy or Dask array; ``predict`` gives a NumPy array, or a lazy Dask array for
a Dask ``X``. ``labels_`` are the fit's own: the labels the run kept on the workers (its pass
after the last iteration, verified with the fit), gathered as NumPy for a NumPy or CuPy ``X``,
the Dask array on the workers itself for a Dask ``X``.

``fit`` runs kmeans-pipeline on ``X`` (``input=X``: an array in memory, sent to the workers
once, a Dask array used as its own graph, never gathered) where :mod:`daskgpu.ml.base` says,
and checks its answer at ``verify``'s depth: a wrong answer raises
:class:`~daskgpu.errors.VerificationFailed`. What differs from ``sklearn.cluster.KMeans``:

- ``init="k-means++"`` (the default, as scikit-learn's) runs the pipeline's k-means||, the
  scalable k-means++ of Bahmani et al. (2012): a seeded point, five rounds sampling about
  ``2 k`` points each in proportion to their squared distance to the candidates so far, the
  candidates weighted by the points nearest each and reduced to ``k`` by greedy k-means++
  (``2 + log k`` trials a centre, as scikit-learn's) and weighted Lloyd, best of five. It is
  not scikit-learn's sequential k-means++, which makes ``k`` passes over the data; on
  well-separated clusters both seed every cluster. ``"k-means||"`` names it plainly;
  ``"random"`` starts from ``n_clusters`` seeded points of the data. Initial centroids given
  as an array are not supported.
- ``tol`` is scikit-learn's: relative to the mean feature variance of ``X``, compared with the
  sum over centroids of their squared shift in an iteration. The pipeline stops once no
  centroid moves further than its ``tol`` (a Euclidean distance), so it is given
  ``sqrt(tol * mean(var(X, axis=0)) / n_clusters)``: where it stops, the squared shifts sum
  to at most scikit-learn's bound, so it never stops before scikit-learn would (it may run a
  few more iterations). The variance is one more pass over ``X`` (as scikit-learn's); ``tol=0``
  skips it and runs until no centroid moves, or ``max_iter``.
- Points with a NaN or infinite coordinate are left out of every sum (scikit-learn refuses
  them); their label is -1.
- ``cluster_centers_`` is float64 whatever ``X``'s type (the pipeline's centroids).
"""

from __future__ import annotations

import numbers
from contextlib import nullcontext

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
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

# scikit-learn's init -> kmeans-pipeline's --init.
INITS = {"k-means++": "k-means||", "k-means||": "k-means||", "random": "random"}
DTYPES = ("float32", "float64")
NO_LABEL = -1  # a point with a NaN or infinite coordinate, as kmeans-pipeline's --labels
DISTANCES = 1 << 22  # distances (points x centroids, float64) computed at once


class KMeans(ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin, BaseEstimator):
    """k-means clustering (Lloyd's iterations), verified on every ``fit``.

    Parameters
    ----------
    n_clusters : int, default 8
        Centroids to find.
    init : {"k-means++", "k-means||", "random"}, default "k-means++"
        The initialisation: "k-means++" and "k-means||" both run k-means|| (the scalable
        k-means++, see the module's notes); "random" takes ``n_clusters`` seeded points.
    n_init : int or "auto", default "auto"
        Seeded fits run; the one of least inertia is kept. "auto" is scikit-learn's rule: 1
        for "k-means++" and "k-means||", 10 for "random".
    max_iter : int, default 300
        Most Lloyd iterations of one fit.
    tol : float, default 1e-4
        scikit-learn's relative tolerance (see the module's notes for what the pipeline runs).
    random_state : None, int, RandomState or Generator, default None
        Seeds the initialisation (None: a fresh seed each fit, kept as ``seed_``); with
        ``n_init`` > 1 the first fit takes this seed, the others seeds derived from it.
    verify : {"fast", "full", "off"}, default "fast"
        How deeply each fit's answer is checked (``"off"``: not at all, ``verified_`` None).

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features), float64
        The centroids; row ``j`` is the one ``labels_`` calls ``j``.
    labels_ : ndarray or dask.array.Array of shape (n_samples,), int32
        Each point's nearest centroid (-1 for a point with a NaN or infinite coordinate), as
        the fit's run labelled and verified them: a NumPy array for a NumPy (or CuPy) ``X``;
        for a Dask ``X`` the run's Dask array, its blocks kept on the session's workers (held
        in this process instead where ``fit`` started a cluster of its own, closed after it).
    inertia_ : float
        Sum of squared distances of the points to their nearest centroid (as the run
        computed it, and its check recomputed).
    n_iter_ : int
        Lloyd iterations of the fit kept.
    n_features_in_ : int
        Features of ``X``.
    verified_ : bool or None
        Whether the fit's answer verified (True; a wrong one raised); None with ``verify="off"``.
    verification_ : str
        What the check established, in one line.
    seed_ : int
        The seed of the fit kept (drawn where ``random_state`` is None).
    result_ : daskgpu.RunResult
        The kept fit's run: its timings (``result_.timings["verify_s"]``), data and params.
    """

    def __init__(self, n_clusters=8, *, init="k-means++", n_init="auto", max_iter=300,
                 tol=1e-4, random_state=None, verify="fast"):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.verify = verify

    # ----------------------------------------------------------------------- fit

    def fit(self, X, y=None, session=None):
        """Cluster ``X`` with kmeans-pipeline, ``n_init`` times; keep the least inertia.

        Parameters
        ----------
        X : NumPy, CuPy or Dask array of shape (n_samples, n_features), float32 or float64
            The points (rows); a Dask array is used as its graph, never gathered here.
        y : ignored
            Present for scikit-learn's pipelines.
        session : daskgpu Session or distributed Client, optional
            Where to compute (default: see :mod:`daskgpu.ml.base`); every fit of ``n_init``
            runs there.

        Returns
        -------
        KMeans
            The fitted estimator.

        Raises
        ------
        ParameterError
            A parameter out of range, or one the pipeline cannot do, in one line.
        InputFileError, InputTypeError
            ``X`` is not a 2-D float array in memory.
        VerificationFailed
            A fit's answer did not check out.
        """
        from daskgpu.data import array_input

        init, runs, tol = self._init(), self._runs(), self._tol()
        checked_depth(self.verify)
        source = array_input.open_matrix(X, "X", DTYPES, "samples x features")
        samples, features = source.shape
        k, max_iter = self._counts(samples)
        seeds = _seeds(seed_of(self.random_state), runs)
        best, lasting = None, outlives_fit(session)
        with session_for(session) as chosen:
            tol = pipeline_tol(tol, X, chosen, k)
            for seed in seeds:
                given = {} if seed is None else {"seed": seed}
                result = fitted(self, "kmeans-pipeline", chosen, input=X, k=k,
                                max_iter=max_iter, tol=tol, init=init, **given)
                if best is None or result.value["inertia"] < best.value["inertia"]:
                    best = result
            self._keep(best, features)
            self.labels_ = kept_result(best.value["labels"], X, chosen, lasting)
        return self

    def fit_predict(self, X, y=None, session=None):
        """Fit on ``X`` (:meth:`fit`) and give ``labels_``.

        Returns
        -------
        array of shape (n_samples,)
            ``labels_``: NumPy, or a lazy Dask array for a Dask ``X``.
        """
        return self.fit(X, session=session).labels_

    def fit_transform(self, X, y=None, session=None):
        """Fit on ``X`` (:meth:`fit`), then its distances to the centroids (:meth:`transform`).

        Returns
        -------
        array of shape (n_samples, n_clusters)
            Of ``X``'s kind: lazy for a Dask ``X``.
        """
        return self.fit(X, session=session).transform(X)

    def _init(self) -> str:
        if not isinstance(self.init, str) or self.init not in INITS:
            shown = repr(self.init) if isinstance(self.init, str) else (
                f"<{type(self.init).__name__}>")
            raise ParameterError(f"init={shown}: daskgpu's KMeans starts from "
                                 f"{', '.join(map(repr, INITS))} (initial centroids given as "
                                 "an array are not supported)")
        return INITS[self.init]

    def _runs(self) -> int:
        if self.n_init == "auto":
            return 10 if self.init == "random" else 1
        if isinstance(self.n_init, numbers.Integral) and not isinstance(self.n_init, bool) \
                and self.n_init >= 1:
            return int(self.n_init)
        raise ParameterError(f"n_init={self.n_init!r}: give an int of 1 or more, or 'auto'")

    def _counts(self, samples: int) -> tuple[int, int]:
        """``n_clusters`` and ``max_iter`` checked, in scikit-learn's names."""
        for name, most in (("n_clusters", samples), ("max_iter", None)):
            value = getattr(self, name)
            if (not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1
                    or (most is not None and value > most)):
                upto = f" and at most n_samples = {most}" if most is not None else ""
                raise ParameterError(f"{name}={value!r}: give an int of 1 or more{upto}")
        return int(self.n_clusters), int(self.max_iter)

    def _tol(self) -> float:
        tol = self.tol
        if (not isinstance(tol, numbers.Real) or isinstance(tol, bool) or not np.isfinite(tol)
                or tol < 0):
            raise ParameterError(f"tol={tol!r}: give a finite number of 0 or more")
        return float(tol)

    def _keep(self, result, features: int) -> None:
        """The fit's attributes from the verified run kept."""
        value = result.value
        self.cluster_centers_ = np.array(value["centroids"], dtype=np.float64)
        self.inertia_ = float(value["inertia"])
        self.n_iter_ = int(value["iterations"])
        self.n_features_in_ = features
        self.verified_ = result.verified
        self.verification_ = result.verification
        self.seed_ = int(result.params["seed"])
        self.result_ = result

    # ----------------------------------------------------------------------- use

    @property
    def _n_features_out(self) -> int:
        return self.cluster_centers_.shape[0]

    def predict(self, X):
        """Each point's nearest centroid (the lowest index on a tie; -1: no finite distance).

        Parameters
        ----------
        X : NumPy, CuPy or Dask array of shape (n_samples, n_features)
            Points with the features fitted.

        Returns
        -------
        array of shape (n_samples,), int32
            Of ``X``'s kind: a Dask array stays lazy (one task per block of rows).
        """
        check_is_fitted(self)
        X = matrix(X, self.n_features_in_, "KMeans.predict")
        if is_dask(X):
            return X.map_blocks(nearest, self.cluster_centers_, dtype=np.int32, drop_axis=1)
        return nearest(X, self.cluster_centers_)

    def transform(self, X):
        """The Euclidean distance of every point to every centroid.

        Parameters
        ----------
        X : NumPy, CuPy or Dask array of shape (n_samples, n_features)
            Points with the features fitted.

        Returns
        -------
        array of shape (n_samples, n_clusters)
            In ``X``'s float type, of ``X``'s kind: a Dask array stays lazy.
        """
        check_is_fitted(self)
        X = matrix(X, self.n_features_in_, "KMeans.transform")
        if is_dask(X):
            return X.map_blocks(distances, self.cluster_centers_, dtype=float_type(X),
                                chunks=(X.chunks[0], (len(self.cluster_centers_),)))
        return distances(X, self.cluster_centers_)

    def score(self, X, y=None):
        """Minus the inertia of ``X`` at the centroids (scikit-learn's: higher is better).

        Parameters
        ----------
        X : NumPy, CuPy or Dask array of shape (n_samples, n_features)
            Points with the features fitted (a Dask array is computed on the scheduler in
            use); points with a NaN or infinite coordinate count nothing.
        y : ignored
            Present for scikit-learn's pipelines.

        Returns
        -------
        float
            ``-sum(min_j |x - c_j|^2)``.
        """
        check_is_fitted(self)
        X = matrix(X, self.n_features_in_, "KMeans.score")
        if is_dask(X):
            import dask

            parts = X.map_blocks(_block_inertia, self.cluster_centers_, dtype=np.float64,
                                 drop_axis=1, chunks=((1,) * X.numblocks[0],))
            return -float(dask.compute(parts.sum())[0])
        return -float(_block_inertia(X, self.cluster_centers_)[0])


# --------------------------------------------------------------------------- helpers






def _seeds(seed: int | None, runs: int) -> list:
    """The seed of each of ``runs`` fits: ``seed`` first, then seeds derived from it.

    >>> _seeds(None, 2), _seeds(4, 1)
    ([None, None], [4])
    """
    if seed is None:
        return [None] * runs
    derived = [int(np.random.SeedSequence(seed, spawn_key=(i,)).generate_state(1, np.uint64)[0]
                   % 2**62) for i in range(1, runs)]
    return [seed, *derived]


def pipeline_tol(tol: float, X, session, k: int) -> float:
    """kmeans-pipeline's ``tol`` (the largest shift of a centroid) for scikit-learn's ``tol``.

    ``sqrt(tol * mean_variance(X) / k)``: a shift of each of ``k`` centroids within it keeps
    their squared shifts' sum within scikit-learn's ``tol * mean_variance(X)``. ``tol=0``: 0,
    without the pass over ``X``.
    """
    if tol == 0:
        return 0.0
    return float(np.sqrt(tol * mean_variance(X, session) / k))


def mean_variance(X, session=None) -> float:
    """The mean over features of the variance of ``X``'s finite rows, in float64.

    Block by block (a Dask array's blocks computed on ``session``'s client, only their sums
    coming back), the blocks' counts, means and squared deviations combined (Chan et al.).
    """
    if not is_dask(X):
        step = max(1, DISTANCES // max(1, X.shape[1]))
        parts = [_moments(X[first:first + step]) for first in range(0, X.shape[0], step)]
    else:
        import dask

        X = X.rechunk({1: -1}) if X.numblocks[1] > 1 else X
        tasks = [dask.delayed(_moments, pure=True)(block) for block in X.to_delayed().ravel()]
        client = getattr(session, "client", session)
        with dask.config.set(scheduler=client) if client is not None else nullcontext():
            parts = list(dask.compute(*tasks))
    count, mean, squares = parts[0]
    for n, m, s in parts[1:]:
        if n:
            total = count + n
            delta = m - mean
            mean = mean + delta * (n / total)
            squares = squares + s + delta ** 2 * (count * n / total)
            count = total
    return float((squares / count).mean()) if count else 0.0


def _moments(block) -> tuple:
    """Count, mean and sum of squared deviations (per feature) of a block's finite rows."""
    xp = namespace(block)
    x = block.astype(np.float64)
    x = x[xp.isfinite(x).all(axis=1)]
    if not x.shape[0]:
        return 0, np.zeros(block.shape[1]), np.zeros(block.shape[1])
    mean = x.mean(axis=0)
    squares = ((x - mean) ** 2).sum(axis=0)
    return int(x.shape[0]), _host(mean), _host(squares)


def _host(a) -> np.ndarray:
    return np.asarray(a.get() if hasattr(a, "get") else a, dtype=np.float64)


def _squared(block, centroids) -> tuple:
    """Per slab of rows: the squared distances (float64, >= 0) and whether each row is finite."""
    xp = namespace(block)
    c = xp.asarray(np.asarray(centroids, dtype=np.float64))
    c_norm2 = (c * c).sum(axis=1)
    step = max(1, DISTANCES // max(1, c.shape[0], block.shape[1]))
    for first in range(0, block.shape[0], step):
        x = block[first:first + step].astype(np.float64)
        finite = xp.isfinite(x).all(axis=1)
        x = xp.where(finite[:, None], x, 0.0)
        dist = xp.maximum((x * x).sum(axis=1)[:, None] - 2 * (x @ c.T) + c_norm2[None], 0.0)
        yield first, dist, finite


def nearest(block, centroids):
    """Each row's nearest centroid, int32 (-1 for a row with a NaN or infinite coordinate).

    In the block's array library (NumPy or CuPy), in float64, a slab of rows at a time: the
    least ``|c|^2 - 2 x.c`` (``|x|^2`` is the same for every centroid of a row; the lowest
    index on a tie). A row with a NaN or infinite coordinate has no finite ``x.c``.
    """
    xp = namespace(block)
    c = xp.asarray(np.asarray(centroids, dtype=np.float64))
    c_norm2 = (c * c).sum(axis=1)
    out = xp.empty(block.shape[0], dtype=np.int32)
    step = max(1, DISTANCES // max(1, c.shape[0], block.shape[1]))
    for first in range(0, block.shape[0], step):
        products = block[first:first + step].astype(np.float64) @ c.T
        labels = xp.argmin(c_norm2[None] - 2 * products, axis=1).astype(np.int32)
        finite = xp.isfinite(products).all(axis=1)
        out[first:first + step] = xp.where(finite, labels, np.int32(NO_LABEL))
    return out


def distances(block, centroids):
    """Each row's Euclidean distance to each centroid, in the block's float type."""
    xp = namespace(block)
    out = xp.empty((block.shape[0], len(centroids)), dtype=float_type(block))
    for first, dist, finite in _squared(block, centroids):
        dist = xp.where(finite[:, None], xp.sqrt(dist), np.nan)
        out[first:first + dist.shape[0]] = dist
    return out


def _block_inertia(block, centroids) -> np.ndarray:
    """A block's inertia at ``centroids`` (its finite rows'), as a one-element float64 array."""
    total = 0.0
    for _first, dist, finite in _squared(block, centroids):
        total += float(_host(dist.min(axis=1)[finite].sum()))
    return np.array([total])







