"""Pipelines with Numba kernels leave them to their workers: the client of a run imports none.

Each names its kernel's module in ``worker_modules``; the CPU workers' fork server imports it
once for every worker, and the client, which builds the graph, presents and checks the
result, never imports Numba (about 0.5 s of a run's start, and all of it against an existing
cluster).
"""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

KERNELS = {"histogram-pipeline": ("daskgpu.kernels.histogram", {"values": 20_000, "bins": 8}),
           "stencil-pipeline": ("daskgpu.kernels.stencil", {"size": 64, "steps": 4}),
           "kmeans-pipeline": ("daskgpu.kernels.kmeans", {"samples": 2_000, "features": 3,
                                                          "k": 3, "clusters": 3}),
           "trips-pipeline": ("daskgpu.kernels.trips", {"rows": 20_000})}

SCRIPT = """
import sys
import daskgpu
from daskgpu.toolkit import registry

runs = {runs!r}
with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False) as session:
    for name, params in runs.items():
        result = daskgpu.run(name, client=session, **params)
        assert result.verified, (name, result.verification)
        print(name, {kernels!r}[name][0] in registry.get(name).worker_modules)
kernels = {{module for module, _ in {kernels!r}.values()}}
print(sorted(m for m in sys.modules if m.split(".")[0] == "numba" or m in kernels))
"""


def test_a_run_verifies_with_no_kernel_imported_in_the_client():
    runs = {name: params for name, (_, params) in KERNELS.items()}
    script = SCRIPT.format(runs=runs, kernels=KERNELS)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[:-1] == [f"{name} True" for name in KERNELS]
    assert lines[-1] == "[]"


PANDAS_FREE_SCRIPT = """
import sys
import daskgpu
from daskgpu.clusters import worker_processes

worker_processes.start_server("pipelines.trips.pipeline")  # as `cli.py run` starts it
with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False,
                     warm_up="trips-pipeline") as session:
    for params in ({"rows": 20_000}, {"input": sys.argv[1]}):
        result = daskgpu.run("trips-pipeline", client=session, **params)
        assert result.verified, result.verification
        assert result.value["kept"] > 0
    print(sorted(session.client.run(lambda: "pandas" in sys.modules).values()))
print("pandas" in sys.modules)
"""


def test_trips_runs_and_verifies_without_pandas(tmp_path):
    """Its workers read Parquet with pyarrow and sum with the kernel; its client presents and
    checks NumPy arrays: neither imports pandas (about 0.3 s of a worker's start before its
    first task, and of the client's before its run)."""
    import pandas as pd

    from pipelines.trips.shared import synthetic_columns

    path = tmp_path / "trips.parquet"
    pd.DataFrame(synthetic_columns((0, 20_000, 1))).to_parquet(path, row_group_size=5_000)
    done = subprocess.run([sys.executable, "-c", PANDAS_FREE_SCRIPT, str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-2:] == ["[False]", "False"]
