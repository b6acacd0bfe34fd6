"""The shape of the house: one flow (plan -> Session -> Resolved -> RunResult), no side channels.

What a step learns is handed on, never found again: a started cluster's backend is the plan's,
parameters are resolved once (inputs opened once), pipelines import only the pipeline-facing
library, and the Python API names its keywords where the command line names options.
"""

from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT, run_cli

import daskgpu
from daskgpu import backends, registry
from daskgpu.errors import ParameterError, python_spelling
from pipelines import BUILTIN

# What building a pipeline must never pull in: the cluster, runner and benchmark machinery.
RUN_MACHINERY = {"daskgpu.runner", "daskgpu.session", "daskgpu.cluster_plan", "daskgpu.bench",
                 "daskgpu.memory", "daskgpu.faults", "daskgpu.progress", "daskgpu.report"}
MAX_LINES = 350
LONG_MODULE_NOTE = "over the house's usual module size"


def _module_imports(path) -> set[str]:
    """The daskgpu modules a file imports at module level (``from daskgpu import x`` counts x)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("daskgpu")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "daskgpu":
                found |= {f"daskgpu.{a.name}" for a in node.names}
            elif node.module.startswith("daskgpu"):
                found.add(node.module)
    return found


def _library_file(module: str):
    parts = module.split(".")
    as_module = ROOT.joinpath(*parts).with_suffix(".py")
    return as_module if as_module.exists() else ROOT.joinpath(*parts, "__init__.py")


def _closure(start: set[str]) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        module = todo.pop()
        path = _library_file(module)
        if module in seen or not path.exists():
            continue  # a name imported from a package (``from daskgpu import config``) is a module
        seen.add(module)
        todo.extend(_module_imports(path) | {"daskgpu"})
    return seen


def test_pipelines_import_only_the_pipeline_facing_library():
    """registry -> pipelines -> bench -> runner -> registry was a loop; it must not come back."""
    pipeline_files = sorted((ROOT / "pipelines").glob("*.py"))
    assert len(pipeline_files) >= 6
    imported = set().union(*(_module_imports(p) for p in pipeline_files))
    assert {"daskgpu.registry", "daskgpu.params"} <= imported
    reached = _closure(imported)
    assert "daskgpu.backends" in reached  # the walk follows imports through the library
    assert not reached & RUN_MACHINERY, sorted(reached & RUN_MACHINERY)


def _modules_loaded_by(code: str, prefixes: tuple[str, ...]) -> set[str]:
    """The modules starting with ``prefixes`` that running ``code`` in a fresh Python loads."""
    report = f"; import sys; print(' '.join(m for m in sys.modules if m.startswith({prefixes!r})))"
    proc = subprocess.run([sys.executable, "-c", code + report], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def test_importing_the_pipelines_loads_no_run_machinery():
    loaded = _modules_loaded_by("import importlib, pipelines; [importlib.import_module(m) for m "
                                "in pipelines.BUILTIN.values()]", ("daskgpu",))
    assert "daskgpu.registry" in loaded
    assert not loaded & RUN_MACHINERY, sorted(loaded & RUN_MACHINERY)


def test_library_never_imports_the_application_or_a_concrete_pipeline():
    for path in sorted((ROOT / "daskgpu").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in ("cli", "cli_options", "pipelines"), (path, name)


def test_modules_stay_small_or_say_why():
    files = [*(ROOT / "daskgpu").rglob("*.py"), *(ROOT / "pipelines").glob("*.py"),
             ROOT / "cli.py", ROOT / "cli_options.py"]
    too_long = []
    for path in files:
        text = path.read_text()
        doc = ast.get_docstring(ast.parse(text)) or ""
        if text.count("\n") > MAX_LINES and LONG_MODULE_NOTE not in " ".join(doc.split()):
            too_long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
    assert not too_long, too_long


def test_builtin_pipelines_load_without_the_installed_entry_point():
    """A checkout that was never pip-installed finds its pipelines (it once said 'none')."""
    code = textwrap.dedent(
        """
        import daskgpu.registry as registry
        registry.entry_points = lambda **kwargs: []
        print(",".join(registry.names()))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.strip().split(",")) >= {
        "histogram-pipeline", "join-pipeline", "mean-pipeline", "stencil-pipeline",
        "trips-pipeline"}


