"""The shape of the house: one flow (plan -> Session -> Resolved -> RunResult), no side channels.

What a step learns is handed on, never found again: a started cluster's backend is the plan's,
parameters are resolved once (inputs opened once), and the Python API names its keywords where
the command line names options. The folders are the layers: pipelines import only the toolkit,
data, kernels, errors and config; a check imports nothing of its pipeline's computation; the
library never imports the command line; kernels are leaves.
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
from daskgpu.errors import ParameterError, python_spelling
from daskgpu.toolkit import backends, registry
from pipelines import BUILTIN

# What building a pipeline may reach of the library: the toolkit, the verification toolkit, the
# data, the kernels, errors and config, and the device description a backend carries. Never the
# cluster's start, the runner, the benchmarks or the command line.
PIPELINE_FACING = ("daskgpu.toolkit", "daskgpu.verification", "daskgpu.data", "daskgpu.kernels",
                   "daskgpu.errors", "daskgpu.config")
REACHABLE_FROM_PIPELINES = (*PIPELINE_FACING, "daskgpu.clusters.devices")
PACKAGES_ON_THE_WAY = {"daskgpu", "daskgpu.clusters"}  # their __init__ imports nothing
PACKAGE_FILES = {"__init__.py", "pipeline.py", "tasks.py", "shared.py", "check.py"}


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _imports(path, top_level_only: bool = False) -> set[str]:
    """The modules a file imports (``from a import b`` counts ``a.b`` where that is a module)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if _is_module(name) else node.module)
    return found


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _module_of(path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _closure(start: set[str]) -> set[str]:
    """Every daskgpu module that importing ``start`` loads (module-level imports followed)."""
    seen, todo = set(), [m for m in start if m.startswith("daskgpu")]
    while todo:
        module = todo.pop()
        if module in seen or not _is_module(module):
            continue
        seen.add(module)
        path = ROOT.joinpath(*module.split("."))
        path = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
        parents = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        todo.extend({m for m in _imports(path, top_level_only=True) | parents
                     if m.startswith("daskgpu")})
    return seen


def _pipeline_packages():
    return sorted(p for p in (ROOT / "pipelines").iterdir() if (p / "__init__.py").exists())


def test_every_pipeline_is_a_package_with_the_same_files():
    packages = _pipeline_packages()
    assert {p.name for p in packages} == {m.split(".")[1] for m in BUILTIN.values()}
    assert sorted((ROOT / "pipelines").glob("*.py")) == [ROOT / "pipelines" / "__init__.py"]
    for package in packages:
        files = {p.name for p in package.glob("*.py")}
        assert PACKAGE_FILES <= files, (package.name, sorted(PACKAGE_FILES - files))
        # A worker that unpickles a task imports the package first: it must cost nothing.
        assert not _imports(package / "__init__.py"), package.name
        assert BUILTIN[f"{package.name}-pipeline"] == f"pipelines.{package.name}.pipeline"


def test_pipelines_import_only_the_toolkit_data_kernels_errors_and_config():
    for package in _pipeline_packages():
        for path in package.glob("*.py"):
            for name in _imports(path):
                if name.startswith("daskgpu"):
                    assert _within(name, PIPELINE_FACING), (_module_of(path), name)
                assert not _within(name, ("cli", "pipelines")) or _within(
                    name, (f"pipelines.{package.name}",)), (_module_of(path), name)


def test_a_check_imports_nothing_of_its_pipelines_computation():
    """check.py (and check_*.py beside it) take from their package only shared and each other."""
    checked = 0
    for package in _pipeline_packages():
        for path in package.glob("check*.py"):
            own = {n for n in _imports(path) if _within(n, (f"pipelines.{package.name}",))}
            allowed = {f"pipelines.{package.name}.shared"} | {
                f"pipelines.{package.name}.{p.stem}" for p in package.glob("check*.py")}
            assert own <= allowed, (_module_of(path), sorted(own - allowed))
            checked += 1
    assert checked >= 10


def test_building_a_pipeline_reaches_no_run_machinery():
    """registry -> pipelines -> bench -> runner -> registry was a loop; it must not come back."""
    imported = set()
    for package in _pipeline_packages():
        for path in package.glob("*.py"):
            imported |= _imports(path, top_level_only=True)
    assert {"daskgpu.toolkit.registry", "daskgpu.toolkit.params"} <= imported
    reached = _closure(imported)
    assert "daskgpu.clusters.devices" in reached  # the walk follows imports through the library
    beyond = {m for m in reached - PACKAGES_ON_THE_WAY if not _within(m, REACHABLE_FROM_PIPELINES)}
    assert not beyond, sorted(beyond)


def test_the_library_never_imports_the_cli_or_a_concrete_pipeline():
    for path in sorted((ROOT / "daskgpu").rglob("*.py")):
        inside_cli = (ROOT / "daskgpu" / "cli") in path.parents
        for name in _imports(path):
            assert name.split(".")[0] not in ("cli", "pipelines"), (_module_of(path), name)
            assert inside_cli or not _within(name, ("daskgpu.cli",)), (_module_of(path), name)


def test_kernels_are_leaves():
    for path in sorted((ROOT / "daskgpu" / "kernels").glob("*.py")):
        for name in _imports(path):
            assert not name.startswith("daskgpu") or _within(name, ("daskgpu.kernels",)), (
                _module_of(path), name)


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
    assert "daskgpu.toolkit.registry" in loaded
    beyond = {m for m in loaded - PACKAGES_ON_THE_WAY if not _within(m, REACHABLE_FROM_PIPELINES)}
    assert not beyond, sorted(beyond)


def test_functions_stay_simple_enough_to_read():
    """ruff's complexity limits hold over the code, whatever the project's lint settings say."""
    ruff = os.path.join(os.path.dirname(sys.executable), "ruff")
    proc = subprocess.run([ruff, "check", "--isolated", "--select", "C901,PLR0915",
                           "--config", "lint.mccabe.max-complexity=15",
                           "--config", "lint.pylint.max-statements=50",
                           "daskgpu", "pipelines", "cli.py", "benchmarks"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_builtin_pipelines_load_without_the_installed_entry_point():
    """A checkout that was never pip-installed finds its pipelines (it once said 'none')."""
    code = textwrap.dedent(
        """
        import daskgpu.toolkit.registry as registry
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

    from pipelines.trips import pipeline as trips_pipeline

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
        again = daskgpu.run("mean-pipeline", session, size=300, seed=2)
    # A reused session's start is paid once: the second run neither reports nor counts it.
    phases = sum(again.timings[k] for k in ("build_s", "compute_s", "output_s", "verify_s"))
    assert again.timings["cluster_start_s"] is None
    assert phases <= again.timings["total_s"] < phases + session.start_s, again.timings
    assert result.verified and result.backend == "cpu"
    assert result.elements == 300 * 300 and result.nbytes == 300 * 300 * 8
    assert result.params["seed"] == 2 and result.timings["cluster_start_s"] == session.start_s


def test_a_plain_client_is_asked_once(cpu_client):
    from daskgpu.clusters import session as sessions

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
    from daskgpu.cli import options as cli_options

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
    assert "pipelines.mean.pipeline" in loaded
    assert {m.split(".")[1] for m in loaded if m.startswith("pipelines.")} == {"mean"}
    assert "numba.cuda" not in loaded
    assert set(BUILTIN) <= set(daskgpu.pipeline_names())  # listing still finds every one
