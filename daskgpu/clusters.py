"""Start (or connect to) the cluster a run computes on, and always close it.

Three kinds, one context manager:

- GPU workers: ``dask_cuda.LocalCUDACluster`` with one worker per selected GPU, each handed
  its device by UUID.
- CPU workers: ``distributed.LocalCluster``, where there is no GPU or ``cpu=True``.
- An existing scheduler (``scheduler_address`` / ``scheduler_file``): daskgpu only connects,
  and the backend follows what its workers have.

Scheduler and dashboard listen on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

import dask.utils

from daskgpu import backends, devices
from daskgpu import config as daskgpu_config
from daskgpu.devices import Device, Inventory
from daskgpu.errors import ClusterError

log = logging.getLogger("daskgpu")
LOOPBACK = "127.0.0.1"


@dataclass
class ClusterPlan:
    """What to start, decided from the options before anything starts.

    Attributes
    ----------
    kind : {"gpu", "cpu", "external"}
    devices : list of Device
        Selected GPUs (``gpu`` only), in order.
    n_workers, threads_per_worker : int or None
        CPU layout (``threads_per_worker`` also applies to GPU workers).
    options : dict
        Keyword arguments for the cluster class (or ``Client`` for ``external``).
    notices : list of str
        One-line messages for the user (e.g. why the run falls back to CPU).
    """

    kind: str
    devices: list[Device] = field(default_factory=list)
    n_workers: int | None = None
    threads_per_worker: int | None = None
    options: dict = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)


def describe(p: ClusterPlan) -> str:
    """What starting the plan will do, in a few words (for a progress message)."""
    if p.kind == "external":
        target = p.options.get("address") or f"the scheduler in {p.options['scheduler_file']}"
        return f"Connecting to {target}"
    if p.kind == "gpu":
        gpus = ", ".join(d.label for d in p.devices)
        return f"Starting {len(p.devices)} GPU worker(s) on GPU {gpus}"
    return f"Starting {p.n_workers} CPU worker(s) x {p.threads_per_worker} thread(s)"


@dataclass
class ClusterInfo:
    """What daskgpu knows about a client it connected: for reports."""

    kind: str
    devices: list[Device]
    start_s: float | None
    dashboard: str | None
    notices: list[str]


_INFO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def info(client) -> ClusterInfo | None:
    """The ClusterInfo of a client made by :func:`cluster`, else None."""
    return _INFO.get(client)


def plan(
    gpus: str | None = None,
    cpu: bool = False,
    workers: int | None = None,
    threads_per_worker: int | None = None,
    memory_limit: str | int | None = "auto",
    scheduler_address: str | None = None,
    scheduler_file: str | None = None,
    dashboard_address: str | None = None,
    dashboard: bool = True,
    host: str = LOOPBACK,
    rmm_pool_size: str | int | None = None,
    device_memory_limit: str | int | float | None = None,
    protocol: str = "tcp",
    inventory: Inventory | None = None,
) -> ClusterPlan:
    """Decide which cluster the options ask for; raise on contradictory or impossible ones.

    Raises
    ------
    ClusterError, DeviceSelectionError, BackendUnavailable
        One line naming the problem and the fix.
    """
    _check_counts(workers, threads_per_worker)
    if gpus is not None and cpu:
        raise ClusterError("--gpus and --cpu contradict each other; give one of them")
    if scheduler_address or scheduler_file:
        return _plan_external(gpus, cpu, workers, scheduler_address, scheduler_file)
    if dashboard_address is None:
        dashboard_address = daskgpu_config.get("dashboard-address")
    common = {
        "dashboard_address": dashboard_address,
        "host": host,
        "memory_limit": memory_limit,
        "preload": ["daskgpu.worker_setup"],
    }
    if not dashboard:
        # The scheduler serves HTTP (health, metrics) even without a dashboard: keep that on a
        # free port of the same host rather than trying 8787.
        common["dashboard_address"] = None
        common["scheduler_kwargs"] = {"dashboard": False, "dashboard_address": f"{host}:0"}
    gpu_only = {
        "rmm_pool_size": _memory_size(rmm_pool_size),
        "device_memory_limit": _memory_size(device_memory_limit),
    }
    if cpu:
        return _plan_cpu(workers, threads_per_worker, common, gpu_only, [])
    inv = devices.inventory() if inventory is None else inventory
    if gpus is None:
        if not inv.devices:
            note = f"No GPU found: {inv.reason}; running on CPU workers."
            return _plan_cpu(workers, threads_per_worker, common, gpu_only, [note])
        missing = backends.gpu_stack_missing()
        if missing:
            note = (
                f"GPUs found, but {' and '.join(missing)} not installed; running on CPU "
                f"workers (for the GPUs: {backends.GPU_INSTALL_HINT})."
            )
            return _plan_cpu(workers, threads_per_worker, common, gpu_only, [note])
        if not devices.visible_devices(inv, os.environ.get("CUDA_VISIBLE_DEVICES")):
            note = (
                f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides every GPU; "
                "running on CPU workers."
            )
            return _plan_cpu(workers, threads_per_worker, common, gpu_only, [note])
        gpus = "all"
    chosen = devices.select(gpus, inv)
    backends.get("gpu")  # raises with the install command if the GPU stack is missing
    if workers is not None and workers != len(chosen):
        raise ClusterError(
            f"--workers {workers} with {len(chosen)} selected GPU(s): GPU runs use one worker "
            "per GPU; choose the GPUs with --gpus instead"
        )
    if protocol not in ("tcp", "ucx", "ucxx"):
        raise ClusterError(f"--protocol {protocol}: choose tcp or ucx")
    options = {
        **common,
        "CUDA_VISIBLE_DEVICES": [d.uuid for d in chosen],
        "n_workers": len(chosen),
        "threads_per_worker": threads_per_worker or 1,
        "protocol": protocol,
        **{k: v for k, v in gpu_only.items() if v is not None},
    }
    return ClusterPlan("gpu", chosen, len(chosen), threads_per_worker or 1, options)


def _memory_size(value):
    """``"0.8"`` -> 0.8 (a fraction of device memory); ``"5GB"`` stays text, as dask-cuda wants.

    >>> _memory_size("0.8"), _memory_size("20000000000"), _memory_size("5GB")
    (0.8, 20000000000, '5GB')
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    try:
        dask.utils.parse_bytes(text)
    except ValueError:
        raise ClusterError(
            f"memory size {value!r}: use bytes with a unit (20GB, 512MiB) or a fraction (0.8)"
        ) from None
    return text


