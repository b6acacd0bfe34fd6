"""Data kept on the workers is waited for on the client that placed it, default or not."""

from __future__ import annotations

import distributed.client
import pytest
from distributed import Client, LocalCluster

from daskgpu.toolkit import data_parallel


def _no_default_client(c=None):
    if c is None:
        raise ValueError("No clients found")
    return c


def test_kept_data_is_waited_for_without_a_default_client(monkeypatch):
    """A session's client is never the default (set_as_default=False); there may be none."""
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        monkeypatch.setattr(distributed.client, "default_client", _no_default_client)
        futures = data_parallel.place(client, lambda i: [i] * 3, [(1,), (2,)])
        data_parallel.wait_kept(client, futures)
        assert [f.status for f in futures] == ["finished", "finished"]
        failing = data_parallel.place(client, lambda: 1 / 0, [()])
        with pytest.raises(ZeroDivisionError):
            data_parallel.wait_kept(client, failing)
