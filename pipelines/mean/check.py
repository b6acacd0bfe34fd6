"""Independent verification of mean-pipeline's result (:func:`verify`) and its mutations.

What the check establishes, at both depths: the reported mean is the exact total of its
per-block float64 sums over the element count, and the sums fill the block grid. For random
data the sums are pairwise distinct, each within its Hoeffding bound, and the mean within 6
standard errors of 0.5.

- ``full``: the sums are the blocks' own: a seeded sample of blocks, drawn again on the workers
  from their documented per-block seeds, gives the same sums; for an input, every block's sum
  and the whole total, re-read on the workers with ``numpy.load``/Zarr in float64, agree.
- ``fast``: every block's sum is the total of its cells' sums (the run's certificate, geometry
  in :mod:`pipelines.mean.shared`), and a seeded sample of cells, as many as
  :func:`daskgpu.toolkit.spot_checks.sample_size` asks for a fault in a tenth of them to show
  with probability 99.9 %, gives the same sums again: random cells drawn in this process from
  their block's seed, NumPy's PCG64 advanced to the cell's first value (one 64-bit word a
  float64 value, half a word a float32 one); an input's slabs re-read with
  ``numpy.load``/Zarr. On GPU workers, whose generator cannot start inside a block, the run
  reports no cells and a seeded sample of whole blocks is drawn again on the devices.

It shares no code with the computation it checks (:mod:`daskgpu.data.synthetic`,
:mod:`daskgpu.toolkit.reductions`, :mod:`daskgpu.data.array_input`, :mod:`pipelines.mean.tasks`
and :mod:`pipelines.mean.pipeline`): it redraws and re-reads the data its own way, following the
documented schemes of :mod:`daskgpu.toolkit.numeric` (the seeded generator, blocks' first
indices), and takes from :mod:`pipelines.mean.shared` only the result types and the geometry of
blocks and cells. ``MUTATIONS`` are the wrong results it must reject.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import dask
import numpy as np

from daskgpu.toolkit import spot_checks
from daskgpu.toolkit.numeric import generator, starts
from daskgpu.toolkit.registry import Mutation, Verification, Workload
from pipelines.mean.shared import (
    CELL,
    BlockMean,
    CellMean,
    block_grid,
    block_shape,
    flat_cells,
    slab_rows,
    slabs,
)

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
EPS = float(np.finfo(np.float64).eps)


# What the fast depth's spot checks promise (see daskgpu.toolkit.spot_checks).
FAST_FRACTION = spot_checks.FRACTION
FAST_CONFIDENCE = spot_checks.CONFIDENCE


class _Result(NamedTuple):
    """The parts of a result the checks read: the mean, the block sums, the cells' sums."""

    mean: float
    sums: np.ndarray
    cells: np.ndarray | None


def verify(workload: Workload, raw, depth: str = "full") -> Verification:
    """Check the reported mean and its per-block sums; cells (fast) or blocks (full) again.

    Parameters
    ----------
    workload : Workload
        The run's workload (its context: the block grid, seed, source).
    raw : CellMean
        The computed result: the mean with its block sums and cells' sums.
    depth : {"full", "fast"}
        ``full``: random data's sums fill the block grid, add up to the mean, are pairwise
        distinct and each within its Hoeffding bound of m/2, the mean lies within 6 standard
        errors of 0.5, and a sample of blocks drawn again on the workers from their seeds gives
        the same sums; an input's sums fill the grid and add up to the mean, and every block's
        sum and the whole total, re-read on the workers with ``numpy.load``/Zarr, agree.
        ``fast``: the same on the sums, then every block's sum is its cells' total, and a
        seeded sample of cells drawn again (or re-read) gives the same sums.

    Returns
    -------
    Verification
        Whether every check passed; what was checked, or the first thing that disagreed.
    """
    ctx = workload.context
    sums = getattr(raw, "block_sums", None)
    if sums is None:
        return Verification(False, f"result {raw!r} carries no per-block sums to check")
    result = _Result(float(raw), sums, getattr(raw, "cell_sums", None))
    for check in _checks(ctx, depth):
        failure = check(ctx, result)
        if failure:
            return Verification(False, failure)
    if depth == "fast":
        return Verification(True, _passed_fast(ctx, result))
    return Verification(True, _passed(ctx, result.mean, sums))


