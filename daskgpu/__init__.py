"""daskgpu: large array and dataframe computations on the GPUs you choose, with Dask.

>>> import daskgpu
>>> with daskgpu.cluster(cpu=True, workers=2) as session:  # doctest: +SKIP
...     result = daskgpu.run("mean-pipeline", session, size=20_000)

The public API, in one place: running pipelines (:func:`cluster`, :func:`run`), and writing
one (:func:`pipeline`, :class:`Param` and its parsers, :class:`Workload`, :class:`Verification`,
:class:`Mutation`). Importing daskgpu loads nothing but this module; each name below loads its
module on first use (a pipeline loads only what building it needs; the cluster, runner and
benchmark machinery load on first use of :func:`cluster` or :func:`run`). Modules that read
``daskgpu.*`` settings import :mod:`daskgpu.config`, which loads them into dask.config.

The code is in layers, a subpackage each: :mod:`daskgpu.cli` (the command line),
:mod:`daskgpu.clusters` (plan, devices, start, close), :mod:`daskgpu.execution` (runner, faults,
bench, report), :mod:`daskgpu.toolkit` (what pipelines build on), :mod:`daskgpu.data` (inputs
and synthetic data) and :mod:`daskgpu.kernels` (Numba kernels).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> (module, attribute), imported on first access: ``import daskgpu`` (and the CLI's
# --help and list) load neither dask nor numpy.
_LAZY = {
    # running pipelines
    "cluster": ("daskgpu.clusters.session", "cluster"),
    "connect": ("daskgpu.clusters.session", "connect"),
    "Session": ("daskgpu.clusters.session", "Session"),
    "run": ("daskgpu.execution.runner", "run"),
    "RunResult": ("daskgpu.execution.runner", "RunResult"),
    "BenchResult": ("daskgpu.execution.bench", "BenchResult"),
    "get_pipeline": ("daskgpu.toolkit.registry", "get"),
    "pipeline_names": ("daskgpu.toolkit.registry", "names"),
    # devices and backends
    "Device": ("daskgpu.clusters.devices", "Device"),
    "inventory": ("daskgpu.clusters.devices", "inventory"),
    "select_devices": ("daskgpu.clusters.devices", "select"),
    "Backend": ("daskgpu.toolkit.backends", "Backend"),
    "get_backend": ("daskgpu.toolkit.backends", "get"),
    # writing a pipeline: the decorator, what it builds and checks, its parameters and parsers
    "pipeline": ("daskgpu.toolkit.registry", "pipeline"),
    "Pipeline": ("daskgpu.toolkit.registry", "Pipeline"),
    "Resolved": ("daskgpu.toolkit.registry", "Resolved"),
    "Workload": ("daskgpu.toolkit.registry", "Workload"),
    "Verification": ("daskgpu.toolkit.registry", "Verification"),
    "Mutation": ("daskgpu.toolkit.registry", "Mutation"),
    "Param": ("daskgpu.toolkit.params", "Param"),
    "positive_int": ("daskgpu.toolkit.params", "positive_int"),
    "non_negative_int": ("daskgpu.toolkit.params", "non_negative_int"),
    "finite_float": ("daskgpu.toolkit.params", "finite_float"),
    "bounded_float": ("daskgpu.toolkit.params", "bounded_float"),
    "choice": ("daskgpu.toolkit.params", "choice"),
    "switch": ("daskgpu.toolkit.params", "switch"),
    "chunks": ("daskgpu.toolkit.params", "chunks"),
    "value_range": ("daskgpu.toolkit.params", "value_range"),
    "optional_path": ("daskgpu.toolkit.params", "optional_path"),
    "output_path": ("daskgpu.toolkit.params", "output_path"),
    "refuse_with_input": ("daskgpu.toolkit.params", "refuse_with_input"),
    # the short way to an array pipeline, and the checks it is given
    "array_pipeline": ("daskgpu.toolkit.array_pipeline", "array_pipeline"),
    "ArrayData": ("daskgpu.toolkit.array_pipeline", "ArrayData"),
    "checks": ("daskgpu.toolkit.array_pipeline", "checks"),
    "table_pipeline": ("daskgpu.toolkit.table_pipeline", "table_pipeline"),
    "Column": ("daskgpu.toolkit.table_pipeline", "Column"),
    "TableData": ("daskgpu.toolkit.table_pipeline", "TableData"),
    "every_tenth_group_changed": ("daskgpu.toolkit.table_pipeline",
                                  "every_tenth_group_changed"),
    "every_tenth_row_changed": ("daskgpu.toolkit.array_pipeline", "every_tenth_row_changed"),
    # the sources the short ways are built on, for a pipeline written with pipeline()
    "random_array": ("daskgpu.data.synthetic", "random_array"),
    "open_array": ("daskgpu.data.array_input", "open_array"),
    "array_to_dask": ("daskgpu.data.array_input", "to_dask"),
    "open_table": ("daskgpu.data.table_input", "open_table"),
    "resolve_chunks": ("daskgpu.toolkit.chunking", "resolve_chunks"),
    "check_blocks": ("daskgpu.toolkit.chunking", "check_blocks"),
    "DaskGPUError": ("daskgpu.errors", "DaskGPUError"),
    "ParameterError": ("daskgpu.errors", "ParameterError"),
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


__all__ = sorted(_LAZY)
