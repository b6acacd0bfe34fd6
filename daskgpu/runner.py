"""Run a pipeline on a client: build, compute (with a progress bar if asked), time, verify."""

from __future__ import annotations

import atexit
import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import dask

from daskgpu import backends, clusters, failures, memory, output, registry
from daskgpu.backends import Backend
from daskgpu.errors import ClusterError
from daskgpu.progress import ProgressBar
from daskgpu.registry import Pipeline


@dataclass
class RunResult:
    """Everything a run produced and measured; ``as_dict()`` is the ``--json`` document."""

    pipeline: str
    backend: str
    devices: list[dict]
    workers: list[dict]
    params: dict
    data: dict
    value: Any
    verified: bool
    verification: str
    timings: dict
    throughput: dict
    dashboard: str | None
    notices: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)


def _workers(client, pending_peaks) -> list[dict]:
    info = backends.scheduler_workers(client)
    peaks = pending_peaks.result()
    out = []
    for address, w in sorted(info.items()):
        out.append(
            {
                "address": address,
                "name": str(w.get("name")),
                "nthreads": w.get("nthreads"),
                "memory_limit": w.get("memory_limit"),
                **peaks.get(address, {}),
            }
        )
    return out


def _default_client():
    from distributed import get_client

    try:
        return get_client()
    except ValueError:
        raise ClusterError(
            "no cluster to run on: use `with daskgpu.cluster() as client:` and pass client="
        ) from None


def _compute(client, collection, backend: Backend, bar: ProgressBar | None):
    """Compute one collection, or a dict of them in one graph (shared parts computed once)."""
    named = isinstance(collection, dict)
    futures = client.compute(list(collection.values()) if named else [collection])
    if backend.is_gpu:
        # Move results to host memory on the workers: unpickling a device array here would
        # create a CUDA context in the client.
        futures = [client.submit(backends.to_host, f, pure=False) for f in futures]
    try:
        if bar is not None:
            bar.start(futures)
        # One result() per future: an interrupted client.gather leaves an asyncio task whose
        # exception is reported, with a traceback, at exit.
        results = [backends.to_host(r) for r in failures.results(client, futures)]
    finally:
        for future in futures:
            future.release()
    return dict(zip(collection, results, strict=True)) if named else results[0]


def run(
    pipeline: str | Pipeline,
    client=None,
    backend: Backend | None = None,
    progress: bool = False,
    report: str | None = None,
    overwrite: bool = False,
    **params: Any,
) -> RunResult:
    """Build, compute and verify a pipeline on a cluster.

    Parameters
    ----------
    pipeline : str or Pipeline
        A registered name such as ``"mean-pipeline"``.
    client : distributed.Client, optional
        Where to compute (default: the current client).
    backend : Backend, optional
        Default: asked of the client's workers.
    progress : bool
        Show Dask's progress bar while computing (for terminals).
    report : str, optional
        Save Dask's performance report of the computation (task stream, worker profile,
        bandwidth) to this self-contained HTML file.
    overwrite : bool
        Replace an existing output file (a pipeline's ``output``); without it an existing one
        raises ParameterError before anything is computed.
    **params
        Pipeline parameters; the rest take their defaults.

    Returns
    -------
    RunResult
        ``verified`` is False when the answer did not check out.
    """
    began = time.perf_counter()
    spec = registry.get(pipeline) if isinstance(pipeline, str) else pipeline
    client = client if client is not None else _default_client()
    backend = backend if backend is not None else backends.detect(client)

    resolved = spec.resolve(**params)
    spec.check_outputs(resolved, overwrite=overwrite)
    t0 = time.perf_counter()
    # A pipeline's preparatory passes run on the cluster too; an interrupted build leaves no
    # output temporary behind.
    with dask.config.set(scheduler=client), \
            failures.discarding_new_temporaries(spec.outputs(resolved).values()):
        workload = spec.workload(backend, **resolved)
    bar = None
    try:
        marks = memory.start(client)
        bar = ProgressBar(client) if progress else None
        t1 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            if report is not None:
                from distributed import performance_report

                temporary = stack.enter_context(output.atomic(report))
                stack.enter_context(performance_report(filename=temporary, mode="inline"))
            raw = _compute(client, workload.collection, backend, bar)
    except BaseException:
        for temporary, _final in workload.outputs:
            # A task still running on a worker may write into it again (a Zarr chunk recreates
            # its folder) until the cluster is closed, and a second Ctrl-C may cut the removal
            # below short: remove it once more at exit.
            atexit.register(output.discard, temporary)
        if bar is not None:
            bar.end()
        for temporary, _final in workload.outputs:
            output.discard(temporary)
        raise
    for temporary, final in workload.outputs:
        output.commit(temporary, final)
    value = workload.present(workload, raw) if workload.present else raw
    if workload.save is not None:
        workload.save(workload, value)
    t2 = time.perf_counter()
    if bar is not None:
        bar.end()
    # Outside compute_s and verify_s (it is not the work), and alongside the verification.
    pending_peaks = memory.peaks_in_background(client, marks)
    t_verify = time.perf_counter()
    check = spec.verify(workload, raw)
    t3 = time.perf_counter()

    meta = clusters.info(client)
    start_s = meta.start_s if meta else None
    compute_s = t2 - t1
    timings = {
        "cluster_start_s": start_s,
        "build_s": t1 - t0,
        "compute_s": compute_s,
        "verify_s": t3 - t_verify,
        "total_s": (t3 - began) + (start_s or 0.0),
    }
    return RunResult(
        pipeline=spec.name,
        backend=backend.name,
        devices=[d.as_dict() for d in backend.devices],
        workers=_workers(client, pending_peaks),
        params=resolved,
        data=workload.description,
        value=value,
        verified=check.ok,
        verification=check.detail,
        timings=timings,
        throughput={
            "bytes_per_s": workload.nbytes / compute_s if compute_s > 0 else None,
            "elements_per_s": workload.elements / compute_s if compute_s > 0 else None,
        },
        dashboard=meta.dashboard if meta else clusters.dashboard_link(client),
        notices=list(meta.notices) if meta else [],
    )
