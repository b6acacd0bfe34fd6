"""The daskgpu commands: ``run``, ``bench``, ``list``, ``devices`` (``python cli.py ...``).

Parses options, calls the library, prints, and sets the exit code (:data:`EXIT_CODES`).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import click
from rich.console import Console

import daskgpu
from daskgpu.cli import launch
from daskgpu.cli import options as cli_options
from daskgpu.clusters import interrupts
from daskgpu.errors import DaskGPUError, UnknownPipeline
from daskgpu.execution import report
from daskgpu.toolkit import registry

# The cluster, runner and benchmark machinery (dask, distributed, numpy) load in the commands
# that use them: `--help` and `list` do without.

if getattr(sys.modules.get("__main__"), "__name__", None) == "__mp_main__":
    # This program, imported again by multiprocessing in a worker process it started. A
    # terminal's Ctrl-C reaches the whole process group; it is the client's to handle (it closes
    # the cluster), so the worker ignores it from now on, before its Worker even exists
    # (daskgpu.clusters.worker_setup does the same later, for workers other programs start).
    signal.signal(signal.SIGINT, signal.SIG_IGN)

EXIT_VERIFY_FAILED = 1  # also RunFailed's: the workers died
EXIT_USAGE = 2
EXIT_TASK_FAILED = 3  # TaskFailed's, GPUError's
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM
EXIT_CODES = (
    "Exit codes: 0 success; 1 the result failed its verification, or the workers died; 2 bad "
    "input or environment; 3 a task failed on a worker (a CUDA error: out of device memory, a "
    "driver error, a kernel that does not compile; or an exception in the pipeline's code); "
    "130 interrupted (Ctrl-C or SIGTERM). Errors are one line on stderr."
)


def _run_pipeline(spec: registry.Pipeline, kwargs: dict) -> None:
    from daskgpu.clusters import worker_processes
    from daskgpu.clusters.plan import describe, plan
    from daskgpu.execution import process_clock

    as_json = kwargs.pop("as_json")
    quiet = kwargs.pop("quiet")
    report_path = kwargs.pop("report")
    keep_open = kwargs.pop("keep_open")
    dashboard = not kwargs.pop("no_dashboard")
    options = {k: kwargs.pop(k) for k in cli_options.CLUSTER_KEYS}
    overwrite = kwargs.pop("overwrite", False)
    verify = kwargs.pop("verify")
    params = {k: v for k, v in kwargs.items() if v is not None}
    err = Console(stderr=True, soft_wrap=True, markup=False)  # one line even when piped; text as is
    chosen = plan(dashboard=dashboard, **options)
    if chosen.kind == "cpu":  # unless started already (start_for_command_line)
        worker_processes.start_server(spec.prepare.__module__)
    else:  # one started ahead, for CPU workers that will not come
        worker_processes.stop_server()
    from daskgpu.clusters import dashboard as dashboards
    from daskgpu.clusters import session as sessions
    from daskgpu.execution import runner

    # A cluster daskgpu starts has a known backend: resolve before anything starts.
    resolved = spec.resolve_for_run(chosen.backend, overwrite, **params) if chosen.backend else None
    talk = not (quiet or as_json)
    if not quiet:
        for note in chosen.notices:
            err.print(note, highlight=False)
    if talk:
        err.print(f"{describe(chosen)}...", highlight=False)
    imported = process_clock.seconds_since_start()
    with sessions.start(chosen, warm_up=spec.name) as session:
        if resolved is None:  # an existing scheduler: its workers said what they compute on
            resolved = spec.resolve_for_run(session.backend, overwrite, **params)
        if talk:
            err.print(f"Dashboard: {session.dashboard or 'off'}", highlight=False)
        if keep_open and session.dashboard:
            dashboards.record_task_stream(session.client)  # a page opened later shows this run
        progress = sys.stdout.isatty() and talk
        result = runner.execute(spec, session, resolved, progress=progress, report=report_path,
                                verify=verify)
        result.timings["import_s"] = imported
        if keep_open:
            _show(result, as_json)
            _wait_for_ctrl_c(err, session.dashboard)
        closing = time.perf_counter()
    if not keep_open:
        result.timings["close_s"] = time.perf_counter() - closing
        result.timings["process_s"] = process_clock.seconds_since_start()
        _show(result, as_json)
    if result.verified is False:
        unwritten = [n for n in result.notices if n not in chosen.notices]
        err.print("; ".join([f"error: the result did not verify ({result.verify})", *unwritten]),
                  highlight=False)
        raise SystemExit(EXIT_VERIFY_FAILED)


def _show(result, as_json: bool) -> None:
    if as_json:
        click.echo(report.as_json(result))
    else:
        report.show(result)


def _wait_for_ctrl_c(err: Console, dashboard: str | None) -> None:
    err.print(f"Keeping the cluster open (dashboard: {dashboard or 'off'}); press Ctrl-C to "
              "close it.", highlight=False)
    sys.stdout.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        err.print("Closing the cluster.", highlight=False)


class RunGroup(click.Group):
    """``run NAME``: one subcommand per registered pipeline, options from its parameters."""

    def list_commands(self, ctx):
        """Registered pipeline names."""
        return registry.names()

    def get_command(self, ctx, name):
        """A command for pipeline ``name``, or None."""
        try:
            spec = registry.get(name)  # imports only that pipeline's module
        except UnknownPipeline:
            return None
        return self.pipeline_command(spec)

    def pipeline_command(self, spec: registry.Pipeline) -> click.Command:
        """The ``run`` command of one pipeline."""
        return click.Command(
            spec.name,
            callback=lambda **kwargs: _run_pipeline(spec, kwargs),
            params=cli_options.pipeline_options(spec) + cli_options.cluster_options(),
            help=spec.summary,
            short_help=spec.summary,
        )

    def format_commands(self, ctx, formatter):
        """The pipelines and their summaries, without importing any (``registry.summaries``)."""
        rows = list(registry.summaries().items())
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(self, ctx, args):
        """Like click's, but an unknown pipeline gets a did-you-mean and the list."""
        if not launch.considered:  # `daskgpu` (console script) and in-process calls
            from daskgpu.clusters import worker_processes

            worker_processes.start_for_command_line([self.name, *args], registry.builtin_module)
        if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
            registry.get(args[0])  # raises UnknownPipeline with suggestions
        return super().resolve_command(ctx, args)


