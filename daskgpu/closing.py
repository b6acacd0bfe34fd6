"""Closing what a session started: its client, then its cluster, within a time limit."""

from __future__ import annotations

import logging

import dask.utils

from daskgpu import config as daskgpu_config
from daskgpu import interrupts

log = logging.getLogger("daskgpu")


def close(client, cluster) -> None:
    """Close a session's client, then its cluster (None: nothing to close), whatever happens.

    A second Ctrl-C while closing must not leave workers behind: closing goes on.
    """
    for closable in (client, cluster):
        if closable is None:
            continue
        for _attempt in range(3):
            try:
                if closable is cluster:
                    close_cluster(cluster)
                else:
                    closable.close()
                break
            except KeyboardInterrupt:
                continue
            except Exception as exc:  # closing must go on for the other object
                log.debug("error while closing %r: %s", closable, exc)
                break


def close_cluster(cluster) -> None:
    """Close a started cluster within ``daskgpu.faults.close-timeout``, or end its processes.

    A nanny whose worker is still starting waits for it to come up before stopping it, without
    a limit: a worker restarted just as a failed run ends (killed for memory) can hold the
    close forever. Past the timeout the worker processes are ended here, and the cluster is
    taken as closed (distributed's exit handler would otherwise wait on it again).
    """
    from distributed.core import Status

    timeout = dask.utils.parse_timedelta(daskgpu_config.get("faults.close-timeout"))
    try:
        cluster.close(timeout=timeout)
    except TimeoutError:  # asyncio's too (3.11)
        log.debug("the cluster did not close within %g s; ending its processes", timeout)
        interrupts.end_started_processes()
        cluster.status = Status.closed
