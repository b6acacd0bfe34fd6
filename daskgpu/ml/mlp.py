"""A multi-layer perceptron classifier with scikit-learn's conventions, fitted by train-pipeline.

>>> from daskgpu.ml import MLPClassifier  # doctest: +SKIP
>>> model = MLPClassifier(hidden_layer_sizes=(128,), batch_size=128, random_state=0)
>>> model.fit(X, y).score(X_test, y_test), model.verified_  # doctest: +SKIP
(0.93, True)

``fit`` runs train-pipeline (``input=X``, ``labels=`` the classes' codes: arrays in memory,
sent to the workers once, a Dask array used as its graph, never gathered) for ``max_iter``
epochs of seeded mini-batches (every row once an epoch), where :mod:`daskgpu.ml.base` says,
and checks its answer at ``verify``'s depth: a wrong answer raises
:class:`~daskgpu.errors.VerificationFailed`. What differs from
``sklearn.neural_network.MLPClassifier``:

- The model: at most one hidden layer, of ReLU units (``hidden_layer_sizes=(n,)``), or none
  (``()``: softmax regression); its output is a softmax over every class, two for a binary
  problem too (scikit-learn has one logistic unit there, so ``coefs_[-1]`` has one column).
- No L2 penalty (scikit-learn's ``alpha``, 1e-4 by default): the loss is the mean
  cross-entropy. The hidden layer's weights start Glorot-uniform as scikit-learn's, its biases
  at zero (scikit-learn draws them too); softmax regression starts from zero.
- ``solver="sgd"`` is plain gradient descent at ``learning_rate_init`` (no momentum);
  ``"adam"`` is scikit-learn's Adam (beta_1 0.9, beta_2 0.999, epsilon 1e-8). ``"lbfgs"`` is
  refused.
- Each epoch's batches are a seeded permutation of the rows (train-pipeline's), not
  scikit-learn's shuffle. ``max_iter`` epochs always run: scikit-learn also stops once the
  training loss has not improved by ``tol`` for ``n_iter_no_change`` epochs, which its
  defaults (10) never reach within ``max_iter=5``. ``early_stopping=True`` is refused.
"""

from __future__ import annotations

import numbers
import os
import tempfile

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from daskgpu.errors import InputFileError, ParameterError
from daskgpu.ml.base import (
    checked_depth,
    fitted,
    float_type,
    is_dask,
    matrix,
    namespace,
    seed_of,
    session_for,
)

DTYPES = ("float32", "float64")
SOLVERS = ("adam", "sgd")
ACTIVATIONS = ("identity", "logistic", "tanh", "relu")  # scikit-learn's names
AUTO_BATCH = 200  # batch_size="auto": min(200, n_samples), as scikit-learn's


