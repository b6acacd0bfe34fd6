"""kmeans-pipeline's fast-only step: the points the run kept, which it recomputes on, are the data.

Every generated point's blob and each shard's first cell drawn again from the shard's seed
(NumPy's generator draws in order; a GPU's, the blobs only), or an input's planned cells re-read
(a file's or an array's in memory).
"""

from __future__ import annotations


def data_kept(ctx, r, verdict) -> None:
    """The points the run kept are the data: drawn again from the seed, or re-read."""
    source = ctx.input_named
    for s, part in enumerate(r.shards):
        if not verdict.require(part.differ < 0, f"shard {s}: kept point {part.differ} differs "
                                                f"from {source} (the points clustered are not "
                                                "the data)"):
            return
    compared = sum(part.compared for part in r.shards)
    verdict.establish(
        f"{r.plans.cells.promise} read again from {source} ({compared} points) and equal "
        "to the points kept" if not ctx.random else
        f"the blobs of the kept points and the first {compared} points of the shards drawn "
        "again from their seeds and equal" if compared else
        "the blobs of the kept points drawn again; the points taken as drawn (their generator "
        "cannot be drawn again here)")
