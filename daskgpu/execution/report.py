"""Everything daskgpu shows: tables for people, JSON for programs, plots.

Runs (:class:`~daskgpu.execution.runner.RunResult`), benchmarks
(:class:`~daskgpu.execution.bench.BenchResult`), the pipeline list and the device inventory. Nothing
here computes.
"""

from __future__ import annotations

import json
import math
import statistics
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from daskgpu.clusters.devices import Device, Inventory
    from daskgpu.execution.bench import BenchResult
    from daskgpu.execution.runner import RunResult


def _gib(nbytes) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes else "-"


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _value(value) -> str:
    import numpy as np  # here, not at the top: `list` and `--help` do without numpy

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
    t.add_row("verified", verdict_line(result.verified, result.verify, result.verification))
    timings = result.timings
    if timings.get("import_s") is not None:
        t.add_row("import", _seconds(timings["import_s"]))
    t.add_row("cluster start", _seconds(timings.get("cluster_start_s")))
    t.add_row("build", _seconds(timings.get("build_s")))
    t.add_row("compute", _seconds(timings.get("compute_s")))
    if timings.get("output_s") is not None and result.params.get("output"):
        t.add_row("output", _seconds(timings.get("output_s")))
    t.add_row("verify", _seconds(timings.get("verify_s")))
    t.add_row("total", _seconds(timings.get("total_s")))
    if timings.get("close_s") is not None:
        t.add_row("close", _seconds(timings["close_s"]))
        t.add_row("whole process", _seconds(timings.get("process_s")))
    bps = result.throughput.get("bytes_per_s")
    eps = result.throughput.get("elements_per_s")
    if bps:
        kind = result.throughput.get("bytes", "read")
        t.add_row("throughput", f"{eps:.3g} elements/s, {bps / 1e9:.2f} GB/s {kind}")
    if result.throughput.get("flop_per_s"):
        t.add_row("GFLOP/s", f"{result.throughput['flop_per_s'] / 1e9:.1f}")
    t.add_row("dashboard", result.dashboard or "off")
    return t


def show(result: RunResult, console: Console | None = None) -> None:
    """Print the table of a run."""
    (console or Console()).print(table(result))


def json_ready(value):
    """JSON-ready: NumPy to Python, tuples to lists, keys to text, non-finite numbers to None."""
    import numpy as np

    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def as_json(result: RunResult) -> str:
    """The run as one JSON object (non-finite numbers become null)."""
    return json.dumps(json_ready(result.as_dict()), allow_nan=False, default=str)


def write_bench_json(result: BenchResult, path: str) -> None:
    """Write every measurement, the hardware and the versions to ``path`` (atomically)."""
    from daskgpu.toolkit import output

    with output.atomic(path) as temporary, open(temporary, "w") as f:
        json.dump(result.as_dict(), f, indent=2, allow_nan=False, default=str)
        f.write("\n")


