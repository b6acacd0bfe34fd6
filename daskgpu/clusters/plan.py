"""Plan the cluster a run computes on, from the options, before any process starts.

Pure and strict: it reads NVML (never CUDA) and the options, and refuses contradictory or
impossible ones in one line. Three kinds of plan:

- ``gpu``: ``dask_cuda.LocalCUDACluster`` with one worker per selected GPU.
- ``cpu``: ``distributed.LocalCluster``, where there is no GPU or ``cpu=True``.
- ``external``: an existing scheduler (``scheduler_address`` / ``scheduler_file``); its workers
  decide the backend.

Scheduler and dashboard listen on 127.0.0.1 unless told otherwise. :mod:`daskgpu.clusters.session`
carries a plan out.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field

import dask.config
import dask.system

from daskgpu import config as daskgpu_config
from daskgpu.clusters import devices, memory_sizes, security
from daskgpu.clusters.devices import Device, Inventory
from daskgpu.errors import ClusterError
from daskgpu.toolkit import backends
from daskgpu.toolkit.backends import Backend

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
    worker_config : dict
        ``dask.config`` settings in force while the cluster starts: the nannies hand them to
        their workers (``distributed.nanny.environ``, ``daskgpu.worker.*``).
    """

    kind: str
    devices: list[Device] = field(default_factory=list)
    n_workers: int | None = None
    threads_per_worker: int | None = None
    options: dict = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    worker_config: dict = field(default_factory=dict)

    @property
    def backend(self) -> Backend | None:
        """The backend the started cluster will compute on; None for an existing scheduler.

        Known before anything starts: the devices are the ones selected (with their memory, as
        NVML reports it), and nobody asks the workers again.
        """
        threads = (self.n_workers or 0) * (self.threads_per_worker or 0)
        if self.kind == "gpu":
            return backends.get("gpu", tuple(self.devices), len(self.devices), threads)
        if self.kind == "cpu":
            return backends.get("cpu", (), self.n_workers or 1, threads)
        return None

    @property
    def dashboard_on_first_visit(self) -> bool:
        """True where the dashboard's pages are built on their first request, not at start.

        See :func:`daskgpu.clusters.dashboard.serve_on_first_visit`.
        """
        return (self.kind != "external" and bool(self.options.get("dashboard_address"))
                and self.options.get("scheduler_kwargs", {}).get("dashboard") is False)


def describe(p: ClusterPlan) -> str:
    """What starting the plan will do, in a few words (for a progress message)."""
    if p.kind == "external":
        target = p.options.get("address") or f"the scheduler in {p.options['scheduler_file']}"
        return f"Connecting to {target}"
    if p.kind == "gpu":
        gpus = ", ".join(d.label for d in p.devices)
        return f"Starting {len(p.devices)} GPU worker(s) on GPU {gpus}"
    return f"Starting {p.n_workers} CPU worker(s) x {p.threads_per_worker} thread(s)"


