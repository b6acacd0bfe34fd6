"""The Dask dashboard of a session: the link that answers, what it records, when it is built.

A cluster daskgpu starts serves the dashboard's address from the start, but builds the Bokeh
pages on the first request for one (:func:`serve_on_first_visit`): importing Bokeh and the
dashboard's modules costs about half a second of the client's CPU (Bokeh derives every model's
signature as it defines the class), which a run nobody watches need not pay.
``daskgpu.dashboard-on-first-visit: false`` builds them as the scheduler starts, as Dask does.
"""

from __future__ import annotations

import logging

from tornado import web

log = logging.getLogger("daskgpu")
PREFIX = "/"  # where distributed's Scheduler serves the dashboard unless told otherwise


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


def serve_on_first_visit(scheduler) -> None:
    """Have ``scheduler`` build its Bokeh dashboard on the first request for one of its pages.

    ``scheduler`` runs in this process, its HTTP server started without the dashboard
    (``dashboard=False`` with a ``dashboard_address``). Its own routes (``/health``,
    ``/metrics``, ``/info``...) answer as before; any other path (``/status``, ``/``) builds
    the dashboard in the scheduler's event loop, as distributed builds a performance report's
    plots, then redirects to itself, now a Bokeh page. Without Bokeh it answers 503 and says so.
    """
    loader = web.Application([(r".*", _FirstVisit, {"scheduler": scheduler})])
    # distributed's RoutingApplication asks these only for paths its own routes do not have.
    scheduler.http_application.applications.append(loader)


def _build_dashboard(scheduler, loader: web.Application) -> None:
    """Build ``scheduler``'s Bokeh dashboard now, in place of ``loader`` (its first-visit stand-in).

    Raises
    ------
    ImportError
        Bokeh is missing, or a version distributed does not support.
    """
    applications = scheduler.http_application.applications
    if loader not in applications:
        return  # an earlier request built it
    import distributed.dashboard.scheduler as bokeh_dashboard

    bokeh_dashboard.connect(scheduler.http_application, scheduler.http_server, scheduler,
                            prefix=PREFIX)
    applications.remove(loader)


class _FirstVisit(web.RequestHandler):
    """Builds the dashboard, then sends the browser back to the page it asked for."""

    def initialize(self, scheduler) -> None:
        self.scheduler = scheduler

    def get(self, *args) -> None:
        try:
            _build_dashboard(self.scheduler, self.application)
        except ImportError as exc:
            self.set_status(503)
            self.write(f"The Dask dashboard needs Bokeh (pip install 'bokeh>=3.1'): {exc}\n")
            return
        self.redirect(self.request.uri)

    head = get
