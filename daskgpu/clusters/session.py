"""A cluster's life: start (or connect to) what a plan says, hand out one ``Session``, close it.

A :class:`Session` is everything the rest of a run needs to know about where it computes: the
client, the backend and the devices as chosen, the worker layout, how long the start took, the
dashboard link and the notices for the user. Runner, bench and report receive it; nothing asks
the workers again what a local cluster was given.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import dask.config

from daskgpu import config as daskgpu_config
from daskgpu.clusters import (
    closing,
    cuda_probe,
    interrupts,
    security,
    worker_processes,
    worker_setup,
)
from daskgpu.clusters import dashboard as dashboards
from daskgpu.clusters.devices import Device
from daskgpu.clusters.plan import LOOPBACK, ClusterPlan, describe_failure, plan
from daskgpu.errors import ClusterError, DaskGPUError, python_names
from daskgpu.toolkit import backends, registry
from daskgpu.toolkit.backends import Backend


@dataclass(frozen=True)
class Session:
    """A connected cluster and what daskgpu knows about it.

    Attributes
    ----------
    client : distributed.Client
        Where to compute. Attributes a Session does not have are looked up on it, so a Session
        can stand where a Client did (``session.ncores()``).
    backend : Backend
        What the workers compute with: for a started cluster, the plan's (never asked); for an
        existing scheduler, asked of its workers once, when first needed (they may still be
        joining when the session connects).
    kind : {"gpu", "cpu", "external"}
        Started GPU workers, started CPU workers, or an existing scheduler.
    n_workers, threads_per_worker : int or None
        The layout a started cluster was given (None for an existing scheduler).
    start_s : float or None
        Seconds the start took (None when daskgpu only connected).
    dashboard : str or None
        The dashboard link that really answers, or None.
    notices : tuple of str
        One-line messages for the user (a fallback to CPU, an exposed port, a busy port).
    worker_pids : dict
        ``{address: pid}`` of local workers, kept by :mod:`daskgpu.execution.memory` to read their
        peak memory from here.
    """

    client: object
    known_backend: Backend | None
    kind: str
    n_workers: int | None = None
    threads_per_worker: int | None = None
    start_s: float | None = None
    dashboard: str | None = None
    notices: tuple[str, ...] = ()
    worker_pids: dict = field(default_factory=dict, compare=False)
    start_counted: bool = field(default=False, compare=False, repr=False)
    closer: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    def start_for_next_run(self) -> float | None:
        """The start's seconds for the session's first run; None for every run after it.

        A reused session's start is paid once: later runs neither report nor count it.
        """
        if self.start_counted:
            return None
        object.__setattr__(self, "start_counted", True)
        return self.start_s

    @property
    def backend(self) -> Backend:
        """What the workers compute with (an existing scheduler's workers are asked once).

        Raises
        ------
        ClusterError
            When an existing scheduler has no workers, or GPU and CPU workers are mixed.
        """
        if self.known_backend is None:
            object.__setattr__(self, "known_backend", backends.detect(self.client))
        return self.known_backend

    @property
    def devices(self) -> tuple[Device, ...]:
        """The GPUs the workers compute on (empty on CPU)."""
        return self.backend.devices

    def close(self) -> None:
        """Shut down what :func:`connect` started (or disconnect from an existing scheduler).

        Idempotent. Inside ``with daskgpu.cluster()`` the ``with`` does it on leaving, and so
        does a ``with`` around :func:`connect`'s session.
        """
        closer = self.closer
        object.__setattr__(self, "closer", None)
        if closer is not None:
            closer()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getattr__(self, name: str):
        # Only reached for names a Session does not define: before Session existed,
        # daskgpu.cluster() handed out the Client itself.
        if name.startswith("__") or name == "client":
            raise AttributeError(name)
        return getattr(self.client, name)


def for_client(client) -> Session:
    """A Session for a client daskgpu did not connect: its workers are asked, once.

    Raises
    ------
    ClusterError
        When it has no workers, or GPU and CPU workers are mixed.
    """
    if isinstance(client, Session):
        return client
    return Session(client, None, "external", dashboard=dashboards.link_of(client))


def current() -> Session:
    """A Session for the current ``distributed`` client (``with client.as_current():``).

    Raises
    ------
    ClusterError
        When there is none.
    """
    from distributed import get_client

    try:
        client = get_client()
    except ValueError:
        raise ClusterError(
            "no cluster to run on: use `with daskgpu.cluster() as session:` and pass session="
        ) from None
    return for_client(client)


def _local_cuda_cluster_class():
    from dask_cuda import LocalCUDACluster

    return LocalCUDACluster


def _warm_up_names(warm_up: str | Sequence[str] | None) -> tuple[str, ...]:
    if warm_up is None:
        return ()
    return (warm_up,) if isinstance(warm_up, str) else tuple(warm_up)


def _start_local(p: ClusterPlan, notices: list[str], warm_up: tuple[str, ...] = ()):
    from distributed import LocalCluster

    cls = _local_cuda_cluster_class() if p.kind == "gpu" else LocalCluster
    # Ctrl-C waits for the start to end (then the cluster is closed); the scheduler reads
    # daskgpu's fault settings, and the nannies the workers' settings, as they start.
    interrupts.quiet_interrupted_syncs()
    settings = {**daskgpu_config.scheduler_settings(), **p.worker_config,
                "distributed.nanny.pre-spawn-environ": worker_processes.pre_spawn_environ()}
    if p.kind == "cpu":
        settings.update(worker_processes.settings())
    if warm_up and daskgpu_config.get("worker.warm-up-on-start"):
        settings[worker_setup.WARM_UP] = {"pipelines": list(warm_up),
                                          "backend": p.backend.name}
    with interrupts.interrupts_deferred(), warnings.catch_warnings(record=True) as caught, \
            dask.config.set(settings):
        warnings.simplefilter("always")
        try:
            # Workers log only what is critical: a run's failures reach the client, which
            # says them in one line; a worker cut off from a closing scheduler is no news.
            cluster = cls(silence_logs=logging.CRITICAL, **p.options)
        except (KeyboardInterrupt, DaskGPUError):
            raise
        except Exception as exc:
            raise ClusterError(describe_failure(p, exc)) from None
    for w in caught:
        text = str(w.message)
        if "already in use" in text:
            notices.append(
                f"Dashboard port {p.options['dashboard_address']} is busy; serving it on "
                f"port {cluster.scheduler.http_server.port} instead."
            )
        elif "Cannot get CPU affinity" in text:
            notices.append(
                "NVML cannot say which CPUs are closest to the GPUs (common in VMs and "
                "containers); GPU workers may run on any core."
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


def _no_cuda_context_here() -> None:
    # cuDF makes a CUDA context on import, to check the device, unless told not to; in the
    # client (should anything import cuDF there: the pipelines' collections carry pandas
    # meta) it would hold GPU memory. Set after local workers have started: they check.
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")


def _wait_for_workers(client, n: int, timeout: float = 60.0) -> None:
    """Until ``n`` workers have registered, whatever their status.

    ``Client.wait_for_workers`` counts running workers only: one paused from the start (its own
    memory above the pause threshold) would make it wait forever, where the run's fault watch
    would say what is wrong in one line.
    """
    deadline = time.monotonic() + timeout
    while len(backends.scheduler_workers(client)) < n:
        if time.monotonic() > deadline:
            raise ClusterError(f"only {len(backends.scheduler_workers(client))} of {n} workers "
                               f"started within {timeout:g} s; see their logs")
        time.sleep(0.05)


@contextlib.contextmanager
def start(p: ClusterPlan, warm_up: str | Sequence[str] | None = None,
          current: bool = True) -> Iterator[Session]:
    """Start what a plan says, its workers warmed for the pipeline(s) ``warm_up``; yield, close.

    ``current``: the session's client is Dask's default client while it is open.
    """
    from distributed import Client

    began = time.perf_counter()
    cluster = client = None
    notices = list(p.notices)
    # Held until the cluster is closed: a nanny restarting a worker that died as the run
    # failed forks it as the others were, rather than spawn a fresh interpreter to close.
    running = contextlib.ExitStack()
    try:
        if p.kind == "external":
            _no_cuda_context_here()
            client = _connect_external(p)
            session = Session(client, None, "external",
                              dashboard=dashboards.served_link(client), notices=tuple(notices))
        else:
            cluster = _start_local(p, notices, _warm_up_names(warm_up))
            if p.dashboard_on_first_visit:
                dashboards.serve_on_first_visit(cluster.scheduler)
            _no_cuda_context_here()
            client = Client(cluster, set_as_default=False)
            _wait_for_workers(client, p.n_workers)
            if p.kind == "gpu":
                cuda_probe.check_kernel_launch(client)
            if p.worker_config.get("daskgpu.worker.rmm-for-numba"):
                worker_setup.check_rmm_routing(client)
            dashboard = None
            if p.options.get("dashboard_address"):
                dashboard = dashboards.where_served(dashboards.link_of(client), cluster)
            session = Session(client, p.backend, p.kind, p.n_workers, p.threads_per_worker,
                              time.perf_counter() - began, dashboard, tuple(notices))
        # A session left open across a REPL's or a notebook's calls (connect) sets no context
        # variable: it is handed to run() explicitly.
        current_client = client.as_current() if current else contextlib.nullcontext()
        running.enter_context(dask.config.set(worker_processes.while_running(p.kind)))
        with current_client:
            yield session
    finally:
        failed = sys.exc_info()[1] is not None
        with running, interrupts.closing():  # a second Ctrl-C waits until the cluster is closed
            closing.close(client, cluster, failed=failed)


@contextlib.contextmanager
def cluster(
    gpus: str | None = None,
    cpu: bool = False,
    workers: int | None = None,
    threads_per_worker: int | None = None,
    memory_limit: str | int | float | None = "auto",
    scheduler_address: str | None = None,
    scheduler_file: str | None = None,
    tls_ca_file: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    dashboard_address: str | None = None,
    dashboard: bool = True,
    host: str = LOOPBACK,
    rmm_pool_size: str | int | None = None,
    device_memory_limit: str | int | float | None = None,
    protocol: str = "tcp",
    warm_up: str | Sequence[str] | None = None,
    _current: bool = True,
) -> Iterator[Session]:
    """Start (or connect to) a cluster and yield its :class:`Session`; always close it.

    Everything is checked before any process starts; a bad option raises a
    :class:`~daskgpu.errors.DaskGPUError` with one line saying what would work.

    Parameters
    ----------
    gpus : str, optional
        ``"all"``, ``"0,1"``, ``"0-3"``, ``"GPU-<uuid>"``, ``"MIG-<uuid>"``: one worker per
        GPU (nvidia-smi indices; positions in ``CUDA_VISIBLE_DEVICES`` when it is set).
        Default: every visible GPU, or CPU workers where there is none.
    cpu : bool, default False
        CPU workers even where GPUs exist.
    workers : int, optional
        CPU workers (default: cores / ``threads_per_worker``). GPU runs have one per GPU.
    threads_per_worker : int, optional
        Threads per worker (default: ``daskgpu.cpu.threads-per-worker`` on CPU, 1 on GPU).
    memory_limit : str, int or float, default "auto"
        Host memory per worker: bytes, text (``"4GiB"``), a fraction (0.5) or ``"auto"``.
    scheduler_address : str, optional
        A running scheduler (``"tcp://host:8786"``) instead of starting a cluster.
    scheduler_file : str, optional
        A running scheduler, by the file ``dask scheduler --scheduler-file`` wrote.
    tls_ca_file, tls_cert, tls_key : str, optional
        PEM files for a TLS scheduler (``tls://``): the CA that signed its certificate, and this
        client's certificate and key (the key may be in the certificate file).
    dashboard_address : str, optional
        Where the dashboard listens (default ``daskgpu.dashboard-address``, 127.0.0.1:8787).
        Beyond loopback it is reachable from the network: the notices warn.
    dashboard : bool, default True
        False serves no dashboard. Served, its pages are built on the first visit
        (``daskgpu.dashboard-on-first-visit``; see :mod:`daskgpu.clusters.dashboard`).
    host : str, default "127.0.0.1"
        Where a started cluster's scheduler and workers listen.
    rmm_pool_size : str or int, optional
        RMM memory pool per GPU worker (``"20GB"``); GPU workers only.
    device_memory_limit : str, int or float, optional
        Spill device memory to host above this (``"30GB"`` or 0.8); GPU workers only.
    protocol : {"tcp", "ucx"}, default "tcp"
        Communication between GPU workers.
    warm_up : str or list of str, optional
        Pipelines to ready each started worker for as it starts (their modules imported, their
        kernels loaded): the first run of each then pays no compilation, as from the command
        line. Unknown names are refused before anything starts.

    Yields
    ------
    Session

    Examples
    --------
    >>> import daskgpu
    >>> with daskgpu.cluster(cpu=True, workers=2) as session:  # doctest: +SKIP
    ...     result = daskgpu.run("mean-pipeline", session, size=2000)
    """
    with python_names():
        chosen = plan(
            gpus=gpus, cpu=cpu, workers=workers, threads_per_worker=threads_per_worker,
            memory_limit=memory_limit, scheduler_address=scheduler_address,
            scheduler_file=scheduler_file, tls_ca_file=tls_ca_file, tls_cert=tls_cert,
            tls_key=tls_key, dashboard_address=dashboard_address, dashboard=dashboard,
            host=host, rmm_pool_size=rmm_pool_size, device_memory_limit=device_memory_limit,
            protocol=protocol,
        )
        for name in _warm_up_names(warm_up):
            registry.get(name)  # an unknown name: refused before anything starts
    with start(chosen, warm_up, current=_current) as session:
        yield session


def connect(**options) -> Session:
    """Start (or connect to) a cluster, as :func:`cluster` does, and return its open Session.

    For a REPL or a notebook, where a ``with`` cannot span the calls: ``session.close()``
    shuts it down (a ``with session:`` does it on leaving too). The client is not made Dask's
    default: pass the session to :func:`daskgpu.run`.

    Parameters
    ----------
    **options
        Those of :func:`cluster` (``gpus``, ``cpu``, ``workers``, ``scheduler_address``, ...).

    Returns
    -------
    Session
        Open until ``close()``; what it started is also shut down when Python exits.

    Examples
    --------
    >>> session = daskgpu.connect(cpu=True, workers=2)  # doctest: +SKIP
    >>> daskgpu.run("mean-pipeline", session, size=2000).value  # doctest: +SKIP
    >>> session.close()  # doctest: +SKIP
    """
    opened = contextlib.ExitStack()
    session = opened.enter_context(cluster(**options, _current=False))
    object.__setattr__(session, "closer", opened.close)
    return session
