"""histogram-pipeline's work on the cluster: the data, the kernel on every block, the rows.

The values are drawn on the workers or read from a ``.npy``/Zarr input or an array in memory
(NumPy, CuPy, Dask: :func:`daskgpu.data.array_input.to_dask`). Every block is binned
where it lives by daskgpu's own kernel (:func:`daskgpu.kernels.histogram.histogram`: ``bins``
counts, then the NaN count), its checked cells each in a call of their own, the rest between
them in others (:func:`block_rows`); the blocks' counts are added by a tree of tasks
(:func:`added`), and the sampled blocks' own counts join the sum as the rows of the result
(:func:`result`). Beside them the run returns its certificates: each block's totals and
fingerprint, the checked cells' own counts and, for random data drawn here, the generator's
state at each checked cell (layout: :mod:`pipelines.histogram.shared`).

Random data on NumPy workers is drawn by :func:`draw_block`, as
:func:`daskgpu.data.synthetic.random_array` draws it (the same values), in runs that stop at the
checked cells to note the generator's state there; on GPU workers the blocks are
:func:`~daskgpu.data.synthetic.random_array`'s. Without a given range, a first pass finds the
data's finite min and max, and where each lies. :mod:`pipelines.histogram.pipeline` assembles
the :class:`~daskgpu.toolkit.registry.Workload` around what is built here.
"""

from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np

from daskgpu.data import array_input, synthetic
from daskgpu.errors import ParameterError
from daskgpu.toolkit import chunking, pcg64, reductions
from daskgpu.toolkit.backends import to_host
from daskgpu.toolkit.registry import Resolved, worker_function
from daskgpu.verification import Sampler, fingerprint
from pipelines.histogram import shared

# The kernel, imported by the workers only (the pipeline's worker_modules)
histogram = worker_function("daskgpu.kernels.histogram", "histogram")


def _block_histogram(block, lo, hi, bins):
    return histogram(block, lo, hi, bins)


def _block_finite_extent(block):
    """The block's finite min and max, and where they are (flat C-order indices)."""
    finite_at = np.isfinite(block)
    finite = block[finite_at]
    if finite.size == 0:
        return [np.inf, -np.inf, -1, -1]
    low, high = int(finite.argmin()), int(finite.argmax())
    extent = [float(finite[low]), float(finite[high])]
    if finite.size < block.size:  # positions among the finite values: back to the block's
        where = np.flatnonzero(finite_at)
        low, high = int(where[low]), int(where[high])
    return [*extent, low, high]


def make_data(resolved: Resolved) -> tuple[da.Array, dict]:
    """The lazy values of a run (the input read, or random data drawn), and what describes them."""
    backend, chunks = resolved.backend, resolved["chunks"]
    if resolved["input"] is not None:
        source = resolved.inputs["input"]
        block = chunking.resolve_chunks(chunks, source.shape, source.dtype.itemsize, backend)
        described = {"source": resolved["input"], "format": source.kind,
                     **array_input.rechunking(source, block)}
        return array_input.to_dask(source, block, backend), described
    dtype = np.dtype(resolved["dtype"])
    shape = (resolved["values"],)
    block = chunking.resolve_chunks(chunks, shape, dtype.itemsize, backend)
    seed, distribution = resolved["seed"], resolved["distribution"]
    data = synthetic.random_array(shape, block, dtype, seed, backend, distribution)
    return data, {"source": f"random {distribution}", "seed": seed}


def finite_range(data: da.Array) -> tuple[float, float, tuple]:
    """The default range: the data's finite min and max, found by a first pass over the blocks.

    Returns
    -------
    tuple
        ``lo``, ``hi`` (widened as ``numpy.histogram`` widens an empty range) and where the
        min and max are: ``((block, index), (block, index))``, the block's number in row-major
        order and the value's flat C-order index in its block.

    Raises
    ------
    ParameterError
        The data holds no finite value.
    """
    extent = reductions.per_block(data, _block_finite_extent, 4).compute()
    extent = extent.reshape(-1, 4)
    low, high = int(np.argmin(extent[:, 0])), int(np.argmax(extent[:, 1]))
    lo, hi = float(extent[low, 0]), float(extent[high, 1])
    if not math.isfinite(lo):
        raise ParameterError("the data holds no finite value to take a range from; give --range")
    where = ((low, int(extent[low, 2])), (high, int(extent[high, 3])))
    return (*widened(lo, hi), where)


