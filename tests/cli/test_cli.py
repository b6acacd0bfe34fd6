"""The command line, through real subprocesses: ``python cli.py ...``.

Runs that assume "no GPU here" use the fake NVML with ``LibraryNotFound``, so they mean the same
on a machine that has GPUs.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import fault_injection
import numpy as np
import psutil
import pytest
from conftest import ROOT, TWO_GPUS, fake_nvml_env, run_cli

UUID0 = TWO_GPUS["gpus"][0]["uuid"]
UUID1 = TWO_GPUS["gpus"][1]["uuid"]
PCI0 = TWO_GPUS["gpus"][0]["pci_bus_id"]
PCI1 = TWO_GPUS["gpus"][1]["pci_bus_id"]

NO_GPU = {"error": "LibraryNotFound"}
RUN = ("run", "mean-pipeline")
SMALL = ("--size", "2000", "--workers", "2")

JSON_KEYS = {
    "pipeline", "backend", "devices", "workers", "params", "value", "verified", "verification",
    "timings", "throughput", "dashboard",
}


def _env_with(spec: dict, extra: dict) -> dict:
    env = fake_nvml_env(spec)
    # distributed's own NVML monitoring needs more of pynvml than the fake provides.
    env["DASK_DISTRIBUTED__DIAGNOSTICS__NVML"] = "False"
    env.update(extra)
    return env


def no_gpu_env(**extra) -> dict:
    return _env_with(NO_GPU, extra)


def gpu_env(**extra) -> dict:
    return _env_with(TWO_GPUS, extra)


def show(proc) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


def run_ok(*args, env=None):
    proc = run_cli(*args, env=env if env is not None else no_gpu_env())
    assert proc.returncode == 0, show(proc)
    assert "Traceback" not in proc.stderr, show(proc)
    return proc


def run_json(*args, env=None) -> dict:
    proc = run_ok(*args, "--json", env=env)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"--json must print exactly one line of JSON\n{show(proc)}"
    doc = json.loads(lines[0])
    assert isinstance(doc, dict), show(proc)
    return doc


def table_rows(stdout: str) -> dict[str, str]:
    """``{row name: value}`` of the run table (continuation rows joined to their row)."""
    rows: dict[str, str] = {}
    last = None
    for line in stdout.splitlines():
        cells = re.split(r"\s*[│|]\s*", line.strip())
        if len(cells) < 4:
            continue
        key, value = cells[1], cells[2]
        if key:
            last = key
            rows.setdefault(key, value)
        elif last is not None and rows.get(last) is not None:
            rows[last] = f"{rows[last]} {value}".strip()
    return rows


def squash(text: str) -> str:
    """Text without table borders, whitespace collapsed."""
    return " ".join(re.sub(r"[│┃|]", " ", text).split())


# --------------------------------------------------------------------------- a normal run


@pytest.fixture(scope="module")
def table_run():
    return run_ok(*RUN, *SMALL, "--seed", "11", "--no-dashboard")


@pytest.fixture(scope="module")
def json_run():
    return run_json(*RUN, *SMALL, "--seed", "11", "--dashboard-address", "127.0.0.1:0")


def test_run_prints_table(table_run, json_run):
    rows = table_rows(table_run.stdout)
    assert rows.get("pipeline") == "mean-pipeline", table_run.stdout
    assert rows.get("backend") == "cpu", table_run.stdout
    assert re.fullmatch(r"2000 x 2000", rows.get("shape", "")), table_run.stdout
    assert rows.get("seed") == "11", table_run.stdout
    # The table shows the value of the same seeded run as --json, to 10 significant digits.
    shown = float(rows["value"])
    assert abs(shown - 0.5) < 0.01
    assert math.isclose(shown, json_run["value"], rel_tol=1e-9), (rows, json_run["value"])
    assert rows.get("verified", "").startswith("yes"), table_run.stdout
    for row in ("cluster start", "compute", "total"):
        assert re.fullmatch(r"\d+\.\d+ s", rows.get(row, "")), (row, table_run.stdout)
    # random data: the bytes are generated, not read from memory, and the table says so
    assert re.fullmatch(r"\S+ elements/s, \d+\.\d+ GB/s generated", rows.get("throughput", "")), \
        table_run.stdout
    assert "Traceback" not in table_run.stdout


def test_run_notice_is_one_line_on_stderr(table_run):
    lines = table_run.stderr.splitlines()
    notices = [line for line in lines if line.startswith("No GPU found")]
    assert len(notices) == 1, table_run.stderr
    # The whole notice is on its one line, not wrapped onto the next.
    assert notices[0].rstrip().endswith("running on CPU workers."), table_run.stderr
    assert not any(line.startswith("error") for line in lines), table_run.stderr


def test_run_json_document(json_run):
    doc = json_run
    assert JSON_KEYS <= set(doc), sorted(doc)
    assert doc["pipeline"] == "mean-pipeline"
    assert doc["backend"] == "cpu"
    assert doc["devices"] == []
    assert abs(doc["value"] - 0.5) < 0.01
    assert doc["verified"] is True
    assert "standard errors" in doc["verification"]
    assert doc["params"]["size"] == 2000
    assert doc["params"]["seed"] == 11
    assert len(doc["workers"]) == 2
    assert len({w["address"] for w in doc["workers"]}) == 2
    timings = doc["timings"]
    for key in ("cluster_start_s", "build_s", "compute_s", "total_s"):
        assert isinstance(timings[key], float) and timings[key] >= 0, (key, timings)
    assert timings["cluster_start_s"] > 0 and timings["compute_s"] > 0
    assert timings["total_s"] >= timings["cluster_start_s"] + timings["compute_s"]
    throughput = doc["throughput"]
    assert throughput["bytes"] == "generated"
    # bytes and elements generated, recovered from the rates: 2000 x 2000 float64.
    assert math.isclose(throughput["elements_per_s"] * timings["compute_s"], 2000 * 2000,
                        rel_tol=1e-6)
    assert math.isclose(throughput["bytes_per_s"] * timings["compute_s"], 2000 * 2000 * 8,
                        rel_tol=1e-6)
    dashboard = doc["dashboard"]
    assert dashboard.startswith("http://127.0.0.1:"), dashboard
    port = int(re.match(r"http://127\.0\.0\.1:(\d+)", dashboard)[1])
    assert port > 0, dashboard  # port 0 means "a free one", which must be reported


def test_no_dashboard_means_no_link(table_run):
    assert table_rows(table_run.stdout).get("dashboard") == "off", table_run.stdout
    assert "Dashboard: off" in table_run.stderr.splitlines(), table_run.stderr
    doc = run_json(*RUN, "--size", "1000", "--workers", "1", "--no-dashboard")
    assert doc["verified"] is True
    assert doc["dashboard"] is None


def test_seed_gives_the_same_value():
    first = run_json(*RUN, *SMALL, "--seed", "7", "--no-dashboard")
    second = run_json(*RUN, *SMALL, "--seed", "7", "--no-dashboard")
    assert first["params"]["seed"] == second["params"]["seed"] == 7
    assert first["verified"] and second["verified"]
    assert first["value"] == second["value"]
    # Without --seed, a fresh seed is drawn and reported.
    unseeded = run_json(*RUN, *SMALL, "--no-dashboard")
    # the params record the seed really used
    assert unseeded["params"]["seed"] == unseeded["data"]["seed"]
    assert isinstance(unseeded["data"]["seed"], int) and unseeded["data"]["seed"] != 7
    assert unseeded["value"] != first["value"]


@pytest.mark.parametrize(
    ("option", "chunks", "blocks", "dtype"),
    [
        (("--chunks", "500"), [500, 500], 16, "float64"),
        (("--chunks", "300,2000"), [300, 2000], 7, "float64"),
        (("--dtype", "float32"), None, None, "float32"),
    ],
    ids=["chunks-500", "chunks-300,2000", "float32"],
)
def test_run_options_reach_the_data(option, chunks, blocks, dtype):
    doc = run_json(*RUN, *SMALL, "--seed", "3", "--no-dashboard", *option)
    data = doc["data"]
    assert data["shape"] == [2000, 2000]
    if chunks is not None:
        assert data["chunks"] == chunks
        assert data["blocks"] == blocks
    assert data["dtype"] == dtype
    itemsize = np.dtype(dtype).itemsize
    read = doc["throughput"]["bytes_per_s"] * doc["timings"]["compute_s"]
    assert math.isclose(read, 2000 * 2000 * itemsize, rel_tol=1e-6)
    assert doc["verified"] is True
    assert abs(doc["value"] - 0.5) < 0.01


# --------------------------------------------------------------------------- inputs


def _float32_array() -> np.ndarray:
    return ((np.arange(1000 * 300).reshape(1000, 300) % 1013) * 0.37 - 11.0).astype(np.float32)


def _int64_array() -> np.ndarray:
    return np.arange(1000 * 300, dtype=np.int64).reshape(1000, 300) * 3 - 7


def _write_npy(path, array):
    np.save(path, array)
    return path


def _write_zarr(path, array):
    import zarr

    z = zarr.open_array(str(path), mode="w", shape=array.shape, chunks=(250, 300),
                        dtype=array.dtype)
    z[:] = array
    return path


@pytest.mark.parametrize(
    ("make", "writer", "name", "kind", "extra"),
    [
        (_float32_array, _write_npy, "f32.npy", "npy", ()),
        (_int64_array, _write_npy, "i64.npy", "npy", ("--chunks", "250")),
        (_float32_array, _write_zarr, "f32.zarr", "zarr", ()),
        (_int64_array, _write_zarr, "i64.zarr", "zarr", ("--chunks", "400,100")),
    ],
    ids=["npy-float32", "npy-int64-chunked", "zarr-float32", "zarr-int64-chunked"],
)
def test_input_mean_matches_numpy(tmp_path, make, writer, name, kind, extra):
    array = make()
    path = writer(tmp_path / name, array)
    doc = run_json(*RUN, "--input", str(path), "--workers", "2", "--no-dashboard", *extra)
    expected = float(array.mean(dtype=np.float64))
    assert expected != 0
    assert abs(doc["value"] - expected) <= 1e-9 * abs(expected), (doc["value"], expected)
    assert doc["verified"] is True, doc["verification"]
    data = doc["data"]
    assert data["format"] == kind
    assert data["shape"] == [1000, 300]
    assert data["dtype"] == str(array.dtype)
    if extra:
        sizes = [int(s) for s in extra[1].split(",")]
        assert data["chunks"] == (sizes * 2 if len(sizes) == 1 else sizes)
        assert data["blocks"] > 1


# --------------------------------------------------------------------------- list, devices, help


def _summary() -> str:
    from daskgpu.toolkit import registry

    return registry.get("mean-pipeline").summary


def test_list_shows_pipelines_with_summary():
    proc = run_ok("list")
    summary = " ".join(_summary().split())
    assert f"mean-pipeline {summary}" in squash(proc.stdout), proc.stdout


def test_list_json():
    proc = run_ok("list", "--json")
    entries = json.loads(proc.stdout)
    assert {"name": "mean-pipeline", "summary": _summary()} in entries


def test_devices_without_gpu():
    proc = run_ok("devices")
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    assert lines[0].startswith("No GPU found: "), proc.stdout
    assert "NVML library not found" in lines[0]
    assert proc.stderr == ""


def test_devices_lists_gpus():
    proc = run_ok("devices", env=gpu_env())
    for text in (UUID0, UUID1, PCI0, PCI1):
        assert text in proc.stdout, proc.stdout
    assert "No GPU found" not in proc.stdout


def test_devices_json():
    proc = run_ok("devices", "--json", env=gpu_env())
    doc = json.loads(proc.stdout)
    assert [d["uuid"] for d in doc["devices"]] == [UUID0, UUID1]
    assert [d["pci_bus_id"] for d in doc["devices"]] == [PCI0, PCI1]
    assert [d["index"] for d in doc["devices"]] == [0, 1]
    assert doc["reason"] is None


def test_devices_explains_cuda_visible_devices():
    proc = run_ok("devices", env=gpu_env(CUDA_VISIBLE_DEVICES="1"))
    lines = [line for line in proc.stdout.splitlines() if "CUDA_VISIBLE_DEVICES=1" in line]
    assert len(lines) == 1, proc.stdout
    meaning = lines[0].split("CUDA_VISIBLE_DEVICES=1", 1)[1]
    # --gpus 0 now means nvidia-smi GPU 1 (by its index or UUID), not GPU 0.
    assert re.search(r"\b0\b", meaning), lines[0]
    assert re.search(r"(?<![\d-])1\b", meaning) or UUID1 in meaning, lines[0]
    assert UUID0 not in meaning, lines[0]
    without = run_ok("devices", env=gpu_env())
    assert "CUDA_VISIBLE_DEVICES" not in without.stdout


def test_run_help_documents_options():
    proc = run_ok(*RUN, "--help")
    for option in ("--size", "--chunks", "--dtype", "--seed", "--input", "--gpus", "--cpu",
                   "--workers"):
        match = re.search(rf"^\s+{re.escape(option)}\b(.*)$", proc.stdout, re.M)
        assert match, f"{option} missing from --help\n{proc.stdout}"
    assert _summary().split()[0] in proc.stdout


# --------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    base = tmp_path_factory.mktemp("bad-input")
    plain_dir = base / "plain-dir"
    plain_dir.mkdir()
    (plain_dir / "data.txt").write_text("not an array\n")
    truncated = base / "truncated.npy"
    np.save(truncated, np.arange(10_000, dtype=np.float64))
    whole = truncated.read_bytes()
    truncated.write_bytes(whole[: len(whole) // 2])
    objects = base / "objects.npy"
    np.save(objects, np.array([1, "two", None], dtype=object), allow_pickle=True)
    text = base / "x.npy"
    text.write_text("0.5 0.25 0.125\n")
    return {"dir": str(plain_dir), "truncated": str(truncated), "objects": str(objects),
            "text": str(text)}


NEEDS_NO_GPU_STACK = pytest.mark.skipif(
    importlib.util.find_spec("dask_cuda") is not None and importlib.util.find_spec("cupy")
    is not None,
    reason="cupy and dask_cuda are installed here: no missing GPU stack to report",
)
ONE_WORKER = ("--size", "100", "--workers", "1")
INPUT_ON_ONE_WORKER = ("--workers", "1")  # an input has its own size

BAD_INPUT = [
    # (id, arguments after `run`, environment, fragments the error line must contain, marks)
    ("gpus-without-gpu", ("mean-pipeline", "--gpus", "0"), "none", ["--cpu"], ()),
    ("gpus-out-of-range", ("mean-pipeline", "--gpus", "5"), "gpus", ["5", UUID0, UUID1], ()),
    ("gpus-duplicate", ("mean-pipeline", "--gpus", "0,0"), "gpus", ["twice|duplicate"], ()),
    ("gpus-empty-item", ("mean-pipeline", "--gpus", "0,,1"), "gpus", ["empty"], ()),
    ("gpus-letter", ("mean-pipeline", "--gpus", "a"), "gpus", ["'a'"], ()),
    ("gpus-negative", ("mean-pipeline", "--gpus", "-1"), "gpus", ["-1"], ()),
    ("gpus-backwards", ("mean-pipeline", "--gpus", "3-1"), "gpus", ["3-1", "1-3"], ()),
    ("gpus-empty", ("mean-pipeline", "--gpus", ""), "gpus", ["empty"], ()),
    ("gpus-unknown-uuid", ("mean-pipeline", "--gpus", "GPU-deadbeef"), "gpus",
     ["GPU-deadbeef", UUID0, UUID1], ()),
    ("gpus-and-cpu", ("mean-pipeline", "--gpus", "0", "--cpu"), "gpus", ["--gpus", "--cpu"], ()),
    ("gpus-without-dask-cuda", ("mean-pipeline", "--gpus", "0"), "gpus", ["pip install"],
     (NEEDS_NO_GPU_STACK,)),
    ("size-zero", ("mean-pipeline", "--size", "0"), "none", ["--size", "positive"], ()),
    ("size-negative", ("mean-pipeline", "--size", "-5"), "none", ["--size"], ()),
    ("size-text", ("mean-pipeline", "--size", "abc"), "none", ["--size", "integer"], ()),
    ("chunks-zero", ("mean-pipeline", "--chunks", "0"), "none", ["--chunks"], ()),
    ("chunks-text", ("mean-pipeline", "--chunks", "x"), "none", ["--chunks"], ()),
    ("chunks-three-axes", ("mean-pipeline", *ONE_WORKER, "--chunks", "10,10,10"), "none",
     ["--chunks", "2 axes"], ()),
    ("dtype-int8", ("mean-pipeline", "--dtype", "int8"), "none",
     ["--dtype", "float64", "float32"], ()),
    ("input-missing", ("mean-pipeline", *INPUT_ON_ONE_WORKER, "--input", "/nonexistent.npy"),
     "none", ["/nonexistent.npy", "no such file"], ()),
    ("input-plain-dir", ("mean-pipeline", *INPUT_ON_ONE_WORKER, "--input", "{dir}"), "none",
     ["{dir}", "not a Zarr"], ()),
    ("input-truncated", ("mean-pipeline", *INPUT_ON_ONE_WORKER, "--input", "{truncated}"), "none",
     ["{truncated}", "truncated"], ()),
    ("input-objects", ("mean-pipeline", *INPUT_ON_ONE_WORKER, "--input", "{objects}"), "none",
     ["{objects}", "Python objects"], ()),
    ("input-text-npy", ("mean-pipeline", *INPUT_ON_ONE_WORKER, "--input", "{text}"), "none",
     ["{text}", "not a valid .npy"], ()),
    ("input-with-size", ("mean-pipeline", *ONE_WORKER, "--seed", "3", "--input", "{text}"),
     "none", ["--size, --seed", "--input"], ()),
    ("workers-zero", ("mean-pipeline", "--workers", "0"), "none", ["--workers"], ()),
    ("scheduler-with-gpus",
     ("mean-pipeline", "--scheduler-address", "tcp://127.0.0.1:9", "--gpus", "0"), "none",
     ["--gpus", "scheduler"], ()),
    ("scheduler-file-missing", ("mean-pipeline", "--scheduler-file", "/nonexistent.json"),
     "none", ["/nonexistent.json"], ()),
    ("unknown-pipeline", ("mean-pipelin",), "none", ["did you mean 'mean-pipeline'"], ()),
    ("unknown-option", ("mean-pipeline", "--bogus", "1"), "none", ["--bogus"], ()),
    ("env-gpus-letters", ("mean-pipeline", *ONE_WORKER), "gpus+DASKGPU_GPUS=abc", ["'abc'"], ()),
]


def _env(kind: str) -> dict:
    if kind == "none":
        return no_gpu_env()
    if kind == "gpus":
        return gpu_env()
    if kind == "gpus+DASKGPU_GPUS=abc":
        return gpu_env(DASKGPU_GPUS="abc")
    raise ValueError(kind)


def assert_usage_error(proc, fragments=()):
    """Exit 2, no traceback, nothing on stdout, and the error as stderr's one line."""
    assert proc.returncode == 2, show(proc)
    assert "Traceback" not in proc.stdout and "Traceback" not in proc.stderr, show(proc)
    assert proc.stdout.strip() == "", show(proc)
    lines = proc.stderr.splitlines()
    assert lines and lines[-1].startswith("error:") and lines[-1][6:].strip(), show(proc)
    for fragment in fragments:
        assert re.search(fragment if "|" in fragment else re.escape(fragment), lines[-1]), (
            fragment, show(proc))
    assert len(lines) == 1, show(proc)


