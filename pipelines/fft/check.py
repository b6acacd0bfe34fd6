"""fft-pipeline's check, declared on :mod:`daskgpu.verification`.

Of the spectrum X of the n x q input x (N = n q points), both depths check the result's shapes
and totals; the run's certificates of the input's rows (x_r b, b = W s in closed form; the row's
transform at the sampled cells' columns; sum |x_r|^2) against the rows drawn again or re-read
(:mod:`pipelines.fft.check_replay`); Parseval's identity; the sampled and largest reported cells
against their DFT sums; X s against W (x b), W applied directly; the planted peaks. ``fast``
samples the input's rows (a file's: all) and the spectrum's, the input's sums taken from the
certificates; ``full`` takes every sum from every row again, X s of each column block apart.
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
    differences,
    rounding,
    sigmas,
    tolerance,
)
from daskgpu.verification.bounds import share
from pipelines.fft import check_replay, shared
from pipelines.fft.check_mutations import MUTATIONS
from pipelines.fft.shared import FFTContext

# An input's largest reported cells recomputed as DFT sums at fast (full: every one).
CHECKED_PEAKS = 3


@dataclass
class Reported:
    """What the check reads of a run; ``replayed``: its recomputation of the input, by depth."""

    squares: np.ndarray
    total: float
    peaks: tuple[np.ndarray, np.ndarray, np.ndarray]
    samples: np.ndarray
    col_chunks: np.ndarray
    parts: np.ndarray
    lines: np.ndarray
    replayed: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Again:
    """The plan's input rows recomputed (:func:`replayed`), and the input's sums to use."""

    plan: Plan
    peaks: tuple  # the reported cells checked as DFT sums (their columns after the cells')
    reach: np.ndarray  # the columns' sums of moduli
    sums: np.ndarray  # the products the spectrum is checked against (the check's own, or run's)
    total: float  # the input's sum of |x|^2 as the result sees it
    rows: np.ndarray
    products: np.ndarray
    squares: np.ndarray
    bound: np.ndarray
    hermitian: np.ndarray | None = None


def read(workload, raw) -> Reported:
    """The run's summaries and certificates, or why there is nothing to check."""
    result = raw.get("result") if isinstance(raw, dict) else None
    if not isinstance(result, dict) or "column_squares" not in result:
        raise Unreadable(f"result {type(raw).__name__} carries no per-block material")
    got = {key: np.asarray(value) for key, value in result.items()}
    return Reported(got["column_squares"], float(result.get("sum_of_squares", math.nan)),
                    (got.get("peak_rows"), got.get("peak_cols"), got.get("peak_values")),
                    got.get("samples"), got.get("col_chunks"), got.get("projection_parts"),
                    np.asarray(raw.get("lines")))


def units(ctx: FFTContext, plural: bool = True) -> tuple[str, str]:
    """What the input's rows and the spectrum's rows are, in words (irfft2: both transposed)."""
    words = (("column{} of the half spectrum", "column{} of the result") if ctx.half_inverse
             else ("input row{}", "spectrum row{}"))
    return tuple(word.format("s" if plural else "") for word in words)


def row_plan(ctx: FFTContext, depth: str) -> Plan:
    """The input rows drawn again: a seeded sample at fast; every one at full, or of a file."""
    if ctx.source is not None:
        return Plan.every(ctx.rows, units(ctx)[0])
    return Plan.at(depth, ctx.rows, Sampler(ctx.check_seed, "input rows"), unit=units(ctx)[0])


def entry_plan(ctx: FFTContext, depth: str) -> Plan:
    """The spectrum's rows where X s is checked: a seeded sample at fast, every one at full."""
    return Plan.at(depth, ctx.n, Sampler(ctx.check_seed, "spectrum rows"), unit=units(ctx)[1])


def fft_terms(points: int) -> int:
    """The terms (``n`` of the rounding rule, :mod:`daskgpu.verification.bounds`) of an FFT.

    An FFT of N points reaches each value through ceil(log2 N) butterfly stages; a stage's
    complex product with a twiddle and sum round it by about 6 u (Higham, *Accuracy and
    Stability of Numerical Algorithms*, 2nd ed., section 24.1: mu + gamma_4 (sqrt 2 + mu)),
    counted as 12 terms, twice that, for mixed radices and Bluestein's three transforms at
    prime lengths. The bound is norm-wise: of the result's 2-norm, which one cell may take.
    """
    return 12 * max(1, math.ceil(math.log2(max(points, 2))))


def relative(ctx: FFTContext) -> float:
    """The norm-wise relative rounding bound of the run's 2-D FFT in its type."""
    return rounding(fft_terms(ctx.points), ctx.dtype)


