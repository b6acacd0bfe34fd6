"""The Dask dashboard of a session: the link that really answers, and what it records."""

from __future__ import annotations

import logging

log = logging.getLogger("daskgpu")


def link_of(client) -> str | None:
    """The link of the dashboard the client's scheduler really serves, or None."""
    try:
        return client.dashboard_link
    except Exception:  # no dashboard (disabled, or bokeh missing on the scheduler)
        return None


def where_served(link: str | None, cluster) -> str | None:
    """The link with the host the dashboard really listens on (``--host`` may differ from it)."""
    from urllib.parse import urlsplit

    server = getattr(getattr(cluster, "scheduler", None), "http_server", None)
    bound = getattr(server, "address", None)
    if not link or not bound or bound in ("0.0.0.0", "::") or ":" in bound:
        return link  # every interface: distributed's link (the scheduler's host) works
    parts = urlsplit(link)
    return parts._replace(netloc=f"{bound}:{parts.port}").geturl()


def served_link(client) -> str | None:
    """The dashboard link of a scheduler daskgpu did not start, if its status page answers."""
    import urllib.request

    found = link_of(client)
    if not found:
        return None
    try:
        with urllib.request.urlopen(found, timeout=2) as response:
            return found if response.status == 200 else None
    except OSError:  # refused, 404 (HTTPError), timeout: no dashboard there
        return None


def record_task_stream(client) -> bool:
    """Have the scheduler record the task stream from now on.

    Distributed starts recording only when a dashboard page that shows the task stream is
    first opened; recording from the start lets a page opened after the run (``--keep-open``)
    show the run's tasks. Returns False where the scheduler refuses (e.g. it runs no code sent
    by clients).
    """

    def add_plugin(dask_scheduler=None):
        from distributed.diagnostics.task_stream import TaskStreamPlugin

        if TaskStreamPlugin.name not in dask_scheduler.plugins:
            dask_scheduler.add_plugin(TaskStreamPlugin(dask_scheduler))

    try:
        client.run_on_scheduler(add_plugin)
    except Exception as exc:  # the run itself does not need it
        log.debug("cannot record the task stream: %s", exc)
        return False
    return True
