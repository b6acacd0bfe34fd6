"""Waiting for a run's results when workers die: recover where Dask can, fail in one line where not.

A worker that dies mid-run (killed, out of memory) costs only time: the scheduler reruns its tasks
and recomputes the results it held on the other workers, and a nanny restarts it. A run cannot
finish when the same task kills worker after worker (distributed's ``KilledWorker``, after
``daskgpu.faults.allowed-failures`` retries), when no worker is left at all for
``daskgpu.faults.no-workers-timeout``, or when every worker stays paused for
``daskgpu.faults.paused-timeout``. Each becomes :class:`~daskgpu.errors.RunFailed`.

The scheduler of a cluster daskgpu starts applies the first two limits itself
(:func:`daskgpu.config.scheduler_settings`); an existing scheduler has its own settings, so the
client also watches the worker count while it waits, and gives up after the same timeout.

A task that raises ends the run: its exception becomes one :class:`~daskgpu.errors.TaskFailed`
line (:mod:`daskgpu.execution.task_errors`).
"""

from __future__ import annotations

import threading
import time

import dask.utils

from daskgpu import config as daskgpu_config
from daskgpu.errors import RunFailed
from daskgpu.execution.task_errors import task_failure

WORKERS_POLL_S = 1.0  # how often a waiting client asks the scheduler for the worker count


def _lost_all(timeout: str) -> RunFailed:
    return RunFailed(
        f"the run could not finish: all workers were lost and none came back within {timeout} "
        "(daskgpu.faults.no-workers-timeout); restart the workers, or look at their logs for "
        "why they died (often a --memory-limit below what a worker's own libraries take, a few "
        "hundred MB), and run again"
    )


def _as_run_failed(exc: BaseException) -> RunFailed | None:
    """The one-line failure for an exception that means the workers are gone, else None."""
    from distributed.client import FutureCancelledError
    from distributed.scheduler import KilledWorker

    if isinstance(exc, KilledWorker):
        return RunFailed(
            f"the run could not finish: {exc.allowed_failures + 1} workers died while running "
            f"task {dask.utils.key_split(exc.task)!r} (daskgpu.faults.allowed-failures = "
            f"{exc.allowed_failures}); most often a worker runs out of memory: use smaller "
            "--chunks, a larger --memory-limit, or fewer threads per worker"
        )
    if _no_running_worker(exc):
        return _lost_all(f"{exc.timeout:g}s")
    if isinstance(exc, FutureCancelledError):
        return RunFailed(
            f"the run could not finish: the scheduler cancelled task "
            f"{dask.utils.key_split(exc.key)!r} ({exc.reason}); most often its workers died "
            "or the scheduler was lost: look at the workers' logs, and run again"
        )
    return None


def _all_paused(timeout: str, key: str = "paused-timeout") -> RunFailed:
    return RunFailed(
        f"the run could not finish: every worker has been paused for {timeout} "
        f"(daskgpu.faults.{key}): its memory stays above distributed's pause threshold "
        "(80% of --memory-limit) even with its data spilled, so it runs no task; give each "
        "worker more memory (a larger --memory-limit, or fewer workers)"
    )


def _worker_statuses(client) -> list[str]:
    """The status of every worker ("running", "paused", ...); none when unreachable."""
    from daskgpu.toolkit.backends import scheduler_workers

    try:
        return [str(w.get("status", "running")) for w in scheduler_workers(client).values()]
    except (OSError, TimeoutError):  # the scheduler does not answer: no worker to be had either
        return []


def _no_running_worker(exc: BaseException) -> bool:
    from distributed.scheduler import NoValidWorkerError, NoWorkerError

    return isinstance(exc, NoWorkerError | NoValidWorkerError)


def _every_one_paused(statuses: list[str]) -> bool:
    return bool(statuses) and all(s == "paused" for s in statuses)


class _Watch:
    """How long a bad state of the cluster has lasted, against a ``daskgpu.faults`` timeout."""

    def __init__(self, key: str):
        self.text = daskgpu_config.get(f"faults.{key}")
        self.limit = dask.utils.parse_timedelta(self.text) if self.text is not None else None
        self.since: float | None = None

    def persists(self, bad: bool) -> bool:
        """Note the state now; True once it has been bad for longer than the limit."""
        now = time.monotonic()
        if not bad:
            self.since = None
        elif self.since is None:
            self.since = now
        return self.limit is not None and self.since is not None and now - self.since > self.limit


def _all_done(futures: list) -> threading.Event:
    """An event set once every future is done (finished, failed or cancelled)."""
    done = threading.Event()
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_future) -> None:
        with lock:
            left[0] -= 1
            if left[0] <= 0:
                done.set()

    if not futures:
        done.set()
    for future in futures:
        future.add_done_callback(one_done)
    return done


