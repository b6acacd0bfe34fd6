"""mean-pipeline's work on the cluster: one float64 sum a block and its cells', then the mean.

Every block is reduced where it lives to its float64 sum and the sums of its cells (the
certificate the fast check spot-checks; geometry in :mod:`pipelines.mean.shared`):

- random data on NumPy workers: the block is drawn from its own seed in pieces of the
  backend's ``stream-elements`` and summed as drawn, never held whole; each piece is summed
  cell by cell and its sum taken from its cells' sums in the order NumPy's own ``sum`` adds
  them, so the block's sum is, bit for bit, what summing the pieces gives, without a second
  pass over them (:func:`piece_sums`);
- random data on GPU workers: :func:`daskgpu.data.synthetic.uniform_block_sums`, in pieces
  (the run reports no cells there, and the check redraws whole blocks);
- an input: the block's sum, and its slabs' sums from its rows' sums.

The small host sums come together in one task, :func:`cell_mean`, which divides their total by
the element count. :mod:`pipelines.mean.pipeline` resolves the blocks and assembles the
:class:`~daskgpu.toolkit.registry.Workload` around what is built here.
"""

from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np

from daskgpu import config as daskgpu_config
from daskgpu.data import array_input, synthetic
from daskgpu.toolkit.backends import to_host
from daskgpu.verification import Grid
from pipelines.mean.shared import CELL, CellMean, slab_rows


def piece_sums(part: np.ndarray, offset: int, cells: np.ndarray) -> float:
    """Add ``part``'s values to ``cells`` (cell ``i`` holds values ``i*CELL ..``); its sum.

    ``part`` holds the block's values from flat index ``offset`` on. The returned sum equals
    ``float(part.sum(dtype=numpy.float64))`` bit for bit. Where the piece is whole cells
    aligned on a cell, it is taken from the cells' sums as NumPy adds: float64 values
    pairwise, halving a run whose length is a power of two times ``CELL`` (so each cell is one
    of its halves' halves); float32 values in float64 buffer by buffer (``numpy.getbufsize``
    values each, added in order). Elsewhere (the end of a block, other piece sizes) the cells
    and the piece are summed apart.

    Parameters
    ----------
    part : numpy.ndarray
        A piece of a block's values (1-D, float32 or float64).
    offset : int
        The flat index of the piece's first value in its block.
    cells : numpy.ndarray
        The block's cells' float64 sums, added to in place.

    Returns
    -------
    float
        The piece's float64 sum.
    """
    first, whole = divmod(offset, CELL)
    n = part.size
    if whole == 0 and n % CELL == 0:
        count = n // CELL
        if part.dtype == np.float64 and count & (count - 1) == 0:
            sums = part.reshape(count, CELL).sum(axis=1)
            cells[first:first + count] += sums
            while sums.size > 1:
                sums = sums[0::2] + sums[1::2]
            return float(sums[0])
        buffer = np.getbufsize()
        if part.dtype == np.float32 and CELL % buffer == 0:
            runs = part.reshape(-1, buffer).sum(axis=1, dtype=np.float64)
            cells[first:first + count] += runs.reshape(count, -1).sum(axis=1)
            return float(np.add.accumulate(runs)[-1])
    bounds = np.arange(-offset % CELL, n, CELL)
    starts = bounds if bounds.size and bounds[0] == 0 else np.concatenate([[0], bounds])
    np.add.at(cells, (offset + starts) // CELL,
              np.add.reduceat(part, starts, dtype=np.float64))
    return float(part.sum(dtype=np.float64))


def block_generator(seed: int, number: int) -> np.random.Generator:
    """The generator of random block ``number``, as :mod:`daskgpu.data.synthetic` seeds it.

    NumPy's ``default_rng`` of ``SeedSequence(seed, spawn_key=(number,))``.
    """
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(number,)))