def value_distance(ctx: FFTContext) -> float:
    """How far the run's drawn input may lie from the check's, element by element.

    Each side sums the sinusoids and the noise in its own order (a wave's phase, exponential
    and products: 16 roundings of their total) and rounds once to the value type.
    """
    if ctx.source is not None:
        return 0.0
    total = float(np.sum(ctx.planted()["amplitude"])) + 2 * shared.NOISE
    part = shared.REAL_OF[ctx.dtype]
    return tolerance(total, 16) + tolerance(total, 1, part, check_dtype=part)


def cell_tolerance(ctx: FFTContext, squares: float) -> float:
    """How far a reported cell may lie from its DFT sum (``squares``: the input's sum |x|^2).

    The FFT's norm-wise bound of the spectrum's norm; the DFT sum's float64 rounding, q products
    along a row and n rows, of magnitude sum |x| <= sqrt(N sum |x|^2) (over N for the inverse).
    """
    magnitude = math.sqrt(ctx.points * squares) * (1 / ctx.points if ctx.inverse else 1)
    return relative(ctx) * math.sqrt(ctx.scale * squares) + rounding(ctx.n + ctx.q) * magnitude


def noise_bound(ctx: FFTContext) -> float:
    """How far the noise may move one cell of generated data's transform.

    A sum of N independent uniform terms: near normal, of spread at most sigma sqrt(N) in any
    direction (over N for the inverse); the false alarm shared by all N cells.
    """
    spread = shared.noise_sigma(ctx.real) * math.sqrt(ctx.points)
    return sigmas(share(FALSE_ALARM, ctx.points)) * spread / (ctx.points if ctx.inverse else 1)


def replayed(ctx: FFTContext, r: Reported, depth: str) -> Again:
    """The plan's input rows drawn again or re-read, and their products (made once a depth).

    Cells checked as DFT sums: every reported one at full; at fast an input's largest. The
    spectrum is checked against the check's own sums where it has every row, else the run's.
    """
    if depth not in r.replayed:
        rows, cols, values = r.peaks
        picked = (np.arange(len(values)) if depth == "full" else
                  np.argsort(-np.abs(values), kind="stable")[:CHECKED_PEAKS if ctx.source else 0])
        peaks = rows[picked].astype(np.int64), cols[picked].astype(np.int64), values[picked]
        plan, (run, squares) = row_plan(ctx, depth), certified(ctx, r)
        across = check_replay.columns(ctx, np.concatenate([ctx.cells()[1], peaks[1]]),
                                      blocks=depth == "full")
        again = check_replay.rows_again(ctx, np.asarray(plan.parts, np.int64), across)
        if plan.complete:
            run, squares = again["products"], again["squares"]
            if ctx.half_inverse:  # what the result sees of columns 0 and n/2: Hermitian parts
                squares = np.where(ctx.row_weights() == 1, again["hermitian"], squares)
        total = math.fsum((ctx.row_weights() * squares).tolist())
        r.replayed[depth] = Again(plan, peaks, np.abs(across).sum(axis=0), run, total, **again)
    return r.replayed[depth]


def certified(ctx: FFTContext, r: Reported) -> tuple[np.ndarray, np.ndarray]:
    """The run's certificates: products (rows, 1 + sampled cells) and squares (rows,)."""
    k = 1 + len(ctx.cells()[1])
    lines = np.asarray(r.lines, dtype=np.float64)
    return lines[:, :k] + 1j * lines[:, k:2 * k], lines[:, 2 * k]


def cells_differ(ctx: FFTContext, what: str, cells: tuple, got, expected,
                 squares: float) -> str | None:
    """Where reported cells first differ from their DFT sums over the input; None if nowhere."""
    rows, cols = cells
    at = "{} x[{c}, {r}]" if ctx.half_inverse else "{} X[{r}, {c}]"  # irfft2: its x, transposed
    return differences(got, expected, what=what, unit=f"{what}s",
                       label=lambda i: at.format(what, r=rows[i], c=cols[i]),
                       tolerance=cell_tolerance(ctx, squares),
                       expected_as="{} as a DFT sum over the input")


