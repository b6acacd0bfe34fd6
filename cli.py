"""daskgpu command line: ``python cli.py run mean-pipeline --gpus 0,1``.

Parses options, calls the library, prints, and sets the exit code: 0 ok, 1 the result failed
verification, 2 bad input or environment, 130 interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import click
from rich.console import Console
from rich.table import Table

import daskgpu
from daskgpu import bench as benchmarks
from daskgpu import clusters, devices, failures, registry, report, runner
from daskgpu.errors import DaskGPUError, ParameterError
from daskgpu.params import Param, output_path

if getattr(sys.modules.get("__main__"), "__name__", None) == "__mp_main__":
    # This program, imported again by multiprocessing in a worker process it started. A
    # terminal's Ctrl-C reaches the whole process group; it is the client's to handle (it closes
    # the cluster), so the worker ignores it from now on, before its Worker even exists
    # (daskgpu.worker_setup does the same later, for workers other programs start).
    signal.signal(signal.SIGINT, signal.SIG_IGN)

EXIT_VERIFY_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class PipelineParamType(click.ParamType):
    """A click type that parses with a pipeline parameter's own parser."""

    def __init__(self, param: Param):
        self.param = param
        self.name = param.metavar

    def convert(self, value, option, ctx):
        """Parse ``value``; a bad one fails with the parser's message."""
        try:
            return self.param.convert(value)
        except ParameterError as exc:
            self.fail(getattr(exc, "reason", None) or str(exc), option, ctx)


def _parse_words(p: Param):
    """A click callback parsing the words of a multi-word option (``--range LO HI``)."""

    def callback(ctx, option, value):
        try:
            return p.convert(value)
        except ParameterError as exc:
            raise click.BadParameter(getattr(exc, "reason", None) or str(exc), ctx,
                                     option) from None

    return callback


def _pipeline_options(spec: registry.Pipeline) -> list[click.Option]:
    options = []
    for p in spec.params:
        single = p.nargs == 1
        options.append(
            click.Option(
                [p.option, p.name],
                type=PipelineParamType(p) if single else click.STRING,
                nargs=p.nargs,
                callback=None if single else _parse_words(p),
                default=None,
                help=p.help,
                show_default=str(p.default) if p.default is not None else False,
                metavar=p.metavar,
            )
        )
    if any(p.is_output for p in spec.params):
        outputs = ", ".join(p.option for p in spec.params if p.is_output)
        options.append(click.Option(
            ["--overwrite"], is_flag=True,
            help=f"Replace an existing {outputs} (atomically, once the run has succeeded); "
            "without it an existing file is an error.",
        ))
    return options


def _report_path(ctx, option, value):
    if value is None:
        return None
    try:
        return output_path((".html",))(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, option) from None


def _cluster_options() -> list[click.Option]:
    o = click.Option
    return [
        o(["--gpus"], envvar="DASKGPU_GPUS", metavar="SPEC",
          help="GPUs to use: all, 0,1, 0-3, GPU-<uuid>, MIG-<uuid> (nvidia-smi indices; "
          "positions in CUDA_VISIBLE_DEVICES when it is set). Env: DASKGPU_GPUS."),
        o(["--cpu"], is_flag=True, help="Run on CPU workers even where GPUs exist."),
        o(["--workers"], type=click.IntRange(min=1), help="CPU workers (default: one per core)."),
        o(["--threads-per-worker"], type=click.IntRange(min=1), help="Threads per worker."),
        o(["--memory-limit"], default="auto", show_default=True,
          help="Host memory limit per worker (e.g. 4GiB)."),
        o(["--scheduler-address"], metavar="ADDR",
          help="Run on an existing scheduler (tcp://host:8786) instead of starting a cluster."),
        o(["--scheduler-file"], type=click.Path(), help="Existing scheduler, by its file."),
        o(["--tls-ca-file"], type=click.Path(), metavar="CA.pem",
          help="TLS scheduler (tls://): the CA that signed its certificate."),
        o(["--tls-cert"], type=click.Path(), metavar="CERT.pem",
          help="TLS scheduler: this client's certificate (may also hold the key)."),
        o(["--tls-key"], type=click.Path(), metavar="KEY.pem",
          help="TLS scheduler: the private key of --tls-cert."),
        o(["--host"], metavar="ADDR",
          help="Where a started cluster's scheduler and workers listen [default: 127.0.0.1; "
          "another address is reachable from the network, without TLS]."),
        o(["--dashboard-address"], metavar="HOST:PORT",
          help="Dashboard address [default: 127.0.0.1:8787; a free port if taken]."),
        o(["--no-dashboard"], is_flag=True, help="Serve no dashboard."),
        o(["--rmm-pool-size"], metavar="SIZE", help="RMM pool per GPU worker (e.g. 20GB)."),
        o(["--device-memory-limit"], metavar="SIZE",
          help="Spill GPU memory to host above this (e.g. 0.8 or 30GB)."),
        o(["--protocol"], type=click.Choice(["tcp", "ucx"]), default="tcp", show_default=True,
          help="Communication protocol between GPU workers."),
        o(["--json", "as_json"], is_flag=True, help="Print one JSON object instead of a table."),
        o(["--report"], metavar="FILE.html", callback=_report_path,
          help="Save Dask's performance report of the run (task stream, profile, bandwidth) "
          "as a self-contained HTML file."),
        o(["--keep-open"], is_flag=True,
          help="After the run, keep the cluster and its dashboard up until Ctrl-C."),
        o(["--quiet", "-q"], is_flag=True, help="No progress bar or notices."),
    ]


