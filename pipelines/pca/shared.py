"""What pca-pipeline and its check (:mod:`pipelines.pca.check`) both use: the data's specification.

Generated data are rows ``x = z diag(sigma) V^T``: ``z`` standard normal, drawn block by block
(``SeedSequence(data_seed, spawn_key=(block_number,))``, the scheme of
:mod:`daskgpu.data.synthetic`), ``sigma`` the known spectrum below and ``V`` a known orthonormal
basis from the run's seed. The population covariance is then ``V diag(sigma**2) V^T``: its principal
components are the columns of ``V``, their variances ``sigma**2``. And the fast depth's layout:
the cells of a block (:func:`cells`) and the seeded probes ``Q`` (:func:`probes`) that the run
certifies every cell with; the accuracy rules of the covariance and randomised methods; and
:class:`PcaContext`, what the check knows of a run. Nothing here factors or reduces the data.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daskgpu.toolkit.numeric import seed_word
from daskgpu.verification import Cells, Grid, Sampler, run_seed

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


# --------------------------------------------------------------------------- the fast depth's
# cells and probes: the run certifies every cell of every block against the probes ``Q``; the
# check joins the certificates and computes a seeded sample of cells again.

# Rows of a cell on CPU workers: 2 MiB of float64 at 256 features, so that a sample of cells is a
# small share of a large array and the certificates (``features x PROBES`` a cell) a few MB.
CELL_ROWS = 1024
# Seeded standard normal vectors ``Q`` (features x PROBES, an even number: see
# :func:`pipelines.pca.check_fast.reach`).
PROBES = 6


def cells(rows: int, whole: bool = False) -> list[tuple[int, int]]:
    """The cells of a block of ``rows`` rows: ``(first, stop)`` rows of each, in order.

    ``CELL_ROWS`` rows each (the last one shorter), or the whole block (``whole``: on GPU
    workers, whose generator draws a block in one call).

    >>> cells(2500), cells(2500, whole=True)
    ([(0, 1024), (1024, 2048), (2048, 2500)], [(0, 2500)])
    """
    step = rows if whole else CELL_ROWS
    return [(first, min(first + step, rows)) for first in range(0, rows, max(step, 1))]


def probes(seed: int | None, samples: int, features: int) -> np.ndarray:
    """The seeded standard normal vectors ``Q`` (features x PROBES, float64).

    :meth:`Sampler.normal <daskgpu.verification.Sampler.normal>` of the check's "probes"
    stream, from the run's seed or, for an input (no seed), one from its shape
    (:func:`daskgpu.verification.run_seed`).
    """
    return Sampler(run_seed(seed, samples, features), "probes").normal((features, PROBES))


# --------------------------------------------------------------------------- the covariance
# method's accuracy rule: the run decides with it whether the covariance method's answer is good
# enough (else ``--method auto`` takes the exact method), and the check that the decision held.

# The relative accuracy every reported variance must have for the covariance method to be kept
# where the exact method would do better.
ACCURACY = 1e-6
ACCURACY_SAFETY = 10.0
EPS64 = float(np.finfo(np.float64).eps)


def covariance_error(samples: int, features: int, trace: float) -> float:
    """Bound on ``|lambda_i' - lambda_i|`` of the covariance method, any ``i`` (absolute).

    The centred Gram matrix ``C`` is summed in float64 (``sqrt(samples)`` roundings of size
    ``eps64 trace(C)`` in practice) and ``eigh`` is backward stable (``features eps64 |C|``);
    Weyl's inequality moves every eigenvalue by at most the error's norm. Relative to
    ``lambda_i`` that is ``eps64 cond_i**2`` up to the factor: the squared condition number.
    """
    return ACCURACY_SAFETY * (features + math.sqrt(samples)) * EPS64 * trace


def exact_error(samples: int, features: int, trace: float, dtype: str) -> float:
    """Bound on ``|sigma_i' - sigma_i|`` of the exact method (TSQR in the data's dtype).

    Householder QR is backward stable: ``(features u + sqrt(samples) eps64) |X_c|_F``.
    """
    u = float(np.finfo(np.dtype(dtype)).eps) / 2
    return ACCURACY_SAFETY * (features * u + math.sqrt(samples) * EPS64) * math.sqrt(
        max(trace, 0.0))


def covariance_shortfall(lambdas, samples: int, features: int, trace: float, dtype: str,
                         room: float = 1.0) -> tuple[int, float, float] | None:
    """The first variance the covariance method cannot vouch for, or None when it can.

    ``lambdas``: the reported eigenvalues of ``C`` (``(samples - 1)`` times the explained
    variances). Variance ``i`` is vouched for when the covariance method's relative error
    bound, ``covariance_error / lambda_i``, is at most :data:`ACCURACY`, or at most what the
    exact method's bound would give (``(2 sigma_i e + e**2) / lambda_i``, ``e`` its
    :func:`exact_error`): then TSQR would not do better; ``room`` multiplies both limits.
    Returns ``(i, its bound, exact's)``.

    >>> covariance_shortfall([4.0, 1.0], 1000, 2, 5.0, "float64") is None
    True
    >>> covariance_shortfall([1.0, 1e-12], 1000, 2, 1.0, "float64")[0]
    1
    """
    cov = covariance_error(samples, features, trace)
    e = exact_error(samples, features, trace, dtype)
    for i, lam in enumerate(np.asarray(lambdas, dtype=np.float64)):
        lam = max(float(lam), 0.0)
        sigma = math.sqrt(lam)
        ours = cov / lam if lam > 0 else math.inf
        theirs = (2 * sigma * e + e * e) / lam if lam > 0 else math.inf
        if not ours <= room * max(ACCURACY, theirs):
            return i, ours, theirs
    return None


# What --method randomized promises: every component's residual ``|C v - s^2 v|`` within this
# share of the largest variance ``s_1^2`` (an approximation's error: subspace iteration stops
# after --power-iters passes), or within rounding where that is larger.
RANDOMIZED_ACCURACY = 1e-3


# --------------------------------------------------------------------------- the check's context


@dataclass(frozen=True)
class PcaContext:
    """What pca-pipeline's check knows of a run.

    Attributes
    ----------
    grid : Grid
        The blocks of whole rows: ``Grid((row_chunks, (features,)))``.
    dtype, method : str
        The data's element type; ``--method`` as asked (``auto`` included).
    components : int
        Components asked for.
    library : str
        The workers' array library ("numpy", "cupy").
    seed : int, optional
        Generated data's seed; for an input, ``--method randomized``'s seed or None.
    source : ArraySource, optional
        The input (a file, or an array in memory), or None for generated data. The check reads
        it again through :func:`daskgpu.verification.replay.region`; tasks take the context
        without its reader (:meth:`shipped`).
    project, output : str, optional
        Where ``--project`` and ``--output`` write.
    found : dict
        What the run found, for writing it out (``components``), noted as it is presented.
    """

    grid: Grid
    dtype: str
    method: str
    components: int
    library: str = "numpy"
    seed: int | None = None
    source: Any = None
    project: str | None = None
    output: str | None = None
    found: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def samples(self) -> int:
        """Rows of the array."""
        return self.grid.array_shape[0]

    @property
    def features(self) -> int:
        """Columns of the array."""
        return self.grid.array_shape[1]

    @property
    def random(self) -> bool:
        """Whether the data are generated (drawn from the seed), not an input."""
        return self.source is None

    @property
    def data_seed(self) -> int:
        """The seed of generated data's ``z`` blocks (:func:`data_seed`)."""
        return data_seed(self.seed)

    @property
    def sample_seed(self) -> int:
        """The check's choices' seed: the run's, or for an input one from its shape."""
        return run_seed(self.seed, self.samples, self.features)

    def cuts(self, block: int) -> list[tuple[int, int]]:
        """Block ``block``'s cells, as the run certifies them: whole blocks on a device."""
        return cells(self.grid.chunks[0][block], whole=self.library != "numpy")

    def cell_layout(self) -> Cells:
        """The cells of every block, numbered block by block."""
        return Cells(tuple(len(self.cuts(b)) for b in range(self.grid.blocks)))

    def first_row(self, block: int) -> int:
        """The first row of block ``block``."""
        return self.grid.region(block)[0].start

    def probes(self) -> np.ndarray:
        """The seeded vectors ``Q`` that the run certifies every cell with (:func:`probes`)."""
        return probes(self.seed, self.samples, self.features)

    def shipped(self) -> PcaContext:
        """The context as a task takes it: an input named, its reader left behind.

        An array in memory must not travel inside every task (nor a Dask array be computed
        whole as a task's argument): the regions a task reads are passed to it apart.
        """
        if self.source is None or self.source.reader is None:
            return self
        return dataclasses.replace(self, source=dataclasses.replace(self.source, reader=None))
