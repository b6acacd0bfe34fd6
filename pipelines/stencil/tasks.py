"""The halo exchange of stencil-pipeline: one task per block per exchange, two buffers each.

Each exchange of depth k is one task per block. It allocates the block's buffer with room for
its halo, ``(h + 2k, w + 2k)``, copies its own cells and the k-wide strips of its eight
neighbours in (each strip a slice of the neighbour's last result: a view on the same worker,
only the strip's bytes across workers), zeros the sides on the grid's fixed boundary, and runs
its k steps ping-ponging between that buffer and one scratch buffer of the same shape
(:func:`daskgpu.kernels.stencil.heat_steps_in_place`; on the host the scratch is a buffer an
earlier task of the process gave back, where there is one: see ``_spare``). Its result is a
view of the block's cells in whichever buffer holds them: nothing is padded, concatenated or
trimmed by copying, and no step allocates (Dask's ``map_overlap`` concatenates each block with
its neighbours' slices; the pipeline's earlier code also padded every block and the kernel
allocated two buffers more).

The first exchange of the pipeline's sine mode has no input: its tasks write u0 straight into
their buffers, halo included, from the closed form (the generation is part of that pass, not a
pass of its own); an exchange of a given array (a test's, the check's random grid) reads its
blocks and their neighbours' strips instead.

Here too are the other functions of the run's graph, one pass a block: the result's sum of
squares and probe values, with the certificates the fast check reads (every block's weighted
row and column sums, and the seeded rows and columns of the grid, whole: see
:func:`result_parts`), u0 at the probe cells (:func:`initial_probes_array`), and the largest
deviation from the closed form that ``verify`` computes after the timed compute at depth full
(:func:`max_error`).
"""

from __future__ import annotations

import importlib
import math

import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from daskgpu.errors import ParameterError
from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.numeric import starts
from daskgpu.toolkit.registry import worker_function
from pipelines.stencil.shared import line_weights, probe_cells, sampled_lines

# The kernel, imported by the workers only (the pipeline's worker_modules)
heat_steps_in_place = worker_function("daskgpu.kernels.stencil", "heat_steps_in_place")


# Neighbours as (row offset, column offset): the sides, then the corners.
SIDES = ((-1, 0), (1, 0), (0, -1), (0, 1))
CORNERS = ((-1, -1), (-1, 1), (1, -1), (1, 1))
NEIGHBOURS = SIDES + CORNERS
# Host buffers finished tasks gave back, for the next task's scratch (see _spare).
_SPARE: list[np.ndarray] = []
# Cells of float64 temporaries at once in the comparison with the closed form (32 MiB each).
SLAB_CELLS = 2**22


def _strip(block, di: int, dj: int, k: int):
    """The k-wide edge of ``block`` that faces its neighbour at offset ``(di, dj)``, a view.

    The neighbour below (``di = 1``) takes this block's last k rows, the one above its first k;
    likewise for columns, and both at once for a corner.
    """
    rows = slice(None) if di == 0 else (slice(-k, None) if di > 0 else slice(0, k))
    cols = slice(None) if dj == 0 else (slice(-k, None) if dj > 0 else slice(0, k))
    return block[rows, cols]


def _sine_axis(xp, start: int, stop: int, n: int):
    """sin(pi (i + 1) / (n + 1)) for global indices start..stop-1, 0 outside 0..n-1."""
    index = xp.arange(start, stop, dtype=np.float64)
    values = xp.sin(math.pi * (index + 1) / (n + 1))
    return xp.where((index >= 0) & (index < n), values, 0.0)


def sine_into(buffer, r0: int, c0: int, n: int) -> None:
    """Fill ``buffer`` with u0 = sin(pi i/(n+1)) sin(pi j/(n+1)) from global cell (r0, c0).

    Rows and columns outside the n x n grid (a halo past the boundary) are 0. The product is
    taken in float64 and rounded once to the buffer's dtype.
    """
    xp = importlib.import_module(type(buffer).__module__.split(".")[0])
    height, width = buffer.shape
    rows = _sine_axis(xp, r0, r0 + height, n)
    cols = _sine_axis(xp, c0, c0 + width, n)
    xp.multiply(rows[:, None], cols[None, :], out=buffer, casting="same_kind")


def _window(height: int, width: int, k: int, edges: tuple[bool, bool, bool, bool]):
    """The cells the steps update: all but a k-wide boundary side and the stale outer ring."""
    top, bottom, left, right = edges
    return (k if top else 1, height - (k if bottom else 1),
            k if left else 1, width - (k if right else 1))


