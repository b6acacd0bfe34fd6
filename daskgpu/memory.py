"""Per-worker peak memory of one run: host memory for every worker, device memory for GPU ones.

Host: on Linux, the kernel's own high-water mark of each worker process (``VmHWM``), reset when
the run starts (``/proc/self/clear_refs``), so even a short-lived peak between samples counts.
Elsewhere, and for device memory, the samples of distributed's own system monitor (every
0.5 s, plus one at the start and one at the end of the run).
"""

from __future__ import annotations

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


def _start(dask_worker=None) -> dict:
    monitor = dask_worker.monitor
    monitor.update()
    return {"sample": monitor.count - 1, "hwm": _reset_high_water_mark()}


def _peaks(marks: dict, dask_worker=None) -> dict:
    monitor = dask_worker.monitor
    monitor.update()
    mark = marks.get(dask_worker.address, {"sample": 0, "hwm": False})
    samples = monitor.range_query(max(0, mark["sample"]))
    sampled = [v for v in samples.get("memory", []) if v is not None]
    host = _high_water_mark() if mark["hwm"] else None
    out = {"host_peak_bytes": host if host is not None else int(max(sampled, default=0))}
    device = [v for v in samples.get("gpu_memory_used", []) if v is not None]
    if device:
        out["device_peak_bytes"] = int(max(device))
    return out


def start(client) -> dict:
    """Mark the start of a run on every worker; pass the result to :func:`peaks`."""
    return client.run(_start)


def peaks(client, marks: dict) -> dict:
    """Peak host (and device) memory of every worker since :func:`start`, by address."""
    return client.run(_peaks, marks)
