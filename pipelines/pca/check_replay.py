"""pca-pipeline's recomputations, apart from the run: what the check's steps run on the workers.

Generated ``z`` is drawn again from its documented streams (:func:`~daskgpu.verification.replay.
stream`); an input (a file, or an array in memory) is read again apart from the run's graph by
:func:`~daskgpu.verification.replay.region` (:func:`rows_of`, :func:`cells_of`), passed to the
task that uses it. Rows ``X = Z F``, ``F = diag(sigma) V^T``, are taken as ``z``: ``C M = F^T
Z_c^T Z_c (F M)``. :func:`products` gives ``C M`` in one pass, slabs centred in float64 and
joined about the union's mean (Chan, Golub and LeVeque): the thin pass, and the full depth's
``C`` (``M = I``); :func:`cell_sums` the sampled cells.
"""

from __future__ import annotations

import importlib

import dask
import numpy as np

from daskgpu.toolkit import pcg64
from daskgpu.toolkit.backends import to_host
from daskgpu.verification import replay
from pipelines.pca import shared
from pipelines.pca.shared import PcaContext

# Elements of a slab of rows drawn or read at a time on a CPU worker: 8 MiB of float64.
SLAB_ELEMENTS = 2**20


def z_of(ctx: PcaContext, i: int):
    """Generated block ``i``'s standard normal ``z``, drawn again whole (workers' library)."""
    return replay.stream(ctx.data_seed, i, library=ctx.library).standard_normal(
        ctx.grid.block_shape(i), dtype=ctx.dtype)


def join(a: tuple, b: tuple, multiplier) -> tuple:
    """Two summaries ``(rows, mean, S M, column squares)`` as one, about the union's mean.

    ``S M = S_a M + S_b M + c e (e^T M)``, squares ``+ c e^2``, with ``e`` the difference of
    the means and ``c = n_a n_b / n``.
    """
    count, e = a[0] + b[0], b[1] - a[1]
    c = a[0] * b[0] / count
    return (count, a[1] + e * (b[0] / count), a[2] + b[2] + c * e[:, None] * (e @ multiplier),
            a[3] + b[3] + c * e * e)


def framed(ctx: PcaContext, m: np.ndarray) -> tuple:
    """``(F, F M)`` of generated data, ``(None, M)`` of an input."""
    if not ctx.random:
        return None, m
    f = shared.spectrum(ctx.features)[:, None] * shared.basis(ctx.seed, ctx.features).T
    return f, f @ m


def centred_sums(x, multiplier, xp) -> tuple:
    """``(count, mean, X_c^T (X_c M), column squares of X_c, of X)``; ``x`` centred in place."""
    count = x.shape[0]
    mean = x.sum(axis=0) / count
    plain = xp.einsum("ij,ij->j", x, x)
    x -= mean
    return count, mean, x.T @ (x @ multiplier), xp.einsum("ij,ij->j", x, x), plain


def rows_of(ctx: PcaContext, i: int):
    """Block ``i`` of an input read again apart, in its dtype, lazily (None for generated data).

    :func:`~daskgpu.verification.replay.region`: a file's task that reads it (each Zarr chunk
    once, a ``.npy`` memory-mapped), an array in memory's own slice or graph.
    """
    if ctx.random:
        return None
    return replay.region(ctx.source, ctx.grid.region(i), dtype=ctx.dtype)


