"""How the CPU worker processes of a local cluster start: forked from a preloaded server.

distributed starts each worker process with ``spawn`` by default: a fresh interpreter that
imports numpy, dask, distributed and the pipeline again, one per worker, all at once. Here a
``forkserver`` imports them once, ahead of time (the command line starts it while the client is
still getting ready), and every worker, and every worker a nanny restarts, is a fork of it: it
starts without importing anything, and its first tasks run warm. The workers end as they do
with ``spawn`` (the nanny terminates them; a forked worker is the server's child, and the
server the client's, so a process tree walk from the client still finds it). GPU
workers keep ``spawn``: CUDA does not survive a fork, and dask-cuda sets each worker's device
before it starts.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import sys

from daskgpu import config as daskgpu_config
from daskgpu.errors import ClusterError

METHOD_KEY = "distributed.worker.multiprocessing-method"
# What a CPU worker imports in any run; the pipeline's module is added per run.
PRELOAD = ("numpy", "dask", "dask.array", "distributed", "daskgpu.worker_setup",
           "daskgpu.backends")


def wanted() -> bool:
    """True where CPU workers are to be forked from a preloaded server.

    ``daskgpu.worker.cpu-start-method`` is ``forkserver`` (the default) and this platform has
    one (Linux, macOS); ``spawn`` asks for distributed's default.

    Raises
    ------
    ClusterError
        For any other setting.
    """
    method = daskgpu_config.get("worker.cpu-start-method")
    if method not in ("forkserver", "spawn"):
        raise ClusterError(f"daskgpu.worker.cpu-start-method is {method!r}: use forkserver or "
                           "spawn")
    return (method == "forkserver" and sys.platform != "win32"
            and "forkserver" in multiprocessing.get_all_start_methods())


def start_server(pipeline_module: str | None = None) -> bool:
    """Start the fork server now, importing what a worker needs, unless it runs already.

    Returns at once: the server imports in its own process, alongside the caller. Returns
    whether CPU workers will be forked from it (see :func:`wanted`).
    """
    if not wanted():
        return False
    from multiprocessing import forkserver

    preload = [*PRELOAD, *([pipeline_module] if pipeline_module else [])]
    multiprocessing.get_context("forkserver").set_forkserver_preload(preload)
    with _environment(_pre_spawn_environ()):
        forkserver.ensure_running()
    if not _stop_at_exit:
        _stop_at_exit.append(True)
        atexit.register(_stop_server)
    return True


_stop_at_exit: list[bool] = []


def _pre_spawn_environ() -> dict[str, str]:
    """What a nanny sets before it starts a worker: one BLAS/OpenMP thread, malloc trimming.

    The server must have it before it imports numpy: OpenBLAS sizes its pool then, and every
    fork inherits the pool (a worker's own setting would come too late).
    """
    import dask.config

    environ = dask.config.get("distributed.nanny.pre-spawn-environ", None)
    if environ is None:  # distributed, not imported yet, has not added its defaults
        environ = _distributed_defaults()["distributed"]["nanny"]["pre-spawn-environ"]
    return {str(k): str(v) for k, v in (environ or {}).items()}


def _distributed_defaults() -> dict:
    """The default settings of distributed, read without importing it (that takes a while)."""
    import importlib.util

    import yaml

    package = importlib.util.find_spec("distributed").origin
    with open(os.path.join(os.path.dirname(package), "distributed.yaml")) as f:
        return yaml.safe_load(f)


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """``os.environ`` with ``values`` set (the server process inherits it), then as it was."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _stop_server() -> None:
    # The server leaves by itself once this process is gone, but only after its imports: a
    # process that ends early (bad input, Ctrl-C) would leave it behind for a moment.
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)


def settings() -> dict:
    """Dask settings for starting, and restarting, a local cluster's CPU workers.

    Starts the server where nothing did yet, with no pipeline's module: one process may start
    clusters for several pipelines, and a worker loads only the ones it runs.
    """
    if not start_server():
        return {METHOD_KEY: "spawn"}
    # distributed would otherwise set a preload list of its own, importing pandas and more into
    # this process first; the server runs already, so that list would go unused anyway.
    import distributed.utils

    distributed.utils._forkserver_preload_set = True
    return {METHOD_KEY: "forkserver"}


def while_running(kind: str) -> dict:
    """Client-side Dask settings while a cluster of ``kind`` that daskgpu started lives.

    Its nannies restart killed workers the way they started them; on a busy machine a restart
    may take longer than distributed's 15 s, after which the cluster would close it for good.
    """
    if kind == "external":
        return {}
    started = {"distributed.deploy.lost-worker-timeout":
               daskgpu_config.get("faults.no-workers-timeout")}
    if kind == "cpu":
        started.update(settings())
    return started