def draw_and_sum(seed: int, number: int, count: int, dtype: str,
                 stream: int) -> tuple[float, np.ndarray]:
    """The float64 sum of random block ``number`` (``count`` values), and its cells' sums.

    Drawn from its :func:`block_generator` in pieces of ``stream`` values refilling one
    buffer, and summed as :func:`daskgpu.data.synthetic.uniform_block_sums` sums them.

    Returns
    -------
    tuple of (float, numpy.ndarray)
        The block's sum, and its ``ceil(count / CELL)`` cells' sums.
    """
    rng = block_generator(seed, number)
    buffer = np.empty(min(count, stream), dtype=dtype)
    cells = np.zeros(-(-count // CELL))
    total, done = 0.0, 0
    while done < count:
        part = buffer[: min(count - done, stream)]
        rng.random(out=part, dtype=dtype)
        total += piece_sums(part, done, cells)
        done += part.size
    return total, cells


def block_and_slab_sums(block) -> tuple[float, np.ndarray]:
    """The float64 sum of an input's block, and its slabs' sums.

    Parameters
    ----------
    block : numpy.ndarray or cupy.ndarray
        The block, where the run read it.

    Returns
    -------
    tuple of (float, numpy.ndarray)
        Its sum (as :func:`daskgpu.toolkit.reductions.block_sums` takes it) and its slabs'
        sums on the host, from its rows' sums (slabs: :func:`pipelines.mean.shared.slab_rows`).
    """
    total = float(block.sum(dtype=np.float64))  # float() of a CuPy 0-d array: 8 bytes moved
    if block.ndim == 0:
        return total, np.array([total])
    rows, step = block.shape[0], slab_rows(block.shape)
    if block.ndim == 1:
        whole = rows - rows % step
        head = to_host(block[:whole].reshape(-1, step).sum(axis=1, dtype=np.float64))
        tail = [float(block[whole:].sum(dtype=np.float64))] if whole < rows else []
        return total, np.concatenate([np.asarray(head, dtype=np.float64), tail])
    per_row = to_host(block.sum(axis=tuple(range(1, block.ndim)), dtype=np.float64))
    return total, np.add.reduceat(np.asarray(per_row), np.arange(0, rows, step))


def cell_mean(parts, grid: tuple[int, ...], elements: int) -> CellMean:
    """The mean of the blocks' ``(sum, cell sums)`` ``parts`` (row-major block order).

    The sums, shaped as the block grid, are added as
    :func:`daskgpu.toolkit.reductions.block_mean` adds them.
    """
    sums = np.array([float(total) for total, _ in parts], dtype=np.float64).reshape(grid)
    cells = np.concatenate([np.asarray(c, dtype=np.float64) for _, c in parts])
    return CellMean(float(sums.sum()) / elements, sums, cells)


def mean_of_sums(sums, elements: int) -> CellMean:
    """The mean of per-block ``sums`` (the block grid) without cells."""
    sums = np.asarray(sums, dtype=np.float64)
    return CellMean(float(sums.sum()) / elements, sums)


def random_mean(shape: tuple[int, ...], block: tuple[int, ...], dtype, seed: int, backend):
    """The lazy mean (a :class:`CellMean`) of the random uniform [0, 1) array of ``seed``."""
    stream = int(daskgpu_config.get(f"{backend.name}.stream-elements"))
    if backend.array_library != "numpy":
        sums = synthetic.uniform_block_sums(shape, block, dtype, seed, backend, stream)
        # One collection, so the blocks are drawn once: a Delayed of several collections
        # would optimise (and compute) each of them apart.
        return dask.delayed(mean_of_sums, pure=True)(sums, math.prod(shape))
    grid = Grid(da.core.normalize_chunks(block, shape))
    parts = [dask.delayed(draw_and_sum, pure=True)(
        seed, number, grid.block_size(number), np.dtype(dtype).name, stream)
        for number in range(grid.blocks)]
    return dask.delayed(cell_mean, pure=True)(parts, grid.shape, math.prod(shape))


def input_mean(source, block: tuple[int, ...], backend):
    """The lazy mean (a :class:`CellMean`) of an opened ``.npy``/Zarr input, read in ``block``s."""
    data = array_input.to_dask(source, block, backend)
    parts = [dask.delayed(block_and_slab_sums, pure=True)(piece)
             for piece in data.to_delayed().ravel()]
    return dask.delayed(cell_mean, pure=True)(parts, data.numblocks, math.prod(source.shape))
