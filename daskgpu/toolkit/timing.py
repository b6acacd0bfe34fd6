"""Timing one computation, waiting for a GPU's queued work: what pipelines' baselines use."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from daskgpu.toolkit import backends


def time_call(backend, fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` takes; on GPU, the device work it queued is included.

    Parameters
    ----------
    backend : Backend
        On GPU this must be called on a worker (it synchronises the device).
    fn : callable
        The computation to time, without arguments.

    Returns
    -------
    float
        Wall seconds.
    """
    backends.synchronize(backend)
    began = time.perf_counter()
    fn()
    backends.synchronize(backend)
    return time.perf_counter() - began


def timed(backend, fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds ``fn()`` takes (device work included, as :func:`time_call`), and its result."""
    out = []
    seconds = time_call(backend, lambda: out.append(fn()))
    return seconds, out[0]
