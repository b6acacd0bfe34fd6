"""The fast depth's recomputation for matmul-pipeline's check: A (B R) with A and B streamed.

The same quantities as :func:`pipelines.matmul.check.recompute` (``A (B R)``, ``|A| (|B| |R|)``,
the blocks' sums of squares, the sampled cells as dot products), computed on the workers without
ever holding a whole operand block on the host: on CPU workers each block of A and B is drawn
again (or read) a slab of rows at a time into one reused buffer, and each slab is reduced while
it is in cache; on GPU workers (CuPy) each block is drawn on the device and reduced there, and
only the small products travel to the host.

Drawing a block in slabs gives the block's own values: NumPy's generator fills a block row-major
from one stream, and consecutive draws continue that stream, so ``rng.random(out=slab)`` for the
slabs in order yields the rows of ``rng.random(block_shape)`` (a test holds it to that). On the
device whole blocks are drawn, as the run draws them.
"""

from __future__ import annotations

import importlib

import dask
import numpy as np

from daskgpu.toolkit.numeric import generator, starts
from pipelines.matmul import shared

# Elements of a slab of rows drawn or read at a time on a CPU worker: 2 MiB of float64.
SLAB_ELEMENTS = 2**18
# Elements of a block's piece of rows, a task each (CPU workers): both workers draw one block.
PIECE_ELEMENTS = 2**23


def _host(value) -> np.ndarray:
    """A device array (CuPy's ``.get()``) or a NumPy one, as a NumPy array."""
    return value.get() if hasattr(value, "get") else np.asarray(value)


class _Absolute:
    """``|rows|`` into one reused buffer: no fresh pages per slab.

    Dask's workers hand freed memory back to the system at once (``MALLOC_TRIM_THRESHOLD_``),
    so a temporary of a slab's size would cost its page faults on every slab.
    """

    def __init__(self, xp):
        self.xp, self.buffer = xp, None

    def __call__(self, rows):
        if self.buffer is None or self.buffer.shape[0] < rows.shape[0]:
            self.buffer = self.xp.empty_like(rows)
        return self.xp.abs(rows, out=self.buffer[:rows.shape[0]])


def _stored(source):
    if source.kind == "zarr":
        import zarr

        return zarr.open_array(source.path, mode="r")
    return np.load(source.path, mmap_mode="r")


