"""kmeans-pipeline's own points (``--input``): samples x features, in a file or in memory.

A ``.npy`` file or Zarr array, or (from Python) a NumPy, CuPy or Dask array, opened and
checked in the client before any cluster starts (:func:`open_input`). The shards are ranges of
consecutive rows: a file's each read where it will stay (:func:`make_input_shard`); an array in
memory's each one block of the object's own graph in the shards' rows (:func:`memory_blocks`:
a NumPy array sent once, a Dask array used as the graph it is, rechunked where its blocks are
not the shards'), copied where the block was computed (:func:`place_blocks`).
"""

from __future__ import annotations

import importlib

import numpy as np

from daskgpu.data import array_input, memory_input
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit import data_parallel
from daskgpu.toolkit.params import refuse_with_input

DTYPES = ("float32", "float64")
# Options that describe generated points: refused with --input.
GENERATED_ONLY = ("samples", "features", "clusters")


def open_input(values: dict, default_dtype: str, params=(), backend=None):
    """Open and check ``--input``; fill ``values`` from it.

    ``samples``, ``features`` and ``clusters`` stay ``None`` (the input gives the first two;
    it has no blobs), ``dtype`` is set to the input's, and ``input`` to its name (an array in
    memory: its label, never the object, which stays in the source returned).

    Raises
    ------
    ParameterError
        Options for generated points; a ``--dtype`` other than the input's.
    InputFileError
        A missing or unreadable file, points not 2-D or not float; CuPy data for CPU workers.
    """
    refuse_with_input(params, values, GENERATED_ONLY, "points")
    source = array_input.open_matrix(values["input"], "--input", DTYPES, "samples x features")
    if values["dtype"] not in (default_dtype, source.dtype.name):
        raise ParameterError(f"--dtype {values['dtype']}: the input holds {source.dtype}; "
                             "drop --dtype (the input's own type is used)")
    if (source.in_memory and backend is not None and not backend.is_gpu
            and memory_input.library(source.reader) == "cupy"):
        raise InputFileError(f"--input {source.path}: CuPy data, and the workers are CPU "
                             "workers; run on GPU workers, or give cupy.asnumpy(x)")
    values["dtype"] = source.dtype.name
    values["input"] = source.path
    return source


def reader_of(source):
    """What a worker reads ``source`` with (picklable): its ``.npy`` view, or its path."""
    return source.reader if source.kind == "npy" else source.path


def make_input_shard(reader, start: int, stop: int, dtype: str, library: str):
    """Rows ``[start, stop)`` of the input, read where they will stay (a copy)."""
    if isinstance(reader, str):
        import zarr

        reader = zarr.open_array(reader, mode="r")
    xp = importlib.import_module(library)
    # a copy, in the worker's memory: not a view of the file's pages
    return xp.array(np.asarray(reader[start:stop]), dtype=dtype, order="C")


def memory_blocks(source, sizes, backend) -> list:
    """An array in memory as one lazy block (``dask.delayed``) per shard of ``sizes`` rows.

    The blocks of :func:`daskgpu.data.array_input.to_dask` in the shards' rows (all features):
    tasks of the object's own graph, computed on the workers, in ``backend``'s memory.
    """
    array = array_input.to_dask(source, memory_chunks(source, sizes), backend)
    return list(array.to_delayed().ravel())


def memory_chunks(source, sizes) -> tuple:
    """The chunks of the shards' blocks of an array in memory: ``sizes`` rows, all features."""
    return tuple(int(n) for n in sizes), (source.shape[1],)


def make_memory_shard(block, dtype: str, library: str):
    """A shard from its block of an array in memory: a C-ordered copy where it will stay."""
    xp = importlib.import_module(library)
    return xp.array(block, dtype=dtype, order="C")


def place_blocks(client, blocks: list, dtype: str, library: str) -> list:
    """A shard from each computed block (futures), made where the block is: their futures.

    A worker holding more than its share of blocks (``ceil(blocks / workers)``) passes the
    rest to the workers holding fewest, so every worker iterates on a like share of points;
    a block moves only then. The placement is loose: a shard whose worker is lost is made
    again elsewhere from the graph.
    """
    workers = data_parallel.worker_addresses(client)
    holders = client.who_has(blocks)
    share, held = -(-len(blocks) // max(1, len(workers))), dict.fromkeys(workers, 0)
    futures = []
    for block in blocks:
        where = [w for w in holders.get(block.key, ()) if held.get(w, share) < share]
        target = where[0] if where else min(held, key=held.get)
        held[target] += 1
        futures.append(client.submit(make_memory_shard, block, dtype, library,
                                     workers=[target], allow_other_workers=True, pure=False))
    return futures