def _checks(ctx: dict, depth: str) -> tuple:
    if depth == "full":
        return _INPUT_CHECKS if ctx["source"] is not None else _RANDOM_CHECKS
    if ctx["source"] is not None:
        return _FAST_INPUT_CHECKS
    return _FAST_RANDOM_CHECKS if _has_cells(ctx) else _FAST_DEVICE_CHECKS


def _has_cells(ctx: dict) -> bool:
    """Whether the run reports cells: always, but for random data drawn by CuPy."""
    return ctx["source"] is not None or ctx["library"] == "numpy"


def _passed(ctx: dict, mean: float, sums: np.ndarray) -> str:
    if ctx["source"] is not None:
        return (f"{sums.size} block sums add up to the mean {mean:.12g}; every block's sum and "
                "the whole total re-read from the input in float64 agree")
    sampled = len(_sampled_blocks(ctx))
    off = abs(mean - 0.5) / _standard_error(ctx["elements"])
    return (f"{sums.size} block sums add up to the mean {mean:.8f}, each within its bound; "
            f"{sampled} sampled blocks redrawn from their seeds agree; {off:.2f} standard "
            f"errors from 0.5 (limit {TOLERANCE_SE:g}, n={ctx['elements']})")


def _passed_fast(ctx: dict, r: _Result) -> str:
    if not _has_cells(ctx):
        blocks = r.sums.size
        spot = spot_checks.detection(len(_fast_blocks(ctx)), blocks, "blocks")
        how = "drawn again on the workers from their seeds"
    else:
        cells = _cell_count(ctx)
        spot = spot_checks.detection(len(_fast_cells(ctx)), cells, "cells")
        how = ("re-read from the input in float64" if ctx["source"] is not None
               else "drawn again from their blocks' seeds")
    if ctx["source"] is not None:
        return (f"{r.sums.size} block sums add up to the mean {r.mean:.12g}, each to its "
                f"cells' sums; {spot} ({how}), and agree")
    off = abs(r.mean - 0.5) / _standard_error(ctx["elements"])
    tied = ", and to its cells' sums" if _has_cells(ctx) else ""
    return (f"{r.sums.size} block sums add up to the mean {r.mean:.8f}, each within its "
            f"bound{tied}; {spot} ({how}), and agree; {off:.2f} standard errors from 0.5 "
            f"(limit {TOLERANCE_SE:g}, n={ctx['elements']})")


def _check_grid(ctx: dict, r: _Result) -> str | None:
    sums = r.sums
    grid = block_grid(ctx["chunks"])
    if sums.shape == grid:
        return None
    return (f"block sums: {sums.size} for a grid of {' x '.join(map(str, grid))} = "
            f"{math.prod(grid)} blocks (a block dropped or counted twice)")


def _check_mean_of_sums(ctx: dict, r: _Result) -> str | None:
    mean, sums = r.mean, r.sums
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


def _check_distinct(ctx: dict, r: _Result) -> str | None:
    sums = r.sums
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


def _check_block_bounds(ctx: dict, r: _Result) -> str | None:
    sums = r.sums
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


def _check_standard_errors(ctx: dict, r: _Result) -> str | None:
    mean = r.mean
    n = ctx["elements"]
    off = abs(mean - 0.5) / _standard_error(n)
    if off <= TOLERANCE_SE:
        return None
    return (f"uniform [0,1) mean {mean:.8f} is {off:.2f} standard errors from 0.5 "
            f"(limit {TOLERANCE_SE:g}, n={n})")


def _check_redrawn_blocks(ctx: dict, r: _Result) -> str | None:
    return _redrawn_blocks(ctx, r.sums, _sampled_blocks(ctx))


def _check_redrawn_sample(ctx: dict, r: _Result) -> str | None:
    """Fast, random data drawn by CuPy: the seeded sample of blocks drawn again on the devices."""
    return _redrawn_blocks(ctx, r.sums, _fast_blocks(ctx))