_CLUSTER_KEYS = (
    "gpus", "cpu", "workers", "threads_per_worker", "memory_limit", "scheduler_address",
    "scheduler_file", "dashboard_address", "rmm_pool_size", "device_memory_limit", "protocol",
    "tls_ca_file", "tls_cert", "tls_key", "host",
)


def _run_pipeline(spec: registry.Pipeline, kwargs: dict) -> None:
    as_json = kwargs.pop("as_json")
    quiet = kwargs.pop("quiet")
    report_path = kwargs.pop("report")
    keep_open = kwargs.pop("keep_open")
    dashboard = not kwargs.pop("no_dashboard")
    options = {k: kwargs.pop(k) for k in _CLUSTER_KEYS}
    overwrite = kwargs.pop("overwrite", False)
    params = {k: v for k, v in kwargs.items() if v is not None}
    # fail on a bad value, or an existing output, before anything starts
    spec.check_outputs(spec.resolve(**params), overwrite=overwrite)
    err = Console(stderr=True, soft_wrap=True, markup=False)  # one line even when piped; text as is
    plan = clusters.plan(dashboard=dashboard, **options)
    talk = not (quiet or as_json)
    if not quiet:
        for note in plan.notices:
            err.print(note, highlight=False)
    if talk:
        err.print(f"{clusters.describe(plan)}...", highlight=False)
    with clusters.start(plan) as client:
        meta = clusters.info(client)
        if talk:
            err.print(f"Dashboard: {meta.dashboard or 'off'}", highlight=False)
        if keep_open and meta.dashboard:
            clusters.record_task_stream(client)  # so that a page opened later shows this run
        progress = sys.stdout.isatty() and talk
        result = runner.run(spec, client, progress=progress, report=report_path,
                            overwrite=overwrite, **params)
        if as_json:
            click.echo(report.as_json(result))
        else:
            report.show(result)
        if keep_open:
            _wait_for_ctrl_c(err, meta.dashboard)
    if not result.verified:
        raise SystemExit(EXIT_VERIFY_FAILED)


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
        if name not in registry.names():
            return None
        return self.pipeline_command(registry.get(name))

    def pipeline_command(self, spec: registry.Pipeline) -> click.Command:
        """The ``run`` command of one pipeline."""
        return click.Command(
            spec.name,
            callback=lambda **kwargs: _run_pipeline(spec, kwargs),
            params=_pipeline_options(spec) + _cluster_options(),
            help=spec.summary,
            short_help=spec.summary,
        )

    def resolve_command(self, ctx, args):
        """Like click's, but an unknown pipeline gets a did-you-mean and the list."""
        if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
            registry.get(args[0])  # raises UnknownPipeline with suggestions
        return super().resolve_command(ctx, args)


def _file_option(suffix: str):
    """A click callback: a file to write, named ``*suffix``, in a directory that exists."""

    def callback(ctx, option, value):
        if value is None:
            return None
        try:
            path = output_path((suffix,))(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, option) from None
        parent = os.path.dirname(os.path.abspath(path))
        if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path,
                                                                                    os.W_OK)):
            raise click.BadParameter(f"{path} is not writable", ctx, option)
        return path

    return callback


_RUN_ONLY = {"as_json", "report", "keep_open"}


def _bench_options() -> list[click.Option]:
    o = click.Option
    cluster = [c for c in _cluster_options() if c.name not in _RUN_ONLY]
    return cluster + [
        o(["--repeat"], type=int, default=5, show_default=True,
          help="Timed runs on each cluster (at least 1)."),
        o(["--warmup"], type=int, default=1, show_default=True,
          help="Untimed runs before them (compilation, first touch of memory)."),
        o(["--sweep"], is_flag=True,
          help="Strong scaling: 1, 2, ..., N devices (the selected GPUs, or --workers CPU "
          "workers of one thread; default one per core), one cluster after another."),
        o(["--weak"], is_flag=True,
          help="With --sweep: grow the problem with the device count (weak scaling)."),
        o(["--json", "json_path"], metavar="FILE", callback=_file_option(".json"),
          help="Write every measurement, the hardware and library versions as JSON."),
        o(["--plot"], metavar="FILE.png", callback=_file_option(".png"),
          help="Draw throughput and efficiency against device count (PNG)."),
    ]


