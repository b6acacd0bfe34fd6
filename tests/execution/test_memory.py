"""Per-worker peak memory of a run, measured on the workers."""

from __future__ import annotations

import textwrap

import numpy as np

import daskgpu
from daskgpu.execution import memory

BLOCK_BYTES = 64 * 2**20


def test_kernel_high_water_mark_resets_and_rises():
    assert memory._reset_high_water_mark()
    before = memory._high_water_mark()
    block = np.ones(BLOCK_BYTES // 8)
    block[::4096] = 2  # touch every page
    assert memory._high_water_mark() >= before + BLOCK_BYTES * 0.9
    del block
    memory._reset_high_water_mark()
    assert memory._high_water_mark() < before + BLOCK_BYTES * 0.5


def test_run_reports_each_workers_peak_and_it_follows_the_block_size(cpu_client):
    small = daskgpu.run("mean-pipeline", client=cpu_client, size=1000)
    big = daskgpu.run("histogram-pipeline", client=cpu_client, values=2 * BLOCK_BYTES // 8,
                      chunks=str(BLOCK_BYTES // 8), bins=16, range=(0, 1))
    for result in (small, big):
        assert len(result.workers) == 2
        assert all(w["host_peak_bytes"] > 10 * 2**20 for w in result.workers)
        assert all("device_peak_bytes" not in w for w in result.workers)  # CPU workers
    # each worker held at least one 64 MiB block of the histogram's input, none of the mean's
    assert max(w["host_peak_bytes"] for w in big.workers) >= (
        max(w["host_peak_bytes"] for w in small.workers) + 0.9 * BLOCK_BYTES)


def test_workers_that_nvml_shows_a_gpu_report_its_device_memory_peak():
    # The made-up NVML: each worker's first visible GPU has 20 GiB of 80 GiB in use, which
    # distributed's system monitor samples; the run falls back to CPU workers (no GPU stack).
    import json

    from conftest import fake_nvml_env, run_cli

    gib = 2**30
    spec = {"gpus": [{"name": "Fake H100", "uuid": "GPU-5e1f0000-0000-4000-8000-000000000001",
                      "memory_total": 80 * gib, "memory_free": 60 * gib}]}
    proc = run_cli("run", "mean-pipeline", "--size", "1000", "--workers", "2", "--json",
                   "--no-dashboard", env=fake_nvml_env(spec))
    assert proc.returncode == 0, proc.stderr
    workers = json.loads(proc.stdout)["workers"]
    assert len(workers) == 2
    for w in workers:
        assert w["device_peak_bytes"] == 20 * gib
        assert w["host_peak_bytes"] > 10 * 2**20


# Two runs on one worker that sees a made-up GPU. Each run's tasks set the GPU memory NVML
# reports, one value after another, each until distributed's system monitor has sampled it; the
# run's peak must be the largest of its own samples: not the last, nor an earlier run's.
DEVICE_PEAKS = textwrap.dedent("""
    import json, os, sys, time

    import dask
    import daskgpu
    from daskgpu.toolkit.registry import Pipeline, Verification, Workload

    GiB = 2**30
    USED = sys.argv[1]


    def reported(value, previous):
        from distributed import get_worker

        monitor = get_worker().monitor
        with open(USED + ".partial", "w") as f:
            f.write(str(value))
        os.replace(USED + ".partial", USED)
        deadline = time.monotonic() + 30
        while monitor.quantities["gpu_memory_used"][-1] != value:  # until sampled
            assert time.monotonic() < deadline, "no sample of the GPU memory in 30 s"
            time.sleep(0.01)
        return value


    def using(*gib):
        def prepare(resolved):
            step = None
            for n in gib:
                step = dask.delayed(reported, pure=False)(n * GiB, step)
            return Workload(step, len(gib), 8)

        return Pipeline("gpu-memory", "s", (), prepare, lambda w, raw: Verification(True, "ok"))


    if __name__ == "__main__":  # not again in the workers' fork server
        with open(USED, "w") as f:
            f.write(str(1 * GiB))
        with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1,
                             dashboard=False) as session:
            runs = [daskgpu.run(using(3, 25, 5), session), daskgpu.run(using(7, 2), session)]
        print(json.dumps([[w.get("device_peak_bytes") for w in r.workers] for r in runs]))
""")


def test_the_device_peak_is_the_largest_sample_of_the_run_itself(tmp_path):
    import json
    import subprocess
    import sys

    from conftest import ROOT, fake_nvml_env

    used = tmp_path / "gpu-memory-used"
    spec = {"gpus": [{"name": "Fake H100", "uuid": "GPU-5e1f0000-0000-4000-8000-000000000001",
                      "memory_total": 80 * 2**30, "memory_used_file": str(used)}]}
    env = fake_nvml_env(spec)
    env["DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL"] = "50ms"
    script = tmp_path / "device_peaks.py"
    script.write_text(DEVICE_PEAKS)
    proc = subprocess.run([sys.executable, str(script), str(used)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = json.loads(proc.stdout.splitlines()[-1])
    assert first == [25 * 2**30]  # of 1 (before), 3, 25 and 5 GiB (the last sample)
    assert second == [7 * 2**30]  # of 5 (before), 7 and 2 GiB: the first run's 25 is gone


def test_local_workers_are_measured_from_here_after_the_first_run(cpu_client):
    import os

    first = daskgpu.run("mean-pipeline", client=cpu_client, size=1000)
    # The workers of a cluster started here are this process's children: their pids are kept,
    # and the next runs reset and read their peaks through /proc, without a message.
    assert cpu_client.worker_pids == cpu_client.run(os.getpid)
    second = daskgpu.run("histogram-pipeline", client=cpu_client, values=2 * BLOCK_BYTES // 8,
                         chunks=str(BLOCK_BYTES // 8), bins=16, range=(0, 1))
    assert max(w["host_peak_bytes"] for w in second.workers) >= (
        max(w["host_peak_bytes"] for w in first.workers) + 0.9 * BLOCK_BYTES)
    third = daskgpu.run("mean-pipeline", client=cpu_client, size=1000)
    # reset at the start of the third run: the histogram's blocks no longer count
    assert max(w["host_peak_bytes"] for w in third.workers) < (
        max(w["host_peak_bytes"] for w in second.workers) - 0.5 * BLOCK_BYTES)


def test_a_worker_lost_as_the_run_starts_does_not_break_the_start_mark():
    """Its pid gone and the scheduler's message to it failing (a worker its nanny just killed
    for memory): the mark is still taken; the run's fault watch reports the loss."""
    from types import SimpleNamespace

    from distributed.comm.core import CommClosedError

    class Client:
        def run(self, function, wait=True, on_error="raise"):
            if on_error == "raise":  # what distributed does with the failed broadcast
                raise CommClosedError("Address removed.")
            return {}

    dead = 2**22 + 12345  # above Linux's default pid_max: no such process
    session = SimpleNamespace(worker_pids={"tcp://127.0.0.1:1": dead}, client=Client())
    assert isinstance(memory.start(session), float)
