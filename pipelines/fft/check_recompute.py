"""fft-pipeline's check, its recomputation: the input drawn again (or re-read) and summed apart.

Row block by row block, on the workers: the sum of squares and of magnitudes of the input, and
its DFT sums at given cells (products with exponentials in float64, no FFT). The input is drawn
from the documented scheme (:mod:`pipelines.fft.shared`) with NumPy's generators (or the array
library's, seeded as the run's), or re-read with NumPy/Zarr: nothing of the computation's code
(:mod:`pipelines.fft.tasks`, :mod:`daskgpu.data.array_input`) is used.
"""

from __future__ import annotations

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
    n, real = ctx["n"], ctx["real"]
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
    spec = shared.signal(ctx["seed"], n, real)
    r = np.arange(r0, r0 + h, dtype=np.int64)
    c = np.arange(n, dtype=np.int64)
    values = np.zeros((h, n), dtype=wide)
    for u, v, a, phi in zip(spec["u"], spec["v"], spec["amplitude"], spec["phase"],
                            strict=True):
        # exp(i (a + b)) = exp(i a) exp(i b): one outer product of a column and a row.
        wave = np.multiply.outer(
            a * np.exp(1j * ((2 * math.pi / n) * ((int(u) * r) % n) + phi)),
            np.exp(1j * (2 * math.pi / n) * ((int(v) * c) % n)))
        values += wave.real if real else wave
    sequence = np.random.SeedSequence(shared.noise_seed(ctx["seed"]), spawn_key=(index,))
    shape = (h, n) if real else (h, n, 2)
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
    n = ctx["n"]
    r0 = int(starts(ctx["row_chunks"])[index])
    rows, cols = (np.asarray(part, np.int64) for part in cells)
    sign = 1.0 if ctx["inverse"] else -1.0
    across = np.exp(sign * 2j * math.pi / n * ((np.arange(n)[:, None] * cols[None, :]) % n))
    down = np.exp(sign * 2j * math.pi / n
                  * ((np.arange(r0, r0 + x.shape[0])[:, None] * rows[None, :]) % n))
    weights = np.ones(x.shape[0])
    squared = np.abs(x) ** 2
    if ctx.get("half_inverse"):
        weights = shared.column_weights(n, shared.spectrum_columns(n, True), True)[
            r0:r0 + x.shape[0]]
        for line in np.flatnonzero(weights == 1):
            hermitian = (x[line] + np.conj(x[line][(-np.arange(n)) % n])) / 2
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
        total["cells"] = total["cells"] / float(ctx["n"]) ** 2
    total["cells"], total["peaks"] = total["cells"][:len(rows)], total["cells"][len(rows):]
    return total
