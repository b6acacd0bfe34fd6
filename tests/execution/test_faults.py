"""Faults injected for real on CPU workers: a worker SIGKILLed mid-run, every worker lost, memory
pressure, and SIGINT/SIGTERM at each phase of a run. The injection lives in fault_injection.py
(shared with benchmarks/faults.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask
import numpy as np
import psutil
import pytest
from conftest import run_cli
from dask.base import is_dask_collection
from fault_injection import (
    ROOT,
    descendants,
    interrupt_cli,
    kill_all,
    removal_event,
    run_faulty_cli,
    run_killing_a_worker,
    spill_recorder,
    spill_records,
    wait_for,
)

import daskgpu
from daskgpu.clusters import interrupts
from daskgpu.errors import RunFailed
from daskgpu.execution import faults

DASK = Path(sys.executable).parent / "dask"

# Each run takes a few seconds on two single-thread workers: long enough to be hit mid-way.
KILLED_RUNS = {
    "mean-pipeline": {"size": 10000, "chunks": "1000", "seed": 5},
    "stencil-pipeline": {"size": 1600, "chunks": "400", "steps": 32},
    "trips-pipeline": {},  # Parquet input: see trips_files
}


@pytest.fixture(scope="module")
def restarting_cluster():
    """Two single-thread CPU workers, each with a nanny that restarts it when it dies."""
    with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1, dashboard=False) as client:
        yield client


def test_a_nanny_gets_as_long_to_restart_its_worker_as_a_run_waits_for_workers(
        restarting_cluster):
    # distributed closes a nanny whose worker is not back within lost-worker-timeout (15 s):
    # under load (a parallel test run) a restart took longer and the cluster lost a worker.
    waits = dask.config.get("daskgpu.faults.no-workers-timeout")
    assert dask.config.get("distributed.deploy.lost-worker-timeout") == waits != "15s"


@pytest.fixture(scope="module")
def trips_files(tmp_path_factory):
    """Twelve Parquet files of synthetic trips: twelve partitions to compute."""
    from pipelines.trips import pipeline as trips_pipeline

    folder = tmp_path_factory.mktemp("trips")
    for i in range(12):
        trips_pipeline.synthetic_partition((i, 150_000, 11)).to_parquet(
            folder / f"part-{i:02d}.parquet")
    return str(folder)


def _same_value(a, b) -> bool:
    if is_dask_collection(a):  # kept on the workers: the same kind of array
        return type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple | np.ndarray):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-300)
    return a == b


# --------------------------------------------------------------------------- worker loss


@pytest.mark.parametrize("pipeline", list(KILLED_RUNS))
def test_a_worker_killed_mid_run_costs_only_time(restarting_cluster, trips_files, pipeline):
    client = restarting_cluster
    params = dict(KILLED_RUNS[pipeline])
    if pipeline == "trips-pipeline":
        params["input"] = trips_files
    clean = daskgpu.run(pipeline, client=client, **params)
    assert clean.verified, clean.verification
    before = client.run(os.getpid)

    result, kill, _seconds = run_killing_a_worker(client, pipeline, 2, **params)

    assert kill is not None, "the run ended before a worker could be killed mid-way"
    assert kill.processing >= 1 and kill.holding >= 1  # it was computing, and held results
    # The scheduler saw it die (not retire) while it ran tasks, and reran them elsewhere.
    event = removal_event(client, kill.address)
    assert event is not None and event["expected"] is False
    assert event["processing-tasks"], event
    assert not psutil.pid_exists(kill.pid) or psutil.Process(kill.pid).status() == "zombie"
    after = client.run(os.getpid)
    assert len(after) == 2 and kill.pid not in after.values()  # the nanny started a new one
    assert set(after.values()) != set(before.values())
    assert result.verified, result.verification
    assert _same_value(result.value, clean.value)


def test_daskgpu_fault_settings_reach_the_scheduler(restarting_cluster):
    def settings(dask_scheduler=None):
        return dask_scheduler.allowed_failures, dask_scheduler.no_workers_timeout

    assert restarting_cluster.run_on_scheduler(settings) == (3, 60.0)


def test_a_task_that_keeps_killing_workers_is_one_line():
    from types import SimpleNamespace

    from distributed.scheduler import KilledWorker, NoWorkerError

    worker = SimpleNamespace(address="tcp://127.0.0.1:1")
    failed = faults._as_run_failed(KilledWorker(("stencil-abc123", 3, 4), worker, 3))
    assert isinstance(failed, RunFailed) and failed.exit_code == 1
    text = str(failed)
    assert text.startswith("the run could not finish: 4 workers died while running task "
                           "'stencil'") and "--memory-limit" in text and "\n" not in text
    lost = faults._as_run_failed(NoWorkerError("sum-aggregate", 60))
    assert "all workers were lost" in str(lost) and "within 60s" in str(lost)
    assert faults._as_run_failed(ValueError("a bug")) is None
    from distributed.client import FutureCancelledError

    cancelled = str(faults._as_run_failed(FutureCancelledError(("stencil-4c8d9a1b2e3f4a5b", 0, 0),
                                                               "scheduler-connection-lost")))
    assert cancelled.startswith("the run could not finish: the scheduler cancelled task "
                                "'stencil' (scheduler-connection-lost)") and "\n" not in cancelled


@pytest.mark.parametrize(("statuses", "says"), [
    (["paused", "paused"], "every worker has been paused for 60s (daskgpu.faults.no-workers-"),
    (["paused", "running"], "all workers were lost"),
    ([], "all workers were lost"),
])
def test_no_worker_error_says_paused_when_every_worker_is_paused(monkeypatch, statuses, says):
    """The scheduler's no-workers timeout also fires when the workers are all there but paused
    (their memory above the pause threshold): the line then says so, not that they were lost."""
    from distributed.scheduler import NoWorkerError

    monkeypatch.setattr(faults, "_worker_statuses", lambda client: statuses)
    with pytest.raises(RunFailed) as failed:
        faults._raise_failure(object(), [], (), NoWorkerError("stencil-abc123", 60))
    assert str(failed.value).startswith("the run could not finish: ")
    assert says in str(failed.value) and "\n" not in str(failed.value)


def _run_failure_line(*args, within: float, env=None, fault=None) -> str:
    """Run the CLI (with ``fault``: faulty_cli.py); it must fail (exit 1) in one ``error: the
    run could not finish`` line."""
    began = time.monotonic()
    args = (*args, "--no-dashboard", "--quiet")
    if fault is None:
        proc = run_cli(*args, env=env, timeout=120)
    else:
        proc = run_faulty_cli(*args, env=env, timeout=120, **fault)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the run could not finish: "), \
        proc.stderr
    assert time.monotonic() - began < within
    return lines[0]


def test_a_chunk_bigger_than_the_memory_limit_ends_in_one_line_for_real():
    # One 512 MB block for a worker limited to 400 MiB: its nanny kills it past 95 % of the
    # limit, every time, until the scheduler gives up on the task (KilledWorker). The limit is
    # well above what a worker takes before its first task (about 140 MiB): near 80 % of it,
    # an idle worker would be paused instead, on a busy machine before its first task.
    line = _run_failure_line("run", "stencil-pipeline", "--cpu", "--workers", "1", "--size",
                             "8000", "--chunks", "8000", "--steps", "4", "--memory-limit",
                             "400MiB", within=90)
    assert "4 workers died while running task 'stencil'" in line  # its first exchange
    assert "--memory-limit" in line


def test_workers_paused_for_good_end_in_one_line_instead_of_a_hang():
    # distributed pauses a worker whose own memory passes its pause threshold; one that never
    # gets below it runs no task again. Here the threshold is 10% of 300 MiB, below what any
    # worker takes, so both workers pause at their first memory check, and for good. The run
    # starts only once the scheduler reports both paused (run_once_paused): begun before that
    # check, this small run could end first, and simply succeed. (No warm-up: a second saved.)
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE": "0.1",
           "DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE": "False",
           "DASKGPU_FAULTS__PAUSED_TIMEOUT": "2s", "DASKGPU_WORKER__WARM_UP_ON_START": "false"}
    line = _run_failure_line("run", "mean-pipeline", "--cpu", "--workers", "2", "--size",
                             "2000", "--memory-limit", "300MiB", env=env, within=60,
                             fault={"run_once_paused": True})
    assert "every worker has been paused for 2s" in line


@pytest.fixture
def external_cluster(tmp_path):
    """A ``dask scheduler`` with its default settings and one ``dask worker`` (with a nanny)."""
    scheduler_file = tmp_path / "scheduler.json"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    logs, procs = [], []

    def start(name, *args):
        logs.append(open(tmp_path / f"{name}.log", "w"))
        procs.append(subprocess.Popen([str(DASK), *args], stdout=logs[-1],
                                      stderr=subprocess.STDOUT, env=env, cwd=tmp_path))

    try:
        start("scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0",
              "--scheduler-file", str(scheduler_file), "--no-dashboard")
        wait_for(lambda: scheduler_file.exists() and scheduler_file.read_text().strip(),
                 timeout=60, what="scheduler file")
        start("worker", "worker", "--scheduler-file", str(scheduler_file), "--nthreads", "1",
              "--no-dashboard", "--host", "127.0.0.1")
        from distributed import Client

        client = Client(scheduler_file=str(scheduler_file), timeout="30s")
        client.wait_for_workers(1, timeout=60)
        yield {"file": scheduler_file, "client": client, "worker": procs[1]}
        client.close()
    finally:
        tree = set()
        for proc in procs:
            tree |= descendants(proc.pid)
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        kill_all(tree)
        for log in logs:
            log.close()


def test_every_worker_lost_for_good_fails_in_one_line(external_cluster, tmp_path):
    # The scheduler was started with no no-workers timeout: the client's watch bounds the wait.
    env = dict(os.environ, DASKGPU_FAULTS__NO_WORKERS_TIMEOUT="3s")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "cli.py"), "run", "mean-pipeline", "--scheduler-file",
             str(external_cluster["file"]), "--size", "20000", "--chunks", "1000", "--json"],
            stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=ROOT)
    try:
        client = external_cluster["client"]
        wait_for(lambda: any(client.processing().values()), timeout=120,
                 what="tasks processing on the worker")
        nanny = psutil.Process(external_cluster["worker"].pid)
        worker = nanny.children(recursive=True)
        nanny.kill()  # the nanny first, so that nothing restarts the worker
        for p in worker:
            p.kill()
        began = time.monotonic()
        out, _ = proc.communicate(timeout=120)
        waited = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = err_path.read_text()
    assert proc.returncode == 1, stderr
    assert out == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: the run could not finish: all workers were lost and none came back within 3s"
    ), stderr
    assert waited < 60  # 3 s without a worker, plus the poll and the exit


# --------------------------------------------------------------------------- memory pressure


MiB = 2**20


@pytest.mark.parametrize(
    ("size", "held"),
    [
        # 288 MB grid; 7 grids computed (2 GB, 3x the limit), over half a limit held at once
        # (the closed-form check regenerates u0 per block, so u0 is no longer held to the end)
        pytest.param(6000, 0.45, id="grids-3x-limit"),
        # 800 MB grid: more than the whole limit held at once (1.5 to 1.8 of it)
        pytest.param(10000, 1.2, id="held-over-limit", marks=pytest.mark.slow),
    ],
)
def test_more_data_than_memory_completes_by_spilling_to_disk(size, held):
    import distributed  # noqa: F401  (its defaults first: leaving dask.config.set keeps them)

    limit = 640 * MiB  # above a worker's own ~300 MB (libraries, compiled kernels)
    # Six halo exchanges over a 6 x 6 grid of blocks: every final block depends on every initial
    # one, so whole intermediate grids are held at once, rather than a band of blocks streaming
    # through.
    params = {"size": size, "chunks": "1000", "steps": 24, "steps_per_exchange": 4}
    # distributed's own thresholds, set so that no setting from outside changes them: results
    # past 60% of the limit go to disk as they are stored, more while the process is past 70%.
    spilling = {"distributed.worker.memory.target": 0.6, "distributed.worker.memory.spill": 0.7}
    with dask.config.set(spilling), daskgpu.cluster(
            cpu=True, workers=1, threads_per_worker=1, dashboard=False,
            memory_limit=limit) as client:
        (pid,) = client.run(os.getpid).values()
        (spill_dir,) = client.run(lambda dask_worker: dask_worker.local_directory).values()
        # What the worker holds, noted at every change of a task's state: no peak missed
        # between samples.
        client.register_plugin(spill_recorder())
        result = daskgpu.run("stencil-pipeline", client=client, **params)
        assert result.verified, result.verification
        assert list(client.run(os.getpid).values()) == [pid]  # the worker never died
        (spilled,) = spill_records(client).values()
        assert os.path.isdir(spill_dir)
    grids = (result.data["exchanges"] + 1) * size * size * 8
    assert grids >= 2 * limit
    # The recorder saw the run: each of its 36 blocks per grid was stored, then released.
    assert spilled["transitions"] >= 2 * 36 * (result.data["exchanges"] + 1), spilled
    assert spilled["peak_held"] >= held * limit, spilled  # in memory or on disk, at once
    # Results went to disk as the run went. How much depends on the process's memory (the 70%
    # threshold), so on timing: alone or beside other tests, over 1.2 limits written in all
    # and 0.37 of one on disk at once.
    assert spilled["spill_buffer"] and spilled["written"] >= limit, spilled
    assert spilled["peak_spilled"] >= limit / 4, spilled
    assert not os.path.exists(spill_dir)  # the spilled data went with the worker


# --------------------------------------------------------------------------- interrupts
# test_cli.py covers SIGINT, SIGTERM and a process-group Ctrl-C while mean-pipeline computes.

CLUSTER = ["--cpu", "--workers", "2", "--threads-per-worker", "1", "--no-dashboard"]
STENCIL = ["run", "stencil-pipeline", *CLUSTER, "--size", "3000", "--chunks", "500",
           "--steps", "200"]
HISTOGRAM = ["run", "histogram-pipeline", *CLUSTER, "--values", "3000000", "--bins", "3000000",
             "--range", "0", "1", "--seed", "1", "--json"]


def _assert_clean_exit(r, bound: float = 30.0) -> None:
    assert r.returncode == 130, r.stderr
    assert r.exit_s < bound, r.exit_s
    assert r.stderr.rstrip().endswith("interrupted: cluster shut down"), r.stderr
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    assert len(r.recorded) >= 1  # there were processes to leave behind
    assert r.left_behind == [], f"left behind: {r.left_behind}"
    assert r.leftover_files == [], r.leftover_files


@pytest.mark.parametrize(
    ("args", "phase", "signals", "name"),
    [
        pytest.param(["run", "mean-pipeline", *CLUSTER, "--size", "4000"], "start",
                     [signal.SIGTERM], None, id="start-SIGTERM"),
        pytest.param(["run", "mean-pipeline", *CLUSTER, "--size", "4000"], "start",
                     [signal.SIGINT, signal.SIGINT], None, id="start-double-SIGINT"),
        pytest.param(["run", "mean-pipeline", *CLUSTER, "--size", "200000"], "compute",
                     [signal.SIGINT, signal.SIGINT], None, id="compute-double-SIGINT"),
        pytest.param(STENCIL, "output", [signal.SIGINT], "u.npy", id="stencil-npy-SIGINT"),
        pytest.param(HISTOGRAM, "output", [signal.SIGTERM], "h.csv", id="histogram-csv-SIGTERM"),
        pytest.param(["run", "mean-pipeline", *CLUSTER, "--size", "4000"], "start",
                     [signal.SIGINT], None, id="start-SIGINT", marks=pytest.mark.slow),
        pytest.param(STENCIL, "output", [signal.SIGTERM], "u.zarr", id="stencil-zarr-SIGTERM",
                     marks=pytest.mark.slow),
        pytest.param(STENCIL, "output", [signal.SIGINT, signal.SIGINT], "u.zarr",
                     id="stencil-zarr-double-SIGINT", marks=pytest.mark.slow),
    ],
)
def test_interrupt_in_every_phase_leaves_nothing(tmp_path, args, phase, signals, name):
    output = tmp_path / "out" / name if name else None
    if output is not None:
        output.parent.mkdir()
        args = [*args, "--output", str(output)]
    r = interrupt_cli(args, phase, signals, tmp_path, output=output)
    _assert_clean_exit(r)
    if output is not None:
        assert list(output.parent.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_a_cluster_start_that_hangs(tmp_path, signum):
    # Every worker process hangs as it starts: the start would never end by itself, and a
    # signal held back until it ends would never land (`timeout` needed -k to end the run).
    r = interrupt_cli(["run", "mean-pipeline", *CLUSTER, "--size", "1000"], "start", [signum],
                      tmp_path, fault={"hang": "worker-start"}, exit_timeout=60)
    assert r.returncode is not None, f"still running 60 s after the signal: {r.stderr}"
    _assert_clean_exit(r, bound=interrupts.GIVE_UP_AFTER_S + 10)
    assert r.exit_s >= interrupts.GIVE_UP_AFTER_S  # a start that might yet end was given time
    assert len(r.recorded) >= 2, r.recorded  # both hung worker processes were there, and went
    assert r.stderr.splitlines()[-1] == "interrupted: cluster shut down", r.stderr


def test_sigterm_ends_a_start_that_hangs_in_the_client_process(tmp_path):
    # No worker process to end: the nannies (in this process) never finish starting.
    r = interrupt_cli(["run", "mean-pipeline", *CLUSTER, "--size", "1000"], "scheduler",
                      [signal.SIGTERM], tmp_path, fault={"hang": "nanny-start"}, exit_timeout=60)
    assert r.returncode == 130, f"exit {r.returncode} {r.exit_s:.1f} s after the signal: {r.stderr}"
    # Given time to end, then cut short; distributed's exit handler then finds the cluster's
    # never-started workers, which is no news.
    assert interrupts.GIVE_UP_AFTER_S <= r.exit_s < (interrupts.GIVE_UP_AFTER_S
                                                      + interrupts.CUT_SHORT_AFTER_S + 10), r
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    assert r.stderr.splitlines()[-1] == "interrupted: cluster shut down", r.stderr
    assert r.left_behind == [], r.left_behind


class _Landed(Exception):
    pass


def _land(signum, frame):
    raise _Landed(signum)


def test_a_deferred_signal_lands_inside_a_block_that_never_ends(monkeypatch):
    # A start that hangs in this process (no worker process to end), the main thread in one long
    # wait as in distributed's, and the signal handed by the kernel to another thread: Python
    # would run the handler only once that wait ends. The signal still lands, in time.
    monkeypatch.setattr(interrupts, "CUT_SHORT_AFTER_S", 0.2)
    previous = signal.signal(signal.SIGUSR1, _land)
    release = threading.Event()  # the other thread lives until the end, however long it takes
    other = threading.Thread(target=release.wait, args=(60,), daemon=True)
    began = time.monotonic()
    try:
        with pytest.raises(_Landed), interrupts.interrupts_deferred((signal.SIGUSR1,), 0.3):
            other.start()
            signal.pthread_kill(other.ident, signal.SIGUSR1)
            threading.Event().wait(30)
        assert 0.5 <= time.monotonic() - began < 4
        with interrupts.interrupts_deferred((signal.SIGUSR1,), 0.3):  # the handler is back after
            pass
        assert signal.getsignal(signal.SIGUSR1) is _land
    finally:
        release.set()
        signal.signal(signal.SIGUSR1, previous)


def test_a_deferred_signal_waits_for_a_block_that_ends_in_time():
    previous = signal.signal(signal.SIGUSR1, _land)
    try:
        with pytest.raises(_Landed):
            with interrupts.interrupts_deferred((signal.SIGUSR1,), 5.0):
                os.kill(os.getpid(), signal.SIGUSR1)
                time.sleep(0.3)
                finished = True
        assert finished
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_interrupted_run_leaves_an_existing_output_as_it_was(tmp_path):
    output = tmp_path / "u.npy"
    np.save(output, np.arange(3.0))
    r = interrupt_cli([*STENCIL, "--output", str(output), "--overwrite"], "output",
                      [signal.SIGINT], tmp_path, output=output)
    assert r.returncode == 130 and r.left_behind == [], r.stderr
    assert r.leftover_files == [str(output)]  # only the old output itself
    np.testing.assert_array_equal(np.load(output), np.arange(3.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stderr", "stdout", "u.npy"]



def test_a_pipelines_own_computes_end_in_one_line_when_the_workers_are_gone():
    """Build and verify passes call dask.compute themselves; through the runner's scheduler
    they wait like the run's compute: a cluster without workers ends them (it used to hang)."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        watched = faults.WatchedClient(client)
        import dask.array as da

        arrays = [da.ones((4, 4), chunks=2).sum(), dask.delayed(sum)([1, 2])]
        with dask.config.set(scheduler=watched):
            assert dask.compute(*arrays) == (16.0, 3)  # nested keys come back in place
            assert watched.submit(sum, [2, 3]).result() == 5  # the client's own methods
        cluster.scale(0)
        wait_for(lambda: not client.scheduler_info()["workers"], timeout=30,
                 what="removal of the cluster's only worker")
        began = time.monotonic()
        with dask.config.set({"scheduler": watched, "daskgpu.faults.no-workers-timeout": "1s"}):
            with pytest.raises(RunFailed, match="all workers were lost"):
                dask.delayed(sum)([4, 5]).compute()
        assert time.monotonic() - began < 20


