"""Independent verification of mean-pipeline's result (:func:`verify`) and its mutations.

What the check establishes: the reported mean is the exact total of its per-block float64 sums
over the element count, the sums fill the block grid, and they are the blocks' own sums. For
random data the sums are pairwise distinct, each within its Hoeffding bound, the mean within 6
standard errors of 0.5, and a seeded sample of blocks, drawn again on the workers from their
documented per-block seeds, gives the same sums. For an input, a seeded sample of blocks and
the whole total, re-read on the workers with ``numpy.load``/Zarr in float64, agree.

It shares no code with the computation it checks (:mod:`daskgpu.data.synthetic`,
:mod:`daskgpu.toolkit.reductions`, :mod:`daskgpu.data.array_input`, :mod:`pipelines.mean.tasks`
and :mod:`pipelines.mean.pipeline`): it redraws and re-reads the data its own way, following the
documented schemes of :mod:`daskgpu.toolkit.numeric` (the seeded generator, blocks' first
indices), and takes from :mod:`pipelines.mean.shared` only the result type and the block-grid
geometry. ``MUTATIONS`` are the wrong results it must reject.
"""

from __future__ import annotations

import math

import dask
import numpy as np

from daskgpu.toolkit.numeric import generator, starts
from daskgpu.toolkit.registry import Mutation, Verification, Workload
from pipelines.mean.shared import BlockMean, block_grid, block_shape

# A random mean may sit this many standard errors from 0.5 before the run is called wrong;
# a correct run fails it with probability about 2e-9.
TOLERANCE_SE = 6.0
# The chance that a correct run fails the per-block bounds (all blocks together), or shows
# two equal block sums by coincidence, at most.
FALSE_ALARM = 1e-9
# An input's mean, recomputed in float64, may differ by this much relative to mean(|x|).
INPUT_RTOL = 1e-9
# A block's sum recomputed from the same values in another order (NumPy's pairwise sum of the
# whole block against the run's sum of streamed pieces, or CuPy's reduction) differs only by
# rounding, about 1e-15 relative to the sum of |x|; this leaves room for sequential orders and
# is still far below what float32 accumulation (1e-8) or one wrong value would change.
SUM_RTOL = 1e-10
# Blocks recomputed by verify: this share of the blocks, at least SAMPLE_MIN, at most SAMPLE_MAX
# (and at most half of them).
SAMPLE_SHARE = 0.05
SAMPLE_MIN = 2
SAMPLE_MAX = 64
# Rows of an input re-read at once by verify's independent total.
SLAB_BYTES = 64 * 2**20
EPS = float(np.finfo(np.float64).eps)


def verify(workload: Workload, raw) -> Verification:
    """Check the reported mean, its per-block sums and a seeded sample of recomputed blocks.

    Random data: the sums fill the block grid, add up to the mean, are pairwise distinct and
    each within its Hoeffding bound of m/2; the mean lies within 6 standard errors of 0.5; a
    sample of blocks drawn again on the workers from their seeds gives the same sums. Input
    data: the sums fill the grid and add up to the mean; a sample of blocks and the whole
    total, re-read on the workers with ``numpy.load``/Zarr, agree.
    """
    ctx = workload.context
    sums = getattr(raw, "block_sums", None)
    if sums is None:
        return Verification(False, f"result {raw!r} carries no per-block sums to check")
    mean = float(raw)
    checks = _INPUT_CHECKS if ctx["source"] is not None else _RANDOM_CHECKS
    for check in checks:
        failure = check(ctx, mean, sums)
        if failure:
            return Verification(False, failure)
    return Verification(True, _passed(ctx, mean, sums))


def _passed(ctx: dict, mean: float, sums: np.ndarray) -> str:
    sampled = len(_sampled_blocks(ctx))
    if ctx["source"] is not None:
        return (f"{sums.size} block sums add up to the mean {mean:.12g}; {sampled} sampled "
                "blocks and the whole total re-read from the input in float64 agree")
    off = abs(mean - 0.5) / _standard_error(ctx["elements"])
    return (f"{sums.size} block sums add up to the mean {mean:.8f}, each within its bound; "
            f"{sampled} sampled blocks redrawn from their seeds agree; {off:.2f} standard "
            f"errors from 0.5 (limit {TOLERANCE_SE:g}, n={ctx['elements']})")


