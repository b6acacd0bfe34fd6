"""A run's overhead: what `--help` and `list` load, workers warmed for the pipeline as they
start, and the phases a command-line run reports (import, cluster start, ..., close)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time

import psutil
import pytest
from conftest import ROOT, run_cli

import daskgpu
from daskgpu.clusters import session as sessions
from daskgpu.clusters import worker_setup
from daskgpu.clusters.plan import plan
from daskgpu.toolkit import registry
from pipelines import BUILTIN

HEAVY = ("dask", "distributed", "numpy", "pandas", "numba")


def _heavy_modules_after(argv: list[str]) -> tuple[set[str], str]:
    """Run the CLI on ``argv`` in a fresh interpreter; the heavy packages it loaded, its output."""
    code = (
        "import sys, io, contextlib; sys.path.insert(0, '.'); import cli\n"
        "out = io.StringIO()\n"
        f"with contextlib.redirect_stdout(out): rc = cli.main({argv!r})\n"
        f"loaded = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "print(rc, ' '.join(loaded)); print(out.getvalue())"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    first, _, rest = proc.stdout.partition("\n")
    rc, *loaded = first.split()
    assert rc == "0", proc.stdout
    return set(loaded), rest


@pytest.mark.parametrize("argv", [["--help"], ["list"], ["list", "--json"], ["run", "--help"]])
def test_help_and_list_load_no_computing_library(argv):
    loaded, out = _heavy_modules_after(argv)
    assert loaded == set(), f"{argv} loaded {loaded}"
    if argv[0] == "list":
        for name in BUILTIN:
            assert name in out


def test_listed_summaries_are_the_pipelines_own():
    for name, module in BUILTIN.items():  # written once, in the package; registered from there
        package = importlib.import_module(module.rpartition(".")[0])
        assert registry.get(name).summary == package.SUMMARY, name
    assert registry.summaries() == {n: registry.get(n).summary for n in registry.names()}


def _pipeline_modules_on_workers(client) -> dict[str, tuple[list[str], list[str]]]:
    """Per worker: the ``pipelines.*`` modules it imported, and its preloads (its set-up).

    A worker registers with the scheduler only once its preloads have run (distributed awaits
    them first), and daskgpu's (``worker_setup``) is where a warm-up imports the pipeline: a
    worker the client sees has finished starting, warm-up included.
    """

    def found(dask_worker):
        return (sorted(m for m in sys.modules if m.startswith("pipelines.")),
                [p.name for p in dask_worker.preloads])

    return client.run(found)


def test_workers_import_the_pipeline_they_were_started_for_before_any_task():
    chosen = plan(cpu=True, workers=2, threads_per_worker=1, dashboard=False)
    with sessions.start(chosen, warm_up="histogram-pipeline") as session:
        found = _pipeline_modules_on_workers(session.client)
        assert len(found) == 2
        for modules, preloads in found.values():
            assert preloads == ["daskgpu.clusters.worker_setup"]
            assert "pipelines.histogram.pipeline" in modules


def test_the_warm_up_runs_the_pipelines_hook_with_the_backend(monkeypatch):
    calls = []
    spec = registry.Pipeline("warm-test", "s", (), lambda r: None, lambda w, r: None,
                             warm_up=calls.append)
    monkeypatch.setitem(registry._REGISTRY, "warm-test", spec)
    worker_setup._warm_up("warm-test", "cpu")
    assert calls == ["cpu"]
    failing = registry.Pipeline("warm-fails", "s", (), lambda r: None, lambda w, r: None,
                                warm_up=lambda backend: 1 / 0)
    monkeypatch.setitem(registry._REGISTRY, "warm-fails", failing)
    worker_setup._warm_up("warm-fails", "cpu")  # only logged: the run reports real errors


def test_workers_started_without_a_pipeline_import_none():
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False) as session:
        found = _pipeline_modules_on_workers(session.client)
        assert list(found.values()) == [([], ["daskgpu.clusters.worker_setup"])]


def test_a_cluster_from_python_warms_the_pipelines_it_is_asked_for():
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False,
                         warm_up=["histogram-pipeline", "mean-pipeline"]) as session:
        ((modules, _),) = _pipeline_modules_on_workers(session.client).values()
        assert {"pipelines.histogram.pipeline", "pipelines.histogram.check",
                "pipelines.mean.pipeline", "pipelines.mean.check"} <= set(modules), modules
    with pytest.raises(daskgpu.errors.UnknownPipeline, match="no-such-pipeline"), \
            daskgpu.cluster(cpu=True, workers=1, dashboard=False, warm_up="no-such-pipeline"):
        pass


def test_an_unknown_warm_up_is_only_a_missed_head_start():
    # An unknown name (a plugin missing on the workers): the worker starts and computes.
    chosen = plan(cpu=True, workers=1, threads_per_worker=1, dashboard=False)
    with sessions.start(chosen, warm_up="no-such-pipeline") as session:
        assert session.client.submit(sum, [1, 2]).result(timeout=30) == 3


def _started_at(pid: int) -> float | None:
    """When process ``pid`` started, in seconds of CLOCK_BOOTTIME, to the clock tick (Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
    except (OSError, ValueError, IndexError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_command_line_run_reports_every_phase():
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "run", "mean-pipeline",
                             "--cpu", "--workers", "1", "--size", "500", "--no-dashboard",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    began = _started_at(proc.pid)  # the instant the command's own clock counts from
    # Its children (the fork server, the worker) start before the run ends: the latest seen
    # is a moment that process_s must include.
    children: dict[int, float] = {}
    while proc.poll() is None:
        try:
            found = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:  # it has just exited
            break
        for child in found:
            started = _started_at(child.pid)
            if started is not None:
                children.setdefault(child.pid, started)
        time.sleep(0.02)
    out, err = proc.communicate(timeout=180)
    ended = time.clock_gettime(time.CLOCK_BOOTTIME)  # after the exit
    assert proc.returncode == 0, err
    timings = json.loads(out)["timings"]
    for phase in ("import_s", "cluster_start_s", "build_s", "compute_s", "verify_s", "close_s",
                  "process_s"):
        assert timings[phase] is not None and timings[phase] >= 0, (phase, timings)
    assert timings["import_s"] > 0.05  # the interpreter's start and the imports, at least
    parts = (timings["import_s"] + timings["cluster_start_s"] + timings["compute_s"]
             + timings["verify_s"] + timings["close_s"])
    assert timings["process_s"] >= parts - 0.05, timings
    # Measured inside from the process's start, on the same clock as here: not past its exit,
    # and past the start of every process it started (a worker starts after the imports).
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert children, "no child process seen"
    latest_child = max(children.values()) - began
    assert latest_child - tick <= timings["process_s"] <= ended - began + tick, (
        latest_child, ended - began, timings)
    assert latest_child > timings["import_s"] - tick  # the worker, started after the imports


_EXIT = """
import atexit, sys
sys.path.insert(0, {root!r})
atexit.register(lambda: print("torn down"))  # registered before: would run after
from daskgpu.cli import launch
atexit.register(launch._exit_now)
print("said", end="")  # not flushed yet
{ending}
"""


@pytest.mark.parametrize("ending, code, out", [
    ('launch._ending["code"] = 5', 5, "said"),  # main() returned 5: exit at once, output kept
    ('raise SystemExit(4)', 4, "saidtorn down\n"),  # main() never returned: Python's exit
])
def test_the_command_exits_without_the_teardown_once_main_returned(tmp_path, ending, code, out):
    script = tmp_path / "ending.py"
    script.write_text(_EXIT.format(root=str(ROOT), ending=ending))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == out


def test_the_table_shows_import_and_close():
    proc = run_cli("run", "mean-pipeline", "--cpu", "--workers", "1", "--size", "500",
                   "--no-dashboard")
    assert proc.returncode == 0, proc.stderr
    for row in ("import", "cluster start", "close", "whole process"):
        assert f"│ {row} " in proc.stdout, proc.stdout


def test_importing_cli_loads_no_command_until_one_is_used():
    # The CPU workers import cli.py again (as multiprocessing's __mp_main__): they load none of
    # the commands (click, rich, the registry), which a script's ``cli.main`` still finds.
    code = ("import sys; sys.path.insert(0, '.'); import cli\n"
            "before = 'click' in sys.modules or 'daskgpu.cli.commands' in sys.modules\n"
            "print(before, cli.main.__module__, 'click' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "daskgpu.cli.commands", "True"]