def test_the_command_names_itself():
    proc = run_cli("run", "--help")
    assert proc.returncode == 0 and "Usage: cli.py run" in proc.stdout
    installed = os.path.join(os.path.dirname(sys.executable), "daskgpu")
    if not os.path.exists(installed):
        pytest.skip("the daskgpu command is not installed next to this Python")
    proc = subprocess.run([installed, "run", "mean-pipeline", "--chunks", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "daskgpu run mean-pipeline --help" in proc.stderr and "cli.py" not in proc.stderr


# ------------------------------------------------------------------ Resolved: once, frozen


def test_parameters_are_resolved_once_into_a_frozen_object():
    cpu = backends.get("cpu", workers=2, threads=2)
    spec = daskgpu.get_pipeline("join-pipeline")
    resolved = spec.resolve(cpu, rows=1000)
    assert isinstance(resolved, daskgpu.Resolved)
    assert resolved["rows"] == 1000 and resolved["partitions"] == 2  # chosen for the backend
    assert isinstance(resolved["seed"], int)  # drawn once, and recorded
    with pytest.raises(TypeError):
        resolved.values["rows"] = 5
    with pytest.raises(AttributeError):
        resolved.backend = None
    again = pickle.loads(pickle.dumps(resolved))  # a GPU baseline runs it on a worker
    assert again == resolved and again["seed"] == resolved["seed"]
    # the workload reads the same values: the reported seed is the resolved one
    workload = spec.workload(cpu, resolved)
    assert workload.resolved is resolved
    assert workload.description["seed"] == resolved["seed"]


def test_default_sizes_follow_the_backend():
    gpu_like = backends.Backend("gpu", "cupy", "cudf", (), 1, 1)
    cpu = backends.get("cpu")
    join = daskgpu.get_pipeline("join-pipeline")
    assert join.resolve(cpu)["rows"] == 10_000_000
    assert join.resolve(gpu_like)["rows"] == 100_000_000


def test_trips_input_is_opened_once_in_the_client(cpu_client, tmp_path):
    """A CSV input was opened 11 times by the client (parsers, checks, verify, baseline)."""
    import pandas as pd

    from pipelines import trips_pipeline

    path = tmp_path / "trips.csv"
    frame = trips_pipeline.synthetic_partition((0, 2000, 1))
    frame.to_csv(path, index=False)
    opened = []
    watching = [True]

    def hook(event, args):
        if watching[0] and event == "open" and args and str(args[0]) == str(path):
            opened.append(event)

    sys.addaudithook(hook)  # cannot be removed: it stops counting at the end of the test
    try:
        result = daskgpu.run("trips-pipeline", client=cpu_client, input=str(path))
    finally:
        watching[0] = False
    assert result.verified, result.verification
    assert result.data["rows"] == 2000
    # Resolving reads the header rows and counts the lines (2 opens); dask.dataframe's
    # read_csv samples the file for its types (1). The workers read it in their own processes.
    assert len(opened) <= 3, len(opened)
    assert pd.read_csv(path).shape[0] == 2000


# ------------------------------------------------------------------ Session: never asked again


def test_a_started_cluster_is_never_asked_what_it_has(monkeypatch):
    def refuse(client):
        raise AssertionError("a started cluster's workers were asked for their backend")

    monkeypatch.setattr(backends, "detect", refuse)
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False) as session:
        assert isinstance(session, daskgpu.Session)
        assert session.kind == "cpu" and session.backend.name == "cpu"
        assert (session.n_workers, session.threads_per_worker) == (1, 1)
        assert session.start_s > 0
        assert session.ncores() == {w: 1 for w in session.scheduler_info()["workers"]}
        # cuDF imported in this process would otherwise create a CUDA context
        assert os.environ.get("RAPIDS_NO_INITIALIZE") == "1"
        result = daskgpu.run("mean-pipeline", session, size=300, seed=2)
    assert result.verified and result.backend == "cpu"
    assert result.elements == 300 * 300 and result.nbytes == 300 * 300 * 8
    assert result.params["seed"] == 2 and result.timings["cluster_start_s"] == session.start_s


def test_a_plain_client_is_asked_once(cpu_client):
    from daskgpu import session as sessions

    plain = cpu_client.client
    wrapped = sessions.for_client(plain)
    assert wrapped.kind == "external" and wrapped.backend.name == "cpu"
    assert wrapped.backend.workers == 2
    result = daskgpu.run("mean-pipeline", client=plain, size=200, seed=1)
    assert result.verified


# ------------------------------------------------------------------ errors in the caller's words


def test_python_errors_name_the_keyword_and_the_command_line_the_option(cpu_client):
    with pytest.raises(ParameterError) as err:
        daskgpu.run("mean-pipeline", client=cpu_client, chunks="0")
    assert "chunks=0" in str(err.value) and "--chunks" not in str(err.value)
    with pytest.raises(daskgpu.DaskGPUError) as err:
        daskgpu.get_pipeline("stencil-pipeline").build(daskgpu.get_backend("cpu"), size=3,
                                                        steps_per_exchange=4)
    assert "steps_per_exchange=4" in str(err.value)
    proc = run_cli("run", "mean-pipeline", "--chunks", "0", "--cpu")
    assert proc.returncode == 2 and "--chunks" in proc.stderr and "chunks=" not in proc.stderr


def test_cluster_errors_in_python_name_keywords():
    with pytest.raises(daskgpu.DaskGPUError) as err:
        with daskgpu.cluster(gpus="0", cpu=True):
            pass
    assert "gpus=" in str(err.value) and "cpu=True" in str(err.value)
    assert "--" not in str(err.value)


@pytest.mark.parametrize(("message", "expected"), [
    ("--size 0: must be a positive integer", "size=0: must be a positive integer"),
    ("--input /a/b.npy: no such file", "input=/a/b.npy: no such file"),
    ("--steps-per-exchange 9: too deep", "steps_per_exchange=9: too deep"),
    ("pass --overwrite to replace it", "pass overwrite=True to replace it"),
    ("--gpus and --cpu contradict", "gpus=... and cpu=True contradict"),
])
def test_python_spelling(message, expected):
    assert python_spelling(message) == expected


def test_registry_errors_are_one_line():
    with pytest.raises(daskgpu.DaskGPUError) as err:
        registry.get("mean-pipelin")
    assert "did you mean 'mean-pipeline'" in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------ one meaning, one style


def test_every_pipeline_option_is_helped_in_one_style():
    import cli_options

    for name in registry.names():
        spec = registry.get(name)
        for option in cli_options.pipeline_options(spec):
            text = option.help
            assert text[:1].isupper() and text.endswith((".", "]")), (name, option.name, text)
            assert "(default" not in text and "[default: (" not in text, (name, text)
            if option.name in spec.param_names:
                default = spec.param(option.name).default
                if default is not None:
                    assert "[default: " in text, (name, option.name, text)


def test_shared_options_mean_the_same_everywhere():
    """--size is the side of a square array; counts are --values or --rows; one --partitions."""
    for name in registry.names():
        spec = registry.get(name)
        if "size" in spec.param_names:
            assert "n x n" in spec.param("size").help, name
        if "chunks" in spec.param_names:
            assert spec.param("chunks").parse is registry.get("mean-pipeline").param(
                "chunks").parse, name
    dataframe = [registry.get(n) for n in ("trips-pipeline", "join-pipeline")]
    assert all("partitions" in spec.param_names for spec in dataframe)


def test_a_run_of_one_pipeline_loads_only_its_module():
    """`run mean-pipeline` (and a worker unpickling its tasks) must not load the others' kernels."""
    loaded = _modules_loaded_by("import daskgpu; daskgpu.get_pipeline('mean-pipeline')",
                                ("pipelines.", "numba"))
    assert "pipelines.mean_pipeline" in loaded
    assert not {m for m in loaded if m.endswith("_pipeline")} - {"pipelines.mean_pipeline"}
    assert "numba.cuda" not in loaded
    assert set(BUILTIN) <= set(daskgpu.pipeline_names())  # listing still finds every one