def _check_grid(ctx: dict, mean: float, sums: np.ndarray) -> str | None:
    grid = block_grid(ctx["chunks"])
    if sums.shape == grid:
        return None
    return (f"block sums: {sums.size} for a grid of {' x '.join(map(str, grid))} = "
            f"{math.prod(grid)} blocks (a block dropped or counted twice)")


def _check_mean_of_sums(ctx: dict, mean: float, sums: np.ndarray) -> str | None:
    n = ctx["elements"]
    total = math.fsum(sums.ravel().tolist())
    expected = total / n
    if math.isnan(expected) or math.isnan(mean):
        if math.isnan(expected) and math.isnan(mean):
            return None
        return f"mean {mean:.10g} against the block sums' total {total:.10g} / {n} elements"
    # The run adds the sums pairwise (NumPy): at most one rounding per addition, plus the
    # division; math.fsum here is exact.
    tolerance = (sums.size + 2) * EPS * math.fsum(np.abs(sums).ravel().tolist()) / n
    if abs(mean - expected) <= tolerance:
        return None
    return (f"mean {mean:.10g} is not the block sums' total {total:.10g} / {n} elements = "
            f"{expected:.10g}")


def _check_distinct(ctx: dict, mean: float, sums: np.ndarray) -> str | None:
    # Distinct seeds give distinct sums, except by a coincidence checked here to be negligible.
    flat = sums.ravel()
    if flat.size < 2 or _chance_of_equal_sums(ctx, flat) > FALSE_ALARM:
        return None
    order = np.argsort(flat, kind="stable")
    equal = np.flatnonzero(flat[order][1:] == flat[order][:-1])
    if not equal.size:
        return None
    first, second = sorted((int(order[equal[0]]), int(order[equal[0] + 1])))
    grid = sums.shape
    return (f"blocks {_where(first, grid)} and {_where(second, grid)}: identical sums "
            f"{flat[first]:.10g} (distinct per-block seeds give distinct sums)")


def _chance_of_equal_sums(ctx: dict, flat: np.ndarray) -> float:
    """About how likely two equal block sums are among correct ones (union over pairs)."""
    counts = _block_counts(ctx["chunks"]).ravel()
    spread = math.sqrt(2 * float(counts.min()) / 12)  # s.d. of a difference of two sums
    values_step = 2.0**-24 if ctx["dtype"] == "float32" else 2.0**-53
    step = max(values_step, float(np.spacing(np.abs(flat).max())))
    pairs = flat.size * (flat.size - 1) / 2
    return pairs * step / (math.sqrt(2 * math.pi) * spread)


def _check_block_bounds(ctx: dict, mean: float, sums: np.ndarray) -> str | None:
    # Hoeffding: a sum of m values in [0, 1) strays t from m/2 with probability <= 2e^(-2t^2/m).
    counts = _block_counts(ctx["chunks"]).astype(np.float64)
    limits = np.sqrt(counts / 2 * math.log(2 * sums.size / FALSE_ALARM))
    excess = np.abs(sums - counts / 2) / limits
    worst = int(np.argmax(excess))  # the first NaN, if any: a NaN sum is out of bounds too
    if excess.ravel()[worst] <= 1:
        return None
    m = float(counts.ravel()[worst])
    return (f"block {_where(worst, sums.shape)}: sum {sums.ravel()[worst]:.8g} is "
            f"{abs(sums.ravel()[worst] - m / 2):.4g} from its expected {m / 2:g} "
            f"(Hoeffding limit {limits.ravel()[worst]:.4g})")


def _check_standard_errors(ctx: dict, mean: float, sums: np.ndarray) -> str | None:
    n = ctx["elements"]
    off = abs(mean - 0.5) / _standard_error(n)
    if off <= TOLERANCE_SE:
        return None
    return (f"uniform [0,1) mean {mean:.8f} is {off:.2f} standard errors from 0.5 "
            f"(limit {TOLERANCE_SE:g}, n={n})")


