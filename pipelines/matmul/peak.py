"""The backend's single-device rate, measured at the start of a matmul-pipeline run.

One square product, of the run's largest block side at most ``PEAK_SIDE``, timed on one worker
after a warm-up product (BLAS threads, cuBLAS handles and the memory pool ready): GFLOP/s a
worker reaches on one block, against which a run's rate (2 n k m / compute_s) is a fraction.
"""

from __future__ import annotations

import importlib

import dask
import numpy as np

from daskgpu.toolkit.timing import time_call

# Side of the square product timed on one worker for the backend's single-device peak.
PEAK_SIDE = {"cpu": 1536, "gpu": 8192}


def one_block_rate(backend, dtype: str, side: int) -> float:
    """GFLOP/s of one ``side`` x ``side`` product on this worker (after one untimed product)."""
    xp = importlib.import_module(backend.array_library)
    rng = xp.random.default_rng(0)
    a = rng.random((side, side), dtype=dtype)
    b = rng.random((side, side), dtype=dtype)
    a @ b  # warm: BLAS threads and handles, the allocator's pool
    seconds = min(time_call(backend, lambda: a @ b) for _ in range(2))
    return 2.0 * side**3 / seconds / 1e9


def measure_peak(backend, dtype, blocks) -> dict:
    """The backend's single-device rate: one block product timed on a worker of the run's cluster.

    Nothing is measured (None) where no distributed client is the scheduler: the client
    itself must not compute on a GPU.
    """
    scheduler = dask.config.get("scheduler", None)
    side = min(PEAK_SIDE[backend.name], max(blocks))
    if not hasattr(scheduler, "submit"):
        return {"peak_gflop_per_s": None, "peak_block": side}
    future = scheduler.submit(one_block_rate, backend, np.dtype(dtype).name, side, pure=False)
    try:
        return {"peak_gflop_per_s": round(float(future.result()), 3), "peak_block": side}
    finally:
        future.release()
