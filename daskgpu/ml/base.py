"""What daskgpu's estimators share: where a fit computes, how it runs and is verified.

An estimator's ``fit`` runs one of daskgpu's pipelines on the data given (a NumPy, CuPy or
Dask array: the pipelines' ``input=``) through :func:`fitted`, which

- computes on the session given (``fit(X, session=...)``), else the current one (inside
  ``with daskgpu.cluster() as session:``, or a distributed client made current), else on a
  local cluster started for this fit and closed after it (CPU workers, or every GPU where
  there are GPUs);
- checks the answer at the estimator's ``verify`` depth (``"fast"`` by default; ``"full"``;
  ``"off"``) and raises :class:`~daskgpu.errors.VerificationFailed` where it did not verify;
- returns the :class:`~daskgpu.RunResult`, whose ``verified`` the estimator keeps as
  ``verified_`` (None with ``verify="off"``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from daskgpu.errors import ParameterError, VerificationFailed
from daskgpu.verification import depths


@contextlib.contextmanager
def session_for(session=None) -> Iterator:
    """The session a fit computes on: ``session``, the current one, or one started for it."""
    if session is not None:
        yield session
        return
    from daskgpu.clusters import session as sessions
    from daskgpu.errors import ClusterError

    try:
        yield sessions.current()
        return
    except ClusterError:
        pass
    import daskgpu

    with daskgpu.cluster(dashboard=False) as started:
        yield started


def fitted(estimator, pipeline: str, session=None, keep: bool = True, **params):
    """Run ``pipeline`` with ``params`` for ``estimator``'s fit; verified at its ``verify``.

    ``keep``: whether the run keeps its input-sized results on the workers
    (:func:`daskgpu.run`'s ``keep``), for a fit that uses them (labels, a projection).

    Returns
    -------
    RunResult
        Of a run whose answer verified (or was not checked: ``verify="off"``).

    Raises
    ------
    ParameterError
        A ``verify`` other than fast, full or off.
    VerificationFailed
        The answer did not check out; the message says what disagreed.
    """
    import daskgpu

    verify = checked_depth(estimator.verify)
    with session_for(session) as chosen:
        result = daskgpu.run(pipeline, chosen, verify=verify, keep=keep, **params)
    if result.verified is False:
        error = VerificationFailed(f"{type(estimator).__name__}.fit: the result did not "
                                   f"verify ({pipeline}, --verify {verify}): "
                                   f"{result.verification}")
        error.result = result
        raise error
    return result


def checked_depth(verify) -> str:
    """``verify`` if it is fast, full or off; else one line saying so."""
    if verify not in depths.DEPTHS:
        raise ParameterError(f"verify={verify!r}: choose one of {', '.join(depths.DEPTHS)}")
    return verify


def seed_of(random_state) -> int | None:
    """A pipeline's seed from scikit-learn's ``random_state`` (None, an int, a Generator).

    None draws a fresh seed (the run reports it); a ``RandomState`` or ``Generator`` gives one.
    """
    if random_state is None:
        return None
    if isinstance(random_state, (int, np.integer)):
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**62))
    raise ParameterError(f"random_state={random_state!r}: give None, an int, a "
                         "numpy.random.RandomState or a numpy.random.Generator")


# --------------------------------------------------------------------------- arrays a fit uses


def is_dask(x) -> bool:
    """Whether ``x`` is a Dask array (its results stay lazy Dask arrays)."""
    import dask.array as da

    return isinstance(x, da.Array)


def namespace(x):
    """The array library of ``x``'s blocks: NumPy or CuPy."""
    import importlib

    from daskgpu.data import memory_input

    return importlib.import_module(memory_input.library(x))


def float_type(x, dtypes=("float32", "float64")) -> np.dtype:
    """``x``'s float type where it is one of ``dtypes``; else float64."""
    return np.dtype(x.dtype) if np.dtype(x.dtype).name in dtypes else np.dtype(np.float64)


def matrix(X, columns: int, where: str, attribute: str = "n_features_in_"):
    """``X`` as a 2-D array of ``columns`` columns (a Dask array's in one block), or one line.

    ``where`` names the call (``"KMeans.predict"``), ``attribute`` where ``columns`` is from.

    Raises
    ------
    ParameterError
        Not a matrix of ``columns`` columns, named by type, dtype and shape.
    """
    from daskgpu.data import memory_input

    if not memory_input.is_array(X):
        X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] != columns:
        raise ParameterError(f"{where}: X {memory_input.label(X)}; a matrix of {columns} "
                             f"columns ({attribute}) is needed")
    if is_dask(X) and X.numblocks[1] > 1:
        X = X.rechunk({1: -1})
    return X


def outlives_fit(session) -> bool:
    """Whether the session a fit computes on outlives it: given, or current (not started).

    What a run keeps on the workers of a cluster started for one fit goes when it closes.
    """
    if session is not None:
        return True
    from daskgpu.clusters import session as sessions
    from daskgpu.errors import ClusterError

    try:
        sessions.current()
    except ClusterError:
        return False
    return True


def kept_result(kept, X, session, lasting: bool):
    """What a run kept on the workers (a Dask array), of ``X``'s kind.

    For a Dask ``X`` the array itself, where the session outlives the fit (``lasting``); else
    computed on ``session`` (the blocks moved to host memory on the workers) as NumPy, wrapped
    as a Dask array in the blocks kept for a Dask ``X``.
    """
    import dask.array as da

    from daskgpu.toolkit.backends import to_host

    if is_dask(X) and lasting:
        return kept
    values = kept.map_blocks(to_host, dtype=kept.dtype).compute(
        scheduler=getattr(session, "client", session))
    return da.from_array(values, chunks=kept.chunks) if is_dask(X) else values
