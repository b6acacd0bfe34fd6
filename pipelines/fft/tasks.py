"""fft-pipeline's tasks on one block: draw it, transform it along one axis, summarise it.

Every function runs on a worker with the block's own array module, NumPy (transformed with
``scipy.fft``, pocketfft, on ``threads`` threads) or CuPy (``cupy.fft``, cuFFT), named by
``library``; nothing here runs in the client. On a device, a task waits for its stream before
it returns, so that a stage kept on the workers is done when it is reported done, and a
transform's task lets go of the cuFFT plans it made (:func:`settled`, :func:`release_plans`).

A block of the spectrum is reduced in the task that made it to a few numbers
(:func:`summary`): its columns' sums of squares, its part of the certified projection X s, its
largest cells, and its values at the sampled cells, packed into one small float64 host vector.
A block of the input is reduced to its rows' certificates (:func:`line_terms`): each row
weighted by b = W s, its row transform at the sampled cells' columns, and its sum of squares.
"""

from __future__ import annotations

import importlib
import math
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.numeric import generator
from pipelines.fft import shared


def settled(value, library="numpy"):
    """``value`` once the device's queued work on this thread's stream is done (CPU: at once).

    CuPy runs kernels and cuFFT asynchronously: without the wait, a task (and a stage kept on
    the workers) would be reported done while its work still runs.
    """
    if library != "numpy":
        importlib.import_module(library).cuda.get_current_stream().synchronize()
    return value


def release_plans(library="numpy") -> None:
    """Empty this thread's cuFFT plan cache (CuPy's, per thread and device; nothing on CPU).

    Each cached plan keeps its work area (about the transformed array's size) for the
    worker's life; a transform's task makes its plans again instead. Call after
    :func:`settled`: no transform is still using them.
    """
    if library != "numpy":
        importlib.import_module(library).fft.config.get_plan_cache().clear()


def _transform(kind: str, block, axis: int, library: str, threads: int, n=None,
               overwrite=False):
    """``kind`` (fft, ifft, rfft, irfft) along ``axis``.

    scipy.fft on ``threads`` threads for NumPy, the array library's own (cuFFT) on a device.
    """
    if library == "numpy":
        import scipy.fft

        return getattr(scipy.fft, kind)(block, n=n, axis=axis, workers=max(1, int(threads)),
                                        overwrite_x=overwrite)
    return getattr(importlib.import_module(library).fft, kind)(block, n=n, axis=axis)


def generated(block_info=None, n=1, seed=0, value_type="complex128", real=False,
              library="numpy", q=None):
    """Row block of the generated n x q input (:mod:`pipelines.fft.shared`), ``value_type``."""
    xp = importlib.import_module(library)
    info = block_info[None]
    (r0, r1), _ = info["array-location"]
    q = n if q is None else q
    spec = shared.signal(seed, n, real, q)
    sequence = np.random.SeedSequence(shared.noise_seed(seed),
                                      spawn_key=(int(info["chunk-location"][0]),))
    rng = generator(library, sequence)
    h = r1 - r0
    # The noise drawn in place: uniform x, scaled to 2 NOISE x here; the - NOISE (1 + i) of
    # NOISE (2 x - 1) rides on the product below as one more rank-one term.
    drawn = rng.random((h, q) if real else (h, q, 2), dtype=np.float64)
    out = drawn if real else drawn.view(np.complex128).reshape(h, q)
    out *= 2 * shared.NOISE
    # The planted sinusoids as one product (rows x K) @ (K x n) of their separable factors,
    # integer phases taken modulo n (q) first: exact, whatever the size.
    count = len(spec["u"])
    rows = xp.arange(r0, r1, dtype=np.int64)
    cols = xp.arange(q, dtype=np.int64)
    down = xp.zeros((h, count + 1), dtype=np.complex128)
    across = xp.ones((count + 1, q), dtype=np.complex128)
    for j in range(count):
        weight = spec["amplitude"][j] * np.exp(1j * spec["phase"][j])
        down[:, j] = xp.exp((2j * math.pi / n) * ((int(spec["u"][j]) * rows) % n)) * weight
        across[j] = xp.exp((2j * math.pi / q) * ((int(spec["v"][j]) * cols) % q))
    down[:, count] = -shared.NOISE * (1 if real else 1 + 1j)
    signal = down @ across
    out += signal.real if real else signal
    return settled(out.astype(value_type, copy=False), library)


