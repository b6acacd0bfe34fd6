"""Independent verification of histogram-pipeline, and the mutations it must catch.

What the ``full`` check establishes: every reported bin count, the NaN count, the total in
range, the range and bin edges, and any saved --output histogram equal ``numpy.histogram`` of every
block's host copy (run on the workers, summed over all blocks); the kernel's own histograms of
seeded sampled blocks equal numpy's bin by bin; and random data's counts fit their distribution
(Pearson's chi-square, with a Chernoff bound on a false alarm).

The ``fast`` check reads the run's certificates (:mod:`pipelines.histogram.shared`): the
reported counts, NaN count and total are the blocks' own added up (totals, and a fingerprint
that any count changed, moved or lost between the blocks and their sum alters), random data's
blocks each count all their values; a seeded sample of cells, as many as
:func:`daskgpu.toolkit.spot_checks.sample_size` asks for a fault in a tenth of them to show with
probability 99.9 %, binned by ``numpy.histogram`` from values drawn again in this process (or
re-read from the input) equals the kernel's own counts of each, bin by bin; the default range's
min and max are the values where the first pass found them; the edges, any --output file and
random data's chi-square as in ``full``. Random cells are drawn again from their block's seed:
uniform values by NumPy's PCG64 advanced to the cell's first value (a 64-bit word a float64
value, half a word a float32 one); normal values, whose sampler takes a varying number of
words, from the generator state the run noted at the cell, checked to lie on the block's own
stream (its distance from the seeded state, at least a word a value and at most an eighth
more). Where the run reports no cells (random data on GPU workers, or more than
``shared.MAX_CELL_BINS`` bins) a seeded sample of whole blocks is binned again on the workers
instead, on the device with ``cupy.histogram``.

It shares no code with the computation it checks: it never imports
:mod:`pipelines.histogram.pipeline`, :mod:`pipelines.histogram.tasks` or the histogram kernel,
and restates numpy.histogram's range and edge rules itself. It reads the reported value through
``workload.present``, the run's facts from ``workload.context``, and the rows of the raw result
through the layout in :mod:`pipelines.histogram.shared`.
"""

from __future__ import annotations

import functools
import importlib
import math
import os

import dask
import dask.array as da
import numpy as np

from daskgpu.toolkit import pcg64, spot_checks
from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.registry import Mutation, Verification, Workload
from pipelines.histogram import shared

# Chi-square of random data: at most this many cells, each expecting at least MIN_EXPECTED
# values (Pearson's approximation holds far into the tail), bins first pooled into GROUPS.
MAX_CELLS = 256
MIN_EXPECTED = 100
GROUPS = 4096
# A correct run fails the chi-square test with probability below this (a Chernoff bound).
FALSE_ALARM = 1e-9
# What the fast depth's spot checks promise (see daskgpu.toolkit.spot_checks).
FAST_FRACTION = spot_checks.FRACTION
FAST_CONFIDENCE = spot_checks.CONFIDENCE
# The columns of a .csv histogram, in order.
CSV_COLUMNS = ("left", "right", "count")
# A failed fast check names at most this many disagreeing cells.
MAX_LISTED = 3


def _widened(lo: float, hi: float) -> tuple[float, float]:
    return (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)  # numpy.histogram's rule


def _edges(dtype, lo: float, hi: float, bins: int) -> np.ndarray:
    """The edges numpy.histogram bins data of ``dtype`` with (float32 data: float32 edges)."""
    return np.histogram_bin_edges(np.empty(0, dtype), bins, range=(lo, hi)).astype(np.float64)


# --- verification: numpy.histogram of every block's host copy, on the workers ---------------


def _numpy_block_histogram(values, lo, hi, bins):
    counts, _ = np.histogram(values, bins=bins, range=(lo, hi))
    nan = np.count_nonzero(np.isnan(values))
    return np.append(counts, nan).reshape((1,) * values.ndim + (bins + 1,))


def _numpy_block_extent(values):
    finite = np.where(np.isfinite(values), values, np.nan).ravel()
    extent = [np.fmin.reduce(finite, initial=np.inf), np.fmax.reduce(finite, initial=-np.inf)]
    return np.array(extent, dtype=np.float64).reshape((1,) * values.ndim + (2,))