def _fails_on_the_worker(x):
    raise ValueError(f"no good: {x}")


def test_data_kept_between_stages_is_waited_for_like_a_result(cpu_client):
    # A pipeline that drives its run in stages waits on kept data through the run's client.
    from daskgpu.errors import TaskFailed
    from daskgpu.toolkit import data_parallel

    watched = faults.WatchedClient(cpu_client.client)
    good = [cpu_client.client.submit(abs, -i, pure=False) for i in range(3)]
    data_parallel.wait_kept(watched, good)
    assert data_parallel.fetch(watched, good) == [0, 1, 2]
    bad = [*good, cpu_client.client.submit(_fails_on_the_worker, 7, pure=False)]
    with pytest.raises(TaskFailed, match="no good: 7") as caught:
        data_parallel.wait_kept(watched, bad)
    assert "\n" not in str(caught.value)


def test_workers_dying_under_a_driven_run_end_it_in_one_line(cpu_client):
    from types import SimpleNamespace

    from distributed.scheduler import KilledWorker

    def drive(workload, client):
        assert isinstance(client, faults.WatchedClient)
        raise KilledWorker(("step-4c8d9a1b2e3f4a5b", 0), SimpleNamespace(address="w"), 3)

    with pytest.raises(RunFailed, match="4 workers died while running task 'step'"):
        faults.WatchedClient(cpu_client.client).drive(SimpleNamespace(drive=drive))