def _check_redrawn_blocks(ctx: dict, mean: float, sums: np.ndarray) -> str | None:
    locations = _sampled_blocks(ctx)
    grid = block_grid(ctx["chunks"])
    tasks = [
        dask.delayed(redrawn_uniform_sum, pure=True)(
            ctx["seed"], int(np.ravel_multi_index(loc, grid)), block_shape(ctx["chunks"], loc),
            ctx["dtype"], ctx["library"])
        for loc in locations
    ]
    for loc, redrawn in zip(locations, dask.compute(*tasks), strict=True):
        reported = float(sums[loc])
        if not abs(reported - redrawn) <= SUM_RTOL * abs(redrawn):
            return (f"block {loc}: sum {reported:.12g} reported, {redrawn:.12g} recomputed "
                    "from its seed")
    return None


def _check_input_total(ctx: dict, mean: float, sums: np.ndarray) -> str | None:
    source = ctx["source"]
    totals = dask.compute(*[
        dask.delayed(region_sums, pure=True)(source.path, source.kind, (slice(start, stop),))
        for start, stop in _slabs(source)
    ])
    total = math.fsum(float(t[0]) for t in totals)
    absolute = math.fsum(float(t[1]) for t in totals)
    count = ctx["elements"]
    expected = total / count
    if math.isnan(expected) or math.isnan(mean):
        if math.isnan(expected) and math.isnan(mean):
            return None
        return f"mean {mean:.12g} against {expected:.12g}, the input's total re-read / {count}"
    tolerance = INPUT_RTOL * max(absolute / count, np.finfo(np.float64).tiny)
    if abs(mean - expected) <= tolerance:
        return None
    return (f"mean {mean:.12g} against {expected:.12g}, the input's total re-read in float64 / "
            f"{count} elements (tolerance {tolerance:.2g})")


def _check_reread_blocks(ctx: dict, mean: float, sums: np.ndarray) -> str | None:
    source, chunk_sizes = ctx["source"], ctx["chunks"]
    locations = _sampled_blocks(ctx)
    tasks = [dask.delayed(region_sums, pure=True)(source.path, source.kind,
                                                  _block_region(chunk_sizes, loc))
             for loc in locations]
    for loc, (total, absolute) in zip(locations, dask.compute(*tasks), strict=True):
        reported = float(sums[loc])
        if math.isnan(total) and math.isnan(reported):
            continue
        if not abs(reported - total) <= SUM_RTOL * absolute:
            return (f"block {loc}: sum {reported:.12g} reported, {total:.12g} recomputed "
                    "from the input file")
    return None


_RANDOM_CHECKS = (_check_grid, _check_mean_of_sums, _check_distinct, _check_block_bounds,
                  _check_standard_errors, _check_redrawn_blocks)
_INPUT_CHECKS = (_check_grid, _check_mean_of_sums, _check_input_total, _check_reread_blocks)


def redrawn_uniform_sum(seed: int, block_number: int, shape, dtype: str, library: str) -> float:
    """The float64 sum of one block of the random array, drawn whole on this worker.

    Follows the documented per-block scheme (``SeedSequence(seed, spawn_key=(block_number,))``
    in row-major block order, its generator :func:`daskgpu.toolkit.numeric.generator`: CuPy's
    seeded with its first 64-bit word), the seed derived apart from
    :mod:`daskgpu.data.synthetic` so that a wrong seed there shows here.
    """
    rng = generator(library, np.random.SeedSequence(seed, spawn_key=(block_number,)))
    return float(rng.random(tuple(shape), dtype=dtype).sum(dtype=np.float64))


def region_sums(path: str, kind: str, region: tuple[slice, ...]) -> np.ndarray:
    """Sum and sum of |x| of ``region`` of an input, read with ``numpy.load`` or Zarr."""
    if kind == "zarr":
        import zarr

        stored = zarr.open_array(path, mode="r")
    else:
        stored = np.load(path, mmap_mode="r")
    values = np.asarray(stored[region], dtype=np.float64)
    return np.array([values.sum(), np.abs(values).sum()])


def _standard_error(n: int) -> float:
    return 1.0 / math.sqrt(12.0 * n)


