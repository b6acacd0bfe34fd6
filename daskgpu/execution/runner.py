"""Run a pipeline on a session: build, compute (with a progress bar if asked), time, verify."""

from __future__ import annotations

import atexit
import contextlib
import os
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import dask

from daskgpu.clusters import session as sessions
from daskgpu.clusters.session import Session
from daskgpu.errors import pipeline_code, python_names
from daskgpu.execution import faults, memory, task_errors
from daskgpu.execution.progress import ProgressBar
from daskgpu.toolkit import backends, output, registry
from daskgpu.toolkit.backends import Backend
from daskgpu.toolkit.registry import Pipeline, Resolved
from daskgpu.toolkit.workload import Verification
from daskgpu.verification import depths


@dataclass
class RunResult:
    """Everything a run produced and measured; ``as_dict()`` is the ``--json`` document.

    ``elements`` and ``nbytes`` are what the computation read or generated; ``timings`` holds
    each phase apart (``cluster_start_s``, ``build_s``, ``compute_s``, ``output_s``,
    ``verify_s``, ``total_s``; the command line adds ``import_s``, from the process's start to
    the cluster's, ``close_s`` and ``process_s``, the whole process until the report);
    ``throughput`` is elements and bytes over ``compute_s`` (and ``flop_per_s`` where the
    data's description counts ``flop``). ``verify`` is the depth the answer was checked at
    (``fast``, ``full``, or ``off``: then ``verified`` is None, never silently True).
    """

    pipeline: str
    backend: str
    devices: list[dict]
    workers: list[dict]
    params: dict
    data: dict
    value: Any
    verified: bool | None
    verification: str
    timings: dict
    throughput: dict
    dashboard: str | None
    elements: int = 0
    nbytes: int = 0
    notices: list[str] = field(default_factory=list)
    verify: str = depths.DEFAULT

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


def compute(client, collection, backend: Backend, bar: ProgressBar | None = None):
    """Compute one collection, or a dict of them in one graph (shared parts computed once).

    Results come to this process in host memory (GPU results are moved on the workers); a
    task that fails raises in one line (see :mod:`daskgpu.execution.faults`).
    """
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
    verify: str = depths.DEFAULT,
    keep: bool = True,
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
        raises ParameterError before anything is computed. It is replaced only once the run
        has verified.
    verify : {"fast", "full", "off"}
        How deeply to check the answer: certificates and seeded spot checks at a small share
        of the compute (``fast``), the exhaustive audit (``full``), or not at all (``off``:
        ``verified`` is None and the outputs are written unchecked).
    keep : bool, default True
        Keep the results as large as the input (a grid, a spectrum, a product, labels, a
        projection) on the workers and give them in the value as Dask arrays; False: the run
        makes them only where an output asks, as the command line does.
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
        check_depth(verify)
        resolved = spec.resolve_for_run(chosen.backend, overwrite, **params)
        return execute(spec, chosen, resolved, progress=progress, report=report, verify=verify,
                       keep=keep)


def check_depth(verify: str) -> None:
    """Refuse a verification depth other than fast, full or off, in one line.

    Raises
    ------
    ParameterError
        Naming the depths there are (:func:`daskgpu.verification.depths.parse`).
    """
    depths.parse(verify)


def execute(spec: Pipeline, session: Session, resolved: Resolved, progress: bool = False,
            report: str | None = None, verify: str = depths.DEFAULT,
            keep: bool = False) -> RunResult:
    """Build, compute and verify ``resolved`` on ``session`` (outputs already checked).

    Outputs are renamed into place only once the answer has verified (or ``verify`` is
    ``off``); a run that fails its check removes what it wrote and leaves an existing output
    as it was, and says so in its notices. ``keep``: results as large as the input
    (``Workload.on_workers``) are persisted on the workers and added to the value.

    Raises
    ------
    TaskFailed
        A task raised on a worker (GPUError for a CUDA error), in one line.
    RunFailed
        The workers died, or stayed paused, and the run could not finish.
    """
    check_depth(verify)
    with task_errors.explained(session.client, resolved.backend.devices), \
            warnings.catch_warnings():
        # An array in hand travels in its graph's blocks, once, by design: distributed's
        # advice against a large graph is not the user's to act on.
        warnings.filterwarnings("ignore", "Sending large graph", UserWarning)
        return _execute(spec, session, resolved, progress, report, verify, keep)


