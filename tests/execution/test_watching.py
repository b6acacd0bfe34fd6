"""Watching a run: the performance report, and a cluster kept open for its dashboard."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest
from conftest import ROOT, run_cli
from conftest import alive as _alive
from fault_injection import failing_pipeline


def test_report_is_a_self_contained_html_file_naming_the_tasks(tmp_path):
    target = tmp_path / "run.html"
    proc = run_cli("run", "mean-pipeline", "--size", "2000", "--workers", "2", "--no-dashboard",
                   "--json", "--report", str(target))
    assert proc.returncode == 0, proc.stderr
    html = target.read_text()
    assert html.lstrip().lower().startswith("<!doctype html")
    assert "Task Stream" in html
    assert "cell_mean" in html  # the mean's final task, from the task stream
    assert not re.search(r"<script[^>]+src=", html)  # bokeh inlined, no CDN
    assert [p.name for p in tmp_path.iterdir()] == ["run.html"]


def test_report_from_python_is_written_and_a_failed_run_leaves_none(in_process_client,
                                                                      tmp_path):
    import daskgpu
    from daskgpu.errors import TaskFailed

    target = tmp_path / "run.html"
    result = daskgpu.run("mean-pipeline", in_process_client, size=500, report=str(target))
    assert result.verified
    html = target.read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and "Task Stream" in html
    assert "cell_mean" in html  # this run's tasks
    # A run whose task fails leaves nothing half-written: no report, no temporary beside it.
    failed = tmp_path / "failed" / "run.html"
    failed.parent.mkdir()
    with pytest.raises(TaskFailed, match="no good"):
        daskgpu.run(failing_pipeline("builtins", "ValueError", "no good"), in_process_client,
                    report=str(failed))
    assert os.listdir(failed.parent) == []


def test_report_path_is_checked_before_running(tmp_path):
    proc = run_cli("run", "mean-pipeline", "--report", str(tmp_path / "nodir" / "r.html"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = run_cli("run", "mean-pipeline", "--report", str(tmp_path / "r.txt"))
    assert proc.returncode == 2 and ".html" in proc.stderr


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


def test_keep_open_serves_the_dashboard_until_ctrl_c(tmp_path):
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "cli.py"), "run", "mean-pipeline", "--size", "2000",
             "--workers", "2", "--threads-per-worker", "1", "--dashboard-address",
             "127.0.0.1:0", "--json", "--keep-open"],
            stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        doc = json.loads(line)
        link = doc["dashboard"]
        assert link.startswith("http://127.0.0.1:") and doc["verified"] is True
        deadline = time.monotonic() + 20
        while "press Ctrl-C" not in err_path.read_text():
            assert time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.1)
        assert proc.poll() is None  # still open after the result was printed
        status, _ = _get(link)
        assert status == 200
        base = link.rsplit("/", 1)[0]
        status, page = _get(f"{base}/info/main/workers.html")
        assert status == 200
        workers = {w["address"] for w in doc["workers"]}
        assert len(workers) == 2 and all(address in page for address in workers)
        children = [(c.pid, c.create_time()) for c in psutil.Process(proc.pid).children(True)]
        assert len(children) >= 2
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, err_path.read_text()
        deadline = time.monotonic() + 10
        while any(_alive(pid, made) for pid, made in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(pid, made) for pid, made in children)
        assert "Traceback" not in err_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_keep_open_is_off_by_default():
    began = time.monotonic()
    proc = run_cli("run", "mean-pipeline", "--size", "1000", "--workers", "1", "--no-dashboard",
                   "-q")
    assert proc.returncode == 0 and time.monotonic() - began < 60
    assert "press Ctrl-C" not in proc.stderr


def _run_in_pty(*args: str) -> str:
    """Run the CLI with a pseudo-terminal as stdout and stderr; return everything it wrote."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *args], stdout=follower,
                            stderr=follower, cwd=ROOT)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the follower side closed: the process is done
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(leader)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


def test_progress_bar_on_a_terminal_only():
    shown = _run_in_pty("run", "mean-pipeline", "--size", "4000", "--chunks", "500",
                        "--workers", "2", "--no-dashboard")
    assert "% Completed" in shown and "Starting 2 CPU worker(s)" in shown
    quiet = _run_in_pty("run", "mean-pipeline", "--size", "4000", "--chunks", "500",
                        "--workers", "2", "--no-dashboard", "--quiet")
    assert "% Completed" not in quiet
    as_json = _run_in_pty("run", "mean-pipeline", "--size", "4000", "--workers", "2",
                          "--no-dashboard", "--json")
    assert "% Completed" not in as_json and "Starting" not in as_json
    lines = [line for line in as_json.splitlines() if line.startswith("{")]
    assert json.loads(lines[0])["verified"] is True


def test_piped_output_is_only_the_result():
    proc = run_cli("run", "mean-pipeline", "--size", "3000", "--workers", "2", "--no-dashboard")
    assert proc.returncode == 0
    assert "% Completed" not in proc.stdout + proc.stderr
    assert proc.stdout.lstrip().startswith("daskgpu run: mean-pipeline")
