"""Benchmark a pipeline: repeated runs on one cluster, its baseline, and scaling sweeps.

``bench(name, params, cluster_options, repeat, warmup)`` runs a pipeline ``warmup`` times
untimed and ``repeat`` times timed on one cluster, and times the pipeline's ``baseline`` (the
same computation in one process without Dask) in the same session. ``sweep=True`` repeats that
for 1, 2, ..., N devices (GPUs, or single-threaded CPU workers), one cluster after another
(strong scaling); ``weak=True`` also grows the problem with the device count.

Only workers touch a GPU: a GPU baseline runs on one worker through ``client.submit``.
"""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata

import dask.system

from daskgpu.clusters import session as sessions
from daskgpu.clusters.plan import plan
from daskgpu.errors import ParameterError, RunFailed, pipeline_code
from daskgpu.execution import answers, report, runner
from daskgpu.toolkit import backends, registry
from daskgpu.toolkit.registry import Resolved
from daskgpu.verification import depths

SIZE_PARAMS = ("size", "values", "rows")  # the parameter --weak scales, first found
LIBRARIES = ("dask", "distributed", "numpy", "pandas", "numba", "daskgpu", "matplotlib",
             "cupy", "cudf", "dask-cuda")
DISTRIBUTIONS = {"cupy": ("cupy", "cupy-cuda13x", "cupy-cuda12x"),
                 "cudf": ("cudf", "cudf-cu13", "cudf-cu12")}


class BaselineDisagrees(RunFailed):
    """A baseline that answered differently from the run it is compared with (exit code 1)."""


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
    verified: bool | None = True
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
    verify: str = depths.DEFAULT

    @property
    def verified(self) -> bool:
        """True when no timed run failed its check (runs timed with ``verify="off"`` had none)."""
        return all(m.verified is not False for m in self.measurements)

    def as_dict(self) -> dict:
        """A JSON-ready dict."""
        return report.json_ready(asdict(self))


def versions() -> dict:
    """Installed versions of the libraries a measurement depends on (None where absent).

    A GPU library counts under any of its CUDA-specific distributions (``cupy-cuda13x``, ...).
    """
    import daskgpu

    out = {name: _first_installed(DISTRIBUTIONS.get(name, (name,))) for name in LIBRARIES}
    out["daskgpu"] = out["daskgpu"] or daskgpu.__version__
    return out


