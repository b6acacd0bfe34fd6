"""The install files agree: pyproject's CPU dependencies, its gpu extra, environment.yml."""

from __future__ import annotations

import re
import tomllib

import yaml
from conftest import ROOT

CORE = {"dask", "distributed", "numpy", "pandas", "numba", "numba-cuda", "nvidia-ml-py",
        "click", "rich", "bokeh", "pyarrow", "zarr", "pyyaml", "psutil"}
GPU = {"cupy", "dask-cuda", "cudf", "dask-cudf"}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ;]", requirement.strip(), maxsplit=1)[0].lower()


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_cpu_install_has_the_core_and_no_gpu_only_package():
    deps = {_name(d) for d in _pyproject()["project"]["dependencies"]}
    assert CORE <= deps
    assert not any(d.startswith(("cupy", "cudf", "dask-cuda", "dask-cudf")) for d in deps)


def test_gpu_extra_names_the_cuda_packages():
    extra = {_name(d) for d in _pyproject()["project"]["optional-dependencies"]["gpu"]}
    assert {"cupy-cuda12x", "dask-cuda", "cudf-cu12", "dask-cudf-cu12"} <= extra


def test_environment_yml_parses_and_names_the_same_packages():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert {"rapidsai", "conda-forge"} <= set(env["channels"])
    conda = {_name(d) for d in env["dependencies"] if isinstance(d, str)}
    assert (CORE | GPU) <= conda
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert any(p.startswith("-e .") for p in pip)


def test_installed_package_ships_the_builtin_pipelines_and_the_command():
    # Built-ins load directly (tests/test_house.py); the entry-point group is for third parties.
    project = _pyproject()
    assert "pipelines" in project["tool"]["setuptools"]["packages"]
    assert {"cli", "cli_options"} <= set(project["tool"]["setuptools"]["py-modules"])
    assert project["project"]["scripts"] == {"daskgpu": "cli:main"}
