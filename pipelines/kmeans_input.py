"""kmeans-pipeline's own points (``--input``): a ``.npy`` file or Zarr array, samples x features.

Opened and checked in the client before any cluster starts (:func:`open_input`); the shards
are ranges of consecutive rows, each read where it will stay (:func:`make_input_shard`).
"""

from __future__ import annotations

import importlib

import numpy as np

from daskgpu import array_input
from daskgpu.errors import InputFileError, ParameterError

DTYPES = ("float32", "float64")
# Options that describe generated points: refused with --input.
GENERATED_ONLY = ("samples", "features", "clusters")


def open_input(values: dict, default_dtype: str):
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
    extra = [f"--{name}" for name in GENERATED_ONLY if values[name] is not None]
    if extra:
        raise ParameterError(f"{', '.join(extra)}: for generated points, not with --input; "
                             "the input's shape gives them (give --k for the centroids)")
    source = array_input.open_array(values["input"], "--input", DTYPES)
    if len(source.shape) != 2:
        raise InputFileError(f"--input {source.path}: holds an array of shape {source.shape}; "
                             "a matrix of samples x features (2 axes) is needed")
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