def _per_host_block(host, func, width, dtype, **kwargs):
    grid = tuple((1,) * len(c) for c in host.chunks)
    return host.map_blocks(func, chunks=grid + ((width,),), new_axis=[host.ndim], dtype=dtype,
                           meta=np.empty((0,) * (host.ndim + 1), dtype=dtype), **kwargs)


def _numpy_reference(ctx: dict) -> dict:
    """numpy.histogram of every block (summed), of the sampled blocks, and the finite extent."""
    data, bins = ctx["data"], ctx["bins"]
    host = data.map_blocks(to_host, dtype=data.dtype, meta=np.empty((0,) * data.ndim, data.dtype))
    per_block = _per_host_block(host, _numpy_block_histogram, bins + 1, np.int64,
                                lo=ctx["lo"], hi=ctx["hi"], bins=bins)
    grid = tuple(range(data.ndim))
    lazy = {"counts": per_block.sum(axis=grid, dtype=np.int64),
            "sampled": da.stack([per_block[loc] for loc in ctx["sampled"]])}
    if ctx["range_given"] is None:
        extent = _per_host_block(host, _numpy_block_extent, 2, np.float64)
        lazy.update(lo=extent[..., 0].min(), hi=extent[..., 1].max())
    (reference,) = dask.compute(lazy)
    return reference


def _range_problems(ctx: dict, value: dict, reference: dict) -> list[str]:
    if ctx["range_given"] is not None:
        expected = tuple(ctx["range_given"])
        what = "the given range"
    else:
        expected = _widened(float(reference["lo"]), float(reference["hi"]))
        what = "the finite min and max"
    problems = []
    if (ctx["lo"], ctx["hi"]) != expected:
        problems.append(f"range: [{ctx['lo']:.6g}, {ctx['hi']:.6g}] used, {what} "
                        f"[{expected[0]:.6g}, {expected[1]:.6g}]")
    edges = _edges(ctx["dtype"], *expected, ctx["bins"])
    wrong = np.flatnonzero(np.asarray(value["edges"]) != edges)
    if wrong.size:
        i = int(wrong[0])
        problems.append(f"edge {i}: {value['edges'][i]:.6g} reported, numpy.histogram "
                        f"{edges[i]:.6g}")
    return problems


def _first_wrong_bin(got, expected, counted: str, against: str) -> str | None:
    wrong = np.flatnonzero(np.asarray(got) != np.asarray(expected))
    if not wrong.size:
        return None
    i = int(wrong[0])
    return (f"bin {i}: {int(got[i])} {counted}, {against} {int(expected[i])} "
            f"({wrong.size} of {len(expected)} bins differ)")


def _count_problems(value: dict, reference: dict, bins: int) -> list[str]:
    expected = reference["counts"][:bins]
    problems = []
    total = int(expected.sum())
    if value["in_range"] != total:
        problems.append(f"total: {value['in_range']} counted, numpy.histogram {total}")
    wrong_bin = _first_wrong_bin(value["counts"], expected, "counted", "numpy.histogram")
    if wrong_bin:
        problems.append(wrong_bin)
    nan = int(reference["counts"][bins])
    if value["nan"] != nan:
        problems.append(f"NaN: {value['nan']} counted, numpy.isnan {nan}")
    return problems


def _block_label(ctx: dict, location: tuple[int, ...]) -> str:
    return str(int(np.ravel_multi_index(location, ctx["data"].numblocks)))


def _sampled_problems(ctx: dict, kernel_counts, numpy_counts) -> list[str]:
    problems = []
    for location, got, expected in zip(ctx["sampled"], kernel_counts, numpy_counts, strict=True):
        wrong = _first_wrong_bin(got, expected, "by the kernel", "numpy.histogram")
        if wrong:
            problems.append(f"block {_block_label(ctx, location)}: {wrong}")
    return problems


def _csv_columns(path: str, names: tuple[str, ...]) -> tuple[dict, str | None]:
    """A ``.csv`` table's columns ``names`` (these, in order) as float64; what is amiss, or None.

    pyarrow's parser rounds correctly: a value written by ``repr`` reads back exactly.
    """
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    try:
        table = pa_csv.read_csv(path, convert_options=pa_csv.ConvertOptions(
            column_types={name: pa.float64() for name in names}))
    except (pa.ArrowInvalid, OSError) as exc:
        return {}, f"not a table of numbers: {str(exc).splitlines()[0]}"
    if tuple(table.column_names) != names:
        return {}, f"columns {table.column_names[:4]}, {', '.join(names)} expected"
    if any(table.column(name).null_count for name in names):
        return {}, "a value is missing"
    return {name: table.column(name).to_numpy() for name in names}, None


