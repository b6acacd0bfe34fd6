"""Benchmark a pipeline: repeated runs on one cluster, its baseline, and scaling sweeps.

``bench(name, params, cluster_options, repeat, warmup)`` runs a pipeline ``warmup`` times
untimed and ``repeat`` times timed on one cluster, and times the pipeline's ``baseline`` (the
same computation in one process without Dask) in the same session. ``sweep=True`` repeats that
for 1, 2, ..., N devices (GPUs, or single-threaded CPU workers), one cluster after another
(strong scaling); ``weak=True`` also grows the problem with the device count.

Only workers touch a GPU: a GPU baseline runs on one worker through ``client.submit``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

from daskgpu import backends, clusters, registry, runner
from daskgpu.errors import ParameterError

SIZE_PARAMS = ("size", "rows")  # the parameter --weak scales, first found
LIBRARIES = ("dask", "distributed", "numpy", "pandas", "numba", "daskgpu", "matplotlib",
             "cupy", "cudf", "dask-cuda")


def time_call(backend, fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` takes, waiting for the GPU's queued work where ``backend`` is a GPU one.

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


@dataclass
class Measurement:
    """One cluster size: the timed runs, their summary, throughput and the baseline."""

    devices: int
    params: dict
    elements: int | None
    compute_s: list[float]
    min_s: float
    median_s: float
    max_s: float
    elements_per_s: float | None
    bytes_per_s: float | None
    baseline_s: float | None
    baseline_elements_per_s: float | None
    ratio: float | None
    speedup: float | None = None
    efficiency: float | None = None
    verified: bool = True
    gpus: list[str] = field(default_factory=list)
    shape: list[int] | None = None


@dataclass
class BenchResult:
    """What ``bench`` measured; ``as_dict()`` is the ``--json`` document."""

    pipeline: str
    backend: str
    mode: str  # "single", "strong" or "weak"
    repeat: int
    warmup: int
    measurements: list[Measurement]
    hardware: dict
    versions: dict
    notices: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        """True when every timed run checked its answer."""
        return all(m.verified for m in self.measurements)

    def as_dict(self) -> dict:
        """A JSON-ready dict."""
        return _finite(asdict(self))


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # NumPy scalars
        return _finite(value.item())
    return value


def versions() -> dict:
    """Installed versions of the libraries a measurement depends on (None where absent)."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name if name != "cupy" else _cupy_distribution())
        except metadata.PackageNotFoundError:
            out[name] = None
    if out["daskgpu"] is None:
        import daskgpu

        out["daskgpu"] = daskgpu.__version__
    return out


def _cupy_distribution() -> str:
    for name in ("cupy", "cupy-cuda12x", "cupy-cuda11x"):
        try:
            metadata.version(name)
            return name
        except metadata.PackageNotFoundError:
            continue
    return "cupy"


def hardware(gpus: list[str]) -> dict:
    """CPU count, platform, and the GPU names of the runs' devices."""
    return {"cpu_count": os.cpu_count(), "machine": platform.machine(),
            "processor": platform.processor() or None, "python": platform.python_version(),
            "gpus": gpus}


def validate(repeat: int, warmup: int, sweep: bool, weak: bool) -> None:
    """Refuse impossible bench settings before anything starts.

    Raises
    ------
    ParameterError
        For ``repeat < 1``, ``warmup < 0`` or ``weak`` without ``sweep``.
    """
    if repeat < 1:
        raise ParameterError(f"--repeat {repeat}: must be 1 or more")
    if warmup < 0:
        raise ParameterError(f"--warmup {warmup}: must be 0 or more")
    if weak and not sweep:
        raise ParameterError("--weak needs --sweep (weak scaling grows the problem with the "
                             "device count of a sweep)")


def _size_param(spec: registry.Pipeline) -> str:
    names = [p.name for p in spec.params]
    for name in SIZE_PARAMS:
        if name in names:
            return name
    raise ParameterError(f"--weak: {spec.name} has no size parameter ({', '.join(SIZE_PARAMS)})")