class MLPClassifier(ClassifierMixin, BaseEstimator):
    """A classifier of at most one ReLU hidden layer, trained by Adam or SGD, verified.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default (128,)
        Units of the hidden layer: one layer (``(n,)``) or none (``()``, softmax regression).
    activation : {"relu"}, default "relu"
        The hidden layer's activation (ReLU only; any of scikit-learn's names without one).
    solver : {"adam", "sgd"}, default "adam"
        The update: Adam (scikit-learn's), or plain gradient descent.
    learning_rate_init : float, default 0.001
        The step size.
    batch_size : int or "auto", default "auto"
        Rows of each mini-batch: "auto" is ``min(200, n_samples)``; larger than ``n_samples``
        is ``n_samples``.
    max_iter : int, default 5
        Epochs: passes over the rows, each in ``ceil(n_samples / batch_size)`` steps.
    early_stopping : bool, default False
        Only False: holding out a validation split and stopping on its score is refused.
    validation_fraction : float, default 0.1
        scikit-learn's share held out with ``early_stopping`` (unused here).
    n_iter_no_change : int, default 10
        scikit-learn's patience in epochs (unused here: ``max_iter`` epochs run).
    tol : float, default 1e-4
        scikit-learn's least improvement (unused here).
    random_state : None, int, RandomState or Generator, default None
        Seeds the initial weights and every epoch's batches (None: a fresh seed each fit,
        kept as ``seed_``).
    verify : {"fast", "full", "off"}, default "fast"
        How deeply each fit's answer is checked (``"off"``: not at all, ``verified_`` None).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels of ``y``, sorted; the model's class ``j`` is ``classes_[j]``.
    coefs_ : list of ndarray
        The weights of each layer, ``(n_in, n_out)`` as scikit-learn lays them out, in ``X``'s
        float type.
    intercepts_ : list of ndarray
        The biases of each layer, ``(n_out,)``.
    loss_curve_ : list of float
        Each epoch's mean training loss: its steps' mini-batch losses, each at the weights
        before its step, weighted by the batch's rows (as scikit-learn's, without a penalty).
    loss_ : float
        The last epoch's, ``loss_curve_[-1]``.
    n_iter_ : int
        Epochs run.
    t_ : int
        Steps run (samples seen, in scikit-learn's, is ``n_iter_ * n_samples``).
    n_features_in_ : int
        Features of ``X``.
    n_layers_ : int
        Layers, input and output counted.
    n_outputs_ : int
        Outputs of the last layer (``n_classes``).
    out_activation_ : str
        "softmax".
    verified_ : bool or None
        Whether the fit's answer verified (True; a wrong one raised); None with ``verify="off"``.
    verification_ : str
        What the check established, in one line.
    seed_ : int
        The fit's seed (drawn where ``random_state`` is None).
    result_ : daskgpu.RunResult
        The fit's run: its timings (``result_.timings["verify_s"]``), data and params.
    """

    def __init__(self, hidden_layer_sizes=(128,), activation="relu", *, solver="adam",
                 learning_rate_init=0.001, batch_size="auto", max_iter=5, early_stopping=False,
                 validation_fraction=0.1, n_iter_no_change=10, tol=1e-4, random_state=None,
                 verify="fast"):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.solver = solver
        self.learning_rate_init = learning_rate_init
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.random_state = random_state
        self.verify = verify

    # ----------------------------------------------------------------------- fit

    def fit(self, X, y, session=None):
        """Train on ``X`` and ``y`` with train-pipeline for ``max_iter`` epochs; verified.

        Parameters
        ----------
        X : NumPy, CuPy or Dask array of shape (n_samples, n_features), float32 or float64
            The rows; a Dask array is used as its graph, never gathered here.
        y : array of shape (n_samples,)
            Their labels, of any kind that sorts (NumPy, CuPy or Dask; a Dask ``y``'s classes
            are computed on the session, its codes lazily).
        session : daskgpu Session or distributed Client, optional
            Where to compute (default: see :mod:`daskgpu.ml.base`).

        Returns
        -------
        MLPClassifier
            The fitted estimator.

        Raises
        ------
        ParameterError
            A parameter out of range, or one the pipeline cannot do, in one line.
        InputFileError, InputTypeError
            ``X`` is not a 2-D float array in memory, or ``y`` not one label per row.
        VerificationFailed
            The fit's answer did not check out.
        """
        from daskgpu.data import array_input

        hidden, solver, rate, epochs = self._model()
        checked_depth(self.verify)
        source = array_input.open_matrix(X, "X", DTYPES, "samples x features")
        samples, features = source.shape
        batch = self._batch(samples)
        with session_for(session) as chosen, tempfile.TemporaryDirectory(
                prefix="daskgpu-mlp-") as folder:
            classes, codes = encoded(y, samples, chosen)
            given = {} if (seed := seed_of(self.random_state)) is None else {"seed": seed}
            path = os.path.join(folder, "weights.npz")
            result = fitted(self, "train-pipeline", chosen, input=X, labels=codes,
                            classes=max(2, len(classes)), hidden=hidden, optimizer=solver,
                            learning_rate=rate, epochs=epochs, batch_size=batch,
                            validation_fraction=0, output=path, **given)
            with np.load(path) as stored:
                weights = {name: np.array(stored[name]) for name in stored.files}
        self._keep(result, weights, classes, features, samples, batch)
        return self

    def _model(self) -> tuple:
        """The pipeline's hidden width, optimizer, rate and epochs, each checked."""
        sizes = self.hidden_layer_sizes
        sizes = list(sizes) if hasattr(sizes, "__iter__") else [sizes]
        if len(sizes) > 1 or not all(_positive_int(n) for n in sizes):
            raise ParameterError(f"hidden_layer_sizes={self.hidden_layer_sizes!r}: daskgpu's "
                                 "MLPClassifier has one hidden layer of ReLU units, (n,), or "
                                 "none, ()")
        if self.activation not in (("relu",) if sizes else ACTIVATIONS):
            raise ParameterError(f"activation={self.activation!r}: the hidden layer is ReLU; "
                                 "give activation='relu'")
        if self.solver not in SOLVERS:
            raise ParameterError(f"solver={self.solver!r}: choose 'adam' or 'sgd' (plain "
                                 "gradient descent)")
        rate = self.learning_rate_init
        if not isinstance(rate, numbers.Real) or isinstance(rate, bool) or not (
                np.isfinite(rate) and rate > 0):
            raise ParameterError(f"learning_rate_init={rate!r}: give a positive number")
        if not _positive_int(self.max_iter):
            raise ParameterError(f"max_iter={self.max_iter!r}: give an int of 1 or more (epochs)")
        if self.early_stopping:
            raise ParameterError("early_stopping=True: not supported (no validation split is "
                                 "held out); give early_stopping=False and max_iter epochs")
        return (int(sizes[0]) if sizes else None, self.solver, float(rate), int(self.max_iter))

    def _batch(self, samples: int) -> int:
        if self.batch_size == "auto":
            return min(AUTO_BATCH, samples)
        if not _positive_int(self.batch_size):
            raise ParameterError(f"batch_size={self.batch_size!r}: give an int of 1 or more, "
                                 "or 'auto'")
        return min(int(self.batch_size), samples)

    def _keep(self, result, weights: dict, classes, features: int, samples: int,
              batch: int) -> None:
        """The fit's attributes from its verified run and the weights it wrote."""
        names = ("W", "b") if "W" in weights else ("W1", "b1", "W2", "b2")
        self.coefs_ = [weights[n] for n in names[::2]]
        self.intercepts_ = [weights[n] for n in names[1::2]]
        self.classes_ = classes
        self.loss_curve_ = epoch_losses(result.value["losses"], samples, batch)
        self.loss_ = self.loss_curve_[-1]
        self.n_iter_ = len(self.loss_curve_)
        self.t_ = len(result.value["losses"]) - 1
        self.n_features_in_ = features
        self.n_layers_ = len(self.coefs_) + 1
        self.n_outputs_ = self.coefs_[-1].shape[1]
        self.out_activation_ = "softmax"
        self.verified_ = result.verified
        self.verification_ = result.verification
        self.seed_ = int(result.params["seed"])
        self.result_ = result

    # ----------------------------------------------------------------------- use

    def predict_proba(self, X):
        """Each row's probability of each class (``classes_``' order).

        Parameters
        ----------
        X : NumPy, CuPy or Dask array of shape (n_samples, n_features)
            Rows with the features fitted.

        Returns
        -------
        array of shape (n_samples, n_classes)
            In ``X``'s float type, of ``X``'s kind: a Dask array stays lazy (one task per
            block of rows).
        """
        check_is_fitted(self)
        X = matrix(X, self.n_features_in_, "MLPClassifier.predict_proba")
        model = (self.coefs_, self.intercepts_)
        if is_dask(X):
            return X.map_blocks(probabilities, *model, dtype=float_type(X),
                                chunks=(X.chunks[0], (self.n_outputs_,)))
        return probabilities(X, *model)

    def predict(self, X):
        """Each row's most probable class (the first on a tie).

        Parameters
        ----------
        X : NumPy, CuPy or Dask array of shape (n_samples, n_features)
            Rows with the features fitted.

        Returns
        -------
        array of shape (n_samples,)
            Labels of ``classes_``, of ``X``'s kind: a Dask array stays lazy.
        """
        check_is_fitted(self)
        X = matrix(X, self.n_features_in_, "MLPClassifier.predict")
        model = (self.coefs_, self.intercepts_, self.classes_)
        if is_dask(X):
            return X.map_blocks(predicted, *model, dtype=self.classes_.dtype, drop_axis=1)
        return predicted(X, *model)

    def score(self, X, y, sample_weight=None):
        """The share of rows whose predicted class is their label (accuracy).

        Parameters
        ----------
        X : NumPy, CuPy or Dask array of shape (n_samples, n_features)
            Rows with the features fitted (a Dask array is computed on the scheduler in use).
        y : array of shape (n_samples,)
            Their labels.
        sample_weight : array of shape (n_samples,), optional
            Weights of the rows (NumPy ``X`` only, as scikit-learn's ``accuracy_score``).

        Returns
        -------
        float
            The accuracy.
        """
        guessed = self.predict(X)
        if is_dask(guessed):
            import dask

            return float(dask.compute((guessed == y).mean())[0])
        return super().score(X, y, sample_weight)


