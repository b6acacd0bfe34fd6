"""CPU threads mean what they say: a worker's kernels use its own thread count, not every core."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import daskgpu
from daskgpu.kernels import launch

THREADS = 2  # per worker: more than one, so that a count of 1 set anywhere shows


@pytest.fixture(scope="module")
def two_thread_worker():
    """One CPU worker with two threads (what ``--threads-per-worker 2`` starts)."""
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=THREADS,
                         dashboard=False) as session:
        (numba_threads,) = session.client.run(lambda: numba.config.NUMBA_NUM_THREADS).values()
        if numba_threads < THREADS:
            pytest.skip(f"Numba has {numba_threads} thread(s) here; the test needs {THREADS}")
        yield session


def _kernel_thread_counts():
    """On a worker: for each CPU twin, the counts it sets while it runs, and the count before.

    The calling thread's count is set to 1, then to ``THREADS``, before the three kernels run:
    a kernel restores whichever it found, not a fixed number.
    """
    import numba as nb

    from daskgpu.kernels.haversine import haversine_km
    from daskgpu.kernels.histogram import histogram
    from daskgpu.kernels.stencil import heat_steps

    real = nb.set_num_threads
    rounds = []
    x = np.linspace(0.0, 1.0, 1000)
    for preset in (1, THREADS):
        real(preset)
        seen = []

        def spy(n, seen=seen):
            seen.append(n)
            real(n)

        nb.set_num_threads = spy
        try:
            histogram(x, 0.0, 1.0, 8)
            heat_steps(np.ones((16, 16)), 0.2, 2)
            haversine_km(x, x, x[::-1].copy(), x)
        finally:
            nb.set_num_threads = real
        rounds.append((preset, seen, nb.get_num_threads()))
    return rounds


def test_each_kernel_uses_the_workers_threads_and_restores_the_count(two_thread_worker):
    client = two_thread_worker.client
    (worker,) = client.scheduler_info()["workers"]
    future = client.submit(_kernel_thread_counts, workers=[worker], pure=False)
    for before, seen, after in future.result(timeout=60):
        # each of the 3 kernels sets the worker's 2 threads, then puts back the count it found
        assert seen == [THREADS, before] * 3, (before, seen)
        assert after == before


def _meet_on_the_worker(parties: int) -> int:
    """Wait on the worker until ``parties`` tasks are here at once; return this thread's id."""
    import threading

    from distributed import get_worker

    barrier = vars(get_worker()).setdefault("test_barrier", threading.Barrier(parties))
    barrier.wait(timeout=20)  # broken (an error) unless the other task runs meanwhile
    return threading.get_ident()


def test_a_worker_runs_as_many_tasks_at_once_as_it_has_threads(two_thread_worker):
    client = two_thread_worker.client
    futures = [client.submit(_meet_on_the_worker, THREADS, pure=False)
               for _ in range(THREADS)]
    assert len(set(client.gather(futures))) == THREADS


def test_outside_a_worker_nothing_changes():
    before = numba.get_num_threads()
    with launch.worker_threads():
        assert numba.get_num_threads() == before


def test_blas_pools_of_workers_are_single_threaded(cpu_client):
    """distributed sets the BLAS/OpenMP pools to one thread per worker thread before spawning."""
    import os

    found = cpu_client.run(lambda: [os.environ.get(k) for k in
                                    ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")])
    assert all(v == ["1", "1", "1"] for v in found.values()), found