def _cluster_sizes(cluster_options: dict) -> tuple[str, list[dict]]:
    """The kind of cluster and the options of each sweep step: 1, 2, ..., N devices."""
    first = clusters.plan(**cluster_options)
    if first.kind == "external":
        raise ParameterError("--sweep starts its own clusters: it cannot use an existing "
                             "scheduler (--scheduler-address/--scheduler-file)")
    if first.kind == "gpu":
        uuids = [d.uuid for d in first.devices]
        return "gpu", [{**cluster_options, "gpus": ",".join(uuids[:k])}
                       for k in range(1, len(uuids) + 1)]
    n = cluster_options.get("workers") or os.cpu_count() or 1
    threads = cluster_options.get("threads_per_worker") or 1
    return "cpu", [{**cluster_options, "cpu": True, "gpus": None, "workers": k,
                    "threads_per_worker": threads} for k in range(1, n + 1)]


def _baseline(spec, client, backend, params: dict, times: int) -> float | None:
    """Median seconds of ``times`` baseline runs: here on CPU, on one worker on GPU."""
    if spec.baseline is None:
        return None
    runs = []
    for _ in range(max(1, times)):
        if backend.is_gpu:
            worker = sorted(backends.scheduler_workers(client))[0]
            future = client.submit(spec.baseline, backend, **params, workers=[worker],
                                   pure=False, allow_other_workers=False)
            runs.append(float(future.result()))
            future.release()
        else:
            runs.append(float(spec.baseline(backend, **params)))
    return statistics.median(runs)


def _measure(spec, client, params: dict, repeat: int, warmup: int, baseline_runs: int,
             devices: int, progress: Callable[[str], None]) -> Measurement:
    backend = backends.detect(client)
    for i in range(warmup):
        progress(f"{spec.name} on {devices} device(s): warm-up {i + 1}/{warmup}")
        runner.run(spec, client, backend=backend, overwrite=True, **params)
    results = []
    for i in range(repeat):
        progress(f"{spec.name} on {devices} device(s): run {i + 1}/{repeat}")
        results.append(runner.run(spec, client, backend=backend, overwrite=True, **params))
    times = [r.timings["compute_s"] for r in results]
    median = statistics.median(times)
    last = results[-1]
    eps = last.throughput.get("elements_per_s")
    elements = round(eps * last.timings["compute_s"]) if eps else None
    nbytes = (last.throughput.get("bytes_per_s") or 0) * last.timings["compute_s"]
    # The baseline on the same data: the run's own seed where the pipeline drew one.
    same = dict(last.params)
    if same.get("seed", 0) is None and last.data.get("seed") is not None:
        same["seed"] = last.data["seed"]
    progress(f"{spec.name}: baseline ({baseline_runs} run(s))")
    base = _baseline(spec, client, backend, same, baseline_runs)
    return Measurement(
        devices=devices,
        params=dict(last.params),
        elements=elements,
        compute_s=times,
        min_s=min(times),
        median_s=median,
        max_s=max(times),
        elements_per_s=elements / median if elements and median > 0 else None,
        bytes_per_s=nbytes / median if nbytes and median > 0 else None,
        baseline_s=base,
        baseline_elements_per_s=elements / base if elements and base else None,
        ratio=base / median if base is not None and median > 0 else None,
        verified=all(r.verified for r in results),
        gpus=[d.get("name") for d in last.devices],
        shape=list(last.data["shape"]) if "shape" in last.data else None,
    )


