"""Worker preload for clusters daskgpu starts.

- Ctrl-C is the client's to handle. A terminal's Ctrl-C reaches every process of the foreground
  group, the worker processes too. They ignore it: the client catches it, closes the cluster,
  and the nannies stop the workers cleanly, instead of each worker dying with a
  KeyboardInterrupt traceback.
- numba-cuda can compile under numpy 2.5 (see :mod:`daskgpu.kernels.compat`), whoever
  compiles first on the worker.
- The pipeline a cluster was started for (``daskgpu.worker.warm-up``) is imported with its
  check's module, and its ``warm_up`` run, as the worker starts, before it registers with the
  scheduler: the first compute finds the modules imported and the kernels loaded, as a warm
  cluster's would. Not in a background thread: an import there racing a task's unpickling deadlocked
  in the import hook that dask-cuda's dependency (rapids-dask-dependency) installs for dask.
- With an RMM pool (``--rmm-pool-size``), Numba's device allocations (the kernels' outputs and
  scratch arrays) come from the pool too; dask-cuda routes CuPy's itself. Without this the pool
  would only take memory away from the pipelines.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import signal
import threading

import dask.config

from daskgpu.kernels import compat

WARM_UP = "daskgpu.worker.warm-up"
log = logging.getLogger(__name__)

# distributed logs and forgets a preload's exception: kept here for the client to ask.
_rmm_failure: str | None = None


def dask_setup(worker) -> None:
    """Called by distributed in each worker process as it starts."""
    global _rmm_failure
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Before anything on the worker (daskgpu's kernels, cuDF's UDFs) compiles with numba-cuda.
    compat.restore_row_stack()
    # A worker starts no processes. Numba guards its threads' start with a named semaphore in
    # a process whose start method is a fork (a worker forked from the fork server is told its
    # client's); a nanny's SIGKILL of such a worker would leave the semaphore behind, and a
    # warning about it on the client's stderr.
    multiprocessing.set_start_method("spawn", force=True)
    # Routed before the warm-up: a GPU warm-up launches kernels, which makes Numba's context.
    if dask.config.get("daskgpu.worker.rmm-for-numba", False):
        try:
            route_numba_to_rmm()
        except Exception as exc:
            _rmm_failure = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    warm_up = dask.config.get(WARM_UP, None)
    if warm_up:
        if warm_up["backend"] == "gpu":
            _warm_up_device_random()
        for pipeline in warm_up["pipelines"]:
            _warm_up(pipeline, warm_up["backend"])


def _warm_up(pipeline: str, backend: str) -> None:
    try:
        registry = importlib.import_module("daskgpu.toolkit.registry")
        spec = registry.get(pipeline)
        importlib.import_module(spec.verify.__module__)  # its check's tasks run here too
        for module in spec.worker_modules:
            importlib.import_module(module)
        if spec.warm_up is not None:
            spec.warm_up(backend)
    except Exception as exc:  # only a head start: the run itself reports what is wrong
        log.debug("warm-up of %s failed: %s", pipeline, exc)


def _warm_up_device_random() -> None:
    """Compile the device generator's kernel (and its self-check) for both float types."""
    try:
        import numpy as np

        from daskgpu.toolkit.numeric import generator

        rng = generator("cupy", np.random.SeedSequence(0))
        for dtype in (np.float32, np.float64):
            rng.random(1, dtype=dtype)
    except Exception as exc:  # only a head start: a run's own draws report what is wrong
        log.debug("warm-up of the device generator failed: %s", exc)


def rmm_failure() -> str | None:
    """Run on a worker: why Numba could not be routed to RMM there, or None."""
    return _rmm_failure


def route_numba_to_rmm() -> None:
    """Make Numba allocate device memory through RMM (before Numba makes its CUDA context)."""
    from numba import cuda
    from rmm.allocators.numba import RMMNumbaManager

    cuda.set_memory_manager(RMMNumbaManager)


def check_rmm_routing(client) -> None:
    """In the client: refuse a cluster where a worker could not route Numba to the RMM pool.

    Raises
    ------
    ClusterError
        Naming the first such worker and why.
    """
    from daskgpu.errors import ClusterError

    failures = {a: why for a, why in client.run(rmm_failure).items() if why}
    if failures:
        address, why = sorted(failures.items())[0]
        raise ClusterError(f"--rmm-pool-size: worker {address} cannot allocate Numba's memory "
                           f"from the RMM pool ({why}); update rmm, or leave the option out")
