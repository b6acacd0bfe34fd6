"""fft-pipeline's tasks on one block: draw it, transform it along one axis, summarise it.

Every function runs on a worker with the block's own array module, NumPy (``numpy.fft``,
pocketfft) or CuPy (``cupy.fft``, cuFFT), named by ``library``; nothing here runs in the
client. A block of the spectrum is reduced in the task that made it to a few numbers
(:func:`summary`): its columns' sums of squares, its part of the certified projection X s, its
largest cells, and its values at the sampled cells, packed into one small float64 host vector.
A block of the input is reduced to its rows' certificates (:func:`line_terms`): each row
weighted by b = W s, its row transform at the sampled cells' columns, and its sum of squares.
"""

from __future__ import annotations

import importlib
import math

import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.numeric import generator
from pipelines.fft import shared


def generated(block_info=None, n=1, seed=0, value_type="complex128", real=False,
              library="numpy"):
    """Row block of the generated input (see :mod:`pipelines.fft.shared`), in ``value_type``."""
    xp = importlib.import_module(library)
    info = block_info[None]
    (r0, r1), _ = info["array-location"]
    spec = shared.signal(seed, n, real)
    sequence = np.random.SeedSequence(shared.noise_seed(seed),
                                      spawn_key=(int(info["chunk-location"][0]),))
    rng = generator(library, sequence)
    h = r1 - r0
    # The noise drawn in place: uniform x, scaled to 2 NOISE x here; the - NOISE (1 + i) of
    # NOISE (2 x - 1) rides on the product below as one more rank-one term.
    drawn = rng.random((h, n) if real else (h, n, 2), dtype=np.float64)
    out = drawn if real else drawn.view(np.complex128).reshape(h, n)
    out *= 2 * shared.NOISE
    # The planted sinusoids as one product (rows x K) @ (K x n) of their separable factors,
    # integer phases taken modulo n first: exact, whatever the size.
    count = len(spec["u"])
    rows = xp.arange(r0, r1, dtype=np.int64)
    cols = xp.arange(n, dtype=np.int64)
    down = xp.zeros((h, count + 1), dtype=np.complex128)
    across = xp.ones((count + 1, n), dtype=np.complex128)
    for j in range(count):
        weight = spec["amplitude"][j] * np.exp(1j * spec["phase"][j])
        down[:, j] = xp.exp((2j * math.pi / n) * ((int(spec["u"][j]) * rows) % n)) * weight
        across[j] = xp.exp((2j * math.pi / n) * ((int(spec["v"][j]) * cols) % n))
    down[:, count] = -shared.NOISE * (1 if real else 1 + 1j)
    signal = down @ across
    out += signal.real if real else signal
    return out.astype(value_type, copy=False)


def along_rows(block, library="numpy", real=False, inverse=False, value_type="complex128"):
    """The 1-D transform of every row of a block holding whole rows (axis 1)."""
    xp = importlib.import_module(library)
    if real:
        out = xp.fft.rfft(block, axis=1)
    elif inverse:
        out = xp.fft.ifft(block, axis=1)
    else:
        out = xp.fft.fft(block, axis=1)
    return out.astype(value_type, copy=False)


def piece(block, c0=0, c1=1, library="numpy"):
    """Columns ``c0:c1`` of a row block, transposed into a contiguous array (a transpose's piece).

    Contiguous, it moves between workers without another copy, and the pieces of a column
    block join side by side into whole rows.
    """
    return importlib.import_module(library).ascontiguousarray(block[:, c0:c1].T)


def joined(pieces, library="numpy"):
    """The pieces of one block of the transpose, side by side (axis 1), in one new block."""
    return importlib.import_module(library).concatenate(pieces, axis=1)