def _saved_histogram(path: str, output: str) -> tuple[np.ndarray, np.ndarray, str | None]:
    """The counts and edges saved at ``path`` in ``output``'s format, and what is amiss in it.

    ``.npz``: its ``counts`` and ``edges`` arrays, nothing else, read without pickle. ``.csv``:
    the count column, and the edges from the left column and the last right one, each right
    edge the next bin's left.
    """
    if output.lower().endswith(".csv"):
        columns, wrong = _csv_columns(path, CSV_COLUMNS)
        if wrong:
            return np.zeros(0), np.zeros(0), wrong
        left, right, counts = (columns[name] for name in CSV_COLUMNS)
        edges = np.append(left, right[-1:])
        if not np.array_equal(right[:-1], left[1:]):
            return counts, edges, "a bin's right edge is not the next bin's left"
        return counts, edges, None
    with np.load(path, allow_pickle=False) as saved:
        names = sorted(saved.files)
        if names != ["counts", "edges"]:
            return np.zeros(0), np.zeros(0), f"holds {names}, counts and edges expected"
        counts, edges = saved["counts"], saved["edges"]
    if counts.dtype != np.int64 or counts.ndim != 1 or edges.ndim != 1:
        return counts, edges, (f"counts {counts.dtype} {counts.shape} and edges {edges.dtype} "
                               f"{edges.shape}: 1-D int64 counts and 1-D edges expected")
    return counts, edges, None


def _output_problems(ctx: dict, reference: dict, written: str | None) -> list[str]:
    """What the saved histogram (``written``: where this run wrote ``--output``) gets wrong."""
    path = ctx["output"]
    if path is None or written is None or not os.path.exists(written):
        return []
    counts, edges, wrong = _saved_histogram(written, path)
    bins = ctx["bins"]
    if wrong is None and (len(counts) != bins or len(edges) != bins + 1):
        wrong = f"{len(counts)} counts and {len(edges)} edges for {bins} bins"
    if wrong is None:
        wrong = _first_wrong_bin(counts, reference["counts"][:bins], "saved",
                                 "numpy.histogram")
        if not np.array_equal(edges, ctx["edges"]):
            wrong = (wrong + "; " if wrong else "") + "edges differ from numpy.histogram's"
        elif path.lower().endswith(".npz") and edges.dtype != np.dtype(ctx["dtype"]):
            wrong = (wrong + "; " if wrong else "") + (
                f"edges of type {edges.dtype}, numpy.histogram's are {np.dtype(ctx['dtype'])}")
    return [f"--output {path}: {wrong}"] if wrong else []


# --- chi-square of a random histogram against its distribution ------------------------------


def _interval_probability(distribution: str, a: float, b: float) -> float:
    """P(a <= X < b) for uniform [0, 1) or standard normal X (erfc keeps the tails exact)."""
    if distribution == "uniform":
        return max(0.0, min(b, 1.0) - max(a, 0.0))
    root2 = math.sqrt(2.0)
    if b <= 0:
        return 0.5 * (math.erfc(-b / root2) - math.erfc(-a / root2))
    if a >= 0:
        return 0.5 * (math.erfc(a / root2) - math.erfc(b / root2))
    return 1.0 - 0.5 * math.erfc(-a / root2) - 0.5 * math.erfc(b / root2)


def _pooled(observed, expected, target: float) -> tuple[list[float], list[float]]:
    """Consecutive groups merged until each cell expects at least ``target`` values."""
    cells_o, cells_e, o, e = [], [], 0.0, 0.0
    for go, ge in zip(observed, expected, strict=True):
        o, e = o + go, e + ge
        if e >= target:
            cells_o.append(o)
            cells_e.append(e)
            o = e = 0.0
    if cells_o:  # the remainder joins the last cell
        cells_o[-1] += o
        cells_e[-1] += e
    return cells_o, cells_e


