"""Backends: which array and dataframe libraries the workers compute with.

``gpu`` means CuPy arrays and cuDF dataframes on the workers' GPUs; ``cpu`` means NumPy and
pandas. A backend sets Dask's own ``array.backend`` / ``dataframe.backend`` options, so that
pipelines build their graphs with plain ``dask.array`` / ``dask.dataframe`` calls. GPU
libraries are imported lazily, on the workers, never at module import.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field

import dask.config

from daskgpu.clusters.devices import Device
from daskgpu.errors import BackendUnavailable, ClusterError

GPU_INSTALL_HINT = (
    "pip install -e '.[cuda13]' ('.[cuda12]' for a CUDA 12 driver; "
    "or conda env create -f environment.yml)"
)


@dataclass(frozen=True)
class Backend:
    """The libraries and hardware a run computes on.

    Attributes
    ----------
    name : {"gpu", "cpu"}
    array_library : {"cupy", "numpy"}
    dataframe_library : {"cudf", "pandas"}
    devices : tuple of Device
        One per GPU worker (empty on CPU).
    workers : int
        Number of workers computing.
    threads : int
        Threads summed over the workers.
    """

    name: str
    array_library: str
    dataframe_library: str
    devices: tuple[Device, ...] = field(default=())
    workers: int = 1
    threads: int = 1

    @property
    def is_gpu(self) -> bool:
        """True for the CuPy/cuDF backend."""
        return self.name == "gpu"

    @property
    def device_memory(self) -> int:
        """Total device memory of the workers' GPUs, in bytes (0 on CPU)."""
        return sum(d.memory_total for d in self.devices)

    def activate(self):
        """Context manager setting Dask's ``array.backend`` and ``dataframe.backend``."""
        return dask.config.set(
            {"array.backend": self.array_library, "dataframe.backend": self.dataframe_library}
        )

    def to_device(self):
        """A picklable function moving one host (NumPy) block to this backend's memory."""
        return _cupy_asarray if self.is_gpu else None


def _cupy_asarray(block):
    import cupy

    return cupy.asarray(block)


def array_module(backend_name: str):
    """The array library of workers of the backend called ``backend_name``: CuPy or NumPy.

    For a pipeline's code that runs on a worker of a known backend (its warm-up), so that the
    pipeline itself names no GPU library.
    """
    return importlib.import_module("cupy" if backend_name == "gpu" else "numpy")


