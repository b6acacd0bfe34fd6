"""fft-pipeline's check, its recomputations: the input's rows again, DFT sums applied directly.

The rows are drawn from the documented scheme (:mod:`pipelines.fft.shared`; the noise through
:mod:`daskgpu.verification.replay`) or re-read (a file with NumPy/Zarr, an array in memory from
the object: :func:`daskgpu.verification.replay.region`), and multiplied by given columns where
the block's library is (on a GPU worker only the products come back). Nothing of the
computation's code (:mod:`pipelines.fft.tasks`, :mod:`daskgpu.data.array_input`) is used.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math

import dask
import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.numeric import starts
from daskgpu.verification import replay
from pipelines.fft import shared
from pipelines.fft.shared import FFTContext

# Cells of a DFT's kernel (frequencies x rows) made at once.
KERNEL_CELLS = 2**22


@functools.lru_cache(maxsize=4)
def roots(n: int, inverse: bool) -> np.ndarray:
    """exp(-+2 pi i k / n) for k < n (+ for the inverse), read-only."""
    out = np.exp(((1.0 if inverse else -1.0) * 2j * math.pi / n) * np.arange(n))
    out.flags.writeable = False
    return out


def waves(ctx: FFTContext, first, second, n: int) -> np.ndarray:
    """exp(-+2 pi i a b / n) for every a of ``first`` and b of ``second``.

    Looked up in the n-th roots of unity at (a b) mod n: as exact as one exponential, cheaper.
    """
    a, b = np.asarray(first, np.int64), np.asarray(second, np.int64)
    return roots(n, ctx.inverse)[(a[:, None] * b[None, :]) % n]


def columns(ctx: FFTContext, cols, blocks: bool = False) -> np.ndarray:
    """What each input row is multiplied by, (q, k): b; exp(-+2 pi i c v / q) at ``cols``.

    ``blocks``: then each column block's b_j = W s_j (s zero outside the block), by differences.
    """
    q, seed = ctx.q, ctx.check_seed
    b = shared.projection_transform(q, ctx.m, seed, ctx.inverse)
    parts = [b[:, None], waves(ctx, np.arange(q), cols, q)]
    if blocks:
        ends = [shared.projection_transform(q, int(end), seed, ctx.inverse)
                for end in np.cumsum((0, *ctx.col_chunks))]
        parts.append(np.diff(np.stack(ends, axis=1), axis=1))
    return np.concatenate(parts, axis=1)


def _noise(ctx: FFTContext, index: int, local: np.ndarray, xp):
    """The uniform draws of rows ``local`` of row block ``index``, shaped (rows, q, 1 or 2).

    One 64-bit draw an element, row after row: NumPy's PCG64 advances to a row's first draw;
    the device's generator cannot skip ahead, and draws the block whole.
    """
    seed, q, h = shared.noise_seed(ctx.seed), ctx.q, ctx.row_chunks[index]
    width = 1 if ctx.real else 2
    if ctx.library == "numpy" and len(local) < h:
        return np.stack([replay.uniform_at(seed, index, line * q * width, q * width, np.float64)
                         for line in local.tolist()]).reshape(len(local), q, width)
    shape = (h, q) if ctx.real else (h, q, 2)
    drawn = replay.stream(seed, index, library=ctx.library).random(shape, dtype=np.float64)
    drawn = drawn.reshape(h, q, width)
    return drawn[xp.asarray(local)] if len(local) < h else drawn


def _generated(ctx: FFTContext, index: int, local: np.ndarray, xp):
    """Rows ``local`` of row block ``index`` of the generated input, in float64 arithmetic.

    The sinusoids as one product of their factors, their integer phases reduced modulo n (q).
    """
    n, q, spec = ctx.n, ctx.q, ctx.planted()
    r = xp.asarray(int(starts(ctx.row_chunks)[index]) + local)
    c = xp.arange(q, dtype=np.int64)
    down = xp.empty((len(local), len(spec["u"])), dtype=np.complex128)
    across = xp.empty((len(spec["u"]), q), dtype=np.complex128)
    for k, (u, v, a, phi) in enumerate(zip(spec["u"], spec["v"], spec["amplitude"],
                                           spec["phase"], strict=True)):
        down[:, k] = a * xp.exp(1j * ((2 * math.pi / n) * ((int(u) * r) % n) + phi))
        across[k] = xp.exp(1j * (2 * math.pi / q) * ((int(v) * c) % q))
    values = down @ across
    values = xp.ascontiguousarray(values.real) if ctx.real else values
    noise = shared.NOISE * (2 * _noise(ctx, index, local, xp) - 1)
    values += noise[:, :, 0] if ctx.real else noise[:, :, 0] + 1j * noise[:, :, 1]
    return values


def input_region(ctx: FFTContext, index: int):
    """Row block ``index`` of the input read again in its own element type, lazily.

    As the input is given (irfft2's: the half spectrum's column block); a file's read in a
    task, an array's from the object (:func:`daskgpu.verification.replay.region`; a NumPy
    array's a view, not a copy). :func:`input_rows` takes it to the run's value type.
    """
    r0, h = int(starts(ctx.row_chunks)[index]), ctx.row_chunks[index]
    region = (slice(None), slice(r0, r0 + h)) if ctx.half_inverse else (slice(r0, r0 + h),)
    return replay.region(ctx.source, region, ctx.source.dtype)


def travelling(ctx: FFTContext) -> FFTContext:
    """``ctx`` as a task on a worker takes it: the input named, not held (no array in it).

    The input's rows travel apart, as :func:`input_region` reads them.
    """
    if ctx.source is None:
        return ctx
    return dataclasses.replace(ctx, source=dataclasses.replace(ctx.source, reader=None))


def input_rows(ctx: FFTContext, index: int, local, xp=np, part=None):
    """Rows ``local`` of row block ``index`` in the run's value type, widened, where ``xp`` is.

    Drawn again, or re-read (irfft2's held transposed: the half spectrum's columns): ``part``,
    the block :func:`input_region` read, else read here.
    """
    local = np.asarray(local, np.int64)
    if ctx.source is None:
        values = _generated(ctx, index, local, xp)
    else:
        h = ctx.row_chunks[index]
        if part is None:
            (part,) = dask.compute(input_region(ctx, index))
        part = np.asarray(part)
        part = part.T if ctx.half_inverse else part
        values = xp.asarray(part[local] if len(local) < h else part)
    wide = np.float64 if ctx.real else np.complex128
    return values.astype(ctx.value_type, copy=False).astype(wide, copy=False)


def row_terms(ctx: FFTContext, index: int, local, across: np.ndarray, part=None) -> dict:
    """Rows ``local`` of row block ``index`` again: products with ``across``, squares, bounds.

    ``bound``: |x| @ |across|; ``hermitian`` (irfft2): the squares of each row's Hermitian part.
    ``part``: an input's row block read again (:func:`input_region`).
    """
    xp = importlib.import_module(ctx.library)
    x = input_rows(ctx, index, local, xp, part)
    a = xp.asarray(across)
    size = xp.abs(x)
    products = x @ a if x.dtype.kind == "c" else (x @ a.real) + 1j * (x @ a.imag)
    out = {"products": products, "squares": (size * size).sum(axis=1), "bound": size @ xp.abs(a)}
    if ctx.half_inverse:
        hermitian = xp.abs((x + xp.conj(x[:, (-xp.arange(ctx.q)) % ctx.q])) / 2)
        out["hermitian"] = (hermitian * hermitian).sum(axis=1)
    return {key: to_host(value) for key, value in out.items()}


def rows_again(ctx: FFTContext, rows: np.ndarray, across: np.ndarray) -> dict:
    """:func:`row_terms` of ``rows`` (sorted), a call a row block, joined; ``rows`` beside.

    On the workers, but NumPy's sampled rows of generated data: drawn here, skipping ahead, in
    a few milliseconds (a round trip to the workers would cost more).
    """
    first = starts(ctx.row_chunks)
    blocks = [(index, rows[(rows >= r0) & (rows < r0 + h)] - r0)
              for index, (r0, h) in enumerate(zip(first.tolist(), ctx.row_chunks, strict=True))]
    calls = [(ctx, index, local, across) for index, local in blocks if local.size]
    if ctx.source is None and ctx.library == "numpy" and len(rows) < ctx.rows:
        parts = [row_terms(*call) for call in calls]
    elif ctx.source is None:
        parts = replay.on_workers(row_terms, calls)
    else:  # each task gets its block of the input read again, not the input
        parts = replay.on_workers(row_terms, [(travelling(ctx), index, local, across,
                                               input_region(ctx, index))
                                              for _, index, local, _ in calls])
    joined = {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
    joined["rows"] = np.concatenate([local + first[index] for _, index, local, _ in calls])
    return joined


def dft_of_rows(ctx: FFTContext, frequencies, values: np.ndarray,
                paired: bool = True) -> np.ndarray:
    """sum_r w_r e^(-+2 pi i u r / n) values[r] for frequencies u, applied directly (no FFT).

    ``values`` (rows, k): with ``paired`` column i for frequency i, else every column for every
    frequency, (frequencies, k). w_r: :meth:`FFTContext.row_weights`; over N for the inverse;
    the real part for irfft2, whose result is real.
    """
    frequencies = np.asarray(frequencies, np.int64)
    weights, r = ctx.row_weights(), np.arange(ctx.rows)
    step = max(1, KERNEL_CELLS // max(1, ctx.rows))
    out = []
    for top in range(0, len(frequencies), step):
        kernel = waves(ctx, frequencies[top:top + step], r, ctx.n) * weights
        out.append(np.einsum("ur,ru->u", kernel, values[:, top:top + step]) if paired
                   else kernel @ values)
    sums = np.concatenate(out) / (ctx.points if ctx.inverse else 1)
    return sums.real.astype(np.complex128) if ctx.half_inverse else sums
