"""CPU workers forked from one preloaded server (daskgpu.worker_processes), or spawned."""

from __future__ import annotations

import multiprocessing
import os

import dask.config
import psutil
from conftest import run_cli

import daskgpu


def _parents(client) -> set[int]:
    return set(client.run(os.getppid).values())


def test_cpu_workers_are_forks_of_one_server_this_process_started():
    with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1, dashboard=False) as session:
        parents = _parents(session.client)
        assert len(parents) == 1 and os.getpid() not in parents
        server = psutil.Process(parents.pop())
        assert server.ppid() == os.getpid()  # the server is this process's child
        # a worker starts no processes of its own: Numba makes no named semaphore there
        methods = session.client.run(lambda: multiprocessing.get_start_method())
        assert set(methods.values()) == {"spawn"}
        # a nanny restarts its worker the same way
        session.client.restart()
        assert _parents(session.client) == {server.pid}


def _blas_threads() -> set[int]:
    import threadpoolctl

    return {d["num_threads"] for d in threadpoolctl.threadpool_info() if d["user_api"] == "blas"}


def test_a_forked_workers_blas_keeps_to_one_thread_like_a_spawned_ones():
    # The server imported numpy with distributed's pre-spawn environment (OPENBLAS_NUM_THREADS
    # and the like at 1): a worker forked from it must not run a BLAS pool per core beside its
    # task threads.
    with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1, dashboard=False) as session:
        threads = session.client.run(_blas_threads)
        assert len(threads) == 2 and all(v == {1} for v in threads.values()), threads


def test_spawn_asks_for_distributeds_own_start():
    with dask.config.set({"daskgpu.worker.cpu-start-method": "spawn"}), \
            daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False) as session:
        assert _parents(session.client) == {os.getpid()}


def test_an_unknown_start_method_is_one_line():
    env = {**os.environ, "DASKGPU_WORKER__CPU_START_METHOD": "vfork"}
    proc = run_cli("run", "mean-pipeline", "--cpu", "--size", "100", "--no-dashboard", env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: daskgpu.worker.cpu-start-method is 'vfork': use forkserver or spawn"]
