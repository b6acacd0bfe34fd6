"""The Python API: ``daskgpu.cluster``, ``daskgpu.run``, ``Pipeline.build``.

A script that starts a cluster runs in a subprocess (workers spawn, so it needs
``if __name__ == "__main__":``); the rest runs in-process on the shared ``cpu_client``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import ROOT

import daskgpu

SCRIPT = textwrap.dedent(
    """
    import json

    import daskgpu

    if __name__ == "__main__":
        with daskgpu.cluster(cpu=True, workers=2) as client:
            result = daskgpu.run("mean-pipeline", client=client, size=3000, seed=1)
            n_workers = len(client.ncores())
        coll = daskgpu.get_pipeline("mean-pipeline").build(
            daskgpu.get_backend("cpu"), size=1000, seed=3
        )
        out = {
            "value": result.value,
            "verified": result.verified,
            "timings": result.timings,
            "backend": result.backend,
            "result_workers": len(result.workers),
            "cluster_workers": n_workers,
            "data": result.data,
            "type": type(coll).__module__ + "." + type(coll).__name__,
            "has_compute": callable(getattr(coll, "compute", None)),
            "has_dask": hasattr(coll, "dask"),
            "built": float(coll.compute(scheduler="threads")),
            "doubled": float((coll * 2).compute(scheduler="threads")),
            "shifted": float((coll - 0.5).compute(scheduler="threads")),
        }
        print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def script_output(tmp_path_factory):
    path = tmp_path_factory.mktemp("api") / "use_api.py"
    path.write_text(SCRIPT)
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env,
                          cwd=path.parent, timeout=180)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_run_in_a_script(script_output):
    out = script_output
    assert out["verified"] is True
    assert abs(out["value"] - 0.5) < 0.01
    assert out["backend"] == "cpu"
    assert out["result_workers"] == out["cluster_workers"] == 2
    assert out["data"]["shape"] == [3000, 3000]
    assert out["data"]["seed"] == 1
    timings = out["timings"]
    for key in ("cluster_start_s", "build_s", "compute_s", "verify_s", "total_s"):
        assert isinstance(timings[key], float) and timings[key] >= 0, (key, timings)
    assert timings["cluster_start_s"] > 0
    assert timings["total_s"] >= timings["compute_s"]


def test_build_returns_a_composable_dask_collection(script_output):
    out = script_output
    assert out["type"].startswith("dask."), out["type"]
    assert out["has_compute"] and out["has_dask"]
    assert abs(out["built"] - 0.5) < 0.01
    assert out["built"] != out["value"]  # another seed and size than the run
    assert math.isclose(out["doubled"], 2 * out["built"], rel_tol=1e-12)
    assert math.isclose(out["shifted"], out["built"] - 0.5, rel_tol=1e-9, abs_tol=1e-15)


# --------------------------------------------------------------------------- in-process


def test_run_is_reproducible_for_a_seed(cpu_client):
    first = daskgpu.run("mean-pipeline", client=cpu_client, size=1500, seed=5)
    again = daskgpu.run("mean-pipeline", client=cpu_client, size=1500, seed=5)
    other = daskgpu.run("mean-pipeline", client=cpu_client, size=1500, seed=6)
    assert isinstance(first, daskgpu.RunResult)
    assert first.verified and again.verified and other.verified
    assert first.value == again.value
    assert other.value != first.value
    assert abs(first.value - 0.5) < 0.01
    assert first.params["seed"] == 5 and first.data["seed"] == 5
    assert first.backend == "cpu"
    assert len(first.workers) == 2


def test_cluster_result_equals_local_build(cpu_client):
    """The distributed run and a local threaded compute of the same graph agree."""
    ran = daskgpu.run("mean-pipeline", client=cpu_client, size=1500, seed=5, chunks=500)
    built = daskgpu.get_pipeline("mean-pipeline").build(
        daskgpu.get_backend("cpu"), size=1500, seed=5, chunks=500
    )
    assert ran.data["chunks"] == [500, 500]
    assert math.isclose(float(built.compute(scheduler="threads")), ran.value, rel_tol=1e-12)


def test_unknown_parameter_suggests_the_right_one(cpu_client):
    with pytest.raises(daskgpu.DaskGPUError, match="did you mean 'size'"):
        daskgpu.run("mean-pipeline", client=cpu_client, sise=10)


def test_bad_parameter_value_is_a_daskgpu_error(cpu_client):
    with pytest.raises(daskgpu.DaskGPUError, match="size=0") as err:
        daskgpu.run("mean-pipeline", client=cpu_client, size=0)
    assert "--size" not in str(err.value)  # the Python keyword, not the command-line option


