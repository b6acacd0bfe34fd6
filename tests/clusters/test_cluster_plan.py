"""The cluster factory: which cluster the options ask for, starting it, and closing it."""

from __future__ import annotations

import socket
import time
import urllib.request
from urllib.parse import urlparse

import dask
import dask.system
import distributed
import pytest
from conftest import TWO_GPUS

import daskgpu
import daskgpu.toolkit.backends
from daskgpu.clusters import cuda_probe, devices, worker_setup
from daskgpu.clusters import plan as cluster_plan
from daskgpu.clusters import session as sessions
from daskgpu.errors import BackendUnavailable, ClusterError, DaskGPUError, DeviceSelectionError

UUID0 = TWO_GPUS["gpus"][0]["uuid"]
UUID1 = TWO_GPUS["gpus"][1]["uuid"]
GPU_ONLY = ("CUDA_VISIBLE_DEVICES", "rmm_pool_size", "device_memory_limit", "protocol",
            "rmm_allocator_external_lib_list")


@pytest.fixture
def gpus(fake_nvml, monkeypatch):
    """Two fake GPUs, and a GPU stack (cupy, dask_cuda) that pretends to be installed."""
    fake_nvml(TWO_GPUS)
    monkeypatch.setattr(daskgpu.toolkit.backends, "gpu_stack_missing", lambda: [])
    monkeypatch.setattr(devices, "cuda_driver_problem", lambda: None)
    return devices.inventory()


@pytest.fixture
def no_gpu(fake_nvml):
    fake_nvml({"error": "LibraryNotFound"})


def _one_line(exc: BaseException) -> bool:
    text = str(exc)
    return bool(text.strip()) and "\n" not in text


def _no_cuda_cluster():
    raise AssertionError("a CPU or external plan must not start dask_cuda.LocalCUDACluster")


# --------------------------------------------------------------------------------------------
# GPU plans