# --------------------------------------------------------------------------- helpers


def _positive_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1










def probabilities(block, coefs, intercepts):
    """The softmax of the model's logits for a block of rows, in its float type."""
    xp = namespace(block)
    dtype = float_type(block)
    h = block.astype(dtype, copy=False)
    for i, (w, b) in enumerate(zip(coefs, intercepts, strict=True)):
        h = h @ xp.asarray(w, dtype=dtype) + xp.asarray(b, dtype=dtype)
        if i < len(coefs) - 1:
            h = xp.maximum(h, 0)
    h = h - h.max(axis=1, keepdims=True)
    e = xp.exp(h)
    return e / e.sum(axis=1, keepdims=True)


def predicted(block, coefs, intercepts, classes):
    """The most probable class of each row of a block, as a label of ``classes``."""
    xp = namespace(block)
    best = xp.argmax(probabilities(block, coefs, intercepts), axis=1)
    best = best.get() if hasattr(best, "get") else best
    return np.asarray(classes)[best]


def encoded(y, samples: int, session=None) -> tuple:
    """``y``'s classes (sorted, NumPy) and each row's class code, int64.

    A Dask ``y``: its classes computed (small) on ``session``, its codes a lazy Dask array.

    Raises
    ------
    InputFileError
        Not one label per row of ``X``, or a single class.
    """
    if not hasattr(y, "shape") or not hasattr(y, "dtype"):
        y = np.asarray(y)
    if len(y.shape) == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if len(y.shape) != 1 or y.shape[0] != samples:
        raise InputFileError(f"y of shape {tuple(y.shape)}: one label per row of X "
                             f"({samples},) is needed")
    if is_dask(y):
        import dask
        import dask.array as da

        client = getattr(session, "client", session)
        with dask.config.set(scheduler=client) if client is not None else _nothing():
            classes = np.asarray(da.unique(y).compute())
        codes = y.map_blocks(_codes, classes, dtype=np.int64)
    else:
        y = y.get() if hasattr(y, "get") else np.asarray(y)
        classes, codes = np.unique(y, return_inverse=True)
        codes = codes.astype(np.int64).reshape(-1)
    if len(classes) < 2:
        raise InputFileError(f"y holds a single class ({classes[0]!r}); at least 2 are needed")
    return classes, codes


def _codes(block, classes):
    return np.searchsorted(classes, np.asarray(block)).astype(np.int64)


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def epoch_losses(losses, samples: int, batch: int) -> list[float]:
    """Each epoch's mean training loss from train-pipeline's per-step losses.

    ``losses``: every step's mini-batch mean loss and, last, the final pass's; the steps of an
    epoch read ``batch`` rows each but the last (the rest), so each is weighted by its rows.

    >>> epoch_losses([1.0, 0.5, 0.8, 0.4, 0.3], 3, 2)
    [0.8333333333333334, 0.5333333333333333]
    """
    per_epoch = -(-samples // batch)
    rows = np.array([batch] * (per_epoch - 1) + [samples - (per_epoch - 1) * batch])
    steps = np.asarray(losses[:-1], dtype=np.float64).reshape(-1, per_epoch)
    return [float(v) for v in steps @ rows / samples]
