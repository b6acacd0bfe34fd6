"""Worker processes keep glibc's heap for temporaries: Dask's malloc trimming fixes the mmap
threshold at 128 KiB, and every larger temporary would be mapped and zeroed anew."""

from __future__ import annotations

import dask
import pytest

import daskgpu
from daskgpu.clusters import worker_processes


def test_trimming_comes_with_daskgpus_mmap_threshold():
    environ = worker_processes.pre_spawn_environ()
    assert environ["MALLOC_TRIM_THRESHOLD_"] == "65536"
    assert environ["MALLOC_MMAP_THRESHOLD_"] == environ["MALLOC_TOP_PAD_"] == str(16 << 20)
    with dask.config.set({"daskgpu.worker.malloc-reused-bytes": "1MiB"}):
        environ = worker_processes.pre_spawn_environ()
        assert environ["MALLOC_MMAP_THRESHOLD_"] == environ["MALLOC_TOP_PAD_"] == str(1 << 20)
    with dask.config.set({"daskgpu.worker.malloc-reused-bytes": None}):
        environ = worker_processes.pre_spawn_environ()
        assert "MALLOC_MMAP_THRESHOLD_" not in environ and "MALLOC_TOP_PAD_" not in environ


def test_a_users_own_threshold_or_no_trimming_is_left_alone():
    with dask.config.set({"distributed.nanny.pre-spawn-environ": {
            "MALLOC_TRIM_THRESHOLD_": 0, "MALLOC_MMAP_THRESHOLD_": 4096}}):
        assert worker_processes.pre_spawn_environ()["MALLOC_MMAP_THRESHOLD_"] == "4096"
    with dask.config.set({"distributed.nanny.pre-spawn-environ": {"OMP_NUM_THREADS": 1}}):
        assert worker_processes.pre_spawn_environ() == {"OMP_NUM_THREADS": "1"}


def _mapped_temporaries() -> int:
    """Fresh memory maps made by 200 allocations of 1 MiB, freed one by one (as a pass's
    temporaries are): counted from the process's minor page faults."""
    import resource

    import numpy as np

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):
        block = np.empty(1 << 17)  # 1 MiB
        block.fill(1.0)
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_workers_reuse_heap_memory_for_temporaries(method):
    """A worker's 1 MiB temporaries reuse one piece of heap (a few hundred page faults in
    all); with the mmap threshold fixed at 128 KiB each would fault its 256 pages in anew
    (over 50 000)."""
    with dask.config.set({"daskgpu.worker.cpu-start-method": method}):
        with daskgpu.cluster(cpu=True, workers=1, dashboard=False) as session:
            faults = session.client.run(_mapped_temporaries)
            environ = session.client.run(lambda: __import__("os").environ.get(
                "MALLOC_MMAP_THRESHOLD_"))
    assert set(environ.values()) == {str(16 << 20)}  # as the worker process started
    assert all(count < 5_000 for count in faults.values()), faults
