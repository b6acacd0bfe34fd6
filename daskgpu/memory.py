"""Per-worker peak memory of one run: host memory for every worker, device memory for GPU ones.

Host: on Linux, the kernel's own high-water mark of each worker process (``VmHWM``), reset when
the run starts (``/proc/self/clear_refs``), so even a short-lived peak between samples counts.
Elsewhere, and for device memory, the samples of distributed's own system monitor taken during
the run (every 0.5 s, plus one at its end).
"""

from __future__ import annotations

import time

import dask.config
import dask.utils

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def _reset_high_water_mark() -> bool:
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")  # 5: reset the peak resident set size to the current one
        return True
    except OSError:
        return False


def _high_water_mark() -> int | None:
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


async def _reset(dask_worker=None) -> None:
    # A coroutine: distributed runs only coroutines without waiting for their answer.
    _reset_high_water_mark()


def _peaks(since: float, dask_worker=None) -> dict:
    monitor = dask_worker.monitor
    monitor.update()  # one sample at the end of the run
    interval = dask.utils.parse_timedelta(
        dask.config.get("distributed.admin.system-monitor.interval")
    )
    recent = int((time.time() - since) / interval) + 4  # samples taken since the run began
    samples = monitor.range_query(max(0, monitor.count - recent))
    times = samples.get("time", [])

    def during(name: str) -> list[float]:
        values = samples.get(name, [])
        return [v for t, v in zip(times, values, strict=False) if v is not None and t >= since]

    host = _high_water_mark()
    out = {"host_peak_bytes": host if host is not None else int(max(during("memory"), default=0))}
    device = during("gpu_memory_used")
    if device:
        out["device_peak_bytes"] = int(max(device))
    return out


def start(client) -> float:
    """Mark the start of a run on every worker; pass the result to :func:`peaks`.

    The reset is sent without waiting for an answer (it travels ahead of the run's tasks), so
    measuring costs one round trip per run, at the end.
    """
    began = time.time()
    client.run(_reset, wait=False)
    return began


def peaks(client, since: float) -> dict:
    """Peak host (and device) memory of every worker since :func:`start`, by address."""
    return client.run(_peaks, since, on_error="ignore")  # a lost worker has no peak to give