def along_columns(block, library="numpy", inverse=False, value_type="complex128",
                  real_length=None):
    """The 1-D transform of whole columns, held transposed: every row of ``block`` (axis 1).

    Each column block arrives as its transpose (rows of a contiguous block), so that this
    transform, like the first, runs along contiguous memory. ``real_length``: irfft2's last
    stage instead, the inverse of a real transform of that length (rows of half spectra).
    """
    xp = importlib.import_module(library)
    if real_length is not None:
        out = xp.fft.irfft(block, n=real_length, axis=1)
    else:
        out = xp.fft.ifft(block, axis=1) if inverse else xp.fft.fft(block, axis=1)
    return out.astype(value_type, copy=False)


# Cells of temporaries (a slab of rows widened to float64/complex128) at once in a certificate.
SLAB_CELLS = 2**22


def _wide(part):
    """``part`` in double precision (float64 or complex128); itself where it already is."""
    return part.astype(np.complex128 if part.dtype.kind == "c" else np.float64, copy=False)


def _times(part, columns):
    """``part @ columns`` for complex ``columns``: two real products where ``part`` is real."""
    if part.dtype.kind == "c":
        return part @ columns
    return (part @ columns.real) + 1j * (part @ columns.imag)


def _squares(xp, part):
    """Each row's sum of |values|^2, read in place (no temporary of the rows' size)."""
    if part.dtype.kind != "c":
        return xp.einsum("ij,ij->i", part, part)
    if part.flags.c_contiguous:  # real and imaginary parts side by side, as float64
        flat = part.view(np.float64)
        return xp.einsum("ij,ij->i", flat, flat)
    return (xp.einsum("ij,ij->i", part.real, part.real)
            + xp.einsum("ij,ij->i", part.imag, part.imag))


