"""The dashboard of a cluster daskgpu starts: served from the start, built on the first visit."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import textwrap
import urllib.request
from urllib.parse import urlsplit

import dask
import pytest
from conftest import ROOT

import daskgpu
from daskgpu.clusters import plan as cluster_plan

# A fresh interpreter (the test process may have imported Bokeh already): what the scheduler
# serves, and whether Bokeh is imported, before and after the first visit.
FIRST_VISIT = textwrap.dedent("""
    import http.client, json, sys, time, urllib.request
    import daskgpu

    def main():
        seen = {}
        with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1,
                             dashboard_address="127.0.0.1:0") as session:
            base = session.dashboard.rsplit("/", 1)[0]
            seen["bokeh_at_start"] = "bokeh" in sys.modules
            with urllib.request.urlopen(base + "/health", timeout=30) as r:
                seen["health"] = [r.status, r.read().decode()]
            seen["bokeh_after_health"] = "bokeh" in sys.modules
            began = time.perf_counter()
            with urllib.request.urlopen(session.dashboard, timeout=60) as r:
                seen["status"] = [r.status, r.geturl(), "Bokeh" in r.read().decode()]
            seen["first_visit_s"] = time.perf_counter() - began
            seen["bokeh_after_visit"] = "bokeh" in sys.modules
            seen["served_by"] = [type(a).__name__ for a in
                                 session.client.cluster.scheduler.http_application.applications]
            seen["base"] = base
            seen["link"] = session.dashboard
            # Later pages come from Bokeh itself, without a redirect
            host = base.split("//")[1]
            conn = http.client.HTTPConnection(host, timeout=30)
            conn.request("GET", "/workers")
            seen["workers"] = conn.getresponse().status
        print(json.dumps(seen))

    if __name__ == "__main__":
        main()
""")


def test_dashboard_pages_are_built_on_the_first_visit(tmp_path):
    script = tmp_path / "first_visit.py"
    script.write_text(FIRST_VISIT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["bokeh_at_start"] is False  # the run itself never imports Bokeh
    assert seen["health"] == [200, "ok"]  # the scheduler's own routes answer as before
    assert seen["bokeh_after_health"] is False
    assert seen["status"][0] == 200
    assert seen["status"][1] == seen["link"]  # redirected back to the page asked for
    assert seen["status"][2] is True  # a Bokeh page
    assert seen["bokeh_after_visit"] is True
    assert seen["served_by"] == ["DaskBokehTornado"]  # the first-visit stand-in is gone
    assert seen["workers"] == 200


def _get(url: str) -> tuple[int, str, str | None]:
    """Status, body and Location of one GET, redirects not followed."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.netloc, timeout=60)
    conn.request("GET", parts.path or "/")
    response = conn.getresponse()
    return response.status, response.read().decode(), response.getheader("Location")


def test_first_visit_without_bokeh_says_what_to_install(monkeypatch):
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1,
                         dashboard_address="127.0.0.1:0") as session:
        scheduler = session.client.cluster.scheduler
        # as if Bokeh were missing (or a version distributed refuses): its import fails
        monkeypatch.setitem(sys.modules, "distributed.dashboard.scheduler", None)
        status, body, _ = _get(session.dashboard)
        assert status == 503
        assert "needs Bokeh" in body and "pip install" in body
        assert body.count("\n") == 1
        assert [type(a).__name__ for a in scheduler.http_application.applications] == [
            "Application"]  # still waiting to build it
        monkeypatch.undo()
        status, _, location = _get(session.dashboard)
        assert (status, location) == (302, "/status")
        status, body, _ = _get(session.dashboard)
        assert status == 200 and "Bokeh" in body


def test_root_path_builds_the_dashboard_then_leads_to_the_status_page():
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1,
                         dashboard_address="127.0.0.1:0") as session:
        base = session.dashboard.rsplit("/", 1)[0]
        with urllib.request.urlopen(base + "/", timeout=60) as response:
            assert response.status == 200
            assert response.geturl() == session.dashboard


def test_plan_builds_the_dashboard_on_first_visit_by_default():
    p = cluster_plan.plan(cpu=True, workers=1)
    assert p.dashboard_on_first_visit
    assert p.options["scheduler_kwargs"] == {"dashboard": False}
    assert p.options["dashboard_address"] == "127.0.0.1:8787"  # served from the start


@pytest.mark.parametrize("how", ["setting", "no dashboard"])
def test_plan_without_first_visit(how):
    if how == "setting":
        with dask.config.set({"daskgpu.dashboard-on-first-visit": False}):
            p = cluster_plan.plan(cpu=True, workers=1)
        assert "scheduler_kwargs" not in p.options  # distributed builds it as it starts
    else:
        p = cluster_plan.plan(cpu=True, workers=1, dashboard=False)
    assert not p.dashboard_on_first_visit


def test_dashboard_built_at_start_where_the_setting_says_so():
    with dask.config.set({"daskgpu.dashboard-on-first-visit": False}), \
            daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1,
                            dashboard_address="127.0.0.1:0") as session:
        applications = session.client.cluster.scheduler.http_application.applications
        assert [type(a).__name__ for a in applications] == ["DaskBokehTornado"]
        status, body, _ = _get(session.dashboard)
        assert status == 200 and "Bokeh" in body