def test_gpu_plan_hands_each_worker_its_gpu_by_index_in_pci_order(gpus):
    p = cluster_plan.plan(gpus="1,0", threads_per_worker=3)
    assert p.kind == "gpu"
    assert p.devices == [gpus.devices[1], gpus.devices[0]]
    # dask-cuda 26.10 fails the whole start on a UUID where NVML has no CPU affinity.
    assert p.options["CUDA_VISIBLE_DEVICES"] == ["1", "0"]
    assert p.worker_config["distributed.nanny.environ"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert p.n_workers == p.options["n_workers"] == 2
    assert p.threads_per_worker == p.options["threads_per_worker"] == 3
    assert p.options["dashboard_address"] == "127.0.0.1:8787"
    assert p.options["host"] == "127.0.0.1"
    assert "rmm_pool_size" not in p.options
    assert "device_memory_limit" not in p.options
    assert p.options.get("protocol", "tcp") == "tcp"
    assert p.notices == []


def test_gpu_plan_one_gpu_and_default_threads(gpus):
    p = cluster_plan.plan(gpus=UUID1)
    assert p.options["CUDA_VISIBLE_DEVICES"] == ["1"]
    assert p.n_workers == 1
    assert p.options["threads_per_worker"] == 1


def test_gpu_plan_passes_gpu_options_through_when_given(gpus, monkeypatch):
    monkeypatch.setattr(cluster_plan, "_rmm_installed", lambda: True)
    p = cluster_plan.plan(
        gpus="0",
        rmm_pool_size="2GB",
        device_memory_limit=0.8,
        protocol="ucx",
        dashboard_address="127.0.0.1:9999",
        host="10.0.0.5",
        memory_limit="4GB",
    )
    assert p.options["rmm_pool_size"] == "2GB"
    assert p.options["device_memory_limit"] == 0.8
    assert p.options["protocol"] == "ucx"
    assert p.options["dashboard_address"] == "127.0.0.1:9999"
    assert p.options["host"] == "10.0.0.5"
    assert p.options["memory_limit"] == "4GB"


def test_gpu_plan_without_dashboard(gpus):
    p = cluster_plan.plan(gpus="0", dashboard=False, dashboard_address="127.0.0.1:9999")
    assert p.options["dashboard_address"] is None


def test_dashboard_default_comes_from_config(gpus):
    with dask.config.set({"daskgpu.dashboard-address": "127.0.0.1:8999"}):
        assert cluster_plan.plan(gpus="0").options["dashboard_address"] == "127.0.0.1:8999"


def test_gpu_plan_by_default_takes_every_gpu(gpus):
    p = cluster_plan.plan()
    assert p.kind == "gpu"
    assert p.options["CUDA_VISIBLE_DEVICES"] == ["0", "1"]
    assert p.notices == []


def test_gpu_plan_honours_preset_cuda_visible_devices(gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    p = cluster_plan.plan(gpus="0")
    assert p.options["CUDA_VISIBLE_DEVICES"] == ["1"]
    assert cluster_plan.plan().options["CUDA_VISIBLE_DEVICES"] == ["1"]


def test_gpu_plan_uses_the_inventory_it_is_given(fake_nvml, monkeypatch):
    fake_nvml(TWO_GPUS)
    inv = devices.inventory()
    fake_nvml({"error": "DriverNotLoaded"})  # reading NVML again would find nothing
    monkeypatch.setattr(daskgpu.toolkit.backends, "gpu_stack_missing", lambda: [])
    monkeypatch.setattr(devices, "cuda_driver_problem", lambda: None)
    p = cluster_plan.plan(gpus="1", inventory=inv)
    assert p.options["CUDA_VISIBLE_DEVICES"] == ["1"]


def test_gpu_plan_rejects_unknown_protocol(gpus):
    with pytest.raises(ClusterError, match="tcp or ucx") as err:
        cluster_plan.plan(gpus="0", protocol="carrier-pigeon")
    assert _one_line(err.value)


@pytest.fixture
def recording_cluster(monkeypatch):
    """Make GPU plans start a small in-process LocalCluster recording what it was given."""

    class RecordingCluster(distributed.LocalCluster):
        """Records what a LocalCUDACluster would get; runs a small in-process CPU cluster."""

        received: list[dict] = []
        made: list[distributed.LocalCluster] = []

        def __init__(self, **kwargs):
            self.received.append(dict(kwargs))
            for key in (*GPU_ONLY, "host"):
                kwargs.pop(key, None)
            super().__init__(processes=False, **kwargs)
            self.made.append(self)

    monkeypatch.setattr(sessions, "_local_cuda_cluster_class", lambda: RecordingCluster)
    # The in-process "GPU" workers have no CUDA: their kernel launch is taken as working.
    monkeypatch.setattr(cuda_probe, "kernel_launch_problem", lambda: None)
    return RecordingCluster


def test_start_gpu_plan_gives_cluster_class_the_devices(gpus, recording_cluster, monkeypatch):
    monkeypatch.setattr(cluster_plan, "_rmm_installed", lambda: True)
    routed = []  # the in-process workers' preload routes Numba to RMM (rmm is not here)
    monkeypatch.setattr(worker_setup, "route_numba_to_rmm", lambda: routed.append(True))
    p = cluster_plan.plan(gpus="1,0", rmm_pool_size="1GB", device_memory_limit="10GB",
                          dashboard=False)
    with sessions.start(p) as client:
        (kwargs,) = recording_cluster.received
        assert kwargs["CUDA_VISIBLE_DEVICES"] == ["1", "0"]
        assert kwargs["rmm_allocator_external_lib_list"] == ["cupy"]
        assert kwargs["n_workers"] == 2
        assert kwargs["threads_per_worker"] == 1
        assert kwargs["rmm_pool_size"] == "1GB"
        assert kwargs["device_memory_limit"] == "10GB"
        assert kwargs["host"] == "127.0.0.1"
        assert kwargs["dashboard_address"] is None
        assert kwargs.get("protocol", "tcp") == "tcp"
        assert len(client.scheduler_info()["workers"]) == 2
        got = client
        assert got.kind == "gpu"
        assert list(got.devices) == [gpus.devices[1], gpus.devices[0]]
        assert [d.uuid for d in got.devices] == [UUID1, UUID0]
        assert got.start_s > 0
        assert got.dashboard is None
        assert got.notices == ()
        assert distributed.default_client() is client.client
        assert client.submit(sum, [1, 2, 3]).result() == 6
        assert routed == [True, True]
    assert client.status == "closed"
    (made,) = recording_cluster.made
    assert made.status.name == "closed"


def test_start_closes_everything_when_the_run_fails(gpus, recording_cluster, monkeypatch):
    closed = []
    real_close = distributed.Client.close

    def recording_close(self, *args, **kwargs):
        closed.append(self)
        return real_close(self, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "close", recording_close)
    with pytest.raises(RuntimeError, match="boom"):
        with sessions.start(cluster_plan.plan(gpus="0", dashboard=False)) as client:
            raise RuntimeError("boom")
    # (other, garbage-collected clients may close meanwhile: look for this one)
    assert any(c is client.client for c in closed)
    assert client.status == "closed"
    (made,) = recording_cluster.made
    assert made.status.name == "closed"


# --------------------------------------------------------------------------------------------
# Falling back to CPU, and a GPU stack that is not installed


def test_no_gpu_falls_back_to_cpu_with_one_notice(no_gpu, monkeypatch):
    monkeypatch.setattr(daskgpu.toolkit.backends, "gpu_stack_missing", lambda: [])
    monkeypatch.setattr(devices, "cuda_driver_problem", lambda: None)
    p = cluster_plan.plan()
    assert p.kind == "cpu"
    assert p.devices == []
    (note,) = p.notices
    assert "No GPU found" in note
    assert "NVML library not found" in note
    assert "\n" not in note
    assert not any(key in p.options for key in GPU_ONLY)


def test_gpus_without_gpu_stack_fall_back_with_install_hint(fake_nvml, monkeypatch):
    fake_nvml(TWO_GPUS)
    monkeypatch.setattr(daskgpu.toolkit.backends, "gpu_stack_missing", lambda: ["cupy"])
    p = cluster_plan.plan()
    assert p.kind == "cpu"
    assert p.devices == []
    (note,) = p.notices
    assert "cupy" in note
    assert "dask_cuda" not in note
    assert "pip install" in note
    assert daskgpu.toolkit.backends.GPU_INSTALL_HINT in note
    assert "CUDA_VISIBLE_DEVICES" not in p.options


def test_asked_for_gpus_without_gpu_stack_is_an_error(fake_nvml, monkeypatch):
    fake_nvml(TWO_GPUS)
    monkeypatch.setattr(daskgpu.toolkit.backends, "gpu_stack_missing", lambda: ["cupy"])
    with pytest.raises(BackendUnavailable) as err:
        cluster_plan.plan(gpus="0")
    message = str(err.value)
    assert "pip install" in message
    assert "cupy" in message
    assert _one_line(err.value)


def test_gpus_on_machine_without_gpu_suggests_cpu(no_gpu):
    with pytest.raises(DeviceSelectionError) as err:
        cluster_plan.plan(gpus="0")
    assert "--cpu" in str(err.value)
    assert "NVML library not found" in str(err.value)
    assert _one_line(err.value)


def test_cpu_plan_never_reads_nvml(monkeypatch):
    def forbidden():
        raise AssertionError("--cpu must not query NVML")

    monkeypatch.setattr(devices, "inventory", forbidden)
    p = cluster_plan.plan(cpu=True)
    assert p.kind == "cpu"
    assert p.notices == []


# --------------------------------------------------------------------------------------------
# Contradictory or impossible options


ADDRESS = "tcp://127.0.0.1:8786"
EXISTING, MISSING = "<existing scheduler file>", "<missing scheduler file>"
PLAN_ERRORS = [
    pytest.param(dict(gpus="0", cpu=True), ClusterError, "--cpu", id="gpus-and-cpu"),
    pytest.param(
        dict(gpus="0", scheduler_address=ADDRESS),
        ClusterError,
        "existing scheduler",
        id="gpus-and-scheduler",
    ),
    pytest.param(
        dict(gpus="0", scheduler_file=EXISTING),
        ClusterError,
        "existing scheduler",
        id="gpus-and-scheduler-file",
    ),
    pytest.param(
        dict(cpu=True, scheduler_address=ADDRESS),
        ClusterError,
        "existing scheduler",
        id="cpu-and-scheduler",
    ),
    pytest.param(
        dict(workers=2, scheduler_address=ADDRESS),
        ClusterError,
        "existing scheduler",
        id="workers-and-scheduler",
    ),
    pytest.param(
        dict(scheduler_address=ADDRESS, scheduler_file=EXISTING),
        ClusterError,
        "not both",
        id="address-and-file",
    ),
    pytest.param(dict(scheduler_file=MISSING), ClusterError, "no such file", id="missing-file"),
    pytest.param(
        dict(gpus="0,1", workers=3), ClusterError, "one worker per GPU", id="workers-vs-gpus"
    ),
    pytest.param(dict(workers=0), ClusterError, "--workers 0", id="zero-workers"),
    pytest.param(dict(cpu=True, workers=0), ClusterError, "--workers 0", id="zero-workers-cpu"),
    pytest.param(
        dict(threads_per_worker=0), ClusterError, "--threads-per-worker 0", id="zero-threads"
    ),
    pytest.param(
        dict(cpu=True, threads_per_worker=-2),
        ClusterError,
        "--threads-per-worker -2",
        id="negative-threads",
    ),
    pytest.param(
        dict(cpu=True, rmm_pool_size="1GB"), ClusterError, "--rmm-pool-size", id="rmm-on-cpu"
    ),
    pytest.param(
        dict(cpu=True, device_memory_limit="1GB"),
        ClusterError,
        "--device-memory-limit",
        id="device-limit-on-cpu",
    ),
    pytest.param(
        dict(cpu=True, dashboard_address="127.0.0.1:x"),
        ClusterError,
        "--dashboard-address 127.0.0.1:x",
        id="dashboard-port-not-a-number",
    ),
    pytest.param(
        dict(cpu=True, tls_ca_file="ca.pem"), ClusterError, "existing TLS scheduler", id="tls-local"
    ),
    pytest.param(
        dict(scheduler_address=ADDRESS, host="0.0.0.0"), ClusterError, "--host", id="host-external"
    ),
    pytest.param(dict(gpus="2"), DeviceSelectionError, "out of range", id="gpu-out-of-range"),
    pytest.param(dict(gpus="0,,1"), DeviceSelectionError, "empty item", id="bad-gpus-syntax"),
]


@pytest.mark.parametrize(("kwargs", "error", "fragment"), PLAN_ERRORS)
def test_plan_rejects_with_one_line(gpus, tmp_path, kwargs, error, fragment):
    existing = tmp_path / "scheduler.json"
    existing.write_text("{}")
    paths = {EXISTING: str(existing), MISSING: str(tmp_path / "missing.json")}
    kwargs = {k: paths.get(v, v) if isinstance(v, str) else v for k, v in kwargs.items()}
    with pytest.raises(error) as err:
        cluster_plan.plan(**kwargs)
    assert isinstance(err.value, DaskGPUError)
    assert err.value.exit_code == 2
    assert fragment in str(err.value)
    assert _one_line(err.value)


def test_rmm_pool_without_gpu_is_an_error_not_ignored(no_gpu):
    with pytest.raises(ClusterError, match="--rmm-pool-size"):
        cluster_plan.plan(rmm_pool_size="1GB")


def test_external_plans(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "inventory", lambda: pytest.fail("must not query NVML"))
    p = cluster_plan.plan(scheduler_address="tcp://10.1.2.3:8786")
    assert p.kind == "external"
    assert p.options == {"address": "tcp://10.1.2.3:8786"}
    path = tmp_path / "scheduler.json"
    path.write_text("{}")
    p = cluster_plan.plan(scheduler_file=str(path))
    assert p.kind == "external"
    assert p.options == {"scheduler_file": str(path)}


# --------------------------------------------------------------------------------------------
# CPU layout


@pytest.mark.parametrize("cores", [None, 1, 6, 8, 13])
def test_cpu_layout(monkeypatch, cores):
    if cores is not None:
        monkeypatch.setattr(dask.system, "CPU_COUNT", cores)
    n = dask.system.CPU_COUNT

    p = cluster_plan.plan(cpu=True, workers=2)
    assert (p.n_workers, p.threads_per_worker) == (2, max(1, n // 2))
    assert p.options["n_workers"] == 2
    assert p.options["threads_per_worker"] == max(1, n // 2)

    p = cluster_plan.plan(cpu=True, threads_per_worker=1)
    assert (p.n_workers, p.threads_per_worker) == (n, 1)
    assert p.options["n_workers"] == n

    p = cluster_plan.plan(cpu=True)
    assert p.n_workers * p.threads_per_worker == n
    assert p.options["n_workers"] * p.options["threads_per_worker"] == n

    p = cluster_plan.plan(cpu=True, workers=3, threads_per_worker=2)
    assert (p.options["n_workers"], p.options["threads_per_worker"]) == (3, 2)


def test_cpu_layout_follows_threads_per_worker_setting(monkeypatch):
    monkeypatch.setattr(dask.system, "CPU_COUNT", 8)
    with dask.config.set({"daskgpu.cpu.threads-per-worker": 2}):
        p = cluster_plan.plan(cpu=True)
    assert (p.n_workers, p.threads_per_worker) == (4, 2)


def test_cpu_plan_options(monkeypatch):
    p = cluster_plan.plan(cpu=True, workers=1, threads_per_worker=1)
    assert p.options["dashboard_address"] == "127.0.0.1:8787"
    assert p.options["host"] == "127.0.0.1"
    assert p.options["memory_limit"] == "auto"
    assert not any(key in p.options for key in GPU_ONLY)
    assert cluster_plan.plan(cpu=True, dashboard=False).options["dashboard_address"] is None


# --------------------------------------------------------------------------------------------
# Real CPU clusters


def test_real_cpu_cluster(monkeypatch):
    monkeypatch.setattr(sessions, "_local_cuda_cluster_class", _no_cuda_cluster)
    with daskgpu.cluster(
        cpu=True, workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0"
    ) as client:
        workers = client.scheduler_info()["workers"]
        assert len(workers) == 2
        assert [w["nthreads"] for w in workers.values()] == [1, 1]
        got = client
        assert got.kind == "cpu"
        assert list(got.devices) == []
        assert got.start_s > 0
        assert got.dashboard.startswith("http://127.0.0.1:")
        assert got.notices == ()
        assert distributed.default_client() is client.client
        assert client.submit(sum, [1, 2, 3]).result() == 6
        local = client.cluster
    assert client.status == "closed"
    assert local.status.name == "closed"


def test_busy_dashboard_port_moves_and_says_so(monkeypatch):
    monkeypatch.setattr(sessions, "_local_cuda_cluster_class", _no_cuda_cluster)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with daskgpu.cluster(
            cpu=True, workers=1, threads_per_worker=1, dashboard_address=f"127.0.0.1:{port}"
        ) as client:
            got = client
            link = urlparse(got.dashboard)
            assert link.scheme == "http"
            assert link.hostname == "127.0.0.1"
            assert link.port is not None and link.port != port
            with urllib.request.urlopen(got.dashboard, timeout=30) as response:
                assert response.status == 200
            busy_notes = [n for n in got.notices if str(port) in n]
            assert len(busy_notes) == 1
            assert "busy" in busy_notes[0]
            assert str(link.port) in busy_notes[0]
            assert "\n" not in busy_notes[0]
    assert client.status == "closed"


def test_disabled_dashboard_has_no_link_and_no_notice(monkeypatch):
    # distributed serves HTTP (health, metrics) even without a dashboard, on 8787 by default:
    # that must neither show up as a dashboard link nor as a "port busy" notice.
    monkeypatch.setattr(sessions, "_local_cuda_cluster_class", _no_cuda_cluster)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as default_port:
        try:  # make 8787 busy (if something else holds it already, it is busy anyway)
            default_port.bind(("127.0.0.1", 8787))
            default_port.listen()
        except OSError:
            pass
        with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False) as client:
            got = client
    assert got.notices == ()
    assert got.dashboard is None


def test_unreachable_scheduler_fails_fast(monkeypatch):
    monkeypatch.setattr(sessions, "_local_cuda_cluster_class", _no_cuda_cluster)
    began = time.perf_counter()
    with dask.config.set({"daskgpu.scheduler.connect-timeout": "2s"}):
        with pytest.raises(ClusterError) as err:
            with daskgpu.cluster(scheduler_address="tcp://127.0.0.1:9"):
                pytest.fail("connected to a scheduler that is not there")
    assert time.perf_counter() - began < 20
    message = str(err.value)
    assert "tcp://127.0.0.1:9" in message
    assert "2s" in message
    assert _one_line(err.value)


def test_empty_cuda_visible_devices_without_gpus_option_runs_on_cpu(gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    p = cluster_plan.plan()
    assert p.kind == "cpu"
    assert len(p.notices) == 1 and "hides every GPU" in p.notices[0]
    with pytest.raises(DeviceSelectionError, match="hides every GPU"):
        cluster_plan.plan(gpus="0")


def test_memory_sizes_are_handed_over_as_dask_cuda_reads_them(gpus, monkeypatch):
    monkeypatch.setattr(cluster_plan, "_rmm_installed", lambda: True)
    p = cluster_plan.plan(gpus="0", device_memory_limit="0.8", rmm_pool_size="20GB")
    assert p.options["device_memory_limit"] == 0.8
    assert p.options["rmm_pool_size"] == "20GB"
    pool = cluster_plan.plan(gpus="0", rmm_pool_size="100000000").options["rmm_pool_size"]
    assert pool == 100_000_000
    with pytest.raises(ClusterError, match="--rmm-pool-size 'lots'"):
        cluster_plan.plan(gpus="0", rmm_pool_size="lots")


# --------------------------------------------------------------------------------------------
# Listening beyond loopback: allowed when asked for, with a warning


def _exposure_notes(p) -> list[str]:
    return [n for n in p.notices if "reachable from the network" in n]


def test_default_plans_listen_on_loopback_without_warning(gpus):
    for p in (cluster_plan.plan(cpu=True), cluster_plan.plan(gpus="0")):
        assert p.options["host"] == "127.0.0.1"
        assert p.options["dashboard_address"] == "127.0.0.1:8787"
        assert _exposure_notes(p) == []


@pytest.mark.parametrize(
    "address", [":8787", "8787", "0.0.0.0:8787", "10.0.0.5:0", "127.0.0.1:8787,:8788"]
)
def test_dashboard_beyond_loopback_warns_once(address):
    p = cluster_plan.plan(cpu=True, workers=1, dashboard_address=address)
    assert p.options["dashboard_address"] == address  # allowed: the user asked for it
    notes = _exposure_notes(p)
    assert len(notes) == 1, p.notices
    assert notes[0].startswith("Warning: the dashboard")
    assert address in notes[0]
    assert "without TLS" in notes[0]
    assert "--dashboard-address 127.0.0.1:8787" in notes[0]  # how to keep it local
    assert "\n" not in notes[0]


@pytest.mark.parametrize("address", ["127.0.0.1:8787", "localhost:0", "127.0.0.2:9000"])
def test_dashboard_on_loopback_does_not_warn(address):
    assert _exposure_notes(cluster_plan.plan(cpu=True, workers=1, dashboard_address=address)) == []


def test_no_dashboard_means_no_dashboard_warning_and_loopback_http(gpus):
    p = cluster_plan.plan(cpu=True, dashboard=False, dashboard_address=":8787")
    assert _exposure_notes(p) == []
    # distributed's HTTP server (health, metrics) stays on loopback even with --host elsewhere
    p = cluster_plan.plan(gpus="0", dashboard=False, host="10.0.0.5")
    assert p.options["scheduler_kwargs"]["dashboard_address"] == "127.0.0.1:0"


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5"])
def test_host_beyond_loopback_is_passed_on_with_a_warning(gpus, host):
    for p in (cluster_plan.plan(cpu=True, workers=1, host=host),
              cluster_plan.plan(gpus="0", host=host)):
        assert p.options["host"] == host
        notes = _exposure_notes(p)
        assert len(notes) == 1, p.notices
        assert f"listens on {host}" in notes[0]
        assert "--host 127.0.0.1" in notes[0]


def test_warnings_follow_the_cpu_fallback_notice(no_gpu):
    p = cluster_plan.plan(dashboard_address="0.0.0.0:0")
    assert p.kind == "cpu"
    assert len(p.notices) == 2
    assert "No GPU found" in p.notices[0]
    assert "dashboard" in p.notices[1]


def test_loopback_host_with_external_scheduler_is_fine():
    p = cluster_plan.plan(scheduler_address=ADDRESS, host="127.0.0.1", dashboard_address=":8787")
    assert p.kind == "external"
    assert p.notices == []  # it starts nothing, so nothing of daskgpu's listens


def _can_bind(host: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
    except OSError:
        return False
    return True


def test_dashboard_link_names_where_it_listens_not_the_scheduler_host(monkeypatch):
    # --host moves the scheduler and workers; the dashboard stays where --dashboard-address says,
    # and its link must say that too (distributed's own link takes the scheduler's host).
    if not _can_bind("127.0.0.2"):
        pytest.skip("127.0.0.2 is not a loopback address here")
    monkeypatch.setattr(sessions, "_local_cuda_cluster_class", _no_cuda_cluster)
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, host="127.0.0.2",
                         dashboard_address="127.0.0.1:0") as client:
        assert client.scheduler.address.startswith("tcp://127.0.0.2:")
        link = client.dashboard
        assert urlparse(link).hostname == "127.0.0.1"
        with urllib.request.urlopen(link, timeout=30) as response:
            assert response.status == 200


@pytest.mark.parametrize("limit", ["banana", "-5", "1e400", "2.5", "-1GB"])
def test_host_memory_limit_is_checked_before_anything_starts(limit):
    with pytest.raises(ClusterError, match=f"--memory-limit '{limit}'"):
        cluster_plan.plan(cpu=True, memory_limit=limit)


@pytest.mark.parametrize(("limit", "handed"), [("auto", "auto"), ("4GiB", "4GiB"), ("0.5", 0.5),
                                               ("0", 0), (2**30, 2**30)])
def test_host_memory_limit_is_handed_over_as_distributed_reads_it(limit, handed):
    assert cluster_plan.plan(cpu=True, memory_limit=limit).options["memory_limit"] == handed


# --------------------------------------------------------------------------------------------
# How devices and memory sizes reach dask-cuda


def test_gpus_keep_their_uuid_where_the_user_chose_another_cuda_order(gpus, monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    p = cluster_plan.plan(gpus="1,0")
    assert p.options["CUDA_VISIBLE_DEVICES"] == [UUID1, UUID0]
    assert "distributed.nanny.environ" not in p.worker_config


def test_mig_instances_are_handed_over_by_uuid(fake_nvml, monkeypatch):
    mig = "MIG-7c1d2e3f-0000-1111-2222-333344445555"
    fake_nvml({"gpus": [TWO_GPUS["gpus"][0],
                        {**TWO_GPUS["gpus"][1], "migs": [{"uuid": mig, "memory_total": 2**34}]}]})
    monkeypatch.setattr(daskgpu.toolkit.backends, "gpu_stack_missing", lambda: [])
    monkeypatch.setattr(devices, "cuda_driver_problem", lambda: None)
    p = cluster_plan.plan(gpus=f"0,{mig}")
    assert p.options["CUDA_VISIBLE_DEVICES"] == ["0", mig]


def test_rmm_pool_without_rmm_is_one_line_before_anything_starts(gpus, monkeypatch):
    monkeypatch.setattr(cluster_plan, "_rmm_installed", lambda: False)
    with pytest.raises(ClusterError, match="needs RMM, which is not installed") as caught:
        cluster_plan.plan(gpus="0", rmm_pool_size="20GB")
    assert _one_line(caught.value) and "pip install rmm-cu13" in str(caught.value)


def test_rmm_pool_routes_cupy_and_numba_allocations_to_it(gpus, monkeypatch):
    monkeypatch.setattr(cluster_plan, "_rmm_installed", lambda: True)
    p = cluster_plan.plan(gpus="0", rmm_pool_size="20GB")
    assert p.options["rmm_allocator_external_lib_list"] == ["cupy"]
    assert p.worker_config["daskgpu.worker.rmm-for-numba"] is True
    plain = cluster_plan.plan(gpus="0")
    assert "rmm_allocator_external_lib_list" not in plain.options
    assert "daskgpu.worker.rmm-for-numba" not in plain.worker_config


@pytest.mark.parametrize("option", ["memory_limit", "device_memory_limit", "rmm_pool_size"])
@pytest.mark.parametrize(("given", "handed"), [("1", 1.0), (1, 1.0), ("0.25", 0.25),
                                               ("2GB", "2GB"), ("3000000000", 3_000_000_000)])
def test_memory_sizes_mean_the_same_for_host_and_device(gpus, monkeypatch, option, given,
                                                        handed):
    monkeypatch.setattr(cluster_plan, "_rmm_installed", lambda: True)
    got = cluster_plan.plan(gpus="0", **{option: given}).options[option]
    assert got == handed and type(got) is type(handed)


@pytest.mark.parametrize("option", ["memory_limit", "device_memory_limit", "rmm_pool_size"])
@pytest.mark.parametrize("given", ["5", "1000", "100B", "2KiB", 1.5])
def test_sizes_that_cannot_be_meant_are_refused(gpus, monkeypatch, option, given):
    monkeypatch.setattr(cluster_plan, "_rmm_installed", lambda: True)
    flag = "--" + option.replace("_", "-")
    with pytest.raises(ClusterError, match=flag) as caught:
        cluster_plan.plan(gpus="0", **{option: given})
    assert _one_line(caught.value) and "0.8" in str(caught.value)


def test_an_empty_rmm_pool_is_refused(gpus, monkeypatch):
    monkeypatch.setattr(cluster_plan, "_rmm_installed", lambda: True)
    with pytest.raises(ClusterError, match="leave --rmm-pool-size out"):
        cluster_plan.plan(gpus="0", rmm_pool_size="0")


def test_a_failed_gpu_cluster_start_is_one_line(gpus, monkeypatch):
    def failing(**kwargs):
        raise TypeError("%d format: a real number is required, not str")

    monkeypatch.setattr(sessions, "_local_cuda_cluster_class", lambda: failing)
    p = cluster_plan.plan(gpus="1", dashboard=False)
    with pytest.raises(ClusterError, match="GPU cluster on GPU 1 failed to start") as caught:
        with sessions.start(p):
            pass
    assert _one_line(caught.value) and "MIG" in str(caught.value)


def test_gpus_without_the_cuda_driver_library_are_refused_in_one_line(gpus, monkeypatch):
    """NVML sees GPUs, libcuda is missing (a container with only the utility capability)."""
    missing = "libcuda.so.1: cannot open shared object file: No such file or directory"
    monkeypatch.setattr(devices, "cuda_driver_problem", lambda: missing)
    with pytest.raises(ClusterError) as refused:
        cluster_plan.plan(gpus="0,1")
    line = str(refused.value)
    assert "\n" not in line and missing in line
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in line and "--cpu" in line
    chosen = cluster_plan.plan()  # no --gpus: CPU workers, and a note that says why
    assert chosen.kind == "cpu"
    assert any("CUDA driver library cannot be loaded" in n and "compute,utility" in n
               for n in chosen.notices)


def test_the_cuda_driver_probe_loads_the_library_and_says_why_not(monkeypatch):
    monkeypatch.setattr(devices, "CUDA_DRIVER_LIBRARIES", ("libdaskgpu-no-such-library.so",))
    assert "libdaskgpu-no-such-library.so" in devices.cuda_driver_problem()
    monkeypatch.setattr(devices, "CUDA_DRIVER_LIBRARIES", ("libdaskgpu-no-such.so", "libc.so.6"))
    assert devices.cuda_driver_problem() is None


def test_a_gpu_worker_that_cannot_launch_a_kernel_stops_the_start_in_one_line(
        gpus, recording_cluster, monkeypatch):
    """The start-up probe's answer, as a worker gives it, ends the start before any run."""
    ptx = RuntimeError("CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the provided PTX was compiled "
                       "with an unsupported toolchain.")
    monkeypatch.setattr(cuda_probe, "kernel_launch_problem", lambda: cuda_probe.describe(ptx))
    p = cluster_plan.plan(gpus="0", dashboard=False)
    with pytest.raises(ClusterError) as refused:
        with sessions.start(p):
            raise AssertionError("the session must not open")
    line = str(refused.value)
    assert _one_line(refused.value) and line.startswith("worker ")
    assert "UNSUPPORTED_PTX_VERSION" in line and "nvJitLink" in line and "numba" in line
    assert recording_cluster.made[-1].status.name == "closed"  # and the cluster is closed


def test_the_probe_launches_a_kernel_and_names_the_fix_when_it_cannot():
    import os
    import subprocess
    import sys

    code = ("from daskgpu.clusters import cuda_probe; print(cuda_probe.kernel_launch_problem())")
    simulated = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1"), timeout=120)
    assert simulated.stdout.strip() == "None", simulated.stderr  # the kernel ran and wrote
    without = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={k: v for k, v in os.environ.items()
                                  if k != "NUMBA_ENABLE_CUDASIM"}, timeout=120)
    said = without.stdout.strip()
    assert said.startswith("a GPU worker cannot launch a Numba CUDA kernel (") and "\n" not in said
    assert "numba" in said and "--cpu" in said  # no driver here: the general fix
    other = cuda_probe.describe(OSError("device busy"))
    assert "nvidia-smi" in other and "nvJitLink" not in other
