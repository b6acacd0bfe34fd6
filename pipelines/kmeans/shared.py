"""What kmeans-pipeline and its check (:mod:`pipelines.kmeans.check`) both use.

The documented data scheme, as constants: ``--clusters`` Gaussian blobs of standard deviation
``BLOB_STD`` around centres at least ``SEPARATION`` apart, each point's blob drawn uniformly.
Seeds follow daskgpu's scheme, ``SeedSequence(seed, spawn_key=(part, ...))``: the centres come
from ``(CENTRES,)``, shard ``i``'s points from ``(POINTS, i)``, the rows picked by the random
initialisation from ``(INIT,)``. And the shard geometry. Nothing here draws, iterates or checks.
"""

from __future__ import annotations

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
