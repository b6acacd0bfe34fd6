"""Waiting for a run's results when workers die: recover where Dask can, fail in one line where not.

A worker that dies mid-run (killed, out of memory) costs only time: the scheduler reruns its tasks
and recomputes the results it held on the other workers, and a nanny restarts it. A run cannot
finish when the same task kills worker after worker (distributed's ``KilledWorker``, after
``daskgpu.faults.allowed-failures`` retries) or when no worker is left at all for
``daskgpu.faults.no-workers-timeout``. Both become :class:`~daskgpu.errors.RunFailed`.

The scheduler of a cluster daskgpu starts applies both limits itself
(:func:`daskgpu.config.scheduler_settings`); an existing scheduler has its own settings, so the
client also watches the worker count while it waits, and gives up after the same timeout.

And an interrupt: :func:`interrupts_deferred` holds Ctrl-C back while a cluster starts, so that
the cluster is always complete, and closed, when the interrupt lands.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

import dask.utils

from daskgpu import config as daskgpu_config
from daskgpu.errors import RunFailed

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
    from distributed.scheduler import KilledWorker, NoValidWorkerError, NoWorkerError

    if isinstance(exc, KilledWorker):
        return RunFailed(
            f"the run could not finish: {exc.allowed_failures + 1} workers died while running "
            f"task {dask.utils.key_split(exc.task)!r} (daskgpu.faults.allowed-failures = "
            f"{exc.allowed_failures}); most often a worker runs out of memory: use smaller "
            "--chunks, a larger --memory-limit, or fewer threads per worker"
        )
    if isinstance(exc, NoWorkerError | NoValidWorkerError):
        return _lost_all(f"{exc.timeout:g}s")
    return None


def _all_paused(timeout: str) -> RunFailed:
    return RunFailed(
        f"the run could not finish: every worker has been paused for {timeout} "
        "(daskgpu.faults.paused-timeout): its memory stays above distributed's pause threshold "
        "(80% of --memory-limit) even with its data spilled, so it runs no task; give each "
        "worker more memory (a larger --memory-limit, or fewer workers)"
    )


def _worker_statuses(client) -> list[str]:
    """The status of every worker ("running", "paused", ...); none when unreachable."""
    from daskgpu.backends import scheduler_workers

    try:
        return [str(w.get("status", "running")) for w in scheduler_workers(client).values()]
    except (OSError, TimeoutError):  # the scheduler does not answer: no worker to be had either
        return []


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


def results(client, futures: list) -> list:
    """The results of ``futures``, in order, or :class:`RunFailed` if the workers are gone.

    Parameters
    ----------
    client : distributed.Client
        The client the futures belong to.
    futures : list of distributed.Future

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
    """
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
        if paused.persists(bool(statuses) and all(s == "paused" for s in statuses)):
            raise _all_paused(paused.text)
    try:
        return [f.result() for f in futures]
    except Exception as exc:
        failed = _as_run_failed(exc)
        if failed is None:
            raise
        raise failed from None


@contextlib.contextmanager
def interrupts_deferred(signums=(signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Hold Ctrl-C (and SIGTERM) back while the block runs, then deliver it.

    Starting a cluster cannot be cut short cleanly: a cluster interrupted while its workers
    start is never returned to be closed, and distributed's exit handler then fails on the
    half-started workers with a traceback. Inside this block a signal is only noted; on leaving
    it, the usual handlers are back and a noted signal is raised again, so the caller's cleanup
    (closing the now complete cluster) runs as for an interrupt a moment later. Outside the main
    thread (where handlers cannot be set) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: noted.append(signum)) for s in signums}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if noted:
            signal.raise_signal(noted[0])


def raise_interrupt(signum, frame) -> None:
    """A SIGINT/SIGTERM handler: KeyboardInterrupt, but never inside a gc callback or ``__del__``.

    Python reports an exception raised there as "ignored", with a traceback, and the interrupt
    is lost; distributed's scheduler runs such a callback at every garbage collection. There
    the signal is sent again a moment later, to land in ordinary code.
    """
    while frame is not None:
        if frame.f_code.co_name in ("_gc_callback", "__del__"):
            threading.Timer(0.01, os.kill, (os.getpid(), signum)).start()
            return
        frame = frame.f_back
    raise KeyboardInterrupt


class _InterruptedSyncFilter(logging.Filter):
    """Drop tornado's report of distributed's ``sync`` failing to cancel (a NameError).

    A Ctrl-C that lands in a blocking client call before the call has begun its work makes
    distributed's cancel callback fail on a variable it has not set yet; nothing is wrong, but
    tornado logs a traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, NameError):
            return True
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        code = tb.tb_frame.f_code if tb is not None else None
        return not (code is not None and code.co_name == "cancel"
                    and "distributed" in code.co_filename)


def quiet_interrupted_syncs() -> None:
    """Install :class:`_InterruptedSyncFilter` on tornado's callback logger (once)."""
    logger = logging.getLogger("tornado.application")
    if not any(isinstance(f, _InterruptedSyncFilter) for f in logger.filters):
        logger.addFilter(_InterruptedSyncFilter())


@contextlib.contextmanager
def discarding_new_temporaries(paths) -> Iterator[None]:
    """Remove the output temporaries begun inside the block if it fails (or is interrupted).

    A pipeline may begin writing an output while its graph is built (a ``.npy`` file created up
    front), before the run knows the workload's outputs; an interrupt then must not leave the
    temporary behind. Temporaries are named as :mod:`daskgpu.output` names them.
    """
    def temporaries(path: str) -> set[str]:
        folder, name = os.path.split(os.path.abspath(path))
        return set(glob.glob(os.path.join(glob.escape(folder), f".{glob.escape(name)}.partial-*")))

    paths = [p for p in paths if p]
    before = {p: temporaries(p) for p in paths}
    try:
        yield
    except BaseException:
        from daskgpu import output

        for p in paths:
            for temporary in temporaries(p) - before[p]:
                output.discard(temporary)
        raise


@contextlib.contextmanager
def _distributed_logs_quiet() -> Iterator[None]:
    names = [n for n in logging.root.manager.loggerDict if n.split(".")[0] == "distributed"]
    loggers = [logging.getLogger(n) for n in ["distributed", *names]]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@contextlib.contextmanager
def closing() -> Iterator[None]:
    """Around closing a cluster: a second Ctrl-C waits until it is closed.

    Cut short, the closing would leave half-closed workers behind (and a retry waits forever on
    them). When the cluster closes because of an exception (an interrupt, a failed run), the
    errors of the scheduler's work cut short are no news to the user, and are not logged.
    """
    failing = sys.exc_info()[1] is not None
    quiet = _distributed_logs_quiet() if failing else contextlib.nullcontext()
    with interrupts_deferred(), quiet:
        yield
