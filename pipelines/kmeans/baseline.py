"""kmeans-pipeline's one-process baseline: the initialisation's client, and Lloyd in one process.

The baseline (:func:`pipelines.kmeans.pipeline.baseline`) starts where a run starts (its shards,
its initial centroids, k-means|| included, found through :class:`InProcess`), then times
:func:`one_process_lloyd`.
"""

from __future__ import annotations

import numpy as np

from daskgpu.toolkit import backends


class InProcess:
    """The little of a ``distributed.Client`` the initialisation uses, computing here at once.

    So that a one-process baseline starts where the run started, k-means|| included.
    """

    class Done:
        """A finished "future"."""

        def __init__(self, value):
            self.value = value

        def result(self):
            """The value."""
            return self.value

        def release(self):
            """Nothing to let go."""

    def submit(self, function, *args, pure=True, **kwargs):
        """``function(*args)`` now."""
        args = [a.value if isinstance(a, self.Done) else a for a in args]
        return self.Done(function(*args, **kwargs))

    def gather(self, futures):
        """The values of ``futures``."""
        return [f.result() for f in futures]


def one_process_lloyd(shards, start: np.ndarray, max_iter: int, tol: float, xp) -> dict:
    """Lloyd's iterations as one process writes them with an array library ``xp``.

    Each pass: per slab of a shard, the distances by broadcasting in the data's dtype, the
    nearest (``argmin``: the lowest index on ties), float64 sums through a one-hot product.
    The same stopping rule, empty-cluster rule and rule for points with no finite distance
    (left out) as :func:`lloyd`.
    """

    def one_pass(c):
        k, d = c.shape
        sums, counts, inertia = np.zeros((k, d)), np.zeros(k, np.int64), 0.0
        for x in shards:
            centroids = xp.asarray(c.astype(x.dtype))[None]
            for lo in range(0, x.shape[0], 16_384):
                part = x[lo:lo + 16_384]
                dist = ((part[:, None, :] - centroids) ** 2).sum(axis=2)
                dist[xp.isnan(dist)] = xp.inf
                counted = dist.min(axis=1) < xp.inf  # no finite distance: left out
                if not bool(counted.all()):
                    part, dist = part[counted], dist[counted]
                labels = dist.argmin(axis=1)
                inertia += float(dist.min(axis=1).sum(dtype=np.float64))
                onehot = (labels[:, None] == xp.arange(k)[None]).astype(np.float64)
                sums += backends.to_host(onehot.T @ part.astype(np.float64))
                counts += backends.to_host(onehot.sum(axis=0)).astype(np.int64)
        return sums, counts, inertia

    c, inertias = start, []
    for _ in range(max_iter):
        sums, counts, inertia = one_pass(c)
        inertias.append(inertia)
        moved = c.copy()
        moved[counts > 0] = sums[counts > 0] / counts[counts > 0, None]
        shift = float(np.sqrt(((moved - c) ** 2).sum(axis=1)).max())
        c = moved
        if shift <= tol:
            break
    inertias.append(one_pass(c)[2])
    return {"iterations": len(inertias) - 1, "inertias": inertias, "centroids": [c]}