def _execute(spec: Pipeline, session: Session, resolved: Resolved, progress: bool,
             report: str | None, verify: str, keep: bool = False) -> RunResult:
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
            raw, kept = _computed(client, watched, workload, backend, bar, keep)
        t2 = time.perf_counter()
    except BaseException:
        if bar is not None:
            bar.end()
        _abandon(workload.outputs)
        raise
    if bar is not None:
        bar.end()
    try:
        value = _present_and_save(spec.name, workload, raw, resolved.get("output"))
        if kept:
            value = {**value, **kept}
        t_output = time.perf_counter()
        # Outside compute_s and verify_s (it is not the work), and alongside the verification.
        pending_peaks = memory.peaks_in_background(session, marks)
        t_verify = time.perf_counter()
        check = _check(spec, workload, raw, verify, watched)
        t3 = time.perf_counter()
    except BaseException:
        _abandon(workload.outputs)
        raise
    notices = list(session.notices)
    if check.ok is False:
        notices.extend(_discard(workload.outputs))
    else:
        for temporary, final in workload.outputs:
            output.commit(temporary, final)
    compute_s = t2 - t1
    start_s = session.start_for_next_run()
    timings = {
        "cluster_start_s": start_s,
        "build_s": t1 - t0,
        "compute_s": compute_s,
        "output_s": t_output - t2,
        "verify_s": t3 - t_verify,
        "total_s": (t3 - began) + (start_s or 0.0),
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
        verify=check.depth or verify,
        timings=timings,
        throughput=_throughput(workload, compute_s),
        dashboard=session.dashboard,
        elements=workload.elements,
        nbytes=workload.nbytes,
        notices=notices,
    )


def _computed(client, watched, workload, backend: Backend, bar,
              keep: bool) -> tuple[Any, dict]:
    """The raw result, and what the run keeps on the workers (where ``keep``)."""
    workload.keep = keep
    if workload.drive is not None:
        # A drive keeps what it makes in on_workers itself, already persisted.
        raw = watched.drive(workload)
        return raw, _persisted(client, workload.on_workers) if keep else {}
    # Submitted first: the compute's graph shares their keys, computed once.
    kept = _persisted(client, workload.on_workers) if keep else {}
    return compute(client, workload.collection, backend, bar), kept


def _persisted(client, collections: dict) -> dict:
    """``collections`` persisted on the cluster: the same names, on blocks kept by the workers."""
    if not collections:
        return {}
    names = list(collections)
    return dict(zip(names, client.persist([collections[n] for n in names]), strict=True))


def _present_and_save(name: str, workload, raw, path: str | None) -> Any:
    """The reported value; a small result (``save``) written beside output ``path``."""
    with pipeline_code(name, "present"):
        value = workload.present(workload, raw) if workload.present else raw
    if workload.save is not None and path is not None:
        temporary = output.temporary_name(path)
        workload.outputs.append((temporary, path))
        with pipeline_code(name, "save"):
            workload.save(workload, value, temporary)
    return value


def _check(spec: Pipeline, workload, raw, verify: str, watched) -> Verification:
    if verify == "off":
        return Verification(None, "not verified (--verify off)", "off")
    with dask.config.set(scheduler=watched):  # independent checks compute where the data is
        return spec.check(workload, raw, verify)


def _throughput(workload, compute_s: float) -> dict:
    """Elements and bytes per second of the compute (and flop/s where the data counts flop)."""
    throughput = {
        "bytes_per_s": workload.nbytes / compute_s if compute_s > 0 else None,
        "elements_per_s": workload.elements / compute_s if compute_s > 0 else None,
        "bytes": workload.bytes_are,
    }
    flop = workload.description.get("flop")
    if flop and compute_s > 0:  # a pipeline that counts its floating-point operations
        throughput["flop_per_s"] = flop / compute_s
    return throughput


def _abandon(outputs) -> None:
    """Remove the temporaries of a run that raised or was interrupted, now and at exit.

    A task still running on a worker may write into one again (a Zarr chunk recreates its
    folder) until the cluster is closed, and a second Ctrl-C may cut the removal short: each
    is removed once more as the process exits.
    """
    for temporary, _final in outputs:
        atexit.register(output.discard, temporary)
    for temporary, _final in outputs:
        output.discard(temporary)


def _discard(outputs) -> list[str]:
    """Remove what a run wrote and did not commit: a line for each output left as it was."""
    lines = []
    for temporary, final in outputs:
        output.discard(temporary)
        lines.append(f"{final}: not written (the result did not verify); "
                     + ("the file there is as it was" if os.path.lexists(final)
                        else "nothing is there"))
    return lines
