"""The CPU workers' fork server imports this after the pipeline: its kernels, Numba's target.

- The modules the pipeline names as its workers' own (``worker_modules``: its Numba kernels,
  which the client never imports) are imported here, once for every worker.
- The first Numba function a process compiles, or loads from Numba's cache, first loads the
  CPU target's registries of typing and lowering (``numpy.linalg``'s among them, which imports
  SciPy's BLAS): about 0.7 s of CPU on two cores, in each worker, before its first task. Loaded
  here once, every forked worker finds them loaded, and its warm-up loads just its kernels. No
  thread starts: Numba's threading layer (an OpenMP runtime is not safe to fork) starts on a
  kernel's first run, in the worker.

Only a head start: what fails here is left for each worker to do itself.
"""

import importlib
import logging
import sys

log = logging.getLogger(__name__)

if "daskgpu.toolkit.registry" in sys.modules:
    for _spec in sys.modules["daskgpu.toolkit.registry"].loaded():
        for _module in _spec.worker_modules:
            try:
                importlib.import_module(_module)
            except Exception as exc:
                log.debug("fork server: %s not imported: %s", _module, exc)

if "numba" in sys.modules:
    try:
        from numba.core.registry import cpu_target

        cpu_target.target_context.refresh()
    except Exception as exc:
        log.debug("fork server: Numba's CPU target not loaded: %s", exc)
