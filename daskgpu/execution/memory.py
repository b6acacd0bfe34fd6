"""Per-worker peak memory of one run: host memory for every worker, device memory for GPU ones.

Host: on Linux, the kernel's own high-water mark of each worker process (``VmHWM``), reset when
the run starts (``/proc/<pid>/clear_refs``), so even a short-lived peak between samples counts.
Workers that are this process's children (a cluster daskgpu started, whose pids its
:class:`~daskgpu.clusters.session.Session` holds) are read and reset from here through ``/proc``,
without a message to them; others are asked.
Elsewhere, and for device memory, the samples of distributed's own system monitor taken during
the run (every 0.5 s, plus one at its end).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor

import dask.config
import dask.utils


def _reset_high_water_mark(pid: int | str = "self") -> bool:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")  # 5: reset the peak resident set size to the current one
        return True
    except OSError:
        return False


def _high_water_mark(pid: int | str = "self") -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
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
    host = _high_water_mark()
    if host is not None and "gpu_memory_used" not in monitor.quantities:
        return {"host_peak_bytes": host, "pid": os.getpid()}  # no samples needed
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

    out = {"host_peak_bytes": host if host is not None else int(max(during("memory"), default=0)),
           "pid": None}  # device memory comes from samples: ask again next time
    device = during("gpu_memory_used")
    if device:
        out["device_peak_bytes"] = int(max(device))
    return out


def start(session) -> float:
    """Mark the start of a run on every worker of a Session; pass the result to :func:`peaks`.

    Local workers are reset from here; otherwise the reset is sent without waiting for an
    answer (it travels ahead of the run's tasks), and measuring costs one round trip, at the end.
    """
    began = time.time()
    local = session.worker_pids
    if not (local and all(_reset_high_water_mark(pid) for pid in local.values())):
        # A worker lost as the run starts (killed: too much memory) has no mark to reset; the
        # run's fault watch says what happened to it.
        session.client.run(_reset, wait=False, on_error="ignore")
    return began


def peaks(session, since: float) -> dict:
    """Peak host (and device) memory of every worker since :func:`start`, by address."""
    local = session.worker_pids
    if local:
        found = {address: _high_water_mark(pid) for address, pid in local.items()}
        if all(v is not None for v in found.values()):
            return {address: {"host_peak_bytes": v} for address, v in found.items()}
    # A lost worker has no peak to give.
    answers = session.client.run(_peaks, since, on_error="ignore")
    pids = {address: answer.pop("pid", None) for address, answer in answers.items()}
    _remember_children(session, pids)
    return answers


def _remember_children(session, pids: dict) -> None:
    """Keep the pids of workers that are this process's children (a nanny restarted one)."""
    import psutil

    try:
        children = {p.pid for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return
    session.worker_pids.clear()
    if pids and all(pid in children for pid in pids.values()):
        session.worker_pids.update(pids)


def peaks_in_background(session, since: float) -> Future:
    """:func:`peaks`, asked from a thread; the caller goes on (verification, the worker list).

    Returns a ``concurrent.futures.Future`` of the dict.
    """
    pool = ThreadPoolExecutor(1, thread_name_prefix="daskgpu-memory-peaks")
    try:
        return pool.submit(peaks, session, since)
    finally:
        pool.shutdown(wait=False)