def widened(lo: float, hi: float) -> tuple[float, float]:
    """The range the run bins with: ``numpy.histogram``'s rule for an empty one (lo == hi)."""
    return (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)  # numpy.histogram's rule


def sampled_blocks(blocks: int, seed: int) -> tuple[int, ...]:
    """The blocks whose own counts the run returns: ``SAMPLED_BLOCKS`` chosen with ``seed``."""
    return tuple(Sampler(seed, "sampled blocks").choose(blocks, shared.SAMPLED_BLOCKS).tolist())


def kernel_counts(values, lo, hi, bins) -> np.ndarray:
    """The kernel's counts of ``values`` (``bins``, then NaN), on the host."""
    return np.asarray(to_host(histogram(values, lo, hi, bins)), dtype=np.int64)


def block_rows(values, lo, hi, bins, cuts, weights) -> tuple:
    """A block's row (shaped ``(1, bins + 1)``), its line of ``"blocks"``, its cells' rows.

    ``cuts`` are the checked cells' ``(first, stop)`` rows (along the first axis), in order:
    each is binned by a call of the kernel of its own, the rows between them by others, and
    all of them add up to the block's row.

    Parameters
    ----------
    values : numpy.ndarray or cupy.ndarray
        The block.
    lo, hi, bins
        The binning, as :func:`daskgpu.kernels.histogram.histogram` takes it.
    cuts : list of (int, int)
        The checked cells' rows.
    weights : numpy.ndarray
        The fingerprint's weights (:func:`daskgpu.verification.fingerprint_weights`).

    Returns
    -------
    tuple of numpy.ndarray
        The row (counts, then NaN), its line (in the bins, NaN, fingerprint) and the checked
        cells' rows, on the host.
    """
    if values.ndim == 0:
        values = values.reshape(1)
    row = np.zeros(bins + 1, dtype=np.int64)
    cells, at = [], 0
    for first, stop in cuts:
        if first > at:
            row += kernel_counts(values[at:first], lo, hi, bins)
        cells.append(kernel_counts(values[first:stop], lo, hi, bins))
        row += cells[-1]
        at = stop
    if at < values.shape[0]:
        row += kernel_counts(values[at:], lo, hi, bins)
    line = np.array([row[:bins].sum(), row[bins], fingerprint(row, weights)],
                    dtype=np.int64)
    return row[None], line, np.array(cells, dtype=np.int64).reshape(len(cuts), bins + 1)


