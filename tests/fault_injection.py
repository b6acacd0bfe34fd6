"""Faults injected for real, shared by tests/execution/test_faults.py and benchmarks/faults.py.

- :class:`WorkerKiller`: SIGKILL one worker process of a running cluster once it is running
  tasks and holds results, i.e. in the middle of a computation.
- :func:`interrupt_cli`: run ``python cli.py ...`` and send SIGINT/SIGTERM (once or twice) in a
  chosen phase: cluster start, computation, or writing ``--output``; report the exit code, how
  long it took to exit, processes left behind and output files left behind.
- :func:`spill_recorder`: a worker plugin that notes, at every change of a task's state, what
  the worker holds in memory and on disk: the most it held at once, exactly, and how often and
  how much it spilled (:func:`spill_records`). :class:`SpillWatch` samples the same at an
  interval (benchmarks/faults.py reads only its bytes written, a counter).
- :func:`inject_from_environment`: faults that ``tests/faulty_cli.py`` (``cli.py`` with a fault)
  reads from ``DASKGPU_TEST_FAULT``: worker processes that hang as they start, a task that
  raises an exception named like a CUDA library's (:func:`raise_like`), a wrong answer or a
  baseline that disagrees (:func:`sum_of_ones_pipeline`), a run that starts only once every
  worker has paused (:func:`run_once_every_worker_is_paused`); and a spy that records every
  cluster the run starts (:func:`record_cluster_starts`).
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
FAULTY_CLI = Path(__file__).resolve().with_name("faulty_cli.py")
FAULT_ENV = "DASKGPU_TEST_FAULT"


def wait_for(condition, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll ``condition()`` until it returns something true; return it, or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout} s")
        time.sleep(interval)


# --------------------------------------------------------------------------- process trees


def descendants(pid: int) -> set[tuple[int, float]]:
    """``(pid, create_time)`` of every process below ``pid`` (children, grandchildren, ...)."""
    out = set()
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    for child in children:
        try:
            out.add((child.pid, child.create_time()))
        except psutil.NoSuchProcess:
            continue
    return out


def alive(recorded) -> list[int]:
    """The pids of ``recorded`` ``(pid, create_time)`` processes still running (not zombies)."""
    out = []
    for pid, created in recorded:
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def kill_all(recorded) -> None:
    """SIGKILL what is left of ``recorded`` processes (cleanup after a failed check)."""
    for pid in alive(recorded):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


# --------------------------------------------------------------------------- worker loss


@dataclass
class Kill:
    """One SIGKILL of a worker: which one, and what it was doing."""

    address: str
    pid: int
    processing: int  # tasks it was running or queued to run
    holding: int  # results it held
    at: float  # time.monotonic() of the kill


def _worker_load(dask_scheduler=None) -> dict:
    return {a: (len(ws.processing), len(ws.has_what)) for a, ws in dask_scheduler.workers.items()}


class WorkerKiller(threading.Thread):
    """SIGKILL one worker of ``client``'s cluster in the middle of a computation.

    Start it, then compute; it waits until a worker is running tasks and holds at least
    ``min_held`` results, and kills that worker's process. ``kill`` records it (None if the
    computation ended first). The worker pids are taken when the killer is made.
    """

    def __init__(self, client, min_held: int = 1, timeout: float = 120.0):
        super().__init__(daemon=True)
        self.client = client
        self.min_held = min_held
        self.timeout = timeout
        self.pids = client.run(os.getpid)  # address -> pid
        self.kill: Kill | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        """Poll the scheduler every 20 ms; kill the first busy worker."""
        deadline = time.monotonic() + self.timeout
        while not self.stop.is_set() and time.monotonic() < deadline:
            load = self.client.run_on_scheduler(_worker_load)
            for address, (processing, held) in load.items():
                if processing and held >= self.min_held and address in self.pids:
                    os.kill(self.pids[address], signal.SIGKILL)
                    self.kill = Kill(address, self.pids[address], processing, held,
                                     time.monotonic())
                    return
            time.sleep(0.02)


def removal_event(client, address: str) -> dict | None:
    """The scheduler's record of removing worker ``address``, if it logged one."""
    for _when, event in client.get_events(address):
        if isinstance(event, dict) and event.get("action") == "remove-worker":
            return event
    return None


