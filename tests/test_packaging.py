"""The install files agree: pyproject's CPU dependencies, its CUDA extras, environment.yml, the
Makefile's choice of extra."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml
from conftest import ROOT
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

CORE = {"dask", "distributed", "numpy", "pandas", "numba", "numba-cuda", "nvidia-ml-py",
        "click", "rich", "bokeh", "pyarrow", "zarr", "pyyaml", "psutil"}
GPU = {"cupy", "dask-cuda", "cudf", "dask-cudf"}
# The GPU stack of each CUDA major, as PyPI names it: dask-cuda takes the major as an extra.
CUDA_STACKS = {
    "cuda12": {"cupy-cuda12x": set(), "dask-cuda": {"cu12"}, "cudf-cu12": set(),
               "dask-cudf-cu12": set()},
    "cuda13": {"cupy-cuda13x": set(), "dask-cuda": {"cu13"}, "cudf-cu13": set(),
               "dask-cudf-cu13": set()},
}
CUDA_DETECT = ROOT / "tools" / "cuda-extra.sh"


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ;]", requirement.strip(), maxsplit=1)[0].lower()


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _extras() -> dict[str, list[Requirement]]:
    extras = _pyproject()["project"]["optional-dependencies"]
    return {name: [Requirement(r) for r in reqs] for name, reqs in extras.items()}


def _cuda_majors(requirement: Requirement) -> set[str]:
    """The CUDA majors a requirement is built for: cupy-cuda12x, cudf-cu13, dask-cuda[cu12]."""
    words = [requirement.name, *requirement.extras]
    return {m for w in words for m in re.findall(r"cu(?:da)?(\d+)", w.lower())}


def test_cpu_install_has_the_core_and_no_gpu_only_package():
    deps = {_name(d) for d in _pyproject()["project"]["dependencies"]}
    assert CORE <= deps
    assert not any(d.startswith(("cupy", "cudf", "dask-cuda", "dask-cudf")) for d in deps)


@pytest.mark.parametrize("extra", sorted(CUDA_STACKS))
def test_each_cuda_extra_installs_the_gpu_stack_of_its_cuda_major(extra):
    reqs = {r.name: r for r in _extras()[extra]}
    assert {name: reqs[name].extras for name in CUDA_STACKS[extra] if name in reqs} \
        == CUDA_STACKS[extra]
    # dask-cuda's cu12/cu13 extras and cudf-cu13 first exist in RAPIDS 25.10.
    for name in ("dask-cuda", next(n for n in reqs if n.startswith("cudf-"))):
        assert not reqs[name].specifier.contains("25.8"), reqs[name]
        assert reqs[name].specifier.contains("26.10"), reqs[name]


def test_no_extra_mixes_cuda_majors_and_each_gpu_extra_says_its_major():
    # cupy-cuda12x and cupy-cuda13x (cudf-cu12 and -cu13, ...) install the same modules, and an
    # extra cannot pick by driver: an extra with CUDA packages is named for the major it installs.
    for extra, reqs in _extras().items():
        majors = set().union(*(_cuda_majors(r) for r in reqs))
        assert len(majors) <= 1, (extra, majors)
        if majors:
            assert extra == f"cuda{majors.pop()}"


def test_test_extra_runs_the_dask_a_gpu_install_gets():
    # dask-cuda pins dask and distributed (rapids-dask-dependency); without a CUDA extra it
    # installs on CPU machines, so CI tests the versions a GPU install computes with.
    reqs = {r.name: r for r in _extras()["test"]}
    dask_cuda = reqs["dask-cuda"]
    assert dask_cuda.extras == set()
    assert str(dask_cuda.specifier) == "==26.10.*"
    assert not any(_cuda_majors(r) for r in reqs.values())


def _conda_spec(env: dict, name: str) -> str:
    (spec,) = [d for d in env["dependencies"] if isinstance(d, str) and _name(d) == name]
    return spec[len(name):].strip()


def test_environment_yml_parses_and_names_the_same_packages():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert {"rapidsai", "conda-forge"} <= set(env["channels"])
    conda = {_name(d) for d in env["dependencies"] if isinstance(d, str)}
    assert (CORE | GPU) <= conda
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert any(p.startswith("-e .") for p in pip)


def test_environment_yml_solves_for_cuda_12_and_13_and_the_tested_rapids():
    # cuda-version X constrains __cuda >= X, so a range lets conda pick the newest CUDA major the
    # driver runs; the RAPIDS release is the one the test extra's dask-cuda pins (pip, in the
    # same environment, must find it satisfied rather than replace it).
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    cuda = SpecifierSet(_conda_spec(env, "cuda-version"))
    assert {"12.0", "12.9", "13.0", "13.1"} <= set(cuda.filter(["12.0", "12.9", "13.0", "13.1"]))
    assert not cuda.contains("11.8")
    tested = {r.name: r for r in _extras()["test"]}["dask-cuda"].specifier
    for rapids in ("dask-cuda", "cudf", "dask-cudf"):
        assert _conda_spec(env, rapids) == "=" + str(tested).removeprefix("==").removesuffix(".*")


def test_installed_package_ships_the_builtin_pipelines_and_the_command(tmp_path):
    # Built-ins load directly (tests/test_house.py); the entry-point group is for third parties.
    # Installed (not editable) from a copy of the tracked files, as pip installs a release.
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    source = tmp_path / "source"
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--no-compile", "--target", str(site), str(source)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    top = {path.name for path in site.iterdir()}
    assert {"daskgpu", "pipelines"} <= top
    assert not {"cli.py", "cli_options.py", "tests", "benchmarks"} & top, sorted(top)
    for name in ("mean", "fft", "kmeans"):
        shipped = {path.name for path in (site / "pipelines" / name).glob("*.py")}
        assert {"__init__.py", "pipeline.py", "tasks.py", "shared.py", "check.py"} <= shipped
    assert (site / "daskgpu" / "daskgpu.yaml").is_file()
    assert (site / "daskgpu" / "cli" / "commands.py").is_file()
    assert _pyproject()["project"]["scripts"] == {"daskgpu": "daskgpu.cli.commands:entry"}
    script = (site / "bin" / "daskgpu").read_text()
    assert "from daskgpu.cli.commands import entry" in script


# The Makefile's choice of extra, against a made-up nvidia-smi (shell built-ins only, since PATH
# holds nothing else: the machine's own nvidia-smi, if any, must not leak in).
HEADER = "| NVIDIA-SMI {driver}   Driver Version: {driver}   CUDA Version: {cuda}     |"


def _fake_nvidia_smi(bin_dir, header: str | None, driver: str = "", status: int = 0):
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    lines = ["+-----------------------------------------------------------------------------+"]
    if header is not None:
        lines.append(header)
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --query-gpu=driver_version) printf "%s\\n" "{driver}" "{driver}";;\n'
        f"*) printf '%s\\n' {' '.join(shlex.quote(line) for line in lines)};; esac\n"
        f"exit {status}\n"
    )
    script.chmod(0o755)
    return bin_dir


def _make_n_install(path: str, *args: str) -> str:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make not installed")
    out = subprocess.run([make, "-n", "-C", str(ROOT), "install", "VENV=/nonexistent/venv", *args],
                         env={"PATH": path}, capture_output=True, text=True, check=True)
    return out.stdout


@pytest.mark.parametrize(("driver", "cuda", "extras"), [
    ("580.65.06", "13.0", "cuda13,test"),
    ("590.10", "13.1", "cuda13,test"),
    ("570.124.06", "12.8", "cuda12,test"),
    ("525.60.13", "12.0", "cuda12,test"),
])
def test_make_installs_the_extra_for_the_drivers_cuda(tmp_path, driver, cuda, extras):
    bin_dir = _fake_nvidia_smi(tmp_path / "bin", HEADER.format(driver=driver, cuda=cuda))
    out = _make_n_install(str(bin_dir))
    assert f'-e ".[{extras}]"' in out
    assert f"/nonexistent/venv/.installed-{extras.replace(',', '-')}" in out


def test_make_installs_only_the_test_extra_without_nvidia_smi(tmp_path):
    (tmp_path / "empty").mkdir()
    out = _make_n_install(str(tmp_path / "empty"))
    assert '-e ".[test]"' in out


def test_extras_given_to_make_win_over_the_driver(tmp_path):
    bin_dir = _fake_nvidia_smi(tmp_path / "bin", HEADER.format(driver="580.65.06", cuda="13.0"))
    assert '-e ".[cuda12,test]"' in _make_n_install(str(bin_dir), "EXTRAS=cuda12,test")


def _detect(bin_dir) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", str(CUDA_DETECT)], env={"PATH": str(bin_dir)},
                          capture_output=True, text=True, check=True)


@pytest.mark.parametrize(("driver", "extra"), [("580.65.06", "cuda13"), ("575.57.08", "cuda12"),
                                               ("535.183.01", "cuda12")])
def test_without_a_cuda_version_in_its_header_the_driver_version_decides(tmp_path, driver, extra):
    header = f"| NVIDIA-SMI {driver}   Driver Version: {driver}     |"
    bin_dir = _fake_nvidia_smi(tmp_path / "bin", header, driver=driver)
    assert _detect(bin_dir).stdout.strip() == extra


@pytest.mark.parametrize(("header", "driver", "status"), [
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "", 9),
    (HEADER.format(driver="470.256.02", cuda="11.4"), "470.256.02", 0),
])
def test_a_driver_that_runs_neither_cuda_gets_no_gpu_extra_and_a_line_why(tmp_path, header,
                                                                          driver, status):
    result = _detect(_fake_nvidia_smi(tmp_path / "bin", header, driver=driver, status=status))
    assert result.stdout == ""
    assert "EXTRAS=cuda12,test" in result.stderr and "nvidia-smi" in result.stderr


def _make_install(venv, extras: str) -> None:
    # The install's own commands, made up: `python -m venv DIR` makes DIR, pip does nothing.
    make = shutil.which("make")
    if make is None:
        pytest.skip("make not installed")
    python = venv.parent / "python"
    python.write_text('#!/bin/sh\nif [ "$2" = venv ]; then mkdir -p "$3"; fi\n')
    python.chmod(0o755)
    subprocess.run([make, "-s", "-C", str(ROOT), "install", f"VENV={venv}", f"EXTRAS={extras}",
                    f"PYTHON={python}", f"PY={python}"], check=True, capture_output=True)


@pytest.mark.parametrize(("built", "extras", "rebuilt"), [
    ("cuda12-test", "cuda13,test", True),
    ("gpu-test", "cuda13,test", True),
    ("cuda13-test", "cuda12,test", True),
    ("test", "cuda13,test", False),
    ("cuda13-test", "test", False),
])
def test_a_venv_built_for_another_cuda_major_is_rebuilt_not_overlaid(tmp_path, built, extras,
                                                                      rebuilt):
    # cupy-cuda13x installed over cupy-cuda12x would leave one `cupy` made of both.
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / f".installed-{built}").touch()
    (venv / "old-package").touch()
    _make_install(venv, extras)
    assert (venv / f".installed-{extras.replace(',', '-')}").exists()
    assert (venv / "old-package").exists() is not rebuilt


def test_the_readme_is_a_short_front_door():
    readme = (ROOT / "README.md").read_text()
    assert readme.count("\n") <= 200
    assert "make run" in readme and "make test" in readme
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    pages = set()

    def walk(entries):
        for entry in entries:
            for value in entry.values():
                walk(value) if isinstance(value, list) else pages.add(value)

    walk(nav)
    assert pages == {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    for package in sorted(p for p in (ROOT / "pipelines").iterdir() if p.is_dir()
                          and (p / "__init__.py").exists()):
        page = f"pipelines/{package.name}.md"
        assert page in pages and f"(docs/{page})" in readme, package.name