def draw_block(seed: int, number: int, count: int, dtype: str, distribution: str,
               firsts) -> tuple[np.ndarray, np.ndarray]:
    """Random block ``number`` and the generator's state at each of ``firsts`` (value indices).

    The values are :func:`daskgpu.data.synthetic.random_array`'s: NumPy's ``default_rng`` of
    ``SeedSequence(seed, spawn_key=(number,))``, drawn in runs into one array (the generator
    goes on where a run stopped, so the runs are the values of one draw).

    Returns
    -------
    tuple of numpy.ndarray
        The ``count`` values, and the generator's state as each of ``firsts`` was reached (six
        uint64 words a line, as :mod:`pipelines.histogram.shared` lays them out).
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(number,)))
    draw = rng.standard_normal if distribution == "normal" else rng.random
    values = np.empty(count, dtype=dtype)
    states = np.zeros((len(firsts), 6), dtype=np.uint64)
    at = 0
    for i, first in enumerate(firsts):
        if first > at:
            draw(out=values[at:first], dtype=dtype)
        states[i] = pcg64.state_words(rng.bit_generator.state)
        at = first
    if at < count:
        draw(out=values[at:], dtype=dtype)
    return values, states


def drawn_block_rows(seed, number, count, dtype, distribution, lo, hi, bins, cuts,
                     weights) -> tuple:
    """Random block ``number``, drawn here: its row, and its certificates with the states.

    The row as :func:`block_rows` gives it; the certificates: its line, its checked cells'
    rows and the generator's states at them.
    """
    values, states = draw_block(seed, number, count, dtype, distribution,
                                [first for first, _ in cuts])
    row, line, cells = block_rows(values, lo, hi, bins, cuts, weights)
    return row, (line, cells, states)


def given_block_rows(values, lo, hi, bins, cuts, weights) -> tuple:
    """A block of the data (read, or drawn on a GPU): its row, and its certificates."""
    row, line, cells = block_rows(values, lo, hi, bins, cuts, weights)
    return row, (line, cells, np.zeros((0, 6), np.uint64))


def added(parts, kept: dict[int, int]) -> tuple:
    """One step of the tree adding the blocks' rows.

    A part is a block's ``(row, certificate)`` or an earlier step's ``(row, rows, certificates)``.
    Returns the parts' rows added up, the rows of the blocks ``kept`` names (``{number: index
    of its part}``, blocks' parts only) with those the parts carried, and every certificate
    carried along in order.
    """
    total = np.zeros_like(parts[0][0][0])
    numbers = {index: number for number, index in kept.items()}
    rows, certificates = {}, []
    for index, part in enumerate(parts):
        total += part[0][0]
        if len(part) == 2:  # a block's
            certificates.append(part[1])
            if index in numbers:
                rows[numbers[index]] = part[0][0]
        else:
            rows.update(part[1])
            certificates.extend(part[2])
    return total[None], rows, certificates


def result(part, sampled: list[int]) -> dict:
    """The raw result from the tree's last step, laid out as :mod:`pipelines.histogram.shared`.

    ``sampled``: the numbers of the blocks whose own rows follow the summed counts.
    """
    total, rows, certificates = part
    lines, cells, states = zip(*certificates, strict=True)
    return {"histograms": np.stack(shared.rows(total[0], (rows[n] for n in sampled))),
            "blocks": np.stack(lines), "cells": np.concatenate(cells),
            "states": np.concatenate(states)}


# The tree adding the blocks' rows: at most this many bytes of rows in a step, at most
# MAX_FAN_IN parts (every level is a round trip between workers: keep it flat).
STEP_BYTES = 256 * 2**20
MAX_FAN_IN = 64


def histograms(data: da.Array, lo: float, hi: float, bins: int,
               sampled: tuple[int, ...], cuts: dict, weights: np.ndarray,
               drawn: dict | None = None):
    """The lazy raw result: the rows, the blocks' lines, the checked cells' rows and states.

    ``drawn`` (``seed``, ``dtype``, ``distribution``) makes each block draw its random values
    itself (:func:`drawn_block_rows`); without it, the blocks of ``data`` are binned. The
    blocks' rows are added by a tree of :func:`added` steps, which carry the sampled blocks'
    rows and every block's certificates along; :func:`result` lays them out.
    """
    grid = data.numblocks
    blocks = data.to_delayed().ravel() if drawn is None else None
    parts = []
    for number, location in enumerate(np.ndindex(*grid)):
        block_cuts = cuts.get(number, [])
        if drawn is not None:
            count = math.prod(c[i] for c, i in zip(data.chunks, location, strict=True))
            parts.append(dask.delayed(drawn_block_rows, pure=True)(
                drawn["seed"], number, count, drawn["dtype"], drawn["distribution"], lo, hi,
                bins, block_cuts, weights))
        else:
            parts.append(dask.delayed(given_block_rows, pure=True)(
                blocks[number], lo, hi, bins, block_cuts, weights))
    flat = list(sampled)
    fan_in = max(2, min(MAX_FAN_IN, STEP_BYTES // (8 * (bins + 1))))
    first = True
    while first or len(parts) > 1:
        steps = []
        for start in range(0, len(parts), fan_in):
            group = parts[start:start + fan_in]
            kept = ({n: n - start for n in flat if start <= n < start + len(group)} if first
                    else {})
            steps.append(dask.delayed(added, pure=True)(group, kept))
        parts, first = steps, False
    return dask.delayed(result, pure=True)(parts[0], flat)