def test_unknown_pipeline_lists_the_available_ones(cpu_client):
    with pytest.raises(daskgpu.DaskGPUError, match="mean-pipeline") as info:
        daskgpu.run("no-such-pipeline", client=cpu_client)
    assert "no-such-pipeline" in str(info.value)
    assert "mean-pipeline" in daskgpu.pipeline_names()


def test_a_pipeline_is_written_from_daskgpu_alone(cpu_client):
    """The decorator, Param and its parsers, Workload and Verification: one import."""
    import dask.array as da

    @daskgpu.pipeline("api-sum-of-squares", "Sum of i**2 for i < n", (
        daskgpu.Param("n", daskgpu.positive_int, 1000, "How many integers.", "N"),
        daskgpu.Param("kind", daskgpu.choice(("int64", "float64")), "int64", "Type.", "T"),
    ), lambda workload, raw: daskgpu.Verification(
        int(raw) == (workload.context["n"] - 1) * workload.context["n"]
        * (2 * workload.context["n"] - 1) // 6, "closed form"))
    def prepare(resolved):
        n = resolved["n"]
        squares = da.arange(n, chunks=max(1, n // 4), dtype=resolved["kind"]) ** 2
        return daskgpu.Workload(collection=squares.sum(), elements=n, nbytes=8 * n,
                                context={"n": n})

    try:
        assert isinstance(prepare, daskgpu.Pipeline)
        result = daskgpu.run("api-sum-of-squares", client=cpu_client, n=2000)
        assert result.verified and int(result.value) == 1999 * 2000 * 3999 // 6
        with pytest.raises(daskgpu.ParameterError, match="n=0"):
            daskgpu.run("api-sum-of-squares", client=cpu_client, n=0)
    finally:  # the other tests of this process list the pipelines
        from daskgpu.toolkit import registry

        registry._REGISTRY.pop("api-sum-of-squares", None)


def test_build_presented_computes_what_run_reports(cpu_client):
    import numpy as np

    params = {"values": 40_000, "chunks": "10000", "bins": 8, "seed": 3}
    spec = daskgpu.get_pipeline("histogram-pipeline")
    raw = spec.build(daskgpu.get_backend("cpu"), **params).compute(scheduler="sync")
    value = spec.build(daskgpu.get_backend("cpu"), presented=True, **params).compute(
        scheduler="sync")
    reported = daskgpu.run("histogram-pipeline", client=cpu_client, **params).value
    assert sorted(value) == sorted(reported)
    for key in reported:
        np.testing.assert_array_equal(value[key], reported[key])
    assert sorted(raw) != sorted(value)  # the raw result: the answer and its certificates


def test_connect_opens_a_session_for_a_repl_that_close_shuts_down():
    import psutil
    from conftest import alive

    session = daskgpu.connect(cpu=True, workers=1, threads_per_worker=1, dashboard=False)
    try:
        workers = [(pid, psutil.Process(pid).create_time())
                   for pid in session.client.run(os.getpid).values()]
        result = daskgpu.run("mean-pipeline", session, size=300, seed=2)
        assert result.verified and result.timings["cluster_start_s"] == session.start_s
    finally:
        session.close()
    session.close()  # again: nothing left to do
    assert session.client.status == "closed"
    deadline = time.monotonic() + 30
    while any(alive(*w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)  # a poll of the event, bounded
    assert not any(alive(*w) for w in workers), workers


NOTEBOOK_CELL = """
import daskgpu

@daskgpu.pipeline("api-cell", "A cell run again", (), lambda workload, raw: None)
def prepare(resolved):
    return {answer}
"""


def test_a_notebook_cell_may_define_its_pipeline_again_another_module_may_not():
    from daskgpu.toolkit import registry

    try:
        for answer in (1, 2):  # the cell run twice, edited in between: the second one counts
            exec(compile(NOTEBOOK_CELL.format(answer=answer), "<cell>", "exec"),
                 {"__name__": "__main__"})
        assert registry.get("api-cell").prepare(None) == 2
        with pytest.raises(ValueError, match="'api-cell' is registered twice"):
            exec(compile(NOTEBOOK_CELL.format(answer=3), "<other>", "exec"),
                 {"__name__": "someone_else"})
        assert registry.get("api-cell").prepare(None) == 2
    finally:
        registry._REGISTRY.pop("api-cell", None)


def test_the_public_api_resolves_without_loading_dask():
    code = ("import sys, daskgpu; missing = [n for n in daskgpu.__all__ if not n.startswith('_') "
            "and n not in dir(daskgpu)]; print(missing, sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('numpy', 'dask', 'distributed')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.stdout.strip() == "[] []", proc.stdout + proc.stderr
    assert {"pipeline", "Param", "positive_int", "choice", "Workload", "Verification",
            "Mutation", "cluster", "connect", "run", "Resolved"} <= set(daskgpu.__all__)
    for name in daskgpu.__all__:
        assert getattr(daskgpu, name) is not None, name
