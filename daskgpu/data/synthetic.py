"""Random arrays generated on the workers, block by block.

Dask's ``da.random.default_rng`` builds a bit generator per block in the client, which for
CuPy means allocating GPU state (a CUDA context) in the client process. Here the client only
derives seeds: each block is generated on its worker from
``SeedSequence(seed, spawn_key=(block_number,))``, blocks numbered row-major, with
:func:`daskgpu.toolkit.numeric.generator`: NumPy's ``default_rng`` (PCG64) on CPU workers, on
GPU workers a counter-based generator (Philox4x64-10 keyed by the sequence's first 128 bits,
see :mod:`daskgpu.toolkit.numeric`). Results are reproducible for a seed and independent of
where blocks run.

Both generators give a block's values as one stream: a block drawn in pieces, each piece
continuing the stream where the last one stopped, has exactly the values of the block drawn
whole. On the device this holds by construction (value ``i`` of a block depends only on the
block's key and ``i``), not by an accident of the library's state layout as with CuPy's own
``default_rng``, whose values also come from 32 bits of the seed.

The array's ``meta`` stays NumPy even for CuPy blocks: a CuPy meta would have to be allocated
in the client. NumPy functions dispatch to CuPy blocks through ``__array_function__``.
"""

from __future__ import annotations

import importlib
import math

import dask.array as da
import numpy as np

from daskgpu.toolkit.numeric import generator


def _block_rng(library: str, seed: int, location, num_blocks):
    """The generator of one block: the same for a block wherever and however it is computed."""
    block_number = int(np.ravel_multi_index(location, num_blocks))
    return generator(library, np.random.SeedSequence(seed, spawn_key=(block_number,)))


DISTRIBUTIONS = ("uniform", "normal")


def _random_block(block_info=None, seed=0, value_dtype="float64", library="numpy",
                  distribution="uniform"):
    info = block_info[None]
    rng = _block_rng(library, seed, info["chunk-location"], info["num-chunks"])
    if distribution == "normal":
        return rng.standard_normal(info["chunk-shape"], dtype=value_dtype)
    return rng.random(info["chunk-shape"], dtype=value_dtype)


def _uniform_block_sum(block_info=None, seed=0, value_dtype="float64", library="numpy",
                       chunks_of_data=(), stream_elements=2**20):
    chunks = chunks_of_data
    location = block_info[None]["chunk-location"]
    num_blocks = tuple(len(c) for c in chunks)
    rng = _block_rng(library, seed, location, num_blocks)
    remaining = math.prod(c[i] for c, i in zip(chunks, location, strict=True))
    if library == "numpy":
        # One small buffer, refilled: no page faults for a fresh block, and it stays in cache.
        buffer = np.empty(min(remaining, stream_elements), dtype=value_dtype)
        total = 0.0
        while remaining:
            part = buffer[: min(remaining, stream_elements)]
            rng.random(out=part, dtype=value_dtype)
            total += float(part.sum(dtype=np.float64))
            remaining -= part.size
    else:
        xp = importlib.import_module(library)
        on_device = xp.zeros((), dtype=np.float64)
        while remaining:
            size = min(remaining, stream_elements)
            on_device += rng.random(size, dtype=value_dtype).sum(dtype=np.float64)
            remaining -= size
        total = float(on_device)  # the sum goes to the host: see daskgpu.toolkit.reductions
    return np.full((1,) * len(chunks), total)


def random_array(shape, chunks, dtype, seed: int, backend, distribution="uniform") -> da.Array:
    """A lazy array of random values, generated on the workers.

    Parameters
    ----------
    shape, chunks : tuple of int
    dtype : str
        ``float32`` or ``float64``.
    seed : int
        Same seed, same values (for a given backend and chunking).
    backend : Backend
        NumPy blocks on CPU, CuPy blocks on GPU.
    distribution : {"uniform", "normal"}
        Uniform on [0, 1), or standard normal.
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; choose {DISTRIBUTIONS}")
    normalized = da.core.normalize_chunks(chunks, shape, dtype=dtype)
    return da.map_blocks(
        _random_block,
        chunks=normalized,
        dtype=dtype,
        meta=np.empty((0,) * len(shape), dtype=dtype),  # see the module docstring
        seed=seed,
        value_dtype=np.dtype(dtype).name,
        library=backend.array_library,
        distribution=distribution,
    )


def uniform(shape, chunks, dtype, seed: int, backend) -> da.Array:
    """A lazy array of uniform [0, 1) values: :func:`random_array` with its default."""
    return random_array(shape, chunks, dtype, seed, backend, "uniform")


def uniform_block_sums(shape, chunks, dtype, seed: int, backend, stream_elements: int):
    """Per-block sums of :func:`uniform`'s array, without materialising its blocks.

    Each task draws its block's values from the block's own generator in pieces of
    ``stream_elements``, summing as it goes, so a block costs one small buffer instead of its
    full size in memory (and on CPU no page faults). The values are exactly those of
    ``uniform(shape, chunks, dtype, seed, backend)``, on either backend (see the module
    docstring); only the summation order differs.
    Finish with :func:`daskgpu.toolkit.reductions.mean_from_sums`.
    """
    normalized = da.core.normalize_chunks(chunks, shape, dtype=dtype)
    return da.map_blocks(
        _uniform_block_sum,
        chunks=tuple((1,) * len(c) for c in normalized),
        dtype=np.float64,
        meta=np.empty((0,) * len(shape), dtype=np.float64),
        seed=seed,
        value_dtype=np.dtype(dtype).name,
        library=backend.array_library,
        chunks_of_data=normalized,
        stream_elements=stream_elements,
    )
