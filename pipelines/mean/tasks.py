"""mean-pipeline's work on the cluster: one float64 sum a block, and the mean of the sums.

Every block is reduced to one float64 sum where it lives: a random block is drawn and summed in
pieces, never held whole (:func:`daskgpu.data.synthetic.uniform_block_sums`); an input's block
is read and summed (:func:`daskgpu.toolkit.reductions.block_sums`). The small host sums come
together in one task, :func:`daskgpu.toolkit.reductions.block_mean`, which divides their total by
the element count. The functions these tasks call live in the library, so that a worker
unpickling them imports no pipeline. :mod:`pipelines.mean.pipeline` resolves the blocks and
assembles the :class:`~daskgpu.toolkit.registry.Workload` around what is built here.
"""

from __future__ import annotations

import dask
import dask.array as da

from daskgpu import config as daskgpu_config
from daskgpu.data import array_input, synthetic
from daskgpu.toolkit import reductions


def input_sums(source, block: tuple[int, ...], backend) -> da.Array:
    """One float64 host sum per block of an opened ``.npy``/Zarr input, read in ``block``s."""
    return reductions.block_sums(array_input.to_dask(source, block, backend))


def random_sums(shape: tuple[int, ...], block: tuple[int, ...], dtype, seed: int,
                backend) -> da.Array:
    """One float64 host sum per block of the random uniform [0, 1) array of ``seed``.

    Each block is drawn from its own seed (:mod:`daskgpu.data.synthetic`) and summed as it is
    drawn, in pieces of the backend's ``stream-elements``.
    """
    stream = int(daskgpu_config.get(f"{backend.name}.stream-elements"))
    return synthetic.uniform_block_sums(shape, block, dtype, seed, backend, stream)


def mean_of(sums: da.Array, elements: int):
    """The lazy mean (a :class:`~daskgpu.toolkit.reductions.BlockMean`) of the block ``sums``."""
    # One collection, so the blocks are drawn once: a Delayed of several collections would
    # optimise (and compute) each of them apart.
    return dask.delayed(reductions.block_mean, pure=True)(sums, elements)
