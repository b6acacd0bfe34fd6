"""CPU threads mean what they say: a worker's kernels use its own thread count, not every core."""

from __future__ import annotations

import numba
import numpy as np

from daskgpu.kernels import launch


def _kernel_thread_counts():
    """On a worker: the thread counts each CPU twin sets while it runs, and the count after."""
    import numba as nb

    from daskgpu.kernels.haversine import haversine_km
    from daskgpu.kernels.histogram import histogram
    from daskgpu.kernels.stencil import heat_steps

    real = nb.set_num_threads
    seen = []

    def spy(n):
        seen.append(n)
        real(n)

    nb.set_num_threads = spy
    try:
        x = np.linspace(0.0, 1.0, 1000)
        histogram(x, 0.0, 1.0, 8)
        heat_steps(np.ones((16, 16)), 0.2, 2)
        haversine_km(x, x, x[::-1].copy(), x)
    finally:
        nb.set_num_threads = real
    return seen, nb.get_num_threads()


def test_each_kernel_uses_the_workers_single_thread(cpu_client):
    """The default layout is one single-threaded worker per core: one Numba thread each."""
    workers = sorted(cpu_client.scheduler_info()["workers"])
    assert len(workers) == 2
    futures = [cpu_client.submit(_kernel_thread_counts, workers=[w], pure=False,
                                 allow_other_workers=False) for w in workers]
    for seen, after in cpu_client.gather(futures):
        assert seen[0::2] == [1, 1, 1]  # set to the worker's 1 thread for each of the 3 kernels
        assert after == seen[1]  # and restored


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
