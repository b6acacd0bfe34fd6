"""The command line's options: built from each pipeline's declared parameters, and the cluster's.

Parsing only: a bad value fails here with the parameter's own one-line reason.
"""

from __future__ import annotations

import os

import click

from daskgpu.errors import ParameterError
from daskgpu.toolkit import registry
from daskgpu.toolkit.params import Param, output_path
from daskgpu.verification.depths import DEFAULT, DEPTHS


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


def _with_default(p: Param) -> str:
    """The parameter's help, ending in ``[default: X]`` where it has a fixed default."""
    if p.default is None or "[default:" in p.help:
        return p.help
    shown = ",".join(map(str, p.default)) if isinstance(p.default, tuple) else p.default
    return f"{p.help} [default: {shown}]"


def pipeline_options(spec: registry.Pipeline) -> list[click.Option]:
    """One option per declared parameter of ``spec``, plus ``--overwrite`` if it writes files."""
    options = []
    for p in spec.params:
        if p.nargs == 0:  # a switch: present or not
            options.append(click.Option([p.option, p.name], is_flag=True, default=None,
                                        help=_with_default(p)))
            continue
        single = p.nargs == 1
        options.append(
            click.Option(
                [p.option, p.name],
                type=PipelineParamType(p) if single else click.STRING,
                nargs=p.nargs,
                callback=None if single else _parse_words(p),
                default=None,
                help=_with_default(p),
                show_default=False,
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


def cluster_options() -> list[click.Option]:
    """Where to run: devices, workers, an existing scheduler, dashboard, output format."""
    o = click.Option
    return [
        o(["--gpus"], envvar="DASKGPU_GPUS", metavar="SPEC",
          help="GPUs to use: all, 0,1, 0-3, GPU-<uuid>, MIG-<uuid> (nvidia-smi indices; "
          "positions in CUDA_VISIBLE_DEVICES when it is set). Env: DASKGPU_GPUS."),
        o(["--cpu"], is_flag=True, help="Run on CPU workers even where GPUs exist."),
        o(["--workers"], type=click.IntRange(min=1), metavar="N",
          help="CPU workers [default: one per core; GPU runs have one per GPU]."),
        o(["--threads-per-worker"], type=click.IntRange(min=1), metavar="N",
          help="Threads per worker [default: daskgpu.cpu.threads-per-worker on CPU, 1 on GPU]."),
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
        o(["--verify"], type=click.Choice(DEPTHS), default=DEFAULT, show_default=True,
          help="How deeply to check the answer: fast (certificates and seeded spot checks, a "
          "small share of the compute), full (the exhaustive audit), off (not checked, and "
          "said so)."),
        o(["--json", "as_json"], is_flag=True, help="Print one JSON object instead of a table."),
        o(["--report"], metavar="FILE.html", callback=_report_path,
          help="Save Dask's performance report of the run (task stream, profile, bandwidth) "
          "as a self-contained HTML file."),
        o(["--keep-open"], is_flag=True,
          help="After the run, keep the cluster and its dashboard up until Ctrl-C."),
        o(["--quiet", "-q"], is_flag=True, help="No progress bar or notices."),
    ]


CLUSTER_KEYS = (
    "gpus", "cpu", "workers", "threads_per_worker", "memory_limit", "scheduler_address",
    "scheduler_file", "dashboard_address", "rmm_pool_size", "device_memory_limit", "protocol",
    "tls_ca_file", "tls_cert", "tls_key", "host",
)


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


RUN_ONLY = {"as_json", "report", "keep_open"}


def bench_options() -> list[click.Option]:
    """The cluster options of ``run`` plus repeats, warm-ups, sweeps and result files."""
    o = click.Option
    cluster = [c for c in cluster_options() if c.name not in RUN_ONLY]
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