def _advance(center, neighbours, *, k, steps, alpha, edges, origin, n, shape, dtype,
             library):
    """One block's exchange: its buffer filled, ``steps`` steps, a view of its cells back.

    ``center`` is the block's last result (None: generate u0 at ``origin``, halo included);
    ``neighbours`` the strips in :data:`NEIGHBOURS` order (None past the grid's boundary).
    """
    height, width = shape
    if center is None:
        xp = importlib.import_module(library)
        buffer = xp.empty((height + 2 * k, width + 2 * k), dtype=dtype)
        sine_into(buffer, origin[0] - k, origin[1] - k, n)
    else:
        xp = importlib.import_module(type(center).__module__.split(".")[0])
        buffer = xp.empty((height + 2 * k, width + 2 * k), dtype=center.dtype)
        buffer[k : k + height, k : k + width] = center
        top, bottom, left, right = edges
        if top:
            buffer[:k] = 0
        if bottom:
            buffer[k + height :] = 0
        if left:
            buffer[:, :k] = 0
        if right:
            buffer[:, k + width :] = 0
        for (di, dj), strip in zip(NEIGHBOURS, neighbours, strict=True):
            if strip is None:
                continue
            rows = slice(k, k + height) if di == 0 else (slice(0, k) if di < 0
                                                        else slice(k + height, None))
            cols = slice(k, k + width) if dj == 0 else (slice(0, k) if dj < 0
                                                       else slice(k + width, None))
            buffer[rows, cols] = strip
    window = _window(height + 2 * k, width + 2 * k, k, edges)
    scratch = _spare(buffer) if xp is np else xp.empty_like(buffer)
    result = heat_steps_in_place(buffer, scratch, alpha, steps, window)
    if xp is np:
        _SPARE.append(scratch if result is buffer else buffer)
    return result[k : k + height, k : k + width]


def _spare(like: np.ndarray) -> np.ndarray:
    """A host buffer shaped like ``like``: one a task of this process gave back, or a new one.

    A new buffer of a block's size costs a page fault a page on its first write (a tenth of a
    second for a 4096 x 4096 float64 block), as much as a step; a CuPy pool already keeps
    device memory. The buffer a task gives back is the one its result is not in, which nothing
    else refers to; the spares of other shapes are dropped.
    """
    while _SPARE:
        try:
            spare = _SPARE.pop()
        except IndexError:  # another thread took the last one
            break
        if spare.shape == like.shape and spare.dtype == like.dtype:
            return spare
    return np.empty_like(like)


def _generate(*, shape, origin, n, dtype, library):
    """u0 on one block, for a run of no steps."""
    buffer = importlib.import_module(library).empty(shape, dtype=dtype)
    sine_into(buffer, origin[0], origin[1], n)
    return buffer


def _origins(chunks) -> tuple[list[int], list[int]]:
    return [starts(c).tolist() for c in chunks]


def _layer(previous: str | None, chunks, k: int, steps: int, alpha: float, n: int, dtype,
           library: str, token: str) -> tuple[str, dict]:
    """The tasks of one exchange: strips of ``previous``'s blocks, then one task per block."""
    name = f"stencil-exchange-{token}"
    strips = f"stencil-strip-{token}"
    rows, cols = (len(c) for c in chunks)
    row_origins, col_origins = _origins(chunks)
    dsk = {}
    for i in range(rows):
        for j in range(cols):
            edges = (i == 0, i == rows - 1, j == 0, j == cols - 1)
            neighbours = []
            for di, dj in NEIGHBOURS:
                ni, nj = i + di, j + dj
                if previous is None or not (0 <= ni < rows and 0 <= nj < cols):
                    neighbours.append(None)
                    continue
                key = (strips, ni, nj, -di, -dj)
                dsk[key] = (_strip, (previous, ni, nj), -di, -dj, k)
                neighbours.append(key)
            kwargs = {"k": k, "steps": steps, "alpha": alpha, "edges": edges,
                      "origin": (row_origins[i], col_origins[j]), "n": n,
                      "shape": (chunks[0][i], chunks[1][j]), "dtype": dtype,
                      "library": library}
            center = None if previous is None else (previous, i, j)
            dsk[(name, i, j)] = (_apply_kwargs, _advance, [center, neighbours], kwargs)
    return name, dsk


def _apply_kwargs(func, args, kwargs):
    return func(*args, **kwargs)


def _minimum_chunks(chunks, k: int):
    """Blocks at least k wide (a strip is one neighbour's): thin ones merged as Dask does."""
    return tuple(da.overlap.ensure_minimum_chunksize(k, c) if min(c) < k else c
                 for c in chunks)


def _exchanges(steps: int, k: int) -> list[int]:
    return [min(k, steps - done) for done in range(0, steps, k)]


