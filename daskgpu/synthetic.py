"""Random arrays generated on the workers, block by block, with the backend's own generator.

Dask's ``da.random.default_rng`` builds a bit generator per block in the client, which for
CuPy means allocating GPU state (a CUDA context) in the client process. Here the client only
derives seeds: each block is generated on its worker from
``SeedSequence(seed, spawn_key=(block_number,))`` with ``numpy.random.default_rng`` or
``cupy.random.default_rng``, the same per-block scheme Dask uses, so results are reproducible
for a seed and independent of where blocks run.

The array's ``meta`` stays NumPy even for CuPy blocks: a CuPy meta would have to be allocated
in the client. NumPy functions dispatch to CuPy blocks through ``__array_function__``.
"""

from __future__ import annotations

import importlib

import dask.array as da
import numpy as np


def _uniform_block(block_info=None, seed=0, value_dtype="float64", library="numpy"):
    info = block_info[None]
    block_number = int(np.ravel_multi_index(info["chunk-location"], info["num-chunks"]))
    xp = importlib.import_module(library)
    seq = np.random.SeedSequence(seed, spawn_key=(block_number,))
    if library == "numpy":
        rng = np.random.default_rng(seq)
    else:  # CuPy's generator takes an integer seed
        rng = xp.random.default_rng(int(seq.generate_state(2, np.uint64)[0]))
    return rng.random(info["chunk-shape"], dtype=value_dtype)


def uniform(shape, chunks, dtype, seed: int, backend) -> da.Array:
    """A lazy array of uniform [0, 1) values, generated on the workers.

    Parameters
    ----------
    shape, chunks : tuple of int
    dtype : str
        ``float32`` or ``float64``.
    seed : int
        Same seed, same values (for a given backend and chunking).
    backend : Backend
        NumPy blocks on CPU, CuPy blocks on GPU.
    """
    normalized = da.core.normalize_chunks(chunks, shape, dtype=dtype)
    return da.map_blocks(
        _uniform_block,
        chunks=normalized,
        dtype=dtype,
        meta=np.empty((0,) * len(shape), dtype=dtype),  # see the module docstring
        seed=seed,
        value_dtype=np.dtype(dtype).name,
        library=backend.array_library,
    )
