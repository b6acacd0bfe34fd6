"""Ctrl-C and SIGTERM around a cluster's life: never a half-started or half-closed cluster.

:func:`interrupts_deferred` holds an interrupt back while a cluster starts or closes, so that the
cluster is complete, and closed, when it lands (a start that hangs is abandoned a few seconds
after the signal, its worker processes ended); :func:`raise_interrupt` is the handler the
command line installs; :func:`closing` wraps the close; :func:`quiet_interrupted_syncs` drops a
harmless traceback distributed's client logs when an interrupt lands at the wrong moment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator

# A start that is signalled gets this long to end by itself, then its worker processes are
# ended, then (an in-process hang) the interrupt lands inside it.
GIVE_UP_AFTER_S = 5.0
CUT_SHORT_AFTER_S = 5.0


@contextlib.contextmanager
def interrupts_deferred(signums=(signal.SIGINT, signal.SIGTERM),
                        give_up_after: float | None = GIVE_UP_AFTER_S) -> Iterator[None]:
    """Hold Ctrl-C (and SIGTERM) back while the block runs, then deliver it.

    Starting a cluster cannot be cut short cleanly: a cluster interrupted while its workers
    start is never returned to be closed, and distributed's exit handler then fails on the
    half-started workers with a traceback. Inside this block a signal is only noted; on leaving
    it, the usual handlers are back and a noted signal is raised again, so the caller's cleanup
    (closing the now complete cluster) runs as for an interrupt a moment later.

    A start can hang (a worker that never comes up). ``give_up_after`` seconds after the first
    signal, a block still running has the processes it started ended: the start then fails,
    and distributed closes what it had made; if even that does not end it within
    :data:`CUT_SHORT_AFTER_S`, the signal lands inside the block. None: wait for the block,
    however long (a close). Outside the main thread (where handlers cannot be set) it does
    nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    done, cut_short = threading.Event(), threading.Event()
    timers: list[threading.Timer] = []
    lock = threading.Lock()
    before = _started_processes() if give_up_after is not None else set()

    def give_up(signum: int) -> None:  # in a timer thread
        if done.is_set():
            return
        _end_processes(_started_processes() - before)
        if not done.wait(CUT_SHORT_AFTER_S):
            cut_short.set()
            # To the main thread itself: one blocked in a wait would see it only when that ends.
            signal.pthread_kill(threading.main_thread().ident, signum)

    def signalled(signum: int) -> None:  # the moment a signal comes, from whichever thread
        with lock:
            if give_up_after is None or timers or done.is_set():
                return
            timers.append(threading.Timer(give_up_after, give_up, (signum,)))
            timers[0].daemon = True
            timers[0].start()

    def note(signum, frame) -> None:
        if cut_short.is_set():
            noted.clear()  # delivered here, not again on leaving
            restore()
            _quiet_abandoned_close_at_exit()
            signal.raise_signal(signum)
            return
        signalled(signum)
        noted.append(signum)

    def restore() -> None:
        for s, handler in previous.items():
            signal.signal(s, handler)

    watch = _signals_watched(signums, signalled) if give_up_after is not None else \
        contextlib.nullcontext()
    previous = {s: signal.signal(s, note) for s in signums}
    try:
        with watch:
            yield
    finally:
        done.set()
        restore()
        if noted:
            signal.raise_signal(noted[0])


@contextlib.contextmanager
def _signals_watched(signums, signalled) -> Iterator[None]:
    """Call ``signalled(signum)`` from a thread as soon as one of ``signums`` arrives.

    Python runs a signal's handler in the main thread only, and a signal the kernel hands to
    another thread reaches it when its current wait ends: distributed's waits for a cluster's
    start last up to 10 s at a time. Python's wakeup fd is written at once, whichever thread
    receives the signal; one already set is handed on what it would have got.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        earlier = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except (ValueError, OSError):  # not possible here: the handler alone notes the signal
        os.close(read_end)
        os.close(write_end)
        yield
        return

    def watch() -> None:
        while data := _read(read_end):
            if earlier != -1:
                with contextlib.suppress(OSError):
                    os.write(earlier, data)
            for signum in data:
                if signum in signums:
                    signalled(signum)

    watcher = threading.Thread(target=watch, name="daskgpu-signal-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(earlier)
        os.close(write_end)  # the watcher reads the end, and stops
        watcher.join(timeout=1.0)
        os.close(read_end)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 512)
    except OSError:
        return b""


def _quiet_abandoned_close_at_exit() -> None:
    """Drop the traceback of distributed's exit handler closing a start cut short.

    It closes every cluster still open at exit, and asserts that each worker it made has
    started; the workers of a start cut short never did. Nothing is left running: the
    assertion is all that fails.
    """
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        source = unraisable.object
        if not (getattr(source, "__name__", None) == "close_clusters"
                and str(getattr(source, "__module__", "")).startswith("distributed")):
            previous(unraisable)

    sys.unraisablehook = hook


def end_started_processes(timeout: float = 2.0) -> None:
    """End every process this one started with multiprocessing (workers), and theirs."""
    _end_processes(_started_processes(), timeout)


def _started_processes() -> set[int]:
    """Pids of the processes this one started with multiprocessing (workers), and theirs."""
    import multiprocessing

    import psutil

    pids = set()
    for child in multiprocessing.active_children():
        pids.add(child.pid)
        with contextlib.suppress(psutil.Error):
            pids.update(p.pid for p in psutil.Process(child.pid).children(recursive=True))
    return pids


def _end_processes(pids: set[int], timeout: float = 2.0) -> None:
    """SIGTERM the processes ``pids``; SIGKILL those still there after ``timeout`` seconds."""
    import psutil

    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _gone, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


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
    with interrupts_deferred(give_up_after=None), quiet:
        yield
