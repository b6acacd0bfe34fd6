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


@pytest.mark.parametrize("folder", sorted(CASES))
def test_new_pipeline_given_an_examples_name_writes_that_example_byte_for_byte(folder):
    """The scaffold is the example under another name: what the tests above install and run,
    ``new-pipeline`` writes (every file, nothing more)."""
    from daskgpu.cli import scaffold

    name = CASES[folder][0]
    written = scaffold.files(name, table=folder == "top_values")
    example = ROOT / "examples" / folder
    on_disk = {path.relative_to(example).as_posix(): path.read_text()
               for path in example.rglob("*") if path.is_file() and "__pycache__" not in
               path.parts and ".egg-info" not in str(path) and "build" not in path.parts}
    assert written == on_disk


@pytest.mark.parametrize("table", [False, True])
def test_new_pipeline_writes_the_package_under_the_users_name(tmp_path, table):
    """``cli.py new-pipeline my-count [--table]``: the example's files under the new name, with
    no trace of the example's name, and the module registers ``my-count`` when imported; a
    folder that exists is refused in one line."""
    flags = ["--table"] if table else []
    folder = tmp_path / "my-count"
    written = subprocess.run([sys.executable, str(ROOT / "cli.py"), "new-pipeline", "my-count",
                              *flags, "--dir", str(folder)], capture_output=True, text=True,
                             cwd=tmp_path, timeout=120)
    assert written.returncode == 0, written.stderr
    files = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*")
                   if path.is_file())
    assert files == ["my_count/__init__.py", "my_count/pipeline.py", "pyproject.toml",
                     "tests/test_my_count.py"], files
    text = "".join(path.read_text() for path in folder.rglob("*") if path.is_file())
    for old in ("threshold-count", "threshold_count", "top-values", "top_values"):
        assert old not in text, old
    assert 'my_count = "my_count.pipeline"' in (folder / "pyproject.toml").read_text()
    registered = subprocess.run(
        [sys.executable, "-c", "import my_count.pipeline as m; from daskgpu.toolkit import "
         "registry; print(registry.get('my-count').name)"],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(ROOT)])))
    assert registered.returncode == 0 and registered.stdout.strip() == "my-count", (
        registered.stdout + registered.stderr)
    again = subprocess.run([sys.executable, str(ROOT / "cli.py"), "new-pipeline", "my-count",
                            "--dir", str(folder)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "exists" in again.stderr, again.stderr
    assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr
