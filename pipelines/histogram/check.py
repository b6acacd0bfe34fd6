"""histogram-pipeline's check, declared on :mod:`daskgpu.verification`.

Both depths: the counts, NaN and total are the blocks' own added up (totals and fingerprints),
random data in its own range has every block count all its values, range and edges are
``numpy.histogram``'s, an ``--output`` holds the counts, random data fits its distribution.
``fast`` bins a seeded sample of cells again here (:mod:`.check_fast`) or, where the run reports
none, of blocks on the workers; ``full`` bins every block again on the workers, its summed
counts too (:mod:`.check_full`). The data is drawn or read again, never through the run's code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from daskgpu.verification import (
    FALSE_ALARM,
    Check,
    Plan,
    Sampler,
    Unreadable,
    chi_square_log_tail,
    differences,
    fingerprint,
    fingerprint_weights,
    replay,
)
from pipelines.histogram.check_fast import cells_again, cells_agree
from pipelines.histogram.check_full import counts_agree
from pipelines.histogram.check_mutations import MUTATIONS
from pipelines.histogram.check_replay import block_row, edges, located
from pipelines.histogram.shared import HistogramContext

# Chi-square of random data: at most this many cells, each expecting at least MIN_EXPECTED
# values (Pearson's approximation holds far into the tail), bins first pooled into GROUPS.
MAX_CELLS = 256
MIN_EXPECTED = 100
GROUPS = 4096
CSV_COLUMNS = ("left", "right", "count")  # a .csv histogram's columns, in order


@dataclass
class Reported:
    """What the check reads of a run; the replay adds the finite min and max it ``found``."""

    value: dict
    rows: np.ndarray
    lines: np.ndarray
    cells: np.ndarray
    states: np.ndarray
    written: str | None
    found: tuple[float, float] = (math.inf, -math.inf)
    again: dict = field(default_factory=dict)


def read(workload, raw) -> Reported:
    """The reported value, the raw rows and certificates, and where ``--output`` was written."""
    ctx = workload.context
    try:
        return Reported(workload.present(workload, raw), np.asarray(raw["histograms"]),
                        np.asarray(raw["blocks"], dtype=np.int64), np.asarray(raw["cells"]),
                        np.asarray(raw["states"], dtype=np.uint64),
                        workload.written(ctx.output) if ctx.output else None)
    except (KeyError, TypeError, IndexError) as exc:
        raise Unreadable(f"result carries no histogram rows and certificates ({exc})") from exc


def block_plan(ctx: HistogramContext, depth: str) -> Plan:
    """The blocks binned again: every one at ``full``; at ``fast`` a sample and the extremes'."""
    return Plan.at(depth, ctx.grid.blocks, Sampler(ctx.sample_seed, "blocks"),
                   always=[block for block, _ in ctx.extremes or ()])


def lines_fill_grid(ctx: HistogramContext, r, verdict) -> None:
    """One line for every block, and a row for the sum and each sampled block."""
    rows = (1 + len(ctx.sampled), ctx.bins + 1)
    verdict.require(r.lines.shape == (ctx.grid.blocks, 3),
                    f"blocks: {len(r.lines)} lines for {ctx.grid.blocks} blocks")
    verdict.require(r.rows.shape == rows, f"histograms: {r.rows.shape} rows, {rows} expected")


def counts_add_up(ctx: HistogramContext, r, verdict) -> None:
    """The reported counts, NaN and total are the blocks' own added up (fingerprints too).

    Random data in its own range: every block counts all its values in the bins, none NaN.
    """
    value, lines = r.value, r.lines
    total, nan = int(lines[:, 0].sum()), int(lines[:, 1].sum())
    weights = fingerprint_weights(ctx.bins + 1, ctx.sample_seed)
    summed = fingerprint(np.append(value["counts"], value["nan"]), weights) % 2**64
    expected = int(lines[:, 2].astype(np.uint64).sum(dtype=np.uint64))
    if all([verdict.require(value["in_range"] == total, f"total: {value['in_range']} counted, "
                                                        f"the blocks' own add up to {total}"),
            verdict.require(summed == expected, f"bin counts: their fingerprint {summed:#x} is "
                            f"not the blocks' {expected:#x} added up (a count changed, moved or "
                            "lost between the blocks and their sum)"),
            verdict.require(value["nan"] == nan, f"NaN: {value['nan']} counted, the blocks' "
                                                 f"own add up to {nan}")]):
        verdict.establish(f"the {ctx.bins} counts, NaN and total ({total} in range) add up "
                          f"from the {ctx.grid.blocks} blocks' own")
    if not ctx.counts_everything:
        return
    sizes = ctx.grid.counts().ravel()
    wrong = np.flatnonzero((lines[:, 0] != sizes) | (lines[:, 1] != 0))
    if verdict.require(not wrong.size, lambda: (
            f"total: block {wrong[0]} counts {lines[wrong[0], 0]} of its {sizes[wrong[0]]} "
            f"values in the bins and {lines[wrong[0], 1]} NaN (random data in its own range: "
            "all of them, no NaN)")):
        verdict.establish("each block counting all its values")