def slabs(ctx: PcaContext, i: int, stored=None):
    """Yield the rows (``z`` if generated) of block ``i`` in float64, a slab at a time.

    ``stored``: an input's block, read again (:func:`rows_of`). On a device the block is one
    slab. Slabs are scratch (never the input's own memory), to be used before the next is asked.
    """
    rows, d = ctx.grid.block_shape(i)
    if ctx.library != "numpy":
        xp = importlib.import_module(ctx.library)
        yield z_of(ctx, i).astype(np.float64) if ctx.random else xp.asarray(stored).astype(
            np.float64)
        return
    rng = replay.stream(ctx.data_seed, i) if ctx.random else None
    step = max(1, SLAB_ELEMENTS // d)
    drawn = np.empty((min(step, rows), d), dtype=ctx.dtype)
    wide = drawn if drawn.dtype == np.float64 else np.empty(drawn.shape)
    for first in range(0, rows, step):
        count = min(step, rows - first)
        if rng is not None:
            rng.standard_normal(out=drawn[:count], dtype=ctx.dtype)
        else:
            drawn[:count] = stored[first:first + count]
        if wide is not drawn:
            np.copyto(wide[:count], drawn[:count])
        yield wide[:count]


def block_products(ctx: PcaContext, i: int, multiplier: np.ndarray, stored=None) -> tuple:
    """``(rows, mean, X_c^T (X_c M), column squares)`` of block ``i``, host float64.

    ``multiplier``: ``F M`` (:func:`framed`); ``X`` is ``z`` for generated data, else
    ``stored``, the block read again (:func:`rows_of`).
    """
    xp = importlib.import_module(ctx.library)
    on_device, total = xp.asarray(multiplier), None
    for rows in slabs(ctx, i, stored):
        part = centred_sums(rows, on_device, xp)[:4]
        total = part if total is None else join(total, part, on_device)
    return total[0], to_host(total[1]), to_host(total[2]), to_host(total[3])


def products(ctx: PcaContext, m: np.ndarray) -> dict:
    """``rows``, ``mean``, ``cm`` (``C M``) and ``trace``, in one pass on the workers.

    ``F M`` too is made on a worker: BLAS here would spin beside the workers while they draw.
    """
    shipped = ctx.shipped()
    f, multiplier = dask.delayed(framed, pure=True, nout=2)(shipped, m)
    parts = [dask.delayed(block_products, pure=True)(shipped, i, multiplier, rows_of(ctx, i))
             for i in range(ctx.grid.blocks)]
    (rows, *sums), f = dask.compute(replay.combined(parts, join, multiplier, width=2), f)
    mean, product, trace = in_rows(ctx, f, *sums)
    return {"rows": rows, "mean": mean, "cm": product, "trace": trace}


def in_rows(ctx: PcaContext, f, mean, product, squares) -> tuple:
    """``(mean, F^T product, sum of squares)`` of ``z`` in the rows' terms; an input's as is."""
    if f is None:
        return mean, product, float(squares.sum())
    return f.T @ mean, f.T @ product, float(squares @ shared.spectrum(ctx.features) ** 2)


def drawn_cells(ctx: PcaContext, i: int, picks, states):
    """Block ``i``'s picked cells of ``z``, drawn again from the noted states; or why not.

    A state must lie on the block's stream and a draw end at the next cell's noted state.
    """
    if ctx.library != "numpy":
        yield from ((j, z_of(ctx, i)) for j in picks)
        return
    cuts, d, states = ctx.cuts(i), ctx.features, np.asarray(states, dtype=np.uint64)
    rng = replay.stream(ctx.data_seed, i)
    bits, buffer = rng.bit_generator, np.empty((shared.CELL_ROWS, d), dtype=ctx.dtype)
    seeded = bits.state
    for j in picks:
        first, stop = cuts[j]
        bits.state = seeded
        placed = pcg64.place(bits, first * d, states[j], np.dtype(ctx.dtype).itemsize == 4)
        if not placed:
            rng.standard_normal(out=buffer[:stop - first], dtype=ctx.dtype)
            if j + 1 < len(cuts) and pcg64.state_words(bits.state) != [int(w) for w in
                                                                         states[j + 1]]:
                placed = "its draw does not end at the generator state noted for the next cell"
        yield j, placed or buffer[:stop - first]


def cells_of(ctx: PcaContext, i: int, picks) -> list | None:
    """An input's picked cells of block ``i`` read again apart, lazily (None: generated)."""
    if ctx.random:
        return None
    first, cuts = ctx.first_row(i), ctx.cuts(i)
    return [replay.region(ctx.source, (slice(first + cuts[j][0], first + cuts[j][1]),))
            for j in picks]


def cell_sums(ctx: PcaContext, i: int, picks: list[int], states, f, multiplier,
              stored=None) -> list:
    """Block ``i``'s picked cells computed again: ``(j, sums)`` or ``(j, why not)``, host.

    ``f, multiplier``: :func:`framed` of ``Q``; ``stored``: an input's cells read again
    (:func:`cells_of`). The sums as the certificates hold them, and ``norm2`` (``|X|_F^2``)
    and ``z2`` (``|Z|_F^2``, generated data) for the rounding bound.
    """
    xp = importlib.import_module(ctx.library)
    on_device, out = xp.asarray(multiplier), []
    # an input's cells copied: centring works in place, and a NumPy input's region is its memory
    cells = drawn_cells(ctx, i, picks, states) if ctx.random else (
        (j, np.array(to_host(cell), dtype=np.float64))
        for j, cell in zip(picks, stored, strict=True))
    for j, cell in cells:
        if isinstance(cell, str):
            out.append((j, cell))
            continue
        count, *sums, plain = map(to_host, centred_sums(
            xp.asarray(cell, dtype=np.float64), on_device, xp))  # a scratch or fresh copy
        mean, g, squares = in_rows(ctx, f, *sums)
        out.append((j, {"count": int(count), "mean": mean, "squares": squares, "g": g,
                        "norm2": in_rows(ctx, f, mean, g, plain)[2],
                        "z2": None if f is None else float(plain.sum())}))
    return out
