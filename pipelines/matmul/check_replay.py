"""What matmul-pipeline's check recomputes on the workers, apart from the run.

A and B are drawn again from their seeds or re-read (:mod:`daskgpu.verification.replay`), never a
whole block on the host: on CPU workers a slab of rows at a time into one reused buffer (PCG64
advanced to the slab's first value), a large block in pieces of rows that several workers draw at
once; on GPU workers a block whole on the device, only its products brought to the host. An
input, a file or an array in memory, is read again apart from the run's graph
(:func:`daskgpu.verification.replay.region`, :func:`region`): each task gets its piece as an
argument, and the context without the arrays (:func:`travelling`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from types import SimpleNamespace

import dask
import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.verification import replay
from pipelines.matmul.shared import VECTORS, MatmulContext, vectors

# Elements of a slab of rows drawn or read at a time on a CPU worker: 2 MiB of float64.
SLAB_ELEMENTS = 2**18
# Elements of a block's piece of rows, a task each (CPU workers): both workers draw one block.
PIECE_ELEMENTS = 2**23


def pieces(ctx: MatmulContext, height: int, width: int) -> list[tuple[int, int]]:
    """Row ranges of a block, a task each: about ``PIECE_ELEMENTS`` each (a device: whole)."""
    if ctx.library != "numpy" and ctx.inputs is None:
        return [(0, height)]
    count = max(1, min(height, -(-height * width // PIECE_ELEMENTS)))
    bounds = [height * p // count for p in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def travelling(ctx: MatmulContext) -> MatmulContext:
    """``ctx`` as a task on a worker takes it: the inputs named, not held (no array in it)."""
    return dataclasses.replace(ctx, sources=None)


def region(ctx: MatmulContext, which: int, location, piece=None):
    """Rows ``piece`` (default: all) of block ``location`` of input A (0) or B (1), lazily.

    Read again in its own element type apart from the run's graph (:func:`daskgpu.
    verification.replay.region`: a file's in a task, a NumPy array's here, made a value of the
    graph once, a Dask array's from its own graph); :func:`operand` widens it to float64. None
    for random data, which the tasks draw again.
    """
    if ctx.inputs is None:
        return None
    grid, source = ctx.a if which == 0 else ctx.b, ctx.sources[which]
    (rows, columns), shape = grid.region(location), grid.block_shape(location)
    low, high = piece or (0, shape[0])
    part = replay.region(source, (slice(rows.start + low, rows.start + high), columns),
                         source.dtype)
    return dask.delayed(part) if isinstance(part, np.ndarray) else part


def operand(ctx: MatmulContext, which: int, location, piece=None, values=None):
    """Rows ``piece`` (default: all) of block ``location`` of A (0) or B (1), float64.

    In the workers' library: drawn again whole from ``SeedSequence(operand_seed,
    spawn_key=(block_number,))`` (blocks numbered row-major), or of the input: ``values``, as
    :func:`region` read them, or read here.
    """
    grid = ctx.a if which == 0 else ctx.b
    shape = grid.block_shape(location)
    low, high = piece or (0, shape[0])
    if ctx.inputs is None:
        drawn = replay.redraw(ctx.seeds[which], grid.number(location), shape, ctx.dtype,
                              ctx.library)
        return drawn[low:high].astype(np.float64)
    if values is None:
        (values,) = dask.compute(region(ctx, which, location, piece))
    return importlib.import_module(ctx.library).asarray(values).astype(np.float64, copy=False)


def row_slabs(ctx: MatmulContext, which: int, location, piece, values=None):
    """Yield ``(first_row, rows)`` of rows ``piece`` of a block of A (0) or B (1), float64.

    With NumPy, slabs of about ``SLAB_ELEMENTS`` (drawn ones into one reused buffer: use each
    before asking for the next); on a device, the piece at once. ``values``: an input's piece
    (:func:`region`).
    """
    grid = ctx.a if which == 0 else ctx.b
    width = grid.block_shape(location)[1]
    (low, high), step = piece, max(1, SLAB_ELEMENTS // max(width, 1))
    if ctx.library != "numpy" or ctx.inputs is not None:
        block = operand(ctx, which, location, piece, values)
        step = step if ctx.library == "numpy" else high - low
        for first in range(low, high, step):
            yield first, block[first - low:first - low + step]
        return
    drawn = np.empty(min(step, high - low) * width + 1, dtype=ctx.dtype)
    wide = np.empty((min(step, high - low), width))
    for first in range(low, high, step):
        rows = min(step, high - first)
        odd = first * width % 2 if ctx.dtype == "float32" else 0  # float32: two a word
        values = replay.uniform_at(ctx.seeds[which], grid.number(location),
                                   first * width - odd, rows * width + odd, ctx.dtype, out=drawn)
        wide[:rows] = values[odd:].reshape(rows, width)
        yield first, wide[:rows]


def reduced(ctx: MatmulContext, which: int, location, piece, right, right_abs, cells,
            values=None) -> tuple:
    """Rows ``piece`` of a block of A (0) or B (1) reduced slab by slab, on the host.

    Returns ``rows @ right``, ``|rows| @ right_abs``, its columns ``cells[1]`` (height x
    cells), its sum of squares and its rows ``cells[0]`` (cells x width); indices within the
    block, those outside it picked as zeros. ``values``: an input's piece (:func:`region`).
    """
    xp = importlib.import_module(ctx.library)
    right, right_abs = xp.asarray(right), xp.asarray(right_abs)
    (low, high), width = piece, (ctx.a if which == 0 else ctx.b).block_shape(location)[1]
    out = [np.empty((high - low, right.shape[1])), np.empty((high - low, right_abs.shape[1])),
           np.zeros((high - low, len(cells[1]))), 0.0, np.zeros((len(cells[0]), width))]
    in_block = np.flatnonzero((cells[1] >= 0) & (cells[1] < width))
    for first, rows in row_slabs(ctx, which, location, piece, values):
        at = slice(first - low, first - low + rows.shape[0])
        out[0][at] = to_host(rows @ right)
        magnitudes = rows if ctx.inputs is None else xp.abs(rows)  # drawn: in [0, 1)
        out[1][at] = to_host(magnitudes @ right_abs)
        out[2][at, in_block] = to_host(rows[:, cells[1][in_block]])
        out[3] += float(to_host(xp.dot(rows.ravel(), rows.ravel())))
        local = cells[0] - first
        held = np.flatnonzero((local >= 0) & (local < rows.shape[0]))
        out[4][held] = to_host(rows[local[held]])
    return tuple(out)


def b_products(ctx: MatmulContext, kb: int, j: int, piece, values=None) -> tuple:
    """Rows ``piece`` of block (kb, j) of B: ``B R``, ``|B| 1``, as :func:`reduced`."""
    span = ctx.b.region((kb, j))[1]
    r = vectors(ctx.shape[2], ctx.check_seed)[span]
    cells = (np.zeros(0, np.int64), ctx.cells()[1] - span.start)
    return reduced(ctx, 1, (kb, j), piece, r, np.ones((r.shape[0], 1)), cells, values)


def a_products(ctx: MatmulContext, i: int, kb: int, piece, from_b: list, values=None) -> tuple:
    """Rows ``piece`` of block (i, kb) of A times ``from_b``'s (:func:`b_products`, by j)."""
    joined = [joined_pieces(parts) for parts in from_b]
    right = np.concatenate([part[0] for part in joined], axis=1)  # (bk, gj * vectors)
    right_abs = np.concatenate([part[1] for part in joined], axis=1)  # (bk, gj)
    cells = (ctx.cells()[0] - ctx.a.region((i, kb))[0].start, np.zeros(0, np.int64))
    return reduced(ctx, 0, (i, kb), piece, right, right_abs, cells, values)


def joined_pieces(parts: list[tuple]) -> tuple:
    """One block's :func:`reduced` from its pieces: the rows stacked, the rest added."""
    return tuple(np.concatenate(x) if at < 3 else sum(x)
                 for at, x in enumerate(zip(*parts, strict=True)))


def recompute(ctx: MatmulContext) -> SimpleNamespace:
    """C's probes, squares and sampled cells as A and B make them, from one graph of tasks.

    ``q`` (n, gj, vectors) is ``A (B R)``, ``q_abs`` (n, gj) ``|A| (|B| 1)``; ``a_squares``
    (gi,) and ``b_squares`` (gj,): squares summed over A's block rows, B's block columns;
    ``samples`` and ``samples_abs``: the sampled cells' dot products and magnitudes.
    """
    (gi, gk), gj = ctx.a.shape, ctx.b.shape[1]
    task, light = functools.partial(dask.delayed, pure=True), travelling(ctx)
    from_b = [[[task(b_products)(light, kb, j, p, region(ctx, 1, (kb, j), p))
                for p in pieces(ctx, *ctx.b.block_shape((kb, j)))] for j in range(gj)]
              for kb in range(gk)]
    from_a = [[[task(a_products)(light, i, kb, p, from_b[kb], region(ctx, 0, (i, kb), p))
                for p in pieces(ctx, *ctx.a.block_shape((i, kb)))] for kb in range(gk)]
              for i in range(gi)]
    from_a, from_b = dask.compute(from_a, from_b)
    a = [[joined_pieces(parts) for parts in by_kb] for by_kb in from_a]  # [i][kb]
    b = [[joined_pieces(parts) for parts in by_j] for by_j in from_b]  # [kb][j]
    # The sampled cells' rows of A and columns of B, each block holding its own, the rest zero
    rows = [sum(a[i][kb][4] for i in range(gi)) for kb in range(gk)]
    columns = [sum(part[2] for part in b[kb]) for kb in range(gk)]
    return SimpleNamespace(
        q=np.concatenate([sum(p[0] for p in by_kb) for by_kb in a]).reshape(-1, gj, VECTORS),
        q_abs=np.concatenate([sum(p[1] for p in by_kb) for by_kb in a]),
        a_squares=np.array([sum(p[3] for p in by_kb) for by_kb in a]),
        b_squares=np.array([sum(b[kb][j][3] for kb in range(gk)) for j in range(gj)]),
        samples=sum(np.einsum("sl,ls->s", x, y) for x, y in zip(rows, columns, strict=True)),
        samples_abs=sum(np.einsum("sl,ls->s", abs(x), abs(y))
                        for x, y in zip(rows, columns, strict=True)))


def c_block(ctx: MatmulContext, i: int, j: int, a_blocks=None, b_blocks=None) -> np.ndarray:
    """Block (i, j) of C multiplied again in float64 on a worker, and what bounds it.

    Its sum of squares, its sum, ``1ᵀ |A_i| |B_j| 1`` (which bounds its entries' magnitude),
    ``‖A_i‖²`` and ``‖B_j‖²``. ``a_blocks``, ``b_blocks``: inputs' blocks (i, kb) of A and
    (kb, j) of B by kb, as :func:`region` read them.
    """
    xp = importlib.import_module(ctx.library)
    magnitudes = xp.abs if ctx.inputs is not None else (lambda x: x)  # drawn: in [0, 1)
    out, c = np.zeros(5), 0.0
    for kb in range(ctx.a.shape[1]):
        a = operand(ctx, 0, (i, kb), values=a_blocks and a_blocks[kb])
        b = operand(ctx, 1, (kb, j), values=b_blocks and b_blocks[kb])
        c = c + a @ b
        out[2] += float(to_host(magnitudes(a).sum(axis=0) @ magnitudes(b).sum(axis=1)))
        out[3:] += [float(to_host(xp.dot(x.ravel(), x.ravel()))) for x in (a, b)]
    out[:2] = float(to_host(xp.dot(c.ravel(), c.ravel()))), float(to_host(c.sum()))
    return out