def _block_counts(chunk_sizes) -> np.ndarray:
    """Elements of every block, shaped as the block grid."""
    counts = np.ones((), dtype=np.int64)
    for sizes in chunk_sizes:
        counts = np.multiply.outer(counts, np.asarray(sizes, dtype=np.int64))
    return counts


def _block_region(chunk_sizes, location) -> tuple[slice, ...]:
    firsts = (int(starts(sizes)[i]) for sizes, i in zip(chunk_sizes, location, strict=True))
    return tuple(slice(start, start + size)
                 for start, size in zip(firsts, block_shape(chunk_sizes, location), strict=True))


def _where(flat_index: int, grid) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat_index, grid))


def _sampled_blocks(ctx: dict) -> list[tuple[int, ...]]:
    """The blocks verify recomputes: chosen with the run's seed (an input's: its size)."""
    grid = block_grid(ctx["chunks"])
    blocks = math.prod(grid)
    wanted = max(SAMPLE_MIN, min(SAMPLE_MAX, math.ceil(SAMPLE_SHARE * blocks)))
    wanted = min(wanted, math.ceil(blocks / 2))  # a few blocks: at most half of the work again
    seed = ctx["seed"] if ctx["source"] is None else ctx["elements"]
    chosen = np.random.default_rng(seed).choice(blocks, size=wanted, replace=False)
    return [_where(int(i), grid) for i in sorted(chosen)]


def _slabs(source) -> list[tuple[int, int]]:
    rows = source.shape[0]
    step = max(1, SLAB_BYTES // max(1, source.nbytes // rows))
    return [(start, min(start + step, rows)) for start in range(0, rows, step)]


# --------------------------------------------------------------------------- mutations


def _elements(raw: BlockMean) -> int:
    """The element count a result's mean was divided by (its sums' total / its mean)."""
    return round(math.fsum(raw.block_sums.ravel().tolist()) / float(raw))


def _from_sums(raw: BlockMean, sums: np.ndarray, divisor: int | None = None) -> BlockMean:
    """A result with ``sums``, its mean recomputed from them as a buggy run would."""
    divisor = divisor if divisor is not None else _elements(raw)
    return BlockMean(math.fsum(sums.ravel().tolist()) / divisor, sums)


def _dropped_block(raw: BlockMean) -> BlockMean:
    flat = raw.block_sums.ravel()
    return _from_sums(raw, np.delete(flat, flat.size // 2))


def _duplicated_block(raw: BlockMean) -> BlockMean:
    flat = raw.block_sums.ravel()
    return _from_sums(raw, np.append(flat, flat[0]))


def _repeated_seed(raw: BlockMean) -> BlockMean:
    sums = raw.block_sums.copy()
    sums.ravel()[1] = sums.ravel()[0]  # block 1 drawn with block 0's seed (blocks of one shape)
    return _from_sums(raw, sums)


def _lost_block(raw: BlockMean) -> BlockMean:
    sums = raw.block_sums.copy()
    sums.ravel()[sums.size // 2] = 0.0
    return _from_sums(raw, sums)


def _misplaced_blocks(raw: BlockMean) -> BlockMean:
    # Every sum moved to the next block: the total (and the mean) unchanged.
    sums = raw.block_sums
    return _from_sums(raw, np.roll(sums.ravel(), 1).reshape(sums.shape))


MUTATIONS = (
    Mutation("constant 0.5", lambda raw: BlockMean(0.5, raw.block_sums), "mean"),
    Mutation("dropped block", _dropped_block, "block sums"),
    Mutation("duplicated block", _duplicated_block, "block sums"),
    Mutation("repeated per-block seed", _repeated_seed, "identical"),
    Mutation("wrong divisor",
             lambda raw: _from_sums(raw, raw.block_sums, _elements(raw) - 1), "mean"),
    Mutation("block sums accumulated in float32",
             lambda raw: _from_sums(raw, raw.block_sums.astype(np.float32).astype(np.float64)),
             "recomputed"),
    Mutation("a block's sum lost (zero)", _lost_block, "expected"),
    Mutation("block sums in the wrong places", _misplaced_blocks, "recomputed"),
)