def _bench_pipeline(spec: registry.Pipeline, kwargs: dict) -> None:
    from daskgpu.execution import bench as benchmarks

    quiet = kwargs.pop("quiet")
    dashboard = not kwargs.pop("no_dashboard")
    knobs = {k: kwargs.pop(k) for k in ("repeat", "warmup", "sweep", "weak", "json_path", "plot",
                                         "verify")}
    options = {k: kwargs.pop(k) for k in cli_options.CLUSTER_KEYS}
    options["dashboard"] = dashboard
    params = {k: v for k, v in kwargs.items() if v is not None}
    err = Console(stderr=True, soft_wrap=True, markup=False)

    def progress(text):
        if not quiet:
            err.print(text, highlight=False)

    result = benchmarks.bench(spec.name, params, options, knobs["repeat"], knobs["warmup"],
                              sweep=knobs["sweep"], weak=knobs["weak"], progress=progress,
                              verify=knobs["verify"])
    if not quiet:
        for note in result.notices:
            err.print(note, highlight=False)
    report.print_wide(report.bench_table(result))
    if knobs["json_path"]:
        report.write_bench_json(result, knobs["json_path"])
    if knobs["plot"]:
        report.write_bench_plot(result, knobs["plot"])
    if not result.verified:
        raise SystemExit(EXIT_VERIFY_FAILED)