def shapes(ctx: FFTContext, r: Reported, verdict) -> None:
    """The result fills the spectrum, and the certificates the input's rows and column blocks."""
    cells, blocks, width = len(ctx.cells()[0]), len(ctx.col_chunks), 3 + 2 * len(ctx.cells()[0])
    for name, got, shape in (("column_squares", r.squares, (ctx.m,)),
                             ("samples", r.samples, (cells,)),
                             ("col_chunks", r.col_chunks, (blocks,))):
        if not verdict.require(np.shape(got) == shape, (
                f"{name}: shape {np.shape(got)} for a {ctx.n} x {ctx.m} spectrum, {shape} "
                "expected (a block dropped or counted twice)")):
            return
    rows, cols, values = (np.asarray(p) for p in r.peaks)
    for fits, problem in (
            (tuple(r.col_chunks) == ctx.col_chunks,
             f"col_chunks {tuple(r.col_chunks)}: not the spectrum's column blocks"),
            (rows.shape == cols.shape == values.shape,
             "peak rows, columns and values differ in length"),
            (not rows.size or (rows.min() >= 0 and rows.max() < ctx.n and cols.min() >= 0
                               and cols.max() < ctx.m),
             "a reported peak lies outside the spectrum"),
            (r.lines.shape == (ctx.rows, width),
             f"the input's certificates are shaped {r.lines.shape}, not one of width {width} "
             f"for each of its {ctx.rows} rows (a block dropped or counted twice)"),
            (np.shape(r.parts) == (blocks, ctx.n),
             f"projection parts shaped {np.shape(r.parts)}: not one vector of {ctx.n} for each "
             f"of {blocks} column blocks")):
        if not verdict.require(bool(fits), problem):
            return


def totals(ctx: FFTContext, r: Reported, verdict) -> None:
    """The columns' sums of squares are not negative, and add up to the reported total."""
    squares = np.asarray(r.squares, dtype=np.float64)
    if verdict.require(bool((squares >= 0).all()), "a column's sum of squares is negative or NaN"):
        total = math.fsum(squares.tolist())
        verdict.require(abs(r.total - total) <= tolerance(total, squares.size), (
            f"sum of squares {r.total!r} is not the total of its columns', {total!r}"))


def input_rows(ctx: FFTContext, r: Reported, verdict) -> None:
    """The run's certificates of the plan's input rows are theirs, drawn again or re-read.

    Within the float64 sums' rounding and how far two draws may lie apart; a row's transform
    also within its FFT's norm-wise bound.
    """
    again, (run, squares) = replayed(ctx, r, verdict.depth), certified(ctx, r)
    k, q, delta = run.shape[1], ctx.q, value_distance(ctx)
    name, how = units(ctx, plural=False)[0], "re-read" if ctx.source else "drawn again"
    limit = delta * again.reach[:k] + tolerance(1.0, q + 2) * again.bound[:, :k]
    limit[:, 1:] += rounding(fft_terms(q), ctx.dtype) * np.sqrt(q * again.squares)[:, None]

    def label(i: int) -> str:
        row, j = divmod(i, k)
        what = "x b" if j == 0 else f"its transform at sampled cell {j - 1}'s column"
        return f"{name} {again.rows[row]}, {what}"

    if not verdict.note(differences(
            run[again.rows], again.products[:, :k], what=name, tolerance=limit, label=label,
            unit="certified values", reported_as="{} certified", expected_as=how + " {}")):
        return
    mine = again.squares
    limit = 2 * delta * np.sqrt(q * mine) + q * delta * delta + tolerance(1.0, q) * mine
    if verdict.note(differences(
            squares[again.rows], mine, what=name, tolerance=limit, form=".15g",
            label=lambda i: f"{name} {again.rows[i]}, its sum of squares",
            reported_as="{} certified", expected_as=how + " {}")):
        verdict.establish(f"the run's certificates of the input match it {how}: "
                          f"{again.plan.promise}")


def parseval(ctx: FFTContext, r: Reported, verdict) -> None:
    """The spectrum's sum of squares against the input's (Parseval's identity)."""
    again, weights = replayed(ctx, r, verdict.depth), shared.column_weights(ctx.q, ctx.m, ctx.real)
    got = math.fsum((weights * np.asarray(r.squares, np.float64)).tolist())  # rfft2's weighted
    expected = ctx.scale * again.total
    rel = relative(ctx)
    limit = (2 * rel + rel * rel) * expected + tolerance(expected, ctx.points)
    whose = "" if again.plan.complete else "certified "
    if verdict.require(abs(got - expected) <= limit, (
            f"Parseval's identity fails: the spectrum's sum of squares is {got:.15g}, the "
            f"input's gives {expected:.15g} (off by {abs(got - expected):.3g}, bound "
            f"{limit:.3g})")):
        verdict.establish(f"Parseval's identity holds for the {ctx.n} x {ctx.m} spectrum "
                          f"against the input's {whose}sum of squares")