def write_bench_plot(result: BenchResult, path: str) -> None:
    """Draw throughput and parallel efficiency against device count to a PNG (Agg backend).

    The baseline's throughput is a horizontal line on the throughput panel.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    from daskgpu.toolkit import output

    ms = result.measurements
    x = [m.devices for m in ms]
    unit = "GPUs" if result.backend == "gpu" else "CPU workers"
    fig = Figure(figsize=(10, 4), dpi=100, layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot(x, [m.elements_per_s or 0 for m in ms], "o-", label=result.pipeline)
    base = [m.baseline_elements_per_s for m in ms if m.baseline_elements_per_s]
    if base:
        left.axhline(statistics.median(base), color="tab:red", linestyle="--",
                     label="baseline (one process, no Dask)")
    left.set_xlabel(unit)
    left.set_ylabel("elements / s")
    left.set_title(f"{result.pipeline}: throughput ({result.mode})")
    left.legend()
    right.plot(x, [m.efficiency if m.efficiency is not None else 0 for m in ms], "o-",
               label="efficiency")
    right.axhline(1.0, color="gray", linestyle=":", label="ideal")
    right.set_ylim(bottom=0)
    right.set_xlabel(unit)
    right.set_ylabel("parallel efficiency")
    right.set_title("weak scaling: t(1)/t(k)" if result.mode == "weak" else
                    "strong scaling: t(1) / (k t(k))")
    right.legend()
    for ax in (left, right):
        ax.set_xticks(x)
        ax.grid(True, alpha=0.3)
    with output.atomic(path) as temporary:
        fig.savefig(temporary, format="png")


def verdict_line(verified: bool | None, depth: str, detail: str) -> str:
    """``yes (fast): ...``, ``NO (full): ...`` or ``not verified (--verify off)``, marked up."""
    if verified is None:
        return f"[yellow]{escape(detail)}[/yellow]"
    verdict = "[green]yes[/green]" if verified else "[red]NO[/red]"
    return f"{verdict} ({escape(depth)}): {escape(detail)}"


def bench_table(result: BenchResult) -> Table:
    """A rich table of a benchmark: one row per cluster size."""
    unit = "GPUs" if result.backend == "gpu" else "workers"
    checked = ("timed without a check (--verify off)" if result.verify == "off"
               else f"each run verified ({result.verify})")
    t = Table(title=f"daskgpu bench: {result.pipeline} ({result.backend}, {result.mode}, "
              f"{result.repeat} runs after {result.warmup} warm-up; {checked})",
              title_justify="left")
    for col in (unit, "size", "min s", "median s", "max s", "elements/s", "GB/s", "baseline s",
                "baseline/median", "speedup", "efficiency", "verified"):
        t.add_column(col, justify="right")

    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    for m in result.measurements:
        t.add_row(
            str(m.devices), num(m.elements, ",d"), num(m.min_s, ".3f"), num(m.median_s, ".3f"),
            num(m.max_s, ".3f"), num(m.elements_per_s, ".3g"),
            num(m.bytes_per_s and m.bytes_per_s / 1e9, ".2f"), num(m.baseline_s, ".3f"),
            num(m.ratio, ".2f") + ("x" if m.ratio is not None else ""),
            num(m.speedup, ".2f"), num(m.efficiency, ".2f"),
            ("[yellow]off[/yellow]" if m.verified is None else
             "[green]yes[/green]" if m.verified else "[red]NO[/red]"),
        )
    return t


def pipelines_table(summaries: dict[str, str]) -> Table:
    """Name and one-line summary of each pipeline (``registry.summaries()``)."""
    t = Table(show_header=True)
    t.add_column("pipeline")
    t.add_column("summary")
    for name, summary in summaries.items():
        t.add_row(name, summary)
    return t


def pipelines_json(summaries: dict[str, str]) -> str:
    """Name and summary of each pipeline, as a JSON list."""
    return json.dumps([{"name": n, "summary": s} for n, s in summaries.items()])


def devices_table(inv: Inventory) -> Table:
    """One row per GPU: index, name, UUID, memory, PCI bus id and MIG instances."""
    t = Table(show_header=True)
    for col in ("index", "name", "uuid", "memory total", "memory free", "pci bus id", "MIG"):
        t.add_column(col)
    for d in inv.devices:
        migs = "\n".join(f"{m.label} {m.uuid} {m.memory_total / 2**30:.1f} GiB" for m in d.migs)
        t.add_row(
            str(d.index), d.name, d.uuid, f"{d.memory_total / 2**30:.1f} GiB",
            f"{d.memory_free / 2**30:.1f} GiB", d.pci_bus_id, migs or "-",
        )
    return t


def devices_json(inv: Inventory, cuda_visible_devices: str | None) -> str:
    """The inventory as one JSON object, with the reason where there is no GPU."""
    return json.dumps({"devices": [d.as_dict() for d in inv.devices], "reason": inv.reason,
                       "cuda_visible_devices": cuda_visible_devices})


def visible_line(cuda_visible_devices: str, shown: list[Device]) -> str:
    """What ``--gpus`` positions mean under a set ``CUDA_VISIBLE_DEVICES``."""
    meaning = ", ".join(f"{i} = GPU {d.label} ({d.uuid})" for i, d in enumerate(shown))
    return (f"CUDA_VISIBLE_DEVICES={cuda_visible_devices}: --gpus "
            f"{meaning or 'has no GPU to choose'}")


def print_wide(t: Table, console: Console | None = None) -> None:
    """Print a table; piped, at full width, so that no number, UUID or bus id is cut."""
    console = console or Console()
    if not console.is_terminal:
        wide = console.measure(t, options=console.options.update_width(10_000)).maximum
        console = Console(width=max(console.width, wide))
    console.print(t)
