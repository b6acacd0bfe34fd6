"""How fft-pipeline cuts the array into slabs, and which layouts it refuses up front.

Row slabs of whole rows for the row transforms, as many column slabs of whole columns for the
column transforms; ``--chunks auto`` sizes the row slabs as
:func:`daskgpu.toolkit.chunking.auto_chunks` cuts an array for the device, ``--chunks N`` gives
their width. The transpose between them makes slabs x slabs pieces, which bounds the slab count.
"""

from __future__ import annotations

import math

import dask.array as da
import numpy as np

from daskgpu import config as daskgpu_config
from daskgpu.errors import ParameterError
from daskgpu.toolkit import chunking
from pipelines.fft import shared

CPU_DEFAULT_SIZE = 4096
# The transpose makes k x k pieces of k slabs: at most this many slabs.
MAX_SLABS = 1000
MAX_BYTES = 2**50  # 1 PiB: no cluster holds a larger array
# A GPU's default size: the input, two intermediates and the spectrum in this share of memory.
GPU_COPIES = 4


def default_size(backend, itemsize: int) -> int:
    """The largest power of two whose array and its copies fit a share of the GPUs' memory."""
    if backend.is_gpu and backend.device_memory:
        share = float(daskgpu_config.get("gpu.default-memory-fraction"))
        fits = math.sqrt(share * backend.device_memory / (GPU_COPIES * itemsize))
        return 2 ** max(4, int(math.log2(max(fits, 16))))
    return CPU_DEFAULT_SIZE


def slab_width(given, n: int, itemsize: int, backend) -> int:
    """Rows per row block (and columns per column block): ``--chunks N``, or for the device."""
    if given != "auto":
        return min(given[0], n)
    rows, *rest = chunking.auto_chunks((n, n), itemsize, backend)
    return rows if rest == [n] else 1  # a row over the chunk size: one row a block


