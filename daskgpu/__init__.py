"""daskgpu: large array and dataframe computations on the GPUs you choose, with Dask.

>>> import daskgpu
>>> with daskgpu.cluster(cpu=True, workers=2) as session:  # doctest: +SKIP
...     result = daskgpu.run("mean-pipeline", session, size=20_000)

Importing daskgpu (or a pipeline) loads only what building a pipeline needs; the cluster,
runner and benchmark machinery load on first use of :func:`cluster` or :func:`run`.
"""

from __future__ import annotations

import importlib

from daskgpu import config as _config  # noqa: F401  (loads daskgpu.yaml into dask.config)
from daskgpu.backends import Backend
from daskgpu.backends import get as get_backend
from daskgpu.devices import Device, inventory
from daskgpu.devices import select as select_devices
from daskgpu.errors import DaskGPUError
from daskgpu.registry import Mutation, Pipeline, Resolved, Verification, Workload, pipeline
from daskgpu.registry import get as get_pipeline
from daskgpu.registry import names as pipeline_names

__version__ = "0.1.0"

# name -> (module, attribute), imported on first access
_LAZY = {
    "cluster": ("daskgpu.session", "cluster"),
    "Session": ("daskgpu.session", "Session"),
    "run": ("daskgpu.runner", "run"),
    "RunResult": ("daskgpu.runner", "RunResult"),
    "BenchResult": ("daskgpu.bench", "BenchResult"),
}


def __getattr__(name: str):
    if name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'daskgpu' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Backend",
    "BenchResult",
    "DaskGPUError",
    "Device",
    "Mutation",
    "Pipeline",
    "Resolved",
    "RunResult",
    "Session",
    "Verification",
    "Workload",
    "cluster",
    "get_backend",
    "get_pipeline",
    "inventory",
    "pipeline",
    "pipeline_names",
    "run",
    "select_devices",
]