def line_terms(block, transformed, n=1, transform=None, cols=(), inverse=False,
               library="numpy"):
    """One row block of the input and of its row transforms, reduced to its rows' certificates.

    Each row x_r (whole, as the row transforms read it) becomes the host row ``[re, im of
    (x_r @ b, y_r at each sampled cell's column), sum |x_r|^2]``: b = W s (``transform``,
    :func:`shared.projection_transform`) applied in double precision, a slab of rows at a time,
    where the block lives; y_r the row's transform (``transformed``; times n for the inverse,
    whose 1/n the DFT sums leave out), gathered at the sampled cells' columns ``cols``.
    """
    xp = importlib.import_module(library)
    b = xp.asarray(transform)
    height = block.shape[0]
    terms = xp.empty((height, 1 + len(cols)), dtype=np.complex128)
    squares = xp.empty(height, dtype=np.float64)
    slab = max(1, SLAB_CELLS // max(1, n))
    for top in range(0, height, slab):
        part = _wide(block[top:top + slab])
        terms[top:top + slab, 0] = _times(part, b)
        squares[top:top + slab] = _squares(xp, part)
    if len(cols):
        terms[:, 1:] = transformed[:, xp.asarray(cols)]
        if inverse:
            terms[:, 1:] *= n
    terms, squares = to_host(terms), to_host(squares)
    return np.concatenate([terms.real, terms.imag, squares[:, None]], axis=1)


def summary_width(col_chunks: tuple[int, ...], cells: int, n: int = 0) -> int:
    """Length of one block's packed summary.

    Its columns' energies, the projection (re and im of n values; ``n=0``: none), the largest
    cells, the sampled cells.
    """
    return max(col_chunks) + 2 * n + 4 * shared.TOP + 2 * cells


def _projected(xp, block, weights):
    """``weights @ block`` in double precision, a slab of the block's rows at a time."""
    height, n = block.shape
    total = xp.zeros(n, dtype=np.complex128)
    slab = max(1, SLAB_CELLS // max(1, n))
    for top in range(0, height, slab):
        total += xp.asarray(weights[top:top + slab]) @ _wide(block[top:top + slab])
    return to_host(total)


def summary(block, block_info=None, library="numpy", rows=(), cols=(), width=1, weights=None):
    """One column block of the spectrum, held transposed, as a host vector (1, width), float64.

    ``block`` is ``X[:, c0:c1].T``. The vector, zero-padded: ``[sum of |X|^2 of each of its
    columns, re and im of its part of X s (``weights``: s of every column; none without),
    TOP x (row, column, re, im) of its largest cells (row -1 where the block holds fewer),
    (re, im) at each sampled cell it holds (0 elsewhere)]``.
    """
    xp = importlib.import_module(library)
    (c0, c1), _ = block_info[0]["array-location"]
    n = block.shape[1]
    power = xp.abs(block)
    power *= power
    out = np.zeros(width)
    out[:c1 - c0] = to_host(power.sum(axis=1, dtype=np.float64))
    if weights is not None:
        at = width - 4 * shared.TOP - 2 * len(rows) - 2 * n
        part = _projected(xp, block, weights[c0:c1])
        out[at:at + n], out[at + n:at + 2 * n] = part.real, part.imag
    # The largest cells lie in the rows with the largest maxima: select those rows first.
    w = c1 - c0
    top = min(shared.TOP, w * n)
    maxima = power.max(axis=1)
    lines = maxima.size - min(top, maxima.size)
    rows_top = xp.argpartition(maxima, lines)[lines:]
    candidates = power[rows_top].ravel()
    picked = xp.argpartition(candidates, candidates.size - top)[candidates.size - top:]
    line, cell = to_host(rows_top[picked // n]), to_host(picked % n)
    values = to_host(block[xp.asarray(line), xp.asarray(cell)]).astype(np.complex128)
    table = np.full((shared.TOP, 4), [-1.0, -1.0, 0.0, 0.0])
    table[:top, 0] = cell
    table[:top, 1] = line + c0
    table[:top, 2], table[:top, 3] = values.real, values.imag
    base = width - 4 * shared.TOP - 2 * len(rows)
    out[base:base + 4 * shared.TOP] = table.ravel()
    rows, cols = np.asarray(rows), np.asarray(cols)
    held = np.flatnonzero((cols >= c0) & (cols < c1))
    if held.size:
        got = to_host(block[xp.asarray(cols[held] - c0), xp.asarray(rows[held])]).astype(
            np.complex128)
        cells = out[base + 4 * shared.TOP:].reshape(-1, 2)
        cells[held, 0], cells[held, 1] = got.real, got.imag
    return out.reshape(1, width)


def assemble(packed: np.ndarray, col_chunks: tuple[int, ...], cells: int, n: int = 0) -> dict:
    """The run's result from the packed block summaries (shaped (blocks, width)).

    ``column_squares``: sum of |X|^2 per column; ``peaks``: (row, column, value) of every
    block's largest cells; ``samples``: the spectrum at the sampled cells;
    ``projection_parts``: each block's part of X s (blocks, n), where ``n`` (the spectrum's
    rows) is given.
    """
    rows = packed
    base = rows.shape[1] - 4 * shared.TOP - 2 * cells
    projection = rows[:, base - 2 * n:base - n] + 1j * rows[:, base - n:base]
    energies = np.concatenate([row[:w] for row, w in zip(rows, col_chunks, strict=True)])
    table = rows[:, base:base + 4 * shared.TOP].reshape(-1, 4)
    table = table[table[:, 0] >= 0]
    samples = rows[:, base + 4 * shared.TOP:].reshape(len(col_chunks), cells, 2).sum(axis=0)
    return {
        "column_squares": energies,
        "sum_of_squares": math.fsum(energies.tolist()),
        "peak_rows": table[:, 0].astype(np.int64),
        "peak_cols": table[:, 1].astype(np.int64),
        "peak_values": table[:, 2] + 1j * table[:, 3],
        "samples": samples[:, 0] + 1j * samples[:, 1],
        "col_chunks": np.array(col_chunks),
        "projection_parts": projection,
    }
