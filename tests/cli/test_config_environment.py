"""``DASKGPU_*`` variables reach a command-line run: chunks, dashboard port and build, warm-up."""

from __future__ import annotations

import json
import math
import os
import socket

from fault_injection import run_faulty_cli

MiB = 2**20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, name: str, threads: str, **variables):
    """``run mean-pipeline --json`` with ``variables`` set; the document, warm-ups, packages."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DASKGPU_") or k == "DASKGPU_TEST_NVML"}
    env.update(variables)
    warm_ups, packages = tmp_path / f"{name}-warm-ups", tmp_path / f"{name}-packages.json"
    proc = run_faulty_cli("run", "mean-pipeline", "--size", "2000", "--workers", "1",
                          "--threads-per-worker", threads, "--json", env=env, timeout=120,
                          warm_up_log=str(warm_ups), exit_modules=str(packages))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    lines = warm_ups.read_text().splitlines() if warm_ups.exists() else []
    return doc, lines, json.loads(packages.read_text())


def _chunk_bytes(doc: dict) -> int:
    return math.prod(doc["data"]["chunks"]) * 8  # float64


def test_settings_from_the_environment_change_the_run(tmp_path):
    port = _free_port()
    default, warm_ups, packages = _run(tmp_path, "default", "3",
                                       DASKGPU_DASHBOARD_ADDRESS=f"127.0.0.1:{port}")
    assert default["dashboard"] == f"http://127.0.0.1:{port}/status"
    assert [w["nthreads"] for w in default["workers"]] == [3]  # --threads-per-worker 3
    assert _chunk_bytes(default) > MiB
    assert warm_ups == ["warm-up cpu"]  # the one worker warmed up as it started
    assert "bokeh" not in packages  # the dashboard's pages wait for a first visit

    changed, warm_ups, packages = _run(
        tmp_path, "changed", "3", DASKGPU_DASHBOARD_ADDRESS="127.0.0.1:0",
        DASKGPU_CPU__CHUNK_BYTES="1MiB", DASKGPU_WORKER__WARM_UP_ON_START="false",
        DASKGPU_DASHBOARD_ON_FIRST_VISIT="false")
    assert changed["dashboard"].startswith("http://127.0.0.1:")
    assert changed["dashboard"] != default["dashboard"]
    assert _chunk_bytes(changed) <= MiB < _chunk_bytes(default)
    assert changed["data"]["blocks"] > default["data"]["blocks"]
    assert warm_ups == []  # no worker warmed up
    assert "bokeh" in packages  # the pages were built as the scheduler started
