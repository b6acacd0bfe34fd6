"""What every kernel family needs to dispatch and launch: host or device, grid, stream."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np

THREADS_PER_BLOCK = 256
# Enough blocks to fill every SM several times over; grid-stride loops cover the rest.
BLOCKS_PER_SM = 8
_FALLBACK_SM_COUNT = 16


def on_host(x) -> bool:
    """True for a NumPy array (run the CPU twin), False for a device array (run the kernel)."""
    return isinstance(x, np.ndarray)


@contextlib.contextmanager
def worker_threads() -> Iterator[None]:
    """Around a CPU twin: its parallel loops use the Dask worker's own thread count.

    Numba's pool otherwise spans every core in each worker, so the default layout (one
    single-threaded worker per core) would run cores x cores threads. Numba's thread count is
    per calling thread, so it is set here, in the task's thread, and restored after. Outside a
    worker nothing changes.
    """
    threads = _worker_thread_count()
    if threads is None:
        yield
        return
    import numba

    previous = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(previous)


def _worker_thread_count() -> int | None:
    try:
        from distributed import get_worker

        return int(get_worker().state.nthreads)
    except (ImportError, ValueError, AttributeError):  # not in a worker
        return None


def grid_1d(n: int, threads: int = THREADS_PER_BLOCK) -> tuple[int, int]:
    """``(blocks, threads)`` for a grid-stride loop over ``n`` items on the current device."""
    from numba import cuda

    sm_count = getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", _FALLBACK_SM_COUNT)
    blocks = max(1, min(math.ceil(n / threads), sm_count * BLOCKS_PER_SM))
    return blocks, threads


def is_cupy(x) -> bool:
    """True for a CuPy array: its memory comes from CuPy's pool, its work runs on CuPy's stream."""
    return type(x).__module__.split(".")[0] == "cupy"


def stream_for(x):
    """The Numba stream to launch on: CuPy's current stream for a CuPy array, else default."""
    from numba import cuda

    if is_cupy(x):
        import cupy

        return cuda.external_stream(cupy.cuda.get_current_stream().ptr)
    return cuda.default_stream()


def like(x, shape, dtype):
    """A new zeroed array of ``shape``/``dtype`` in the same memory (host, CuPy, Numba) as ``x``."""
    if on_host(x):
        return np.zeros(shape, dtype=dtype)
    if is_cupy(x):
        import cupy

        return cupy.zeros(shape, dtype=dtype)
    from numba import cuda

    return cuda.to_device(np.zeros(shape, dtype=dtype))


def to_numba(x):
    """A Numba device array of ``x``'s memory (no copy) to launch a kernel with.

    Importing a ``__cuda_array_interface__`` makes numba-cuda wait, on the host, for the stream
    the array names (``cuda.as_cuda_array``'s default; some numba-cuda versions also do it for an
    array passed straight to a launch, on every launch). A CuPy array names CuPy's current
    stream, the one ``stream_for`` launches on, so the device already orders the kernel after the
    work that wrote the array: it is imported without the wait. Other foreign arrays keep it
    (they are launched on the default stream, not theirs). A Numba array is returned as it is.
    """
    if hasattr(x, "copy_to_host"):
        return x
    from numba import cuda

    return cuda.as_cuda_array(x, sync=not is_cupy(x))
