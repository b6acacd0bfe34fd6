"""pca-pipeline's full depth: ``C`` summed again apart from every block (``2 n d^2`` flops).

The steps both depths share hold the result to it; the run's own Gram matrix (exact and
covariance methods) must be ``C`` within ``tau / 2`` in the spectral norm.
"""

from __future__ import annotations

import numpy as np

from daskgpu.verification import Plan
from pipelines.pca import check_replay
from pipelines.pca.check import Gram, Reading, own_gram, tau
from pipelines.pca.shared import PcaContext


def recomputed(ctx: PcaContext, r: Reading, verdict) -> None:
    """``C``, its trace and the mean, summed apart over every block."""
    found = check_replay.products(ctx, np.eye(ctx.features))
    r.gram = Gram(found["trace"], found["mean"], scatter=(found["cm"] + found["cm"].T) / 2)
    verdict.establish(f"the centred Gram matrix X^T X ({ctx.features} x {ctx.features}) summed "
                      f"blockwise over {found['rows']} rows apart, no QR "
                      f"({Plan.every(ctx.grid.blocks).promise})")


def own_gram_agrees(ctx: PcaContext, r: Reading, verdict) -> None:
    """The run's own Gram matrix is ``C`` within ``tau / 2`` (spectral norm)."""
    own = own_gram(ctx, r, verdict)
    if own is None:
        return
    off = float(np.abs(np.linalg.eigvalsh(own - r.gram.scatter)).max())
    bound = tau(ctx, r.gram.trace) / 2
    if verdict.require(off <= bound, f"the run's {r.own_name} is not the data's Gram matrix: "
                                     f"|{r.own_name} - X^T X|_2 = {off:.3g} (bound "
                                     f"{bound:.3g})"):
        verdict.establish(f"the run's {r.own_name} within tau/2 of it")