def run_killing_a_worker(client, pipeline: str, n_workers: int, **params):
    """``daskgpu.run`` with one worker SIGKILLed mid-run; return ``(result, kill, seconds)``.

    Waits afterwards until the nanny has brought the cluster back to ``n_workers`` workers.
    """
    import daskgpu

    killer = WorkerKiller(client)
    killer.start()
    began = time.perf_counter()
    try:
        result = daskgpu.run(pipeline, client=client, **params)
    finally:
        seconds = time.perf_counter() - began
        killer.stop.set()
        killer.join()
    client.wait_for_workers(n_workers, timeout=120)
    return result, killer.kill, seconds


# --------------------------------------------------------------------------- interrupts


@dataclass
class Interrupted:
    """What a CLI run did after being signalled."""

    returncode: int | None
    exit_s: float  # from the first signal to the exit
    stdout: str
    stderr: str
    left_behind: list[int]  # descendant processes alive after the exit (and a grace period)
    recorded: set = field(default_factory=set)  # every descendant seen
    leftover_files: list[str] = field(default_factory=list)  # output or temporaries


def _default_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def _spawning_workers(children) -> bool:
    """A worker process exists: spawned (``spawn_main``), or forked by the fork server."""
    for pid, _created in children:
        try:
            proc = psutil.Process(pid)
            if any("spawn_main" in part for part in proc.cmdline()):
                return True
            parent = proc.parent()
            if parent is not None and any("forkserver" in part for part in parent.cmdline()):
                return True
        except psutil.NoSuchProcess:
            continue
    return False


def _listening(pid: int) -> bool:
    try:
        return any(c.status == psutil.CONN_LISTEN
                   for c in psutil.Process(pid).net_connections(kind="tcp"))
    except psutil.Error:
        return False


def _phase_reached(phase: str, proc, err_path: Path, output: Path | None) -> bool:
    children = descendants(proc.pid)
    stderr = err_path.read_text()
    if phase == "start":  # worker processes spawning, the cluster not yet up
        return _spawning_workers(children) and "Dashboard:" not in stderr
    if phase == "scheduler":  # the local cluster's scheduler listens: its workers are starting
        return _listening(proc.pid) and "Dashboard:" not in stderr
    if phase == "compute":  # the cluster is up and the run computing
        return len(children) >= 2 and "Dashboard:" in stderr
    if phase == "output":  # the output's temporary beside the target exists
        return bool(glob.glob(str(output.parent / f".{output.name}.partial-*")))
    raise ValueError(phase)


