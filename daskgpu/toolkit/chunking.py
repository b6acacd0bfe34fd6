"""Chunk shapes chosen for the device: few large chunks on a GPU, enough to busy every CPU core."""

from __future__ import annotations

import math

import numpy as np
from dask.utils import parse_bytes

from daskgpu import config as daskgpu_config
from daskgpu.errors import ParameterError


def auto_chunks(shape: tuple[int, ...], itemsize: int, backend) -> tuple[int, ...]:
    """Row-block chunks sized for ``backend``.

    Whole rows keep each block contiguous. The block count is a multiple of the parallel slots
    (GPU workers, or CPU threads) so that no slot idles at the end, and no block is larger
    than the configured ``daskgpu.gpu.chunk-bytes`` / ``daskgpu.cpu.chunk-bytes``.

    >>> from daskgpu.toolkit.backends import Backend
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
        import dask.array as da  # only here: checking a layout (every run's) loads no dask.array

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


# A layout beyond these is refused before a cluster starts: the client would spend minutes (or
# run out of memory) building a graph of more blocks, and no worker holds a larger block.
MAX_BLOCKS = 1_000_000
MAX_BLOCK_BYTES = 2**40


def _bytes(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} bytes"


def block_count(chunks, shape: tuple[int, ...], itemsize: int) -> int:
    """How many blocks ``chunks`` makes of ``shape``; for ``"auto"``, the fewest it could.

    ``"auto"`` blocks are at most the larger of ``daskgpu.cpu.chunk-bytes`` and
    ``daskgpu.gpu.chunk-bytes``, so the data's size over that is a lower bound.
    """
    if chunks == "auto":
        largest = max(parse_bytes(daskgpu_config.get(f"{kind}.chunk-bytes"))
                      for kind in ("cpu", "gpu"))
        return max(1, -(-math.prod(shape) * itemsize // largest))
    sizes = tuple(chunks) * len(shape) if len(chunks) == 1 else tuple(chunks)
    return math.prod(-(-n // min(s, n)) for s, n in zip(sizes, shape, strict=True))


def check_blocks(chunks, shape: tuple[int, ...], itemsize: int, size_option: str = "--size",
                 layers: int = 1, memory: int = 0) -> None:
    """Refuse a layout no cluster can run, before one starts.

    Parameters
    ----------
    chunks : "auto" or tuple of int
        The ``chunks`` parameter, already checked against ``shape``'s axes.
    shape : tuple of int
        The array's shape.
    itemsize : int
        Bytes per element.
    size_option : str
        The option that sets the shape, for the message.
    layers : int
        How many times the graph repeats over the blocks (a stencil's halo exchanges).
    memory : int
        Bytes of one worker's memory (a GPU's), where known: a block larger is refused too.

    Raises
    ------
    ParameterError
        More than :data:`MAX_BLOCKS` blocks (times ``layers``), or a block larger than
        :data:`MAX_BLOCK_BYTES` or than ``memory``.
    """
    check_axes(chunks, shape)
    blocks = block_count(chunks, shape, itemsize)
    tasks = blocks * max(1, layers)
    if tasks > MAX_BLOCKS:
        per = f" x {layers} exchanges" if layers > 1 else ""
        if chunks == "auto":
            raise ParameterError(
                f"{size_option}: shape {shape} is {_bytes(math.prod(shape) * itemsize)}, at "
                f"least {blocks:.3g} blocks{per}; at most {MAX_BLOCKS:.0e} fit in one graph: "
                "give a smaller size"
            )
        raise ParameterError(
            f"--chunks {','.join(map(str, chunks))}: {blocks:.3g} blocks{per} of shape "
            f"{shape}; at most {MAX_BLOCKS:.0e} fit in one graph: give larger blocks or auto"
        )
    if chunks != "auto":
        sizes = tuple(chunks) * len(shape) if len(chunks) == 1 else tuple(chunks)
        block_bytes = math.prod(min(s, n) for s, n in zip(sizes, shape, strict=True)) * itemsize
        limit = min(MAX_BLOCK_BYTES, memory) if memory else MAX_BLOCK_BYTES
        if block_bytes > limit:
            whose = "a worker's memory" if memory else "any worker's memory"
            raise ParameterError(
                f"--chunks {','.join(map(str, chunks))}: one block of shape {shape} would hold "
                f"{_bytes(block_bytes)}, more than {whose} ({_bytes(limit)} at most): give "
                "smaller blocks or auto"
            )


def worker_memory(backend) -> int:
    """Bytes of the smallest selected GPU's memory; 0 where unknown (CPU workers)."""
    return min((d.memory_total for d in backend.devices), default=0) if backend.is_gpu else 0


def check_declared(values, backend) -> None:
    """:func:`check_blocks` for any pipeline that declares an array's ``shape`` and ``chunks``.

    Applied to every plugin (the built-ins check their own layouts) as its parameters are
    resolved: a plugin written with the
    low-level ``daskgpu.pipeline`` whose parameters are named ``shape`` (a tuple of sizes, as
    :func:`daskgpu.toolkit.array_pipeline.array_shape` parses it) and ``chunks`` (the
    :func:`daskgpu.toolkit.params.chunks` parser's value), with an optional ``dtype``, is
    refused a layout no cluster can run before one starts, as the built-ins are.
    """
    shape, chunks = values.get("shape"), values.get("chunks")
    if not (isinstance(shape, tuple) and shape and all(isinstance(n, int) for n in shape)):
        return
    if not (chunks == "auto" or (isinstance(chunks, tuple) and len(chunks) in (1, len(shape))
                                 and all(isinstance(c, int) for c in chunks))):
        return  # not one block size, or one per axis: a layout of another meaning
    try:
        itemsize = np.dtype(values.get("dtype") or "float64").itemsize
    except TypeError:
        itemsize = 8
    check_blocks(chunks, shape, itemsize, "--shape", memory=worker_memory(backend))