def chi_square(counts, edges, distribution: str, open_tails: bool):
    """Pearson's chi-square of ``counts`` against ``distribution``, bins pooled as needed.

    Parameters
    ----------
    counts : array of int
        The histogram (one count per bin).
    edges : array of float
        Its ``len(counts) + 1`` bin edges.
    distribution : {"uniform", "normal"}
        Uniform on [0, 1), or standard normal.
    open_tails : bool
        The range is the data's own min and max: every value lies in it, so the first and last
        bins stand for everything below and above their inner edge.

    Returns
    -------
    tuple of (float, int, float) or None
        The statistic, the number of cells, and the natural log of a Chernoff upper bound on
        the probability of a statistic this large for a correct histogram (0 when not above
        its mean); None when there are too few values for two cells.
    """
    counts = np.asarray(counts, dtype=np.float64)
    bins = len(counts)
    starts = np.unique(np.linspace(0, bins, min(bins, GROUPS) + 1).round().astype(int))
    observed = np.add.reduceat(counts, starts[:-1])
    bounds = np.asarray(edges, dtype=np.float64)[starts]
    if open_tails:
        bounds[0], bounds[-1] = -np.inf, np.inf
    probability = np.array([_interval_probability(distribution, a, b)
                            for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    n, mass = observed.sum(), probability.sum()
    if n == 0:
        return None
    if mass == 0:  # values counted where the distribution has none
        return math.inf, 1, -math.inf
    cells_o, cells_e = _pooled(observed, n * probability / mass, max(MIN_EXPECTED,
                                                                    n / MAX_CELLS))
    if len(cells_o) < 2:
        return None
    o, e = np.array(cells_o), np.array(cells_e)
    statistic, dof = float(((o - e) ** 2 / e).sum()), len(cells_o) - 1
    log_bound = 0.0
    if statistic > dof:  # P(X >= x) <= (x/k)^(k/2) exp((k - x)/2) for chi-square X, k dof
        log_bound = dof / 2 * math.log(statistic / dof) - (statistic - dof) / 2
    return statistic, len(cells_o), log_bound


def _fit(ctx: dict, value: dict) -> tuple[list[str], str]:
    """Random data's chi-square line ("" for an input), and the line as a problem if it fails."""
    if ctx["distribution"] is None:
        return [], ""
    fits, line = _chi_square_line(ctx, value)
    return ([] if fits else [line]), line


def _chi_square_line(ctx: dict, value: dict) -> tuple[bool, str]:
    distribution = ctx["distribution"]
    edges = np.linspace(ctx["lo"], ctx["hi"], ctx["bins"] + 1)
    result = chi_square(value["counts"], edges, distribution, ctx["range_given"] is None)
    if result is None:
        return True, "too few values for a chi-square test"
    statistic, cells, log_bound = result
    if log_bound < math.log(FALSE_ALARM):
        return False, (f"chi-square: {statistic:.4g} on {cells} cells, the counts do not fit "
                       f"the {distribution} distribution (p < {FALSE_ALARM:g})")
    return True, f"chi-square {statistic:.4g} on {cells} cells fits {distribution}"


def verify(workload: Workload, raw: dict, depth: str = "full") -> Verification:
    """Check the reported histogram: ``full`` against numpy.histogram, ``fast`` spot checks.

    Parameters
    ----------
    workload : Workload
        The run's workload (its context: range, edges, data, seed, what the first pass found).
    raw : dict
        The computed result (layout: :mod:`pipelines.histogram.shared`).
    depth : {"full", "fast"}
        ``full``: numpy.histogram runs on each block's host copy on its worker: the sum over
        all blocks must equal the reported counts bin by bin, and on seeded sampled blocks it
        must equal the kernel's own block histograms. ``fast``: the counts must be the blocks'
        own added up, and numpy.histogram of a seeded sample of cells (or, where the run
        reports no cells, of blocks) must equal the kernel's counts of each. Random data is
        also tested against its distribution.

    Returns
    -------
    Verification
        Whether every check passed; what was checked, or everything that disagreed.
    """
    if depth == "fast":
        return _verify_fast(workload, raw)
    ctx = workload.context
    value = workload.present(workload, raw)
    reference = _numpy_reference(ctx)
    problems = [*_count_problems(value, reference, ctx["bins"]),
                *_range_problems(ctx, value, reference),
                *_sampled_problems(ctx, shared.sampled(raw["histograms"]), reference["sampled"]),
                *_output_problems(ctx, reference, workload.written(ctx["output"])
                                  if ctx["output"] else None)]
    unfit, chi_line = _fit(ctx, value)
    problems += unfit
    if problems:
        return Verification(False, "; ".join(problems))
    blocks = ", ".join(_block_label(ctx, loc) for loc in ctx["sampled"])
    detail = (f"all {ctx['bins']} counts, NaN and edges equal numpy.histogram's over "
              f"{ctx['data'].npartitions} blocks ({value['in_range']} in range); blocks "
              f"{blocks} equal it bin by bin")
    return Verification(True, f"{detail}; {chi_line}" if chi_line else detail)


# --- the fast depth: the run's certificates, and seeded spot checks -------------------------


def _verify_fast(workload: Workload, raw: dict) -> Verification:
    ctx = workload.context
    value = workload.present(workload, raw)
    lines = np.asarray(raw["blocks"], dtype=np.int64)
    if lines.shape != (ctx["data"].npartitions, 3):
        return Verification(False, f"blocks: {lines.shape[0]} lines for "
                                   f"{ctx['data'].npartitions} blocks")
    problems = [*_summed_problems(ctx, value, lines), *_block_total_problems(ctx, lines)]
    if _reports_cells(ctx):
        spot, found = _cell_problems(ctx, raw)
    else:
        spot, found = _block_sample_problems(ctx, lines)
    problems += spot
    if ctx["range_given"] is None and not all(math.isfinite(v) for v in found):
        problems.append("range: no finite min and max where the first pass found them "
                        f"({ctx['extremes']})")
    else:
        extent = {"lo": found[0], "hi": found[1]} if ctx["range_given"] is None else {}
        problems += _range_problems(ctx, value, extent)
    counts = {"counts": shared.summed(np.asarray(raw["histograms"]))}
    problems += _output_problems(ctx, counts, workload.written(ctx["output"])
                                 if ctx["output"] else None)
    unfit, chi_line = _fit(ctx, value)
    problems += unfit
    if problems:
        return Verification(False, "; ".join(problems))
    return Verification(True, _passed_fast(ctx, value, chi_line))


def _passed_fast(ctx: dict, value: dict, chi_line: str) -> str:
    blocks = ctx["data"].npartitions
    every = ", each counting all its values" if _counts_everything(ctx) else ""
    if _reports_cells(ctx):
        population, sample = _fast_cells(ctx)
        how = "re-read" if ctx["seed"] is None else "drawn again"
        spot = (f"{spot_checks.detection(len(sample), population, 'cells')}: numpy.histogram "
                f"of each, {how}, equals the kernel's counts bin by bin")
    else:
        population, sample = _fast_blocks(ctx)
        spot = (f"{spot_checks.detection(len(sample), population, 'blocks')}: their histograms "
                "recomputed on the workers equal the kernel's")
    extent = ("the min and max found again where the first pass found them"
              if ctx["range_given"] is None else "the given range")
    detail = (f"the {ctx['bins']} counts, NaN and total ({value['in_range']} in range) add up "
              f"from the {blocks} blocks' own{every}; {spot}; edges from {extent}")
    return f"{detail}; {chi_line}" if chi_line else detail


def _reports_cells(ctx: dict) -> bool:
    random_on_device = ctx["seed"] is not None and ctx["library"] != "numpy"
    return shared.reports_cells(ctx["bins"], random_on_device)


def _counts_everything(ctx: dict) -> bool:
    """Random data in its own range: every value lies in the bins (none is NaN or infinite)."""
    return ctx["seed"] is not None and ctx["range_given"] is None


def _summed_problems(ctx: dict, value: dict, lines: np.ndarray) -> list[str]:
    """The reported counts against the blocks' lines: totals, NaN and fingerprints."""
    bins, problems = ctx["bins"], []
    total, nan = int(lines[:, 0].sum()), int(lines[:, 1].sum())
    if value["in_range"] != total:
        problems.append(f"total: {value['in_range']} counted, the blocks' own counts add up "
                        f"to {total}")
    row = np.append(value["counts"], value["nan"])
    weights = shared.fingerprint_weights(bins + 1, _sample_seed(ctx))
    summed = shared.fingerprint(row, weights) % 2**64
    expected = int(lines[:, 2].astype(np.uint64).sum(dtype=np.uint64))
    if summed != expected:
        problems.append(f"bin counts: their fingerprint {summed:#x} is not the blocks' "
                        f"{expected:#x} added up (a count changed, moved or lost between "
                        "the blocks and their sum)")
    if value["nan"] != nan:
        problems.append(f"NaN: {value['nan']} counted, the blocks' own add up to {nan}")
    return problems


def _block_total_problems(ctx: dict, lines: np.ndarray) -> list[str]:
    if not _counts_everything(ctx):
        return []
    data = ctx["data"]
    for number, location in enumerate(np.ndindex(*data.numblocks)):
        size = math.prod(c[i] for c, i in zip(data.chunks, location, strict=True))
        in_bins, nan = int(lines[number, 0]), int(lines[number, 1])
        if in_bins != size or nan:
            return [f"total: block {number} counts {in_bins} of its {size} values in the "
                    f"bins and {nan} NaN (random data in its own range: all of them, no NaN)"]
    return []


def _sample_seed(ctx: dict) -> int:
    """The seed of the run's samples: random data's own, an input's size."""
    return ctx["seed"] if ctx["seed"] is not None else math.prod(ctx["data"].shape)


def _block_shapes(ctx: dict) -> list[tuple[int, ...]]:
    data = ctx["data"]
    return [tuple(c[i] for c, i in zip(data.chunks, loc, strict=True))
            for loc in np.ndindex(*data.numblocks)]


def _fast_cells(ctx: dict) -> tuple[int, list[int]]:
    """All the cells, and the seeded sample of them the fast depth checks.

    The cells of the extremes join the checked ones (:func:`_checked_cells`), not the sample.
    """
    population = sum(shared.slabs(shape) for shape in _block_shapes(ctx))
    return population, _sample(population, _sample_seed(ctx))


def _fast_blocks(ctx: dict) -> tuple[int, list[int]]:
    population = ctx["data"].npartitions
    return population, _sample(population, _sample_seed(ctx))


@functools.lru_cache(maxsize=16)
def _sample(population: int, seed: int) -> list[int]:
    """The seeded sample of ``range(population)`` the fast depth checks again."""
    size = spot_checks.sample_size(population, FAST_FRACTION, FAST_CONFIDENCE)
    return spot_checks.seeded_sample(population, size, seed).tolist()


def _extreme_rows(ctx: dict) -> list[tuple[int, int, int]]:
    """``(block, row, flat index)`` where the run's first pass found the min, then the max."""
    shapes = _block_shapes(ctx)
    return [(block, int(np.unravel_index(index, shapes[block])[0]) if shapes[block] else 0,
             index) for block, index in ctx["extremes"] or ()]


def _checked_cells(ctx: dict) -> list[tuple[int, int, int]]:
    """``(block, first row, stop row)`` of every cell the run binned apart, in order."""
    shapes = _block_shapes(ctx)
    steps = [shared.slab_rows(shape) for shape in shapes]
    firsts = np.concatenate([[0], np.cumsum([shared.slabs(shape) for shape in shapes])])
    cells = set(_fast_cells(ctx)[1])
    cells.update(int(firsts[block]) + row // steps[block] for block, row, _ in
                 _extreme_rows(ctx))
    located = []
    for cell in sorted(cells):
        block = int(np.searchsorted(firsts, cell, side="right")) - 1
        first = (cell - int(firsts[block])) * steps[block]
        rows = shapes[block][0] if shapes[block] else 1
        located.append((block, first, min(first + steps[block], rows)))
    return located


def _cell_problems(ctx: dict, raw: dict) -> tuple[list[str], list[float]]:
    """numpy.histogram of every checked cell against the kernel's; the extremes' values."""
    cells = _checked_cells(ctx)
    rows = np.asarray(raw["cells"])
    if rows.shape != (len(cells), ctx["bins"] + 1):
        return [f"cells: {rows.shape[0]} checked cells' counts reported, {len(cells)} "
                "expected"], [math.nan, math.nan]
    found = [math.nan, math.nan]
    extremes = _extreme_rows(ctx)
    problems = []
    for number, ((block, first, stop), values) in enumerate(
            zip(cells, _cell_values(ctx, raw, cells), strict=True)):
        if isinstance(values, str):
            problems.append(values)
            continue
        wrong = _cell_mismatch(ctx, rows[number], values)
        if wrong:
            problems.append(f"cell {number} (block {block}, rows {first} to {stop - 1}): "
                            f"{wrong}")
        for i, (at_block, at_row, index) in enumerate(extremes):
            if at_block == block and first <= at_row < stop:
                found[i] = float(values[index - first * (values.size // (stop - first))])
    return problems[:MAX_LISTED], found


def _cell_mismatch(ctx: dict, reported: np.ndarray, values: np.ndarray) -> str | None:
    bins = ctx["bins"]
    counts, _ = np.histogram(values, bins=bins, range=(ctx["lo"], ctx["hi"]))
    wrong = _first_wrong_bin(reported[:bins], counts, "by the kernel", "numpy.histogram")
    if wrong:
        return wrong
    nan = int(np.count_nonzero(np.isnan(values)))
    if int(reported[bins]) != nan:
        return f"NaN: {int(reported[bins])} by the kernel, numpy.isnan {nan}"
    if ctx["range_given"] is None and ctx["seed"] is None:  # random data: every block counted
        outside = values.size - int(counts.sum()) - nan - int(np.count_nonzero(np.isinf(values)))
        if outside:
            return f"range: {outside} finite values outside [{ctx['lo']:.6g}, {ctx['hi']:.6g}]"
    return None


def _cell_values(ctx: dict, raw: dict, cells):
    """The values of every checked cell (flat, C order), drawn again or re-read.

    A line instead of the values where a cell cannot be drawn again from the run's note of
    its generator's state.
    """
    if ctx["seed"] is None:
        yield from _reread_cells(ctx, cells)
        return
    states = np.asarray(raw["states"], dtype=np.uint64)
    if states.shape != (len(cells), 6):
        yield from (f"states: {states.shape[0]} reported for {len(cells)} checked cells"
                    for _ in cells)
        return
    current = None
    # One buffer for every cell: a fresh array a cell would cost its pages' first touch.
    buffer = np.empty(max((stop - first for _, first, stop in cells), default=0),
                      dtype=ctx["dtype"])
    for (block, first, stop), words in zip(cells, states, strict=True):
        if block != current:  # the cells come block by block
            current = block
            bits = np.random.PCG64(np.random.SeedSequence(ctx["seed"], spawn_key=(block,)))
            rng, seeded = np.random.Generator(bits), bits.state
        bits.state = seeded
        placed = _placed(ctx, bits, first, words)
        if placed:
            yield f"cell at block {block} row {first}: {placed}"
            continue
        values = buffer[:stop - first]
        if ctx["distribution"] == "normal":
            rng.standard_normal(out=values, dtype=ctx["dtype"])
        else:
            rng.random(out=values, dtype=ctx["dtype"])
        yield values


def _placed(ctx: dict, bits, first: int, words) -> str | None:
    """Put ``bits`` (at its block's seeded state) at value ``first`` of its block.

    Uniform values: advanced by the words before ``first``. Normal values: set to the state
    the run noted, once it is shown to lie on this stream at a plausible distance.
    """
    half = np.dtype(ctx["dtype"]).itemsize == 4  # float32 values take half a word each
    if ctx["distribution"] != "normal":
        bits.advance(first // 2 if half else first)  # cells start at even values
        return None
    return pcg64.place(bits, first, words, half)


def _reread_cells(ctx: dict, cells):
    """An input's checked cells, re-read with ``numpy.load`` (memory-mapped) or Zarr."""
    source = ctx["source"]
    if source.kind == "zarr":
        import zarr

        stored = zarr.open_array(source.path, mode="r")
    else:
        stored = np.load(source.path, mmap_mode="r")
    data = ctx["data"]
    origins = list(np.ndindex(*data.numblocks))
    for block, first, stop in cells:
        location = origins[block]
        region = [slice(int(sum(c[:i])), int(sum(c[:i + 1])))
                  for c, i in zip(data.chunks, location, strict=True)]
        if region:
            region[0] = slice(region[0].start + first, region[0].start + stop)
        yield np.asarray(stored[tuple(region)]).ravel()


def _block_sample_problems(ctx: dict, lines: np.ndarray) -> tuple[list[str], list[float]]:
    """A seeded sample of whole blocks (and the extremes') binned again, against their lines.

    On the workers, on the device, with the array library's own histogram.
    """
    data = ctx["data"]
    extremes = ctx["extremes"] or ()
    chosen = sorted(set(_fast_blocks(ctx)[1]) | {block for block, _ in extremes})
    pieces = data.to_delayed().ravel()
    weights = shared.fingerprint_weights(ctx["bins"] + 1, _sample_seed(ctx))
    tasks = [dask.delayed(block_line, pure=True)(
        pieces[block], (ctx["lo"], ctx["hi"], ctx["edges"]), weights, ctx["library"],
        [index for at, index in extremes if at == block]) for block in chosen]
    found = [math.nan, math.nan]
    problems = []
    for block, (line, picked) in zip(chosen, dask.compute(*tasks), strict=True):
        if [int(x) for x in line] != [int(x) for x in lines[block]]:
            problems.append(f"block {block}: the kernel's counts (in range, NaN, fingerprint) "
                            f"{lines[block].tolist()}, recomputed {list(line)}")
        for i, (at, _) in enumerate(extremes):
            if at == block:
                found[i] = picked.pop(0)
    return problems, found


def block_line(values, binning, weights, library: str, at) -> tuple[list[int], list[float]]:
    """A block's line (in range, NaN, fingerprint), and its values at the flat indices ``at``.

    Computed where the block is, by the array library's own histogram: ``numpy.histogram`` of
    the range; on a GPU ``cupy.histogram`` of NumPy's edges (its own would be CuPy's
    ``linspace``'s), the NaN values left out first (its search would count them). ``binning``
    is ``(lo, hi, edges)``.
    """
    lo, hi, edges = binning
    flat = values.ravel()
    bins = len(edges) - 1
    is_nan = np.isnan(flat)
    nan = int(is_nan.sum())
    if library == "numpy":
        counts, _ = np.histogram(flat, bins=bins, range=(lo, hi))
    else:
        xp = importlib.import_module(library)
        kept = flat[~is_nan] if nan else flat
        counts = to_host(xp.histogram(kept, bins=xp.asarray(edges))[0])
    row = np.append(np.asarray(counts, dtype=np.int64), nan)
    line = [int(row[:bins].sum()), nan, shared.fingerprint(row, weights)]
    return line, [float(flat[i]) for i in at]


# --- mutations: alterations of the computed result that verify must catch ------------------


def _altered_counts(change):
    def alter(raw: dict) -> dict:
        histograms = np.array(raw["histograms"], copy=True)
        bins = histograms.shape[-1] - 1  # a row: the bins' counts, then the NaN count
        change(shared.bin_counts(shared.summed(histograms), bins), histograms)
        return {**raw, "histograms": histograms}
    return alter


def _reverse(bins, histograms):
    bins[:] = bins[::-1].copy()


def _shift(bins, histograms):
    bins[1:] = bins[:-1].copy()
    bins[0] = 0


def _add_one(bins, histograms):
    bins[len(bins) // 2] += 1


def _zero(bins, histograms):
    bins[len(bins) // 3] = 0


def _swap(bins, histograms):
    low, high = int(np.argmin(bins)), int(np.argmax(bins))
    bins[[low, high]] = bins[[high, low]]


def _drop_block(bins, histograms):
    bins -= shared.bin_counts(shared.sampled(histograms)[0], len(bins))  # first sampled block


# What a failed check's detail names (regular expressions, see Mutation.names): the fast
# depth sees counts only through the blocks' totals and fingerprints, the full one bin by bin.
FINGERPRINT = r"bin counts: their fingerprint"
TOTAL_FAST = r"total: \d+ counted, the blocks' own"
ONE_BIN = r"bin \d+: \d+ counted, numpy\.histogram \d+ \(1 of"
MUTATIONS = (
    Mutation("bins reversed", _altered_counts(_reverse),
             rf"{FINGERPRINT}|bin 0: \d+ counted, numpy\.histogram"),
    Mutation("shifted by one bin", _altered_counts(_shift), rf"{TOTAL_FAST}|bin 0: 0 counted"),
    Mutation("one bin +1", _altered_counts(_add_one), rf"{TOTAL_FAST}|{ONE_BIN}"),
    Mutation("bin zeroed", _altered_counts(_zero),
             rf"{TOTAL_FAST}|bin \d+: 0 counted, numpy\.histogram \d+ \(1 of"),
    Mutation("two bins swapped", _altered_counts(_swap),
             rf"{FINGERPRINT}|bin \d+: \d+ counted, numpy\.histogram \d+ \(2 of"),
    Mutation("dropped block", _altered_counts(_drop_block), r"^total: \d+ counted"),
)