def _drawn_from(ctx: dict, which: int, number: int, first: int, width: int):
    """NumPy's generator of block ``number`` of an operand, advanced to the block's row ``first``.

    ``default_rng`` is PCG64; a float64 is one 64-bit draw and a float32 half of one (the low
    half first), so the block's row ``first`` begins ``first * width`` values into its stream.
    """
    bits = np.random.PCG64(np.random.SeedSequence(ctx["seeds"][which], spawn_key=(number,)))
    offset = first * width
    pairs = np.dtype(ctx["dtype"]) == np.float32
    bits.advance(offset // 2 if pairs else offset)
    rng = np.random.Generator(bits)
    if pairs and offset % 2:
        rng.random(1, dtype=np.float32)  # the high half of the draw the row begins in
    return rng


def row_slabs(ctx: dict, which: int, location: tuple[int, int], piece: tuple[int, int]):
    """Yield ``(first_row, rows)`` of rows ``piece`` of block ``location`` of A (0) or B (1).

    Rows are float64, numbered within the block; the seeded scheme of
    :func:`pipelines.matmul.check.block_of`: drawn from ``SeedSequence(operand_seed,
    spawn_key=(block_number,))``, blocks numbered row-major, or read from the input. With NumPy,
    slabs of rows into one reused buffer (use each slab before asking for the next); with
    another library (CuPy), the piece (a whole block: :func:`pieces`) at once on the device.
    """
    chunks = ctx["a_chunks"] if which == 0 else ctx["b_chunks"]
    width = chunks[1][location[1]]
    low, high = piece
    step = max(1, SLAB_ELEMENTS // max(width, 1))
    if ctx["sources"] is not None:
        r0, c0 = (int(starts(chunks[axis])[location[axis]]) for axis in (0, 1))
        block = np.asarray(_stored(ctx["sources"][which])[r0 + low:r0 + high, c0:c0 + width],
                           dtype=np.float64)
        if ctx["library"] != "numpy":
            yield low, importlib.import_module(ctx["library"]).asarray(block)
            return
        for first in range(0, high - low, step):
            yield low + first, block[first:first + step]
        return
    number = location[0] * len(chunks[1]) + location[1]
    if ctx["library"] != "numpy":
        sequence = np.random.SeedSequence(ctx["seeds"][which], spawn_key=(number,))
        rng = generator(ctx["library"], sequence)
        yield 0, rng.random((high, width), dtype=ctx["dtype"]).astype(np.float64)
        return
    rng = _drawn_from(ctx, which, number, low, width)
    drawn = np.empty((min(step, high - low), width), dtype=ctx["dtype"])
    wide = drawn if drawn.dtype == np.float64 else np.empty(drawn.shape)
    for first in range(low, high, step):
        rows = min(step, high - first)
        rng.random(out=drawn[:rows], dtype=ctx["dtype"])
        if wide is not drawn:
            np.copyto(wide[:rows], drawn[:rows])
        yield first, wide[:rows]


def pieces(ctx: dict, height: int, width: int) -> list[tuple[int, int]]:
    """Row ranges of a block, a task each: about ``PIECE_ELEMENTS`` each with NumPy.

    Drawn blocks are cut only where NumPy's generator can start mid-block; a device draws a
    block whole.
    """
    if ctx["library"] != "numpy" and ctx["sources"] is None:
        return [(0, height)]
    count = max(1, min(height, -(-height * width // PIECE_ELEMENTS)))
    bounds = [height * p // count for p in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def b_products(ctx: dict, kb: int, j: int, piece: tuple[int, int]) -> dict:
    """Rows ``piece`` of B_lj R_j and |B_lj| |R_j|, their squares, their sampled columns."""
    xp = importlib.import_module(ctx["library"])
    width = ctx["b_chunks"][1][j]
    c0 = int(starts(ctx["b_chunks"][1])[j])
    r = shared.vectors(ctx["shape"][2], ctx["check_seed"])[c0:c0 + width]
    r_dev, r_abs = xp.asarray(r), xp.asarray(np.abs(r))
    _, cols = shared.sampled_cells(ctx["shape"][0], ctx["shape"][2], ctx["check_seed"])
    held = np.flatnonzero((cols >= c0) & (cols < c0 + width))
    picked_at = xp.asarray(cols[held] - c0)
    height = piece[1] - piece[0]
    out = {"y": np.empty((height, r.shape[1])), "yabs": np.empty((height, r.shape[1])),
           "squares": 0.0, "columns": np.zeros((height, len(cols)))}
    absolute = _Absolute(xp)
    for first, rows in row_slabs(ctx, 1, (kb, j), piece):
        at = slice(first - piece[0], first - piece[0] + rows.shape[0])
        out["y"][at], out["yabs"][at], squares = _slab_products(rows, r_dev, r_abs, absolute, xp)
        out["squares"] += squares
        if held.size:
            out["columns"][at, held] = _host(rows[:, picked_at])
    return out


def _slab_products(rows, vectors, magnitudes, absolute, xp) -> tuple:
    """``rows @ vectors``, ``|rows| @ magnitudes`` and the rows' sum of squares, on the host."""
    flat = rows.ravel()
    return (_host(rows @ vectors), _host(absolute(rows) @ magnitudes),
            float(_host(xp.dot(flat, flat))))


def _joined(parts: list[dict]) -> dict:
    """One block's product from its pieces: rows stacked, squares added."""
    return {"y": np.concatenate([p["y"] for p in parts]),
            "yabs": np.concatenate([p["yabs"] for p in parts]),
            "columns": np.concatenate([p["columns"] for p in parts]),
            "squares": sum(p["squares"] for p in parts)}


def a_products(ctx: dict, i: int, kb: int, piece: tuple[int, int], from_b: list) -> dict:
    """Rows ``piece`` of A_il times every B_lj R_j (and in absolute values), squares, cells.

    ``from_b``: for every column block j, the pieces of :func:`b_products` of block (l, j).
    """
    xp = importlib.import_module(ctx["library"])
    joined = [_joined(parts) for parts in from_b]
    y = np.concatenate([part["y"] for part in joined], axis=1)  # (bk, gj * vectors)
    y_dev = xp.asarray(y)
    yabs_dev = xp.asarray(np.concatenate([part["yabs"] for part in joined], axis=1))
    columns = sum(part["columns"] for part in joined)  # (bk, cells): each from one block
    rows_of_cells, _ = shared.sampled_cells(ctx["shape"][0], ctx["shape"][2],
                                            ctx["check_seed"])
    r0 = int(starts(ctx["a_chunks"][0])[i])
    height = piece[1] - piece[0]
    out = {"q": np.empty((height, y.shape[1])), "qabs": np.empty((height, y.shape[1])),
           "a_squares": 0.0, "samples": np.zeros(len(rows_of_cells)),
           "samples_abs": np.zeros(len(rows_of_cells))}
    absolute = _Absolute(xp)
    for first, rows in row_slabs(ctx, 0, (i, kb), piece):
        at = slice(first - piece[0], first - piece[0] + rows.shape[0])
        out["q"][at], out["qabs"][at], squares = _slab_products(rows, y_dev, yabs_dev, absolute,
                                                                xp)
        out["a_squares"] += squares
        local = rows_of_cells - r0 - first
        for s in np.flatnonzero((local >= 0) & (local < rows.shape[0])):
            row, column = _host(rows[int(local[s])]), columns[:, s]
            out["samples"][s] = float(row @ column)
            out["samples_abs"][s] = float(np.abs(row) @ np.abs(column))
    return out


def recompute(ctx: dict) -> dict:
    """``A (B R)``, ``|A| (|B| |R|)``, the blocks' squares and the sampled cells, streamed.

    The same dictionary as :func:`pipelines.matmul.check.recompute`, from one graph: a task per
    piece of every block of B, then one per piece of every block of A; the parts are put
    together here.
    """
    (a_rows, a_cols), (_, b_cols) = ctx["a_chunks"], ctx["b_chunks"]
    from_b = [[[dask.delayed(b_products, pure=True)(ctx, kb, j, piece)
                for piece in pieces(ctx, height, width)]
               for j, width in enumerate(b_cols)]
              for kb, height in enumerate(a_cols)]
    from_a = [[[dask.delayed(a_products, pure=True)(ctx, i, kb, piece, from_b[kb])
                for piece in pieces(ctx, height, width)]
               for kb, width in enumerate(a_cols)]
              for i, height in enumerate(a_rows)]
    from_a, from_b = dask.compute(from_a, from_b)
    nv = 1 + shared.NORMAL_VECTORS
    rows = []
    for by_kb in from_a:  # a block row of A: pieces stacked, the kb products added
        stacked = [{key: (np.concatenate([p[key] for p in parts]) if key in ("q", "qabs")
                          else sum(p[key] for p in parts)) for key in parts[0]}
                   for parts in by_kb]
        rows.append({key: sum(part[key] for part in stacked) for key in stacked[0]})
    return {"q": np.concatenate([r["q"] for r in rows]).reshape(-1, len(b_cols), nv),
            "qabs": np.concatenate([r["qabs"] for r in rows]).reshape(-1, len(b_cols), nv),
            "a_squares": np.array([r["a_squares"] for r in rows]),
            "b_squares": np.array([sum(_joined(by_j[j])["squares"] for by_j in from_b)
                                   for j in range(len(b_cols))]),
            "samples": sum(r["samples"] for r in rows),
            "samples_abs": sum(r["samples_abs"] for r in rows)}