def check_layout(given, n: int, itemsize: int, backend, option: str) -> None:
    """Refuse a layout of more slabs than a transpose handles, or slabs no worker holds.

    Raises
    ------
    ParameterError
        Naming ``option`` (what set the size) or the ``--chunks`` given.
    """
    if given != "auto" and len(given) != 1:
        raise ParameterError(f"--chunks {','.join(map(str, given))}: give one slab width N "
                             "(rows of a row block, columns of a column block) or auto")
    width = slab_width(given, n, itemsize, backend)
    slabs = -(-n // width)
    what = option if given == "auto" else f"--chunks {given[0]}"
    if slabs > MAX_SLABS:
        raise ParameterError(f"{what}: {slabs} slabs of {width} rows of {n}; the transpose "
                             f"makes slabs x slabs pieces, at most {MAX_SLABS} slabs: "
                             f"{'give a smaller size' if given == 'auto' else 'give wider slabs'}")
    if width * n * itemsize > chunking.MAX_BLOCK_BYTES:
        raise ParameterError(f"{what}: a slab of {width} x {n} is over "
                             f"{chunking.MAX_BLOCK_BYTES / 2**40:g} TiB, more than any worker "
                             "holds: give narrower slabs or auto")


def layout(resolved) -> dict:
    """The sizes of a run: n, result columns m, the row blocks and the column blocks.

    ``half_inverse`` (irfft2): the input, an n x (n/2+1) half spectrum, is held transposed in
    row blocks (its column blocks), and the result is the n x n real array (m = n).
    ``real_input``: the input holds real values (rfft2).
    """
    source = resolved.inputs.get("input")
    n = source.shape[0] if source is not None else resolved["size"]
    real, dtype = resolved["real"], np.dtype(resolved["dtype"])
    half_inverse = real and resolved["inverse"]
    width = slab_width(resolved["chunks"], n, dtype.itemsize, resolved.backend)
    m = n if half_inverse else shared.spectrum_columns(n, real)
    held = shared.spectrum_columns(n, True) if half_inverse else n  # rows of the held input
    row_chunks = da.core.normalize_chunks((width, n), (held, n))
    slabs = len(row_chunks[0])
    col_width = -(-m // slabs)  # as many column blocks as row blocks
    col_chunks = da.core.normalize_chunks((n, col_width), (n, m))
    return {"n": n, "m": m, "real": real, "half_inverse": half_inverse,
            "real_input": real and not half_inverse, "dtype": dtype,
            "row_chunks": row_chunks, "col_chunks": col_chunks}


def flop(n: int, real: bool) -> int:  # irfft2 counts as rfft2
    """The conventional flop count of an n x n FFT: 5 N log2 N (half for real data), N = n^2."""
    count = 5 * n * n * math.log2(n * n) if n > 1 else 0
    return int(count / 2 if real else count)


def transpose_bytes(sizes: dict) -> int:
    """Bytes the transpose moves between blocks: all but each row block's own column block."""
    rows, cols = sizes["row_chunks"][0], sizes["col_chunks"][1]
    # Row block i keeps the piece of it that column block i holds (there are as many).
    kept = sum(h * w for h, w in zip(rows, cols, strict=False))
    total = sum(rows) * sizes["m"]
    return int((total - kept) * sizes["dtype"].itemsize)


# --------------------------------------------------------------------------- whole or slabs

LAYOUTS = ("auto", "whole", "slabs")
# The whole array in one worker: the input, the transform (in place where it can be) and the
# summaries' temporaries, in this many copies of the larger of the input and the spectrum.
WHOLE_COPIES = 3


def whole_bytes(sizes: dict) -> int:
    """Memory the whole-array path takes in its worker, by :data:`WHOLE_COPIES`."""
    n, m = sizes["n"], sizes["m"]
    return WHOLE_COPIES * n * max(n, m, shared.spectrum_columns(n, True)) \
        * sizes["dtype"].itemsize


def pick(option: str, workers: dict, sizes: dict, device_memory: int = 0) -> dict:
    """Where a run computes: the whole array in one worker, or slabs over all of them.

    ``workers``: the scheduler's workers by address (``host``, ``nthreads``,
    ``memory_limit``); ``device_memory``: one GPU's bytes (0 on CPU workers). ``auto`` takes
    the whole array where every worker is on one host and it fits one worker's memory (its
    device's on a GPU): moving slabs between the processes of one machine costs more than
    transforming them. The whole array's worker is the one with the most memory, and its
    transforms use the threads of every worker on its host (they stay idle otherwise).

    Returns ``layout`` ("whole" or "slabs"), ``worker`` (an address, or None), ``threads``
    (of the whole array's worker; 0 for slabs) and ``why`` (in words).
    """
    if option == "slabs" or not workers:
        return {"layout": "slabs", "worker": None, "threads": 0, "why": "as asked"
                if option == "slabs" else "no worker to hold the whole array"}
    address = max(sorted(workers), key=lambda a: workers[a].get("memory_limit") or 2**62)
    host = workers[address].get("host")
    threads = sum(int(w.get("nthreads") or 1) for w in workers.values()
                  if w.get("host") == host)
    memory = device_memory or workers[address].get("memory_limit") or 0
    need = whole_bytes(sizes)
    whole = {"layout": "whole", "worker": address, "threads": threads}
    if option == "whole":
        return {**whole, "why": "as asked"}
    hosts = {w.get("host") for w in workers.values()}
    if len(hosts) > 1:
        return {"layout": "slabs", "worker": None, "threads": 0,
                "why": f"workers on {len(hosts)} hosts"}
    if memory and need > memory:
        return {"layout": "slabs", "worker": None, "threads": 0,
                "why": f"the whole array's {need / 2**30:.3g} GiB is over one worker's "
                       f"{memory / 2**30:.3g} GiB"}
    return {**whole, "why": "one host, and the array fits one worker"}
