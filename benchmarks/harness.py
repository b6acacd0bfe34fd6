"""What every benchmark here shares: timing a function after a warm-up, and printing times."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    """Run ``fn`` once to warm up (compilation, first touch of memory), then ``repeat`` times.

    Returns the wall times of the timed runs and the last result.
    """
    result = fn()
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - began)
    return times, result


def summary(times: list[float]) -> str:
    """``median … s (min …, max …)``."""
    return f"median {statistics.median(times):.3f} s  (min {min(times):.3f}, max {max(times):.3f})"


def machine() -> str:
    """Cores, Numba threads and library versions, for a benchmark's heading."""
    import os

    import numba
    import numpy as np

    return (f"{os.cpu_count()} cores, {numba.get_num_threads()} numba threads, "
            f"numpy {np.__version__}, numba {numba.__version__}")