def _check_counts(workers: int | None, threads_per_worker: int | None) -> None:
    for name, value in (("--workers", workers), ("--threads-per-worker", threads_per_worker)):
        if value is not None and (isinstance(value, bool) or int(value) < 1):
            raise ClusterError(f"{name} {value}: must be 1 or more")


def _plan_external(gpus, cpu, workers, address, scheduler_file) -> ClusterPlan:
    if gpus is not None:
        raise ClusterError(
            "--gpus cannot be used with an existing scheduler: devices are chosen where the "
            "workers start (CUDA_VISIBLE_DEVICES=... dask cuda worker ADDRESS)"
        )
    if cpu or workers is not None:
        raise ClusterError(
            "--cpu/--workers cannot be used with an existing scheduler: its workers decide"
        )
    if address and scheduler_file:
        raise ClusterError("give --scheduler-address or --scheduler-file, not both")
    if scheduler_file and not os.path.isfile(scheduler_file):
        raise ClusterError(
            f"--scheduler-file {scheduler_file}: no such file (write it with "
            "`dask scheduler --scheduler-file PATH`)"
        )
    options = {"address": address} if address else {"scheduler_file": scheduler_file}
    return ClusterPlan("external", options=options)


def _plan_cpu(workers, threads_per_worker, common, gpu_only, notices) -> ClusterPlan:
    given = [k.replace("_", "-") for k, v in gpu_only.items() if v is not None]
    if given:
        raise ClusterError(f"--{', --'.join(given)} only apply to GPU workers")
    cores = os.cpu_count() or 1
    if workers is None and threads_per_worker is None:
        threads_per_worker = int(daskgpu_config.get("cpu.threads-per-worker"))
        workers = max(1, cores // threads_per_worker)
    elif workers is None:
        workers = max(1, cores // threads_per_worker)
    elif threads_per_worker is None:
        threads_per_worker = max(1, cores // workers)
    options = {**common, "n_workers": workers, "threads_per_worker": threads_per_worker}
    return ClusterPlan("cpu", [], workers, threads_per_worker, options, notices)


def _local_cuda_cluster_class():
    from dask_cuda import LocalCUDACluster

    return LocalCUDACluster


def _start_local(p: ClusterPlan):
    from distributed import LocalCluster

    cls = _local_cuda_cluster_class() if p.kind == "gpu" else LocalCluster
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cluster = cls(silence_logs=logging.ERROR, **p.options)
    for w in caught:
        text = str(w.message)
        if "already in use" in text:
            p.notices.append(
                f"Dashboard port {p.options['dashboard_address']} is busy; serving it on "
                f"port {cluster.scheduler.http_server.port} instead."
            )
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return cluster


def _connect_external(p: ClusterPlan):
    from distributed import Client

    timeout = daskgpu_config.get("scheduler.connect-timeout")
    target = p.options.get("address") or f"the scheduler in {p.options['scheduler_file']}"
    try:
        return Client(**p.options, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"cannot reach {target} within {timeout} ({type(exc).__name__}); is "
            "`dask scheduler` running there, and is the address right?"
        ) from None
    except ValueError as exc:
        raise ClusterError(f"bad scheduler address {target!r}: {exc}") from None


@contextlib.contextmanager
def start(p: ClusterPlan) -> Iterator:
    """Start what a plan says and yield a connected ``distributed.Client``; always close it."""
    from distributed import Client

    began = time.perf_counter()
    cluster = client = None
    try:
        if p.kind == "external":
            client = _connect_external(p)
        else:
            cluster = _start_local(p)
            client = Client(cluster, set_as_default=False)
            client.wait_for_workers(p.n_workers)
        if p.kind == "external":  # nothing was started; its dashboard may be off
            start_s, dashboard = None, _served_dashboard(client)
        else:
            start_s = time.perf_counter() - began
            dashboard = dashboard_link(client) if p.options.get("dashboard_address") else None
        _INFO[client] = ClusterInfo(p.kind, list(p.devices), start_s, dashboard, p.notices)
        with client.as_current():
            yield client
    finally:
        _close(client, cluster)


def dashboard_link(client) -> str | None:
    """The link of the dashboard the client's scheduler really serves, or None."""
    try:
        return client.dashboard_link
    except Exception:  # no dashboard (disabled, or bokeh missing on the scheduler)
        return None


def _served_dashboard(client) -> str | None:
    """The dashboard link of a scheduler daskgpu did not start, if its status page answers."""
    import urllib.request

    link = dashboard_link(client)
    if not link:
        return None
    try:
        with urllib.request.urlopen(link, timeout=2) as response:
            return link if response.status == 200 else None
    except OSError:  # refused, 404 (HTTPError), timeout: no dashboard there
        return None


def _close(client, cluster) -> None:
    # A second Ctrl-C while closing must not leave workers behind: keep closing.
    for closable in (client, cluster):
        if closable is None:
            continue
        for _attempt in range(3):
            try:
                closable.close()
                break
            except KeyboardInterrupt:
                continue
            except Exception as exc:  # closing must go on for the other object
                log.debug("error while closing %r: %s", closable, exc)
                break


@contextlib.contextmanager
def cluster(**options) -> Iterator:
    """Start (or connect to) a cluster and yield a ``distributed.Client``.

    Parameters
    ----------
    gpus : str, optional
        ``all``, ``0,1``, ``0-3``, ``GPU-<uuid>``, ``MIG-<uuid>``: one worker per GPU.
        Default: every visible GPU, or CPU workers where there is none.
    cpu : bool
        Force CPU workers.
    workers, threads_per_worker : int, optional
        Shape of the CPU cluster (``threads_per_worker`` also applies to GPU workers).
    scheduler_address, scheduler_file : str, optional
        Use a running ``dask scheduler`` instead of starting a cluster.
    dashboard_address : str, optional
        Where the dashboard listens (default ``127.0.0.1:8787``); ``dashboard=False`` for none.
    rmm_pool_size, device_memory_limit, protocol :
        Passed to ``dask_cuda.LocalCUDACluster``.

    Examples
    --------
    >>> import daskgpu
    >>> with daskgpu.cluster(cpu=True, workers=2) as client:  # doctest: +SKIP
    ...     result = daskgpu.run("mean-pipeline", client=client, size=2000)
    """
    with start(plan(**options)) as client:
        yield client