def blocks_again(ctx: HistogramContext, r, verdict) -> None:
    """The replay: every block (``full``) or a sample (``fast``) had again, binned on workers."""
    plan = block_plan(ctx, verdict.depth)
    calls = [(located(ctx, b), (ctx.lo, ctx.hi, ctx.bins, ctx.sample_seed)) for b in plan]
    summed, kept, lines = replay.summed_on_workers(
        block_row, calls, ctx.sampled if verdict.depth == "full" else ())
    extent = np.array([line[3:] for line in lines], dtype=np.float64)
    r.again.update(plan=plan, lines=np.array([line[:3] for line in lines], dtype=np.int64),
                   summed=summed, sampled=kept)
    r.found = (float(extent[:, 0].min()), float(extent[:, 1].max()))


def blocks_agree(ctx: HistogramContext, r, verdict) -> None:
    """Each block binned again gives the line the run reports for it."""
    plan, again = r.again["plan"], r.again["lines"]
    if verdict.fail_all(
            f"block {b}: its bin counts' total, NaN and fingerprint {got.tolist()} by the kernel, "
            f"{want.tolist()} by numpy.histogram"
            for b, got, want in zip(plan, r.lines[list(plan)], again, strict=True)
            if not np.array_equal(got, want)):
        verdict.establish(f"{plan.promise}: numpy.histogram of each, where it lives, gives its "
                          "counts' total, NaN and fingerprint")


def range_and_edges(ctx: HistogramContext, r, verdict) -> None:
    """The range is the given one or the finite min and max found again; numpy's edges of it."""
    given, (lo, hi) = ctx.range_given is not None, r.found
    # numpy.histogram's range for data of one value: half a unit either side
    expected = tuple(ctx.range_given) if given else (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)
    what = "the given range" if given else "the finite min and max"
    if verdict.require((ctx.lo, ctx.hi) == expected, lambda: (
            f"range: [{ctx.lo:.6g}, {ctx.hi:.6g}] used, {what} [{expected[0]:.6g}, "
            f"{expected[1]:.6g}]")) and verdict.note(differences(
                r.value["edges"], edges(ctx.dtype, *expected, ctx.bins), what="edge",
                expected_as="numpy.histogram", form=".6g")):
        verdict.establish(f"edges from {what}{'' if given else ' found again'}")


def _saved(path: str, csv: bool) -> tuple[np.ndarray, np.ndarray]:
    """The counts and edges saved at ``path``; raises ValueError naming what is amiss.

    ``.csv``: the count column, and the edges from the left column and the last right one, read
    by pyarrow (whose parser rounds correctly: a value written by ``repr`` reads back exactly).
    ``.npz``: its 1-D int64 ``counts`` and 1-D ``edges``, nothing else, read without pickle.
    """
    if not csv:
        with np.load(path, allow_pickle=False) as saved:
            if sorted(saved.files) != ["counts", "edges"]:
                raise ValueError(f"holds {sorted(saved.files)}, counts and edges expected")
            counts, saved_edges = saved["counts"], saved["edges"]
        if counts.dtype != np.int64 or counts.ndim != 1 or saved_edges.ndim != 1:
            raise ValueError(f"counts {counts.dtype} {counts.shape} and edges "
                             f"{saved_edges.dtype} {saved_edges.shape}: 1-D int64 counts and "
                             "1-D edges expected")
        return counts, saved_edges
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    try:
        table = pa_csv.read_csv(path, convert_options=pa_csv.ConvertOptions(
            column_types={name: pa.float64() for name in CSV_COLUMNS}))
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"not a table of numbers: {str(exc).splitlines()[0]}") from exc
    if tuple(table.column_names) != CSV_COLUMNS:
        raise ValueError(f"columns {table.column_names[:4]}, {', '.join(CSV_COLUMNS)} expected")
    if any(table.column(name).null_count for name in CSV_COLUMNS):
        raise ValueError("a value is missing")
    left, right, counts = (table.column(name).to_numpy() for name in CSV_COLUMNS)
    if not np.array_equal(right[:-1], left[1:]):
        raise ValueError("a bin's right edge is not the next bin's left")
    return counts, np.append(left, right[-1:])


