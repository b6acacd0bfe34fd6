"""Show a RunResult: a table for people, JSON for programs."""

from __future__ import annotations

import json
import math

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from daskgpu.runner import RunResult


def _gib(nbytes) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes else "-"


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _value(value) -> str:
    if isinstance(value, dict):
        return "\n".join(f"{key}: {_value(v)}" for key, v in value.items())
    if isinstance(value, (list, tuple)) and len(value) > 8:
        value = np.asarray(value)
    if isinstance(value, np.ndarray) and value.size > 8:
        return f"{value.size} values (see --json)"
    if isinstance(value, (float, np.floating)):
        return f"{value:.10g}"
    if isinstance(value, np.ndarray):
        return np.array2string(value, precision=6, separator=", ")
    return str(value)


def _device_lines(devices: list[dict]) -> str:
    """One line per device: index, name, UUID, memory."""
    return "\n".join(
        f"{d.get('index')}: {d['name']} {d['uuid']} ({_gib(d['memory_total'])})" for d in devices
    )


def _worker_lines(workers: list[dict]) -> str:
    threads = sum(w.get("nthreads") or 0 for w in workers)
    memory = sum(w.get("memory_limit") or 0 for w in workers)
    return f"{len(workers)} workers, {threads} threads, {_gib(memory)} memory limit"


def _peak_lines(workers: list[dict]) -> str:
    lines = []
    for w in workers:
        line = f"{w['name']}: host {_gib(w.get('host_peak_bytes'))}"
        if w.get("device_peak_bytes") is not None:
            line += f", device {_gib(w['device_peak_bytes'])}"
        lines.append(line)
    return "\n".join(lines)


def table(result: RunResult) -> Table:
    """A two-column rich table of a run."""
    t = Table(title=f"daskgpu run: {result.pipeline}", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("pipeline", result.pipeline)
    t.add_row("backend", result.backend)
    if result.devices:
        t.add_row("devices", _device_lines(result.devices))
    t.add_row("workers", _worker_lines(result.workers))
    if any("host_peak_bytes" in w for w in result.workers):
        t.add_row("peak memory", _peak_lines(result.workers))
    for key, item in result.data.items():
        if isinstance(item, (list, tuple)):
            item = (" x " if key in ("shape", "chunks") else " to ").join(map(str, item))
        t.add_row(key, escape(str(item)))  # paths may hold "[...]"
    t.add_row("value", _value(result.value))
    verdict = "[green]yes[/green]" if result.verified else "[red]NO[/red]"
    t.add_row("verified", f"{verdict}: {escape(result.verification)}")
    timings = result.timings
    t.add_row("cluster start", _seconds(timings.get("cluster_start_s")))
    t.add_row("build", _seconds(timings.get("build_s")))
    t.add_row("compute", _seconds(timings.get("compute_s")))
    t.add_row("total", _seconds(timings.get("total_s")))
    bps = result.throughput.get("bytes_per_s")
    eps = result.throughput.get("elements_per_s")
    if bps:
        t.add_row("throughput", f"{bps / 1e9:.2f} GB/s, {eps:.3g} elements/s")
    t.add_row("dashboard", result.dashboard or "off")
    return t


def show(result: RunResult, console: Console | None = None) -> None:
    """Print the table of a run."""
    (console or Console()).print(table(result))


def _finite(value):
    """JSON-ready: NumPy to Python, tuples to lists, non-finite numbers to None."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def as_json(result: RunResult) -> str:
    """The run as one JSON object (non-finite numbers become null)."""
    return json.dumps(_finite(result.as_dict()), allow_nan=False, default=str)