class BenchGroup(RunGroup):
    """``bench NAME``: the options of ``run NAME`` plus repeat, warm-up, sweep and outputs."""

    def pipeline_command(self, spec: registry.Pipeline) -> click.Command:
        """The ``bench`` command of one pipeline."""
        return click.Command(
            spec.name,
            callback=lambda **kwargs: _bench_pipeline(spec, kwargs),
            params=cli_options.pipeline_options(spec) + cli_options.bench_options(),
            help=f"Benchmark: {spec.summary}",
            short_help=spec.summary,
        )


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES)
@click.version_option(daskgpu.__version__, prog_name="daskgpu")
def app():
    """daskgpu: large array and dataframe computations on the GPUs you choose."""


app.add_command(RunGroup("run", help="Run a pipeline: run NAME [options]; see `list`."))
app.add_command(BenchGroup(
    "bench",
    help="Benchmark a pipeline: bench NAME [options] --repeat R --warmup W [--sweep [--weak]] "
    "[--json FILE] [--plot FILE.png]; min/median/max compute time, throughput, and the ratio "
    "to the pipeline's one-process baseline.",
))


@app.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_pipelines(as_json):
    """List the pipelines with a one-line summary each."""
    summaries = registry.summaries()
    if as_json:
        click.echo(report.pipelines_json(summaries))
    else:
        Console().print(report.pipelines_table(summaries))


@app.command("new-pipeline")
@click.argument("name")
@click.option("--dir", "folder", default=None, metavar="PATH",
              help="Where to write the package [default: ./NAME].")
@click.option("--table", is_flag=True,
              help="A table pipeline (Parquet/CSV or random rows) instead of an array one.")
def new_pipeline(name, folder, table):
    """Write a plugin package for pipeline NAME: pyproject, pipeline module, test.

    It installs (pip install -e PATH), lists, runs, verifies and passes its test as written.
    """
    from daskgpu.cli import scaffold

    target = folder or name
    for path in scaffold.write(name, target, table):
        click.echo(path)
    click.echo(f"next: pip install -e {target} && daskgpu run {name} --cpu && "
               f"(cd {target} && pytest)")


@app.command("devices")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_devices(as_json):
    """List the GPUs (nvidia-smi order), or say why there are none."""
    from daskgpu.clusters import devices

    inv = devices.inventory()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if as_json:
        click.echo(report.devices_json(inv, visible))
        return
    if not inv.devices:
        click.echo(f"No GPU found: {inv.reason}.")
        return
    report.print_wide(report.devices_table(inv))
    if visible is not None:
        click.echo(report.visible_line(visible, devices.visible_devices(inv, visible)))


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app and map errors to one line and an exit code."""
    signal.signal(signal.SIGINT, interrupts.raise_interrupt)
    signal.signal(signal.SIGTERM, interrupts.raise_interrupt)
    try:
        return _run_app(argv)
    except (KeyboardInterrupt, click.exceptions.Abort):
        # Here too when a second Ctrl-C lands while the first is being handled. The cluster is
        # closed by now: no further signal may cut the exit short.
        _ignore_interrupts()
        click.echo("interrupted: cluster shut down", err=True)
        return EXIT_INTERRUPTED


def _ignore_interrupts() -> None:
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            return
        except KeyboardInterrupt:  # one more, before the first line above took effect
            continue


def _program_name() -> str:
    """``cli.py`` when run as ``python cli.py``; ``daskgpu`` for the installed command."""
    return "cli.py" if os.path.basename(sys.argv[0]) == "cli.py" else "daskgpu"


def _run_app(argv: list[str] | None) -> int:
    try:
        app.main(args=argv, prog_name=_program_name(), standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help())
        return 0
    except click.UsageError as exc:
        hint = f" (see: {exc.ctx.command_path} --help)" if exc.ctx else ""
        click.echo(f"error: {_one_line(exc.format_message())}{hint}", err=True)
        return EXIT_USAGE
    except DaskGPUError as exc:
        click.echo(f"error: {_one_line(exc)}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0

def entry() -> None:
    """The ``daskgpu`` command: :func:`main`, then exit with its code, quickly."""
    launch.exit_quickly()
    launch.finish(main())