def describe_failure(p: ClusterPlan, exc: Exception) -> str:
    """One line for a plan whose cluster failed to start with ``exc``, with what to try."""
    what = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    if p.kind != "gpu":
        return f"the CPU cluster failed to start ({what})"
    gpus = ", ".join(d.label for d in p.devices)
    hint = "check `nvidia-smi` and that dask-cuda matches the installed CUDA"
    if "%d format" in str(exc):
        hint = ("dask-cuda cannot place a MIG instance when NVML cannot report its GPU's CPU "
                "affinity; select whole GPUs by index")
    return f"the GPU cluster on GPU {gpus} failed to start ({what}); {hint}"


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
    host: str | None = LOOPBACK,
    rmm_pool_size: str | int | None = None,
    device_memory_limit: str | int | float | None = None,
    protocol: str = "tcp",
    inventory: Inventory | None = None,
    tls_ca_file: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> ClusterPlan:
    """Decide which cluster the options ask for; raise on contradictory or impossible ones.

    ``host`` and ``dashboard_address`` beyond loopback get a warning in ``notices``; the
    ``tls_*`` files are for an existing scheduler only (see :mod:`daskgpu.clusters.security`).

    Raises
    ------
    ClusterError, DeviceSelectionError, BackendUnavailable
        One line naming the problem and the fix.
    """
    _check_counts(workers, threads_per_worker)
    if gpus is not None and cpu:
        raise ClusterError("--gpus and --cpu contradict each other; give one of them")
    tls = {"ca_file": tls_ca_file, "cert": tls_cert, "key": tls_key}
    if scheduler_address or scheduler_file:
        if host is not None and host != LOOPBACK:
            raise ClusterError("--host is for clusters daskgpu starts, not an existing scheduler")
        return _plan_external(gpus, cpu, workers, scheduler_address, scheduler_file, tls)
    if any(v is not None for v in tls.values()):
        raise ClusterError(
            "--tls-ca-file/--tls-cert/--tls-key are for an existing TLS scheduler "
            "(--scheduler-address tls://HOST:PORT or --scheduler-file); a cluster daskgpu "
            "starts does not use TLS (it listens on 127.0.0.1 unless --host says otherwise)"
        )
    host = LOOPBACK if host is None else host
    if dashboard_address is None:
        dashboard_address = daskgpu_config.get("dashboard-address")
    exposed = _exposure_notices(host, dashboard_address if dashboard else None)
    common = {
        "dashboard_address": dashboard_address,
        "host": host,
        "memory_limit": memory_sizes.parse(memory_limit, "--memory-limit", allow_auto=True),
        "preload": ["daskgpu.clusters.worker_setup"],
    }
    if not dashboard:
        # The scheduler serves HTTP (health, metrics) even without a dashboard: keep that on a
        # free loopback port rather than trying 8787 (or listening wherever --host says).
        common["dashboard_address"] = None
        common["scheduler_kwargs"] = {"dashboard": False, "dashboard_address": f"{LOOPBACK}:0"}
    elif daskgpu_config.get("dashboard-on-first-visit"):
        # Served from the start, its Bokeh pages built on the first visit
        # (daskgpu.clusters.dashboard)
        common["scheduler_kwargs"] = {"dashboard": False}
    gpu_only = {
        "rmm_pool_size": memory_sizes.parse(rmm_pool_size, "--rmm-pool-size", allow_zero=False),
        "device_memory_limit": memory_sizes.parse(device_memory_limit, "--device-memory-limit"),
    }
    p = _plan_local(gpus, cpu, workers, threads_per_worker, common, gpu_only, protocol, inventory)
    p.notices.extend(exposed)
    return p


def _exposure_notices(host: str, dashboard_address: str | None) -> list[str]:
    """Warnings for a local cluster or dashboard that listens beyond loopback."""
    notes = []
    if not security.is_loopback(host):
        notes.append(security.exposure_notice(
            "the scheduler (with its workers)", "--host", host, LOOPBACK))
    if dashboard_address is not None:
        hosts = security.dashboard_hosts(dashboard_address)
        if not all(security.is_loopback(h) for h in hosts):
            notes.append(security.exposure_notice(
                "the dashboard", "--dashboard-address", dashboard_address, f"{LOOPBACK}:8787"))
    return notes


