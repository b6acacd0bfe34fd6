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


def slab_width(given, n: int, itemsize: int, backend, q: int | None = None) -> int:
    """Rows per row block (n rows of q), and columns per column block: ``--chunks N``, or auto."""
    q = n if q is None else q
    if given != "auto":
        return min(given[0], n)
    rows, *rest = chunking.auto_chunks((n, q), itemsize, backend)
    return rows if rest == [q] else 1  # a row over the chunk size: one row a block


def check_layout(given, n: int, itemsize: int, backend, option: str,
                 q: int | None = None) -> None:
    """Refuse a layout of more slabs than a transpose handles, or slabs no worker holds.

    Raises
    ------
    ParameterError
        Naming ``option`` (what set the size) or the ``--chunks`` given.
    """
    if given != "auto" and len(given) != 1:
        raise ParameterError(f"--chunks {','.join(map(str, given))}: give one slab width N "
                             "(rows of a row block, columns of a column block) or auto")
    q = n if q is None else q
    width = slab_width(given, n, itemsize, backend, q)
    slabs = -(-n // width)
    what = option if given == "auto" else f"--chunks {given[0]}"
    if slabs > MAX_SLABS:
        raise ParameterError(f"{what}: {slabs} slabs of {width} rows of {n}; the transpose "
                             f"makes slabs x slabs pieces, at most {MAX_SLABS} slabs: "
                             f"{'give a smaller size' if given == 'auto' else 'give wider slabs'}")
    if width * max(n, q) * itemsize > chunking.MAX_BLOCK_BYTES:
        raise ParameterError(f"{what}: a slab of {width} x {max(n, q)} is over "
                             f"{chunking.MAX_BLOCK_BYTES / 2**40:g} TiB, more than any worker "
                             "holds: give narrower slabs or auto")


def layout(resolved) -> dict:
    """The sizes of a run: n, q, the spectrum's columns m, the row blocks, the column blocks.

    The input x, n x q, is held in row blocks of whole rows (transformed along them: length
    q), the spectrum X, n x m (m = q, or q // 2 + 1 for rfft2), in column blocks (transformed
    along them: length n). ``half_inverse`` (irfft2): the input, an r x (q // 2 + 1) half
    spectrum of an r x q result (``--shape``, or q = 2 (columns - 1)), is held transposed
    (its columns as rows, of length q here: r), and its result seen transposed, as the
    spectrum: n = q of the result, m = r. ``real_input``: the input holds real values (rfft2).
    """
    source = resolved.inputs.get("input")
    real, dtype = resolved["real"], np.dtype(resolved["dtype"])
    half_inverse = real and resolved["inverse"]
    if half_inverse:
        r, half = source.shape
        n = out_columns(resolved, half)
        q = m = r
        held = half  # rows of the held input: the half spectrum's columns
    else:
        n, q = source.shape if source is not None else shape_of(resolved)
        m, held = shared.spectrum_columns(q, real), n
    width = slab_width(resolved["chunks"], held, dtype.itemsize, resolved.backend, q)
    row_chunks = da.core.normalize_chunks((width, q), (held, q))
    slabs = len(row_chunks[0])
    col_width = -(-m // slabs)  # as many column blocks as row blocks
    col_chunks = da.core.normalize_chunks((n, col_width), (n, m))
    return {"n": n, "q": q, "m": m, "real": real, "half_inverse": half_inverse,
            "real_input": real and not half_inverse, "dtype": dtype,
            "row_chunks": row_chunks, "col_chunks": col_chunks}


def shape_of(resolved) -> tuple[int, int]:
    """The generated array's shape: ``--shape N,M``, or ``--size N`` (N x N)."""
    shape = resolved["shape"]
    return (int(shape[0]), int(shape[1])) if shape is not None else (resolved["size"],) * 2


def out_columns(resolved, half: int) -> int:
    """irfft2's result columns: ``--shape``'s second, or 2 (half - 1) as numpy's default."""
    shape = resolved["shape"]
    return int(shape[1]) if shape is not None else 2 * (half - 1)


def flop(n: int, real: bool, q: int | None = None) -> int:  # irfft2 counts as rfft2
    """The conventional flop count of an n x q FFT: 5 N log2 N (half for real data), N = n q."""
    points = n * (n if q is None else q)
    count = 5 * points * math.log2(points) if points > 1 else 0
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
    held = sum(sizes["row_chunks"][0]) * sizes["q"]
    return WHOLE_COPIES * max(held, sizes["n"] * sizes["m"]) * sizes["dtype"].itemsize


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
