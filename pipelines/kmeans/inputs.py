"""kmeans-pipeline's own points (``--input``): a ``.npy`` file or Zarr array, samples x features.

Opened and checked in the client before any cluster starts (:func:`open_input`); the shards
are ranges of consecutive rows, each read where it will stay (:func:`make_input_shard`).
"""

from __future__ import annotations

import importlib

import numpy as np

from daskgpu.data import array_input
from daskgpu.errors import ParameterError
from daskgpu.toolkit.params import refuse_with_input

DTYPES = ("float32", "float64")
# Options that describe generated points: refused with --input.
GENERATED_ONLY = ("samples", "features", "clusters")


def open_input(values: dict, default_dtype: str, params=()):
    """Open and check ``--input``; fill ``values`` from it.

    ``samples``, ``features`` and ``clusters`` stay ``None`` (the input gives the first two;
    it has no blobs) and ``dtype`` is set to the input's.

    Raises
    ------
    ParameterError
        Options for generated points; a ``--dtype`` other than the input's.
    InputFileError
        A missing or unreadable file, points not 2-D or not float.
    """
    refuse_with_input(params, values, GENERATED_ONLY, "points")
    source = array_input.open_matrix(values["input"], "--input", DTYPES, "samples x features")
    if values["dtype"] not in (default_dtype, source.dtype.name):
        raise ParameterError(f"--dtype {values['dtype']}: the input holds {source.dtype}; "
                             "drop --dtype (the input's own type is used)")
    values["dtype"] = source.dtype.name
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