@pytest.mark.parametrize(
    ("args", "env", "fragments"),
    [pytest.param(args, env, frags, id=name, marks=marks)
     for name, args, env, frags, marks in BAD_INPUT],
)
def test_bad_input_is_one_error_line(bad_files, args, env, fragments):
    args = [a.format(**bad_files) for a in args]
    fragments = [f.format(**bad_files) for f in fragments]
    proc = run_cli("run", *args, env=_env(env), timeout=120)
    assert_usage_error(proc, fragments)


def test_env_gpus_behaves_like_option():
    from_env = run_cli(*RUN, *ONE_WORKER, env=gpu_env(DASKGPU_GPUS="abc"))
    from_option = run_cli(*RUN, *ONE_WORKER, "--gpus", "abc", env=gpu_env())
    assert_usage_error(from_env)
    assert from_env.stderr == from_option.stderr
    # The variable really selects GPUs: a valid one gets past parsing to the GPU stack check.
    valid = run_cli(*RUN, *ONE_WORKER, env=gpu_env(DASKGPU_GPUS="5"))
    assert_usage_error(valid, ["out of range"])


# --------------------------------------------------------------------------- a wrong answer

WRONG_MEAN = textwrap.dedent(
    """
    import dataclasses
    import sys

    import cli
    import daskgpu
    from pipelines.mean import pipeline as mean_pipeline

    real = mean_pipeline.prepare  # the registered Pipeline


    @daskgpu.pipeline("wrong-mean", "mean-pipeline plus 0.25", real.params, real.verify)
    def prepare(resolved):
        workload = real.prepare(resolved)
        return dataclasses.replace(workload, collection=workload.collection + 0.25)


    if __name__ == "__main__":
        sys.exit(cli.main(["run", "wrong-mean", "--size", "1000", "--workers", "1"]))
    """
)


