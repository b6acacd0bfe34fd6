"""fft-pipeline's check at depth fast: the run's certificates, checked apart.

Beside its answer the run reports, for every row x_r of its input, x_r @ b (b = W s, the DFT
of the seeded weights s in closed form, :mod:`pipelines.fft.shared`), its row transform at the
sampled cells' columns and its sum of squares; and for every block of the spectrum its part of
the projection X s. This module checks them without a transform:

- rows of the input drawn again (a seeded sample, NumPy's generator skipping ahead to each; an
  input file is re-read whole, since its largest cells need every row) must carry the run's
  certificates: the run transformed the input it was given;
- X s = W (x b) at a seeded sample of the spectrum's rows, W applied directly
  (sum_r e^(-+2 pi i u r / n) (x b)_r, no FFT): the transform of every column block, the
  transpose and every row block enters each of them;
- the sampled cells from the rows' certified transforms at their columns (a sum over the
  rows, O(n) a cell), Parseval's identity from the certified squares.

:mod:`pipelines.fft.check` runs these with its own checks of the peaks and totals.
"""

from __future__ import annotations

import functools
import math

import dask
import numpy as np

from daskgpu.toolkit.numeric import seed_word, starts, unit_roundoff
from daskgpu.toolkit.spot_checks import detection, sample_size, seeded_sample
from pipelines.fft import shared
from pipelines.fft.check_recompute import lines_again

U64 = unit_roundoff(np.float64)
TINY = float(np.finfo(np.float64).tiny)


def _sample(population: int, ctx: dict, key: int) -> np.ndarray:
    seed = seed_word(np.random.SeedSequence((ctx["check_seed"], key)))
    return seeded_sample(population, sample_size(population), seed)


def rows_to_check(ctx: dict) -> np.ndarray:
    """Rows of the input checked again: a seeded sample, or every row of an input file."""
    rows = int(sum(ctx["row_chunks"]))
    if ctx["source"] is not None:
        return np.arange(rows)
    return _sample(rows, ctx, 16)


def entries_to_check(ctx: dict) -> np.ndarray:
    """Rows u of the spectrum where X s is checked against W (x b): a seeded sample."""
    return _sample(ctx["n"], ctx, 17)


def unit(ctx: dict, plural: bool = True) -> tuple[str, str]:
    """What the input's rows and the spectrum's rows are, in words (irfft2: both transposed)."""
    if ctx.get("half_inverse"):
        line = "column{} of the half spectrum", "column{} of the result"
    else:
        line = "input row{}", "spectrum row{}"
    return tuple(word.format("s" if plural else "") for word in line)


def _waves(ctx: dict, first, second, n: int) -> np.ndarray:
    """exp(-+2 pi i a b / n) for every a of ``first`` (rows) and b of ``second`` (columns).

    Looked up in the n-th roots of unity at (a b) mod n, each computed once: as exact as one
    exponential, and a gather where exponentials of every product would cost more than the
    check's other work. ``n``: the transform's length (the input's rows down, its columns,
    q, across).
    """
    a, b = np.asarray(first, np.int64), np.asarray(second, np.int64)
    return _roots(n, bool(ctx["inverse"]))[(a[:, None] * b[None, :]) % n]


@functools.lru_cache(maxsize=4)
def _roots(n: int, inverse: bool) -> np.ndarray:
    """exp(-+2 pi i k / n) for k < n (+ for the inverse), read-only."""
    roots = np.exp(((1.0 if inverse else -1.0) * 2j * math.pi / n) * np.arange(n))
    roots.flags.writeable = False
    return roots


def columns(ctx: dict, extra_cols=()) -> np.ndarray:
    """The products the check takes of each input row: b, the sampled cells', ``extra_cols``'.

    b from :func:`shared.projection_transform`; exp(-+2 pi i c v / q) for each column v,
    computed here (q: the length of an input row).
    """
    q = ctx["q"]
    cols = np.concatenate([shared.sampled_cells(ctx["n"], ctx["col_chunks"],
                                                ctx["check_seed"])[1],
                           np.asarray(extra_cols, np.int64)])
    waves = _waves(ctx, np.arange(q), cols, q)
    b = shared.projection_transform(q, ctx["m"], ctx["check_seed"], ctx["inverse"])
    return np.concatenate([b[:, None], waves], axis=1)