def _plan_local(gpus, cpu, workers, threads_per_worker, common, gpu_only, protocol, inventory):
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
        driver = devices.cuda_driver_problem()
        if driver:
            note = (f"GPUs found, but the CUDA driver library cannot be loaded ({driver}); "
                    f"running on CPU workers ({devices.CUDA_DRIVER_FIX}).")
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
    driver = devices.cuda_driver_problem()
    if driver:
        raise ClusterError(
            f"--gpus {gpus}: NVML sees the GPUs, but the CUDA driver library cannot be loaded "
            f"({driver}); {devices.CUDA_DRIVER_FIX}")
    if workers is not None:
        raise ClusterError(
            f"--workers {workers} with {len(chosen)} selected GPU(s): GPU runs use one worker "
            "per GPU; choose the GPUs with --gpus instead (or --cpu for CPU workers)"
        )
    if protocol not in ("tcp", "ucx", "ucxx"):
        raise ClusterError(f"--protocol {protocol}: choose tcp or ucx")
    by_index = _hand_over_by_index()
    options = {
        **common,
        "CUDA_VISIBLE_DEVICES": [_handed_over(d, by_index) for d in chosen],
        "n_workers": len(chosen),
        "threads_per_worker": threads_per_worker or 1,
        "protocol": protocol,
        **{k: v for k, v in gpu_only.items() if v is not None},
    }
    worker_config = {}
    if by_index:
        environ = {**dask.config.get("distributed.nanny.environ", {}),
                   "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        worker_config["distributed.nanny.environ"] = environ
    if gpu_only["rmm_pool_size"] is not None:
        _require_rmm()
        # dask-cuda routes CuPy to the pool; daskgpu's worker setup routes Numba (the kernels).
        options["rmm_allocator_external_lib_list"] = ["cupy"]
        worker_config["daskgpu.worker.rmm-for-numba"] = True
    return ClusterPlan("gpu", chosen, len(chosen), threads_per_worker or 1, options,
                       worker_config=worker_config)


def _hand_over_by_index() -> bool:
    """Whether workers can be handed whole GPUs by nvidia-smi index.

    dask-cuda formats the device with ``%d`` when NVML cannot report a GPU's CPU affinity
    (common in VMs and containers), so a UUID there fails the whole start. An index means the
    same GPU to CUDA only in PCI bus order, which the workers get unless the user has chosen
    another order.
    """
    return os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID") == "PCI_BUS_ID"


def _handed_over(device: Device, by_index: bool) -> str:
    """How a worker is told its device: the nvidia-smi index, or the UUID (MIG, other order)."""
    if by_index and device.mig_index is None:
        return str(device.index)
    return device.uuid


def _rmm_installed() -> bool:
    return importlib.util.find_spec("rmm") is not None


def _require_rmm() -> None:
    if not _rmm_installed():
        raise ClusterError(
            "--rmm-pool-size needs RMM, which is not installed: pip install rmm-cu13 (CUDA 13) "
            "or rmm-cu12 (CUDA 12), or leave the option out"
        )


def _check_counts(workers: int | None, threads_per_worker: int | None) -> None:
    for name, value in (("--workers", workers), ("--threads-per-worker", threads_per_worker)):
        if value is not None and (isinstance(value, bool) or int(value) < 1):
            raise ClusterError(f"{name} {value}: must be 1 or more")


def _plan_external(gpus, cpu, workers, address, scheduler_file, tls) -> ClusterPlan:
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
    secure = security.client_security(**tls)
    address = security.check_address(address, scheduler_file, secure)
    options = {"address": address} if address else {"scheduler_file": scheduler_file}
    if secure is not None:
        options["security"] = secure
    return ClusterPlan("external", options=options)


def _plan_cpu(workers, threads_per_worker, common, gpu_only, notices) -> ClusterPlan:
    given = [k.replace("_", "-") for k, v in gpu_only.items() if v is not None]
    if given:
        raise ClusterError(f"--{', --'.join(given)} only apply to GPU workers")
    cores = dask.system.CPU_COUNT  # respects cgroup and affinity limits
    if workers is None and threads_per_worker is None:
        threads_per_worker = int(daskgpu_config.get("cpu.threads-per-worker"))
        workers = max(1, cores // threads_per_worker)
    elif workers is None:
        workers = max(1, cores // threads_per_worker)
    elif threads_per_worker is None:
        threads_per_worker = max(1, cores // workers)
    options = {**common, "n_workers": workers, "threads_per_worker": threads_per_worker}
    return ClusterPlan("cpu", [], workers, threads_per_worker, options, notices)