def along_rows(block, library="numpy", real=False, inverse=False, value_type="complex128",
               threads=1):
    """The 1-D transform of every row of a block holding whole rows (axis 1)."""
    kind = "rfft" if real else "ifft" if inverse else "fft"
    out = _transform(kind, block, 1, library, threads).astype(value_type, copy=False)
    settled(out, library)
    release_plans(library)
    return out


def piece(block, c0=0, c1=1, library="numpy"):
    """Columns ``c0:c1`` of a row block, transposed into a contiguous array (a transpose's piece).

    Contiguous, it moves between workers without another copy, and the pieces of a column
    block join side by side into whole rows.
    """
    return settled(importlib.import_module(library).ascontiguousarray(block[:, c0:c1].T),
                   library)


def joined(pieces, library="numpy"):
    """The pieces of one block of the transpose, side by side (axis 1), in one new block."""
    return settled(importlib.import_module(library).concatenate(pieces, axis=1), library)


def along_columns(block, library="numpy", inverse=False, value_type="complex128",
                  real_length=None, threads=1):
    """The 1-D transform of whole columns, held transposed: every row of ``block`` (axis 1).

    Each column block arrives as its transpose (rows of a contiguous block), so that this
    transform, like the first, runs along contiguous memory. ``real_length``: irfft2's last
    stage instead, the inverse of a real transform of that length (rows of half spectra).
    """
    kind = "irfft" if real_length is not None else "ifft" if inverse else "fft"
    out = _transform(kind, block, 1, library, threads, n=real_length).astype(value_type,
                                                                              copy=False)
    settled(out, library)
    release_plans(library)
    return out


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
    terms, squares = _input_terms(xp, block, n, transform, len(cols))
    _row_terms(xp, terms, transformed, n, cols, inverse)
    return _packed_terms(terms, squares)