def dft_cells(ctx: FFTContext, r: Reported, verdict) -> None:
    """The sampled cells, and the reported cells checked, are their DFT sums over the input."""
    again, (rows, cols) = replayed(ctx, r, verdict.depth), ctx.cells()
    k, whose = 1 + len(cols), "" if again.plan.complete else "certified "
    expected = check_replay.dft_of_rows(ctx, rows, again.sums[:, 1:k])
    if not verdict.note(cells_differ(ctx, "sampled cell", (rows, cols), r.samples, expected,
                                     again.total)):
        return
    verdict.establish(f"{len(rows)} sampled cells agree with DFT sums over the input's "
                      f"{whose}rows within the rounding bound of {ctx.dtype}")
    rows, cols, values = again.peaks
    if not len(rows):
        return
    expected = check_replay.dft_of_rows(ctx, rows, again.products[:, k:k + len(rows)])
    if verdict.note(cells_differ(ctx, "reported peak", (rows, cols), values, expected,
                                 again.total)):
        every = f", and so do all {len(rows)}" if verdict.depth == "full" else ""
        verdict.establish(f"the {min(CHECKED_PEAKS, len(rows))} largest reported cells agree "
                          f"with their DFT sums{every}"
                          + (" (an input has no planted peaks)" if ctx.source else ""))


def projection(ctx: FFTContext, r: Reported, verdict) -> None:
    """X s (the reported parts) against W (x b) at the plan's spectrum rows (full: by block).

    Bound: the FFT's norm-wise one times |s|; the float64 sums, of magnitude |X| |s|: m products
    for X s, and for W (x b) q along a row, n down, b's closed form 16.
    """
    again, plan = replayed(ctx, r, verdict.depth), entry_plan(ctx, verdict.depth)
    entries, full = np.asarray(plan.parts, np.int64), verdict.depth == "full"
    s = shared.projection_weights(ctx.q, ctx.m, ctx.check_seed)
    size = math.sqrt(ctx.scale * again.total) * float(np.linalg.norm(s) * ctx.row_weights().max())
    limit = relative(ctx) * size + tolerance(size, ctx.m, check_terms=ctx.n + ctx.q + 16)
    if full:  # each column block's part apart: x b_j, the last columns of the check's products
        xb, got = again.products[:, -len(ctx.col_chunks):], r.parts[:, entries].T
    else:
        xb, got = again.sums[:, :1], r.parts.sum(axis=0)[entries, None]
    at, blocks = units(ctx, plural=False)[1], xb.shape[1]

    def label(i: int) -> str:
        row, block = divmod(i, blocks)
        part = f" of column block {block}" if full else ""
        return f"projection X s{part} at {at} {entries[row]}"

    if verdict.note(differences(got, check_replay.dft_of_rows(ctx, entries, xb, paired=False),
                                what="projection", tolerance=limit, label=label,
                                unit="projected values",
                                expected_as="{} as the DFT of the input's x b")):
        each = ", each column block apart" if full else ""
        verdict.establish(f"the spectrum's projection X s equals W (x W s), W applied directly"
                          f"{each}: {plan.promise}")


def planted_peaks(ctx: FFTContext, r: Reported, verdict) -> None:
    """Generated data: each planted sinusoid at its cell, nothing else above the noise.

    Its value there N A e^(i phi) (half for a cosine), or A e^(i phi) at the negated frequency
    for the inverse.
    """
    bound = noise_bound(ctx) + cell_tolerance(ctx, replayed(ctx, r, verdict.depth).total)
    reported = {(int(u), int(v)): complex(x) for u, v, x in zip(*r.peaks, strict=True)}
    spec, planted = ctx.planted(), set()
    for j, (u, v, a, phi) in enumerate(zip(spec["u"], spec["v"], spec["amplitude"],
                                           spec["phase"], strict=True)):
        value = a * complex(math.cos(phi), math.sin(phi))
        u, v = (-int(u) % ctx.n, -int(v) % ctx.q) if ctx.inverse else (int(u), int(v))
        value *= 1 if ctx.inverse else ctx.points / (2 if ctx.real else 1)
        planted.add((u, v))
        got = reported.get((u, v))
        if got is None:
            verdict.fail(f"peak {j} (|X| {abs(value):.6g}) expected at ({u}, {v}) is not among "
                         "the spectrum's largest cells")
        elif not abs(got - value) <= bound:
            verdict.fail(f"peak {j} at ({u}, {v}): {got:.8g} reported, {value:.8g} planted "
                         f"(off by {abs(got - value):.3g}, bound {bound:.3g})")
    verdict.fail_all(f"a peak at ({u}, {v}) of |X| {abs(got):.6g} where no sinusoid was planted "
                     f"(noise bound {bound:.3g})" for (u, v), got in reported.items()
                     if (u, v) not in planted and abs(got) > bound)
    if verdict.ok:
        verdict.establish(f"all {len(planted)} planted peaks at their frequencies with their "
                          "amplitudes, nothing else above the noise")


def _steps(ctx: FFTContext) -> tuple:
    planted = (planted_peaks,) if ctx.source is None else ()
    return (shapes, totals, input_rows, parseval, dft_cells, projection, *planted)


CHECK = Check(fast=_steps, full=_steps, read=read, mutations=MUTATIONS)
