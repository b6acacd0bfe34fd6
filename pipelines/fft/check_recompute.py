"""fft-pipeline's check, its recomputation: the input drawn again (or re-read) and summed apart.

Row block by row block, on the workers: the sum of squares and of magnitudes of the input, and
its DFT sums at given cells (products with exponentials in float64, no FFT). The input is drawn
from the documented scheme (:mod:`pipelines.fft.shared`) with NumPy's generators (or the array
library's, seeded as the run's), or re-read with NumPy/Zarr: nothing of the computation's code
(:mod:`pipelines.fft.tasks`, :mod:`daskgpu.data.array_input`) is used.

For depth fast, :func:`lines_again` gives chosen rows of the input only, with their products
with given columns: NumPy's generator skips ahead to each row (``PCG64.advance``); another
library's draws the row's block on its device, where the rows' products are taken.
"""

from __future__ import annotations

import importlib
import math

import dask
import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.numeric import generator, starts
from pipelines.fft import shared


def input_block(ctx: dict, index: int) -> np.ndarray:
    """Row block ``index`` of the input, in the run's value type, as float64/complex128."""
    h = int(ctx["row_chunks"][index])
    r0 = int(starts(ctx["row_chunks"])[index])
    n, q, real = ctx["n"], ctx["q"], ctx["real"]
    value_type = shared.REAL_OF[ctx["dtype"]] if real else ctx["dtype"]
    wide = np.float64 if real else np.complex128
    source = ctx["source"]
    if source is not None:
        if source.kind == "zarr":
            import zarr

            stored = zarr.open_array(source.path, mode="r")
        else:
            stored = np.load(source.path, mmap_mode="r")
        # irfft2's input is held transposed: its columns r0.. as rows
        part = stored[:, r0:r0 + h].T if ctx.get("half_inverse") else stored[r0:r0 + h]
        return np.asarray(part).astype(value_type).astype(wide)
    spec = shared.signal(ctx["seed"], n, real, q)
    r = np.arange(r0, r0 + h, dtype=np.int64)
    c = np.arange(q, dtype=np.int64)
    values = np.zeros((h, q), dtype=wide)
    for u, v, a, phi in zip(spec["u"], spec["v"], spec["amplitude"], spec["phase"],
                            strict=True):
        # exp(i (a + b)) = exp(i a) exp(i b): one outer product of a column and a row.
        wave = np.multiply.outer(
            a * np.exp(1j * ((2 * math.pi / n) * ((int(u) * r) % n) + phi)),
            np.exp(1j * (2 * math.pi / q) * ((int(v) * c) % q)))
        values += wave.real if real else wave
    sequence = np.random.SeedSequence(shared.noise_seed(ctx["seed"]), spawn_key=(index,))
    shape = (h, q) if real else (h, q, 2)
    drawn = to_host(generator(ctx["library"], sequence).random(shape, dtype=np.float64))
    noise = shared.NOISE * (2 * drawn - 1)
    if real:
        values += noise
    else:
        values.real += noise[:, :, 0]
        values.imag += noise[:, :, 1]
    return values.astype(value_type).astype(wide)


def block_terms(ctx: dict, index: int, cells: tuple) -> dict:
    """One row block's sum of squares, sum of magnitudes, and DFT partial sums at ``cells``.

    irfft2 (``half_inverse``): the block holds columns l of the half spectrum X as rows. Its
    result x is real with x[r, c] = Re(sum_kl w_l X[k, l] e^(2 pi i (k r + l c) / n)) / n^2,
    w_l = 2 where column l stands for its mirror image too, 1 for columns 0 and n/2, whose
    Hermitian part (X[k, l] + conj(X[-k, l])) / 2 alone reaches the result (as numpy's
    irfft2 reads them): the squares count that part, weighted. Cells are of x's transpose.
    """
    x = input_block(ctx, index)
    n, q = ctx["n"], ctx["q"]
    r0 = int(starts(ctx["row_chunks"])[index])
    rows, cols = (np.asarray(part, np.int64) for part in cells)
    sign = 1.0 if ctx["inverse"] else -1.0
    across = np.exp(sign * 2j * math.pi / q * ((np.arange(q)[:, None] * cols[None, :]) % q))
    down = np.exp(sign * 2j * math.pi / n
                  * ((np.arange(r0, r0 + x.shape[0])[:, None] * rows[None, :]) % n))
    weights = np.ones(x.shape[0])
    squared = np.abs(x) ** 2
    if ctx.get("half_inverse"):
        weights = shared.column_weights(n, shared.spectrum_columns(n, True), True)[
            r0:r0 + x.shape[0]]
        for line in np.flatnonzero(weights == 1):
            hermitian = (x[line] + np.conj(x[line][(-np.arange(q)) % q])) / 2
            squared[line] = np.abs(hermitian) ** 2
    partial = ((down * weights[:, None]) * (x @ across)).sum(axis=0)
    magnitudes = np.abs(x)
    return {"squares": float((weights[:, None] * squared).sum()),
            "l1": float((weights[:, None] * magnitudes).sum()), "cells": partial}


def _add(*parts: dict) -> dict:
    return {key: sum(p[key] for p in parts) for key in parts[0]}


