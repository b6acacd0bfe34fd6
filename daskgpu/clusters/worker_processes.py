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
from collections.abc import Callable

from daskgpu.errors import ClusterError

METHOD_KEY = "distributed.worker.multiprocessing-method"
METHOD_VARIABLE = "DASKGPU_WORKER__CPU_START_METHOD"  # the setting, from the environment
# What a CPU worker imports in any run, the environment first; the pipeline's module is added
# per run (it imports what its tasks need), or dask.array for a cluster of no pipeline.
PRELOAD = ("daskgpu.clusters.fork_server_environment", "numpy", "dask", "distributed",
           "daskgpu.clusters.worker_setup", "daskgpu.toolkit.backends")
# After the pipeline: Numba's CPU target loaded once, for every worker (see the module).
KERNELS_MODULE = "daskgpu.clusters.fork_server_kernels"
GPU_OPTIONS = ("--gpus", "--scheduler-address", "--scheduler-file")
# The program the server imports as multiprocessing's __mp_main__ (see
# daskgpu.clusters.fork_server_main)
MAIN_MODULE = "daskgpu.clusters.fork_server_main"
MAIN_VARIABLE = "DASKGPU_FORK_SERVER_MAIN"


def wanted() -> bool:
    """True where CPU workers are to be forked from a preloaded server.

    ``daskgpu.worker.cpu-start-method`` is ``forkserver`` (the default) and this platform has
    one (Linux, macOS); ``spawn`` asks for distributed's default.

    Raises
    ------
    ClusterError
        For any other setting.
    """
    from daskgpu import config as daskgpu_config

    method = daskgpu_config.get("worker.cpu-start-method")
    if method not in ("forkserver", "spawn"):
        raise ClusterError(f"daskgpu.worker.cpu-start-method is {method!r}: use forkserver or "
                           "spawn")
    return method == "forkserver" and _platform_has_one()


def _platform_has_one() -> bool:
    return sys.platform != "win32" and "forkserver" in multiprocessing.get_all_start_methods()


def start_server(pipeline_module: str | None = None) -> bool:
    """Start the fork server now, importing what a worker needs, unless it runs already.

    Returns at once: the server imports in its own process, alongside the caller. Returns
    whether CPU workers will be forked from it (see :func:`wanted`); where they will not, a
    server started ahead of the settings (:func:`start_for_command_line`) is stopped.
    """
    if not wanted():
        stop_server()
        return False
    _start(_preload(pipeline_module))
    return True


def _preload(pipeline_module: str | None, main: bool = False) -> list[str]:
    """What the server imports, in order: the base, the pipeline's module, the kernels' target."""
    pipeline = [pipeline_module] if pipeline_module else ["dask.array"]
    return [*PRELOAD, *pipeline, KERNELS_MODULE, *([MAIN_MODULE] if main else [])]


def start_for_command_line(args: list[str], module_of: Callable[[str], str | None],
                           main: bool = False) -> None:
    """Start the server where ``args`` (a command line's) will run a pipeline on CPU workers.

    A head start, before the program imports anything heavy, dask's settings included: only
    the environment's ``DASKGPU_WORKER__CPU_START_METHOD`` is read here, and
    :func:`start_server`, called later with all the settings, stops a server they do not
    want. ``module_of(NAME)`` is the module of pipeline ``NAME``, which the server imports
    too (None: none). CPU workers: ``run NAME`` (or ``bench NAME``) with ``--cpu``, or without
    any GPU or scheduler option on a machine without a GPU. ``main`` preloads the program
    itself too (its ``__main__`` file, :mod:`daskgpu.clusters.fork_server_main`), which every worker
    would otherwise import again as it starts.
    """
    if len(args) < 2 or args[0] not in ("run", "bench") or args[1].startswith("-"):
        return
    options = {a.split("=")[0] for a in args[2:]}
    if {"-h", "--help"} & options or not _platform_has_one():
        return
    if os.environ.get(METHOD_VARIABLE, "forkserver").strip().lower() != "forkserver":
        return
    if "--cpu" not in options:
        if options & set(GPU_OPTIONS):
            return
        from daskgpu.clusters import devices

        if _nvidia_driver_present() and devices.inventory().devices:
            return
    module = module_of(args[1])
    _start(_preload(module, main), _main_program() if main else None)