def _redrawn_blocks(ctx: dict, sums: np.ndarray, locations) -> str | None:
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


def _check_input_blocks(ctx: dict, r: _Result) -> str | None:
    """Every block re-read from the input in float64: its sum, then their total over the count.

    One pass over the file: each block's region is read once, on the workers.
    """
    source, chunk_sizes = ctx["source"], ctx["chunks"]
    locations = list(np.ndindex(*block_grid(chunk_sizes)))
    found = dask.compute(*[dask.delayed(region_sums, pure=True)(
        source.path, source.kind, _block_region(chunk_sizes, loc)) for loc in locations])
    for loc, (total, absolute) in zip(locations, found, strict=True):
        reported = float(r.sums[loc])
        if math.isnan(total) and math.isnan(reported):
            continue
        if not abs(reported - total) <= SUM_RTOL * absolute:
            return (f"block {loc}: sum {reported:.12g} reported, {total:.12g} recomputed "
                    "from the input file")
    count = ctx["elements"]
    expected = math.fsum(float(t[0]) for t in found) / count
    if math.isnan(expected) or math.isnan(r.mean):
        if math.isnan(expected) and math.isnan(r.mean):
            return None
        return f"mean {r.mean:.12g} against {expected:.12g}, the input's total re-read / {count}"
    tolerance = INPUT_RTOL * max(math.fsum(float(t[1]) for t in found) / count,
                                 np.finfo(np.float64).tiny)
    if abs(r.mean - expected) <= tolerance:
        return None
    return (f"mean {r.mean:.12g} against {expected:.12g}, the input's total re-read in float64 / "
            f"{count} elements (tolerance {tolerance:.2g})")


def _check_cell_count(ctx: dict, r: _Result) -> str | None:
    expected = _cell_count(ctx)
    if r.cells is not None and r.cells.shape == (expected,):
        return None
    got = "no" if r.cells is None else f"{r.cells.size}"
    return f"cell sums: {got} reported for the {expected} cells of the block grid"


def _check_cells_add_up(ctx: dict, r: _Result) -> str | None:
    # A block's sum and its cells' total add the same values in other orders: they differ by
    # rounding only, far below SUM_RTOL of the values' size.
    first = 0
    for number, location in enumerate(np.ndindex(*block_grid(ctx["chunks"]))):
        count = _cells_of(ctx, location)
        cells = r.cells[first:first + count]
        first += count
        reported = float(r.sums[location])
        total = float(cells.sum())
        if math.isnan(total) and math.isnan(reported):
            continue
        scale = max(float(np.abs(cells).sum()), abs(reported))
        if not abs(reported - total) <= SUM_RTOL * scale:
            return (f"block {location}: sum {reported:.12g} reported, {total:.12g} recomputed "
                    f"from its {count} cells' sums (block {number} of the grid)")
    return None


def _check_redrawn_cells(ctx: dict, r: _Result) -> str | None:
    for cell, block, index, redrawn in _redrawn_cells(ctx):
        reported = float(r.cells[cell])
        if not abs(reported - redrawn) <= SUM_RTOL * abs(redrawn):
            return (f"block {block} cell {index}: sum {reported:.12g} reported, "
                    f"{redrawn:.12g} recomputed from its seed")
    return None


def _check_reread_cells(ctx: dict, r: _Result) -> str | None:
    source, chunk_sizes = ctx["source"], ctx["chunks"]
    stored = _opened(source.path, source.kind)
    for cell, location, index in _located(ctx, _fast_cells(ctx)):
        shape = block_shape(chunk_sizes, location)
        region = list(_block_region(chunk_sizes, location))
        if region:  # a slab: the block's rows index * step .. (all of a 0-d block)
            step = slab_rows(shape)
            first = region[0].start + index * step
            region[0] = slice(first, min(first + step, region[0].stop))
        values = np.asarray(stored[tuple(region)], dtype=np.float64)
        total, absolute = float(values.sum()), float(np.abs(values).sum())
        reported = float(r.cells[cell])
        if math.isnan(total) and math.isnan(reported):
            continue
        if not abs(reported - total) <= SUM_RTOL * absolute:
            return (f"block {location} slab {index}: sum {reported:.12g} reported, "
                    f"{total:.12g} recomputed from the input file")
    return None


