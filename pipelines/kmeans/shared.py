"""What kmeans-pipeline and its check (:mod:`pipelines.kmeans.check`) both use.

The documented data scheme, as constants: ``--clusters`` Gaussian blobs of standard deviation
``BLOB_STD`` around centres at least ``SEPARATION`` apart, each point's blob drawn uniformly.
Seeds follow daskgpu's scheme, ``SeedSequence(seed, spawn_key=(part, ...))``: the centres come
from ``(CENTRES,)``, shard ``i``'s points from ``(POINTS, i)``, the rows picked by the random
initialisation from ``(INIT,)``. And the shard geometry, and what the check knows of a run
(:class:`KMeansContext`). Nothing here draws, iterates or checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from daskgpu.verification import Cells, run_seed

#: ``spawn_key`` parts: the blobs' centres, a shard's points, the initial centroids.
CENTRES, POINTS, INIT = 0, 1, 2
#: Standard deviation of every blob, in each feature.
BLOB_STD = 1.0
#: Least distance between two centres, in blob standard deviations: a point lies nearer
#: another blob's centre than its own with probability below Phi(-SEPARATION / 2) ~ 1e-9.
SEPARATION = 12.0
#: Centres are drawn uniformly in a cube of half-width ``SEPARATION * clusters ** (1 / d)``,
#: each redrawn (at most this many times in all, per centre) until far enough from the others.
CENTRE_TRIES = 10_000
#: k-means|| (``--init k-means||``): sampling rounds after the seeded first point, and the
#: expected points sampled per round in multiples of ``k`` (each point with probability
#: ``KMEANS_PARALLEL_OVERSAMPLING * k * D^2 / cost``).
KMEANS_PARALLEL_ROUNDS = 5
KMEANS_PARALLEL_OVERSAMPLING = 2


def half_width(clusters: int, features: int) -> float:
    """Half the side of the cube the centres are drawn in.

    >>> half_width(8, 3)
    24.0
    """
    return SEPARATION * round(clusters ** (1 / features), 12)


#: Cells of a k-means|| run's certificates (consecutive points of a shard, the last cell of
#: each shard shorter): at most ``CELLS`` of them, at least ``MIN_CELL_ROWS`` points each, and
#: at most ``CELL_ENTRIES`` cell-candidate counts in all (for the expected candidates).
CELLS = 4096
MIN_CELL_ROWS = 256
CELL_ENTRIES = 1 << 23


def cell_rows(samples: int, k: int) -> int:
    """Points of one cell of a k-means|| run of ``samples`` points and ``k`` centroids.

    For each cell the run reports each round's sampling cost and sampled points and the
    points nearest each candidate, so that a check may recompute a sample of cells.

    >>> cell_rows(1_000_000, 16), cell_rows(8_000, 5), cell_rows(10**8, 1000)
    (256, 256, 119332)
    """
    expected = 1 + KMEANS_PARALLEL_ROUNDS * KMEANS_PARALLEL_OVERSAMPLING * k
    cells = max(1, min(CELLS, CELL_ENTRIES // expected))
    return max(MIN_CELL_ROWS, -(-samples // cells))


def cells_of(rows: int, cell: int) -> int:
    """Cells of a shard of ``rows`` points.

    >>> cells_of(2000, 256)
    8
    """
    return -(-rows // cell)


#: Cells of a run's Lloyd certificates (the per-cell sums, counts and inertia of the
#: iterations a check does not recompute whole): at most ``LLOYD_CELLS``, at least
#: ``MIN_CELL_ROWS`` points each, and at most ``LLOYD_ENTRIES`` numbers in all.
LLOYD_CELLS = 1024
LLOYD_ENTRIES = 1 << 21


def lloyd_cell_rows(samples: int, k: int, features: int, sets: int) -> int:
    """Points of one cell of the Lloyd certificates of ``sets`` centroid sets.

    >>> lloyd_cell_rows(1_000_000, 16, 32, 1), lloyd_cell_rows(1_000_000, 16, 32, 40)
    (977, 10417)
    """
    per_cell = max(1, sets) * k * (features + 2)
    cells = max(1, min(LLOYD_CELLS, LLOYD_ENTRIES // per_cell))
    return max(MIN_CELL_ROWS, -(-samples // cells))


#: ``--labels``: one int32 per point, the index of its nearest final centroid, and this for a
#: point with a NaN or infinite coordinate (which no centroid counts).
NO_LABEL = -1
#: Cells of the ``--labels`` check (consecutive points of a shard, the last cell of each shard
#: shorter): at most ``LABEL_CELLS`` of them, at least ``MIN_CELL_ROWS`` points each.
LABEL_CELLS = 4096


def label_cell_rows(samples: int) -> int:
    """Points of one cell of the ``--labels`` check of ``samples`` points.

    >>> label_cell_rows(10**8), label_cell_rows(8_000)
    (24415, 256)
    """
    return max(MIN_CELL_ROWS, -(-samples // LABEL_CELLS))


# --------------------------------------------------------------------------- the check's context


class Kept:
    """The run's shards, kept on its workers for the fast check (:attr:`shards`, ShardKeys).

    A presented run (:attr:`presented`, set by its ``present``) lets them go once checked
    (:meth:`release`); a result computed for a test keeps them for every check it runs.
    """

    def __init__(self, shards):
        self.shards = shards
        self.presented = False

    def release(self) -> None:
        """Let the shards go, if the run was presented."""
        if self.presented:
            self.shards.release()


@dataclass(frozen=True)
class KMeansContext:
    """What kmeans-pipeline's check knows of a run (``workload.context``).

    Attributes
    ----------
    kept : Kept
        The shards the run kept on its workers.
    clustering : tuple
        The arguments of the run's loop after the shards (for ``drive``).
    seed, samples, features, k, max_iter : int
        The run's parameters; ``clusters`` the blobs (None for an input).
    init : {"k-means||", "random"}
    tol : float
    dtype, library : str
        The points' element type; the workers' array library.
    sizes : tuple of int
        Points of each shard.
    output, labels : str, optional
        Where ``--output`` and ``--labels`` go.
    source : ArraySource, optional
        The input (a file, or an array in memory), or None for generated points.
    """

    kept: Kept
    clustering: tuple
    seed: int
    samples: int
    features: int
    clusters: int | None
    k: int
    init: str
    max_iter: int
    tol: float
    dtype: str
    library: str
    sizes: tuple[int, ...]
    output: str | None = None
    labels: str | None = None
    source: Any = None

    @property
    def random(self) -> bool:
        """Whether the points are generated blobs (not an input)."""
        return self.source is None

    @property
    def check_seed(self) -> int:
        """The seed of the check's own choices (its samples of cells, its probes).

        Generated points': the run's; an input's: derived from its shape
        (:func:`daskgpu.verification.run_seed`), so that the same input is checked the same way
        whatever seed its initialisation drew.
        """
        return run_seed(self.seed if self.random else None, self.samples, self.features)

    @property
    def input_named(self) -> str:
        """How the check's lines name where the points come from again."""
        if self.random:
            return "its seed"
        return "the input array" if self.source.in_memory else "the input's file"

    @property
    def blobs_known(self) -> bool:
        """Whether each centroid should find a blob: generated points, ``k`` = ``clusters``."""
        return self.random and self.k == self.clusters

    @property
    def edges(self) -> np.ndarray:
        """The first global row of every shard, and the points last (int64)."""
        return np.cumsum((0, *self.sizes)).astype(np.int64)

    @property
    def cell_rows(self) -> int:
        """Points of a cell of the k-means|| certificates (:func:`cell_rows`)."""
        return cell_rows(self.samples, self.k)

    @property
    def label_rows(self) -> int:
        """Points of a cell of the ``--labels`` check (:func:`label_cell_rows`)."""
        return label_cell_rows(self.samples)

    def lloyd_rows(self, iterations: int) -> int:
        """Points of a cell of the Lloyd certificates of a run of ``iterations``."""
        return lloyd_cell_rows(self.samples, self.k, self.features, max(0, iterations - 1))

    def cells(self, rows: int) -> Cells:
        """The shards cut into cells of ``rows`` consecutive points (the last of each shorter)."""
        return Cells(tuple(cells_of(n, rows) for n in self.sizes))
