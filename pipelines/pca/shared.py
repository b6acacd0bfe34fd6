"""What pca-pipeline and its check (:mod:`pipelines.pca.check`) both use: the data's specification.

Generated data are rows ``x = z diag(sigma) V^T``: ``z`` standard normal, drawn block by block
(``SeedSequence(data_seed, spawn_key=(block_number,))``, the scheme of
:mod:`daskgpu.data.synthetic`), ``sigma`` the known spectrum below and ``V`` a known orthonormal
basis from the run's seed. The population covariance is then ``V diag(sigma**2) V^T``: its principal
components are the columns of ``V``, their variances ``sigma**2``. Nothing here factors or reduces
the data.
"""

from __future__ import annotations

import numpy as np

from daskgpu.toolkit.numeric import seed_word

# sigma_j = DECAY**j: distinct variances, each 0.81 of the one before, so that the leading
# components stand apart (a randomised range finder converges on them) and the first ten explain
# about 88 % of the variance.
DECAY = 0.9


def spectrum(features: int) -> np.ndarray:
    """The known standard deviations ``sigma`` along the basis vectors, largest first.

    >>> spectrum(3)
    array([1.  , 0.9 , 0.81])
    """
    return DECAY ** np.arange(features, dtype=np.float64)


def data_seed(seed: int) -> int:
    """The seed of the ``z`` blocks: a 64-bit word of ``SeedSequence((seed, 1))``."""
    return seed_word(np.random.SeedSequence((seed, 1)))


def basis(seed: int, features: int) -> np.ndarray:
    """The known orthonormal basis ``V`` (features x features, float64), from the run's seed.

    The Q factor of a seeded standard normal matrix, its columns' signs fixed by R's diagonal
    (so that it is Haar-distributed and the same on every machine up to rounding).
    """
    rng = np.random.default_rng(np.random.SeedSequence((seed, 2)))
    q, r = np.linalg.qr(rng.standard_normal((features, features)))
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


