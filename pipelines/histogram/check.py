"""Independent verification of histogram-pipeline, and the mutations it must catch.

What the check establishes: every reported bin count, the NaN count, the total in range, the
range and bin edges, and any saved --output table equal ``numpy.histogram`` of every block's
host copy (run on the workers, summed over all blocks); the kernel's own histograms of seeded
sampled blocks equal numpy's bin by bin; and random data's counts fit their distribution
(Pearson's chi-square, with a Chernoff bound on a false alarm).

It shares no code with the computation it checks: it never imports
:mod:`pipelines.histogram.pipeline`, :mod:`pipelines.histogram.tasks` or the histogram kernel,
and restates numpy.histogram's range and edge rules itself. It reads the reported value through
``workload.present``, the run's facts from ``workload.context``, and the rows of the raw result
through the layout in :mod:`pipelines.histogram.shared`.
"""

from __future__ import annotations

import csv
import math
import os

import dask
import dask.array as da
import numpy as np

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


def _saved_table(path: str, output: str) -> dict:
    """The table at ``path``, in the format of ``output``'s suffix."""
    if output.lower().endswith(".csv"):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        return {name: np.array([float(r[name]) for r in rows]) for name in ("left", "right",
                                                                             "count")}
    table = np.load(path, allow_pickle=False)
    return {name: np.asarray(table[name], dtype=np.float64) for name in ("left", "right",
                                                                         "count")}


def _output_problems(ctx: dict, reference: dict, written: str | None) -> list[str]:
    """What the saved table (``written``: where this run wrote ``--output``) gets wrong."""
    path = ctx["output"]
    if path is None or written is None or not os.path.exists(written):
        return []
    table = _saved_table(written, path)
    bins = ctx["bins"]
    if len(table["count"]) != bins:
        return [f"--output {path}: {len(table['count'])} rows for {bins} bins"]
    wrong = _first_wrong_bin(table["count"], reference["counts"][:bins], "saved",
                             "numpy.histogram")
    edges = ctx["edges"]
    if not (np.array_equal(table["left"], edges[:-1]) and np.array_equal(table["right"],
                                                                          edges[1:])):
        wrong = (wrong + "; " if wrong else "") + "edges differ from numpy.histogram's"
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


def verify(workload: Workload, raw: dict) -> Verification:
    """Every reported count, the NaN count, the range and edges against numpy.histogram.

    numpy.histogram runs on each block's host copy on its worker: the sum over all blocks must
    equal the reported counts bin by bin, and on seeded sampled blocks it must equal the
    kernel's own block histograms. Random data is also tested against its distribution.
    """
    ctx = workload.context
    value = workload.present(workload, raw)
    reference = _numpy_reference(ctx)
    problems = [*_count_problems(value, reference, ctx["bins"]),
                *_range_problems(ctx, value, reference),
                *_sampled_problems(ctx, shared.sampled(raw["histograms"]), reference["sampled"]),
                *_output_problems(ctx, reference, workload.written(ctx["output"])
                                  if ctx["output"] else None)]
    fits, chi_line = (True, "")
    if ctx["distribution"] is not None:
        fits, chi_line = _chi_square_line(ctx, value)
        if not fits:
            problems.append(chi_line)
    if problems:
        return Verification(False, "; ".join(problems))
    blocks = ", ".join(_block_label(ctx, loc) for loc in ctx["sampled"])
    detail = (f"all {ctx['bins']} counts, NaN and edges equal numpy.histogram's over "
              f"{ctx['data'].npartitions} blocks ({value['in_range']} in range); blocks "
              f"{blocks} equal it bin by bin")
    return Verification(True, f"{detail}; {chi_line}" if chi_line else detail)


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


MUTATIONS = (
    Mutation("bins reversed", _altered_counts(_reverse), "bin"),
    Mutation("shifted by one bin", _altered_counts(_shift), "bin"),
    Mutation("one bin +1", _altered_counts(_add_one), "bin"),
    Mutation("bin zeroed", _altered_counts(_zero), "bin"),
    Mutation("two bins swapped", _altered_counts(_swap), "bin"),
    Mutation("dropped block", _altered_counts(_drop_block), "total"),
)
