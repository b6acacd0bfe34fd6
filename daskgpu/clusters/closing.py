"""Closing what a session started: its client, then its cluster, within a time limit."""

from __future__ import annotations

import logging

import dask.utils

from daskgpu import config as daskgpu_config
from daskgpu.clusters import interrupts

log = logging.getLogger("daskgpu")


def close(client, cluster, failed: bool = False) -> None:
    """Close a session's client, then its cluster (None: nothing to close), whatever happens.

    A second Ctrl-C while closing must not leave workers behind: closing goes on. ``failed``:
    the session ends with an error (its workers may be dying and restarting): the cluster gets
    ``daskgpu.faults.close-timeout-after-failure`` instead of ``close-timeout``.
    """
    for closable in (client, cluster):
        if closable is None:
            continue
        for _attempt in range(3):
            try:
                if closable is cluster:
                    close_cluster(cluster, "close-timeout-after-failure" if failed
                                  else "close-timeout")
                else:
                    closable.close()
                break
            except KeyboardInterrupt:
                continue
            except Exception as exc:  # closing must go on for the other object
                log.debug("error while closing %r: %s", closable, exc)
                break


def close_cluster(cluster, setting: str) -> None:
    """Close a started cluster within ``daskgpu.execution.faults.<setting>``, or end its processes.

    A nanny whose worker is still starting waits for it to come up before stopping it, without
    a limit: a worker restarted just as a failed run ends (killed for memory) can hold the
    close forever. Past the timeout the worker processes are ended here, and the cluster is
    taken as closed (distributed's exit handler would otherwise wait on it again).
    """
    from distributed.core import Status

    timeout = dask.utils.parse_timedelta(daskgpu_config.get(f"faults.{setting}"))
    try:
        cluster.close(timeout=timeout)
    except TimeoutError:  # asyncio's too (3.11)
        log.debug("the cluster did not close within %g s; ending its processes", timeout)
        interrupts.end_started_processes()
        cluster.status = Status.closed
