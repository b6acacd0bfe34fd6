"""The workers a run sees are asked of the scheduler, whatever the client has cached."""

from __future__ import annotations

from daskgpu.toolkit.backends import scheduler_workers


def test_the_workers_are_asked_of_the_scheduler_not_read_from_the_clients_cache(
        cpu_client, monkeypatch):
    # Client.scheduler_info() fetches the workers, then returns its cached identity, which the
    # client's periodic refresh (from its event loop, asking for totals only) may replace in
    # between: the run then saw no worker, and placing shards divided by zero. Here the refresh
    # always lands in between.
    client = cpu_client.client
    fetch = client._update_scheduler_info

    async def fetch_then_the_periodic_refresh(n_workers=0):
        await fetch(n_workers=n_workers)
        await fetch(n_workers=0)

    monkeypatch.setattr(client, "_update_scheduler_info", fetch_then_the_periodic_refresh)
    workers = scheduler_workers(client)
    assert len(workers) == 2
    assert all(info["nthreads"] == 1 for info in workers.values())