def _bench_pipeline(spec: registry.Pipeline, kwargs: dict) -> None:
    quiet = kwargs.pop("quiet")
    dashboard = not kwargs.pop("no_dashboard")
    knobs = {k: kwargs.pop(k) for k in ("repeat", "warmup", "sweep", "weak", "json_path", "plot")}
    options = {k: kwargs.pop(k) for k in _CLUSTER_KEYS}
    options["dashboard"] = dashboard
    params = {k: v for k, v in kwargs.items() if v is not None}
    err = Console(stderr=True, soft_wrap=True, markup=False)

    def progress(text):
        if not quiet:
            err.print(text, highlight=False)

    result = benchmarks.bench(spec.name, params, options, knobs["repeat"], knobs["warmup"],
                              sweep=knobs["sweep"], weak=knobs["weak"], progress=progress)
    if not quiet:
        for note in result.notices:
            err.print(note, highlight=False)
    _print_wide(benchmarks.table(result))
    if knobs["json_path"]:
        benchmarks.write_json(result, knobs["json_path"])
    if knobs["plot"]:
        benchmarks.write_plot(result, knobs["plot"])
    if not result.verified:
        raise SystemExit(EXIT_VERIFY_FAILED)


def _print_wide(t: Table) -> None:
    console = Console()
    if not console.is_terminal:  # piped: never cut the numbers
        wide = console.measure(t, options=console.options.update_width(10_000)).maximum
        console = Console(width=max(console.width, wide))
    console.print(t)


class BenchGroup(RunGroup):
    """``bench NAME``: the options of ``run NAME`` plus repeat, warm-up, sweep and outputs."""

    def pipeline_command(self, spec: registry.Pipeline) -> click.Command:
        """The ``bench`` command of one pipeline."""
        return click.Command(
            spec.name,
            callback=lambda **kwargs: _bench_pipeline(spec, kwargs),
            params=_pipeline_options(spec) + _bench_options(),
            help=f"Benchmark: {spec.summary}",
            short_help=spec.summary,
        )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
    specs = [registry.get(n) for n in registry.names()]
    if as_json:
        click.echo(json.dumps([{"name": s.name, "summary": s.summary} for s in specs]))
        return
    t = Table(show_header=True)
    t.add_column("pipeline")
    t.add_column("summary")
    for s in specs:
        t.add_row(s.name, s.summary)
    Console().print(t)


@app.command("devices")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_devices(as_json):
    """List the GPUs (nvidia-smi order), or say why there are none."""
    inv = devices.inventory()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if as_json:
        click.echo(
            json.dumps(
                {
                    "devices": [d.as_dict() for d in inv.devices],
                    "reason": inv.reason,
                    "cuda_visible_devices": visible,
                }
            )
        )
        return
    if not inv.devices:
        click.echo(f"No GPU found: {inv.reason}.")
        return
    t = Table(show_header=True)
    for col in ("index", "name", "uuid", "memory total", "memory free", "pci bus id", "MIG"):
        t.add_column(col)
    for d in inv.devices:
        migs = "\n".join(f"{m.label} {m.uuid} {m.memory_total / 2**30:.1f} GiB" for m in d.migs)
        t.add_row(
            str(d.index), d.name, d.uuid, f"{d.memory_total / 2**30:.1f} GiB",
            f"{d.memory_free / 2**30:.1f} GiB", d.pci_bus_id, migs or "-",
        )
    console = Console()
    if not console.is_terminal:  # piped: never cut the UUIDs and bus ids a user copies
        wide = console.measure(t, options=console.options.update_width(10_000)).maximum
        console = Console(width=max(console.width, wide))
    console.print(t)
    if visible is not None:
        shown = devices.visible_devices(inv, visible)
        meaning = ", ".join(f"{i} = GPU {d.label} ({d.uuid})" for i, d in enumerate(shown))
        click.echo(f"CUDA_VISIBLE_DEVICES={visible}: --gpus {meaning or 'has no GPU to choose'}")


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app and map errors to one line and an exit code."""
    signal.signal(signal.SIGINT, failures.raise_interrupt)
    signal.signal(signal.SIGTERM, failures.raise_interrupt)
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


def _run_app(argv: list[str] | None) -> int:
    try:
        app.main(args=argv, prog_name="cli.py", standalone_mode=False)
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

if __name__ == "__main__":
    sys.exit(main())