def bench(
    name: str,
    params: dict,
    cluster_options: dict,
    repeat: int = 5,
    warmup: int = 1,
    sweep: bool = False,
    weak: bool = False,
    baseline_runs: int | None = None,
    progress: Callable[[str], None] | None = None,
    overwrite: bool = False,
) -> BenchResult:
    """Run a pipeline ``repeat`` times after ``warmup`` runs, time its baseline, and summarise.

    Parameters
    ----------
    name : str
        A registered pipeline.
    params : dict
        Its parameters (unset ones take their defaults).
    cluster_options : dict
        Keyword arguments of :func:`daskgpu.clusters.plan` (``gpus``, ``cpu``, ``workers``...).
    repeat, warmup : int
        Timed runs (at least 1) and untimed ones before them, on each cluster.
    sweep : bool
        Strong scaling: 1, 2, ..., N devices (the first k selected GPUs, or k CPU workers of
        one thread; N defaults to the CPU count), reporting speedup t(1)/t(k) and efficiency
        speedup/k.
    weak : bool
        With ``sweep``: scale the size parameter so that the elements grow with k; efficiency
        is t(1)/t(k) and speedup k t(1)/t(k).
    baseline_runs : int, optional
        Baseline runs, median taken (default: min(repeat, 3)).
    progress : callable, optional
        Called with a one-line note before each step.
    overwrite : bool
        Whether an existing output (a pipeline's ``output``) may be replaced; checked once,
        before any cluster starts (``params`` may carry it too, as the command line's
        ``--overwrite``). The repeats then replace what the first run wrote.

    Returns
    -------
    BenchResult

    Raises
    ------
    ParameterError, ClusterError
        For bad settings, before any cluster starts where it can tell.
    """
    validate(repeat, warmup, sweep, weak)
    spec = registry.get(name)
    params = dict(params)
    overwrite = bool(params.pop("overwrite", overwrite))
    # fail on a bad value, or an existing output, before anything starts
    spec.check_outputs(spec.resolve(**params), overwrite=overwrite)
    note = progress or (lambda _text: None)
    baseline_runs = baseline_runs or min(repeat, 3)
    size_name = _size_param(spec) if weak else None
    if weak and params.get(size_name) is None:
        raise ParameterError(f"--weak needs --{size_name.replace('_', '-')} N: the size on one "
                             "device, which the sweep scales with the device count")
    if sweep:
        kind, steps = _cluster_sizes(cluster_options)
    else:
        steps = [cluster_options]
    measurements: list[Measurement] = []
    notices: list[str] = []
    backend_name = None
    dims = 1
    for step in steps:
        plan = clusters.plan(**step)
        notices.extend(n for n in plan.notices if n not in notices)
        devices = len(plan.devices) if plan.kind == "gpu" else (plan.n_workers or 0)
        run_params = dict(params)
        if weak and measurements:
            k = devices / measurements[0].devices
            run_params[size_name] = max(1, round(params[size_name] * k ** (1.0 / dims)))
        with clusters.start(plan) as client:
            if plan.kind == "external":
                devices = len(backends.scheduler_workers(client))
            m = _measure(spec, client, run_params, repeat, warmup, baseline_runs, devices, note)
            backend_name = backend_name or backends.detect(client).name
        if weak and not measurements:
            dims = _dimensions(m)
        measurements.append(m)
    _scaling(measurements, sweep, weak)
    gpus = sorted({g for m in measurements for g in m.gpus if g})
    mode = "weak" if weak else "strong" if sweep else "single"
    return BenchResult(spec.name, backend_name or "cpu", mode, repeat, warmup, measurements,
                       hardware(gpus), versions(), notices)


def _dimensions(m: Measurement) -> int:
    """How the elements grow with the size parameter: 2 for an n x n array, else 1."""
    return len(m.shape) if m.shape else 1


def _scaling(measurements: list[Measurement], sweep: bool, weak: bool) -> None:
    if not measurements:
        return
    t1 = measurements[0].median_s
    d1 = measurements[0].devices or 1
    for m in measurements:
        if m.median_s <= 0:
            continue
        k = (m.devices or 1) / d1
        if weak:
            m.efficiency = t1 / m.median_s
            m.speedup = k * m.efficiency
        else:
            m.speedup = t1 / m.median_s
            m.efficiency = m.speedup / k


def write_json(result: BenchResult, path: str) -> None:
    """Write every measurement, the hardware and the versions to ``path`` (atomically)."""
    from daskgpu import output

    with output.atomic(path) as temporary, open(temporary, "w") as f:
        json.dump(result.as_dict(), f, indent=2, allow_nan=False, default=str)
        f.write("\n")


def write_plot(result: BenchResult, path: str) -> None:
    """Draw throughput and parallel efficiency against device count to a PNG (Agg backend).

    The baseline's throughput is a horizontal line on the throughput panel.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    from daskgpu import output

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


def table(result: BenchResult):
    """A rich table: one row per cluster size."""
    from rich.table import Table

    unit = "GPUs" if result.backend == "gpu" else "workers"
    t = Table(title=f"daskgpu bench: {result.pipeline} ({result.backend}, {result.mode}, "
              f"{result.repeat} runs after {result.warmup} warm-up)", title_justify="left")
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
            "[green]yes[/green]" if m.verified else "[red]NO[/red]",
        )
    return t
