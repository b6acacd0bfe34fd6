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
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import daskgpu
from daskgpu.clusters import worker_processes

path = sys.argv[1]
rng = np.random.default_rng(0)
n = 20_000
pq.write_table(pa.table({{
    "pickup_time": (np.datetime64("2026-01-01", "s")
                    + rng.integers(0, 86_400, n).astype("timedelta64[s]")),
    "pickup_lat": rng.uniform(40.6, 40.9, n), "pickup_lon": rng.uniform(-74.0, -73.8, n),
    "dropoff_lat": rng.uniform(40.6, 40.9, n), "dropoff_lon": rng.uniform(-74.0, -73.8, n),
    "passengers": rng.integers(0, 7, n), "fare": rng.uniform(1.0, 50.0, n)}}), path,
    row_group_size=5_000)
worker_processes.start_server("pipelines.trips.pipeline")  # as `cli.py run` starts it
with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False,
                     warm_up="trips-pipeline") as session:
    for params in ({{"rows": 20_000}}, {{"input": path}}):
        result = daskgpu.run("trips-pipeline", client=session, **params)
        assert result.verified, result.verification
        assert result.value["kept"] > 0
    print(sorted(session.client.run(lambda: "pandas" in sys.modules).values()))
"""


def test_trips_workers_run_and_verify_without_pandas(tmp_path):
    """Its workers read Parquet with pyarrow and sum with the kernel: importing pandas (about
    0.3 s of every worker's start, before its first task) is left to the client."""
    done = subprocess.run([sys.executable, "-c", PANDAS_FREE_SCRIPT.format(),
                           str(tmp_path / "trips.parquet")], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[False]"
