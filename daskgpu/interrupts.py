"""Ctrl-C and SIGTERM around a cluster's life: never a half-started or half-closed cluster.

:func:`interrupts_deferred` holds an interrupt back while a cluster starts or closes, so that the
cluster is complete, and closed, when it lands; :func:`raise_interrupt` is the handler the
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