def test_wrong_answer_exits_1(tmp_path):
    script = tmp_path / "wrong_mean.py"
    script.write_text(WRONG_MEAN)
    env = no_gpu_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env["PYTHONPATH"]])
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=180)
    assert proc.returncode == 1, show(proc)
    assert "Traceback" not in proc.stderr, show(proc)
    rows = table_rows(proc.stdout)
    assert rows.get("pipeline") == "wrong-mean", proc.stdout
    assert abs(float(rows["value"]) - 0.75) < 0.01, proc.stdout
    assert rows.get("verified", "").startswith("NO"), proc.stdout


def test_json_of_a_wrong_answer_is_valid_and_exits_1():
    # sum-of-ones computes 101 where its check expects 100 (tests/fault_injection.py)
    proc = fault_injection.run_faulty_cli("run", "sum-of-ones", "--workers", "1", "--json",
                                          "--no-dashboard", env=no_gpu_env(), timeout=120,
                                          wrong_answer=True)
    assert proc.returncode == 1, show(proc)
    doc = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert doc["pipeline"] == "sum-of-ones" and doc["value"] == 101.0
    assert doc["verified"] is False and "the sum is 101" in doc["verification"]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("error: the result did not verify"), show(proc)


@pytest.mark.parametrize(("command", "hook"), [("run", "prepare"), ("run", "verify"),
                                               ("bench", "baseline")])