def interrupt_cli(args: list[str], phase: str, signals: list[int], tmp_path: Path,
                  output: Path | None = None, env: dict | None = None,
                  between_s: float = 0.05, exit_timeout: float = 60.0,
                  phase_timeout: float = 120.0, fault: dict | None = None) -> Interrupted:
    """Run ``python cli.py ARGS``, send ``signals`` once ``phase`` is reached, and watch it end.

    Parameters
    ----------
    args : list of str
        CLI arguments (``run``, the pipeline, its options).
    phase : {"start", "scheduler", "compute", "output"}
        When to signal: worker processes spawning; the scheduler (in the CLI's process)
        listening, before the workers are up; computing; the output temporary exists.
    signals : list of int
        Sent to the CLI process one after another, ``between_s`` apart (two SIGINTs: a double
        Ctrl-C).
    tmp_path : Path
        Where stdout and stderr are written.
    output : Path, optional
        The run's ``--output``: needed for ``phase="output"``; afterwards neither it nor a
        temporary beside it may exist (``leftover_files`` lists any).
    fault : dict, optional
        Run ``tests/faulty_cli.py`` with this fault (:func:`fault_env`'s keywords) instead of
        ``cli.py``.

    Returns
    -------
    Interrupted
        ``returncode`` is None if the process did not exit within ``exit_timeout`` (it is then
        killed).
    """
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    environment = dict(os.environ if env is None else env)
    environment.pop("CUDA_VISIBLE_DEVICES", None)
    program = ROOT / "cli.py"
    if fault is not None:
        environment, program = fault_env(environment, **fault), FAULTY_CLI
    with open(out_path, "w") as out, open(err_path, "w") as err:
        # Default signal handling in the child, as in a terminal, whatever this process has
        # (a background job of a script ignores SIGINT, and a child would inherit that).
        proc = subprocess.Popen([sys.executable, str(program), *args], stdout=out,
                                stderr=err, env=environment, cwd=ROOT, start_new_session=True,
                                preexec_fn=_default_signals)
    recorded: set = set()
    try:
        deadline = time.monotonic() + phase_timeout
        while not _phase_reached(phase, proc, err_path, output):
            recorded |= descendants(proc.pid)
            if proc.poll() is not None:
                raise AssertionError(f"exited ({proc.returncode}) before phase {phase!r}: "
                                     f"{err_path.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"phase {phase!r} not reached in {phase_timeout} s")
            time.sleep(0.02)
        recorded |= descendants(proc.pid)
        began = time.monotonic()
        for i, signum in enumerate(signals):
            if i:
                time.sleep(between_s)
            if proc.poll() is None:
                proc.send_signal(signum)
        returncode = None
        while time.monotonic() - began < exit_timeout:
            recorded |= descendants(proc.pid)  # workers may still be spawning
            returncode = proc.poll()
            if returncode is not None:
                break
            time.sleep(0.05)
        exit_s = time.monotonic() - began
        try:  # orphans of a dead parent need a moment to notice
            wait_for(lambda: not alive(recorded), timeout=10, interval=0.1)
        except TimeoutError:
            pass
        left = alive(recorded)
        files = []
        if output is not None:
            files = sorted(glob.glob(str(output.parent / f".{output.name}.partial-*")))
            if output.exists():
                files.append(str(output))
        return Interrupted(returncode, exit_s, out_path.read_text(), err_path.read_text(), left,
                           recorded, files)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kill_all(recorded)


# --------------------------------------------------------------------------- memory


def _held(dask_worker=None) -> tuple[int, int, int]:
    data = dask_worker.data
    in_memory = sum(data.fast.weights.values())
    spilled = data.spilled_total.memory
    written = int(data.cumulative_metrics.get(("disk-write", "bytes"), 0))
    return in_memory, spilled, written


SPILL_RECORDER = "daskgpu-test-spill-recorder"


def spill_recorder():
    """A worker plugin (register it with ``client.register_plugin``) that records spilling.

    At every change of a task's state (``WorkerPlugin.transition``, called once the change is
    made) it notes the bytes (sizes in memory) the worker holds in memory and on disk. What the
    worker holds in all changes only then (a result stored, a task forgotten), and storing a
    result spills what no longer fits under the target at once: ``peak_held``, the most held at
    once, is exact, where a sample at an interval could miss it. Read with :func:`spill_records`.
    distributed is imported here, not at the top: faulty_cli.py's processes import this module.
    """
    from distributed.diagnostics.plugin import WorkerPlugin

    class SpillRecorder(WorkerPlugin):
        name = SPILL_RECORDER

        def setup(self, worker) -> None:
            self.state, self.data = worker.state, worker.data
            # A plain dict where spilling is off (no target, no spill threshold).
            self.spill_buffer = hasattr(self.data, "spilled_total")
            self.transitions = self.peak_held = self.peak_spilled = 0

        def transition(self, key, start, finish, **kwargs) -> None:
            self.transitions += 1
            held = self.state.nbytes  # of every result the worker has, in memory or on disk
            spilled = self.data.spilled_total.memory if self.spill_buffer else 0
            self.peak_held = max(self.peak_held, held)
            self.peak_spilled = max(self.peak_spilled, spilled)

    return SpillRecorder()


def _spill_record(dask_worker=None) -> dict:
    recorder = dask_worker.plugins[SPILL_RECORDER]
    metrics = getattr(dask_worker.data, "cumulative_metrics", {})
    return {"spill_buffer": recorder.spill_buffer, "transitions": recorder.transitions,
            "peak_held": int(recorder.peak_held),
            "peak_spilled": int(recorder.peak_spilled),
            "spills": int(metrics.get(("disk-write", "count"), 0)),  # every key written
            "written": int(metrics.get(("disk-write", "bytes"), 0))}


def spill_records(client) -> dict[str, dict]:
    """What :func:`spill_recorder` noted on each worker, by address, and the worker's counters.

    ``spill_buffer``: whether the worker can spill at all; ``transitions``: changes of task
    state seen; ``peak_held``: the most bytes held at once, in memory or on disk;
    ``peak_spilled``: the most of them on disk at once; ``spills`` and ``written``: the keys and
    bytes the worker has written to disk (its spill buffer's counters).
    """
    return client.run(_spill_record)


class SpillWatch(threading.Thread):
    """Sample what each worker holds (in memory, spilled to disk) while a run computes.

    ``peak_held`` is the most bytes (sizes in memory) the workers held at once, spilled or not;
    ``peak_spilled`` the most of them on disk at once; ``written`` the bytes written to disk.
    """

    def __init__(self, client, interval: float = 0.2):
        super().__init__(daemon=True)
        self.client = client
        self.interval = interval
        self.stop = threading.Event()
        self.peak_held = self.peak_spilled = self.written = 0

    def sample(self) -> None:
        """Take one sample of every worker."""
        samples = self.client.run(_held).values()
        self.peak_held = max(self.peak_held, sum(m + s for m, s, _ in samples))
        self.peak_spilled = max(self.peak_spilled, sum(s for _, s, _ in samples))
        self.written = max(self.written, sum(w for _, _, w in samples))

    def run(self) -> None:
        """Sample until stopped."""
        while not self.stop.wait(self.interval):
            self.sample()


# --------------------------------------------------------------------------- faults in a CLI run


def exception_like(module: str, name: str, message: str) -> Exception:
    """An exception of class ``module.name``: a builtin, or a class made here with that name.

    A made class stands for a CUDA library's (``cupy.cuda.memory.OutOfMemoryError``) where the
    library is not installed; raised on a worker, distributed pickles it by value, so that it
    comes back to the client with its module and name.
    """
    import builtins

    if module == "builtins":
        return getattr(builtins, name)(message)
    return type(name, (Exception,), {"__module__": module})(message)


def raise_like(block, module: str, name: str, message: str):
    """A task (``map_blocks``): raise :func:`exception_like` on the worker."""
    raise exception_like(module, name, message)


def _never_checked(workload, raw):
    from daskgpu.toolkit.registry import Verification

    return Verification(False, "the failing task should have ended the run")


def failing_pipeline(module: str, name: str, message: str):
    """An unregistered pipeline, ``failing-task``, whose tasks raise :func:`raise_like`."""
    from daskgpu.toolkit.registry import Pipeline, Workload

    def prepare(resolved):
        import dask.array as da
        import numpy as np

        blocks = da.from_array(np.ones(100), chunks=50)  # NumPy blocks, whatever the backend
        failing = blocks.map_blocks(raise_like, module, name, message, dtype=float)
        return Workload(failing.sum(), 100, 800, description={"fault": f"{module}.{name}"})

    return Pipeline("failing-task", "every task raises", (), prepare, _never_checked)


def fault_env(env: dict | None = None, **fault) -> dict:
    """``env`` (default: this process's) with ``fault`` set for :func:`inject_from_environment`.

    ``hang="worker-start"``: every worker process hangs as it starts, so the cluster start never
    ends; ``hang="nanny-start"``: the same, but in the client's process (the nannies of a local
    cluster live there), before any worker process exists. ``raise_=(module, name, message)``:
    the pipeline ``failing-task`` is registered, its tasks raising :func:`raise_like`.
    ``wrong_answer=True`` or ``baseline_disagrees=True``: the pipeline ``sum-of-ones`` is
    registered, computing 101 instead of 100, or with a baseline that answers 101;
    ``raises_in=HOOK``: it is registered with a ValueError raised in its ``HOOK``.
    ``watch_clusters=PATH``: :func:`record_cluster_starts` writes to ``PATH``.
    ``run_once_paused=True``: :func:`run_once_every_worker_is_paused`.
    ``warm_up_log=PATH``: mean-pipeline gets a warm-up hook that appends a line to ``PATH`` on
    each worker that runs it. ``exit_modules=PATH``: the command's process writes the names of
    the packages it imported to ``PATH`` (a JSON list) as it exits.
    """
    import json

    environment = dict(os.environ if env is None else env)
    environment[FAULT_ENV] = json.dumps({k.rstrip("_"): v for k, v in fault.items()})
    return environment


def inject_from_environment(main_name: str) -> None:
    """Install the fault ``DASKGPU_TEST_FAULT`` names; ``main_name`` is the caller's ``__name__``.

    Called at the top of ``tests/faulty_cli.py``, which multiprocessing imports again, as
    ``__mp_main__``, in every worker process it spawns: there a ``hang`` fault never returns.
    """
    import json

    fault = json.loads(os.environ.get(FAULT_ENV) or "{}")
    if fault.get("hang") == "worker-start" and main_name == "__mp_main__":
        while True:
            time.sleep(3600)
    if fault.get("hang") == "nanny-start" and main_name == "__main__":
        import asyncio

        from distributed import Nanny

        async def never_starts(self):
            await asyncio.sleep(10**6)

        Nanny.start_unsafe = never_starts
    if "warm_up_log" in fault and main_name in ("__main__", "__mp_main__"):
        _log_warm_ups("mean-pipeline", fault["warm_up_log"])  # in the fork server too
    if main_name != "__main__":
        return
    if "exit_modules" in fault:
        import atexit

        atexit.register(_write_imported_packages, fault["exit_modules"])
    if "watch_clusters" in fault:
        record_cluster_starts(fault["watch_clusters"])
    if fault.get("run_once_paused"):
        run_once_every_worker_is_paused()
    specs = []
    if "raise" in fault:
        specs.append(failing_pipeline(*fault["raise"]))
    if fault.get("wrong_answer") or fault.get("baseline_disagrees") or "raises_in" in fault:
        specs.append(sum_of_ones_pipeline(extra=1.0 if fault.get("wrong_answer") else 0.0,
                                          baseline_extra=1.0 if fault.get("baseline_disagrees")
                                          else 0.0, raises_in=fault.get("raises_in")))
    if specs:
        from daskgpu.toolkit import registry

        for spec in specs:
            registry.pipeline(spec.name, spec.summary, spec.params, spec.verify,
                              baseline=spec.baseline)(spec.prepare)


def run_once_every_worker_is_paused(timeout: float = 60.0) -> None:
    """Hold a local cluster's run back until the scheduler reports every worker paused.

    A worker pauses at its memory monitor's first check above the pause threshold; a run that
    began before that check could end first. Waiting for the pause itself (the status the
    scheduler has of each worker) rather than for a time leaves no such race.
    """
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from daskgpu.clusters import session
    from daskgpu.toolkit.backends import scheduler_workers

    registered = session._wait_for_workers

    def every_worker_paused(client) -> bool:
        statuses = [w.get("status") for w in scheduler_workers(client).values()]
        return bool(statuses) and all(status == "paused" for status in statuses)

    def wait_for_workers(client, n: int, *args, **kwargs) -> None:
        registered(client, n, *args, **kwargs)
        wait_for(lambda: every_worker_paused(client), timeout,
                 what=f"pause of every one of the {n} workers")

    session._wait_for_workers = wait_for_workers


def _log_warm_ups(name: str, path: str) -> None:
    """Give pipeline ``name`` a warm-up hook that appends ``warm-up BACKEND`` to ``path``."""
    import dataclasses

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import pipelines  # noqa: F401  (registers the built-in pipelines)
    from daskgpu.toolkit import registry

    def warm_up(backend_name: str) -> None:
        with open(path, "a") as f:
            f.write(f"warm-up {backend_name}\n")

    registry._REGISTRY[name] = dataclasses.replace(registry.get(name), warm_up=warm_up)


def _write_imported_packages(path: str) -> None:
    import json

    with open(path, "w") as f:
        json.dump(sorted({name.split(".")[0] for name in sys.modules}), f)


def record_cluster_starts(path: str) -> None:
    """Append a line to ``path`` each time this process makes a cluster or a client.

    Every cluster daskgpu starts is a ``SpecCluster`` (``LocalCluster``, ``LocalCUDACluster``)
    made in the command's process; a scheduler of its own is reached through a ``Client``. An
    absent file proves that a refused run started neither, nor any worker.
    """
    from distributed import Client
    from distributed.deploy.spec import SpecCluster

    def spy(cls):
        original = cls.__init__

        def init(self, *args, **kwargs):
            with open(path, "a") as f:
                f.write(f"{type(self).__name__}\n")
            original(self, *args, **kwargs)

        cls.__init__ = init

    for cls in (SpecCluster, Client):
        spy(cls)


def assert_no_cluster_started(path) -> None:
    """A run watched by :func:`record_cluster_starts` (into ``path``) made no cluster or client:
    it was refused before any scheduler or worker started."""
    started = Path(path).read_text().split() if Path(path).exists() else []
    assert started == [], f"refused only after starting {started}"


def sum_of_ones_pipeline(extra: float = 0.0, baseline_extra: float = 0.0,
                         raises_in: str | None = None):
    """An unregistered pipeline, ``sum-of-ones``: 100 ones summed, checked against 100.

    ``extra`` is added to the computed sum (a wrong answer its check catches); its baseline
    answers ``100 + baseline_extra`` (one that disagrees with a right run). ``raises_in``:
    the hook (``prepare``, ``verify`` or ``baseline``) that raises a ValueError, as a bug in a
    pipeline's own code does.
    """
    from daskgpu.toolkit.registry import Pipeline, Verification, Workload

    def bug(hook: str) -> None:
        if hook == raises_in:
            raise ValueError(f"a bug in {hook}")

    def prepare(resolved):
        import dask.array as da
        import numpy as np

        bug("prepare")
        return Workload(da.from_array(np.ones(100), chunks=50).sum() + extra, 100, 800)

    def verify(workload, raw):
        bug("verify")
        return Verification(float(raw) == 100.0, f"the sum is {float(raw):g}, expected 100")

    def baseline(resolved):
        bug("baseline")
        began = time.perf_counter()
        answer = 100.0 + baseline_extra
        return time.perf_counter() - began + 1e-9, answer

    return Pipeline("sum-of-ones", "a sum of 100 ones", (), prepare, verify, baseline=baseline)


def working_pipeline(verify):
    """An unregistered pipeline, ``working-task``: a sum of ones, checked by ``verify``."""
    from daskgpu.toolkit.registry import Pipeline, Workload

    def prepare(resolved):
        import dask.array as da
        import numpy as np

        return Workload(da.from_array(np.ones(100), chunks=50).sum(), 100, 800)

    return Pipeline("working-task", "a sum of ones", (), prepare, verify)


def run_faulty_cli(*args, env: dict | None = None, timeout: float = 180, **fault):
    """``python tests/faulty_cli.py ARGS`` with ``fault`` (:func:`fault_env`'s keywords)."""
    environment = fault_env(env, **fault)
    environment.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run([sys.executable, str(FAULTY_CLI), *args], capture_output=True,
                          text=True, env=environment, timeout=timeout, cwd=ROOT)
