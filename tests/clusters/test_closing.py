"""Closing a session: a cluster that does not close in time has its worker processes ended."""

from __future__ import annotations

import asyncio
import time

import dask
import psutil
import pytest
from distributed.core import Status
from distributed.nanny import WorkerProcess

import daskgpu


@pytest.mark.timeout(60)  # without the limit the close would wait forever
def test_a_close_that_hangs_ends_the_workers_within_the_timeout(monkeypatch):
    """As a nanny waiting without a limit for a restarted worker to come up holds a close."""

    async def never(self, *args, **kwargs):
        await asyncio.Event().wait()

    with dask.config.set({"daskgpu.faults.close-timeout": "2s"}):
        with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1,
                             dashboard=False) as session:
            cluster = session.client.cluster
            pids = [p["pid"] for p in session.client.run(
                lambda: {"pid": __import__("os").getpid()}).values()]
            worker = psutil.Process(pids[0])
            monkeypatch.setattr(WorkerProcess, "kill", never)  # the nanny's stop never ends
            began = time.monotonic()
        took = time.monotonic() - began
    assert took < 2 + 10, took  # the timeout, then ending the processes (2 s at most)
    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    assert cluster.status == Status.closed  # distributed's exit handler leaves it alone


def test_a_cluster_that_closes_in_time_is_closed_as_usual():
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1,
                         dashboard=False) as session:
        cluster = session.client.cluster
        began = time.monotonic()
    assert time.monotonic() - began < 10
    assert cluster.status == Status.closed


@pytest.mark.timeout(60)
def test_a_session_ending_with_an_error_gets_the_shorter_close_timeout(monkeypatch):
    async def never(self, *args, **kwargs):
        await asyncio.Event().wait()

    settings = {"daskgpu.faults.close-timeout": "40s",
                "daskgpu.faults.close-timeout-after-failure": "1s"}
    with dask.config.set(settings), pytest.raises(ZeroDivisionError):
        with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False):
            monkeypatch.setattr(WorkerProcess, "kill", never)
            began = time.monotonic()
            1 / 0  # noqa: B018  (a run failing inside the session)
    assert time.monotonic() - began < 1 + 10