def test_a_bug_in_a_pipelines_own_code_is_one_line_and_exit_3(command, hook):
    """settle, prepare, verify, present, save, baseline: an exception names pipeline and hook."""
    proc = fault_injection.run_faulty_cli(command, "sum-of-ones", "--workers", "1",
                                          "--no-dashboard", *(["--repeat", "1", "--warmup", "0"]
                                                              if command == "bench" else []),
                                          env=no_gpu_env(), timeout=120, raises_in=hook)
    assert proc.returncode == 3, show(proc)
    assert "Traceback" not in proc.stderr, show(proc)
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: sum-of-ones: its {hook} raised ValueError: a bug in {hook}"), show(proc)


# --------------------------------------------------------------------------- interrupts


_alive = fault_injection.alive


def _cpu_seconds(processes) -> float:
    """The CPU time (user and system) ``processes`` have used, those still there."""
    total = 0.0
    for p in processes:
        try:
            times = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


@pytest.mark.parametrize(
    ("how", "signum"),
    [
        pytest.param("pid", signal.SIGINT, id="SIGINT"),
        pytest.param("pid", signal.SIGTERM, id="SIGTERM"),
        pytest.param("group", signal.SIGINT, id="ctrl-c-process-group"),
    ],
)
def test_interrupt_stops_run_and_workers(tmp_path, how, signum):
    # Large enough to be still computing when the signal comes (minutes of work on 2 threads).
    args = [sys.executable, str(ROOT / "cli.py"), *RUN, "--size", "200000", "--workers", "2",
            "--threads-per-worker", "1", "--no-dashboard"]
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(args, stdout=out, stderr=err, env=no_gpu_env(), cwd=ROOT,
                                start_new_session=True)
    recorded: list[tuple[int, float]] = []
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"exited early ({proc.returncode}): {err_path.read_text()}"
            children = psutil.Process(proc.pid).children(recursive=True)
            # "Dashboard:" is printed once the workers are up, right before computing.
            if len(children) >= 2 and "Dashboard:" in err_path.read_text():
                started_at = _cpu_seconds(children)
                break
            assert time.monotonic() < deadline, "workers did not start within 30 s"
            time.sleep(0.1)
        # Computing: the workers have spent CPU time on the run's tasks since the line.
        fault_injection.wait_for(lambda: _cpu_seconds(children) - started_at >= 0.5
                                 or proc.poll() is not None, timeout=60, what="computing")
        assert proc.poll() is None, "the run ended before it could be interrupted"
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                recorded.append((child.pid, child.create_time()))
            except psutil.NoSuchProcess:
                continue
        assert len(recorded) >= 2, recorded
        if how == "group":
            os.killpg(proc.pid, signum)  # what Ctrl-C in a terminal does
        else:
            os.kill(proc.pid, signum)
        returncode = proc.wait(timeout=30)
        stderr = err_path.read_text()
        assert returncode == 130, stderr
        assert "interrupted" in stderr, stderr
        deadline = time.monotonic() + 10
        while _alive(recorded) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _alive(recorded) == [], f"left behind: {_alive(recorded)}"
        assert "Traceback" not in out_path.read_text()
        assert "Traceback" not in stderr, stderr
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in _alive(recorded):
            os.kill(pid, signal.SIGKILL)
