"""Running on a cluster someone else started: connect, compute, and leave it running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli, stop_cluster_processes

DASK = Path(sys.executable).parent / "dask"


_stop = stop_cluster_processes


def _workers(scheduler_file: Path) -> list[str]:
    from distributed import Client

    with Client(scheduler_file=str(scheduler_file), timeout="20s") as client:
        return sorted(client.ncores())


def _written_address(scheduler_file):
    """The address in a scheduler file once it is written whole, else None."""
    try:
        return json.loads(scheduler_file.read_text())["address"]
    except (FileNotFoundError, ValueError, KeyError):  # not there yet, or half-written
        return None


@pytest.fixture(scope="module")
def existing_cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("existing-cluster")
    scheduler_file = base / "s.json"
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)  # CPU workers
    procs: list[subprocess.Popen] = []
    logs = []

    def start(name, *args):
        log = open(base / f"{name}.log", "w")  # closed in the finalizer
        logs.append(log)
        procs.append(subprocess.Popen([str(DASK), *args], stdout=log, stderr=subprocess.STDOUT,
                                      env=env, cwd=base))

    try:
        start("scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0",
              "--scheduler-file", str(scheduler_file), "--no-dashboard")
        deadline = time.monotonic() + 60
        while (address := _written_address(scheduler_file)) is None:
            assert procs[0].poll() is None, (base / "scheduler.log").read_text()
            assert time.monotonic() < deadline, "no scheduler file within 60 s"
            time.sleep(0.1)
        for i in range(2):
            start(f"worker{i}", "worker", "--scheduler-file", str(scheduler_file),
                  "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1")
        from distributed import Client

        with Client(scheduler_file=str(scheduler_file), timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
        yield {"address": address, "file": scheduler_file, "procs": procs}
    finally:
        _stop(procs)
        for log in logs:
            log.close()


def _run(existing_cluster, how: str):
    if how == "address":
        target = ("--scheduler-address", existing_cluster["address"])
    else:
        target = ("--scheduler-file", str(existing_cluster["file"]))
    proc = run_cli("run", "mean-pipeline", "--size", "2000", *target, "--json", timeout=120)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("how", ["address", "file"])
def test_run_on_existing_cluster_leaves_it_running(existing_cluster, how):
    before = _workers(existing_cluster["file"])
    assert len(before) == 2
    doc = _run(existing_cluster, how)
    assert doc["verified"] is True, doc["verification"]
    assert abs(doc["value"] - 0.5) < 0.01
    assert doc["backend"] == "cpu"
    assert len(doc["workers"]) == 2
    assert sorted(w["address"] for w in doc["workers"]) == before
    assert not doc.get("notices"), doc.get("notices")  # nothing started, no CPU fallback

    # The CLI closed its connection but not the cluster: same scheduler, same two workers.
    assert all(p.poll() is None for p in existing_cluster["procs"]), [
        p.returncode for p in existing_cluster["procs"]]
    assert _workers(existing_cluster["file"]) == before


@pytest.fixture(scope="module")
def address_run(existing_cluster):
    return _run(existing_cluster, "address")


def test_existing_cluster_reports_no_start_time(address_run):
    assert address_run["verified"] is True
    assert address_run["timings"]["cluster_start_s"] is None


def test_existing_cluster_without_dashboard_reports_no_link(address_run):
    assert address_run["verified"] is True
    assert address_run["dashboard"] is None
