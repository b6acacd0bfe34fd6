"""Worker preload for clusters daskgpu starts: Ctrl-C is the client's to handle.

A terminal's Ctrl-C reaches every process of the foreground group, the worker processes too.
They ignore it: the client catches it, closes the cluster, and the nannies stop the workers
cleanly, instead of each worker dying with a KeyboardInterrupt traceback.
"""

from __future__ import annotations

import signal
import threading


def dask_setup(worker) -> None:
    """Called by distributed in each worker process as it starts."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