def rows_again(ctx: dict, rows: np.ndarray, across: np.ndarray) -> dict:
    """``rows`` of the input drawn again or re-read, one task a row block.

    On the workers (a file's blocks where they are read, CuPy's draws on the devices), except
    NumPy's seeded rows: drawn here, skipping ahead, in a few milliseconds (a round trip to
    the workers would cost more than the work).
    """
    first = starts(ctx["row_chunks"])
    blocks = [(index, rows[(rows >= r0) & (rows < r0 + h)] - r0)
              for index, (r0, h) in enumerate(zip(first.tolist(), ctx["row_chunks"],
                                                  strict=True))]
    blocks = [(index, local) for index, local in blocks if local.size]
    if ctx["source"] is None and ctx["library"] == "numpy":
        parts = [lines_again(ctx, index, local, across) for index, local in blocks]
    else:
        (parts,) = dask.compute([dask.delayed(lines_again, pure=False)(ctx, index, local, across)
                                 for index, local in blocks])
    joined = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    joined["rows"] = np.concatenate([local + first[index] for index, local in blocks])
    joined["columns"] = across
    return joined


def run_certificates(ctx: dict, lines) -> tuple[np.ndarray, np.ndarray] | str:
    """The run's certified products (rows, k) and squares (rows,), or why they are unusable."""
    lines = np.asarray(lines, dtype=np.float64)
    k = 1 + len(shared.sampled_cells(ctx["n"], ctx["col_chunks"], ctx["check_seed"])[1])
    rows = int(sum(ctx["row_chunks"]))
    if lines.shape != (rows, 2 * k + 1):
        return (f"the input's certificates are shaped {lines.shape}, not one of width "
                f"{2 * k + 1} for each of its {rows} rows (a block dropped or counted twice)")
    return lines[:, :k] + 1j * lines[:, k:2 * k], lines[:, 2 * k]


def _value_distance(ctx: dict) -> float:
    """How far the run's drawn input may lie from this check's, element by element.

    0 for a file (both read the same values); for generated data each side sums the
    sinusoids and the noise in its own order (a few float64 roundings of their total) and
    rounds once to the value type.
    """
    if ctx["source"] is not None:
        return 0.0
    part = shared.REAL_OF[ctx["dtype"]]  # a complex type's parts, or the real input's type
    total = float(np.sum(shared.signal(ctx["seed"], ctx["n"], ctx["real"],
                                       ctx["q"])["amplitude"]))
    total += 2 * shared.NOISE
    return (32 * U64 + 2 * unit_roundoff(part)) * total


def _row_transform_bound(ctx: dict) -> float:
    """Norm-wise relative error bound of one row's 1-D FFT in the run's type (2 log2(q) 6u)."""
    unit_of = unit_roundoff(shared.REAL_OF[ctx["dtype"]])
    return 2.0 * max(1.0, math.log2(max(ctx["q"], 2))) * 6 * unit_of


def check_rows(ctx: dict, run: tuple, again: dict) -> str | None:
    """The run's certificates of the rows checked again against theirs, in one line.

    x_r b within the float64 sums' rounding (and, for generated data, how far the two draws
    may differ); the row transform at a cell's column also within its FFT's norm-wise bound,
    which one element may take whole.
    """
    products, squares = run
    rows, k = again["rows"], products.shape[1]
    n, delta = ctx["q"], _value_distance(ctx)  # n: the length of a row
    across = np.abs(again["columns"][:, :k]).sum(axis=0)
    limit = delta * across + 2 * (n + 8) * U64 * again["bound"][:, :k] + TINY
    limit[:, 1:] += _row_transform_bound(ctx) * np.sqrt(n * again["squares"])[:, None]
    off = np.abs(products[rows] - again["products"][:, :k])
    ratio = off / limit
    r, j = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    name = unit(ctx, plural=False)[0]
    if not ratio[r, j] <= 1.0:
        what = "x b" if j == 0 else f"its transform at sampled cell {j - 1}'s column"
        return (f"{name} {rows[r]}: the run certified {what} as {products[rows[r], j]:.10g}, "
                f"the input {'re-read' if ctx['source'] else 'drawn again'} gives "
                f"{again['products'][r, j]:.10g} (off by {off[r, j]:.3g}, bound "
                f"{limit[r, j]:.3g})")
    mine = again["squares"]
    limit = (2 * delta * np.sqrt(n * mine) + n * delta * delta + 2 * (n + 8) * U64 * mine
             + TINY)
    off = np.abs(squares[rows] - mine)
    r = int(np.argmax(off / limit))
    if not off[r] <= limit[r]:
        return (f"{name} {rows[r]}: the run certified its sum of squares as "
                f"{squares[rows[r]]:.15g}, the input gives {mine[r]:.15g}")
    return None