def to_host(value):
    """Move a computed result (CuPy/cuDF/NumPy/pandas/scalar, or a dict of them) to the host.

    Returns NumPy/pandas objects, or a Python scalar for 0-d results.
    """
    if isinstance(value, dict):
        return {key: to_host(v) for key, v in value.items()}
    if hasattr(value, "to_pandas"):  # cuDF (its Series also expose __cuda_array_interface__)
        value = value.to_pandas()
    elif hasattr(value, "__cuda_array_interface__"):
        import cupy

        value = cupy.asnumpy(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()
    return value


def synchronize(backend: Backend) -> None:
    """Wait for the current GPU's queued work (for timing); nothing on CPU.

    Call it only on a worker: it creates a CUDA context where it runs.
    """
    if backend.is_gpu:
        import cupy

        cupy.cuda.Device().synchronize()


def gpu_stack_missing() -> list[str]:
    """Names of the GPU libraries (cupy, dask_cuda) that are not installed here."""
    needed = ("cupy", "dask_cuda")
    return [name for name in needed if importlib.util.find_spec(name) is None]


def get(
    name: str, devices: tuple[Device, ...] = (), workers: int = 1, threads: int = 1
) -> Backend:
    """The backend called ``name`` ("gpu" or "cpu").

    Raises
    ------
    BackendUnavailable
        For ``gpu`` where CuPy or dask-cuda is not installed, with the install command.
    """
    if name == "cpu":
        return Backend("cpu", "numpy", "pandas", (), workers, threads)
    if name == "gpu":
        missing = gpu_stack_missing()
        if missing:
            raise BackendUnavailable(
                f"the GPU backend needs {' and '.join(missing)}, not installed here; "
                f"install it with: {GPU_INSTALL_HINT}, or run with --cpu"
            )
        return Backend("gpu", "cupy", "cudf", tuple(devices), workers, threads)
    raise BackendUnavailable(f"unknown backend {name!r}; choose 'gpu' or 'cpu'")


def worker_report() -> dict:
    """Run on a worker: does it compute on a GPU, and which one.

    A worker is a GPU worker when ``CUDA_VISIBLE_DEVICES`` names its device (as dask-cuda
    sets it) and CuPy is importable there.
    """
    from daskgpu.clusters import devices as devices_mod

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    report: dict = {"gpu": False, "device": None}
    if not visible or importlib.util.find_spec("cupy") is None:
        return report
    found = devices_mod.visible_devices(devices_mod.inventory(), visible)
    if found:
        report.update(gpu=True, device=found[0].as_dict())
    return report


def detect(client) -> Backend:
    """Ask a client's workers what they compute on, and return the matching backend.

    Raises
    ------
    ClusterError
        When there are no workers, or some have GPUs and some do not.
    """
    workers = scheduler_workers(client)
    if not workers:
        raise ClusterError("the cluster has no workers; start some with `dask worker ADDRESS`")
    # A worker lost meanwhile (killed, or its machine gone) cannot answer; the others decide.
    reports = client.run(worker_report, on_error="ignore")
    if not reports:
        raise ClusterError("no worker answered; are the workers still running?")
    gpu = [addr for addr, rep in reports.items() if rep["gpu"]]
    threads = sum(w.get("nthreads", 1) for w in workers.values())
    if gpu and len(gpu) != len(reports):
        raise ClusterError(
            f"{len(gpu)} of {len(reports)} workers have a GPU; daskgpu needs all GPU workers "
            "(`dask cuda worker`) or all CPU workers (`dask worker`)"
        )
    if gpu:
        devs = tuple(Device(**{**reports[a]["device"], "migs": ()}) for a in sorted(gpu))
        return get("gpu", devs, len(reports), threads)
    return get("cpu", (), len(reports), threads)


def scheduler_workers(client) -> dict:
    """Every worker the scheduler knows, by address, asked of the scheduler now.

    Not ``Client.scheduler_info()``: that fetches the list and then returns the client's cached
    copy, which the client's own periodic refresh replaces, from its event loop, with one that
    lists no worker (newer distributed asks for the totals only there). Read between the two,
    it says there are none.
    """
    return client.sync(client.scheduler.identity).get("workers", {})


def require_dataframe_library(backend: Backend, pipeline: str) -> None:
    """Refuse, in one line with the install command, a GPU run where cuDF is missing.

    Raises
    ------
    BackendUnavailable
        When ``backend`` computes on cuDF and cuDF is not installed here.
    """
    if backend.dataframe_library == "cudf" and importlib.util.find_spec("cudf") is None:
        raise BackendUnavailable(
            f"{pipeline} on GPUs needs cuDF, not installed here; install it with: "
            f"{GPU_INSTALL_HINT}, or run with --cpu"
        )


def from_pandas(frame, library: str):
    """A pandas DataFrame as the partition type of ``library`` ("pandas" or "cudf").

    Called on the workers (synthetic partitions are built with NumPy and pandas), and by the
    one-process baselines, which run on a worker too; never in the client, whose collections
    carry pandas meta on every backend.
    """
    if library == "cudf":
        import cudf

        return cudf.from_pandas(frame)
    return frame


def read_table_gpu(kind: str, path: str, columns, row_group: int | None = None,
                   dates=()):
    """One table partition read by cuDF on this worker's GPU: only ``columns``.

    A Parquet ``row_group`` of ``path`` (``kind="parquet"``) or a whole CSV file, parsing
    ``dates``. Call it only on a worker.
    """
    import cudf

    if kind == "parquet":
        groups = None if row_group is None else [[row_group]]
        return cudf.read_parquet(path, columns=list(columns), row_groups=groups)
    return cudf.read_csv(path, usecols=list(columns), parse_dates=list(dates))


def device_columns(frame, names) -> dict:
    """Columns of a cuDF frame as CuPy arrays without nulls, for a kernel to read.

    A datetime column (wall-clock time for a time-zone aware one) becomes ``(ticks, dtype)``:
    int64 ticks since 1970, with ``INT64_MIN`` (NaT) for a null, and its ``datetime64`` dtype;
    a numeric column with nulls becomes float64 with NaN for them; other columns are their
    device memory (no copy).
    """
    import numpy as np

    out = {}
    for name in names:
        series = frame[name]
        if getattr(series.dtype, "tz", None) is not None:
            series = series.dt.tz_localize(None)
        if np.dtype(series.dtype).kind == "M":
            ticks = series.astype("int64")
            ticks = ticks.to_cupy(na_value=np.iinfo(np.int64).min) if ticks.has_nulls \
                else ticks.values
            out[name] = (ticks, np.dtype(series.dtype))
        elif series.has_nulls:
            out[name] = series.to_cupy(dtype="float64", na_value=np.nan)
        else:
            out[name] = series.values
    return out
