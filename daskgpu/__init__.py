"""daskgpu: large array and dataframe computations on the GPUs you choose, with Dask.

>>> import daskgpu
>>> with daskgpu.cluster(cpu=True, workers=2) as session:  # doctest: +SKIP
...     result = daskgpu.run("mean-pipeline", session, size=20_000)

Importing daskgpu loads nothing but this module; each name below loads its module on first use
(a pipeline loads only what building it needs; the cluster, runner and benchmark machinery load
on first use of :func:`cluster` or :func:`run`). Modules that read ``daskgpu.*`` settings import
:mod:`daskgpu.config`, which loads them into dask.config.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> (module, attribute), imported on first access: ``import daskgpu`` (and the CLI's
# --help and list) load neither dask nor numpy.
_LAZY = {
    "Backend": ("daskgpu.backends", "Backend"),
    "get_backend": ("daskgpu.backends", "get"),
    "Device": ("daskgpu.devices", "Device"),
    "inventory": ("daskgpu.devices", "inventory"),
    "select_devices": ("daskgpu.devices", "select"),
    "DaskGPUError": ("daskgpu.errors", "DaskGPUError"),
    "Mutation": ("daskgpu.registry", "Mutation"),
    "Pipeline": ("daskgpu.registry", "Pipeline"),
    "Resolved": ("daskgpu.registry", "Resolved"),
    "Verification": ("daskgpu.registry", "Verification"),
    "Workload": ("daskgpu.registry", "Workload"),
    "pipeline": ("daskgpu.registry", "pipeline"),
    "get_pipeline": ("daskgpu.registry", "get"),
    "pipeline_names": ("daskgpu.registry", "names"),
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
