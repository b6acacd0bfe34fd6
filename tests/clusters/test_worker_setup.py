"""The worker preload: settings a plan makes reach every worker it starts (here, RMM for Numba)."""

from __future__ import annotations

import textwrap

import dask
import pytest

from daskgpu.clusters import plan as cluster_plan
from daskgpu.clusters import session as sessions
from daskgpu.clusters import worker_setup
from daskgpu.errors import ClusterError

# Stands in for rmm's Numba plugin (rmm needs CUDA): what the preload must hand to Numba.
FAKE_RMM_NUMBA = textwrap.dedent("""
    from numba.cuda.cudadrv.driver import HostOnlyCUDAMemoryManager


    class RMMNumbaManager(HostOnlyCUDAMemoryManager):
        def memalloc(self, size):
            raise RuntimeError("allocations go to the RMM pool")

        def initialize(self):
            pass

        def get_ipc_handle(self, memory):
            raise NotImplementedError

        def get_memory_info(self):
            return (0, 0)

        @property
        def interface_version(self):
            return 1
""")


def _numba_memory_manager() -> str | None:
    from numba.cuda.cudadrv import driver

    manager = driver._memory_manager
    return None if manager is None else f"{manager.__module__}.{manager.__name__}"


def _fake_rmm(root) -> None:
    (root / "rmm" / "allocators").mkdir(parents=True)
    (root / "rmm" / "__init__.py").write_text("")
    (root / "rmm" / "allocators" / "__init__.py").write_text("")
    (root / "rmm" / "allocators" / "numba.py").write_text(FAKE_RMM_NUMBA)


def _managers(p, tmp_path, monkeypatch) -> list:
    _fake_rmm(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned workers start with this sys.path
    with sessions.start(p) as session:
        return list(session.client.run(_numba_memory_manager).values())


def _cpu_plan(**worker_config):
    p = cluster_plan.plan(cpu=True, workers=2, threads_per_worker=1, dashboard=False)
    p.worker_config.update(worker_config)
    return p


def test_an_rmm_pool_makes_every_worker_allocate_numba_memory_through_rmm(tmp_path, monkeypatch):
    p = _cpu_plan(**{"daskgpu.worker.rmm-for-numba": True})
    managers = _managers(p, tmp_path, monkeypatch)
    assert managers == ["rmm.allocators.numba.RMMNumbaManager"] * 2


def test_without_a_pool_numba_keeps_its_own_allocator(tmp_path, monkeypatch):
    assert _managers(_cpu_plan(), tmp_path, monkeypatch) == [None, None]


def test_numba_that_cannot_reach_the_pool_fails_the_start_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "rmm").mkdir()
    (tmp_path / "rmm" / "__init__.py").write_text("")  # an rmm without the Numba plugin
    monkeypatch.syspath_prepend(str(tmp_path))
    p = _cpu_plan(**{"daskgpu.worker.rmm-for-numba": True})
    with pytest.raises(ClusterError, match="cannot allocate Numba's memory from the RMM pool"
                       ) as caught:
        with sessions.start(p):
            pass
    assert "\n" not in str(caught.value) and "rmm.allocators" in str(caught.value)


def test_gpu_workers_route_numba_to_rmm_before_warm_ups_launch_kernels(monkeypatch):
    """A GPU warm-up launches kernels (Numba's context): RMM must be Numba's allocator first;
    then the device generator and each pipeline are warmed."""
    order: list[str] = []
    monkeypatch.setattr(worker_setup.signal, "signal", lambda *a: None)
    monkeypatch.setattr(worker_setup.multiprocessing, "set_start_method", lambda *a, **k: None)
    monkeypatch.setattr(worker_setup, "route_numba_to_rmm", lambda: order.append("rmm"))
    monkeypatch.setattr(worker_setup, "_warm_up_device_random", lambda: order.append("random"))
    monkeypatch.setattr(worker_setup, "_warm_up", lambda name, backend: order.append(name))
    settings = {worker_setup.WARM_UP: {"pipelines": ["stencil-pipeline"], "backend": "gpu"},
                "daskgpu.worker.rmm-for-numba": True}
    with dask.config.set(settings):
        worker_setup.dask_setup(None)
    assert order == ["rmm", "random", "stencil-pipeline"]
    order.clear()
    with dask.config.set({worker_setup.WARM_UP: {"pipelines": ["stencil-pipeline"],
                                                 "backend": "cpu"}}):
        worker_setup.dask_setup(None)
    assert order == ["stencil-pipeline"]  # CPU workers: no device generator, no RMM
