"""Workers on separate hosts, played by Linux network namespaces.

Topology (one private /24, chosen per run so that parallel runs and the host's own routes do
not clash; every name carries a random suffix)::

    namespace        interface     address       runs
    root             <prefix>      10.213.N.1    this test, the CLI
    <prefix>-hub     br0 (bridge)  -             nothing; ports up-r, up-a, up-b
    <prefix>-a       eth0          10.213.N.2    dask scheduler, one dask worker
    <prefix>-b       eth0          10.213.N.3    one dask worker

    root:<prefix> <-veth-> hub:up-r,  hub:up-a <-veth-> a:eth0,  hub:up-b <-veth-> b:eth0

The three parties share one layer-2 segment. The bridge has a namespace of its own, with an
empty firewall, so that a host firewall filtering bridged traffic cannot get in the way. A run
succeeds only if the CLI reaches the scheduler, the scheduler reaches both workers, and the
workers reach each other across the namespaces. Skipped where namespaces cannot be made (not
Linux, not root, no iproute2, or the kernel or container refuses).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli

DASK = Path(sys.executable).parent / "dask"
PREFIX = "dgmh"  # every namespace and root-namespace link of this test starts with it


class SetupRefused(Exception):
    """The machine would not let us build the namespaces (a reason to skip, not to fail)."""


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def _must(*args: str) -> str:
    proc = _ip(*args)
    if proc.returncode != 0:
        raise SetupRefused(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc.stdout


def _precondition() -> str | None:
    """Why namespaces certainly cannot be made here, or None."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux-only"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip` command"
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.213.N.0/24 that overlaps no route or address of the root namespace."""
    taken = []
    for what in (("-j", "-4", "route", "show", "table", "all"), ("-j", "-4", "addr", "show")):
        for entry in json.loads(_must(*what) or "[]"):
            dsts = [entry.get("dst")]
            dsts += [f"{a['local']}/{a['prefixlen']}" for a in entry.get("addr_info", [])]
            for dst in dsts:
                with contextlib.suppress(TypeError, ValueError):
                    taken.append(ipaddress.ip_network(dst, strict=False))
    for n in random.sample(range(256), 256):
        net = ipaddress.ip_network(f"10.213.{n}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise SetupRefused("no free 10.213.N.0/24 subnet")


class Topology:
    def __init__(self):
        self.prefix = PREFIX + secrets.token_hex(3)  # 10 characters: a valid interface name
        self.hub, self.ns_a, self.ns_b = (f"{self.prefix}-{s}" for s in ("hub", "a", "b"))
        self.link = self.prefix  # the root namespace's end of the veth to the bridge
        self.made: list[str] = []  # namespaces created, for teardown
        self.subnet = None
        self.root_ip = self.ip_a = self.ip_b = None

    def build(self) -> None:
        self.subnet = _free_subnet()
        self.root_ip, self.ip_a, self.ip_b = (str(self.subnet[i]) for i in (1, 2, 3))
        plen = self.subnet.prefixlen
        for ns in (self.hub, self.ns_a, self.ns_b):
            _must("netns", "add", ns)
            self.made.append(ns)
            _must("-n", ns, "link", "set", "lo", "up")
        # `ip netns exec` also remounts /sys; find out now whether that is allowed
        _must("netns", "exec", self.ns_a, "true")
        _must("-n", self.hub, "link", "add", "br0", "type", "bridge", "forward_delay", "0")
        _must("link", "add", self.link, "type", "veth", "peer", "name", "up-r", "netns", self.hub)
        for ns, port in ((self.ns_a, "up-a"), (self.ns_b, "up-b")):
            _must("-n", self.hub, "link", "add", port, "type", "veth",
                  "peer", "name", "eth0", "netns", ns)
        for port in ("up-r", "up-a", "up-b"):
            _must("-n", self.hub, "link", "set", port, "master", "br0", "up")
        _must("-n", self.hub, "link", "set", "br0", "up")
        _must("addr", "add", f"{self.root_ip}/{plen}", "dev", self.link)
        _must("link", "set", self.link, "up")
        for ns, addr in ((self.ns_a, self.ip_a), (self.ns_b, self.ip_b)):
            _must("-n", ns, "addr", "add", f"{addr}/{plen}", "dev", "eth0")
            _must("-n", ns, "link", "set", "eth0", "up")

    def teardown(self) -> None:
        for ns in self.made:  # anything still running in our namespaces was started here
            for pid in _ip("netns", "pids", ns).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        _ip("link", "del", self.link)  # and its peer in the hub
        for ns in reversed(self.made):
            _ip("netns", "del", ns)

    def leftovers(self) -> list[str]:
        names = [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line]
        links = [line.split(":")[1].strip() for line in _ip("-o", "link").stdout.splitlines()]
        return [n for n in names + links if n.split("@")[0].startswith(self.prefix)]


def _stop(procs: list[subprocess.Popen]) -> None:
    """Stop each process group (workers first), politely, then not."""
    for proc in reversed(procs):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in reversed(procs):
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):  # also any child left in the group
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _wait_for(what: str, ready, procs, logs, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        dead = [p for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            detail = "\n".join(f"--- {log.name}\n{Path(log.name).read_text()}" for log in logs)
            why = f"exit {dead[0].returncode}" if dead else f"not within {timeout} s"
            raise AssertionError(f"{what}: {why}\n{detail}")
        time.sleep(0.1)


@pytest.fixture
def two_hosts(tmp_path):
    reason = _precondition()
    if reason:
        pytest.skip(reason)
    topo = Topology()
    procs: list[subprocess.Popen] = []
    logs = []
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)  # CPU workers
    scheduler_file = tmp_path / "scheduler.json"

    def start(ns: str, name: str, *args: str) -> None:
        log = open(tmp_path / f"{name}.log", "w")  # closed in the finally below
        logs.append(log)
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns, str(DASK), *args], stdout=log, stderr=subprocess.STDOUT,
            env=env, cwd=tmp_path, start_new_session=True))

    try:
        try:
            topo.build()
        except SetupRefused as exc:
            pytest.skip(f"cannot build network namespaces here: {exc}")
        start(topo.ns_a, "scheduler", "scheduler", "--host", topo.ip_a, "--port", "0",
              "--scheduler-file", str(scheduler_file), "--no-dashboard")
        _wait_for("scheduler file", lambda: scheduler_file.exists()
                  and scheduler_file.read_text().strip().endswith("}"), procs, logs)
        for ns, addr in ((topo.ns_a, topo.ip_a), (topo.ns_b, topo.ip_b)):
            start(ns, f"worker-{ns[-1]}", "worker", "--scheduler-file", str(scheduler_file),
                  "--host", addr, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                  "--death-timeout", "60s")
        from distributed import Client

        with Client(scheduler_file=str(scheduler_file), timeout="20s") as client:
            _wait_for("two workers", lambda: len(client.scheduler_info()["workers"]) == 2,
                      procs, logs)
        yield {"topology": topo, "scheduler_file": scheduler_file, "procs": procs}
    finally:
        try:
            _stop(procs)
        finally:
            for log in logs:
                log.close()
            topo.teardown()
        left = topo.leftovers()
        assert not left, f"teardown left namespaces or links behind: {left}"


def test_pipeline_runs_on_workers_in_two_namespaces(two_hosts):
    topo = two_hosts["topology"]
    scheduler_file = two_hosts["scheduler_file"]
    address = json.loads(scheduler_file.read_text())["address"]
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    assert host == topo.ip_a
    # The scheduler is not in this namespace: its port is closed on this loopback.
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", int(port)), timeout=2):
        pass

    proc = run_cli("run", "mean-pipeline", "--scheduler-file", str(scheduler_file), "--json",
                   "--size", "2000", "--chunks", "500", "--seed", "7", timeout=120)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True, doc["verification"]
    assert abs(doc["value"] - 0.5) < 0.01
    assert doc["backend"] == "cpu"
    assert doc["timings"]["cluster_start_s"] is None  # connected, started nothing
    hosts = sorted(w["address"].removeprefix("tcp://").rsplit(":", 1)[0] for w in doc["workers"])
    assert hosts == sorted([topo.ip_a, topo.ip_b])

    # The two workers exchanged data directly, across the namespaces: the 16 chunks were spread
    # over both, and the reduction gathered partial results from the other worker.
    from distributed import Client

    with Client(scheduler_file=str(scheduler_file), timeout="20s") as client:
        senders = client.run(lambda dask_worker: sorted(
            {t["who"] for t in dask_worker.transfer_incoming_log if t.get("who")}))
    crossed = {(dst, src) for dst, srcs in senders.items() for src in srcs if src != dst}
    assert crossed, f"no worker fetched data from the other: {senders}"
    assert all(p.poll() is None for p in two_hosts["procs"])  # the cluster is left running