def saved_output(ctx: HistogramContext, r, verdict) -> None:
    """The ``--output`` this run wrote holds the reported counts and numpy.histogram's edges."""
    if r.written is None:
        return
    csv, at = ctx.output.lower().endswith(".csv"), f"--output {ctx.output}"
    try:
        counts, saved_edges = _saved(r.written, csv)
    except ValueError as exc:
        verdict.fail(f"{at}: {exc}")
        return
    if not verdict.require(len(counts) == ctx.bins and len(saved_edges) == ctx.bins + 1, (
            f"{at}: {len(counts)} counts and {len(saved_edges)} edges for {ctx.bins} bins")):
        return
    wrong = [differences(counts, r.value["counts"], what="bin", reported_as="saved",
                         expected_as="reported")]
    if not np.array_equal(saved_edges, ctx.edges):
        wrong.append("edges differ from numpy.histogram's")
    elif not csv and saved_edges.dtype != np.dtype(ctx.dtype):
        wrong.append(f"edges of type {saved_edges.dtype}, numpy.histogram's are "
                     f"{np.dtype(ctx.dtype)}")
    if verdict.fail_all(w and f"{at}: {w}" for w in wrong):
        verdict.establish(f"{at} holds them")


def chi_square(counts, bin_edges, distribution: str, open_tails: bool):
    """Pearson's chi-square of ``counts`` (and ``bin_edges``) against uniform [0, 1) or normal.

    Bins are pooled into consecutive cells expecting enough values each. ``open_tails``: the
    range is the data's own, so the first and last bins stand for everything below and above
    their inner edge. Returns the statistic, the number of cells and :func:`~daskgpu.
    verification.chi_square_log_tail` of it; None where there are too few values for two cells.
    """
    counts, bins = np.asarray(counts, dtype=np.float64), len(counts)
    starts = np.unique(np.linspace(0, bins, min(bins, GROUPS) + 1).round().astype(int))
    observed = np.add.reduceat(counts, starts[:-1])
    bounds = np.asarray(bin_edges, dtype=np.float64)[starts]
    if open_tails:
        bounds[0], bounds[-1] = -np.inf, np.inf
    a, b = bounds[:-1], bounds[1:]
    if distribution == "uniform":
        probability = np.clip(np.minimum(b, 1.0) - np.maximum(a, 0.0), 0.0, None)
    else:  # P(a <= X < b) from the tail the interval lies in: exact in both tails
        from scipy.special import ndtr

        probability = np.where(a >= 0, ndtr(-a) - ndtr(-b), ndtr(b) - ndtr(a))
    n, mass = observed.sum(), probability.sum()
    if n == 0:
        return None
    if mass == 0:  # values counted where the distribution has none
        return math.inf, 1, -math.inf
    cells, o, e = [], 0.0, 0.0  # observed and expected of each cell
    for go, ge in zip(observed, n * probability / mass, strict=True):
        o, e = o + go, e + ge
        if e >= max(MIN_EXPECTED, n / MAX_CELLS):
            cells.append([o, e])
            o = e = 0.0
    if len(cells) < 2:
        return None
    cells[-1] = [cells[-1][0] + o, cells[-1][1] + e]  # the remainder joins the last cell
    o, e = np.array(cells).T
    statistic = float(((o - e) ** 2 / e).sum())
    return statistic, len(cells), chi_square_log_tail(statistic, len(cells) - 1)


def fits_distribution(ctx: HistogramContext, r, verdict) -> None:
    """Random data: the counts fit the uniform or normal distribution (chi-square)."""
    if not ctx.random:
        return
    grid = np.linspace(ctx.lo, ctx.hi, ctx.bins + 1)
    fit = chi_square(r.value["counts"], grid, ctx.distribution, ctx.range_given is None)
    if fit is None:
        verdict.establish("too few values for a chi-square test")
        return
    statistic, cells, log_bound = fit
    if verdict.require(log_bound >= math.log(FALSE_ALARM), lambda: (
            f"chi-square: {statistic:.4g} on {cells} cells, the counts do not fit the "
            f"{ctx.distribution} distribution (p < {FALSE_ALARM:g})")):
        verdict.establish(f"chi-square {statistic:.4g} on {cells} cells fits "
                          f"{ctx.distribution}")


SUMS = (lines_fill_grid, counts_add_up)
JUDGED = (saved_output, fits_distribution)


def _fast(ctx: HistogramContext) -> tuple:
    spot = (cells_again, range_and_edges, cells_agree) if ctx.has_cells else (
        blocks_again, range_and_edges, blocks_agree)
    return (*SUMS, *spot, *JUDGED)


CHECK = Check(fast=_fast, full=(*SUMS, blocks_again, range_and_edges, blocks_agree,
                                counts_agree, *JUDGED), read=read, mutations=MUTATIONS)
