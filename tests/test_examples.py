"""The plugins under examples/ work as a user installs them: listed, run, verified, benched, and
their own tests pass as written.

Each is installed with pip (not editable, no dependencies: daskgpu is this checkout) into a
folder of its own; the command line and the example's tests then find it through its entry
point, on the client and on the workers alike, as an installed package.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

EXAMPLES = sorted(path for path in (ROOT / "examples").iterdir()
                  if (path / "pyproject.toml").is_file())
# The name each example registers and small parameters for it.
CASES = {
    "threshold_count": ("threshold-count",
                        ["--shape", "600,400", "--chunks", "100,200", "--seed", "3"]),
    "top_values": ("top-values", ["--rows", "20000", "--partitions", "4", "--seed", "3"]),
}
# What ``new-pipeline`` writes, run with small parameters.
SCAFFOLDS = {
    "array": ([], ["--shape", "600,400", "--chunks", "100,200", "--seed", "5"]),
    "table": (["--table"], ["--rows", "20000", "--partitions", "3", "--seed", "5"]),
}


@pytest.fixture(scope="module", params=[path.name for path in EXAMPLES])
def installed(request, tmp_path_factory):
    """``(example folder, environment)``: the example pip-installed where only it is."""
    folder = ROOT / "examples" / request.param
    where = tmp_path_factory.mktemp(request.param)
    source, site = where / "source", where / "site"
    # From a copy: a build leaves build/ and *.egg-info beside the sources it builds.
    shutil.copytree(folder, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".pytest_cache"))
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--no-compile", "--target", str(site), str(source)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return folder, env


def _cli(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)


def test_every_example_has_a_case():
    assert {path.name for path in EXAMPLES} == set(CASES)


def test_an_installed_example_is_listed_runs_verifies_and_benches(installed):
    folder, env = installed
    name, params = CASES[folder.name]
    listed = _cli(env, "list")
    assert listed.returncode == 0 and name in listed.stdout, listed.stdout + listed.stderr
    run = _cli(env, "run", name, "--cpu", "--workers", "2", "--no-dashboard", "--json", *params)
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["pipeline"] == name and document["verified"] is True, document
    assert document["verify"] == "fast"
    bench = _cli(env, "bench", name, "--cpu", "--workers", "1", "--repeat", "2", "--warmup", "0",
                 "--no-dashboard", "--quiet", *params)
    assert bench.returncode == 0, bench.stderr
    assert name in bench.stdout and "verified (fast)" in bench.stdout, bench.stdout


def test_an_installed_examples_own_tests_pass_as_written(installed, tmp_path):
    folder, env = installed
    shutil.copytree(folder / "tests", tmp_path / "tests")  # run where nothing else is written
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "tests"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout and "failed" not in proc.stdout, proc.stdout


def test_the_table_scaffold_is_the_table_example():
    """``new-pipeline top-values --table`` writes examples/top_values' module, byte for byte."""
    from daskgpu.cli import scaffold

    written = scaffold.files("top-values", table=True)["top_values/pipeline.py"]
    assert written == (ROOT / "examples" / "top_values" / "top_values" / "pipeline.py").read_text()


@pytest.mark.parametrize("kind", sorted(SCAFFOLDS))
def test_new_pipeline_writes_a_package_that_installs_runs_and_passes_its_test(tmp_path, kind):
    """``cli.py new-pipeline NAME [--table]``: the package as written, installed, runs and
    tests green."""
    flags, params = SCAFFOLDS[kind]
    written = subprocess.run([sys.executable, str(ROOT / "cli.py"), "new-pipeline", "my-count",
                              *flags, "--dir", str(tmp_path / "my-count")], capture_output=True,
                             text=True, cwd=tmp_path, timeout=120)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "my-count" / "my_count" / "pipeline.py").is_file(), written.stdout
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--no-compile", "--target", str(site), str(tmp_path / "my-count")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    run = _cli(env, "run", "my-count", "--cpu", "--workers", "2", "--no-dashboard", "--json",
               *params)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["verified"] is True
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "tests"], capture_output=True, text=True, env=env,
                           cwd=tmp_path / "my-count", timeout=600)
    assert tests.returncode == 0 and " passed" in tests.stdout, tests.stdout + tests.stderr
    again = subprocess.run([sys.executable, str(ROOT / "cli.py"), "new-pipeline", "my-count",
                            "--dir", str(tmp_path / "my-count")], capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 2 and "exists" in again.stderr, again.stderr
    assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr
