"""Shared test set-up: markers, a CPU cluster, and made-up GPUs."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FAKE_NVML_DIR = pathlib.Path(__file__).resolve().parent / "fake_nvml"

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Tests run in parallel processes (make test: pytest -n): command-line runs started from
    # them would all ask for the default dashboard port and print "port busy" notices. This
    # process keeps the packaged default (loaded first); the runs it starts take a free port.
    import daskgpu.config  # noqa: F401

    os.environ.setdefault("DASKGPU_DASHBOARD_ADDRESS", "127.0.0.1:0")

TWO_GPUS = {
    "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1a2b3c4d-0000-1111-2222-333344445555",
         "memory_total": 80 * 2**30, "memory_free": 79 * 2**30, "pci_bus_id": "00000000:1B:00.0"},
        {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-9f8e7d6c-0000-1111-2222-333344445555",
         "memory_total": 80 * 2**30, "memory_free": 60 * 2**30, "pci_bus_id": "00000000:43:00.0"},
    ]
}


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="run tests marked slow")


def _real_gpu() -> bool:
    if importlib.util.find_spec("cupy") is None or importlib.util.find_spec("dask_cuda") is None:
        return False
    from daskgpu.clusters import devices

    return bool(devices.inventory().devices)


def pytest_collection_modifyitems(config, items):
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    has_gpu = None
    for item in items:
        if "slow" in item.keywords and not config.getoption("--runslow"):
            item.add_marker(skip_slow)
        if "gpu" in item.keywords:
            if has_gpu is None:
                has_gpu = _real_gpu()
            if not has_gpu:
                item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU with cupy+dask-cuda"))


def fake_nvml_env(spec: dict) -> dict:
    """Environment for a subprocess that should see the made-up GPUs in ``spec``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_NVML_DIR), str(ROOT)])
    env["DASKGPU_TEST_NVML"] = json.dumps(spec)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


@pytest.fixture
def fake_nvml(monkeypatch):
    """Install the fake ``pynvml``; call the returned function with a spec dict."""

    def install(spec: dict):
        monkeypatch.setenv("DASKGPU_TEST_NVML", json.dumps(spec))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        # setitem (not an import) so that the real pynvml is back in sys.modules afterwards
        loader = importlib.util.spec_from_file_location("pynvml", FAKE_NVML_DIR / "pynvml.py")
        fake = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(fake)
        monkeypatch.setitem(sys.modules, "pynvml", fake)

    return install


@pytest.fixture(scope="session")
def cpu_client():
    """A real two-worker CPU LocalCluster shared by the tests that only compute on it."""
    import daskgpu

    with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1, dashboard=False) as client:
        yield client


@pytest.fixture(scope="module")
def in_process_client():
    """A session on two one-thread workers that are threads of this process.

    A computing function monkeypatched in a test (a fault injected into a pipeline's tasks) is
    the one the tasks call: worker processes would import their own, unpatched copy.
    """
    from distributed import Client, LocalCluster

    from daskgpu.clusters import session as sessions

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield sessions.for_client(client)


def cli_with_plugin_no_cluster(folder, module: str, *args):
    """The command line with the plugin ``module`` (its package in ``folder``) registered, in a
    subprocess where starting a cluster exits 99: what is refused before any cluster starts."""
    import subprocess
    import textwrap

    code = textwrap.dedent(f"""
        import sys
        sys.argv = ["daskgpu", *{list(args)!r}]
        import {module}
        from daskgpu.clusters import session
        def started(*args, **kwargs):
            print("a cluster was started", file=sys.stderr)
            sys.exit(99)
        session.start = started
        from daskgpu.cli.commands import entry
        entry()
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(ROOT)]))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)


def run_cli(*args, env=None, timeout=180, cwd=None):
    """Run ``python cli.py ARGS`` in a subprocess; return the CompletedProcess."""
    import subprocess

    return subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=cwd or ROOT,
    )


def assert_one_error_line(proc, started: float | None = None, *fragments, code: int = 2) -> str:
    """A CLI run that failed with exit ``code``: no traceback, one ``error:`` line; return it.

    With ``started`` (a perf_counter reading), it also ended within 30 s (refused before any
    cluster started); each of ``fragments`` must be in the line.
    """
    import time

    shown = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == code, shown
    assert "Traceback" not in proc.stdout + proc.stderr, shown
    assert proc.stdout == "", shown
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), shown
    for fragment in fragments:
        assert fragment in lines[0], (fragment, shown)
    if started is not None:
        assert time.perf_counter() - started < 30, shown
    return lines[0]


def alive(pid: int, made: float) -> bool:
    """Whether process ``pid``, created at ``made`` (psutil's create_time), still runs."""
    import psutil

    try:
        p = psutil.Process(pid)
        return p.create_time() == made and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_cluster_processes(procs) -> None:
    """Stop ``[scheduler, worker, ...]`` Popen objects: the workers first (they say goodbye to
    the scheduler, which then closes at once), then the scheduler; kill what does not stop."""
    import subprocess

    for group in (procs[1:], procs[:1]):
        for proc in group:
            if proc.poll() is None:
                proc.terminate()
        for proc in group:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)


def compute_as_runner(session, name: str, **params):
    """Build and compute a pipeline on ``session`` as the runner does: spec, workload, raw."""
    import dask

    from daskgpu.execution import runner
    from daskgpu.toolkit import registry

    spec = registry.get(name)
    resolved = spec.resolve(session.backend, **params)
    with dask.config.set(scheduler=session.client):
        workload = spec.workload(session.backend, resolved)
    return spec, workload, runner.compute(session.client, workload.collection, session.backend,
                                           None)


def drive_as_runner(session, name: str, keep: bool, **params):
    """Build and drive a pipeline that has a ``drive`` as the runner does: spec, workload, raw.

    ``keep``: as a run from Python (its drive keeps what it makes in ``on_workers``).
    """
    import dask

    from daskgpu.execution import faults
    from daskgpu.toolkit import registry

    spec = registry.get(name)
    resolved = spec.resolve(session.backend, **params)
    watched = faults.WatchedClient(session.client, session.backend.devices)
    with dask.config.set(scheduler=watched):
        workload = spec.workload(session.backend, resolved)
    workload.keep = keep
    return spec, workload, watched.drive(workload)


def train_rows(params: dict):
    """train-pipeline's generated training rows for ``params``, drawn here as its shards draw
    them: ``(x as float64, labels)``, for the tests' plain NumPy replays."""
    import numpy as np

    from daskgpu.toolkit import numeric
    from pipelines.train import shared as train_data
    from pipelines.train import tasks as train_steps

    d, k = params["features"], params["classes"]
    teacher = train_steps.teacher_weights(params["seed"], d, k)
    sizes = numeric.shard_sizes(params["samples"], params["chunks"])
    shards = [train_steps.make_shard(params["seed"], train_data.TRAIN, i, rows, d, k,
                                     "float32", "numpy", teacher)
              for i, rows in enumerate(sizes)]
    return (np.concatenate([s["x"] for s in shards]).astype(np.float64),
            np.concatenate([s["y"] for s in shards]))


def verify_on(session, spec, workload, raw, depth: str = "full"):
    """A pipeline's verification of ``raw`` at ``depth``, its checks computed on ``session``."""
    import dask

    with dask.config.set(scheduler=session.client):
        return spec.check(workload, raw, depth)


@pytest.fixture
def cupy_stand_in(monkeypatch):
    """The strict CuPy stand-in (tests/strict_cupy.py), registered as ``cupy`` for one test:
    NumPy underneath, refusing implicit host conversions and NumPy operands as CuPy does."""
    import strict_cupy

    return strict_cupy.install(monkeypatch)
