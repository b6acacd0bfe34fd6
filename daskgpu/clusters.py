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
import math
import os
import time
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

import dask.utils

from daskgpu import backends, devices, failures, security
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
    ``tls_*`` files are for an existing scheduler only (see :mod:`daskgpu.security`).

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
        "memory_limit": _memory_size(memory_limit, "--memory-limit", allow_auto=True),
        "preload": ["daskgpu.worker_setup"],
    }
    if not dashboard:
        # The scheduler serves HTTP (health, metrics) even without a dashboard: keep that on a
        # free loopback port rather than trying 8787 (or listening wherever --host says).
        common["dashboard_address"] = None
        common["scheduler_kwargs"] = {"dashboard": False, "dashboard_address": f"{LOOPBACK}:0"}
    gpu_only = {
        "rmm_pool_size": _memory_size(rmm_pool_size, "--rmm-pool-size"),
        "device_memory_limit": _memory_size(device_memory_limit, "--device-memory-limit"),
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


def _memory_size(value, option: str = "memory size", allow_auto: bool = False):
    """A memory size as dask and dask-cuda read it, checked: bytes, a fraction, or text.

    ``"0.8"`` -> 0.8 (a fraction of the memory), ``"20000000000"`` -> bytes, ``"5GB"`` stays
    text; ``"auto"`` where ``allow_auto``.

    >>> _memory_size("0.8"), _memory_size("20000000000"), _memory_size("5GB")
    (0.8, 20000000000, '5GB')

    Raises
    ------
    ClusterError
        For text that is no size, a negative or non-finite number, or a fraction above 1.
    """
    if value is None:
        return None
    if allow_auto and isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    wrong = ClusterError(
        f"{option} {value!r}: use bytes with a unit (20GB, 512MiB) or a fraction of the "
        f"memory (0.8){', or auto' if allow_auto else ''}"
    )
    if isinstance(value, bool):
        raise wrong
    number = value
    if isinstance(value, str):
        text = value.strip()
        number = _plain_number(text)
        if number is None:
            try:
                size = dask.utils.parse_bytes(text)
            except (ValueError, OverflowError):
                raise wrong from None
            if not 0 <= size < 2**63:
                raise wrong
            return text
    if isinstance(number, float):
        if not math.isfinite(number) or number < 0:
            raise wrong
        if number > 1:  # not a fraction: whole bytes, or nothing
            if not number.is_integer() or number >= 2**63:
                raise wrong
            number = int(number)
    elif not 0 <= number < 2**63:
        raise wrong
    return number


def _plain_number(text: str) -> int | float | None:
    for kind in (int, float):
        try:
            return kind(text)
        except (ValueError, OverflowError):
            continue
    return None


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
    # Ctrl-C waits for the start to end (then the cluster is closed); the scheduler reads
    # daskgpu's fault settings as it starts.
    failures.quiet_interrupted_syncs()
    with failures.interrupts_deferred(), warnings.catch_warnings(record=True) as caught, \
            dask.config.set(daskgpu_config.scheduler_settings()):
        warnings.simplefilter("always")
        # Workers log only what is critical: a run's failures reach the client, which says
        # them in one line; a worker cut off from a closing scheduler is no news.
        cluster = cls(silence_logs=logging.CRITICAL, **p.options)
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
    except (OSError, TimeoutError, TypeError) as exc:  # TypeError: tls:// without certificates
        why = security.explain_failure(exc, target, tls="security" in p.options)
        if why:
            raise ClusterError(why) from None
        if isinstance(exc, TypeError):
            raise
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
            dashboard = None
            if p.options.get("dashboard_address"):
                dashboard = _where_served(dashboard_link(client), cluster)
        _INFO[client] = ClusterInfo(p.kind, list(p.devices), start_s, dashboard, p.notices)
        with client.as_current():
            yield client
    finally:
        with failures.closing():  # a second Ctrl-C waits until the cluster is closed
            _close(client, cluster)


def dashboard_link(client) -> str | None:
    """The link of the dashboard the client's scheduler really serves, or None."""
    try:
        return client.dashboard_link
    except Exception:  # no dashboard (disabled, or bokeh missing on the scheduler)
        return None


def _where_served(link: str | None, cluster) -> str | None:
    """The link with the host the dashboard really listens on (``--host`` may differ from it)."""
    from urllib.parse import urlsplit

    server = getattr(getattr(cluster, "scheduler", None), "http_server", None)
    bound = getattr(server, "address", None)
    if not link or not bound or bound in ("0.0.0.0", "::") or ":" in bound:
        return link  # every interface: distributed's link (the scheduler's host) works
    parts = urlsplit(link)
    return parts._replace(netloc=f"{bound}:{parts.port}").geturl()


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
    tls_ca_file, tls_cert, tls_key : str, optional
        PEM files for a TLS scheduler (``tls://``): the CA that signed its certificate, and this
        client's certificate and key (the key may be in the certificate file).
    dashboard_address : str, optional
        Where the dashboard listens (default ``127.0.0.1:8787``); ``dashboard=False`` for none.
        Beyond loopback it is reachable from the network: the plan's notices warn.
    host : str, optional
        Where the scheduler and workers of a started cluster listen (default ``127.0.0.1``).
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


def record_task_stream(client) -> bool:
    """Have the scheduler record the task stream from now on.

    Distributed starts recording only when a dashboard page that shows the task stream is
    first opened; recording from the start lets a page opened after the run (``--keep-open``)
    show the run's tasks. Returns False where the scheduler refuses (e.g. it runs no code sent
    by clients).
    """

    def add_plugin(dask_scheduler=None):
        from distributed.diagnostics.task_stream import TaskStreamPlugin

        if TaskStreamPlugin.name not in dask_scheduler.plugins:
            dask_scheduler.add_plugin(TaskStreamPlugin(dask_scheduler))

    try:
        client.run_on_scheduler(add_plugin)
    except Exception as exc:  # the run itself does not need it
        log.debug("cannot record the task stream: %s", exc)
        return False
    return True