def recompute(ctx: dict, peaks: tuple = ((), ())) -> dict:
    """The input's sums of squares and of magnitudes, and X at the sampled and ``peaks`` cells.

    Summed over the input's row blocks on the workers. ``peaks`` (rows, columns) are cells the
    run reported; their values come back as ``peaks``, the sampled cells' as ``cells``.
    """
    rows, cols = shared.sampled_cells(ctx["n"], ctx["col_chunks"], ctx["check_seed"])
    cells = (np.concatenate([rows, np.asarray(peaks[0], np.int64)]),
             np.concatenate([cols, np.asarray(peaks[1], np.int64)]))
    terms = [dask.delayed(block_terms, pure=True)(ctx, i, cells)
             for i in range(len(ctx["row_chunks"]))]
    (total,) = dask.compute(dask.delayed(_add, pure=True)(*terms))
    if ctx.get("half_inverse"):  # a real result: the sums' real parts
        total["cells"] = total["cells"].real.astype(np.complex128)
    if ctx["inverse"]:
        total["cells"] = total["cells"] / (float(ctx["n"]) * ctx["q"])
    total["cells"], total["peaks"] = total["cells"][:len(rows)], total["cells"][len(rows):]
    return total


def _noise_lines(ctx: dict, index: int, local: np.ndarray, xp):
    """The uniform draws of rows ``local`` of row block ``index``, shaped (rows, n[, 2]).

    Each element takes one 64-bit draw, row after row (``random`` of float64): NumPy's PCG64
    advances to a row's first draw. CuPy's generator cannot skip ahead: it draws the block.
    """
    n, real = ctx["q"], ctx["real"]  # n: the length of a row
    sequence = np.random.SeedSequence(shared.noise_seed(ctx["seed"]), spawn_key=(index,))
    per_row = n if real else 2 * n
    if ctx["library"] == "numpy":
        drawn = []
        for line in local.tolist():
            bits = np.random.PCG64(sequence)
            bits.advance(line * per_row)
            drawn.append(np.random.Generator(bits).random(per_row, dtype=np.float64))
        rows = np.array(drawn).reshape(len(local), per_row)
        return rows if real else rows.reshape(len(local), n, 2)
    h = int(ctx["row_chunks"][index])
    drawn = generator(ctx["library"], sequence).random((h, n) if real else (h, n, 2),
                                                      dtype=np.float64)
    return drawn[xp.asarray(local)]


def _generated_lines(ctx: dict, index: int, local: np.ndarray, xp):
    """Rows ``local`` of row block ``index`` of the generated input, as :func:`input_block`.

    The sinusoids as one product of their factors, (rows x K) @ (K x n): a few rows cost little
    more than their exponentials.
    """
    n, q, real = ctx["n"], ctx["q"], ctx["real"]
    spec = shared.signal(ctx["seed"], n, real, q)
    r = xp.asarray(int(starts(ctx["row_chunks"])[index]) + local)
    c = xp.arange(q, dtype=np.int64)
    down = xp.empty((len(local), len(spec["u"])), dtype=np.complex128)
    across = xp.empty((len(spec["u"]), q), dtype=np.complex128)
    for k, (u, v, a, phi) in enumerate(zip(spec["u"], spec["v"], spec["amplitude"],
                                           spec["phase"], strict=True)):
        down[:, k] = a * xp.exp(1j * ((2 * math.pi / n) * ((int(u) * r) % n) + phi))
        across[k] = xp.exp(1j * (2 * math.pi / q) * ((int(v) * c) % q))
    values = down @ across
    values = xp.ascontiguousarray(values.real) if real else values
    noise = shared.NOISE * (2 * _noise_lines(ctx, index, local, xp) - 1)
    if real:
        values += noise
    else:
        values += noise[:, :, 0] + 1j * noise[:, :, 1]
    return values


def _lines(ctx: dict, index: int, local: np.ndarray, xp):
    """Rows ``local`` of row block ``index``, in the run's value type, widened, where ``xp`` is."""
    value_type = shared.REAL_OF[ctx["dtype"]] if ctx["real"] else ctx["dtype"]
    wide = np.float64 if ctx["real"] else np.complex128
    source = ctx["source"]
    if source is None:
        return _generated_lines(ctx, index, local, xp).astype(value_type).astype(wide)
    r0 = int(starts(ctx["row_chunks"])[index])
    if source.kind == "zarr":
        import zarr

        stored = zarr.open_array(source.path, mode="r")
    else:
        stored = np.load(source.path, mmap_mode="r")
    h = int(ctx["row_chunks"][index])
    # irfft2's input is held transposed: its columns as rows
    part = np.asarray(stored[:, r0:r0 + h].T if ctx.get("half_inverse") else stored[r0:r0 + h])
    if len(local) < h:
        part = part[local]
    return xp.asarray(part.astype(value_type).astype(wide))


def lines_again(ctx: dict, index: int, local, columns: np.ndarray) -> dict:
    """Rows ``local`` of input block ``index`` again, their products with ``columns`` and squares.

    ``columns`` (n, k) complex. On the worker, where the block's library is (CuPy's on a GPU
    worker: the rows are drawn or copied there, and only these sums come back). ``bound``: the
    products of the magnitudes, |x| @ |columns|, which bound the products' rounding;
    ``hermitian``: for irfft2, the squares of the Hermitian part of each row (what columns 0
    and n/2 of the half spectrum contribute).
    """
    xp = importlib.import_module(ctx["library"])
    local = np.asarray(local, np.int64)
    x = _lines(ctx, index, local, xp)
    across = xp.asarray(columns)
    magnitude = xp.abs(x)
    products = x @ across if x.dtype.kind == "c" else (x @ across.real) + 1j * (x @ across.imag)
    out = {"products": products, "squares": (magnitude * magnitude).sum(axis=1),
           "bound": magnitude @ xp.abs(across)}
    if ctx.get("half_inverse"):
        mirrored = x[:, (-xp.arange(ctx["q"])) % ctx["q"]]
        hermitian = xp.abs((x + xp.conj(mirrored)) / 2)
        out["hermitian"] = (hermitian * hermitian).sum(axis=1)
    return {key: to_host(value) for key, value in out.items()}