def results(client, futures: list, devices=()) -> list:
    """The results of ``futures``, in order; one line if the workers are gone or a task raised.

    Parameters
    ----------
    client : distributed.Client
        The client the futures belong to.
    futures : list of distributed.Future
    devices : tuple of Device
        The run's GPUs (none on CPU): a failed task's error names the one it ran on.

    Returns
    -------
    list
        One result per future.

    Raises
    ------
    RunFailed
        A task killed ``allowed-failures + 1`` workers, the cluster had no worker for
        ``daskgpu.faults.no-workers-timeout``, or every worker was paused (its memory above
        distributed's pause threshold) for ``daskgpu.faults.paused-timeout``.
    TaskFailed
        A task raised an exception (:class:`GPUError` for a CUDA error), its cause.
    """
    _wait_until_done(client, futures)
    try:
        return [f.result() for f in futures]
    except Exception as exc:
        _raise_failure(client, futures, devices, exc)


def wait(client, futures: list, devices=()) -> None:
    """Wait for ``futures`` as :func:`results` does, and fail as it does, fetching nothing.

    For data kept on the workers (``client.persist``) between the stages of a run.
    """
    _wait_until_done(client, futures)
    for future in futures:
        if future.status != "finished":
            try:
                future.result()  # its exception (small), or the cancellation
            except Exception as exc:
                _raise_failure(client, futures, devices, exc)


def _wait_until_done(client, futures: list) -> None:
    lost, paused = _Watch("no-workers-timeout"), _Watch("paused-timeout")
    # Waiting on an event the futures set, not blocking in result(): the wait ends the moment
    # the last result is in (a run's timing must not include a polling delay), Ctrl-C can cut
    # it, and an interrupted wait leaves no asyncio task behind to report a traceback at exit.
    done = _all_done(futures)
    while not done.wait(WORKERS_POLL_S) and not all(f.done() for f in futures):
        if lost.limit is None and paused.limit is None:
            continue
        statuses = _worker_statuses(client)
        if lost.persists(not statuses):
            raise _lost_all(lost.text)
        if paused.persists(_every_one_paused(statuses)):
            raise _all_paused(paused.text)


def _raise_failure(client, futures: list, devices, exc: Exception):
    """Raise ``exc``, a future's, in one line where it can be said in one."""
    if _no_running_worker(exc) and _every_one_paused(_worker_statuses(client)):
        # The scheduler counts paused workers as none: they are there, their memory is not.
        raise _all_paused(f"{exc.timeout:g}s", "no-workers-timeout") from None
    failed = _as_run_failed(exc)
    if failed is not None:
        raise failed from None
    erred = next((f for f in futures if f.status == "error"), None)
    failed = None if erred is None else task_failure(client, exc, devices, key=erred.key,
                                                      from_task=True)
    if failed is None:
        raise exc
    raise failed from exc


class WatchedClient:
    """The run's client, set as Dask's scheduler, whose computes wait like :func:`results`.

    A pipeline's preparatory passes and its verification call ``dask.compute`` themselves;
    through this, a cluster whose workers are gone or paused for good ends them in one line
    (RunFailed) instead of a wait without end. Every other attribute is the client's.
    """

    def __init__(self, client, devices=()):
        self._client = client
        self._devices = devices

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def drive(self, workload):
        """``workload.drive(workload, self)``; workers that died under it end it in one line."""
        try:
            return workload.drive(workload, self)
        except Exception as exc:
            failed = _as_run_failed(exc)
            if failed is None:
                raise
            raise failed from None

    def results(self, futures: list) -> list:
        """:func:`results` of ``futures``: a pipeline's ``drive`` fetches through this."""
        return results(self._client, futures, self._devices)

    def wait(self, futures: list) -> None:
        """:func:`wait` for ``futures``: a pipeline's ``drive`` waits on kept data through this."""
        wait(self._client, futures, self._devices)

    def __call__(self, dsk, keys, **kwargs):
        """Dask's scheduler ``get``: compute ``keys`` of ``dsk`` on the cluster."""
        packed = self._client.get(dsk, keys, sync=False, **kwargs)
        futures = list(_futures_in(packed))
        try:
            got = dict(zip((f.key for f in futures), results(self._client, futures,
                                                             self._devices), strict=True))
        finally:
            for future in futures:
                future.release()
        return _filled(packed, got)


def _futures_in(packed):
    if isinstance(packed, (list, tuple)):
        for item in packed:
            yield from _futures_in(item)
    elif hasattr(packed, "key") and hasattr(packed, "result"):
        yield packed


def _filled(packed, got: dict):
    if isinstance(packed, (list, tuple)):
        return type(packed)(_filled(item, got) for item in packed)
    if hasattr(packed, "key") and hasattr(packed, "result"):
        return got[packed.key]
    return packed