_RANDOM_CHECKS = (_check_grid, _check_mean_of_sums, _check_distinct, _check_block_bounds,
                  _check_standard_errors, _check_redrawn_blocks)
_INPUT_CHECKS = (_check_grid, _check_mean_of_sums, _check_input_blocks)
_FAST_SUMS = (_check_grid, _check_mean_of_sums)
_FAST_BOUNDS = (_check_distinct, _check_block_bounds, _check_standard_errors)
_FAST_CELLS = (_check_cell_count, _check_cells_add_up)
_FAST_RANDOM_CHECKS = (*_FAST_SUMS, *_FAST_BOUNDS, *_FAST_CELLS, _check_redrawn_cells)
_FAST_DEVICE_CHECKS = (*_FAST_SUMS, *_FAST_BOUNDS, _check_redrawn_sample)
_FAST_INPUT_CHECKS = (*_FAST_SUMS, *_FAST_CELLS, _check_reread_cells)


def redrawn_uniform_sum(seed: int, block_number: int, shape, dtype: str, library: str) -> float:
    """The float64 sum of one block of the random array, drawn whole on this worker.

    Follows the documented per-block scheme (``SeedSequence(seed, spawn_key=(block_number,))``
    in row-major block order, its generator :func:`daskgpu.toolkit.numeric.generator`: on the
    device a counter-based one, keyed by its first two 64-bit words), the seed derived apart from
    :mod:`daskgpu.data.synthetic` so that a wrong seed there shows here.
    """
    rng = generator(library, np.random.SeedSequence(seed, spawn_key=(block_number,)))
    return float(rng.random(tuple(shape), dtype=dtype).sum(dtype=np.float64))


def region_sums(path: str, kind: str, region: tuple[slice, ...]) -> np.ndarray:
    """Sum and sum of |x| of ``region`` of an input, read with ``numpy.load`` or Zarr."""
    values = np.asarray(_opened(path, kind)[region], dtype=np.float64)
    return np.array([values.sum(), np.abs(values).sum()])


def _opened(path: str, kind: str):
    """An input opened for reading with ``numpy.load`` (memory-mapped) or Zarr."""
    if kind == "zarr":
        import zarr

        return zarr.open_array(path, mode="r")
    return np.load(path, mmap_mode="r")