def _input_terms(xp, block, n, transform, cells: int):
    """Each row's x_r @ b and its sum of squares, in double precision, a slab at a time.

    x_r @ b is column 0 of ``terms``; the others are left for the row transform's values.
    """
    b = xp.asarray(transform)
    height = block.shape[0]
    terms = xp.empty((height, 1 + cells), dtype=np.complex128)
    squares = xp.empty(height, dtype=np.float64)
    slab = max(1, SLAB_CELLS // max(1, n))
    for top in range(0, height, slab):
        part = _wide(block[top:top + slab])
        terms[top:top + slab, 0] = _times(part, b)
        squares[top:top + slab] = _squares(xp, part)
    return terms, squares


def _row_terms(xp, terms, transformed, n, cols, inverse) -> None:
    """The row transforms at the sampled cells' columns, into ``terms[:, 1:]``.

    Times n for the inverse, whose 1/n the DFT sums leave out.
    """
    if len(cols):
        terms[:, 1:] = transformed[:, xp.asarray(cols)]
        if inverse:
            terms[:, 1:] *= n


def _packed_terms(terms, squares) -> np.ndarray:
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
    projection = None if weights is None else _projected(xp, block, weights[c0:c1])
    # The largest cells lie in the rows with the largest maxima: select those rows first.
    top = min(shared.TOP, (c1 - c0) * n)
    maxima = power.max(axis=1)
    lines = maxima.size - min(top, maxima.size)
    rows_top = xp.argpartition(maxima, lines)[lines:]
    candidates = power[rows_top].ravel()
    picked = xp.argpartition(candidates, candidates.size - top)[candidates.size - top:]
    line, cell = to_host(rows_top[picked // n]), to_host(picked % n)
    values = to_host(block[xp.asarray(line), xp.asarray(cell)])
    rows, cols = np.asarray(rows), np.asarray(cols)
    held = np.flatnonzero((cols >= c0) & (cols < c1))
    got = (to_host(block[xp.asarray(cols[held] - c0), xp.asarray(rows[held])]) if held.size
           else np.zeros(0))
    return _packed_summary(width, len(rows), power.sum(axis=1, dtype=np.float64),
                           projection, (cell, line + c0, values), (held, got))


def _packed_summary(width: int, cells: int, squares, projection, peaks,
                    sampled) -> np.ndarray:
    """:func:`summary`'s vector from its parts.

    The columns' squares, the block's part of X s (or None), its largest cells (rows, columns,
    values) and the sampled cells it holds (which of them, their values).
    """
    out = np.zeros(width)
    squares = to_host(squares)
    out[:len(squares)] = squares
    base = width - 4 * shared.TOP - 2 * cells
    if projection is not None:
        n = len(projection)
        out[base - 2 * n:base - n], out[base - n:base] = projection.real, projection.imag
    peak_rows, peak_cols, values = peaks
    values = np.asarray(values).astype(np.complex128)
    table = np.full((shared.TOP, 4), [-1.0, -1.0, 0.0, 0.0])
    top = len(values)
    table[:top, 0], table[:top, 1] = peak_rows, peak_cols
    table[:top, 2], table[:top, 3] = values.real, values.imag
    out[base:base + 4 * shared.TOP] = table.ravel()
    held, got = sampled
    if len(held):
        got = np.asarray(got).astype(np.complex128)
        spots = out[base + 4 * shared.TOP:].reshape(-1, 2)
        spots[held, 0], spots[held, 1] = got.real, got.imag
    return out.reshape(1, width)


# Cells of a strip of the spectrum's rows squared at once by :func:`column_summary` (in cache).
STRIP_CELLS = 2**16


def column_summary(spectrum, c0=0, c1=1, library="numpy", rows=(), cols=(), width=1,
                   weights=None):
    """:func:`summary`'s vector of columns ``c0:c1`` of the whole spectrum X, not transposed.

    One pass over strips of whole rows of the block (contiguous in X, each small enough to
    stay in cache while it is squared, summed, its maxima taken and its part of X s added),
    instead of the several passes :func:`summary` makes over a block of its own.
    """
    xp = importlib.import_module(library)
    block = spectrum[:, c0:c1]
    n, w = block.shape
    squares = xp.zeros(w, dtype=np.float64)
    maxima = xp.zeros(w, dtype=np.float64)
    strip = max(1, STRIP_CELLS // max(1, w))
    for top in range(0, n, strip):
        part = block[top:top + strip]
        power = part.real * part.real
        power += part.imag * part.imag
        squares += power.sum(axis=0, dtype=np.float64)
        xp.maximum(maxima, power.max(axis=0), out=maxima)
    projection = None
    if weights is not None:  # X[:, c0:c1] s[c0:c1]: one complex product a slab of rows
        s = xp.asarray(np.asarray(weights[c0:c1], np.complex128))
        projection = xp.empty(n, dtype=np.complex128)
        slab = max(1, SLAB_CELLS // max(1, w))
        for top in range(0, n, slab):
            projection[top:top + slab] = _wide(block[top:top + slab]) @ s
    count = min(shared.TOP, w * n)
    lines = w - min(count, w)
    lines_top = xp.argpartition(maxima, lines)[lines:]  # the columns with the largest maxima
    candidates = block[:, lines_top]
    power = (candidates.real * candidates.real + candidates.imag * candidates.imag).ravel()
    picked = xp.argpartition(power, power.size - count)[power.size - count:]
    row, line = to_host(picked // len(lines_top)), to_host(lines_top[picked % len(lines_top)])
    values = to_host(block[xp.asarray(row), xp.asarray(line)])
    rows, cols = np.asarray(rows), np.asarray(cols)
    held = np.flatnonzero((cols >= c0) & (cols < c1))
    got = (to_host(block[xp.asarray(rows[held]), xp.asarray(cols[held] - c0)]) if held.size
           else np.zeros(0))
    return _packed_summary(width, len(rows), squares,
                           to_host(projection),
                           (row, line + c0, values), (held, got))


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


# --------------------------------------------------------------------------- the whole array


def _each(function, items, threads: int, library: str) -> list:
    """``function`` of every item, on a pool of ``threads`` threads for NumPy.

    NumPy's loops let go of the GIL; on a device the items run in order (their work is queued
    on one stream anyway).
    """
    items = list(items)
    if library != "numpy" or threads <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(min(threads, len(items))) as pool:
        return list(pool.map(function, items))


def _spans(chunks) -> list[tuple[int, int, int]]:
    """(index, start, stop) of each block of ``chunks``."""
    out, start = [], 0
    for index, size in enumerate(chunks):
        out.append((index, start, start + int(size)))
        start += int(size)
    return out


def _whole_input(plan: dict, xp):
    """The input as one array, drawn or read by row blocks on the pool, or from its blocks.

    irfft2's input, the half spectrum, as it is given (not transposed). An array in memory
    arrives as its blocks (``plan["blocks"]``: where each lies, and the blocks, computed as
    this task's inputs), copied into place.
    """
    n, q, library, source = plan["n"], plan["q"], plan["library"], plan["source"]
    shape = tuple(plan["shape"])
    x = xp.empty(shape, dtype=plan["value_type"])
    if plan.get("blocks") is not None:
        def fill(index):
            (r0, r1), (c0, c1) = plan["blocks"][0][index]
            x[r0:r1, c0:c1] = xp.asarray(plan["blocks"][1][index])
        spans = range(len(plan["blocks"][1]))
    elif source is None:
        def fill(span):
            index, r0, r1 = span
            info = {None: {"array-location": [(r0, r1), (0, q)], "chunk-location": (index, 0)}}
            x[r0:r1] = generated(info, n=n, seed=plan["seed"], value_type=plan["value_type"],
                                 real=plan["real_input"], library=library, q=q)
        spans = _spans(plan["row_chunks"])
    else:
        def fill(span):
            _, r0, r1 = span
            part = np.asarray(source.reader[r0:r1]).astype(plan["value_type"], copy=False)
            x[r0:r1] = part if library == "numpy" else xp.asarray(part)
        step = -(-shape[0] // max(1, plan["threads"]))
        spans = _spans([min(step, shape[0] - r) for r in range(0, shape[0], step)])
    _each(fill, spans, plan["threads"], library)
    return x


def _clock(library: str) -> float:
    """A timestamp once the device's queued work is done."""
    settled(None, library)
    return time.perf_counter()


def whole(plan: dict) -> dict:
    """The run's transform of the whole array in one worker, on all the threads it is given.

    No block leaves the worker: the row transforms and the column transforms run on the one
    array (in place where the types allow, scipy.fft's ``overwrite_x``), the columns read where
    they lie (pocketfft copies a few at a time into its buffers; cuFFT's strided batches), so
    the transpose moves no byte between workers. The input's certificates
    (:func:`line_terms`) and each column block's summary (:func:`summary`) are the slab path's,
    on the same blocks. ``plan``: n, q (see :func:`pipelines.fft.layout.layout`), value_type,
    dtype, real_input, half_inverse, inverse,
    seed, source, row_chunks, col_chunks, threads, library, cells, weights, transform, width,
    keep (return the result array for ``--output``).

    Returns ``lines``, ``packed`` (one summary row a column block), ``seconds`` (input, rows,
    columns, reduce; each taken once the device is done) and ``array`` (the spectrum, or
    irfft2's result, where ``keep``).
    """
    library, threads, n, q = plan["library"], plan["threads"], plan["n"], plan["q"]
    xp = importlib.import_module(library)
    rows, cols = plan["cells"]
    marks = [_clock(library)]
    x = _whole_input(plan, xp)
    marks.append(_clock(library))
    held = x.T if plan["half_inverse"] else x  # irfft2 holds the half spectrum transposed
    parts = _each(lambda span, held=held: _input_terms(xp, held[span[1]:span[2]], q,
                                                       plan["transform"], len(cols)),
                  _spans(plan["row_chunks"]), threads, library)
    terms = xp.concatenate([t for t, _ in parts])
    squares = xp.concatenate([q for _, q in parts])
    if plan["half_inverse"]:
        y = _transform("ifft", x, 0, library, threads, overwrite=True)
    else:
        kind = "rfft" if plan["real_input"] else "ifft" if plan["inverse"] else "fft"
        y = _transform(kind, x, 1, library, threads, overwrite=True)
    del x, held
    y = y.astype(plan["dtype"], copy=False)
    _row_terms(xp, terms, y.T if plan["half_inverse"] else y, q, cols, plan["inverse"])
    lines = _packed_terms(terms, squares)
    marks.append(_clock(library))
    if plan["half_inverse"]:
        spectrum_t = _transform("irfft", y, 1, library, threads, n=n)
        result = spectrum_t = spectrum_t.astype(shared.REAL_OF[plan["dtype"]], copy=False)
    else:
        result = _transform("ifft" if plan["inverse"] else "fft", y, 0, library, threads,
                            overwrite=True).astype(plan["dtype"], copy=False)
        spectrum_t = result.T
    del y
    marks.append(_clock(library))
    height = spectrum_t.shape[1]

    def summarised(span):
        index, c0, c1 = span
        if not plan["half_inverse"]:  # the spectrum's columns, read in place
            return column_summary(result, c0, c1, library=library, rows=rows, cols=cols,
                                  width=plan["width"], weights=plan["weights"])
        info = {0: {"array-location": [(c0, c1), (0, height)], "chunk-location": (index, 0)}}
        return summary(spectrum_t[c0:c1], info, library=library, rows=rows, cols=cols,
                       width=plan["width"], weights=plan["weights"])

    packed = np.concatenate(_each(summarised, _spans(plan["col_chunks"]), threads, library))
    marks.append(_clock(library))
    release_plans(library)
    return {"lines": lines, "packed": packed, "seconds": np.diff(marks).tolist(),
            "array": result if plan["keep"] else None}
