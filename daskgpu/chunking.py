"""Chunk shapes chosen for the device: few large chunks on a GPU, enough to busy every CPU core."""

from __future__ import annotations

import math

import dask.array as da
from dask.utils import parse_bytes

from daskgpu import config as daskgpu_config
from daskgpu.errors import ParameterError


def auto_chunks(shape: tuple[int, ...], itemsize: int, backend) -> tuple[int, ...]:
    """Row-block chunks sized for ``backend``.

    Whole rows keep each block contiguous. The block count is a multiple of the parallel slots
    (GPU workers, or CPU threads) so that no slot idles at the end, and no block is larger
    than the configured ``daskgpu.gpu.chunk-bytes`` / ``daskgpu.cpu.chunk-bytes``.

    >>> from daskgpu.backends import Backend
    >>> auto_chunks((10000, 10000), 8, Backend("cpu", "numpy", "pandas", threads=2))
    (2500, 10000)
    """
    if backend.is_gpu:
        limit = parse_bytes(daskgpu_config.get("gpu.chunk-bytes"))
        slots = max(1, backend.workers)
    else:
        limit = parse_bytes(daskgpu_config.get("cpu.chunk-bytes"))
        slots = max(1, backend.threads * int(daskgpu_config.get("cpu.chunks-per-thread")))
    if not shape:
        return ()
    nbytes = math.prod(shape) * itemsize
    row_bytes = nbytes // max(1, shape[0])
    if row_bytes > limit:  # one row is too big: let dask split every axis
        return tuple(c[0] for c in da.core.normalize_chunks("auto", shape, limit=limit,
                                                            dtype=f"f{itemsize}"))
    blocks = max(slots, math.ceil(nbytes / limit))
    blocks = math.ceil(blocks / slots) * slots
    rows = max(1, math.ceil(shape[0] / min(blocks, shape[0])))
    return (rows, *shape[1:])


def check_axes(chunks, shape: tuple[int, ...]) -> None:
    """Refuse explicit block sizes that do not fit the array's axes.

    Raises
    ------
    ParameterError
        Naming the shape and how many sizes would fit.
    """
    if chunks == "auto" or len(chunks) in (1, len(shape)):
        return
    raise ParameterError(
        f"--chunks {','.join(map(str, chunks))}: the array has {len(shape)} axes "
        f"(shape {shape}); give one block size or {len(shape)}"
    )


def resolve_chunks(chunks, shape: tuple[int, ...], itemsize: int, backend) -> tuple[int, ...]:
    """Turn a ``chunks`` parameter (``"auto"`` or sizes) into one block size per axis.

    Raises
    ------
    ParameterError
        When the sizes do not fit the array's number of axes.
    """
    if chunks == "auto":
        return auto_chunks(shape, itemsize, backend)
    check_axes(chunks, shape)
    if len(chunks) == 1:
        sizes = chunks * len(shape)
    else:
        sizes = tuple(chunks)
    return tuple(min(size, dim) if dim else size for size, dim in zip(sizes, shape, strict=True))