def _redrawn_cells(ctx: dict):
    """``(cell, block location, index in block, float64 sum)`` of every sampled cell.

    Each is drawn again in this process from its block's seed.

    NumPy's ``default_rng`` is PCG64; ``random`` takes one 64-bit output for a float64 value
    and half of one for a float32 value (the other half kept for the next), so the generator
    advanced by the words before a cell's first value draws the cell, and only the cell.
    """
    values_per_word = 2 if ctx["dtype"] == "float32" else 1  # CELL is even: whole words
    buffer = np.empty(CELL, dtype=ctx["dtype"])
    state = block = None
    for cell, location, index in _located(ctx, _fast_cells(ctx)):
        if location != block:
            block = location
            number = int(np.ravel_multi_index(location, block_grid(ctx["chunks"])))
            bits = np.random.PCG64(np.random.SeedSequence(ctx["seed"], spawn_key=(number,)))
            rng, state = np.random.Generator(bits), bits.state
        bits.state = state
        bits.advance(index * CELL // values_per_word)
        count = min(CELL, math.prod(block_shape(ctx["chunks"], location)) - index * CELL)
        drawn = buffer[:count]
        rng.random(out=drawn, dtype=ctx["dtype"])
        yield cell, location, index, float(drawn.sum(dtype=np.float64))


def _cells_of(ctx: dict, location) -> int:
    """Cells of the block at ``location``: flat cells of random data, an input's slabs."""
    shape = block_shape(ctx["chunks"], location)
    return slabs(shape) if ctx["source"] is not None else flat_cells(math.prod(shape))


def _cell_firsts(ctx: dict) -> np.ndarray:
    """The number of every block's first cell, in row-major block order."""
    counts = [_cells_of(ctx, loc) for loc in np.ndindex(*block_grid(ctx["chunks"]))]
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _cell_count(ctx: dict) -> int:
    return int(_cell_firsts(ctx)[-1])


def _located(ctx: dict, cells) -> list[tuple[int, tuple[int, ...], int]]:
    """``(cell, block location, index within the block)`` of each of ``cells`` (numbers)."""
    firsts, grid = _cell_firsts(ctx), block_grid(ctx["chunks"])
    numbers = np.searchsorted(firsts, cells, side="right") - 1
    return [(int(c), _where(int(b), grid), int(c - firsts[b])) for c, b in zip(cells, numbers,
                                                                           strict=True)]


def _fast_cells(ctx: dict) -> np.ndarray:
    """The cells the fast depth checks again: a seeded sample (an input's: from its size)."""
    population = _cell_count(ctx)
    size = spot_checks.sample_size(population, FAST_FRACTION, FAST_CONFIDENCE)
    return spot_checks.seeded_sample(population, size, _sample_seed(ctx))


def _fast_blocks(ctx: dict) -> list[tuple[int, ...]]:
    """The blocks the fast depth draws again where the run reports no cells (CuPy)."""
    grid = block_grid(ctx["chunks"])
    population = math.prod(grid)
    size = spot_checks.sample_size(population, FAST_FRACTION, FAST_CONFIDENCE)
    return [_where(int(i), grid)
            for i in spot_checks.seeded_sample(population, size, _sample_seed(ctx))]


def _sample_seed(ctx: dict) -> int:
    return ctx["seed"] if ctx["source"] is None else ctx["elements"]


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
    chosen = np.random.default_rng(_sample_seed(ctx)).choice(blocks, size=wanted, replace=False)
    return [_where(int(i), grid) for i in sorted(chosen)]


# --------------------------------------------------------------------------- mutations


def _elements(raw: BlockMean) -> int:
    """The element count a result's mean was divided by (its sums' total / its mean)."""
    return round(math.fsum(raw.block_sums.ravel().tolist()) / float(raw))


def _from_sums(raw: BlockMean, sums: np.ndarray, divisor: int | None = None) -> CellMean:
    """A result with ``sums``, its mean recomputed from them as a buggy run would.

    Its cells' sums, the certificate, stay as they were.
    """
    divisor = divisor if divisor is not None else _elements(raw)
    return CellMean(math.fsum(sums.ravel().tolist()) / divisor, sums, _cells(raw))


def _cells(raw: BlockMean) -> np.ndarray | None:
    return getattr(raw, "cell_sums", None)


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


# What a failed check's detail names (a regular expression, see Mutation.names).
BLOCK_RECOMPUTED = r"block \([\d, ]+\): sum \S+ reported, \S+ recomputed"
MUTATIONS = (
    Mutation("constant 0.5", lambda raw: CellMean(0.5, raw.block_sums, _cells(raw)),
             r"^mean 0\.5 is not the block sums' total"),
    Mutation("dropped block", _dropped_block, r"^block sums: \d+ for a grid of"),
    Mutation("duplicated block", _duplicated_block, r"^block sums: \d+ for a grid of"),
    Mutation("repeated per-block seed", _repeated_seed,
             r"blocks \(0, 0\) and \(0, 1\): identical sums|block \(0, 1\): sum \S+ reported"),
    Mutation("wrong divisor",
             lambda raw: _from_sums(raw, raw.block_sums, _elements(raw) - 1),
             r"^mean \S+ is not the block sums' total"),
    Mutation("block sums accumulated in float32",
             lambda raw: _from_sums(raw, raw.block_sums.astype(np.float32).astype(np.float64)),
             BLOCK_RECOMPUTED),
    Mutation("a block's sum lost (zero)", _lost_block, r"block \([\d, ]+\): sum 0 (is|reported)"),
    Mutation("block sums in the wrong places", _misplaced_blocks, BLOCK_RECOMPUTED),
)