def _nvidia_driver_present() -> bool:
    """False where Linux has no NVIDIA control device: NVML would find no GPU (no need to ask)."""
    return not sys.platform.startswith("linux") or os.path.exists("/dev/nvidiactl")


def _main_program() -> str | None:
    """The running program's file, as multiprocessing names it to the processes it starts."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.normpath(os.path.abspath(path)) if path else None


def _start(preload: list[str], main_program: str | None = None) -> None:
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(preload)
    with _environment({MAIN_VARIABLE: main_program} if main_program else {}):
        forkserver.ensure_running()
    if not _stop_at_exit:
        _stop_at_exit.append(True)
        atexit.register(stop_server)


_stop_at_exit: list[bool] = []


#: Set with the trim threshold: temporaries up to this size reuse memory the worker keeps.
REUSE_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
#: glibc's malloc.h: M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD.
MALLOPT_OPTIONS = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_TOP_PAD_": -2,
                   "MALLOC_MMAP_THRESHOLD_": -3}


def pre_spawn_environ() -> dict[str, str]:
    """What a nanny sets before it starts a worker: one BLAS/OpenMP thread, malloc trimming.

    ``distributed.nanny.pre-spawn-environ``, from dask's settings, or distributed's defaults
    where distributed is not imported yet (it adds them to dask's settings as it loads); with
    ``MALLOC_TRIM_THRESHOLD_`` set, also ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TOP_PAD_``,
    both ``daskgpu.worker.malloc-reused-bytes``. glibc stops adapting its mmap threshold once
    the trim threshold is set: every temporary over 128 KiB is then mapped and zeroed afresh,
    and one under it freed at the heap's top is handed back, to be faulted in again.
    """
    import dask.config

    environ = dask.config.get("distributed.nanny.pre-spawn-environ", None)
    if environ is None:
        environ = _distributed_defaults()["distributed"]["nanny"]["pre-spawn-environ"]
    environ = {str(k): str(v) for k, v in (environ or {}).items()}
    if "MALLOC_TRIM_THRESHOLD_" in environ:
        from dask.utils import parse_bytes

        from daskgpu import config as daskgpu_config

        reused = daskgpu_config.get("worker.malloc-reused-bytes")
        if reused is not None:
            for name in REUSE_VARIABLES:
                environ.setdefault(name, str(parse_bytes(reused)))
    return environ


def _distributed_defaults() -> dict:
    """The default settings of distributed, read without importing it (that takes a while)."""
    import importlib.util

    import yaml

    package = importlib.util.find_spec("distributed").origin
    with open(os.path.join(os.path.dirname(package), "distributed.yaml")) as f:
        return yaml.safe_load(f)


def apply_pre_spawn_environ() -> None:
    """Give this process (the fork server, before it imports numpy) :func:`pre_spawn_environ`.

    OpenBLAS and OpenMP size their thread pools as they load, and every fork inherits the
    pools; glibc reads its ``MALLOC_*_`` variables only as a process starts, so they are set
    through ``mallopt`` too.
    """
    values = pre_spawn_environ()
    os.environ.update(values)
    if not _glibc():
        return
    import ctypes

    for name, option in MALLOPT_OPTIONS.items():
        if values.get(name) is not None:
            ctypes.CDLL(None).mallopt(option, int(values[name]))


def _glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):
        return False


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """``os.environ`` with ``values`` set, then as it was: a process started inside has them."""
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


def stop_server() -> None:
    """Stop the fork server, if this process started one (at exit, or where none is wanted)."""
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
    from daskgpu import config as daskgpu_config

    started = {"distributed.deploy.lost-worker-timeout":
               daskgpu_config.get("faults.no-workers-timeout")}
    if kind == "cpu":
        started.update(settings())
    return started