def evolve(u: da.Array, steps: int, alpha: float, steps_per_exchange: int) -> da.Array:
    """The lazy grid ``u`` after ``steps`` updates with a fixed zero boundary.

    Halos are exchanged every ``steps_per_exchange`` steps (the depth of each halo); a halo
    deeper than the grid is refused (:class:`~daskgpu.errors.ParameterError`).
    """
    # Dask merges blocks thinner than the halo into their neighbours; only the grid bounds it.
    if steps and steps_per_exchange > min(u.shape):
        raise ParameterError(
            f"--steps-per-exchange {steps_per_exchange}: the halo would be deeper than the "
            f"grid ({min(u.shape)} cells); use at most {min(u.shape)}"
        )
    if not steps:
        return u
    k = min(steps_per_exchange, steps)
    chunks = _minimum_chunks(u.chunks, k)
    if chunks != u.chunks:
        u = u.rechunk(chunks)
    meta = np.empty((0, 0), dtype=u.dtype)
    for depth in _exchanges(steps, steps_per_exchange):
        token = tokenize(u.name, depth, alpha)
        name, dsk = _layer(u.name, chunks, depth, depth, alpha, 0, u.dtype, "", token)
        graph = HighLevelGraph.from_collections(name, dsk, dependencies=[u])
        u = da.Array(graph, name, chunks, meta=u._meta if u._meta is not None else meta)
    return u


def evolve_sine(n: int, block: tuple[int, int], dtype, library: str, steps: int, alpha: float,
                steps_per_exchange: int) -> da.Array:
    """The lazy sine mode u0 on an n x n grid after ``steps`` updates.

    u0 is generated inside the first exchange's tasks (or, with no steps, by one task a block).
    """
    dtype = np.dtype(dtype)
    chunks = da.core.normalize_chunks(block, (n, n))
    meta = np.empty((0, 0), dtype=dtype)
    if not steps:
        name = "stencil-u0-" + tokenize(n, chunks, dtype, library)
        row_origins, col_origins = _origins(chunks)
        dsk = {(name, i, j): (_apply_kwargs, _generate, [],
                              {"shape": (h, w), "origin": (row_origins[i], col_origins[j]),
                               "n": n, "dtype": dtype, "library": library})
               for i, h in enumerate(chunks[0]) for j, w in enumerate(chunks[1])}
        return da.Array(HighLevelGraph.from_collections(name, dsk), name, chunks, meta=meta)
    depths = _exchanges(steps, steps_per_exchange)
    chunks = _minimum_chunks(chunks, depths[0])
    token = tokenize(n, chunks, dtype, library, depths[0], alpha)
    name, dsk = _layer(None, chunks, depths[0], depths[0], alpha, n, dtype, library, token)
    u = da.Array(HighLevelGraph.from_collections(name, dsk), name, chunks, meta=meta)
    rest = steps - depths[0]
    return evolve(u, rest, alpha, steps_per_exchange) if rest else u


def initial_grid(n: int, block: tuple[int, int], dtype, backend) -> da.Array:
    """u0 = sin(pi i/(n+1)) sin(pi j/(n+1)), i, j = 1..n, generated on the workers."""
    return evolve_sine(n, block, dtype, backend.array_library, 0, 0.0, 1)


def _picks(block, block_info=None, rows=(), cols=()):
    """The block's values at the probe cells it holds, 0 at the others (a host vector)."""
    (r0, r1), (c0, c1) = block_info[0]["array-location"]
    picked = np.zeros(len(rows))
    for k, (i, j) in enumerate(zip(rows, cols, strict=True)):
        if r0 <= i < r1 and c0 <= j < c1:
            picked[k] = float(block[i - r0, j - c0])  # one element, to the host
    return picked