def row_weights(ctx: dict) -> np.ndarray:
    """How much each input row counts in the result: 1, or 2 for irfft2's mirrored columns.

    irfft2's input rows are the half spectrum's columns; those standing for their mirror
    images count twice (:func:`shared.column_weights`).
    """
    rows = int(sum(ctx["row_chunks"]))
    if ctx.get("half_inverse"):
        return shared.column_weights(ctx["n"], rows, True)
    return np.ones(rows)


def dft_of_rows(ctx: dict, frequencies, values: np.ndarray) -> np.ndarray:
    """sum_r w_r e^(-+2 pi i u r / n) values[r] for each frequency u, applied directly.

    ``values`` (rows,) or (rows, len(frequencies)), one column a frequency; divided by n q
    for the inverse; the real part for irfft2, whose result is real.
    """
    kernel = _waves(ctx, frequencies, np.arange(len(row_weights(ctx))), ctx["n"])
    kernel *= row_weights(ctx)[None, :]
    sums = kernel @ values if values.ndim == 1 else np.einsum("ur,ru->u", kernel, values)
    if ctx["inverse"]:
        sums = sums / (float(ctx["n"]) * ctx["q"])
    return sums.real.astype(np.complex128) if ctx.get("half_inverse") else sums


def check_projection(ctx: dict, result: dict, products: np.ndarray, error: float,
                     norm: float, entries: np.ndarray) -> str | None:
    """X s (the run's, summed over its blocks) against W (x b) at ``entries``, in one line.

    ``error``: the FFT's norm-wise error bound of the spectrum (of norm ``norm``). Bound: that
    times s's norm (a row may hold all of it), and the float64 sums on both sides and b's
    closed form, (4 n + 32) u of the same.
    """
    parts = np.asarray(result.get("projection_parts"))
    n = ctx["n"]
    if parts.ndim != 2 or parts.shape[1] != n:
        return f"projection parts shaped {parts.shape}: not one vector of {n} a block"
    weights = shared.projection_weights(ctx["q"], ctx["m"], ctx["check_seed"])
    got = parts.sum(axis=0)[entries]
    expected = dft_of_rows(ctx, entries, products[:, 0])
    scale = float(np.max(row_weights(ctx)))
    sums = 4 * max(n, ctx["q"]) + 32
    limit = (error + sums * U64 * norm) * float(np.linalg.norm(weights)) * scale + TINY
    off = np.abs(got - expected)
    at = int(np.argmax(off))
    if not off[at] <= limit:
        return (f"projection X s at {unit(ctx, plural=False)[1]} {entries[at]}: {got[at]:.10g} "
                f"reported, {expected[at]:.10g} as the DFT of the input's x b (off by "
                f"{off[at]:.3g}, bound {limit:.3g})")
    return None


def certified_squares(ctx: dict, squares: np.ndarray, again: dict) -> float:
    """The input's sum of squares as the result's Parseval needs it.

    irfft2: each column of the half spectrum weighted, columns 0 and n/2 by the squares of
    their Hermitian part (what the result sees of them), from the check's own re-read.
    """
    if not ctx.get("half_inverse"):
        return math.fsum(squares.tolist())
    weights = row_weights(ctx)
    squares = np.array(squares, dtype=np.float64)
    own = np.flatnonzero(weights == 1)
    where = {int(r): k for k, r in enumerate(again["rows"].tolist())}
    squares[own] = [again["hermitian"][where[int(r)]] for r in own]
    return math.fsum((weights * squares).tolist())


def detail(ctx: dict, rows: int, entries: int) -> str:
    """What the fast check established of the input and the spectrum, with its promises."""
    input_unit, spectrum_unit = unit(ctx)
    again = "re-read" if ctx["source"] is not None else "drawn again"
    total = int(sum(ctx["row_chunks"]))
    return (f"the spectrum's projection X s equals W (x W s), W applied directly: "
            f"{detection(entries, ctx['n'], spectrum_unit)}; the run's certificates of the "
            f"input match it {again}: {detection(rows, total, input_unit)}")
