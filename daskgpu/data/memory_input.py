"""Arrays in hand as inputs: NumPy, CuPy and Dask arrays, checked as files are, moved once.

An array in memory is an input as a file is (:func:`daskgpu.data.array_input.open_array` opens
either): its element type and shape are checked in the client before anything runs, and the
run reads it as a Dask array in the pipeline's blocks (:func:`to_dask`). A NumPy or CuPy array
travels to the workers once, a block per task of the collection's own graph; a Dask array is
used as the graph it is (NumPy- or CuPy-backed, never computed in the client), rechunked to
the pipeline's blocks where its own do not match. A check reads a region of it again from the
object itself (:func:`region`), not through the run's graph.
"""

from __future__ import annotations

import itertools
import math
import uuid

import dask
import dask.array as da
import numpy as np

from daskgpu.errors import InputFileError, InputTypeError

ACCEPTED = "a path (.npy file or Zarr array), or a NumPy, CuPy or Dask array"


def is_array(value) -> bool:
    """Whether ``value`` is an array in memory (anything with a shape and a dtype)."""
    return not isinstance(value, (str, bytes)) and all(
        hasattr(value, name) for name in ("shape", "dtype", "ndim"))


def library(array) -> str:
    """Where an array's blocks live: ``"numpy"`` or ``"cupy"`` (a Dask array's: its meta's)."""
    held = array._meta if isinstance(array, da.Array) else array
    return "cupy" if type(held).__module__.split(".")[0] == "cupy" else "numpy"


def label(array) -> str:
    """How a message names an array: its type, element type and shape, never its values.

    >>> label(np.zeros((3, 2), dtype=np.float32))
    'numpy.ndarray float32 (3, 2)'
    """
    shape = tuple(int(n) if not _unknown(n) else "nan" for n in array.shape)
    text = ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "")
    return f"{type_name(array)} {np.dtype(array.dtype)} ({text})"


def type_name(value) -> str:
    """A value's type as a user spells it: ``numpy.ndarray``, ``dask.array.Array``, ``list``."""
    if isinstance(value, da.Array):
        return "dask.array.Array"
    kind = type(value)
    module = kind.__module__.split(".")[0]
    return kind.__name__ if module == "builtins" else f"{module}.{kind.__name__}"


def _unknown(n) -> bool:
    return isinstance(n, float) and math.isnan(n)


def checked(value, what: str):
    """``value`` if it is an array in memory with known sizes; else one line saying what works.

    Raises
    ------
    InputTypeError
        Neither a path nor an array (a list, a dict, a DataFrame, ...).
    InputFileError
        A Dask array of unknown sizes (rows filtered by a mask: ``compute_chunk_sizes()``).
    """
    if not is_array(value):
        raise InputTypeError(f"{what}: a {type_name(value)} is not an input daskgpu reads; give "
                             f"{ACCEPTED} (numpy.asarray turns a list into one)")
    if isinstance(value, da.Array) and any(map(_unknown, value.shape)):
        raise InputFileError(f"{what} {label(value)}: a Dask array whose sizes are unknown; "
                             "call its compute_chunk_sizes() first")
    return value


def to_dask(array, chunks: tuple, backend, sent: list | None = None) -> da.Array:
    """``array`` as a Dask array in ``chunks``, in ``backend``'s memory.

    ``sent``: where a NumPy or CuPy array's blocks, once sent to the workers as they are, are
    noted (a Dask array on them), for :func:`region` to read them again there.

    Raises
    ------
    InputFileError
        CuPy data given to CPU workers (it stays on GPUs: convert it with ``cupy.asnumpy``).
    """
    blocks = da.core.normalize_chunks(chunks, array.shape, dtype=array.dtype)
    if library(array) == "cupy" and not backend.is_gpu:
        raise InputFileError(f"{label(array)}: CuPy data, and the workers are CPU workers; "
                             "run on GPU workers, or give cupy.asnumpy(x)")
    if isinstance(array, da.Array):
        if array.chunks != blocks:
            array = array.rechunk(blocks)
    else:
        array = _sent(array, blocks)
        if sent is not None:
            sent.append(array)
    if library(array) == "numpy":
        to_device = backend.to_device()
        if to_device is not None:
            array = array.map_blocks(to_device, dtype=array.dtype)
    return array


def _sent(array, blocks: tuple) -> da.Array:
    """A NumPy or CuPy array as a Dask array of ``blocks`` that reach the workers once.

    On a cluster (a distributed client as Dask's scheduler, as while a run builds) the blocks
    are scattered straight to the workers, spread over them, four times as fast as through the
    scheduler in a graph; else each block is its own piece of the graph. Either way it is
    named without hashing the data (a 2 GB array takes seconds to hash).
    """
    name = f"input-{uuid.uuid4().hex}"
    client = dask.config.get("scheduler", None)
    if not hasattr(client, "scatter"):
        return da.from_array(array, chunks=blocks, asarray=False, name=name)
    slices = da.core.slices_from_chunks(blocks)
    futures = client.scatter([array[where] for where in slices], hash=False)
    keys = itertools.product([name], *(range(len(c)) for c in blocks))
    return da.Array(dict(zip(keys, futures, strict=True)), name, blocks,
                    meta=array[tuple(slice(0, 0) for _ in array.shape)])


def rechunked(array, chunks: tuple) -> str | None:
    """What :func:`to_dask` does to a Dask array's own blocks, in words; None: kept as they are.

    >>> rechunked(da.zeros((10, 4), chunks=(2, 4)), (5, 4))
    'rechunked from blocks of (2, 4) to (5, 4), the pipeline's'
    """
    if not isinstance(array, da.Array):
        return None
    blocks = da.core.normalize_chunks(chunks, array.shape, dtype=array.dtype)
    if array.chunks == blocks:
        return None
    return (f"rechunked from blocks of {_block_shape(array.chunks)} to "
            f"{_block_shape(blocks)}, the pipeline's")


def _block_shape(chunks: tuple) -> tuple[int, ...]:
    return tuple(int(max(c)) if c else 0 for c in chunks)


def region(array, where: tuple, dtype=np.float64, sent: list | None = None):
    """``array[where]`` as ``dtype`` in host memory, read again apart from the run's graph.

    A Dask array's: a graph of its own blocks, computed where the check runs. A NumPy or
    CuPy array's: sliced from the blocks :func:`to_dask` sent to the workers as they were
    (``sent``), there, lazily, so that a check does not send the data again; where none were
    sent, sliced from the object and copied to host memory here.
    """
    held = sent[-1] if sent and not isinstance(array, da.Array) else array
    part = held[tuple(where)]
    if isinstance(part, da.Array):
        if library(part) == "cupy":
            part = part.map_blocks(_on_host, dtype=part.dtype,
                                   meta=np.empty((0,) * part.ndim, part.dtype))
        return part.astype(dtype)
    return np.asarray(_on_host(part), dtype=dtype)


def _on_host(block):
    """A block in host memory: a CuPy block copied there explicitly, NumPy as it is."""
    return block.get() if library(block) == "cupy" else block
