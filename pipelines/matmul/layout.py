"""How matmul-pipeline cuts A, B and C into blocks, and which layouts it refuses up front.

``--chunks auto``: C is cut in row blocks as :func:`daskgpu.toolkit.chunking.auto_chunks` cuts an
array for the device (a multiple of the workers' slots), the contraction axis k kept whole so that
no block product is summed with others, and a block halved while one task's working set (its A
block, B block and C block) exceeds a worker's budget: half a GPU's memory, or four CPU chunks
(``daskgpu.cpu.chunk-bytes``). C's sides are halved down to ``MIN_SIDE`` before k is split.
"""

from __future__ import annotations

import math

from dask.utils import parse_bytes

from daskgpu import config as daskgpu_config
from daskgpu.errors import ParameterError
from daskgpu.toolkit import chunking

# A GPU task's working set (A, B and C blocks) may use this share of its device's memory; the
# rest is for the generator's temporaries and dask-cuda's spilling.
GPU_WORKING_SHARE = 0.5
# A CPU task's working set: this many CPU chunks (daskgpu.cpu.chunk-bytes).
CPU_WORKING_CHUNKS = 4
# C's blocks are halved down to this side before the contraction axis is split.
MIN_SIDE = 1024

def explicit_blocks(given: tuple[int, ...], shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """(bn, bk, bm) from ``--chunks N``, ``BN,BM`` (k whole) or ``BN,BK,BM``, within the shape.

    Raises
    ------
    ParameterError
        Four or more sizes.
    """
    n, k, m = shape
    if len(given) == 1:
        blocks = given * 3
    elif len(given) == 2:
        blocks = (given[0], k, given[1])
    elif len(given) == 3:
        blocks = tuple(given)
    else:
        raise ParameterError(f"--chunks {','.join(map(str, given))}: give N, BN,BM (blocks of "
                             "C, k whole) or BN,BK,BM")
    return tuple(min(b, d) for b, d in zip(blocks, shape, strict=True))


def check_layout(given, shape: tuple[int, int, int], itemsize: int, option: str) -> None:
    """Refuse blocks of A, B or C that no worker holds, or too many of them for one graph.

    Raises
    ------
    ParameterError
        Naming ``option`` (what set the shape) or the ``--chunks`` given.
    """
    n, k, m = shape
    if given == "auto":
        for name, dims in (("A", (n, k)), ("B", (k, m)), ("C", (n, m))):
            _check_operand(name, "auto", dims, itemsize, option)
        return
    bn, bk, bm = explicit_blocks(given, shape)
    check_tasks((bn, bk, bm), shape, f"--chunks {','.join(map(str, given))}",
                 "give larger blocks or auto")
    for name, dims, block in (("A", (n, k), (bn, bk)), ("B", (k, m), (bk, bm)),
                              ("C", (n, m), (bn, bm))):
        _check_operand(name, block, dims, itemsize, option)


def _check_operand(name: str, block, dims, itemsize: int, option: str) -> None:
    try:
        chunking.check_blocks(block, dims, itemsize, option)
    except ParameterError as exc:
        raise ParameterError(f"{exc} ({name} is {dims[0]} x {dims[1]})") from None


def auto_blocks(shape: tuple[int, int, int], itemsize: int, backend) -> tuple[int, int, int]:
    """(bn, bk, bm) for ``--chunks auto``: C's device-sized row blocks, k whole, within budget.

    >>> from daskgpu.toolkit.backends import Backend
    >>> auto_blocks((8000, 8000, 8000), 8, Backend("cpu", "numpy", "pandas", threads=2))
    (4000, 8000, 8000)
    """
    n, k, m = shape
    bn, bm = chunking.auto_chunks((n, m), itemsize, backend)
    bk = k
    budget = _working_budget(backend)
    while (bn * bk + bk * bm + bn * bm) * itemsize > budget and max(bn, bk, bm) > 1:
        # Halve C's longer side down to MIN_SIDE, the contraction axis only then (its parts
        # must be summed, and a thin block wastes BLAS).
        if max(bn, bm) > MIN_SIDE or bk <= max(bn, bm):
            if bm >= bn:
                bm = -(-bm // 2)
            else:
                bn = -(-bn // 2)
        else:
            bk = -(-bk // 2)
    return bn, bk, bm


def _working_budget(backend) -> int:
    if backend.is_gpu:
        per_device = backend.device_memory // max(1, backend.workers)
        if per_device:
            return int(GPU_WORKING_SHARE * per_device)
        return 3 * parse_bytes(daskgpu_config.get("gpu.chunk-bytes"))
    return CPU_WORKING_CHUNKS * parse_bytes(daskgpu_config.get("cpu.chunk-bytes"))


def blocks_for(given, shape, itemsize: int, backend) -> tuple[int, int, int]:
    """The (bn, bk, bm) of a ``--chunks`` value (``"auto"`` or sizes) on ``backend``."""
    if given == "auto":
        return auto_blocks(shape, itemsize, backend)
    return explicit_blocks(given, shape)


def check_tasks(blocks: tuple[int, int, int], shape: tuple[int, int, int], option: str,
                 remedy: str = "give a smaller size") -> None:
    """Refuse a product of more block products (blocks of C times blocks of k) than a graph holds.

    Raises
    ------
    ParameterError
        Naming ``option`` and the ``remedy``.
    """
    tasks = math.prod(-(-d // b) for d, b in zip(shape, blocks, strict=True))
    if tasks > chunking.MAX_BLOCKS:
        raise ParameterError(
            f"{option}: n,k,m = {','.join(map(str, shape))}: {tasks:.3g} block products in "
            f"blocks of {' x '.join(map(str, blocks))}; at most {chunking.MAX_BLOCKS:.0e} fit "
            f"in one graph: {remedy}"
        )
