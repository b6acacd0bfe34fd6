"""tools/gpu-check-pipelines.sh, dry-run on CPU workers: its every step still runs and verifies."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

PIPELINES = ("train-pipeline", "kmeans-pipeline", "matmul-pipeline", "pca-pipeline",
             "fft-pipeline")


@pytest.mark.timeout(1600)
def test_gpu_check_script_runs_every_step_on_cpu(tmp_path):
    env = dict(os.environ, DEVICE="--cpu", SCALE="small", PYTHON=sys.executable,
               OUT=str(tmp_path), BUDGET="1500", REPEAT="1", WARMUP="0")
    proc = subprocess.run(["bash", str(ROOT / "tools" / "gpu-check-pipelines.sh")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = (tmp_path / "summary.txt").read_text()
    assert "SKIP" not in summary
    for name in PIPELINES:
        for step in ("run", "bench"):
            assert f"{step} {name} rc=0" in summary, summary
    results = json.loads((tmp_path / "results.json").read_text())
    assert "run fft-pipeline irfft2 rc=0" in summary, summary
    assert "kmeans pass rc=0" in summary and "GB/s" in summary, summary
    passes = results["pass-kmeans.json"]
    assert passes["pass"]["agrees"] and passes["counts_cost"]["agrees"]
    assert passes["pass"]["gb_per_s"] > 0 and passes["bytes_per_pass"] == 20_000 * 32 * 4
    assert results["run-fft-irfft2.json"]["data"]["transform"] == "irfft2"
    assert results["run-fft-irfft2.json"]["verified"] is True
    for name in PIPELINES:
        assert results[f"run-{name}.json"]["verified"] is True
        bench = results[f"bench-{name}.json"]["measurements"][0]
        assert bench["verified"] is True and bench["baseline_s"] > 0 and bench["ratio"] > 0


def test_a_step_whose_limit_no_longer_fits_is_skipped_not_cut(tmp_path):
    """With 50 s of budget, every step (90 s or more each) is skipped, and none is started."""
    env = dict(os.environ, DEVICE="--cpu", SCALE="small", PYTHON=sys.executable,
               OUT=str(tmp_path), BUDGET="50")
    proc = subprocess.run(["bash", str(ROOT / "tools" / "gpu-check-pipelines.sh")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = (tmp_path / "summary.txt").read_text()
    assert "SKIP run train-pipeline (needs 90s, 50s left)" in summary, summary
    assert "rc=" not in summary, summary
    runs = tmp_path / "runs.log"
    assert not runs.exists() or "=====" not in runs.read_text()
