"""Secure by default: a started cluster listens on loopback only, unless the user says otherwise."""

from __future__ import annotations

import contextlib
import ipaddress
import queue
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

import psutil
import pytest
from conftest import ROOT

OPEN_LINE = "Keeping the cluster open"


def _listening(proc: psutil.Process) -> list[tuple[str, int]]:
    return [
        (c.laddr.ip, c.laddr.port)
        for c in proc.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]


def _is_loopback(ip: str) -> bool:
    return ipaddress.ip_address(ip).is_loopback


def _read_until_open(proc: subprocess.Popen, timeout: float) -> list[str]:
    """Lines of the CLI's stderr up to the one that says the cluster is being kept open."""
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        assert line is not None, f"the CLI ended early: {''.join(seen)}"
        seen.append(line)
        if OPEN_LINE in line:
            return seen


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param([], id="default"),
        pytest.param(["--no-dashboard"], id="no-dashboard"),
        pytest.param(["--dashboard-address", "0.0.0.0:0"], id="dashboard-asked-beyond-loopback"),
    ],
)
def test_started_cluster_listens_on_loopback_only(extra):
    cmd = [sys.executable, str(ROOT / "cli.py"), "run", "mean-pipeline", "--cpu", "--workers",
           "2", "--threads-per-worker", "1", "--size", "2000", "--keep-open", *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    children: list[psutil.Process] = []
    try:
        stderr = _read_until_open(proc, timeout=120)
        cli = psutil.Process(proc.pid)
        children = cli.children(recursive=True)
        own = _listening(cli)  # scheduler, its HTTP server, one nanny per worker
        workers = [s for s in (_listening(c) for c in children) if s]  # worker + its HTTP
        dashboard = next(line for line in stderr if line.startswith("Dashboard:"))
        warnings = [line for line in stderr if line.startswith("Warning:")]

        # Not vacuous: every server this run starts is there.
        assert len(own) >= 4, own
        assert len(workers) == 2, workers
        if "--dashboard-address" in extra:
            # Only the dashboard goes where the user asked, and the CLI says so once.
            link = urlparse(dashboard.split(" ", 1)[1].strip())
            exposed = [s for s in own if not _is_loopback(s[0])]
            assert exposed == [("0.0.0.0", link.port)], own
            own = [s for s in own if s not in exposed]
            assert len(warnings) == 1, stderr
            assert "reachable from the network" in warnings[0]
            assert "--dashboard-address 127.0.0.1:8787" in warnings[0]
        else:
            assert warnings == [], stderr
        for ip, port in own + [s for group in workers for s in group]:
            assert _is_loopback(ip), f"{ip}:{port} listens beyond loopback: {own} {workers}"
        if extra == []:
            link = urlparse(dashboard.split(" ", 1)[1].strip())
            assert link.hostname == "127.0.0.1"
            assert ("127.0.0.1", link.port) in own
        elif extra == ["--no-dashboard"]:
            assert dashboard.strip() == "Dashboard: off"

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, "Ctrl-C must close the cluster and exit 0"
        gone, alive = psutil.wait_procs(children, timeout=15)
        assert alive == [], f"left running after Ctrl-C: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=15)
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
