"""The dashboard in a real browser: headless Chromium renders the status page of a kept-open run.

Chromium is driven over its DevTools protocol with tornado's websocket client (tornado comes with
distributed), so no browser driver package is needed. Bokeh draws each plot on canvases inside
shadow roots once its document has arrived over the dashboard's websocket; the test waits for
paint on the task stream's canvas, not for the page shell.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import ROOT, alive

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
VIEWPORT = (1400, 1000)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Chromium (Debian: apt-get install chromium; .ci/run does)")

# In the page: the task stream figure's canvases (piercing Bokeh's shadow roots), how many of their
# pixels are painted, and where the figure sits on the page (for cropping the screenshot).
PROBE = """
(() => {
  const box = document.querySelector('#status-tasks');
  const named = typeof Bokeh !== 'undefined'
    && Bokeh.documents.some((doc) => doc.get_model_by_name('task_stream') !== null);
  const canvases = [];
  const walk = (node) => {
    for (const el of node.querySelectorAll('*')) {
      if (el.tagName === 'CANVAS' && el.width > 0 && el.height > 0) {
        const px = el.getContext('2d').getImageData(0, 0, el.width, el.height).data;
        const colours = new Set();
        let painted = 0;
        for (let i = 0; i < px.length; i += 4) {
          if (px[i + 3] > 0) {
            painted += 1;
            colours.add((px[i] << 16) | (px[i + 1] << 8) | px[i + 2]);
          }
        }
        canvases.push({width: el.width, height: el.height, painted, colours: colours.size});
      }
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  if (box) walk(box);
  // Rectangles in the task stream's data: distributed's placeholder is one row.
  let rows = 0;
  for (const doc of (typeof Bokeh !== 'undefined' ? Bokeh.documents : [])) {
    const fig = doc.get_model_by_name('task_stream');
    for (const renderer of (fig ? fig.renderers : [])) {
      const data = renderer.data_source ? renderer.data_source.data : null;
      const columns = data instanceof Map ? [...data.values()] : Object.values(data || {});
      for (const column of columns) rows = Math.max(rows, column.length);
    }
  }
  const r = box ? box.getBoundingClientRect() : null;
  return {title: document.title, named, canvases, rows,
          box: r && [r.left, r.top, r.width, r.height]};
})()
"""


def _rendered(state: dict | None) -> bool:
    """True once the task stream figure has the run's tasks and a canvas of real size drawn."""
    return bool(state and state["named"] and state["rows"] > 1) and any(
        c["width"] >= 300 and c["height"] >= 150 and c["painted"] >= 1000 and c["colours"] >= 2
        for c in state["canvases"])


class DevTools:
    """A minimal client of Chromium's DevTools protocol over one browser websocket."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0

    async def send(self, method: str, params: dict | None = None, session: str | None = None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        await self.ws.write_message(json.dumps(message))
        while True:  # skip events and stale replies until ours arrives
            raw = await self.ws.read_message()
            assert raw is not None, f"the browser closed its DevTools socket during {method}"
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]


def _start_chromium(profile) -> tuple[subprocess.Popen, str]:
    """Headless Chromium with a fresh profile; returns it and its DevTools browser websocket."""
    with open(profile.parent / "chromium.log", "w") as log:
        proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--mute-audio", f"--user-data-dir={profile}",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    port_file = profile / "DevToolsActivePort"  # Chromium writes "PORT\n/devtools/browser/ID"
    deadline = time.monotonic() + 30
    while True:
        lines = port_file.read_text().splitlines() if port_file.exists() else []
        if len(lines) >= 2 and lines[1].startswith("/devtools/browser/"):
            return proc, f"ws://127.0.0.1:{lines[0]}{lines[1]}"
        assert proc.poll() is None, (profile.parent / "chromium.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "Chromium opened no DevTools port in 30 s"
        time.sleep(0.1)


async def _render(browser_ws: str, url: str, timeout: float, pid: int, probe: str = PROBE,
                  done=_rendered):
    """Load ``url``, evaluate ``probe`` until ``done(result)``, close the browser (``pid``).

    Returns the last probe, a PNG screenshot, and the browser's helper processes as they were
    before it closed.
    """
    from tornado.websocket import websocket_connect

    ws = await websocket_connect(browser_ws, max_message_size=64 << 20)
    try:
        tools = DevTools(ws)
        target = (await tools.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        session = (await tools.send("Target.attachToTarget",
                                    {"targetId": target, "flatten": True}))["sessionId"]
        width, height = VIEWPORT
        await tools.send("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
        loaded = await tools.send("Page.navigate", {"url": url}, session)
        assert "errorText" not in loaded, f"{url}: {loaded['errorText']}"
        state, deadline = None, time.monotonic() + timeout
        while not done(state):
            assert time.monotonic() < deadline, f"nothing rendered as expected at {url}: {state}"
            await asyncio.sleep(0.25)
            reply = await tools.send("Runtime.evaluate",
                                     {"expression": probe, "returnByValue": True}, session)
            if "exceptionDetails" not in reply:  # e.g. while the page is still being replaced
                state = reply["result"]["value"]
        shot = await tools.send("Page.captureScreenshot", {"format": "png"}, session)
        helpers = _tree(pid)
        await ws.write_message(json.dumps({"id": 0, "method": "Browser.close"}))
        return state, base64.b64decode(shot["data"]), helpers
    finally:
        ws.close()


def _tree(pid: int) -> list[tuple[int, float]]:
    """The descendants of process ``pid``, as (pid, creation time)."""
    return [(c.pid, c.create_time()) for c in psutil.Process(pid).children(recursive=True)]


def _wait_gone(processes: list[tuple[int, float]], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(*p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid, made in processes if alive(pid, made)], "processes left behind"


def _check_screenshot(png: bytes, box: list[float]) -> None:
    from PIL import Image

    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size == VIEWPORT
    left, top, width, height = box
    assert width >= 300 and height >= 150 and left >= 0 and top >= 0
    plot = image.crop((int(left), int(top), int(left + width), int(top + height)))
    colours = plot.getcolors(maxcolors=1 << 20)
    assert len(colours) > 2, "the task stream area of the screenshot is blank"


@contextlib.contextmanager
def _kept_open(tmp_path, *options, env=None):
    """A ``run mean-pipeline ... --keep-open`` CLI, once it waits for Ctrl-C.

    Yields the process, its JSON result and its stderr file; on leaving, Ctrl-C must close it
    (exit 0) with every worker gone and no traceback.
    """
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err:
        cli = subprocess.Popen(
            [sys.executable, str(ROOT / "cli.py"), "run", "mean-pipeline", "--size", "2000",
             "--workers", "2", "--threads-per-worker", "1", "--dashboard-address",
             "127.0.0.1:0", "--json", "--keep-open", *options],
            stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT, env=env)
    try:
        doc = json.loads(cli.stdout.readline())
        link = doc["dashboard"]
        assert link.startswith("http://127.0.0.1:") and link.endswith("/status"), link
        assert doc["verified"] is True
        deadline = time.monotonic() + 30
        while "press Ctrl-C" not in err_path.read_text():
            assert time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.1)
        workers = _tree(cli.pid)
        assert len(workers) >= 2
        yield cli, doc, err_path
        assert cli.poll() is None  # the pages were served by the kept-open cluster
        cli.send_signal(signal.SIGINT)
        assert cli.wait(timeout=30) == 0, err_path.read_text()
        _wait_gone(workers)
        assert "Traceback" not in err_path.read_text()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        cli.stdout.close()


def _browse(tmp_path, url: str, **probing):
    """Render ``url`` in a fresh headless Chromium; return the last probe and a screenshot."""
    profile = tmp_path / "profile"
    profile.mkdir()
    browser, browser_ws = _start_chromium(profile)
    try:
        state, png, helpers = asyncio.run(_render(browser_ws, url, 40, browser.pid, **probing))
        assert len(helpers) >= 2  # Chromium's renderer and other helpers
        assert browser.wait(timeout=20) == 0
        _wait_gone(helpers)
        return state, png
    finally:
        if browser.poll() is None:
            os.killpg(browser.pid, signal.SIGKILL)  # its own session: Chromium and its helpers
            browser.wait()


@pytest.mark.timeout(180)
def test_task_stream_renders_in_chromium_then_ctrl_c_closes_everything(tmp_path):
    with _kept_open(tmp_path, "--cpu") as (_cli, doc, _err):
        state, png = _browse(tmp_path, doc["dashboard"])
        assert state["title"] == "Dask: Status"
        (tmp_path / "status.png").write_bytes(png)
        _check_screenshot(png, state["box"])


# In the page: the GPU memory figure's title and bars, and the utilisation bars.
GPU_PROBE = """
(() => {
  const found = {};
  for (const doc of (typeof Bokeh !== 'undefined' ? Bokeh.documents : [])) {
    for (const name of ['gpu_memory_histogram', 'gpu_utilization_histogram']) {
      const fig = doc.get_model_by_name(name);
      if (!fig) continue;
      const data = fig.renderers[0].data_source.data;
      const column = (key) => Array.from(data instanceof Map ? data.get(key) : data[key]);
      found[name] = {title: fig.title.text, memory: column('memory'),
                     utilization: column('utilization'), worker: column('worker')};
    }
  }
  return {title: document.title, found};
})()
"""
GIB = 2**30
FAKE_GPUS = {"gpus": [
    {"name": "Fake H100", "uuid": "GPU-3a1b2c3d-0000-4000-8000-000000000001",
     "memory_total": 80 * GIB, "memory_free": 60 * GIB, "utilization": 41},
    {"name": "Fake H100", "uuid": "GPU-3a1b2c3d-0000-4000-8000-000000000002",
     "memory_total": 80 * GIB, "memory_free": 80 * GIB, "utilization": 0},
]}


def _gpu_bars_drawn(state: dict | None) -> bool:
    bars = (state or {}).get("found", {}).get("gpu_memory_histogram")
    return bool(bars and len(bars["worker"]) == 2 and all(bars["memory"]))


@pytest.mark.timeout(180)
def test_gpu_pages_show_what_nvml_reports(tmp_path):
    # Where NVML sees GPUs, distributed's workers send their memory and utilisation and the
    # scheduler serves the GPU page; NVML here is the made-up one (two 80 GiB GPUs, the first
    # with 20 GiB used and 41 % busy), which each worker reads for its first visible GPU.
    from conftest import fake_nvml_env

    with _kept_open(tmp_path, env=fake_nvml_env(FAKE_GPUS)) as (_cli, doc, err):
        # No GPU stack installed here: the run falls back to CPU workers and says how to fix it.
        assert "pip install -e '.[cuda13]'" in err.read_text()
        gpu_page = doc["dashboard"].replace("/status", "/gpu")
        state, png = _browse(tmp_path, gpu_page, probe=GPU_PROBE, done=_gpu_bars_drawn)
    assert state["title"] == "Dask: GPU"
    memory = state["found"]["gpu_memory_histogram"]
    assert memory["memory"] == [20 * GIB, 20 * GIB]
    assert memory["title"] == "GPU Memory: 40.00 GiB / 160.00 GiB"
    assert state["found"]["gpu_utilization_histogram"]["utilization"] == [41, 41]
    assert sorted(memory["worker"]) == sorted(w["address"] for w in doc["workers"])
    assert png.startswith(b"\x89PNG")
