"""CPU workers forked from one preloaded server (daskgpu.clusters.worker_processes), or spawned."""

from __future__ import annotations

import multiprocessing
import os

import dask.config
import psutil
import pytest
from conftest import run_cli

import daskgpu
from daskgpu.clusters import worker_processes
from pipelines import BUILTIN


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


_STARTED_FIRST = """
import sys


def blas_threads():
    import threadpoolctl

    return sorted({{d["num_threads"] for d in threadpoolctl.threadpool_info()
                   if d["user_api"] == "blas"}})


if __name__ == "__main__":
    sys.path.insert(0, {root!r})
    from daskgpu.clusters import worker_processes

    worker_processes.start_server("pipelines.mean.pipeline")  # as cli.py run does: first
    assert "distributed" not in sys.modules
    import daskgpu

    with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1, dashboard=False) as session:
        print(sorted(map(str, session.client.run(blas_threads).values())))
"""


def test_a_server_started_before_distributed_is_imported_still_limits_blas(tmp_path):
    # The command line starts the server before distributed (and its default settings) load:
    # the pre-spawn environment must still reach it.
    assert _last_line_of(tmp_path, _STARTED_FIRST) == "['[1]', '[1]']"


def _last_line_of(folder, template: str) -> str:
    """Run ``template`` (with ``{root}``, this checkout) as a script; its last line out."""
    import subprocess
    import sys

    from conftest import ROOT

    script = folder / "script.py"
    script.write_text(template.format(root=str(ROOT)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("argv, expected", [
    (["run", "mean-pipeline", "--cpu", "--size", "10"], "pipelines.mean.pipeline"),
    (["bench", "kmeans-pipeline", "--cpu"], "pipelines.kmeans.pipeline"),
    (["run", "mean-pipeline"], "pipelines.mean.pipeline"),  # no GPU here (fake NVML below)
    (["run", "no-such-pipeline", "--cpu"], None),  # starts; nothing of the pipeline's
    (["run", "mean-pipeline", "--gpus", "0"], False),
    (["run", "mean-pipeline", "--scheduler-address=tcp://h:8786"], False),
    (["run", "mean-pipeline", "--cpu", "--help"], False),
    (["list"], False),
    (["run"], False),
])
def test_the_command_line_starts_the_server_only_where_it_will_fork_cpu_workers(
        monkeypatch, argv, expected):
    from daskgpu.clusters import devices

    started = []
    monkeypatch.setattr(worker_processes, "_start", lambda preload, main: started.append(preload))
    monkeypatch.setattr(devices, "inventory", lambda: devices.Inventory((), "no GPU"))
    monkeypatch.delenv(worker_processes.METHOD_VARIABLE, raising=False)
    worker_processes.start_for_command_line(argv, BUILTIN.get, main=True)
    if expected is False:
        assert started == []
        return
    (preload,) = started
    assert preload[0] == "daskgpu.clusters.fork_server_environment"  # before numpy
    assert preload[-1] == "daskgpu.clusters.fork_server_main"  # the program, last
    assert preload[-2] == worker_processes.KERNELS_MODULE  # after the pipeline's module
    # The pipeline imports what its tasks need; a cluster of no pipeline gets dask.array.
    assert preload[-3] == (expected or "dask.array")
    assert ("dask.array" in preload) == (expected is None)


def test_a_gpu_or_a_spawn_setting_keeps_the_command_line_from_starting_one(monkeypatch):
    from daskgpu.clusters import devices

    started = []
    monkeypatch.setattr(worker_processes, "_start", lambda preload, main: started.append(preload))
    monkeypatch.setattr(devices, "inventory", lambda: devices.Inventory(("a GPU",)))
    monkeypatch.setattr(worker_processes, "_nvidia_driver_present", lambda: True)
    worker_processes.start_for_command_line(["run", "mean-pipeline"], BUILTIN.get)
    assert started == []  # GPU workers spawn
    worker_processes.start_for_command_line(["run", "mean-pipeline", "--cpu"], BUILTIN.get)
    assert len(started) == 1 and "daskgpu.clusters.fork_server_main" not in started[0]
    monkeypatch.setenv(worker_processes.METHOD_VARIABLE, "spawn")
    worker_processes.start_for_command_line(["run", "mean-pipeline", "--cpu"], BUILTIN.get)
    assert len(started) == 1
    # No NVIDIA control device: no need to ask NVML (it could find no GPU)
    monkeypatch.delenv(worker_processes.METHOD_VARIABLE)
    monkeypatch.setattr(worker_processes, "_nvidia_driver_present", lambda: False)
    worker_processes.start_for_command_line(["run", "mean-pipeline"], BUILTIN.get)
    assert len(started) == 2


def test_a_server_the_settings_do_not_want_is_stopped(monkeypatch):
    stopped = []
    monkeypatch.setattr(worker_processes, "stop_server", lambda: stopped.append(True))
    with dask.config.set({"daskgpu.worker.cpu-start-method": "spawn"}):
        assert worker_processes.start_server("pipelines.mean.pipeline") is False
    assert stopped == [True]


def test_the_server_takes_distributeds_pre_spawn_environment_as_it_starts(monkeypatch):
    environ = worker_processes.pre_spawn_environ()
    assert environ["OMP_NUM_THREADS"] == "1" and environ["OPENBLAS_NUM_THREADS"] == "1"
    with dask.config.set({"distributed.nanny.pre-spawn-environ": {"OMP_NUM_THREADS": 3}}):
        assert worker_processes.pre_spawn_environ() == {"OMP_NUM_THREADS": "3"}
    for key in environ:
        monkeypatch.delenv(key, raising=False)
    worker_processes.apply_pre_spawn_environ()
    assert {k: os.environ[k] for k in environ} == environ


_PRELOADED_MAIN = """
import os
import sys

IMPORTED_IN = os.getpid()  # where multiprocessing imported this file (as __mp_main__)


def imported_where():
    main = sys.modules["__mp_main__"]
    return ("server" if main.IMPORTED_IN == os.getppid()
            else "worker" if main.IMPORTED_IN == os.getpid() else "elsewhere")


if __name__ == "__main__":
    sys.path.insert(0, {root!r})
    from daskgpu.clusters import worker_processes

    worker_processes.start_for_command_line(["run", "mean-pipeline", "--cpu"],
                                            lambda name: "pipelines.mean.pipeline", main=True)
    import daskgpu

    with daskgpu.cluster(cpu=True, workers=2, threads_per_worker=1, dashboard=False) as session:
        print(sorted(session.client.run(imported_where).values()))
"""


_KERNELS_LOADED = """
import sys
sys.path.insert(0, {root!r})
import pipelines.trips.pipeline
before = "daskgpu.kernels.trips" in sys.modules
import daskgpu.clusters.fork_server_kernels
import numba.np.ufunc.parallel as threading_layer
print(before, "daskgpu.kernels.trips" in sys.modules, "numba.np.arraymath" in sys.modules,
      threading_layer._is_initialized)
"""


def test_the_server_imports_the_pipelines_kernels_and_numbas_target_but_starts_no_thread(
        tmp_path):
    # The pipeline's module leaves its kernels to its workers (worker_modules); the server
    # imports them and Numba's CPU target once for every worker, and starts no Numba thread
    # (an OpenMP runtime does not survive a fork).
    assert _last_line_of(tmp_path, _KERNELS_LOADED) == "False True True False"


def test_workers_forked_for_a_command_line_find_its_program_imported(tmp_path):
    # The server imported the program (cli.py, here a script alike) as multiprocessing's
    # __mp_main__: a worker forked from it does not import the program again.
    assert _last_line_of(tmp_path, _PRELOADED_MAIN) == "['server', 'server']"


@pytest.mark.parametrize("fails", [False, True])
def test_workers_restarted_while_the_cluster_closes_are_forked_too(monkeypatch, fails):
    """A run that fails (a task killed its worker, say) closes its cluster while the nanny may
    still be restarting that worker: the fork setting holds until the cluster is closed, so
    the restart is a fork, not a fresh interpreter spawned only to be closed; then the
    setting is as it was."""
    import contextlib

    import distributed  # noqa: F401  (its defaults first: they are what the setting returns to)

    from daskgpu.clusters import closing

    seen = []
    close = closing.close

    def noting(*args, **kwargs):
        seen.append(dask.config.get(worker_processes.METHOD_KEY))
        return close(*args, **kwargs)

    monkeypatch.setattr(closing, "close", noting)
    before = dask.config.get(worker_processes.METHOD_KEY, None)
    with pytest.raises(RuntimeError) if fails else contextlib.nullcontext():
        with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False):
            if fails:
                raise RuntimeError("the run failed")
    assert seen == ["forkserver"]
    assert dask.config.get(worker_processes.METHOD_KEY, None) == before
