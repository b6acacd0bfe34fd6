"""Run a pipeline on a session: build, compute (with a progress bar if asked), time, verify."""

from __future__ import annotations

import atexit
import contextlib
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import dask

from daskgpu.clusters import session as sessions
from daskgpu.clusters.session import Session
from daskgpu.errors import python_names
from daskgpu.execution import faults, memory, task_errors
from daskgpu.execution.progress import ProgressBar
from daskgpu.toolkit import backends, output, registry
from daskgpu.toolkit.backends import Backend
from daskgpu.toolkit.registry import Pipeline, Resolved


@dataclass
class RunResult:
    """Everything a run produced and measured; ``as_dict()`` is the ``--json`` document.

    ``elements`` and ``nbytes`` are what the computation read or generated; ``timings`` holds
    each phase apart (``cluster_start_s``, ``build_s``, ``compute_s``, ``output_s``,
    ``verify_s``, ``total_s``; the command line adds ``import_s``, from the process's start to
    the cluster's, ``close_s`` and ``process_s``, the whole process until the report);
    ``throughput`` is elements and bytes over ``compute_s`` (and ``flop_per_s`` where the
    data's description counts ``flop``).
    """

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
    elements: int = 0
    nbytes: int = 0
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
        results = [backends.to_host(r)
                   for r in faults.results(client, futures, devices=backend.devices)]
    finally:
        for future in futures:
            future.release()
    return dict(zip(collection, results, strict=True)) if named else results[0]


def run(
    pipeline: str | Pipeline,
    session: Session | None = None,
    *,
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
    session : Session, optional
        Where to compute, from ``daskgpu.cluster()`` (default: the current client's).
    client : distributed.Client or Session, optional
        A client to compute on instead of ``session`` (its workers are asked what they have).
    backend : Backend, optional
        What the workers compute with, where it is not the session's.
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

    Raises
    ------
    DaskGPUError
        In one line: a bad parameter (ParameterError, before anything runs), a task that
        raised on a worker (TaskFailed; GPUError for a CUDA error, the worker's exception as
        its cause), workers that died (RunFailed).
    """
    with python_names():
        spec = registry.get(pipeline) if isinstance(pipeline, str) else pipeline
        chosen = session if session is not None else client
        chosen = sessions.for_client(chosen) if chosen is not None else sessions.current()
        if backend is not None:
            chosen = replace(chosen, known_backend=backend)
        resolved = spec.resolve_for_run(chosen.backend, overwrite, **params)
        return execute(spec, chosen, resolved, progress=progress, report=report)


def execute(spec: Pipeline, session: Session, resolved: Resolved, progress: bool = False,
            report: str | None = None) -> RunResult:
    """Build, compute and verify ``resolved`` on ``session`` (outputs already checked).

    Raises
    ------
    TaskFailed
        A task raised on a worker (GPUError for a CUDA error), in one line.
    RunFailed
        The workers died, or stayed paused, and the run could not finish.
    """
    with task_errors.explained(session.client, resolved.backend.devices):
        return _execute(spec, session, resolved, progress, report)


def _execute(spec: Pipeline, session: Session, resolved: Resolved, progress: bool,
             report: str | None) -> RunResult:
    began = time.perf_counter()
    client, backend = session.client, resolved.backend
    t0 = time.perf_counter()
    # A pipeline's preparatory passes run on the cluster too; an interrupted build leaves no
    # output temporary behind.
    watched = faults.WatchedClient(client, backend.devices)
    with dask.config.set(scheduler=watched), \
            output.discarding_new_temporaries(spec.outputs(resolved).values()):
        workload = spec.workload(backend, resolved)
    bar = None
    try:
        marks = memory.start(session)
        bar = ProgressBar(client) if progress and workload.drive is None else None
        t1 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            if report is not None:
                from distributed import performance_report

                temporary = stack.enter_context(output.atomic(report))
                stack.enter_context(performance_report(filename=temporary, mode="inline"))
            if workload.drive is not None:
                raw = watched.drive(workload)
            else:
                raw = _compute(client, workload.collection, backend, bar)
        t2 = time.perf_counter()
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
    if bar is not None:
        bar.end()
    for temporary, final in workload.outputs:
        output.commit(temporary, final)
    value = workload.present(workload, raw) if workload.present else raw
    if workload.save is not None:
        workload.save(workload, value)
    t_output = time.perf_counter()
    # Outside compute_s and verify_s (it is not the work), and alongside the verification.
    pending_peaks = memory.peaks_in_background(session, marks)
    t_verify = time.perf_counter()
    with dask.config.set(scheduler=watched):  # independent checks compute where the data is
        check = spec.verify(workload, raw)
    t3 = time.perf_counter()

    compute_s = t2 - t1
    throughput = {
        "bytes_per_s": workload.nbytes / compute_s if compute_s > 0 else None,
        "elements_per_s": workload.elements / compute_s if compute_s > 0 else None,
        "bytes": workload.bytes_are,
    }
    flop = workload.description.get("flop")
    if flop and compute_s > 0:  # a pipeline that counts its floating-point operations
        throughput["flop_per_s"] = flop / compute_s
    timings = {
        "cluster_start_s": session.start_s,
        "build_s": t1 - t0,
        "compute_s": compute_s,
        "output_s": t_output - t2,
        "verify_s": t3 - t_verify,
        "total_s": (t3 - began) + (session.start_s or 0.0),
    }
    return RunResult(
        pipeline=spec.name,
        backend=backend.name,
        devices=[d.as_dict() for d in backend.devices],
        workers=_workers(client, pending_peaks),
        params=resolved.as_dict(),
        data=workload.description,
        value=value,
        verified=check.ok,
        verification=check.detail,
        timings=timings,
        throughput=throughput,
        dashboard=session.dashboard,
        elements=workload.elements,
        nbytes=workload.nbytes,
        notices=list(session.notices),
    )
