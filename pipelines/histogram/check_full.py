"""histogram-pipeline's full-only step: the counts against numpy.histogram of every block."""

from __future__ import annotations

from daskgpu.verification import differences
from pipelines.histogram import shared
from pipelines.histogram.shared import HistogramContext


def counts_agree(ctx: HistogramContext, r, verdict) -> None:
    """numpy.histogram of every block, summed, gives the reported counts, NaN and total.

    The sampled blocks' own rows equal it bin by bin.
    """
    value, summed, bins = r.value, r.again["summed"], ctx.bins
    total, nan = int(summed[:bins].sum()), int(summed[bins])
    sampled = [differences(row, again, what="bin", reported_as="by the kernel",
                           expected_as="numpy.histogram", label=lambda j, b=block: (
                               f"block {b}: " + ("NaN" if j == bins else f"bin {j}")))
               for block, row, again in zip(ctx.sampled, shared.sampled(r.rows),
                                            r.again["sampled"], strict=True)]
    if all([verdict.require(value["in_range"] == total,
                            f"total: {value['in_range']} counted, numpy.histogram {total}"),
            verdict.note(differences(value["counts"], summed[:bins], what="bin",
                                     reported_as="counted", expected_as="numpy.histogram")),
            verdict.require(value["nan"] == nan,
                            f"NaN: {value['nan']} counted, numpy.isnan {nan}"),
            verdict.fail_all(sampled)]):
        verdict.establish(
            f"all {bins} counts, NaN and total ({total} in range) equal numpy.histogram's "
            f"summed over the {ctx.grid.blocks} blocks; blocks "
            f"{', '.join(map(str, ctx.sampled))} equal it bin by bin")