def _first_installed(distributions: tuple[str, ...]) -> str | None:
    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def hardware(gpus: list[str]) -> dict:
    """CPU count, platform, and the GPU names of the runs' devices."""
    return {"cpu_count": dask.system.CPU_COUNT, "machine": platform.machine(),
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


def _cluster_sizes(cluster_options: dict) -> list[dict]:
    """The options of each sweep step: 1, 2, ..., N devices (GPUs or CPU workers)."""
    first = plan(**cluster_options)
    if first.kind == "external":
        raise ParameterError("--sweep starts its own clusters: it cannot use an existing "
                             "scheduler (--scheduler-address/--scheduler-file)")
    if first.kind == "gpu":
        uuids = [d.uuid for d in first.devices]
        return [{**cluster_options, "gpus": ",".join(uuids[:k])}
                for k in range(1, len(uuids) + 1)]
    n = cluster_options.get("workers") or dask.system.CPU_COUNT
    threads = cluster_options.get("threads_per_worker") or 1
    return [{**cluster_options, "cpu": True, "gpus": None, "workers": k,
             "threads_per_worker": threads} for k in range(1, n + 1)]


def _baseline(spec, session, resolved: Resolved, times: int, value,
              rtol: float = answers.RTOL) -> float | None:
    """Median seconds of ``times`` baseline runs (here on CPU, on one worker on GPU).

    Answers agree within the relative tolerance ``rtol`` (:func:`answers.tolerance`).

    Raises
    ------
    BaselineDisagrees
        When a baseline's answer is not the run's ``value``: then there is no ratio to report.
    """
    if spec.baseline is None:
        return None
    runs = []
    for _ in range(max(1, times)):
        with pipeline_code(spec.name, "baseline"):
            seconds, answer = _baseline_once(spec, session, resolved)
        wrong = answers.difference(value, answer, rtol=rtol)
        if wrong:
            raise BaselineDisagrees(
                f"{spec.name}: the baseline's answer differs from the run's ({wrong}; relative "
                f"tolerance {rtol:.3g}); no ratio is reported for different work"
            )
        runs.append(float(seconds))
    return statistics.median(runs)


def _baseline_once(spec, session, resolved: Resolved) -> tuple:
    """One baseline run: here on CPU, on one worker on GPU (never in the client)."""
    if not resolved.backend.is_gpu:
        return spec.baseline(resolved)
    client = session.client
    worker = sorted(backends.scheduler_workers(client))[0]
    future = client.submit(spec.baseline, resolved, workers=[worker], pure=False,
                           allow_other_workers=False)
    try:
        return future.result()
    finally:
        future.release()


def _measure(spec, session, resolved: Resolved, repeat: int, warmup: int, baseline_runs: int,
             devices: int, progress: Callable[[str], None], verify: str) -> Measurement:
    for i in range(warmup):
        progress(f"{spec.name} on {devices} device(s): warm-up {i + 1}/{warmup}")
        runner.execute(spec, session, resolved, verify=verify)
    results = []
    for i in range(repeat):
        progress(f"{spec.name} on {devices} device(s): run {i + 1}/{repeat}")
        results.append(runner.execute(spec, session, resolved, verify=verify))
    times = [r.timings["compute_s"] for r in results]
    median = statistics.median(times)
    last = results[-1]
    progress(f"{spec.name}: baseline ({baseline_runs} run(s))")
    # the same values, seed included; its answer must be the run's, within what the data's
    # dtype and the length of the reductions allow
    rtol = answers.tolerance(last.data.get("dtype"), last.elements)
    base = _baseline(spec, session, resolved, baseline_runs, last.value, rtol)
    elements, nbytes = last.elements, last.nbytes
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
        verified=None if verify == "off" else all(r.verified for r in results),
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
    verify: str = depths.DEFAULT,
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
    verify : {"fast", "full", "off"}
        How every timed run checks its answer (``off``: timed without a check, and said so).

    Returns
    -------
    BenchResult

    Raises
    ------
    ParameterError, ClusterError
        For bad settings, before any cluster starts where it can tell.
    """
    validate(repeat, warmup, sweep, weak)
    runner.check_depth(verify)
    spec = registry.get(name)
    params = dict(params)
    overwrite = bool(params.pop("overwrite", overwrite))
    size_name = _size_param(spec) if weak else None
    if weak and params.get(size_name) is None:
        raise ParameterError(f"--weak needs --{size_name.replace('_', '-')} N: the size on "
                             "one device, which the sweep scales with the device count")
    steps = _cluster_sizes(cluster_options) if sweep else [cluster_options]
    plans = [plan(**step) for step in steps]
    # Fail on a bad value, or an existing output, before anything starts (where the plan
    # knows the backend: an existing scheduler's workers are asked once connected).
    first = None
    if plans[0].backend is not None:
        first = spec.resolve_for_run(plans[0].backend, overwrite, **params)
    note = progress or (lambda _text: None)
    baseline_runs = baseline_runs or min(repeat, 3)
    measurements: list[Measurement] = []
    notices: list[str] = []
    backend_name = None
    dims = 1
    for step_plan in plans:
        devices = len(step_plan.devices) if step_plan.kind == "gpu" else (step_plan.n_workers or 0)
        run_params = dict(params)
        if weak and measurements:
            k = devices / measurements[0].devices
            run_params[size_name] = max(1, round(params[size_name] * k ** (1.0 / dims)))
        with sessions.start(step_plan, warm_up=spec.name) as session:
            notices.extend(n for n in session.notices if n not in notices)
            if session.kind == "external":
                devices = len(backends.scheduler_workers(session.client))
            resolved = first if first is not None and not measurements else None
            if resolved is None:
                resolved = spec.resolve_for_run(session.backend, overwrite or bool(measurements),
                                                **run_params)
            m = _measure(spec, session, resolved, repeat, warmup, baseline_runs, devices, note,
                         verify)
            backend_name = backend_name or session.backend.name
        if weak and not measurements:
            dims = _dimensions(m)
        measurements.append(m)
    _scaling(measurements, sweep, weak)
    gpus = sorted({g for m in measurements for g in m.gpus if g})
    mode = "weak" if weak else "strong" if sweep else "single"
    return BenchResult(spec.name, backend_name or "cpu", mode, repeat, warmup, measurements,
                       hardware(gpus), versions(), notices, verify)


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
