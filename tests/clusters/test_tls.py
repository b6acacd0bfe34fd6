"""Running on an existing scheduler over TLS: certificates checked first, strangers refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli, stop_cluster_processes

import daskgpu
from daskgpu.clusters import plan as cluster_plan
from daskgpu.clusters import security
from daskgpu.errors import ClusterError

trustme = pytest.importorskip("trustme")

DASK = Path(sys.executable).parent / "dask"


def _one_line(text: str) -> bool:
    return bool(text.strip()) and "\n" not in text.strip()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """Two unrelated CAs ("ours" and "other"), each with a server and a client certificate."""
    base = tmp_path_factory.mktemp("certs")
    files = {}
    for name in ("ours", "other"):
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(base / f"{name}-ca.pem"))
        for role, identity in (("server", "127.0.0.1"), ("client", "daskgpu-client")):
            cert = ca.issue_cert(identity)
            cert.cert_chain_pems[0].write_to_path(str(base / f"{name}-{role}.pem"))
            cert.private_key_pem.write_to_path(str(base / f"{name}-{role}-key.pem"))
            cert.private_key_and_cert_chain_pem.write_to_path(
                str(base / f"{name}-{role}-both.pem"))
        files[name] = {
            "ca": str(base / f"{name}-ca.pem"),
            "server": (str(base / f"{name}-server.pem"), str(base / f"{name}-server-key.pem")),
            "cert": str(base / f"{name}-client.pem"),
            "key": str(base / f"{name}-client-key.pem"),
            "both": str(base / f"{name}-client-both.pem"),
        }
    files["dir"] = base
    return files


def _cli_tls(files: dict) -> list[str]:
    return ["--tls-ca-file", files["ca"], "--tls-cert", files["cert"], "--tls-key", files["key"]]


_stop = stop_cluster_processes


@pytest.fixture(scope="module")
def tls_cluster(certs, tmp_path_factory):
    """A ``dask scheduler --protocol tls`` on 127.0.0.1 with two TLS CPU workers."""
    base = tmp_path_factory.mktemp("tls-cluster")
    scheduler_file = base / "s.json"
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)  # CPU workers
    ours = certs["ours"]
    server_tls = ["--tls-ca-file", ours["ca"], "--tls-cert", ours["server"][0],
                  "--tls-key", ours["server"][1]]
    procs: list[subprocess.Popen] = []
    logs = []

    def start(name, *args):
        log = open(base / f"{name}.log", "w")  # closed in the finally below
        logs.append(log)
        procs.append(subprocess.Popen([str(DASK), *args, *server_tls], stdout=log,
                                      stderr=subprocess.STDOUT, env=env, cwd=base))

    try:
        start("scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0", "--protocol", "tls",
              "--scheduler-file", str(scheduler_file), "--no-dashboard")
        deadline = time.monotonic() + 60
        while security.scheduler_file_address(scheduler_file) is None:
            assert procs[0].poll() is None, (base / "scheduler.log").read_text()
            assert time.monotonic() < deadline, "no scheduler file within 60 s"
            time.sleep(0.1)
        address = security.scheduler_file_address(scheduler_file)
        assert address.startswith("tls://127.0.0.1:")
        for i in range(2):
            start(f"worker{i}", "worker", "--scheduler-file", str(scheduler_file),
                  "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1")
        with daskgpu.cluster(scheduler_file=str(scheduler_file), tls_ca_file=ours["ca"],
                             tls_cert=ours["cert"], tls_key=ours["key"]) as client:
            client.wait_for_workers(2, timeout=60)
        yield {"address": address, "file": str(scheduler_file), "procs": procs}
    finally:
        _stop(procs)
        for log in logs:
            log.close()


# --------------------------------------------------------------------------------------------
# A real TLS cluster


def test_cli_runs_a_pipeline_over_tls(tls_cluster, certs):
    proc = run_cli("run", "mean-pipeline", "--size", "2000", "--scheduler-file",
                   tls_cluster["file"], *_cli_tls(certs["ours"]), "--json", timeout=120)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    doc = json.loads(proc.stdout)
    assert doc["verified"] is True, doc["verification"]
    assert abs(doc["value"] - 0.5) < 0.01
    assert len(doc["workers"]) == 2
    assert all(w["address"].startswith("tls://127.0.0.1:") for w in doc["workers"])


def test_python_api_over_tls_with_combined_pem_and_bare_address(tls_cluster, certs):
    ours = certs["ours"]
    bare = tls_cluster["address"].removeprefix("tls://")  # tls:// is implied by the options
    with daskgpu.cluster(scheduler_address=bare, tls_ca_file=ours["ca"],
                         tls_cert=ours["both"]) as client:
        assert client.scheduler.address == tls_cluster["address"]
        assert client.submit(sum, [1, 2, 3]).result() == 6
        assert len(client.scheduler_info()["workers"]) == 2


def test_cli_without_certificates_is_refused_with_one_line(tls_cluster):
    proc = run_cli("run", "mean-pipeline", "--size", "2000", "--scheduler-file",
                   tls_cluster["file"], "--json", timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert _one_line(proc.stderr), proc.stderr
    assert proc.stderr.startswith("error: ")
    assert "TLS scheduler" in proc.stderr
    assert "--tls-ca-file" in proc.stderr


def test_cli_trusting_another_ca_is_refused_with_one_line(tls_cluster, certs):
    proc = run_cli("run", "mean-pipeline", "--size", "2000", "--scheduler-address",
                   tls_cluster["address"], *_cli_tls(certs["other"]), "--json", timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert _one_line(proc.stderr), proc.stderr
    assert proc.stderr.startswith("error: TLS")
    assert "not signed by the CA in --tls-ca-file" in proc.stderr


def test_client_certificate_of_another_ca_is_refused(tls_cluster, certs):
    # The client trusts the scheduler, but the scheduler does not trust the client.
    with pytest.raises(ClusterError) as err:
        with daskgpu.cluster(scheduler_address=tls_cluster["address"],
                             tls_ca_file=certs["ours"]["ca"], tls_cert=certs["other"]["cert"],
                             tls_key=certs["other"]["key"]):
            pytest.fail("connected with a client certificate the scheduler does not trust")
    assert "refused the client certificate" in str(err.value)
    assert _one_line(str(err.value))


def test_tls_cluster_still_runs_after_the_refusals(tls_cluster, certs):
    assert all(p.poll() is None for p in tls_cluster["procs"])
    ours = certs["ours"]
    with daskgpu.cluster(scheduler_file=tls_cluster["file"], tls_ca_file=ours["ca"],
                         tls_cert=ours["cert"], tls_key=ours["key"]) as client:
        assert len(client.scheduler_info()["workers"]) == 2


# --------------------------------------------------------------------------------------------
# Checked before connecting (no cluster needed)


def _bad_plans(certs):
    ours, other = certs["ours"], certs["other"]
    missing = str(certs["dir"] / "missing.pem")
    tls = "tls://127.0.0.1:1"
    return [
        (dict(scheduler_address=tls), "give --tls-ca-file, --tls-cert and --tls-key"),
        (dict(scheduler_address=tls, tls_ca_file=missing, tls_cert=ours["both"]),
         f"--tls-ca-file {missing}: no such file"),
        (dict(scheduler_address=tls, tls_ca_file=ours["ca"], tls_cert=missing),
         f"--tls-cert {missing}: no such file"),
        (dict(scheduler_address=tls, tls_ca_file=ours["ca"], tls_cert=ours["cert"]),
         "holds no private key: give it with --tls-key"),
        (dict(scheduler_address=tls, tls_ca_file=ours["ca"], tls_cert=ours["cert"],
              tls_key=other["key"]), "the key does not belong to the certificate"),
        (dict(scheduler_address=tls, tls_ca_file=ours["key"], tls_cert=ours["both"]),
         "not a PEM CA certificate"),
        (dict(scheduler_address=tls, tls_cert=ours["both"]), "need --tls-ca-file too"),
        (dict(scheduler_address=tls, tls_ca_file=ours["ca"]), "needs a client certificate"),
        (dict(scheduler_address=tls, tls_key=ours["key"]), "need --tls-ca-file too"),
        (dict(scheduler_address="tcp://127.0.0.1:1", tls_ca_file=ours["ca"],
              tls_cert=ours["both"]), "does not use TLS"),
        (dict(cpu=True, tls_ca_file=ours["ca"], tls_cert=ours["both"]),
         "for an existing TLS scheduler"),
    ]


def test_bad_tls_options_fail_before_connecting_with_one_line(certs):
    for kwargs, fragment in _bad_plans(certs):
        with pytest.raises(ClusterError) as err:
            cluster_plan.plan(**kwargs)
        assert fragment in str(err.value), kwargs
        assert _one_line(str(err.value))
        assert err.value.exit_code == 2


def test_scheduler_file_with_tls_address_needs_certificates(certs, tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"address": "tls://10.1.2.3:8786"}))
    with pytest.raises(ClusterError, match="TLS scheduler: give --tls-ca-file"):
        cluster_plan.plan(scheduler_file=str(path))
    ours = certs["ours"]
    p = cluster_plan.plan(scheduler_file=str(path), tls_ca_file=ours["ca"], tls_cert=ours["both"])
    assert p.options["scheduler_file"] == str(path)
    path.write_text(json.dumps({"address": "tcp://10.1.2.3:8786"}))
    with pytest.raises(ClusterError, match="does not use TLS"):
        cluster_plan.plan(scheduler_file=str(path), tls_ca_file=ours["ca"], tls_cert=ours["both"])


def test_tls_plan_carries_a_security_that_requires_encryption(certs):
    ours = certs["ours"]
    p = cluster_plan.plan(scheduler_address="10.1.2.3:8786", tls_ca_file=ours["ca"],
                      tls_cert=ours["cert"], tls_key=ours["key"])
    assert p.options["address"] == "tls://10.1.2.3:8786"
    sec = p.options["security"]
    assert sec.require_encryption is True
    assert (sec.tls_ca_file, sec.tls_client_cert, sec.tls_client_key) == (
        ours["ca"], ours["cert"], ours["key"])
    assert cluster_plan.describe(p) == "Connecting to tls://10.1.2.3:8786"


def test_cli_bad_tls_file_is_one_line_exit_2(certs):
    missing = str(certs["dir"] / "missing.pem")
    proc = run_cli("run", "mean-pipeline", "--scheduler-address", "tls://127.0.0.1:1",
                   "--tls-ca-file", missing, "--tls-cert", certs["ours"]["both"], timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: --tls-ca-file {missing}: no such file (give a PEM file)"