def _line_sums(block, r0: int, c0: int, weights, library: str = "numpy") -> np.ndarray:
    """The block's weighted row sums and column sums, in float64, as one host vector.

    ``u_block @ col_weights`` (one a row) and ``row_weights @ u_block`` (one a column), where
    the block lives (``library``: NumPy, or CuPy on a GPU worker); float32 rows are widened a
    slab of rows at a time. Only the sums go to the host.
    """
    xp = importlib.import_module(library)
    height, width = block.shape
    down = xp.asarray(weights[0][r0:r0 + height])
    across = xp.asarray(weights[1][c0:c0 + width])
    rows = xp.empty(height, dtype=np.float64)
    cols = xp.zeros(width, dtype=np.float64)
    slab = max(1, SLAB_CELLS // max(1, width))
    for top in range(0, height, slab):
        part = block[top:top + slab].astype(np.float64, copy=False)
        rows[top:top + slab] = part @ across
        cols += down[top:top + slab] @ part
    return np.concatenate([to_host(rows), to_host(cols)])


def _block_summary(block, block_info=None, rows=(), cols=(), weights=None, sizes=(0, 0),
                   library="numpy"):
    """[sum of squares, probe values, row sums, column sums] as a host vector (1, 1, width).

    ``einsum`` reads the (strided) block once without a temporary (float32 is accumulated in
    float64 through its buffered cast); the probes are a few single cells. The weighted row
    and column sums (:func:`pipelines.stencil.shared.line_weights`) are zero-padded to the
    largest block's ``sizes`` (rows, columns), so that every block's vector is as wide.
    """
    (r0, _r1), (c0, _c1) = block_info[0]["array-location"]
    squares = float(np.einsum("ij,ij->", block, block, dtype=np.float64))
    height, width = block.shape
    sums = _line_sums(block, r0, c0, weights, library)
    lines = np.zeros(sizes[0] + sizes[1])
    lines[:height] = sums[:height]
    lines[sizes[0]:sizes[0] + width] = sums[height:]
    values = np.concatenate([[squares], _picks(block, block_info, rows, cols), lines])
    return values.reshape(1, 1, -1)


def _deviation(block, r0, c0, n, factor, xp) -> float:
    """The largest |block - factor u0| in float64, u0 from its formula, a slab at a time."""
    step = math.pi / (n + 1)
    height, width = block.shape
    along_cols = xp.sin(step * xp.arange(c0 + 1, c0 + width + 1, dtype=np.float64))
    slab = max(1, SLAB_CELLS // max(1, width))
    worst = 0.0
    for top in range(0, height, slab):
        bottom = min(height, top + slab)
        along_rows = xp.sin(step * xp.arange(r0 + top + 1, r0 + bottom + 1, dtype=np.float64))
        expected = factor * along_rows[:, None] * along_cols[None, :]
        difference = block[top:bottom].astype(np.float64) - expected
        worst = max(worst, float(xp.abs(difference).max()))
    return worst


def _block_deviation(block, block_info=None, n=1, factor=1.0, library="numpy"):
    (r0, _r1), (c0, _c1) = block_info[0]["array-location"]
    deviation = _deviation(block, r0, c0, n, factor, importlib.import_module(library))
    return np.full((1, 1, 1), deviation)


def _per_block_vector(u: da.Array, func, width: int, **kwargs) -> da.Array:
    return u.map_blocks(
        func, chunks=((1,) * u.numblocks[0], (1,) * u.numblocks[1], (width,)),
        new_axis=[2], dtype=np.float64, meta=np.empty((0, 0, 0)), **kwargs,
    )


def result_parts(u: da.Array, n: int, sample_seed: int, library: str = "numpy") -> dict:
    """The timed result, the l2 norm of u, and what the fast check reads, in one pass a block.

    ``probes``: u at the probe cells, summed over the blocks (each is held by one block, zero
    elsewhere). ``line_sums``: every block's weighted row and column sums, shaped
    (row blocks, column blocks, largest height + largest width). ``rows`` and ``cols``: the
    seeded rows and columns of u (:func:`pipelines.stencil.shared.sampled_lines`), whole.
    """
    rows, cols = probe_cells(n)
    sizes = (max(u.chunks[0]), max(u.chunks[1]))
    per_block = _per_block_vector(u, _block_summary, 1 + len(rows) + sum(sizes), rows=rows,
                                  cols=cols, weights=line_weights(n), sizes=sizes,
                                  library=library)
    sample_rows, sample_cols = sampled_lines(n, sample_seed)
    return {"l2_norm": da.sqrt(per_block[:, :, 0].sum()),
            "probes": per_block[:, :, 1:1 + len(rows)].sum(axis=(0, 1)),
            "line_sums": per_block[:, :, 1 + len(rows):],
            "rows": u[sample_rows, :], "cols": u[:, sample_cols]}


def max_error(u: da.Array, n: int, factor: float, library: str) -> da.Array:
    """The lazy largest |u - factor u0| over every cell, block by block where each lives.

    A check, not the result: ``verify`` computes it, after the timed compute (it evolves u
    again, so the timed graph holds nothing of it).
    """
    per_block = _per_block_vector(u, _block_deviation, 1, n=n, factor=factor, library=library)
    return per_block.max()


def initial_probes(n: int, dtype) -> np.ndarray:
    """u0 at the probe cells, each generated as the first exchange generates its block."""
    rows, cols = probe_cells(n)
    values = []
    for i, j in zip(rows, cols, strict=True):
        cell = np.empty((1, 1), dtype=dtype)
        sine_into(cell, int(i), int(j), n)
        values.append(float(cell[0, 0]))
    return np.array(values)


def initial_probes_array(n: int, dtype: str) -> da.Array:
    """:func:`initial_probes` as a one-task Dask array, computed with the run's result."""
    name = "stencil-u0-probes-" + tokenize(n, dtype)
    graph = HighLevelGraph.from_collections(name, {(name, 0): (initial_probes, n, dtype)})
    return da.Array(graph, name, ((len(probe_cells(n)[0]),),), dtype=np.float64)


__all__ = ["evolve", "evolve_sine", "initial_grid", "initial_probes", "initial_probes_array",
           "max_error", "result_parts", "sine_into"]
